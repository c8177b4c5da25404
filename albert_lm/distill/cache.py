"""The teacher cache: a teacher's outputs for a list of texts, computed once and kept on disk.

On a CPU the teacher's forward passes cost more than the student's training, so `albert distill` fills
the cache first (with progress; a killed fill goes on where it stopped) and trains from it; a second run,
or another student on the same text, runs no teacher at all.

Layout: one folder per (teacher, texts) under the cache root (`--cache DIR`; default
$ALBERT_LM_CACHE_DIR/distill, else ~/.cache/albert-lm/distill):

    CACHE/<kind>-<key>/
        meta.json      teacher name and fingerprint, what it holds, rows x width, dtype, texts digest
        values.npy     (rows, width) float16 (sentence vectors) or float32 (logits), a memory map
        progress.json  {"chunks_done": k, "teacher_s": t, "chunk_sha256": [...]}: rows [0, k x CHUNK) are
                       written and flushed, in t seconds of the teacher's time, each chunk's rows with the
                       checksum they had when written

`key` hashes the teacher's fingerprint (its weights, tokenizer and pooling: `albert_lm.distill.teacher`)
with the digest of the texts, each text in order. Rows are filled a chunk at a time, each chunk's texts
sorted by length so batches carry little padding (the teacher's cost falls by half on books' sentences),
and `progress.json` is rewritten only after the chunk's rows are flushed: a kill loses at most one chunk.
Memory stays bounded: values live in the memory map, a batch of texts at a time goes through the teacher.

An entry is trusted only as far as it is as written: before it is read, its record must name this
teacher (its fingerprint: the folder's key alone is no proof, a cache may be copied or renamed by hand)
and describe the texts, and every chunk must have its recorded checksum. An entry of another teacher, or
of no teacher recorded, is computed again from its first row; one edited since (a file truncated,
replaced or damaged, its record changed) from its first chunk that differs; either with a warning naming
what differs. One command fills an entry at a time (a lock on its folder): another run on the same
teacher and texts waits, then reads what the first wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.files import folder_lock, read_json_object, write_json
from albert_lm.progress import progress_bar, say_kept

logger = logging.getLogger(__name__)

CHUNK = 2048  # rows per unit of fill progress: minutes of teacher time at most on a 2-core CPU
META, VALUES, PROGRESS = "meta.json", "values.npy", "progress.json"
FORMAT_VERSION = 2  # 2: each chunk's checksum recorded
LOCK_WAIT_S = 2.0  # between looks at an entry another command is filling

Text = str | tuple[str, str | None]


def default_cache_dir() -> Path:
    """$ALBERT_LM_CACHE_DIR/distill if set, else ~/.cache/albert-lm/distill."""
    root = os.environ.get("ALBERT_LM_CACHE_DIR")
    return Path(root) / "distill" if root else Path.home() / ".cache" / "albert-lm" / "distill"


def texts_digest(texts: Sequence[Text]) -> str:
    """A hash of the texts in order (a pair hashed as both texts); the same list gives the same digest."""
    h = hashlib.sha256()
    for t in texts:
        a, b = (t, None) if isinstance(t, str) else t
        h.update(a.encode("utf-8", "surrogatepass") + b"\x1f")
        h.update((b"\x00" if b is None else b.encode("utf-8", "surrogatepass")) + b"\x1e")
    return h.hexdigest()


def chunk_sha256(values: np.ndarray, chunk: int) -> str:
    """The checksum of one chunk's rows as they are on disk."""
    rows = np.ascontiguousarray(values[chunk * CHUNK : (chunk + 1) * CHUNK])
    return hashlib.sha256(rows.tobytes()).hexdigest()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


