"""Settings that used to train nothing, or waste hours, without a word: each now says so or is fixed."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from albert_lm.cli import main
from albert_lm.training.optim import fit_warmup, learning_rate_factor
from albert_lm.training.pretrain import PaceHint
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


def _pace(device: str, steps: int, per_step: float, budget: str | None = None) -> SimpleNamespace:
    cfg = SimpleNamespace(max_steps=steps, time_budget=budget)
    return SimpleNamespace(
        step=0,
        elapsed_s=0.0,
        cfg=cfg,
        d=SimpleNamespace(main=True),
        device=SimpleNamespace(type=device),
        per_step=per_step,
    )


@pytest.mark.parametrize(
    "device, steps, per_step, warned",
    [("cpu", 125_000, 2.0, True), ("cpu", 2000, 2.0, False), ("cuda", 125_000, 2.0, False)],
)
def test_a_cpu_run_of_many_hours_says_so_and_names_the_recipe(caplog, device, steps, per_step, warned):
    run = _pace(device, steps, per_step)
    hint = PaceHint(run)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO):
        for _ in range(PaceHint.WARM + PaceHint.MEASURED):
            run.step += 1
            run.elapsed_s += per_step
            hint.after_step(run)  # type: ignore[arg-type]
    assert "hours here" in caplog.text
    assert ("--recipe cpu-1h" in caplog.text) == warned


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
    assert (
        main(
            [
                "data",
                "create",
                "--input",
                str(corpus),
                "--tokenizer",
                str(tok),
                "--output",
                str(out),
                "--max-seq-length",
                "32",
                "--dupe-factor",
                "1",
                "--workers",
                "1",
                "-q",
            ]
        )
        == 0
    )
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
    assert main(["pretrain", "--output", str(run), "--resume", "-q"]) == 0  # finished: nothing more to do
    assert max(_steps(run)) == 4
    with caplog.at_level(logging.WARNING):
        assert main(["pretrain", "--output", str(run), "--resume", "--max-steps", "6"]) == 0
    assert max(_steps(run)) == 6
    assert "the learning-rate schedule is now a 6-step run's" in caplog.text
    saved = json.loads((run / "pretrain_config.json").read_text())
    assert saved["max_steps"] == 6 and saved["model_overrides"] == {"num_hidden_layers": 1}
