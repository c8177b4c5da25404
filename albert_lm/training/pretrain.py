"""The pretraining loop: masked LM (+ SOP or NSP) with LAMB, one process or DDP under torchrun.

`pretrain` runs, in this order:
- `setup` (`albert_lm.training.pretrain_setup`): device, process group and precision; the data sets and
  the loader; the output folder; the model, its objective (`albert_lm.training.objective`), optimizer and
  scheduler; the state of the checkpoint it resumes from. All of it in a `Run`, which the parts below
  read and update.
- every step: `next_micro_batches` reads this rank's micro-batches from a `torch.utils.data.DataLoader`
  with the sampler and collate of `albert_lm.data.dataset` (the one definition of order and padding);
  `train_step` takes one optimizer step over them; `should_log`, `should_eval` and `should_save` decide
  what follows (`log_train`, `run_eval`, `save`). SIGTERM / SIGINT on any rank: every rank saves after
  the same step, then returns.
- at the end: `run_eval` on the held-out split and the plain-text probe, `save_final`; `teardown` always.

Follows the paper's Section 4.1 and google-research/albert `run_pretraining.py`:
- With K accumulation steps and W processes the gradient is the mean of the K * W micro-batch
  gradients (DDP averages, accumulation divides by K), so W=2, K=1 and W=1, K=2 see the same
  micro-batches (see `PretrainingSampler`) and take the same step.
- LAMB, clipping, warmup + polynomial decay: `albert_lm.training.optim`. Paper defaults: lr 0.00176 at batch
  4096, 125k steps, warmup 3125; `--learning-rate` is the rate for your global batch.
- "dropout off from step N" (Section 4.9: removing dropout helps once the model no longer overfits).
- Checkpoints in transformers' layout + exact training state (`albert_lm.training.checkpoint`); `resume`
  continues bit-for-bit (CPU, fp32): data order and dynamic masking are functions of (seed, epoch,
  position), and the data loaders never draw from the generators that dropout uses.

DDP is applied here and in `setup`, nowhere else: the model never sees torch.distributed. Rank 0 logs
and saves.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from albert_lm.data.dataset import evaluation_loader
from albert_lm.files import write_json
from albert_lm.kernels.device import autocast
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import preflight, run_cards
from albert_lm.training.clock import LoopClock
from albert_lm.training.distributed import DistInfo, StopFlag, all_reduce, gather
from albert_lm.training.monitor import METRICS_FILE, MetricsLog, format_line, plot_metrics
from albert_lm.training.objective import STATS, PretrainingObjective, summarize
from albert_lm.training.optim import PAPER_WARMUP_FRACTION, NonFiniteLossError, clip_by_global_norm
from albert_lm.training.pretrain_config import PretrainConfig
from albert_lm.training.pretrain_setup import Run, setup

logger = logging.getLogger(__name__)

# What a CPU run of many hours is told to do instead (the clock says it a few steps in).
SLOW_CPU_ADVICE = (
    "A CPU pretrains a small model in a set time with a recipe made for it: `albert pretrain --recipe cpu-1h` "
    "(or cpu-10min), or bound this run with --time-budget 1h; `albert data create --recipe cpu-1h` makes its data"
)


@dataclass
class PretrainResult:
    output: Path
    step: int
    interrupted: bool
    final_metrics: dict[str, float]
    signum: int | None = None  # the signal that stopped it (interrupted runs)


@dataclass
class StepStats:
    """What one optimizer step reports."""

    stats: torch.Tensor  # (len(STATS),) float64: the sums over this rank's micro-batches
    grad_norm: torch.Tensor  # 0-d: the global gradient norm before clipping
    lr: float  # the learning rate the step used


# --------------------------------------------------------------------------- one step
def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def next_micro_batches(run: Run) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches for the step at (run.epoch, run.offset), in the sampler's order. A new
    epoch begins where no full global batch is left (the remainder is dropped: every step is full)."""
    if run.sampler.epoch_ends_before(run.offset):
        run.epoch, run.offset, run.batches = run.epoch + 1, 0, None
    if run.batches is None:  # a fresh iterator (and fresh workers) for the epoch, from the offset
        run.sampler.set_epoch(run.epoch, run.offset)
        run.batches = iter(run.loader)
    return [next(run.batches) for _ in range(run.cfg.gradient_accumulation_steps)]


