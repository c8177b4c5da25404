"""`albert_lm.finetune_rows`: fine-tuning on rows held in memory gives the folder `albert finetune` gives."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import albert_lm
from albert_lm.model.heads import AlbertForPreTraining

ROWS = [("kala bime to", "pos"), ("dunora pesi kalo", "neg"), ("tura mepa", "pos"), ("lodi sure kana", "neg")]


@pytest.fixture
def pretrained(tmp_path, tiny_config, tiny_corpus_and_tokenizer):
    torch.manual_seed(0)
    out = tmp_path / "pretrained"
    AlbertForPreTraining(tiny_config(vocab_size=200)).save_pretrained(out)
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", out / "spiece.model")
    return out


def test_rows_in_memory_fine_tune_and_predict(pretrained, tmp_path):
    metrics = albert_lm.finetune_rows(
        pretrained,
        ROWS * 8,
        ROWS,
        tmp_path / "run",
        max_steps=4,
        batch_size=8,
        precision="fp32",
        device="cpu",
    )
    assert 0.0 <= metrics["accuracy"] <= 1.0
    best = tmp_path / "run" / "best"
    saved = json.loads((best / "finetune_config.json").read_text())
    assert saved["task"] == "classification" and sorted(saved["labels"]) == ["neg", "pos"]
    predicted = albert_lm.Predictor(best, device="cpu").predict([t for t, _ in ROWS])
    assert [p["label"] in ("neg", "pos") for p in predicted] == [True] * 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the rows' folder is gone


def test_rows_in_memory_refusals(pretrained, tmp_path):
    with pytest.raises(ValueError, match="no train rows"):
        albert_lm.finetune_rows(pretrained, [], ROWS, tmp_path / "a")
    with pytest.raises(ValueError, match="row 2: 4 values"):
        albert_lm.finetune_rows(pretrained, [("a", "b"), ("a", "b", "c", "d")], ROWS, tmp_path / "b")
    with pytest.raises(ValueError, match="rows in memory are for"):
        albert_lm.finetune_rows(pretrained, ROWS, ROWS, tmp_path / "c", task="sst2")
    with pytest.raises(ValueError, match=r"^train rows:2: missing value for column 'text'") as e:
        albert_lm.finetune_rows(pretrained, [("a", "pos"), (None, "neg")], ROWS, tmp_path / "d")
    assert ".rows-" not in str(e.value)  # the scratch file it was written to is no name for the user
    with pytest.raises(TypeError, match="model: expected a model folder or hub id"):
        albert_lm.finetune_rows(5, ROWS, ROWS, tmp_path / "e")  # type: ignore[arg-type]
    tagged = [(["Ann", "sings"], ["B-PER", "O"])]  # a token classifier's rows, the task left out
    with pytest.raises(
        ValueError, match='row 1: .*rows of a token classifier; pass task="token-classification"'
    ):
        albert_lm.finetune_rows(pretrained, tagged, tagged, tmp_path / "f")


def test_python_callers_get_python_errors_and_may_give_paths(pretrained, tmp_path):
    """evaluate_model's counts are checked by name (batch_size="8" was a TypeError from deep inside,
    max_eval_examples=0 evaluated every row); the settings classes take pathlib paths, as the functions do."""
    with pytest.raises(TypeError, match="batch_size must be an integer or None"):
        albert_lm.evaluate_model("sst2", pretrained, tmp_path, batch_size="8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_eval_examples must be at least 1, got 0"):
        albert_lm.evaluate_model("sst2", pretrained, tmp_path, max_eval_examples=0)
    cfg = albert_lm.FinetuneConfig(task="sst2", model=pretrained, data=tmp_path, output=tmp_path / "o")
    assert (cfg.model, cfg.output) == (str(pretrained), str(tmp_path / "o"))  # as a settings file holds them
    with pytest.raises(ValueError, match="preset 'tiny': expected one of albert-base"):
        albert_lm.PretrainConfig(preset="tiny")  # refused when made, not when pretrain() starts
    with pytest.raises(ValueError, match="unknown model field.*'hiden_size'"):
        albert_lm.PretrainConfig(model_overrides={"hiden_size": 8})


@pytest.mark.parametrize("resumed_by", ["python", "cli"])
def test_a_stopped_run_of_rows_resumes_from_the_same_rows(pretrained, tmp_path, monkeypatch, resumed_by):
    """A signal stops the run after its first step (checkpoint saved): the rows stay beside the output,
    and the same call with resume=True (or `albert finetune --output OUT --resume`) continues on them;
    they are removed once the run has finished (the command left them there for good)."""
    from conftest import signal_after_step

    from albert_lm.training import loop

    settings = dict(max_steps=4, batch_size=8, precision="fp32", device="cpu", save_every=1)
    take = signal_after_step(monkeypatch, stop_at=1)
    with pytest.raises(albert_lm.FinetuneStopped):  # exported: a caller catches it
        albert_lm.finetune_rows(pretrained, ROWS * 8, ROWS, tmp_path / "run", **settings)
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith(".run.rows-")]
    assert sorted(p.name for p in kept.iterdir()) == ["dev.jsonl", "train.jsonl"]
    monkeypatch.setattr(loop, "_take_step", take)
    with pytest.raises(FileExistsError, match="holds another run"):  # refused: the stopped run's rows stay
        albert_lm.finetune_rows(pretrained, ROWS * 8, ROWS, tmp_path / "run", **settings)
    assert kept.is_dir()
    if resumed_by == "cli":
        from albert_lm.cli import main

        assert main(["finetune", "--output", str(tmp_path / "run"), "--resume", "-q"]) == 0
        assert (tmp_path / "run" / "best").is_dir() and not kept.exists()
        return
    metrics = albert_lm.finetune_rows(pretrained, ROWS * 8, ROWS, tmp_path / "run", resume=True, **settings)
    assert metrics["step"] == 4 and not kept.exists()
