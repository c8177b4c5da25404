"""What a stopped or damaged run leaves, and what the next one does with it: shards of `albert data
create` checked before they are kept (after a stop, and in a folder called complete), --overwrite, the
shards fsynced before they are renamed; Ctrl-C answered at once during training, and a second one
quitting; the interrupt message of each stage saying what it kept; `albert tokenizer train` showing its
reading and making --output only when there is a model to write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import data_argv, tiny_pretrain_argv

from albert_lm.cli import main
from albert_lm.data import shards
from albert_lm.data.examples import DataConfig
from albert_lm.data.shards import create_pretraining_data

SMALL_SHARDS = ["--max-seq-length", "48", "--shard-mb", "0.004", "--workers", "1", "--no-progress"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _shard_count(out: Path) -> int:
    return sum(1 for split in ("train", "eval") for _ in (out / split).iterdir())


def _made_then_cut(corpus: Path, tok: Path, out: Path) -> tuple[dict[str, bytes], int, int]:
    """A data folder made whole (its files, its shard count), then train/00002/tokens.npy cut to 100
    bytes: (files, shards, the cut file's size before)."""
    assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0
    reference, shards_made = _files(out), _shard_count(out)
    size = (out / "train/00002/tokens.npy").stat().st_size
    os.truncate(out / "train/00002/tokens.npy", 100)
    return reference, shards_made, size


# --------------------------------------------------------------------------- data create: damaged shards
def test_a_stopped_runs_damaged_shards_are_made_again_with_a_line_each(
    tiny_corpus_and_tokenizer, tmp_path, capsys, caplog
):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    reference, shards_made, size = _made_then_cut(corpus, tok, out)
    assert shards_made > 4
    # a stopped run (no manifest yet) whose finished shards were damaged since
    (out / "manifest.json").unlink()
    (out / "train/00001/labels.npy").unlink()
    flipped = bytearray((out / "train/00003/offsets.npy").read_bytes())
    flipped[-1] ^= 1  # the same size, another byte: only its sha256 tells
    (out / "train/00003/offsets.npy").write_bytes(bytes(flipped))
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="albert_lm.data.shards"):
        assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0
    said = [r.getMessage() for r in caplog.records]
    assert any(
        f"train/00002: tokens.npy is 100 bytes, {size} when it was written; made again" in m for m in said
    )
    assert any("train/00001: labels.npy is missing; made again" in m for m in said), said
    assert any("train/00003: offsets.npy differs from what was written (its sha256)" in m for m in said), said
    assert f"{shards_made - 3} of {shards_made} shards kept from the stopped run" in capsys.readouterr().out
    assert _files(out) == reference  # made again as they were
    from albert_lm import PretrainingDataset

    PretrainingDataset(out).verify()  # what pretraining checks before its first step


def test_a_finished_folder_damaged_since_is_repaired_by_the_same_command(
    tiny_corpus_and_tokenizer, tmp_path, capsys, caplog
):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    reference, shards_made, size = _made_then_cut(corpus, tok, out)
    (out / "eval/00000/labels.npy").unlink()
    (out / "word_start.npy").write_bytes(b"not the table")
    with caplog.at_level("INFO", logger="albert_lm.data.data_folder"):
        assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0
    said = [r.getMessage() for r in caplog.records]
    assert not any("nothing to do" in m for m in said), said
    assert any(
        f"train/00002: tokens.npy is 100 bytes, {size} when it was written; making it again" in m
        for m in said
    )
    assert any("eval/00000: labels.npy is missing; making it again" in m for m in said), said
    assert any("word_start.npy: differs from what was written; making it again" in m for m in said), said
    assert f"{shards_made - 2} of {shards_made} shards kept" in capsys.readouterr().out
    assert _files(out) == reference
    caplog.clear()
    with caplog.at_level("INFO", logger="albert_lm.data.data_folder"):
        assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0  # whole now: nothing to do
    assert any("already complete" in r.getMessage() for r in caplog.records)
    # damage the cheap check cannot see (a byte changed, the size kept): --overwrite makes it all again
    flipped = bytearray((out / "train/00001/tokens.npy").read_bytes())
    flipped[-1] ^= 1
    (out / "train/00001/tokens.npy").write_bytes(bytes(flipped))
    from albert_lm import PretrainingDataset

    with pytest.raises(ValueError, match="the `albert data create` command that made it, with --overwrite"):
        PretrainingDataset(out).verify()  # pretraining's check finds it, and says how to mend it
    assert main(data_argv(corpus, tok, out, *SMALL_SHARDS, "--overwrite")) == 0
    assert _files(out) == reference


