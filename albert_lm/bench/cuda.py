"""`albert bench --device cuda`: albert-lm against transformers on a CUDA GPU, same weights, bf16.

The CPU bench (`albert_lm.bench.runner`) runs each library in a process of its own; on a GPU the two
sides share one process and one device, alternated repeat by repeat, each repeat timed with CUDA
events (the median is reported). Rows:
- the matrix-multiply ceiling: an 8192^3 bf16 product, against the chip's dense bf16 peak from its
  datasheet (`chip_peak`);
- pretraining step (loss, backward, global-norm clipping at 1.0, LAMB, gradients cleared), bf16 autocast,
  at batch x 128 and batch x 512. Ours: `PretrainingObjective` (MLM logits at the masked positions only);
  theirs: `transformers.AlbertForPreTraining(labels=, sentence_order_label=)`; both step with albert-lm's
  LAMB (`albert pretrain`'s optimizer), so the rows compare the models;
- inference: the encoder's forward (`AlbertModel`), bf16 autocast;
- each of them eager and under `torch.compile` (the whole transformers model; our encoder, since our
  objective gathers the masked positions, a data-dependent shape).
Model FLOPs utilisation (MFU) counts the encoder's matrix multiplies only (`encoder_flops`, 3x forward
for a step), the same count for both sides, over the datasheet peak. Peak memory is the most the step
(or forward) allocated above what was allocated before it: activations, gradients, optimizer moments.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from albert_lm.bench.workloads import encoder_flops, pretraining_batch
from albert_lm.model.config import AlbertConfig

# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s; matched on the name
# torch reports, most specific first.
_PEAKS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("H800", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("A6000", 154.8),
    ("L4", 121.0),
    ("A10", 125.0),
)

Step = Callable[[], Any]


def chip_peak(name: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of the GPU named `name`, or None when it is not in the table."""
    for key, peak in _PEAKS:
        if key in name:
            return peak
    return None


def timed_ms(fn: Step, device: torch.device) -> float:
    """Milliseconds of one call: between CUDA events recorded around it on the current stream (the
    host clock on a CPU, where the suite runs only to rehearse the GPU run)."""
    if device.type != "cuda":
        start_s = time.perf_counter()
        fn()
        return (time.perf_counter() - start_s) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def matmul_ceiling(device: torch.device, n: int = 8192, repeats: int = 10) -> float:
    """TFLOP/s of an n x n x n bf16 product on random data (median of `repeats` after 3 warm-ups)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    ms = statistics.median(timed_ms(lambda: a @ b, device) for _ in range(repeats))
    return 2 * n**3 / ms / 1e9


def step_memory_mib(fn: Step, device: torch.device) -> float | None:
    """MiB that one call allocates at its peak above what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16)


def _models(config: AlbertConfig, kind: str, device: torch.device) -> tuple[Any, Any]:
    """(ours, theirs) with the same seeded random weights on `device` (theirs loaded from our save)."""
    import tempfile

    import transformers

    from albert_lm.model.encoder import AlbertModel
    from albert_lm.model.heads import AlbertForPreTraining

    torch.manual_seed(0)
    ours_cls: Any
    theirs_cls: Any
    ours_cls, theirs_cls = (
        (AlbertForPreTraining, transformers.AlbertForPreTraining)
        if kind == "pretraining"
        else (AlbertModel, transformers.AlbertModel)
    )
    ours = ours_cls(config)
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        theirs = theirs_cls.from_pretrained(d)
    return ours.to(device), theirs.to(device)


def pretraining_steps(
    config: AlbertConfig, batch: int, seq: int, compiled: bool, device: torch.device
) -> tuple[dict[str, Step], dict[str, float]]:
    """({side: one training step}, {side: initial fp32 loss}) on one seeded random batch."""
    from albert_lm.bench.workloads import train_step
    from albert_lm.training.objective import PretrainingObjective

    ours, theirs = _models(config, "pretraining", device)
    data = {k: v.to(device) for k, v in pretraining_batch(config.vocab_size, batch, seq).items()}
    for m in (ours, theirs):
        m.train()
        m.sop_classifier.dropout.p = 0.0  # as `albert pretrain` (google-research's SOP head has none)
    objective = PretrainingObjective(ours, "sop")
    losses = {}
    with torch.no_grad():
        losses["ours"] = float(objective(data)[0])
        losses["theirs"] = float(theirs(**data).loss)
    if compiled:
        ours.albert = torch.compile(ours.albert)
        theirs = torch.compile(theirs)
    loss_fns = {"ours": lambda: objective(data)[0], "theirs": lambda: theirs(**data).loss}
    sides = (("ours", ours), ("theirs", theirs))
    steps: dict[str, Step] = {side: train_step(m, loss_fns[side], "bf16", str(device)) for side, m in sides}
    return steps, losses


def inference_calls(
    config: AlbertConfig, batch: int, seq: int, compiled: bool, device: torch.device
) -> tuple[dict[str, Step], float]:
    """({side: one forward}, max |difference| of the last hidden states in fp32)."""
    ours, theirs = _models(config, "inference", device)
    ours.eval(), theirs.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g).to(device)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        diff = float((ours(ids, mask).last_hidden_state - theirs(ids, mask).last_hidden_state).abs().max())
    if compiled:
        ours, theirs = torch.compile(ours), torch.compile(theirs)

    def forward(model: Any) -> Step:
        def call() -> None:
            with torch.inference_mode(), _autocast(device):
                model(input_ids=ids, attention_mask=mask)

        return call

    return {"ours": forward(ours), "theirs": forward(theirs)}, diff


