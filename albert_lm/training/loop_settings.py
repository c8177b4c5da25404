"""The settings every training loop shares, declared once: `LoopSettings` (pretraining, fine-tuning and
both distillations: each checkpoints and resumes) and `ResumableSettings` (the loops run for a number of
steps or a time budget: pretraining and distillation). A command's settings class derives from one of
them and may redeclare a field only to change its default (tests/test_settings.py checks); each field says
its --help section, whether a resumed run may change it and whether a run's record keeps it
(`albert_lm.values.setting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from albert_lm.values import Precision, parse_duration, setting


@dataclass(kw_only=True)
class LoopSettings:
    """What every training loop takes."""

    weight_decay: float = setting(0.01, group="batch and optimizer")
    """decoupled weight decay (not on biases and layer norms)"""
    max_grad_norm: float = setting(1.0, group="batch and optimizer")
    """clip the global gradient norm to this"""
    precision: Precision = setting("auto", group="machine", resume=True)
    """auto: bf16 where this machine computes it fast (a CUDA GPU with bf16, a CPU with AVX512-BF16 or
    AMX), else fp32; bf16 = autocast; fp16 on CUDA only"""
    device: str = setting("auto", group="machine", resume=True, recorded=False)
    """auto: CUDA when there is one; cpu, cuda, cuda:1, ..."""
    seed: int = setting(12345, group="machine")
    """seed of initialisation, data order, masking and dropout"""
    overwrite: bool = setting(False, group="data and output", resume=True, recorded=False)
    """replace the run the output folder holds (refused otherwise)"""
    log_every: int = setting(50, group="evaluation and records", resume=True, recorded=False)
    """log a line every N steps"""
    tensorboard: bool = setting(True, group="evaluation and records", resume=True, recorded=False)
    """write TensorBoard events under OUTPUT/tensorboard"""
    plot: bool = setting(True, group="evaluation and records", resume=True, recorded=False)
    """draw training_curves.png"""
    eval_on_start: bool = setting(False, group="evaluation and records", resume=True, recorded=False)
    """evaluate once before the first step: the starting point of the curves (never kept as the best)"""
    resume: bool = setting(False, group="data and output", resume=True)
    """continue from the newest checkpoint in the output folder"""
    save_every: int = setting(500, group="checkpoints", resume=True, recorded=False)
    """checkpoint every N steps (and when stopped by a signal)"""
    keep_last: int = setting(1, group="checkpoints", resume=True)
    """the newest checkpoints kept (0: every one)"""


@dataclass(kw_only=True)
class ResumableSettings(LoopSettings):
    """What the loops run for a number of steps or a time budget take besides."""

    max_steps: int = setting(20_000, group="how long", resume=True)
    """optimizer steps (with --time-budget: the most it may take)"""
    time_budget: str | None = setting(None, group="how long")
    """stop after this much training time (e.g. 10m, 1h, 1h30m; none: no budget, clearing a recipe's), with
    the learning rate decayed to 0 over the budget instead of over max_steps: the schedule is complete
    whatever this machine's speed. Checkpointed and resumable as any run (the time spent is carried over);
    not bit-exact, as timing is not"""
    warmup_steps: int = setting(200, group="batch and optimizer")
    """linear warmup steps"""
    optimizer: Literal["lamb", "adamw"] = setting("adamw", group="batch and optimizer")
    """optimizer: albert-lm's LAMB or AdamW"""
    eval_every: int = setting(500, group="evaluation and records", resume=True)
    """evaluate every N steps (0: at the end only)"""

    def check_time_budget(self, where: str) -> None:
        """`time_budget` read: "none" (or "off") is no budget, which clears a recipe's; any other value is
        a duration with its unit (a ValueError naming `where` otherwise)."""
        if isinstance(self.time_budget, str) and self.time_budget.strip().lower() in ("none", "off"):
            self.time_budget = None
        if self.time_budget is not None:
            try:
                parse_duration(self.time_budget)
            except ValueError as e:
                raise ValueError(f"{where}: time_budget: {e}") from None

    @property
    def time_budget_s(self) -> float | None:
        """`time_budget` in seconds, or None."""
        return None if self.time_budget is None else parse_duration(self.time_budget)
