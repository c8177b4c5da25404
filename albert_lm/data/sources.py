"""Where pretraining text comes from: the `--input` paths expanded (files, folders, globs) and each file
opened as the bytes of its text, whatever it is stored in.

- Files, folders (every file under them, recursively, hidden ones left out, in sorted order) and glob
  patterns (`'books/**/*.txt'`, quoted so the shell leaves them to us: a shell's own expansion of many
  thousands of files can pass the system's argument limit).
- Plain text, also compressed: `.gz`, `.bz2`, `.xz` with the standard library, `.zst` with the
  `zstandard` package (the `[zstd]` extra). A compressed file reads as its decompressed bytes, so every
  offset (blocks, error messages) is an offset in the decompressed text.
- JSON Lines (`.jsonl`, `.ndjson`, `.json` holding one object per line; compressed too), a document per
  record in the field `--text-column`.
- Parquet (`.parquet`, the `[parquet]` extra: pyarrow): a document per row of the column `--text-column`.
  Its rows read as JSON Lines (`{"<column>": text}` a line), so the reader of records and the cutting into
  blocks are the ones of JSON Lines; a row's line number is the row's index plus one.

The readers seek into the decompressed stream: forward seeks decompress and drop, a backward one starts
over. A worker reads a file's blocks in order, so each process keeps a few streams open (`read_range`)
and decompresses a file about once, not once per block. Decompressing (hundreds of MB/s for gzip and
zstd) is far faster than tokenizing (a few MB/s per core), so no index of the compressed files is kept.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import io
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.files import InputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Block:
    """A byte range [start, end) of one file that begins and ends at a blank line (or the file's body)."""

    path: str
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


COMPRESSED = (".gz", ".bz2", ".xz", ".zst")
JSON_LINES = (".jsonl", ".ndjson", ".json")
PARQUET = (".parquet",)
# Optional packages: (module, the extra that installs it, what needs it)
_EXTRAS = {
    ".zst": ("zstandard", "zstd", "a .zst file"),
    ".parquet": ("pyarrow.parquet", "parquet", "a Parquet file"),
}
_GLOB_CHARS = frozenset("*?[")


def expand_inputs(inputs: Sequence[str | os.PathLike]) -> list[str]:
    """The files `inputs` name: a file as it is, a folder as every file under it (recursively; names
    starting with "." left out), a glob pattern (`*`, `?`, `[...]`, `**` for any depth) as the files it
    matches; folders and patterns in sorted order. A path that does not exist and matches nothing is
    an error naming it."""
    files: list[str] = []
    for given in inputs:
        text = os.fspath(given)
        path = Path(text)
        if path.is_dir():
            found = _walk(path)
            if not found:
                raise InputError(path, "folder holds no files (expected text files, JSON Lines or Parquet)")
            _say_if_not_text(path, found)
            files += found
        elif path.exists() or not _GLOB_CHARS & set(text):
            files.append(text)  # checked later with the other files (missing, empty, binary, ...)
        else:
            matched = sorted(glob.glob(text, recursive=True))
            if not matched:
                raise FileNotFoundError(f"{text}: no such input file (no file matches this pattern)")
            for m in matched:
                files += _walk(Path(m)) if Path(m).is_dir() else [m]
    return files


# Files a folder of text often holds beside it (a catalogue, a licence table, a page), which a folder given
# as input reads as text too: named in a warning, as the user may not know they are there.
NOT_TEXT = (".tsv", ".csv", ".md", ".html", ".htm", ".xml", ".yaml", ".yml", ".log", ".pdf", ".doc", ".docx")


def _say_if_not_text(folder: Path, found: list[str]) -> None:
    """A warning naming the files of `folder` whose names say they are tables, pages or documents."""
    odd = [f for f in found if Path(f).suffix.lower() in NOT_TEXT]
    if odd:
        shown = ", ".join(os.path.relpath(f, folder) for f in odd[:3]) + (", ..." if len(odd) > 3 else "")
        logger.warning(
            "%s: %d file(s) that look like tables or documents, not text (%s), are read as text with the "
            "rest; to leave them out, give the files or a pattern (e.g. '%s/**/*.txt')",
            folder, len(odd), shown, folder,
        )  # fmt: skip


def _walk(folder: Path) -> list[str]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
    return out


def compression(path: str | os.PathLike) -> str | None:
    """The compression suffix of `path` (".gz", ".bz2", ".xz", ".zst"), or None."""
    suffix = Path(path).suffix.lower()
    return suffix if suffix in COMPRESSED else None


def container(path: str | os.PathLike) -> str:
    """What a file holds: "parquet", "jsonl" (by its name, under any compression) or "text"."""
    name = Path(path).name.lower()
    if compression(name):
        name = name[: name.rfind(".")]
    suffix = Path(name).suffix
    if suffix in PARQUET:
        return "parquet"
    return "jsonl" if suffix in JSON_LINES else "text"


def is_records(path: str | os.PathLike) -> bool:
    """Whether `path` holds records (JSON Lines or Parquet) rather than running text."""
    return container(path) != "text"


class MissingExtra(ModuleNotFoundError, ValueError):
    """An optional package a file type needs is not installed. A ValueError too: the commands report it
    in one line, as they do bad input."""


def optional_module(suffix: str, path: str | os.PathLike = "") -> Any:
    """The optional package a file type needs, imported; else an error naming the file and the extra to
    install."""
    module, extra, what = _EXTRAS[suffix]
    try:
        return importlib.import_module(module)
    except ImportError:
        where = f"{path}: " if path else ""
        raise MissingExtra(
            f"{where}reading {what} needs the {module.split('.')[0]} package: pip install -e '.[{extra}]' in the "
            f"albert-lm clone (or pip install {module.split('.')[0]})"
        ) from None


# ----------------------------------------------------------------------------------------- opening
def open_bytes(path: str | os.PathLike, text_column: str = "text") -> io.BufferedIOBase:
    """A seekable binary stream of `path`'s text: the file itself, its decompressed bytes, or, for
    Parquet, its rows as JSON Lines of `text_column`. Errors of a damaged file name it."""
    p = Path(path)
    kind = container(p)
    if kind == "parquet":
        return io.BufferedReader(_Restartable(lambda: _parquet_lines(p, text_column)), 1 << 16)
    comp = compression(p)
    try:
        if comp is None:
            return open(p, "rb")
        if comp == ".gz":
            import gzip

            return gzip.open(p, "rb")
        if comp == ".bz2":
            import bz2

            return bz2.open(p, "rb")
        if comp == ".xz":
            import lzma

            return lzma.open(p, "rb")
        zstandard = optional_module(".zst", p)
        return io.BufferedReader(_Restartable(lambda: _zstd_chunks(zstandard, p)), 1 << 16)
    except Exception as e:
        if not _is_damage(e):
            raise
        raise InputError(p, f"damaged data, not readable as {_kind(p)} ({type(e).__name__}: {e})") from None


@contextlib.contextmanager
def reading(path: str | os.PathLike, text_column: str = "text") -> Iterator[io.BufferedIOBase]:
    """`open_bytes` as a context manager whose decompression errors name the file (a truncated or
    damaged archive shows itself only while it is read)."""
    f = open_bytes(path, text_column)
    try:
        with _damage_named(path):
            yield f
    finally:
        f.close()


@contextlib.contextmanager
def _damage_named(path: str | os.PathLike) -> Iterator[None]:
    try:
        yield
    except EOFError as e:
        raise InputError(path, f"the compressed file ends early: it is truncated ({e})") from None
    except Exception as e:
        if not _is_damage(e):
            raise
        raise InputError(
            path, f"damaged data, not readable as {_kind(path)} ({type(e).__name__}: {e})"
        ) from None


def _is_damage(e: Exception) -> bool:
    """Whether `e` is a decompressor's or pyarrow's complaint about the data (not a disk error)."""
    if type(e).__name__ in (
        "BadGzipFile",
        "LZMAError",
        "ZstdError",
        "ArrowInvalid",
        "ArrowIOError",
        "ArrowException",
    ):
        return True
    # zlib.error (a damaged deflate stream); bz2 says OSError("Invalid data stream") with no errno
    return type(e).__module__ == "zlib" or (type(e) is OSError and e.errno is None)


def _kind(path: str | os.PathLike) -> str:
    comp = compression(path)
    return {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}.get(comp or "", container(path))


def _zstd_chunks(zstandard: Any, path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        while chunk := reader.read(1 << 20):
            yield chunk


def _parquet_lines(path: Path, column: str) -> Iterator[bytes]:
    """The rows of `column` as JSON Lines, streamed a batch of rows at a time (memory: one row group's
    column, as pyarrow reads it)."""
    pq = optional_module(".parquet", path)
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's ArrowInvalid and friends: not a Parquet file
        raise InputError(path, f"not a readable Parquet file ({type(e).__name__}: {e})") from None
    names = pf.schema_arrow.names
    if column not in names:
        raise InputError(
            path,
            f"--text-column {column}: no such column (columns: {', '.join(names)}); pass --text-column NAME",
        )
    kind = str(pf.schema_arrow.field(column).type)
    if kind not in ("string", "large_string", "string_view"):
        raise InputError(path, f"--text-column {column}: column of {kind}, expected text (string)")
    for batch in pf.iter_batches(batch_size=1024, columns=[column]):
        values = batch.column(0).to_pylist()
        yield "".join(json.dumps({column: v}, ensure_ascii=False) + "\n" for v in values).encode()


class _Restartable(io.RawIOBase):
    """A read-only stream over chunks made by `start()`, seekable: forward by reading on, backward by
    starting over (what gzip's own files do; zstandard's reader and the Parquet rows cannot go back)."""

    def __init__(self, start: Callable[[], Iterator[bytes]]) -> None:
        self._start = start
        self._chunks = start()
        self._buf = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buf = chunk
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()  # the generator's own file closes now, not when it is collected
        super().close()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self._pos + offset}.get(whence)
        if target is None or target < 0:
            raise io.UnsupportedOperation("only forward seeks from the start or the current position")
        if target < self._pos:
            getattr(self._chunks, "close", lambda: None)()
            self._chunks, self._buf, self._pos = self._start(), b"", 0
        while self._pos < target:
            skipped = self.read(min(target - self._pos, 1 << 20))
            if not skipped:
                break
        return self._pos


# ----------------------------------------------------------------------------------------- reading
_OPEN: OrderedDict[tuple[str, str], io.BufferedIOBase] = OrderedDict()
_KEEP_OPEN = 4


def _forget_open() -> None:
    """In a forked child: drop the parent's streams (they share its file offsets)."""
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_open)


