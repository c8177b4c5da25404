"""Input rows and output lines of the deploy commands (`predict`, `fill-mask`, `embed`), one way each.

Input: plain text (one text per line) or JSON Lines, blank lines skipped and counted (a file often ends in
one or separates paragraphs), or CSV / TSV with a header; `-` reads stdin. A row's fields
are read through `Fields`, whose errors name the input's line and the column. `--keep-columns` copies
named input columns into each output line (an id, say), checked against the fields the command writes
itself. Output: JSON Lines written under a temporary name and renamed (a failed run leaves none), or
stdout for `-`. Standard library only: the command line reads none of this until a command runs.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, TypeVar

from albert_lm.files import InputError, atomic_write, check_output_apart, csv_rows, decode_utf8, jsonl_rows
from albert_lm.hints import missing, separator_hint
from albert_lm.tasks.token_classification import words_of

logger = logging.getLogger(__name__)
T = TypeVar("T")

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclass
class Input:
    """The rows of one input, each with its line number."""

    name: str  # for messages: the file, or <stdin>
    rows: list[tuple[int, dict[str, Any]]]
    blank_lines: int  # plain-text or JSON Lines lines left out: they held nothing but whitespace


def read_input(source: str, fmt: str) -> Input:
    """(line number, row) of the input: plain lines become {"text": line} (blank ones are skipped and
    counted); CSV/TSV rows are keyed by the header; JSON Lines rows are the objects."""
    name = "<stdin>" if source == "-" else source
    if fmt == "auto":
        fmt = FORMATS.get(Path(source).suffix.lower(), "lines") if source != "-" else "lines"
    if source != "-" and Path(source).is_dir():
        raise IsADirectoryError(
            f"--input {source}: is a folder; expected one file (a text a line, CSV, TSV or JSON Lines)"
        )
    if source != "-" and not Path(source).is_file():
        raise missing("--input", source)
    text = decode_utf8(sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes(), name)
    found = _rows_of(text, name, fmt)
    if not found.rows:
        raise _no_texts(name, text, fmt)
    return found


def _rows_of(text: str, name: str, fmt: str) -> Input:
    """`read_input`'s rows of the input's text, in format `fmt` (lines, csv, tsv or jsonl)."""
    if fmt == "lines":
        lines = list(enumerate(text.splitlines(), start=1))
        rows = [(n, {"text": line}) for n, line in lines if line.strip()]
        return Input(name, rows, len(lines) - len(rows))
    if fmt in ("csv", "tsv"):
        # TSV as GLUE and most tools write it: tabs separate, quotes are text; CSV: RFC 4180 quoting
        tsv = fmt == "tsv"
        found = csv_rows(io.StringIO(text, newline=""), name, "\t" if tsv else ",", quotes=not tsv)
        return Input(name, list(found), 0)
    records = text.splitlines()
    return Input(name, list(jsonl_rows(records, name)), sum(1 for line in records if not line.strip()))


def _no_texts(name: str, text: str, fmt: str) -> InputError:
    """The error of an input without a row to read: empty, only blank lines, or a CSV header alone."""
    stdin = name == "<stdin>"
    if not text.strip():
        what = ("nothing came in" if stdin else "an empty file") if not text else "only blank lines"
    else:
        what = "a header without rows" if fmt in ("csv", "tsv") else "no rows"
    way = (
        "pipe in texts, one a line"
        if stdin
        else "give a file of texts, one a line (or rows of CSV or JSON Lines)"
    )
    return InputError(name, f"no texts in it ({what}), so nothing is written; {way}")


def all_left_out(name: str, skipped: Sequence[str]) -> InputError:
    """The error of an input whose every row was bad and left out (--skip-bad): nothing would be written."""
    return InputError(
        name,
        f"no texts left: all {len(skipped)} rows were bad and left out (--skip-bad); the first: {skipped[0]}",
    )


class Fields:
    """Field access that names the input's line and column on a bad value."""

    def __init__(self, name: str) -> None:
        self.name = name

    def absent(self, row: dict[str, Any], column: str, line: int, way: str = "") -> InputError:
        """The error of a row without `column`: the row's columns, `way` (the option that reads another),
        and for a CSV of ';' or tabs read as one column, its separator."""
        found = ", ".join(repr(str(c)) for c in list(row)[:8]) or "none"
        message = (
            f"missing or empty column {column!r} (the row's columns: {found}{'; ' + way if way else ''})"
        )
        return InputError(self.name, message + separator_hint(list(row)), line=line)

    def text(self, row: dict[str, Any], column: str, line: int, option: str = "") -> str:
        """The text in `column`; a row without that column is refused naming the row's columns (and
        `option`, the command's option that names the column to read)."""
        value = row.get(column)
        if column not in row:
            raise self.absent(row, column, line, f"{option} NAME reads another" if option else "")
        if value is None or (isinstance(value, str) and not value.strip()):
            raise InputError(self.name, f"missing or empty column {column!r}", line=line)
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InputError(
                self.name, f"column {column!r}: expected text, got {type(value).__name__}", line=line
            )
        return str(value)

    def optional(self, row: dict[str, Any], column: str, line: int, option: str = "") -> str | None:
        value = row.get(column)
        return None if value is None or value == "" else self.text(row, column, line, option)

    def strings(self, row: dict[str, Any], column: str, line: int) -> list[str]:
        value = row.get(column)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):  # not JSON, nested too deeply, a number too long
                raise InputError(self.name, f"column {column!r}: expected a JSON list", line=line) from None
        if not isinstance(value, list) or not value:
            raise InputError(self.name, f"column {column!r}: expected a non-empty list of texts", line=line)
        bad = next(((k, v) for k, v in enumerate(value, 1) if not isinstance(v, str) or not v.strip()), None)
        if bad is not None:
            raise InputError(
                self.name,
                f"column {column!r}: item {bad[0]} is {json.dumps(bad[1])}, expected a text",
                line=line,
            )
        return value

    def words(self, row: dict[str, Any], column: str, line: int) -> list[str]:
        """A token classifier's words, read as fine-tuning reads them (`words_of`): a list (JSON Lines), a
        cell holding a JSON list, or a cell's words separated by spaces; a Python list's printed form is
        refused."""
        words = words_of(row.get(column), column, self.name, line)
        if not words:
            raise InputError(self.name, f"column {column!r}: no words", line=line)
        return words

    def kept(self, row: dict[str, Any], columns: Sequence[str], line: int) -> dict[str, Any]:
        """The `--keep-columns` values of a row, as they are (a JSON Lines value keeps its type)."""
        for column in columns:
            if column not in row:
                raise InputError(self.name, f"no column {column!r} to keep (--keep-columns)", line=line)
        return {column: row[column] for column in columns}


