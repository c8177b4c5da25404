"""`albert bench`: albert-lm against transformers on this machine, same weights, interleaved timings.

Workloads (albert-base unless asked otherwise):
- GEMM limits: the best matrix-multiply rate this machine reaches per dtype on albert-base's shapes
  (fp32 through MKL, which nn.Linear uses, and through oneDNN; bf16 through oneDNN);
- inference: AlbertModel forward, batch x seq 1 x 128, 8 x 128, 4 x 512, fp32 and bf16 autocast;
- pretraining step: forward, backward, global-norm clipping, LAMB, 8 x 128, fp32 and bf16 autocast.
  Ours: `PretrainingObjective` (MLM logits at the masked positions only); theirs:
  `transformers.AlbertForPreTraining(labels=, sentence_order_label=)`;
- SST-2 dev end to end: the 872 sentences as text in, labels out, batch 32. Ours: the `albert
  evaluate` path (AlbertTokenizer, length-sorted batches, AlbertForSequenceClassification); theirs:
  transformers' AlbertTokenizer with padding="longest" on batches in file order, and its model;
- ablations: each speed choice of ours switched off in turn, on the workload it serves.

Each timing row alternates ours and theirs repeat by repeat, so machine noise hits both alike, and
reports median tokens/s (min-max) and the ratio of medians. "Limit" is model FLOP/s (the matrix
multiplies of the encoder, 3x forward for a training step) as a fraction of the GEMM limit for the dtype.
Peak RSS comes from a child process per model and workload (a process's peak cannot be reset).
"""

from __future__ import annotations

import contextlib
import json
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from albert_lm import kernels
from albert_lm.bench_workloads import (
    ABLATIONS,
    Row,
    ablation_row,
    gemm_limits,
    inference_row,
    pretraining_row,
    sst2_row,
)
from albert_lm.config import AlbertConfig


# --------------------------------------------------------------------------- peak memory
def _child_peak_rss(args: list[str]) -> float | None:
    """Peak RSS (MiB) of a child process running one workload for one model."""
    cmd = [sys.executable, "-m", "albert_lm.bench", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("peak_rss_mib ")]
    return float(lines[-1].split()[1]) if done.returncode == 0 and lines else None


