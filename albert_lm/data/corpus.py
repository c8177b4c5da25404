"""Reading a pretraining corpus: text files of any number and size (plain or compressed, JSON Lines, Parquet:
`albert_lm.data.sources`), streamed, as documents of sentences.

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
(`albert_lm.data.layout.guess_format`).

Text written without spaces (Chinese, Japanese, Thai) is read the same way, with two changes
(`albert_lm.data.unspaced`): a line break between two of its characters is dropped rather than read as
a space, and the sentence ends Bling Fire misses there (`．`, closing quotes) are fixed.

JSON Lines and Parquet hold records: each record's text (`text_column`) is a document of its own (in
"lines" format, one or more: its blank lines separate documents too), and blocks are cut between records.

Files are cut into blocks of about `block_bytes` at blank lines, so many processes can read one big file,
and no reader ever holds more than one block. In "lines" format a document is the text between blank lines
(a document with no blank line is cut at a line end after 3 blocks' worth of bytes, which keeps every
block, and so the memory of a reader, bounded); in "paragraphs" format a document is one block
(a book is one document, or a few for books over `block_bytes`).

`strip_gutenberg` keeps only the text between Project Gutenberg's START and END marker lines (both the
current `*** START OF ...` and the 1990s `*END*THE SMALL PRINT!` headers); a file without the markers is an
error, since the option says the files are Gutenberg books.

Bad input fails with the file and byte offset (in the decompressed text): empty files, binary files (a
NUL byte), invalid UTF-8 (or, with `skip_invalid_utf8`, the line is skipped and counted), lines over
`max_line_bytes`, damaged or truncated compressed files, bad records (`albert_lm.data.records`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import blingfire

from albert_lm.data import unspaced
from albert_lm.data.gutenberg import gutenberg_body, has_gutenberg_start, text_range, warn_gutenberg_markers
from albert_lm.data.layout import FORMATS, FormatGuess, guess_format, input_formats
from albert_lm.data.records import RECORD_LINE_FACTOR, iter_records
from albert_lm.data.sources import Block, container, is_records, is_streamed, read_range, reading
from albert_lm.files import InputError
from albert_lm.hints import legacy_encoding_hint

logger = logging.getLogger(__name__)

__all__ = [  # guess_format, input_formats and FormatGuess live in layout; importable from here as before
    "FORMATS", "Block", "FormatGuess", "ReadStats", "check_input_file", "guess_format", "gutenberg_body",
    "input_formats", "iter_block_lines", "iter_documents", "iter_text_lines", "plan_blocks",
    "has_gutenberg_start", "read_block_text", "split_sentences", "warn_gutenberg_markers",
]  # fmt: skip
_CHUNK_BYTES = 1 << 20  # what `iter_text_lines` reads at a time
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")  # a line end, then a blank line


@dataclass
class ReadStats:
    """What the readers saw; summed over blocks for the final summary."""

    lines: int = 0
    skipped_invalid_utf8: int = 0
    without_text: int = 0  # JSON Lines or Parquet records whose text field is null or empty
    documents: int = 0
    sentences: int = 0
    skipped_files: list[str] = field(default_factory=list)

    def add(self, other: ReadStats) -> None:
        self.lines += other.lines
        self.skipped_invalid_utf8 += other.skipped_invalid_utf8
        self.without_text += other.without_text
        self.documents += other.documents
        self.sentences += other.sentences


def check_input_file(path: Path) -> int:
    """Size of an input file on disk; a clear error for a missing, empty or binary one, or one whose
    compressed text is empty, binary or damaged at its start (the rest is checked as it is read)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such input file")
    if not path.is_file():
        raise InputError(path, "not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise InputError(path, "empty input file (expected UTF-8 text)")
    if container(path) == "parquet":
        _check_parquet(path)
        return size
    with reading(path) as f:
        probe = f.read(1 << 16)
    if not probe:
        raise InputError(path, "no text in it after decompressing (an empty archive)")
    nul = probe.find(b"\0")
    if nul >= 0:
        raise InputError(path, f"binary file (NUL byte at offset {nul}); expected UTF-8 text")
    if container(path) == "jsonl" and probe.lstrip()[:1] == b"[":
        raise InputError(
            path, "a JSON array, not JSON Lines (one JSON object a line); convert it, e.g. jq -c '.[]'"
        )
    return size


def _check_parquet(path: Path) -> None:
    from albert_lm.data.sources import optional_module

    pq = optional_module(".parquet", path)
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as e:  # pyarrow's ArrowInvalid and friends
        raise InputError(path, f"not a readable Parquet file ({type(e).__name__}: {e})") from None
    if rows == 0:
        raise InputError(path, "a Parquet file with no rows")


def plan_blocks(
    paths: Sequence[str | os.PathLike],
    block_bytes: int,
    strip_gutenberg: bool = False,
    text_column: str = "text",
) -> list[Block]:
    """Cut every file into blocks of about `block_bytes` of its text, each cut placed just after a blank
    line (in JSON Lines and Parquet, between two records). A compressed file is decompressed once here."""
    blocks: list[Block] = []
    seen: dict[Path, str] = {}
    for p in paths:
        path = Path(p)
        check_input_file(path)
        if path.resolve() in seen:
            # its documents would be read twice, and could land in both splits (held-out text trained on)
            also = "" if seen[path.resolve()] == str(p) else f" (also as {seen[path.resolve()]})"
            raise InputError(path, f"given twice as --input{also}; give each file once")
        seen[path.resolve()] = str(p)
        records = is_records(path)
        start, end = text_range(path, strip_gutenberg)
        end = _known_size(path) if end is None else end
        with reading(path, text_column) as f:
            pos = start
            while end is None or pos < end:
                cut = _next_blank_line_end(f, pos + block_bytes, end, 2 * block_bytes, records)
                if cut <= pos:
                    break
                blocks.append(Block(str(path), pos, cut))
                pos = cut
    return blocks


def _known_size(path: Path) -> int | None:
    """The size of a plain file's text; None for text made while it is read (found at its end)."""
    return None if is_streamed(path) else path.stat().st_size


def _next_blank_line_end(f, pos: int, end: int | None, give_up: int, any_line: bool = False) -> int:
    """Offset just after the first blank line (any line end, with `any_line`) at or after `pos`; or
    after the first line end past `pos + give_up` (a document with no blank line for that long is cut
    there, so a block stays bounded); or `end` (None: the end of the text). Lines are read in pieces of
    at most 1 MiB, so a huge line costs no memory here."""
    if end is not None and pos >= end:
        return end
    f.seek(pos)
    line_start = False  # `pos` may fall inside a line: finish it first
    while True:
        if end is not None and f.tell() >= end:
            return end
        piece = f.readline(1 << 20)
        if not piece:
            return f.tell() if end is None else min(f.tell(), end)
        whole_line = line_start and piece.endswith(b"\n")
        line_start = piece.endswith(b"\n")
        if (
            (any_line and line_start)
            or (whole_line and not piece.strip())
            or (line_start and f.tell() - pos > give_up)
        ):
            return f.tell() if end is None else min(f.tell(), end)


def read_block_text(
    block: Block,
    stats: ReadStats,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
    text_column: str = "text",
) -> str:
    """The decoded text of a block, read in one call (blocks are small), with every input check."""
    return _checked_text(block, _read(block, text_column), stats, skip_invalid_utf8, max_line_bytes)


def _read(block: Block, text_column: str = "text") -> bytes:
    return read_range(block.path, block.start, block.nbytes, text_column)


def _checked_text(
    block: Block, data: bytes, stats: ReadStats, skip_invalid_utf8: bool, max_line_bytes: int
) -> str:
    """`data`, the bytes of `block`, decoded, after the checks: no NUL, no line over `max_line_bytes`,
    UTF-8 (or its bad lines skipped and counted, with `skip_invalid_utf8`)."""
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
                f"({e.reason}); expected UTF-8 text{_legacy(data, block.path)}",
            ) from None
        good, skipped = [], 0
        for raw in data.split(b"\n"):
            try:
                good.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                skipped += 1
        stats.skipped_invalid_utf8 += skipped
        logger.warning(
            "%s: skipped %d of %d lines of invalid UTF-8 in bytes %d-%d%s", block.path, skipped,
            len(good) + skipped, block.start, block.end, legacy_encoding_hint(data, block.path),
        )  # fmt: skip
        text = "\n".join(good)
    stats.lines += text.count("\n") + (not text.endswith("\n"))
    return text


