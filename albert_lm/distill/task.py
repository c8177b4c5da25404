"""`albert distill task`: an ALBERT student learns a fine-tuned teacher's predictions on a task.

The teacher (a transformers sequence-classification or regression model, `TaskTeacher`) labels the
task's training text and the --extra-text (unlabelled sentences or pairs) once, into the teacher cache.
The student (an ALBERT folder, e.g. from `albert distill general`, with a fresh classifier sized for the
task) minimises KL(teacher / T || student / T) x T^2 (Hinton et al., 2015; the T^2 keeps the gradient's
scale as T changes), or for a regression (STS-B) the squared difference of the scores, plus
--hard-label-weight x the gold labels' loss where there are labels.

The task's reading, features, evaluation and prediction files are `albert finetune`'s
(`albert_lm.training.evaluation`, `albert_lm.runtime`, `albert_lm.tasks`), and so is the output:
OUTPUT/best is the best dev checkpoint with finetune_config.json naming the task and its labels, so
`albert predict` and `albert evaluate` take it; OUTPUT/eval_results.json holds its dev scores beside the
teacher's (teacher_*).

The teacher's labels are matched to the task's by name where they are named (an MNLI teacher may order
them otherwise); a teacher with another number of labels than the task, or a student whose classifier
holds another number, is refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.data.tokenizer import MODEL_FILE, AlbertTokenizer
from albert_lm.data.wordpiece import has_tokenizer
from albert_lm.distill.augment import augment_texts
from albert_lm.distill.cache import TeacherCache, cached_teacher_outputs, default_cache_dir
from albert_lm.distill.cards import write_task_card
from albert_lm.distill.config import TaskDistillConfig, task_steps
from albert_lm.distill.data import left_out, read_sentences
from albert_lm.distill.distiller import (
    CONFIG_FILE,
    Distiller,
    check_output,
    distill,
    prepare_output,
)
from albert_lm.distill.teacher import TaskTeacher, teacher_columns
from albert_lm.distill.teacher_files import local_teacher
from albert_lm.files import InputError, atomic_folder, folder_lock, write_json
from albert_lm.hints import missing
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import pick_device
from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import ExitHeads, depth_weighted, exit_logits
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.heads import AlbertForSequenceClassification
from albert_lm.runtime.fits import check_tokenizer_fits
from albert_lm.runtime.run import run_model
from albert_lm.runtime.task_model import load_for_task
from albert_lm.tasks import Task
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.glue import GlueExample, GlueTask, glue_id2label
from albert_lm.tasks.task import Feature
from albert_lm.tasks.text_classification import TextExample
from albert_lm.training import checkpoint as ckpt
from albert_lm.training.clock import run_length
from albert_lm.training.evaluation import EvalSet, build_task, eval_sets_of, evaluate_sets, read_split
from albert_lm.training.finetune_config import FinetuneConfig
from albert_lm.training.loop import LoopResult, Progress

logger = logging.getLogger(__name__)

Pair = tuple[str, str | None]


# --------------------------------------------------------------------------- texts and labels
def texts_of(example: Any) -> Pair:
    """(text, text pair or None) of a GLUE or classification example."""
    if isinstance(example, GlueExample):
        return example.text_a, example.text_b
    return example.text, example.text_pair


def unlabelled(task: Task, texts: Sequence[Pair]) -> list[Any]:
    """Examples of the task without labels, for its own featurize."""
    if isinstance(task, GlueTask):
        return [GlueExample(f"extra-{i}", a, b, None, i + 1) for i, (a, b) in enumerate(texts)]
    return [TextExample(a, b, None, i + 1) for i, (a, b) in enumerate(texts)]


def read_extra(files: Sequence[str], pairs: bool) -> list[Pair]:
    """--extra-text: a pair task's lines `text<TAB>text pair`; a single-text task's sentences (a sentence
    per line, or raw prose split as general distillation splits it). JSON Lines records whose text is null
    or empty are left out and counted in the log."""
    from albert_lm.data.corpus import ReadStats, iter_text_lines

    if not files:
        return []
    if not pairs:
        return [
            (s, None)
            for s in read_sentences(
                files, "auto", strip_gutenberg=False, min_words=1, max_segments=10**9, progress=False
            )
        ]
    out: list[Pair] = []
    stats = ReadStats()
    for file in files:
        for n, line in enumerate(iter_text_lines(Path(file), stats=stats), start=1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise InputError(file, "expected the two texts of a pair separated by one TAB", line=n)
            out.append((parts[0], parts[1]))
    if not out:
        raise InputError(", ".join(files), f"--extra-text: no text{left_out(stats)}")
    logger.info("--extra-text: %d pairs of texts%s", len(out), left_out(stats))
    return out


def check_student(model_dir: Path, task: Task) -> AlbertTokenizer:
    """The student's tokenizer; refused: a folder without spiece.model, or whose trained classifier has
    another number of outputs than the task has labels."""
    config = AlbertConfig.from_pretrained(model_dir)
    if not has_tokenizer(model_dir):
        raise FileNotFoundError(
            f"--model {model_dir}: no {MODEL_FILE} (or a WordPiece tokenizer.json) there: the student's tokenizer"
        )
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(tokenizer, model_dir, config)
    heads = config.extra.get("architectures") or []
    if "AlbertForSequenceClassification" in heads and config.num_labels != task.num_labels:
        raise ValueError(
            f"--model {model_dir}: its classifier has {config.num_labels} outputs and the task {task.name} "
            f"needs {task.num_labels} ({', '.join(task.labels) or 'a regression score'}): this student "
            "cannot hold the teacher's labels; give the model it was fine-tuned from (its encoder: a "
            "pretrained or general-distilled folder)"
        )
    return tokenizer


# --------------------------------------------------------------------------- the mode
@dataclasses.dataclass
class _Data:
    """The student's features (labels kept apart), the gold labels, the teacher's outputs."""

    features: list[Feature]  # no "labels": extra text has none, and collate takes a key from all or none
    gold: np.ndarray  # (N,) float: the label id (or score); NaN for extra text
    targets: np.ndarray  # (N, C) float32, the teacher's, in the task's label order
    dev: list[EvalSet]
    teacher_dev: dict[str, float]


class TaskDistiller(Distiller):
    cfg: TaskDistillConfig

    def __init__(
        self,
        cfg: TaskDistillConfig,
        fcfg: FinetuneConfig,
        out: Path,
        device: torch.device,
        precision: str,
        task: Task,
        tokenizer: AlbertTokenizer,
        model: AlbertPreTrainedModel,
        data: _Data,
    ) -> None:
        self.cfg, self.fcfg, self.out, self.device, self.precision = cfg, fcfg, out, device, precision
        self.task, self.tokenizer, self.model, self.data = task, tokenizer, model, data
        self.heads = ExitHeads(model.config).to(device) if cfg.exit_heads else None
        self.module = nn.ModuleDict({"model": model, "exit_heads": self.heads}) if self.heads else model
        per_epoch = math.ceil(len(data.features) / cfg.batch_size)
        self.total_steps = task_steps(cfg, per_epoch)
        if cfg.epochs and self.total_steps < cfg.max_steps:  # the epochs end the run, not --max-steps
            self.ends_by = f"--epochs {cfg.epochs:g} ({self.total_steps} steps)"
        self.lengths = [feature_length(f) for f in data.features]
        self.best: float | None = None
        self.best_record: dict[str, Any] = {}
        labels = ("label_loss",) if cfg.hard_label_weight else ()
        agreement = ("agreement",) if task.problem_type != "regression" else ()
        self.parts = ("loss", "distill_loss", *labels, *agreement)  # what `_taught` reports

    def batches(self, epoch: int) -> list[list[int]]:
        return length_bucketed_batches(
            self.lengths, self.cfg.batch_size, np.random.default_rng([self.cfg.seed, epoch])
        )

    def loss_parts(self, batch: list[int], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch_inputs = collate([self.data.features[i] for i in batch], self.tokenizer.pad_token_id)
        inputs = {k: v.to(self.device) for k, v in batch_inputs.items()}
        target = torch.from_numpy(np.asarray(self.data.targets[batch], dtype=np.float32)).to(self.device)
        gold = torch.from_numpy(self.data.gold[batch]).to(self.device)
        if self.heads is None:
            return self._taught(self.model(**inputs).logits.float(), target, gold)
        assert isinstance(self.model, AlbertForSequenceClassification)
        per_depth = [
            self._taught(x.float(), target, gold) for x in exit_logits(self.model, self.heads, inputs)
        ]
        total = depth_weighted([loss for loss, _ in per_depth])
        return total, {**per_depth[-1][1], "loss": float(total.detach())}  # the parts of the last layer

    def _taught(
        self, logits: torch.Tensor, target: torch.Tensor, gold: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one head's logits (B, C): the teacher's soft targets, plus the gold labels where
        known and asked for."""
        known = ~torch.isnan(gold)
        t = self.cfg.temperature
        if self.task.problem_type == "regression":
            soft = F.mse_loss(logits[:, 0], target[:, 0])
            hard = F.mse_loss(logits[known, 0], gold[known].float()) if bool(known.any()) else soft * 0
        else:
            soft = (
                F.kl_div(F.log_softmax(logits / t, -1), F.softmax(target / t, -1), reduction="batchmean")
                * t
                * t
            )
            hard = F.cross_entropy(logits[known], gold[known].long()) if bool(known.any()) else soft * 0
        total = soft + self.cfg.hard_label_weight * hard
        parts = {"loss": float(total.detach()), "distill_loss": float(soft.detach())}
        if self.cfg.hard_label_weight:
            parts["label_loss"] = float(hard.detach())
        if self.task.problem_type != "regression":
            parts["agreement"] = float((logits.argmax(-1) == target.argmax(-1)).float().mean())
        return total, parts

    @torch.no_grad()
    def scores(self, step: int) -> dict[str, Any]:
        pad = self.tokenizer.pad_token_id
        results, preds = evaluate_sets(
            self.task, self.model, self.data.dev, 2 * self.cfg.batch_size, pad, self.device, self.precision
        )
        main = results.get(self.task.main_metric, float(step)) if self.data.dev else float(step)
        record = {"step": step, **results}
        if self.best is None or main > self.best:
            self.best, self.best_record = main, record
            self._save_best(record, preds)
        return dict(results)

    def _save_best(self, record: dict[str, Any], preds: dict[str, Any]) -> None:
        """OUTPUT/best as `albert finetune` writes it (filled under a temporary name, then swapped in), and
        the dev predictions in OUTPUT/predictions."""
        with atomic_folder(self.out / "best") as tmp:
            self.model.config.id2label = glue_id2label(self.task.name) or self.model.config.id2label
            self.model.save_pretrained(tmp)
            if self.heads is not None:
                self.heads.save(tmp)
            self.tokenizer.save_pretrained(tmp)
            settings = {**dataclasses.asdict(self.fcfg), **self.task.recorded_columns()}
            settings.update(labels=list(self.task.labels), tokenizer_fingerprint=self.tokenizer.fingerprint)
            write_json(tmp / "finetune_config.json", settings)
            write_json(tmp / "eval_results.json", record)
            write_json(tmp / CONFIG_FILE, self.cfg.to_dict())
            write_task_card(
                tmp,
                self.cfg,
                self.task,
                record,
                self.data.teacher_dev,
                self.total_steps,
                self.out / "best",
                self.warmup_taken(),
            )
        for s in self.data.dev:
            self.task.write_predictions(s.examples, preds[s.split], self.out / "predictions", s.split)

    def _dev_speed(self) -> float:
        """The student's examples/s on the first dev set's texts, timed as the teacher's were (batches of
        similar length, 2 x --batch-size), warm (after the evaluations)."""
        features = self.data.dev[0].features
        t0 = time.perf_counter()
        run_model(
            self.model,
            features,
            2 * self.cfg.batch_size,
            self.tokenizer.pad_token_id,
            self.device,
            self.precision,
            desc="timing",
        )
        return len(features) / (time.perf_counter() - t0)

    def write_files(self, folder: Path, p: Progress | None = None) -> None:
        self.tokenizer.save_pretrained(folder)
        write_json(folder / CONFIG_FILE, self.cfg.to_dict())

    def own_state(self) -> dict[str, Any]:
        heads = {k: v.detach().cpu() for k, v in self.heads.state_dict().items()} if self.heads else {}
        return {"best": self.best, "best_record": json.dumps(self.best_record), "exit_heads": heads}

    def restore_own(self, state: dict[str, Any]) -> None:
        self.best, self.best_record = state.get("best"), json.loads(state.get("best_record") or "{}")
        if self.heads is not None and state.get("exit_heads"):
            self.heads.load_state_dict(state["exit_heads"])

    def complete(self, last: dict[str, Any]) -> dict[str, Any]:
        result = {**self.best_record, **{f"teacher_{k}": v for k, v in self.data.teacher_dev.items()}}
        if self.data.dev:
            speed = self._dev_speed()
            result["student_dev_examples_per_s"] = speed
            teacher_speed = self.data.teacher_dev.get("dev_examples_per_s")
            if teacher_speed:
                result["student_speedup"] = speed / teacher_speed
        result["teacher"] = self.cfg.teacher
        write_json(self.out / "eval_results.json", result)
        for folder in ckpt.list_checkpoints(self.out):  # what --resume needed; the result is OUTPUT/best
            shutil.rmtree(folder)
        logger.info(
            "best %s = %s at step %s (teacher: %s); model in %s",
            self.task.main_metric,
            self.best_record.get(self.task.main_metric),
            self.best_record.get("step"),
            self.data.teacher_dev.get(self.task.main_metric),
            self.out / "best",
        )
        return result


