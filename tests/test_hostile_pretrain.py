"""Hostile inputs to `albert pretrain` and the shared layer every command writes through: an output that
is, holds or lies inside an input; two runs on one folder; devices as outputs; a run with nothing to
learn; `--init-from` without a shape; signals and refusals from the machine (docs/errors.md)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_pretrain_argv as _pretrain
from test_bad_input import refused

from albert_lm.cli import main
from albert_lm.files import InputError, atomic_write, check_output_apart, folder_lock, is_special_file


# --------------------------------------------------------------------------- the shared layer
def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.txt").write_text("x")
    for out, words in ((data, "is the --data"), (data / "train", "lies inside"), (tmp_path, "holds the")):
        with pytest.raises(ValueError, match=words):
            check_output_apart(out, {"--data": data})
    with pytest.raises(ValueError, match="is the --input"):  # a file input, given by another spelling
        check_output_apart(data / ".." / "data" / "f.txt", {"--input": data / "f.txt"})
    check_output_apart(tmp_path / "elsewhere", {"--data": data, "--model": None})  # apart: no error


def test_devices_are_written_into_never_replaced(tmp_path, stand_ins):
    with pytest.raises(OSError):  # a stream that refuses the bytes fails loudly, never replaced by a file
        atomic_write(stand_ins.broken_pipe, "x" * 10000)
    assert stand_ins.broken_pipe.is_symlink()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    atomic_write(fifo, "through the pipe\n")
    assert reader.communicate(timeout=10)[0] == b"through the pipe\n"
    assert is_special_file(fifo)  # still a pipe
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, "x")


def test_a_folder_lock_refuses_a_second_writer_and_dies_with_its_process(tmp_path):
    out = tmp_path / "out"
    with folder_lock(out), pytest.raises(FileExistsError, match="another albert command"), folder_lock(out):
        pass
    # A holder that is killed leaves nothing locked.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from albert_lm.files import folder_lock\n"
            f"with folder_lock({str(out)!r}):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(FileExistsError), folder_lock(out):
        pass
    holder.kill()
    holder.wait()
    with folder_lock(out):
        pass
    assert [p.name for p in out.iterdir()] == []  # no lock file left behind


def test_a_failed_command_leaves_no_folder_its_lock_made_and_nothing_it_wrote_in(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(KeyboardInterrupt), folder_lock(out):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []  # out and its two parents, made for the lock, are gone
    with pytest.raises(ValueError, match="bad"), folder_lock(out):
        (out / "written").write_text("x")
        raise ValueError("bad")
    assert (out / "written").is_file()  # a folder with something in it is kept
    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError), folder_lock(tmp_path / "kept"):
        raise ValueError
    assert (tmp_path / "kept").is_dir()  # not made here: never removed


def test_input_errors_survive_pickling_into_another_process():
    e = pickle.loads(pickle.dumps(InputError("a.txt", "not UTF-8", line=3)))
    assert isinstance(e, InputError) and str(e) == "a.txt:3: not UTF-8"


# --------------------------------------------------------------------------- albert pretrain
def test_pretrain_never_writes_into_or_deletes_its_inputs(run_world, capsys, tmp_path):
    data = run_world["data_a"]
    for out, words in ((data / "train", "lies inside"), (data, "is the --data")):
        for extra in ((), ("--overwrite",)):
            refused(capsys, [*_pretrain(data, out), *extra], str(out), words, untouched=(data,))
    holder = tmp_path / "holder"
    shutil.copytree(data, holder / "data")  # OUTPUT/data, where `pretrain --text` puts its examples
    refused(
        capsys, [*_pretrain(holder / "data", holder), "--overwrite"], "holds the --data", untouched=(holder,)
    )
    shutil.copytree(data, holder / "elsewhere")
    refused(
        capsys,
        [*_pretrain(holder / "elsewhere", holder), "--overwrite"],
        "holds the --data",
        untouched=(holder,),
    )
    model = run_world["run"]
    refused(
        capsys,
        [*_pretrain(data, model / "sub"), "--init-from", str(model)],
        "lies inside the --init-from",
        untouched=(model,),
    )


def test_a_second_pretraining_run_on_the_same_output_is_refused(run_world, capsys, tmp_path):
    out = tmp_path / "out"
    with folder_lock(out):
        refused(capsys, _pretrain(run_world["data_a"], out), "another albert command is writing there")
    assert [p.name for p in out.iterdir()] == []
    assert main(_pretrain(run_world["data_a"], out)) == 0  # the lock went with its holder
    # a run in progress where one has finished: said as such, not as "another run" to resume or replace
    with folder_lock(out):
        for more in ((), ("--resume",), ("--overwrite",)):
            refused(
                capsys, [*_pretrain(run_world["data_a"], out), *more], "another albert command is writing"
            )


def test_a_run_with_nothing_to_learn_stops_at_its_first_step(tmp_path):
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training.pretrain import NothingToLearnError, pretrain

    class Unmasked(SyntheticData):
        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            item = super().__getitem__(i)
            item["labels"] = torch.full_like(item["labels"], -100)  # no position to predict
            return item

    with pytest.raises(NothingToLearnError, match="step 1: no token was masked"):
        pretrain(tiny_run(tmp_path / "run"), train_dataset=Unmasked())
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_init_from_without_a_shape_takes_the_models_shape(run_world, capsys, tmp_path):
    out = tmp_path / "warm"
    argv = ["pretrain", "--data", str(run_world["data_a"]), "--output", str(out), "--init-from", str(run_world["run"]),
            "--batch-size", "4", "--max-steps", "1", "--no-tensorboard", "--no-plot"]  # fmt: skip
    assert main(argv) == 0
    source = json.loads((run_world["run"] / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    for key in ("hidden_size", "num_hidden_layers", "embedding_size", "intermediate_size"):
        assert config[key] == source[key], key
    assert json.loads((out / "pretrain_config.json").read_text())["model_config"].endswith("config.json")


def test_the_machine_refusing_a_write_is_one_line(run_world, capsys, stand_ins):
    refused(capsys, _pretrain(run_world["data_a"], stand_ins.unwritable), str(stand_ins.unwritable))


def _wait_for(path: Path, p: subprocess.Popen, timeout: float = 60) -> None:
    """Until `path` exists (or `p` ends): a signal sent before then could reach the interpreter's start-up
    rather than the command, and a fixed sleep is too long on a fast machine, too short on a slow one."""
    end = time.monotonic() + timeout
    while not path.exists() and p.poll() is None and time.monotonic() < end:
        time.sleep(0.05)


@pytest.mark.slow
def test_sigint_and_sigterm_stop_any_command_with_a_message(run_world, tmp_path):
    """Started with SIGINT ignored (as `cmd &` in a script starts it), a command still stops on SIGINT;
    SIGTERM ends it with 143 and a line saying so."""
    big = tmp_path / "big.txt"
    text = run_world["corpus"].read_text()
    big.write_text(text * 600)
    for sig, code, words in (
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "stopped by SIGTERM"),
    ):
        out = tmp_path / f"data-{code}"
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "albert_lm.cli",
                "data",
                "create",
                "--input",
                str(big),
                "--tokenizer",
                str(run_world["tok_a"]),
                "--output",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ],
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        _wait_for(out, p)  # the output folder exists: handlers installed, the examples being made
        assert p.poll() is None, "finished before the signal: make the input larger"
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert p.returncode == code, err[-2000:]
        assert words in err and "Traceback" not in err
    # SentencePiece trains in C++ for minutes: the command still stops at once (it trains in a thread).
    bigger = tmp_path / "bigger.txt"
    bigger.write_text(text * 1500)
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "albert_lm.cli",
            "tokenizer",
            "train",
            "--input",
            str(bigger),
            "--vocab-size",
            "150",
            "--output",
            str(tmp_path / "tok"),
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    time.sleep(8)  # start-up, then SentencePiece at work on 90 MB of text
    assert p.poll() is None, p.communicate()[1][-2000:]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "tok" / "spiece.model").exists()
