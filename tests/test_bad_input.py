"""The bad-input suite: mistakes a user makes, each refused before any time is spent, with a message that
names the file, option or field and what was expected, a non-zero exit, no traceback, and nothing in
pre-existing folders changed (hashed before and after). One test per class of mistake, several cases each.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import TINY_OVERRIDES as TINY
from conftest import data_argv, made_up_text, tokenizer_argv
from conftest import tiny_pretrain_argv as _pretrain
from conftest import two_step_finetune_argv as _finetune
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from albert_lm.cli import main


def folder_hash(path: Path) -> str:
    """One hash of every file's relative path and bytes under `path` (absent: "absent")."""
    if not path.exists():
        return "absent"
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def refused(capsys, argv: list[str], *expected: str, untouched: tuple[Path, ...] = ()) -> str:
    """Run `albert ARGV`: exit 1, one error line naming every `expected` text, no traceback, and every
    folder in `untouched` byte-identical afterwards. Returns the message."""
    before = [folder_hash(p) for p in untouched]
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1, f"exit {code} for {argv}: {err}"
    assert "Traceback" not in err
    line = next(ln for ln in err.splitlines() if "error:" in ln)
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"
    assert [folder_hash(p) for p in untouched] == before, "a pre-existing folder changed"
    return line


# The same tiny run as a config file (options given on the command line would win over its values).
BASE_CONFIG = {"preset": "albert-tiny", "model_overrides": {k: int(v) for k, v in (kv.split("=") for kv in TINY)},
               "batch_size": 4, "max_steps": 2, "tensorboard": False, "plot": False}  # fmt: skip


# --------------------------------------------------------------------------- settings: types and ranges
def test_config_values_of_the_wrong_type_or_range_are_refused_naming_the_field(run_world, capsys, tmp_path):
    out = tmp_path / "out"
    for values, field in (
        ({"max_steps": "3"}, "max_steps"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"batch_size": None}, "batch_size"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"resume": "yes"}, "resume"),
        ({"optimizer": "sgd"}, "optimizer"),
    ):
        file = tmp_path / "config.json"
        file.write_text(json.dumps({**BASE_CONFIG, **values}))
        argv = ["pretrain", "--config", str(file), "--data", str(run_world["data_a"]), "--output", str(out)]
        msg = refused(capsys, argv, str(file), field, "expected")
        assert not out.exists(), msg
    for flags, text in (
        (["--learning-rate", "inf"], "--learning-rate"),
        (["--learning-rate", "nan"], "--learning-rate"),
        (["--batch-size", "0"], "--batch-size"),
        (["--adam-beta2", "1.5"], "--adam-beta2"),
        (["--model-override", "num_hidden_layrs=3"], "num_hidden_layrs"),
        (["--model-override", "hidden_size=abc"], "hidden_size"),
        (["--time-budget", "ten minutes"], "time budget"),
    ):
        refused(capsys, [*_pretrain(run_world["data_a"], out), *flags], text)
        assert not out.exists()
    for flags, text in (
        (["--epochs", "0"], "--epochs"),
        (["--learning-rate", "-1"], "--learning-rate"),
        (["--dropout", "1.5"], "--dropout"),
    ):
        refused(capsys, _finetune(run_world["run"], run_world["task"], out, *flags), text)
        assert not out.exists()
    refused(
        capsys,
        data_argv(run_world["corpus"], run_world["tok_a"], out, "--workers", "-3"),
        "--workers",
    )
    refused(
        capsys,
        [
            "glue",
            "--model",
            str(run_world["run"]),
            "--data",
            str(tmp_path),
            "--output",
            str(out),
            "--seeds",
            "1,x",
        ],
        "seeds",
    )
    assert not out.exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(
        [
            "max_steps",
            "batch_size",
            "learning_rate",
            "warmup_steps",
            "precision",
            "seed",
            "resume",
            "time_budget",
            "model_overrides",
            "adam_beta1",
        ]
    ),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=True),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
    ),
)
def test_any_json_value_in_a_config_file_is_accepted_or_refused_with_a_value_error(field, value):
    """Config files reach the dataclass through one check: never a TypeError or a deeper failure."""
    from albert_lm.training.pretrain_config import PretrainConfig

    try:
        cfg = PretrainConfig(**{field: value})
    except ValueError as e:
        assert field in str(e)
    else:
        assert getattr(cfg, field) == value or value != value  # accepted as given (NaN aside: refused)


