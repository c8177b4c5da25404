"""The pretraining loop: objective, data order, train step, decisions, resume exactness after SIGKILL, SIGTERM,
DDP equivalence, warm start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, signal_after_step  # the shared tiny model (tests/ is on sys.path)
from safetensors.torch import load_file

from albert_lm.data.dataset import (
    PretrainingSampler,
    collate_pretraining,
    epoch_permutation,
    evaluation_loader,
    pretraining_loader,
    text_eval_dataset,
)
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.settings import parse_duration
from albert_lm.training.checkpoint import latest_checkpoint
from albert_lm.training.loop import Cadence, train_step
from albert_lm.training.model_init import warm_start
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.optim import TimeBudgetFactor
from albert_lm.training.pretrain import PretrainConfig, pretrain

TESTS = Path(__file__).resolve().parent


class SyntheticData:
    """Items in PretrainingDataset's format: pairs of Zipf-distributed tokens ("a a b b ..."), two
    segments that are swapped for SOP label 1, ~1/7 of the pieces masked; masking depends on the epoch."""

    objective = "sop"

    def __init__(self, n: int = 48, seq: int = 24, seed: int = 0):
        self.n, self.seq, self.seed, self.epoch = n, seq, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch * 7919 + i)
        length = self.seq - int(torch.randint(0, 6, (), generator=g))
        half = (length - 3) // 2
        weights = 1.0 / torch.arange(1, 95, dtype=torch.float)
        draw = (torch.multinomial(weights, half, replacement=True, generator=g) + 5).tolist()
        body = [t for t in draw for _ in range(2)][: 2 * half]
        a, b = body[:half], body[half:]
        swap = int(torch.randint(0, 2, (), generator=g))
        if swap:
            a, b = b, a
        ids = torch.tensor([2, *a, 3, *b, 3])
        labels = torch.full_like(ids, -100)
        pos = torch.randperm(len(ids) - 2, generator=g)[: max(1, len(ids) // 7)] + 1
        pos = pos[ids[pos] != 3]
        labels[pos] = ids[pos]
        ids[pos] = 4
        return {
            "input_ids": ids,
            "token_type_ids": torch.tensor([0] * (half + 2) + [1] * (half + 1)),
            "attention_mask": torch.ones_like(ids),
            "labels": labels,
            "sentence_order_label": torch.tensor(swap),
        }


def tiny_run(output: str | Path, **kw) -> PretrainConfig:
    values = dict(
        output=str(output),
        preset="albert-tiny",
        model_overrides=dict(TINY_MODEL),
        max_steps=10,
        batch_size=4,
        learning_rate=0.02,
        warmup_steps=2,
        log_every=2,
        save_every=3,
        tensorboard=False,
        plot=False,
        seed=7,
        precision="fp32",  # the exactness tests are fp32's; `auto` would take bf16 where it is native
    )
    values.update(kw)
    return PretrainConfig(**values)


# A subprocess runs this: pretrain on SyntheticData, optionally signalling itself at one step.
_RUNNER = """
import json, os, signal, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from test_pretrain import SyntheticData, tiny_run
from albert_lm.training.pretrain import pretrain
args = json.loads(sys.argv[1])
rank = int(os.environ.get("RANK", "0"))
def on_step(step):
    if step == args.get("kill_at") and rank == args.get("kill_rank", rank):
        if args["signal"] == "exit":
            os._exit(3)
        os.kill(os.getpid(), getattr(signal, args["signal"]))
