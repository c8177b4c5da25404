"""A run's folder as a tester killing runs at random moments finds it: a stopped run resumed from a copy of
its folder, a folder holding only the logs of a run killed before its first checkpoint, a damaged newest
checkpoint, a finished run run again, another length given to a resumed fine-tuning, the final files of
a pretraining run, and the line of a stopped GLUE suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import labelled_rows, signal_after_step

import albert_lm
from albert_lm.training.finetune import FinetuneStopped, finetune
from albert_lm.training.finetune_config import FinetuneConfig

WORDS = {"yes": ["bala", "kemo", "fira", "nodu"], "no": ["dusa", "tovi", "ramu", "pelo"]}


def _ft(model: Path, data: Path, out: Path, **kw) -> FinetuneConfig:
    """A tiny fine-tuning: 6 steps of batch 4, evaluated and saved every 2."""
    values = dict(task="classification", model=str(model), data=str(data), output=str(out), max_steps=6,
                  batch_size=4, eval_every=2, save_every=2, log_every=1, precision="fp32", device="cpu",
                  max_seq_length=32, learning_rate=1e-3, tensorboard=False, plot=False)  # fmt: skip
    return FinetuneConfig(**{**values, **kw})


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _same_weights(a: Path, b: Path) -> bool:
    x, y = _weights(a), _weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _stopped(monkeypatch: pytest.MonkeyPatch, step: int, run) -> None:  # noqa: ANN001 - a call
    """`run()` stopped by SIGTERM after optimizer step `step` (its checkpoint saved)."""
    with monkeypatch.context() as m:
        signal_after_step(m, step)
        with pytest.raises(FinetuneStopped):
            run()


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    return labelled_rows(tmp_path / "data", WORDS, {"train": 32, "dev": 12})


# --------------------------------------------------------------------------- 1. a copied or moved folder
def test_a_stopped_fine_tuning_resumes_in_a_copy_or_a_move_of_its_folder(
    tiny_pretrained, rows, tmp_path, monkeypatch, one_thread
):
    """`cp -r run copy; albert finetune ... --output copy --resume` said the settings differ (output: 'run'
    there, 'copy' now): where a run is never stopped a resume. The copy, and the folder moved, resume to
    the result of a run never stopped."""
    whole = finetune(_ft(tiny_pretrained, rows, tmp_path / "whole"))
    _stopped(monkeypatch, 3, lambda: finetune(_ft(tiny_pretrained, rows, tmp_path / "run")))
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    shutil.move(tmp_path / "run", tmp_path / "moved")
    for name in ("copy", "moved"):
        assert finetune(_ft(tiny_pretrained, rows, tmp_path / name, resume=True)) == whole, name
        assert _same_weights(tmp_path / "whole" / "best", tmp_path / name / "best"), name


def test_rows_in_memory_resume_in_a_moved_folder(tiny_pretrained, tmp_path, monkeypatch, one_thread):
    """`finetune_rows` keeps its rows beside the output, named after it: moved, the run's rows are written
    again beside the new name (the same rows, by their digest) and the run resumes there."""
    rows = [("bala kemo fira", "yes"), ("dusa tovi ramu", "no"), ("nodu bala", "yes"), ("pelo dusa", "no")]
    settings = dict(max_steps=4, batch_size=4, precision="fp32", device="cpu", save_every=1, plot=False)
    whole = albert_lm.finetune_rows(tiny_pretrained, rows * 4, rows, tmp_path / "whole", **settings)
    _stopped(
        monkeypatch,
        2,
        lambda: albert_lm.finetune_rows(tiny_pretrained, rows * 4, rows, tmp_path / "run", **settings),
    )
    shutil.move(tmp_path / "run", tmp_path / "moved")
    moved = albert_lm.finetune_rows(
        tiny_pretrained, rows * 4, rows, tmp_path / "moved", resume=True, **settings
    )
    assert moved == whole
    assert _same_weights(tmp_path / "whole" / "best", tmp_path / "moved" / "best")


def test_a_path_to_the_same_files_is_no_change_on_resume(tmp_path):
    """--data given through a link to the folder the run read (or the model's): the same files, no change
    of settings; another folder is one."""
    from albert_lm.training.run_folder import changed_settings

    (tmp_path / "data").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data", target_is_directory=True)
    saved = {"task": "classification", "model": "m", "data": str(tmp_path / "data"), "output": "o"}

    def now(data: Path) -> FinetuneConfig:
        return FinetuneConfig(task="classification", model="m", data=str(data), output="o")

    assert changed_settings(saved, now(tmp_path / "link")) == []
    assert changed_settings(saved, now(tmp_path / "other")) == [
        f"data: {str(tmp_path / 'data')!r} there, {str(tmp_path / 'other')!r} now"
    ]


def test_a_stopped_glue_suite_continues_in_a_moved_folder(albert_data, tiny_config, tmp_path, monkeypatch):
    """`mv g3 g3-moved; albert glue ... --output g3-moved`: its stopped run was refused by the fine-tuning's
    own check (output: 'g3/rte/...' there), which glue passed on, and glue has no --resume to drop."""
    import dataclasses

    from test_glue import _config, _stopped_in_this_process

    import albert_lm.glue.grid as grid
    from albert_lm.model.heads import AlbertForPreTraining

    model = tmp_path / "model"
    torch.manual_seed(0)
    AlbertForPreTraining(tiny_config(vocab_size=30000, max_position_embeddings=128)).save_pretrained(model)
    shutil.copyfile(albert_data / "tokenizer" / "albert-30k" / "spiece.model", model / "spiece.model")
    kw = dict(tasks="rte", seeds="1", learning_rates="1e-3", epochs=2.0)  # 4 steps
    whole = grid.run_glue(_config(model, albert_data, tmp_path / "whole", **kw))
    cfg, job = _config(model, albert_data, tmp_path / "stopped", **kw), ("rte", 1e-3, 1)
    _stopped_in_this_process(grid, cfg, job, monkeypatch)
    shutil.move(tmp_path / "stopped", tmp_path / "moved")
    moved = dataclasses.replace(cfg, output=str(tmp_path / "moved"))
    assert grid.run_glue(moved)["tasks"] == whole["tasks"]
    assert (grid.run_folder(moved, *job) / grid.RUN_RECORD).is_file()


# --------------------------------------------------------------------------- 2. killed before a first checkpoint
def _killed_before_a_checkpoint(out: Path) -> None:
    """What a run SIGKILLed before its first checkpoint leaves: an empty metrics.jsonl and TensorBoard's
    folder (with an events file of its own)."""
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "events.out.tfevents.1.killed").write_bytes(b"old events")
    (out / "metrics.jsonl").write_text("")


def _records(out: Path) -> list[tuple[int, str]]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["split"]) for r in map(json.loads, lines)]


@pytest.mark.parametrize("resume", [True, False])
def test_a_fine_tuning_folder_of_logs_only_is_a_run_that_never_saved(
    tiny_pretrained, rows, tmp_path, caplog, resume, one_thread
):
    """A run SIGKILLed before its first checkpoint left metrics.jsonl and tensorboard/, and neither the
    same command ("holds another run") nor --resume ("no checkpoint to resume from") took the folder: a
    retry loop running `... --resume` after any preemption was stuck. Both start from step 0 now,
    replacing the logs, said; a folder with more of a run (a model, results) is still refused."""
    whole = finetune(_ft(tiny_pretrained, rows, tmp_path / "whole"))
    out = tmp_path / "killed"
    _killed_before_a_checkpoint(out)
    with caplog.at_level("WARNING", logger="albert_lm"):
        assert finetune(_ft(tiny_pretrained, rows, out, resume=resume)) == whole
    assert (
        f"{out} holds only the logs of a fine-tuning run stopped before its first checkpoint (metrics.jsonl, "
        "tensorboard): starting from step 0, replacing them" in caplog.text
    )
    assert ("--resume: " in caplog.text) == resume
    assert _records(out) == _records(tmp_path / "whole")
    assert not (out / "tensorboard" / "events.out.tfevents.1.killed").exists()
    # killed after its first evaluation (best/ written) and before its first checkpoint (every 500 steps
    # by default): still a run that never saved
    after = tmp_path / "after-an-evaluation"
    _killed_before_a_checkpoint(after)
    (after / "best").mkdir()
    assert finetune(_ft(tiny_pretrained, rows, after, resume=resume)) == whole
    other = tmp_path / "finished"  # results: a finished run, refused as before
    _killed_before_a_checkpoint(other)
    (other / "eval_results.json").write_text("{}")
    with pytest.raises(FileExistsError, match="no checkpoint|finished"):
        finetune(_ft(tiny_pretrained, rows, other, resume=resume))
    assert (other / "metrics.jsonl").is_file()


def test_a_pretraining_folder_of_logs_only_is_a_run_that_never_saved(tmp_path, caplog, one_thread):
    """As for fine-tuning: the same command and --resume both start the run again, the old logs replaced."""
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training.pretrain import pretrain

    pretrain(tiny_run(tmp_path / "whole", max_steps=4), train_dataset=SyntheticData())
    for resume in (True, False):
        out = tmp_path / f"killed-{resume}"
        _killed_before_a_checkpoint(out)
        caplog.clear()
        with caplog.at_level("WARNING", logger="albert_lm"):
            r = pretrain(tiny_run(out, max_steps=4, resume=resume), train_dataset=SyntheticData())
        assert not r.interrupted and r.step == 4
        assert "holds only the logs of a pretraining run stopped before its first checkpoint" in caplog.text
        assert _same_weights(tmp_path / "whole", out)
        assert _records(out) == _records(tmp_path / "whole")
        assert not (out / "tensorboard" / "events.out.tfevents.1.killed").exists()


# --------------------------------------------------------------------------- 3. a damaged newest checkpoint
def _damage(checkpoint: Path, how: str) -> None:
    file = checkpoint / ("training_state.pt" if how.startswith("state") else "model.safetensors")
    if how.endswith("removed"):
        file.unlink()
    else:
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.mark.parametrize("how", ["state removed", "state cut", "weights removed", "weights cut"])
def test_a_damaged_newest_pretraining_checkpoint_is_skipped_said_and_removed(
    tmp_path, caplog, how, one_thread
):
    """training_state.pt removed from the newest checkpoint: the resume went silently to the one before and
    never removed the damaged one (--keep-last 2 kept three); cut short, "cannot read the training state
    (OSError: [Errno 22] Invalid argument)"; the weights removed or cut short, an error with no way on. Now
    the damaged one is skipped, said with what is wrong, the newest whole one resumed exactly, and the next
    save removes the damaged one."""
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training.pretrain import pretrain

    def run(out: Path, **kw):  # noqa: ANN202 - a LoopResult
        return pretrain(
            tiny_run(out, max_steps=9, save_every=3, keep_last=2, **kw), train_dataset=SyntheticData()
        )

    run(tmp_path / "whole")
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as m:  # stopped at 5, between two saves: checkpoints 3 and 5
        signal_after_step(m, 5)
        assert run(out).interrupted
    _damage(out / "checkpoint-5", how)
    with caplog.at_level("WARNING", logger="albert_lm"):
        r = run(out, resume=True)
    assert r.step == 9 and not r.interrupted
    problem = {"state removed": "no training_state.pt", "state cut": "training_state.pt is cut short",
               "weights removed": "no weights", "weights cut": "model.safetensors is cut short"}[how]  # fmt: skip
    assert f"skipping the damaged checkpoint {out / 'checkpoint-5'} ({problem}" in caplog.text
    assert f"resuming from {out / 'checkpoint-3'}" in caplog.text
    assert _same_weights(tmp_path / "whole", out)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-6", "checkpoint-9"]


def test_no_whole_checkpoint_is_an_error_naming_each_and_its_problem(
    tiny_pretrained, rows, tmp_path, monkeypatch
):
    """A fine-tuning whose checkpoints are all damaged said "no checkpoint to resume from (best/,
    checkpoint-113/, ...)", naming a checkpoint in the same sentence; the newest whole one resumes."""
    whole = finetune(_ft(tiny_pretrained, rows, tmp_path / "whole"))
    out = tmp_path / "run"
    _stopped(monkeypatch, 3, lambda: finetune(_ft(tiny_pretrained, rows, out, keep_last=2)))
    _damage(out / "checkpoint-3", "state removed")
    assert finetune(_ft(tiny_pretrained, rows, out, keep_last=2, resume=True)) == whole  # from checkpoint-2
    out = tmp_path / "all"
    _stopped(monkeypatch, 3, lambda: finetune(_ft(tiny_pretrained, rows, out, keep_last=2)))
    _damage(out / "checkpoint-3", "state removed")
    _damage(out / "checkpoint-2", "weights cut")
    with pytest.raises(ValueError) as e:
        finetune(_ft(tiny_pretrained, rows, out, keep_last=2, resume=True))
    assert str(e.value) == (
        f"--resume: no checkpoint in {out} can be resumed ({out / 'checkpoint-3'}: no training_state.pt; "
        f"{out / 'checkpoint-2'}: model.safetensors is cut short or damaged: not a readable safetensors file): "
        "--overwrite to start the run again, or choose another --output"
    )