def _legacy(data: bytes, path: str | Path) -> str:
    """The way on from text that is not UTF-8: its conversion where it reads as an 8-bit encoding
    (skipping would drop every line holding a letter of that encoding), else --skip-invalid-utf8."""
    hint = legacy_encoding_hint(data, path)
    if "reads as" in hint:
        return hint + " (--skip-invalid-utf8 would drop every line holding a non-ASCII letter)"
    return hint + " (or pass --skip-invalid-utf8 to skip such lines)"


def _line_of(block: Block, data: bytes, pos: int, text_column: str = "text") -> int:
    """The 1-based line number of byte `pos` of a block's `data` in its file (for an error only: the
    file's text is read again up to the block)."""
    before = 0
    with reading(block.path, text_column) as f:
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
    path: Path,
    strip_gutenberg: bool = False,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
    text_column: str = "text",
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """All lines of one file (its Gutenberg body with `strip_gutenberg`), checked and streamed a MiB at
    a time. For JSON Lines and Parquet, the lines of each record's text, a blank line after each; the
    records whose text is null or empty are left out and counted into `stats` (`without_text`), which
    the caller reports."""
    path = Path(path)
    check_input_file(path)
    records = is_records(path)
    start, end = text_range(path, strip_gutenberg)
    stats = stats if stats is not None else ReadStats()
    ended = True  # whether the text so far ends with a line end (an empty text: one empty line)
    for block, data in _chunks(path, start, end, max_line_bytes, records, text_column):
        if records:
            for text in _block_records(block, data, stats, skip_invalid_utf8, max_line_bytes, text_column):
                yield from (line.rstrip("\r") for line in text.split("\n"))
                yield ""
            continue
        lines = _checked_text(block, data, stats, skip_invalid_utf8, max_line_bytes).split("\n")
        ended = lines[-1] == ""
        if ended:
            lines.pop()  # the empty piece after a chunk's last line end: yielded once, at the very end
        yield from (line.rstrip("\r") for line in lines)
    if ended and not records:
        yield ""


