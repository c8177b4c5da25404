"""The general student: its shape (a preset, a config, --init-from's, or the default; the teacher's width
with --teacher-init), its tokenizer, and its first weights (random, --init-from's, or the teacher's)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.wordpiece import WordPieceTokenizer, has_tokenizer, is_wordpiece_folder
from albert_lm.distill.config import DEFAULT_STUDENT, GeneralDistillConfig
from albert_lm.distill.from_teacher import init_from_teacher, teacher_width
from albert_lm.distill.teacher import SentenceTeacher
from albert_lm.distill.teacher_files import teacher_folder
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import AlbertForMaskedLM, AlbertForPreTraining
from albert_lm.training.model_init import warm_start


def student_config(cfg: GeneralDistillConfig, vocab_size: int, teacher_config: Any = None) -> AlbertConfig:
    """The student's shape: --init-from's, --model-config's, --preset's, or DEFAULT_STUDENT; then
    --model-override; with --teacher-init, the teacher's width (`teacher_config`); the vocabulary is the
    tokenizer's."""
    if cfg.teacher_init != "no" and teacher_config is not None:
        width = teacher_width(teacher_config)
        clash = {k: v for k, v in cfg.model_overrides.items() if k in width and v != width[k]}
        if clash:
            raise ValueError(
                f"--teacher-init: the student takes the teacher's {width}; drop --model-override {clash}"
            )
        cfg = dataclasses.replace(cfg, model_overrides={**cfg.model_overrides, **width})
    if cfg.init_from:
        mc = AlbertConfig.from_pretrained(cfg.init_from, **cfg.model_overrides)
        if mc.vocab_size != vocab_size:
            raise ValueError(
                f"--init-from {cfg.init_from}: its embedding has {mc.vocab_size} rows, --tokenizer {cfg.tokenizer} "
                f"{vocab_size} pieces; use the model's own tokenizer (leave --tokenizer out)"
            )
    elif cfg.model_config:
        mc = AlbertConfig.from_pretrained(cfg.model_config, **cfg.model_overrides)
    elif cfg.preset:
        mc = AlbertConfig.from_preset(cfg.preset, **cfg.model_overrides)
    else:
        mc = AlbertConfig(**{**DEFAULT_STUDENT, "vocab_size": vocab_size, **cfg.model_overrides})
    mc.vocab_size = vocab_size
    if cfg.max_seq_length > mc.max_position_embeddings:
        raise ValueError(
            f"--max-seq-length {cfg.max_seq_length}: the student has {mc.max_position_embeddings} positions"
        )
    return mc


TEACHER_TOKENIZER = "teacher"  # --tokenizer teacher: the teacher's own WordPiece vocabulary


def student_tokenizer(cfg: GeneralDistillConfig) -> AlbertTokenizer:
    if cfg.tokenizer == TEACHER_TOKENIZER:
        folder = teacher_folder(cfg.teacher)
        if not is_wordpiece_folder(folder):
            raise ValueError(
                f"--tokenizer teacher: the teacher's folder {folder} holds no WordPiece tokenizer "
                "(tokenizer.json or vocab.txt of a BERT-style model); give the student its own --tokenizer"
            )
        return WordPieceTokenizer.from_pretrained(folder)
    if cfg.tokenizer:
        return AlbertTokenizer.from_pretrained(cfg.tokenizer)
    if cfg.init_from and has_tokenizer(cfg.init_from):
        return AlbertTokenizer.from_pretrained(cfg.init_from)
    raise ValueError(
        "no student tokenizer: give --tokenizer DIR (a spiece.model folder; make one with `albert tokenizer "
        "train --input FILES --output DIR`), --tokenizer teacher (the teacher's WordPiece vocabulary), or "
        "--init-from a model folder that holds its tokenizer"
    )


def build_student(
    cfg: GeneralDistillConfig,
    mc: AlbertConfig,
    latest: Path | None,
    teacher: SentenceTeacher,
    tokenizer: AlbertTokenizer,
) -> AlbertForPreTraining:
    if latest is not None:
        return AlbertForPreTraining.from_pretrained(latest)
    torch.manual_seed(cfg.seed)
    model = AlbertForPreTraining(mc)
    if cfg.init_from:
        warm_start(model, cfg.init_from)
    if cfg.teacher_init != "no":
        init_from_teacher(
            model, tokenizer, teacher.model.cpu(), teacher.tokenizer, cfg.teacher_init, cfg.teacher
        )
    return model


def trained_part(model: AlbertForPreTraining, mlm_weight: float) -> AlbertPreTrainedModel:
    """What a student folder keeps of `model`: the encoder, and the masked-LM head only where a masked-LM
    loss trained it. General distillation never trains the sentence-order head, nor the masked-LM head
    without --mlm-weight: kept, they would answer `albert fill-mask` with noise and make the card say
    fill-mask; left out, the folder is a feature extractor (AlbertModel) and fill-mask refuses it."""
    if not mlm_weight:
        return model.albert
    kept = AlbertForMaskedLM(model.config)
    kept.albert, kept.predictions = (
        model.albert,
        model.predictions,
    )  # the decoder stays tied to the embeddings
    return kept
