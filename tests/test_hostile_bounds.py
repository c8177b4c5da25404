"""Hostile bounds: every count a user gives has an upper bound checked before work starts (an absurd
augment, worker count, batch or step count is refused naming the option, the value and the cap, never a
hang, a full memory or an internal error); JSON Lines records without text are counted by every reader
that leaves them out; a process pool whose worker was killed leaves nothing in /dev/shm; and a settings
file (`--config FILE`) with a value of the wrong type is refused naming the file and the field, also where
the command line gives the same option."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import made_up_text
from test_bad_input import refused

from albert_lm.cli import main

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
# Commands with made-up paths, for the checks made before any path is read.
FINETUNE = ["finetune", "--task", "rte", "--model", "m", "--data", "d", "--output", "o"]
DISTILL_TASK = ["distill", "task", "--task", "rte", "--model", "m", "--data", "d", "--teacher", "t",
                "--output", "o"]  # fmt: skip
DATA_CREATE = ["data", "create", "--input", "i", "--tokenizer", "t", "--output", "o"]


@contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail the test instead of hanging where the code under test would run on for ever."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"still working after {seconds} s: the bound was not checked before the work")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def glue_folder(tmp_path: Path) -> Path:
    """A GLUE folder with RTE only (8 training and 4 dev pairs), and TEACHERS/RTE with a config.json."""
    rte = tmp_path / "glue" / "RTE"
    rte.mkdir(parents=True)
    for split, n in (("train", 8), ("dev", 4)):
        rows = "".join(
            f"{i}\tword{i} river\tword{i}\t{'entailment' if i % 2 else 'not_entailment'}\n" for i in range(n)
        )
        (rte / f"{split}.tsv").write_text(RTE_HEADER + rows)
    (tmp_path / "teachers" / "RTE").mkdir(parents=True)
    (tmp_path / "teachers" / "RTE" / "config.json").write_text("{}")
    return tmp_path


def _glue(folder: Path, model: Path, *more: str) -> list[str]:
    return ["glue", "--model", str(model), "--data", str(folder / "glue"), "--output", str(folder / "out"),
            "--tasks", "rte", "--seeds", "1", "--learning-rates", "1e-4", "--epochs", "1", *more]  # fmt: skip


# --------------------------------------------------------------------------- counts bounded
def test_glue_augment_is_refused_with_the_texts_it_would_build(capsys, glue_folder, tiny_pretrained):
    """`albert glue --teachers T --augment 1000000000` would build 8 x (1 + 10^9) texts in memory before a
    word of output: refused before any run starts, naming the option, the value, the cap and the count."""
    argv = _glue(glue_folder, tiny_pretrained, "--workers", "1", "--teachers", str(glue_folder / "teachers"))
    line = refused(capsys, [*argv, "--augment", "1000000000"], "--augment 1000000000", "5,000,000",
                   "8 RTE training examples", "8,000,000,008 texts")  # fmt: skip
    assert "--max-train-examples" in line
    assert not (glue_folder / "out").exists()


def test_distill_task_augment_is_bounded_before_a_variant_is_built():
    """`albert distill task --augment N` builds its variants with `augment_texts`: an absurd N is refused at
    once with the same message (it used to loop examples x N times, a hang until killed)."""
    from albert_lm.distill.augment import augment_texts

    with _within(10), pytest.raises(ValueError, match=r"--augment 1000000000: 3 training examples x"):
        augment_texts([("word one two", None), ("three four", None), ("five six", "seven")], 10**9, seed=0)
    assert len(augment_texts([("word one two three", None)] * 3, 4, seed=0)) <= 12  # sane counts still run


@pytest.mark.parametrize(
    "argv, mention",
    [
        (["glue", "--model", "m", "--data", "d", "--output", "o", "--workers", "99999999999"], "workers"),
        (["glue", "--model", "m", "--data", "d", "--output", "o", "--epochs", "1e300"], "epochs"),
        (
            [*FINETUNE, "--gradient-accumulation-steps", "100000000000000000000"],
            "--gradient-accumulation-steps",
        ),
        ([*FINETUNE, "--seed", "100000000000000000000000"], "seed"),
        ([*FINETUNE, "--max-steps", "100000000000000000000000000000"], "--max-steps"),
        (["pretrain", "--data", "d", "--output", "o", "--batch-size", "1000000000"], "--batch-size"),
        (["predict", "--model", "m", "--input", "i", "--max-seq-length", "1000000000"], "max_seq_length"),
        (["fill-mask", "--model", "m", "--text", "a [MASK]", "--top-k", "10000000000"], "top_k"),
        (["embed", "--model", "m", "--text", "a", "--depth", "10000000000"], "depth"),
        ([*DISTILL_TASK, "--teacher-batch-size", "1000000000"], "--teacher-batch-size"),
        (
            ["distill", "general", "--text", "t", "--output", "o", "--batch-size", "1000000000"],
            "--batch-size",
        ),
        (["reproduce", "sharing", "--data", "d", "--max-steps", "100000000000000"], "--max-steps"),
        ([*DATA_CREATE, "--workers", "99999999999"], "--workers"),
        ([*DATA_CREATE, "--dupe-factor", "1000000000"], "dupe_factor"),
    ],  # fmt: skip
)
def test_absurd_counts_are_refused_before_work(capsys, monkeypatch, tmp_path, argv, mention):
    """A count past its bound (`values.BOUNDS`) is refused before any input is read, naming the setting,
    the cap and the value: the glue worker count and finetune's accumulation used to end in an internal
    error (OverflowError), a 24-digit seed in "Overflow when unpacking long long", the rest in a run that
    never ends or fills the memory."""
    monkeypatch.chdir(tmp_path)  # the relative paths above name nothing: the bound must come first
    shown = "1e+300" if argv[-1] == "1e300" else argv[-1]
    refused(capsys, argv, mention, "must be <=", f"got {shown}")


# --------------------------------------------------------------------------- records without text
def _records(path: Path, texts: list[str | None]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def test_tokenizer_training_counts_records_without_text(capsys, caplog, tmp_path):
    """`tokenizer train` on JSON Lines: the records whose text is null are left out and counted in its
    summary line, not dropped without a word."""
    lines = made_up_text(tmp_path / "c.txt", 0).read_text().split("\n\n")
    rows = _records(tmp_path / "rows.jsonl", [*lines, None, None, None])
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        assert main(["tokenizer", "train", "--input", str(rows), "--vocab-size", "120",
                     "--output", str(tmp_path / "tok")]) == 0  # fmt: skip
    summary = next(r.getMessage() for r in caplog.records if "unigram model" in r.getMessage())
    assert "3 records with a null or empty text field left out" in summary


def test_distillation_readers_count_records_without_text(caplog, tmp_path):
    """General distillation's sentences and task distillation's --extra-text pairs, read from JSON Lines:
    the records without text are counted in the reading's summary line."""
    from albert_lm.distill.data import read_sentences
    from albert_lm.distill.task import read_extra

    rows = _records(tmp_path / "s.jsonl", ["one two three four.", None, "five six seven eight.", None])
    pairs = _records(tmp_path / "p.jsonl", ["one two\tthree four", None, "five six\tseven"])
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        assert read_sentences(
            [rows], "auto", strip_gutenberg=False, min_words=1, max_segments=100, progress=False
        ) == [
            "one two three four.",
            "five six seven eight.",
        ]
        assert len(read_extra([str(pairs)], pairs=True)) == 2
    text = caplog.text
    assert "2 distinct sentences from 1 file(s); 2 records with a null or empty text field left out" in text
    assert "--extra-text: 2 pairs of texts; 1 record with a null or empty text field left out" in text