def train_step(
    wrapped: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    micro_batches: Sequence[dict[str, torch.Tensor]],
    cfg: PretrainConfig,
    device: torch.device,
) -> StepStats:
    """One optimizer step: forward and backward of each micro-batch (the loss divided by their number;
    DDP synchronizes gradients on the last one only), clipping by the global norm, optimizer and
    scheduler step, gradients cleared."""
    k_steps = len(micro_batches)
    stats = torch.zeros(len(STATS), dtype=torch.float64, device=device)
    for k, micro in enumerate(micro_batches):
        batch = _to(micro, device)
        last = k == k_steps - 1
        sync = (
            wrapped.no_sync()
            if isinstance(wrapped, nn.parallel.DistributedDataParallel) and not last
            else contextlib.nullcontext()
        )
        with sync:
            with autocast(device, cfg.precision):
                loss, micro_stats = wrapped(batch)
            (loss / k_steps).backward()
        stats += micro_stats.double()
    params = [p for p in wrapped.parameters() if p.requires_grad]
    grad_norm = clip_by_global_norm(params, cfg.max_grad_norm)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(stats, grad_norm, lr)


def _dropout_off_if_due(run: Run) -> None:
    due = run.cfg.dropout_off_step is not None and run.step >= run.cfg.dropout_off_step
    if due and not run.dropout_off:
        run.model.set_dropout(hidden=0.0, attention=0.0)
        run.dropout_off = True
        if run.d.main:
            logger.info("dropout off from step %d", run.step)


def take_step(run: Run) -> StepStats:
    """The run's next step: dropout off when due, this rank's micro-batches, `train_step`; then the run
    moves one global batch on, and the step's sums and time join the next train record."""
    _dropout_off_if_due(run)
    t0 = time.perf_counter()
    micro_batches = next_micro_batches(run)
    last = train_step(run.wrapped, run.optimizer, run.scheduler, micro_batches, run.cfg, run.device)
    run.acc += last.stats
    run.step += 1
    run.offset += run.sampler.global_batch
    run.compute_s += time.perf_counter() - t0
    return last


def check_finite(run: Run, last: StepStats) -> None:
    """Stop on an inf/NaN gradient norm (global, so every rank stops alike): the step is not saved and the
    newest checkpoint stays the last good state."""
    if bool(torch.isfinite(last.grad_norm)):
        return
    newest = ckpt.latest_checkpoint(run.out)
    kept = (
        f"the newest checkpoint, {newest}, is the last good state"
        if newest
        else "no checkpoint was saved yet"
    )
    raise NonFiniteLossError(
        f"step {run.step}: the loss or the gradient is not finite (gradient norm {float(last.grad_norm)}); "
        f"stopped without saving: {kept}. Lower --learning-rate or raise --warmup-steps and start again "
        "(--init-from the checkpoint to keep its weights)"
    )


def check_step(run: Run, last: StepStats) -> None:
    """After each step: a finite loss (`check_finite`); after the first, something to learn (the first
    step already tells, `check_learning`)."""
    check_finite(run, last)
    if run.step == 1:
        check_learning(run, all_reduce(last.stats.clone(), run.d))


def _slowest(run: Run) -> Callable[[float], float]:
    """The time spent as all ranks agree on it: the slowest rank's."""

    def agree(elapsed_s: float) -> float:
        if run.d.world == 1:
            return elapsed_s
        spent = torch.tensor([elapsed_s], dtype=torch.float64, device=run.device)
        return float(all_reduce(spent, run.d, dist.ReduceOp.MAX).item())

    return agree


def stop_requested(stop: StopFlag, d: DistInfo, device: torch.device) -> bool:
    """Whether any rank got SIGTERM / SIGINT: all ranks agree, so they stop after the same step."""
    flag = torch.tensor([float(stop.signum is not None)], device=device)
    return bool(all_reduce(flag, d, dist.ReduceOp.MAX).item())


# --------------------------------------------------------------------------- after a step: log, evaluate, save
def should_log(step: int, cfg: PretrainConfig, stopping: bool) -> bool:
    return step % cfg.log_every == 0 or step == cfg.max_steps or stopping


def should_eval(step: int, cfg: PretrainConfig, stopping: bool) -> bool:
    """Every `eval_every` steps, but not at the last step (the final evaluation follows) nor when stopping."""
    return bool(cfg.eval_every) and step % cfg.eval_every == 0 and step < cfg.max_steps and not stopping


