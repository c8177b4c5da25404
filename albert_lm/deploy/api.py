"""`albert_lm.Predictor`: `predict`, `fill-mask` and `embed` in memory, the model loaded once.

    from albert_lm import Predictor

    clf = Predictor("runs/sst2/best")
    clf.predict(["A fine film.", "Dull."])       # [{"line": 1, "label": "positive", "probabilities": {...}}, ...]
    Predictor("runs/mine/best").predict([{"review": "A fine film.", "id": 7}])   # rows keyed as fine-tuned
    Predictor("runs/base").fill_mask(["She opened the [MASK]."], top_k=5)
    Predictor("runs/base").embed(["a text", "another"], pooling="mean", normalize=True)   # (2, H) float32

The same code as the commands runs underneath (`deploy.predict.predict_examples`, `deploy.fill_mask.
MaskFiller`, `deploy.embed.Embedder`), so each method gives what its command writes for the same texts
in a plain-text file: the same dicts, with `line` the 1-based position in the list. Each head is loaded
on first use: a fine-tuned classifier predicts and embeds, a pretraining checkpoint fills masks and
embeds; asking a folder for what it has no head for is the command's error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.deploy.embed import Embedder
from albert_lm.deploy.fill_mask import MaskFiller
from albert_lm.deploy.inputs import Fields
from albert_lm.deploy.loading import model_folder
from albert_lm.deploy.predict import TaskModel, load_task_model, model_task, predict_examples
from albert_lm.deploy.predict_config import COLUMN_FIELDS, Columns
from albert_lm.deploy.rows import READS, examples_of, reads_pairs
from albert_lm.kernels.device import pick_device
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import EXIT_FILE, ExitRule, check_rule, no_heads
from albert_lm.runtime.fits import sequence_length
from albert_lm.settings import PRECISIONS, device_name
from albert_lm.tasks import Task

PredictInput = str | tuple[str, str] | Mapping[str, Any]


class Predictor:
    """A model folder or hub id in memory, for `predict`, `fill_mask` and `embed` on lists of texts.

    `device` ("auto", "cpu", "cuda", "cuda:1", ...), `precision` ("auto", "fp32", "bf16", "fp16" on CUDA),
    `max_seq_length` and `batch_size` mean what the commands' options of the same names mean;
    `int8` (CPU) quantizes the fine-tuned model of `predict` as `albert predict --int8` does.
    `patience`, `exit_confidence`, `depth`: early exit in `predict` for a model fine-tuned with
    --exit-heads, as the options of `albert predict` (each row then says the layers it used, "depth");
    `depth` also runs `fill_mask` and `embed` on the first `depth` layer applications.
    `text_column`, `text_pair_column`, `tokens_column`, `question_column`, `context_column`,
    `options_column`: the keys `predict` reads in a row dict, and puts a text or a pair under (default: the
    columns a `classification` / `token-classification` model was fine-tuned on, as its
    finetune_config.json records them, else text, text_pair, tokens, question, context, options).
    """

    def __init__(
        self,
        model: str | os.PathLike,
        device: str = "auto",
        precision: str = "auto",
        *,
        max_seq_length: int | None = None,
        batch_size: int = 32,
        int8: bool = False,
        patience: int | None = None,
        exit_confidence: float | None = None,
        depth: int | None = None,
        text_column: str | None = None,
        text_pair_column: str | None = None,
        tokens_column: str | None = None,
        question_column: str | None = None,
        context_column: str | None = None,
        options_column: str | None = None,
    ) -> None:
        _check_arguments(model, batch_size, max_seq_length, patience, depth, int8, precision)
        try:
            device = device_name(device)
            # a device this machine lacks: refused here, not at the first call
            kind = pick_device(device).type
        except ValueError as e:  # argparse's type error: a plain ValueError for the API, in its words
            raise ValueError(str(e).replace("--device", "device")) from None
        if precision == "fp16" and kind != "cuda":
            raise ValueError(f"precision fp16 needs a CUDA device, not {kind}")
        self.folder = model_folder(str(model))
        config = AlbertConfig.from_pretrained(self.folder)
        if max_seq_length is not None:  # past the model's positions: refused here, in the API's words
            sequence_length(max_seq_length, max_seq_length, config, self.folder, option="max_seq_length")
        self.device, self.precision, self.int8 = device, precision, int8
        self.max_seq_length, self.batch_size = max_seq_length, batch_size
        self.exit_rule: dict[str, Any] = {"patience": patience, "confidence": exit_confidence, "depth": depth}
        _check_exit_rule(patience, exit_confidence, depth, config, self.folder)
        self.depth = depth  # fill_mask and embed: the first `depth` layer applications
        given = (
            text_column,
            text_pair_column,
            tokens_column,
            question_column,
            context_column,
            options_column,
        )
        self.columns = _given_columns(dict(zip(COLUMN_FIELDS, given, strict=True)))
        self._task: TaskModel | None = None
        self._filler: MaskFiller | None = None
        self._embedder: Embedder | None = None

    def __repr__(self) -> str:
        rule = "".join(f", {k}={v!r}" for k, v in self.exit_rule.items() if v is not None)
        rule = rule.replace("confidence=", "exit_confidence=")
        return f"Predictor({str(self.folder)!r}, device={self.device!r}, precision={self.precision!r}{rule})"

    def predict(self, inputs: Sequence[PredictInput]) -> list[dict[str, Any]]:
        """One dict per input, as `albert predict` writes it: a text, a (text, text_pair) pair (question,
        context for question answering; a token classifier's list of words), or a row dict keyed as
        predict's input columns (the columns given to the Predictor, else the ones the model was fine-tuned
        on, else text, text_pair, tokens, question, context, options)."""
        if self._task is None:
            self._task = load_task_model(
                self.folder,
                self.device,
                self.precision,
                self.int8,
                self.max_seq_length,
                self.batch_size,
                self.exit_rule,
            )
        tm = self._task
        columns = Columns.chosen(self.columns, tm.saved, api=True, task=tm.task)
        listed = enumerate(_listed(inputs, "inputs"), start=1)
        rows = [(n, _row(item, tm.task, n, columns)) for n, item in listed]
        got = examples_of(tm.task, rows, Fields("inputs"), columns)
        return predict_examples(tm, got.examples, got.lines)

    def fill_mask(self, texts: Sequence[str], top_k: int = 5) -> list[dict[str, Any]]:
        """One dict per text, as `albert fill-mask` writes it: the top-k candidates of each [MASK]."""
        _expect_int("top_k", top_k)
        if self._filler is None:
            self._filler = MaskFiller(
                self.folder, self.device, self.precision, self.max_seq_length, self.batch_size, self.depth
            )
        return self._filler.fill(_texts(texts), top_k)

    def embed(self, texts: Sequence[str], pooling: str = "mean", normalize: bool = False) -> np.ndarray:
        """(len(texts), hidden size) float32, row i the embedding of texts[i], as `albert embed` makes it."""
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize: expected True or False, got {normalize!r}")
        if self._embedder is None:
            self._embedder = Embedder(
                self.folder, self.device, self.precision, self.max_seq_length, self.batch_size, self.depth
            )
        return self._embedder.embed(_texts(texts), pooling, normalize)


def _check_arguments(
    model: Any,
    batch_size: Any,
    max_seq_length: Any,
    patience: Any,
    depth: Any,
    int8: Any,
    precision: Any,
) -> None:
    """Predictor's arguments, each of its type and range, checked when it is made (not at the first call
    that loads the model)."""
    if not isinstance(model, str | os.PathLike):
        raise TypeError(f"model: expected a model folder or hub id (a str or a path), got {model!r}")
    if not os.fspath(model):
        raise ValueError("model: empty; expected a model folder or hub id")
    _expect_int("batch_size", batch_size)
    for name, value in (("max_seq_length", max_seq_length), ("patience", patience), ("depth", depth)):
        _expect_int(name, value, optional=True)
    if not isinstance(int8, bool):
        raise TypeError(f"int8: expected True or False, got {int8!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size}: expected at least 1")
    if max_seq_length is not None and max_seq_length < 8:
        raise ValueError(f"max_seq_length {max_seq_length}: expected at least 8")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")


def _check_exit_rule(
    patience: int | None, confidence: float | None, depth: int | None, config: AlbertConfig, folder: Path
) -> None:
    """An exit rule checked against the model when the Predictor is made, not at the first call: its
    values (`ExitRule`), what this model's layers and labels allow, and the exit heads a patience or a
    confidence reads (a depth alone also runs fill_mask and embed, which need none); in the API's words."""
    try:
        rule = ExitRule(patience, confidence, depth)
        if rule.given:
            check_rule(rule, config.num_hidden_layers, config.num_labels)
        if rule.patience or rule.confidence is not None:  # they read the heads of a sequence classifier
            task, _ = model_task(folder)
            if task.head != "sequence_classification":
                raise ValueError(
                    f"early exit: for classification and regression models, not a {task.name} model"
                )
            if not (folder / EXIT_FILE).is_file():
                raise ValueError(no_heads(folder))
    except ValueError as e:
        words = {"--patience": "patience", "--exit-confidence": "exit_confidence", "--depth": "depth",
                 "--exit-heads": "--exit-heads (finetune_rows: exit_heads=True)"}  # fmt: skip
        message = str(e)
        for option, argument in words.items():
            message = message.replace(option, argument)
        raise ValueError(message) from None


