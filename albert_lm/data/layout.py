"""`--format auto`: whether a file holds a sentence per line ("lines", google-research's format for
`create_pretraining_data.py`) or running text ("paragraphs": wrapped prose, or a paragraph per line),
judged from a sample of its first 256 KiB of text (decompressed; for JSON Lines and Parquet, the texts
of its first records, a blank line between them).

"paragraphs" for prose wrapped at a fixed width (most lines that run on to the next end mid-sentence,
nearly all within 80 columns: Project Gutenberg's books) or written a paragraph per line (several
sentences per line), "lines" otherwise. Read as "lines", wrapped prose would become sentence fragments
and paragraph-per-line text one overlong "sentence" per paragraph, without a word.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import blingfire

from albert_lm.data.records import record_text
from albert_lm.data.sources import Block, is_records, reading

logger = logging.getLogger(__name__)

FORMATS = ("lines", "paragraphs")
_SAMPLE_BYTES = 256 << 10  # a few thousand lines: enough to judge, cheap to read for thousands of files
_QUICK_SAMPLE_BYTES = 64 << 10
_SEGMENT_SAMPLE_CHARS = 64 << 10  # Bling Fire's part of the sample (about 10 ms)
_MIN_RUN_ON = 8  # fewer lines that run on to the next: too few to call a file wrapped
# Thresholds measured on the shared books (docs/data.md): the lines that run on to the next line end
# mid-sentence in 46-99% of them in the 253 wrapped English books (a play the lowest), 67-98% in the
# wrapped German, Chinese and Russian ones; in 2-7% when the same books are rewritten a sentence per line.
WRAPPED_MID_SENTENCE = 0.4
WRAP_COLUMNS = 80
WRAPPED_WITHIN_COLUMNS = 0.75  # share of the lines within WRAP_COLUMNS: 0.79-1.0 in the wrapped books
# Sentences per line (Bling Fire): 1.00-1.02 for a sentence per line, 1.39-9.6 for the French and
# Russian books that hold a paragraph per line.
PARAGRAPH_SENTENCES_PER_LINE = 1.3
# The first 64 KiB (title pages, contents, a preface) decide alone above these: run-on lines end
# mid-sentence in at least 69% of them in the wrapped books (a play aside), in at most 19% in the books
# rewritten a sentence per line, of which at most 62% are within 80 columns.
PLAINLY_MID_SENTENCE, PLAINLY_WITHIN = 0.6, 0.9
_SENTENCE_ENDS = tuple(".!?…。！？．")
_CLOSERS = "\"'”’»)]_* \t」』）》】\u3000"  # a sentence may end inside quotes, brackets or markup


@dataclass(frozen=True)
class FormatGuess:
    """The format a file looks like it is in ("lines" or "paragraphs"), and why, in words."""

    format: str
    reason: str


def guess_format(
    path: str | os.PathLike, start: int = 0, end: int | None = None, text_column: str = "text"
) -> FormatGuess:
    """The format of a file from the first 256 KiB of its text [start, end) (decompressed; the texts of
    the first records of JSON Lines and Parquet): "paragraphs" for wrapped prose or a paragraph per line,
    "lines" for a sentence per line (google-research's format). The first 64 KiB decide alone when they
    are plainly wrapped prose (most books: a quarter of the time)."""
    quick = _LineStats(_sample(Path(path), start, end, _QUICK_SAMPLE_BYTES, text_column))
    if quick.wrapped(PLAINLY_MID_SENTENCE, PLAINLY_WITHIN):
        return quick.wrapped_guess()
    stats = _LineStats(_sample(Path(path), start, end, _SAMPLE_BYTES, text_column))
    if not stats.text_lines:
        return FormatGuess("lines", "no text in its first lines")
    if stats.wrapped(WRAPPED_MID_SENTENCE, WRAPPED_WITHIN_COLUMNS):
        return stats.wrapped_guess()
    per_line = _sentences_per_line(stats.text_lines)
    if per_line >= PARAGRAPH_SENTENCES_PER_LINE:
        return FormatGuess("paragraphs", f"a paragraph per line: {per_line:.1f} sentences per line")
    return FormatGuess(
        "lines",
        f"a sentence per line: {per_line:.2f} sentences per line, {stats.mid:.0%} of the lines that run "
        "on end mid-sentence",
    )


class _LineStats:
    """What tells wrapped prose in a sample: how many of the lines that run on to the next (text on both
    sides) end mid-sentence, and how many lines are within WRAP_COLUMNS."""

    def __init__(self, text: str) -> None:
        lines = [line.rstrip() for line in text.split("\n")]
        self.text_lines = [line for line in lines if line]
        run_on = [a for a, b in zip(lines, lines[1:], strict=False) if a and b]
        self.run_on = len(run_on)
        ends = len([a for a in run_on if a.rstrip(_CLOSERS).endswith(_SENTENCE_ENDS)])
        self.mid = 1 - ends / len(run_on) if run_on else 0.0
        long = len([line for line in self.text_lines if len(line) > WRAP_COLUMNS])
        self.within = 1 - long / len(self.text_lines) if self.text_lines else 0.0

    def wrapped(self, least_mid: float, least_within: float) -> bool:
        return self.run_on >= _MIN_RUN_ON and self.mid >= least_mid and self.within >= least_within

    def wrapped_guess(self) -> FormatGuess:
        return FormatGuess(
            "paragraphs",
            f"wrapped prose: {self.mid:.0%} of the lines that run on to the next end mid-sentence, "
            f"{self.within:.0%} are within {WRAP_COLUMNS} columns",
        )


def _sample(path: Path, start: int, end: int | None, size: int, text_column: str = "text") -> str:
    """The whole lines among the first `size` bytes of [start, end) of the file's text, decoded (bad
    bytes replaced: the reader checks them later, with their offsets); of a records file, the texts of
    the records that begin there (bad records left out, for the same reason)."""
    stop = start + size if end is None else min(end, start + size)
    records = is_records(path)
    with reading(path, text_column) as f:
        f.seek(start)
        data = f.read(stop - start)
        if records and data and not data.endswith(b"\n"):
            data += f.readline(_RECORD_SAMPLE_LIMIT)  # a record longer than the sample: read it whole
    if not records:
        if len(data) == size and b"\n" in data:
            data = data[: data.rfind(b"\n") + 1]  # the last line may be cut
        return data.decode("utf-8", errors="replace").replace("\r", "")
    texts = []
    for raw in data.split(b"\n"):
        try:
            texts.append(record_text(path, raw.decode("utf-8"), text_column, str) or "")
        except (UnicodeDecodeError, ValueError):
            continue
    return "\n\n".join(t.replace("\r", "") for t in texts if t)


_RECORD_SAMPLE_LIMIT = 64 << 20


def _sentences_per_line(text_lines: list[str]) -> float:
    """Bling Fire's sentences per line over the first 64 KiB of `text_lines`. Joined by U+2029, where
    Bling Fire always ends a sentence, a line of one sentence counts one."""
    head, size = [], 0
    for line in text_lines:
        head.append(line)
        size += len(line)
        if size >= _SEGMENT_SAMPLE_CHARS:
            break
    segments = blingfire.text_to_sentences("\u2029".join(head)).split("\n")
    return len([s for s in segments if s and not s.isspace()]) / len(head)


def input_formats(blocks: Sequence[Block], input_format: str, text_column: str = "text") -> dict[str, str]:
    """The format each input file is read in: `input_format`, or under "auto" each file's guess (logged
    at INFO, one line a file). Under "lines", files that look like prose get one WARNING.
    `text_column`: the field that holds the text of JSON Lines and Parquet inputs."""
    if input_format not in ("auto", *FORMATS):
        raise ValueError(f"input_format {input_format!r}: expected auto or one of {FORMATS}")
    bodies: dict[str, tuple[int, int]] = {}
    for b in blocks:  # a file's blocks are in order: its body runs from the first's start to the last's end
        bodies[b.path] = (bodies.get(b.path, (b.start, b.end))[0], b.end)
    if input_format == "paragraphs":
        return dict.fromkeys(bodies, "paragraphs")
    formats, prose, guesses = {}, [], {}
    for path, (start, end) in bodies.items():
        guess = guess_format(path, start, end, text_column)
        if input_format == "auto":
            guesses[path] = guess
            formats[path] = guess.format
        else:
            formats[path] = "lines"
            if guess.format != "lines":
                prose.append(f"{path} ({guess.reason})")
    _say_guesses(guesses)
    if prose:
        more = f" and {len(prose) - 3} more" if len(prose) > 3 else ""
        logger.warning(
            "--format lines reads every line as a sentence, but %d of %d input files look like prose: "
            "%s%s; pass --format paragraphs (or auto) for such files",
            len(prose),
            len(bodies),
            "; ".join(prose[:3]),
            more,
        )
    return formats


SAID_ONE_BY_ONE = 5  # more input files than this: their formats in one line (each file's under --verbose)


def _say_guesses(guesses: dict[str, FormatGuess]) -> None:
    """The formats --format auto chose: a line a file for a few files, else one line that counts each
    format and kind of reason (a folder of 250 books said in 250 lines hid everything else)."""
    for path, guess in guesses.items():
        level = logging.INFO if len(guesses) <= SAID_ONE_BY_ONE else logging.DEBUG
        logger.log(level, "%s: --format auto: %s (%s)", path, guess.format, guess.reason)
    if len(guesses) <= SAID_ONE_BY_ONE:
        return
    kinds: dict[tuple[str, str], list[str]] = {}
    for path, guess in guesses.items():
        kinds.setdefault((guess.format, guess.reason.split(":")[0]), []).append(Path(path).name)
    counted = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
    said = "; ".join(f"{len(names)} {fmt} ({why}, e.g. {names[0]})" for (fmt, why), names in counted)
    logger.info("--format auto on %d files: %s (each file's with --verbose)", len(guesses), said)