# --------------------------------------------------------------------------- 4. what a refusal says
def test_a_finished_fine_tuning_run_and_a_pretraining_folder_are_named_as_what_they_are(
    tiny_pretrained, rows, tmp_path, monkeypatch
):
    """A finished fine-tuning run run again said "holds another run (no checkpoint; best/, ...)"; with
    --resume, "no checkpoint to resume from". --resume in a pretraining run's folder said "no fine-tuning
    settings file at .../checkpoint-N/finetune_config.json"."""
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training.pretrain import pretrain

    out = tmp_path / "done"
    result = finetune(_ft(tiny_pretrained, rows, out))
    said = (
        f"--output {out} holds a finished fine-tuning run (step 6, best dev accuracy {result['accuracy']:.4g}"
    )
    for resume, then in (
        (False, ": --overwrite to redo it, or choose another --output"),
        (True, ": nothing to resume; --overwrite to redo it, or choose another --output"),
    ):
        with pytest.raises(FileExistsError) as e:
            finetune(_ft(tiny_pretrained, rows, out, resume=resume, seed=2))
        assert str(e.value).startswith(said) and str(e.value).endswith(then), str(e.value)
    pt = tmp_path / "pt"
    with monkeypatch.context() as m:  # a pretraining run stopped at step 2: its checkpoint-2
        signal_after_step(m, 2)
        assert pretrain(tiny_run(pt, max_steps=4), train_dataset=SyntheticData()).interrupted
    for resume in (True, False):
        with pytest.raises(FileExistsError) as e:
            finetune(_ft(tiny_pretrained, rows, pt, resume=resume))
        assert str(e.value) == (
            f"--output {pt} holds a pretraining run ({pt / 'checkpoint-2' / 'pretrain_config.json'}), not a "
            f"fine-tuning one: {'nothing of it to resume; ' if resume else ''}choose another --output (the "
            f"model there is {pt / 'checkpoint-2'}: give it as the model to start from)"
        )