class TeacherCache:
    """One (teacher, texts) entry: `fill` computes what is missing, `values` reads it."""

    def __init__(
        self,
        root: str | os.PathLike,
        kind: str,
        teacher_key: str,
        texts: Sequence[Text],
        width: int,
        dtype: str,
        describe: dict[str, Any],
    ) -> None:
        if Path(root).exists() and not Path(root).is_dir():
            raise NotADirectoryError(f"--cache {root}: exists and is not a folder")
        self.texts, self.width, self.dtype = texts, width, np.dtype(dtype)
        digest = texts_digest(texts)
        key = hashlib.sha256(
            f"{FORMAT_VERSION}\n{teacher_key}\n{digest}\n{width}\n{dtype}".encode()
        ).hexdigest()
        self.folder = Path(root) / f"{kind}-{key[:24]}"
        self.meta = {
            **describe,
            "kind": kind,
            "teacher_fingerprint": teacher_key,
            "texts_sha256": digest,
            "rows": len(texts),
            "width": width,
            "dtype": self.dtype.name,
            "format": FORMAT_VERSION,
        }
        self._checked: tuple[tuple[Any, ...], int] | None = None  # (the files' stat, chunks verified)

    @property
    def chunks(self) -> int:
        return -(-len(self.texts) // CHUNK)

    def chunks_done(self) -> int:
        """Chunks whose rows are on disk as they were written: the record describes these texts and
        each chunk's rows have the checksum recorded when they were written. An entry edited since (a
        file truncated or replaced, its record changed) counts up to its first chunk that differs, and
        the fill computes the rest again (0 for an entry not started)."""
        state = self._files_state()
        if self._checked is None or self._checked[0] != state:
            done, problem = self._verify()
            if problem:
                logger.warning(
                    "teacher cache %s: %s; its teacher outputs from row %d are computed again",
                    self.folder,
                    problem,
                    done * CHUNK,
                )
            self._checked = (state, done)
        return self._checked[1]

    def _files_state(self) -> tuple[Any, ...]:
        """What changes when a file of the entry does (its inode, size and time), to verify it once."""
        state: list[tuple[int, int, int] | None] = []
        for name in (META, PROGRESS, VALUES):
            try:
                st = os.stat(self.folder / name)
                state.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                state.append(None)
        return tuple(state)

    def _verify(self) -> tuple[int, str | None]:
        """(the chunks that are as written, what differs: None where nothing does)."""
        if not (self.folder / META).exists() and not (self.folder / PROGRESS).exists():
            return 0, None  # not started
        try:
            meta = read_json_object(self.folder / META, "teacher cache record")
            progress = read_json_object(self.folder / PROGRESS, "teacher cache progress")
        except (OSError, ValueError) as e:
            return 0, f"its record does not read ({_one_line(e)})"
        if (
            meta.get("teacher_fingerprint") != self.meta["teacher_fingerprint"]
            or meta.get("kind") != self.meta["kind"]
        ):
            return 0, self._another_teacher(meta)
        changed = [
            k for k in ("texts_sha256", "rows", "width", "dtype", "format") if meta.get(k) != self.meta[k]
        ]
        if changed:
            return 0, f"{META} does not describe these texts ({', '.join(changed)})"
        done, sums = progress.get("chunks_done"), progress.get("chunk_sha256")
        if (
            not isinstance(done, int)
            or not isinstance(sums, list)
            or not 0 <= done == len(sums) <= self.chunks
        ):
            return 0, f"{PROGRESS} is not as it was written"
        if not done:
            return 0, None
        values, problem = self._read_values()
        if values is None:
            return 0, problem
        for chunk in range(done):
            if chunk_sha256(values, chunk) != sums[chunk]:
                end = min((chunk + 1) * CHUNK, len(self.texts))
                return chunk, f"{VALUES}: rows {chunk * CHUNK}-{end - 1} differ from what was written"
        return done, None

    def _another_teacher(self, meta: dict[str, Any]) -> str:
        """Why an entry whose record names another teacher (or none: a cache copied by hand, or written
        before the record was compared) is not this teacher's outputs, though its shape may be theirs."""
        theirs = meta.get("teacher_fingerprint")
        if not isinstance(theirs, str) or not theirs:
            return f"{META} records no teacher fingerprint, so its outputs may be any teacher's"
        ours = self.meta["teacher_fingerprint"]
        if theirs != ours:
            return (
                f"{META} records the outputs of another teacher (fingerprint {theirs[:20]}, this teacher's "
                f"{ours}: its config, weights, tokenizer or pooling differ)"
            )
        return f"{META} records {meta.get('kind')!r} outputs, not {self.meta['kind']!r}"

    def _read_values(self) -> tuple[np.ndarray | None, str]:
        """The values file as a read-only memory map, or (None, why it is not the file written)."""
        path = self.folder / VALUES
        if path.is_symlink() or not path.is_file():
            return None, f"{VALUES} is not the file written there"
        try:
            values = np.load(path, mmap_mode="r")  # never unpickles (allow_pickle stays off)
        except (OSError, ValueError, EOFError) as e:
            return None, f"{VALUES} does not read ({_one_line(e)})"
        expected = (len(self.texts), self.width)
        if not isinstance(values, np.ndarray) or values.shape != expected or values.dtype != self.dtype:
            return None, f"{VALUES} is not the {expected[0]} x {expected[1]} {self.dtype.name} array written"
        return values, ""

    def complete(self) -> bool:
        return self.chunks_done() == self.chunks

    def teacher_seconds(self) -> float:
        """The teacher's time spent filling the entry so far (all runs that filled it): its speed on these
        texts, on the machine that filled it, is rows / this."""
        try:
            seconds = read_json_object(self.folder / PROGRESS, "teacher cache progress").get("teacher_s", 0.0)
        except (OSError, ValueError):
            return 0.0
        return float(seconds) if isinstance(seconds, int | float) and math.isfinite(seconds) else 0.0

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The entry for this process alone while it fills it. Another command filling the same entry
        (the same teacher on the same texts) is waited for, and what it wrote is then read, not
        computed again: two runs sharing a cache never write one file at once."""
        if self.folder.exists() and not self.folder.is_dir():
            raise NotADirectoryError(
                f"--cache: {self.folder}: not a folder (the teacher cache keeps one there)"
            )
        with contextlib.ExitStack() as held:
            told = False
            while True:
                try:
                    held.enter_context(folder_lock(self.folder, "--cache"))
                    break
                except FileExistsError:
                    if not told:
                        logger.warning(
                            "teacher cache %s: another albert command is filling it; waiting for it "
                            "to finish",
                            self.folder,
                        )
                        told = True
                    time.sleep(LOCK_WAIT_S)
            yield

    def fill(
        self,
        compute: Callable[[list[Any]], np.ndarray],
        batch_size: int,
        lengths: Sequence[int] | None = None,
        desc: str = "teacher",
        progress: bool = True,
    ) -> np.ndarray:
        """Compute the missing rows with `compute(texts of one batch) -> (batch, width)`; returns the
        values (read-only memory map). `lengths` (e.g. characters per text) orders each chunk's batches."""
        with self._lock():
            done = self.chunks_done()
            if done == self.chunks:
                logger.info(
                    "teacher cache %s: complete (%d rows), no teacher forward", self.folder, len(self.texts)
                )
                return self.values()
            self._fill_from(done, compute, batch_size, lengths, desc, progress)
        return self.values()

    def _fill_from(
        self,
        done: int,
        compute: Callable[[list[Any]], np.ndarray],
        batch_size: int,
        lengths: Sequence[int] | None,
        desc: str,
        progress: bool,
    ) -> None:
        """Chunks `done`.. computed, each recorded (its checksum, the teacher's time) once flushed. An
        entry left with no chunk by an error is removed."""
        values = self._open(done)
        sums = self._recorded_sums(done)
        rows_done = min(done * CHUNK, len(self.texts))
        if done:
            logger.info(
                "teacher cache %s: %d of %d rows there, filling the rest",
                self.folder,
                rows_done,
                len(self.texts),
            )
        bar = progress_bar(show=progress, total=len(self.texts), initial=rows_done, desc=desc, unit="text")
        seconds = start = self.teacher_seconds() if done else 0.0
        try:
            for chunk in range(done, self.chunks):
                t0 = time.perf_counter()
                self._fill_chunk(values, chunk, compute, batch_size, lengths, bar)
                values.flush()
                sums.append(chunk_sha256(values, chunk))
                seconds += time.perf_counter() - t0
                write_json(
                    self.folder / PROGRESS,
                    {"chunks_done": chunk + 1, "teacher_s": seconds, "chunk_sha256": sums},
                    durable=True,
                )
                rows = min((chunk + 1) * CHUNK, len(self.texts))
                logger.info(
                    "%s: %d of %d texts (%.1f texts/s)",
                    desc,
                    rows,
                    len(self.texts),
                    (rows - rows_done) / max(seconds - start, 1e-9),
                )
        except BaseException as stop:
            if not sums:  # nothing of the entry is done: leave nothing behind
                for name in (PROGRESS, VALUES, META):
                    (self.folder / name).unlink(missing_ok=True)
            elif isinstance(stop, KeyboardInterrupt):  # Ctrl-C, SIGTERM: the command line says what is kept
                rows = min(len(sums) * CHUNK, len(self.texts))
                say_kept(
                    stop,
                    f"the teacher outputs computed so far ({rows} of {len(self.texts)} rows) are kept in "
                    f"{self.folder}: give the same command again to continue",
                )
            raise
        finally:
            bar.close()
            del values

    def _recorded_sums(self, done: int) -> list[str]:
        if not done:
            return []
        recorded = read_json_object(self.folder / PROGRESS, "teacher cache progress")["chunk_sha256"]
        return [str(x) for x in recorded[:done]]

    def _open(self, done: int) -> np.memmap:
        """The values file for writing: the one there when resuming a fill, else a new one, made under
        a temporary name and renamed into place (a reader of the old file keeps reading the old one)."""
        path = self.folder / VALUES
        if done:
            return np.load(path, mmap_mode="r+")
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(
                f"--cache: {path}: a folder where the teacher cache keeps its values file; remove it"
            )
        write_json(self.folder / PROGRESS, {"chunks_done": 0, "chunk_sha256": []}, durable=True)
        tmp = self.folder / f".{VALUES}.tmp"
        values = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=self.dtype, shape=(len(self.texts), self.width)
        )
        os.replace(tmp, path)
        write_json(self.folder / META, self.meta, durable=True)
        return values

    def _fill_chunk(
        self,
        values: np.memmap,
        chunk: int,
        compute: Callable[[list[Any]], np.ndarray],
        batch_size: int,
        lengths: Sequence[int] | None,
        bar: Any,
    ) -> None:
        start, end = chunk * CHUNK, min((chunk + 1) * CHUNK, len(self.texts))
        rows = np.arange(start, end)
        if lengths is not None:  # similar lengths together: little padding in each batch
            rows = rows[np.argsort(np.asarray(lengths[start:end]), kind="stable")]
        for i in range(0, len(rows), batch_size):
            idx = rows[i : i + batch_size]
            out = np.asarray(compute([self.texts[j] for j in idx]), dtype=np.float32)
            if out.shape != (len(idx), self.width):
                raise ValueError(
                    f"teacher gave shape {out.shape} for {len(idx)} texts, expected width {self.width}"
                )
            if not np.isfinite(out).all():
                raise ValueError(
                    f"the teacher gave a non-finite output (NaN or infinity) for texts {idx[:4].tolist()}"
                )
            values[idx] = out.astype(self.dtype)
            bar.update(len(idx))

    def values(self) -> np.ndarray:
        """The complete values, (rows, width), as a read-only memory map."""
        if not self.complete():
            raise ValueError(f"teacher cache {self.folder}: not complete; fill it first")
        return np.load(self.folder / VALUES, mmap_mode="r")


def cached_teacher_outputs(
    cache: TeacherCache,
    compute: Callable[[list[Any]], np.ndarray],
    batch_size: int,
    lengths: Sequence[int] | None,
    desc: str,
    *,
    progress: bool = True,
) -> np.ndarray:
    """The entry's values, filled first where rows are missing (logged either way)."""
    if cache.complete():
        logger.info("%s: teacher outputs from the cache (%s)", desc, cache.folder)
        return cache.values()
    return cache.fill(compute, batch_size, lengths, desc, progress)
