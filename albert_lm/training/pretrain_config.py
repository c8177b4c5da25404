"""`PretrainConfig`: every setting of one `albert pretrain` run, read from a JSON file plus overrides.

Defaults are the paper's (Section 4.1) and google-research's flags; docs/pretraining.md lists them.
Bad values fail at construction with a message that names the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from albert_lm.hub import resolve_model
from albert_lm.model.config import PRESETS, known_overrides
from albert_lm.settings import (
    check_fields,
    check_ranges,
    device_name,
    merge_settings,
)
from albert_lm.training.loop_settings import ResumableSettings
from albert_lm.values import documented, setting


@documented
@dataclass
class PretrainConfig(ResumableSettings):
    """One pretraining run. Defaults are the paper's (Section 4.1) and google-research's flags."""

    log_every: int = setting(10, group="evaluation and records", resume=True, recorded=False)
    max_steps: int = setting(125_000, group="how long", resume=True)
    warmup_steps: int = setting(3125, group="batch and optimizer")
    optimizer: Literal["lamb", "adamw"] = setting("lamb", group="batch and optimizer")
    eval_every: int = setting(0, group="evaluation and records", resume=True)
    save_every: int = setting(5000, group="checkpoints", resume=True, recorded=False)
    keep_last: int = setting(5, group="checkpoints", resume=True)

    data: str | None = setting(None, group="data and output", resume=True, recorded=False)
    """folder from `albert data create` (holds spiece.model, train and eval splits)"""
    output: str = setting("runs/pretrain", group="data and output", resume=True, recorded=False)
    """output folder"""
    preset: str = setting("albert-base", group="the model")
    """model preset (see `albert params`)"""
    model_config: str | None = setting(None, group="the model")
    """a model config.json, instead of a preset"""
    model_overrides: dict[str, Any] = setting(factory=dict, group="the model")
    """AlbertConfig fields to change, e.g. {"num_hidden_layers": 24}"""
    init_from: str | None = setting(None, group="the model")
    """warm start from a model folder, or hub id org/name[@rev] (what the other commands call --model;
    depth growth)"""
    init_from_group0: bool = setting(False, group="the model")
    """start every hidden group from group 0 (google-research's warm start)"""
    projection_init_std: float | None = setting(None, group="the model")
    """std of the E -> H embedding projection at initialisation (default: the model's initializer_range,
    0.02, as google-research). With E << H the first layer then sees inputs of std ~0.02 * sqrt(E) while
    every later layer sees layer-normed ones; 1/sqrt(E) gives it unit-scale inputs too, which measurably
    speeds up early learning of small models (docs/notes/pretraining_plateau.md)"""
    batch_size: int = setting(8, group="batch and optimizer")
    """sequences per process and micro-step"""
    gradient_accumulation_steps: int = setting(1, group="batch and optimizer")
    """micro-steps per optimizer step"""
    learning_rate: float = setting(0.00176, group="batch and optimizer")
    """peak learning rate for your global batch (batch-size x accumulation x processes). The paper's
    0.00176 is for 4096; for a smaller global batch B scale it by sqrt(B / 4096) (LAMB's square-root
    rule; `albert pretrain --help` lists the figures, computed by `scaled_learning_rate`)"""
    poly_power: float = setting(1.0, group="batch and optimizer")
    """power of the decay after warmup (1: linear to zero at max_steps)"""
    adam_beta1: float = setting(0.9, group="batch and optimizer")
    """first-moment decay"""
    adam_beta2: float = setting(0.999, group="batch and optimizer")
    """second-moment decay"""
    adam_epsilon: float = setting(1e-6, group="batch and optimizer")
    """denominator epsilon"""
    bias_correction: bool = setting(False, group="batch and optimizer")
    """Adam bias correction in LAMB/AdamW (google-research: none)"""
    sop_weight: float = setting(1.0, group="objective")
    """weight of the sentence-order (or NSP) loss; 0: masked LM only (SOP accuracy still reported)"""
    masked_lm_prob: float | None = setting(None, group="objective")
    """mask this fraction of the training examples' tokens instead of the data's rate (dynamically
    masked data only); the held-out split keeps the data's rate, so held-out figures compare across runs"""
    max_predictions_per_seq: int | None = setting(None, group="objective")
    """most masked tokens per training example with masked_lm_prob (default: the data's cap scaled by
    masked_lm_prob / the data's rate, rounded up)"""
    torch_compile: bool = setting(False, group="machine")
    """compile the encoder with torch.compile (GPU): an albert-base step ran 1.58x the eager one on an
    H100, after 20-30 s of compiling that the time budget counts"""
    float8: bool = setting(False, group="machine")
    """the encoder's linear layers in float8 (torchao, the extra albert-lm[float8]; a GPU of compute
    capability 8.9+: Ada, Hopper), the rest under bf16 autocast; needs --torch-compile to be fast"""
    gradient_checkpointing: bool = setting(False, group="machine", resume=True)
    """recompute layers in backward (less memory, ~30% more time)"""
    dropout_off_step: int | None = setting(None, group="objective")
    """switch dropout off from this step (paper Section 4.8)"""
    eval_batches: int = setting(100, group="evaluation and records", resume=True)
    """held-out batches per evaluation (google-research's max_eval_steps)"""
    eval_text: str | None = setting(None, group="evaluation and records", resume=True)
    """plain-text file for an out-of-domain MLM evaluation"""
    dist_timeout_s: int = setting(600, group="machine", resume=True)
    """seconds a collective may wait before it fails instead of hanging"""

    def __post_init__(self) -> None:
        check_fields(self)  # types and choices (precision and optimizer are Literals)
        device_name(self.device)
        if self.preset not in PRESETS:  # here, not when the run starts (a Python caller's typo)
            raise ValueError(f"PretrainConfig: preset {self.preset!r}: expected one of {', '.join(PRESETS)}")
        known_overrides(self.model_overrides)
        if self.precision == "fp16":
            raise ValueError(
                "PretrainConfig: precision fp16 is not offered for pretraining (LAMB runs without "
                "loss scaling); use bf16 (auto picks it where it is fast) or fp32"
            )
        check_ranges(
            self,
            "PretrainConfig",
            at_least_one=(
                "max_steps",
                "batch_size",
                "gradient_accumulation_steps",
                "log_every",
                "eval_batches",
                "max_predictions_per_seq",
            ),
            non_negative=(
                "warmup_steps",
                "save_every",
                "eval_every",
                "keep_last",
                "weight_decay",
                "sop_weight",
                "dropout_off_step",
            ),
            positive=(
                "learning_rate",
                "adam_epsilon",
                "max_grad_norm",
                "poly_power",
                "dist_timeout_s",
                "projection_init_std",
            ),
            fraction=("adam_beta1", "adam_beta2", "masked_lm_prob"),
            batch=("batch_size", "gradient_accumulation_steps"),
            length=("max_predictions_per_seq",),
            steps=(
                "max_steps",
                "warmup_steps",
                "save_every",
                "eval_every",
                "log_every",
                "dropout_off_step",
                "dist_timeout_s",
            ),
            count=("eval_batches", "keep_last"),
            seed=("seed",),
        )
        self.check_time_budget("PretrainConfig")

    @staticmethod
    def scaled_learning_rate(global_batch: int) -> float:
        """The paper's peak rate (0.00176 at batch 4096) scaled to `global_batch` by LAMB's square-root
        rule (You et al., 2020)."""
        return 0.00176 * math.sqrt(global_batch / 4096)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def parse_overrides(pairs: list[str]) -> dict[str, Any]:
        """["num_hidden_layers=24", "hidden_act=gelu"] -> model_overrides; values read as JSON if they are."""
        out: dict[str, Any] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"--model-override takes KEY=VALUE, got {pair!r}")
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
            except (RecursionError, ValueError):  # nested too deeply, or a number too long to read
                raise ValueError(f"--model-override {key}: not a readable value: {value[:40]!r}...") from None
        return out

    @classmethod
    def load(
        cls,
        file: str | os.PathLike | None = None,
        recipe: dict[str, Any] | None = None,
        recipe_name: str = "",
        **overrides: Any,
    ) -> PretrainConfig:
        """A recipe's "pretrain" section (`recipe_name`: its name or file, for messages), then a JSON file
        of PretrainConfig fields (e.g. a run's pretrain_config.json), then `overrides`: each wins over the
        one before. A hub id in `init_from` becomes its cached snapshot folder here (fetched if missing),
        so the run reads a folder."""
        cfg = merge_settings(cls, overrides, file, recipe, recipe_name)
        if cfg.init_from:
            cfg.init_from = str(resolve_model(cfg.init_from, "--init-from"))
        return cfg