# --------------------------------------------------------------------------- 5. another length on resume
def test_a_resumed_fine_tuning_takes_another_length(tiny_pretrained, rows, tmp_path, monkeypatch, caplog):
    """finetune refused a new --max-steps (or --epochs) on resume, where pretraining and distillation take
    one. Taken now, said, and the learning-rate schedule is the new length's from the first step on (the
    rate a checkpoint restores is the old length's): a run of 6 steps stopped at 3 and resumed for 8 (by
    --max-steps, or by --epochs 1 of 8 steps) takes the rates of a 6-step run up to step 3, then those of
    an 8-step run. Below the step reached it is refused, saying how to go on."""

    def rates(out: Path) -> list[float]:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return [r["lr"] for r in map(json.loads, lines) if r["split"] == "train"]

    finetune(_ft(tiny_pretrained, rows, tmp_path / "six"))
    finetune(_ft(tiny_pretrained, rows, tmp_path / "eight", max_steps=8))
    for name, longer in (("steps", dict(max_steps=8)), ("epochs", dict(max_steps=None, epochs=1.0))):
        out = tmp_path / name
        _stopped(monkeypatch, 3, lambda: finetune(_ft(tiny_pretrained, rows, out)))  # noqa: B023
        with pytest.raises(ValueError) as e:
            finetune(_ft(tiny_pretrained, rows, out, resume=True, max_steps=2))
        assert str(e.value) == (
            f"--resume: the run in {out / 'checkpoint-3'} has reached step 3 of its 6; --max-steps or --epochs "
            "make it 2 steps, so it would go back: give --max-steps above 3, or drop --max-steps and --epochs "
            "to finish its 6 steps"
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="albert_lm"):
            finetune(_ft(tiny_pretrained, rows, out, resume=True, **longer))
        assert (
            "--resume: 8 steps (the run was for 6): the learning-rate schedule is now a 8-step run's"
            in caplog.text
        )
        assert rates(out) == rates(tmp_path / "six")[:3] + rates(tmp_path / "eight")[3:], name
        assert (out / "best").is_dir() and not list(out.glob("checkpoint-*"))


