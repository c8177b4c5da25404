"""`PretrainConfig`: every setting of one `albert pretrain` run, read from a JSON file plus overrides.

Defaults are the paper's (Section 4.1) and google-research's flags; docs/pretraining.md lists them.
Bad values fail at construction with a message that names the field.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albert_lm.model.config import read_json_object


@dataclass
class PretrainConfig:
    """One pretraining run. Defaults are the paper's (Section 4.1) and google-research's flags."""

    data: str | None = None  # folder from `albert data create` (holds spiece.model, train and eval splits)
    output: str = "runs/pretrain"
    preset: str = "albert-base"
    model_config: str | None = None  # a model config.json; replaces `preset`
    model_overrides: dict[str, Any] = field(
        default_factory=dict
    )  # AlbertConfig fields, e.g. num_hidden_layers
    init_from: str | None = None  # warm start (depth growth) from a model folder
    init_from_group0: bool = False  # google-research: every hidden group starts from group 0
    max_steps: int = 125_000
    batch_size: int = 8  # per process and micro-step
    gradient_accumulation_steps: int = 1
    learning_rate: float = 0.00176  # the paper's rate at global batch 4096; see optim.scale_learning_rate
    warmup_steps: int = 3125
    poly_power: float = 1.0
    optimizer: str = "lamb"  # lamb | adamw
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-6
    bias_correction: bool = False  # google-research: none
    max_grad_norm: float = 1.0
    precision: str = "auto"  # auto (bf16 where it is fast, else fp32) | fp32 | bf16 (autocast)
    gradient_checkpointing: bool = False
    dropout_off_step: int | None = None
    save_every: int = 5000
    keep_last: int = 5
    eval_every: int = 0  # 0: evaluate at the end only
    eval_batches: int = 100  # google-research's max_eval_steps
    eval_text: str | None = None  # plain text for out-of-domain MLM evaluation
    log_every: int = 10
    seed: int = 12345
    resume: bool = False
    device: str = "auto"  # auto | cpu | cuda
    tensorboard: bool = True
    plot: bool = True
    dist_timeout_s: int = 600  # a collective waiting longer than this fails instead of hanging

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"PretrainConfig: {msg}")

        for name in ("max_steps", "batch_size", "gradient_accumulation_steps", "log_every", "eval_batches"):
            need(int(getattr(self, name)) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "save_every", "eval_every", "keep_last"):
            need(int(getattr(self, name)) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        need(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        need(
            self.precision in ("auto", "fp32", "bf16"),
            f"precision must be auto, fp32 or bf16, got {self.precision!r}",
        )
        need(self.optimizer in ("lamb", "adamw"), f"optimizer must be lamb or adamw, got {self.optimizer!r}")
        need(self.device in ("auto", "cpu", "cuda"), f"device must be auto, cpu or cuda, got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def load(cls, file: str | os.PathLike | None = None, **overrides: Any) -> PretrainConfig:
        """A JSON file of PretrainConfig fields (e.g. a run's pretrain_config.json), then `overrides`."""
        values: dict[str, Any] = {}
        if file is not None:
            path = Path(file)
            if not path.is_file():
                raise FileNotFoundError(f"no pretraining config file at {path}")
            values = read_json_object(path)
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
