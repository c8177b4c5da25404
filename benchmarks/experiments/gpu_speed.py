"""Where a pretraining step's time goes on one CUDA GPU, and what each change buys (docs/gpu.md, round 2).

Variants of albert-lm's pretraining step (forward, masked-only MLM + SOP loss, backward, clipping at
1.0, LAMB, gradients cleared; bf16 autocast; same seeded weights; random tokens at seq 128 with the
padding mask a real batch carries), each timed against the round-1 compiled step, alternated call by
call, median of --repeats (CUDA events):
- eager and transformers eager (the ratio the goals name), compiled at batch 128 and 256,
- compiled with mode "max-autotune-no-cudagraphs", the whole objective compiled (dynamic-shape gather),
- float8 linear layers (torchao, `albert pretrain --float8`) at batch 128 and 256, and on albert-xxlarge
  (H 4096, where the products are large enough for float8 to pay) bf16 against float8.
Then the torch profiler's kernel table of the compiled bf16 and float8 steps (--profile DIR), and
float8 against bf16 over the same real batches (--data: an `albert data create` folder) from the same
initial weights: the loss after each of --loss-steps steps.
--json is rewritten after every row, so a killed run keeps what it measured.
Rehearsal on a CPU (not a measurement): --device cpu --preset albert-tiny --batch 4 --repeats 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from albert_lm.bench.cuda import alternate, chip_peak, step_memory_mib
from albert_lm.bench.workloads import encoder_flops, pretraining_batch
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.optim import build_optimizer, build_scheduler, clip_by_global_norm

# name: (compile mode or None for eager, compile the whole objective, batch, float8)
# (the compiled bf16 step at batch 128 is the reference every row is alternated with: row "compiled")
# In this order: the cheap rows first, the long compilations last (a time-boxed run keeps what it did).
VARIANTS = {
    "eager": (None, False, 128, False),
    "compiled b256": ("default", False, 256, False),
    "compiled + float8": ("default", False, 128, True),  # its compilation took 73 s on an H100
    "compiled + float8 b256": ("default", False, 256, True),
    "compiled objective": ("default", True, 128, False),
    "compiled max-autotune": ("max-autotune-no-cudagraphs", False, 128, False),
}
LATE = ("compiled objective", "compiled max-autotune")  # after the profiles, loss curves and xxlarge


def build(config: AlbertConfig, device: torch.device, mode: str | None, whole: bool, float8: bool):
    torch.manual_seed(0)
    model = AlbertForPreTraining(config).to(device).train()
    model.sop_classifier.dropout.p = 0.0
    if float8:
        from albert_lm.kernels.float8 import convert_to_float8

        convert_to_float8(model.albert.encoder)
    objective = PretrainingObjective(model, "sop")
    if mode is not None and whole:
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        objective.compile(mode=mode)
    elif mode is not None:
        model.albert.compile(mode=mode)
    return model, objective


def step_fn(model, objective, data: dict[str, torch.Tensor], device: torch.device):
    opt = build_optimizer(model, "lamb", lr=1e-5)
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = objective(data)[0]
        loss.backward()
        clip_by_global_norm(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def random_batch(config: AlbertConfig, batch: int, seq: int, device: torch.device) -> dict[str, torch.Tensor]:
    data = pretraining_batch(config.vocab_size, batch, seq)
    # a real batch's padding: one sequence in ten ends early (the mask is then a real one)
    lengths = torch.full((batch,), seq)
    lengths[::10] = seq // 2
    data["attention_mask"] = (torch.arange(seq)[None] < lengths[:, None]).long()
    data["labels"] = data["labels"].masked_fill(data["attention_mask"] == 0, -100)
    return {k: v.to(device) for k, v in data.items()}


def variant_row(name, spec, base_step, config, args, device, peak, profile_to=None) -> dict[str, Any]:
    mode, whole, batch, float8 = spec
    model, objective = build(config, device, mode, whole, float8)
    data = random_batch(config, batch, args.seq, device)
    step = step_fn(model, objective, data, device)
    t0 = time.perf_counter()
    step()  # compiles
    if device.type == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    times = alternate({"variant": step, "base": base_step}, args.repeats, 3, device)
    ms, base_ms = statistics.median(times["variant"]), statistics.median(times["base"])
    flops = 3 * encoder_flops(config, batch, args.seq)
    if profile_to is not None:
        profile(step, profile_to, device)
    return {
        "variant": name, "preset": args.preset, "batch": batch, "seq": args.seq, "ms": ms,
        "tokens_per_s": batch * args.seq / ms * 1e3, "mfu": flops / ms / 1e9 / peak if peak else None,
        "vs_compiled_b128": (batch / ms) / (args.batch / base_ms), "first_step_s": compile_s,
        "memory_mib": step_memory_mib(step, device), "reference_ms": base_ms,
    }  # fmt: skip


def reference_row(base_step, config, args, device, peak, profile_to=None) -> dict[str, Any]:
    times = alternate({"base": base_step}, args.repeats, 3, device)["base"]
    ms = statistics.median(times)
    flops = 3 * encoder_flops(config, args.batch, args.seq)
    if profile_to is not None:
        profile(base_step, profile_to, device)
    return {
        "variant": "compiled", "preset": args.preset, "batch": args.batch, "seq": args.seq, "ms": ms,
        "tokens_per_s": args.batch * args.seq / ms * 1e3, "mfu": flops / ms / 1e9 / peak if peak else None,
        "vs_compiled_b128": 1.0, "memory_mib": step_memory_mib(base_step, device),
    }  # fmt: skip


def transformers_row(config, args, device, peak, base_step) -> dict[str, Any]:
    from albert_lm.bench.cuda import pretraining_steps

    steps, _ = pretraining_steps(config, args.batch, args.seq, False, device)
    times = alternate({"theirs": steps["theirs"], "base": base_step}, args.repeats, 3, device)
    ms = statistics.median(times["theirs"])
    flops = 3 * encoder_flops(config, args.batch, args.seq)
    return {
        "variant": "transformers eager", "preset": args.preset, "batch": args.batch, "seq": args.seq,
        "ms": ms, "tokens_per_s": args.batch * args.seq / ms * 1e3,
        "mfu": flops / ms / 1e9 / peak if peak else None,
        "vs_compiled_b128": statistics.median(times["base"]) / ms,
    }  # fmt: skip


def profile(step, path: Path, device: torch.device) -> None:
    """The profiler's table of 5 steps after 3 warm-ups: kernels by total GPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    for _ in range(3):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with prof(activities=activities) as p:
        for _ in range(5):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    path.write_text(p.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=70))


