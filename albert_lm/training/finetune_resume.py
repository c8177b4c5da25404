"""A fine-tuning run's folder met again: a finished run named as one, a resume in a moved folder (the rows
`finetune_rows` wrote beside it, made again there) and a resume given another length (its schedule
rebuilt for the new one, the length checked against the step reached).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from albert_lm.files import InputError
from albert_lm.runtime.finetuned import SAVED_FILE
from albert_lm.training.finetune_config import (
    DEFAULT_WARMUP_FRACTION,
    FinetuneConfig,
    is_rows_folder,
    schedule,
)


def moved_rows(saved: Mapping[str, Any], now: FinetuneConfig) -> list[str]:
    """["data"] where a resumed run's --data is the rows folder of `finetune_rows` beside its output, made
    again beside the output's new name (the run's folder moved or copied): the same rows, by their digest,
    not another data set."""
    before, output = saved.get("data"), saved.get("output")
    if not isinstance(before, str) or not isinstance(output, str) or not is_rows_folder(before, output):
        return []
    digest = Path(before).name.rsplit(".rows-", 1)[1]
    same = is_rows_folder(now.data, now.output) and Path(now.data).name.endswith(f".rows-{digest}")
    return ["data"] if same else []


def resumed_schedule(
    cfg: FinetuneConfig, num_train_features: int, latest: Path | None
) -> tuple[int, int, int, int | None]:
    """`schedule`, and of a run resumed from checkpoint `latest` the length the run had where --max-steps
    or --epochs changed it (else None). The learning-rate schedule is then the new length's, its warm-up
    the run's (begun, or done), fitted to the new length where it is as long."""
    from albert_lm.files import read_json_object

    total, warmup, per_epoch = schedule(cfg, num_train_features)
    if latest is None:
        return total, warmup, per_epoch, None
    saved = read_json_object(latest / SAVED_FILE, "fine-tuning settings")
    try:
        had = dataclasses.replace(cfg, max_steps=saved.get("max_steps"), epochs=saved.get("epochs"))
    except ValueError as e:
        raise InputError(latest / SAVED_FILE, str(e)) from None
    before, run_warmup, _ = schedule(had, num_train_features, say=False)
    if before == total:
        return total, warmup, per_epoch, None
    if cfg.warmup_steps is None:  # the task's fraction of the old length: the warm-up the run has had
        from albert_lm.training.optim import fit_warmup

        warmup = fit_warmup(run_warmup, total, DEFAULT_WARMUP_FRACTION, "finetune")
    return total, warmup, per_epoch, before


def finished_run(out: Path) -> str | None:
    """A finished fine-tuning run in `out` in words, "a finished fine-tuning run (step 120, dev accuracy
    0.61)" (its metrics.jsonl, eval_results.json and best/finetune_config.json), or None where it holds
    none (or what it holds cannot be read: the refusal then names the files)."""
    from albert_lm.files import read_json_object
    from albert_lm.tasks import get_task

    try:
        best = read_json_object(out / "eval_results.json", "evaluation results")
        saved = read_json_object(out / "best" / SAVED_FILE, "fine-tuning settings")
        metric = get_task(saved["task"], labels=saved.get("labels") or ()).main_metric
        lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    steps = [r.get("step") for r in map(_record, lines)]
    last = max((s for s in steps if isinstance(s, int)), default=best.get("step"))
    value = best.get(metric)
    if not isinstance(value, int | float):
        return f"a finished fine-tuning run (step {last})"
    at = "" if best.get("step") == last else f" at step {best.get('step')}"
    return (
        f"a finished fine-tuning run (step {last}, {'' if not at else 'best '}dev {metric} {value:.4g}{at})"
    )


def _record(line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:  # a line cut short by a kill
        return {}
    return record if isinstance(record, dict) else {}


def check_new_length(step: int, total: int, before: int, latest: Path) -> None:
    """A resumed fine-tuning given another length (`total` steps, by --max-steps or --epochs; `before`, the
    run's) at `step`: refused where it cannot train on (below the step reached, or at it where the run had
    not finished: it would end there, its rate not decayed), else said."""
    if total < step or (total == step and before > step):
        raise ValueError(
            f"--resume: the run in {latest} has reached step {step} of its {before}; --max-steps or --epochs "
            f"make it {total} steps, so it would {'go back' if total < step else 'end there without training'}: "
            f"give --max-steps above {step}, or drop --max-steps and --epochs to finish its {before} steps"
        )
    logging.getLogger("albert_lm.training.finetune").warning(
        "--resume: %d steps (the run was for %d): the learning-rate schedule is now a %d-step run's, from "
        "step %d on", total, before, total, step,
    )  # fmt: skip
