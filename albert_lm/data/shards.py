"""`albert data create`: raw text -> sharded, memory-mapped pretraining examples, in parallel and resumable.

Layout of an output folder (read by `albert_lm.data.dataset.PretrainingDataset`):

    manifest.json            config (DataConfig), tokenizer, counts, the sha256 of every file below; written last
    spiece.model             the tokenizer the ids belong to (and tokenizer_config.json)
    word_start.npy           (V,) bool: which pieces start a word (for dynamic whole-word masking)
    train/00000/ ...         one folder per shard, renamed into place only when complete:
        tokens.npy           (N,) uint16 (int32 for vocabularies over 65536): every example's ids, back to back
        offsets.npy          (E+1,) int64: example e is tokens[offsets[e]:offsets[e+1]]
        a_lens.npy           (E,) int32: length of segment A (token type 1 starts at a_len + 2)
        labels.npy           (E,) uint8: sentence_order_label (SOP: 1 = swapped; NSP: 1 = random B)
        masked_positions.npy, mask_offsets.npy, masked_labels.npy   static masking only
        meta.json            counts, settings hash and sha256 of every file above
    eval/00000/ ...          the held-out blocks, same format

Why numpy .npy files read with `np.load(mmap_mode="r")` rather than Arrow: the data is a few flat integer
arrays, numpy is already a dependency, memory-mapping gives O(1) random access from any number of
DataLoader workers without copies, and the format is readable with nothing but numpy; Arrow would add a
~100 MB dependency for the same offsets-plus-values layout.

Memory is bounded by a shard (about `shard_bytes` of input per worker), not by the corpus: the input is
cut into blocks at blank lines (`albert_lm.data.corpus.plan_blocks`), blocks are grouped into shards, and each
worker process reads, tokenizes and writes one shard at a time. A shard's random draws come from its own
generator seeded by (seed, split, shard index), so the bytes do not depend on the number of processes.

A killed run leaves no manifest (and maybe `*.tmp-*` folders, removed on the next run), so nothing
trusts it; rerunning the same command with the same inputs and settings skips the finished shards.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.data.corpus import ReadStats, iter_documents, warn_gutenberg_markers
from albert_lm.data.data_folder import (
    PLAN,
    check_output,
    holds_data,
    holds_nothing_finished,
    remove_data,
    still_complete,
)
from albert_lm.data.examples import (
    DataConfig,
    Document,
    ExampleBuffer,
    ExampleStats,
    create_examples,
    static_masks,
)
from albert_lm.data.manifest import MANIFEST, WORD_START, build_manifest, shard_problem
from albert_lm.data.plan import SPLITS, Plan, plan_id, plan_shards
from albert_lm.data.sources import Block, close_streams, expand_inputs
from albert_lm.data.tokenizer import RULE_KEYS, AlbertTokenizer
from albert_lm.files import (
    atomic_folder,
    atomic_write,
    check_output_apart,
    file_sha256,
    folder_lock,
    read_json_object,
    write_json,
)
from albert_lm.progress import progress_bar, say_kept
from albert_lm.workers import run_pool

logger = logging.getLogger(__name__)

_SPLIT_SEED = {"train": 0, "eval": 1}


# ----------------------------------------------------------------------------------------- one shard
_worker_state: dict[str, Any] = {}


def _load_state(tokenizer_dir: str, progress: Any) -> None:
    _worker_state["tok"] = AlbertTokenizer.from_pretrained(tokenizer_dir)
    _worker_state["queue"] = progress
    tok = _worker_state["tok"]
    _worker_state["word_start"] = tok.word_start_table()


def _build_shard_task(task: dict[str, Any]) -> dict[str, Any]:
    """`build_shard`, looked up when a worker runs a task (what travels to it is this name)."""
    return build_shard(task)


def _report(nbytes: int) -> None:
    q = _worker_state.get("queue")
    if q is not None:
        q.put(nbytes)


def build_shard(task: dict[str, Any]) -> dict[str, Any]:
    """Read, tokenize and turn one shard's blocks into examples; write them atomically. Returns its meta."""
    cfg = DataConfig.from_dict(task["config"])
    final = Path(task["dir"])
    done, damage = _finished_meta(final, task["plan_id"])
    if done is not None:
        _report(sum(b[2] - b[1] for b in task["blocks"]))
        return {**done, "skipped": True}
    t0 = time.perf_counter()
    tok: AlbertTokenizer = _worker_state["tok"]
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, _SPLIT_SEED[task["split"]], task["index"]]))
    dtype = np.dtype(np.uint16) if tok.vocab_size <= 65536 else np.dtype(np.int32)
    docs, read = _read_documents(task["blocks"], task["formats"], cfg, tok, dtype)
    stats = ExampleStats(documents=len(docs), sentences=sum(len(d) for d in docs))
    buf = create_examples(docs, cfg, rng, stats, dtype=dtype)
    del docs
    arrays = _shard_arrays(buf, cfg, rng, stats, _worker_state["word_start"], tok.vocab_size, dtype)
    meta = {
        "plan_id": task["plan_id"],
        "split": task["split"],
        "index": task["index"],
        "input_bytes": sum(b[2] - b[1] for b in task["blocks"]),
        "stats": asdict(stats),
        "read": {
            "lines": read.lines,
            "skipped_invalid_utf8": read.skipped_invalid_utf8,
            "without_text": read.without_text,
        },
    }
    meta["sha256"], meta["bytes"] = _write_shard(final, arrays, meta)
    meta["seconds"] = time.perf_counter() - t0
    if damage is not None:
        meta["remade"] = damage  # said by the process that runs the command (`_say_remade`)
    return meta


