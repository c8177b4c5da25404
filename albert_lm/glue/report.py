"""What `albert glue` reports: per task the best rate's mean and spread over seeds, the majority-class
baseline, GLUE-5, and the table it prints (marked where the scores are over one seed or a dev cap)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, read_json_object
from albert_lm.glue.config import GLUE5, GlueConfig, run_folder
from albert_lm.settings import json_repr, seed_list
from albert_lm.tasks import get_task, metrics


def majority_score(task: str, data: Path, cap: int | None = None) -> float:
    """The task's metric for always guessing the most frequent dev label (a constant: MCC and Pearson 0)."""
    if GLUE5[task][1] in ("mcc", "pearson"):
        return 0.0
    guess = metrics.constant_score(GLUE5[task][1], _dev_labels(task, data)[:cap])
    assert guess is not None  # accuracy, on a dev file of labels
    return guess[0]


def _dev_labels(task: str, data: Path) -> list[Any]:
    t = get_task(task)
    path = t.split_file(data / GLUE5[task][0], "dev")
    assert path is not None
    return [ex.label for ex in t.read(path, "dev")]


def summarize(cfg: GlueConfig, jobs: list[tuple[str, float, int]]) -> dict[str, Any]:
    """Per task: every rate's seed scores, the chosen rate, its mean and std, the dev examples scored (of
    those in dev.tsv); GLUE-5 and its baseline; what the scores are over (seeds, a dev cap)."""
    rows: dict[str, Any] = {}
    for task in dict.fromkeys(t for t, _, _ in jobs):
        metric = GLUE5[task][1]
        by_rate: dict[str, list[float]] = {}
        for t, rate, seed in jobs:
            if t == task:
                score = _score(run_folder(cfg, t, rate, seed) / "eval_results.json", metric)
                by_rate.setdefault(f"{rate:g}", []).append(score)
        best = max(by_rate, key=lambda r: statistics.fmean(by_rate[r]))
        scores, dev = by_rate[best], len(_dev_labels(task, Path(cfg.data)))
        rows[task] = {
            "metric": metric, "learning_rate": float(best), "mean": statistics.fmean(scores),
            "std": statistics.stdev(scores) if len(scores) > 1 else 0.0, "scores": scores,
            "by_learning_rate": by_rate,
            "majority": majority_score(task, Path(cfg.data), cfg.max_eval_examples),
            "dev_examples": min(dev, cfg.max_eval_examples or dev), "dev_examples_in_file": dev,
        }  # fmt: skip
        if cfg.for_task(task).teachers is not None:  # the teacher's dev score, as its first run recorded it
            first = next(j for j in jobs if j[0] == task)
            teacher = _score(run_folder(cfg, *first) / "eval_results.json", f"teacher_{metric}")
            rows[task].update(teacher=teacher, kept=rows[task]["mean"] / teacher if teacher > 0 else None)
    average: dict[str, Any] = {
        "name": "GLUE-5" if set(rows) == set(GLUE5) else f"average of {len(rows)}",
        "score": 100 * statistics.fmean(r["mean"] for r in rows.values()),
        "majority": 100 * statistics.fmean(r["majority"] for r in rows.values()),
    }
    if all("teacher" in r for r in rows.values()):  # every task distilled: the teachers' average beside it
        average["teacher"] = 100 * statistics.fmean(r["teacher"] for r in rows.values())
        average["kept"] = average["score"] / average["teacher"] if average["teacher"] > 0 else None
    return {"settings": asdict(cfg), "tasks": rows, "average": average, "evaluation": _evaluation(cfg, rows)}