def should_save(step: int, cfg: PretrainConfig, stopping: bool) -> bool:
    return stopping or step == cfg.max_steps or bool(cfg.save_every and step % cfg.save_every == 0)


class NothingToLearnError(ValueError):
    """The steps since the last record had no masked token to predict: the run would train on nothing."""


def check_learning(run: Run, sums: torch.Tensor) -> None:
    """Stop a run whose steps mask no token (damaged data, or masking settings that select nothing):
    its MLM loss would read 0.0 at every step and it would end as if it had trained."""
    if float(sums[STATS.index("mlm_count")]) > 0:
        return
    raise NothingToLearnError(
        f"step {run.step}: no token was masked in the steps since the last record, so the masked LM learns "
        f"nothing; the data in {run.cfg.data} is damaged or its masking selects no word (check "
        "--masked-lm-prob and --max-predictions-per-seq, or make the data again with `albert data create`)"
    )


def log_train(run: Run, last: StepStats) -> dict[str, float]:
    """The train record since the last one (all ranks' sums), written by rank 0; the sums start again.
    A record with no masked token stops the run (`check_learning`)."""
    sums = all_reduce(run.acc, run.d)
    check_learning(run, sums)
    m = summarize(sums, run.objective.sentence_weight)
    m.update(lr=last.lr, grad_norm=float(last.grad_norm), epoch=run.epoch)
    m["tok_per_s"] = m.pop("tokens") / max(run.compute_s, 1e-9)
    if run.metrics is not None:
        run.metrics.write({"step": run.step, "split": "train", **m, "elapsed_s": round(run.elapsed_s, 1)})
        logger.info("%s", format_line(run.step, m))
    run.acc.zero_()
    run.compute_s = 0.0
    return m


@torch.no_grad()
def evaluate(
    objective: PretrainingObjective,
    dataset: Any,
    cfg: PretrainConfig,
    device: torch.device,
    d: DistInfo | None = None,
) -> dict[str, float]:
    """MLM loss/accuracy (and SOP) on the first `eval_batches` batches of a data set, all ranks together."""
    d = d or DistInfo()
    was_training = objective.training
    objective.eval()
    stats = torch.zeros(len(STATS), dtype=torch.float64, device=device)
    for batch in evaluation_loader(dataset, cfg.batch_size, cfg.eval_batches, d.rank, d.world):
        with autocast(device, cfg.precision):
            stats += objective(_to(batch, device))[1].double()
    objective.train(was_training)
    return summarize(all_reduce(stats, d), objective.sentence_weight)


def run_eval(
    objective: PretrainingObjective,
    evals: dict[str, Any],
    cfg: PretrainConfig,
    device: torch.device,
    d: DistInfo,
    metrics: MetricsLog | None,
    step: int,
    elapsed_s: float | None = None,
) -> dict[str, float]:
    """`evaluate` on each evaluation set; rank 0 records them (with the training time so far, when
    given, for curves against time). Returns {"SPLIT_METRIC": value}."""
    results: dict[str, float] = {}
    for split, dataset in evals.items():
        m = evaluate(objective, dataset, cfg, device, d)
        m.pop("tokens")
        results.update({f"{split}_{k}": v for k, v in m.items()})
        if metrics is not None:
            when = {} if elapsed_s is None else {"elapsed_s": round(elapsed_s, 1)}
            metrics.write({"step": step, "split": split, **m, **when})
            logger.info("%s", format_line(step, m, prefix=f"{split} @"))
    return results


def save(run: Run) -> None:
    """A checkpoint of the step just taken. Every rank takes part (its RNG and sums are gathered); rank 0
    writes the folder (`albert_lm.training.checkpoint`)."""
    ranks = gather({"rng": ckpt.capture_rng_state(), "acc": run.acc.cpu()}, run.d)
    if run.d.main:
        state = {
            "step": run.step, "epoch": run.epoch, "offset": run.offset, "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(), "ranks": ranks, "global_batch": run.sampler.global_batch,
            "elapsed_s": run.elapsed_s,
        }  # fmt: skip
        extra = run_cards.checkpoint_extras(run)  # the tokenizer and the model card
        path = ckpt.save_checkpoint(
            run.out,
            run.step,
            run.model,
            state,
            run.cfg.to_dict(),
            extra,
            run.cfg.keep_last,
            preflight.SETTINGS_FILE,
        )
        logger.info("saved %s", path)
    if run.d.world > 1:
        dist.barrier()


