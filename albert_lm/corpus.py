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

Files are cut into blocks of about `block_bytes` at blank lines, so many processes can read one big file,
and no reader ever holds more than one block. In "lines" format a document is the text between blank lines
(a document longer than a block is cut at the block end); in "paragraphs" format a document is one block
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

logger = logging.getLogger(__name__)

FORMATS = ("lines", "paragraphs")
_HEAD_WINDOW = 1 << 20  # Gutenberg headers (with the old "small print") end well within 1 MiB
_TAIL_WINDOW = 1 << 20
_START_RE = re.compile(rb"^(\*\*\* ?START OF[^\n]*|\*END\*THE SMALL PRINT[^\n]*)\n", re.M | re.I)
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
        raise ValueError(
            f"{path}: no Project Gutenberg START marker ('*** START OF' or '*END*THE SMALL PRINT') in the "
            f"first {_HEAD_WINDOW} bytes; drop --strip-gutenberg for files that are not Gutenberg books"
        )
    start = starts[-1].end()  # old files have both a small-print start and end line: text follows the last
    end_match = next((m for m in _END_RE.finditer(tail) if tail_start + m.start() >= start), None)
    if end_match is None:
        raise ValueError(
            f"{path}: no Project Gutenberg END marker ('*** END OF' or 'End of the Project Gutenberg') in "
            f"the last {_TAIL_WINDOW} bytes; drop --strip-gutenberg for files that are not Gutenberg books"
        )
    return start, tail_start + end_match.start()


def check_input_file(path: Path) -> int:
    """Size of an input file; a clear error for a missing, empty or binary one."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such input file")
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"{path}: empty input file (expected UTF-8 text)")
    with open(path, "rb") as f:
        probe = f.read(1 << 16)
    nul = probe.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{path}: binary file (NUL byte at offset {nul}); expected UTF-8 text")
    return size


def plan_blocks(
    paths: Sequence[str | os.PathLike], block_bytes: int, strip_gutenberg: bool = False
) -> list[Block]:
    """Cut every file into blocks of about `block_bytes`, each cut placed just after a blank line."""
    blocks: list[Block] = []
    for p in paths:
        path = Path(p)
        size = check_input_file(path)
        start, end = gutenberg_body(path) if strip_gutenberg else (0, size)
        with open(path, "rb") as f:
            pos = start
            while pos < end:
                cut = _next_blank_line_end(f, pos + block_bytes, end)
                blocks.append(Block(str(path), pos, cut))
                pos = cut
    return blocks


def _next_blank_line_end(f, pos: int, end: int) -> int:
    """Offset just after the first blank line at or after `pos` (or `end`)."""
    if pos >= end:
        return end
    f.seek(pos)
    f.readline(1 << 20)  # finish the line `pos` falls in
    while True:
        here = f.tell()
        if here >= end:
            return end
        line = f.readline(1 << 20)
        if not line:
            return end
        if not line.strip():
            return min(f.tell(), end)


def iter_block_lines(
    block: Block, stats: ReadStats, skip_invalid_utf8: bool = False, max_line_bytes: int = 1 << 20
) -> Iterator[str]:
    """Decoded lines of a block (line ends removed), reading at most `max_line_bytes` at a time."""
    with open(block.path, "rb") as f:
        f.seek(block.start)
        pos = block.start
        lineno = 0
        while pos < block.end:
            raw = f.readline(min(max_line_bytes + 1, block.end - pos))
            if not raw:
                break
            lineno += 1
            if len(raw) > max_line_bytes:
                raise ValueError(
                    f"{block.path}: line at byte offset {pos} is longer than {max_line_bytes} bytes "
                    "(--max-line-bytes); expected text lines (is this a binary or one-line file?)"
                )
            if b"\0" in raw:
                nul = pos + raw.index(b"\0")
                raise ValueError(f"{block.path}: binary data (NUL byte at offset {nul}); expected UTF-8 text")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if not skip_invalid_utf8:
                    raise ValueError(
                        f"{block.path}: invalid UTF-8 at byte offset {pos + e.start} ({e.reason}); "
                        "expected UTF-8 text (or pass --skip-invalid-utf8 to skip such lines)"
                    ) from None
                stats.skipped_invalid_utf8 += 1
                pos += len(raw)
                continue
            pos += len(raw)
            stats.lines += 1
            yield line.rstrip("\r\n")


def iter_text_lines(
    path: Path, strip_gutenberg: bool = False, skip_invalid_utf8: bool = False, max_line_bytes: int = 1 << 20
) -> Iterator[str]:
    """All lines of one file (its Gutenberg body with `strip_gutenberg`), checked and streamed."""
    size = check_input_file(path)
    start, end = gutenberg_body(path) if strip_gutenberg else (0, size)
    yield from iter_block_lines(Block(str(path), start, end), ReadStats(), skip_invalid_utf8, max_line_bytes)


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph (Bling Fire; it puts one sentence per output line)."""
    import blingfire

    return [s for s in blingfire.text_to_sentences(paragraph).split("\n") if s.strip()]


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
    lines = iter_block_lines(block, stats, skip_invalid_utf8, max_line_bytes)
    if fmt == "lines":
        doc: list[str] = []
        for line in lines:
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
    # paragraphs: the whole block is one document
    doc, para = [], []
    for line in lines:
        if line.strip():
            para.append(line)
        elif para:
            doc.extend(split_sentences(" ".join(para)))
            para = []
    if para:
        doc.extend(split_sentences(" ".join(para)))
    if doc:
        stats.documents += 1
        stats.sentences += len(doc)
        yield doc