def test_a_manifest_naming_a_folder_outside_the_data_is_refused_and_removes_nothing(
    tiny_corpus_and_tokenizer, tmp_path, capsys
):
    """What a finished folder's check finds damaged is removed: a shard record whose folder is not one of
    the data's own (edited by hand, or a shared folder's) is refused, naming the field, never followed."""
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    manifest = json.loads((out / "manifest.json").read_text())
    for where in ("../victim", str(victim)):
        manifest["splits"]["train"]["shards"][0].update(dir=where, sha256=None)
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 1
        err = capsys.readouterr().err
        assert (
            "manifest.json: splits.train.shards[0].dir:" in err
            and "expected a shard folder train/NNNNN" in err
        )
        assert victim.is_dir() and (out / "train" / "00000").is_dir()


def test_overwrite_replaces_data_made_otherwise_and_keeps_other_files(
    tiny_corpus_and_tokenizer, tmp_path, capsys
):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    assert main(data_argv(corpus, tok, out, *SMALL_SHARDS)) == 0
    (out / "notes.txt").write_text("mine")
    other = [*SMALL_SHARDS, "--max-seq-length", "64"]
    capsys.readouterr()
    assert main(data_argv(corpus, tok, out, *other)) == 1
    assert "--overwrite to replace it" in capsys.readouterr().err
    assert main(data_argv(corpus, tok, out, *other, "--overwrite")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["max_seq_length"] == 64 and (out / "notes.txt").read_text() == "mine"
    metas = [json.loads(p.read_text()) for p in out.glob("*/*/meta.json")]
    assert metas and all(m["plan_id"] == manifest["plan_id"] for m in metas)  # none of the old data left


def test_shard_files_are_fsynced_before_the_rename(tiny_corpus_and_tokenizer, tmp_path, monkeypatch):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name the files fsynced")
    corpus, tok = tiny_corpus_and_tokenizer
    synced: list[str] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded)
    cfg = DataConfig(max_seq_length=48, block_bytes=2048, shard_bytes=4096)
    create_pretraining_data([corpus], tok, tmp_path / "d", cfg, num_workers=1, progress=False)
    for shard in (tmp_path / "d" / "train").iterdir():
        meta = json.loads((shard / "meta.json").read_text())
        assert meta["bytes"] == {name: (shard / name).stat().st_size for name in meta["sha256"]}
        for name in [*meta["sha256"], "meta.json"]:  # each written under the temporary name, and synced there
            assert any(
                f"/train/{shard.name}.tmp-" in p and f"/{name}" in p.replace("/.", "/") for p in synced
            )