# --------------------------------------------------------------------------- the tokenizer meets the model
def test_a_model_never_meets_another_vocabulary_of_the_same_size(run_world, capsys, tmp_path):
    run, data_b = run_world["run"], run_world["data_b"]
    # resume a run on data made with another tokenizer
    refused(
        capsys,
        [*_pretrain(data_b, run, "--max-steps", "2", "--save-every", "1"), "--resume"],
        "fingerprint",
        "--resume",
        untouched=(run,),
    )
    # warm start from a model with another tokenizer
    refused(
        capsys,
        _pretrain(data_b, tmp_path / "warm", "--init-from", str(run), "--max-steps", "1"),
        "--init-from",
        "fingerprint",
        untouched=(run,),
    )
    assert not (tmp_path / "warm").exists()
    # fine-tune with --tokenizer overriding the model's own
    refused(
        capsys,
        [*_finetune(run, run_world["task"], tmp_path / "ft"), "--tokenizer", str(run_world["tok_b"])],
        "--tokenizer",
        "own tokenizer",
        untouched=(run,),
    )
    assert not (tmp_path / "ft").exists()
    # the same vocabulary passed again is fine
    assert (
        main([*_finetune(run, run_world["task"], tmp_path / "ft"), "--tokenizer", str(run_world["tok_a"])])
        == 0
    )


def test_data_that_does_not_fit_the_model_is_refused_before_training(run_world, capsys, tmp_path):
    out = tmp_path / "out"
    refused(
        capsys,
        [*_pretrain(run_world["data_a"], out), "--model-override", "max_position_embeddings=32"],
        "32 positions",
        "48 tokens",
    )
    assert not out.exists()
    big = tmp_path / "tok_big"
    assert main(tokenizer_argv(run_world["corpus"], big, "--vocab-size", "160")) == 0
    refused(
        capsys, [*_finetune(run_world["run"], run_world["task"], out), "--tokenizer", str(big)], "160 pieces"
    )


# --------------------------------------------------------------------------- never overwrite a user's work
def test_another_run_in_the_output_folder_is_never_overwritten(run_world, capsys, tmp_path):
    run = run_world["run"]
    # pretrain into a folder holding a run (with checkpoints; then a finished run without them)
    refused(
        capsys,
        _pretrain(run_world["data_a"], run),
        "holds another run",
        "--resume",
        "--overwrite",
        untouched=(run,),
    )
    finished = tmp_path / "finished"
    finished.mkdir()
    for name in ("model.safetensors", "config.json", "pretrain_config.json", "spiece.model"):
        (finished / name).write_bytes((run / name).read_bytes())
    refused(
        capsys,
        _pretrain(run_world["data_a"], finished),
        "holds another run",
        "no checkpoint",
        untouched=(finished,),
    )
    refused(
        capsys,
        [*_pretrain(run_world["data_a"], finished), "--resume"],
        "no checkpoint to resume",
        untouched=(finished,),
    )
    # output = an input
    refused(
        capsys,
        _pretrain(run_world["data_a"], run_world["data_a"]),
        "--data",
        untouched=(run_world["data_a"],),
    )
    refused(capsys, _finetune(run, run_world["task"], run), "--model", untouched=(run,))
    # fine-tune into a folder holding another fine-tuning run
    ft = tmp_path / "ft"
    assert main(_finetune(run, run_world["task"], ft)) == 0
    refused(
        capsys,
        _finetune(run, run_world["task"], ft, "--seed", "2"),
        "holds a finished fine-tuning run (step 2, ",
        "--overwrite to redo it",
        untouched=(ft,),
    )
    # a tokenizer folder
    refused(
        capsys,
        tokenizer_argv(run_world["corpus"], run_world["tok_a"], "--vocab-size", "120"),
        "already holds a tokenizer",
        "--overwrite",
        untouched=(run_world["tok_a"],),
    )
    # data create into a folder an interrupted run of other settings left behind
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / ".albert-data-plan.json").write_text(json.dumps({"plan_id": "0123"}))
    refused(
        capsys,
        data_argv(run_world["corpus"], run_world["tok_a"], stale, "--workers", "1", "--no-progress"),
        ".albert-data-plan.json",
        "unfinished",
        untouched=(stale,),
    )
    # --overwrite replaces, when asked
    assert main(_finetune(run, run_world["task"], ft, "--seed", "2", "--overwrite")) == 0
    assert (
        main(tokenizer_argv(run_world["corpus"], tmp_path / "tok", "--vocab-size", "120", "--overwrite")) == 0
    )


