"""GLUE-5 and held-out MLM accuracy against the pretraining budget: docs/quality.md's curve.

Each `--run SERIES:MINUTES:DIR` is a pretraining run whose `albert glue` results are in DIR-glue/ (as
benchmarks/experiments/quality.sh writes them); runs of one SERIES are joined by a line. `--random DIR` (its GLUE in
DIR-glue/) is drawn as the level to beat. GLUE-5 per fine-tuning seed is the mean of the five tasks'
scores x 100 for that seed; the plot shows the mean over seeds with the seeds' standard deviation.
`--keep OLD.json` starts from an earlier OUTPUT.json (its runs and random arm), for points whose run
folders are gone; a `--run` of the same series and minutes replaces the kept one. `--series
SERIES=LABEL` (repeatable) draws only those series, under those labels (the JSON keeps every run).
Writes OUTPUT.json and OUTPUT.png.

    python benchmarks/experiments/glue_vs_budget.py --run "40% masking:30:runs/q/albert-lm-30m" \
        --run "40% masking:60:runs/q/albert-lm-60m" --random runs/q/random --output docs/quality_glue_budget
    # the README's figure, from the kept results: the current recipe only
    python benchmarks/experiments/glue_vs_budget.py --keep docs/quality_glue_budget.json \
        --series "40% masking (cpu-1h now)=cpu-1h recipe" --output docs/quality_glue_budget
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def glue_per_seed(model_dir: Path) -> list[float]:
    """GLUE-5 x 100 of each fine-tuning seed (the mean of the five tasks' scores for that seed)."""
    path = Path(f"{model_dir}-glue") / "glue_results.json"
    if not path.is_file():
        raise SystemExit(f"{path}: no GLUE results (run `albert glue --model {model_dir} ...` first)")
    tasks = json.loads(path.read_text())["tasks"]
    per_task = [t["scores"] for t in tasks.values()]
    return [100 * statistics.fmean(scores) for scores in zip(*per_task, strict=True)]


def last_eval(model_dir: Path) -> dict[str, float]:
    """The final held-out evaluation in a run's metrics.jsonl (step, MLM accuracy and loss)."""
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if r.get("split") == "eval"][-1]
    return {"step": last["step"], "mlm_acc": last["mlm_acc"], "mlm_loss": last["mlm_loss"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", default=[], metavar="SERIES:MINUTES:DIR")
    p.add_argument("--random", type=Path, metavar="DIR", help="the random-init arm (or --keep's)")
    p.add_argument("--keep", type=Path, metavar="OLD.json", help="an earlier OUTPUT.json to start from")
    p.add_argument("--output", type=Path, required=True, help="OUTPUT.json and OUTPUT.png")
    p.add_argument("--series", action="append", default=[], metavar="SERIES=LABEL", help="draw only these")
    args = p.parse_args()
    kept = json.loads(args.keep.read_text()) if args.keep else {"runs": []}
    if args.random is None and "random" not in kept:
        p.error("--random DIR is needed (or --keep with a random arm)")
    runs = list(kept["runs"])
    for spec in args.run:
        series, minutes, folder = spec.split(":", 2)
        runs = [r for r in runs if (r["series"], r["minutes"]) != (series, float(minutes))]
        seeds = glue_per_seed(Path(folder))
        runs.append(
            {
                "series": series,
                "minutes": float(minutes),
                "dir": folder,
                "glue5_seeds": seeds,
                "glue5": statistics.fmean(seeds),
                "glue5_std": statistics.stdev(seeds),
                **last_eval(Path(folder)),
            }
        )
    if args.random is not None:
        rnd = glue_per_seed(args.random)
        random_arm = {"glue5_seeds": rnd, "glue5": statistics.fmean(rnd), "glue5_std": statistics.stdev(rnd)}
    else:
        random_arm = kept["random"]
    report = {"runs": runs, "random": random_arm}
    args.output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")

    labels = dict(s.split("=", 1) for s in args.series) or {r["series"]: r["series"] for r in runs}
    plot(report, labels, args.output.with_suffix(".png"))
    print(
        json.dumps(
            {r["series"] + f" {r['minutes']:g} min": round(r["glue5"], 1) for r in runs}
            | {"random": round(report["random"]["glue5"], 1)}
        )
    )


def plot(report: dict[str, Any], labels: dict[str, str], path: Path) -> None:
    """GLUE-5 (left, with random init's seeds band) and held-out MLM (right) against the minutes, one line
    per series in `labels` (series -> its legend)."""
    runs = report["runs"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for series, label in labels.items():
        rows = sorted((r for r in runs if r["series"] == series), key=lambda r: r["minutes"])
        x = [r["minutes"] for r in rows]
        ax1.errorbar(
            x,
            [r["glue5"] for r in rows],
            yerr=[r["glue5_std"] for r in rows],
            marker="o",
            capsize=3,
            label=label,
        )
        ax2.plot(x, [r["mlm_acc"] for r in rows], marker="o", label=label)
    random_label = "random init, same shape and fine-tuning"
    rnd = report["random"]
    ax1.axhline(rnd["glue5"], color="grey", linestyle="--", label=random_label)
    ax1.axhspan(rnd["glue5"] - rnd["glue5_std"], rnd["glue5"] + rnd["glue5_std"], color="grey", alpha=0.15)
    ax1.set(
        xlabel="pretraining minutes (one CPU core)", ylabel="GLUE-5 (3 seeds, mean +- sd)", title="GLUE-5"
    )
    ax2.set(xlabel="pretraining minutes (one CPU core)", ylabel="held-out MLM accuracy", title="held-out MLM")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
