"""What `albert finetune` reads and checks before anything is written: the tokenizer (the model's own,
or one of the same vocabulary), the device and the settings fitted to it and to the model, --bi-encoder's
conditions, and the task's training and evaluation sets."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.wordpiece import has_tokenizer
from albert_lm.kernels.device import pick_device, resolved_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.runtime.finetuned import read_saved_settings
from albert_lm.runtime.fits import check_tokenizer_fits
from albert_lm.tasks import Task
from albert_lm.tasks.task import Feature
from albert_lm.tasks.text_classification import UnseenLabelError
from albert_lm.training.evaluation import EvalSet, eval_sets_of, read_split, required
from albert_lm.training.finetune_config import FinetuneConfig

logger = logging.getLogger(__name__)


def check_bi_encoder(cfg: FinetuneConfig, task: Task) -> None:
    """--bi-encoder takes a pair regression (STS-B, or --task regression on pairs: its scale is then the
    training scores' range, `TextRegressionTask.fit_labels`), and no classifier options."""
    if not cfg.bi_encoder:
        return
    if task.score_range is None and task.problem_type != "regression":
        raise ValueError(
            f"--bi-encoder: for text pairs scored on a scale (stsb, or regression on your own pairs), not {cfg.task}"
        )
    for option, value in {
        "--exit-heads": cfg.exit_heads,
        "--classifier-pooling": cfg.classifier_pooling,
    }.items():
        if value:
            raise ValueError(
                f"{option}: not with --bi-encoder (its score is the texts' cosine; no classifier)"
            )


def _labels_as_trained(task: Task, latest: Path) -> None:
    """A resumed run's labels in the order of the checkpoint's head (its finetune_config.json): the same
    labels fitted by another albert-lm may come in another order (whole numbers are now sorted as numbers),
    and the head's rows must keep meaning what they were trained to."""
    saved = read_saved_settings(latest).get("labels")
    if saved and task.labels and sorted(saved) == sorted(task.labels) and tuple(saved) != task.labels:
        logger.info("--resume: the labels in the order %s was trained in", latest)
        task.labels = tuple(saved)


def finetune_tokenizer(cfg: FinetuneConfig) -> AlbertTokenizer:
    """The model's own tokenizer; --tokenizer only for a model without one (or the same vocabulary)."""
    own = Path(cfg.model)
    tokenizer = AlbertTokenizer.from_pretrained(cfg.tokenizer or cfg.model)
    if cfg.tokenizer and has_tokenizer(own):
        theirs = AlbertTokenizer.from_pretrained(cfg.model)
        if theirs.fingerprint != tokenizer.fingerprint:
            raise ValueError(
                f"--tokenizer {cfg.tokenizer}: --model {cfg.model} has its own tokenizer ({own}, "
                f"{theirs.vocab_size} pieces) and this is another vocabulary ({tokenizer.vocab_size} pieces); "
                "the model's embeddings belong to its own: drop --tokenizer"
            )
    config = AlbertConfig.from_pretrained(cfg.model)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"--tokenizer {cfg.tokenizer or cfg.model}: {tokenizer.vocab_size} pieces, but the model's embedding "
            f"has {config.vocab_size} rows: not the vocabulary the model was trained with; use its own tokenizer"
        )
    saved = read_saved_settings(cfg.model)  # a fine-tuned model, fine-tuned again: its settings, checked
    if saved:
        check_tokenizer_fits(tokenizer, cfg.model, config, saved.get("tokenizer_fingerprint"))
    return tokenizer


def fit_to_model_and_device(cfg: FinetuneConfig) -> torch.device:
    """The device to run on; fits `cfg` to it and to the model: max_seq_length at most the model's
    positions, precision `auto` resolved, fp16 only on CUDA."""
    model_config = AlbertConfig.from_pretrained(cfg.model)
    max_seq_length = required(cfg.max_seq_length, "max_seq_length")
    if max_seq_length > model_config.max_position_embeddings:
        logger.warning(
            "max_seq_length %d > the model's %d positions: using %d",
            max_seq_length,
            model_config.max_position_embeddings,
            model_config.max_position_embeddings,
        )
        cfg.max_seq_length = model_config.max_position_embeddings
    device = pick_device(cfg.device)
    cfg.precision = resolved_precision(cfg.precision, device)  # fp16 off CUDA refused there
    return device


def read_inputs(
    cfg: FinetuneConfig, task: Task, data: Path, tokenizer: AlbertTokenizer, latest: Path | None = None
) -> tuple[list[Feature], list[EvalSet]]:
    """Training features (the task's labels fitted on them; resumed from checkpoint `latest`, in the order
    its head was trained in) and every evaluation set, read and checked."""
    train_examples = read_split(task, data, "train", cfg.max_train_examples)
    if train_examples is None:
        names = sorted(p.name for p in data.iterdir())[:8] if data.is_dir() else []
        held = (
            f" (it holds {', '.join(names)}; docs/finetune.md names the files each task reads)"
            if names
            else ""
        )
        raise FileNotFoundError(f"no training file for {cfg.task} under {data}{held}")
    if data.is_file():
        logger.warning(
            "--data %s: one file is both the training and the dev set, so the dev scores are training "
            "scores; give a folder of train and dev files to score examples the model never saw",
            data,
        )
    task.fit_labels_of(train_examples, data)
    if latest is not None:
        _labels_as_trained(task, latest)
    if cfg.bi_encoder and task.score_range is None:  # a regression on single texts
        raise ValueError(
            f"--bi-encoder: --data {data} holds single texts, no second text (column "
            f"{cfg.text_pair_column!r}); a bi-encoder scores the cosine of a pair's two texts"
        )
    max_seq_length = required(cfg.max_seq_length, "max_seq_length")
    train_features = task.featurize(train_examples, tokenizer, max_seq_length, training=True)
    try:
        eval_sets = eval_sets_of(task, data, tokenizer, max_seq_length, cfg.max_eval_examples, test=True)
    except UnseenLabelError as e:  # a dev label training may have had past the cap: the message says so
        cap = cfg.max_train_examples
        if cap is None or len(train_examples) < cap:
            raise
        read = f"only the first {cap} training examples were read (--max-train-examples {cap})"
        raise UnseenLabelError(e.path, f"{e.message}; {read}", line=e.line) from None
    if all(s.split.startswith("test") for s in eval_sets):
        logger.warning("no dev file for %s under %s: the last checkpoint is kept", cfg.task, data)
    return train_features, eval_sets