def test_resume_with_changed_settings_is_refused(run_world, capsys):
    run = run_world["run"]
    for flags, field in (
        (["--batch-size", "8"], "batch_size"),
        (["--model-override", "num_hidden_layers=3"], "model_overrides"),
        (["--learning-rate", "0.01"], "learning_rate"),
    ):
        refused(
            capsys,
            [
                *_pretrain(run_world["data_a"], run, "--max-steps", "2", "--save-every", "1"),
                "--resume",
                *flags,
            ],
            field,
            "--init-from",
            untouched=(run,),
        )


def test_a_path_written_another_way_is_the_same_setting_when_resuming(tmp_path, monkeypatch):
    """runs/x/, runs/x and its absolute path name one folder: a resume typed with any of them is no
    change of settings (tab completion adds the slash); another folder is."""
    import dataclasses

    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.run_folder import changed_settings

    monkeypatch.chdir(tmp_path)
    saved = dataclasses.asdict(FinetuneConfig(task="sst2", model="m", data="glue/SST-2", output="runs/x"))
    for data, output in (("glue/SST-2/", "runs/x/"), (str(tmp_path / "glue" / "SST-2"), "./runs/x")):
        assert changed_settings(saved, FinetuneConfig(task="sst2", model="m", data=data, output=output)) == []
    other = FinetuneConfig(task="sst2", model="m", data="glue/RTE", output="runs/x")
    assert changed_settings(saved, other) == ["data: 'glue/SST-2' there, 'glue/RTE' now"]
    # resumed from another folder, where the saved relative path is not found: the same folder given again
    # with a path from here is no change (as the refusal asks); a folder of another name is one
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "start" / "glue" / "SST-2").mkdir(parents=True)
    (tmp_path / "start" / "glue" / "RTE").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    again = FinetuneConfig(
        task="sst2", model="m", data=str(tmp_path / "start" / "glue" / "SST-2"), output="o"
    )
    assert changed_settings(saved, again, ignore=("output",)) == []
    wrong = FinetuneConfig(task="sst2", model="m", data=str(tmp_path / "start" / "glue" / "RTE"), output="o")
    assert changed_settings(saved, wrong, ignore=("output",)) != []


# --------------------------------------------------------------------------- damaged files
def test_damaged_data_and_state_files_are_refused_before_the_first_step(run_world, capsys, tmp_path):
    import shutil

    for target in ("shard", "tokenizer"):
        data = tmp_path / f"data_{target}"
        shutil.copytree(run_world["data_a"], data)
        if target == "shard":
            file = sorted((data / "train").rglob("tokens.npy"))[0]
            raw = bytearray(file.read_bytes())
            raw[-1] ^= 0x01
            file.write_bytes(bytes(raw))
            expect = "damaged or changed"
        else:
            file = data / "spiece.model"
            file.write_bytes((run_world["tok_b"] / "spiece.model").read_bytes())
            expect = "not the tokenizer this data was made with"
        refused(capsys, _pretrain(data, tmp_path / f"out_{target}"), str(file), expect)
        assert not (tmp_path / f"out_{target}").exists()
    # a training state with other keys
    run = tmp_path / "run"
    shutil.copytree(run_world["run"], run)
    state = sorted(run.glob("checkpoint-*"))[-1] / "training_state.pt"
    import torch

    torch.save({"hello": 1}, state)
    refused(
        capsys,
        [*_pretrain(run_world["data_a"], run, "--max-steps", "2", "--save-every", "1"), "--resume"],
        str(state),
        "missing",
    )
    # --eval-text that is not text; evaluate --predictions on a JSON that is not SQuAD
    refused(
        capsys, [*_pretrain(run_world["data_a"], tmp_path / "o"), "--eval-text", sys.executable], "not UTF-8"
    )
    (tmp_path / "short.txt").write_text("Kala bime.\n")
    refused(
        capsys,
        [*_pretrain(run_world["data_a"], tmp_path / "o"), "--eval-text", str(tmp_path / "short.txt")],
        f"{tmp_path / 'short.txt'}: ",
        "tokens, fewer than one evaluation sequence's",
    )
    assert not (tmp_path / "o").exists()  # the run's folder is not left behind empty
    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps({"data": [{"title": "x"}]}))
    preds = tmp_path / "preds.json"
    preds.write_text("{}")
    refused(
        capsys,
        ["evaluate", "--task", "squad1", "--data", str(fake), "--predictions", str(preds)],
        str(fake),
        'data[0]: missing "paragraphs" list',
    )


