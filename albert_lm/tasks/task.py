"""What the fine-tuning loop needs to know about a task, and nothing more.

A task reads its files into examples, turns examples into model features (token ids plus targets),
turns the model's outputs back into predictions, scores them with the official metric, and writes them
in the format its benchmark expects. The loop in `albert_lm.training.finetune` is the same for every task; only
the head (sequence classification, question answering, multiple choice, token classification) differs.

Input-file errors are `ValueError`s that name the file, the line and the field (`InputError`, defined in
`albert_lm.files` and re-exported here), raised before anything is written.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from albert_lm.data.truncation import truncate_pair_from_end
from albert_lm.files import InputError as InputError  # re-exported: albert_lm.tasks.task.InputError

HEADS = ("sequence_classification", "question_answering", "multiple_choice", "token_classification")

# Keys of a feature dict that become model inputs; everything else is bookkeeping for predictions.
MODEL_KEYS = ("input_ids", "token_type_ids", "labels", "start_positions", "end_positions")

Feature = dict[str, Any]


class TokenizerLike(Protocol):
    """The part of `albert_lm.AlbertTokenizer` that feature conversion uses."""

    cls_token_id: int
    sep_token_id: int
    pad_token_id: int
    unk_token_id: int

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...
    def tokenize(self, text: str) -> list[str]: ...
    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]: ...


class Task(abc.ABC):
    """One downstream task. Subclasses set the class attributes and implement the five steps."""

    name: str
    head: str
    main_metric: str  # the metric that picks the best checkpoint on dev (higher is better)
    # Evaluation sets: (metric-name suffix, split name); MNLI has matched ("") and mismatched ("_mm").
    eval_splits: tuple[tuple[str, str], ...] = (("", "dev"),)
    labels: tuple[str, ...] = ()  # label names for classification heads, in id order
    problem_type: str | None = None
    # A regression's gold range, where the task fixes one (STS-B: 0 to 5); a pair task with one can be
    # fine-tuned as a bi-encoder, its cosines mapped onto this range.
    score_range: tuple[float, float] | None = None

    @property
    def num_labels(self) -> int:
        return max(len(self.labels), 1)

    @abc.abstractmethod
    def split_file(self, data: Path, split: str) -> Path | None:
        """The file holding `split` ("train", "dev", ...) under `data` (a folder or a file); None if absent."""

    @abc.abstractmethod
    def read(self, path: Path, split: str) -> list[Any]:
        """Examples of one file; `split` "test" allows missing labels."""

    @abc.abstractmethod
    def featurize(
        self, examples: Sequence[Any], tokenizer: TokenizerLike, max_seq_length: int, training: bool = False
    ) -> list[Feature]:
        """Model features; each carries `example_index` (features > examples for SQuAD windows)."""

    @abc.abstractmethod
    def predict(
        self, examples: Sequence[Any], features: Sequence[Feature], outputs: Sequence[dict[str, np.ndarray]]
    ) -> Any:
        """Predictions from the per-feature model outputs (logits, trimmed to the feature's length)."""

    @abc.abstractmethod
    def score(self, examples: Sequence[Any], predictions: Any) -> dict[str, float]:
        """The official metrics under their usual names."""

    @abc.abstractmethod
    def write_predictions(self, examples: Sequence[Any], predictions: Any, folder: Path, split: str) -> Path:
        """Write `split`'s predictions under `folder` in the benchmark's format (atomically)."""

    def test_splits(self) -> tuple[str, ...]:
        """Unlabelled splits to predict after training when their file exists."""
        return ("test",)

    def fit_labels(self, train_examples: Sequence[Any]) -> None:  # noqa: B027 - optional hook
        """Learn the label set from training data (generic tasks); fixed-label tasks ignore this."""

    def fit_labels_of(self, train_examples: Sequence[Any], data: Any) -> None:
        """`fit_labels`, its refusal (one label, say) named with the --data the examples came from."""
        try:
            self.fit_labels(train_examples)
        except ValueError as e:
            raise ValueError(f"--data {data}: {e}") from None

    def recorded_columns(self) -> dict[str, Any]:
        """Settings of the columns as fitted to the training data (`fit_labels`), for finetune_config.json."""
        return {}


def pair_features(
    tokenizer: TokenizerLike, a: list[int], b: list[int] | None, max_seq_length: int
) -> tuple[list[int], list[int]]:
    """[CLS] a [SEP] (b [SEP]) with BERT's longest-first truncation (`_truncate_seq_pair`: one token at
    a time from the end of the longer side); returns (input_ids, token_type_ids)."""
    budget = max_seq_length - (3 if b is not None else 2)
    a, b = truncate_pair_from_end(a, b, budget, "longest_first")
    ids = [tokenizer.cls_token_id, *a, tokenizer.sep_token_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, tokenizer.sep_token_id]
        types += [1] * (len(b) + 1)
    return ids, types
