"""Fine-tuning and evaluation: one loop for every downstream task.

The recipe is google-research ALBERT's fine-tuning (`run_classifier.py`, `run_squad_v1/v2.py`,
`run_race.py`): AdamW as its AdamWeightDecayOptimizer (no bias correction, eps 1e-6, decay 0.01 on all
but LayerNorm and biases), linear warmup then linear decay to 0, gradients clipped to global norm 1,
and the per-task learning rate / batch / warmup / steps / max length of its fine-tuning table (the
paper's Appendix A.4), all overridable. When the step count or the epochs are changed, the warmup keeps
the table's warmup fraction.

What we add around it:
- batches are bucketed by length: examples are shuffled, then sorted by length inside windows of 50
  batches, and the batches shuffled again, so short sentences are padded to their neighbours' length,
  not to `max_seq_length`; evaluation runs in length order and restores the original order;
- evaluation on dev every `eval_every` steps and at the end; the checkpoint with the best value of
  the task's main metric is kept in OUTPUT/best (written under a temporary name, then renamed), with
  its dev predictions in OUTPUT/predictions (GLUE submission TSVs, SQuAD predictions JSON, ...);
- OUTPUT/eval_results.json holds the best checkpoint's metrics under their usual names, and
  OUTPUT/metrics.jsonl one line per evaluation;
- every input file is read and checked before anything is written, so bad input leaves no output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albert_lm.tasks import Task, get_task
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.task import Feature, atomic_write_text
from albert_lm.training.finetune_config import FinetuneConfig, schedule
from albert_lm.training.optim import build_optimizer, build_scheduler, clip_by_global_norm

logger = logging.getLogger(__name__)

HEAD_CLASSES = {
    "sequence_classification": AlbertForSequenceClassification,
    "question_answering": AlbertForQuestionAnswering,
    "multiple_choice": AlbertForMultipleChoice,
    "token_classification": AlbertForTokenClassification,
}


# --------------------------------------------------------------------------- running the model
def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _resolve_precision(precision: str, device: torch.device) -> str:
    """`auto` -> bf16 where this device computes it fast, else fp32 (logged); others unchanged."""
    resolved, why = resolve_precision(precision, device)
    if precision == "auto":
        logger.info("precision auto -> %s: %s", resolved, why)
    return resolved


def _autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return torch.autocast(device.type, enabled=False)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


@torch.no_grad()
def run_model(
    model: torch.nn.Module,
    features: Sequence[Feature],
    batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str = "fp32",
    desc: str = "eval",
) -> list[dict[str, np.ndarray]]:
    """Per-feature outputs in feature order, trimmed to each feature's length (logits as float32)."""
    model.eval()
    outputs: list[dict[str, np.ndarray] | None] = [None] * len(features)
    batches = length_bucketed_batches([feature_length(f) for f in features], batch_size, None)
    for idx in tqdm(batches, desc=desc, unit="batch", disable=None, leave=False):
        chunk = [features[i] for i in idx]
        batch = collate(chunk, pad_id)
        inputs = {k: batch[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")}
        with _autocast(device, precision):
            out = model(**inputs)
        if getattr(out, "start_logits", None) is not None:
            starts, ends = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                outputs[i] = {"start_logits": starts[row, :n], "end_logits": ends[row, :n]}
        else:
            logits = out.logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                value = logits[row]
                if value.ndim == 2:  # token classification: (L, num_labels)
                    value = value[: len(features[i]["input_ids"])]
                outputs[i] = {"logits": value}
    return outputs  # type: ignore[return-value]


@dataclass
class EvalSet:
    suffix: str  # metric-name suffix ("" or "_mm")
    split: str
    examples: list[Any]
    features: list[Feature]


def evaluate_sets(
    task: Task,
    model: torch.nn.Module,
    sets: Sequence[EvalSet],
    batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of every evaluation set (suffixed names) and the predictions per split."""
    results: dict[str, float] = {}
    predictions: dict[str, Any] = {}
    for s in sets:
        outputs = run_model(model, s.features, batch_size, pad_id, device, precision, desc=s.split)
        preds = task.predict(s.examples, s.features, outputs)
        predictions[s.split] = preds
        if s.split.startswith("test"):
            continue
        for k, v in task.score(s.examples, preds).items():
            results[k + s.suffix] = v
    return results, predictions


# --------------------------------------------------------------------------- reading
def _build_task(cfg: FinetuneConfig) -> Task:
    return get_task(cfg.task, **cfg.task_options())


def _read_split(task: Task, data: Path, split: str, cap: int | None) -> list[Any] | None:
    path = task.split_file(data, split)
    if path is None:
        return None
    examples = task.read(path, split)
    logger.info("%s: %d examples from %s", split, len(examples), path)
    return examples[:cap] if cap else examples


def _eval_sets(
    task: Task, data: Path, tokenizer: AlbertTokenizer, max_seq_length: int, cap: int | None, test: bool
) -> list[EvalSet]:
    sets = []
    # One file given for every split: it is train and dev, never a test set to predict.
    tests = [("", s) for s in task.test_splits()] if test and not data.is_file() else []
    splits = list(task.eval_splits) + tests
    for suffix, split in splits:
        examples = _read_split(task, data, split, cap)
        if examples is not None:
            sets.append(EvalSet(suffix, split, examples, task.featurize(examples, tokenizer, max_seq_length)))
    return sets


# --------------------------------------------------------------------------- fine-tuning
def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Fine-tune `cfg.model` on `cfg.task`; returns the best dev metrics (also in eval_results.json)."""
    cfg = cfg.resolved()
    data, out = Path(cfg.data), Path(cfg.output)
    if not data.exists():
        raise FileNotFoundError(f"no data at {data}")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    task = _build_task(cfg)
    tokenizer = AlbertTokenizer.from_pretrained(cfg.tokenizer or cfg.model)
    model_config = AlbertConfig.from_pretrained(cfg.model)
    if cfg.max_seq_length > model_config.max_position_embeddings:
        logger.warning(
            "max_seq_length %d > the model's %d positions: using %d",
            cfg.max_seq_length, model_config.max_position_embeddings, model_config.max_position_embeddings,
        )  # fmt: skip
        cfg.max_seq_length = model_config.max_position_embeddings
    device = _device(cfg.device)
    cfg.precision = _resolve_precision(cfg.precision, device)
    if cfg.precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device (loss scaling); use bf16 or fp32 on CPU")

    # Everything is read and checked before the first file is written.
    train_examples = _read_split(task, data, "train", cfg.max_train_examples)
    if train_examples is None:
        raise FileNotFoundError(f"no training file for {cfg.task} under {data}")
    task.fit_labels(train_examples)
    train_features = task.featurize(train_examples, tokenizer, cfg.max_seq_length, training=True)
    eval_sets = _eval_sets(task, data, tokenizer, cfg.max_seq_length, cfg.max_eval_examples, test=True)
    dev_sets = [s for s in eval_sets if not s.split.startswith("test")]
    if not dev_sets:
        logger.warning("no dev file for %s under %s: the last checkpoint is kept", cfg.task, data)
    total, warmup, steps_per_epoch = schedule(cfg, len(train_features))
    eval_every = cfg.eval_every or steps_per_epoch

    model = _load_for_task(task, cfg.model, cfg).to(device)
    optimizer = build_optimizer(model, "adamw", lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = build_scheduler(optimizer, warmup, total)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16" and device.type == "cuda")
    logger.info(
        "%s: %d train features, %d steps (%d warmup, %d per epoch), batch %d x %d, lr %g, on %s",
        cfg.task, len(train_features), total, warmup, steps_per_epoch, cfg.batch_size,
        cfg.gradient_accumulation, cfg.learning_rate, device,
    )  # fmt: skip

    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("")
    best: dict[str, Any] | None = None
    lengths = [feature_length(f) for f in train_features]
    batches = _endless_batches(lengths, cfg.batch_size, rng)
    running, seen, t0 = 0.0, 0, time.perf_counter()
    bar = tqdm(total=total, desc=f"finetune {cfg.task}", unit="step", disable=None)
    for step in range(1, total + 1):
        model.train()
        loss_sum = 0.0
        for _ in range(cfg.gradient_accumulation):
            idx = next(batches)
            batch = {
                k: v.to(device)
                for k, v in collate([train_features[i] for i in idx], tokenizer.pad_token_id).items()
            }
            with _autocast(device, cfg.precision):
                loss = model(**batch).loss / cfg.gradient_accumulation
            scaler.scale(loss).backward()
            loss_sum += float(loss.detach())
            seen += len(idx)
        scaler.unscale_(optimizer)
        clip_by_global_norm(model.parameters(), cfg.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        running += loss_sum
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum:.4f}")
        if step % cfg.log_every == 0 or step == total:
            n = cfg.log_every if step % cfg.log_every == 0 else (step % cfg.log_every)
            rate = seen / (time.perf_counter() - t0)
            logger.info("step %d | loss %.4f | lr %.3g | %.1f ex/s", step, running / n, lr, rate)
            running, seen, t0 = 0.0, 0, time.perf_counter()
        if step % eval_every == 0 or step == total:
            results, preds = evaluate_sets(
                task, model, dev_sets, cfg.eval_batch_size, tokenizer.pad_token_id, device, cfg.precision
            )
            record = {"step": step, "epoch": round(step / steps_per_epoch, 3), **results}
            with (out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(record) + "\n")
            if results:
                logger.info("eval at step %d: %s", step, json.dumps(results, sort_keys=True))
            main = results.get(task.main_metric, step)  # without dev: the latest is the best
            if best is None or main > best["main"]:
                best = {"main": main, "record": record}
                _save_best(out, model, tokenizer, cfg, task, record)
                for s in dev_sets:
                    task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
            t0 = time.perf_counter()  # examples/s counts training only
    bar.close()

    test_sets = [s for s in eval_sets if s.split.startswith("test")]
    if test_sets:
        model = _load_for_task(task, out / "best", None).to(device)
        _, preds = evaluate_sets(
            task, model, test_sets, cfg.eval_batch_size, tokenizer.pad_token_id, device, cfg.precision
        )
        for s in test_sets:
            path = task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
            logger.info("test predictions: %s", path)
    assert best is not None
    results = dict(best["record"])
    atomic_write_text(out / "eval_results.json", json.dumps(results, indent=2, sort_keys=True) + "\n")
    logger.info(
        "best %s = %s at step %d; model in %s", task.main_metric, best["main"], results["step"], out / "best"
    )
    return results


def _endless_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator
) -> Iterator[list[int]]:
    while True:
        yield from length_bucketed_batches(lengths, batch_size, rng)


def _load_for_task(task: Task, model_dir: str | Path, cfg: FinetuneConfig | None) -> torch.nn.Module:
    cls = HEAD_CLASSES[task.head]
    overrides: dict[str, Any] = {}
    if cfg is not None:  # a fresh head on a pretrained encoder
        overrides.update(
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout,
            classifier_dropout_prob=cfg.classifier_dropout,
        )
        if task.head == "question_answering":
            overrides["num_labels"] = 2
        elif task.head != "multiple_choice":
            overrides["num_labels"] = task.num_labels
            if task.labels:
                overrides["id2label"] = dict(enumerate(task.labels))
            if task.problem_type:
                overrides["problem_type"] = task.problem_type
    return cls.from_pretrained(model_dir, **overrides)


def _save_best(
    out: Path,
    model: torch.nn.Module,
    tokenizer: AlbertTokenizer,
    cfg: FinetuneConfig,
    task: Task,
    record: dict,
) -> None:
    """Write OUTPUT/best under a temporary name, then swap it in: a crash never leaves half a model."""
    tmp, final, old = out / "best.tmp", out / "best", out / "best.old"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    settings = dataclasses.asdict(cfg)
    settings["labels"] = list(task.labels)
    (tmp / "finetune_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    (tmp / "eval_results.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- evaluation of a saved model
def evaluate_model(
    task_name: str,
    model_dir: str | Path,
    data: str | Path,
    output: str | Path | None = None,
    batch_size: int | None = None,
    max_seq_length: int | None = None,
    device: str = "auto",
    precision: str = "auto",
) -> dict[str, float]:
    """Run a fine-tuned model on the task's dev set(s); writes eval_results.json and predictions to `output`."""
    model_dir, data = Path(model_dir), Path(data)
    saved_file = model_dir / "finetune_config.json"
    saved = json.loads(saved_file.read_text()) if saved_file.is_file() else {}
    if saved.get("task") not in (None, task_name):
        logger.warning("%s was fine-tuned on %s, evaluated on %s", model_dir, saved["task"], task_name)
    known = {f.name for f in dataclasses.fields(FinetuneConfig)}
    settings = {k: v for k, v in saved.items() if k in known}
    settings.update(task=task_name, model=str(model_dir), data=str(data), output=str(output or ""))
    cfg = FinetuneConfig(**settings)
    cfg.max_seq_length = max_seq_length or cfg.max_seq_length
    cfg.eval_batch_size = batch_size or cfg.eval_batch_size
    cfg = cfg.resolved()
    cfg.max_seq_length = min(
        cfg.max_seq_length, AlbertConfig.from_pretrained(model_dir).max_position_embeddings
    )
    task = _build_task(cfg)
    if task.head in ("sequence_classification", "token_classification") and not task.labels:
        id2label = AlbertConfig.from_pretrained(model_dir).id2label or {}
        task.labels = tuple(id2label[i] for i in sorted(id2label))
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    sets = _eval_sets(task, data, tokenizer, cfg.max_seq_length, None, test=False)
    if not sets:
        raise FileNotFoundError(f"no dev file for {task_name} under {data}")
    dev = _device(device)
    precision = _resolve_precision(precision, dev)
    model = _load_for_task(task, model_dir, None).to(dev)
    results, preds = evaluate_sets(
        task, model, sets, cfg.eval_batch_size, tokenizer.pad_token_id, dev, precision
    )
    if output:
        out = Path(output)
        for s in sets:
            task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
        atomic_write_text(out / "eval_results.json", json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results
