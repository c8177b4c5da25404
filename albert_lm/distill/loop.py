"""The loop both distillation modes run (`albert distill general`, `albert distill task`): a student
learns from a teacher's outputs, read from the teacher cache (`albert_lm.distill.cache`).

A mode is a `Distiller`: it gives the epoch's batches, a batch's loss, its evaluation and the files that
make a checkpoint or the final output its own. This module does the rest, as `albert pretrain` does it:
- the optimizer (`albert_lm.training.optim`: AdamW or LAMB, with Adam's bias correction, since the
  student starts from scratch or from a checkpoint, not from google-research's recipe) and warmup then
  linear decay, over --max-steps or, with --time-budget, over the clock (`TimeBudgetFactor`);
- checkpoints `OUTPUT/checkpoint-STEP/` written atomically (`albert_lm.training.checkpoint`): the
  student in transformers' layout, and `training_state.pt` (optimizer, schedule, batch position, RNG
  states, the mode's own state) read back with torch.load(weights_only=True);
- SIGTERM / SIGINT: the step finishes, a checkpoint is saved, the run returns interrupted (the command
  exits 143); --resume continues exactly (CPU, fp32): each epoch's batches and each step's masking are
  functions of (seed, epoch, step), and the teacher's outputs come from the cache;
- metrics.jsonl (train records every --log-every steps, evaluations every --eval-every and at the end),
  TensorBoard events and training_curves.png (`albert_lm.training.monitor`); the time, progress bar and
  pace as every loop keeps them (`albert_lm.training.clock`).
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albert_lm.distill.config import RESUME_MAY_CHANGE, DistillCommon
from albert_lm.files import clear_folder, describe_folder
from albert_lm.kernels.device import autocast
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import run_folder
from albert_lm.training.clock import LoopClock
from albert_lm.training.distributed import StopFlag
from albert_lm.training.monitor import METRICS_FILE, MetricsLog, draw_curves
from albert_lm.training.optim import (
    build_optimizer,
    build_scheduler,
    build_time_budget_scheduler,
    clip_by_global_norm,
    fit_warmup,
)
from albert_lm.training.run_folder import RunKind

logger = logging.getLogger(__name__)

CONFIG_FILE = "distill_config.json"
WARMUP_FRACTION = 0.1  # of a run shorter than its --warmup-steps
# Files that mark a folder as a distillation run's (besides checkpoint-N folders).
DISTILLATION = RunKind(
    "distillation",
    (CONFIG_FILE, "model.safetensors", METRICS_FILE, "best", "eval_results.json"),
    CONFIG_FILE,
    RESUME_MAY_CHANGE,
    state_keys=("step", "epoch", "position", "optimizer", "scheduler", "rng", "elapsed_s"),
)


@dataclass
class DistillResult:
    output: Path
    step: int
    interrupted: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    signum: int | None = None


class Distiller(abc.ABC):
    """One mode of distillation, ready to train: its settings, output folder, device and precision, the
    student (`model`, what is saved) and every module the optimizer steps (`trainable`)."""

    cfg: DistillCommon
    out: Path
    device: torch.device
    precision: str  # fp32 or bf16, resolved
    model: AlbertPreTrainedModel
    trainable: nn.Module
    total_steps: int  # the schedule's length in steps (without a time budget)

    @abc.abstractmethod
    def batches(self, epoch: int) -> list[list[int]]:
        """The epoch's batches of example indices: a function of (seed, epoch) only."""

    @abc.abstractmethod
    def loss(self, batch: list[int], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """(the loss to minimise, its parts as numbers) of one batch at optimizer step `step`."""

    @abc.abstractmethod
    def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out or dev metrics (their losses named *loss, scores otherwise)."""

    @abc.abstractmethod
    def write_files(self, folder: Path) -> None:
        """The mode's files beside the weights (tokenizer, settings, heads) in a checkpoint folder."""

    @abc.abstractmethod
    def finish(self, last: dict[str, Any]) -> dict[str, Any]:
        """The final output, after the last evaluation `last`; returns the run's result."""

    def state(self) -> dict[str, Any]:
        """The mode's own training state (tensors and plain values only)."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Back to `state()` as a checkpoint saved it."""

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.precision)


# --------------------------------------------------------------------------- the output folder
def check_output(cfg: DistillCommon, inputs: dict[str, Any]) -> Path | None:
    """Before any work: the output is apart from the inputs, holds no other run (unless --resume or
    --overwrite) and, resumed, keeps its settings. Returns the checkpoint to resume from."""
    out = Path(cfg.output)
    latest = ckpt.latest_checkpoint(out) if out.is_dir() else None
    run_folder.check_output(
        DISTILLATION, out, inputs, resume=cfg.resume, overwrite=cfg.overwrite, latest=latest
    )
    if cfg.resume and latest is not None:
        run_folder.check_resume(DISTILLATION, latest, cfg)
    return latest if cfg.resume else None


