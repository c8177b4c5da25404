"""Reading a pretraining corpus: plain-text files of any number and size, streamed, as documents of sentences.

Two input formats:
- "lines": google-research's format for `create_pretraining_data.py`: one sentence per line, a blank line
  between documents.
- "paragraphs": raw text (books), paragraphs separated by blank lines, lines wrapped anywhere. Each
  paragraph is split into sentences by Bling Fire (`blingfire.text_to_sentences`, Microsoft's finite-state
  segmenter, model shipped inside the wheel, so it works offline). Measured against pysbd and sentencex on
  the shared books (docs/data.md): the only one of the three that splits inside quoted speech
  ('"...interfere. Of course, ..."') and at 5-8 MB/s per core fast enough not to dominate the pipeline
  (pysbd: 0.1 MB/s).

"auto" (the default) picks one of the two for each file from a sample of its first 256 KiB
(`guess_format`): "paragraphs" for prose wrapped at a fixed width (most lines that run on to the next end
mid-sentence, nearly all within 80 columns: Project Gutenberg's books) or written a paragraph per line
(several sentences per line), "lines" otherwise. Read as "lines", wrapped prose would become sentence
fragments and paragraph-per-line text one overlong "sentence" per paragraph, without a word.

Files are cut into blocks of about `block_bytes` at blank lines, so many processes can read one big file,
and no reader ever holds more than one block. In "lines" format a document is the text between blank lines
(a document with no blank line is cut at a line end after 3 blocks' worth of bytes, which keeps every
block, and so the memory of a reader, bounded); in "paragraphs" format a document is one block
(a book is one document, or a few for books over `block_bytes`).

`strip_gutenberg` keeps only the text between Project Gutenberg's START and END marker lines (both the
current `*** START OF ...` and the 1990s `*END*THE SMALL PRINT!` headers); a file without the markers is an
error, since the option says the files are Gutenberg books.

Bad input fails with the file and byte offset: empty files, binary files (a NUL byte), invalid UTF-8
(or, with `skip_invalid_utf8`, the line is skipped and counted), lines over `max_line_bytes`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import blingfire

from albert_lm.files import InputError

logger = logging.getLogger(__name__)

FORMATS = ("lines", "paragraphs")
_HEAD_WINDOW = 1 << 20  # Gutenberg headers (with the old "small print") end well within 1 MiB
_TAIL_WINDOW = 1 << 20
_HINT_WINDOW = 64 << 10  # where a book's first START marker line lies (the old small print is ~15 KB)
_START_RE = re.compile(rb"^(\*\*\* ?START OF[^\n]*|\*END\*THE SMALL PRINT[^\n]*)\n", re.M | re.I)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")  # a line end, then a blank line
_END_RE = re.compile(rb"^(\*\*\* ?END OF|End of (the )?Project Gutenberg)", re.M | re.I)


@dataclass(frozen=True)
class Block:
    """A byte range [start, end) of one file that begins and ends at a blank line (or the file's body)."""

    path: str
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class ReadStats:
    """What the readers saw; summed over blocks for the final summary."""

    lines: int = 0
    skipped_invalid_utf8: int = 0
    documents: int = 0
    sentences: int = 0
    skipped_files: list[str] = field(default_factory=list)

    def add(self, other: ReadStats) -> None:
        self.lines += other.lines
        self.skipped_invalid_utf8 += other.skipped_invalid_utf8
        self.documents += other.documents
        self.sentences += other.sentences


def gutenberg_body(path: Path) -> tuple[int, int]:
    """Byte range of a Project Gutenberg book's text: after the START marker line, before the END marker."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_HEAD_WINDOW)
        tail_start = max(0, size - _TAIL_WINDOW)
        f.seek(tail_start)
        tail = f.read(_TAIL_WINDOW)
    starts = list(_START_RE.finditer(head))
    if not starts:
        raise InputError(
            path,
            f"no Project Gutenberg START marker ('*** START OF' or '*END*THE SMALL PRINT') in the "
            f"first {_HEAD_WINDOW} bytes; drop --strip-gutenberg for files that are not Gutenberg books",
        )
    start = starts[-1].end()  # old files have both a small-print start and end line: text follows the last
    end_match = next((m for m in _END_RE.finditer(tail) if tail_start + m.start() >= start), None)
    if end_match is None:
        raise InputError(
            path,
            f"no Project Gutenberg END marker ('*** END OF' or 'End of the Project Gutenberg') in "
            f"the last {_TAIL_WINDOW} bytes; drop --strip-gutenberg for files that are not Gutenberg books",
        )
    return start, tail_start + end_match.start()


def warn_gutenberg_markers(paths: Sequence[str | os.PathLike]) -> None:
    """Log one WARNING if some inputs look like Project Gutenberg books (a START marker near the top)
    while --strip-gutenberg is off: their header and licence text would be trained on. The output does
    not change; the option stays the user's to give."""
    marked = []
    for p in paths:
        with open(p, "rb") as f:
            if _START_RE.search(f.read(_HINT_WINDOW)):
                marked.append(str(p))
    if marked:
        more = f" and {len(marked) - 3} more" if len(marked) > 3 else ""
        logger.warning(
            "%d of %d input files hold Project Gutenberg's START marker (%s%s): their header and licence "
            "text will be trained on; pass --strip-gutenberg to keep only the text between the markers",
            len(marked), len(paths), ", ".join(marked[:3]), more,
        )  # fmt: skip


def check_input_file(path: Path) -> int:
    """Size of an input file; a clear error for a missing, empty or binary one."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such input file")
    if not path.is_file():
        raise InputError(path, "not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise InputError(path, "empty input file (expected UTF-8 text)")
    with open(path, "rb") as f:
        probe = f.read(1 << 16)
    nul = probe.find(b"\0")
    if nul >= 0:
        raise InputError(path, f"binary file (NUL byte at offset {nul}); expected UTF-8 text")
    return size


def plan_blocks(
    paths: Sequence[str | os.PathLike], block_bytes: int, strip_gutenberg: bool = False
) -> list[Block]:
    """Cut every file into blocks of about `block_bytes`, each cut placed just after a blank line."""
    blocks: list[Block] = []
    seen: dict[Path, str] = {}
    for p in paths:
        path = Path(p)
        size = check_input_file(path)
        if path.resolve() in seen:
            # its documents would be read twice, and could land in both splits (held-out text trained on)
            also = "" if seen[path.resolve()] == str(p) else f" (also as {seen[path.resolve()]})"
            raise InputError(path, f"given twice as --input{also}; give each file once")
        seen[path.resolve()] = str(p)
        start, end = gutenberg_body(path) if strip_gutenberg else (0, size)
        with open(path, "rb") as f:
            pos = start
            while pos < end:
                cut = _next_blank_line_end(f, pos + block_bytes, end, give_up=2 * block_bytes)
                blocks.append(Block(str(path), pos, cut))
                pos = cut
    return blocks


def _next_blank_line_end(f, pos: int, end: int, give_up: int) -> int:
    """Offset just after the first blank line at or after `pos`; or after the first line end past
    `pos + give_up` (a document with no blank line for that long is cut there, so a block stays bounded);
    or `end`. Lines are read in pieces of at most 1 MiB, so a huge line costs no memory here."""
    if pos >= end:
        return end
    f.seek(pos)
    line_start = False  # `pos` may fall inside a line: finish it first
    while True:
        if f.tell() >= end:
            return end
        piece = f.readline(1 << 20)
        if not piece:
            return end
        whole_line = line_start and piece.endswith(b"\n")
        line_start = piece.endswith(b"\n")
        if (whole_line and not piece.strip()) or (line_start and f.tell() - pos > give_up):
            return min(f.tell(), end)


def read_block_text(
    block: Block, stats: ReadStats, skip_invalid_utf8: bool = False, max_line_bytes: int = 1 << 20
) -> str:
    """The decoded text of a block, read in one call (blocks are small), with every input check."""
    with open(block.path, "rb") as f:
        f.seek(block.start)
        data = f.read(block.nbytes)
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(
            block.path,
            f"binary data (NUL byte at offset {block.start + nul}, line {_line_of(block, data, nul)}); "
            "expected UTF-8 text",
        )
    if len(data) > max_line_bytes:
        pos = 0
        for raw in data.split(b"\n"):  # C-level split; only blocks that could hold a long line pay for it
            if len(raw) > max_line_bytes:
                raise InputError(
                    block.path,
                    f"line at byte offset {block.start + pos} is {len(raw)} bytes (line "
                    f"{_line_of(block, data, pos)}), over --max-line-bytes {max_line_bytes}; expected text "
                    "lines (a binary or one-line file?)",
                )
            pos += len(raw) + 1
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if not skip_invalid_utf8:
            raise InputError(
                block.path,
                f"invalid UTF-8 at byte offset {block.start + e.start}, line {_line_of(block, data, e.start)} "
                f"({e.reason}); expected UTF-8 text (or pass --skip-invalid-utf8 to skip such lines)",
            ) from None
        good = []
        for raw in data.split(b"\n"):
            try:
                good.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                stats.skipped_invalid_utf8 += 1
                logger.warning(
                    "%s: skipped a line of invalid UTF-8 in bytes %d-%d", block.path, block.start, block.end
                )
        text = "\n".join(good)
    stats.lines += text.count("\n") + (not text.endswith("\n"))
    return text


def _line_of(block: Block, data: bytes, pos: int) -> int:
    """The 1-based line number of byte `pos` of a block's `data` in its file (for an error only: the
    file is read again up to the block)."""
    before = 0
    with open(block.path, "rb") as f:
        left = block.start
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            before += chunk.count(b"\n")
            left -= len(chunk)
    return before + data.count(b"\n", 0, pos) + 1


def iter_block_lines(
    block: Block, stats: ReadStats, skip_invalid_utf8: bool = False, max_line_bytes: int = 1 << 20
) -> Iterator[str]:
    """Decoded lines of a block, line ends removed."""
    text = read_block_text(block, stats, skip_invalid_utf8, max_line_bytes)
    for line in text.split("\n"):
        yield line.rstrip("\r")


def iter_text_lines(
    path: Path, strip_gutenberg: bool = False, skip_invalid_utf8: bool = False, max_line_bytes: int = 1 << 20
) -> Iterator[str]:
    """All lines of one file (its Gutenberg body with `strip_gutenberg`), checked and streamed."""
    size = check_input_file(path)
    start, end = gutenberg_body(path) if strip_gutenberg else (0, size)
    yield from iter_block_lines(Block(str(path), start, end), ReadStats(), skip_invalid_utf8, max_line_bytes)


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph (Bling Fire; it puts one sentence per output line)."""
    return [s.strip() for s in blingfire.text_to_sentences(paragraph).split("\n") if s and not s.isspace()]


