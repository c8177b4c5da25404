"""GLUE: the TSV files of the GLUE download script, per-task columns and labels, submission files.

Columns are found by the header names the download script writes (CoLA's train/dev files have no
header: source, label, original label, sentence), so a file in another layout fails with the name of
the missing column. Labels are checked against the task's label set, line by line. Metrics are the
benchmark's (`tasks.metrics.glue_metrics`); predictions are written as GLUE submission files
(`index<TAB>prediction`, one per task, named as the leaderboard expects: CoLA.tsv, MNLI-m.tsv, ...).

MNLI has two dev sets, matched and mismatched; both are scored, the mismatched metrics with an `_mm`
suffix (`accuracy_mm`), as transformers' run_glue reports them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.files import InputError, atomic_write, decode_utf8
from albert_lm.tasks import metrics
from albert_lm.tasks.task import Feature, Task, TokenizerLike, pair_features

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GlueSpec:
    folder: str  # the task's folder in the GLUE download, also the submission file's name
    text_a: str
    text_b: str | None
    label: str
    labels: tuple[str, ...]  # empty: regression (STS-B)
    dev_files: tuple[tuple[str, str], ...] = (("", "dev"),)  # (metric suffix, file stem)
    test_files: tuple[tuple[str, str], ...] = (("", "test"),)  # (submission suffix, file stem)


BINARY = ("0", "1")
GLUE_TASKS: dict[str, GlueSpec] = {
    "cola": GlueSpec("CoLA", "sentence", None, "label", BINARY),
    "sst2": GlueSpec("SST-2", "sentence", None, "label", BINARY),
    "mrpc": GlueSpec("MRPC", "#1 String", "#2 String", "Quality", BINARY),
    "stsb": GlueSpec("STS-B", "sentence1", "sentence2", "score", ()),
    "qqp": GlueSpec("QQP", "question1", "question2", "is_duplicate", BINARY),
    "mnli": GlueSpec(
        "MNLI",
        "sentence1",
        "sentence2",
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        dev_files=(("", "dev_matched"), ("_mm", "dev_mismatched")),
        test_files=(("-m", "test_matched"), ("-mm", "test_mismatched")),
    ),
    "qnli": GlueSpec("QNLI", "question", "sentence", "label", ("entailment", "not_entailment")),
    "rte": GlueSpec("RTE", "sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    "wnli": GlueSpec("WNLI", "sentence1", "sentence2", "label", BINARY),
}
# The conventional names of the label values in the GLUE files, by task (the datasets' papers and
# cards): keyed by the value, not by position, so a model's id i (the index of its value in
# GlueSpec.labels) always maps to the right name. MNLI, QNLI and RTE's values are names already; STS-B
# is a regression.
LABEL_NAMES: dict[str, dict[str, str]] = {
    "cola": {"0": "unacceptable", "1": "acceptable"},
    "sst2": {"0": "negative", "1": "positive"},
    "mrpc": {"0": "not_equivalent", "1": "equivalent"},
    "qqp": {"0": "not_duplicate", "1": "duplicate"},
    "wnli": {"0": "not_entailment", "1": "entailment"},
}
# CoLA's train and dev files carry no header; these are the download script's columns.
_COLA_COLUMNS = ("source", "label", "original_label", "sentence")
_ID_COLUMNS = ("index", "id", "pairID")
STSB_RANGE = (0.0, 5.0)


def label_names(task: str) -> tuple[str, ...]:
    """A GLUE task's labels by their conventional names, in the order of the model's label ids: sst2 ->
    ("negative", "positive"), mnli -> ("contradiction", "entailment", "neutral"); () for STS-B."""
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {', '.join(GLUE_TASKS)}")
    names = LABEL_NAMES.get(task, {})
    return tuple(names.get(value, value) for value in GLUE_TASKS[task].labels)


def glue_id2label(task: str) -> dict[int, str] | None:
    """config.json's `id2label` for a model fine-tuned on `task`: the conventional names by id; None for
    a task outside GLUE or a regression (STS-B), whose config keeps what it has."""
    if task not in GLUE_TASKS:
        return None
    return dict(enumerate(label_names(task))) or None


@dataclass
class GlueExample:
    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    line: int


def read_glue_tsv(path: Path, spec: GlueSpec, require_label: bool = True) -> list[GlueExample]:
    """Rows of one GLUE TSV file. Tabs only, no quoting (MRPC sentences begin with a bare `"`)."""
    if not path.is_file():
        raise FileNotFoundError(f"no GLUE file at {path}")
    text = decode_utf8(path.read_bytes(), path)  # MRPC's files start with a BOM
    lines = [line.rstrip("\r\n") for line in text.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InputError(path, "empty file")
    first = lines[0].split("\t")
    if spec.folder == "CoLA" and spec.text_a not in first:
        header, start = list(_COLA_COLUMNS), 0
    else:
        header, start = first, 1
    col = {name: i for i, name in enumerate(header)}
    need = [spec.text_a] + ([spec.text_b] if spec.text_b else [])
    for name in [*need, *([spec.label] if require_label else [])]:
        if name not in col:
            raise InputError(
                path,
                f"missing column {name!r} (header: {', '.join(header)}){_other_task(first, spec)}",
                line=1,
            )
    has_label = spec.label in col
    id_col = next((col[c] for c in _ID_COLUMNS if c in col), None)
    examples = []
    for n, line in enumerate(lines[start:], start=start + 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        wanted = [col[c] for c in need] + ([col[spec.label]] if has_label else [])
        if max(wanted) >= len(fields):
            missing = [c for c in [*need, spec.label] if c in col and col[c] >= len(fields)]
            raise InputError(path, f"{len(fields)} fields, no value for column {missing[0]!r}", line=n)
        blank = next((c for c in need if not fields[col[c]].strip()), None)
        if blank is not None:  # an example without its text: the model would learn from [CLS] [SEP] alone
            raise InputError(path, f"empty value in column {blank!r}: every example needs its text", line=n)
        label: str | float | None = None
        if has_label:
            label = _check_label(fields[col[spec.label]].strip(), spec, path, n)
        guid = fields[id_col] if id_col is not None and id_col < len(fields) else str(n - start - 1)
        examples.append(
            GlueExample(
                guid, fields[col[spec.text_a]], fields[col[spec.text_b]] if spec.text_b else None, label, n
            )
        )
    if not examples:
        raise InputError(path, "no examples (only a header)")
    return examples


def _other_task(first: list[str], spec: GlueSpec) -> str:
    """Where a file's first line is another GLUE task's (its header, or a headerless CoLA row: source,
    0 or 1, a mark, a sentence), the hint that --task may be wrong; else nothing."""
    if len(first) == len(_COLA_COLUMNS) and first[1] in BINARY and spec.folder != "CoLA":
        return (
            f"; its first line reads as a CoLA row, which has no header: is --task right for {spec.folder}?"
        )
    alike = [  # CoLA's files have no header: a header of its columns is SST-2's
        (name, other.folder)
        for name, other in GLUE_TASKS.items()
        if other not in (spec, GLUE_TASKS["cola"])
        and all(c in first for c in (other.text_a, other.label, other.text_b or other.text_a))
    ]
    if not alike:
        return ""
    return f"; these are the columns of {' or '.join(f for _, f in alike)}: --task {' or '.join(n for n, _ in alike)}?"


def _check_label(value: str, spec: GlueSpec, path: Path, line: int) -> str | float:
    if spec.labels:
        if value not in spec.labels:
            raise InputError(
                path,
                f"label {value!r} in column {spec.label!r} is not one of {', '.join(spec.labels)}",
                line=line,
            )
        return value
    try:
        score = float(value)
    except ValueError:
        raise InputError(path, f"column {spec.label!r}: {value!r} is not a number", line=line) from None
    lo, hi = STSB_RANGE
    if not lo <= score <= hi:
        raise InputError(path, f"column {spec.label!r}: score {score} outside [{lo}, {hi}]", line=line)
    return score


class GlueTask(Task):
    head = "sequence_classification"

    def __init__(self, name: str) -> None:
        if name not in GLUE_TASKS:
            raise ValueError(f"unknown GLUE task {name!r}; choose one of {', '.join(GLUE_TASKS)}")
        self.name, self.spec = name, GLUE_TASKS[name]
        self.labels = self.spec.labels
        self.problem_type = "regression" if not self.labels else "single_label_classification"
        self.score_range = STSB_RANGE if not self.labels and self.spec.text_b else None
        self.main_metric = metrics.GLUE_METRICS[name][0] if name != "stsb" else "spearman"
        self.eval_splits = tuple((suffix, stem) for suffix, stem in self.spec.dev_files)

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1

    def split_file(self, data: Path, split: str) -> Path | None:
        if data.is_file():
            return data
        for folder in (data, data / self.spec.folder):
            if (folder / f"{split}.tsv").is_file():
                return folder / f"{split}.tsv"
        return None

    def test_splits(self) -> tuple[str, ...]:
        return tuple(stem for _, stem in self.spec.test_files)

    def read(self, path: Path, split: str) -> list[GlueExample]:
        return read_glue_tsv(path, self.spec, require_label=not split.startswith("test"))

    def featurize(self, examples, tokenizer: TokenizerLike, max_seq_length: int, training: bool = False):
        features: list[Feature] = []
        for i, ex in enumerate(examples):
            a = tokenizer.encode(ex.text_a, add_special_tokens=False)
            b = tokenizer.encode(ex.text_b, add_special_tokens=False) if ex.text_b is not None else None
            ids, types = pair_features(tokenizer, a, b, max_seq_length)
            feat: Feature = {"input_ids": ids, "token_type_ids": types, "example_index": i}
            if ex.label is not None:
                feat["labels"] = float(ex.label) if not self.labels else self.labels.index(ex.label)
            features.append(feat)
        return features

    def predict(self, examples, features, outputs) -> list[Any]:
        logits = np.stack([o["logits"] for o in outputs])  # (N, num_labels)
        if not self.labels:
            return [float(x) for x in logits[:, 0]]
        return [int(x) for x in logits.argmax(-1)]

    def score(self, examples, predictions) -> dict[str, float]:
        gold = [ex.label if not self.labels else self.labels.index(ex.label) for ex in examples]
        return metrics.glue_metrics(self.name, predictions, gold)

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        """A GLUE submission file: `index<TAB>prediction`, label names (scores for STS-B)."""
        kind = "test" if split.startswith("test") else "dev"
        suffix = "-m" if split.endswith("_matched") else "-mm" if split.endswith("_mismatched") else ""
        rows = ["index\tprediction"]
        for ex, p in zip(examples, predictions, strict=True):
            rows.append(f"{ex.guid}\t{p:.3f}" if not self.labels else f"{ex.guid}\t{self.labels[p]}")
        return atomic_write(folder / kind / f"{self.spec.folder}{suffix}.tsv", "\n".join(rows) + "\n")