r = pretrain(tiny_run(**args["cfg"]), train_dataset=SyntheticData(), on_step=on_step)
# One write of one line: with PYTHONUNBUFFERED, print's pieces from two ranks interleave on the pipe.
sys.stdout.write(f"RESULT {{r.step}} {{r.interrupted}}\\n")
"""


def _runner(tmp_path: Path) -> Path:
    script = tmp_path / "runner.py"
    script.write_text(_RUNNER.format(tests=str(TESTS)))
    return script


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("WORLD_SIZE", None)
    return env


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_masked_only_objective_equals_full_logits_loss():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **TINY_MODEL)).eval()
    ds = SyntheticData()
    batch = collate_pretraining([ds[i] for i in range(6)])  # dynamic padding: lengths differ
    assert batch["input_ids"].shape[0] == 6 and (batch["attention_mask"] == 0).any()
    loss, stats = PretrainingObjective(model, "sop")(batch)
    reference = model(**batch).loss  # transformers-style: all B x S x V logits
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-5)
    assert int(stats[1]) == int((batch["labels"] != -100).sum())  # masked tokens counted
    loss_none, _ = PretrainingObjective(model, "none")(batch)
    assert float(loss_none.detach()) < float(loss.detach())  # no SOP term


def test_sigkill_then_resume_is_bit_identical(tmp_path, one_thread):
    cfg = dict(max_steps=10, save_every=3, model_overrides={**TINY_MODEL, "hidden_dropout_prob": 0.1})
    # Uninterrupted reference, in this process.
    ref = tmp_path / "ref"
    pretrain(tiny_run(ref, **cfg), train_dataset=SyntheticData())
    # Killed by SIGKILL after step 7 (last checkpoint: step 6), then resumed.
    out = tmp_path / "run"
    script = _runner(tmp_path)
    args = {"cfg": {"output": str(out), **cfg}, "kill_at": 7, "signal": "SIGKILL"}
    p = subprocess.run(
        [sys.executable, str(script), json.dumps(args)], env=_env(), capture_output=True, text=True
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert latest_checkpoint(out).name == "checkpoint-6"
    assert not (out / "model.safetensors").exists()  # never finished
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "split": "tr')  # as if the kill had cut a line short
    args = {"cfg": {"output": str(out), "resume": True, **cfg}}
    p = subprocess.run(
        [sys.executable, str(script), json.dumps(args)], env=_env(), capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RESULT 10 False" in p.stdout
    a, b = _weights(ref), _weights(out)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    steps = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))  # the step-7 record of the killed run was dropped on resume
    # Without --resume an existing run is not overwritten.
    with pytest.raises(FileExistsError, match="--resume"):
        pretrain(tiny_run(out, **cfg), train_dataset=SyntheticData())


def test_sigterm_saves_and_exits_then_resumes_exactly(tmp_path, one_thread):
    ref = tmp_path / "ref"
    pretrain(tiny_run(ref, max_steps=8, save_every=0), train_dataset=SyntheticData())
    out = tmp_path / "run"

    def term(step: int) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    r = pretrain(tiny_run(out, max_steps=8, save_every=0), train_dataset=SyntheticData(), on_step=term)
    assert r.interrupted and r.step == 5
    assert latest_checkpoint(out).name == "checkpoint-5"
    r = pretrain(tiny_run(out, max_steps=8, save_every=0, resume=True), train_dataset=SyntheticData())
    assert not r.interrupted and r.step == 8
    a, b = _weights(ref), _weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_time_budget_decays_the_rate_over_the_clock():
    factor = TimeBudgetFactor(warmup_steps=4, power=1.0)
    assert [factor(s) for s in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]  # warmup by steps
    factor.progress = 0.75
    assert factor(10) == pytest.approx(0.25) and factor(1) == pytest.approx(0.25)  # decay caps warmup
    factor.progress = 1.0
    assert factor(10) == 0.0
    assert [parse_duration(t) for t in ("90s", "45m", "1.5h", "1h30m", "20s")] == [90, 2700, 5400, 5400, 20]
    for bad in ("", "10 minutes", "0m", "-5", "m", "20"):  # a bare number: seconds or minutes? refused
        with pytest.raises(ValueError, match="time budget"):
            parse_duration(bad)
    with pytest.raises(ValueError, match="time_budget|time budget"):
        PretrainConfig(time_budget="an hour")


def test_time_budget_stops_with_the_schedule_complete_and_resumes(tmp_path, one_thread):
    out = tmp_path / "run"
    cfg = dict(max_steps=100_000, time_budget="3s", save_every=0, log_every=10_000)

    def term(step: int) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    r = pretrain(tiny_run(out, **cfg), train_dataset=SyntheticData(), on_step=term)
    assert r.interrupted and r.step == 3
    spent = torch.load(latest_checkpoint(out) / "training_state.pt", weights_only=True)["elapsed_s"]
    assert 0 < spent < 3
    r = pretrain(tiny_run(out, resume=True, **cfg), train_dataset=SyntheticData())
    assert not r.interrupted and 3 < r.step < 100_000  # the budget ended it, not max_steps
    state = torch.load(latest_checkpoint(out) / "training_state.pt", weights_only=True)
    assert state["step"] == r.step and state["elapsed_s"] >= 3.0  # checkpointed at the last step
    assert r.metrics["lr"] <= 0.3 * tiny_run(out).learning_rate  # decayed to ~0 by the end
    assert (out / "model.safetensors").is_file()


def test_outputs_metrics_and_transformers_loading(tmp_path, one_thread, caplog):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "run"
    cfg = tiny_run(out, max_steps=6, save_every=2, keep_last=2, eval_every=3, tensorboard=True, plot=True)
    with caplog.at_level("WARNING", logger="albert_lm"):
        result = pretrain(cfg, train_dataset=SyntheticData(), eval_dataset=SyntheticData(n=12, seed=3))
    # held-out MLM accuracy beside always guessing the most frequent masked piece, warned where no better
    # (a 150-step model at the unigram guess gave identical vectors for every text, silently)
    guess, accuracy = result.metrics["eval_unigram_mlm_acc"], result.metrics["eval_mlm_acc"]
    assert 0.0 < guess < 1.0
    assert ("is the unigram guess's" in caplog.text) == (accuracy <= guess + 0.01)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [2, 4, 6]
    assert all({"loss", "mlm_acc", "sop_acc", "lr", "tok_per_s"} <= r.keys() for r in train)
    assert [r["step"] for r in records if r["split"] == "eval"] == [3, 6]
    # training time on every record (curves against minutes), never decreasing
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed) and elapsed[-1] > 0
    assert "eval_mlm_acc" in result.metrics
    assert (out / "training_curves.png").stat().st_size > 0
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    saved = json.loads((out / "pretrain_config.json").read_text())
    assert PretrainConfig.load(out / "pretrain_config.json").max_steps == saved["max_steps"] == 6
    model = transformers.AlbertForPreTraining.from_pretrained(out)
    assert model.config.num_hidden_layers == 2


def test_bf16_gradient_checkpointing_and_dropout_off(tmp_path, one_thread):
    overrides = {**TINY_MODEL, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    cfg = tiny_run(
        tmp_path,
        max_steps=4,
        save_every=0,
        precision="bf16",
        gradient_checkpointing=True,
        dropout_off_step=2,
        model_overrides=overrides,
    )
    r = pretrain(cfg, train_dataset=SyntheticData())
    assert r.step == 4 and torch.isfinite(torch.tensor(r.metrics["loss"]))
    model = AlbertForPreTraining.from_pretrained(tmp_path)
    assert model.config.hidden_dropout_prob == 0.1  # the saved config keeps the run's setting


def test_precision_auto_is_resolved_logged_and_saved(tmp_path, one_thread, caplog):
    from albert_lm.kernels.precision import resolve_precision

    expected, _ = resolve_precision("auto", "cpu")  # bf16 where this CPU computes it fast, else fp32
    cfg = tiny_run(tmp_path, max_steps=2, save_every=0, precision="auto")
    with caplog.at_level("INFO", logger="albert_lm.training.pretrain_setup"):
        pretrain(cfg, train_dataset=SyntheticData())
    assert f"precision auto -> {expected}: " in caplog.text and "GFLOP/s" in caplog.text
    assert json.loads((tmp_path / "pretrain_config.json").read_text())["precision"] == expected
    assert PretrainConfig().precision == "auto"


def test_the_sampler_reads_the_same_micro_batches_whatever_the_split_into_processes():
    ds = SyntheticData(n=50)  # 50 = 6 global batches of 8, and 2 examples left for the next epoch

    def micro_batches(world: int, accum: int, rank: int, offset: int = 0) -> list[list[int]]:
        s = PretrainingSampler(ds, world, rank, seed=7, batch_size=4, accumulation=accum)
        s.set_epoch(1, offset)
        order = list(s)
        assert len(order) == len(s)
        return [order[i : i + 4] for i in range(0, len(order), 4)]

    two_ranks = [micro_batches(2, 1, r) for r in (0, 1)]
    one_rank = micro_batches(1, 2, 0)
    assert len(one_rank) == 12 and ds.epoch == 1
    assert one_rank[0::2] == two_ranks[0] and one_rank[1::2] == two_ranks[1]
    # Global batch g is perm[8g : 8g + 8], slot rank * K + micro of it; the remainder is dropped.
    perm = epoch_permutation(50, 7, 1).tolist()
    assert one_rank == [perm[i : i + 4] for i in range(0, 48, 4)]
    # Resuming at an offset reads the rest of the same order.
    assert micro_batches(1, 2, 0, offset=16) == one_rank[4:]
    s = PretrainingSampler(ds, 1, 0, seed=7, batch_size=4, accumulation=2)
    assert not s.epoch_ends_before(40) and s.epoch_ends_before(48)


def test_loaders_collate_in_order_and_leave_the_global_generator_alone():
    ds = SyntheticData(n=20)
    sampler = PretrainingSampler(ds, 1, 0, seed=3, batch_size=4)
    loader = pretraining_loader(ds, sampler)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    batches = list(loader)
    evals = list(evaluation_loader(ds, 8, max_batches=2, rank=1, world=2))  # batch 1 of 0, 1
    assert torch.equal(torch.rand(3), expected)  # no draw: dropout's stream is the same with or without
    order = list(sampler)
    for k, batch in enumerate(batches):
        want = collate_pretraining([ds[i] for i in order[4 * k : 4 * k + 4]])
        assert want.keys() == batch.keys() and all(torch.equal(want[key], batch[key]) for key in want)
    assert len(evals) == 1 and torch.equal(
        evals[0]["input_ids"], collate_pretraining([ds[i] for i in range(8, 16)])["input_ids"]
    )


def test_log_eval_and_save_decisions():
    cadence = Cadence(total=10, log_every=4, eval_every=5, save_every=3)
    assert [s for s in range(1, 11) if cadence.log(s, False)] == [4, 8, 10]
    assert [s for s in range(1, 11) if cadence.eval(s, False)] == [5]  # the final evaluation does step 10
    assert [s for s in range(1, 11) if cadence.save(s, False)] == [3, 6, 9, 10]
    assert cadence.log(7, True) and cadence.save(7, True) and not cadence.eval(5, True)
    never = Cadence(total=10, log_every=4)
    assert not any(never.eval(s, False) for s in range(1, 11))
    assert [s for s in range(1, 11) if never.save(s, False)] == [10]


def test_train_step_accumulates_clips_and_steps(one_thread):
    torch.manual_seed(0)
    model = AlbertForPreTraining(
        AlbertConfig.from_preset("albert-tiny", **TINY_MODEL)
    ).eval()  # no dropout draws
    objective = PretrainingObjective(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (s + 1))
    ds = SyntheticData()
    micro = [collate_pretraining([ds[i] for i in range(k, k + 4)]) for k in (0, 4)]
    before = [p.detach().clone() for p in model.parameters()]
    # The expected gradient: the mean of the two micro-batch gradients, clipped to norm 0.01.
    loss = sum(objective(b)[0] for b in micro) / 2
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads if g is not None]))
    cfg = tiny_run("unused", max_grad_norm=0.01)
    out = train_step(objective, optimizer, scheduler, micro, cfg, torch.device("cpu"))
    assert out.lr == 0.5 and optimizer.param_groups[0]["lr"] == 0.25  # the step's rate, then the next
    torch.testing.assert_close(out.grad_norm, norm)
    assert int(out.stats[1]) == sum(int((b["labels"] != -100).sum()) for b in micro)
    assert int(out.stats[4]) == 8 and out.stats.dtype == torch.float64
    for p, p0, g in zip(model.parameters(), before, grads, strict=True):
        assert p.grad is None
        want = p0 if g is None else p0 - 0.5 * g * (0.01 / norm)
        torch.testing.assert_close(p.detach(), want)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **TINY_MODEL)).train()
    model.sop_classifier.dropout.p = 0.0  # as pretrain() does: the only dropout left would be random
    batch = collate_pretraining([SyntheticData()[i] for i in range(4)])
    grads = []
    for flag in (False, True):
        model.zero_grad()
        model.albert.encoder.gradient_checkpointing = flag
        PretrainingObjective(model)(batch)[0].backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_warm_start_deeper_model_and_init_from_group0(tmp_path):
    torch.manual_seed(0)
    small = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **TINY_MODEL))
    small.save_pretrained(tmp_path / "small")
    # Shared layers: a 4-layer model takes every weight as it is.
    deep = AlbertForPreTraining(
        AlbertConfig.from_preset("albert-tiny", **{**TINY_MODEL, "num_hidden_layers": 4})
    )
    assert warm_start(deep, tmp_path / "small") == []
    s, d = small.state_dict(), deep.state_dict()
    assert all(torch.equal(s[k], d[k]) for k in s)
    # Two hidden groups: group 1 has no source unless init_from_group0 copies group 0.
    grouped = {**TINY_MODEL, "num_hidden_layers": 4, "num_hidden_groups": 2}
    two = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **grouped))
    fresh = warm_start(two, tmp_path / "small")
    assert fresh and all(".1." in name for name in fresh)
    two = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **grouped))
    assert warm_start(two, tmp_path / "small", init_from_group0=True) == []
    t = two.state_dict()
    for k in s:
        if k.startswith("albert.encoder.attention.0."):
            assert torch.equal(t[k.replace(".0.", ".1.", 1)], s[k])


def test_bad_config_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "run.json"
    bad.write_text(json.dumps({"max_steps": 5, "lerning_rate": 0.1}))
    with pytest.raises(ValueError, match="lerning_rate"):
        PretrainConfig.load(bad)
    with pytest.raises(ValueError, match="precision"):
        PretrainConfig(precision="fp8")
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object of settings, got list"):
        PretrainConfig.load(bad)
    bad.write_text('{"max_steps": 5,\n "seed": }')
    with pytest.raises(ValueError, match=r"run.json:2: not valid JSON"):
        PretrainConfig.load(bad)
    bad.write_text(json.dumps({"max_steps": 5, "lerning_rate": 0.1}))
    from albert_lm.cli import main

    assert main(["pretrain", "--config", str(bad)]) == 1


def test_cli_help_explains_learning_rate_scaling(capsys):
    from albert_lm.cli import main

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "sqrt(B / 4096)" in text and "--gradient-accumulation-steps" in text and "--resume" in text


def test_text_eval_dataset_is_deterministic(tmp_path):
    class Tok:
        cls_token_id, sep_token_id, mask_token_id = 2, 3, 4

        def encode_batch(self, lines):
            return [[5 + (ord(c) % 50) for c in line] for line in lines]

    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    a = text_eval_dataset(text, Tok(), seq_length=32)
    b = text_eval_dataset(text, Tok(), seq_length=32)
    assert len(a) > 5 and all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a, b, strict=True))
    masked = a[0]["labels"] != -100
    assert int(masked.sum()) == round(0.15 * 30) and bool((a[0]["input_ids"][masked] == 4).all())


def _torchrun(tmp_path: Path, args: dict, nproc: int = 2, timeout: int = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += [str(_runner(tmp_path)), json.dumps(args)]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.distributed
def test_two_processes_match_one_process_with_accumulation(tmp_path, one_thread):
    common = dict(max_steps=6, batch_size=4, save_every=0)
    single = tmp_path / "single"
    pretrain(tiny_run(single, gradient_accumulation_steps=2, **common), train_dataset=SyntheticData())
    ddp = tmp_path / "ddp"
    p = _torchrun(tmp_path, {"cfg": {"output": str(ddp), **common}})
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = _weights(single), _weights(ddp)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    loss_a = [json.loads(x)["loss"] for x in (single / "metrics.jsonl").read_text().splitlines()]
    loss_b = [json.loads(x)["loss"] for x in (ddp / "metrics.jsonl").read_text().splitlines()]
    assert loss_a == pytest.approx(loss_b, rel=1e-4)


@pytest.mark.distributed
def test_a_dying_rank_ends_the_job_with_an_error(tmp_path):
    args = {"cfg": {"output": str(tmp_path / "ddp"), "max_steps": 50}, "kill_at": 2, "kill_rank": 1}
    p = _torchrun(tmp_path, {**args, "signal": "exit"}, timeout=240)
    assert p.returncode != 0
    assert "RESULT" not in p.stdout


@pytest.fixture(scope="module")
def book_data(albert_data, tmp_path_factory) -> Path:
    """A real data folder: one public-domain book, an 800-piece tokenizer, 64-token SOP examples."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data
    from albert_lm.data.tokenizer_training import train_tokenizer

    book = albert_data / "pretrain/gutenberg/books/Thoreau_Henry_David__On_the_Duty_of_Civil_Disobedience.txt"
    root = tmp_path_factory.mktemp("book")
    train_tokenizer([book], root / "tok", vocab_size=800, strip_gutenberg=True)
    cfg = DataConfig(
        max_seq_length=64,
        input_format="paragraphs",
        strip_gutenberg=True,
        block_bytes=8 << 10,
        eval_fraction=0.1,
    )
    create_pretraining_data([str(book)], root / "tok", root / "data", cfg, num_workers=1, progress=False)
    return root / "data"


