"""The CUDA paths: parity with transformers in fp32, bf16 forward and backward, exact resume, the
multi-tensor LAMB and clipping. The GPU tests skip where torch sees no CUDA device (CI's machines);
`benchmarks/experiments/gpu_check.sh` runs them on a GPU. The multi-tensor LAMB is also checked on the CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL

from albert_lm.bench.cuda import chip_peak
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.optim import Lamb, clip_by_global_norm, parameter_groups

TESTS = Path(__file__).resolve().parent
cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (benchmarks/experiments/gpu_check.sh runs these)"
)

SMALL = dict(TINY_MODEL, vocab_size=300, hidden_size=64, num_attention_heads=4, intermediate_size=128)


def _batch(vocab: int, batch: int = 6, seq: int = 40, padded: bool = True) -> dict[str, torch.Tensor]:
    from albert_lm.bench.workloads import pretraining_batch

    data = pretraining_batch(vocab, batch, seq)
    if padded:  # a padded tail on half the rows: the masked attention path
        data["attention_mask"][::2, seq - 7 :] = 0
        data["labels"][::2, seq - 7 :] = -100
    return data


def _lamb_pair(device: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    a = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **SMALL)).to(device)
    b = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **SMALL)).to(device)
    b.load_state_dict(a.state_dict())
    return a.eval(), b.eval()  # no dropout: both models see the same function


def _grads(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> None:
    model.zero_grad(set_to_none=True)
    PretrainingObjective(model, "sop")(data)[0].backward()


def test_multi_tensor_lamb_takes_the_loops_step():
    """`Lamb._step_foreach` (taken on CUDA) against the per-tensor loop, on the CPU: same update."""
    loop, multi = _lamb_pair("cpu")
    o1 = Lamb(parameter_groups(loop), lr=1e-2)
    o2 = Lamb(parameter_groups(multi), lr=1e-2)
    for seed in range(4):
        data = _batch(SMALL["vocab_size"])
        data["input_ids"] = data["input_ids"].roll(seed, 1)
        _grads(loop, data)
        _grads(multi, data)
        o1.step()
        with torch.no_grad():
            for group in o2.param_groups:
                o2._step_foreach(group, [p for p in group["params"] if p.grad is not None])
    for (name, p), q in zip(loop.named_parameters(), multi.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    s1, s2 = o1.state_dict()["state"], o2.state_dict()["state"]
    assert s1.keys() == s2.keys()
    for k in s1:
        assert float(s1[k]["step"]) == float(s2[k]["step"]) == 4
        if "trust_ratio" in s1[k]:
            torch.testing.assert_close(s1[k]["trust_ratio"], s2[k]["trust_ratio"], rtol=1e-4, atol=0)


def test_chip_peaks_by_name():
    assert chip_peak("NVIDIA H100 80GB HBM3") == pytest.approx(989.4)
    assert chip_peak("NVIDIA H100 PCIe") == pytest.approx(756.0)
    assert chip_peak("NVIDIA H200") == pytest.approx(989.4)
    assert chip_peak("NVIDIA A100-SXM4-80GB") == pytest.approx(312.0)
    assert chip_peak("Some Future GPU") is None


@cuda
def test_cuda_parity_with_transformers_fp32():
    """Same weights, fp32 on the GPU: albert-lm's pretraining model and transformers' agree."""
    import transformers

    torch.manual_seed(0)
    ours = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **SMALL)).eval()
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d).eval().cuda()
    ours.cuda()
    data = {k: v.cuda() for k, v in _batch(SMALL["vocab_size"]).items()}
    inputs = {k: data[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        a, b = ours(**inputs), theirs(**inputs)
        keep = data["attention_mask"].bool()  # padded positions are not compared
        torch.testing.assert_close(a.prediction_logits[keep], b.prediction_logits[keep], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.sop_logits, b.sop_logits, rtol=1e-4, atol=1e-4)
        loss = PretrainingObjective(ours, "sop")(data)[0]
        torch.testing.assert_close(loss, theirs(**data).loss, rtol=1e-4, atol=1e-4)


@cuda
def test_cuda_bf16_forward_backward_tracks_fp32():
    """bf16 autocast on the GPU: the loss within 2% of fp32's and gradients pointing the same way."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **SMALL)).cuda().train()
    model.set_dropout(0.0, 0.0)
    data = {k: v.cuda() for k, v in _batch(SMALL["vocab_size"], batch=16, seq=64).items()}
    objective = PretrainingObjective(model, "sop")
    grads = {}
    losses = {}
    for precision in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = objective(data)[0]
        loss.backward()
        losses[precision] = float(loss.detach())
        grads[precision] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.isfinite(grads["bf16"]).all()
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    cosine = torch.nn.functional.cosine_similarity(grads["bf16"], grads["fp32"], dim=0)
    assert float(cosine) > 0.99