# --------------------------------------------------------------------------- failing loud in training
def test_a_non_finite_loss_stops_the_run_with_an_error_and_no_final_model(run_world, capsys, tmp_path):
    out = tmp_path / "nan"
    msg = refused(
        capsys,
        _pretrain(
            run_world["data_a"],
            out,
            "--optimizer",
            "adamw",
            "--learning-rate",
            "1e30",
            "--max-steps",
            "20",
            "--save-every",
            "1000",
        ),
        "not finite",
        "step",
    )
    assert "no checkpoint was saved" in msg
    assert not (out / "model.safetensors").exists()


def test_empty_eval_split_is_no_evaluation_not_zero(run_world, tmp_path):
    data = tmp_path / "data"
    more = ["--max-seq-length", "48", "--eval-fraction", "0", "--workers", "1", "--no-progress"]
    assert main(data_argv(run_world["corpus"], run_world["tok_a"], data, *more)) == 0
    out = tmp_path / "run"
    assert main(_pretrain(data, out, "--max-steps", "1")) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r.get("split") == "train" for r in records)


def test_a_signal_saves_and_exits_with_the_shells_code(run_world, tmp_path):
    out = tmp_path / "run"
    argv = _pretrain(run_world["data_a"], out, "--max-steps", "100000", "--save-every", "100000")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "albert_lm.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").stat().st_size):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "continue with --resume" in err and "Traceback" not in err
    assert list(out.glob("checkpoint-*"))


