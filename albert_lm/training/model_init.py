"""The model a pretraining run starts from: a checkpoint's, or a fresh one from a preset or a config.json,
optionally warm-started from a smaller model's folder (depth growth, `warm_start`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import torch
from torch import nn

from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)

_BLOCK = re.compile(r"^albert\.encoder\.(attention|ffn)\.(\d+)\.(.+)$")


def build_model_config(cfg: PretrainConfig, vocab_size: int | None, say: bool = True) -> AlbertConfig:
    """`cfg.model_config` (a config.json) or `cfg.preset`, with `cfg.model_overrides`; the tokenizer's
    vocabulary size wins over the configured one (logged where `say`: once a run, not by its checks)."""
    if cfg.model_config:
        mc = AlbertConfig.from_pretrained(cfg.model_config, **cfg.model_overrides)
    else:
        mc = AlbertConfig.from_preset(cfg.preset, **cfg.model_overrides)
    if vocab_size is not None and mc.vocab_size != vocab_size:
        if say:
            logger.info("vocab_size %d -> %d (the tokenizer's)", mc.vocab_size, vocab_size)
        mc.vocab_size = vocab_size
    return mc


def initial_model(
    cfg: PretrainConfig, vocab_size: int | None, checkpoint: Path | None
) -> AlbertForPreTraining:
    """The checkpoint's model when resuming; else a fresh one (`build_model_config`), warm-started from
    `cfg.init_from` if given. Draws its initialisation from torch's global generator: seed it first."""
    if checkpoint is not None:
        return AlbertForPreTraining.from_pretrained(checkpoint)
    model = AlbertForPreTraining(build_model_config(cfg, vocab_size))
    if cfg.projection_init_std is not None:
        projection = model.albert.encoder.embedding_projection
        if not isinstance(projection, nn.Linear):
            raise ValueError(
                f"projection_init_std: the model has no E -> H projection (embedding_size "
                f"{model.config.embedding_size} = hidden_size {model.config.hidden_size}); leave it unset"
            )
        nn.init.normal_(projection.weight, 0.0, cfg.projection_init_std)
    if cfg.init_from:
        warm_start(model, cfg.init_from, cfg.init_from_group0)
    return model


@torch.no_grad()
def warm_start(model: nn.Module, source: str | os.PathLike, init_from_group0: bool = False) -> list[str]:
    """Copy the weights of the model folder `source` into `model`, which may be deeper or have more groups.

    The paper warm-starts deeper models from shallower ones (Section 4.x, "we ... initialize from the
    6-layer model" style depth growth); with all layers shared (one group) the weights carry over as they
    are: only `num_hidden_layers` differs. With several hidden groups, google-research's
    `init_from_group0` starts every group from group 0 of the source: our block b (inner layer
    b % inner_group_num of group b // inner_group_num) takes source block b % inner_group_num.
    Returns the names left at their fresh initialisation (logged).
    """
    src = AlbertForPreTraining.from_pretrained(source).state_dict()
    inner = int(getattr(model.config, "inner_group_num", 1))
    fresh: list[str] = []
    for name, tensor in model.state_dict().items():
        origin = name
        m = _BLOCK.match(name)
        if init_from_group0 and m is not None:
            origin = f"albert.encoder.{m.group(1)}.{int(m.group(2)) % inner}.{m.group(3)}"
        if origin in src and src[origin].shape == tensor.shape:
            tensor.copy_(src[origin])
        else:
            fresh.append(name)
    if fresh:
        logger.warning(
            "warm start from %s: %d tensors keep their fresh initialisation: %s",
            source,
            len(fresh),
            ", ".join(fresh[:8]) + (" ..." if len(fresh) > 8 else ""),
        )
    else:
        # debug only: the run has said "--init-from: local folder ..." (or the hub snapshot) once already
        logger.debug("warm start: every tensor copied from %s", source)
    return fresh