# --------------------------------------------------------------------------- 6. a pretraining run's final files
def test_a_pretraining_runs_final_files_are_one_set(tmp_path, monkeypatch, caplog, one_thread):
    """Killed while it wrote its final files, a run left model.safetensors without config.json or README.md;
    a finished run extended (4 -> 8 steps) and stopped kept its 4-step model, a README saying "(4 steps)"
    and a pretrain_config.json of max_steps 4 (which `--output RUN --resume` reads) beside its newer
    checkpoints. Now the files are written aside and moved in, the weights last, and a finished run that
    trains on removes them when it starts; a resume writes them again."""
    from test_pretrain import SyntheticData, tiny_run

    from albert_lm.training import run_cards
    from albert_lm.training.pretrain import pretrain

    final = ("model.safetensors", "config.json", "README.md", "pretrain_config.json")
    pretrain(tiny_run(tmp_path / "whole", max_steps=4), train_dataset=SyntheticData())
    out = tmp_path / "run"
    card = run_cards.write_pretraining_card

    def killed_at_the_card(run, folder, location, title):  # noqa: ANN001, ANN202 - the card's own
        if title.startswith("ALBERT pretrained"):  # the finished model's, after its weights and settings
            raise KeyboardInterrupt
        return card(run, folder, location, title)

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(run_cards, "write_pretraining_card", killed_at_the_card)
        pretrain(tiny_run(out, max_steps=4), train_dataset=SyntheticData())
    assert not [name for name in final if (out / name).exists()] and (out / "checkpoint-4").is_dir()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # nothing half-written left
    pretrain(tiny_run(out, max_steps=4, resume=True), train_dataset=SyntheticData())
    assert _same_weights(tmp_path / "whole", out) and "(4 steps)" in (out / "README.md").read_text()
    # extended to 8 steps and stopped at 6: no 4-step model, card or settings beside checkpoint-6
    with monkeypatch.context() as m, caplog.at_level("WARNING", logger="albert_lm"):
        signal_after_step(m, 6)
        assert pretrain(tiny_run(out, max_steps=8, resume=True), train_dataset=SyntheticData()).interrupted
    assert not [name for name in final if (out / name).exists()] and (out / "checkpoint-6").is_dir()
    assert f"--resume: the run in {out} had finished; it trains on, so its model files there" in caplog.text
    pretrain(tiny_run(out, max_steps=8, resume=True), train_dataset=SyntheticData())
    assert "(8 steps)" in (out / "README.md").read_text()
    assert json.loads((out / "pretrain_config.json").read_text())["max_steps"] == 8


