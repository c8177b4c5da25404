"""`albert predict`: a fine-tuned model on new text, one JSON line out per input row, in input order.

The model folder is one `albert finetune` wrote (its `best/`: weights, spiece.model, finetune_config.json
naming the task and its labels) or any ALBERT folder with a head (the head then comes from config.json's
`architectures`, the label names from `id2label`). The rows are read whole, turned into the task's
features by the task's own code (the truncation, SQuAD's windows and RACE's option pairing are the ones
fine-tuning used), run in batches of similar length, and written back in input order, each with its line
number:

- sequence classification: `label` and `probabilities` (label -> probability); regression: `score`;
- token classification: `tokens` (whitespace-split text, or the row's token list) and `tags`;
- question answering: `answer` with its character offsets `start` / `end` in the context (SQuAD 2.0
  models answer "" with offsets null when no answer beats the null score by the threshold chosen on dev);
- multiple choice: `answer` (A, B, ...), its `index` and `probabilities` over the options.

Input: plain text (one text per line; sequence and token classification), CSV / TSV with a header, or
JSON Lines; `-` reads stdin (format from `--format`, lines by default) and `-` as output writes stdout.
A row without a needed column, or with an empty one, is an error naming the line and the column, or,
with `skip_bad`, reported on stderr and left out. The output file is written under a temporary name and
renamed, so a failed run leaves none.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.int8 import quantize_int8
from albert_lm.deploy.predict_config import PredictConfig
from albert_lm.files import (
    InputError,
    atomic_write,
    check_output_apart,
    csv_rows,
    jsonl_rows,
    read_json_object,
)
from albert_lm.hub import resolve_model
from albert_lm.model.config import AlbertConfig
from albert_lm.tasks import Task, get_task
from albert_lm.tasks.glue import GlueExample, GlueTask
from albert_lm.tasks.race import LETTERS, RaceExample
from albert_lm.tasks.squad import SquadExample, SquadTask
from albert_lm.tasks.squad_decoding import decode
from albert_lm.tasks.text_classification import TextExample, TokenExample
from albert_lm.training.evaluation import (
    check_head_fits,
    check_tokenizer_fits,
    load_for_task,
    pick_device,
    resolved_precision,
    run_model,
)

logger = logging.getLogger(__name__)

# The task a model is read as, from config.json's `architectures`, when no finetune_config.json names it.
_ARCHITECTURE_TASKS = {
    "AlbertForSequenceClassification": "classification",
    "AlbertForTokenClassification": "token-classification",
    "AlbertForQuestionAnswering": "squad1",
    "AlbertForMultipleChoice": "race",
}


@dataclass
class PredictSummary:
    rows: int  # rows read
    predicted: int  # rows written
    skipped: list[str]  # messages of the bad rows left out (skip_bad)
    task: str
    head: str


# --------------------------------------------------------------------------- reading rows
def read_rows(source: str, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of the input: plain lines become {"text": line}; CSV/TSV rows are keyed by the
    header; JSON Lines rows are the objects."""
    name = "<stdin>" if source == "-" else source
    if fmt == "auto":
        suffix = Path(source).suffix.lower() if source != "-" else ""
        fmt = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(suffix, "lines")
    if source != "-" and not Path(source).is_file():
        raise FileNotFoundError(f"no input file at {source}")
    raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(name, f"not UTF-8 (byte {e.start})", line=line) from e
    if fmt == "lines":
        for n, line in enumerate(text.splitlines(), start=1):
            yield n, {"text": line}
    elif fmt in ("csv", "tsv"):
        # TSV as GLUE and most tools write it: tabs separate, quotes are text; CSV: RFC 4180 quoting
        tsv = fmt == "tsv"
        yield from csv_rows(io.StringIO(text, newline=""), name, "\t" if tsv else ",", quotes=not tsv)
    else:
        yield from jsonl_rows(text.splitlines(), name)


