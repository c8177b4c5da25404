"""Files in and out, one way each: atomic writes (a file or a whole folder), JSON and JSONL reading with
errors that name the file and the line, and `InputError`, the error of bad input data.

Every stage writes through here, so a crash or a kill never leaves half a file or half a folder under
the final name. Standard library only: data workers import it without torch.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from albert_lm.hints import legacy_encoding_hint, more_fields


class InputError(ValueError):
    """Bad input data: names the file and, where known, the line and the field."""

    def __init__(self, path: str | os.PathLike, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self._parts = (path, message, line)
        self.path, self.message, self.line = path, message, line

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in a worker process, it must be rebuilt in the parent: pickling would otherwise call
        # the constructor with the formatted message alone, fail there, and lose the error.
        return (type(self), self._parts)


# --------------------------------------------------------------------------- where a command writes
def _resolved(path: str | os.PathLike) -> Path:
    return Path(path).expanduser().resolve()


def check_output_apart(
    output: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None], output_option: str = "--output"
) -> None:
    """Refuse an output that is one of the command's inputs, lies inside an input folder, or holds an
    input: writing there, or `--overwrite` clearing it, would change or delete what the user gave.
    `inputs` maps each input's option ("--data", "--model", ...) to its path (None: not given).
    Call it before anything is written or removed."""
    out = _resolved(output)
    for option, value in inputs.items():
        if value is None or str(value) in ("", "-"):
            continue
        given = _resolved(value)
        if out == given:
            raise ValueError(
                f"{output_option} {output} is the {option} {value}: choose another {output_option}"
            )
        if given in out.parents:
            raise ValueError(
                f"{output_option} {output} lies inside the {option} folder {value}: writing there would change "
                f"it; choose an {output_option} outside it"
            )
        if out in given.parents:
            raise ValueError(
                f"{output_option} {output} holds the {option} {value}: writing or overwriting there would change "
                f"or delete it; choose another {output_option}"
            )


def is_special_file(path: str | os.PathLike) -> bool:
    """Whether `path` exists and is neither a regular file nor a folder (a device, a pipe, a socket):
    such a target is written into as it is, never replaced by a rename."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    import stat

    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


# An open file of a process (/dev/stdout -> /proc/self/fd/1, /dev/fd/N): the folder its link lies in.
_FD_FOLDER = re.compile(r"/proc/[^/]+(/task/[^/]+)?/fd")


def output_target(path: str | os.PathLike) -> tuple[Path, bool]:
    """Where writing `path` lands, and whether it is a stream: (target, True) for a device, a pipe, a
    socket or an open file of the process (/dev/stdout, /dev/fd/N, however linked), which are written
    into as they are; (target, False) for a regular file or a new name, with every symbolic link
    followed, so that a rename replaces the file a link points to, never the link itself.

    The links are followed one at a time because /proc's fd links are not paths: when stdout is a file
    that was deleted (pytest's capture) or a pipe, resolving /proc/self/fd/1 gives a name that does not
    exist, and renaming onto that name would create a stray file instead of writing to stdout.
    """
    p = os.path.abspath(os.fspath(path))
    for _ in range(40):  # the system's own limit on links in a row
        parent = os.path.realpath(os.path.dirname(p))
        p = os.path.join(parent, os.path.basename(p))
        if _FD_FOLDER.fullmatch(parent):
            return Path(p), True
        if not os.path.islink(p):
            return Path(p), is_special_file(p)
        p = os.path.join(parent, os.readlink(p))
    raise OSError(errno.ELOOP, "too many levels of symbolic links", os.fspath(path))


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, option: str = "--output") -> Iterator[Path]:
    """Hold `folder` (made if missing) for this process while it writes there: a second albert command
    on the same folder is refused at once instead of mixing its files with this one's.

    An advisory lock (flock) on the folder itself: no file is left behind, and the system drops the
    lock when the process ends, so a crashed or killed run never leaves the folder locked. Where flock
    does not exist (Windows) or the file system has none, nothing is locked. A command that fails (an
    exception, Ctrl-C) leaves none of the folders made here (`folder` and its missing parents) where it
    wrote nothing into them.
    """
    folder = Path(folder)
    made = [f for f in (folder, *folder.parents) if not f.exists()]  # innermost first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with _flock(folder, option):
            yield folder
    except BaseException:
        for f in made:  # the cleanup never hides the cause: the error raised is the one that stopped it
            with contextlib.suppress(OSError):
                f.rmdir()  # refused where something is inside
        raise