# --------------------------------------------------------------------------- 7. a stopped GLUE suite's line
def test_a_stopped_glue_suite_counts_the_runs_left_in_words(tmp_path, caplog):
    """ "the same command runs the 1 others", and "the 2 others" where none was finished."""
    from albert_lm.glue import grid
    from albert_lm.glue.config import GlueConfig, run_folder

    def said(seeds: str, finished: int) -> str:
        cfg = GlueConfig(model="m", data="d", output=str(tmp_path / seeds), tasks="rte", seeds=seeds,
                         learning_rates="1e-3")  # fmt: skip
        jobs = [("rte", 1e-3, int(seed)) for seed in seeds.split(",")]
        for job in jobs[:finished]:
            run_folder(cfg, *job).mkdir(parents=True)
            (run_folder(cfg, *job) / grid.RUN_RECORD).write_text("{}")
        caplog.clear()
        with caplog.at_level("WARNING", logger="albert_lm"):
            grid._say_stopped(cfg, jobs, jobs)
        return caplog.records[-1].getMessage()

    assert said("1,2", 0) == "glue: stopped; none of the 2 runs is finished: the same command runs them"
    assert said("1", 0) == "glue: stopped; the run is not finished: the same command runs it"
    assert said("1,2,3", 2) == (
        f"glue: stopped; 2 of 3 runs are finished and kept in {tmp_path / '1,2,3'}: the same command runs the "
        "other one"
    )


def test_a_resumed_run_keeps_the_label_order_its_head_was_trained_in(tiny_pretrained, tmp_path, monkeypatch):
    """Labels "2" and "10" are now ordered as numbers; a run checkpointed by an albert-lm that ordered them
    as text ("10" first) resumes in its own order, or its head's rows would swap meanings."""
    data = labelled_rows(tmp_path / "data", {"2": WORDS["yes"], "10": WORDS["no"]}, {"train": 32, "dev": 12})
    _stopped(monkeypatch, 3, lambda: finetune(_ft(tiny_pretrained, data, tmp_path / "run")))
    saved = tmp_path / "run" / "checkpoint-3" / "finetune_config.json"
    settings = json.loads(saved.read_text())
    assert settings["labels"] == ["2", "10"]  # a new run's order
    saved.write_text(json.dumps({**settings, "labels": ["10", "2"]}))  # the order an older albert-lm wrote
    _stopped(monkeypatch, 5, lambda: finetune(_ft(tiny_pretrained, data, tmp_path / "run", resume=True)))
    resumed = tmp_path / "run" / "checkpoint-5"  # what the resumed run trained its head as
    assert json.loads((resumed / "finetune_config.json").read_text())["labels"] == ["10", "2"]
    assert json.loads((resumed / "config.json").read_text())["id2label"] == {"0": "10", "1": "2"}
