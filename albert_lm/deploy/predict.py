"""`albert predict`: a fine-tuned model on new text, one JSON line out per input row, in input order.

The model folder is one `albert finetune` wrote (its `best/`: weights, spiece.model, finetune_config.json
naming the task and its labels) or any ALBERT folder with a head (the head then comes from config.json's
`architectures`, the label names from `id2label`). The rows are read whole, turned into the task's
features by the task's own code (the truncation, SQuAD's windows and RACE's option pairing are the ones
fine-tuning used), run in batches of similar length, and written back in input order, each with its line
number:

- sequence classification: `label` and `probabilities` (label -> probability); regression: `score`;
  a GLUE model whose config names no labels of its own writes the task's conventional names
  (SST-2 negative / positive, CoLA unacceptable / acceptable, ...: `tasks.glue.label_names`);
- token classification: `tokens` (whitespace-split text, or the row's token list) and `tags`;
- question answering: `answer` with its character offsets `start` / `end` in the context and its `score`
  (start + end logits; SQuAD 2.0 models also `null_score_diff`, [CLS]'s score minus it, and answer ""
  with offsets null where that exceeds the model's threshold);
- multiple choice: `answer` (A, B, ...), its `index` and `probabilities` over the options.

Input: plain text (one text per line, blank lines skipped and counted; sequence and token
classification), CSV / TSV with a header, or JSON Lines; `-` reads stdin (format from `--format`,
lines by default) and `-` as output writes stdout (`deploy.inputs`). The columns read are the ones given,
else the ones a `classification` / `token-classification` model was fine-tuned on (its
finetune_config.json), else text, text_pair, tokens, ... (`Columns`). A row without a needed column, or
with an empty one, is an error naming the line and the column, or, with `skip_bad`, reported on stderr
and left out. `keep_columns` copies input columns into each line. The output file is written under a
temporary name and renamed, so a failed run leaves none. `TaskModel` and `predict_examples` are the part
that `albert_lm.Predictor` shares: the model loaded once, rows in, output dicts out.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.special import softmax

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.inputs import (
    FORMATS,
    Fields,
    Input,
    check_output,
    given_rows,
    jsonl,
    parse_columns,
    with_kept,
    write_output,
)
from albert_lm.deploy.int8 import quantize_int8
from albert_lm.deploy.predict_config import Columns, PredictConfig
from albert_lm.deploy.rows import READS, examples_of, pairs_wanted, reads_pairs
from albert_lm.files import InputError
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import pick_device, resolved_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import ExitRule, with_exit_rule
from albert_lm.runtime.finetuned import null_threshold, read_saved_settings
from albert_lm.runtime.fits import check_head_fits, check_tokenizer_fits, sequence_length
from albert_lm.runtime.run import run_model
from albert_lm.runtime.run_folders import no_model
from albert_lm.runtime.task_model import load_for_task
from albert_lm.tasks import Task, get_task
from albert_lm.tasks.glue import GlueTask, label_names
from albert_lm.tasks.metrics import has_spans
from albert_lm.tasks.race import LETTERS
from albert_lm.tasks.squad import SquadTask
from albert_lm.tasks.squad_decoding import decode
from albert_lm.tasks.text_classification import TokenClassificationTask
from albert_lm.tasks.token_classification import entities

logger = logging.getLogger(__name__)

# The task a model is read as, from config.json's `architectures`, when no finetune_config.json names it.
_ARCHITECTURE_TASKS = {
    "AlbertForSequenceClassification": "classification",
    "AlbertForTokenClassification": "token-classification",
    "AlbertForQuestionAnswering": "squad1",
    "AlbertForMultipleChoice": "race",
    "AlbertForSentenceSimilarity": "stsb",  # a bi-encoder: text pairs scored on STS-B's scale
}
# The fields predict writes; a kept column of one of these names would replace it.
OUTPUT_FIELDS = ("line", "label", "labels", "probabilities", "score", "tokens", "tags", "tag_probabilities",
                 "entities", "answer", "start", "end", "index", "null_score_diff")  # fmt: skip


@dataclass
class PredictSummary:
    """What `predict` returns: the rows read and written, the messages of the rows left out, and the
    task and head the model ran."""

    rows: int  # rows read (blank lines aside)
    predicted: int  # rows written
    skipped: list[str]  # messages of the bad rows left out (skip_bad)
    task: str
    head: str
    blank_lines: int = 0  # plain-text or JSON Lines lines left out because they were blank
    mean_depth: float | None = None  # early exit: the layer applications a row used, on average
    layers: int | None = None  # early exit: the model's layer applications (a row used all at most)


# --------------------------------------------------------------------------- the model's task
class NotFineTuned(ValueError):
    """A model folder that names no task: no finetune_config.json, no head in config.json's architectures
    (a pretrained encoder). Other errors of reading the folder are ValueErrors of their own."""


def _untuned_way(model_dir: Path, arch: Any) -> str:
    """The way on from a model without a task head: fine-tune it; as it is, a pretraining checkpoint fills
    masks (`albert fill-mask`) and an encoder gives sentence vectors (`albert embed`)."""
    pretrained = str(arch) in ("AlbertForPreTraining", "AlbertForMaskedLM")
    now = (
        "`albert fill-mask` fills its [MASK]s" if pretrained else "`albert embed` gives its sentence vectors"
    )
    return (
        f"; fine-tune it first: albert finetune --task classification --model {shlex.quote(str(model_dir))} --data DIR "
        f"--output runs/NAME, then give --model runs/NAME/best; as it is, {now}"
    )


def model_task(model_dir: Path) -> tuple[Task, dict[str, Any]]:
    """The task the model was fine-tuned on (finetune_config.json), or the one its head implies; with
    the label names from config.json. Returns (task, the saved fine-tuning settings or {})."""
    config = AlbertConfig.from_pretrained(model_dir)
    saved = read_saved_settings(model_dir)
    name = saved.get("task")
    if name is None:
        arch = (config.extra.get("architectures") or [None])[0]
        name = _ARCHITECTURE_TASKS.get(str(arch))
        if name is None:
            raise NotFineTuned(
                f"{model_dir}: not a fine-tuned model (no finetune_config.json, and config.json's "
                f"architectures {arch!r} is not one of {', '.join(_ARCHITECTURE_TASKS)}){_untuned_way(model_dir, arch)}"
            )
    options = {k: v for k, v in saved.items() if k not in ("task", "labels")}
    task = get_task(name, **options)
    if hasattr(task, "text_pair_column"):  # a task on your own files: pairs or single texts, as recorded
        # null (fine-tuned on single texts) or not recorded: None, where get_task would keep its default
        task.text_pair_column = saved.get("text_pair_column") or None
    if task.head in ("sequence_classification", "token_classification") and not isinstance(task, GlueTask):
        # transformers writes no id2label for its default labels: LABEL_0 ... LABEL_{num_labels - 1}
        id2label = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
        names = saved.get("labels") or [id2label[i] for i in sorted(id2label)]
        task.labels = tuple(str(n) for n in names)
        if task.head == "sequence_classification" and not saved.get("labels"):
            # As transformers reads a classifier's config: problem_type, else one output is a regression.
            kind = config.problem_type or ("regression" if config.num_labels == 1 else None)
            if kind == "regression":
                task.labels = ()
            task.problem_type = kind or task.problem_type
    return task, saved


def output_labels(task: Task, config: AlbertConfig) -> tuple[str, ...]:
    """The names written for the label ids: the task's own, except for a GLUE task whose model names
    none of its own (config.json without id2label, or with the label values "0", "1" or transformers'
    placeholders LABEL_i): then the conventional names, e.g. SST-2's negative / positive."""
    if not isinstance(task, GlueTask) or not task.labels:
        return task.labels
    id2label = config.id2label or {}
    given = tuple(id2label[i] for i in sorted(id2label))
    n = len(task.labels)
    placeholders = (task.labels, tuple(str(i) for i in range(n)), tuple(f"LABEL_{i}" for i in range(n)))
    if not given or given in placeholders or len(given) != n:
        return label_names(task.name)
    return given  # names the model carries (written at fine-tuning, or by hand)