class _Rows:
    """Field access that names the input's line and column on a bad value."""

    def __init__(self, cfg: PredictConfig) -> None:
        self.cfg, self.name = cfg, "<stdin>" if cfg.input == "-" else cfg.input

    def text(self, row: dict[str, Any], column: str, line: int) -> str:
        value = row.get(column)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise InputError(self.name, f"missing or empty column {column!r}", line=line)
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InputError(
                self.name, f"column {column!r}: expected text, got {type(value).__name__}", line=line
            )
        return str(value)

    def optional(self, row: dict[str, Any], column: str, line: int) -> str | None:
        value = row.get(column)
        return None if value is None or value == "" else self.text(row, column, line)

    def strings(self, row: dict[str, Any], column: str, line: int) -> list[str]:
        value = row.get(column)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise InputError(self.name, f"column {column!r}: expected a JSON list", line=line) from None
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str) and v.strip() for v in value)
        ):
            raise InputError(self.name, f"column {column!r}: expected a non-empty list of texts", line=line)
        return value


# --------------------------------------------------------------------------- the model's task
def model_task(model_dir: Path) -> tuple[Task, dict[str, Any]]:
    """The task the model was fine-tuned on (finetune_config.json), or the one its head implies; with
    the label names from config.json. Returns (task, the saved fine-tuning settings or {})."""
    config = AlbertConfig.from_pretrained(model_dir)
    saved_file = model_dir / "finetune_config.json"
    saved = read_json_object(saved_file, "fine-tuning settings") if saved_file.is_file() else {}
    name = saved.get("task")
    if name is None:
        arch = (config.extra.get("architectures") or [None])[0]
        name = _ARCHITECTURE_TASKS.get(str(arch))
        if name is None:
            raise ValueError(
                f"{model_dir}: not a fine-tuned model (no finetune_config.json, and config.json's "
                f"architectures {arch!r} is not one of {', '.join(_ARCHITECTURE_TASKS)})"
            )
    options = {k: v for k, v in saved.items() if k not in ("task", "labels")}
    task = get_task(name, **options)
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


def _examples(task: Task, cfg: PredictConfig, rows: list[tuple[int, dict[str, Any]]], fields: _Rows):
    """The task's example for each row: (examples, their lines, messages of rows left out)."""
    examples: list[Any] = []
    lines: list[int] = []
    skipped: list[str] = []
    n_options: int | None = None
    for line, row in rows:
        try:
            if task.head == "sequence_classification":
                text = fields.text(row, cfg.text_column, line)
                pair = fields.optional(row, cfg.text_pair_column, line)
                ex: Any = (
                    GlueExample(str(line), text, pair, None, line)
                    if isinstance(task, GlueTask)
                    else TextExample(text, pair, None, line)
                )
            elif task.head == "token_classification":
                tokens = (
                    fields.strings(row, cfg.tokens_column, line)
                    if cfg.tokens_column in row
                    else fields.text(row, cfg.text_column, line).split()
                )
                ex = TokenExample(tokens, None, line)
            elif task.head == "question_answering":
                question = fields.text(row, cfg.question_column, line)
                context = fields.text(row, cfg.context_column, line)
                ex = SquadExample(str(line), question, context, [])
            else:
                options = fields.strings(row, cfg.options_column, line)
                if n_options is not None and len(options) != n_options:
                    raise InputError(
                        fields.name, f"{len(options)} options; the rows before have {n_options}", line
                    )
                if len(options) > len(LETTERS):
                    raise InputError(fields.name, f"{len(options)} options: at most {len(LETTERS)}", line)
                n_options = len(options)
                question = fields.text(row, cfg.question_column, line)
                ex = RaceExample(
                    str(line), fields.text(row, cfg.context_column, line), question, options, None, ""
                )
        except InputError as e:
            if not cfg.skip_bad:
                raise
            skipped.append(str(e))
            logger.warning("skipped: %s", e)
            continue
        examples.append(ex)
        lines.append(line)
    return examples, lines, skipped


