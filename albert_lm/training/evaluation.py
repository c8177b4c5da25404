"""Running a model on a task's examples, and evaluating a fine-tuned model: length-sorted batches,
outputs back in example order, the task's metrics and prediction files. The fine-tuning loop
(`albert_lm.training.finetune`) evaluates through here, and so does `albert evaluate --model`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import read_json_object, write_json
from albert_lm.kernels.precision import Precision, resolve_precision
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
from albert_lm.training.finetune_config import FinetuneConfig

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

HEAD_CLASSES = {
    "sequence_classification": AlbertForSequenceClassification,
    "question_answering": AlbertForQuestionAnswering,
    "multiple_choice": AlbertForMultipleChoice,
    "token_classification": AlbertForTokenClassification,
}


# --------------------------------------------------------------------------- running the model
def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolved_precision(precision: str, device: torch.device) -> Precision:
    """`auto` -> bf16 where this device computes it fast, else fp32 (logged); others unchanged."""
    resolved, why = resolve_precision(precision, device)
    if precision == "auto":
        logger.info("precision auto -> %s: %s", resolved, why)
    return resolved


def required(value: _T | None, name: str) -> _T:
    """A setting `FinetuneConfig.resolved()` fills in; None means the config was not resolved."""
    if value is None:
        raise ValueError(f"{name} is None: pass a resolved config (FinetuneConfig.resolved())")
    return value


def autocast_for(device: torch.device, precision: str):
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
        with autocast_for(device, precision):
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
def build_task(cfg: FinetuneConfig) -> Task:
    return get_task(cfg.task, **cfg.task_options())


def read_split(task: Task, data: Path, split: str, cap: int | None) -> list[Any] | None:
    path = task.split_file(data, split)
    if path is None:
        return None
    examples = task.read(path, split)
    logger.info("%s: %d examples from %s", split, len(examples), path)
    return examples[:cap] if cap else examples


def eval_sets_of(
    task: Task, data: Path, tokenizer: AlbertTokenizer, max_seq_length: int, cap: int | None, test: bool
) -> list[EvalSet]:
    sets = []
    # One file given for every split: it is train and dev, never a test set to predict.
    tests = [("", s) for s in task.test_splits()] if test and not data.is_file() else []
    splits = list(task.eval_splits) + tests
    for suffix, split in splits:
        examples = read_split(task, data, split, cap)
        if examples is not None:
            sets.append(EvalSet(suffix, split, examples, task.featurize(examples, tokenizer, max_seq_length)))
    return sets


def load_for_task(task: Task, model_dir: str | Path, cfg: FinetuneConfig | None) -> AlbertPreTrainedModel:
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
        required(cfg.max_seq_length, "max_seq_length"),
        AlbertConfig.from_pretrained(model_dir).max_position_embeddings,
    )
    cfg.max_seq_length = max_seq_length
    task = build_task(cfg)
    if task.head in ("sequence_classification", "token_classification") and not task.labels:
        id2label = AlbertConfig.from_pretrained(model_dir).id2label or {}
        task.labels = tuple(id2label[i] for i in sorted(id2label))
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    sets = eval_sets_of(task, data, tokenizer, max_seq_length, None, test=False)
    if not sets:
        raise FileNotFoundError(f"no dev file for {task_name} under {data}")
    dev = pick_device(device)
    precision = resolved_precision(precision, dev)
    model = load_for_task(task, model_dir, None).to(dev)
    batch_size = required(cfg.eval_batch_size, "eval_batch_size")
    results, preds = evaluate_sets(task, model, sets, batch_size, tokenizer.pad_token_id, dev, precision)
    if output:
        out = Path(output)
        for s in sets:
            task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
        write_json(out / "eval_results.json", results)
    return results
