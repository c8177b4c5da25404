"""A claim's results as a Markdown table beside the paper's figures, and as a PNG."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from albert_lm.files import atomic_write
from albert_lm.paper.claims import CLAIMS
from albert_lm.paper.config import PHASES

logger = logging.getLogger(__name__)


def _figure(c: dict[str, Any], split: str, key: str, digits: int) -> str:
    """A cell's figure; with several seeds their mean, then their min-max in brackets."""
    text = f"{c[split][key]:.{digits}f}"
    if len(c.get("runs", ())) > 1:
        values = [r[split][key] for r in c["runs"]]
        text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return text


def _settings_line(result: dict[str, Any]) -> str:
    """What the cells were trained and scored with: the table read alone names its run."""
    s = result.get("settings") or {}
    claim = CLAIMS.get(str(result.get("claim")))
    shares = claim is not None and any(c.budget != 1 or c.steps_of for c in claim.cells)
    if s.get("max_steps"):  # the cells ran a number of steps, with no time limit (reproduce.cell_config)
        budget = f"{s['max_steps']} steps per cell (equal steps"
        part = claim is not None and any(c.budget != 1 for c in claim.cells)
        budget += "; a cell with a share of the budget, that share of them)" if part else ")"
    else:
        budget = f"{s.get('time_budget')} of pretraining per cell (equal time"
        budget += (
            "; some cells a share of it, or the steps of another: see the steps column)" if shares else ")"
        )
    held = (
        f"{s['eval_batches']} held-out batches" if s.get("eval_batches") else "the recipe's held-out batches"
    )
    overrides = s.get("model_overrides") or {}
    changed = ", ".join(f"{k}={v}" for k, v in overrides.items()) if overrides else "none"
    return (
        f"Data {s.get('data')}; recipe {s.get('recipe')}; {budget}; --model-override for every cell: {changed}; "
        f"{held}; precision {s.get('precision')}; torch {result.get('torch')}, {result.get('threads')} threads."
    )