def test_loss_falls_over_50_steps_on_real_text(albert_data, book_data, tmp_path, one_thread):
    cfg = PretrainConfig(
        data=str(book_data),
        output=str(tmp_path / "run"),
        preset="albert-tiny",
        max_steps=50,
        batch_size=8,
        learning_rate=0.01,
        warmup_steps=5,
        log_every=5,
        save_every=0,
        eval_batches=10,
        tensorboard=False,
        plot=False,
        eval_text=str(albert_data / "pretrain/wikitext-2/valid.txt"),
        precision="fp32",
    )
    result = pretrain(cfg)
    train = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r["split"] == "train"]
    assert len(train) == 10
    first, last = train[0]["mlm_loss"], min(r["mlm_loss"] for r in train[-3:])
    assert last < first - 0.5, (first, last)
    uniform = torch.log(torch.tensor(800.0)).item()  # a model that learnt nothing
    assert result.metrics["eval_mlm_loss"] < uniform - 0.5
    assert 0.0 <= result.metrics["eval_sop_acc"] <= 1.0
    assert result.metrics["eval_text_mlm_loss"] < uniform  # out-of-domain text (WikiText-2)
    # The final folder is a complete model + tokenizer.
    assert (tmp_path / "run" / "spiece.model").is_file() and (tmp_path / "run" / "config.json").is_file()