def _expect_int(name: str, value: Any, optional: bool = False) -> None:
    """An argument that is a count: an int (not a bool, a float or a string), or None where `optional`."""
    if (value is None and optional) or (isinstance(value, int) and not isinstance(value, bool)):
        return
    raise TypeError(f"{name}: expected an integer{' or None' if optional else ''}, got {value!r}")


def _listed(items: Any, what: str) -> list[Any]:
    """A list of `items`; a lone string is refused (it would be read as a list of characters)."""
    if isinstance(items, str):
        shown = items if len(items) <= 30 else items[:27] + "..."
        raise TypeError(f"{what}: expected a list, got one text: pass [{shown!r}] (one result per item)")
    if isinstance(items, bytes) or not isinstance(items, Sequence):
        raise TypeError(f"{what}: expected a list, got {type(items).__name__}")
    return list(items)


def _texts(texts: Any) -> list[str]:
    listed = _listed(texts, "texts")
    for n, text in enumerate(listed, start=1):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts:{n}: expected a non-empty text, got {text!r}")
    return listed


def _given_columns(given: dict[str, Any]) -> dict[str, str | None]:
    """The column arguments given (None: the model's, else the standard name), each a name if given."""
    for name, value in given.items():
        if value is not None and (not isinstance(value, str) or (not value and name != "text_pair")):
            raise ValueError(f"{name}_column {value!r}: expected a column name")
    return given


