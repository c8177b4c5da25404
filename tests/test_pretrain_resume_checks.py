"""What `albert pretrain --resume` may change, and what it refuses: another global batch (another number of
processes kept only with the accumulation that restores it), other data (a moved copy resumes), a
--max-steps at or below the step reached on a run that has not finished, and a time budget given another
length (taken, and said) or taken on or dropped (refused)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import data_argv, signal_after_step, tiny_pretrain_argv
from test_pretrain import SyntheticData, tiny_run

from albert_lm.cli import main
from albert_lm.training.checkpoint import STATE_FILE
from albert_lm.training.pretrain import pretrain


def _stop_at(step: int):
    """An `on_step` that sends this process SIGTERM after optimizer step `step` (the run saves and stops)."""

    def on_step(now: int) -> None:
        if now == step:
            os.kill(os.getpid(), signal.SIGTERM)

    return on_step


def _edit_state(checkpoint: Path, **changes) -> None:
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    torch.save(state, checkpoint / STATE_FILE)


def _card_row(folder: Path, name: str) -> str:
    rows = [
        line for line in (folder / "README.md").read_text().splitlines() if line.startswith(f"| {name} |")
    ]
    assert rows, f"no {name!r} row in the card"
    return rows[0]


def test_a_resume_keeps_the_global_batch_of_the_run(tmp_path, one_thread, caplog):
    """A run of 2 processes x batch 4 (global 8) resumed on 1 process: refused at global batch 4 (its rate
    was chosen for 8), naming the accumulation that keeps 8; taken with that accumulation, the card counting
    the sequences in batches of 8. (The 2 processes are the checkpoint's: its state holds 2 ranks, as a
    torchrun run's does, so the test runs in one process.)"""
    out = tmp_path / "run"
    r = pretrain(tiny_run(out, max_steps=6, save_every=0), train_dataset=SyntheticData(), on_step=_stop_at(3))
    assert r.interrupted and r.step == 3
    state = torch.load(out / "checkpoint-3" / STATE_FILE, weights_only=True)
    _edit_state(out / "checkpoint-3", ranks=[state["ranks"][0]] * 2, global_batch=8)

    with pytest.raises(ValueError) as refused:
        pretrain(tiny_run(out, max_steps=6, resume=True), train_dataset=SyntheticData())
    said = str(refused.value)
    assert "global batches of 8 sequences (batch size 4 x accumulation 1 x 2 processes)" in said
    assert "this one would take 4 (batch size 4 x accumulation 1 x 1 process)" in said
    assert "Keep 8: --gradient-accumulation-steps 2 on 1 process, or 2 processes" in said
    with pytest.raises(ValueError, match="this one would take 12"):  # an accumulation that misses it
        pretrain(
            tiny_run(out, max_steps=6, resume=True, gradient_accumulation_steps=3),
            train_dataset=SyntheticData(),
        )
    assert not (out / "model.safetensors").exists()  # nothing trained or written

    with caplog.at_level(logging.WARNING):
        r = pretrain(
            tiny_run(out, max_steps=6, resume=True, gradient_accumulation_steps=2),
            train_dataset=SyntheticData(),
        )
    assert not r.interrupted and r.step == 6
    assert "resuming with 1 process where the run had 2" in caplog.text
    assert _card_row(out, "global batch").startswith("| global batch | 8 sequences")
    assert _card_row(out, "sequences seen") == "| sequences seen | 48 |"
    assert json.loads((out / "pretrain_config.json").read_text())["gradient_accumulation_steps"] == 2


def test_a_resume_on_other_data_is_refused_and_a_moved_copy_resumes(
    two_tokenizers, tmp_path, one_thread, capsys, monkeypatch
):
    """--data may move (a copy of the same data resumes), but a folder of other data (same tokenizer, other
    text) is refused naming both folders; a checkpoint recorded before the data was, resumes as it did."""
    w = two_tokenizers
    other = tmp_path / "other"
    more = ["--max-seq-length", "48", "--eval-fraction", "0.2", "--shard-mb", "0.01", "--workers", "1"]
    assert main(data_argv(w["corpus_b"], w["tok_a"], other, *more, "--no-progress")) == 0
    run = tmp_path / "run"
    signal_after_step(monkeypatch, 2)
    assert main(tiny_pretrain_argv(w["data_a"], run, "--max-steps", "6", "-q")) == 143
    capsys.readouterr()

    assert main(tiny_pretrain_argv(other, run, "--max-steps", "6", "--resume", "-q")) != 0
    said = capsys.readouterr().err
    assert (
        f"--data {other} is not the data the run in {run / 'checkpoint-2'} was trained on, {w['data_a']}"
        in said
    )
    assert f"Resume with --data {w['data_a']} (a moved copy of it is the same data)" in said

    moved = tmp_path / "moved"
    shutil.copytree(w["data_a"], moved)
    signal_after_step(monkeypatch, 4)
    assert main(tiny_pretrain_argv(moved, run, "--max-steps", "6", "--resume", "-q")) == 143
    _edit_state(run / "checkpoint-4", data=None)  # as a checkpoint of an older albert-lm
    assert main(tiny_pretrain_argv(other, run, "--max-steps", "6", "--resume", "-q")) == 0


def test_max_steps_at_or_below_the_step_reached_is_refused_unless_the_run_had_finished(tmp_path, one_thread):
    """Below the step reached: refused (a run cannot go back). At it, on a run that had not finished: refused
    (it would be written as a finished run of that length, its rate not decayed); on a finished run: its
    final files written again, the card still 'N of N'."""
    out = tmp_path / "run"
    r = pretrain(tiny_run(out, max_steps=6, save_every=0), train_dataset=SyntheticData(), on_step=_stop_at(3))
    assert r.interrupted and r.step == 3
    below = r"--max-steps 2 is below step 3, which the run in .* has reached \(it was for 6 steps\): a resumed run"
    with pytest.raises(ValueError, match=below):
        pretrain(tiny_run(out, max_steps=2, resume=True), train_dataset=SyntheticData())
    at = r"--max-steps 3 is step 3, .*: the run would end there without training, its learning rate not decayed"
    with pytest.raises(ValueError, match=at):
        pretrain(tiny_run(out, max_steps=3, resume=True), train_dataset=SyntheticData())
    assert not (out / "model.safetensors").exists() and not (out / "pretrain_config.json").exists()

    r = pretrain(tiny_run(out, max_steps=6, resume=True), train_dataset=SyntheticData())
    assert not r.interrupted and r.step == 6
    with pytest.raises(ValueError, match="--max-steps 4 is below step 6"):
        pretrain(tiny_run(out, max_steps=4, resume=True), train_dataset=SyntheticData())
    r = pretrain(tiny_run(out, max_steps=6, resume=True), train_dataset=SyntheticData())  # finished: taken
    assert r.step == 6 and _card_row(out, "steps") == "| steps | 6 of 6 |"
    assert json.loads((out / "pretrain_config.json").read_text())["max_steps"] == 6


def test_a_resumed_run_may_take_another_time_budget_but_not_drop_one(tmp_path, one_thread, caplog):
    """A pre-empted run given a longer budget goes on under it (said: the schedule is now the new budget's);
    a budget the run has spent already is refused, and so is dropping the budget (its rate decays over the
    time, not over --max-steps)."""
    out = tmp_path / "run"
    common = dict(max_steps=100_000, save_every=0, log_every=10_000)
    r = pretrain(
        tiny_run(out, time_budget="2s", **common), train_dataset=SyntheticData(), on_step=_stop_at(2)
    )
    assert r.interrupted and r.step == 2
    with caplog.at_level(logging.WARNING):
        r = pretrain(tiny_run(out, time_budget="3s", resume=True, **common), train_dataset=SyntheticData())
    assert (
        "--time-budget 3s (the run was for 2s): the learning-rate schedule is now a 3s run's" in caplog.text
    )
    assert not r.interrupted and r.step > 2
    spent = torch.load(out / f"checkpoint-{r.step}" / STATE_FILE, weights_only=True)["elapsed_s"]
    assert spent >= 3.0
    with pytest.raises(ValueError, match=r"--time-budget 2s is spent already: the run in .* has trained for"):
        pretrain(tiny_run(out, time_budget="2s", resume=True, **common), train_dataset=SyntheticData())
    dropped = "runs under --time-budget 3s, this one would have none: its learning rate decays over the time"
    with pytest.raises(ValueError, match=dropped):
        pretrain(tiny_run(out, resume=True, **common), train_dataset=SyntheticData())
    steps = tmp_path / "steps"  # and the other way: a run of steps cannot take a budget on
    r = pretrain(
        tiny_run(steps, max_steps=6, save_every=0), train_dataset=SyntheticData(), on_step=_stop_at(2)
    )
    assert r.interrupted
    with pytest.raises(ValueError, match="has no time budget, this one would have --time-budget 3s"):
        pretrain(
            tiny_run(steps, time_budget="3s", resume=True, max_steps=6, save_every=0),
            train_dataset=SyntheticData(),
        )


@pytest.mark.slow
@pytest.mark.distributed
def test_a_torchrun_run_resumed_on_one_process_with_the_accumulation_that_keeps_its_batch(
    tmp_path, one_thread
):
    """The walkthrough's case for real: 2 processes (torchrun) stopped at step 3, resumed on 1 process. Refused
    as it is; with --gradient-accumulation-steps 2 it ends where a 1-process run of batch 4 x 2 ends (the same
    micro-batches: the data order kept)."""
    from test_pretrain import _torchrun, _weights

    out = tmp_path / "ddp"
    cfg = {"output": str(out), "max_steps": 6, "save_every": 0}
    p = _torchrun(tmp_path, {"cfg": cfg, "kill_at": 3, "signal": "SIGTERM"})
    assert "RESULT 3 True" in p.stdout, p.stderr[-3000:]
    with pytest.raises(ValueError, match=r"global batches of 8 .* this one would take 4"):
        pretrain(tiny_run(out, max_steps=6, resume=True), train_dataset=SyntheticData())
    resumed = tiny_run(out, max_steps=6, resume=True, gradient_accumulation_steps=2)
    assert pretrain(resumed, train_dataset=SyntheticData()).step == 6
    single = tmp_path / "single"
    pretrain(
        tiny_run(single, max_steps=6, save_every=0, gradient_accumulation_steps=2),
        train_dataset=SyntheticData(),
    )
    a, b = _weights(single), _weights(out)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    assert _card_row(out, "sequences seen") == "| sequences seen | 48 |"
