"""Checkpoint folders: atomic, complete-or-absent, keep-last-k, RNG round trip, safe loading."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch

from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.checkpoint import (
    STATE_FILE,
    TMP_PREFIX,
    capture_rng_state,
    latest_checkpoint,
    list_checkpoints,
    load_training_state,
    remove_stale_temporaries,
    restore_rng_state,
    save_checkpoint,
)
from albert_lm.training.optim import build_optimizer


@pytest.fixture
def tiny_model(tiny_config) -> AlbertForPreTraining:
    torch.manual_seed(0)
    return AlbertForPreTraining(tiny_config())


def test_rng_round_trip_restores_every_generator():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = capture_rng_state()
    a = (random.random(), float(np.random.rand()), torch.rand(3))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    restore_rng_state(state)
    b = (random.random(), float(np.random.rand()), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_save_keep_last_and_resume_state(tiny_model, tmp_path):
    model = tiny_model
    opt = build_optimizer(model, "lamb", lr=1e-3)
    model(input_ids=torch.tensor([[2, 5, 6, 3]])).prediction_logits.sum().backward()
    opt.step()
    for step in (2, 4, 6, 8):
        state = {"step": step, "optimizer": opt.state_dict(), "rng": [capture_rng_state()]}
        save_checkpoint(tmp_path, step, model, state, run_config={"seed": 1}, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-6", "checkpoint-8"]
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "checkpoint-8"
    loaded = load_training_state(latest)
    assert loaded["step"] == 8
    opt2 = build_optimizer(tiny_model, "lamb", lr=1e-3)
    opt2.load_state_dict(loaded["optimizer"])
    s1 = opt.state_dict()["state"]
    s2 = opt2.state_dict()["state"]
    assert s1.keys() == s2.keys()
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)
    assert not list(tmp_path.glob(f"{TMP_PREFIX}*"))


def test_incomplete_folders_are_never_resumed(tiny_model, tmp_path):
    model = tiny_model
    save_checkpoint(tmp_path, 3, model, {"step": 3})
    # A run killed mid-save leaves a temporary folder, or a final-named folder without its state file
    # (only possible if someone copied files by hand): neither counts.
    (tmp_path / f"{TMP_PREFIX}9").mkdir()
    (tmp_path / "checkpoint-7").mkdir()
    (tmp_path / "checkpoint-7" / "config.json").write_text("{}")
    assert latest_checkpoint(tmp_path).name == "checkpoint-3"
    remove_stale_temporaries(tmp_path)
    assert not (tmp_path / f"{TMP_PREFIX}9").exists()


def test_saving_a_step_again_replaces_its_folder(tiny_model, tmp_path):
    model = tiny_model
    save_checkpoint(tmp_path, 5, model, {"step": 5, "mark": 1})
    save_checkpoint(tmp_path, 5, model, {"step": 5, "mark": 2})  # e.g. SIGTERM right after a periodic save
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-5"]
    assert load_training_state(tmp_path / "checkpoint-5")["mark"] == 2
    # A kill in the middle of the swap may leave the replaced folder behind: cleared on the next start.
    (tmp_path / ".checkpoint-5.old").mkdir()
    remove_stale_temporaries(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-5"]


def test_state_file_is_loaded_with_weights_only(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("this must never run",))

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    with open(folder / STATE_FILE, "wb") as f:
        pickle.dump({"step": 1, "x": Evil()}, f, protocol=2)
    with pytest.raises(ValueError, match=STATE_FILE):
        load_training_state(folder)
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        load_training_state(tmp_path)


def test_checkpoint_folder_loads_in_transformers(tiny_model, tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_model.eval()
    path = save_checkpoint(tmp_path, 1, model, {"step": 1})
    theirs = transformers.AlbertForPreTraining.from_pretrained(path).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        a = model(input_ids=ids)
        b = theirs(input_ids=ids)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, rtol=1e-4, atol=1e-5)
