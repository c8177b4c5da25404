"""Records of JSON Lines (and of Parquet, whose rows `albert_lm.data.sources` reads as JSON Lines): the
text of each, from the field `--text-column` (default "text", the name the Hugging Face datasets and
most corpus dumps use). A record is a document; what a document is made of (its lines, or its sentences)
is `albert_lm.data.corpus`'s to decide.

Bad records fail with the file, the line (for Parquet, the row) and the byte offset in the file's text:
invalid UTF-8 (or, with `skip_invalid_utf8`, the record is skipped and counted), a line that is not a
JSON object, a record without the field (the fields it has are named), a field that is not a string.
A null field is an empty text (skipped). A record may be up to `RECORD_LINE_FACTOR` times
`--max-line-bytes` long, since a record holds a whole document: a book in one record is common.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Iterator

from albert_lm.data.sources import container
from albert_lm.files import InputError
from albert_lm.hints import legacy_encoding_hint

logger = logging.getLogger(__name__)

RECORD_LINE_FACTOR = 64  # a record may be this many times --max-line-bytes (64 MiB by default)


def where(path: str | os.PathLike, line: int) -> str:
    """A record's place in words: its line in a JSON Lines file, its row (from 0) in a Parquet file."""
    return f"row {line - 1}" if container(path) == "parquet" else f"line {line}"


def iter_records(
    path: str | os.PathLike,
    data: bytes,
    start: int,
    text_column: str,
    line_of: Callable[[int], int],
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
    counts: dict[str, int] | None = None,
) -> Iterator[str]:
    """The texts of the records in `data`, bytes [start, start + len(data)) of `path`'s text, made of
    whole lines. `line_of(pos)`: the line number of byte `pos` of `data` (looked up for errors only).
    `counts` (when given) gains "lines" (records read), "skipped_invalid_utf8" and "without_text"
    (records whose text field is null or empty: nothing to learn, never silently)."""
    counts = counts if counts is not None else {}
    limit = RECORD_LINE_FACTOR * max_line_bytes
    pos = 0
    for raw in data.split(b"\n"):
        here, pos = pos, pos + len(raw) + 1
        if not raw.strip():
            continue
        counts["lines"] = counts.get("lines", 0) + 1
        if len(raw) > limit:
            raise InputError(
                path,
                f"record at byte offset {start + here} ({where(path, line_of(here))}) is {len(raw)} bytes, over "
                f"{RECORD_LINE_FACTOR} x --max-line-bytes ({limit}); expected JSON Lines of text records",
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if skip_invalid_utf8:
                counts["skipped_invalid_utf8"] = counts.get("skipped_invalid_utf8", 0) + 1
                logger.warning("%s: skipped a record of invalid UTF-8 at byte offset %d", path, start + here)
                continue
            raise InputError(
                path,
                f"invalid UTF-8 at byte offset {start + here + e.start}, {where(path, line_of(here))} ({e.reason}); "
                "expected UTF-8 text"
                + (legacy_encoding_hint(raw, path) or " (or pass --skip-invalid-utf8 to skip such records)"),
            ) from None
        text = record_text(path, line, text_column, functools.partial(_place, path, line_of, here))
        if not text or not text.strip():  # null or empty: no text to learn from, counted for the summary
            counts["without_text"] = counts.get("without_text", 0) + 1
        if text:
            yield text


def _place(path: str | os.PathLike, line_of: Callable[[int], int], pos: int) -> str:
    return where(path, line_of(pos))


def record_text(path: str | os.PathLike, line: str, text_column: str, place: Callable[[], str]) -> str | None:
    """The text of one JSON Lines record (None when the field is null); `place()` says where it is."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(
            path, f"{place()}: not JSON ({e.msg} at column {e.colno}); expected JSON Lines, an object a line"
        ) from None
    except (RecursionError, ValueError) as e:  # nested too deeply for the parser; a number too long
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise InputError(
            path, f"{place()}: not readable JSON ({why}); expected JSON Lines, an object a line"
        ) from None
    if not isinstance(record, dict):
        raise InputError(
            path, f"{place()}: a JSON {type(record).__name__}, expected an object with a text field"
        )
    if text_column not in record:
        fields = ", ".join(list(record)[:10]) or "none"
        raise InputError(
            path,
            f"{place()}: no field {text_column!r} (its fields: {fields}); pass --text-column NAME for the "
            "field that holds the text",
        )
    text = record[text_column]
    if text is not None and not isinstance(text, str):
        raise InputError(
            path, f"{place()}: field {text_column!r} holds a {type(text).__name__}, expected a string of text"
        )
    return text
