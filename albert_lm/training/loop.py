"""The one training loop: pretraining, fine-tuning and both distillers are `Objective`s it trains.

An objective says what is learned: the micro-batches of each step, a micro-batch's loss and the sums it
reports (`stats`), the train record made of those sums, its evaluation, the files of a checkpoint and of
the finished run, and its own state. `train` does the rest, the same way for all of them:
- a step (`train_step`): each micro-batch's forward under autocast and backward, the loss divided by their
  number (DDP synchronizes on the last one only, so W processes x K micro-batches take the mean of W * K
  gradients), fp16 loss scaling where it runs, clipping by the global norm, the optimizer and scheduler
  steps; then one non-finite check (`check_finite`): an inf or NaN gradient norm (or loss) stops the run
  before anything is saved, so the newest checkpoint stays the last good state;
- one cadence: evaluate once before the first step with --eval-on-start, log every --log-every steps,
  evaluate every `eval_every`, save every --save-every (objectives with checkpoints), and all three at the
  end; a stop by the clock (--time-budget) or by SIGTERM / SIGINT (objectives with checkpoints: every rank
  saves after the same step, and the run returns interrupted; an evaluation due at that step is the
  resumed run's first work) is an end;
- one log line, `step N | loss ... | lr ... | tok/s ...`, and one record format in metrics.jsonl (split
  "train" and one split per evaluation set), TensorBoard events, training_curves.png at the end
  (`albert_lm.training.monitor`); the time, progress bar and pace (`albert_lm.training.clock`);
- save and restore through the run folder (`albert_lm.training.checkpoint`, `run_folder`): the weights in
  transformers' layout, the optimizer, scheduler, step, time spent, each rank's RNG states and unlogged
  sums, and the objective's own state; a resumed run continues bit for bit (CPU, fp32).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from albert_lm.kernels.device import autocast
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.runtime.run import EvaluationStopped, stoppable
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import run_folder
from albert_lm.training.clock import LoopClock
from albert_lm.training.distributed import DistInfo, StopFlag, all_reduce, gather, slowest
from albert_lm.training.loop_settings import LoopSettings
from albert_lm.training.monitor import MetricsLog, format_line
from albert_lm.training.optim import NonFiniteLossError, clip_by_global_norm
from albert_lm.training.run_folder import RunKind

logger = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where a run stands: steps taken, time spent (all sessions), the sums since the last train record."""

    sums: torch.Tensor  # (len(objective.stats),) float64
    step: int = 0
    elapsed_s: float = 0.0
    compute_s: float = 0.0  # time in steps since the last train record
    metrics: MetricsLog | None = None  # rank 0's
    logged: dict[str, float] = field(default_factory=dict)  # the newest train record
    # A signal stopped the run at an evaluation step before it evaluated (a stop never waits for one): the
    # checkpoint says so, and the resumed run evaluates first, as the run never stopped would have.
    eval_due: bool = False


@dataclass
class LoopResult:
    """What `pretrain`, `distill_general` and `distill_task` return: the output folder, the step it
    reached, whether a signal stopped it (then `signum`, and the run resumes with `resume=True`), and
    the final evaluation's metrics."""

    output: Path
    step: int
    interrupted: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    signum: int | None = None  # the signal that stopped it (interrupted runs)


@dataclass
class StepStats:
    """What one optimizer step reports."""

    stats: torch.Tensor  # (len(stats),) float64: the sums over this rank's micro-batches
    grad_norm: torch.Tensor  # 0-d: the global gradient norm before clipping
    lr: float  # the learning rate the step used
    loss: torch.Tensor  # 0-d: the step's loss (detached)


