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
- the steps, log lines, records and curves of the one training loop (`albert_lm.training.loop`); a loss or
  gradient that turns inf or NaN stops the run with an error;
- evaluation on dev every `eval_every` steps and at the end; the checkpoint with the best value of
  the task's main metric is kept in OUTPUT/best (written under a temporary name, then renamed), with
  its dev predictions in OUTPUT/predictions (GLUE submission TSVs, SQuAD predictions JSON, ...);
- OUTPUT/eval_results.json holds the best checkpoint's metrics under their usual names and the dev
  examples evaluated ("eval_examples"; with "max_eval_examples" and "eval_examples_in_file" where that cap
  kept fewer than the files hold), and OUTPUT/metrics.jsonl a train record at each log line and one
  (split "dev") per evaluation; TensorBoard events (OUTPUT/tensorboard) and OUTPUT/training_curves.png at
  the end, as every loop writes them (`albert_lm.training.monitor`); OUTPUT/best holds a model card,
  README.md (`albert_lm.training.run_cards`);
- a checkpoint every `save_every` steps and when SIGTERM or SIGINT stops the run (a fine-tuned model
  folder with the training state beside it), which `--resume` continues exactly; a finished run removes
  them;
- every input file is read and checked before anything is written, so bad input leaves no output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import atomic_folder, folder_lock, write_json
from albert_lm.hints import missing
from albert_lm.hub import resolve_model
from albert_lm.model.early_exit import ExitHeads, exit_loss
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import AlbertForSequenceClassification
from albert_lm.runtime.finetuned import SAVED_FILE
from albert_lm.runtime.run_folders import no_model
from albert_lm.runtime.task_model import load_for_task
from albert_lm.tasks import Task, metrics
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.glue import glue_id2label
from albert_lm.tasks.task import Feature
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import run_folder
from albert_lm.training.evaluation import (
    EvalSet,
    build_task,
    eval_counts,
    evaluate_sets,
    required,
    scores_by_depth,
)
from albert_lm.training.finetune_config import FinetuneConfig, is_rows_folder, nothing_learned
from albert_lm.training.finetune_inputs import (
    check_bi_encoder,
    finetune_tokenizer,
    fit_to_model_and_device,
    read_inputs,
)
from albert_lm.training.finetune_resume import check_new_length, finished_run, moved_rows, resumed_schedule
from albert_lm.training.loop import Objective, Progress, to_device, train
from albert_lm.training.monitor import CURVES_FILE, METRICS_FILE, TENSORBOARD_DIR, plot_metrics
from albert_lm.training.optim import build_optimizer, build_scheduler, rate_from_schedule
from albert_lm.training.run_cards import write_finetune_card
from albert_lm.training.run_folder import RunKind
from albert_lm.values import settings_where

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- fine-tuning
def finetune(cfg: FinetuneConfig, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Fine-tune `cfg.model` on `cfg.task`; returns the best dev metrics (also in eval_results.json).
    `on_step(step)` runs after each optimizer step (`albert glue` counts them)."""
    if not isinstance(cfg, FinetuneConfig):
        raise TypeError(
            f"finetune: expected a FinetuneConfig, got {type(cfg).__name__}: FinetuneConfig(**settings)"
        )
    cfg = cfg.resolved()
    data, out = Path(cfg.data), Path(cfg.output)
    if not data.exists():
        raise missing("--data", data)
    # A hub id is read from its cached snapshot from here on; finetune_config.json keeps what was typed.
    given, cfg = cfg.model, dataclasses.replace(cfg, model=str(resolve_model(cfg.model)))
    latest = _check_folders(cfg)
    task = build_task(cfg)
    head_only = {"--exit-heads": cfg.exit_heads, "--classifier-pooling": cfg.classifier_pooling}
    for option in (o for o, v in head_only.items() if v and task.head != "sequence_classification"):
        raise ValueError(f"{option}: for classification and regression tasks, not {cfg.task} ({task.head})")
    check_bi_encoder(cfg, task)
    if cfg.classifier_pooling == "mean":
        logger.warning(
            "--classifier-pooling mean: the classifier reads the mean of the tokens' vectors; transformers' "
            "AlbertForSequenceClassification reads [CLS], so on this folder its outputs are not albert-lm's"
        )
    tokenizer = finetune_tokenizer(cfg)
    device = fit_to_model_and_device(cfg)
    if latest is not None:  # after the settings are fitted to the model and the device, as the run saved them
        run_folder.check_resume(FINETUNING, latest, cfg)
    # Everything is read and checked before the first file is written.
    train_features, eval_sets = read_inputs(cfg, task, data, tokenizer, latest)
    # Held until the run ends: a second command writing this folder is refused instead of mixing files.
    with folder_lock(out):
        latest = _check_folders(cfg, locked=True)  # again: another run may have finished there meanwhile
        if cfg.overwrite:
            run_folder.remove_run(FINETUNING, out)
        ckpt.remove_stale_temporaries(out)
        if latest is None:  # a run killed before its first checkpoint: its logs go
            run_folder.clear_logs(FINETUNING, out, cfg.resume)
        return _finetune(cfg, task, tokenizer, device, out, train_features, eval_sets, given, latest, on_step)


def _finetune(
    cfg: FinetuneConfig,
    task: Task,
    tokenizer: AlbertTokenizer,
    device: torch.device,
    out: Path,
    train_features: list[Feature],
    eval_sets: list[EvalSet],
    model_given: str,
    latest: Path | None,
    on_step: Callable[[int], None] | None,
) -> dict[str, Any]:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    total, warmup, steps_per_epoch, before = resumed_schedule(cfg, len(train_features), latest)
    model = load_for_task(task, latest or cfg.model, cfg).to(device)
    out.mkdir(parents=True, exist_ok=True)
    run = FineTuning(cfg, task, tokenizer, device, out, eval_sets, model_given, model, train_features, rng)
    run.plan(warmup, total, steps_per_epoch)
    run.resumed = (latest, before) if latest is not None and before is not None else None
    logger.info(
        "%s: %d train features, %d steps (%d warmup, %d per epoch), batch %d x %d, lr %g, on %s",
        cfg.task, len(train_features), total, warmup, steps_per_epoch, cfg.batch_size,
        cfg.gradient_accumulation_steps, cfg.learning_rate, device,
    )  # fmt: skip
    result = train(run, resume_from=latest, on_step=on_step)
    if result.interrupted:  # a signal: the checkpoint just saved is where --resume continues
        raise FinetuneStopped(result.step, int(result.signum or 15))
    if latest is not None and is_rows_folder(cfg.data, cfg.output):  # finetune_rows's, resumed by the CLI
        shutil.rmtree(cfg.data, ignore_errors=True)  # no run reads them again (finetune_rows removes its own)
    return result.metrics


class FinetuneStopped(KeyboardInterrupt):
    """A fine-tuning run stopped by SIGINT or SIGTERM after saving a checkpoint (`step`; `signum`, the
    signal): `--resume` continues it. A KeyboardInterrupt, so a caller that does not catch it stops too."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"fine-tuning stopped at step {step} (checkpoint saved); continue with --resume")
        self.step, self.signum = step, signum


RUN_FILES = ("eval_results.json", METRICS_FILE, "best", "predictions", TENSORBOARD_DIR, CURVES_FILE)
# --overwrite removes these and the checkpoints (anything else the user keeps in the folder stays).
FINETUNING = RunKind(
    "fine-tuning",
    RUN_FILES,
    SAVED_FILE,
    settings_where(FinetuneConfig, "resume"),
    state_keys=("step", "batches_drawn", "optimizer", "scheduler", "ranks", "elapsed_s"),
    finished=finished_run,
    unchanged=moved_rows,
    interim=frozenset({"best", "predictions"}),  # the best evaluation before the first checkpoint
)
SLOW_ADVICE = (
    "Bound it: --max-train-examples 10000 (what albert glue's CPU recipe takes), fewer --epochs or --max-steps; "
    "a checkpoint every --save-every steps lets --resume continue it if it is stopped"
)


def _check_folders(cfg: FinetuneConfig, locked: bool = False) -> Path | None:
    """The model is a model folder; the output is not an input, not another command's now (unless
    `locked`: this process holds it) and holds no other run (unless --resume or --overwrite). Returns
    the checkpoint --resume continues."""
    model, out = Path(cfg.model), Path(cfg.output)
    if not (model / "config.json").is_file():
        raise no_model(model)
    inputs = {"--model": model, "--data": cfg.data, "--tokenizer": cfg.tokenizer}
    latest = ckpt.latest_checkpoint(out, SAVED_FILE)
    run_folder.check_output(
        FINETUNING, out, inputs, resume=cfg.resume, overwrite=cfg.overwrite, latest=latest, locked=locked
    )  # then a damaged newer checkpoint skipped is said (once)
    return ckpt.resume_checkpoint(out, SAVED_FILE, say=not locked) if cfg.resume else None


@dataclass
class _Evaluation:
    """One evaluation on the dev sets."""

    main: float  # the task's main metric (the step, without a dev set: the latest is the best)
    record: dict[str, Any]  # step, epoch and metrics, as in metrics.jsonl
    predictions: dict[str, Any]  # per dev split


class FineTuning(Objective):
    """A fine-tuning run as the loop trains it: length-bucketed batches of the task's features, AdamW as
    google-research's, the dev sets evaluated and the best kept in OUTPUT/best. A checkpoint every
    --save-every steps (and when a signal stops it; each a fine-tuned model folder) lets --resume continue
    a stopped run exactly; a finished run removes them."""

    cfg: FinetuneConfig
    model: AlbertPreTrainedModel
    stats = ("loss", "micro_batches", "examples")
    kind = FINETUNING
    slow_advice = SLOW_ADVICE
    drawn = 0  # batches drawn from `batches` so far: the data position a checkpoint saves
    resumed: tuple[Path, int] | None = None  # (checkpoint, the run's length) of a resume given another

    def __init__(
        self,
        cfg: FinetuneConfig,
        task: Task,
        tokenizer: AlbertTokenizer,
        device: torch.device,
        out: Path,
        eval_sets: list[EvalSet],
        model_given: str | None,
        model: AlbertPreTrainedModel,
        features: list[Feature],
        rng: np.random.Generator,
    ) -> None:
        self.name, self.cfg, self.task, self.tokenizer = f"finetune {cfg.task}", cfg, task, tokenizer
        self.device, self.out = device, out
        self.precision, self.eval_sets, self.model, self.features = cfg.precision, eval_sets, model, features
        self.model_given = model_given  # --model as typed, where it was a hub id (cfg.model: its snapshot)
        # GLUE's label names (negative/positive, ...) in config.json, of best/ and of every checkpoint:
        # predict and transformers' pipeline say them
        model.config.id2label = glue_id2label(task.name) or model.config.id2label
        self.heads = ExitHeads(model.config).to(device) if cfg.exit_heads else None  # --exit-heads
        self.module = nn.ModuleDict({"model": model, "exit_heads": self.heads}) if self.heads else model
        batch_size = required(cfg.batch_size, "batch_size")
        self.batches = _endless_batches([feature_length(f) for f in features], batch_size, rng)
        self.best: _Evaluation | None = None

    def plan(self, warmup: int, total: int, steps_per_epoch: int) -> None:
        """The optimizer and the schedule of a run of `total` steps, evaluated every --eval-every (default:
        every epoch)."""
        lr = required(self.cfg.learning_rate, "learning_rate")
        self.optimizer = build_optimizer(self.module, "adamw", lr=lr, weight_decay=self.cfg.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, warmup, total)
        self.total_steps, self.steps_per_epoch = total, steps_per_epoch
        self.eval_every = self.cfg.eval_every or steps_per_epoch

    @property
    def dev_sets(self) -> list[EvalSet]:
        return [s for s in self.eval_sets if not s.split.startswith("test")]

    @property
    def test_sets(self) -> list[EvalSet]:
        return [s for s in self.eval_sets if s.split.startswith("test")]

    def micro_batches(self, step: int) -> list[list[int]]:
        self.drawn += self.cfg.gradient_accumulation_steps
        return [next(self.batches) for _ in range(self.cfg.gradient_accumulation_steps)]

    def settings(self) -> dict[str, Any]:
        return saved_settings(self)

    def write_files(self, folder: Path, p: Progress) -> None:
        """A checkpoint is a fine-tuned model folder as OUTPUT/best is (its weights saved by the loop)."""
        self.tokenizer.save_pretrained(folder)
        if self.heads is not None:
            self.heads.save(folder)

    def state(self) -> dict[str, Any]:
        heads = {k: v.detach().cpu() for k, v in self.heads.state_dict().items()} if self.heads else {}
        best = {"main": self.best.main, "record": json.dumps(self.best.record)} if self.best else {}
        return {"batches_drawn": self.drawn, "best": best, "exit_heads": heads}

    def restore(self, state: dict[str, Any]) -> None:
        """The batches drawn replayed (they depend on the seed alone), the best evaluation so far (its
        model and predictions are in OUTPUT already) and the exit heads; given another length, the new
        length's learning rate from the first step on (`check_new_length` says it)."""
        if self.resumed is not None:
            check_new_length(int(state["step"]), self.total_steps, self.resumed[1], self.resumed[0])
            rate_from_schedule(self.scheduler)
        for _ in range(int(state["batches_drawn"])):
            next(self.batches)
        self.drawn = int(state["batches_drawn"])
        best = state.get("best") or {}
        if best:
            self.best = _Evaluation(float(best["main"]), json.loads(best["record"]), {})
        if self.heads is not None and state.get("exit_heads"):
            self.heads.load_state_dict(state["exit_heads"])

    def loss(self, micro: list[int], step: int) -> tuple[torch.Tensor, torch.Tensor]:
        batch = collate([self.features[i] for i in micro], self.tokenizer.pad_token_id)
        inputs = to_device(batch, self.device)
        if self.heads is None:
            loss = self.model(**inputs).loss
        else:
            assert isinstance(self.model, AlbertForSequenceClassification)
            loss = exit_loss(self.model, self.heads, inputs, inputs.pop("labels"))
        counts = torch.tensor([1.0, len(micro)], dtype=torch.float64, device=loss.device)
        return loss, torch.cat([loss.detach().double().reshape(1), counts])

    def record(self, sums: torch.Tensor, step: int) -> dict[str, float]:
        loss, micro, examples = sums.tolist()
        return {
            "loss": loss / max(micro, 1.0),
            "epoch": round(step / self.steps_per_epoch, 3),
            "examples": examples,
        }

    def evaluate(self, step: int) -> dict[str, dict[str, Any]]:
        """The dev sets' metrics; the best evaluation so far is saved (OUTPUT/best, OUTPUT/predictions)."""
        batch_size = required(self.cfg.eval_batch_size, "eval_batch_size")
        pad = self.tokenizer.pad_token_id
        results, preds = evaluate_sets(
            self.task, self.model, self.dev_sets, batch_size, pad, self.device, self.cfg.precision
        )
        # What was evaluated: examples per dev split, and the cap where --max-eval-examples kept fewer.
        counts = eval_counts(self.dev_sets, self.cfg.max_eval_examples)
        record = {"step": step, "epoch": round(step / self.steps_per_epoch, 3), **results, **counts}
        evaluation = _Evaluation(results.get(self.task.main_metric, step), record, preds)
        # Step 0 (--eval-on-start) is the untrained model's baseline, never kept as best (its scores tie
        # a trained model's easily: majority-class accuracy, an MCC of 0).
        if step > 0 and (self.best is None or evaluation.main > self.best.main):
            self.best = evaluation
            _save_best(self, evaluation)
        return {"dev": {k: v for k, v in record.items() if k not in ("step", "max_eval_examples")}}

    def last_good(self) -> str:
        best = self.out / "best"
        return f"{best} holds the best evaluation so far" if best.is_dir() else "nothing was saved"

    def finish(self, evals: dict[str, dict[str, Any]], p: Progress) -> dict[str, Any]:
        """Test-set predictions by the best checkpoint, and its metrics in eval_results.json."""
        assert self.best is not None
        _predict_test_sets(self)
        if self.heads is not None and self.dev_sets:  # --exit-heads: the best model at every depth
            self.best.record["by_depth"] = _by_depth(self)
        write_json(self.out / "eval_results.json", self.best.record)
        for folder in ckpt.list_checkpoints(self.out):  # what --resume needed; the result is OUTPUT/best
            shutil.rmtree(folder)
        logger.info("best %s = %s at step %d; model in %s", self.task.main_metric, self.best.main,
                    self.best.record["step"], self.out / "best")  # fmt: skip
        labels = [getattr(ex, "label", None) for ex in self.dev_sets[0].examples] if self.dev_sets else []
        if (guess := metrics.guessing(self.task.main_metric, self.best.main, labels)) is not None:
            width, rate = self.model.config.hidden_size, self.cfg.learning_rate
            logger.warning("%s", nothing_learned(self.task.main_metric, self.best.main, guess, width, rate))
        return dict(self.best.record)

    def plot(self) -> None:
        plot_metrics(self.out, [self.task.main_metric + s.suffix for s in self.dev_sets])


def _by_depth(run: FineTuning) -> dict[str, list[float]]:
    """OUTPUT/best's dev metrics at each depth 1 .. L, logged for the main metric (`scores_by_depth`)."""
    batch_size = required(run.cfg.eval_batch_size, "eval_batch_size")
    pad = run.tokenizer.pad_token_id
    assert run.best is not None
    scores = scores_by_depth(run.task, run.out / "best", run.dev_sets, batch_size, pad, run.device,
                             run.cfg.precision, run.best.record)  # fmt: skip
    for name in (run.task.main_metric + s.suffix for s in run.dev_sets):
        main = scores.get(name, [])
        logger.info("dev %s by depth 1 .. %d: %s", name, len(main), " ".join(f"{v:.4g}" for v in main))
    return scores


def _endless_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator
) -> Iterator[list[int]]:
    while True:
        yield from length_bucketed_batches(lengths, batch_size, rng)


