"""Pretraining: masked LM (+ SOP or NSP) with LAMB, one process or DDP under torchrun, as an `Objective`
of the one training loop (`albert_lm.training.loop`).

`pretrain` runs, in this order:
- `setup` (`albert_lm.training.pretrain_setup`): device, process group and precision; the data sets and
  the loader; the output folder; the model, its objective (`albert_lm.training.objective`), optimizer and
  scheduler; the checkpoint it resumes from. All of it in a `Run`.
- `train` with `Pretraining`: each step reads this rank's micro-batches from a
  `torch.utils.data.DataLoader` with the sampler and collate of `albert_lm.data.dataset` (the one
  definition of order and padding); the loop takes the step, logs, evaluates the held-out split and the
  plain-text probe, saves, stops on a signal (every rank after the same step).
- at the end: the finished model, tokenizer, settings and card in the output folder; `teardown` always.

Follows the paper's Section 4.1 and google-research/albert `run_pretraining.py`:
- With K accumulation steps and W processes the gradient is the mean of the K * W micro-batch
  gradients (DDP averages, accumulation divides by K), so W=2, K=1 and W=1, K=2 see the same
  micro-batches (see `PretrainingSampler`) and take the same step.
- LAMB, clipping, warmup + polynomial decay: `albert_lm.training.optim`. Paper defaults: lr 0.00176 at batch
  4096, 125k steps, warmup 3125; `--learning-rate` is the rate for your global batch.
- "dropout off from step N" (Section 4.8: removing dropout helps once the model no longer overfits).
- Checkpoints in transformers' layout + exact training state (`albert_lm.training.checkpoint`); `resume`
  continues bit-for-bit (CPU, fp32): data order and dynamic masking are functions of (seed, epoch,
  position), and the data loaders never draw from the generators that dropout uses. A resume keeps the
  run's global batch and data, and never takes --max-steps back (`check_resumed`).

DDP is applied in `setup`, nowhere else: the model never sees torch.distributed. Rank 0 logs and saves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from albert_lm.data.dataset import evaluation_loader
from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.files import read_json_object, write_json
from albert_lm.kernels.device import autocast
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training import optim, preflight, run_cards, run_folder
from albert_lm.training.clock import budget_seconds, say_budget_changed
from albert_lm.training.distributed import DistInfo, all_reduce
from albert_lm.training.loop import LoopResult, Objective, Progress, to_device, train
from albert_lm.training.monitor import METRICS_FILE, plot_metrics
from albert_lm.training.objective import STATS, PretrainingObjective, summarize
from albert_lm.training.optim import PAPER_WARMUP_FRACTION, learning_rate_factor, scheduled_warmup
from albert_lm.training.pretrain_config import PretrainConfig
from albert_lm.training.pretrain_setup import Run, setup

logger = logging.getLogger(__name__)

# What a CPU run of many hours is told to do instead (the clock says it a few steps in).
SLOW_CPU_ADVICE = (
    "A CPU pretrains a small model in a set time with a recipe made for it: `albert pretrain --recipe cpu-1h` "
    "(or cpu-10min), or bound this run with --time-budget 1h; `albert data create --recipe cpu-1h` makes its data"
)


class NothingToLearnError(ValueError):
    """The steps since the last record had no masked token to predict: the run would train on nothing."""


class Pretraining(Objective):
    """The pretraining run of `setup` as the loop trains it: its data position is (epoch, offset), its sums
    are `STATS` (`albert_lm.training.objective`)."""

    cfg: PretrainConfig
    model: AlbertForPreTraining
    stats = STATS
    shown = ("loss", "mlm_acc", "sop_acc")
    warmup_fraction = PAPER_WARMUP_FRACTION
    slow_advice = SLOW_CPU_ADVICE
    kind = preflight.PRETRAINING

    def __init__(self, run: Run) -> None:
        self.run, self.cfg, self.d, self.out, self.device = run, run.cfg, run.d, run.out, run.device
        self.name, self.precision = "pretrain", run.cfg.precision
        self.model, self.module = run.model, run.wrapped
        self.optimizer, self.scheduler = run.optimizer, run.scheduler
        self.total_steps, self.eval_every = run.cfg.max_steps, run.cfg.eval_every
        self.data = data_record(run)  # what every checkpoint records of the data: made once

    def micro_batches(self, step: int) -> list[dict[str, torch.Tensor]]:
        """This rank's micro-batches for the step at (epoch, offset), in the sampler's order; dropout off
        first where it is due. A new epoch begins where no full global batch is left (the remainder is
        dropped: every step is full)."""
        run = self.run
        if run.cfg.dropout_off_step is not None and step >= run.cfg.dropout_off_step and not run.dropout_off:
            run.model.set_dropout(hidden=0.0, attention=0.0)
            run.dropout_off = True
            if run.d.main:
                logger.info("dropout off from step %d", step)
        if run.sampler.epoch_ends_before(run.offset):
            run.epoch, run.offset, run.batches = run.epoch + 1, 0, None
        if run.batches is None:  # a fresh iterator (and fresh workers) for the epoch, from the offset
            run.sampler.set_epoch(run.epoch, run.offset)
            run.batches = iter(run.loader)
        micro = [next(run.batches) for _ in range(run.cfg.gradient_accumulation_steps)]
        run.offset += run.sampler.global_batch
        return micro

    def loss(self, micro: dict[str, torch.Tensor], step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module(to_device(micro, self.device))

    def record(self, sums: torch.Tensor, step: int) -> dict[str, float]:
        """Losses and accuracies of the sums; sums with no masked token stop the run (damaged data, or
        masking settings that select nothing: its MLM loss would read 0.0 at every step)."""
        if float(sums[STATS.index("mlm_count")]) == 0:
            raise NothingToLearnError(
                f"step {step}: no token was masked in the steps since the last record, so the "
                f"masked LM learns nothing; the data in {self.cfg.data} is damaged or its masking selects no "
                "word (check --masked-lm-prob and --max-predictions-per-seq, or make the data again with "
                "`albert data create`)"
            )
        return {**summarize(sums, self.run.objective.sentence_weight), "epoch": self.run.epoch}

    def evaluate(self, step: int) -> dict[str, dict[str, Any]]:
        """MLM (and SOP) on each evaluation set: the held-out split, the plain-text probe."""
        run = self.run
        evals = {
            split: evaluate(run.objective, data, self.cfg, self.device, self.d)
            for split, data in run.evals.items()
        }
        return {split: {k: v for k, v in m.items() if k != "tokens"} for split, m in evals.items()}

    def settings(self) -> dict[str, Any]:
        return self.cfg.to_dict()

    def state(self) -> dict[str, Any]:
        """The data position, the global batch it counts in, and what the data is (`data_identity`)."""
        run = self.run
        state: dict[str, Any] = {
            "epoch": run.epoch,
            "offset": run.offset,
            "global_batch": run.sampler.global_batch,
        }
        if self.data is not None:
            state["data"] = self.data
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """The data position, once the checkpoint's state allows what this run changed (`check_resumed`)."""
        if self.run.latest is not None:
            check_resumed(self.run, state, self.run.latest)
        self.run.step, self.run.epoch, self.run.offset = state["step"], state["epoch"], state["offset"]

    def write_files(self, folder: Path, p: Progress) -> None:
        """The tokenizer and the model card beside a checkpoint's weights."""
        self.run.step, self.run.metrics = p.step, p.metrics
        run_cards.checkpoint_extras(self.run)(folder)

    def finish(self, evals: dict[str, dict[str, Any]], p: Progress) -> dict[str, Any]:
        """The finished model in the output folder itself: weights, tokenizer, the run's configuration, the
        model card. Returns the last train record and every evaluation ({"SPLIT_METRIC": value})."""
        run = self.run
        run.step, run.metrics = p.step, p.metrics
        if run.d.main:  # one set, moved in once written (`write_model_set`)
            run_folder.write_model_set(run.out, lambda folder: _final_files(run, folder))
            last = run.out / f"checkpoint-{run.step}"  # its card again, with the final evaluation's scores
            if last.is_dir():
                title = f"ALBERT pretraining checkpoint at step {run.step:,}"
                run_cards.write_pretraining_card(run, last, last, title)
            logger.info("final model in %s", run.out)
        found = {f"{split}_{k}": v for split, m in evals.items() for k, v in m.items()}
        if run.d.main and "eval_mlm_acc" in found and "eval" in run.evals:
            found["eval_unigram_mlm_acc"] = _beside_unigram(run, found["eval_mlm_acc"])
        return {**p.logged, **found}

    def plot(self) -> None:
        if (self.out / METRICS_FILE).stat().st_size > 0:
            plot_metrics(self.out, ("mlm_acc", "sop_acc"))