class Objective(abc.ABC):
    """What a loop trains (module docstring). Set by each objective: its name (the progress bar's), the
    settings, output folder, device, precision and process group; `model`, the module a checkpoint saves;
    `module`, the one that runs the loss and whose parameters are trained (`model` itself, a ModuleDict with
    heads beside it, or DDP around it); optimizer and scheduler; the run's length in steps and how often it
    evaluates; the names of the sums its `loss` reports; the run kind of its checkpoints (None: it has none).
    """

    name: str
    cfg: LoopSettings
    out: Path
    device: torch.device
    precision: str  # resolved: fp32, bf16 or fp16
    model: AlbertPreTrainedModel
    module: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    total_steps: int
    eval_every: int
    stats: tuple[str, ...]
    kind: RunKind | None = None
    d: DistInfo = DistInfo()
    shown: tuple[str, ...] = ("loss",)  # the train record's numbers on the log line
    warmup_fraction: float = 0.1  # of a time budget too short for the warm-up (`LoopClock`)
    slow_advice: str | None = None  # what a CPU run of many hours is told to do instead
    ends_by: str | None = None  # what ends the run by its steps, in words (`LoopClock`): its step limit
    again: str = "continue with --resume"  # the way on, said when a signal stops the run

    @abc.abstractmethod
    def micro_batches(self, step: int) -> Sequence[Any]:
        """This rank's micro-batches for optimizer step `step` (0-based), moving the objective's position."""

    @abc.abstractmethod
    def loss(self, micro: Any, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(the loss to minimise, the `stats` sums of this micro-batch) at optimizer step `step`."""

    @abc.abstractmethod
    def record(self, sums: torch.Tensor, step: int) -> dict[str, float]:
        """A train record at `step` from all ranks' `stats` sums since the last one; the count the rate reads
        (`tokens` or `examples`) included. May refuse sums that show the run learns nothing."""

    @abc.abstractmethod
    def evaluate(self, step: int) -> dict[str, dict[str, Any]]:
        """{split: metrics} of an evaluation (all ranks take part); {} where there is nothing to evaluate."""

    def write_files(self, folder: Path, p: Progress) -> None:  # noqa: B027 - optional hook
        """The objective's files beside the weights of a checkpoint (tokenizer, settings, heads)."""

    def settings(self) -> dict[str, Any] | None:
        """The settings a checkpoint records (the run kind's settings file), or None."""
        return None

    def state(self) -> dict[str, Any]:
        """The objective's own training state (its data position; tensors and plain values only)."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Back to `state()` as a checkpoint saved it (the whole saved state is given)."""

    def last_good(self) -> str:
        """Where the last good state is, for the line of a run stopped by a non-finite loss."""
        if self.kind is None:
            return "nothing was saved"
        newest = ckpt.latest_checkpoint(self.out)
        if newest is None:
            return "no checkpoint was saved yet"
        again = self.kind.new_run_hint.format(latest=newest)
        return f"the newest checkpoint, {newest}, is the last good state ({again})"

    @abc.abstractmethod
    def finish(self, evals: dict[str, dict[str, Any]], p: Progress) -> dict[str, Any]:
        """The finished run's files after the final evaluation `evals`; returns the run's result."""

    def plot(self) -> None:  # noqa: B027 - optional hook
        """training_curves.png from metrics.jsonl (rank 0, with --plot, also after an error)."""


@dataclass(frozen=True)
class Cadence:
    """What follows a step: a log line, an evaluation, a checkpoint. `stopping`: a signal or the clock
    ends the run at this step; the last step (`total`) ends it too. 0: never (but at the end)."""

    total: int
    log_every: int
    eval_every: int = 0
    save_every: int = 0

    def log(self, step: int, stopping: bool) -> bool:
        return step % self.log_every == 0 or stopping or step >= self.total

    def eval(self, step: int, stopping: bool) -> bool:
        """Not at the end: the final evaluation follows."""
        return bool(self.eval_every) and step % self.eval_every == 0 and not (stopping or step >= self.total)

    def save(self, step: int, stopping: bool) -> bool:
        return stopping or step >= self.total or bool(self.save_every and step % self.save_every == 0)


# --------------------------------------------------------------------------- one step
def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_step(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    micro_batches: Sequence[Any],
    cfg: LoopSettings,
    device: torch.device,
    *,
    loss: Callable[[Any], tuple[torch.Tensor, torch.Tensor]] | None = None,
    precision: str | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> StepStats:
    """One optimizer step over `micro_batches` (module docstring); `loss(micro)` defaults to
    `module(micro on the device)`, which returns (loss, stats). Gradients are cleared after it."""
    loss = loss or (lambda micro: module(to_device(micro, device)))
    k_steps = len(micro_batches)
    stats, total = None, torch.zeros((), device=device)
    ddp = module if isinstance(module, nn.parallel.DistributedDataParallel) else None
    for k, micro in enumerate(micro_batches):
        with ddp.no_sync() if ddp is not None and k < k_steps - 1 else contextlib.nullcontext():
            with autocast(device, precision or cfg.precision):
                value, micro_stats = loss(micro)
            value = value / k_steps
            (scaler.scale(value) if scaler else value).backward()
        stats = micro_stats.double() if stats is None else stats + micro_stats.double()
        total += value.detach().float()
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = clip_by_global_norm([p for p in module.parameters() if p.requires_grad], cfg.max_grad_norm)
    lr = optimizer.param_groups[0]["lr"]
    if scaler is not None:  # fp16's loss scaler skips a non-finite step itself
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    assert stats is not None, "a step needs at least one micro-batch"
    return StepStats(stats, grad_norm, lr, total)


def check_finite(obj: Objective, step: int, last: StepStats) -> None:
    """Stop on an inf/NaN loss or gradient norm (the norm is global, so every rank stops alike): the step is
    not saved."""
    if bool(torch.isfinite(last.grad_norm)) and bool(torch.isfinite(last.loss)):
        return
    raise NonFiniteLossError(
        f"step {step}: the loss or the gradient is not finite (loss {float(last.loss)}, gradient norm "
        f"{float(last.grad_norm)}); stopped without saving: {obj.last_good()}. Lower --learning-rate or raise "
        "--warmup-steps and start again"
    )


def _take_step(obj: Objective, p: Progress, scaler: torch.amp.GradScaler | None) -> StepStats:
    """The run's next step; its sums and time join the next train record. The first step of a run is
    recorded at once (and thrown away): an objective that refuses its sums stops the run at step 1."""
    t0 = time.perf_counter()
    micro = obj.micro_batches(p.step)
    obj.module.train()
    step = p.step
    last = train_step(
        obj.module, obj.optimizer, obj.scheduler, micro, obj.cfg, obj.device,
        loss=lambda m: obj.loss(m, step), precision=obj.precision, scaler=scaler,
    )  # fmt: skip
    p.sums += last.stats
    p.step += 1
    p.compute_s += time.perf_counter() - t0
    if scaler is None:
        check_finite(obj, p.step, last)
    if p.step == 1:
        obj.record(all_reduce(last.stats.clone(), obj.d), p.step)
    return last


# --------------------------------------------------------------------------- log, evaluate, save
def _log(obj: Objective, p: Progress, last: StepStats, bar: Any) -> dict[str, float]:
    """The train record since the last one (all ranks' sums), written by rank 0; the sums start again."""
    m = obj.record(all_reduce(p.sums, obj.d), p.step)
    m.update(lr=last.lr, grad_norm=float(last.grad_norm))
    for count, rate in (("tokens", "tok_per_s"), ("examples", "examples_per_s")):
        if count in m:
            m[rate] = m.pop(count) / max(p.compute_s, 1e-9)
    if p.metrics is not None:
        p.metrics.write({"step": p.step, "split": "train", **m, "elapsed_s": round(p.elapsed_s, 1)})
        logger.info("%s", format_line(f"step {p.step}", m, obj.shown))
        bar.set_postfix(step=p.step, loss=f"{m.get('loss', 0.0):.4f}")
    p.sums.zero_()
    p.compute_s, p.logged = 0.0, m
    return m


def _evaluate(obj: Objective, p: Progress) -> dict[str, dict[str, Any]]:
    """The objective's evaluation, each set recorded by rank 0 (with the time so far, for curves)."""
    evals = obj.evaluate(p.step)
    # A finished run resumed evaluates its last step again (its files are written from the evaluation);
    # the record that step already has is not written twice.
    recorded = p.metrics.evaluations_at(p.step) if p.metrics is not None else {}
    for split, m in evals.items():
        if p.metrics is not None and split not in recorded:
            p.metrics.write({"step": p.step, "split": split, **m, "elapsed_s": round(p.elapsed_s, 1)})
            numbers = tuple(k for k, v in m.items() if isinstance(v, float) and k not in ("epoch", "step"))
            logger.info("%s", format_line(f"{split} @ {p.step}", m, numbers))
    return evals


def save(obj: Objective, p: Progress) -> None:
    """A checkpoint of the step just taken. Every rank takes part (its RNG and sums are gathered); rank 0
    writes the folder."""
    ranks = gather({"rng": ckpt.capture_rng_state(), "acc": p.sums.cpu()}, obj.d)
    if obj.d.main and obj.kind is not None:
        state = {
            **obj.state(), "step": p.step, "elapsed_s": p.elapsed_s, "optimizer": obj.optimizer.state_dict(),
            "scheduler": obj.scheduler.state_dict(), "ranks": ranks, "eval_due": p.eval_due,
        }  # fmt: skip
        path = ckpt.save_checkpoint(
            obj.out, p.step, obj.model, state, obj.settings(), lambda folder: obj.write_files(folder, p),
            getattr(obj.cfg, "keep_last", 1), obj.kind.settings_file,
        )  # fmt: skip
        logger.info("saved %s", path)
    if obj.d.world > 1:
        dist.barrier()


def restore(obj: Objective, p: Progress, latest: Path) -> None:
    """Continue from checkpoint `latest`: optimizer, scheduler, step, time, the objective's own state (which
    may refuse the resume, before anything else is said), this rank's RNG and sums (on another number of
    processes: every saved rank's sums on rank 0)."""
    assert obj.kind is not None
    state = run_folder.read_state(obj.kind, latest)
    obj.optimizer.load_state_dict(state["optimizer"])
    obj.scheduler.load_state_dict(state["scheduler"])
    p.step, p.elapsed_s = int(state["step"]), float(state.get("elapsed_s", 0.0))
    p.eval_due = bool(state.get("eval_due", False))
    obj.restore(state)  # first: an objective may refuse the resume (another global batch, other data)
    ranks = state["ranks"]
    mine = ranks[min(obj.d.rank, len(ranks) - 1)]
    ckpt.restore_rng_state(mine["rng"])
    p.sums = mine["acc"].to(obj.device)
    if len(ranks) != obj.d.world:
        # The unlogged sums of every saved rank on rank 0, none on the others: the next record (summed
        # over the ranks) counts each of them once, whatever the number of processes now.
        p.sums = sum(r["acc"] for r in ranks).to(obj.device) if obj.d.main else torch.zeros_like(p.sums)
        if obj.d.main:
            logger.warning(
                "resuming with %d process%s where the run had %d: the data order is kept, the random "
                "streams of dropout are not (the run goes on, not bit for bit)",
                obj.d.world,
                "" if obj.d.world == 1 else "es",
                len(ranks),
            )
    if obj.d.main:
        logger.info("resumed from %s (step %d)", latest, p.step)


# --------------------------------------------------------------------------- the loop
def train(
    obj: Objective, resume_from: Path | None = None, on_step: Callable[[int], None] | None = None
) -> LoopResult:
    """Train `obj` from step 0 or from checkpoint `resume_from` (module docstring); `on_step(step)` runs on
    every rank after each optimizer step. Only an objective with checkpoints stops on a signal: one
    without them has nothing to resume."""
    p = Progress(torch.zeros(len(obj.stats), dtype=torch.float64, device=obj.device))
    if resume_from is not None:
        restore(obj, p, resume_from)
    # Records past the checkpoint (written after it by the run that was stopped) are dropped.
    p.metrics = MetricsLog(obj.out, p.step, obj.cfg.tensorboard) if obj.d.main else None
    stop = StopFlag() if obj.kind is not None else None
    scaler = torch.amp.GradScaler(obj.device.type) if obj.precision == "fp16" else None
    budget = getattr(obj.cfg, "time_budget", None)
    clock = LoopClock(
        obj.name, step=p.step, total_steps=obj.total_steps, elapsed_s=p.elapsed_s, budget=budget,
        budget_s=getattr(obj.cfg, "time_budget_s", None), scheduler=obj.scheduler,
        warmup_fraction=obj.warmup_fraction, main=obj.d.main, agree=slowest(obj.d, obj.device),
        cpu=obj.device.type == "cpu", slow_advice=obj.slow_advice, limit=obj.ends_by,
    )  # fmt: skip
    try:
        if stop is not None:
            stop.install()
        return _run(obj, p, clock, stop, scaler, on_step)
    finally:
        clock.close()
        if stop is not None:
            stop.restore()
        if p.metrics is not None:
            p.metrics.close()
            if obj.cfg.plot:
                obj.plot()


def _run(
    obj: Objective,
    p: Progress,
    clock: LoopClock,
    stop: StopFlag | None,
    scaler: torch.amp.GradScaler | None,
    on_step: Callable[[int], None] | None,
) -> LoopResult:
    cadence = Cadence(obj.total_steps, obj.cfg.log_every, obj.eval_every, getattr(obj.cfg, "save_every", 0))
    done = clock.spent()  # a resumed run may have spent it already
    if p.step >= obj.total_steps or done:
        logger.info(
            "%s had finished at step %d: nothing to train; its final evaluation and files follow",
            obj.name,
            p.step,
        )
    if p.eval_due:  # stopped before (or during) the evaluation of its step: the checkpoint says it is due
        if _evaluate_unless_stopped(obj, p, stop) is None:  # stopped again: it stays due, the checkpoint too
            assert stop is not None
            clock.stopped(stop.signum, p.step, obj.again)
            return LoopResult(obj.out, p.step, True, {}, stop.signum or signal.SIGTERM)
        p.eval_due = False
    elif obj.cfg.eval_on_start and p.step == 0:
        _evaluate(obj, p)
    while p.step < obj.total_steps and not done:
        last = _take_step(obj, p, scaler)
        if on_step is not None:
            on_step(p.step)
        stopping = stop is not None and stop.any_rank(obj.d, obj.device)
        done = clock.tick(p.step)  # the last step when the time is gone
        p.elapsed_s = clock.elapsed_s
        if cadence.log(p.step, stopping or done):
            _log(obj, p, last, clock.bar)
        if cadence.eval(p.step, stopping or done):
            stopping = _evaluate_unless_stopped(obj, p, stop) is None or stopping
        p.eval_due = stopping and cadence.eval(p.step, False)
        if obj.kind is not None and cadence.save(p.step, stopping or done):
            save(obj, p)
        if stopping:
            assert stop is not None
            clock.stopped(stop.signum, p.step, obj.again)
            return LoopResult(obj.out, p.step, True, {}, stop.signum or signal.SIGTERM)
    clock.finished(p.step)
    evals = _evaluate_unless_stopped(obj, p, stop)
    if evals is None:  # the last step's checkpoint is saved: a resume evaluates and finishes
        assert stop is not None
        clock.stopped(stop.signum, p.step, obj.again)
        return LoopResult(obj.out, p.step, True, {}, stop.signum or signal.SIGTERM)
    return LoopResult(obj.out, p.step, False, obj.finish(evals, p))


def _evaluate_unless_stopped(obj: Objective, p: Progress, stop: StopFlag | None) -> dict[str, Any] | None:
    """`_evaluate`, dropped at once where a signal comes while the model runs on the dev sets (a large one
    takes minutes; one process alone: ranks stop together, after a step): None then, and the run saves
    and stops, its checkpoint saying the evaluation is due (a resume runs it first)."""
    if stop is None or obj.d.world > 1:
        return _evaluate(obj, p)
    try:
        with stoppable(lambda: stop.signum is not None):
            return _evaluate(obj, p)
    except EvaluationStopped:
        logger.info("the evaluation at step %d was dropped: a signal came while it ran", p.step)
        return None
