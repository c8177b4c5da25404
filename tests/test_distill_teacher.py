"""`albert distill teacher`: a transformers encoder fine-tuned on a task into the folder `albert distill task`
and `albert glue --teachers` read; refused outputs, a killed run resumed, a non-finite run stopped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("accelerate", reason="the Trainer needs accelerate: the [distill] extra")

from albert_lm.cli import main  # noqa: E402
from albert_lm.distill.config import TeacherConfig  # noqa: E402
from albert_lm.distill.teacher_training import CHECKPOINTS, finetune_teacher  # noqa: E402

WORDS = ["bala", "kemo", "fira", "dusa", "tovi", "ramu"]


def _encoder(folder: Path, nan: bool = False) -> Path:
    """A random 2-layer, H 32 BERT encoder (no task head) with a WordPiece vocabulary of single characters;
    `nan`: one of its weights not a number."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-$%&/")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars,
                                                 *[f"##{c}" for c in chars]]) + "\n")  # fmt: skip
    config = BertConfig(vocab_size=5 + 2 * len(chars), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    model = BertModel(config)
    if nan:
        with torch.no_grad():
            model.encoder.layer[0].output.dense.weight[0, 0] = float("nan")
    model.save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def _stsb(folder: Path) -> Path:
    """An STS-B-like folder (GLUE's columns): pairs scored by the words they share (0 to 5)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for split, n in (("train", 32), ("dev", 16)):
        rows = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
        for i in range(n):
            a, shared = list(rng.choice(WORDS, size=5)), int(rng.integers(0, 6))
            b = a[:shared] + list(rng.choice(WORDS, size=5 - shared))
            rows.append(f"{i}\tmain\tx\t2012\t{i}\tx\tx\t{' '.join(a)}\t{' '.join(b)}\t{float(shared):.3f}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return _encoder(tmp_path_factory.mktemp("teacher") / "base")


def _argv(teacher: Path, data: Path, out: Path, *more: str, task: str = "sst2") -> list[str]:
    return ["distill", "teacher", "--task", task, "--teacher", str(teacher), "--data", str(data), "--output",
            str(out), "--epochs", "2", "--batch-size", "8", "--learning-rate", "1e-3", "--precision", "fp32",
            "--device", "cpu", *more]  # fmt: skip


def test_a_fine_tuned_teacher_is_what_distill_task_reads(encoder, tiny_sst2, tmp_path, capsys):
    out = tmp_path / "teacher"
    assert main(_argv(encoder, tiny_sst2 / "sst2", out)) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}  # GLUE's names, as distill task matches
    scores = json.loads((out / "eval_results.json").read_text())
    assert len(scores["per_epoch"]) == 2 and scores["accuracy"] == scores["per_epoch"][-1]["accuracy"]
    assert printed["accuracy"] == scores["accuracy"]
    assert json.loads((out / "teacher_config.json").read_text())["learning_rate"] == 1e-3
    assert not (out / CHECKPOINTS).exists() and not (out / ".teacher.tmp").exists()
    from albert_lm.files import file_mode

    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file()}
    assert set(modes.values()) == {file_mode()}, (
        modes
    )  # the Trainer's weights came 0600, others could not read
    # albert distill task reads it, and scores the teacher on dev as the Trainer did
    student = ["distill", "task", "--task", "sst2", "--model", str(tiny_sst2 / "base"), "--teacher", str(out),
               "--data", str(tiny_sst2 / "sst2"), "--output", str(tmp_path / "student"), "--cache",
               str(tmp_path / "cache"), "--epochs", "1", "--batch-size", "8", "--precision", "fp32"]  # fmt: skip
    assert main(student) == 0
    distilled = json.loads((tmp_path / "student" / "eval_results.json").read_text())
    assert distilled["teacher_accuracy"] == pytest.approx(scores["accuracy"])


def test_a_regression_teacher_for_stsb(encoder, tmp_path):
    out = tmp_path / "teacher"
    assert main(_argv(encoder, _stsb(tmp_path / "STS-B"), out, task="stsb")) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["problem_type"], len(config["id2label"])) == ("regression", 1)
    assert -1 <= json.loads((out / "eval_results.json").read_text())["pearson"] <= 1


def test_a_regression_on_own_pairs_is_taught_and_distilled(encoder, tiny_sst2, tmp_path):
    """`--task regression` on one's own pairs, named by their columns: a regression teacher, and a student
    task-distilled from it that scores on the data's scale."""
    rng = np.random.default_rng(0)
    data = tmp_path / "scores"
    data.mkdir()
    for split, n in (("train", 32), ("dev", 16)):
        rows = []
        for _ in range(n):
            a, shared = list(rng.choice(WORDS, size=5)), int(rng.integers(0, 6))
            b = a[:shared] + list(rng.choice(WORDS, size=5 - shared))
            rows.append(json.dumps({"first": " ".join(a), "second": " ".join(b), "sim": shared / 5}))
        (data / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    columns = ["--text-column", "first", "--text-pair-column", "second", "--label-column", "sim"]
    out = tmp_path / "teacher"
    assert main(_argv(encoder, data, out, *columns, task="regression")) == 0
    assert json.loads((out / "config.json").read_text())["problem_type"] == "regression"
    student = ["distill", "task", "--task", "regression", "--model", str(tiny_sst2 / "base"), "--teacher", str(out),
               "--data", str(data), "--output", str(tmp_path / "student"), "--cache", str(tmp_path / "cache"),
               "--epochs", "1", "--batch-size", "8", "--precision", "fp32", *columns]  # fmt: skip
    assert main(student) == 0
    distilled = json.loads((tmp_path / "student" / "eval_results.json").read_text())
    assert {"pearson", "mse", "teacher_pearson"} <= set(distilled), distilled
    saved = json.loads((tmp_path / "student" / "best" / "finetune_config.json").read_text())
    assert saved["task"] == "regression" and saved["score_range"] == [0.0, 1.0]
    card = (tmp_path / "student" / "best" / "README.md").read_text()  # what it read and learnt from
    assert "a pair of texts, `first` and `second`; gives a score on the scale of `sim`" in card
    assert "the teacher's scores (squared difference)" in card and "temperature" not in card


def test_outputs_and_settings_are_refused_before_any_training(encoder, tiny_sst2, tmp_path, capsys):
    data, out = tiny_sst2 / "sst2", tmp_path / "teacher"
    assert main(_argv(encoder, data, out, "--epochs", "1")) == 0
    stamp = (out / "config.json").stat().st_mtime_ns
    for more, message in (
        ((), "holds another run"),
        (("--resume",), "holds a finished teacher"),
        (("--resume", "--overwrite"), "give one of them"),
    ):
        assert main(_argv(encoder, data, out, "--epochs", "1", *more)) == 1
        assert message in capsys.readouterr().err
    assert (out / "config.json").stat().st_mtime_ns == stamp  # untouched
    assert main(_argv(encoder, data, out, "--epochs", "1", "--overwrite")) == 0
    killed = tmp_path / "killed-early"  # stopped before its first epoch ended: its settings file alone
    killed.mkdir()
    (killed / "teacher_config.json").write_text((out / "teacher_config.json").read_text())
    assert main(_argv(encoder, data, killed, "--epochs", "1", "--resume")) == 1
    assert "no finished epoch to continue from" in capsys.readouterr().err
    assert main(_argv(encoder, data, killed, "--epochs", "1")) == 1
    err = capsys.readouterr().err
    assert "holds another run" in err and "--resume" not in err
    assert main(_argv(encoder, data, data / "teacher")) == 1
    assert "lies inside the --data folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "train.tsv").write_text((data / "train.tsv").read_text())
    assert main(_argv(encoder, empty, tmp_path / "t2")) == 1
    assert "no dev examples for sst2" in capsys.readouterr().err
    assert not (tmp_path / "t2").exists()


def test_a_killed_run_resumes_from_its_last_epoch(encoder, tiny_sst2, tmp_path, capsys):
    from transformers import TrainerCallback

    class KilledAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            raise KeyboardInterrupt

    def cfg(out: Path, **kw) -> TeacherConfig:
        values = dict(task="sst2", teacher=str(encoder), data=str(tiny_sst2 / "sst2"), output=str(out),
                      epochs=2.0, batch_size=8, learning_rate=1e-3, precision="fp32", device="cpu")  # fmt: skip
        return TeacherConfig(**{**values, **kw})

    whole = finetune_teacher(cfg(tmp_path / "whole"))
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        finetune_teacher(cfg(out), callbacks=[KilledAfterFirstSave()])
    assert (out / CHECKPOINTS).is_dir() and not (out / "config.json").exists()
    with pytest.raises(FileExistsError, match="pass --resume to continue it"):
        finetune_teacher(cfg(out))
    with pytest.raises(ValueError, match="learning_rate"):
        finetune_teacher(cfg(out, resume=True, learning_rate=3e-3))
    cut = out / CHECKPOINTS / "checkpoint-99"  # a save a second Ctrl-C cut short: no trainer_state.json
    shutil.copytree(next((out / CHECKPOINTS).glob("checkpoint-*")), cut)
    (cut / "trainer_state.json").unlink()
    # `--output OUT --resume` alone, as general and task take it: the run's own settings
    assert main(["distill", "teacher", "--output", str(out), "--resume", "-q"]) == 0
    resumed = json.loads((out / "eval_results.json").read_text())
    assert len(resumed["per_epoch"]) == 2
    assert resumed["loss"] == pytest.approx(whole["loss"], abs=1e-5)  # the same run, continued
    assert (out / "config.json").is_file() and not (out / CHECKPOINTS).exists()


def test_a_stopped_teacher_says_how_to_continue(tmp_path, capsys, monkeypatch):
    """Ctrl-C said "interrupted" alone, though a finished epoch was kept for --resume."""
    import albert_lm.distill.teacher_training as teacher_training

    out = tmp_path / "teacher"
    (out / CHECKPOINTS / "checkpoint-4").mkdir(parents=True)
    (out / CHECKPOINTS / "checkpoint-4" / "trainer_state.json").write_text("{}")

    def stopped(cfg, callbacks=()):
        raise KeyboardInterrupt

    monkeypatch.setattr(teacher_training, "finetune_teacher", stopped)
    assert (
        main(["distill", "teacher", "--task", "sst2", "--data", str(tmp_path), "--output", str(out)]) == 130
    )
    assert f"continue with --output {out} --resume" in capsys.readouterr().err


def test_a_teacher_with_a_nan_weight_is_refused_before_training(tiny_sst2, tmp_path, capsys):
    broken = _encoder(tmp_path / "broken", nan=True)
    out = tmp_path / "teacher"
    assert main(_argv(broken, tiny_sst2 / "sst2", out)) == 1
    err = capsys.readouterr().err
    assert "encoder.layer.0.output.dense.weight" in err and str(broken / "model.safetensors") in err
    assert not out.exists()  # refused before anything was written


def test_a_run_that_diverges_stops_with_an_error(encoder, tiny_sst2, tmp_path, capsys):
    out = tmp_path / "teacher"
    assert main(_argv(encoder, tiny_sst2 / "sst2", out, "--learning-rate", "1e30")) == 1
    assert "went non-finite" in capsys.readouterr().err
    assert not (out / "config.json").exists()


def test_teachers_that_cannot_be_fine_tuned_are_refused_naming_the_file(encoder, tiny_sst2, tmp_path, capsys):
    import shutil

    data = tiny_sst2 / "sst2"
    cut = tmp_path / "cut"  # a weight of the encoder missing: transformers would start it from random numbers
    shutil.copytree(encoder, cut)
    from safetensors.torch import load_file, save_file

    weights = load_file(cut / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layer.1.attention" not in k}, cut / "model.safetensors")
    foreign = tmp_path / "foreign"  # a tokenizer that reads the task's text as [UNK]
    shutil.copytree(encoder, foreign)
    (foreign / "tokenizer.json").unlink(missing_ok=True)
    words = [f"zz{i}" for i in range(100)]
    (foreign / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n"
    )
    for teacher, more, named in (
        (cut, (), "layer.1.attention"),
        (foreign, (), "[UNK]"),
        (encoder, ("--max-seq-length", "512"), "max_position_embeddings"),
        (encoder, ("--seed", "-5"), "--seed"),  # the Trainer seeds numpy: 0 to 2**32 - 1
        (encoder, ("--precision", "fp16"), "--precision fp16"),  # _argv's --device cpu
    ):
        out = tmp_path / f"out-{teacher.name}"
        assert main(_argv(teacher, data, out, *more)) == 1
        assert named in capsys.readouterr().err
        assert not out.exists()
