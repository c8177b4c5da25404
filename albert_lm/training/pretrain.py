"""The pretraining loop: masked LM (+ SOP or NSP) with LAMB, one process or DDP under torchrun.

Follows the paper's Section 4.1 and google-research/albert `run_pretraining.py`:
- MLM logits only at the masked positions (google-research gathers `masked_lm_positions`; computing
  V x B x S logits as transformers does costs ~9% of an albert-base step for nothing). The MLM loss is
  the mean over the micro-batch's masked tokens, the SOP/NSP loss the mean over its sequences; the
  objective is their sum. With K accumulation steps and W processes the gradient is the mean of the
  K * W micro-batch gradients (DDP averages, accumulation divides by K), so W=2, K=1 and W=1, K=2 see
  the same micro-batches (see `_micro_batch_indices`) and take the same step.
- The SOP head has no dropout here, as google-research's `get_sentence_order_output` (transformers'
  AlbertSOPHead applies `classifier_dropout_prob`; we set it to 0 during pretraining).
- LAMB, clipping, warmup + polynomial decay: `albert_lm.training.optim`. Paper defaults: lr 0.00176 at batch
  4096, 125k steps, warmup 3125; `--learning-rate` is the rate for your global batch.
- "dropout off from step N" (Section 4.9: removing dropout helps once the model no longer overfits).
- Checkpoints in transformers' layout + exact training state (`albert_lm.training.checkpoint`); `resume` continues
  bit-for-bit (CPU, fp32): data order and dynamic masking are functions of (seed, epoch, position).

DDP is applied here and nowhere else: the model never sees torch.distributed. Rank 0 logs and saves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training import checkpoint as ckpt
from albert_lm.training.distributed import DistInfo, StopFlag, all_reduce, gather, init_distributed
from albert_lm.training.monitor import METRICS_FILE, MetricsLog, format_line, plot_metrics, text_eval_dataset
from albert_lm.training.optim import build_optimizer, build_scheduler, clip_by_global_norm
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)

SENTENCE_OBJECTIVES = ("sop", "nsp", "none")
# Per micro-batch sums, reduced over micro-batches and ranks before anything is divided.
_STATS = ("mlm_loss_sum", "mlm_count", "mlm_correct", "sop_loss_sum", "sop_count", "sop_correct", "tokens")


@dataclass
class PretrainResult:
    output: Path
    step: int
    interrupted: bool
    final_metrics: dict[str, float]


# --------------------------------------------------------------------------- the objective
class PretrainingObjective(nn.Module):
    """MLM at the masked positions + SOP/NSP; DDP wraps this, so every parameter is used in forward."""

    def __init__(self, model: AlbertForPreTraining, sentence_objective: str = "sop"):
        super().__init__()
        if sentence_objective not in SENTENCE_OBJECTIVES:
            raise ValueError(
                f"sentence objective must be one of {SENTENCE_OBJECTIVES}, got {sentence_objective!r}"
            )
        self.model = model
        self.sentence_objective = sentence_objective

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (loss, stats): the scalar objective and the `_STATS` sums of this micro-batch."""
        out = self.model.albert(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        )
        labels = batch["labels"]  # (B, S), -100 except at masked positions
        masked = labels != -100
        logits = self.model.predictions(out.last_hidden_state[masked]).float()  # (N, V), N masked tokens
        target = labels[masked]  # (N,)
        mlm_sum = F.cross_entropy(logits, target, reduction="sum")
        n_mlm = target.numel()
        loss = mlm_sum / max(n_mlm, 1)
        mlm_correct = (logits.argmax(-1) == target).sum()
        zero = torch.zeros((), device=logits.device)
        sop_sum, sop_correct, n_sop = zero, zero, 0
        # Plain-text evaluation sets carry no sentence labels: MLM only there.
        if self.sentence_objective != "none" and "sentence_order_label" in batch:
            sop_logits = self.model.sop_classifier(out.pooler_output).float()  # (B, 2)
            sop_target = batch["sentence_order_label"].view(-1)
            sop_sum = F.cross_entropy(sop_logits, sop_target, reduction="sum")
            n_sop = sop_target.numel()
            loss = loss + sop_sum / n_sop
            sop_correct = (sop_logits.argmax(-1) == sop_target).sum()
        tokens = batch["attention_mask"].sum()
        stats = torch.stack(
            [mlm_sum.detach(), torch.tensor(float(n_mlm), device=logits.device), mlm_correct.float(),
             sop_sum.detach(), torch.tensor(float(n_sop), device=logits.device), sop_correct.float(),
             tokens.float()]
        )  # fmt: skip
        return loss, stats