def _finished_meta(final: Path, pid: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the meta of a shard finished by an earlier run of the same plan, None), its files checked first;
    a shard of another plan is removed, a damaged one too: (None, why it is made again).

    A kept shard's files are checked whole, by their sha256, not only by their size: it costs about a
    hundredth of making the shard (sha256 reads ~1 GB/s, the tokenizing a few MB/s of text per process),
    and a shard kept on its size alone could hold damage that only pretraining's check finds, in a folder
    this command then calls complete."""
    if not final.exists():
        return None, None
    why: str | None
    try:
        meta = read_json_object(final / "meta.json", "shard meta")
    except (OSError, ValueError) as e:
        why = "meta.json is missing" if isinstance(e, FileNotFoundError) else f"meta.json does not read ({e})"
    else:
        if meta.get("plan_id") != pid:
            shutil.rmtree(final)
            return None, None
        why = shard_problem(final, meta.get("sha256"), meta.get("bytes"))
        if why is None:
            return meta, None
    shutil.rmtree(final, ignore_errors=True)
    return None, why


def _read_documents(
    blocks: list[tuple[str, int, int]],
    formats: dict[str, str],
    cfg: DataConfig,
    tok: AlbertTokenizer,
    dtype: np.dtype,
) -> tuple[list[Document], ReadStats]:
    """The tokenized, non-empty documents of a shard's blocks (path, start, end), each file read in its
    format (`formats`), progress reported per block."""
    read = ReadStats()
    docs = []
    for path, start, end in blocks:
        block = Block(path, start, end)
        for sentences in iter_documents(
            block, formats[path], read, cfg.skip_invalid_utf8, cfg.max_line_bytes, cfg.text_column
        ):
            doc = Document.from_flat(*tok.encode_flat(sentences, dtype))
            if len(doc):
                docs.append(doc)
        _report(block.nbytes)
    return docs, read


def _shard_arrays(
    buf: ExampleBuffer,
    cfg: DataConfig,
    rng: np.random.Generator,
    stats: ExampleStats,
    word_start: np.ndarray,
    vocab_size: int,
    dtype: np.dtype,
) -> dict[str, np.ndarray]:
    """The arrays of a shard's files (the layout in the module docstring); masks drawn here if static."""
    rows = buf.rows
    arrays: dict[str, np.ndarray] = {}
    if cfg.masking == "static":
        rows, positions, mlabels = static_masks(buf, cfg, word_start, vocab_size, rng, stats)
        arrays["masked_positions"] = np.concatenate(positions) if positions else np.zeros(0, np.uint16)
        arrays["mask_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in positions])]).astype(
            np.int64
        )
        arrays["masked_labels"] = np.concatenate(mlabels).astype(dtype) if mlabels else np.zeros(0, dtype)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    arrays["tokens"] = np.concatenate(rows).astype(dtype) if rows else np.zeros(0, dtype)
    arrays["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    arrays["a_lens"] = np.array(buf.a_lens, dtype=np.int32)
    arrays["labels"] = np.array(buf.labels, dtype=np.uint8)
    return arrays


def _write_shard(
    final: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]
) -> tuple[dict[str, str], dict[str, int]]:
    """Save `arrays` as NAME.npy and `meta` (with the files' sha256 and sizes, returned) as meta.json in
    `final`.

    The folder is filled as `NAME.tmp-PID` beside `final` and renamed, so the shard appears complete or
    not at all; the `.tmp-` name is what `create_pretraining_data` clears after a killed run. Each file
    is fsynced before the rename (a few files of a few MB per shard, next to seconds of tokenizing), so
    a machine that goes down right after it cannot leave a shard with the final name and empty files.
    """
    checksums, sizes = {}, {}
    with atomic_folder(final, tmp=final.with_name(f"{final.name}.tmp-{os.getpid()}")) as tmp:
        for name, arr in arrays.items():
            file = tmp / f"{name}.npy"
            with open(file, "wb") as f:
                np.save(f, arr)
                f.flush()
                os.fsync(f.fileno())
            checksums[file.name], sizes[file.name] = file_sha256(file), file.stat().st_size
        write_json(tmp / "meta.json", {**meta, "sha256": checksums, "bytes": sizes}, durable=True)
    return checksums, sizes


