"""Hostile use of finetune, evaluate, predict and glue: nothing a user gives is destroyed, nothing wrong
exits 0. Outputs that are (or hold, or lie inside) an input, devices and pipes as outputs, two writers on
one folder, reused glue runs made from something else, tokenizers that are not the model's, models
without the head they are used for, values that would silently mean something else, a machine without
the device asked for, and errors in glue's worker processes."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, finetune_argv
from test_bad_input import refused

from albert_lm.cli import main
from albert_lm.data.tokenizer_training import train_tokenizer
from albert_lm.files import folder_lock
from albert_lm.model.heads import AlbertForPreTraining, AlbertForSequenceClassification

GLUE_TASKS = ("RTE",)
FT = ["--max-steps", "2", "--batch-size", "4", "--precision", "fp32", "--max-seq-length", "48"]


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_corpus_and_tokenizer, tiny_pretrained, albert_data) -> dict[str, Path]:
    """A tiny pretrained model (200 pieces: a copy of the session's `tiny_pretrained`, inside root/), a
    small RTE copy, a fine-tuned run of it, and a second tokenizer of the same size trained on other text."""
    corpus, tok = tiny_corpus_and_tokenizer
    d = tmp_path_factory.mktemp("hostile")
    w: dict[str, Path] = {"root": d, "tok": tok}
    w["pre"] = Path(shutil.copytree(tiny_pretrained, d / "pre"))
    glue = d / "glue"
    for task in GLUE_TASKS:
        (glue / task).mkdir(parents=True)
        for split in ("train", "dev"):
            lines = (albert_data / "glue" / task / f"{split}.tsv").read_text().splitlines()[:17]
            (glue / task / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    w["glue"], w["rte"] = glue, glue / "RTE"
    assert main(_finetune(w, d / "ft")) == 0
    w["ft"], w["best"] = d / "ft", d / "ft" / "best"
    rng = np.random.default_rng(7)
    words = ["".join(rng.choice(list("qwxzjkvy"), size=int(rng.integers(2, 7)))) for _ in range(400)]
    other = d / "other.txt"
    other.write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(3000)) + "\n")
    train_tokenizer([other], d / "tok_b", vocab_size=200, num_threads=1)
    w["tok_b"] = d / "tok_b"
    pairs = [
        {"text": "a first line", "text_pair": "a line"},
        {"text": "and a second one", "text_pair": "one more"},
    ]
    (d / "in.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))  # an RTE model reads pairs
    w["input"] = d / "in.jsonl"
    return w


def _finetune(w, out, *extra) -> list[str]:
    return finetune_argv("rte", w["pre"], w["rte"], out, *FT, *extra)


def _glue(w, out, *extra, model=None) -> list[str]:
    return ["glue", "--model", str(model or w["pre"]), "--data", str(w["glue"]), "--output", str(out), "--tasks",
            "rte", "--seeds", "1", "--learning-rates", "1e-3", "--epochs", "1", "--batch-size", "8",
            "--max-seq-length", "48", "--max-train-examples", "8", "--workers", "1", *extra]  # fmt: skip


def _predict(w, *extra, model=None) -> list[str]:
    return ["predict", "--model", str(model or w["best"]), "--input", str(w["input"]), *extra]


def _evaluate(w, *extra, model=None) -> list[str]:
    return ["evaluate", "--task", "rte", "--model", str(model or w["best"]), "--data", str(w["rte"]), *extra]


# --------------------------------------------------------------------------- 1. output vs input
def test_an_output_that_is_holds_or_lies_in_an_input_is_refused(world, capsys, tmp_path):
    w = world
    keep = (w["root"],)
    refused(
        capsys,
        _predict(w, "--output", str(w["input"])),
        "--output",
        "is the --input",
        untouched=keep,
    )
    refused(
        capsys,
        _predict(w, "--output", str(w["best"] / "x.jsonl")),
        "inside the --model",
        untouched=keep,
    )
    # evaluate: into the run that holds the model, into the model, into the data
    refused(
        capsys, _evaluate(w, "--output", str(w["ft"]), "--overwrite"), "holds the --model", untouched=keep
    )
    refused(capsys, _evaluate(w, "--output", str(w["best"])), "is the --model", untouched=keep)
    refused(capsys, _evaluate(w, "--output", str(w["rte"] / "out")), "inside the --data", untouched=keep)
    # finetune: --overwrite never deletes an input
    for out, text in (
        (w["pre"], "is the --model"),
        (w["root"], "holds the --model"),
        (w["rte"], "is the --data"),
        (w["rte"] / "o", "inside the --data"),
    ):
        refused(capsys, _finetune(w, out, "--overwrite"), text, untouched=keep)
    tok = tmp_path / "tok"
    shutil.copytree(w["tok"], tok)
    refused(
        capsys,
        _finetune(w, tok, "--overwrite", "--tokenizer", str(tok)),
        "is the --tokenizer",
        untouched=(tok, w["root"]),
    )
    refused(capsys, _glue(w, w["pre"]), "is the --model", untouched=keep)
    refused(capsys, _glue(w, w["glue"] / "out"), "inside the --data", untouched=keep)


def test_evaluate_replaces_earlier_results_only_with_overwrite(world, capsys, tmp_path):
    w = world
    other_run = tmp_path / "run"
    other_run.mkdir()
    (other_run / "eval_results.json").write_text('{"accuracy": 0.9}\n')
    (other_run / "notes.txt").write_text("mine\n")
    refused(
        capsys,
        _evaluate(w, "--output", str(other_run)),
        "eval_results.json",
        "--overwrite",
        untouched=(other_run,),
    )
    assert main(_evaluate(w, "--output", str(other_run), "--overwrite")) == 0
    assert json.loads((other_run / "eval_results.json").read_text()) != {"accuracy": 0.9}
    assert (other_run / "notes.txt").read_text() == "mine\n"
    assert (other_run / "predictions").is_dir()


def test_finetune_overwrite_removes_only_the_runs_files(world, tmp_path):
    out = tmp_path / "out"
    assert main(_finetune(world, out)) == 0
    (out / "notes.txt").write_text("mine\n")
    (out / "finetune_config.json").write_text("{}\n")  # a settings file of the user's (a --config): kept
    assert main(_finetune(world, out, "--overwrite")) == 0
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "best" / "config.json").is_file()
    assert (out / "finetune_config.json").read_text() == "{}\n"


# --------------------------------------------------------------------------- 2. devices and pipes
def test_predict_writes_into_devices_and_pipes_and_reports_a_failed_write(world, capsys, stand_ins):
    w = world
    base = _predict(w)
    broken = stand_ins.broken_pipe
    refused(capsys, [*base, "--output", str(broken)], str(broken), "Broken pipe")
    assert broken.is_symlink()
    fifo = stand_ins.fifo
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main([*base, "--output", str(fifo)]) == 0
    reader.join(10)
    rows = [json.loads(line) for line in got[0].decode().splitlines()]
    assert [r["line"] for r in rows] == [1, 2] and fifo.is_fifo()


def test_an_output_linked_to_stdout_is_written_to_stdout_and_the_link_stays(world, capfd, stand_ins):
    """Under pytest's capture stdout is a regular (deleted) file, as under nohup or cron: the rows must
    reach it through the link, and the link must not be replaced by a file of its own."""
    w = world
    argv = _predict(w, "--output", str(stand_ins.stdout))
    print("before", flush=True)
    assert main(argv) == 0
    print("after", flush=True)
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "before" and out[-1] == "after"
    assert [json.loads(line)["line"] for line in out[1:-1]] == [1, 2]
    assert stand_ins.stdout.is_symlink() and os.readlink(stand_ins.stdout) == "/proc/self/fd/1"
    assert sorted(p.name for p in stand_ins.stdout.parent.iterdir()) == sorted(
        ["stdout", "fifo", "broken-pipe", stand_ins.unwritable.parent.name]
    )


def test_an_output_that_is_a_link_writes_its_target_and_keeps_the_link(world, capsys, tmp_path):
    w = world
    target = tmp_path / "elsewhere" / "rows.jsonl"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    dangling = tmp_path / "new.jsonl"
    dangling.symlink_to(tmp_path / "elsewhere" / "new-target.jsonl")
    for out in (link, dangling):
        assert main(_predict(w, "--output", str(out))) == 0
        assert out.is_symlink()
        assert [json.loads(line)["line"] for line in out.read_text().splitlines()] == [1, 2]
    assert sorted(p.name for p in target.parent.iterdir()) == ["new-target.jsonl", "rows.jsonl"]


# --------------------------------------------------------------------------- 3. two writers
def test_a_second_writer_of_one_folder_is_refused(world, capsys, tmp_path):
    w = world
    for argv, out in (
        (_finetune(w, tmp_path / "f"), tmp_path / "f"),
        (_glue(w, tmp_path / "g"), tmp_path / "g"),
        (_evaluate(w, "--output", str(tmp_path / "e")), tmp_path / "e"),
    ):
        with folder_lock(out):
            refused(capsys, argv, "another albert command is writing there")
        assert not (out / "eval_results.json").exists()
    # the lock is the folder's flock: taken by a plain flock too
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        refused(capsys, _finetune(w, tmp_path / "f"), "another albert command")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- 4. reused glue runs
def test_glue_reuses_only_runs_of_the_same_model_data_and_settings(world, capsys, tmp_path):
    w = world
    out = tmp_path / "glue"
    assert main(_glue(w, out)) == 0
    run = out / "rte" / "lr-0.001" / "seed-1"
    record = json.loads((run / "glue_run.json").read_text())
    assert set(record) == {"model", "tokenizer", "data", "settings"}
    stamp = (run / "eval_results.json").stat().st_mtime_ns
    assert main(_glue(w, out)) == 0  # the same: reused
    assert (run / "eval_results.json").stat().st_mtime_ns == stamp
    argv = _glue(w, out)
    argv[argv.index("--max-seq-length") + 1] = "40"
    refused(capsys, argv, "max_seq_length: 48 there, 40 now", "--overwrite", untouched=(out,))
    # another model (same config, other weights)
    other = tmp_path / "other_model"
    shutil.copytree(w["pre"], other)
    model = AlbertForPreTraining.from_pretrained(w["pre"])
    with torch.no_grad():
        model.albert.pooler.weight.add_(1.0)
    model.save_pretrained(other)
    refused(capsys, _glue(w, out, model=other), "the model's config or weights changed", untouched=(out,))
    # other data
    dev = w["rte"] / "dev.tsv"
    saved = dev.read_bytes()
    try:
        dev.write_bytes(saved.rstrip(b"\n").rsplit(b"\n", 1)[0] + b"\n")
        refused(capsys, _glue(w, out), "dev.tsv changed", untouched=(out,))
    finally:
        dev.write_bytes(saved)
    # a run without its record (an older albert, or stopped before the record)
    (run / "glue_run.json").unlink()
    refused(capsys, _glue(w, out), "no glue_run.json", untouched=(out,))
    assert main([*argv, "--overwrite"]) == 0  # redone with the new settings
    assert json.loads((run / "glue_run.json").read_text())["settings"]["max_seq_length"] == 40


# --------------------------------------------------------------------------- 5. tokenizer vs model
def test_a_tokenizer_that_is_not_the_models_is_refused(world, capsys, tmp_path):
    w = world
    swapped = tmp_path / "swapped"
    shutil.copytree(w["best"], swapped)
    shutil.copy(w["tok_b"] / "spiece.model", swapped / "spiece.model")  # same size, other pieces
    refused(capsys, _predict(w, model=swapped), "fingerprint", "replaced")
    refused(capsys, _evaluate(w, model=swapped), "fingerprint")
    refused(
        capsys,
        finetune_argv("rte", swapped, w["rte"], tmp_path / "o", *FT),
        "fingerprint",
    )
    # a model folder without its own tokenizer: --tokenizer must have as many pieces as embedding rows
    bare = tmp_path / "bare"
    shutil.copytree(w["pre"], bare)
    (bare / "spiece.model").unlink()
    train_tokenizer([w["root"] / "other.txt"], tmp_path / "tok150", vocab_size=150, num_threads=1)
    refused(
        capsys,
        finetune_argv("rte", bare, w["rte"], tmp_path / "o", "--tokenizer", str(tmp_path / "tok150"), *FT),
        "150 pieces",
        "200 rows",
    )
    small = tmp_path / "small"
    shutil.copytree(w["best"], small)
    shutil.copy(tmp_path / "tok150" / "spiece.model", small / "spiece.model")
    refused(capsys, _predict(w, model=small), "150 pieces", "200")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- 6. models not what they seem
def test_a_model_without_the_head_is_refused(world, capsys):
    w = world
    refused(capsys, _evaluate(w, model=w["pre"]), str(w["pre"]), "no trained AlbertForSequenceClassification")
    # a classifier with another number of outputs than the task's labels
    refused(
        capsys,
        ["evaluate", "--task", "stsb", "--model", str(w["best"]), "--data", str(w["rte"])],
        "2 outputs",
    )


def test_a_transformers_classifier_is_read_as_transformers_reads_it(
    tmp_path, tiny_corpus_and_tokenizer, capsys
):
    transformers = pytest.importorskip("transformers")
    _, tok = tiny_corpus_and_tokenizer
    texts = tmp_path / "in.txt"
    texts.write_text("kala bime to\ndunora pesi kalo bu vemi\n")
    for kind, extra in (
        ("single", dict(num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"})),
        ("regression", dict(num_labels=1)),
        ("multi", dict(num_labels=2, problem_type="multi_label_classification")),
    ):
        torch.manual_seed(0)
        config = transformers.AlbertConfig(**{**TINY_MODEL, "vocab_size": 200}, **extra)
        theirs = transformers.AlbertForSequenceClassification(config).eval()
        folder = tmp_path / kind
        theirs.save_pretrained(folder)
        shutil.copy(tok / "spiece.model", folder / "spiece.model")
        ours = AlbertForSequenceClassification.from_pretrained(folder).eval()
        ids = torch.tensor([[2, 15, 27, 33, 3]])
        with torch.no_grad():
            expected = theirs(input_ids=ids).logits
            torch.testing.assert_close(ours(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-4)
        capsys.readouterr()
        assert main(["predict", "--model", str(folder), "--input", str(texts)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        if kind == "single":
            assert set(rows[0]["probabilities"]) == {"neg", "neu", "pos"}
            assert abs(sum(rows[0]["probabilities"].values()) - 1) < 1e-4
        elif kind == "regression":  # transformers: one output and no problem_type is a regression
            assert "score" in rows[0] and "label" not in rows[0]
        else:  # multi-label: a sigmoid per label, not a softmax over them
            assert set(rows[0]["probabilities"]) == {"LABEL_0", "LABEL_1"} and "labels" in rows[0]


# --------------------------------------------------------------------------- 7. values meaning something else
def test_zero_or_negative_counts_are_refused(world, capsys):
    w = world
    for option in ("--max-seq-length", "--batch-size"):
        for value in ("0", "-3"):
            refused(capsys, _evaluate(w, option, value), option, "at least 1")
    refused(
        capsys,
        _predict(w, "--batch-size", "0"),
        "batch_size",
    )
    refused(capsys, _finetune(w, w["root"] / "z", "--eval-every", "0"), "--eval-every")
    refused(capsys, _glue(w, w["root"] / "z", "--seeds", "1,x"), "seeds")
    assert not (w["root"] / "z").exists()


# --------------------------------------------------------------------------- 8. environment
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_device_this_machine_lacks_is_a_clean_refusal(world, capsys, tmp_path):
    w = world
    refused(capsys, _finetune(w, tmp_path / "o", "--device", "cuda"), "--device cuda", "no CUDA")
    refused(
        capsys,
        ["predict", "--model", str(w["best"]), "--input", str(w["input"]), "--device", "cuda"],
        "no CUDA",
    )
    refused(capsys, _evaluate(w, "--device", "cuda"), "no CUDA")
    refused(capsys, _glue(w, tmp_path / "g", "--device", "cuda"), "no CUDA")
    with pytest.raises(SystemExit) as bad:  # not a device name at all: argparse's usage error, exit 2
        main(_finetune(w, tmp_path / "o", "--device", "tpu"))
    assert bad.value.code == 2 and "expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "g").exists()


def test_an_output_that_cannot_be_written_is_a_clean_error(world, capsys, stand_ins):
    w = world
    bad = str(stand_ins.unwritable)
    refused(capsys, _finetune(w, bad), bad)
    refused(
        capsys,
        ["predict", "--model", str(w["best"]), "--input", str(w["input"]), "--output", f"{bad}/p.jsonl"],
        bad,
    )
    refused(capsys, _evaluate(w, "--output", bad), bad)


# --------------------------------------------------------------------------- 9. errors in glue's workers
def test_an_error_in_a_glue_worker_reaches_the_parent_and_stops_the_workers(world, capsys, tmp_path):
    w = world
    glue = tmp_path / "glue"
    shutil.copytree(w["glue"], glue)
    train = glue / "RTE" / "train.tsv"
    lines = train.read_text().splitlines()
    train.write_text("\n".join([lines[0].replace("label", "gold")] + lines[1:]) + "\n")
    argv = _glue(w, tmp_path / "out", "--seeds", "1,2")
    argv[argv.index("--data") + 1] = str(glue)
    t0 = time.monotonic()
    refused(capsys, argv, str(train), "missing column 'label'")
    assert time.monotonic() - t0 < 60
    assert multiprocessing.active_children() == []
    assert not list((tmp_path / "out").glob("*/*/*/glue_run.json"))
