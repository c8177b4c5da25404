"""Settings of `albert fill-mask` and `albert embed`, apart from the code that runs them: the command
line builds their options from these dataclasses without importing torch (`albert --help` stays fast).
The options they share with `albert predict` (model, input, output, format, text column, kept columns,
batch size, sequence length, precision, device) have its names, choices and defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from albert_lm.settings import Precision, check_fields, check_ranges, device_name


@dataclass
class TextsConfig:
    """What fill-mask and embed read and how they run."""

    model: str
    """model folder (what `albert pretrain` or `albert convert` writes, or a fine-tuned one), or hub id
    org/name[@rev]"""
    input: str | None = None
    """input file (plain lines, .csv, .tsv or .jsonl), or - for stdin; or give --text"""
    text: list[str] | None = None
    """a text to run on (repeatable), instead of --input"""
    output: str = "-"
    """output JSON Lines file (.jsonl; a .csv, .tsv or .json name is refused), or - for stdout"""
    format: Literal["auto", "lines", "csv", "tsv", "jsonl"] = "auto"
    """input format (auto: from the file's extension; plain lines otherwise and for stdin)"""
    text_column: str = "text"
    """column of the text (CSV, TSV, JSON Lines)"""
    keep_columns: str | None = None
    """copy these input columns (comma-separated, e.g. id,source) into each output line, as they are"""
    skip_bad: bool = False
    """report bad rows on stderr and leave them out, instead of stopping at the first"""
    batch_size: int = 32
    """texts per batch (batches hold texts of similar length)"""
    max_seq_length: int | None = None
    """tokens per text (default: what the model was fine-tuned with, else 512 capped by its positions)"""
    precision: Precision = "auto"
    """auto, fp32, bf16 (autocast) or fp16 (CUDA)"""
    device: str = "auto"
    """where to run"""
    depth: int | None = None
    """run the first DEPTH layer applications only (ALBERT's depth is elastic: a prefix of its shared
    layer's applications is a model with the same weights, faster and less exact); default: all"""

    def _check(self, command: str) -> None:
        check_fields(self, command)
        device_name(self.device)
        check_ranges(
            self,
            command,
            at_least_one=("batch_size", "depth"),
            batch=("batch_size",),
            length=("max_seq_length",),
            count=("depth",),
        )
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise ValueError(f"{command}: max_seq_length {self.max_seq_length}: expected at least 8")


@dataclass
class FillMaskConfig(TextsConfig):
    """Settings of `albert fill-mask`."""

    top_k: int = 5
    """candidates per [MASK], most probable first"""

    def __post_init__(self) -> None:
        self._check("fill-mask")
        check_ranges(self, "fill-mask", at_least_one=("top_k",), count=("top_k",))


@dataclass
class EmbedConfig(TextsConfig):
    """Settings of `albert embed`."""

    pooling: Literal["mean", "cls", "pooler"] = "mean"
    """mean: the average of the last layer over the text's tokens (padding left out); cls: the last
    layer at [CLS]; pooler: the model's pooler output (tanh(W h_[CLS]), trained by SOP or fine-tuning)"""
    normalize: bool = False
    """scale each embedding to unit L2 norm (dot product = cosine)"""

    def __post_init__(self) -> None:
        self._check("embed")