# --------------------------------------------------------------------------- Ctrl-C during training
# `albert ARGV` in a process of its own that presses Ctrl-C (SIGINT to itself) while optimizer step 1
# runs, then, by MODE: "once"; "twice" (again at once); "save" (again while the checkpoint is written).
# Each step writes "step N ended" when it has: the answer to Ctrl-C must come before.
_CTRL_C = """
import os, signal, sys, time
from albert_lm.cli import main
from albert_lm.training import checkpoint, loop
mode = sys.argv[1]
take, write_state = loop._take_step, checkpoint._save_durably
def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # its handler runs before the next press, as for a person's
def step(obj, progress, scaler):
    if progress.step == 0:
        ctrl_c()
        if mode == "twice":
            ctrl_c()
    last = take(obj, progress, scaler)
    sys.stderr.write(f"step {progress.step} ended\\n")
    return last
def save_state(path, obj):
    if mode == "save":
        ctrl_c()
    return write_state(path, obj)
loop._take_step, checkpoint._save_durably = step, save_state
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def pretraining_data(tiny_corpus_and_tokenizer, tmp_path_factory) -> Path:
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path_factory.mktemp("ctrl-c") / "data"
    assert main(data_argv(corpus, tok, out, "--max-seq-length", "48", "--workers", "1", "--no-progress")) == 0
    return out


def _pressed(mode: str, data: Path, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    argv = tiny_pretrain_argv(data, out, "--max-steps", "3", "--save-every", "0")
    return subprocess.run([sys.executable, "-c", _CTRL_C, mode, *argv], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_ctrl_c_is_answered_at_once_and_a_second_one_quits(pretraining_data, tmp_path):
    answer = (
        "Ctrl-C: stopping after this step and saving a checkpoint (Ctrl-C again to quit at once, unsaved)"
    )
    once = _pressed("once", pretraining_data, tmp_path / "once")
    assert once.returncode == 130, once.stderr
    assert answer in once.stderr and once.stderr.index(answer) < once.stderr.index("step 1 ended")
    assert once.stderr.count(answer) == 1 and (tmp_path / "once" / "checkpoint-1").is_dir()
    # pressed again while the step runs: the process ends there, nothing saved
    twice = _pressed("twice", pretraining_data, tmp_path / "twice")
    assert twice.returncode == 130, twice.stderr
    assert answer in twice.stderr and "step 1 ended" not in twice.stderr
    assert (
        "albert pretrain: interrupted; not saved: --resume goes on from the last checkpoint" in twice.stderr
    )
    assert not any(
        p.name.startswith(("checkpoint-", ".tmp-checkpoint-")) for p in (tmp_path / "twice").iterdir()
    )
    # pressed again while the checkpoint is written: no folder of the checkpoint's name, complete or not
    save = _pressed("save", pretraining_data, tmp_path / "save")
    assert save.returncode == 130 and "step 1 ended" in save.stderr, save.stderr
    assert not any("checkpoint-" in p.name for p in (tmp_path / "save").iterdir())


def test_ctrl_c_between_the_renames_of_a_folder_swap_puts_the_earlier_folder_back(tmp_path, monkeypatch):
    """A checkpoint of a step saved again replaces the earlier folder in two renames; a second Ctrl-C
    between them left neither under the final name (the earlier one as .NAME.old, which a resume removes)."""
    from albert_lm import files

    final = tmp_path / "checkpoint-4"
    final.mkdir()
    (final / "state").write_text("earlier")
    replace, pressed = os.replace, []

    def pressed_between(src, dst):  # noqa: ANN001, ANN202 - Ctrl-C as the new folder is renamed in
        if Path(dst) == final and not pressed:
            pressed.append(src)
            raise KeyboardInterrupt
        replace(src, dst)

    monkeypatch.setattr(files.os, "replace", pressed_between)
    with pytest.raises(KeyboardInterrupt), files.atomic_folder(final) as tmp:
        (tmp / "state").write_text("new")
    monkeypatch.setattr(files.os, "replace", replace)
    assert (final / "state").read_text() == "earlier" and [p.name for p in tmp_path.iterdir()] == [final.name]


# --------------------------------------------------------------------------- what a stopped stage kept
def _stop_building_after(monkeypatch, n: int) -> list[dict]:  # noqa: ANN001
    """Shards are built as usual until `n` are made; the next is stopped as Ctrl-C stops it. Returns the
    shards made, as they are made."""
    build, made = shards.build_shard, []

    def stopped(task):  # noqa: ANN001, ANN202
        if len(made) == n:
            raise KeyboardInterrupt
        made.append(build(task))
        return made[-1]

    monkeypatch.setattr(shards, "build_shard", stopped)
    return made


def test_pretrain_text_stopped_in_its_data_stage_says_the_shards_are_kept(
    tiny_corpus_and_tokenizer, tiny_pretrained, tmp_path, monkeypatch, capsys
):
    corpus, _ = tiny_corpus_and_tokenizer
    out = tmp_path / "tapt"
    argv = ["pretrain", "--init-from", str(tiny_pretrained), "--text", str(corpus), "--output", str(out),
            "--batch-size", "4", "--max-steps", "1", "--no-tensorboard", "--no-plot"]  # fmt: skip
    create, build = shards.create_pretraining_data, shards.build_shard

    def small_shards(inputs, tokenizer, output, cfg, **kw):  # noqa: ANN001, ANN003, ANN202
        return create(
            inputs,
            tokenizer,
            output,
            DataConfig(**{**cfg.__dict__, "block_bytes": 2048, "shard_bytes": 4096}),
            **kw,
        )

    monkeypatch.setattr(shards, "create_pretraining_data", small_shards)
    made = _stop_building_after(monkeypatch, 2)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert (
        f"albert pretrain: interrupted; the shards finished in {out / 'data'} are kept: give the same command "
        "again to continue" in err
    )
    kept = out / "data" / made[0]["split"] / f"{made[0]['index']:05d}" / "tokens.npy"
    mtime = kept.stat().st_mtime_ns
    monkeypatch.setattr(shards, "build_shard", build)
    assert main(argv) == 0  # the same command continues
    assert kept.stat().st_mtime_ns == mtime and (out / "data" / "manifest.json").is_file()


def test_distill_stopped_while_the_teacher_cache_fills_says_what_is_kept(
    tiny_corpus_and_tokenizer, tmp_path, monkeypatch, capsys
):
    from albert_lm.distill import cache as distill_cache
    from albert_lm.distill import general

    texts = [f"sentence {i}" for i in range(300)]
    monkeypatch.setattr(distill_cache, "CHUNK", 100)
    computed: list[int] = []

    def teacher(batch: list[str]) -> np.ndarray:
        if len(computed) == 150:  # in the second chunk
            raise KeyboardInterrupt
        computed.extend(range(len(batch)))
        return np.ones((len(batch), 4), np.float32)

    entry = distill_cache.TeacherCache(tmp_path / "cache", "sentence", "teacher-1", texts, 4, "float16", {})

    def fill(cfg):  # noqa: ANN001, ANN202 - `albert distill general` up to its teacher cache
        distill_cache.cached_teacher_outputs(entry, teacher, 50, None, "teacher", progress=False)

    monkeypatch.setattr(general, "distill_general", fill)
    corpus, tok = tiny_corpus_and_tokenizer
    argv = ["distill", "general", "--teacher", str(tmp_path), "--text", str(corpus), "--tokenizer", str(tok),
            "--output", str(tmp_path / "student"), "--cache", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert (
        "albert distill general: interrupted; the teacher outputs computed so far (100 of 300 rows) are kept "
        f"in {entry.folder}: give the same command again to continue" in err
    )
    assert entry.chunks_done() == 1  # and the next fill goes on from there


# --------------------------------------------------------------------------- tokenizer train
def test_tokenizer_training_shows_its_reading_and_makes_the_folder_only_to_write(
    tmp_path, monkeypatch, caplog
):
    from albert_lm.data import training_lines
    from albert_lm.data.tokenizer_training import train_tokenizer

    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghij"), size=5)) for _ in range(200)]
    text = tmp_path / "a.txt"
    text.write_text("\n".join(" ".join(rng.choice(words, size=8)) for _ in range(10000)) + "\n")
    out = tmp_path / "new" / "tok"
    bars: list[dict] = []
    seen: list[bool] = []

    class Bar:
        def __init__(self, **kw) -> None:  # noqa: ANN003
            bars.append({**kw, "updates": []})

        def update(self, n: int) -> None:
            bars[-1]["updates"].append(n)
            seen.append(out.exists())

        def close(self) -> None:
            pass

    monkeypatch.setattr(training_lines, "progress_bar", Bar)
    with caplog.at_level("INFO", logger="albert_lm.data.tokenizer_training"):
        train_tokenizer([text], out, vocab_size=150, num_threads=1)
    assert any(r.getMessage().startswith("reading 1 file (") for r in caplog.records)
    (bar,) = bars
    assert bar["total"] == text.stat().st_size and bar["unit"] == "B"
    assert len(bar["updates"]) >= 3 and sum(bar["updates"]) == bar["total"]  # as it reads, whole at its end
    assert seen and not any(seen)  # while it read, no folder there: a kill then leaves none
    assert (out / "spiece.model").is_file()
    # an --output that could not be made is refused before the reading, not after it
    (tmp_path / "a-file").write_text("x")
    bars.clear()
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        train_tokenizer([text], tmp_path / "a-file" / "tok", vocab_size=150, num_threads=1)
    assert not bars


def test_data_create_stopped_under_overwrite_says_to_continue_without_it(
    tiny_corpus_and_tokenizer, tmp_path, monkeypatch, capsys
):
    """--overwrite removes the data at every start: the way on after a stop is the command without it."""
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    _stop_building_after(monkeypatch, 2)
    assert main(data_argv(corpus, tok, out, *SMALL_SHARDS, "--overwrite")) == 130
    assert "are kept: give the same command again without --overwrite to continue" in capsys.readouterr().err
