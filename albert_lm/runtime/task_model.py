"""A model folder loaded with its task's head: a fine-tuned one as it was saved, or a pretrained encoder
with a fresh head sized for the task (the start of a fine-tuning run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSentenceSimilarity,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albert_lm.tasks import Task

HEAD_CLASSES = {
    "sequence_classification": AlbertForSequenceClassification,
    "question_answering": AlbertForQuestionAnswering,
    "multiple_choice": AlbertForMultipleChoice,
    "token_classification": AlbertForTokenClassification,
}


class FreshHead(Protocol):
    """What a fresh head on a pretrained encoder is made with: a fine-tuning run's dropouts and what its
    classifier reads (a `FinetuneConfig`, resolved, or a distillation's)."""

    @property
    def dropout(self) -> float | None: ...  # the encoder's, hidden and attention
    @property
    def classifier_dropout(self) -> float: ...
    @property
    def classifier_pooling(self) -> str | None: ...  # None: the folder's own
    @property
    def bi_encoder(self) -> bool: ...  # a pair regression scored by its texts' cosine


def load_for_task(task: Task, model_dir: str | Path, fresh: FreshHead | None) -> AlbertPreTrainedModel:
    """The task's head class on `model_dir`: with `fresh` (fine-tuning) a fresh head sized for the task;
    without it (evaluate, predict, export) the folder must hold trained weights of that head, or a random
    head would be scored or used as if it were the model."""
    from albert_lm.model.hf_interop import load_model

    bi = fresh.bi_encoder if fresh is not None else is_bi_encoder(model_dir)
    # A saved bi-encoder carries its scale in its weights; a fresh one takes the task's (STS-B's 0 to 5, or
    # the training scores' range of a regression on one's own data).
    if bi and (task.score_range is None if fresh is not None else task.problem_type != "regression"):
        raise ValueError(
            f"{model_dir}: a bi-encoder (AlbertForSentenceSimilarity) scores text pairs (STS-B, or "
            f"--task regression); {task.name} is not such a task"
        )
    cls = AlbertForSentenceSimilarity if bi else HEAD_CLASSES[task.head]
    overrides: dict[str, Any] = {}
    if fresh is not None:  # a fresh head on a pretrained encoder
        overrides.update(
            hidden_dropout_prob=fresh.dropout,
            attention_probs_dropout_prob=fresh.dropout,
            classifier_dropout_prob=fresh.classifier_dropout,
        )
        if fresh.classifier_pooling is not None:
            overrides["classifier_pooling"] = fresh.classifier_pooling
        if task.head == "question_answering":
            overrides["num_labels"] = 2
        elif task.head != "multiple_choice":
            overrides["num_labels"] = task.num_labels
            if task.labels:
                overrides["id2label"] = dict(enumerate(task.labels))
            if task.problem_type:
                overrides["problem_type"] = task.problem_type
    model = load_model(cls, model_dir, require_head=fresh is None, new_head=fresh is not None, **overrides)
    if bi and fresh is not None:  # a fresh similarity head: cosines mapped onto the task's scale
        assert task.score_range is not None  # refused above otherwise
        model.set_scale(*task.score_range)
    assert isinstance(model, AlbertPreTrainedModel)
    return model


def is_bi_encoder(model_dir: str | Path) -> bool:
    """Whether the folder's config.json names the bi-encoder head (a model fine-tuned with --bi-encoder)."""
    from albert_lm.model.config import AlbertConfig

    architectures = AlbertConfig.from_pretrained(model_dir).extra.get("architectures") or []
    return AlbertForSentenceSimilarity.__name__ in architectures