@dataclass
class TaskModel:
    """A fine-tuned model loaded for prediction: its task, head, tokenizer and settings."""

    folder: Path
    task: Task
    saved: dict[str, Any]  # finetune_config.json (SQuAD 2.0: with the null-score threshold)
    labels: tuple[str, ...]  # the names written for the label ids
    model: torch.nn.Module
    tokenizer: AlbertTokenizer
    device: torch.device
    precision: str
    max_len: int
    batch_size: int = 32


def load_task_model(
    model: str | Path,
    device: str = "auto",
    precision: str = "auto",
    int8: bool = False,
    max_seq_length: int | None = None,
    batch_size: int = 32,
    exit_rule: dict[str, Any] | None = None,
) -> TaskModel:
    """A fine-tuned folder or hub id, loaded once for many `predict_examples` calls. `exit_rule`:
    `ExitRule`'s arguments, for early exit (a model fine-tuned with --exit-heads)."""
    rule = ExitRule(**(exit_rule or {}))
    model_dir = _model_dir(model)
    where = pick_device(device)
    if int8 and where.type != "cpu":
        raise ValueError("predict: --int8 runs on the CPU; add --device cpu")
    task, saved = model_task(model_dir)
    saved = {**saved, "null_score_diff_threshold": null_threshold(model_dir, saved)}  # SQuAD 2.0
    config = AlbertConfig.from_pretrained(model_dir)
    max_len = sequence_length(max_seq_length, int(saved.get("max_seq_length") or 512), config, model_dir)
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(tokenizer, model_dir, config, saved.get("tokenizer_fingerprint"))
    net: torch.nn.Module = load_for_task(task, model_dir, None)  # a folder without its head is refused
    check_head_fits(task, config, model_dir)
    net = with_exit_rule(net, model_dir, rule).to(where)
    if int8:
        net = quantize_int8(net)
    labels = output_labels(task, config)
    precise = resolved_precision(precision, where)
    return TaskModel(model_dir, task, saved, labels, net, tokenizer, where, precise, max_len, batch_size)