def _row(item: Any, task: Task, n: int, columns: Columns) -> dict[str, Any]:
    """A predict input as the row the command would read: a text, a pair, or the row itself."""
    head = task.head
    if isinstance(item, str) and head in READS:  # a bare (question, context) pair is read as two texts
        shape = "(question, context) pairs" if head == "question_answering" else "row dicts"
        raise TypeError(
            f"inputs:{n}: a text alone, and this model reads {READS[head]}: give a list of {shape}, e.g. "
            f"predict([{'(question, context)' if head == 'question_answering' else 'row'}])"
        )
    if isinstance(item, str) and head == "sequence_classification" and reads_pairs(task, columns):
        raise ValueError(
            f"inputs:{n}: a text alone, and this {task.name} model reads pairs of texts: give (text, "
            "text_pair) pairs, e.g. predict([(text, text_pair)])"
        )
    if isinstance(item, str):
        return {columns.text: item}
    if head == "token_classification" and isinstance(item, tuple | list):
        return {columns.tokens: list(item)}  # a token classifier's input is its list of words
    if isinstance(item, tuple | list) and len(item) == 2:
        if head == "question_answering":
            return {columns.question: item[0], columns.context: item[1]}
        if columns.text_pair is None:
            raise ValueError(
                f"inputs:{n}: a pair, but this model reads single texts (fine-tuned without a second text "
                "column, or text_pair_column=''): give a text"
            )
        return {columns.text: item[0], columns.text_pair: item[1]}
    if isinstance(item, Mapping):
        return dict(item)
    what = "a list of words" if head == "token_classification" else "a (text, text_pair) pair"
    raise TypeError(f"inputs:{n}: expected a text, {what} or a row dict, got {item!r}")


__all__ = ["Predictor"]