def _child_main(argv: list[str]) -> None:
    """`python -m albert_lm.bench WORKLOAD SIDE PRECISION PRESET [DATA]`: one side only, peak RSS."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    workload, side, precision, preset, *rest = argv
    kernels.tune_cpu_allocator()
    config = AlbertConfig.from_preset(preset)
    sides = (side,)
    {
        "inference-8x128": lambda: inference_row(config, 8, 128, precision, 2, sides),
        "inference-4x512": lambda: inference_row(config, 4, 512, precision, 2, sides),
        "pretraining-8x128": lambda: pretraining_row(config, 8, 128, precision, 2, sides),
        "sst2": lambda: sst2_row(config, Path(rest[0]), precision, 1, sides),
    }[workload]()
    print(f"peak_rss_mib {_peak_rss_mib():.0f}")


def _peak_rss_mib() -> float:
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork + exec, so a child started
    # by a big parent would report the parent's peak.
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- the suite
def machine_line() -> str:
    import transformers

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}"
    )


def run_suite(
    preset: str = "albert-base",
    data: Path | None = None,
    repeats: int = 10,
    only: tuple[str, ...] = ("gemm", "inference", "pretraining", "sst2", "ablations", "memory"),
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    try:
        import transformers
    except ImportError as e:
        raise ValueError("albert bench compares against transformers: pip install transformers") from e

    transformers.utils.logging.disable_progress_bar()
    kernels.tune_cpu_allocator()  # for both models alike
    config = AlbertConfig.from_preset(preset)
    result: dict[str, Any] = {"machine": machine_line(), "preset": preset, "rows": [], "ablations": []}
    limits: dict[str, float] = {}
    if "gemm" in only:
        log("GEMM limits ...")
        g = gemm_limits(config)
        result["gemm"], limits = g, g["limits"]
    rows: list[Row] = []
    if "inference" in only:
        for precision in ("fp32", "bf16"):
            for b, s in ((1, 128), (8, 128), (4, 512)):
                log(f"inference {b} x {s} {precision} ...")
                rows.append(inference_row(config, b, s, precision, repeats))
    if "pretraining" in only:
        for precision in ("fp32", "bf16"):
            log(f"pretraining step 8 x 128 {precision} ...")
            rows.append(pretraining_row(config, 8, 128, precision, max(3, repeats // 2)))
    sst2_ok = data is not None and (data / "glue" / "SST-2" / "dev.tsv").is_file()
    if "sst2" in only:
        if sst2_ok:
            log("SST-2 dev end to end ...")
            rows.append(sst2_row(config, data, "fp32", max(3, repeats // 2)))  # type: ignore[arg-type]
        else:
            log(f"SST-2 skipped: no glue/SST-2/dev.tsv under {data} (set --data or ALBERT_DATA)")
    if "memory" in only:
        jobs = {
            "inference 8 x 128": "inference-8x128",
            "inference 4 x 512": "inference-4x512",
            "pretraining step 8 x 128": "pretraining-8x128",
        }
        if sst2_ok:
            jobs["SST-2 dev end to end (872 sentences)"] = "sst2"
        for row in rows:
            job = jobs.get(row.workload)
            if job and row.precision == "fp32":
                log(f"peak RSS {row.workload} ...")
                extra = [str(data)] if job == "sst2" else []
                row.rss_mib = {
                    side: _child_peak_rss([job, side, row.precision, preset, *extra])
                    for side in ("ours", "theirs")
                }
    result["rows"] = [r.as_dict(limits) for r in rows]
    if "ablations" in only:
        for choice, workload, precision in ABLATIONS:
            log(f"ablation {choice} ({workload}, {precision}) ...")
            row = ablation_row(config, choice, workload, precision, max(3, repeats // 2))
            result["ablations"].append(row.as_dict(limits))
    return result


def _range(work: float, ts: list[float]) -> str:
    return f"{work / max(ts):.0f}-{work / min(ts):.0f}"


def format_table(result: dict[str, Any]) -> str:
    out = [f"albert-lm bench: {result['preset']}; {result['machine']}", ""]
    limits = result.get("gemm", {}).get("limits", {})
    if "gemm" in result:
        out += ["| matrix multiply | GFLOP/s |", "|---|---|"]
        out += [f"| {name} | {p['gflops']:.0f} |" for name, p in result["gemm"]["paths"].items()]
        out.append("")
    if result["rows"]:
        out += [
            "| workload | precision | albert-lm | transformers | ratio | of GEMM limit | peak RSS MiB (ours / theirs) | check |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in result["rows"]:
            frac = f"{r['limit_fraction']:.0%}" if r["limit_fraction"] is not None else ""
            rss = r["rss_mib"]
            mem = f"{rss.get('ours') or 0:.0f} / {rss.get('theirs') or 0:.0f}" if rss else ""
            out.append(
                f"| {r['workload']} | {r['precision']} | {r['ours_rate']:.0f} {r['unit']} ({_range(r['work'], r['ours'])}) "
                f"| {r['theirs_rate']:.0f} ({_range(r['work'], r['theirs'])}) | {r['ratio']:.2f}x | {frac} | {mem} | {r['check']} |"
            )  # fmt: skip
        out.append("")
    if result["ablations"]:
        out += ["| choice switched off | precision | on | off | gain |", "|---|---|---|---|---|"]
        for r in result["ablations"]:
            out.append(
                f"| {r['workload']} | {r['precision']} | {r['ours_rate']:.0f} {r['unit']} "
                f"| {r['theirs_rate']:.0f} | {r['ratio']:.2f}x |"
            )
    if limits:
        out += ["", "GEMM limit per dtype: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in limits.items())]
    return "\n".join(out)


def write_json(result: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
