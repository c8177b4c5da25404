"""Hostile input for the data side (`albert tokenizer train`, `albert data create`): nothing a user gives
is destroyed, nothing wrong exits 0, no error hangs. Each failure is one line and exit 1, with no
traceback; pre-existing folders are hashed before and after (`refused` of test_bad_input)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import made_up_text
from test_bad_input import folder_hash, refused

from albert_lm.cli import main
from albert_lm.data import shards
from albert_lm.data.dataset import PretrainingDataset
from albert_lm.files import folder_lock

FAST = ["--max-seq-length", "48", "--shard-mb", "0.01", "--no-progress"]


@pytest.fixture(scope="module")
def kit(two_tokenizers, tmp_path_factory) -> dict[str, Path]:
    """Four small corpora (c0, c1: `two_tokenizers`' two), one copy with a line of invalid UTF-8 in the
    middle, a 120-piece tokenizer trained on c0 (`two_tokenizers`' tok_a)."""
    d = tmp_path_factory.mktemp("hostile-data")
    kit = {"c0": two_tokenizers["corpus"], "c1": two_tokenizers["corpus_b"], "tok": two_tokenizers["tok_a"]}
    kit.update({f"c{k}": made_up_text(d / f"c{k}.txt", k) for k in (2, 3)})
    raw = kit["c2"].read_bytes()
    cut = raw.index(b"\n", len(raw) // 2) + 1
    (d / "bad.txt").write_bytes(raw[:cut] + b"caf\xe9 \xff\xfe broken\n" + raw[cut:])
    kit["bad"], kit["bad_line"] = d / "bad.txt", raw[:cut].count(b"\n") + 1
    return kit


def _create(
    kit: dict, out: Path, *inputs: Path, more: tuple[str, ...] = (), tok: Path | None = None
) -> list[str]:
    """`albert data create` of INPUTS (default: c0) with the kit's tokenizer (or `tok`) into `out`."""
    files = [str(p) for p in inputs] or [str(kit["c0"])]
    return ["data", "create", "--input", *files, "--tokenizer", str(tok or kit["tok"]), "--output", str(out),
            *FAST, *more]  # fmt: skip


def _cli(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """`albert ARGS` in a fresh process (a hang fails the test at `timeout` instead of blocking it)."""
    return subprocess.run(
        [sys.executable, "-m", "albert_lm.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def _one_line_error(proc: subprocess.CompletedProcess, *expected: str) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, proc.stderr
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


# ------------------------------------------------------------------------------- workers: no hang, ever
def test_invalid_utf8_in_one_of_several_files_fails_fast_with_workers(kit, tmp_path) -> None:
    """The hang: a worker's InputError could not be rebuilt in the parent, the pool waited forever."""
    inputs = [kit["c0"], kit["c1"], kit["bad"], kit["c3"]]
    for workers in (["--workers", "2"], []):  # 2 workers, and the default (the CPU count)
        t0 = time.monotonic()
        proc = _cli(_create(kit, tmp_path / f"out{len(workers)}", *inputs, more=tuple(workers)))
        _one_line_error(
            proc, f"{kit['bad']}: invalid UTF-8", f"line {kit['bad_line']} ", "--skip-invalid-utf8"
        )
        assert time.monotonic() - t0 < 60


def test_worker_killed_or_unpicklable_error_ends_the_run(kit, tmp_path, monkeypatch, capsys) -> None:
    """Whatever happens in a worker reaches the parent within seconds as one line, and the other workers
    are stopped: an error that cannot be pickled, one that cannot be unpickled, a worker killed."""

    class Unpicklable(RuntimeError):
        def __init__(self) -> None:
            super().__init__("holds a lock")
            self.lock = __import__("threading").Lock()

    class NeedsTwoArguments(RuntimeError):  # pickles, but fails to unpickle (InputError's old bug)
        def __init__(self, a: str, b: str) -> None:
            super().__init__(f"{a} and {b}")

    def unpicklable(task: dict) -> dict:
        raise Unpicklable()

    def two_arguments(task: dict) -> dict:
        raise NeedsTwoArguments("this", "that")

    def killed(task: dict) -> dict:
        os.kill(os.getpid(), 9)
        return {}

    cases = [(unpicklable, "Unpicklable: holds a lock"), (two_arguments, "NeedsTwoArguments: this and that"),
             (killed, "worker process ended without a result")]  # fmt: skip
    for k, (build, message) in enumerate(cases):
        monkeypatch.setattr(shards, "build_shard", build)  # forked workers inherit it
        before = set(_children())
        t0 = time.monotonic()
        refused(
            capsys, _create(kit, tmp_path / f"o{k}", kit["c0"], kit["c1"], more=("--workers", "2")), message
        )
        assert time.monotonic() - t0 < 30
        deadline = time.monotonic() + 10
        while set(_children()) - before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not set(_children()) - before, "workers left running"


def _children() -> list[int]:
    """This process's live child processes (Linux)."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        children = (task / "children").read_text().split() if (task / "children").exists() else []
        for pid in children:
            stat = Path(f"/proc/{pid}/stat")
            if stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z":
                found.append(int(pid))
    return found


def test_tokenizer_train_invalid_utf8_names_file_and_line(kit, tmp_path, capsys) -> None:
    argv = ["tokenizer", "train", "--input", str(kit["c0"]), str(kit["bad"]), "--vocab-size", "120", "--output",
            str(tmp_path / "tok")]  # fmt: skip
    line = refused(capsys, argv, f"{kit['bad']}: invalid UTF-8 at byte offset", f"line {kit['bad_line']} ")
    assert "SentencePiece" not in line
    assert not (tmp_path / "tok").exists()  # made by the refused run and empty: removed


# ------------------------------------------------------------------------------- every file checksummed
def test_damaged_word_start_is_refused(kit, tmp_path) -> None:
    out = tmp_path / "data"
    assert main(_create(kit, out, more=("--workers", "1"))) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"spiece.model", "tokenizer_config.json", "word_start.npy"}
    PretrainingDataset(out).verify()
    table = np.load(out / "word_start.npy")
    np.save(out / "word_start.npy", np.zeros_like(table))  # zeroed: mlm_loss 0.0 and exit 0, before
    with pytest.raises(ValueError, match="word_start.npy: damaged or changed"):
        PretrainingDataset(out).verify()
    # data made before the manifest listed these files: the table is checked against its tokenizer
    del manifest["files"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="word_start.npy: damaged or changed"):
        PretrainingDataset(out).verify()
    np.save(out / "word_start.npy", table)
    PretrainingDataset(out).verify()
    (out / "word_start.npy").write_bytes(b"")  # not even an array: named, not a numpy traceback
    with pytest.raises(ValueError, match="word_start.npy"):
        PretrainingDataset(out)


def test_changed_tokenizer_config_is_refused(kit, tmp_path) -> None:
    out = tmp_path / "data"
    assert main(_create(kit, out, more=("--workers", "1"))) == 0
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    with pytest.raises(ValueError, match="tokenizer_config.json: damaged or changed"):
        PretrainingDataset(out).verify()


# ------------------------------------------------------------------------------- outputs apart from inputs
def test_data_create_output_apart_from_inputs(kit, tmp_path, capsys) -> None:
    text = tmp_path / "in.txt"
    shutil.copy(kit["c0"], text)
    holder = tmp_path / "holder"
    holder.mkdir()
    shutil.copy(kit["c0"], holder / "in.txt")
    tok = tmp_path / "tok"
    shutil.copytree(kit["tok"], tok)
    keep = (text, holder, tok)
    cases = [
        (_create(kit, text, text), "is the --input"),
        (_create(kit, holder, holder / "in.txt"), "holds the --input"),
        (_create(kit, tok / "data", kit["c0"], tok=tok), "lies inside the --tokenizer folder"),
        (_create(kit, tok, kit["c0"], tok=tok), "is the --tokenizer"),
        (_create(kit, tok, kit["c0"], tok=tok / "spiece.model"), "holds the --tokenizer"),
    ]
    for argv, message in cases:
        refused(capsys, argv, message, untouched=tuple(p for p in keep if p.is_dir()))
        assert text.read_bytes() == kit["c0"].read_bytes()
    assert not (tok / "data").exists()


def test_tokenizer_train_output_apart_from_inputs(kit, tmp_path, capsys) -> None:
    text = tmp_path / "in.txt"
    shutil.copy(kit["c0"], text)
    old = tmp_path / "old"
    shutil.copytree(kit["tok"], old)
    (old / "spiece.vocab").write_bytes(kit["c0"].read_bytes())  # a text file named like ours, given as input
    train = ["tokenizer", "train", "--vocab-size", "120"]
    refused(capsys, [*train, "--input", str(text), "--output", str(text)], "is the --input")
    refused(
        capsys,
        [*train, "--input", str(old / "spiece.vocab"), "--output", str(old), "--overwrite"],
        "holds the --input",
        untouched=(old,),
    )
    refused(capsys, [*train, "--input", str(text), "--output", str(tmp_path / "in.txt" / "x")], "in.txt")
    assert text.read_bytes() == kit["c0"].read_bytes()


# ------------------------------------------------------------------------------- two writers
def test_second_writer_is_refused(kit, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    with folder_lock(out):
        refused(capsys, _create(kit, out, more=("--workers", "1")), "another albert command is writing there")
        refused(
            capsys,
            ["tokenizer", "train", "--input", str(kit["c0"]), "--vocab-size", "120", "--output", str(out)],
            "another albert command is writing there",
        )
        assert not any(out.iterdir())
    assert main(_create(kit, out, more=("--workers", "1"))) == 0  # the lock went with its holder


# ------------------------------------------------------------------------------- refused, then corrected
def test_refused_run_does_not_block_the_corrected_rerun(kit, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    # refused while planning (a bad setting, a missing input): nothing is created
    refused(capsys, _create(kit, out, more=("--max-seq-length", "4")), "max_seq_length 4")
    refused(capsys, _create(kit, out, tmp_path / "missing.txt"), "missing.txt")
    refused(capsys, _create(kit, out, more=("--shard-mb", "inf")), "--shard-mb inf")
    assert not out.exists()
    # refused while reading (the bad line is found by a worker): the corrected rerun starts clean
    bad = ["data", "create", "--input", str(kit["bad"]), "--tokenizer", str(kit["tok"]), "--output", str(out),
           "--max-seq-length", "48", "--no-progress", "--workers", "1"]  # fmt: skip
    refused(capsys, bad, "invalid UTF-8")
    assert not out.exists()  # it finished no shard: what it wrote is gone
    assert main([*bad, "--skip-invalid-utf8"]) == 0
    assert PretrainingDataset(out).manifest["summary"]["skipped_invalid_utf8_lines"] == 1
    # a run that made no examples, then one that does
    lone = tmp_path / "lone.txt"
    lone.write_text("one lone sentence.\n\nanother lone one.\n")
    out2 = tmp_path / "out2"
    out2.mkdir()  # given, empty: kept, and left empty
    refused(capsys, _create(kit, out2, lone, more=("--workers", "1")), "no training examples")
    assert out2.is_dir() and not any(out2.iterdir())
    assert main(_create(kit, out2, kit["c0"], more=("--workers", "1"))) == 0


def test_unfinished_run_with_finished_shards_is_kept(kit, tmp_path, capsys) -> None:
    """The clearing above never touches a run that finished shards with examples, nor other files."""
    out = tmp_path / "out"
    assert main(_create(kit, out, more=("--workers", "1"))) == 0
    (out / "manifest.json").unlink()  # killed before the end
    before = folder_hash(out)
    refused(
        capsys,
        _create(kit, out, more=("--workers", "1", "--max-seq-length", "64")),
        "an unfinished run made otherwise (max_seq_length:",
        "there, 64 now",
        "rerun the command that started it",
    )
    assert folder_hash(out) == before


# ------------------------------------------------------------------------------- the recipe's tokenizer section
def test_tokenizer_recipe_is_checked(kit, tmp_path, capsys) -> None:
    train = ["tokenizer", "train", "--input", str(kit["c0"]), "--output", str(tmp_path / "tok"), "--recipe"]
    for section, message in [
        ({"vocab_size": "120"}, '"vocab_size": expected a whole number of at least'),
        ({"vocab_size": 120.5}, "got 120.5"),
        ({"vocab_size": True}, "got True"),
        ({"vocab_size": 3}, "got 3"),
        ({"vocab_sise": 120}, "unknown key(s) vocab_sise"),
    ]:
        recipe = tmp_path / "recipe.json"
        recipe.write_text(json.dumps({"tokenizer": section}))
        refused(capsys, [*train, str(recipe)], str(recipe))
        line = refused(capsys, [*train, str(recipe)], message)
        assert str(recipe) in line
    assert not (tmp_path / "tok").exists()
    recipe.write_text(json.dumps({"tokenizer": {"vocab_size": 120}}))
    assert main([*train, str(recipe)]) == 0


# ------------------------------------------------------------------------------- more hostile cases
def test_more_hostile_cases(kit, tmp_path, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    train = ["tokenizer", "train", "--vocab-size", "120", "--output", str(tmp_path / "t"), "--input"]
    cases = [
        (_create(kit, tmp_path / "o", kit["c0"], kit["c0"]), "given twice"),
        (_create(kit, tmp_path / "o", kit["tok"]), "spiece.model: binary file"),  # a folder: its files
        (_create(kit, tmp_path / "o", fifo), "not a regular file"),
        (_create(kit, tmp_path / "o", empty), "empty input file"),
        (_create(kit, tmp_path / "o", tmp_path / "*.nothing"), "no such input file"),
        (_create(kit, afile), "exists and is not a folder"),
        (_create(kit, tmp_path / "o", more=("--max-line-bytes", "0")), "max_line_bytes 0"),
        ([*train, str(fifo)], "not a regular file"),
        ([*train, str(tmp_path)], "lies inside the --input folder"),
        ([*train, str(tmp_path / "fifo*")], "not a regular file"),
        ([*train, str(kit["c0"]), "--vocab-size", "0"], "vocab_size 0"),
        ([*train, str(kit["c0"]), "--vocab-size", "10000000"], "10000000: this text supports at most"),
        ([*train, str(kit["c0"]), "--max-line-bytes", "-1"], "max_line_bytes -1"),
        (
            ["tokenizer", "train", "--input", str(kit["c0"]), "--output", str(afile)],
            "exists and is not a folder",
        ),
    ]
    for argv, message in cases:
        refused(capsys, argv, message)
    assert afile.read_text() == "keep me"
    assert not (tmp_path / "o").exists() and not (tmp_path / "t").exists()


def test_sigterm_mid_run_then_rerun(kit, tmp_path) -> None:
    """Stopped mid-run: exit 143, no worker traceback; the same command then finishes the data."""
    big = tmp_path / "big.txt"
    # About 7 MB: a few seconds of work, so the signal a second in lands mid-run. At 1.8 MB a fast 2-core
    # machine had finished and was exiting, past its handler, when the signal came (-15).
    big.write_text(kit["c0"].read_text() * 120)
    argv = [
        sys.executable,
        "-m",
        "albert_lm.cli",
        *_create(kit, tmp_path / "out", big, more=("--workers", "2")),
    ]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    # Stopped once the work is under way (under load, interpreter start and imports alone can take
    # seconds: a signal then finds no handler yet and the process dies with -15, having written nothing).
    deadline = time.monotonic() + 60
    while not (tmp_path / "out").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, 143), err  # 0: it was already done
    assert "Traceback" not in err
    done = _cli(_create(kit, tmp_path / "out", big, more=("--workers", "2")))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    PretrainingDataset(tmp_path / "out").verify()
