"""`PretrainConfig`: every setting of one `albert pretrain` run, read from a JSON file plus overrides.

Defaults are the paper's (Section 4.1) and google-research's flags; docs/pretraining.md lists them.
Bad values fail at construction with a message that names the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from albert_lm.hub import resolve_model
from albert_lm.settings import (
    Precision,
    check_fields,
    check_ranges,
    device_name,
    merge_settings,
    parse_duration,
)


@dataclass
class PretrainConfig:
    """One pretraining run. Defaults are the paper's (Section 4.1) and google-research's flags."""

    HELP_GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "data and output": ("data", "output", "resume", "overwrite"),
        "the model": ("preset", "model_config", "init_from", "init_from_group0", "projection_init_std"),
        "how long": ("max_steps", "time_budget"),
        "batch and optimizer": (
            "batch_size",
            "gradient_accumulation_steps",
            "learning_rate",
            "warmup_steps",
            "poly_power",
            "optimizer",
            "weight_decay",
            "adam_beta1",
            "adam_beta2",
            "adam_epsilon",
            "bias_correction",
            "max_grad_norm",
        ),
        "objective": ("sop_weight", "masked_lm_prob", "max_predictions_per_seq", "dropout_off_step"),
        "machine": (
            "precision",
            "device",
            "torch_compile",
            "float8",
            "gradient_checkpointing",
            "dist_timeout_s",
            "seed",
        ),
        "checkpoints, evaluation and records": (
            "save_every",
            "keep_last",
            "eval_every",
            "eval_batches",
            "eval_text",
            "log_every",
            "tensorboard",
            "plot",
        ),
    }
    """the headed sections of `--help`, each field in one (tests/test_settings.py checks)"""

    data: str | None = None
    """folder from `albert data create` (holds spiece.model, train and eval splits)"""
    output: str = "runs/pretrain"
    """output folder"""
    preset: str = "albert-base"
    """model preset (see `albert params`)"""
    model_config: str | None = None
    """a model config.json, instead of a preset"""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    """AlbertConfig fields to change, e.g. {"num_hidden_layers": 24}"""
    init_from: str | None = None
    """warm start from a model folder, or hub id org/name[@rev] (depth growth)"""
    init_from_group0: bool = False
    """start every hidden group from group 0 (google-research's warm start)"""
    projection_init_std: float | None = None
    """std of the E -> H embedding projection at initialisation (default: the model's initializer_range,
    0.02, as google-research). With E << H the first layer then sees inputs of std ~0.02 * sqrt(E) while
    every later layer sees layer-normed ones; 1/sqrt(E) gives it unit-scale inputs too, which measurably
    speeds up early learning of small models (docs/notes/pretraining_plateau.md)"""
    max_steps: int = 125_000
    """optimizer steps (with --time-budget: the most it may take)"""
    time_budget: str | None = None
    """stop after this much training time (e.g. 10m, 1h, 1h30m), with the learning rate decayed to 0 over
    the budget instead of over max_steps: the schedule is complete whatever this machine's speed.
    Checkpointed and resumable as any run (the time spent is carried over); not bit-exact, as timing is
    not"""
    batch_size: int = 8
    """sequences per process and micro-step"""
    gradient_accumulation_steps: int = 1
    """micro-steps per optimizer step"""
    learning_rate: float = 0.00176
    """peak learning rate for your global batch (batch-size x accumulation x processes). The paper's
    0.00176 is for 4096; for a smaller global batch B scale it by sqrt(B / 4096) (LAMB's square-root
    rule; `albert pretrain --help` lists the figures, computed by `scaled_learning_rate`)"""
    warmup_steps: int = 3125
    """linear warmup steps"""
    poly_power: float = 1.0
    """power of the decay after warmup (1: linear to zero at max_steps)"""
    optimizer: Literal["lamb", "adamw"] = "lamb"
    """optimizer"""
    weight_decay: float = 0.01
    """decoupled weight decay (not on biases and layer norms)"""
    adam_beta1: float = 0.9
    """first-moment decay"""
    adam_beta2: float = 0.999
    """second-moment decay"""
    adam_epsilon: float = 1e-6
    """denominator epsilon"""
    bias_correction: bool = False
    """Adam bias correction in LAMB/AdamW (google-research: none)"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this"""
    sop_weight: float = 1.0
    """weight of the sentence-order (or NSP) loss; 0: masked LM only (SOP accuracy still reported)"""
    masked_lm_prob: float | None = None
    """mask this fraction of the training examples' tokens instead of the data's rate (dynamically
    masked data only); the held-out split keeps the data's rate, so held-out figures compare across runs"""
    max_predictions_per_seq: int | None = None
    """most masked tokens per training example with masked_lm_prob (default: the data's cap scaled by
    masked_lm_prob / the data's rate, rounded up)"""
    precision: Precision = "auto"
    """auto: bf16 where this machine computes it fast (a CUDA GPU with bf16, a CPU with AVX512-BF16 or
    AMX), else fp32; bf16 = autocast"""
    torch_compile: bool = False
    """compile the encoder with torch.compile (GPU): an albert-base step ran 1.58x the eager one on an
    H100, after 20-30 s of compiling that the time budget counts"""
    float8: bool = False
    """the encoder's linear layers in float8 (torchao; a GPU of compute capability 8.9+: Ada, Hopper),
    the rest under bf16 autocast; needs --torch-compile to be fast"""
    gradient_checkpointing: bool = False
    """recompute layers in backward (less memory, ~30% more time)"""
    dropout_off_step: int | None = None
    """switch dropout off from this step (paper Section 4.9)"""
    save_every: int = 5000
    """checkpoint every N steps"""
    keep_last: int = 5
    """the newest checkpoints kept (0: every one)"""
    eval_every: int = 0
    """evaluate on the held-out split every N steps (0: at the end only)"""
    eval_batches: int = 100
    """held-out batches per evaluation (google-research's max_eval_steps)"""
    eval_text: str | None = None
    """plain-text file for an out-of-domain MLM evaluation"""
    log_every: int = 10
    """log a line every N steps"""
    seed: int = 12345
    """seed of initialisation, data order and masking"""
    resume: bool = False
    """continue from the newest checkpoint in the output folder"""
    overwrite: bool = False
    """replace the run the output folder holds (refused otherwise)"""
    device: str = "auto"
    """auto: CUDA when there is one"""
    tensorboard: bool = True
    """write TensorBoard events"""
    plot: bool = True
    """draw training_curves.png at the end"""
    dist_timeout_s: int = 600
    """seconds a collective may wait before it fails instead of hanging"""

    def __post_init__(self) -> None:
        check_fields(self)  # types and choices (precision and optimizer are Literals)
        device_name(self.device)
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
        if self.time_budget is not None:
            try:
                parse_duration(self.time_budget)
            except ValueError as e:
                raise ValueError(f"PretrainConfig: time_budget: {e}") from None

    @staticmethod
    def scaled_learning_rate(global_batch: int) -> float:
        """The paper's peak rate (0.00176 at batch 4096) scaled to `global_batch` by LAMB's square-root
        rule (You et al., 2020)."""
        return 0.00176 * math.sqrt(global_batch / 4096)

    @property
    def time_budget_s(self) -> float | None:
        """`time_budget` in seconds, or None."""
        return None if self.time_budget is None else parse_duration(self.time_budget)

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
        cls, file: str | os.PathLike | None = None, recipe: dict[str, Any] | None = None, **overrides: Any
    ) -> PretrainConfig:
        """A recipe's "pretrain" section, then a JSON file of PretrainConfig fields (e.g. a run's
        pretrain_config.json), then `overrides`: each wins over the one before. A hub id in `init_from`
        becomes its cached snapshot folder here (fetched if missing), so the run reads a folder."""
        cfg = merge_settings(cls, overrides, file, recipe)
        if cfg.init_from:
            cfg.init_from = str(resolve_model(cfg.init_from, "--init-from"))
        return cfg
