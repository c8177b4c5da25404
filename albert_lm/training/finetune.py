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
- OUTPUT/eval_results.json holds the best checkpoint's metrics under their usual names and the dev
  examples evaluated ("eval_examples"; with "max_eval_examples" and "eval_examples_in_file" where that cap
  kept fewer than the files hold), and OUTPUT/metrics.jsonl one line per evaluation; TensorBoard events
  (OUTPUT/tensorboard: train loss and learning rate at each log line, every dev metric at each
  evaluation) and OUTPUT/training_curves.png, drawn at each evaluation, as pretraining writes them
  (`albert_lm.training.monitor`); OUTPUT/best holds a model card, README.md (`albert_lm.training.run_cards`);
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
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.wordpiece import has_tokenizer
from albert_lm.files import (
    atomic_folder,
    folder_lock,
    write_json,
)
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import autocast as autocast_for
from albert_lm.kernels.device import pick_device, resolved_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import ExitHeads, exit_loss
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import AlbertForSequenceClassification
from albert_lm.runtime.finetuned import SAVED_FILE, read_saved_settings
from albert_lm.runtime.fits import check_tokenizer_fits
from albert_lm.runtime.task_model import load_for_task
from albert_lm.tasks import Task
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.glue import glue_id2label
from albert_lm.tasks.task import Feature
from albert_lm.training import run_folder
from albert_lm.training.clock import LoopClock
from albert_lm.training.evaluation import (
    EvalSet,
    build_task,
    eval_counts,
    eval_sets_of,
    evaluate_sets,
    read_split,
    required,
)
from albert_lm.training.finetune_config import FinetuneConfig, schedule
from albert_lm.training.monitor import CURVES_FILE, METRICS_FILE, TENSORBOARD_DIR, FinetuneLog
from albert_lm.training.optim import build_optimizer, build_scheduler, check_finite_step, clip_by_global_norm
from albert_lm.training.run_cards import write_finetune_card
from albert_lm.training.run_folder import RunKind

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- fine-tuning
def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Fine-tune `cfg.model` on `cfg.task`; returns the best dev metrics (also in eval_results.json)."""
    cfg = cfg.resolved()
    data, out = Path(cfg.data), Path(cfg.output)
    if not data.exists():
        raise FileNotFoundError(f"--data {data}: no such file or folder")
    # A hub id is read from its cached snapshot from here on; finetune_config.json keeps what was typed.
    given, cfg = cfg.model, dataclasses.replace(cfg, model=str(resolve_model(cfg.model)))
    _check_folders(cfg)
    task = build_task(cfg)
    head_only = {"--exit-heads": cfg.exit_heads, "--classifier-pooling": cfg.classifier_pooling}
    for option in (o for o, v in head_only.items() if v and task.head != "sequence_classification"):
        raise ValueError(f"{option}: for classification and regression tasks, not {cfg.task} ({task.head})")
    if cfg.classifier_pooling == "mean":
        logger.warning(
            "--classifier-pooling mean: the classifier reads the mean of the tokens' vectors; transformers' "
            "AlbertForSequenceClassification reads [CLS], so on this folder its outputs are not albert-lm's"
        )
    tokenizer = _tokenizer(cfg)
    device = _fit_to_model_and_device(cfg)
    # Everything is read and checked before the first file is written.
    train_features, eval_sets = _read_inputs(cfg, task, data, tokenizer)
    # Held until the run ends: a second command writing this folder is refused instead of mixing files.
    with folder_lock(out):
        _check_folders(cfg)  # again, under the lock: another run may have finished there meanwhile
        if cfg.overwrite:
            _remove_run(out)
        return _finetune(cfg, task, tokenizer, device, out, train_features, eval_sets, given)


def _finetune(
    cfg: FinetuneConfig,
    task: Task,
    tokenizer: AlbertTokenizer,
    device: torch.device,
    out: Path,
    train_features: list[Feature],
    eval_sets: list[EvalSet],
    model_given: str,
) -> dict[str, Any]:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    run = _Run(cfg, task, tokenizer, device, out, eval_sets, model_given)
    total, warmup, steps_per_epoch = schedule(cfg, len(train_features))
    run.steps = total
    model = load_for_task(task, cfg.model, cfg).to(device)
    trainer = _Trainer.build(run, model, train_features, rng, warmup, total)
    logger.info(
        "%s: %d train features, %d steps (%d warmup, %d per epoch), batch %d x %d, lr %g, on %s",
        cfg.task,
        len(train_features),
        total,
        warmup,
        steps_per_epoch,
        cfg.batch_size,
        cfg.gradient_accumulation_steps,
        cfg.learning_rate,
        device,
    )
    best = _train(run, trainer, total, steps_per_epoch)
    _predict_test_sets(run)
    write_json(out / "eval_results.json", best.record)
    logger.info(
        "best %s = %s at step %d; model in %s", task.main_metric, best.main, best.record["step"], out / "best"
    )
    return dict(best.record)


RUN_FILES = ("eval_results.json", METRICS_FILE, "best", "predictions", TENSORBOARD_DIR, CURVES_FILE)
FINETUNING = RunKind("fine-tuning", RUN_FILES)  # no resume: --overwrite removes only these


def _remove_run(out: Path) -> None:
    """--overwrite: remove the files of the run `out` holds (and what an interrupted one left under
    temporary names); anything else the user keeps there stays."""
    import shutil

    names = set(RUN_FILES) | {f".{n}.{end}" for n in RUN_FILES for end in ("tmp", "old")}
    gone = sorted(p for p in out.iterdir() if p.name in names)
    if gone:
        logger.info("--overwrite: removing %s from %s", ", ".join(p.name for p in gone), out)
    for p in gone:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _check_folders(cfg: FinetuneConfig) -> None:
    """The model is a model folder; the output is not an input and holds no other run (unless
    --overwrite)."""
    model, out = Path(cfg.model), Path(cfg.output)
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"--model {model}: no config.json there (expected a model folder)")
    inputs = {"--model": model, "--data": cfg.data, "--tokenizer": cfg.tokenizer}
    run_folder.check_output(FINETUNING, out, inputs, overwrite=cfg.overwrite)


def _tokenizer(cfg: FinetuneConfig) -> AlbertTokenizer:
    """The model's own tokenizer; --tokenizer only for a model without one (or the same vocabulary)."""
    own = Path(cfg.model)
    tokenizer = AlbertTokenizer.from_pretrained(cfg.tokenizer or cfg.model)
    if cfg.tokenizer and has_tokenizer(own):
        theirs = AlbertTokenizer.from_pretrained(cfg.model)
        if theirs.fingerprint != tokenizer.fingerprint:
            raise ValueError(
                f"--tokenizer {cfg.tokenizer}: --model {cfg.model} has its own tokenizer ({own}, "
                f"{theirs.vocab_size} pieces) and this is another vocabulary ({tokenizer.vocab_size} pieces); "
                "the model's embeddings belong to its own: drop --tokenizer"
            )
    config = AlbertConfig.from_pretrained(cfg.model)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"--tokenizer {cfg.tokenizer or cfg.model}: {tokenizer.vocab_size} pieces, but the model's embedding "
            f"has {config.vocab_size} rows: not the vocabulary the model was trained with; use its own tokenizer"
        )
    saved = read_saved_settings(cfg.model)  # a fine-tuned model, fine-tuned again: its settings, checked
    if saved:
        check_tokenizer_fits(tokenizer, cfg.model, config, saved.get("tokenizer_fingerprint"))
    return tokenizer


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
    model_given: str | None = None  # --model as typed, where it was a hub id (cfg.model: its snapshot)
    steps: int = 0  # the optimizer steps the run takes (its model cards say them)

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
        batch_size = required(self.cfg.eval_batch_size, "eval_batch_size")
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
    max_seq_length = required(cfg.max_seq_length, "max_seq_length")
    if max_seq_length > model_config.max_position_embeddings:
        logger.warning(
            "max_seq_length %d > the model's %d positions: using %d",
            max_seq_length,
            model_config.max_position_embeddings,
            model_config.max_position_embeddings,
        )
        cfg.max_seq_length = model_config.max_position_embeddings
    device = pick_device(cfg.device)
    cfg.precision = resolved_precision(cfg.precision, device)
    if cfg.precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device (loss scaling); use bf16 or fp32 on CPU")
    return device


