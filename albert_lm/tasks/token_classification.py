"""What a token classifier reads of users' files: CoNLL files, and the words (or tags) of one value.

The task itself is `albert_lm.tasks.text_classification.TokenClassificationTask`, which reads its rows
with these. A value is a list (JSON Lines), or a cell of text (CSV, TSV): a cell holding a JSON list is
that list, as a JSON Lines value would be; other cells are words separated by spaces. A cell written as a
Python list (pandas' `to_csv` writes `['The', 'weather']`) is refused: split on spaces its words would
keep their quotes and commas, and the tags would be names no one wrote.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, decode_utf8
from albert_lm.tasks.metrics import entity_spans

CONLL = (".conll", ".txt")  # a token classifier's CoNLL files: a word and its tag a line


def entities(words: Sequence[str], tags: Sequence[str], text: str | None = None) -> list[dict[str, Any]]:
    """The entities a sentence's tags name, in order: each one's type, its words' indices [start, end),
    its characters [char_start, char_end) in `text` (the text the words were split from; without one, the
    words joined by spaces) and that text, read as the scores count them (`metrics.entity_spans`: BIO,
    IOB1, BIOES or BILOU; an I- after O begins an entity)."""
    text, starts = word_offsets(words, text)
    found = []
    for kind, start, end in sorted(entity_spans(tags), key=lambda span: span[1]):
        first, last = starts[start], starts[end - 1] + len(words[end - 1])
        found.append({"type": kind, "start": start, "end": end, "char_start": first, "char_end": last,
                      "text": text[first:last]})  # fmt: skip
    return found


def word_offsets(words: Sequence[str], text: str | None) -> tuple[str, list[int]]:
    """(text, where each word begins in it): the words found in order in `text`, or, where there is none or
    a word is not there (the words were given as a list), in the words joined by spaces."""
    if text is not None:
        starts, at = [], 0
        for word in words:
            at = text.find(word, at)
            if at < 0:
                break
            starts.append(at)
            at += len(word)
        else:
            return text, starts
    joined = " ".join(words)
    return joined, [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]


def words_of(value: Any, column: str, path: str | os.PathLike, line: int) -> list[str]:
    """The words (or tags) of one value of `column`: a list of non-blank texts or numbers, or a cell of
    text, read as a JSON list where it is one and as its words between spaces otherwise; [] for a null,
    an empty list or a blank cell (the caller's to refuse as missing). A cell bracketed as a list that is
    not JSON, a list item that is not a non-blank text, or a value of another type is refused with the
    file, line and column."""
    if value is None:
        return []
    if isinstance(value, str):
        value = _cell_words(value, column, path, line)
    if not isinstance(value, list):
        names = {dict: "an object", bool: "true/false"}
        got = names.get(type(value), type(value).__name__)
        raise InputError(path, f"column {column!r}: expected a list of words, got {got}", line=line)
    for i, word in enumerate(value):
        if isinstance(word, bool) or not isinstance(word, str | int | float) or not str(word).strip():
            raise InputError(
                path,
                f"column {column!r}: word {i + 1} is {json.dumps(word)}, expected a non-blank text",
                line=line,
            )
    return [str(word) for word in value]


def _cell_words(cell: str, column: str, path: str | os.PathLike, line: int) -> list[Any]:
    """A cell's JSON list, or its words between spaces. A cell that begins with "[" but is no JSON is
    words ("[ Reuters ] said"), unless it also ends with "]": that is a list written another way,
    Python's above all, refused."""
    text = cell.strip()
    if not text.startswith("["):
        return text.split()
    try:
        listed = json.loads(text)
    except ValueError:
        listed = None
    except RecursionError:  # brackets nested past the parser's depth: no one's words
        raise InputError(path, f"column {column!r}: expected a JSON list", line=line) from None
    if isinstance(listed, list):
        return listed
    if text.endswith("]"):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise InputError(
            path,
            f"column {column!r}: {shown} is a list but not JSON (as pandas' to_csv writes a Python list); "
            'write a JSON list (["The", "weather"]) or the words separated by spaces (The weather)',
            line=line,
        )
    return text.split()


def read_conll(path: Path, tokens: str, tags: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line of its first word, {tokens: words, tags: their tags}) of each sentence of a CoNLL file: a
    word a line, its tag the line's last field (CoNLL-2003's POS and chunk columns between are left
    out), a blank line between sentences, -DOCSTART- lines skipped; a line of one field is a word
    without a tag (a test file's, all of them). Fields are apart by tabs where the line holds one, else
    by spaces (`_fields`)."""
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {path}")
    words: list[str] = []
    labels: list[str] = []
    start = 0
    text = decode_utf8(path.read_bytes(), path)
    for n, line in enumerate([*text.splitlines(), ""], start=1):
        fields = _fields(line, path, n)
        if fields and fields[0] == "-DOCSTART-":
            continue
        if not fields:
            if words:
                yield start, {tokens: words, tags: labels if labels else None}
            words, labels = [], []
            continue
        tagged = len(fields) > 1
        if (tagged and len(labels) != len(words)) or (not tagged and labels):
            raise InputError(path, "a word without a tag among tagged words (expected WORD ... TAG)", line=n)
        start = start if words else n
        words.append(fields[0])
        if tagged:
            labels.append(fields[-1])
    if not start:
        raise InputError(path, "empty file")


def _fields(line: str, path: Path, n: int) -> list[str]:
    """A CoNLL line's fields: between tabs where the line holds a tab, else between spaces.

    A line is one word and its one tag, so a word with a space inside ("New York<TAB>B-LOC") is kept
    whole: split on its space, "York" would have no tag of its own (and was dropped, leaving "New" with
    the line's tag). Kept as one word it is tokenized on its own, as every word is, and its first piece
    carries the tag; its tags stay aligned with the file's lines."""
    if "\t" not in line:
        return line.split()
    fields = [field.strip() for field in line.split("\t")]
    if not fields[0] and any(fields):
        raise InputError(path, "no word before the line's first tab (expected WORD<TAB>...<TAB>TAG)", line=n)
    return [field for field in fields if field]