def real_batches(data: Path, batch: int, steps: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    from albert_lm.data.dataset import PretrainingDataset, PretrainingSampler, pretraining_loader

    dataset = PretrainingDataset(data, split="train", masked_lm_prob=0.4, max_predictions_per_seq=52)
    sampler = PretrainingSampler(dataset, num_replicas=1, rank=0, seed=1, batch_size=batch)
    sampler.set_epoch(0, 0)
    loader = iter(pretraining_loader(dataset, sampler, num_workers=4))
    return [{k: v.to(device) for k, v in next(loader).items()} for _ in range(steps)]


def loss_curves(config: AlbertConfig, batches, device: torch.device) -> dict[str, list[float]]:
    """bf16 and float8 (both compiled) over the same batches from the same weights: LAMB at 0.005."""
    curves = {}
    for name, float8 in (("bf16", False), ("float8", True)):
        model, objective = build(config, device, "default", False, float8)
        opt = build_optimizer(model, "lamb", lr=0.005)
        sched = build_scheduler(opt, len(batches) // 10, len(batches))
        params = [p for p in model.parameters() if p.requires_grad]
        losses = []
        for data in batches:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = objective(data)[0]
            loss.backward()
            clip_by_global_norm(params, 1.0)
            opt.step(), sched.step(), opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        curves[name] = [float(x) for x in losses]
        del model, objective, opt
    return curves


def float8_loss(result: dict[str, Any], args: argparse.Namespace, device: torch.device, attempt) -> None:
    batches = attempt("real batches", lambda: real_batches(args.data, args.batch, args.loss_steps, device))
    if not batches:
        return
    import sentencepiece

    tok = args.data.parent / "tok" / "spiece.model"  # the data's tokenizer: its vocabulary size
    vocab = sentencepiece.SentencePieceProcessor(model_file=str(tok)).get_piece_size()
    config = AlbertConfig.from_preset(args.preset, vocab_size=vocab)
    curves = attempt("float8 loss curves", lambda: loss_curves(config, batches, device))
    if curves:
        result["loss_curves"] = curves
        tail = {k: statistics.mean(v[-20:]) for k, v in curves.items()}
        result["loss_last20"] = tail
        result["float8_loss_vs_bf16"] = tail["float8"] / tail["bf16"] - 1


def xxlarge_rows(
    result: dict[str, Any], args: argparse.Namespace, device: torch.device, peak, attempt
) -> None:
    """albert-xxlarge (H 4096) compiled, bf16 against float8 at --xxlarge-batch (the bf16 row is the
    reference of both)."""
    config = AlbertConfig.from_preset("albert-xxlarge" if device.type == "cuda" else args.preset)
    xargs = argparse.Namespace(**{**vars(args), "preset": "albert-xxlarge", "batch": args.xxlarge_batch})
    ref: list[Any] = []
    for vname, float8 in (("xxlarge compiled", False), ("xxlarge compiled + float8", True)):

        def run(vname=vname, float8=float8) -> dict[str, Any]:
            if not ref:
                m, o = build(config, device, "default", False, False)
                ref.append(step_fn(m, o, random_batch(config, xargs.batch, args.seq, device), device))
            return variant_row(
                vname, ("default", False, xargs.batch, float8), ref[0], config, xargs, device, peak
            )

        row = attempt(vname, run)
        if row:
            result["rows"].append(row)
            args.json.write_text(json.dumps(result, indent=1))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    p.add_argument("--xxlarge-batch", type=int, default=32, help="0: no albert-xxlarge rows")
    p.add_argument("--profile", type=Path, help="folder for the profiler tables")
    p.add_argument("--data", type=Path, help="an `albert data create` folder for the float8 loss curves")
    p.add_argument("--loss-steps", type=int, default=200)
    p.add_argument("--json", type=Path, required=True)
    return p.parse_args()


def attempter(result: dict[str, Any], path: Path, device: torch.device):
    """attempt(label, fn): fn's result, or None with its error kept in `result`; the JSON rewritten."""

    def attempt(label: str, fn) -> Any:
        print(f"--- {label}", flush=True)
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as e:  # one failing variant (a kernel, a compiler) must not cost the others
            traceback.print_exc()
            result.setdefault("errors", {})[label] = f"{type(e).__name__}: {e}"[:2000]
            out = None
        print(f"    {time.perf_counter() - t0:.0f} s: {out if isinstance(out, dict) else ''}", flush=True)
        path.write_text(json.dumps(result, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return out

    return attempt


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (rehearsal)"
    peak = chip_peak(name) if device.type == "cuda" else None
    result: dict[str, Any] = {"device": name, "torch": torch.__version__, "peak_bf16_tflops": peak}
    result.update(date=time.strftime("%Y-%m-%d"), rows=[])

    def save() -> None:
        args.json.write_text(json.dumps(result, indent=1))

    attempt = attempter(result, args.json, device)
    config = AlbertConfig.from_preset(args.preset)
    prof = args.profile
    if prof:
        prof.mkdir(parents=True, exist_ok=True)
    base_model, base_objective = build(config, device, "default", False, False)
    base_step = step_fn(
        base_model, base_objective, random_batch(config, args.batch, args.seq, device), device
    )
    t0 = time.perf_counter()
    base_step()
    result["reference_first_step_s"] = time.perf_counter() - t0

    def add(label: str, fn) -> None:
        row = attempt(label, fn)
        if row:
            result["rows"].append(row)
            save()

    add(
        "compiled",
        lambda: reference_row(base_step, config, args, device, peak, prof and prof / "profile_bf16.txt"),
    )
    add("transformers eager", lambda: transformers_row(config, args, device, peak, base_step))
    names = args.variants.split(",")

    def variant(vname: str) -> None:
        mode, whole, batch, float8 = VARIANTS[vname]
        spec = (mode, whole, args.batch * batch // 128, float8)
        to = prof / "profile_float8.txt" if prof and vname == "compiled + float8" else None
        add(vname, lambda: variant_row(vname, spec, base_step, config, args, device, peak, to))

    for vname in [n for n in names if n not in LATE]:
        variant(vname)
    if args.data:
        float8_loss(result, args, device, attempt)
    del base_model, base_objective
    if args.xxlarge_batch:
        xxlarge_rows(result, args, device, peak, attempt)
    for vname in [n for n in names if n in LATE]:
        variant(vname)
    save()
    print(json.dumps({k: v for k, v in result.items() if k != "loss_curves"}, indent=1))
    return None


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
    sys.exit(0)
