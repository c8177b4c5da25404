"""A fine-tuned model folder's finetune_config.json, as the code that uses the model reads it: the task it
was fine-tuned on and how that task's text becomes features (lengths, SQuAD's windows, the columns of
your own data), its label names and the fingerprint of its tokenizer, each value checked before use.

The file holds the whole fine-tuning run's settings (`albert_lm.training.finetune_config.FinetuneConfig`,
which declares the fields of `SavedTask` alike); what only training reads of it (learning rate, steps,
...) is checked where training reads it."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, read_json_object
from albert_lm.tasks import TASK_NAMES
from albert_lm.values import check_fields, check_ranges, json_repr

SAVED_FILE = "finetune_config.json"  # a fine-tuned model's settings, written beside its weights
# What finetune_config.json holds besides the settings; the folder fields are where the run read and
# wrote, not settings of the model, and are not checked.
SAVED_EXTRAS = ("labels", "tokenizer_fingerprint", "model_given")
RUN_FOLDERS = ("model", "data", "output")


@dataclass(kw_only=True)
class SavedTask:
    """The settings of a fine-tuned model that its readers use: the task and the reading of its text
    (the fields of FinetuneConfig of the same names, types and defaults)."""

    task: str = "classification"  # absent: predict reads the task from config.json
    eval_batch_size: int | None = None
    max_seq_length: int | None = None
    doc_stride: int = 128
    max_query_length: int = 64
    n_best: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float | None = None
    max_qa_length: int = 128
    text_column: str = "text"
    text_pair_column: str | None = "text_pair"
    label_column: str = "label"
    tokens_column: str = "tokens"
    tags_column: str = "tags"

    def __post_init__(self) -> None:
        check_fields(self)
        if self.task not in TASK_NAMES:
            raise ValueError(f"unknown task {self.task!r}; choose one of: {', '.join(TASK_NAMES)}")
        lengths = ("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "max_qa_length")
        check_ranges(
            self,
            at_least_one=("eval_batch_size", *lengths, "n_best"),
            batch=("eval_batch_size",),
            length=lengths,
            count=("n_best",),
        )
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise ValueError(
                f"max_seq_length {self.max_seq_length}: expected at least 8 ([CLS], [SEP] and some text)"
            )


def read_saved_settings(folder: str | Path) -> dict[str, Any]:
    """The finetune_config.json of a fine-tuned model folder ({} where there is none), its task settings
    checked as `SavedTask`'s fields (type and range), `labels` as a list of label names and
    `tokenizer_fingerprint` as a string: an error names the file and the field, so a value written by
    hand never reaches the code that uses it (a string max_seq_length compared with a number, a string
    of labels read as one label per character). Other keys are kept and left to their readers."""
    path = Path(folder) / SAVED_FILE
    if not path.is_file():
        return {}
    saved = read_json_object(path, "fine-tuning settings")
    known = {f.name for f in dataclasses.fields(SavedTask)}
    try:
        SavedTask(**{k: v for k, v in saved.items() if k in known})
    except ValueError as e:
        raise InputError(path, str(e)) from None
    labels = saved.get("labels") or []
    if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
        raise InputError(path, f"labels: expected a list of label names, got {json_repr(labels)}")
    for name in SAVED_EXTRAS[1:]:
        if saved.get(name) is not None and not isinstance(saved[name], str):
            raise InputError(path, f"{name}: expected a string, got {json_repr(saved[name])}")
    return saved


def null_threshold(folder: Path, saved: dict[str, Any]) -> float | None:
    """A SQuAD 2.0 model's null score threshold (no answer where null score - best span score exceeds
    it): the one its fine-tuning was given (`saved`, its finetune_config.json), else the one it chose on
    dev (eval_results.json); None where neither says (a model fine-tuned elsewhere, or not SQuAD 2.0)."""
    if saved.get("null_score_diff_threshold") is not None:
        return float(saved["null_score_diff_threshold"])
    results = folder / "eval_results.json"
    if not results.is_file():
        return None
    chosen = read_json_object(results, "evaluation results").get("null_score_diff_threshold")
    if chosen is not None and (
        isinstance(chosen, bool) or not isinstance(chosen, int | float) or not math.isfinite(chosen)
    ):
        raise InputError(
            results, f"null_score_diff_threshold: expected a finite number, got {json.dumps(chosen)}"
        )
    return chosen