def iter_documents(
    block: Block,
    fmt: str,
    stats: ReadStats,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
) -> Iterator[list[str]]:
    """Documents of a block, each a list of sentences (raw text; normalization is the tokenizer's)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {FORMATS}")
    if fmt == "lines":
        doc: list[str] = []
        for line in iter_block_lines(block, stats, skip_invalid_utf8, max_line_bytes):
            if line.strip():
                doc.append(line)
            elif doc:
                stats.documents += 1
                stats.sentences += len(doc)
                yield doc
                doc = []
        if doc:
            stats.documents += 1
            stats.sentences += len(doc)
            yield doc
        return
    # paragraphs: the whole block is one document. Blank lines become U+2029 (PARAGRAPH SEPARATOR), where
    # Bling Fire always ends a sentence, and line breaks inside a paragraph become spaces, so the whole
    # block is segmented in one call (per-paragraph calls spend most of their time in the ctypes wrapper).
    text = read_block_text(block, stats, skip_invalid_utf8, max_line_bytes)
    text = _PARAGRAPH_BREAK.sub("\u2029", text.replace("\r\n", "\n")).replace("\n", " ")
    # Raw segments (a trailing U+2029 or space included): the tokenizer's normalization removes that
    # whitespace anyway, and empty segments give no tokens, so cleaning them here would be wasted work.
    doc = blingfire.text_to_sentences(text).split("\n")
    if doc:
        stats.documents += 1
        stats.sentences += len(doc)
        yield doc


# ----------------------------------------------------------------------------------------- "auto" format
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
_CLOSERS = "\"'”’»)]_* \t"  # a sentence may end inside quotes, brackets or markup


@dataclass(frozen=True)
class FormatGuess:
    """The format a file looks like it is in ("lines" or "paragraphs"), and why, in words."""

    format: str
    reason: str


def guess_format(path: str | os.PathLike, start: int = 0, end: int | None = None) -> FormatGuess:
    """The format of a file from the first 256 KiB of its bytes [start, end): "paragraphs" for wrapped
    prose or a paragraph per line, "lines" for a sentence per line (google-research's format). The
    first 64 KiB decide alone when they are plainly wrapped prose (most books: a quarter of the time)."""
    quick = _LineStats(_sample(Path(path), start, end, _QUICK_SAMPLE_BYTES))
    if quick.wrapped(PLAINLY_MID_SENTENCE, PLAINLY_WITHIN):
        return quick.wrapped_guess()
    stats = _LineStats(_sample(Path(path), start, end, _SAMPLE_BYTES))
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


def _sample(path: Path, start: int, end: int | None, size: int) -> str:
    """The whole lines among the first `size` bytes of [start, end), decoded (bad bytes replaced: the
    reader checks them later, with their offsets)."""
    stop = start + size if end is None else min(end, start + size)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(stop - start)
    if len(data) == size and b"\n" in data:
        data = data[: data.rfind(b"\n") + 1]  # the last line may be cut
    return data.decode("utf-8", errors="replace").replace("\r", "")


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


def input_formats(blocks: Sequence[Block], input_format: str) -> dict[str, str]:
    """The format each input file is read in: `input_format`, or under "auto" each file's guess (logged
    at INFO, one line a file). Under "lines", files that look like prose get one WARNING."""
    if input_format not in ("auto", *FORMATS):
        raise ValueError(f"input_format {input_format!r}: expected auto or one of {FORMATS}")
    bodies: dict[str, tuple[int, int]] = {}
    for b in blocks:  # a file's blocks are in order: its body runs from the first's start to the last's end
        bodies[b.path] = (bodies.get(b.path, (b.start, b.end))[0], b.end)
    if input_format == "paragraphs":
        return dict.fromkeys(bodies, "paragraphs")
    formats, prose = {}, []
    for path, (start, end) in bodies.items():
        guess = guess_format(path, start, end)
        if input_format == "auto":
            logger.info("%s: --format auto: %s (%s)", path, guess.format, guess.reason)
            formats[path] = guess.format
        else:
            formats[path] = "lines"
            if guess.format != "lines":
                prose.append(f"{path} ({guess.reason})")
    if prose:
        more = f" and {len(prose) - 3} more" if len(prose) > 3 else ""
        logger.warning(
            "--format lines reads every line as a sentence, but %d of %d input files look like prose: "
            "%s%s; pass --format paragraphs (or auto) for such files",
            len(prose), len(bodies), "; ".join(prose[:3]), more,
        )  # fmt: skip
    return formats
