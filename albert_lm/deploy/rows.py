"""A row of `albert predict`'s input (or of `Predictor.predict`) as its task's example: the columns each
task reads (a text, a pair, a token list, a question and its context, options), found where the model
was fine-tuned to find them, and a bad row named by its line, or left out and reported (--skip-bad)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from albert_lm.deploy.inputs import Fields, all_left_out
from albert_lm.deploy.predict_config import Columns
from albert_lm.files import InputError
from albert_lm.tasks import Task
from albert_lm.tasks.glue import GlueExample, GlueTask
from albert_lm.tasks.race import LETTERS, RaceExample
from albert_lm.tasks.squad import SquadExample
from albert_lm.tasks.text_classification import TextExample, TokenExample

logger = logging.getLogger(__name__)

# What a model of these heads reads in a row, where --text gives one text.
READS = {
    "question_answering": "a question and a context",
    "multiple_choice": "a question, a context and options",
}


def _column(fields: Fields, row: dict[str, Any], columns: Columns, name: str, line: int) -> str:
    """The column of field `name` (text, text_pair, ...). A row without it is refused naming the row's
    columns, where the column's name came from and the option (Predictor: argument) that reads another."""
    column = getattr(columns, name)
    if column not in row and {"data", "version"} <= set(row):  # a SQuAD file given whole
        raise InputError(
            fields.name,
            "a SQuAD dataset file (version, data); predict reads one question a row, as JSON Lines or CSV "
            '({"question": ..., "context": ...}); `albert evaluate --model` scores a model on a SQuAD file',
            line=line,
        )
    alternate = columns.alternate(name)  # a GLUE model: its task's own column (sentence1, ...)
    if column not in row and alternate is not None and alternate in row:
        return alternate
    if column not in row:
        way = columns.hint(name)
        if name == "text_pair":
            way = f"the model reads pairs of texts, and this row has no second; {way}{older_single(columns)}"
        raise fields.absent(row, column, line, way)
    return column


def pair_column(task: Task) -> str | None:
    """The column of the second text of the pairs a model was fine-tuned on, None for a model of single
    texts: a task on your own files records it (its `text_pair_column`, as `predict.model_task` reads it
    from finetune_config.json), a GLUE task has its files' second sentence (sentence2, question2, ...)."""
    if isinstance(task, GlueTask):
        return task.spec.text_b
    column = getattr(task, "text_pair_column", None)
    return column if isinstance(column, str) and column else None


def reads_pairs(task: Task, columns: Columns) -> bool:
    """Whether each row needs its second text: the model was fine-tuned on pairs (or scores pairs, STS-B),
    and no Predictor(..., text_pair_column="") asked for single texts."""
    return task.score_range is not None or (pair_column(task) is not None and columns.text_pair is not None)


def older_single(columns: Columns) -> str:
    """Where a model's recorded second column is the default, the way out for a model fine-tuned on single
    texts by an albert-lm that recorded the default for those too (before 2026-11-30)."""
    if columns.text_pair != "text_pair" or "text_pair" not in columns.recorded:
        return ""
    return (
        ' (a model fine-tuned on single texts by an older albert-lm records "text_pair" too: set '
        '"text_pair_column": null in its finetune_config.json)'
    )


def pairs_wanted(task: Task, columns: Columns, given: str) -> str:
    """The refusal of single texts (`given`: --text, plain lines) for a model that reads pairs, saying
    where the second text goes."""
    both = f"{columns.text!r} and {columns.text_pair!r}"
    return (
        f"{given} gives single texts, and this {task.name} model reads pairs of texts: give each pair as a "
        f"row of an --input file (CSV, TSV or JSON Lines) with columns {both}{older_single(columns)}"
    )


def _example(task: Task, row: dict[str, Any], line: int, fields: Fields, columns: Columns) -> Any:
    """The task's example of one row."""

    def text(name: str) -> str:
        return fields.text(row, _column(fields, row, columns, name, line), line)

    if task.head == "sequence_classification":
        first, pair = text("text"), None
        if task.score_range is not None:  # a similarity on a fixed scale (STS-B): one text has no score
            pair = text("text_pair")
        elif reads_pairs(task, columns):  # a row without the second column is refused, not read alone
            column = _column(fields, row, columns, "text_pair", line)
            if row[column] is None:  # a CSV row that ends before it, or a JSON null
                raise InputError(
                    fields.name,
                    f"no value in column {column!r}: the model reads pairs of texts, and this row has no second",
                    line=line,
                )
            pair = fields.optional(row, column, line)
        elif columns.text_pair is not None:
            pair = fields.optional(row, columns.text_pair, line)
        if isinstance(task, GlueTask):
            return GlueExample(str(line), first, pair, None, line)
        return TextExample(first, pair, None, line)
    if task.head == "token_classification":
        if columns.tokens in row:
            cell = row[columns.tokens]  # a cell of words apart by spaces: their offsets in it (entities)
            said = cell if isinstance(cell, str) and not cell.lstrip().startswith("[") else None
            return TokenExample(fields.words(row, columns.tokens, line), None, line, said)
        # neither the model's own token column nor a text: the message names the token column
        missing = "tokens" in columns.recorded and columns.text not in row
        said = text("tokens" if missing else "text")
        return TokenExample(said.split(), None, line, said)
    if task.head == "question_answering":
        return SquadExample(str(line), text("question"), text("context"), [])
    options = fields.strings(row, _column(fields, row, columns, "options", line), line)
    if len(options) > len(LETTERS):
        raise InputError(fields.name, f"{len(options)} options: at most {len(LETTERS)}", line)
    if columns.context == "context" and "context" not in row and "article" in row:
        # RACE's own rows, as fine-tuning reads them
        columns = dataclasses.replace(columns, context="article")
    question, context = text("question"), text("context")
    return RaceExample(str(line), context, question, options, None, "")


@dataclass
class _Examples:
    examples: list[Any] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # messages of rows left out


def examples_of(
    task: Task,
    rows: Sequence[tuple[int, dict[str, Any]]],
    fields: Fields,
    columns: Columns = Columns(),  # noqa: B008 - frozen: one shared default is safe
    keep: Sequence[str] = (),
    skip_bad: bool = False,
) -> _Examples:
    """The task's example of each row, with its kept columns; a bad row stops here, or is left out and
    reported under `skip_bad`."""
    out = _Examples()
    n_options: int | None = None
    for line, row in rows:
        try:
            ex = _example(task, row, line, fields, columns)
            if isinstance(ex, RaceExample):
                if n_options is not None and len(ex.options) != n_options:
                    raise InputError(
                        fields.name, f"{len(ex.options)} options; the rows before have {n_options}", line
                    )
                n_options = len(ex.options)
            kept = fields.kept(row, keep, line)
        except InputError as e:
            if not skip_bad:
                raise
            out.skipped.append(str(e))
            logger.warning("skipped: %s", e)
            continue
        out.examples.append(ex)
        out.lines.append(line)
        out.kept.append(kept)
    if not out.examples and out.skipped:
        raise all_left_out(fields.name, out.skipped)
    return out


__all__ = ["READS", "examples_of", "pair_column", "pairs_wanted", "reads_pairs"]
