"""`albert bench`: albert-lm against transformers on this machine, same weights, interleaved timings.

Workloads (albert-base unless asked otherwise):
- GEMM limits: the best matrix-multiply rate this machine reaches per dtype on albert-base's shapes
  (F.linear, oneDNN, oneDNN with pre-packed weights; fp32 and bf16);
- inference: AlbertModel forward, batch x seq 1 x 128, 8 x 128, 4 x 512, fp32 and bf16 autocast;
- int8: the same shapes, ours through `quantize_int8` (int8 linears), theirs transformers in fp32;
- onnx: the same shapes, ours ONNX Runtime on `albert export`'s graph (fp32, and its int8 file from
  ONNX Runtime's `quantize_dynamic`), theirs transformers in fp32 (needs the `[export]` extra and a
  tokenizer to export with: the shared data's albert-30k spiece.model);
- pretraining step: forward, backward, global-norm clipping, LAMB, 8 x 128, fp32 and bf16 autocast.
  `precision="auto"` benches bf16 only where this CPU computes it natively (`precision.native_bf16`);
  Ours: `PretrainingObjective` (MLM logits at the masked positions only); theirs:
  `transformers.AlbertForPreTraining(labels=, sentence_order_label=)`;
- SST-2 dev end to end: the 872 sentences as text in, labels out, batch 32. Ours: the `albert
  evaluate` path (AlbertTokenizer, length-sorted batches, AlbertForSequenceClassification); theirs:
  transformers' AlbertTokenizer with padding="longest" on batches in file order, and its model;
- ablations: each speed choice of ours switched off in turn, on the workload it serves.

Each comparison row runs ours and theirs in two worker processes (`bench.sides`: a user runs one library
per process, and in one process each would run on the heap the other grew), loads the same weights in
both, checks the outputs agree, then alternates them repeat by repeat, so machine noise hits both
alike; it reports median tokens/s (min-max), the ratio of medians and each worker's peak RSS.
`isolate=False` (`albert bench --same-process`) runs both in this process instead. "Limit" is model
FLOP/s (the matrix multiplies of the encoder, 3x forward for a training step) as a fraction of the GEMM
limit for the dtype. Ablations switch one of our choices off at a time, in this process.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from albert_lm.bench.ablations import ABLATIONS, ablation_row
from albert_lm.bench.sides import compare
from albert_lm.bench.workloads import (
    Workload,
    gemm_limits,
)
from albert_lm.kernels import autotune, precision
from albert_lm.kernels.hardware import cpu_info, tune_cpu_allocator
from albert_lm.model.config import AlbertConfig
from albert_lm.values import check_range

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the suite
def machine_line() -> str:
    import transformers

    return (
        f"{cpu_info().describe()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}"
    )


def machine_facts() -> dict[str, Any]:
    """Where the bench ran: the CPU, its ISA level (emulation applied), and its bf16 against fp32 rate."""
    cpu = cpu_info()
    return {
        "cpu": cpu.model,
        "generation": cpu.generation,
        "cores": cpu.cores,
        "threads": torch.get_num_threads(),
        "isa": cpu.isa,
        "hardware_isa": cpu.hardware_isa,
        "emulation": cpu.emulation,
        "native_bf16": precision.native_bf16(),
        "gemm_bf16_vs_fp32": precision.bf16_speed(),
        "autotune": autotune.enabled(),
        "torch": torch.__version__,
    }


def kernels_chosen() -> dict[str, dict[str, int]]:
    """How many products took each path, per product kind and dtype, from the tuner's table on disk
    (the workers wrote it)."""
    autotune.reset()
    counts: dict[str, dict[str, int]] = {}
    for key, entry in autotune.choices().items():
        op, dtype = key.split()[:2]
        row = counts.setdefault(f"{op} {dtype}", {})
        row[entry["choice"]] = row.get(entry["choice"], 0) + 1
    return counts


PARTS = ("gemm", "inference", "int8", "onnx", "pretraining", "sst2", "ablations")
PRECISIONS = ("auto", "fp32", "bf16", "all")


def bf16_fast(facts: dict[str, Any]) -> bool:
    """Whether bf16 is fast here, by the measured rates (bf16 at >= 1.2x the fp32 GFLOP/s), whichever
    path reached them: oneDNN's bf16 primitive may not run where F.linear's bf16 still does."""
    s = facts.get("gemm_bf16_vs_fp32") or {}
    measured = bool(s) and s.get("bf16_gflops", 0) >= 1.2 * s.get("fp32_gflops", float("inf"))
    return bool(facts.get("native_bf16")) or measured


def bf16_line(facts: dict[str, Any]) -> str:
    """The bf16 verdict in words, following the measured rates printed beside it."""
    s = facts.get("gemm_bf16_vs_fp32") or {}
    rates = f"bf16 {s.get('bf16_gflops', 0):.0f} against fp32 {s.get('fp32_gflops', 0):.0f} GFLOP/s"
    if not bf16_fast(facts):
        return f"bf16 not faster than fp32 here ({rates})"
    if facts.get("native_bf16"):
        return f"bf16 fast here ({rates})"
    return (
        f"bf16 fast here by measurement ({rates}), though oneDNN's bf16 primitive does not run: "
        "albert's --precision auto stays on fp32"
    )


def precisions(choice: str, facts: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The precisions to bench: `auto` is fp32, plus bf16 where this CPU computes it fast (measured)."""
    if choice == "all":
        return ("fp32", "bf16")
    if choice == "auto":
        if facts is None:
            facts = {"native_bf16": precision.native_bf16(), "gemm_bf16_vs_fp32": precision.bf16_speed()}
        return ("fp32", "bf16") if bf16_fast(facts) else ("fp32",)
    if choice not in PRECISIONS:
        raise ValueError(f"precision {choice!r}: expected one of {', '.join(PRECISIONS)}")
    return (choice,)