def summarize(stats: torch.Tensor) -> dict[str, float]:
    """_STATS sums -> losses and accuracies (token-weighted MLM, sequence-weighted SOP)."""
    s = dict(zip(_STATS, stats.double().tolist(), strict=True))
    mlm_loss = s["mlm_loss_sum"] / max(s["mlm_count"], 1)
    out = {"mlm_loss": mlm_loss, "mlm_acc": s["mlm_correct"] / max(s["mlm_count"], 1), "loss": mlm_loss}
    if s["sop_count"] > 0:
        out["sop_loss"] = s["sop_loss_sum"] / s["sop_count"]
        out["sop_acc"] = s["sop_correct"] / s["sop_count"]
        out["loss"] += out["sop_loss"]
    out["tokens"] = s["tokens"]
    return out


# --------------------------------------------------------------------------- data order
def collate(items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence of the micro-batch (pad id 0, label -100, mask 0)."""
    length = max(int(it["input_ids"].numel()) for it in items)
    pad = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0, "labels": -100}
    batch: dict[str, torch.Tensor] = {}
    for key, value in pad.items():
        rows = [F.pad(it[key].long(), (0, length - it[key].numel()), value=value) for it in items]
        batch[key] = torch.stack(rows)  # (B, S)
    if "sentence_order_label" in items[0]:
        batch["sentence_order_label"] = torch.stack(
            [it["sentence_order_label"].long().view(()) for it in items]
        )
    return batch


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g)


def _micro_batch_indices(
    perm: torch.Tensor, offset: int, batch: int, accum: int, rank: int, world: int, micro: int
) -> list[int]:
    # The step's global batch is perm[offset : offset + batch*accum*world]; slot rank*accum + micro of it
    # goes to (rank, micro). So W=2,K=1 and W=1,K=2 see the same micro-batches.
    start = offset + (rank * accum + micro) * batch
    return perm[start : start + batch].tolist()


# --------------------------------------------------------------------------- model and data set-up
def build_model_config(cfg: PretrainConfig, vocab_size: int | None) -> AlbertConfig:
    if cfg.model_config:
        mc = AlbertConfig.from_pretrained(cfg.model_config, **cfg.model_overrides)
    else:
        mc = AlbertConfig.from_preset(cfg.preset, **cfg.model_overrides)
    if vocab_size is not None and mc.vocab_size != vocab_size:
        logger.info("vocab_size %d -> %d (the tokenizer's)", mc.vocab_size, vocab_size)
        mc.vocab_size = vocab_size
    return mc


def _load_data(cfg: PretrainConfig) -> tuple[Any, Any, Any]:
    from albert_lm.data.dataset import PretrainingDataset
    from albert_lm.data.tokenizer import AlbertTokenizer

    if cfg.data is None:
        raise ValueError("no --data folder given (make one with `albert data create`, or run `albert demo`)")
    data = Path(cfg.data)
    if not data.is_dir():
        raise FileNotFoundError(f"--data {data}: no such folder")
    train = PretrainingDataset(data, split="train")
    try:
        evaluation = PretrainingDataset(data, split="eval")
    except (FileNotFoundError, ValueError) as e:
        logger.warning("no held-out split in %s (%s): evaluating on nothing", data, e)
        evaluation = None
    return train, evaluation, AlbertTokenizer.from_pretrained(data)


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
    return dataclasses.replace(cfg, precision=precision)


def _autocast(cfg: PretrainConfig, device: torch.device) -> contextlib.AbstractContextManager:
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


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
    stats = torch.zeros(len(_STATS), dtype=torch.float64, device=device)
    n = len(dataset)
    b = cfg.batch_size
    for i in range(d.rank * b, min(n, cfg.eval_batches * b), d.world * b):
        batch = _to(collate([dataset[j] for j in range(i, min(i + b, n))]), device)
        with _autocast(cfg, device):
            stats += objective(batch)[1].double()
    objective.train(was_training)
    return summarize(all_reduce(stats, d))


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _resolve_device(cfg: PretrainConfig) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but torch sees no CUDA device")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


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
    device = _resolve_device(cfg)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    d = init_distributed(device, cfg.dist_timeout_s)
    cfg = _resolved_precision(cfg, device, d)
    if train_dataset is None:
        train_dataset, eval_dataset, tokenizer = _load_data(cfg)
    sentence_objective = getattr(train_dataset, "objective", "sop")
    out = Path(cfg.output)
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temporaries(out)
    if d.world > 1:
        dist.barrier()
    latest = ckpt.latest_checkpoint(out)
    if latest is not None and not cfg.resume:
        raise FileExistsError(f"{out} already holds {latest.name}: pass --resume, or choose another --output")
    if cfg.resume and latest is None and d.main:
        logger.warning("--resume: no complete checkpoint in %s, starting from step 0", out)

    _seed_everything(cfg.seed)
    if latest is not None:
        model = AlbertForPreTraining.from_pretrained(latest)
    else:
        model = AlbertForPreTraining(build_model_config(cfg, getattr(tokenizer, "vocab_size", None)))
        if cfg.init_from:
            ckpt.warm_start(model, cfg.init_from, cfg.init_from_group0)
    model.sop_classifier.dropout.p = 0.0  # google-research's SOP head has no dropout
    if sentence_objective == "none":
        model.sop_classifier.requires_grad_(False)
    model.albert.encoder.gradient_checkpointing = cfg.gradient_checkpointing
    model.to(device).train()
    objective = PretrainingObjective(model, sentence_objective)
    wrapped: nn.Module = objective
    if d.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(objective, device_ids=ids)
    optimizer = build_optimizer(
        model, cfg.optimizer, cfg.learning_rate, cfg.weight_decay,
        (cfg.adam_beta1, cfg.adam_beta2), cfg.adam_epsilon, cfg.bias_correction,
    )  # fmt: skip
    scheduler = build_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps, cfg.poly_power)

    step, epoch, offset = 0, 0, 0
    acc = torch.zeros(len(_STATS), dtype=torch.float64, device=device)
    if latest is not None:
        state = ckpt.load_training_state(latest)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, epoch, offset = state["step"], state["epoch"], state["offset"]
        ranks = state["ranks"]
        if len(ranks) != d.world and d.main:
            logger.warning(
                "resuming %d processes from %d: data order kept, RNG streams not", d.world, len(ranks)
            )
        mine = ranks[min(d.rank, len(ranks) - 1)]
        ckpt.restore_rng_state(mine["rng"])
        acc = mine["acc"].to(device)
        if d.main:
            logger.info("resumed from %s (step %d)", latest, step)
    else:
        torch.manual_seed(cfg.seed + d.rank)  # dropout differs between ranks; weights are rank 0's (DDP)

    global_batch = cfg.batch_size * cfg.gradient_accumulation_steps * d.world
    n = len(train_dataset)
    if n < global_batch:
        raise ValueError(f"training set has {n} sequences, fewer than one global batch ({global_batch})")
    text_eval = None
    if cfg.eval_text:
        text_eval = text_eval_dataset(
            cfg.eval_text, tokenizer, min(128, model.config.max_position_embeddings)
        )
    metrics = MetricsLog(out, step, cfg.tensorboard) if d.main else None
    if d.main:
        tokens_per_step = global_batch * len(train_dataset[0]["input_ids"])
        logger.info(
            "pretraining %s (%.1fM parameters, %s) on %d sequences: %d steps, global batch %d (%d x %d x %d "
            "processes), ~%d tokens per step, %s, %s, lr %.3g",
            cfg.model_config or cfg.preset, model.num_parameters() / 1e6, sentence_objective, n, cfg.max_steps,
            global_batch, cfg.batch_size, cfg.gradient_accumulation_steps, d.world, tokens_per_step,
            cfg.optimizer, cfg.precision, cfg.learning_rate,
        )  # fmt: skip

    def run_eval(at: int) -> dict[str, float]:
        results: dict[str, float] = {}
        for split, ds in (("eval", eval_dataset), ("eval_text", text_eval)):
            if ds is None:
                continue
            m = evaluate(objective, ds, cfg, device, d)
            m.pop("tokens")
            results.update({f"{split}_{k}": v for k, v in m.items()})
            if metrics is not None:
                metrics.write({"step": at, "split": split, **m})
                logger.info("%s", format_line(at, m, prefix=f"{split} @"))
        return results

    def save(at: int) -> None:
        local = {"rng": ckpt.capture_rng_state(), "acc": acc.cpu()}
        ranks = gather(local, d)
        if d.main:
            state = {
                "step": at, "epoch": epoch, "offset": offset, "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "ranks": ranks, "global_batch": global_batch,
            }  # fmt: skip
            extra = tokenizer.save_pretrained if tokenizer is not None else None
            path = ckpt.save_checkpoint(out, at, model, state, cfg.to_dict(), extra, cfg.keep_last)
            logger.info("saved %s", path)
        if d.world > 1:
            dist.barrier()

    stop = StopFlag()
    stop.install()
    perm = epoch_permutation(n, cfg.seed, epoch)
    if hasattr(train_dataset, "set_epoch"):
        train_dataset.set_epoch(epoch)
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not d.main, desc="pretrain", unit="step")
    compute_s = 0.0
    dropout_off = False
    result_metrics: dict[str, float] = {}
    try:
        while step < cfg.max_steps:
            if offset + global_batch > n:  # the epoch's remainder is dropped: every step has a full batch
                epoch, offset = epoch + 1, 0
                perm = epoch_permutation(n, cfg.seed, epoch)
                if hasattr(train_dataset, "set_epoch"):
                    train_dataset.set_epoch(epoch)
            if cfg.dropout_off_step is not None and step >= cfg.dropout_off_step and not dropout_off:
                model.set_dropout(hidden=0.0, attention=0.0)
                dropout_off = True
                if d.main:
                    logger.info("dropout off from step %d", step)
            t0 = time.perf_counter()
            k_steps = cfg.gradient_accumulation_steps
            for k in range(k_steps):
                idx = _micro_batch_indices(perm, offset, cfg.batch_size, k_steps, d.rank, d.world, k)
                batch = _to(collate([train_dataset[i] for i in idx]), device)
                last = k == k_steps - 1
                sync = wrapped.no_sync() if (d.world > 1 and not last) else contextlib.nullcontext()
                with sync:
                    with _autocast(cfg, device):
                        loss, stats = wrapped(batch)
                    (loss / k_steps).backward()
                acc += stats.double()
            grad_norm = clip_by_global_norm(
                [p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm
            )
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            offset += global_batch
            compute_s += time.perf_counter() - t0
            bar.update(1)
            if on_step is not None:
                on_step(step)
            stopping = torch.tensor([float(stop.signum is not None)], device=device)
            stopping = bool(all_reduce(stopping, d, dist.ReduceOp.MAX).item())
            if step % cfg.log_every == 0 or step == cfg.max_steps or stopping:
                m = summarize(all_reduce(acc, d))
                m.update(lr=lr, grad_norm=float(grad_norm), epoch=epoch)
                m["tok_per_s"] = m.pop("tokens") / max(compute_s, 1e-9)
                if metrics is not None:
                    metrics.write({"step": step, "split": "train", **m})
                    bar.set_postfix(loss=f"{m['loss']:.3f}", mlm_acc=f"{m['mlm_acc']:.3f}")
                    logger.info("%s", format_line(step, m))
                result_metrics = m
                acc.zero_()
                compute_s = 0.0
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps and not stopping:
                run_eval(step)
            if stopping or step == cfg.max_steps or (cfg.save_every and step % cfg.save_every == 0):
                save(step)
            if stopping:
                if d.main:
                    name = signal.Signals(stop.signum).name if stop.signum else "a signal on another rank"
                    logger.info("stopped by %s at step %d; continue with --resume", name, step)
                return PretrainResult(out, step, True, result_metrics)
        result_metrics.update(run_eval(step))
        if d.main:
            model.save_pretrained(out)
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
            ckpt.write_json_atomic(out / ckpt.CONFIG_FILE, cfg.to_dict())
            logger.info("final model in %s", out)
        return PretrainResult(out, step, False, result_metrics)
    finally:
        bar.close()
        stop.restore()
        if d.owned:
            dist.destroy_process_group()
        if metrics is not None:
            metrics.close()
            if cfg.plot and (out / METRICS_FILE).stat().st_size > 0:
                plot_metrics(out)