def saved_settings(run: FineTuning) -> dict[str, Any]:
    """What a fine-tuned folder's finetune_config.json holds: the run's settings, its labels, its
    tokenizer's fingerprint (predict and evaluate check it) and the hub id where --model was one."""
    settings = dataclasses.asdict(run.cfg)
    settings["labels"] = list(run.task.labels)
    settings["tokenizer_fingerprint"] = run.tokenizer.fingerprint
    if run.model_given not in (None, run.cfg.model):
        settings["model_given"] = run.model_given  # the hub id; "model" is its snapshot (by commit)
    return settings


def _save_best(run: FineTuning, best: _Evaluation) -> None:
    """OUTPUT/best (model, tokenizer, settings, metrics), filled under a temporary name and then swapped
    in, so a crash never leaves half a model; then the dev predictions in OUTPUT/predictions."""
    with atomic_folder(run.out / "best") as tmp:
        run.model.save_pretrained(tmp)
        if run.heads is not None:
            run.heads.save(tmp)
        run.tokenizer.save_pretrained(tmp)
        # the columns as the training data had them (a second text or none): what predict reads
        write_json(tmp / SAVED_FILE, {**saved_settings(run), **run.task.recorded_columns()})
        write_json(tmp / "eval_results.json", best.record)
        write_finetune_card(
            tmp,
            run.cfg,
            run.task,
            best.record,
            steps=run.total_steps,
            location=run.out / "best",
            model_given=run.model_given,
            train_examples=len({f["example_index"] for f in run.features}),  # features: windows of them too
        )
    for s in run.dev_sets:
        run.task.write_predictions(s.examples, best.predictions[s.split], run.out / "predictions", s.split)


def _predict_test_sets(run: FineTuning) -> None:
    """Predictions of the test sets (those with a file) by the best checkpoint, in OUTPUT/predictions."""
    if not run.test_sets:
        return
    model = load_for_task(run.task, run.out / "best", None).to(run.device)
    batch_size = required(run.cfg.eval_batch_size, "eval_batch_size")
    pad = run.tokenizer.pad_token_id
    _, preds = evaluate_sets(run.task, model, run.test_sets, batch_size, pad, run.device, run.cfg.precision)
    for s in run.test_sets:
        path = run.task.write_predictions(s.examples, preds[s.split], run.out / "predictions", s.split)
        logger.info("test predictions: %s", path)