def alternate(
    steps: dict[str, Step], repeats: int, warmup: int, device: torch.device
) -> dict[str, list[float]]:
    """Milliseconds per call of each side, alternated call by call after `warmup` rounds."""
    for _ in range(warmup):
        for fn in steps.values():
            fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {side: [] for side in steps}
    for _ in range(repeats):
        for side, fn in steps.items():
            times[side].append(timed_ms(fn, device))
    return times


def row(
    name: str,
    compiled: bool,
    steps: dict[str, Step],
    tokens: int,
    flops: float,
    peak: float | None,
    repeats: int,
    warmup: int,
    check: str,
    device: torch.device,
) -> dict[str, Any]:
    """One table row: tokens/s (median), MFU, peak memory per side, ours/theirs ratio."""
    t0 = time.perf_counter()
    times = alternate(steps, repeats, warmup, device)
    out: dict[str, Any] = {"workload": name, "compiled": compiled, "check": check, "tokens": tokens}
    for side, ts in times.items():
        ms = statistics.median(ts)
        out[side] = {
            "ms": ms, "ms_min": min(ts), "ms_max": max(ts), "tokens_per_s": tokens / ms * 1e3,
            "mfu": flops / ms / 1e9 / peak if peak else None, "memory_mib": step_memory_mib(steps[side], device),
        }  # fmt: skip
    out["ratio"] = out["ours"]["tokens_per_s"] / out["theirs"]["tokens_per_s"]
    out["seconds"] = time.perf_counter() - t0
    return out


def run_cuda_suite(
    preset: str = "albert-base",
    repeats: int = 20,
    compile_modes: tuple[bool, ...] = (False, True),
    shapes: tuple[tuple[int, int], ...] = ((128, 128), (32, 512)),
    compiled_shapes: tuple[tuple[int, int], ...] = ((128, 128),),
    log: Callable[[str], None] = print,
    device: str = "cuda",
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every row for `preset` on the CUDA device, for `format_cuda_table` and `--json`. Compiled rows
    run at `compiled_shapes` only (each costs a compilation of both models). `device="cpu"` rehearses
    the suite where there is no GPU (no MFU, no memory, small shapes advised). `on_row(result)` runs after
    each row (`albert bench --json` saves as it goes: a killed run keeps its rows)."""
    import transformers

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("albert bench --device cuda: torch sees no CUDA device")
    transformers.utils.logging.disable_progress_bar()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (rehearsal)"
    peak = chip_peak(name) if dev.type == "cuda" else None
    config = AlbertConfig.from_preset(preset)
    log(f"{name}: matrix-multiply ceiling ...")
    result: dict[str, Any] = {
        "device": name,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(dev)))
        if dev.type == "cuda"
        else "-",
        "datasheet_bf16_tflops": peak,
        "matmul_bf16_tflops": matmul_ceiling(dev, 8192 if dev.type == "cuda" else 512),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "preset": preset,
        "date": time.strftime("%Y-%m-%d"),
        "rows": [],
    }
    for compiled in compile_modes:
        for kind in ("pretraining step", "inference"):
            for batch, seq in compiled_shapes if compiled else shapes:
                log(f"{kind} {batch} x {seq}{' compiled' if compiled else ''} ...")
                result["rows"].append(_row(config, kind, batch, seq, compiled, dev, peak, repeats))
                _free(dev)
                if on_row is not None:
                    on_row(result)
    return result


def _row(
    config: AlbertConfig,
    kind: str,
    batch: int,
    seq: int,
    compiled: bool,
    device: torch.device,
    peak: float | None,
    repeats: int,
) -> dict[str, Any]:
    """One row: a pretraining step (3x the forward's FLOPs) or an inference forward, both sides."""
    if kind == "inference":
        steps, diff = inference_calls(config, batch, seq, compiled, device)
        flops, check = encoder_flops(config, batch, seq), f"fp32 max |diff| {diff:.1e}"
    else:
        steps, losses = pretraining_steps(config, batch, seq, compiled, device)
        flops = 3 * encoder_flops(config, batch, seq)
        check = f"initial loss {losses['ours']:.4f} / {losses['theirs']:.4f}"
    warmup = 5 if compiled else 3  # a compiled row's first calls compile
    return row(
        f"{kind} {batch} x {seq}", compiled, steps, batch * seq, flops, peak, repeats, warmup, check, device
    )


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def format_cuda_table(result: dict[str, Any]) -> str:
    peak = result["datasheet_bf16_tflops"]
    out = [
        f"albert-lm bench: {result['preset']} on {result['device']} (sm {result['capability']}), "
        f"torch {result['torch']}, transformers {result['transformers']}, {result['date']}",
        f"bf16 8192^3 product: {result['matmul_bf16_tflops']:.0f} TFLOP/s; datasheet dense bf16 peak: "
        + (f"{peak:.0f} TFLOP/s" if peak else "unknown for this GPU"),
        "",
        "| workload (bf16) | compiled | albert-lm tokens/s | transformers tokens/s | ratio | MFU ours / theirs "
        "| peak MiB ours / theirs | check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        o, t = r["ours"], r["theirs"]
        mfu = f"{o['mfu']:.0%} / {t['mfu']:.0%}" if o["mfu"] is not None else ""
        mem = f"{o['memory_mib']:,.0f} / {t['memory_mib']:,.0f}" if o["memory_mib"] is not None else ""
        out.append(
            f"| {r['workload']} | {'yes' if r['compiled'] else 'no'} | {o['tokens_per_s']:,.0f} "
            f"| {t['tokens_per_s']:,.0f} | {r['ratio']:.2f}x | {mfu} | {mem} | {r['check']} |"
        )
    return "\n".join(out)
