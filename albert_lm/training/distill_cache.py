"""The teacher cache: a teacher's outputs for a list of texts, computed once and kept on disk.

On a CPU the teacher's forward passes cost more than the student's training, so `albert distill` fills
the cache first (with progress; a killed fill goes on where it stopped) and trains from it; a second run,
or another student on the same text, runs no teacher at all.

Layout: one folder per (teacher, texts) under the cache root (`--cache DIR`; default
$ALBERT_LM_CACHE_DIR/distill, else ~/.cache/albert-lm/distill):

    CACHE/<kind>-<key>/
        meta.json      teacher name and fingerprint, what it holds, rows x width, dtype, texts digest
        values.npy     (rows, width) float16 (sentence vectors) or float32 (logits), a memory map
        progress.json  {"chunks_done": k, "teacher_s": t}: rows [0, k x CHUNK) are written and flushed,
                       in t seconds of the teacher's time

`key` hashes the teacher's fingerprint (its weights, tokenizer and pooling: `albert_lm.training.teacher`)
with the digest of the texts, each text in order. Rows are filled a chunk at a time, each chunk's texts
sorted by length so batches carry little padding (the teacher's cost falls by half on books' sentences),
and `progress.json` is rewritten only after the chunk's rows are flushed: a kill loses at most one chunk.
Memory stays bounded: values live in the memory map, a batch of texts at a time goes through the teacher.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from albert_lm.files import folder_lock, read_json_object, write_json

logger = logging.getLogger(__name__)

CHUNK = 2048  # rows per unit of fill progress: minutes of teacher time at most on a 2-core CPU
META, VALUES, PROGRESS = "meta.json", "values.npy", "progress.json"
FORMAT_VERSION = 1

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


class TeacherCache:
    """One (teacher, texts) entry: `fill` computes what is missing, `values` reads it."""

    def __init__(
        self, root: str | os.PathLike, kind: str, teacher_key: str, texts: Sequence[Text], width: int,
        dtype: str, describe: dict[str, Any],
    ) -> None:  # fmt: skip
        self.texts, self.width, self.dtype = texts, width, np.dtype(dtype)
        digest = texts_digest(texts)
        key = hashlib.sha256(
            f"{FORMAT_VERSION}\n{teacher_key}\n{digest}\n{width}\n{dtype}".encode()
        ).hexdigest()
        self.folder = Path(root) / f"{kind}-{key[:24]}"
        self.meta = {**describe, "kind": kind, "teacher_fingerprint": teacher_key, "texts_sha256": digest,
                     "rows": len(texts), "width": width, "dtype": self.dtype.name, "format": FORMAT_VERSION}  # fmt: skip

    @property
    def chunks(self) -> int:
        return -(-len(self.texts) // CHUNK)

    def chunks_done(self) -> int:
        """Chunks whose rows are on disk (0 for an entry not started, or one whose files do not match)."""
        try:
            meta = read_json_object(self.folder / META, "teacher cache")
            done = read_json_object(self.folder / PROGRESS, "teacher cache progress").get("chunks_done", 0)
        except (FileNotFoundError, ValueError):
            return 0
        same = all(meta.get(k) == self.meta[k] for k in ("texts_sha256", "rows", "width", "dtype", "format"))
        if not same or not (self.folder / VALUES).is_file() or not isinstance(done, int):
            return 0
        return min(max(done, 0), self.chunks)

    def complete(self) -> bool:
        return self.chunks_done() == self.chunks

    def teacher_seconds(self) -> float:
        """The teacher's time spent filling the entry so far (all runs that filled it): its speed on these
        texts, on the machine that filled it, is rows / this."""
        try:
            seconds = read_json_object(self.folder / PROGRESS, "teacher cache progress").get("teacher_s", 0.0)
        except (FileNotFoundError, ValueError):
            return 0.0
        return float(seconds) if isinstance(seconds, int | float) else 0.0

    def fill(
        self, compute: Callable[[list[Any]], np.ndarray], batch_size: int, lengths: Sequence[int] | None = None,
        desc: str = "teacher", progress: bool = True,
    ) -> np.ndarray:  # fmt: skip
        """Compute the missing rows with `compute(texts of one batch) -> (batch, width)`; returns the
        values (read-only memory map). `lengths` (e.g. characters per text) orders each chunk's batches."""
        with folder_lock(self.folder, "--cache"):
            done = self.chunks_done()
            if done == self.chunks:
                logger.info(
                    "teacher cache %s: complete (%d rows), no teacher forward", self.folder, len(self.texts)
                )
                return self.values()
            values = self._open(done)
            rows_done = min(done * CHUNK, len(self.texts))
            if done:
                logger.info("teacher cache %s: %d of %d rows there, filling the rest", self.folder, rows_done,
                            len(self.texts))  # fmt: skip
            bar = tqdm(
                total=len(self.texts), initial=rows_done, desc=desc, unit="text", disable=not progress or None
            )
            seconds = start = self.teacher_seconds()
            try:
                for chunk in range(done, self.chunks):
                    t0 = time.perf_counter()
                    self._fill_chunk(values, chunk, compute, batch_size, lengths, bar)
                    values.flush()
                    seconds += time.perf_counter() - t0
                    write_json(
                        self.folder / PROGRESS, {"chunks_done": chunk + 1, "teacher_s": seconds}, durable=True
                    )
                    rows = min((chunk + 1) * CHUNK, len(self.texts))
                    logger.info("%s: %d of %d texts (%.1f texts/s)", desc, rows, len(self.texts),
                                (rows - rows_done) / max(seconds - start, 1e-9))  # fmt: skip
            finally:
                bar.close()
                del values
        return self.values()

    def _open(self, done: int) -> np.memmap:
        """The values file for writing: the one there when resuming a fill, else a new one."""
        path = self.folder / VALUES
        if done:
            return np.load(path, mmap_mode="r+")
        write_json(self.folder / PROGRESS, {"chunks_done": 0}, durable=True)
        values = np.lib.format.open_memmap(
            path, mode="w+", dtype=self.dtype, shape=(len(self.texts), self.width)
        )
        write_json(self.folder / META, self.meta, durable=True)
        return values

    def _fill_chunk(
        self, values: np.memmap, chunk: int, compute: Callable[[list[Any]], np.ndarray], batch_size: int,
        lengths: Sequence[int] | None, bar: Any,
    ) -> None:  # fmt: skip
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
    cache: TeacherCache, compute: Callable[[list[Any]], np.ndarray], batch_size: int,
    lengths: Sequence[int] | None, desc: str, progress: bool = True,
) -> np.ndarray:  # fmt: skip
    """The entry's values, filled first where rows are missing (logged either way)."""
    if cache.complete():
        logger.info("%s: teacher outputs from the cache (%s)", desc, cache.folder)
        return cache.values()
    return cache.fill(compute, batch_size, lengths, desc, progress)
