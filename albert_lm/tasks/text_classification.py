"""Users' own data: text classification and token classification from CSV or JSONL.

Text classification: one example per row (CSV with a header, or one JSON object per line) with a text
column (`text` by default), an optional second text (`text_pair`), and a `label`. The label set is
the sorted set of training labels (in numeric order where each is a whole number: 2 before 10); it is
stored in the model's config (`id2label`), so evaluation and prediction use the same ids, and a dev label
never seen in training is an error naming its line.
A row whose text is null, blank or not text (a list, an object), or a labelled row without its label, is
an error naming the file, the line and the column: no row is skipped, and none is read as the printed
form of a list.
Metrics: accuracy and macro-F1.

Token classification: one sentence per row with `tokens` (a list, or in CSV a cell of a JSON list or of
words apart by spaces; an unlabelled test file may give a `text` instead, read as its words) and `tags` of
the same length (BIO / IOB2, IOB1, BIOES or BILOU tags for entity F1), or CoNLL files (SPLIT.conll or
SPLIT.txt: a word and its tag a line, the tag last, sentences apart by a blank line; read by
`albert_lm.tasks.token_classification`). Each word is tokenized on its own; its first piece carries the
tag and the others are ignored in the loss (`IGNORE_INDEX`, -100), as transformers'
token-classification example does. A dev tag never seen in training counts as a miss, with a warning.
A sentence longer than `max_seq_length` is read in windows of whole words, each starting halfway through
the one before; each word is trained and tagged in the one window where it has the most words around it
(`albert_lm.tasks.word_windows`).
Metrics: token accuracy and entity-level precision / recall / F1 (conlleval's micro average), which picks
the best checkpoint; tags without a scheme's prefix (B-, I-, E-, S-, L-, U-: POS tags, say) name no
spans: accuracy alone then.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import softmax

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.files import InputError, atomic_write, csv_rows, decode_utf8, iter_jsonl
from albert_lm.hints import column_hint
from albert_lm.tasks import metrics
from albert_lm.tasks.task import Feature, Task, TokenizerLike, pair_features
from albert_lm.tasks.token_classification import CONLL, read_conll, words_of
from albert_lm.tasks.word_windows import owners, window_feature, word_windows

logger = logging.getLogger(__name__)


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a .csv (header) or .jsonl / .json (one object per line) file."""
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {path}")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl", ".json"):
        raise InputError(path, "expected a .csv, .tsv or .jsonl file")
    any_row = False
    try:
        for n, row in _csv_rows(path, suffix) if suffix in (".csv", ".tsv") else iter_jsonl(path):
            any_row = True
            yield n, row
    except UnicodeDecodeError:  # named by its line and byte in the file, not in the block the reader read
        decode_utf8(path.read_bytes(), path)
        raise
    if not any_row:
        raise InputError(path, "empty file")