def test_demo_probe_counts_whole_words_in_the_top_5(monkeypatch):
    from albert_lm import demo

    answers = {"a [MASK].": ["\u2581the", "door", "\u2581a", ",", "\u2581of"],  # "door" inside a word: no
               "b [MASK].": ["\u2581the", "\u2581a", "\u2581of", "\u2581and", "\u2581tea"]}  # fmt: skip

    class Fake:
        def __init__(self, model_dir):
            pass

        def __call__(self, sentence, top_k=5):
            return answers[sentence]

    monkeypatch.setattr(demo, "_FillMask", Fake)
    got = demo.probe("unused", [("a [MASK].", ("door",)), ("b [MASK].", ("coffee", "tea"))])
    assert [p["hit"] for p in got] == [False, True]
    assert len(demo.PROBES) == 5 and len(demo.MORE_PROBES) == 20
    assert all(s.count("[MASK]") == 1 and words for s, words in demo.PROBES + demo.MORE_PROBES)


@pytest.mark.slow
def test_demo_pipeline_end_to_end_small(tmp_path, one_thread):
    from albert_lm.demo import CORPUS_DIR, format_report, run_demo

    assert (CORPUS_DIR / "README.md").is_file() and len(list(CORPUS_DIR.glob("*.txt"))) == 5
    one_book = sorted(CORPUS_DIR.glob("Alger*.txt"))
    report = run_demo(tmp_path, max_steps=3, files=one_book, eval_every=2, batch_size=4, vocab_size=1000)
    assert 0.0 < report["unigram_mlm_acc"] < 0.5 and 0.5 <= report["sop_majority_acc"] < 0.6
    assert len(report["probes"]) == 5 and all(len(p["top5"]) == 5 for p in report["probes"])
    assert 0 <= report["probe_hits"] <= 5
    assert len(report["more_probes"]) == 20 and all(len(p["top5"]) == 5 for p in report["more_probes"])
    assert report["more_probe_hits"] == sum(p["hit"] for p in report["more_probes"])
    assert "20 more probes" in format_report(report)
    assert "a shortened run: 3 of the recipe's 2500 steps" in format_report(report)  # not quality.md's demo
    assert "shortened" not in format_report({**report, "settings": {"pretrain": {"max_steps": 2500}}})
    assert report["precision"] in ("fp32", "bf16") and f"threads, {report['precision']})" in format_report(
        report
    )
    assert json.loads((tmp_path / "demo_results.json").read_text())["settings"]["pretrain"]["max_steps"] == 3
    transformers = pytest.importorskip("transformers")
    transformers.AlbertForPreTraining.from_pretrained(tmp_path / "model")