@contextlib.contextmanager
def _flock(folder: Path, option: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FileExistsError(
                f"{option} {folder}: another albert command is writing there now; wait for it to end, or "
                f"choose another {option}"
            ) from None
        except OSError:  # a file system without locks: go on unlocked
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def check_not_busy(folder: str | os.PathLike, option: str = "--output") -> None:
    """Refuse a folder another albert command holds (`folder_lock`) before what it holds is judged: a run
    in progress is no "another run" to resume or overwrite (not for a folder this process holds)."""
    if Path(folder).is_dir():
        with _flock(Path(folder), option):
            pass


# --------------------------------------------------------------------------- writing
def atomic_write(path: str | os.PathLike, data: str | bytes, *, durable: bool = False) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    Readers see the old file or the new one, never half of one; a failed write leaves no temporary
    behind. `durable` also fsyncs the file and its folder (for what a resume depends on). A `path` that
    is a symbolic link is written through: its target is replaced, the link stays. A stream (a device,
    a pipe, a socket, an open file of the process such as /dev/stdout, `output_target`) is written into
    directly, at its end: renaming over it would replace the device, or the system's /dev/stdout link,
    with a regular file.
    """
    given = Path(path)
    if given.is_dir():
        raise IsADirectoryError(f"{given}: is a folder; expected a file name to write")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    target, stream = output_target(given)
    if stream:
        _write_stream(given, target, raw)
        return given
    if not given.is_symlink():  # a link's target folder must exist, as for the shell's `>`
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp gives 0600: every file we write would be private
            os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None and (not e.filename or e.filename == tmp):
            raise OSError(
                e.errno, e.strerror, str(given)
            ) from e  # a full disk or a size limit: name the file
        raise
    if durable:
        fsync_dir(target.parent)
    return given


def _write_stream(given: Path, target: Path, raw: bytes) -> None:
    """Write into a stream. One of this process's own open files (/dev/stdout) is written through that
    descriptor, at its offset, as the shell's `>` file expects; reopening its /proc link would start a
    second offset at 0 and overwrite what was written there before."""
    m = re.fullmatch(r"/proc/(\d+)(?:/task/\d+)?/fd/(\d+)", str(target))
    if m is None or int(m.group(1)) != os.getpid():
        with open(given, "ab") as f:  # a device, a pipe, a socket: no offset to keep
            f.write(raw)
        return
    fd = int(m.group(2))
    for stream in (sys.stdout, sys.stderr):  # what Python buffered for the same descriptor goes first
        with contextlib.suppress(Exception):
            if stream is not None and stream.fileno() == fd:
                stream.flush()
    with os.fdopen(os.dup(fd), "wb") as f:
        f.write(raw)


@functools.cache
def file_mode() -> int:
    """The mode `open()` gives a new file: 0o666 less the process umask (read once)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2, durable: bool = False) -> Path:
    """`obj` as indented, key-sorted JSON with a final newline, written atomically in UTF-8 (a label
    "Достоевский" reads as itself, not as \\u escapes)."""
    text = json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a path of bytes that are not UTF-8 (Linux keeps them escaped): as \u escapes
        text = json.dumps(obj, indent=indent, sort_keys=True) + "\n"
    return atomic_write(path, text, durable=durable)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename inside `folder` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike, *, tmp: str | os.PathLike | None = None) -> Iterator[Path]:
    """Fill a fresh temporary folder, then swap it in as `final` on success.

    `with atomic_folder(out / "best") as tmp: ...write into tmp...`. An earlier `final` is replaced only
    once the new one is complete; on an exception the temporary folder is removed and `final` is left
    as it was. `tmp` names the temporary folder (it must be beside `final`); by default `.NAME.tmp`.
    """
    given = final
    final, stream = output_target(final)  # a linked folder is replaced at its target; the link stays
    if stream:
        raise NotADirectoryError(f"{given}: is not a folder (a device, a pipe or an open file)")
    name = Path(tmp).name if tmp is not None else f".{final.name}.tmp"
    work = final.with_name(name)  # beside the target: the final rename stays within one file system
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        yield work
    except BaseException as e:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(e, OSError) and e.errno is not None:  # named as the user will look for it
            raise OSError(e.errno, e.strerror, _as_final(e.filename, work, Path(given))) from e
        raise
    shutil.rmtree(old, ignore_errors=True)
    try:  # a `final` that cannot be moved (a mount point, an immutable folder) keeps what it held
        if final.exists():
            os.replace(final, old)
        os.replace(work, final)
    except BaseException:  # also a second Ctrl-C between the two renames: the earlier `final` comes back
        shutil.rmtree(work, ignore_errors=True)
        if old.exists() and not final.exists():
            os.replace(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)
    fsync_dir(final.parent)


def _as_final(filename: Any, work: Path, final: Path) -> str:
    """A path inside the temporary folder `work` as it will be named once swapped in as `final` (the
    folder itself where the error names no file: a full disk, a size limit)."""
    if not filename:
        return str(final)
    name = Path(os.fsdecode(filename))
    return str(final / name.relative_to(work)) if name.is_relative_to(work) else str(name)


