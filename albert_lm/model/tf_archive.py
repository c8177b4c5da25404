"""Unpacking a checkpoint tarball as untrusted input (`albert convert --from-tf ARCHIVE`).

tarfile's own filters (`data_filter`) refuse links out of the folder and absolute paths, but a checkpoint
archive holds plain files only, and an archive must also be refused before it fills the disk: each
member is checked at its header, before its bytes are written, against what the checkpoint's index says
its data files hold and against the archive's size. Messages about files unpacked here name the archive
and the member, never the temporary folder (`named_as_given`).
"""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from albert_lm.model.tf_bundle import CheckpointError, read_index, shard_ends

# checked at each member's header, before its bytes are unpacked: a data file may be no longer than its
# checkpoint's index says (where the index came first), and the whole no more than _EXPANSION times the
# archive (at least _FLOOR), nor more than the disk has free.
TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")
_EXPANSION = 16
_FLOOR = 512 << 20
_DISK_MARGIN = 256 << 20
_MAX_MEMBERS = 10_000  # google-research's archives hold fewer than ten


class _Unpacking:
    """What unpacking `archive` into `into` has written so far, and what it may still write."""

    def __init__(self, archive: Path, into: Path) -> None:
        self.archive, self.into = archive, into
        self.limit = max(_FLOOR, _EXPANSION * archive.stat().st_size)
        self.total = self.members = 0
        self.needs: dict[str, int] = {}  # a data member's path -> the bytes its index puts in it

    def admit(self, member: tarfile.TarInfo, path: str) -> None:
        """Refuse `member` (unpacked as `path`) before its bytes are read if it passes a bound."""
        self.members += 1
        if self.members > _MAX_MEMBERS:
            raise CheckpointError(self.archive, f"over {_MAX_MEMBERS:,} members: not a checkpoint archive")
        need = self.needs.get(path)
        if need is not None and member.size > need:
            raise CheckpointError(
                self.archive,
                f"member {member.name!r} holds {member.size:,} bytes, but its "
                f"checkpoint's index puts only {need:,} there: a damaged archive",
            )
        self.total += member.size
        if self.total > self.limit:
            raise CheckpointError(
                self.archive,
                f"member {member.name!r} ({member.size:,} bytes) takes what the "
                f"archive unpacks to past {self.limit:,} bytes, {_EXPANSION} times its "
                "size: no checkpoint compresses that well (a gzip bomb?); nothing was "
                "unpacked past the bound",
            )
        free = shutil.disk_usage(self.into).free - _DISK_MARGIN
        if member.size > free:
            raise OSError(
                f"{self.archive}: member {member.name!r} needs {member.size:,} bytes to unpack, "
                f"and the disk of --output has {max(free, 0):,} free (less a margin)"
            )

    def learn(self, path: str, target: Path) -> None:
        """Note what an index member says its data files hold (a damaged index is named later, when the
        checkpoint is opened)."""
        if not path.endswith(".index"):
            return
        try:
            num_shards, entries = read_index(target)
        except CheckpointError:
            return
        prefix = path.removesuffix(".index")
        for shard, entry in shard_ends(entries).items():
            self.needs[f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"] = entry.offset + entry.size


def _member_path(archive: Path, member: tarfile.TarInfo) -> str | None:
    """Where a plain-file member goes inside the unpacked folder (None for a folder). What a checkpoint
    archive never holds is refused, naming the member: links, devices and pipes, and paths that are
    absolute or climb out with `..` (nothing is ever written outside the folder)."""
    name = member.name
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if name.startswith(("/", "\\")) or ".." in parts or re.match(r"[A-Za-z]:", name):
        raise CheckpointError(
            archive,
            f"member {name!r}: an absolute path, or one climbing out with '..'; "
            "a checkpoint archive holds relative paths only",
        )
    if member.issym() or member.islnk():
        kind = "symbolic" if member.issym() else "hard"
        raise CheckpointError(
            archive,
            f"member {name!r} is a {kind} link (to {member.linkname!r}); a "
            "checkpoint archive holds plain files only",
        )
    if member.isdir():
        return None
    if not member.isfile() or not parts:
        kind = "a pipe (FIFO)" if member.isfifo() else "a device" if member.isdev() else "not a plain file"
        raise CheckpointError(
            archive, f"member {name!r} is {kind}; a checkpoint archive holds plain files only"
        )
    return "/".join(parts)


@contextlib.contextmanager
def _reading(
    archive: Path, what: str = "not a readable tar archive (truncated or damaged?)"
) -> Iterator[None]:
    """Errors of reading the archive (not of writing what it holds) as one line naming the archive."""
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as e:
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(":")
        raise CheckpointError(archive, f"{what}: {detail}") from e


def extract(tarball: Path, into: Path) -> Path:
    """The tarball's plain files under `into`, within the bounds of `_Unpacking`; anything else a
    member may be is refused (`_member_path`)."""
    unpacking = _Unpacking(tarball, into)
    with contextlib.ExitStack() as stack:
        with _reading(tarball, "not a tar archive (plain, or compressed by gzip, bzip2 or xz)"):
            tar = stack.enter_context(tarfile.open(tarball, "r:*"))
        while True:
            with _reading(tarball):
                member = tar.next()
            if member is None:
                return into
            path = _member_path(tarball, member)
            if path is None:
                continue
            unpacking.admit(member, path)
            _unpack(tar, member, tarball, into / path)
            unpacking.learn(path, into / path)


def _unpack(tar: tarfile.TarFile, member: tarfile.TarInfo, tarball: Path, target: Path) -> None:
    """One plain-file member into `target`, a megabyte at a time; an error writing it (a full disk) is
    the machine's, raised as it is."""
    with contextlib.ExitStack() as stack:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(open(target, "wb"))
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as e:
            raise CheckpointError(
                tarball, f"member {member.name!r}: its path clashes with another member's ({e.strerror})"
            ) from None
        with _reading(tarball):
            source = tar.extractfile(member)
        assert source is not None  # a plain file
        while True:
            with _reading(tarball):
                chunk = source.read(1 << 20)
            if not chunk:
                return
            out.write(chunk)


@contextlib.contextmanager
def named_as_given(scratch: Path, archive: Path) -> Iterator[None]:
    """Messages about files of an unpacked archive name the archive and the member
    (`albert.tar.gz:albert_base/model.ckpt-best.index`), not the temporary folder they were unpacked
    into, which is gone by the time the message is read."""
    try:
        yield
    except (ValueError, OSError) as e:
        if str(scratch) not in str(e):
            raise

        def named(text: str) -> str:
            return text.replace(f"{scratch}{os.sep}", f"{archive}:").replace(str(scratch), str(archive))

        if isinstance(e, OSError) and e.filename is not None:
            raise OSError(e.errno, e.strerror, named(str(e.filename))) from None
        e.args = (named(str(e)),)
        raise