def _model_dir(model: str | Path) -> Path:
    # a hub id: its snapshot; a Path to a folder was resolved before (not looked up, nor logged, again)
    model_dir = model if isinstance(model, Path) and model.is_dir() else resolve_model(model)
    if not (model_dir / "config.json").is_file():
        raise no_model(model_dir)
    return model_dir


# --------------------------------------------------------------------------- predictions
def _span_records(tm: TaskModel, examples, features, outputs, lines) -> list[dict[str, Any]]:
    task = tm.task
    assert isinstance(task, SquadTask)
    preds = decode(examples, features, outputs, task.n_best, task.max_answer_length)
    threshold = tm.saved.get("null_score_diff_threshold")
    records = []
    for ex, line in zip(examples, lines, strict=True):
        span = preds.spans[ex.qid]
        if task.version2 and preds.null_diff[ex.qid] > (0.0 if threshold is None else float(threshold)):
            span = None
        start, end = span if span else (None, None)
        record = {"line": line, "answer": ex.context[start:end] if span else "", "start": start, "end": end}
        if preds.spans[
            ex.qid
        ]:  # how sure: the best span's start + end logits (and, SQuAD 2.0, against [CLS])
            record["score"] = round(preds.scores[ex.qid], 4)
            if task.version2:
                record["null_score_diff"] = round(preds.null_diff[ex.qid], 4)
        records.append(record)
    return records


def _label_record(tm: TaskModel, x: np.ndarray, line: int) -> dict[str, Any]:
    """One row of a classifier's logits `x` (num_labels,) as its output line."""
    task, labels = tm.task, tm.labels
    if task.head == "multiple_choice":
        p = softmax(x)
        i = int(p.argmax())
        return {
            "line": line,
            "answer": LETTERS[i],
            "index": i,
            "probabilities": [round(float(v), 6) for v in p],
        }
    if not labels:  # regression (STS-B)
        return {"line": line, "score": float(x[0])}
    if task.problem_type == "multi_label_classification":  # each label on its own: sigmoid, >= 0.5 given
        p = 1.0 / (1.0 + np.exp(-x))
        probs = {str(name): round(float(v), 6) for name, v in zip(labels, p, strict=True)}
        return {
            "line": line,
            "labels": [str(n) for n, v in zip(labels, p, strict=True) if v >= 0.5],
            "probabilities": probs,
        }
    p = softmax(x)
    probs = {str(name): round(float(v), 6) for name, v in zip(labels, p, strict=True)}
    return {"line": line, "label": str(labels[int(p.argmax())]), "probabilities": probs}