# --------------------------------------------------------------------------- predictions
def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _records(task: Task, saved: dict[str, Any], examples, features, outputs, lines) -> list[dict[str, Any]]:
    if task.head == "question_answering":
        assert isinstance(task, SquadTask)
        preds = decode(examples, features, outputs, task.n_best, task.max_answer_length)
        threshold = saved.get("null_score_diff_threshold")
        records = []
        for ex, line in zip(examples, lines, strict=True):
            span = preds.spans[ex.qid]
            if task.version2 and preds.null_diff[ex.qid] > (0.0 if threshold is None else float(threshold)):
                span = None
            text = ex.context[span[0] : span[1]] if span else ""
            start, end = span if span else (None, None)
            records.append({"line": line, "answer": text, "start": start, "end": end})
        return records
    if task.head == "token_classification":
        tags = task.predict(examples, features, outputs)
        return [
            {"line": line, "tokens": ex.tokens, "tags": t}
            for ex, t, line in zip(examples, tags, lines, strict=True)
        ]
    logits = [np.asarray(o["logits"], dtype=np.float64) for o in outputs]
    if task.head == "multiple_choice":
        records = []
        for x, line in zip(logits, lines, strict=True):
            p = _softmax(x)
            i = int(p.argmax())
            records.append(
                {
                    "line": line,
                    "answer": LETTERS[i],
                    "index": i,
                    "probabilities": [round(float(v), 6) for v in p],
                }
            )
        return records
    if not task.labels:  # regression (STS-B)
        return [{"line": line, "score": float(x[0])} for x, line in zip(logits, lines, strict=True)]
    if task.problem_type == "multi_label_classification":  # each label on its own: sigmoid, >= 0.5 given
        records = []
        for x, line in zip(logits, lines, strict=True):
            p = 1.0 / (1.0 + np.exp(-x))
            probs = {str(name): round(float(v), 6) for name, v in zip(task.labels, p, strict=True)}
            chosen = [str(name) for name, v in zip(task.labels, p, strict=True) if v >= 0.5]
            records.append({"line": line, "labels": chosen, "probabilities": probs})
        return records
    records = []
    for x, line in zip(logits, lines, strict=True):
        p = _softmax(x)
        probs = {str(name): round(float(v), 6) for name, v in zip(task.labels, p, strict=True)}
        records.append({"line": line, "label": str(task.labels[int(p.argmax())]), "probabilities": probs})
    return records


def predict(cfg: PredictConfig) -> PredictSummary:
    """Read, predict, write (see the module's docstring)."""
    model_dir = resolve_model(cfg.model)  # a hub id: its cached snapshot
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"no model at {model_dir} (no config.json): give a fine-tuned model folder")
    if cfg.output != "-":
        # Checked before anything is read: writing the output must never replace the input or the model.
        check_output_apart(cfg.output, {"--model": model_dir, "--input": cfg.input})
        if Path(cfg.output).is_dir():
            raise IsADirectoryError(f"--output {cfg.output}: is a folder; expected a file name to write")
    device = pick_device(cfg.device)
    if cfg.int8 and device.type != "cpu":
        raise ValueError("predict: --int8 runs on the CPU; add --device cpu")
    task, saved = model_task(model_dir)
    results = model_dir / "eval_results.json"
    if saved.get("null_score_diff_threshold") is None and results.is_file():  # SQuAD 2.0: chosen on dev
        chosen = read_json_object(results, "evaluation results").get("null_score_diff_threshold")
        saved = {**saved, "null_score_diff_threshold": chosen}
    fields = _Rows(cfg)
    rows = list(read_rows(cfg.input, cfg.format))
    examples, lines, skipped = _examples(task, cfg, rows, fields)
    config = AlbertConfig.from_pretrained(model_dir)
    max_len = min(cfg.max_seq_length or saved.get("max_seq_length") or 512, config.max_position_embeddings)
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(tokenizer, model_dir, config, saved.get("tokenizer_fingerprint"))
    model: torch.nn.Module = load_for_task(task, model_dir, None)  # a folder without its head is refused
    check_head_fits(task, config, model_dir)
    precision = resolved_precision(cfg.precision, device)
    records: list[dict[str, Any]] = []
    if examples:
        features = task.featurize(examples, tokenizer, max_len)
        model = model.to(device)
        if cfg.int8:
            model = quantize_int8(model)
        outputs = run_model(
            model, features, cfg.batch_size, tokenizer.pad_token_id, device, precision, "predict"
        )
        records = _records(task, saved, examples, features, outputs, lines)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if cfg.output == "-":
        sys.stdout.write(body)
        sys.stdout.flush()
    else:
        try:
            atomic_write(cfg.output, body)
        except OSError as e:  # a full disk or device, a closed pipe: the message names the output
            if e.filename or e.errno is None:
                raise
            raise OSError(e.errno, f"--output: writing failed: {e.strerror}", cfg.output) from e
    return PredictSummary(len(rows), len(records), skipped, task.name, task.head)


__all__ = ["PredictConfig", "PredictSummary", "model_task", "predict", "read_rows"]