def prepare_output(cfg: DistillCommon, latest: Path | None) -> Path:
    """The output folder, emptied under --overwrite, cleared of half-written checkpoints (the caller
    holds its lock)."""
    out = Path(cfg.output)
    if cfg.overwrite and out.is_dir() and any(out.iterdir()):
        logger.info("--overwrite: removing %s from %s", describe_folder(out), out)
        clear_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt.remove_stale_temporaries(out)
    if cfg.resume and latest is None:
        logger.warning("--resume: no checkpoint in %s, starting from step 0", out)
    return out


# --------------------------------------------------------------------------- the loop
@dataclass
class _Loop:
    """Where the run stands: optimizer, schedule, position in the batches, the sums since the last log."""

    d: Distiller
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    metrics: MetricsLog = field(init=False)
    step: int = 0
    epoch: int = 0
    position: int = 0
    elapsed_s: float = 0.0
    sums: dict[str, float] = field(default_factory=dict)
    seen: int = 0  # examples since the last log
    compute_s: float = 0.0
    _epoch_batches: tuple[int, list[list[int]]] | None = None

    def next_batch(self) -> list[int]:
        if self._epoch_batches is None or self._epoch_batches[0] != self.epoch:
            self._epoch_batches = (self.epoch, self.d.batches(self.epoch))
        batches = self._epoch_batches[1]
        if self.position >= len(batches):
            self.epoch, self.position = self.epoch + 1, 0
            return self.next_batch()
        self.position += 1
        return batches[self.position - 1]


def _optimization(d: Distiller) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    cfg = d.cfg
    lr = float(getattr(cfg, "learning_rate"))  # noqa: B009 - each mode's own field and default
    optimizer = build_optimizer(d.trainable, cfg.optimizer, lr, cfg.weight_decay, bias_correction=True)
    if cfg.time_budget is not None:
        return optimizer, build_time_budget_scheduler(optimizer, cfg.warmup_steps)
    warmup = fit_warmup(cfg.warmup_steps, d.total_steps, WARMUP_FRACTION, "distill")
    return optimizer, build_scheduler(optimizer, warmup, d.total_steps)


def _restore(loop: _Loop, latest: Path) -> None:
    state = run_folder.read_state(DISTILLATION, latest)
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scheduler.load_state_dict(state["scheduler"])
    loop.step, loop.epoch, loop.position = state["step"], state["epoch"], state["position"]
    loop.elapsed_s = float(state["elapsed_s"])
    loop.sums, loop.seen = dict(state.get("sums", {})), int(state.get("seen", 0))
    loop.d.restore(state.get("mode", {}))
    ckpt.restore_rng_state(state["rng"])
    logger.info("resumed from %s (step %d)", latest, loop.step)


def _save(loop: _Loop) -> None:
    d = loop.d
    state = {
        "step": loop.step, "epoch": loop.epoch, "position": loop.position, "optimizer": loop.optimizer.state_dict(),
        "scheduler": loop.scheduler.state_dict(), "rng": ckpt.capture_rng_state(), "elapsed_s": loop.elapsed_s,
        "sums": dict(loop.sums), "seen": loop.seen, "mode": d.state(),
    }  # fmt: skip
    path = ckpt.save_checkpoint(d.out, loop.step, d.model, state, None, d.write_files, d.cfg.keep_last)
    logger.info("saved %s", path)


def _take_step(loop: _Loop) -> float:
    """One optimizer step; its loss parts join the sums of the next train record. Returns the gradient
    norm (an inf or NaN one stops the run before anything is saved)."""
    d, t0 = loop.d, time.perf_counter()
    batch = loop.next_batch()
    d.trainable.train()
    with d.autocast():
        loss, parts = d.loss(batch, loop.step)
    loss.backward()
    params = [p for p in d.trainable.parameters() if p.requires_grad]
    grad_norm = float(clip_by_global_norm(params, d.cfg.max_grad_norm))
    loop.sums["lr"] = loop.optimizer.param_groups[0]["lr"]
    loop.optimizer.step()
    loop.scheduler.step()
    loop.optimizer.zero_grad(set_to_none=True)
    for k, v in parts.items():
        loop.sums[k] = loop.sums.get(k, 0.0) + v
    loop.sums["n"] = loop.sums.get("n", 0.0) + 1
    loop.seen += len(batch)
    loop.step += 1
    loop.compute_s += time.perf_counter() - t0
    if not torch.isfinite(torch.tensor(grad_norm)):
        raise ValueError(
            f"step {loop.step}: the loss or the gradient is not finite (gradient norm {grad_norm}); stopped "
            "without saving: lower --learning-rate or raise --warmup-steps and start again"
        )
    return grad_norm