def run_suite(
    preset: str = "albert-base",
    data: Path | None = None,
    repeats: int = 10,
    only: tuple[str, ...] = PARTS,
    log: Callable[[str], None] = print,
    isolate: bool = True,
    precision: str = "auto",
) -> dict[str, Any]:
    """The parts of the bench named in `only` (see PARTS), for `format_table` and `--json`."""
    check_settings(repeats, only, precision, data)
    try:
        import transformers
    except ImportError as e:
        raise ValueError("albert bench compares against transformers: pip install transformers") from e

    transformers.utils.logging.disable_progress_bar()
    tune_cpu_allocator()  # for the GEMM limits and the ablations (the workers set their own)
    config = AlbertConfig.from_preset(preset)
    result: dict[str, Any] = {
        "machine": machine_line(),
        "facts": machine_facts(),
        "preset": preset,
        "isolated": isolate,
        "rows": [],
        "ablations": [],
    }
    limits: dict[str, float] = {}
    chosen = precisions(precision, result["facts"])
    result["precisions"] = list(chosen)
    if "gemm" in only:  # the precisions compared only: the others' rates are no row's limit
        log("GEMM limits ...")
        g = gemm_limits(config, dtypes=chosen)
        result["gemm"], limits = g, g["limits"]
    if "bf16" not in chosen:
        why = bf16_line(result["facts"]) if precision == "auto" else f"--precision {precision}"
        log(f"bf16 rows skipped: {why}; --precision bf16 or all runs them")
    sst2_ok = data is not None and (data / "glue" / "SST-2" / "dev.tsv").is_file()
    if "sst2" in only and not sst2_ok:
        log(f"SST-2 skipped: no glue/SST-2/dev.tsv under {data} (set --data or ALBERT_DATA)")
    onnx_ok = _onnx_ready(data)
    if "onnx" in only and not onnx_ok:
        log(
            "ONNX rows skipped: they need onnxruntime and onnxscript (pip install 'albert-lm[export]') and "
            f"a tokenizer to export with (tokenizer/albert-30k/spiece.model under {data}; set --data)"
        )
    rows = []
    for workload, p, n in comparison_jobs(only, chosen, repeats, sst2_ok, onnx_ok):
        log(f"{workload.name} {p} ...")
        warmup = 1 if workload.kind == "sst2" else 2  # an SST-2 repeat takes transformers ~45 s here
        rows.append(compare(config, workload, p, n, data, warmup, isolate))
    result["rows"] = [r.as_dict(limits) for r in rows]
    if "ablations" in only:
        result["ablations"] = _ablations(config, chosen, repeats, data, sst2_ok, log, limits)
    result["kernels"] = kernels_chosen()
    return result


