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
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import atomic_folder, read_json_object, write_json
from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albert_lm.tasks import Task, get_task
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.task import Feature
from albert_lm.training.finetune_config import FinetuneConfig, schedule
from albert_lm.training.optim import build_optimizer, build_scheduler, clip_by_global_norm

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

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


def _as_precision(name: str) -> Literal["fp32", "bf16", "fp16"]:
    """A resolved precision name as FinetuneConfig.precision's type."""
    if name == "fp32":
        return "fp32"
    if name == "bf16":
        return "bf16"
    if name == "fp16":
        return "fp16"
    raise ValueError(f"precision must be fp32, bf16 or fp16, got {name!r}")


def _required(value: _T | None, name: str) -> _T:
    """A setting `FinetuneConfig.resolved()` fills in; None means the config was not resolved."""
    if value is None:
        raise ValueError(f"{name} is None: pass a resolved config (FinetuneConfig.resolved())")
    return value


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
    outputs: dict[int, dict[str, np.ndarray]] = {}
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
    return [outputs[i] for i in range(len(features))]


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
    device = _fit_to_model_and_device(cfg)
    # Everything is read and checked before the first file is written.
    train_features, eval_sets = _read_inputs(cfg, task, data, tokenizer)
    run = _Run(cfg, task, tokenizer, device, out, eval_sets)
    total, warmup, steps_per_epoch = schedule(cfg, len(train_features))
    model = _load_for_task(task, cfg.model, cfg).to(device)
    trainer = _Trainer.build(run, model, train_features, rng, warmup, total)
    logger.info(
        "%s: %d train features, %d steps (%d warmup, %d per epoch), batch %d x %d, lr %g, on %s",
        cfg.task, len(train_features), total, warmup, steps_per_epoch, cfg.batch_size,
        cfg.gradient_accumulation, cfg.learning_rate, device,
    )  # fmt: skip
    best = _train(run, trainer, total, steps_per_epoch)
    _predict_test_sets(run)
    write_json(out / "eval_results.json", best.record)
    logger.info(
        "best %s = %s at step %d; model in %s", task.main_metric, best.main, best.record["step"], out / "best"
    )
    return dict(best.record)


@dataclass
class _Run:
    """What the parts of one fine-tuning run share: settings, task, tokenizer, device, output folder and
    the evaluation sets (dev, and test to predict at the end)."""

    cfg: FinetuneConfig
    task: Task
    tokenizer: AlbertTokenizer
    device: torch.device
    out: Path
    eval_sets: list[EvalSet]

    @property
    def dev_sets(self) -> list[EvalSet]:
        return [s for s in self.eval_sets if not s.split.startswith("test")]

    @property
    def test_sets(self) -> list[EvalSet]:
        return [s for s in self.eval_sets if s.split.startswith("test")]

    def evaluate(
        self, model: torch.nn.Module, sets: Sequence[EvalSet]
    ) -> tuple[dict[str, float], dict[str, Any]]:
        pad_id = self.tokenizer.pad_token_id
        batch_size = _required(self.cfg.eval_batch_size, "eval_batch_size")
        return evaluate_sets(self.task, model, sets, batch_size, pad_id, self.device, self.cfg.precision)


@dataclass
class _Evaluation:
    """One evaluation on the dev sets."""

    main: float  # the task's main metric (the step, without a dev set: the latest is the best)
    record: dict[str, Any]  # step, epoch and metrics, as in metrics.jsonl
    predictions: dict[str, Any]  # per dev split


def _fit_to_model_and_device(cfg: FinetuneConfig) -> torch.device:
    """The device to run on; fits `cfg` to it and to the model: max_seq_length at most the model's
    positions, precision `auto` resolved, fp16 only on CUDA."""
    model_config = AlbertConfig.from_pretrained(cfg.model)
    max_seq_length = _required(cfg.max_seq_length, "max_seq_length")
    if max_seq_length > model_config.max_position_embeddings:
        logger.warning(
            "max_seq_length %d > the model's %d positions: using %d",
            max_seq_length, model_config.max_position_embeddings, model_config.max_position_embeddings,
        )  # fmt: skip
        cfg.max_seq_length = model_config.max_position_embeddings
    device = _device(cfg.device)
    cfg.precision = _as_precision(_resolve_precision(cfg.precision, device))
    if cfg.precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device (loss scaling); use bf16 or fp32 on CPU")
    return device