# --------------------------------------------------------------------------- setting up
def _teacher_outputs(
    teacher: TaskTeacher, texts: list[Pair], columns: list[int], root: Path, what: str, batch_size: int
) -> tuple[np.ndarray, float | None]:
    """(the teacher's outputs for `texts`, in the task's label order; its examples/s when it computed
    them, on the machine that filled the cache)."""
    cache = TeacherCache(
        root,
        "logits",
        teacher.fingerprint,
        texts,
        teacher.num_labels,
        "float32",
        {"teacher": teacher.name, "what": what},
    )
    lengths = [len(a) + len(b or "") for a, b in texts]
    values = cached_teacher_outputs(cache, teacher, batch_size, lengths, f"teacher: {what}")
    seconds = cache.teacher_seconds()
    return np.asarray(values, dtype=np.float32)[:, columns], len(texts) / seconds if seconds else None


def _read(
    cfg: TaskDistillConfig, task: Task, tokenizer: AlbertTokenizer, teacher: TaskTeacher, root: Path
) -> _Data:
    """Every input read and checked, and the teacher's outputs for them (from the cache, or computed)."""
    data = Path(str(cfg.data))
    train = read_split(task, data, "train", cfg.max_train_examples)
    if train is None:
        raise FileNotFoundError(f"--data {data}: no training file for {task.name} there")
    task.fit_labels_of(train, data)
    columns = teacher_columns(teacher, task)
    pairs = any(texts_of(e)[1] is not None for e in train)
    extra = read_extra(cfg.extra_text, pairs)
    if cfg.augment:
        extra += augment_texts([texts_of(e) for e in train], cfg.augment, cfg.seed)
    if not extra:
        logger.warning(
            "the teacher labels the %d training examples only (no --augment, no --extra-text): on the text "
            "it was fine-tuned on, its targets say little beyond the gold labels; on SST-2 that cost the "
            "student 3.5 points against --augment 8 (docs/distill.md)",
            len(train),
        )
    features = task.featurize(
        [*train, *unlabelled(task, extra)], tokenizer, cfg.max_seq_length, training=True
    )
    gold = np.array([f.pop("labels", math.nan) for f in features], dtype=np.float64)
    dev = eval_sets_of(task, data, tokenizer, cfg.max_seq_length, cfg.max_eval_examples, test=False)
    texts = [texts_of(e) for e in train] + extra
    targets, _ = _teacher_outputs(
        teacher, texts, columns, root, f"{task.name} training text", cfg.teacher_batch_size
    )
    teacher_dev: dict[str, float] = {}
    for s in dev:
        out, speed = _teacher_outputs(
            teacher,
            [texts_of(e) for e in s.examples],
            columns,
            root,
            f"{task.name} {s.split}",
            cfg.teacher_batch_size,
        )
        preds = task.predict(s.examples, s.features, [{"logits": row} for row in out])
        teacher_dev.update({k + s.suffix: v for k, v in task.score(s.examples, preds).items()})
        if speed is not None and s is dev[0]:
            teacher_dev["dev_examples_per_s"] = speed
    logger.info(
        "%d training examples + %d extra texts (--extra-text, --augment); teacher on dev: %s",
        len(train),
        len(extra),
        json.dumps(teacher_dev, sort_keys=True),
    )
    return _Data(features, gold, targets, dev, teacher_dev)


