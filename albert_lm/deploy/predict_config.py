"""Settings of `albert predict`, apart from the code that runs them: the command line builds its options
from this dataclass without importing torch (`albert --help` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from albert_lm.runtime.exits import EXIT_COUNTS, ExitSettings
from albert_lm.settings import Precision, check_fields, check_ranges, device_name


@dataclass
class PredictConfig(ExitSettings):
    """Settings of `albert predict`."""

    model: str
    """fine-tuned model folder (e.g. a finetune run's best/), or hub id org/name[@rev]"""
    input: str
    """input file (plain lines, .csv, .tsv or .jsonl), or - for stdin"""
    output: str = "-"
    """output JSON Lines file, or - for stdout"""
    format: Literal["auto", "lines", "csv", "tsv", "jsonl"] = "auto"
    """input format (auto: from the file's extension; plain lines otherwise and for stdin)"""
    text_column: str = "text"
    """column of the text (classification, token classification)"""
    text_pair_column: str = "text_pair"
    """column of the second text of a pair (used where present)"""
    tokens_column: str = "tokens"
    """token classification: column of a token list (else the text column, split on whitespace)"""
    question_column: str = "question"
    """question answering and multiple choice: column of the question"""
    context_column: str = "context"
    """question answering and multiple choice: column of the context (passage, article)"""
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