def _csv_rows(path: Path, suffix: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a CSV or TSV file with a header."""
    with path.open(encoding="utf-8-sig", newline="") as f:
        tsv = suffix == ".tsv"  # a quote is text in TSV, as GLUE writes it and predict reads it
        yield from csv_rows(f, path, delimiter="\t" if tsv else ",", quotes=not tsv)


def _missing(row: dict[str, Any], name: str, path: Path, line: int) -> InputError:
    """The error of a row without a value for column `name`: absent (the row's columns listed, as a
    misspelt column name is the usual cause; a CSV file's header is checked before, `_check_header`),
    null or empty."""
    if name not in row:
        have = ", ".join(map(repr, row)) or "none"
        return InputError(
            path, f"missing value for column {name!r} (the row has no such column: {have})", line=line
        )
    return InputError(path, f"missing value for column {name!r} (null, empty or blank)", line=line)


def _check_header(path: Path, row: dict[str, Any], wanted: dict[str, str]) -> None:
    """A CSV or TSV file's header (the keys of each of its rows) holds each column `wanted` names (option:
    column); one it lacks is refused against the header, line 1, with the column likely meant."""
    if path.suffix.lower() in (".csv", ".tsv"):
        for option, name in wanted.items():
            if name not in row:
                raise InputError(path, column_hint(option, name, list(row), wanted.values()), line=1)


def _scalar(value: Any, name: str, path: Path, line: int, what: str) -> str:
    """`value` as text: a string or a number (a JSON Lines value); a list, an object or true/false is
    refused, as its printed form would silently become the text (or the label)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(path, f"column {name!r}: expected {what}, got {_json_type(value)}", line=line)
    return str(value)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", bool: "true/false", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _text(row: dict[str, Any], name: str, path: Path, line: int) -> str:
    """The non-blank text of column `name`; refused with the file, line and column otherwise."""
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _missing(row, name, path, line)
    return _scalar(value, name, path, line, "text")


def _optional_text(row: dict[str, Any], name: str | None, path: Path, line: int) -> str | None:
    """The text of an optional column (None where absent, null or empty)."""
    if not name or row.get(name) in (None, ""):
        return None
    return _text(row, name, path, line)


def _label(row: dict[str, Any], name: str, path: Path, line: int, required: bool) -> str | None:
    """The label of column `name` as text (a string, a number or true/false); None where a test split has
    none; refused with the file, line and column where a labelled split lacks it."""
    value = row.get(name)
    if value is None or value == "":
        if required:
            raise _missing(row, name, path, line)
        return None
    if isinstance(value, bool):  # is_spam: true
        return str(value)
    return _nfc(_scalar(value, name, path, line, "a label (text or a number)"))


def label_order(labels: Iterable[str]) -> list[str]:
    """Labels in id order: numeric where every one is a whole number written in decimal ("2" before "10",
    as 0 to 11 are meant), else sorted as text."""
    found = set(labels)
    if found and all(_DECIMAL.fullmatch(label) for label in found):
        return sorted(found, key=lambda label: (int(label), label))  # "7" and "07": both, in a fixed order
    return sorted(found)


_DECIMAL = re.compile(r"[+-]?[0-9]+")


class UnseenLabelError(InputError):
    """A dev label that training did not have (a fine-tuning run whose training examples were capped adds
    so: the label may be past the cap)."""


def _nfc(label: str) -> str:
    """A label or tag in Unicode's composed form: "Märchen" typed on a Mac (a + combining diaeresis) is the
    label its files elsewhere write with one character."""
    return unicodedata.normalize("NFC", label)


class _OwnFilesTask(Task):
    """A task on the user's own files: one file for every split, or SPLIT.jsonl/.csv/.tsv/.json in a folder."""

    def split_file(self, data: Path, split: str) -> Path | None:
        if data.is_file():
            return data
        for ext in (".jsonl", ".csv", ".tsv", ".json"):
            if (data / f"{split}{ext}").is_file():
                return data / f"{split}{ext}"
        return None


# --------------------------------------------------------------------------- text classification
@dataclass
class TextExample:
    text: str
    text_pair: str | None
    label: str | None
    line: int


class TextClassificationTask(_OwnFilesTask):
    name = "classification"
    head = "sequence_classification"
    main_metric = "accuracy"
    problem_type = "single_label_classification"

    def __init__(
        self,
        labels: Sequence[str] = (),
        text_column: str = "text",
        text_pair_column: str | None = "text_pair",
        label_column: str = "label",
    ) -> None:
        self.labels = tuple(labels)
        self.text_column, self.text_pair_column, self.label_column = (
            text_column,
            text_pair_column,
            label_column,
        )

    def read(self, path: Path, split: str) -> list[TextExample]:
        examples: list[TextExample] = []
        required = not split.startswith("test")
        wanted = {"--text-column": self.text_column}
        if self.text_pair_column not in (None, "text_pair"):  # one named on purpose, not the default
            wanted["--text-pair-column"] = str(self.text_pair_column)
        if required:
            wanted["--label-column"] = self.label_column
        for line, row in read_rows(path):
            if not examples:  # the first row: a CSV's header is every row's keys, checked once
                _check_header(path, row, wanted)
            text = _text(row, self.text_column, path, line)
            pair = _optional_text(row, self.text_pair_column, path, line)
            label = _label(row, self.label_column, path, line, required)
            if label is not None and self.labels and label not in self.labels:
                raise UnseenLabelError(
                    path, f"label {label!r} was not seen in training ({', '.join(self.labels)})", line=line
                )
            examples.append(TextExample(text, pair, label, line))
        return examples

    def fit_labels(self, train_examples: Sequence[TextExample]) -> None:
        """The labels seen in training; and a model trained on single texts reads single texts: a second
        text column is then not read from dev rows, nor recorded for predict (`recorded_columns`)."""
        found = label_order({ex.label for ex in train_examples if ex.label is not None})
        if len(found) < 2:
            raise ValueError(
                f"column {self.label_column!r}: text classification needs at least 2 labels in training, "
                f"found {found}"
            )
        self.labels = tuple(found)
        if not any(ex.text_pair is not None for ex in train_examples):
            self.text_pair_column = None

    def recorded_columns(self) -> dict[str, Any]:
        """The columns a fine-tuned folder records beside its settings, as fitted to the training data."""
        return {"text_pair_column": self.text_pair_column}

    def featurize(self, examples, tokenizer: TokenizerLike, max_seq_length: int, training: bool = False):
        features: list[Feature] = []
        for i, ex in enumerate(examples):
            a = tokenizer.encode(ex.text, add_special_tokens=False)
            b = tokenizer.encode(ex.text_pair, add_special_tokens=False) if ex.text_pair else None
            ids, types = pair_features(tokenizer, a, b, max_seq_length)
            feat: Feature = {"input_ids": ids, "token_type_ids": types, "example_index": i}
            if ex.label is not None:
                feat["labels"] = self.labels.index(ex.label)
            features.append(feat)
        return features

    def predict(self, examples, features, outputs) -> list[int]:
        return [int(np.argmax(o["logits"])) for o in outputs]

    def score(self, examples, predictions) -> dict[str, float]:
        gold = [self.labels.index(ex.label) for ex in examples]
        return {
            "accuracy": metrics.accuracy(predictions, gold),
            "f1_macro": metrics.macro_f1(predictions, gold),
        }

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        rows = [
            # a labelled split's gold label beside the prediction: the rows to read for what went wrong
            json.dumps({"line": ex.line, "label": self.labels[p], **gold_field(ex.label)}, ensure_ascii=False)
            for ex, p in zip(examples, predictions, strict=True)
        ]
        return atomic_write(folder / f"{split}_predictions.jsonl", "\n".join(rows) + "\n")


# --------------------------------------------------------------------------- token classification
@dataclass
class TokenExample:
    tokens: list[str]
    tags: list[str] | None
    line: int
    text: str | None = None  # the text the words were split from, where they came as one (predict's input)


class TokenClassificationTask(_OwnFilesTask):
    name = "token-classification"
    head = "token_classification"

    def __init__(
        self, labels: Sequence[str] = (), tokens_column: str = "tokens", tags_column: str = "tags"
    ) -> None:
        self.labels = tuple(labels)
        self.tokens_column, self.tags_column = tokens_column, tags_column

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        """Entity F1 for BIO tags; token accuracy for tags that name no spans (POS, IO tags), whose
        entity F1 would be 0 whatever the model does."""
        return "f1" if metrics.has_spans(self.labels) else "accuracy"

    def split_file(self, data: Path, split: str) -> Path | None:
        """As for every own-files task, and CoNLL files (SPLIT.conll, SPLIT.txt) in a folder."""
        found = super().split_file(data, split)
        if found is None and data.is_dir():
            found = next((data / f"{split}{e}" for e in CONLL if (data / f"{split}{e}").is_file()), None)
        return found

    def read(self, path: Path, split: str) -> list[TokenExample]:
        examples: list[TokenExample] = []
        unseen = collections.Counter[str]()
        conll = path.suffix.lower() in CONLL
        rows = read_conll(path, self.tokens_column, self.tags_column) if conll else read_rows(path)
        test = split.startswith("test")
        wanted = {"--tokens-column": self.tokens_column}
        if not test:
            wanted["--tags-column"] = self.tags_column
        for line, row in rows:
            # an unlabelled row without the tokens column may give a text, its words between spaces, as
            # `albert predict` reads it
            text = test and self.tokens_column not in row and "text" in row
            if not examples:  # the first row: a CSV's header is every row's keys, checked once
                _check_header(path, row, {} if text else wanted)
            tokens = (
                _text(row, "text", path, line).split()
                if text
                else _words(row, self.tokens_column, path, line)
            )
            if row.get(self.tags_column) in (None, "", []):
                if not test:
                    raise _missing(row, self.tags_column, path, line)
                tags = None
            else:
                tags = [_nfc(t) for t in _words(row, self.tags_column, path, line)]
                if len(tags) != len(tokens):
                    raise InputError(path, f"{len(tokens)} tokens but {len(tags)} tags", line=line)
                unseen.update(t for t in tags if self.labels and t not in self.labels)
            examples.append(TokenExample(tokens, tags, line))
        if unseen:  # a type the model never learned: scored as missed, as conlleval and seqeval count it
            logger.warning(
                "%s: tags not seen in training (%s): the model cannot predict them, so they count as misses",
                path, ", ".join(f"{t} x{n}" for t, n in unseen.most_common(5)),
            )  # fmt: skip
        return examples

    def fit_labels(self, train_examples: Sequence[TokenExample]) -> None:
        found = label_order({t for ex in train_examples for t in ex.tags or []})
        self.labels = tuple(found)
        if not metrics.has_spans(self.labels):
            logger.warning(
                "the tags (%s) have no B- or I- prefix (nor BIOES's E-, S- or BILOU's L-, U-), so they name no "
                "entity spans: the best checkpoint is chosen by token accuracy, and no entity precision, recall "
                "or F1 is reported",
                ", ".join(self.labels[:8]) + (", ..." if len(self.labels) > 8 else ""),
            )

    def featurize(self, examples, tokenizer: TokenizerLike, max_seq_length: int, training: bool = False):
        features: list[Feature] = []
        room, windowed = max_seq_length - 2, 0  # pieces between [CLS] and [SEP]
        for i, ex in enumerate(examples):
            pieces = [
                (tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)) or [tokenizer.unk_token_id])[:room]
                for word in ex.tokens
            ]  # a word longer than a whole window keeps its first pieces
            # an unseen dev tag has no id: no loss, and it counts as a miss when scored
            tags = None if ex.tags is None else [self.labels.index(t) if t in self.labels else IGNORE_INDEX
                                                 for t in ex.tags]  # fmt: skip
            windows = word_windows([len(p) for p in pieces], room)
            windowed += len(windows) > 1
            owner = owners(windows, len(pieces))
            for k, (start, end) in enumerate(windows):
                # each word trained in the one window it is predicted from (`owners`), not in every one
                own = (
                    None
                    if tags is None
                    else [t if owner[w] == k else IGNORE_INDEX for w, t in enumerate(tags)]
                )
                features.append(window_feature(tokenizer, i, pieces, own, start, end))
        if windowed:
            logger.info(
                "%d sentences longer than max_seq_length %d are read in overlapping windows of words",
                windowed, max_seq_length,
            )  # fmt: skip
        return features

    def predict(self, examples, features, outputs) -> list[list[str]]:
        """Each word's tag, from the window it is read from (`owners`)."""
        return [tags for tags, _ in self.tags_and_probabilities(examples, features, outputs)]

    def tags_and_probabilities(self, examples, features, outputs) -> list[tuple[list[str], list[float]]]:
        """Each example's words' tags and each tag's probability (the softmax over the tags at the word's
        first piece), from the window the word is read from (`owners`)."""
        # per example: (first word, its words' (tag, probability)) of each window
        windows: list[list[tuple[int, list[tuple[str, float]]]]] = [[] for _ in examples]
        for f, o in zip(features, outputs, strict=True):
            p = softmax(np.asarray(o["logits"], dtype=np.float64)[f["word_starts"]], axis=-1)  # (words, tags)
            tagged = [(self.labels[int(i)], float(p[w, i])) for w, i in enumerate(p.argmax(-1))]
            windows[f["example_index"]].append((f.get("word_offset", 0), tagged))
        out = []
        for ex, read in zip(examples, windows, strict=True):
            owner = owners([(start, start + len(tagged)) for start, tagged in read], len(ex.tokens))
            chosen = [read[k][1][w - read[k][0]] for w, k in enumerate(owner)]
            out.append(([t for t, _ in chosen], [q for _, q in chosen]))
        return out

    def score(self, examples, predictions) -> dict[str, float]:
        gold = [ex.tags or [] for ex in examples]
        return metrics.token_classification_metrics(predictions, gold, spans=metrics.has_spans(self.labels))

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        rows = [
            json.dumps(
                {"line": ex.line, "tokens": ex.tokens, "tags": p, **gold_field(ex.tags)}, ensure_ascii=False
            )
            for ex, p in zip(examples, predictions, strict=True)
        ]
        return atomic_write(folder / f"{split}_predictions.jsonl", "\n".join(rows) + "\n")


def gold_field(label: Any) -> dict[str, Any]:
    """A predictions row's `gold` field: the example's label (tags, score), where its split had one."""
    return {} if label is None else {"gold": label}


def _words(row: dict[str, Any], name: str, path: Path, line: int) -> list[str]:
    """The words of column `name` (`words_of`: a list, a cell's JSON list or its words between spaces); a
    null, an empty list or a blank cell is refused as missing, with the file, line and column."""
    words = words_of(row.get(name), name, path, line)
    if not words:
        raise _missing(row, name, path, line)
    return words
