"""Everything a pretraining run needs before its first step, in a `Run`: device, process group and
precision; the data sets and the loader; the output folder; the model, its objective (DDP-wrapped when
there are several processes), optimizer and scheduler; the state of the checkpoint it resumes from.

The SOP head has no dropout here, as google-research's `get_sentence_order_output` (transformers'
AlbertSOPHead applies `classifier_dropout_prob`; we set it to 0 during pretraining).

The order of the draws is part of exact resume: every generator is seeded after the data is loaded and
before the model is built; a resumed run then restores each rank's generators from its checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from albert_lm.data.dataset import PretrainingSampler, pretraining_loader, text_eval_dataset
from albert_lm.files import folder_lock, read_json_object
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import pick_device
from albert_lm.kernels.float8 import check_float8, convert_to_float8
from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import preflight, run_folder
from albert_lm.training.clock import budget_seconds, check_budget_kept, run_length
from albert_lm.training.distributed import DistInfo, init_distributed
from albert_lm.training.model_init import build_model_config, initial_model
from albert_lm.training.monitor import MetricsLog
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.optim import (
    PAPER_WARMUP_FRACTION,
    build_optimizer,
    build_scheduler,
    build_time_budget_scheduler,
    fit_warmup,
)
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)

# DataLoader worker processes per rank: on CUDA they read, mask and pad while the GPU computes; on CPU
# they compete with the step for the same cores (measured: slower on 2 cores), so the main process reads.
# One worker makes ~2000 dynamically masked 128-token sequences a second (a 2.0 GHz Zen 1 core), while a
# small model takes 50k+ a second on an H100: as many workers as the cores allow, up to 12, one core
# left to the training process for each GPU process on the machine.
CUDA_MAX_LOADER_WORKERS = 12


@dataclass
class Run:
    """Everything `setup` built, and where the run stands in its data (`albert_lm.training.pretrain`)."""

    cfg: PretrainConfig
    d: DistInfo
    device: torch.device
    out: Path
    model: AlbertForPreTraining
    objective: PretrainingObjective
    wrapped: nn.Module  # the objective, or DDP around it
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PretrainingSampler
    loader: DataLoader
    tokenizer: Any = None
    evals: dict[str, Any] = field(default_factory=dict)  # split name -> data set
    latest: Path | None = None  # the checkpoint the run resumes from
    step: int = 0  # optimizer steps taken (as the model cards say it)
    metrics: MetricsLog | None = None  # rank 0's (the model cards read its evaluations)
    epoch: int = 0
    offset: int = 0  # position in the epoch's order of the next global batch
    dropout_off: bool = False
    batches: Iterator[dict[str, torch.Tensor]] | None = None  # the loader's iterator over this epoch
    lock: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # rank 0's hold on `out`


def _resolved_precision(cfg: PretrainConfig, device: torch.device, d: DistInfo) -> PretrainConfig:
    """cfg with `auto` replaced by what it means here (logged; the saved config records what ran)."""
    if cfg.precision != "auto":
        return cfg
    # Every rank must compute alike: rank 0 measures (alone, so no rank's timing disturbs another's)
    # and decides for all.
    precision, why = resolve_precision("auto", device) if d.main else ("fp32", "")
    if d.world > 1:
        choice = torch.tensor([precision == "bf16"], dtype=torch.int64, device=device)
        dist.broadcast(choice, 0)
        precision = "bf16" if bool(choice.item()) else "fp32"
    if d.main:
        logger.info("precision auto -> %s: %s", precision, why)
    return dataclasses.replace(cfg, precision="bf16" if precision == "bf16" else "fp32")


def _start_process(cfg: PretrainConfig) -> tuple[PretrainConfig, torch.device, DistInfo]:
    """The device, the process group (under torchrun) and the precision, resolved."""
    device = pick_device(cfg.device)
    if device.type == "cuda" and device.index is not None:  # plain "cuda" is the current device already
        torch.cuda.set_device(device)
    d = init_distributed(device, cfg.dist_timeout_s)
    cfg = _resolved_precision(cfg, device, d)
    if cfg.float8:
        check_float8(device)
        if cfg.precision != "bf16":
            raise ValueError(
                "--float8 computes what is not float8 under bf16 autocast: --precision bf16 or auto"
            )
    return cfg, device, d


def _load_data(cfg: PretrainConfig) -> tuple[Any, Any, Any]:
    from albert_lm.data.dataset import PretrainingDataset
    from albert_lm.data.tokenizer import AlbertTokenizer

    if cfg.data is None:
        raise ValueError("no --data folder given (make one with `albert data create`, or run `albert demo`)")
    data = Path(cfg.data)
    if not data.is_dir():
        raise FileNotFoundError(f"--data {data}: no such folder")
    # The training split may be masked at another rate than the data's; the held-out split keeps the
    # data's, so held-out figures compare between runs (and with BERT's 15%).
    train = PretrainingDataset(
        data,
        split="train",
        masked_lm_prob=cfg.masked_lm_prob,
        max_predictions_per_seq=cfg.max_predictions_per_seq,
    )
    evaluation: Any = PretrainingDataset(data, split="eval") if "eval" in train.manifest["splits"] else None
    if evaluation is None or len(evaluation) == 0:
        logger.warning(
            "no evaluation: the held-out split of %s is empty (too little text for --eval-fraction %s); "
            "no held-out metrics will be reported",
            data,
            train.config.eval_fraction,
        )
        evaluation = None
    return train, evaluation, AlbertTokenizer.from_pretrained(data)


def _check_inputs(
    cfg: PretrainConfig, latest: Path | None, train: Any, evaluation: Any, tokenizer: Any, d: DistInfo
) -> None:
    """Everything given fits together (`albert_lm.training.preflight`), before any folder is touched.
    The data's checksums are read by rank 0 only (every rank reads the same files; a failure there ends
    the run under torchrun)."""
    preflight.check_output(cfg, latest, locked=not d.main)  # rank 0 takes the lock, maybe before this
    vocab = getattr(tokenizer, "vocab_size", None)
    seq = getattr(train, "max_seq_length", None)
    if latest is not None and cfg.resume:
        preflight.check_resume(_as_compared(cfg, latest), latest)
        preflight.check_tokenizer(tokenizer, latest, "--resume: the checkpoint")
        preflight.check_model_fits(AlbertConfig.from_pretrained(latest), str(latest), vocab, seq)
    else:
        preflight.check_model_fits(build_model_config(cfg, vocab, say=False), "the model", None, seq)
        if cfg.init_from:
            if not (Path(cfg.init_from) / "config.json").is_file():
                raise FileNotFoundError(
                    f"--init-from {cfg.init_from}: no config.json there (expected a model folder: a pretraining "
                    "run's output or one of its checkpoint-N folders)"
                )
            preflight.check_tokenizer(tokenizer, Path(cfg.init_from), "--init-from")
            source = AlbertConfig.from_pretrained(cfg.init_from)
            if vocab is not None and source.vocab_size != vocab:
                raise ValueError(
                    f"--init-from {cfg.init_from}: its embedding has {source.vocab_size} rows, the data's "
                    f"tokenizer {vocab} pieces; use data made with the model's tokenizer"
                )
    if d.main:
        preflight.check_data([train, evaluation])


def _as_compared(cfg: PretrainConfig, latest: Path) -> PretrainConfig:
    """`cfg` as a resume's settings check compares it with the run's (`preflight.check_resume`). Two
    settings may change under conditions the resumed run checks against its state (`pretrain.check_resumed`):
    --gradient-accumulation-steps, where the global batch stays the run's (under another number of
    processes), and the length of a --time-budget (never one taken on or dropped: `check_budget_kept`);
    the run's own values stand in for them here."""
    saved = read_json_object(latest / preflight.SETTINGS_FILE, "run configuration")
    check_budget_kept(
        saved.get("time_budget"),
        cfg.time_budget,
        latest,
        preflight.PRETRAINING.new_run_hint.format(latest=latest),
    )
    same: dict[str, Any] = {}
    accumulation = saved.get("gradient_accumulation_steps")
    if type(accumulation) is int and accumulation >= 1:
        same["gradient_accumulation_steps"] = accumulation
    if cfg.time_budget is not None and budget_seconds(saved.get("time_budget")) is not None:
        same["time_budget"] = saved["time_budget"]
    return dataclasses.replace(cfg, **same)