def read_range(path: str | os.PathLike, start: int, nbytes: int, text_column: str = "text") -> bytes:
    """Bytes [start, start + nbytes) of `path`'s text (`open_bytes`). Plain files are opened for each
    call; decompressed streams are kept open (a few per process), so reading a file's blocks in order
    decompresses it once."""
    if not is_streamed(path):
        with open(path, "rb") as plain:
            plain.seek(start)
            return plain.read(nbytes)
    key = (os.fspath(path), text_column)
    f = _OPEN.pop(key, None) or open_bytes(path, text_column)
    try:
        with _damage_named(path):
            f.seek(start)
            data = f.read(nbytes)
    except BaseException:
        f.close()
        raise
    _OPEN[key] = f
    while len(_OPEN) > _KEEP_OPEN:
        _OPEN.popitem(last=False)[1].close()
    return data


def close_streams() -> None:
    """Close the streams `read_range` keeps open."""
    while _OPEN:
        _OPEN.popitem()[1].close()


def is_streamed(path: str | os.PathLike) -> bool:
    """Whether `path`'s text is made while it is read (compressed or Parquet), not seekable in place."""
    return compression(path) is not None or container(path) == "parquet"


_SIZES: dict[tuple[str, int, int, str], int] = {}


def text_size(path: str | os.PathLike, text_column: str = "text") -> int:
    """Bytes of `path`'s text (decompressed; Parquet rows as JSON Lines): the file's size for a plain
    file, else one pass of reading, remembered for this process while the file is unchanged."""
    st = os.stat(path)
    if not is_streamed(path):
        return st.st_size
    key = (os.fspath(path), st.st_size, st.st_mtime_ns, text_column)
    if key not in _SIZES:
        size = 0
        with reading(path, text_column) as f:
            while chunk := f.read(1 << 20):
                size += len(chunk)
        _SIZES[key] = size
    return _SIZES[key]