def predict_examples(tm: TaskModel, examples: Sequence[Any], lines: Sequence[int]) -> list[dict[str, Any]]:
    """The output dicts of the examples (one per example, in their order): features by the task's own
    code, the model on batches of similar length."""
    if not examples:
        return []
    features = tm.task.featurize(examples, tm.tokenizer, tm.max_len)
    pad = tm.tokenizer.pad_token_id
    outputs = run_model(
        tm.model, features, tm.batch_size, pad, tm.device, tm.precision, "predict", finite=True
    )
    if tm.task.head == "question_answering":
        return _span_records(tm, examples, features, outputs, lines)
    if tm.task.head == "token_classification":
        assert isinstance(tm.task, TokenClassificationTask)
        tagged = tm.task.tags_and_probabilities(examples, features, outputs)
        spans = has_spans(tm.task.labels)  # tags of a scheme (BIO, BIOES, ...): the entities they name too
        return [
            {"line": line, "tokens": ex.tokens, "tags": t, "tag_probabilities": [round(q, 6) for q in p]}
            | ({"entities": entities(ex.tokens, t, ex.text)} if spans else {})
            for ex, (t, p), line in zip(examples, tagged, lines, strict=True)
        ]
    records = [
        _label_record(tm, np.asarray(o["logits"], dtype=np.float64), line)
        for o, line in zip(outputs, lines, strict=True)
    ]
    for record, o in zip(records, outputs, strict=True):
        if "depth" in o:  # early exit: the layers this row used
            record["depth"] = int(o["depth"])
    return records


def _check_single_texts(cfg: PredictConfig, task: Task, columns: Columns, fmt: str, found: Input) -> None:
    """Single texts (--text, plain lines) refused for a model that reads more: a question and its context,
    options, or a pair of texts (`reads_pairs`), saying how to give them."""
    if cfg.text and task.head in READS:  # a question and its context are no single text
        raise ValueError(
            f"--text gives single texts, and this {task.name} model reads {READS[task.head]}: give them "
            "as the rows of an --input file (JSON Lines or CSV, a column each)"
        )
    if task.head != "sequence_classification" or not reads_pairs(task, columns):
        return
    if cfg.text:  # predict has no option for a second text: pairs come from an --input file's columns
        raise ValueError(pairs_wanted(task, columns, "--text"))
    if fmt == "lines":
        way = "; for stdin, --format csv, tsv or jsonl" if found.name == "<stdin>" else ""
        line = found.rows[0][0] if found.rows else None
        raise InputError(found.name, pairs_wanted(task, columns, "a plain line") + way, line=line)


def predict(cfg: PredictConfig) -> PredictSummary:
    """Read, predict, write (see the module's docstring)."""
    if not isinstance(cfg, PredictConfig):
        raise TypeError(
            f"predict: expected a PredictConfig, got {type(cfg).__name__}; for a list of texts in memory: "
            "albert_lm.Predictor(model).predict(texts)"
        )
    keep = parse_columns(cfg.keep_columns, OUTPUT_FIELDS)
    model_dir = _model_dir(cfg.model)
    check_output(cfg.output, {"--model": model_dir, "--input": cfg.input}, "predict")
    fmt: str = cfg.format
    if cfg.text:  # texts given on the command line: read as plain lines are
        fmt = "lines"
    elif fmt == "auto" and cfg.input is not None:
        # as read_input reads it: from the extension, plain lines otherwise and for stdin
        fmt = FORMATS.get(Path(cfg.input).suffix.lower(), "lines") if cfg.input != "-" else "lines"
    found = given_rows(cfg.input, cfg.text, fmt, "text", keep)
    tm = load_task_model(
        model_dir,
        cfg.device,
        cfg.precision,
        cfg.int8,
        cfg.max_seq_length,
        cfg.batch_size,
        cfg.exit_rule_values(),
    )
    columns = Columns.of(cfg, tm.saved, tm.task)
    _check_single_texts(cfg, tm.task, columns, fmt, found)
    for name in sorted(columns.recorded):  # None: a model of single texts
        column = getattr(columns, name) or "none (single texts)"
        logger.info("--%s-column: %s, as the model was fine-tuned", name.replace("_", "-"), column)
    if fmt == "lines":  # a plain line is the text, whatever its column's name
        found.rows = [(n, {**row, columns.text: row["text"]}) for n, row in found.rows]
    got = examples_of(tm.task, found.rows, Fields(found.name), columns, keep, cfg.skip_bad)
    records = predict_examples(tm, got.examples, got.lines)
    write_output(cfg.output, jsonl(with_kept(r, k) for r, k in zip(records, got.kept, strict=True)))
    depths = [r["depth"] for r in records if "depth" in r]
    return PredictSummary(
        len(found.rows),
        len(records),
        got.skipped,
        tm.task.name,
        tm.task.head,
        found.blank_lines,
        sum(depths) / len(depths) if depths else None,
        getattr(tm.model, "layers", None) if depths else None,
    )


__all__ = [
    "OUTPUT_FIELDS",
    "Columns",
    "NotFineTuned",
    "PredictConfig",
    "PredictSummary",
    "TaskModel",
    "load_task_model",
    "model_task",
    "output_labels",
    "predict",
    "predict_examples",
]