def check_settings(
    repeats: int, only: tuple[str, ...] = PARTS, precision: str = "auto", data: Path | None = None
) -> None:
    """Refuse settings that would fail late or mean something else (0 repeats: no timing at all)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"--repeats {repeats}: expected a whole number >= 1")
    check_range(repeats, "repeats", "--repeats")
    unknown = [p for p in only if p not in PARTS]
    if unknown or not only:
        raise ValueError(f"--only {' '.join(only)}: expected some of {', '.join(PARTS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision}: expected one of {', '.join(PRECISIONS)}")
    if data is not None and not Path(data).is_dir():
        raise FileNotFoundError(f"--data {data}: no such folder (the shared data folder, for SST-2 and ONNX)")


def _onnx_ready(data: Path | None) -> bool:
    import importlib.util

    if not (data and (data / "tokenizer" / "albert-30k" / "spiece.model").is_file()):
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnxscript"))


def comparison_jobs(
    only: tuple[str, ...], chosen: tuple[str, ...], repeats: int, sst2_ok: bool, onnx_ok: bool = False
) -> list[tuple[Workload, str, int]]:
    """(workload, precision, repeats) of every ours-against-theirs row the parts in `only` ask for."""
    jobs: list[tuple[Workload, str, int]] = []
    if "inference" in only:
        for p in chosen:
            for b, s in ((1, 128), (8, 128), (4, 512)):
                jobs.append((Workload("inference", b, s), p, repeats))
    if "int8" in only:  # albert-lm's quantize_int8 against transformers fp32 (docs/deploy.md)
        for b, s in ((1, 128), (8, 128), (4, 512)):
            jobs.append((Workload("inference", b, s), "int8", repeats))
    if "onnx" in only and onnx_ok:  # ONNX Runtime on the exported graph against transformers fp32
        for b, s in ((1, 128), (8, 128), (4, 512)):
            jobs += [(Workload("inference", b, s), p, repeats) for p in ("onnx", "onnx-int8")]
    if "pretraining" in only:
        for p in chosen:
            jobs.append((Workload("pretraining", 8, 128), p, max(3, repeats // 2)))
    if "sst2" in only and sst2_ok:
        jobs.append((Workload("sst2"), "fp32", max(3, repeats // 2)))
    return jobs


def _ablations(
    config: AlbertConfig,
    chosen: tuple[str, ...],
    repeats: int,
    data: Path | None,
    sst2_ok: bool,
    log: Callable[[str], None],
    limits: dict[str, float],
) -> list[dict[str, Any]]:
    """The ablation rows (ABLATIONS) whose precision is benched and whose workload can run."""
    rows = []
    for choice, workload_kind, p, b, s in ABLATIONS:
        if (workload_kind == "sst2" and not sst2_ok) or p not in chosen:
            continue
        log(f"ablation {choice} ({workload_kind}, {p}) ...")
        n = max(3, repeats // 2)
        rows.append(ablation_row(config, choice, workload_kind, p, n, data, b, s).as_dict(limits))
    return rows


def _range(work: float, ts: list[float]) -> str:
    return f"{work / max(ts):.0f}-{work / min(ts):.0f}"


NOISY = 2.0  # the slowest repeat this many times the fastest: the machine was busy, the ratio a guess


def _noisy(row: dict[str, Any]) -> str:
    """ " (noisy)" after a ratio whose repeats spread by NOISY or more on either side, else nothing."""
    spread = max(max(ts) / min(ts) for ts in (row["ours"], row["theirs"]))
    return " (noisy)" if spread >= NOISY else ""


def format_table(result: dict[str, Any]) -> str:
    out = [f"albert-lm bench: {result['preset']}; {result['machine']}"]
    facts = result.get("facts")
    if facts:
        out.append(
            f"ISA {facts['isa']}; {bf16_line(facts)}; "
            f"kernels {'chosen by timing' if facts['autotune'] else 'fixed (ALBERT_LM_AUTOTUNE=0)'}"
        )
    if result.get("kernels"):
        out.append(
            "kernels chosen: "
            + "; ".join(
                f"{kind}: " + ", ".join(f"{path} x{n}" for path, n in sorted(paths.items()))
                for kind, paths in sorted(result["kernels"].items())
            )
        )
    out.append("")
    limits = result.get("gemm", {}).get("limits", {})
    if "gemm" in result:
        out += ["| matrix multiply | GFLOP/s |", "|---|---|"]
        out += [f"| {name} | {p['gflops']:.0f} |" for name, p in result["gemm"]["paths"].items()]
        out.append("")
    if result["rows"]:
        out += [
            "| workload | precision | albert-lm | transformers | ratio | of GEMM limit "
            "| peak RSS MiB (ours / theirs) | check |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in result["rows"]:
            frac = f"{r['limit_fraction']:.0%}" if r["limit_fraction"] is not None else ""
            rss = r["rss_mib"]
            mem = f"{rss.get('ours') or 0:.0f} / {rss.get('theirs') or 0:.0f}" if rss else ""
            out.append(
                f"| {r['workload']} | {r['precision']} "
                f"| {r['ours_rate']:.0f} {r['unit']} ({_range(r['work'], r['ours'])}) "
                f"| {r['theirs_rate']:.0f} ({_range(r['work'], r['theirs'])}) | {r['ratio']:.2f}x{_noisy(r)} | {frac} "
                f"| {mem} "
                f"| {r['check'].replace('|', '&#124;')} |"  # "max |diff|" kept inside its cell
            )
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