def format_table(result: dict[str, Any]) -> str:
    cells = result["cells"]
    seeds = result.get("seeds", [1])
    sentence = any("held_out_nsp" in c for c in cells.values())
    head = ["cell", "parameters", "steps", "minutes", "held-out MLM acc", "MLM loss"]
    head += ["NSP pairs acc", "SOP pairs acc"] if sentence else ["sentence head on SOP pairs"]
    head.append("paper")
    lines = [f"### {result['title']}", "", _settings_line(result), ""]
    if result.get("unigram_mlm_acc") is not None:
        lines[-1:-1] = [
            f"Held-out MLM accuracy of the unigram guess (always the most frequent masked piece): "
            f"{result['unigram_mlm_acc']:.4f}; a cell at it has learnt word frequencies only."
        ]
    if len(seeds) > 1:
        lines += [
            f"Seeds {', '.join(map(str, seeds))}: each figure is the mean over them, (min-max) in brackets.",
            "",
        ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, c in cells.items():
        minutes = f"{c['seconds'] / 60:.1f}" if c.get("seconds") is not None else ""
        row = [name, f"{c['parameters'] / 1e6:.2f}M", str(c["steps"]), minutes,
               _figure(c, "held_out", "mlm_acc", 4), _figure(c, "held_out", "mlm_loss", 3)]  # fmt: skip
        if sentence:
            row.append(_figure(c, "held_out_nsp", "sentence_acc", 3))
        row += [_figure(c, "held_out", "sentence_acc", 3), result["paper_table"].get(name, "")]
        lines.append("| " + " | ".join(row) + " |")
    if any("layers" in c for c in cells.values()):
        lines += ["", "| cell | layer | L2(in, out) | cosine(in, out) |", "|---|---|---|---|"]
        for name, c in cells.items():
            for i, (d, s) in enumerate(zip(c["layers"]["l2"], c["layers"]["cosine"], strict=True), start=1):
                lines.append(f"| {name} | {i} | {d:.3f} | {s:.4f} |")
    lines += ["", f"The paper: {result['paper']}", ""]
    lines += [f"- {v}" for v in result["verdicts"]]
    return "\n".join(lines)


def _bars(cells: dict[str, Any], split: str, key: str) -> tuple[list[float], list[list[float]] | None]:
    """Each cell's figure (the mean over seeds) and, with several seeds, its min-max as error bars."""
    means = [c[split][key] for c in cells.values()]
    if not any(len(c.get("runs", ())) > 1 for c in cells.values()):
        return means, None
    runs = [[r[split][key] for r in c.get("runs", [c])] for c in cells.values()]
    low = [m - min(v) for m, v in zip(means, runs, strict=True)]
    return means, [low, [max(v) - m for m, v in zip(means, runs, strict=True)]]


def plot_claim(result: dict[str, Any], path: Path) -> Path | None:
    """Held-out MLM accuracy per cell (bars); the sentence cross table; the per-layer transitions."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no %s", path.name)
        return None
    cells = result["cells"]
    layers = any("layers" in c for c in cells.values())
    sentence = any("held_out_nsp" in c for c in cells.values())
    fig, axes = plt.subplots(
        1, 3 if layers else 2 if sentence else 1, figsize=(15 if layers else 10, 4), squeeze=False
    )
    ax = axes[0][0]
    names = list(cells)
    means, spread = _bars(cells, "held_out", "mlm_acc")
    ax.bar(names, means, yerr=spread, capsize=4)
    if result.get("unigram_mlm_acc") is not None:  # the floor the cells must rise above to have learnt
        ax.axhline(result["unigram_mlm_acc"], color="red", linestyle="--", linewidth=1, label="unigram guess")
        ax.legend(loc="lower right", fontsize="small")
    ax.set_ylabel("held-out MLM accuracy")
    ax.set_title(result["claim"] + (f" (mean, min-max over {len(result['seeds'])} seeds)" if spread else ""))
    ax.tick_params(axis="x", rotation=45)
    if sentence:
        ax = axes[0][1]
        x = range(len(names))
        for shift, split, label in ((-0.2, "held_out_nsp", "NSP pairs"), (0.2, "held_out", "SOP pairs")):
            means, spread = _bars(cells, split, "sentence_acc")
            ax.bar([i + shift for i in x], means, 0.4, yerr=spread, capsize=4, label=label)
        ax.set_xticks(list(x), [f"{n}-trained" for n in names])
        # chance: always the majority label of each held-out set (as the verdicts take it), else a coin
        majority: dict[str, float] = next((c["majority"] for c in cells.values() if "majority" in c), {})
        for key, color in (("nsp", "C0"), ("sop", "C1")):
            chance = max(majority.get(key, 0.5), 0.5)
            ax.axhline(
                chance, color=color, linestyle="--", linewidth=1, label=f"{key.upper()} chance {chance:.2f}"
            )
        ax.set_ylabel("sentence head accuracy")
        ax.legend(
            loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small"
        )  # beside the bars, not on them
    if layers:
        for ax, key in zip(axes[0][1:], ("l2", "cosine"), strict=True):
            for name, c in cells.items():
                ax.plot(range(1, len(c["layers"][key]) + 1), c["layers"][key], "o-", label=name)
            ax.set_xticks(range(1, max(len(c["layers"][key]) for c in cells.values()) + 1))
            ax.set_xlabel("layer")
            ax.set_title(f"{key} between a layer's input and output")
            ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, png.getvalue())


def machine(device: Any) -> str:
    """The machine a speed table was measured on, in one line (CPU or GPU, torch, the date)."""
    import time

    import torch

    from albert_lm.kernels.hardware import cpu_info

    chip = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_info().describe()
    return f"{chip}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"


def _speed_rows(table: dict[str, Any], paper: dict[str, Any], processes: int) -> list[str]:
    head = ["model", "parameters (paper)", "E", "dropout", "step s", "tokens/s", "speed", "paper",
            "forward", "backward", "wait + clip", "update", "peak memory"]  # fmt: skip
    if processes > 1:
        head += ["gradients MiB", "all-reduce alone s", "step without sync s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in table.items():
        if "error" in r:
            lines.append(f"| {name} | {paper[name]['parameters']} | did not run: {r['error']} |")
            continue
        s = r["step"]
        speed = f"{r['speedup']:.2f}x" if "speedup" in r else ""
        row = [name, f"{r['parameters'] / 1e6:.1f}M ({paper[name]['parameters']})", str(r["embedding_size"]),
               f"{r['dropout']:g}", f"{s['total']:.2f}", f"{r['tokens_per_s']:.0f}", speed,
               f"{paper[name]['speedup']:.1f}x", *(f"{s[k]:.2f}" for k in PHASES),
               f"{r['peak_memory_mib'] / 1024:.1f} GiB"]  # fmt: skip
        if processes > 1:
            row += [
                f"{r['gradient_bytes'] / 2**20:.0f}",
                f"{r['allreduce_s']:.2f}",
                f"{r['local_step']['total']:.2f}",
            ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _load_line(load: dict[str, Any], busy: str | None) -> str:
    """The machine's 1-minute load average around the measurement, and the warning of a busy machine."""
    seen = ", ".join(f"{load[k]:.2f} {k}" for k in ("before", "after") if load.get(k) is not None)
    line = f"Load average (1 minute): {seen or 'not available here'}, on {load['cores']} cores."
    return line + (f" **Warning: {busy}.**" if busy else "")


def format_speed_table(result: dict[str, Any]) -> str:
    """`albert reproduce speed`'s tables (one device, N processes, simulated bandwidths, other batches)."""
    b, seq = result["batch"], result["seq"]
    lines = [f"### Table 2: training speed ({result['machine']}; {result['precision']})", "",
             f"Pretraining steps (MLM + SOP, LAMB) of {b} x {seq} tokens per process, the median of "
             f"{result['steps']} timed steps after a warm-up; seconds per phase; speed = tokens per second "
             f"against BERT-large's; peak memory of one process.", "",
             f"One device ({result['threads']['1']} threads):", ""]  # fmt: skip
    if load := result.get("load_average"):
        lines[-2:-2] = [_load_line(load, result.get("busy")), ""]
    lines += _speed_rows(result["one_device"], result["paper"], 1)
    n = result["processes"]
    if "processes_table" in result:
        lines += ["", f"{n} processes, DDP ({result['threads'][str(n)]} threads each):", ""]
        lines += _speed_rows(result["processes_table"], result["paper"], n)
    sim = result.get("simulated") or {}
    if sim:
        lines += ["", f"ALBERT-large / BERT-large with {n} processes on a slower interconnect (simulated):", "",
                  "| Gbit/s | " + " | ".join(sim["ratios"]) + " |", "|---|" + "---|" * len(sim["ratios"]),
                  "| speed | " + " | ".join(f"{v:.2f}x" for v in sim["ratios"].values()) + " |"]  # fmt: skip
    if result.get("by_batch"):
        lines += ["", "ALBERT-large / BERT-large on one device at other batches (from the measured phases):", "",
                  "| sequences per step | " + " | ".join(result["by_batch"]) + " |",
                  "|---|" + "---|" * len(result["by_batch"]),
                  "| speed | " + " | ".join(f"{v:.2f}x" for v in result["by_batch"].values()) + " |"]  # fmt: skip
    lines += [""] + [f"- {v}" for v in result["verdicts"]]
    if "bert-large" not in result["one_device"]:  # the speed column and every verdict are against it
        lines.append(
            "- no speed column and no verdict: speed is against BERT-large; give --models with bert-large"
        )
    return "\n".join(lines)