def _log(loop: _Loop, bar: Any) -> dict[str, Any]:
    n = max(loop.sums.pop("n", 1.0), 1.0)
    lr = loop.sums.pop("lr", 0.0)
    record: dict[str, Any] = {k: v / n for k, v in loop.sums.items()}
    record.update(lr=lr, examples_per_s=loop.seen / max(loop.compute_s, 1e-9), epoch=loop.epoch)
    loop.metrics.write({"step": loop.step, "split": "train", **record, "elapsed_s": round(loop.elapsed_s, 1)})
    logger.info(
        "step %d | %s | lr %.3g | %.0f examples/s",
        loop.step,
        " | ".join(f"{k} {v:.4g}" for k, v in record.items() if k not in ("lr", "examples_per_s", "epoch")),
        lr,
        record["examples_per_s"],
    )
    bar.set_postfix(step=loop.step, loss=f"{record.get('loss', 0.0):.4f}")
    loop.sums, loop.seen, loop.compute_s = {}, 0, 0.0
    return record


def _evaluate(loop: _Loop) -> dict[str, Any]:
    results = loop.d.evaluate(loop.step)
    loop.metrics.write({"step": loop.step, "split": "eval", **results, "elapsed_s": round(loop.elapsed_s, 1)})
    logger.info("eval at step %d: %s", loop.step, json.dumps(results, sort_keys=True))
    return results


def train(d: Distiller, latest: Path | None) -> DistillResult:
    """Train `d` from step 0 or from `latest`; evaluate, save and finish (module docstring)."""
    optimizer, scheduler = _optimization(d)
    loop = _Loop(d, optimizer, scheduler)
    if latest is not None:
        _restore(loop, latest)
    # Records past the checkpoint (written after it by the run that was stopped) are dropped.
    loop.metrics = MetricsLog(d.out, loop.step, d.cfg.tensorboard)
    stop = StopFlag()
    stop.install()
    try:
        return _run(loop, stop)
    finally:
        stop.restore()
        loop.metrics.close()
        if d.cfg.plot and (d.out / METRICS_FILE).is_file():
            plot_run(d.out)


def _run(loop: _Loop, stop: StopFlag) -> DistillResult:
    d, cfg = loop.d, loop.d.cfg
    clock = LoopClock(
        "distill",
        step=loop.step,
        total_steps=d.total_steps,
        elapsed_s=loop.elapsed_s,
        budget=cfg.time_budget,
        budget_s=cfg.time_budget_s,
        scheduler=loop.scheduler,
        warmup_fraction=WARMUP_FRACTION,
        cpu=d.device.type == "cpu",
    )
    last: dict[str, Any] = {}
    try:
        done = clock.spent()
        while loop.step < d.total_steps and not done:
            _take_step(loop)
            # The run's time: its steps and its evaluations and saves (counted with the next step).
            done = clock.tick(loop.step)
            loop.elapsed_s = clock.elapsed_s
            stopping = stop.signum is not None
            end = stopping or done or loop.step >= d.total_steps
            if loop.step % cfg.log_every == 0 or end:
                _log(loop, clock.bar)
            if cfg.eval_every and loop.step % cfg.eval_every == 0 and not end:
                last = _evaluate(loop)
            if stopping or (cfg.save_every and loop.step % cfg.save_every == 0) or end:
                _save(loop)
            if stopping:
                clock.stopped(stop.signum, loop.step)
                return DistillResult(d.out, loop.step, True, last, stop.signum)
    finally:
        clock.close()
    clock.finished(loop.step)
    last = _evaluate(loop)
    return DistillResult(d.out, loop.step, False, d.finish(last))


def plot_run(out: Path) -> Path | None:
    """training_curves.png: the train and held-out losses, each score evaluated, the learning rate."""
    records = [json.loads(ln) for ln in (out / METRICS_FILE).read_text().splitlines() if ln.strip()]
    train = [r for r in records if r.get("split") == "train"]
    evals = [r for r in records if r.get("split") == "eval"]
    panels: dict[str, dict[str, list[tuple[float, float]]]] = {
        "loss": {"train": [(r["step"], r["loss"]) for r in train if "loss" in r],
                 "eval": [(r["step"], r["loss"]) for r in evals if "loss" in r]},
    }  # fmt: skip
    scores = sorted(
        {
            k
            for r in evals
            for k, v in r.items()
            if isinstance(v, float)
            and not k.endswith("loss")
            and k != "elapsed_s"
            and not k.startswith("teacher_")
        }
    )
    for key in scores[:3]:
        panels[key] = {"eval": [(r["step"], r[key]) for r in evals if key in r]}
    panels["learning rate"] = {"train": [(r["step"], r["lr"]) for r in train if "lr" in r]}
    return draw_curves(out / "training_curves.png", panels)