def test_ctrl_c_anywhere_is_one_line_and_exit_130(monkeypatch, capsys, tmp_path):
    import albert_lm.data.tokenizer_training as tt

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tt, "train_tokenizer", interrupted)
    corpus = made_up_text(tmp_path / "c.txt", 0)
    code = main(["tokenizer", "train", "--input", str(corpus), "--output", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted" in err and "Traceback" not in err
    # a library that wraps Ctrl-C in its own error (torch.export does) is still a Ctrl-C, not a fault of ours

    def wrapped(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Failed to export the model") from e

    monkeypatch.setattr(tt, "train_tokenizer", wrapped)
    code = main(["tokenizer", "train", "--input", str(corpus), "--output", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted" in err and "internal error" not in err
    # data creation resumes: its message says so
    import albert_lm.data.shards as shards

    monkeypatch.setattr(shards, "create_pretraining_data", interrupted)
    code = main(
        ["data", "create", "--input", str(corpus), "--tokenizer", "t", "--output", str(tmp_path / "d")]
    )
    err = capsys.readouterr().err
    assert code == 130 and "interrupted" in err and "nothing was kept: give the same command again" in err


# --------------------------------------------------------------------------- honest messages, reproducible files
def test_tokenizer_training_uses_long_lines_and_is_byte_reproducible(tmp_path):
    from albert_lm.data.tokenizer import AlbertTokenizer

    corpus = made_up_text(tmp_path / "c.txt", 0)
    # one paragraph per line: every line far over SentencePiece's default 4192-byte limit
    paragraphs = corpus.read_text().replace("\n\n", "\0").replace("\n", " ").replace("\0", "\n")
    long = tmp_path / "long.txt"
    long.write_text((paragraphs.replace("\n", " ") + "\n") * 3)
    assert min(len(line) for line in long.read_text().splitlines()) > 4192
    assert main(tokenizer_argv(long, tmp_path / "t1", "--vocab-size", "120")) == 0
    assert AlbertTokenizer.from_pretrained(tmp_path / "t1").vocab_size == 120  # trained on the long lines
    assert main(tokenizer_argv(long, tmp_path / "t2", "--vocab-size", "120")) == 0
    assert (tmp_path / "t1" / "spiece.model").read_bytes() == (tmp_path / "t2" / "spiece.model").read_bytes()
    assert str(tmp_path) not in (tmp_path / "t1" / "spiece.model").read_bytes().decode("latin-1")


def test_error_messages_name_only_options_the_command_has(tmp_path, capsys):
    """The text readers' hints (--skip-invalid-utf8, --max-line-bytes) exist on every command that reads text."""
    from albert_lm.cli import build_parser

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\n\xff\xfe broken\n")
    corpus = made_up_text(tmp_path / "c.txt", 0)
    assert main(tokenizer_argv(corpus, tmp_path / "t", "--vocab-size", "60")) == 0
    for argv in (
        ["tokenizer", "train", "--input", str(bad), "--vocab-size", "20", "--output", str(tmp_path / "t2")],
        data_argv(bad, tmp_path / "t", tmp_path / "d", "--workers", "1", "--no-progress"),
    ):
        line = refused(capsys, argv, "UTF-8", "--skip-invalid-utf8")
        group = build_parser()._subparsers._group_actions[0].choices[argv[0]]  # type: ignore[union-attr]
        help_text = group._subparsers._group_actions[0].choices[argv[1]].format_help()  # type: ignore[union-attr]
        for flag in {w.strip("(),.;") for w in line.split() if w.startswith("--")}:
            assert flag in help_text, (flag, line)


def test_pretraining_into_a_folder_holding_a_tokenizer_is_refused(run_world, capsys, tmp_path):
    """The run writes a model folder's files into --output: a folder of another tokenizer (or model) kept
    there had them replaced, exit 0; a folder of other things still takes a run beside them."""
    out = tmp_path / "tok"
    out.mkdir()
    (out / "spiece.model").write_bytes(b"mine")
    argv = ["pretrain", "--data", str(run_world["data_a"]), "--output", str(out), "--preset", "albert-tiny",
            *[x for kv in TINY for x in ("--model-override", kv)], "--batch-size", "4", "--max-steps", "1",
            "--no-tensorboard", "--no-plot"]  # fmt: skip
    refused(capsys, argv, "holds spiece.model", "--overwrite", untouched=(out,))
    (out / "spiece.model").unlink()
    (out / "notes.txt").write_text("mine")
    assert main(argv) == 0 and (out / "notes.txt").read_text() == "mine"


def test_resume_alone_says_why_there_is_nothing_to_resume(tmp_path, capsys):
    """`--output RUN --resume` with no run there named the options missing (--task, --model, --data)."""
    for command in ("finetune", "pretrain"):
        refused(capsys, [command, "--output", str(tmp_path / "none"), "--resume"], "no such folder")
    (tmp_path / "other" / "best").mkdir(parents=True)
    refused(capsys, ["finetune", "--output", str(tmp_path / "other"), "--resume"], "has finished")
    (tmp_path / "other" / "best").rmdir()
    (tmp_path / "other" / "notes.txt").write_text("")
    refused(
        capsys, ["finetune", "--output", str(tmp_path / "other"), "--resume"], "no checkpoint", "notes.txt"
    )


def test_resume_from_another_folder_names_the_folder_the_run_started_in(tmp_path, capsys, monkeypatch):
    """A run started in START with relative paths, resumed from elsewhere: its --data was read from here
    and refused as "no such file or folder", a path the user never typed."""
    run = tmp_path / "start" / "runs" / "ft" / "checkpoint-2"
    run.mkdir(parents=True)
    saved = {"task": "sst2", "model": "m", "data": "glue/SST-2", "output": "runs/ft"}
    (run / "finetune_config.json").write_text(json.dumps(saved))
    monkeypatch.chdir(tmp_path)
    argv = ["finetune", "--output", "start/runs/ft", "--resume"]
    refused(capsys, argv, "--data glue/SST-2", "is relative", f"from {tmp_path / 'start'}",
            "or give that option again with a path from here")  # fmt: skip
    # given again with a path from here, it is read from there (no refusal about the saved one)
    capsys.readouterr()
    assert main([*argv, "--data", str(tmp_path / "start" / "glue" / "SST-2")]) != 0
    assert "is relative" not in capsys.readouterr().err
    # the same file given as --config: its relative paths are read from here, and the message says so
    config = str(run / "finetune_config.json")
    refused(capsys, ["finetune", "--config", config], f"--config {config}: its --data glue/SST-2: not found",
            "from the folder they are relative to")  # fmt: skip
    pretrain = run / "pretrain_config.json"
    pretrain.write_text(json.dumps({"data": "data1", "output": "runs/ft"}))
    refused(capsys, ["pretrain", "--config", str(pretrain), "--output", "start/runs/ft"],
            "its --data data1: not found", f"run the command from {tmp_path / 'start'}")  # fmt: skip


# -------------------------------------------------------------------------- pretrain --text (task-adaptive pretraining)
def test_continued_pretraining_on_plain_text_is_one_command(run_world, capsys, tmp_path):
    from albert_lm.data.tokenizer import AlbertTokenizer

    out = tmp_path / "tapt"
    argv = ["pretrain", "--init-from", str(run_world["run"]), "--text", str(run_world["corpus_b"]), "--output",
            str(out), "--preset", "albert-tiny", *[x for kv in TINY for x in ("--model-override", kv)],
            "--batch-size", "4", "--max-steps", "2", "--no-tensorboard", "--no-plot"]  # fmt: skip
    assert main(argv) == 0
    assert (out / "data" / "manifest.json").is_file() and (out / "model.safetensors").is_file()
    made = AlbertTokenizer.from_pretrained(out / "data").fingerprint
    assert made == AlbertTokenizer.from_pretrained(run_world["run"]).fingerprint  # the model's own tokenizer
    assert json.loads((out / "data" / "manifest.json").read_text())["max_seq_length"] == 64  # the positions
    # the same command again: the run is there (resume or overwrite, as for any run)
    refused(capsys, argv, "holds another run", untouched=(out,))
    assert main([*argv, "--overwrite"]) == 0
    assert main([*argv, "--resume"]) == 0  # its saved settings name the examples it made: not "--data too"
    # a folder (or glob) of text, as `albert data create` takes it
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(run_world["corpus_b"], folder / "sub" / "b.txt")
    folder_argv = [*argv[:4], str(folder), "--output", str(tmp_path / "tapt2"), *argv[7:]]
    assert main(folder_argv) == 0
    made = json.loads((tmp_path / "tapt2" / "data" / "manifest.json").read_text())["summary"]
    assert made["input_bytes"] == run_world["corpus_b"].stat().st_size
    # a Project Gutenberg book: its header and licence left out with --strip-gutenberg, as data create does
    book = tmp_path / "book.txt"
    body = run_world["corpus_b"].read_text()
    book.write_text("The Project Gutenberg eBook of X\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\n"
                    + body + "\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nLicence text.\n")  # fmt: skip
    book_argv = [*argv[:4], str(book), "--output", str(tmp_path / "tapt3"), *argv[7:], "--strip-gutenberg"]
    assert main(book_argv) == 0
    read = json.loads((tmp_path / "tapt3" / "data" / "manifest.json").read_text())["summary"]["input_bytes"]
    assert read < book.stat().st_size - 100  # the markers' lines and the licence not read
    refused(capsys, [*argv[:3], "--data", str(run_world["data_a"]), *argv[5:], "--strip-gutenberg"], "--text")
    # JSON Lines whose text is in another field: --text-column, as `albert data create` takes it
    records = tmp_path / "records.jsonl"
    lines = [line for line in body.splitlines() if line.strip()]
    chunks = ["\n".join(lines[i : i + 20]) for i in range(0, len(lines), 20)]  # documents of 20 lines
    records.write_text("".join(json.dumps({"body": chunk}) + "\n" for chunk in chunks))
    jsonl_argv = [*argv[:4], str(records), "--output", str(tmp_path / "tapt4"), *argv[7:]]
    refused(capsys, jsonl_argv, "no field 'text'", "--text-column NAME")
    assert main([*jsonl_argv, "--text-column", "body"]) == 0
    refused(
        capsys, [*argv[:3], "--data", str(run_world["data_a"]), *argv[5:], "--text-column", "b"], "--text"
    )
    # without a model to take the tokenizer from, or with --data as well: refused, nothing written
    refused(
        capsys,
        ["pretrain", "--text", str(run_world["corpus_b"]), "--output", str(tmp_path / "x")],
        "--init-from",
    )
    refused(
        capsys, [*argv[:-2], "--data", str(run_world["data_a"]), "--output", str(tmp_path / "y")], "not both"
    )
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