def _final_files(run: Run, folder: Path) -> None:
    """The finished model's files, written into `folder` to be moved into the output folder: weights,
    tokenizer, the run's configuration and README.md (what the model is, how it was made, its scores)."""
    run.model.save_pretrained(folder)
    if run.tokenizer is not None:
        run.tokenizer.save_pretrained(folder)
    write_json(folder / preflight.SETTINGS_FILE, run.cfg.to_dict())
    title = f"ALBERT pretrained with albert-lm ({run.step:,} steps)"
    run_cards.write_pretraining_card(run, folder, run.out, title)


# --------------------------------------------------------------------------- the first baseline
UNIGRAM_MARGIN = 0.01  # held-out MLM accuracy within this of the unigram guess has learned no more


def unigram_baseline(
    train: Any, evaluation: Any, sample: int = 4000, eval_limit: int | None = None
) -> dict[str, float]:
    """Accuracy of always guessing the most frequent masked piece of (a sample of) the training data, on
    the evaluation set (its first `eval_limit` sequences); and of always guessing SOP's more frequent order."""
    counts: Counter[int] = Counter()
    step = max(1, len(train) // sample)
    for i in range(0, len(train), step):
        labels = train[i]["labels"]
        counts.update(labels[labels != IGNORE_INDEX].tolist())
    guess, _ = counts.most_common(1)[0]
    hits = total = sop_ones = 0
    n = len(evaluation) if eval_limit is None else min(len(evaluation), eval_limit)
    for i in range(n):
        item = evaluation[i]
        labels = item["labels"][item["labels"] != IGNORE_INDEX]
        hits += int((labels == guess).sum())
        total += labels.numel()
        sop_ones += int(item["sentence_order_label"])
    ones = sop_ones / max(n, 1)
    return {
        "unigram_guess_id": guess,
        "unigram_mlm_acc": hits / max(total, 1),
        "sop_majority_acc": max(ones, 1 - ones),
    }


def _beside_unigram(run: Run, accuracy: float) -> float:
    """The unigram guess's held-out MLM accuracy; a warning where the model's is no better: it has learned
    word frequencies only, and a task fine-tuned from it starts from nothing (a run of too few steps)."""
    scored = run.cfg.eval_batches * run.cfg.batch_size  # the sequences it scored (`evaluation_loader`)
    guess = unigram_baseline(run.loader.dataset, run.evals["eval"], eval_limit=scored)["unigram_mlm_acc"]
    if accuracy <= guess + UNIGRAM_MARGIN:
        logger.warning(
            "held-out MLM accuracy %.4f is the unigram guess's (%.4f, always the most frequent masked piece): "
            "the model has learned word frequencies only, and fine-tuning will start from nothing; train "
            "longer (docs/quality.md says what each hour buys)", accuracy, guess,
        )  # fmt: skip
    return guess


# --------------------------------------------------------------------------- what a resume may change
def data_identity(dataset: Any) -> str | None:
    """What a data folder holds, by content: a hash of its manifest's data settings, tokenizer checksum and
    training shards (their examples and checksums; its plan id where they have none), never of where it
    lies, so a moved copy is the same data and another folder's data is not. None for data sets without a
    manifest (a caller's own)."""
    manifest: Any = getattr(dataset, "manifest", None)
    try:
        shards = manifest["splits"]["train"]["shards"]
        content = {
            "config": manifest["config"],
            "tokenizer": manifest["tokenizer"].get("sha256"),
            "train": shards,
        }
        if not all(isinstance(s, dict) and s.get("sha256") for s in shards):
            content["plan"] = manifest.get("plan_id")
    except (KeyError, TypeError, AttributeError):
        return None
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_record(run: Run) -> dict[str, Any] | None:
    """What a checkpoint records of the run's training data: its identity, folder and sequences."""
    dataset: Any = run.loader.dataset
    identity = data_identity(dataset)
    if identity is None:
        return None
    return {"identity": identity, "folder": str(run.cfg.data), "sequences": len(dataset)}


def check_resumed(run: Run, state: dict[str, Any], latest: Path) -> None:
    """What a resumed run changed, against the state of its checkpoint `latest` (its settings file was
    compared before: `preflight.check_resume`): its length, its global batch and its data, each refused
    with the way to keep it; a new length is said (the learning-rate schedule is now the new run's)."""
    saved = read_json_object(latest / preflight.SETTINGS_FILE, "run configuration")
    step, elapsed_s = int(state["step"]), float(state.get("elapsed_s", 0.0))
    _check_length(run.cfg, saved, step, elapsed_s, latest)
    _check_global_batch(run, saved, state, latest)
    _check_data(run, state, latest)
    if run.cfg.time_budget is not None and isinstance(saved.get("time_budget"), str):
        say_budget_changed(
            "pretrain",
            saved["time_budget"],
            run.cfg.time_budget,
            elapsed_s=elapsed_s,
            step=step,
            scheduler=run.scheduler,
            latest=latest,
            main=run.d.main,
        )
    say_if_extended(run, saved.get("max_steps"), step)


def _check_length(
    cfg: PretrainConfig, saved: dict[str, Any], step: int, elapsed_s: float, latest: Path
) -> None:
    """--max-steps may change on resume, never to below the step the run is at; to that step only where the
    run had finished (by its steps or its budget): an unfinished run would end there without training, its
    rate not decayed, and be written as a finished run of that length."""
    if cfg.max_steps > step:
        return
    before, budget = saved.get("max_steps"), budget_seconds(saved.get("time_budget"))
    finished = (isinstance(before, int) and step >= before) or (budget is not None and elapsed_s >= budget)
    if cfg.max_steps == step and finished:
        return  # its final files written again
    reached = f"step {step:,}, which the run in {latest} has reached"
    if isinstance(before, int):
        reached += f" (it was for {before:,} steps)"
    if cfg.max_steps < step:
        raise ValueError(
            f"--resume: --max-steps {cfg.max_steps:,} is below {reached}: a resumed run cannot go back. Give "
            f"--max-steps {step:,} or more; the model of an earlier step is in a checkpoint-N folder of the "
            "run, where one is kept (--init-from it to start a new run from it)"
        )
    raise ValueError(
        f"--resume: --max-steps {cfg.max_steps:,} is {reached}: the run would end there without training, "
        f"its learning rate not decayed, and be written as a finished {step:,}-step run. {latest} is a "
        f"model folder already: use it as it is, or --init-from it; give --max-steps above {step:,} to train on"
    )


def _check_global_batch(run: Run, saved: dict[str, Any], state: dict[str, Any], latest: Path) -> None:
    """A resumed run takes the run's global batch (batch size x accumulation x processes): its learning
    rate was chosen for it, and its steps and schedule count in it. Another number of processes is taken
    with the accumulation that keeps it (`pretrain_setup._as_compared` lets the accumulation change)."""
    before, now = state.get("global_batch"), run.sampler.global_batch
    if not isinstance(before, int) or before == now:
        return
    cfg, world, ranks = run.cfg, run.d.world, len(state["ranks"])
    was = saved.get("gradient_accumulation_steps", "?")
    per_step = cfg.batch_size * world  # sequences per micro-step on this many processes
    ways = (
        [f"--gradient-accumulation-steps {before // per_step} on {_processes(world)}"]
        if before % per_step == 0
        else []
    )
    if ranks != world:
        ways.append(f"{_processes(ranks)}, as the run had, with --gradient-accumulation-steps {was}")
    raise ValueError(
        f"--resume: the run in {latest} took global batches of {before} sequences (batch size "
        f"{saved.get('batch_size', '?')} x accumulation {was} x {_processes(ranks)}), this one would take "
        f"{now} (batch size {cfg.batch_size} x accumulation {cfg.gradient_accumulation_steps} x "
        f"{_processes(world)}): its learning rate was chosen for {before}, and its steps and schedule count "
        f"in it. Keep {before}: {', or '.join(ways)}"
    )


def _check_data(run: Run, state: dict[str, Any], latest: Path) -> None:
    """A resumed run reads the data it was trained on (by content: `data_identity`), wherever it lies now;
    a state recorded without it (before albert-lm recorded it) is not checked."""
    saved, now = state.get("data"), data_record(run)
    if not isinstance(saved, dict) or now is None or saved.get("identity") in (None, now["identity"]):
        return
    there = saved.get("folder")
    raise ValueError(
        f"--resume: --data {run.cfg.data} is not the data the run in {latest} was trained on, {there} "
        f"({now['sequences']} training sequences here, {saved.get('sequences')} there; identity "
        f"{now['identity']}, not {saved['identity']}): the run's data position (epoch {state['epoch']}, "
        f"sequence {state['offset']}) is a position in that data. Resume with --data {there} (a moved copy "
        f"of it is the same data), or {preflight.PRETRAINING.new_run_hint.format(latest=latest)}"
    )


def _processes(n: int) -> str:
    return f"{n} process{'' if n == 1 else 'es'}"


def say_if_extended(run: Run, before: Any, step: int) -> None:
    """A run given another --max-steps than it was started for (`before`; one it can still train to:
    `_check_length`) goes on under the new length's schedule from its first step (every rank), said with
    the rate it is at (rank 0)."""
    cfg = run.cfg
    if not isinstance(before, int) or before == cfg.max_steps or cfg.time_budget:
        return
    optim.rate_from_schedule(run.scheduler)  # the checkpoint's rate is the old length's
    warmup = scheduled_warmup(run.scheduler, cfg.warmup_steps, cfg.max_steps)
    factor = learning_rate_factor(step, warmup, cfg.max_steps, cfg.poly_power)
    if run.d.main:
        logger.warning(
            "--max-steps %d (the run was for %d): the learning-rate schedule is now a %d-step run's; at step %d "
            "the rate is %.3g (%.0f%% of the peak)", cfg.max_steps, before, cfg.max_steps, step,
            cfg.learning_rate * factor, 100 * factor,
        )  # fmt: skip


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
            stats += objective(to_device(batch, device))[1].double()
    objective.train(was_training)
    return summarize(all_reduce(stats, d), objective.sentence_weight)


def teardown(run: Run, clean: bool = False) -> None:
    """Loader workers stopped, the process group (if this run made it) destroyed, the folder let go.
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
    run.lock.close()


def pretrain(
    cfg: PretrainConfig,
    *,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    tokenizer: Any = None,
    on_step: Callable[[int], None] | None = None,
    again: str | None = None,
    slow_advice: str | None = None,
) -> LoopResult:
    """Run (or resume) pretraining as `cfg` says; returns where it stopped.

    Data sets default to `PretrainingDataset(cfg.data, split=...)` and the data folder's tokenizer;
    tests pass their own. `on_step(step)` runs on every rank after each optimizer step. What the run says
    to its user, where a caller has its own options (`albert demo`): `again`, the way on when a signal
    stops it (default: --resume), and `slow_advice`, what to do instead of a CPU run of many hours.
    """
    if not isinstance(cfg, PretrainConfig):
        raise TypeError(
            f"pretrain: expected a PretrainConfig, got {type(cfg).__name__}: PretrainConfig(**settings)"
        )
    run = setup(cfg, train_dataset, eval_dataset, tokenizer)
    objective = Pretraining(run)
    objective.again = again or objective.again
    objective.slow_advice = slow_advice or objective.slow_advice
    try:
        return train(objective, run.latest, on_step)
    finally:
        teardown(run, clean=sys.exc_info()[0] is None)