def distill_task(cfg: TaskDistillConfig, on_step: Callable[[int], None] | None = None) -> LoopResult:
    """Run (or resume) task distillation as `cfg` says (module docstring); `on_step(step)` runs after
    each optimizer step (`albert glue` counts them)."""
    cfg = dataclasses.replace(cfg, model=str(resolve_model(str(cfg.model))))
    if not Path(str(cfg.data)).exists():
        raise missing("--data", str(cfg.data))
    positions = AlbertConfig.from_pretrained(str(cfg.model)).max_position_embeddings
    if cfg.max_seq_length > positions:  # as fine-tuning fits it, before the teacher's passes
        logger.warning(
            "--max-seq-length %d > the student's %d positions: using %d",
            cfg.max_seq_length,
            positions,
            positions,
        )
        cfg = dataclasses.replace(cfg, max_seq_length=positions)
    fcfg = cfg.finetune_settings()
    task = build_task(fcfg)
    if task.head != "sequence_classification":
        raise ValueError(
            f"--task {cfg.task}: task distillation takes GLUE tasks, classification and regression only"
        )
    root = Path(cfg.cache) if cfg.cache else default_cache_dir()
    inputs = {"--model": cfg.model, "--data": cfg.data, "--cache": root, "--teacher": local_teacher(str(cfg.teacher)),
              **{f"--extra-text {f}": f for f in cfg.extra_text}}  # fmt: skip
    latest = check_output(cfg, inputs)
    tokenizer = check_student(Path(str(cfg.model)), task)
    device = pick_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)[0]
    teacher = TaskTeacher(str(cfg.teacher), device, cfg.teacher_batch_size)
    data = _read(cfg, task, tokenizer, teacher, root)
    with folder_lock(cfg.output):
        out = prepare_output(cfg, latest)
        torch.manual_seed(cfg.seed)
        model = load_for_task(task, latest or str(cfg.model), fcfg).to(device)
        d = TaskDistiller(cfg, fcfg, out, device, precision, task, tokenizer, model, data)
        logger.info(
            "student %s: %.2fM parameters, %s, teacher %s",
            cfg.model,
            model.num_parameters() / 1e6,
            run_length(d.total_steps, cfg.time_budget),
            cfg.teacher,
        )
        return distill(d, latest, on_step)