def test_pretraining_on_text_counts_records_without_text(caplog, tmp_path, tiny_pretrained):
    """`pretrain --text FILE --init-from MODEL` makes its examples as `data create` does: the records
    without text are counted in its log, as `data create`'s summary counts them."""
    from albert_lm.training.pretrain_config import PretrainConfig
    from albert_lm.training.text_data import data_from_text

    docs = made_up_text(tmp_path / "c.txt", 1).read_text().split("\n\n")
    rows = _records(tmp_path / "rows.jsonl", [*docs, None, ""])
    cfg = PretrainConfig(output=str(tmp_path / "run"), init_from=str(tiny_pretrained))
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        data_from_text(cfg, [str(rows)], {"eval_fraction": 0.2}, progress=False)
    assert "--text: 2 records had a null or empty text field (left out)" in caplog.text


# --------------------------------------------------------------------------- a killed worker
def test_a_killed_worker_leaves_nothing_in_dev_shm(tmp_path):
    """A pool whose worker is killed (SIGKILL, as the system's OOM killer does) fails with one message,
    and the named semaphores of its queues (/dev/shm/sem.mp-*, made under "spawn") are gone when it
    returns, not when the garbage collector happens to run. Only the semaphores this test makes are
    looked at (other processes may use /dev/shm meanwhile), and they are removed however it ends."""
    import multiprocessing.synchronize as synchronize

    from albert_lm.workers import run_pool

    made: list[str] = []
    original = synchronize.SemLock.__init__

    def recorded(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        if self._semlock.name:
            made.append(self._semlock.name)

    synchronize.SemLock.__init__ = recorded  # type: ignore[method-assign]
    try:
        with pytest.raises(ChildProcessError, match="ended without a result"):
            run_pool(signal.raise_signal, [signal.SIGKILL], 1, "test", start="spawn")
        assert made, "the pool made no named semaphore: nothing was checked"
        left = [name for name in made if Path("/dev/shm", "sem." + name.lstrip("/")).exists()]
        assert not left, f"left in /dev/shm after the pool failed: {left}"
    finally:
        synchronize.SemLock.__init__ = original  # type: ignore[method-assign]
        gc.collect()  # whatever today's code left behind is unlinked by its finalizers now


# --------------------------------------------------------------------------- settings files
@pytest.mark.parametrize(
    "command, settings, field, expected",
    [
        (["predict", "--model", "m", "--input", "i"], {"patience": "2"}, "patience", "an integer or null"),
        (
            ["evaluate", "--task", "rte", "--data", "d", "--model", "m"],
            {"patience": "2"},
            "patience",
            "an integer or null",
        ),
        (["embed", "--model", "m", "--text", "a"], {"depth": True}, "depth", "an integer or null"),
        (["fill-mask", "--model", "m", "--text", "a [MASK]"], {"top_k": [5]}, "top_k", "an integer"),
        (["reproduce", "sharing", "--data", "d"], {"cells": ["tied"]}, "cells", "a non-empty string or null"),
        (
            ["reproduce", "sharing", "--data", "d"],
            {"eval_batches": 2.5},
            "eval_batches",
            "an integer or null",
        ),
        (
            FINETUNE,
            {"data": 5},
            "data",
            "a non-empty string",
        ),
        (
            ["glue", "--model", "m", "--data", "d", "--output", "o"],
            {"workers": "2", "epochs": 1},
            "workers",
            "an integer or null",
        ),
        (
            [
                *DISTILL_TASK,
            ],
            {"augment": None},
            "augment",
            "an integer",
        ),
        (["pretrain", "--data", "d", "--output", "o"], {"save_every": {"n": 1}}, "save_every", "an integer"),
    ],  # fmt: skip
)
def test_settings_files_of_wrong_types_name_the_file_and_the_field(
    capsys, monkeypatch, tmp_path, command, settings, field, expected
):
    """A --config value of the wrong type: exit 1, `FILE: FIELD: expected ..., got ...`, whatever the
    command (it used to lose the file's name, or end in an internal error for reproduce's cells)."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "settings.json"
    config.write_text(json.dumps(settings))
    got = json.dumps(settings[field])
    refused(capsys, [*command, "--config", str(config)], f"{config}: {field}: expected {expected}, got {got}")


@pytest.mark.parametrize(
    "command, option, good",
    [
        (["finetune", "--task", "rte", "--model", "m", "--output", "o"], "--data", "d"),
        (["glue", "--model", "m", "--data", "d", "--output", "o"], "--workers", "2"),
        (["predict", "--model", "m", "--input", "i"], "--patience", "2"),
    ],
)
def test_a_wrong_type_in_the_file_is_refused_even_where_the_option_is_typed(
    capsys, monkeypatch, tmp_path, command, option, good
):
    """The file is checked whole, as its unknown keys are: a typed option replaces the file's value but
    does not make a broken file right (left out next time, the file's value would be used)."""
    monkeypatch.chdir(tmp_path)
    field = option.lstrip("-").replace("-", "_")
    config = tmp_path / "settings.json"
    config.write_text(json.dumps({field: [good]}))
    refused(capsys, [*command, option, good, "--config", str(config)], f"{config}: {field}: expected")


_KILLED_PARENT = """
import os, sys, time
from albert_lm.workers import run_pool

def work(_):
    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
    time.sleep(300)

if __name__ == "__main__":
    run_pool(work, [0, 1], 2, "test", start="fork")
"""


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_workers_end_with_a_parent_killed_by_sigkill(tmp_path):
    """A command killed by SIGKILL (or the OOM killer) takes its workers with it: left running, forked
    workers keep its output folder locked ("another albert command is writing there now") for good."""
    import subprocess
    import sys

    script = tmp_path / "pool.py"
    script.write_text(_KILLED_PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    workers: list[int] = []
    try:
        for _ in range(600):  # until both workers have started their task (60 s at most)
            workers = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
            if len(workers) == 2:
                break
            time.sleep(0.1)
        assert len(workers) == 2, "the workers never started"
        parent.kill()
        parent.wait()
        for _ in range(300):  # they notice within a second; 30 s before calling them left behind
            if not any(_alive(pid) for pid in workers):
                break
            time.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their killed parent"
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


_INTERRUPTED_SPAWN = """
import os, signal, sys, threading, time
from albert_lm.workers import run_pool

def work(_):
    from tqdm import tqdm

    for _ in tqdm([1], disable=True):  # a bar, as a fine-tuning run of `albert glue` makes
        pass
    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
    time.sleep(300)

def interrupt_once_started():
    while len([p for p in os.listdir(sys.argv[1]) if p.isdigit()]) < 2:
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGINT)

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored where the test runs in the background
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    try:
        run_pool(work, [0, 1], 2, "test", start="spawn")
    except KeyboardInterrupt:
        print("interrupted")
"""


def test_ctrl_c_over_spawned_workers_leaves_no_semaphore(tmp_path):
    """Ctrl-C while `albert glue`'s spawned runs worked ended with the resource tracker's warning of
    leaked semaphores: tqdm's write lock, a named one, made in each worker by its first bar."""
    import subprocess
    import sys

    script = tmp_path / "pool.py"
    script.write_text(_INTERRUPTED_SPAWN)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.strip() == "interrupted", done.stderr[-2000:]
    assert "leaked semaphore" not in done.stderr, done.stderr[-2000:]


def test_a_worker_whose_work_was_stopped_ends_at_once():
    """A glue run stopped by SIGTERM saved its checkpoint and then sat in its worker, waiting for a next
    task the stopping pool never sends, until it was killed 60 s later: the stop took the whole grace."""
    script = (
        "from albert_lm.workers import _travelling_errors\n"
        "def stopped(task):\n"
        "    raise KeyboardInterrupt  # what a training run raises once its checkpoint is saved\n"
        "_travelling_errors(stopped, 1)\n"
        "print('still here')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 143 and "still here" not in done.stdout