def _chunks(
    path: Path, start: int, end: int | None, max_line_bytes: int, records: bool, text_column: str
) -> Iterator[tuple[Block, bytes]]:
    """Consecutive pieces of about a MiB of `path`'s text [start, end), each made of whole lines (a line
    too long for `max_line_bytes` ends its piece unfinished: the checks then name it)."""
    limit = max_line_bytes * (RECORD_LINE_FACTOR if records else 1) + 2
    with reading(path, text_column) as f:
        f.seek(start)
        pos = start
        while end is None or pos < end:
            data = f.read(_CHUNK_BYTES if end is None else min(_CHUNK_BYTES, end - pos))
            if not data:
                return
            if not data.endswith(b"\n") and (end is None or pos + len(data) < end):
                data += f.readline(limit if end is None else min(limit, end - pos - len(data)))
            yield Block(str(path), pos, pos + len(data)), data
            pos += len(data)


def _block_records(
    block: Block,
    data: bytes,
    stats: ReadStats,
    skip_invalid_utf8: bool,
    max_line_bytes: int,
    text_column: str,
) -> Iterator[str]:
    """The record texts of a block of JSON Lines (or Parquet rows), checked; counts into `stats`."""
    counts: dict[str, int] = {}
    yield from iter_records(
        block.path,
        data,
        block.start,
        text_column,
        lambda pos: _line_of(block, data, pos, text_column),
        skip_invalid_utf8,
        max_line_bytes,
        counts,
    )
    stats.lines += counts.get("lines", 0)
    stats.skipped_invalid_utf8 += counts.get("skipped_invalid_utf8", 0)
    stats.without_text += counts.get("without_text", 0)


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph (Bling Fire, which puts one sentence per output line; the sentence
    ends it misses in text without spaces added, `albert_lm.data.unspaced`)."""
    segmented = unspaced.split_unspaced(blingfire.text_to_sentences(paragraph))
    return [s.strip() for s in segmented.split("\n") if s and not s.isspace()]


def iter_documents(
    block: Block,
    fmt: str,
    stats: ReadStats,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
    text_column: str = "text",
) -> Iterator[list[str]]:
    """Documents of a block, each a list of sentences (raw text; normalization is the tokenizer's).
    A block of JSON Lines or Parquet rows gives a document per record (`text_column`)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {FORMATS}")
    if is_records(block.path):
        data = _read(block, text_column)
        for text in _block_records(block, data, stats, skip_invalid_utf8, max_line_bytes, text_column):
            if not text.isspace():
                yield from _text_documents(text, fmt, stats)
        return
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
    yield from _text_documents(read_block_text(block, stats, skip_invalid_utf8, max_line_bytes), fmt, stats)


def _text_documents(text: str, fmt: str, stats: ReadStats) -> Iterator[list[str]]:
    """The documents of a text read whole: in "lines" format its runs of non-blank lines, in
    "paragraphs" format the whole text, split into sentences."""
    if fmt == "lines":
        for part in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n")):
            doc = [line.rstrip("\r") for line in part.split("\n") if line.strip()]
            if doc:
                stats.documents += 1
                stats.sentences += len(doc)
                yield doc
        return
    # Blank lines become U+2029 (PARAGRAPH SEPARATOR), where Bling Fire always ends a sentence, and line
    # breaks inside a paragraph become spaces (none between two characters of a script written without
    # spaces), so the whole text is segmented in one call (per-paragraph calls spend most of their time
    # in the ctypes wrapper).
    text = unspaced.unwrap(_PARAGRAPH_BREAK.sub("\u2029", text.replace("\r\n", "\n"))).replace("\n", " ")
    # Raw segments (a trailing U+2029 or space included): the tokenizer's normalization removes that
    # whitespace anyway, and empty segments give no tokens, so cleaning them here would be wasted work.
    doc = unspaced.split_unspaced(blingfire.text_to_sentences(text)).split("\n")
    if doc:
        stats.documents += 1
        stats.sentences += len(doc)
        yield doc
