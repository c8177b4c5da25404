"""What both distillation modes share (`albert distill general`, `albert distill task`): a student learns
from a teacher's outputs, read from the teacher cache (`albert_lm.distill.cache`), in the one training
loop (`albert_lm.training.loop`).

A mode is a `Distiller`, an `Objective` of that loop: it gives the epoch's batches, a batch's loss and its
parts, its scores and the files that make a checkpoint or the final output its own. This module adds what
the modes share:
- the output folder: checked before any work (`check_output`), prepared under its lock (`prepare_output`);
- the optimizer (`albert_lm.training.optim`: AdamW or LAMB, with Adam's bias correction, since the
  student starts from scratch or from a checkpoint, not from google-research's recipe) and warmup then
  linear decay, over --max-steps or, with --time-budget, over the clock (`TimeBudgetFactor`);
- the position in the batches: each epoch's batches and each step's masking are functions of (seed,
  epoch, step), and the teacher's outputs come from the cache, so --resume continues exactly (CPU, fp32);
- the train record: the mean of each loss part over the steps since the last one.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from albert_lm.distill.config import RESUME_MAY_CHANGE, DistillCommon
from albert_lm.files import read_json_object
from albert_lm.kernels.device import autocast
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import run_folder
from albert_lm.training.clock import budget_seconds, check_budget_kept, say_budget_changed
from albert_lm.training.loop import LoopResult, Objective, Progress, train
from albert_lm.training.monitor import METRICS_FILE, plot_metrics
from albert_lm.training.optim import (
    build_optimizer,
    build_scheduler,
    build_time_budget_scheduler,
    fit_warmup,
    scheduled_warmup,
)
from albert_lm.training.run_folder import MODEL_FILES, RunKind

logger = logging.getLogger(__name__)

CONFIG_FILE = "distill_config.json"
WARMUP_FRACTION = 0.1  # of a run shorter than its --warmup-steps
# Files that mark a folder as a distillation run's (besides checkpoint-N folders).
DISTILLATION = RunKind(
    "distillation",
    (CONFIG_FILE, "model.safetensors", METRICS_FILE, "best", "eval_results.json"),
    CONFIG_FILE,
    RESUME_MAY_CHANGE,
    state_keys=("step", "epoch", "position", "optimizer", "scheduler", "ranks", "elapsed_s"),
    writes=MODEL_FILES,
    # a general student's projection and results (distill.cards.HEAD_FILE, general.RESULTS_FILE), a task
    # student's dev predictions
    outputs=("distill_head.safetensors", "distill_results.json", "predictions"),
)


class Distiller(Objective):
    """One mode of distillation, ready to train: its settings, output folder, device and precision, the
    student (`model`, what is saved), every module the optimizer steps (`module`), the length of its
    schedule in steps (without a time budget) and the names of its loss parts (`parts`)."""

    cfg: DistillCommon
    model: AlbertPreTrainedModel
    parts: tuple[str, ...]  # the loss parts `loss_parts` reports, "loss" (the total) among them
    kind = DISTILLATION
    name = "distill"
    warmup_fraction = WARMUP_FRACTION
    epoch, position = 0, 0
    _epoch_batches: tuple[int, list[list[int]]] | None = None

    @abc.abstractmethod
    def batches(self, epoch: int) -> list[list[int]]:
        """The epoch's batches of example indices: a function of (seed, epoch) only."""

    @abc.abstractmethod
    def loss_parts(self, batch: list[int], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """(the loss to minimise, its `parts` as numbers) of one batch at optimizer step `step`."""

    @abc.abstractmethod
    def scores(self, step: int) -> dict[str, Any]:
        """Held-out or dev metrics (their losses named *loss, scores otherwise)."""

    @abc.abstractmethod
    def complete(self, last: dict[str, Any]) -> dict[str, Any]:
        """The final output, after the last evaluation `last`; returns the run's result."""

    def own_state(self) -> dict[str, Any]:
        """The mode's own training state (tensors and plain values only)."""
        return {}

    def restore_own(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Back to `own_state()` as a checkpoint saved it."""

    # The loop's side of a mode (`albert_lm.training.loop.Objective`).
    @property
    def stats(self) -> tuple[str, ...]:  # type: ignore[override]
        return (*self.parts, "steps", "examples")

    @property
    def shown(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.parts

    def micro_batches(self, step: int) -> list[list[int]]:
        if self._epoch_batches is None or self._epoch_batches[0] != self.epoch:
            self._epoch_batches = (self.epoch, self.batches(self.epoch))
        if self.position >= len(self._epoch_batches[1]):
            self.epoch, self.position = self.epoch + 1, 0
            return self.micro_batches(step)
        self.position += 1
        return [self._epoch_batches[1][self.position - 1]]

    def loss(self, micro: list[int], step: int) -> tuple[torch.Tensor, torch.Tensor]:
        loss, parts = self.loss_parts(micro, step)
        values = [parts[k] for k in self.parts] + [1.0, len(micro)]
        return loss, torch.tensor(values, dtype=torch.float64, device=self.device)

    def record(self, sums: torch.Tensor, step: int) -> dict[str, float]:
        named = dict(zip(self.stats, sums.tolist(), strict=True))
        steps = max(named.pop("steps"), 1.0)
        return {
            **{k: named[k] / steps for k in self.parts},
            "epoch": self.epoch,
            "examples": named["examples"],
        }

    def evaluate(self, step: int) -> dict[str, dict[str, Any]]:
        return {"eval": self.scores(step)}

    def settings(self) -> dict[str, Any]:
        return self.cfg.to_dict()

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "mode": self.own_state()}

    def restore(self, state: dict[str, Any]) -> None:
        step = int(state["step"])
        if self.cfg.time_budget is None and self.total_steps < step:  # as pretraining refuses it
            raise ValueError(
                f"--resume: --max-steps {self.total_steps:,} is below step {step:,}, which the run in {self.out} "
                f"has reached: a resumed run cannot go back. Give --max-steps {step:,} or more"
            )
        latest = self.out / f"{ckpt.PREFIX}{step}"  # the checkpoint the loop restores
        before = read_json_object(latest / CONFIG_FILE, "distillation settings")
        if self.cfg.time_budget is not None and isinstance(before.get("time_budget"), str):
            say_budget_changed(
                "distill", before["time_budget"], self.cfg.time_budget, elapsed_s=float(state["elapsed_s"]),
                step=step, scheduler=self.scheduler, latest=latest, main=self.d.main,
            )  # fmt: skip
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.restore_own(state.get("mode", {}))

    def finish(self, evals: dict[str, dict[str, Any]], p: Progress) -> dict[str, Any]:
        return self.complete(evals.get("eval", {}))

    def plot(self) -> None:
        plot_metrics(self.out)

    def warmup_taken(self) -> int:
        """The warm-up the run's schedule has: --warmup-steps fitted to a shorter run (`fit_warmup`), or
        under a time budget the steps the clock set it to (what the cards report)."""
        return scheduled_warmup(self.scheduler, self.cfg.warmup_steps, self.total_steps, WARMUP_FRACTION)

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.precision)


# --------------------------------------------------------------------------- the output folder
def check_output(cfg: DistillCommon, inputs: dict[str, Any]) -> Path | None:
    """Before any work: the output is apart from the inputs, holds no other run (unless --resume or
    --overwrite) and, resumed, keeps its settings. Returns the checkpoint to resume from."""
    out = Path(cfg.output)
    # resumed, the newest whole checkpoint, each damaged one newer than it said
    find = ckpt.resume_checkpoint if cfg.resume else ckpt.latest_checkpoint
    latest = find(out, CONFIG_FILE) if out.is_dir() else None
    run_folder.check_output(
        DISTILLATION, out, inputs, resume=cfg.resume, overwrite=cfg.overwrite, latest=latest
    )
    if cfg.resume and latest is not None:
        # another --time-budget length may be given (said in `restore`), never one taken on or dropped
        budget = read_json_object(latest / CONFIG_FILE, "distillation settings").get("time_budget")
        check_budget_kept(budget, cfg.time_budget, latest, DISTILLATION.new_run_hint.format(latest=latest))
        same: dict[str, Any] = {"time_budget": budget} if cfg.time_budget and budget_seconds(budget) else {}
        run_folder.check_resume(DISTILLATION, latest, dataclasses.replace(cfg, **same))
    return latest if cfg.resume else None


def prepare_output(cfg: DistillCommon, latest: Path | None) -> Path:
    """The output folder, emptied under --overwrite, cleared of half-written checkpoints (the caller
    holds its lock)."""
    out = Path(cfg.output)
    if cfg.overwrite and out.is_dir():
        run_folder.remove_run(DISTILLATION, out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt.remove_stale_temporaries(out)
    if latest is None:  # a run killed before its first checkpoint left only logs: a run that never saved
        run_folder.clear_logs(DISTILLATION, out, cfg.resume)
    return out


# --------------------------------------------------------------------------- training
def distill(d: Distiller, latest: Path | None, on_step: Callable[[int], None] | None = None) -> LoopResult:
    """Train `d` from step 0 or from checkpoint `latest` in the one training loop (`on_step`: the loop's)."""
    cfg = d.cfg
    lr = float(getattr(cfg, "learning_rate"))  # noqa: B009 - each mode's own field and default
    d.optimizer = build_optimizer(d.module, cfg.optimizer, lr, cfg.weight_decay, bias_correction=True)
    if cfg.time_budget is not None:
        d.scheduler = build_time_budget_scheduler(d.optimizer, cfg.warmup_steps)
    else:
        warmup = fit_warmup(cfg.warmup_steps, d.total_steps, WARMUP_FRACTION, "distill")
        d.scheduler = build_scheduler(d.optimizer, warmup, d.total_steps)
        before = (
            read_json_object(latest / CONFIG_FILE, "distillation settings").get("max_steps")
            if latest
            else None
        )
        if isinstance(before, int) and before != cfg.max_steps:  # a run resumed to go on longer (or shorter)
            logger.warning(
                "--max-steps %d (the run was for %d): the learning-rate schedule is now a %d-step run's",
                cfg.max_steps, before, d.total_steps,
            )  # fmt: skip
    d.eval_every = cfg.eval_every
    return train(d, latest, on_step)
