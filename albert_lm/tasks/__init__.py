"""Downstream tasks: readers, features, predictions and metrics for GLUE, SQuAD, RACE and users' own data.

`get_task(name, **options)` builds a task by its command-line name; options a task does not take are
ignored, so one fine-tuning config can carry them all.
"""

from __future__ import annotations

import inspect
from typing import Any

from albert_lm.tasks.task import HEADS, InputError, Task

GLUE_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
TASK_NAMES = (*GLUE_NAMES, "squad1", "squad2", "race", "classification", "regression", "token-classification")


def get_task(name: str, **options: Any) -> Task:
    if name in GLUE_NAMES:
        from albert_lm.tasks.glue import GlueTask

        return GlueTask(name)
    if name in ("squad1", "squad2"):
        from albert_lm.tasks.squad import SquadTask

        return SquadTask(version2=name == "squad2", **_accepted(SquadTask, options))
    if name == "race":
        from albert_lm.tasks.race import RaceTask

        return RaceTask(**_accepted(RaceTask, options))
    if name == "classification":
        from albert_lm.tasks.text_classification import TextClassificationTask

        return TextClassificationTask(**_accepted(TextClassificationTask, options))
    if name == "regression":
        from albert_lm.tasks.text_regression import TextRegressionTask

        return TextRegressionTask(**_accepted(TextRegressionTask, options))
    if name == "token-classification":
        from albert_lm.tasks.text_classification import TokenClassificationTask

        return TokenClassificationTask(**_accepted(TokenClassificationTask, options))
    raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASK_NAMES)}")


def _accepted(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(cls).parameters
    return {k: v for k, v in options.items() if k in params and k != "self" and v is not None}


__all__ = ["HEADS", "TASK_NAMES", "InputError", "Task", "get_task"]