def parse_columns(value: str | None, written: Iterable[str]) -> list[str]:
    """The column names of `--keep-columns A,B` (none for None), each once; a name the command writes
    itself (`written`: "label", "embedding", ...) is refused, as the copy would replace it."""
    if value is None:
        return []
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise ValueError(
            f"--keep-columns {value!r}: expected column names separated by commas, e.g. id,source"
        )
    clash = sorted(set(names) & set(written))
    if clash:
        raise ValueError(
            f"--keep-columns {value}: the output has {'fields' if len(clash) > 1 else 'a field'} of its own named "
            f"{', '.join(clash)} (it writes {', '.join(written)}); rename the input column (e.g. gold_{clash[0]})"
        )
    return list(dict.fromkeys(names))


def with_kept(record: dict[str, Any], kept: dict[str, Any]) -> dict[str, Any]:
    """The record with the kept columns right after its line number."""
    if not kept:
        return record
    head = {"line": record["line"]} if "line" in record else {}
    return {**head, **kept, **{k: v for k, v in record.items() if k != "line"}}


# Output names whose suffix says another format than the JSON Lines the deploy commands write: a .csv of
# JSON lines is one broken column to a spreadsheet or pandas.read_csv, a .json one fails json.load, a .gz
# one is not compressed. Refused before anything is read, rather than written and noticed later.
OTHER_FORMATS = {
    ".csv": "CSV",
    ".tsv": "TSV",
    ".json": "one JSON document",
    ".parquet": "Parquet",
    ".xlsx": "Excel",
    ".npy": "NumPy",
    ".npz": "a NumPy archive",
    ".pt": "a torch file",
    ".pkl": "a pickle",
    ".pickle": "a pickle",
    ".h5": "HDF5",
    ".hdf5": "HDF5",
    ".feather": "Feather",
    ".arrow": "Arrow",
    ".gz": "gzip-compressed",
    ".bz2": "bzip2-compressed",
    ".xz": "xz-compressed",
    ".zst": "zstd-compressed",
    ".zip": "a zip archive",
}


def check_output(
    output: str, inputs: dict[str, str | Path | None], command: str, allowed: Sequence[str] = ()
) -> None:
    """Checked before anything is read: writing the output must never replace an input or the model,
    and its name must not promise another format than the JSON Lines `command` writes (or a suffix in
    `allowed`, such as embed's .npy)."""
    if output == "-":
        return
    check_output_apart(output, inputs)
    if Path(output).is_dir():
        raise IsADirectoryError(f"--output {output}: is a folder; expected a file name to write")
    path = PurePath(output)
    suffix = path.suffix.lower()
    other = OTHER_FORMATS.get(suffix) if suffix not in allowed else None
    if other is not None:
        stem = path.with_suffix("")
        name = stem.with_suffix(".jsonl") if stem.suffix.lower() != ".jsonl" else stem
        also = "".join(f", a {s} name" for s in allowed)
        raise ValueError(
            f"--output {output}: {command} writes JSON Lines (one JSON object a line), not {other}; "
            f"name it {name}{also}, or give - for stdout"
        )