def _read_inputs(
    cfg: FinetuneConfig, task: Task, data: Path, tokenizer: AlbertTokenizer
) -> tuple[list[Feature], list[EvalSet]]:
    """Training features (the task's labels fitted on them) and every evaluation set, read and checked."""
    train_examples = _read_split(task, data, "train", cfg.max_train_examples)
    if train_examples is None:
        raise FileNotFoundError(f"no training file for {cfg.task} under {data}")
    task.fit_labels(train_examples)
    max_seq_length = _required(cfg.max_seq_length, "max_seq_length")
    train_features = task.featurize(train_examples, tokenizer, max_seq_length, training=True)
    eval_sets = _eval_sets(task, data, tokenizer, max_seq_length, cfg.max_eval_examples, test=True)
    if all(s.split.startswith("test") for s in eval_sets):
        logger.warning("no dev file for %s under %s: the last checkpoint is kept", cfg.task, data)
    return train_features, eval_sets


@dataclass
class _Trainer:
    """Optimizer steps: gradient accumulation, autocast, fp16 loss scaling, clipping, the LR schedule."""

    run: _Run
    model: AlbertPreTrainedModel
    features: list[Feature]
    batches: Iterator[list[int]]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler

    @classmethod
    def build(
        cls,
        run: _Run,
        model: AlbertPreTrainedModel,
        features: list[Feature],
        rng: np.random.Generator,
        warmup: int,
        total: int,
    ) -> _Trainer:
        cfg, device = run.cfg, run.device
        lr = _required(cfg.learning_rate, "learning_rate")
        optimizer = build_optimizer(model, "adamw", lr=lr, weight_decay=cfg.weight_decay)
        scheduler = build_scheduler(optimizer, warmup, total)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16" and device.type == "cuda")
        batch_size = _required(cfg.batch_size, "batch_size")
        batches = _endless_batches([feature_length(f) for f in features], batch_size, rng)
        return cls(run, model, features, batches, optimizer, scheduler, scaler)

    def step(self) -> tuple[float, int, float]:
        """One optimizer step; returns (loss, examples seen, the learning rate it used)."""
        cfg, device = self.run.cfg, self.run.device
        self.model.train()
        loss_sum, seen = 0.0, 0
        for _ in range(cfg.gradient_accumulation):
            idx = next(self.batches)
            batch = collate([self.features[i] for i in idx], self.run.tokenizer.pad_token_id)
            inputs = {k: v.to(device) for k, v in batch.items()}
            with _autocast(device, cfg.precision):
                loss = self.model(**inputs).loss / cfg.gradient_accumulation
            self.scaler.scale(loss).backward()
            loss_sum += float(loss.detach())
            seen += len(idx)
        self.scaler.unscale_(self.optimizer)
        clip_by_global_norm(self.model.parameters(), cfg.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        return loss_sum, seen, lr


def _train(run: _Run, trainer: _Trainer, total: int, steps_per_epoch: int) -> _Evaluation:
    """`total` steps, logged every `log_every` and evaluated every `eval_every` steps and at the end;
    metrics.jsonl gets every evaluation, OUTPUT/best and OUTPUT/predictions the best. Returns the best."""
    cfg, out = run.cfg, run.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("")
    eval_every = cfg.eval_every or steps_per_epoch
    best: _Evaluation | None = None
    running, seen, t0 = 0.0, 0, time.perf_counter()
    bar = tqdm(total=total, desc=f"finetune {cfg.task}", unit="step", disable=None)
    for step in range(1, total + 1):
        loss, n_seen, lr = trainer.step()
        running += loss
        seen += n_seen
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        if step % cfg.log_every == 0 or step == total:
            n = cfg.log_every if step % cfg.log_every == 0 else (step % cfg.log_every)
            rate = seen / (time.perf_counter() - t0)
            logger.info("step %d | loss %.4f | lr %.3g | %.1f ex/s", step, running / n, lr, rate)
            running, seen, t0 = 0.0, 0, time.perf_counter()
        if step % eval_every == 0 or step == total:
            evaluation = _evaluate_dev(run, trainer.model, step, round(step / steps_per_epoch, 3))
            if best is None or evaluation.main > best.main:
                best = evaluation
                _save_best(run, trainer.model, best)
            t0 = time.perf_counter()  # examples/s counts training only
    bar.close()
    assert best is not None
    return best


def _evaluate_dev(run: _Run, model: torch.nn.Module, step: int, epoch: float) -> _Evaluation:
    """Evaluate on the dev sets and append the metrics to metrics.jsonl."""
    results, preds = run.evaluate(model, run.dev_sets)
    record = {"step": step, "epoch": epoch, **results}
    with (run.out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    if results:
        logger.info("eval at step %d: %s", step, json.dumps(results, sort_keys=True))
    return _Evaluation(results.get(run.task.main_metric, step), record, preds)


def _endless_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator
) -> Iterator[list[int]]:
    while True:
        yield from length_bucketed_batches(lengths, batch_size, rng)


def _load_for_task(task: Task, model_dir: str | Path, cfg: FinetuneConfig | None) -> AlbertPreTrainedModel:
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


def _save_best(run: _Run, model: AlbertPreTrainedModel, best: _Evaluation) -> None:
    """OUTPUT/best (model, tokenizer, settings, metrics), filled under a temporary name and then swapped
    in, so a crash never leaves half a model; then the dev predictions in OUTPUT/predictions."""
    with atomic_folder(run.out / "best") as tmp:
        model.save_pretrained(tmp)
        run.tokenizer.save_pretrained(tmp)
        settings = dataclasses.asdict(run.cfg)
        settings["labels"] = list(run.task.labels)
        write_json(tmp / "finetune_config.json", settings)
        write_json(tmp / "eval_results.json", best.record)
    for s in run.dev_sets:
        run.task.write_predictions(s.examples, best.predictions[s.split], run.out / "predictions", s.split)


def _predict_test_sets(run: _Run) -> None:
    """Predictions of the test sets (those with a file) by the best checkpoint, in OUTPUT/predictions."""
    if not run.test_sets:
        return
    model = _load_for_task(run.task, run.out / "best", None).to(run.device)
    _, preds = run.evaluate(model, run.test_sets)
    for s in run.test_sets:
        path = run.task.write_predictions(s.examples, preds[s.split], run.out / "predictions", s.split)
        logger.info("test predictions: %s", path)


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
    saved = read_json_object(saved_file, "fine-tuning settings") if saved_file.is_file() else {}
    if saved.get("task") not in (None, task_name):
        logger.warning("%s was fine-tuned on %s, evaluated on %s", model_dir, saved["task"], task_name)
    known = {f.name for f in dataclasses.fields(FinetuneConfig)}
    settings = {k: v for k, v in saved.items() if k in known}
    settings.update(task=task_name, model=str(model_dir), data=str(data), output=str(output or ""))
    cfg = FinetuneConfig(**settings)
    cfg.max_seq_length = max_seq_length or cfg.max_seq_length
    cfg.eval_batch_size = batch_size or cfg.eval_batch_size
    cfg = cfg.resolved()
    max_seq_length = min(
        _required(cfg.max_seq_length, "max_seq_length"),
        AlbertConfig.from_pretrained(model_dir).max_position_embeddings,
    )
    cfg.max_seq_length = max_seq_length
    task = _build_task(cfg)
    if task.head in ("sequence_classification", "token_classification") and not task.labels:
        id2label = AlbertConfig.from_pretrained(model_dir).id2label or {}
        task.labels = tuple(id2label[i] for i in sorted(id2label))
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    sets = _eval_sets(task, data, tokenizer, max_seq_length, None, test=False)
    if not sets:
        raise FileNotFoundError(f"no dev file for {task_name} under {data}")
    dev = _device(device)
    precision = _resolve_precision(precision, dev)
    model = _load_for_task(task, model_dir, None).to(dev)
    batch_size = _required(cfg.eval_batch_size, "eval_batch_size")
    results, preds = evaluate_sets(task, model, sets, batch_size, tokenizer.pad_token_id, dev, precision)
    if output:
        out = Path(output)
        for s in sets:
            task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
        write_json(out / "eval_results.json", results)
    return results