def _read_inputs(
    cfg: FinetuneConfig, task: Task, data: Path, tokenizer: AlbertTokenizer
) -> tuple[list[Feature], list[EvalSet]]:
    """Training features (the task's labels fitted on them) and every evaluation set, read and checked."""
    train_examples = read_split(task, data, "train", cfg.max_train_examples)
    if train_examples is None:
        raise FileNotFoundError(f"no training file for {cfg.task} under {data}")
    task.fit_labels(train_examples)
    max_seq_length = required(cfg.max_seq_length, "max_seq_length")
    train_features = task.featurize(train_examples, tokenizer, max_seq_length, training=True)
    eval_sets = eval_sets_of(task, data, tokenizer, max_seq_length, cfg.max_eval_examples, test=True)
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
    heads: ExitHeads | None = None  # --exit-heads: a classifier after every layer

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
        lr = required(cfg.learning_rate, "learning_rate")
        heads = ExitHeads(model.config).to(device) if cfg.exit_heads else None
        trained = nn.ModuleDict({"model": model, "exit_heads": heads}) if heads is not None else model
        optimizer = build_optimizer(trained, "adamw", lr=lr, weight_decay=cfg.weight_decay)
        scheduler = build_scheduler(optimizer, warmup, total)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16" and device.type == "cuda")
        batch_size = required(cfg.batch_size, "batch_size")
        batches = _endless_batches([feature_length(f) for f in features], batch_size, rng)
        return cls(run, model, features, batches, optimizer, scheduler, scaler, heads)

    def _loss(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.heads is None:
            return self.model(**inputs).loss
        labels = inputs.pop("labels")
        assert isinstance(self.model, AlbertForSequenceClassification)
        return exit_loss(self.model, self.heads, inputs, labels)

    def step(self) -> tuple[float, int, float]:
        """One optimizer step; returns (loss, examples seen, the learning rate it used)."""
        cfg, device = self.run.cfg, self.run.device
        self.model.train()
        loss_sum, seen = 0.0, 0
        for _ in range(cfg.gradient_accumulation_steps):
            idx = next(self.batches)
            batch = collate([self.features[i] for i in idx], self.run.tokenizer.pad_token_id)
            inputs = {k: v.to(device) for k, v in batch.items()}
            with autocast_for(device, cfg.precision):
                loss = self._loss(inputs) / cfg.gradient_accumulation_steps
            self.scaler.scale(loss).backward()
            loss_sum += float(loss.detach())
            seen += len(idx)
        self.scaler.unscale_(self.optimizer)
        norm = float(clip_by_global_norm(self.model.parameters(), cfg.max_grad_norm))
        if not self.scaler.is_enabled():  # fp16's loss scaler skips a non-finite step itself
            check_finite_step(self.scheduler.last_epoch + 1, loss_sum, norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        return loss_sum, seen, lr


def _train(run: _Run, trainer: _Trainer, total: int, steps_per_epoch: int) -> _Evaluation:
    """`total` steps, logged every `log_every` and evaluated every `eval_every` steps and at the end;
    the run log (`FinetuneLog`) gets every log line and evaluation, OUTPUT/best and OUTPUT/predictions the
    best. Returns the best."""
    run.out.mkdir(parents=True, exist_ok=True)
    log = FinetuneLog(
        run.out, [run.task.main_metric + s.suffix for s in run.dev_sets], run.cfg.tensorboard, run.cfg.plot
    )
    try:
        return _steps(run, trainer, log, total, steps_per_epoch)
    finally:
        log.close()


def _steps(run: _Run, trainer: _Trainer, log: FinetuneLog, total: int, steps_per_epoch: int) -> _Evaluation:
    """The training loop of `_train`."""
    cfg = run.cfg
    eval_every = cfg.eval_every or steps_per_epoch
    best: _Evaluation | None = None
    running, seen, t0 = 0.0, 0, time.perf_counter()
    clock = LoopClock(f"finetune {cfg.task}", step=0, total_steps=total, cpu=run.device.type == "cpu")
    for step in range(1, total + 1):
        loss, n_seen, lr = trainer.step()
        running += loss
        seen += n_seen
        clock.tick(step)
        clock.bar.set_postfix(loss=f"{loss:.4f}")
        if step % cfg.log_every == 0 or step == total:
            n = cfg.log_every if step % cfg.log_every == 0 else (step % cfg.log_every)
            rate = seen / (time.perf_counter() - t0)
            logger.info("step %d | loss %.4f | lr %.3g | %.1f ex/s", step, running / n, lr, rate)
            log.train(step, running / n, lr)
            running, seen, t0 = 0.0, 0, time.perf_counter()
        if step % eval_every == 0 or step == total:
            evaluation = _evaluate_dev(run, trainer.model, log, step, round(step / steps_per_epoch, 3))
            if best is None or evaluation.main > best.main:
                best = evaluation
                _save_best(run, trainer.model, best, trainer.heads)
            t0 = time.perf_counter()  # examples/s counts training only
    clock.close()
    assert best is not None
    return best


def _evaluate_dev(
    run: _Run, model: torch.nn.Module, log: FinetuneLog, step: int, epoch: float
) -> _Evaluation:
    """Evaluate on the dev sets and record the metrics (metrics.jsonl, TensorBoard, the curves)."""
    results, preds = run.evaluate(model, run.dev_sets)
    # What was evaluated: examples per dev split, and the cap where --max-eval-examples kept fewer.
    record = {"step": step, "epoch": epoch, **results, **eval_counts(run.dev_sets, run.cfg.max_eval_examples)}
    log.evaluation({k: v for k, v in record.items() if k != "max_eval_examples"})  # not a TensorBoard curve
    if results:
        logger.info("eval at step %d: %s", step, json.dumps(results, sort_keys=True))
    return _Evaluation(results.get(run.task.main_metric, step), record, preds)


def _endless_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator
) -> Iterator[list[int]]:
    while True:
        yield from length_bucketed_batches(lengths, batch_size, rng)


def _save_best(run: _Run, model: AlbertPreTrainedModel, best: _Evaluation, heads: ExitHeads | None) -> None:
    """OUTPUT/best (model, tokenizer, settings, metrics), filled under a temporary name and then swapped
    in, so a crash never leaves half a model; then the dev predictions in OUTPUT/predictions."""
    with atomic_folder(run.out / "best") as tmp:
        # GLUE's label names (negative/positive, ...) in config.json: predict and transformers' pipeline say them
        model.config.id2label = glue_id2label(run.task.name) or model.config.id2label
        model.save_pretrained(tmp)
        if heads is not None:
            heads.save(tmp)
        run.tokenizer.save_pretrained(tmp)
        settings = dataclasses.asdict(run.cfg)
        settings["labels"] = list(run.task.labels)
        settings["tokenizer_fingerprint"] = run.tokenizer.fingerprint  # predict and evaluate check it
        if run.model_given not in (None, run.cfg.model):
            settings["model_given"] = run.model_given  # the hub id; "model" is its snapshot (by commit)
        write_json(tmp / SAVED_FILE, settings)
        write_json(tmp / "eval_results.json", best.record)
        write_finetune_card(
            tmp,
            run.cfg,
            run.task,
            best.record,
            steps=run.steps,
            location=run.out / "best",
            model_given=run.model_given,
        )
    for s in run.dev_sets:
        run.task.write_predictions(s.examples, best.predictions[s.split], run.out / "predictions", s.split)


def _predict_test_sets(run: _Run) -> None:
    """Predictions of the test sets (those with a file) by the best checkpoint, in OUTPUT/predictions."""
    if not run.test_sets:
        return
    model = load_for_task(run.task, run.out / "best", None).to(run.device)
    _, preds = run.evaluate(model, run.test_sets)
    for s in run.test_sets:
        path = run.task.write_predictions(s.examples, preds[s.split], run.out / "predictions", s.split)
        logger.info("test predictions: %s", path)