@cuda
def test_cuda_multi_tensor_lamb_and_clipping_match_the_cpu():
    """The multi-tensor LAMB and clipping on the GPU take the step the CPU's loop takes."""
    on_cpu, on_gpu = _lamb_pair("cpu")
    on_gpu.cuda()
    o1, o2 = Lamb(parameter_groups(on_cpu), lr=1e-2), Lamb(parameter_groups(on_gpu), lr=1e-2)
    data = _batch(SMALL["vocab_size"])
    for model, opt, batch in ((on_cpu, o1, data), (on_gpu, o2, {k: v.cuda() for k, v in data.items()})):
        for _ in range(3):
            _grads(model, batch)
            norm = clip_by_global_norm(list(model.parameters()), 0.5)
            assert float(norm) > 0.5  # clipping happened
            opt.step()
    # Gradients that are zero in exact arithmetic (the key bias: softmax ignores a shift) are rounding
    # noise on either device, and Adam's m / sqrt(v) scales noise up to ~eps-sized steps: hence 2e-4,
    # far below the lr 1e-2 a wrong update would be off by.
    for (name, p), q in zip(on_cpu.named_parameters(), on_gpu.parameters(), strict=True):
        torch.testing.assert_close(p, q.cpu(), rtol=1e-3, atol=2e-4, msg=name)


# A subprocess runs this: `albert pretrain` on the tiny synthetic data on the GPU, deterministic algorithms
# on, optionally SIGKILLed after one step.
_RUNNER = """
import json, os, signal, sys
import torch
torch.use_deterministic_algorithms(True, warn_only=True)
sys.path.insert(0, {tests!r})
from test_pretrain import SyntheticData, tiny_run
from albert_lm.training.pretrain import pretrain
args = json.loads(sys.argv[1])
def on_step(step):
    if step == args.get("kill_at"):
        os.kill(os.getpid(), signal.SIGKILL)
r = pretrain(tiny_run(**args["cfg"]), train_dataset=SyntheticData(), on_step=on_step)
# One write of one line: with PYTHONUNBUFFERED, print's pieces from two ranks interleave on the pipe.
sys.stdout.write(f"RESULT {{r.step}} {{r.interrupted}}\\n")
"""


@cuda
def test_cuda_sigkill_then_resume_is_bit_identical(tmp_path):
    """On the GPU (deterministic algorithms, as a user asks for bit-exact runs there): two uninterrupted
    runs agree, and a run killed after step 7 and resumed from checkpoint 6 ends with their weights."""
    from safetensors.torch import load_file

    script = tmp_path / "runner.py"
    script.write_text(_RUNNER.format(tests=str(TESTS)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), CUBLAS_WORKSPACE_CONFIG=":4096:8")
    cfg = dict(
        max_steps=10, save_every=3, device="cuda", model_overrides={**TINY_MODEL, "hidden_dropout_prob": 0.1}
    )

    def run(out: Path, **extra) -> subprocess.CompletedProcess:
        args = {"cfg": {"output": str(out), **cfg, **extra.pop("cfg", {})}, **extra}
        return subprocess.run(
            [sys.executable, str(script), json.dumps(args)], env=env, capture_output=True, text=True
        )

    for name in ("ref1", "ref2"):
        p = run(tmp_path / name)
        assert p.returncode == 0, p.stderr[-3000:]
    p = run(tmp_path / "run", kill_at=7)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    p = run(tmp_path / "run", cfg={"resume": True})
    assert p.returncode == 0, p.stderr[-3000:]
    ref1, ref2, resumed = (load_file(tmp_path / n / "model.safetensors") for n in ("ref1", "ref2", "run"))
    assert [k for k in ref1 if not torch.equal(ref1[k], ref2[k])] == []  # deterministic at all
    assert [k for k in ref1 if not torch.equal(ref1[k], resumed[k])] == []


@cuda
@pytest.mark.parametrize("float8", [False, True])
def test_cuda_compiled_pretraining_on_plain_cuda_saves_plain_names(tmp_path, float8):
    """`albert pretrain --device cuda --torch-compile [--float8]`: a plain `cuda` device (no index), the
    encoder compiled in place, float8 linear layers where the GPU has them; the loss falls and the
    checkpoint has the plain model's names."""
    if float8:
        pytest.importorskip("torchao.float8")
        if torch.cuda.get_device_capability() < (8, 9):
            pytest.skip("float8 products need compute capability 8.9 or later")
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training.pretrain import pretrain

    cfg = tiny_run(  # the tiny model's sizes are multiples of 16, as float8 products need
        tmp_path / "run", device="cuda", precision="bf16", max_steps=30, torch_compile=True, float8=float8
    )
    result = pretrain(cfg, train_dataset=SyntheticData())
    assert result.step == 30
    from safetensors.torch import load_file

    names = load_file(result.output / "model.safetensors").keys()
    assert names and not any("_orig_mod" in n for n in names)
    records = [json.loads(line) for line in (result.output / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["split"] == "train"]
    assert losses[-1] < losses[0]
