"""The report of benchmarks/experiments/quality.sh (docs/quality.md): held-out MLM, probes, GLUE and curves of an
albert-lm run, a transformers-pipeline run and the random initialisation.

One scorer for both pretrained models: transformers' AlbertForMaskedLM loaded from each folder, on every
example of the albert-lm data folder's held-out split (its masked positions), so neither system is scored
by its own code. The five probes are the demo's, read with transformers' `pipeline("fill-mask")`. GLUE
numbers come from each arm's `albert glue` output (ARM-glue/glue_results.json). Writes OUTPUT/quality.json,
OUTPUT/quality.md and OUTPUT/mlm_curves.png (held-out MLM accuracy against training minutes).

    python benchmarks/experiments/quality_report.py --data runs/quality/data --ours runs/quality/albert-lm-60m \\
        --theirs runs/quality/transformers-60m --random runs/quality/random --output runs/quality/report-60m
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import transformers
from hf_mlm_pipeline import held_out as held_out_scores  # this folder: run as a script from the root

from albert_lm.data.dataset import PretrainingDataset
from albert_lm.demo import MORE_PROBES, PROBES, unigram_baseline
from albert_lm.glue.config import GLUE5


def held_out(model_dir: Path, data: Path) -> dict[str, float]:
    """Every held-out example, scored as the transformers pipeline script scores itself."""
    model = transformers.AlbertForMaskedLM.from_pretrained(model_dir)
    scores = held_out_scores(model, PretrainingDataset(data, "eval"), batches=10**9)
    return {k.removeprefix("eval_"): v for k, v in scores.items()}


def probes(model_dir: Path, which: list[tuple[str, tuple[str, ...]]] = PROBES) -> list[dict]:
    fill = transformers.pipeline("fill-mask", model=str(model_dir), top_k=5, device="cpu")
    rows = []
    for sentence, expected in which:
        top5 = [r["token_str"].strip() for r in fill(sentence.replace("[MASK]", fill.tokenizer.mask_token))]
        rows.append({"sentence": sentence, "top5": top5, "hit": any(t in expected for t in top5)})
    return rows


def curve(model_dir: Path) -> list[tuple[float, float]]:
    """(training minutes, held-out MLM accuracy) from a run's metrics.jsonl (albert-lm's or the pipeline's)."""
    points = []
    for line in (model_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("split") == "eval" and "elapsed_s" in r:
            points.append((r["elapsed_s"] / 60, r["mlm_acc"]))
        elif "eval_mlm_acc" in r:
            points.append((r["minutes"], r["eval_mlm_acc"]))
    return points


def glue(model_dir: Path) -> dict | None:
    path = Path(f"{model_dir}-glue") / "glue_results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def markdown(report: dict) -> str:
    arms = list(report["arms"])
    lines = ["| | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key, label in (("mlm_acc", "held-out MLM accuracy"), ("mlm_loss", "held-out MLM loss")):
        cells = [
            f"{report['arms'][a]['held_out'][key]:.4f}" if report["arms"][a].get("held_out") else "-"
            for a in arms
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for key, label in (("probes", "probe hits (of 5)"), ("more_probes", "more probe hits (of 20)")):
        lines.append(
            f"| {label} | "
            + " | ".join(
                str(sum(p["hit"] for p in report["arms"][a][key])) if report["arms"][a].get(key) else "-"
                for a in arms
            )
            + " |"
        )
    for task, (name, metric) in GLUE5.items():
        cells = []
        for a in arms:
            g = report["arms"][a].get("glue")
            r = g["tasks"].get(task) if g else None
            cells.append(f"{100 * r['mean']:.1f} +- {100 * r['std']:.1f}" if r else "-")
        lines.append(f"| {name} {metric} | " + " | ".join(cells) + " |")
    cells = [
        f"**{report['arms'][a]['glue']['average']['score']:.1f}**" if report["arms"][a].get("glue") else "-"
        for a in arms
    ]
    lines.append("| GLUE-5 | " + " | ".join(cells) + " |")
    lines.append(f"\nUnigram guess on the same held-out positions: {report['unigram_mlm_acc']:.4f}.")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, arm in report["arms"].items():
        if arm.get("curve"):
            xs, ys = zip(*arm["curve"], strict=True)
            ax.plot(xs, ys, marker="o", label=name)
    ax.axhline(report["unigram_mlm_acc"], color="gray", linestyle="--", label="unigram guess")
    ax.set_xlabel("training minutes")
    ax.set_ylabel("held-out MLM accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data", type=Path, required=True, help="the albert-lm data folder both runs are scored on"
    )
    p.add_argument("--ours", type=Path, required=True)
    p.add_argument("--theirs", type=Path, required=True)
    p.add_argument("--random", type=Path, required=True)
    p.add_argument("--tapt", type=Path, help="row (d): the albert-lm model after task-adaptive pretraining")
    p.add_argument("--output", type=Path, required=True)
    a = p.parse_args()
    a.output.mkdir(parents=True, exist_ok=True)
    base = unigram_baseline(PretrainingDataset(a.data, "train"), PretrainingDataset(a.data, "eval"))
    report: dict = {"data": str(a.data), "unigram_mlm_acc": base["unigram_mlm_acc"], "arms": {}}
    arms = [("albert-lm", a.ours), ("transformers pipeline", a.theirs), ("random init", a.random)]
    if a.tapt:
        arms.append(("(d) albert-lm + TAPT", a.tapt))
    for name, folder in arms:
        arm: dict = {"folder": str(folder), "glue": glue(folder)}
        if name != "random init":
            arm.update(
                held_out=held_out(folder, a.data),
                probes=probes(folder),
                more_probes=probes(folder, MORE_PROBES),
                curve=curve(folder),
            )
        report["arms"][name] = arm
        print(name, json.dumps({k: v for k, v in arm.items() if k in ("held_out",)}), flush=True)
    (a.output / "quality.json").write_text(json.dumps(report, indent=1))
    (a.output / "quality.md").write_text(markdown(report) + "\n")
    plot(report, a.output / "mlm_curves.png")
    print(markdown(report))


if __name__ == "__main__":
    main()