def save_final(run: Run) -> None:
    """The finished model in the output folder itself: weights, tokenizer, the run's configuration, the
    model card."""
    if run.d.main:
        run.model.save_pretrained(run.out)
        if run.tokenizer is not None:
            run.tokenizer.save_pretrained(run.out)
        write_json(run.out / preflight.SETTINGS_FILE, run.cfg.to_dict())
        run_cards.final_cards(run)  # README.md: what the model is, how it was made, its scores
        logger.info("final model in %s", run.out)


def teardown(run: Run, clean: bool = False) -> None:
    """Loader workers stopped, the process group (if this run made it) destroyed, the logs closed.
    `clean`: every rank got here the normal way (not by an exception), so they can meet first."""
    run.batches = None
    if run.d.owned:
        if clean:
            # Every rank past its last collective before any tears the group down: a rank destroying it
            # while another is still in one can abort the other at exit (gloo: "terminate called without
            # an active exception", seen once in CI on a loaded 2-core machine). Not after an exception:
            # the other ranks may never arrive.
            dist.barrier()
        dist.destroy_process_group()
    if run.metrics is not None:
        run.metrics.close()
        if run.cfg.plot and (run.out / METRICS_FILE).stat().st_size > 0:
            plot_metrics(run.out)
    run.lock.close()


# --------------------------------------------------------------------------- the loop
def _record(run: Run, last: Any, finishing: bool, bar: Any) -> dict[str, float]:
    """After a step: the log line, the held-out evaluation and the checkpoint, each when due (all of them
    on the last step). Returns the logged training metrics ({} where none was due)."""
    cfg, logged = run.cfg, {}
    if should_log(run.step, cfg, finishing):
        logged = log_train(run, last)
        bar.set_postfix(step=run.step, loss=f"{logged['loss']:.3f}", mlm_acc=f"{logged['mlm_acc']:.3f}")
    if should_eval(run.step, cfg, finishing):
        run_eval(run.objective, run.evals, cfg, run.device, run.d, run.metrics, run.step, run.elapsed_s)
    if should_save(run.step, cfg, finishing):
        save(run)
    return logged


def pretrain(
    cfg: PretrainConfig,
    *,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    tokenizer: Any = None,
    on_step: Callable[[int], None] | None = None,
) -> PretrainResult:
    """Run (or resume) pretraining as `cfg` says; returns where it stopped.

    Data sets default to `PretrainingDataset(cfg.data, split=...)` and the data folder's tokenizer;
    tests pass their own. `on_step(step)` runs on every rank after each optimizer step.
    """
    run = setup(cfg, train_dataset, eval_dataset, tokenizer)
    cfg, d = run.cfg, run.d
    stop = StopFlag()
    stop.install()
    final: dict[str, float] = {}
    clock = LoopClock(
        "pretrain",
        step=run.step,
        total_steps=cfg.max_steps,
        elapsed_s=run.elapsed_s,
        budget=cfg.time_budget,
        budget_s=cfg.time_budget_s,
        scheduler=run.scheduler,
        warmup_fraction=PAPER_WARMUP_FRACTION,
        main=d.main,
        agree=_slowest(run),
        cpu=run.device.type == "cpu",
        slow_advice=SLOW_CPU_ADVICE,
    )
    try:
        done = clock.spent()  # a resumed run may have spent it already
        while run.step < cfg.max_steps and not done:
            last = take_step(run)
            check_step(run, last)
            if on_step is not None:
                on_step(run.step)
            stopping = stop_requested(stop, d, run.device)
            done = clock.tick(run.step)  # the last step when the time is gone
            run.elapsed_s = clock.elapsed_s
            final = _record(run, last, stopping or done, clock.bar) or final
            if stopping:
                clock.stopped(stop.signum, run.step)
                return PretrainResult(run.out, run.step, True, final, stop.signum or signal.SIGTERM)
        clock.finished(run.step)
        final.update(
            run_eval(run.objective, run.evals, cfg, run.device, d, run.metrics, run.step, run.elapsed_s)
        )
        save_final(run)
        return PretrainResult(run.out, run.step, False, final)
    finally:
        clock.close()
        stop.restore()
        teardown(run, clean=sys.exc_info()[0] is None)
