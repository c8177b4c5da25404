"""Users' own data: regression, one score per text or text pair, on any scale.

The files are read as text classification's (`albert_lm.tasks.text_classification`: CSV, TSV or JSON
Lines; --text-column, --text-pair-column, --label-column), the label column holding a number: a row whose
score is not a finite number is an error naming the file, the line and the column. The head is one output
trained on the squared error (transformers' `problem_type` "regression"). The scores' range in training
is recorded with a pair regression (`score_range`): a bi-encoder (--bi-encoder, pairs scored by their
texts' cosine) maps cosine 0 to 1 onto it, as STS-B's maps it onto 0 to 5.
Metrics: Pearson (which picks the best checkpoint), Spearman and the mean squared error, on the data's scale.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.files import InputError, atomic_write
from albert_lm.tasks import metrics
from albert_lm.tasks.task import Feature, TokenizerLike
from albert_lm.tasks.text_classification import TextClassificationTask, gold_field

logger = logging.getLogger(__name__)
# The standard deviation of training scores past which the head's scale is warned of: a 1-to-10 rating
# (about 2.5) barely learned where the same scores mapped to -1..1 did (Pearson 0.21 against 0.51)
WIDE = 2.0


@dataclass
class ScoredExample:
    text: str
    text_pair: str | None
    label: float | None
    line: int


class TextRegressionTask(TextClassificationTask):
    name = "regression"
    main_metric = "pearson"
    problem_type = "regression"

    def __init__(
        self,
        text_column: str = "text",
        text_pair_column: str | None = "text_pair",
        label_column: str = "label",
        score_range: Sequence[float] | None = None,
    ) -> None:
        super().__init__((), text_column, text_pair_column, label_column)
        self.score_range = (float(score_range[0]), float(score_range[1])) if score_range else None

    def read(self, path: Path, split: str) -> list[ScoredExample]:  # type: ignore[override]
        return [
            ScoredExample(ex.text, ex.text_pair, self._score(ex.label, path, ex.line), ex.line)
            for ex in super().read(path, split)
        ]

    def _score(self, label: str | None, path: Path, line: int) -> float | None:
        if label is None:  # a test split's row without one
            return None
        try:
            score = float(label)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(
                path,
                f"column {self.label_column!r}: expected a number (the score), got {label!r}; for labels "
                "that name classes use --task classification",
                line=line,
            )
        return score

    def fit_labels(self, train_examples: Sequence[ScoredExample]) -> None:  # type: ignore[override]
        """A regression needs two different scores in training at least. A pair regression records the
        scores' range (a bi-encoder's scale); as for classification, a model trained on single texts reads
        single texts."""
        scores = [ex.label for ex in train_examples if ex.label is not None]
        if not scores or min(scores) == max(scores):
            raise ValueError(
                f"column {self.label_column!r}: a regression needs at least 2 different scores in training, "
                f"found {sorted(set(scores))[:2]}"
            )
        spread = float(np.std(scores))
        if spread > WIDE:
            logger.warning(
                "column %r: the training scores spread wide (%g to %g, standard deviation %.2g): a head that "
                "starts near 0 learns a wide scale slowly, and a small model may answer little but the mean; "
                "scores scaled to about -1 to 1 (or 0 to 1) learn better (--bi-encoder, on pairs, maps its "
                "cosine onto the training range and needs no scaling)",
                self.label_column, min(scores), max(scores), spread,
            )  # fmt: skip
        if any(ex.text_pair is not None for ex in train_examples):
            self.score_range = (min(scores), max(scores))
        else:  # single texts: no bi-encoder, and no pair column read
            self.score_range, self.text_pair_column = None, None

    def recorded_columns(self) -> dict[str, Any]:
        """The columns, and the training scores' range (a bi-encoder's scale), for finetune_config.json."""
        return {**super().recorded_columns(), "score_range": list(self.score_range or ())}

    def featurize(self, examples, tokenizer: TokenizerLike, max_seq_length: int, training: bool = False):
        labelled = [ex.label is not None for ex in examples]
        unlabelled = [ScoredExample(ex.text, ex.text_pair, None, ex.line) for ex in examples]
        features: list[Feature] = super().featurize(unlabelled, tokenizer, max_seq_length, training)
        for feat, ex, has in zip(features, examples, labelled, strict=True):
            if has:
                feat["labels"] = float(ex.label)
        return features

    def predict(self, examples, features, outputs) -> list[float]:  # type: ignore[override]
        return [float(np.asarray(o["logits"]).reshape(-1)[0]) for o in outputs]

    def score(self, examples, predictions) -> dict[str, float]:
        gold = [float(ex.label) for ex in examples]
        pred = [float(p) for p in predictions]
        mse = float(np.mean((np.asarray(pred) - np.asarray(gold)) ** 2))
        return {**metrics.pearson_spearman(pred, gold), "mse": mse}

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        rows = [
            json.dumps(
                {"line": ex.line, "score": round(float(p), 6), **gold_field(ex.label)}, ensure_ascii=False
            )
            for ex, p in zip(examples, predictions, strict=True)
        ]
        return atomic_write(folder / f"{split}_predictions.jsonl", "\n".join(rows) + "\n")
