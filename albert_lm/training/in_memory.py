"""Fine-tuning on rows held in memory: `albert_lm.finetune_rows(model, train, dev, output)`.

The rows go to JSON Lines files in a folder beside `output` named by their content, and `albert
finetune`'s own code runs on them, so a model fine-tuned from Python is the same as one fine-tuned from
the command line (same defaults, checks, best checkpoint, model card). The folder is removed when the
run ends, except when a signal stopped it: then the same call with `resume=True` (or `albert finetune
--output OUTPUT --resume`) finds the same rows there, continues, and removes them once it has finished.
OUTPUT/best/finetune_config.json
records where the rows were, not the rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, atomic_write
from albert_lm.training.finetune_config import FinetuneConfig, rows_folder

__all__ = ["finetune_rows"]

Row = Mapping[str, Any] | Sequence[Any]
_IN_MEMORY_TASKS = ("classification", "regression", "token-classification")


def _as_dict(row: Row, task: str, n: int) -> dict[str, Any]:
    """A row as the JSON object the task reads: a mapping as it is; for classification, (text, label)
    or (text, text_pair, label); for token classification, (tokens, tags)."""
    if isinstance(row, Mapping):
        return dict(row)
    if isinstance(row, str) or not isinstance(row, Sequence):
        raise TypeError(f"row {n}: expected a dict or a tuple, got {type(row).__name__}")
    fields = (
        (("tokens", "tags"),)
        if task == "token-classification"
        else (("text", "label"), ("text", "text_pair", "label"))
    )
    if task == "classification" and len(row) == 2 and all(isinstance(x, list | tuple) for x in row):
        raise ValueError(
            f"row {n}: (a list of words, a list of tags): rows of a token classifier; pass "
            'task="token-classification"'
        )
    for names in fields:
        if len(row) == len(names):
            return dict(zip(names, row, strict=True))
    expected = " or ".join("(" + ", ".join(names) + ")" for names in fields)
    raise ValueError(f"row {n}: {len(row)} values; expected {expected}")


def _lines(rows: Sequence[Row], task: str, name: str) -> str:
    """The rows as the JSON Lines file the task reads."""
    if not rows:
        raise ValueError(f"no {name} rows: give at least one")
    return "".join(
        json.dumps(_as_dict(row, task, n), ensure_ascii=False) + "\n" for n, row in enumerate(rows, 1)
    )


def finetune_rows(
    model: str | os.PathLike,
    train: Sequence[Row],
    dev: Sequence[Row],
    output: str | os.PathLike,
    *,
    task: str = "classification",
    **settings: Any,
) -> dict[str, Any]:
    """Fine-tune `model` (a folder or hub id) on `train`, keep the best checkpoint on `dev`, in
    `output` (OUTPUT/best, as `albert finetune` writes it); returns the best dev metrics.

    Rows are dicts with your columns (`{"text": ..., "label": ...}`; name other columns with
    `text_column=...` etc.) or tuples: (text, label) or (text, text_pair, label) for classification,
    (tokens, tags) for token classification. `settings` are FinetuneConfig's fields (max_steps,
    epochs, learning_rate, batch_size, seed, ...).

    >>> finetune_rows("runs/pretrain", [("a fine film", "pos"), ("dull", "neg")] * 50,
    ...               [("great", "pos"), ("boring", "neg")], "runs/mine", epochs=3)  # doctest: +SKIP
    """
    from albert_lm.training.finetune import FinetuneStopped, finetune  # torch: only when a run starts

    if not isinstance(model, str | os.PathLike):
        raise TypeError(f"model: expected a model folder or hub id (a str or a path), got {model!r}")
    if task not in _IN_MEMORY_TASKS:
        raise ValueError(
            f"task {task!r}: rows in memory are for {', '.join(_IN_MEMORY_TASKS)}; GLUE, SQuAD and "
            "RACE read their own files (albert finetune --data)"
        )
    out = Path(output)
    files = {"train.jsonl": _lines(train, task, "train"), "dev.jsonl": _lines(dev, task, "dev")}
    digest = hashlib.sha256(json.dumps([task, files], sort_keys=True).encode()).hexdigest()[:16]
    rows = rows_folder(out, digest)  # the same rows, the same folder: a resume finds it
    made = not rows.exists()  # a stopped run's rows (or a run's still going) are never removed on a failure
    for name, text in files.items():
        atomic_write(rows / name, text)
    cfg = FinetuneConfig(task=task, model=str(model), data=str(rows), output=str(out), **settings)
    try:
        result = finetune(cfg)
    except FinetuneStopped:  # its checkpoint reads these rows again when it is resumed
        raise
    except InputError as e:  # a row of the lists, named by its list and position, not the scratch file
        if made:
            shutil.rmtree(rows, ignore_errors=True)
        if Path(e.path).parent != rows:
            raise
        raise InputError(f"{Path(e.path).stem} rows", e.message, e.line) from None
    except BaseException:
        if made:
            shutil.rmtree(rows, ignore_errors=True)
        raise
    shutil.rmtree(rows, ignore_errors=True)
    return result
