"""The lines `albert tokenizer train` feeds SentencePiece: each input's lines after `preprocess_text`,
lines too long for SentencePiece cut at sentence ends, the bytes read shown on a bar.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.data.tokenizer import preprocess_text
from albert_lm.data.unspaced import unwrap_lines
from albert_lm.progress import progress_bar


@dataclass(frozen=True)
class Rule:
    """How the inputs are read and normalized for training (`train_tokenizer`'s arguments)."""

    do_lower_case: bool
    keep_accents: bool
    strip_gutenberg: bool = False
    skip_invalid_utf8: bool = False
    max_line_bytes: int = 1 << 20
    text_column: str = "text"
    language: str | None = None


# SentencePiece's sentence limit (its default is 4192 bytes, and longer lines are skipped without a word).
MAX_SENTENCE_BYTES = 16384
_SENTENCE_END = re.compile(r"((?<=[.!?;:])\s+|(?<=[。！？．；])\s*)")


def fit_line(text: str, limit: int = MAX_SENTENCE_BYTES) -> list[str]:
    """`text` as lines of at most `limit` UTF-8 bytes: whole sentences joined while they fit (with the
    space between them, or none after a CJK sentence end), a sentence still too long cut at spaces, a
    word too long cut at characters. Nothing is lost but the separators where a line is cut."""
    if len(text.encode()) <= limit:
        return [text]
    out: list[str] = []
    current = ""
    parts = _SENTENCE_END.split(text)  # sentences, and between them the separators ("" after a CJK end)
    for k in range(0, len(parts), 2):
        for n, unit in enumerate(_cut(parts[k], limit, " ")):
            sep = "" if n == 0 and k and not parts[k - 1] else " "
            joined = f"{current}{sep}{unit}" if current else unit
            if len(joined.encode()) <= limit:
                current = joined
            else:
                out.append(current)
                current = unit
    return [*out, current] if current else out


def _cut(text: str, limit: int, sep: str) -> list[str]:
    """Pieces of `text` under `limit` bytes: split at `sep`, then at characters."""
    if len(text.encode()) <= limit:
        return [text]
    if sep:
        return [p for word in text.split(sep) if word for p in _cut(word, limit, "")]
    pieces, current = [], ""
    for ch in text:
        if len((current + ch).encode()) > limit:
            pieces.append(current)
            current = ""
        current += ch
    return [*pieces, current]


class Sentences:
    """The inputs' non-empty lines after `preprocess_text`, counted (`lines`) as they are read."""

    def __init__(self, inputs: Sequence[str | os.PathLike], rule: Rule) -> None:
        self.inputs, self.rule = inputs, rule
        self.lines = 0
        self.split = 0  # lines over the limit, split
        self.without_text = 0  # JSON Lines or Parquet records whose text is null or empty, left out
        self.error: BaseException | None = None  # what stopped the reading (SentencePiece hides it)
        self.stop = threading.Event()  # set when the command is interrupted: the reading ends
        self.finished = False  # the reading has ended (SentencePiece then trains in C++ alone)
        self.total_bytes = sum(os.path.getsize(p) for p in inputs)

    def __iter__(self) -> Iterator[str]:
        # the bytes read, on a bar (tqdm's on a terminal, else a log line every 30 s), while SentencePiece
        # pulls the lines: on a large text the reading alone takes minutes
        bar = progress_bar(total=self.total_bytes, unit="B", unit_scale=True, desc="tokenizer: reading")
        try:
            yield from self._lines(bar)
        except BaseException as e:
            self.error = e
            raise
        finally:
            self.finished = True
            bar.close()

    def halt(self) -> bool:
        """Stop the reading at its next line (called from another thread); whether it was still going."""
        self.stop.set()
        return not self.finished

    def left_out(self) -> str:
        """The records left out for want of text, in words for the summary ("" where none was)."""
        n = self.without_text
        return f" ({n} record{'s' if n != 1 else ''} with a null or empty text field left out)" if n else ""

    def _lines(self, bar: Any) -> Iterator[str]:
        from albert_lm.data.corpus import ReadStats, iter_text_lines

        r = self.rule
        for path in self.inputs:
            stats = ReadStats()
            lines = iter_text_lines(
                Path(path), r.strip_gutenberg, r.skip_invalid_utf8, r.max_line_bytes, r.text_column, stats
            )
            for line in unwrap_lines(_counted(lines, bar, os.path.getsize(path))):
                text = preprocess_text(line, lower=r.do_lower_case, keep_accents=r.keep_accents)
                if not text:
                    continue
                parts = fit_line(text)
                self.split += len(parts) > 1
                for part in parts:
                    self.lines += 1
                    yield part
                if self.stop.is_set():
                    raise KeyboardInterrupt
            self.without_text += stats.without_text  # the file read to its end: its count is whole


def _counted(lines: Iterator[str], bar: Any, size: int) -> Iterator[str]:
    """`lines` of a file of `size` bytes, their characters counted onto `bar` as bytes every few thousand
    lines (at most `size` while it is read: a compressed file's text is larger than the file), and `size`
    in all once it has been read. Characters, not each line encoded again: a bar needs no exact count."""
    shown = pending = 0
    for n, line in enumerate(lines, start=1):
        pending += len(line) + 1
        if n % 4096 == 0:
            step = min(pending, size - shown)
            bar.update(step)
            shown, pending = shown + step, 0
        yield line
    bar.update(size - shown)