def write_output(output: str, body: str | bytes) -> None:
    """`body` to stdout (`-`) or, atomically, to the file `output`."""
    if output == "-":
        # UTF-8 whatever the terminal's locale, as the files are: a cp1252 or ASCII stdout (Windows, LANG=C)
        # could not take a Cyrillic or Chinese text, and JSON Lines are UTF-8
        buffer = getattr(sys.stdout, "buffer", None)  # none in a notebook or under redirect_stdout(StringIO)
        if buffer is None:
            sys.stdout.write(body if isinstance(body, str) else body.decode("utf-8"))
        else:
            sys.stdout.flush()
            buffer.write(body if isinstance(body, bytes) else body.encode("utf-8"))
            buffer.flush()
        return
    try:
        atomic_write(output, body)
    except OSError as e:  # a full disk or device, a closed pipe: the message names the output
        if e.filename or e.errno is None:
            raise
        raise OSError(e.errno, f"--output: writing failed: {e.strerror}", output) from e


def jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


@dataclass
class Texts:
    """The texts of `fill-mask` and `embed`, with their line numbers and kept columns."""

    name: str
    lines: list[int]
    texts: list[str]
    kept: list[dict[str, Any]]
    blank_lines: int
    skipped: list[str] = field(default_factory=list)  # messages of the bad rows left out (skip_bad)

    def report(self, error: InputError) -> None:
        """A bad row left out (--skip-bad): said on stderr and counted."""
        self.skipped.append(str(error))
        logger.warning("skipped: %s", error)

    def checked(self, check: Callable[[str, int], T], skip_bad: bool) -> list[T]:
        """`check(text, line)` of each text; a text it refuses (an InputError) stops the run, or, under
        `skip_bad`, is left out (with its line and kept columns) and reported."""
        results, good = [], []
        for i, (text, line) in enumerate(zip(self.texts, self.lines, strict=True)):
            try:
                results.append(check(text, line))
            except InputError as e:
                if not skip_bad:
                    raise
                self.report(e)
                continue
            good.append(i)
        if not good and self.skipped:
            raise all_left_out(self.name, self.skipped)
        self.lines = [self.lines[i] for i in good]
        self.texts = [self.texts[i] for i in good]
        self.kept = [self.kept[i] for i in good]
        return results


def given_rows(
    source: str | None, given: Sequence[str] | None, fmt: str, column: str, keep: Sequence[str]
) -> Input:
    """The rows of `--input` or of `--text` given once or more (numbered 1, 2, ... in messages and as
    their line, each the row {column: text}): one of the two, never both."""
    if source is not None and given:
        raise ValueError("give --input FILE or --text TEXT, not both")
    if source is None and not given:
        raise ValueError("no texts: give --input FILE (- for stdin) or --text TEXT (once or more)")
    if not given:
        assert source is not None
        return read_input(source, fmt)
    if keep:
        raise ValueError("--keep-columns copies columns of an --input file; --text has none")
    for n, text in enumerate(given, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # bytes the terminal's locale could not decode (Python keeps them escaped)
            raise ValueError(
                f"--text {n}: not readable text: the terminal sent bytes that are not "
                f"{sys.getfilesystemencoding()}; set the terminal and the locale to UTF-8 (LANG=C.UTF-8), or "
                "put the texts in a UTF-8 file for --input"
            ) from None
    return Input("--text", [(n, {column: text}) for n, text in enumerate(given, start=1)], 0)


def read_texts(
    source: str | None,
    given: Sequence[str] | None,
    fmt: str,
    column: str,
    keep: Sequence[str],
    skip_bad: bool = False,
) -> Texts:
    """The texts of `--input` (one column of its rows) or of `--text` given once or more (numbered 1, 2,
    ... in messages and as their line); a row without its text stops here, or is left out and reported
    under `skip_bad`."""
    found = given_rows(source, given, fmt, column, keep)
    fields = Fields(found.name)
    texts = Texts(found.name, [], [], [], found.blank_lines)
    for line, row in found.rows:
        try:
            text, kept = fields.text(row, column, line, "--text-column"), fields.kept(row, keep, line)
        except InputError as e:
            if not skip_bad:
                raise
            texts.report(e)
            continue
        texts.lines.append(line)
        texts.texts.append(text)
        texts.kept.append(kept)
    if not texts.texts and texts.skipped:
        raise all_left_out(texts.name, texts.skipped)
    return texts


__all__ = [
    "Fields",
    "all_left_out",
    "given_rows",
    "Input",
    "Texts",
    "check_output",
    "jsonl",
    "parse_columns",
    "read_input",
    "read_texts",
    "with_kept",
    "write_output",
]