def test_a_stopped_demo_says_to_run_it_again_and_reports_nothing(tmp_path, one_thread, monkeypatch, caplog):
    """A signal during the demo's pretraining saves a checkpoint and ends the demo there: no report on a
    model half made, and the way on is the demo's own (run it again), not pretraining's --resume."""
    import argparse

    from albert_lm import demo

    signal_after_step(monkeypatch, 1)
    one_book = sorted(demo.CORPUS_DIR.glob("Alger*.txt"))
    with caplog.at_level("INFO"), pytest.raises(demo.DemoStopped, match="albert demo` again") as stopped:
        demo.run_demo(tmp_path, max_steps=3, files=one_book, batch_size=4, vocab_size=1000)
    assert stopped.value.signum == signal.SIGTERM
    assert "albert demo` again" in caplog.text and "--resume" not in caplog.text
    assert (tmp_path / "model" / "checkpoint-1").is_dir() and not (tmp_path / "demo_results.json").exists()
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: (_ for _ in ()).throw(stopped.value))
    args = argparse.Namespace(output=str(tmp_path), max_steps=None, text=None, language="en")
    assert demo.run_demo_command(args) == 128 + signal.SIGTERM


def test_cli_pretrain_config_file_plus_overrides(book_data, tmp_path, one_thread, capsys):
    from albert_lm.cli import main

    run = tmp_path / "run.json"
    run.write_text(
        json.dumps({"preset": "albert-tiny", "max_steps": 50, "batch_size": 4, "tensorboard": False})
    )
    out = tmp_path / "out"
    argv = [
        "pretrain",
        "--config",
        str(run),
        "--data",
        str(book_data),
        "--output",
        str(out),
        "--max-steps",
        "2",
    ]
    argv += ["--model-override", "num_hidden_layers=2", "--warmup-steps", "1", "--log-every", "1"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
        "output": str(out),
        "step": 2,
        "interrupted": False,
    }
    saved = json.loads((out / "pretrain_config.json").read_text())
    assert saved["max_steps"] == 2 and saved["batch_size"] == 4 and saved["learning_rate"] == 0.00176
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    assert main(argv) == 1  # the folder holds checkpoints now: refused without --resume
    assert main([*argv, "--resume"]) == 0


