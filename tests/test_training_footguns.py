"""Settings that used to train nothing, or waste hours, without a word: each now says so or is fixed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import data_argv

from albert_lm.cli import main
from albert_lm.training.clock import LoopClock
from albert_lm.training.optim import build_time_budget_scheduler, fit_warmup, learning_rate_factor
from albert_lm.training.pretrain import SLOW_CPU_ADVICE
from albert_lm.training.pretrain_config import PretrainConfig


def test_a_warmup_as_long_as_the_run_is_shortened_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert fit_warmup(3125, 200, 0.025, "pretrain") == 5
    assert "never reach its peak" in caplog.text and "3125" in caplog.text
    assert fit_warmup(10, 200, 0.025, "pretrain") == 10  # shorter than the run: as asked
    # the run's rate then reaches its peak and decays, instead of peaking at 200/3125 of it
    assert max(learning_rate_factor(s, 5, 200) for s in range(200)) > 0.95


def test_finetune_warmup_longer_than_the_run_is_fitted(caplog):
    from albert_lm.training.finetune_config import FinetuneConfig, schedule

    cfg = FinetuneConfig(
        task="rte", model="m", data="d", output="o", max_steps=20, warmup_steps=500
    ).resolved()
    with caplog.at_level(logging.WARNING):
        total, warmup, _ = schedule(cfg, 100)
    assert (total, warmup) == (20, 2) and "finetune" in caplog.text


def _run_clock(clock: LoopClock, per_step: float, steps: int) -> list[bool]:
    """Ticks `steps` steps of `per_step` seconds each (the monotonic clock frozen in between)."""
    done = []
    for step in range(clock.start + 1, clock.start + steps + 1):
        clock._clock -= per_step  # as if the step took per_step seconds
        done.append(clock.tick(step))
    return done


@pytest.mark.parametrize(
    "cpu, steps, per_step, warned",
    [(True, 125_000, 2.0, True), (True, 2000, 2.0, False), (False, 125_000, 2.0, False)],
)
def test_a_cpu_run_of_many_hours_says_so_and_names_the_recipe(caplog, cpu, steps, per_step, warned):
    clock = LoopClock("pretrain", step=0, total_steps=steps, cpu=cpu, slow_advice=SLOW_CPU_ADVICE)
    with caplog.at_level(logging.INFO):
        _run_clock(clock, per_step, LoopClock.WARM + LoopClock.MEASURED)
    assert "hours here" in caplog.text
    assert ("--recipe cpu-1h" in caplog.text) == warned


def test_a_long_run_says_the_time_left_again_at_the_pace_since(caplog):
    """The time left is said a few steps in, then every five minutes at the pace since: a machine that
    gets busy (the demo beside another job) is told so, not left with the first figure."""
    clock = LoopClock("demo", step=0, total_steps=2500, cpu=True)
    with caplog.at_level(logging.INFO):
        for step in range(1, 113):
            clock._clock -= 1.0 if step <= 12 else 4.0  # 1 s per step, then 4 s from step 13 on
            clock.tick(step)
    said = [r.getMessage() for r in caplog.records if "steps left" in r.getMessage()]
    assert len(said) == 2, said  # at step 12, and 300 s later (75 slower steps)
    assert "1.00 s per step: the 2488 steps left take about 41 minutes" in said[0]
    assert "4.00 s per step: the 2413 steps left take about 2.7 hours" in said[1]


def _budget_clock(budget_s: float, warmup: int, step: int = 0, total_steps: int = 1_000_000) -> LoopClock:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    scheduler = build_time_budget_scheduler(optimizer, warmup)
    return LoopClock(
        "pretrain",
        step=step,
        total_steps=total_steps,
        budget="2m",
        budget_s=budget_s,
        scheduler=scheduler,
        warmup_fraction=0.1,
    )


def test_a_time_budget_that_cannot_leave_the_warmup_shortens_it_and_says_so(caplog):
    # 2 minutes at 4 s per step: about 30 steps against a 150-step warm-up (the reported cpu-1h --time-budget 2m)
    clock = _budget_clock(120.0, 150)
    with caplog.at_level(logging.INFO):
        done = _run_clock(clock, 4.0, 30)
        clock.finished(30)
    factor = clock.scheduler.lr_lambdas[0]
    assert done[-1] and not any(done[:-1])  # the budget is spent at its last step, not before
    assert factor.warmup_steps == 3 and "fewer than the warm-up of 150" in caplog.text
    assert "time budget 2m spent at step 30" in caplog.text
    assert "inside its warm-up" not in caplog.text  # the shortened warm-up was left
    factor.progress = 0.25  # a quarter of the budget in: the rate is at 75% of its peak, past the warm-up
    assert factor(8) == pytest.approx(0.75)  # the 150-step warm-up would give it 8 / 150
    caplog.clear()
    roomy = _budget_clock(3600.0, 150)
    with caplog.at_level(logging.WARNING):
        _run_clock(roomy, 4.0, 20)
    assert roomy.scheduler.lr_lambdas[0].warmup_steps == 150 and not caplog.text  # a budget that leaves it


def test_a_run_that_ends_inside_its_warmup_says_so(caplog):
    clock = _budget_clock(20.0, 150)  # spent before the pace is measured
    with caplog.at_level(logging.WARNING):
        done = _run_clock(clock, 4.0, 5)
        clock.finished(5)
    assert done[-1] and "the run ended at step 5, inside its warm-up of 150 steps" in caplog.text


def test_a_step_limit_inside_the_time_budget_says_the_rate_never_decayed(caplog):
    clock = _budget_clock(3600.0, 5, total_steps=20)  # an hour's schedule, stopped by the step limit at 20
    with caplog.at_level(logging.INFO):
        _run_clock(clock, 4.0, LoopClock.WARM + LoopClock.MEASURED)
        # said once the pace is known, not only at the end
        assert "the step limit of 20 steps ends the run at about 2% of the time budget 2m" in caplog.text
        _run_clock(clock, 4.0, 20 - LoopClock.WARM - LoopClock.MEASURED)
        clock.finished(20)
    assert (
        "the step limit of 20 steps ended the run at step 20" in caplog.text
        and "had not decayed" in caplog.text
    )
    assert "schedule complete" not in caplog.text


def test_learning_rate_help_figures_are_computed(capsys):
    assert PretrainConfig.scaled_learning_rate(1024) == pytest.approx(8.8e-4)
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "0.00088 at 1024" in help_text and "0.0011 at 1024" not in help_text


@pytest.fixture(scope="module")
def sop_data(tmp_path_factory, tiny_corpus_and_tokenizer) -> Path:
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path_factory.mktemp("footgun") / "data"
    assert main(data_argv(corpus, tok, out, "--max-seq-length", "32", "--dupe-factor", "1", "--workers", "1",
                          "-q")) == 0  # fmt: skip
    return out


def _steps(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if r.get("split") == "train"]


def test_resume_alone_reads_the_runs_settings_and_a_finished_run_extends(sop_data, tmp_path, caplog):
    run = tmp_path / "run"
    base = ["pretrain", "--data", str(sop_data), "--output", str(run), "--preset", "albert-tiny",
            "--batch-size", "4", "--log-every", "1", "--save-every", "2", "--no-tensorboard", "--no-plot",
            "--precision", "fp32", "--device", "cpu", "-q"]  # fmt: skip
    assert main([*base, "--max-steps", "4", "--model-override", "num_hidden_layers=1"]) == 0
    before = (run / "metrics.jsonl").read_text()
    assert main(["pretrain", "--output", str(run), "--resume", "-q"]) == 0  # finished: nothing more to do
    assert max(_steps(run)) == 4 and (run / "metrics.jsonl").read_text() == before  # no record twice
    with caplog.at_level(logging.WARNING):
        assert main(["pretrain", "--output", str(run), "--resume", "--max-steps", "6"]) == 0
    assert max(_steps(run)) == 6
    assert "the learning-rate schedule is now a 6-step run's" in caplog.text
    saved = json.loads((run / "pretrain_config.json").read_text())
    assert saved["max_steps"] == 6 and saved["model_overrides"] == {"num_hidden_layers": 1}


def test_the_papers_rate_at_a_small_batch_is_warned_with_the_scaled_one(sop_data, tmp_path, caplog):
    """0.00176 is the paper's rate for a global batch of 4096; a run at batch 4 took it silently."""
    base = ["pretrain", "--data", str(sop_data), "--preset", "albert-tiny", "--batch-size", "4", "--max-steps",
            "1", "--no-tensorboard", "--no-plot", "--precision", "fp32", "--device", "cpu",
            "--model-override", "num_hidden_layers=1"]  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert main([*base, "--output", str(tmp_path / "a")]) == 0
    assert (
        "lr 0.00176 is the paper's for a global batch of 4096; at 4 the square-root rule gives 5.5e-05"
        in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main([*base, "--output", str(tmp_path / "b"), "--learning-rate", "5e-5"]) == 0
    assert "square-root rule" not in caplog.text  # a rate chosen: not second-guessed


def test_a_finetuning_run_whose_loss_turns_non_finite_stops_with_pretrainings_error(
    tiny_sst2, tmp_path, capsys
):
    """At an absurd learning rate the weights turn NaN within steps: the run stops with exit 1 at that step,
    saving no model, instead of finishing with exit 0 and a broken best/."""
    out = tmp_path / "run"
    argv = ["finetune", "--task", "sst2", "--model", str(tiny_sst2 / "base"), "--data", str(tiny_sst2 / "sst2"),
            "--output", str(out), "--max-steps", "6", "--batch-size", "8", "--learning-rate", "1e30",
            "--warmup-steps", "0", "--device", "cpu", "--precision", "fp32", "--no-tensorboard", "--no-plot",
            "-q"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "the loss or the gradient is not finite" in err and "Lower --learning-rate" in err, err
    assert not (out / "best").exists()


@pytest.mark.distributed
def test_pretraining_under_torchrun_prints_its_result_once(sop_data, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
           "albert_lm.cli", "pretrain", "--data", str(sop_data), "--output", str(out), "--preset", "albert-tiny",
           "--batch-size", "2", "--max-steps", "2", "--no-tensorboard", "--no-plot", "--precision", "fp32",
           "--device", "cpu", "-q"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    printed = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    assert printed == [{"output": str(out), "step": 2, "interrupted": False}], p.stdout


def test_an_estimate_on_a_busy_cpu_says_the_machine_is_busy(monkeypatch):
    """On a loaded machine the first estimate read 45 minutes for a demo documented at 7-13: it now says
    the load it was measured under."""
    import os

    from albert_lm.training import clock

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (4.5, 4.0, 3.0), raising=False)
    assert clock.busy() == " (the machine is busy: load average 4.5 on 2 cores; idle, it would be sooner)"
    monkeypatch.setattr(os, "getloadavg", lambda: (2.9, 2.0, 2.0), raising=False)
    assert clock.busy() == ""  # this run's own threads load the cores too
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS: the cores the machine has
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (4.5, 4.0, 3.0), raising=False)
    assert "load average 4.5 on 2 cores" in clock.busy()
