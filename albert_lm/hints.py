"""What a refusal suggests: the path the user likely meant where the one typed does not exist, and the
conversion of a text file saved in an 8-bit encoding instead of UTF-8. Standard library only; every stage
that reads a user's path or text words its errors with these."""

from __future__ import annotations

import difflib
import os
import shlex
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

# 8-bit encodings a text that is not UTF-8 is most often in, each with the script its letters must be of
# to be taken for it (Windows' code pages for Western European and Cyrillic text, the older Cyrillic one).
# (Python's codec, iconv's name, the script)
LEGACY = (("cp1252", "CP1252", "LATIN"), ("cp1251", "CP1251", "CYRILLIC"), ("koi8_r", "KOI8-R", "CYRILLIC"))


def near_path(path: str | os.PathLike, folders_only: bool = False) -> str | None:
    """An existing file or folder beside `path` whose name is close to its own: the same but for case
    ("glue/sst-2" for glue/SST-2), else a near spelling (difflib); None where none is, or where the parent
    folder does not exist either."""
    path = Path(path)
    if not path.parent.is_dir():
        return None
    names = [p.name for p in path.parent.iterdir() if p.is_dir() or not folders_only]
    same = [n for n in names if n.lower() == path.name.lower()]
    close = same or difflib.get_close_matches(path.name, names, n=1, cutoff=0.8)
    return str(path.parent / close[0]) if close else None


def missing(option: str, path: str | os.PathLike) -> FileNotFoundError:
    """The error of an option's path that does not exist, with the near one that does where there is one."""
    near = near_path(path)
    meant = f"; did you mean {near}?" if near else ""
    return FileNotFoundError(f"{option} {path}: no such file or folder{meant}")


WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack")


def not_a_folder(path: Path, option: str = "--model") -> FileNotFoundError:
    """The error of an `option` path that should name a model folder but is a file (a weights file: the
    folder it lies in) or does not exist (the folder a near name names)."""
    if path.is_file():
        what = "a weights file" if path.suffix.lower() in WEIGHTS else "a file"
        way = (
            f"; give its folder, {option + ' ' if option.startswith('--') else ''}{path.parent}"
            if (path.parent / "config.json").is_file()
            else " (expected a folder with config.json and the weights)"
        )
        return FileNotFoundError(f"{option} {path}: {what}, not a model folder{way}")
    near = near_path(path, folders_only=True)
    meant = f"; did you mean {near}?" if near else ""
    return FileNotFoundError(f"no model at {path} ({option}: no such folder{meant})")


def separator_hint(columns: Sequence[str] | None) -> str:
    """For a CSV header read as one column holding a ';' or a tab: the separator the file seems to use
    instead of the comma, as "; ...". Excel writes "CSV" with semicolons where the comma is the decimal
    mark (German, French, ...); a tab-separated file is often named .csv. Else nothing."""
    if not columns or len(columns) != 1:
        return ""
    (only,) = columns
    if ";" in str(only):
        return "; is the file separated by ';'? Save it comma-separated, or tab-separated as .tsv"
    if "\t" in str(only):
        return "; is the file tab-separated? Name it .tsv, or save it comma-separated"
    return ""


def more_fields(columns: Sequence[str] | None) -> str:
    """The error of a CSV row with more fields than its header has columns, with `separator_hint`."""
    return "more fields than header columns" + separator_hint(columns)


def column_hint(option: str, name: str, columns: Sequence[str], taken: Iterable[str] = ()) -> str:
    """The message of column `name` (read by `option`) that a file's header lacks: the file's columns, and
    the option with the column likely meant (a near name, else the one column no other option reads:
    `taken`); for a header read as one column, the separator the file seems to use instead."""
    have = ", ".join(repr(str(c)) for c in columns[:12]) + (", ..." if len(columns) > 12 else "")
    message = f"{option} {name}: the file has no such column (its columns: {have or 'none'})"
    if hint := separator_hint(columns):
        return message + hint
    same = [c for c in columns if c.lower() == name.lower()]
    near = same or difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
    taken = set(taken)
    left = [c for c in columns if c not in taken]
    meant = near[0] if near else left[0] if len(left) == 1 else None
    return message + (
        f"; did you mean {option} {shlex.quote(meant)}?" if meant else f"; {option} NAME reads another"
    )


def legacy_encoding_hint(raw: bytes, name: str | os.PathLike) -> str:
    """For text that is not UTF-8 (`raw`, a sample of it): the 8-bit encoding it reads as, with the
    conversion to run; a plain note where none fits. Nothing for text mostly of real UTF-8 characters:
    that is damaged UTF-8. A guess, said as one (`_reads_as`)."""
    decoded = raw.decode("utf-8", "replace")
    if sum(ord(c) > 127 and c != "\ufffd" for c in decoded) >= decoded.count("\ufffd"):
        return ""
    fits = [
        (fit, iconv) for codec, iconv, script in LEGACY if (fit := _reads_as(raw, codec, script)) is not None
    ]
    if not fits:
        return "; it may be in an 8-bit encoding (CP1252, CP1251, ...): convert it to UTF-8 first"
    encoding = max(fits)[1]
    source = "FILE" if str(name) == "<stdin>" else str(name)
    return (
        f"; it reads as {encoding} text: convert it to UTF-8 first, e.g. "
        f'iconv -f {encoding} -t UTF-8 "{source}" > converted.txt'
    )


def _reads_as(raw: bytes, encoding: str, script: str) -> float | None:
    """How well `raw` reads in `encoding` (the share of its non-ASCII letters in lower case: text is mostly
    lower case, and Cyrillic read in the wrong Cyrillic code page comes out in capitals), or None where it
    does not: a byte the encoding lacks, a non-ASCII character that is neither a letter of `script` nor
    punctuation or a symbol, or letters in the wrong share. Accented Latin letters sit among ASCII ones (a
    few percent of a German or French text's letters; Cyrillic read as cp1252 is nearly all accented);
    Cyrillic text is nearly all non-ASCII."""
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        return None
    high = [c for c in text if ord(c) > 127]
    letters = [c for c in high if c.isalpha()]
    if any(script not in unicodedata.name(c, "") for c in letters) or any(
        not c.isalpha() and unicodedata.category(c)[0] not in "PSZ" for c in high
    ):
        return None
    share = len(letters) / max(1, len(letters) + sum(c.isascii() and c.isalpha() for c in text))
    if (share < 0.3) != (script == "LATIN") or (script != "LATIN" and not letters):
        return None
    return sum(c.islower() for c in letters) / max(1, len(letters))