def test_projection_init_std_sets_only_the_embedding_projection():
    from albert_lm.training.model_init import initial_model

    overrides = {**TINY_MODEL, "embedding_size": 64, "hidden_size": 256, "num_attention_heads": 4}
    models = []
    for std in (None, 0.125):
        torch.manual_seed(0)
        cfg = PretrainConfig(preset="albert-tiny", model_overrides=overrides, projection_init_std=std)
        models.append(initial_model(cfg, None, None).state_dict())
    default, scaled = models
    name = "albert.encoder.embedding_projection.weight"
    assert abs(default[name].std().item() - 0.02) < 0.002 and abs(scaled[name].std().item() - 0.125) < 0.01
    assert all(torch.equal(default[k], scaled[k]) for k in default if k != name)
    with pytest.raises(ValueError, match="projection_init_std"):
        PretrainConfig(projection_init_std=0.0)
    same = {**overrides, "embedding_size": 256}  # E = H: no projection to initialise (was an AttributeError)
    cfg = PretrainConfig(preset="albert-tiny", model_overrides=same, projection_init_std=0.125)
    with pytest.raises(ValueError, match="no E -> H projection"):
        initial_model(cfg, None, None)


def test_sop_weight_zero_trains_masked_lm_only_and_still_scores_sop(tiny_config):
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config())
    model.sop_classifier.dropout.p = 0.0  # as pretraining runs it (pretrain_setup)
    ids = torch.randint(5, 99, (4, 16))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "labels": labels, "sentence_order_label": torch.tensor([0, 1, 0, 1])}  # fmt: skip
    full, stats = PretrainingObjective(model, "sop")(batch)
    mlm_only, stats0 = PretrainingObjective(model, "sop", 0.0)(batch)
    sop = (stats[3] / stats[4]).item()
    assert torch.allclose(full, mlm_only + sop) and torch.equal(stats, stats0)  # SOP still scored
    mlm_only.backward()
    head = model.sop_classifier.classifier.weight.grad
    assert head is not None and torch.count_nonzero(head) == 0  # in the graph (DDP), no gradient


def test_eval_on_start_records_the_model_before_its_first_step(tmp_path, one_thread):
    out = tmp_path / "run"
    cfg = tiny_run(out, max_steps=2, eval_every=0, eval_on_start=True)
    pretrain(cfg, train_dataset=SyntheticData(), eval_dataset=SyntheticData(n=16, seed=1))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "eval"] == [0, 2]
    assert [r["step"] for r in records if r["split"] == "train"] == [2]