# --------------------------------------------------------------------------- reading
def decode_utf8(raw: bytes, name: str | os.PathLike) -> str:
    """`raw` as text (a BOM dropped); what is not UTF-8 is an InputError naming its line and byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        hint = legacy_encoding_hint(raw[max(0, e.start - 65536) : e.start + 65536], name)  # a sample's
        where = f"not UTF-8 (byte {e.start} of the file){hint}"
        raise InputError(name, where, line=raw[: e.start].count(b"\n") + 1) from None


def parse_json(text: str | bytes, name: str | os.PathLike, line: int | None = None) -> Any:
    """`json.loads` whose every error is an InputError naming the file (`name`) and the line: text that
    is not JSON, nesting too deep for the parser (which would otherwise raise RecursionError from deep
    inside the json module) and numbers too long to convert."""
    try:
        return json.loads(text.rstrip() if line is not None else text)  # a record cut short: named at its end
    except json.JSONDecodeError as e:
        where = line if line is not None else e.lineno
        raise InputError(name, f"not valid JSON (column {e.colno}): {e.msg}", line=where) from e
    except RecursionError:
        raise InputError(
            name, "not readable JSON: nested too deeply (over about 1,000 levels)", line=line
        ) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError(name, f"not readable JSON: {e}", line=line) from e


def read_json_object(path: str | os.PathLike, what: str = "JSON") -> dict[str, Any]:
    """A JSON file holding one object. Missing file: FileNotFoundError; empty, invalid JSON or another
    type: InputError naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte {e.start}); expected a JSON file") from None
    if not raw.strip():
        raise InputError(path, "empty file")
    obj = parse_json(raw, path)
    if not isinstance(obj, dict):
        of = "" if what == "JSON" else f" of {what}"
        raise InputError(path, f"expected a JSON object{of}, got {type(obj).__name__}")
    return obj


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines file; a line that is not a JSON
    object is an InputError naming the file and the line."""
    path = Path(path)
    with path.open(encoding="utf-8-sig") as f:  # a byte-order mark some editors write is not data
        yield from jsonl_rows(f, path)


def jsonl_rows(lines: Iterable[str], name: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """`iter_jsonl` on lines already read (stdin, a decoded buffer); `name` goes into the errors."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        obj = parse_json(line, name, line=n)
        if not isinstance(obj, dict):
            raise InputError(name, f"expected a JSON object, got {type(obj).__name__}", line=n)
        yield n, obj


def csv_rows(
    f: Iterable[str], name: str | os.PathLike, delimiter: str = ",", quotes: bool = True
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row keyed by the header) of CSV or TSV text (`quotes` False: a quote is text, as
    in GLUE's TSV files); a row's number is the line it starts on (a quoted field may span lines). A row
    with more fields than the header, a quote never closed, or a field over the csv module's limit
    (131,072 characters), is an InputError naming the line."""
    lines = _LineStarts(f)
    # strict: a quote never closed is an error at the end of the file, not one last field that swallows
    # every row after it (RFC 4180 lets a quoted field span lines)
    reader = csv.DictReader(
        lines, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if quotes else csv.QUOTE_NONE, strict=quotes
    )
    kind = "TSV" if delimiter == "\t" else "CSV"
    rows = iter(reader)
    while True:
        try:
            if reader.line_num == 0:
                _ = reader.fieldnames  # the header is read first: the rows are numbered after it
            lines.start = None
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as e:
            hint = "; is a quote left open?" if "field limit" in str(e) or "end of data" in str(e) else ""
            raise InputError(name, f"not readable as {kind}: {e}{hint}", line=lines.start) from None
        if None in row:
            raise InputError(name, more_fields(reader.fieldnames), line=lines.start)
        yield lines.start or reader.line_num, row


class _LineStarts:
    """The lines of a CSV text, numbered: `start` is the first line, not blank, read since it was last
    reset, where the record the reader returns next begins (the csv module counts to its record's end,
    and skips blank lines). By hand: the csv module tells only where a record ends."""

    def __init__(self, f: Iterable[str]) -> None:
        self.lines = iter(f)
        self.number = 0
        self.start: int | None = None

    def __iter__(self) -> _LineStarts:
        return self

    def __next__(self) -> str:
        line = next(self.lines)
        self.number += 1
        if self.start is None and line not in ("\n", "\r\n", "\r"):
            self.start = self.number
        return line


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def describe_folder(folder: str | os.PathLike, limit: int = 8) -> str:
    """The names in `folder`, for a message: "a, b/, c and 4 more" (folders end in /)."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in Path(folder).iterdir())
    shown = ", ".join(names[:limit]) or "nothing"
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def clear_folder(folder: str | os.PathLike) -> None:
    """Remove everything `folder` holds (`--overwrite`); the folder itself stays."""
    for p in Path(folder).iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