# ----------------------------------------------------------------------------------------- the command
def create_pretraining_data(
    inputs: Sequence[str | os.PathLike],
    tokenizer: str | os.PathLike,
    output: str | os.PathLike,
    cfg: DataConfig,
    num_workers: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Turn `inputs` into sharded examples under `output`; returns the manifest (with a 'summary').

    `inputs`: files (plain text, compressed, JSON Lines, Parquet), folders and glob patterns
    (`albert_lm.data.sources.expand_inputs`). Everything is checked before anything is written (settings,
    the tokenizer, every input, an output apart from them all, and free or resumable); the writing holds
    `folder_lock(output)`, so a second run on the same folder is refused instead of mixing its files
    with this one's. `overwrite`: data already in `output` (finished or not, of any settings) is removed
    first, not resumed; anything else there stays."""
    t0 = time.perf_counter()
    cfg.validate()
    out = Path(output)
    tok = AlbertTokenizer.from_pretrained(tokenizer)
    for path in inputs:  # as given: a folder of inputs must not hold the output either
        check_output_apart(out, {"--input": path, "--tokenizer": tok.model_file})
    files = expand_inputs(inputs)
    for path in files:  # and each file the folders and patterns hold
        check_output_apart(out, {"--input": path})
    try:
        plan = plan_shards(files, cfg)
        warn_gutenberg_markers(list(plan.formats), cfg.strip_gutenberg)
    finally:
        close_streams()
    pid = plan_id(plan, cfg, tokenizer_identity(tok))
    check_output(out, pid, cfg, overwrite)
    try:
        with folder_lock(out):  # made with its missing parents; removed where a failure leaves them empty
            check_output(out, pid, cfg, overwrite)  # again, now that no other run can write there
            if overwrite and holds_data(out):
                logger.info("--overwrite: removing the data in %s", out)
                remove_data(out)
            try:
                return _create(out, tok, plan, pid, cfg, files, num_workers, progress, t0)
            except BaseException as stop:  # bad input found while reading, no examples, Ctrl-C, ...
                # the cleanup never hides the cause: the error raised is the one that stopped the run
                with contextlib.suppress(OSError):
                    if holds_nothing_finished(out):
                        logger.debug("%s: removing what this failed run wrote (no finished shard)", out)
                        remove_data(out)
                    elif isinstance(stop, KeyboardInterrupt):  # --overwrite again would remove them
                        again = "again without --overwrite" if overwrite else "again"
                        say_kept(
                            stop,
                            f"the shards finished in {out} are kept: give the same command {again} to continue",
                        )
                raise
    finally:
        close_streams()


def tokenizer_identity(tok: AlbertTokenizer) -> str:
    """What the data's ids depend on in the tokenizer: its model file's sha256, and its normalization
    rule where it is not the released models' (so that older outputs of that rule still resume)."""
    sha = file_sha256(tok.model_file)
    if (tok.do_lower_case, tok.remove_space, tok.keep_accents) == (True, True, False):
        return sha
    return sha + "".join(f";{key}={getattr(tok, key)}" for key in RULE_KEYS)


def _create(
    out: Path,
    tok: AlbertTokenizer,
    plan: Plan,
    pid: str,
    cfg: DataConfig,
    inputs: list[str],
    num_workers: int | None,
    progress: bool,
    t0: float,
) -> dict[str, Any]:
    """The writing part of `create_pretraining_data`, in the locked and checked output folder."""
    if (out / MANIFEST).is_file() and (finished := still_complete(out, pid)) is not None:
        return finished
    write_json(out / PLAN, {"plan_id": pid, "config": asdict(cfg)})
    for split in SPLITS:
        for stale in (out / split).glob("*.tmp-*") if (out / split).is_dir() else []:
            shutil.rmtree(stale)  # left by a killed run
    tok.save_pretrained(out)
    word_start = tok.word_start_table()
    buffer = io.BytesIO()
    np.save(buffer, word_start)
    atomic_write(out / WORD_START, buffer.getvalue())

    tasks: list[dict[str, Any]] = []
    for split in SPLITS:
        for k, blocks in enumerate(plan.shards[split]):
            tasks.append(
                {
                    "split": split,
                    "index": k,
                    "dir": str(out / split / f"{k:05d}"),
                    "blocks": [(b.path, b.start, b.end) for b in blocks],
                    "formats": {b.path: plan.formats[b.path] for b in blocks},
                    "config": asdict(cfg),
                    "plan_id": pid,
                }
            )
            (out / split).mkdir(exist_ok=True)
    total_bytes = sum(b[2] - b[1] for t in tasks for b in t["blocks"])
    workers = max(1, min(num_workers or os.cpu_count() or 1, len(tasks)))
    metas = _run_tasks(tasks, str(out), workers, total_bytes, progress)

    manifest = build_manifest(out, tok, cfg, pid, inputs, metas, plan)
    write_json(out / MANIFEST, manifest)
    seconds = time.perf_counter() - t0
    kept = [m for m in metas if m.get("skipped")]  # shards a stopped run had finished (a resume)
    made_bytes = total_bytes - sum(int(m["input_bytes"]) for m in kept)
    manifest["summary"]["seconds"] = round(seconds, 2)
    manifest["summary"]["input_mb_per_s"] = round(
        made_bytes / 1e6 / seconds, 2
    )  # the rate of this run's work
    if kept:
        manifest["summary"]["resumed"] = {
            "shards_kept": len(kept),
            "shards": len(metas),
            "made_bytes": made_bytes,
        }
    return manifest


def _say_remade(meta: dict[str, Any], out: str) -> None:
    """A line for a shard a stopped run had finished that was not as written, made again."""
    if meta.get("remade"):
        logger.warning("%s/%s/%05d: %s; made again", out, meta["split"], meta["index"], meta["remade"])


def _run_tasks(tasks: list[dict], tok_dir: str, workers: int, total_bytes: int, progress: bool) -> list[dict]:
    bar = progress_bar(show=progress, total=total_bytes, unit="B", unit_scale=True, desc="albert data create")
    try:
        if workers > 1:
            return run_pool(
                _build_shard_task,
                tasks,
                workers,
                "data create",
                load=_load_state,
                load_args=(tok_dir,),
                progress=bar,
                on_result=lambda meta: _say_remade(meta, tok_dir),
            )
        _load_state(tok_dir, None)
        metas = []
        for t in tasks:
            metas.append(build_shard(t))
            _say_remade(metas[-1], tok_dir)
            bar.update(sum(b[2] - b[1] for b in t["blocks"]))
        return metas
    finally:
        bar.close()