def _prepare_output(cfg: PretrainConfig, d: DistInfo, latest: Path | None) -> Path:
    """The output folder: emptied under --overwrite, cleared of half-written checkpoints."""
    out = Path(cfg.output)
    if d.main:
        if cfg.overwrite and out.is_dir():
            preflight.remove_run(out)
        out.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temporaries(out)
        if latest is None:  # a run killed before its first checkpoint: its logs go
            run_folder.clear_logs(preflight.PRETRAINING, out, cfg.resume)
        else:
            preflight.remove_finished_model(cfg, latest)
    if d.world > 1:
        dist.barrier()
    return out


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _build_model(
    cfg: PretrainConfig,
    vocab_size: int | None,
    latest: Path | None,
    sentence_objective: str,
    device: torch.device,
) -> tuple[AlbertForPreTraining, PretrainingObjective]:
    """The model as pretraining runs it (no SOP-head dropout, gradient checkpointing as configured)."""
    model = initial_model(cfg, vocab_size, latest)
    model.sop_classifier.dropout.p = 0.0  # google-research's SOP head has no dropout
    if sentence_objective == "none":
        model.sop_classifier.requires_grad_(False)
    model.albert.encoder.gradient_checkpointing = cfg.gradient_checkpointing
    model.to(device).train()
    if cfg.float8:
        n = convert_to_float8(model.albert.encoder)
        logger.info("float8 products in %d linear layers of the encoder (torchao)", n)
    if cfg.torch_compile:  # in place: parameter names and checkpoints stay those of the plain model
        logger.info("compiling the encoder (torch.compile): the first step takes 20 s or more")
        model.albert.compile()
    return model, PretrainingObjective(model, sentence_objective, cfg.sop_weight)