def _evaluation(cfg: GlueConfig, rows: dict[str, Any]) -> dict[str, Any]:
    """What the scores are over: the seeds (one: no spread) and the dev cap, where it kept fewer examples
    than a task's dev.tsv holds (the scores are then not GLUE's); "note" says both as the table does."""
    seeds = len(cfg.seed_list())
    capped = any(r["dev_examples"] < r["dev_examples_in_file"] for r in rows.values())
    notes = [f"capped: {cfg.max_eval_examples} dev examples per task"] if capped else []
    notes += ["1 seed, no spread"] if seeds == 1 else []
    cap = cfg.max_eval_examples if capped else None
    return dict(seeds=seeds, spread=seeds > 1, capped=capped, max_eval_examples=cap, note="; ".join(notes))


def _score(results: Path, metric: str) -> float:
    """The dev score `metric` of a finished run's eval_results.json; a file edited or damaged since is
    refused naming it and the metric."""
    value = read_json_object(results, "evaluation results").get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(
            results, f"{metric}: expected the run's dev score (a number), got {json_repr(value)}"
        )
    return float(value)


def format_table(result: dict[str, Any]) -> str:
    """The table `albert glue` prints: one seed shows its score alone (no spread), and a dev cap is said
    above it (read from the settings for a glue_results.json written before "evaluation" was)."""
    ev = result.get("evaluation") or {"max_eval_examples": result["settings"].get("max_eval_examples")}
    seeds = ev.get("seeds") or len(seed_list(result["settings"]["seeds"]))
    cap = ev["max_eval_examples"]
    note = f"capped: {cap} dev examples per task (--max-eval-examples): not GLUE's dev scores"
    lines = [note] if cap else []
    lines += _training_cap(result)
    title = f"dev x100, mean +- std of {seeds} seeds" if seeds > 1 else "dev x100, 1 seed, no spread"
    avg = result["average"]
    teacher = any("teacher" in r for r in result["tasks"].values())  # distilled: the teachers' scores too
    head = f"{'task':<6} {'metric':<9} {title:>32} {'lr':>8} {'majority':>9}"
    lines.append(head + (f" {'teacher':>8}" if teacher else ""))
    for task, r in result["tasks"].items():
        score = f"{100 * r['mean']:.1f}" + (f" +- {100 * r['std']:.1f}" if seeds > 1 else "")
        line = f"{GLUE5[task][0]:<6} {r['metric']:<9} {score:>32} {r['learning_rate']:>8g} {100 * r['majority']:>9.1f}"
        lines.append(line + (f" {100 * r['teacher']:>8.1f}" if "teacher" in r else ""))
    line = f"{avg['name']:<16} {avg['score']:>32.1f} {'':>8} {avg['majority']:>9.1f}"
    lines.append(line + (f" {avg['teacher']:>8.1f}" if "teacher" in avg else ""))
    if teacher and "teacher" not in avg:
        lines.append("rows without a teacher: fine-tuned on the gold labels")
    if avg.get("kept") is not None:
        lines.append(f"the student keeps {100 * avg['kept']:.1f}% of its teachers' {avg['name']}")
    stsb = (result["settings"].get("task_settings") or {}).get("stsb") or {}
    if stsb.get("bi_encoder", result["settings"].get("bi_encoder")) and "stsb" in result["tasks"]:
        lines.append("STS-B: a bi-encoder (--bi-encoder), the cosine of the two sentences' mean vectors")
    return "\n".join(lines)


def _training_cap(result: dict[str, Any]) -> list[str]:
    """The line saying how many training examples each task's runs read at most (--max-train-examples,
    the suite's or a task's own), where any is capped: such scores are not the full training set's."""
    settings = result["settings"]
    own = settings.get("task_settings") or {}
    caps = {
        t: (own.get(t) or {}).get("max_train_examples", settings.get("max_train_examples"))
        for t in result["tasks"]
    }
    if not any(caps.values()):
        return []
    if len(set(caps.values())) == 1:
        return [f"at most {next(iter(caps.values()))} training examples per task (--max-train-examples)"]
    each = ", ".join(f"{GLUE5[t][0]} {n or 'all'}" for t, n in caps.items())
    return [f"training examples per task at most (--max-train-examples): {each}"]
