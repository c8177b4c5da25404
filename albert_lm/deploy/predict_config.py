"""Settings of `albert predict`, apart from the code that runs them: the command line builds its options
from this dataclass without importing torch (`albert --help` stays fast). `Columns`: where each field of
a task's input is in a row, from the options given and the model's finetune_config.json."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from albert_lm.runtime.exits import EXIT_COUNTS, ExitSettings
from albert_lm.settings import Precision, check_fields, check_ranges, device_name
from albert_lm.values import documented


@documented
@dataclass
class PredictConfig(ExitSettings):
    """Settings of `albert predict`."""

    model: str
    """fine-tuned model folder (e.g. a finetune run's best/), or hub id org/name[@rev]"""
    input: str | None = None
    """input file (plain lines, .csv, .tsv or .jsonl), or - for stdin; or give --text"""
    text: list[str] | None = None
    """a text to predict on (repeatable), instead of --input; pairs, questions and options come from
    --input's columns"""
    output: str = "-"
    """output JSON Lines file (.jsonl; a .csv, .tsv or .json name is refused), or - for stdout"""
    format: Literal["auto", "lines", "csv", "tsv", "jsonl"] = "auto"
    """input format (auto: from the file's extension; plain lines otherwise and for stdin)"""
    text_column: str | None = None
    """column of the text (classification, regression, token classification; default: the one the model was
    fine-tuned on, as its finetune_config.json records it, else text)"""
    text_pair_column: str | None = None
    """column of the second text of a pair, used where present (default: the model's, else text_pair)"""
    tokens_column: str | None = None
    """token classification: column of a token list, else the text column split on whitespace (default:
    the model's, else tokens)"""
    question_column: str = "question"
    """question answering and multiple choice: column of the question"""
    context_column: str = "context"
    """question answering and multiple choice: column of the context (passage; a multiple-choice row
    without it is read from `article`, as in RACE's files)"""
    options_column: str = "options"
    """multiple choice: column of the options (a JSON list, or a list in JSON Lines)"""
    batch_size: int = 32
    """rows per batch (batches hold rows of similar length)"""
    max_seq_length: int | None = None
    """tokens per feature (default: what the model was fine-tuned with, else 512 capped by its positions)"""
    precision: Precision = "auto"
    """auto, fp32, bf16 (autocast) or fp16 (CUDA)"""
    device: str = "auto"
    """where to run"""
    keep_columns: str | None = None
    """copy these input columns (comma-separated, e.g. id,source) into each output line, as they are"""
    skip_bad: bool = False
    """report bad rows on stderr and leave them out, instead of stopping at the first"""
    int8: bool = False
    """run the encoder's linear layers in int8 (CPU; `albert_lm.quantize_int8`)"""

    def __post_init__(self) -> None:
        check_fields(self, "predict")
        device_name(self.device)
        check_ranges(
            self,
            "predict",
            at_least_one=("batch_size",),
            batch=("batch_size",),
            length=("max_seq_length",),
            count=EXIT_COUNTS,
        )
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise ValueError(f"predict: max_seq_length {self.max_seq_length}: expected at least 8")


# The columns a model fine-tuned on your own data records in its finetune_config.json, by task: predict's
# defaults for that model (an option given wins).
TEXT_COLUMNS = ("text", "text_pair")
RECORDED_COLUMNS = {
    "classification": TEXT_COLUMNS,
    "regression": TEXT_COLUMNS,
    "token-classification": ("tokens",),
}
COLUMN_FIELDS = ("text", "text_pair", "tokens", "question", "context", "options")


@dataclass(frozen=True)
class Columns:
    """Where each field of a task's input is in a row: the column given (PredictConfig's *_column
    options, Predictor's arguments), else the one the model was fine-tuned on (RECORDED_COLUMNS), else
    the standard name; for a GLUE model, its task's own column (sentence1, ...) where the standard one
    is absent from a row (`alternates`)."""

    text: str = "text"
    text_pair: str | None = "text_pair"  # None: single texts only (fine-tuned without a second text)
    tokens: str = "tokens"
    question: str = "question"
    context: str = "context"
    options: str = "options"
    recorded: frozenset[str] = frozenset()  # the fields whose column the model's finetune_config.json named
    api: bool = False  # errors name Predictor's arguments (text_column=...), not the command's options
    alternates: tuple[tuple[str, str], ...] = ()  # (field, column read where the field's own is absent)

    @classmethod
    def of(cls, cfg: PredictConfig, saved: Mapping[str, Any], task: Any = None) -> Columns:
        given = {name: getattr(cfg, f"{name}_column") for name in COLUMN_FIELDS}
        return cls.chosen(given, saved, task=task)

    @classmethod
    def chosen(
        cls, given: Mapping[str, str | None], saved: Mapping[str, Any], api: bool = False, task: Any = None
    ) -> Columns:
        """The columns `given` (None: not given) over the ones `saved` (finetune_config.json) records, and
        for a GLUE `task` its own columns as the alternates of the standard ones not given."""
        values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        recorded = set()
        for name in RECORDED_COLUMNS.get(str(saved.get("task")), ()):
            value = saved.get(f"{name}_column")
            if name not in values and f"{name}_column" in saved and (value or name == "text_pair"):
                values[name] = value or None  # text_pair null or "": fine-tuned on single texts
                recorded.add(name)
        if values.get("text_pair") == "":
            values["text_pair"] = None
        spec = getattr(task, "spec", None)  # a GLUE task: the columns of its files (GlueSpec)
        glue = (spec.text_a, spec.text_b) if spec is not None else (None, None)
        alternates = tuple(
            (name, column)
            for name, column in zip(TEXT_COLUMNS, glue, strict=True)
            if column and name not in values
        )
        return cls(**values, recorded=frozenset(recorded), api=api, alternates=alternates)

    def alternate(self, name: str) -> str | None:
        """The column read for field `name` where its own is absent from a row (a GLUE task's), or None."""
        return dict(self.alternates).get(name)

    def hint(self, name: str) -> str:
        """Where the column of field `name` came from (the model's) and how to read another."""
        column = getattr(self, name)
        came = f"the model was fine-tuned on column {column!r}; " if name in self.recorded else ""
        other = (
            f"Predictor(..., {name}_column=NAME)" if self.api else f"--{name.replace('_', '-')}-column NAME"
        )
        alternate = self.alternate(name)
        also = f", and the GLUE task's own column {alternate!r} is read where present" if alternate else ""
        return f"{came}{other} reads another{also}"