def _wrap(objective: PretrainingObjective, device: torch.device, d: DistInfo) -> nn.Module:
    if d.world == 1:
        return objective
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(objective, device_ids=ids)


def _build_optimization(
    cfg: PretrainConfig, model: nn.Module
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    optimizer = build_optimizer(
        model,
        cfg.optimizer,
        cfg.learning_rate,
        cfg.weight_decay,
        (cfg.adam_beta1, cfg.adam_beta2),
        cfg.adam_epsilon,
        cfg.bias_correction,
    )
    if cfg.time_budget is not None:  # decay over the budget's time, not over max_steps
        return optimizer, build_time_budget_scheduler(optimizer, cfg.warmup_steps, cfg.poly_power)
    warmup = fit_warmup(cfg.warmup_steps, cfg.max_steps, PAPER_WARMUP_FRACTION, "pretrain")
    return optimizer, build_scheduler(optimizer, warmup, cfg.max_steps, cfg.poly_power)


def loader_settings(device: torch.device) -> tuple[int, bool]:
    """(num_workers, pin_memory) of the training loader: workers and pinned memory on CUDA only."""
    if device.type == "cuda":
        per_gpu = (os.cpu_count() or 2) // max(1, torch.cuda.device_count()) - 1
        return max(1, min(CUDA_MAX_LOADER_WORKERS, per_gpu)), True
    return 0, False


def _train_loader(
    dataset: Any, cfg: PretrainConfig, d: DistInfo, device: torch.device
) -> tuple[PretrainingSampler, DataLoader]:
    sampler = PretrainingSampler(
        dataset,
        num_replicas=d.world,
        rank=d.rank,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        accumulation=cfg.gradient_accumulation_steps,
    )
    if len(dataset) < sampler.global_batch:
        raise ValueError(
            f"training set has {len(dataset)} sequences, fewer than one global batch ({sampler.global_batch})"
        )
    workers, pin = loader_settings(device)
    return sampler, pretraining_loader(dataset, sampler, num_workers=workers, pin_memory=pin)


def _log_start(run: Run, train_dataset: Any) -> None:
    cfg, d = run.cfg, run.d
    global_batch = run.sampler.global_batch
    tokens_per_step = global_batch * len(train_dataset[0]["input_ids"])
    sentence = run.objective.sentence_objective
    logger.info(
        "pretraining %s (%.1fM parameters, %s) on %d sequences: %s, global batch %d (%d x %d x %d "
        "processes), ~%d tokens per step, %s, %s, lr %.3g",
        cfg.model_config or cfg.preset,
        run.model.num_parameters() / 1e6,
        sentence if cfg.sop_weight else f"masked LM only, {sentence} weight 0",
        len(train_dataset),
        run_length(cfg.max_steps, cfg.time_budget),
        global_batch,
        cfg.batch_size,
        cfg.gradient_accumulation_steps,
        d.world,
        tokens_per_step,
        cfg.optimizer,
        cfg.precision,
        cfg.learning_rate,
    )
    paper, scaled = (
        PretrainConfig.scaled_learning_rate(4096),
        PretrainConfig.scaled_learning_rate(global_batch),
    )
    if d.main and cfg.learning_rate == paper and global_batch * 4 <= 4096 and not run.latest:
        logger.warning(
            "lr %.3g is the paper's for a global batch of 4096; at %d the square-root rule gives %.2g "
            "(--learning-rate %.2g; a recipe sets its own): too high a rate can stall or diverge",
            paper, global_batch, scaled, scaled,
        )  # fmt: skip
    masking = getattr(train_dataset, "config", None)
    if masking is not None:
        logger.info(
            "masking %.0f%% of training tokens (at most %d per sequence, n-grams up to %d)",
            100 * masking.masked_lm_prob,
            masking.max_predictions_per_seq,
            masking.max_ngram,
        )


def setup(
    cfg: PretrainConfig, train_dataset: Any = None, eval_dataset: Any = None, tokenizer: Any = None
) -> Run:
    """Everything a run needs before its first step, resumed from the newest checkpoint if there is one."""
    if cfg.init_from and not Path(cfg.init_from).exists():  # a hub id: its cached snapshot, also in the
        # run's pretrain_config.json (PretrainConfig.load has resolved it already, and said so, for the CLI)
        cfg = dataclasses.replace(cfg, init_from=str(resolve_model(cfg.init_from, "--init-from")))
    cfg, device, d = _start_process(cfg)
    if train_dataset is None:
        train_dataset, eval_dataset, tokenizer = _load_data(cfg)
    latest = ckpt.latest_checkpoint(cfg.output, preflight.SETTINGS_FILE)
    _check_inputs(cfg, latest, train_dataset, eval_dataset, tokenizer, d)
    # under --overwrite what the folder holds is removed next; a resume says which damaged ones it skips
    latest = ckpt.resume_checkpoint(cfg.output, preflight.SETTINGS_FILE, d.main) if cfg.resume else None
    with contextlib.ExitStack() as held:
        # one run at a time writes a folder: a second is refused before it clears or writes anything
        if d.main:
            held.enter_context(folder_lock(cfg.output))
        run = _setup_locked(cfg, device, d, train_dataset, eval_dataset, tokenizer, latest)
        # held until teardown; a failure before here lets the folder go at once (and removes it, where
        # the lock made it and nothing was written)
        run.lock = held.pop_all()
        return run


def _setup_locked(
    cfg: PretrainConfig,
    device: torch.device,
    d: DistInfo,
    train_dataset: Any,
    eval_dataset: Any,
    tokenizer: Any,
    latest: Path | None,
) -> Run:
    out = _prepare_output(cfg, d, latest)
    _seed_everything(cfg.seed)
    sentence_objective = getattr(train_dataset, "objective", "sop")
    vocab_size = getattr(tokenizer, "vocab_size", None)
    model, objective = _build_model(cfg, vocab_size, latest, sentence_objective, device)
    optimizer, scheduler = _build_optimization(cfg, model)
    sampler, loader = _train_loader(train_dataset, cfg, d, device)
    run = Run(
        cfg,
        d,
        device,
        out,
        model,
        objective,
        _wrap(objective, device, d),
        optimizer,
        scheduler,
        sampler,
        loader,
        tokenizer,
        latest=latest,
    )
    if latest is None:  # a resumed run restores each rank's generators (`albert_lm.training.loop`)
        torch.manual_seed(cfg.seed + d.rank)  # dropout differs between ranks; weights are rank 0's (DDP)
    if eval_dataset is not None:
        run.evals["eval"] = eval_dataset
    if cfg.eval_text:
        seq = min(128, model.config.max_position_embeddings)
        run.evals["eval_text"] = text_eval_dataset(cfg.eval_text, tokenizer, seq)
    if d.main:
        _log_start(run, train_dataset)
    return run
