"""The fine-tuning loop: schedule, length buckets, collation, and end-to-end runs of a tiny model on real data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import labelled_rows, run_stopped_at

from albert_lm import AlbertForPreTraining, AlbertForSequenceClassification
from albert_lm.cli import main
from albert_lm.kernels.precision import resolve_precision
from albert_lm.tasks.batches import collate, length_bucketed_batches
from albert_lm.training.finetune import FinetuneConfig, finetune
from albert_lm.training.finetune_config import schedule


# --------------------------------------------------------------------------- units
def _cfg(task: str, **kw) -> FinetuneConfig:
    return FinetuneConfig(task=task, model="m", data="d", output="o", **kw).resolved()


def test_defaults_follow_the_fine_tuning_table():
    c = _cfg("rte")
    assert (c.learning_rate, c.batch_size, c.max_seq_length, c.dropout) == (3e-5, 32, 512, 0.1)
    assert schedule(c, 2490)[:2] == (800, 200)
    c = _cfg("sst2")
    assert (c.learning_rate, c.batch_size) == (1e-5, 32) and schedule(c, 67349)[:2] == (20935, 1256)
    assert schedule(_cfg("cola"), 8551)[:2] == (5336, 320)
    assert schedule(_cfg("stsb"), 5749)[:2] == (3598, 214)
    c = _cfg("squad1")
    assert (c.learning_rate, c.batch_size, c.max_seq_length) == (5e-5, 48, 384)
    # 2 epochs of 960 windows at batch 48 = 40 steps, 10% warmup
    assert schedule(c, 960) == (40, 4, 20)
    # overriding the steps keeps the table's warmup fraction (200 of 800)
    assert schedule(_cfg("mrpc", max_steps=100), 3668)[:2] == (100, 25)
    assert schedule(_cfg("mrpc", epochs=1.0, batch_size=10), 95)[:2] == (10, 2)
    assert schedule(_cfg("rte", max_steps=100, warmup_steps=7), 10)[:2] == (100, 7)
    with pytest.raises(ValueError, match="unknown task"):
        FinetuneConfig(task="boolq", model="m", data="d", output="o")
    with pytest.raises(ValueError, match="precision"):
        FinetuneConfig(task="rte", model="m", data="d", output="o", precision="fp8")


def test_length_buckets_cover_every_index_and_cut_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 300, size=1000)
    batches = length_bucketed_batches(lengths, 16, np.random.default_rng(1), window=8)
    assert sorted(i for b in batches for i in b) == list(range(1000))

    def padded(bs):
        return sum(len(b) * max(lengths[i] for i in b) for b in bs)

    shuffled = np.random.default_rng(1).permutation(1000)
    random_batches = [shuffled[i : i + 16].tolist() for i in range(0, 1000, 16)]
    assert padded(batches) < 0.7 * padded(random_batches)
    # a different seed gives a different order; the same seed the same one
    again = length_bucketed_batches(lengths, 16, np.random.default_rng(1), window=8)
    assert again == batches
    assert length_bucketed_batches(lengths, 16, np.random.default_rng(2), window=8) != batches
    ordered = length_bucketed_batches(lengths, 16, None)
    flat = [lengths[i] for b in ordered for i in b]
    assert flat == sorted(flat)


def test_collate_pads_and_masks():
    feats = [
        {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": [-100, 1, -100]},
        {"input_ids": [2, 7, 8, 9, 3], "token_type_ids": [0, 0, 0, 1, 1], "labels": [-100, 0, 2, 1, -100]},
    ]
    b = collate(feats, pad_id=0)
    assert b["input_ids"].tolist() == [[2, 7, 3, 0, 0], [2, 7, 8, 9, 3]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert b["labels"][0].tolist() == [-100, 1, -100, -100, -100]
    mc = [{"input_ids": [[2, 5, 3], [2, 5, 6, 3]], "token_type_ids": [[0, 0, 0], [0, 0, 1, 1]], "labels": 1}]
    b = collate(mc, pad_id=0)
    assert b["input_ids"].shape == (1, 2, 4) and b["labels"].tolist() == [1]
    assert b["attention_mask"][0, 0].tolist() == [1, 1, 1, 0]


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["finetune", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for word in (
        "--task",
        "rte",
        "squad2",
        "token-classification",
        "--max-steps",
        "--precision",
        "--doc-stride",
    ):
        assert word in text
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "--predictions" in capsys.readouterr().out


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def tiny_model(albert_data, tmp_path_factory, tiny_config) -> Path:
    """A random tiny ALBERT with the released 30k vocabulary, saved as a pretraining checkpoint."""
    folder = tmp_path_factory.mktemp("tiny")
    config = tiny_config(vocab_size=30000, max_position_embeddings=512)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(folder)
    shutil.copyfile(albert_data / "tokenizer" / "albert-30k" / "spiece.model", folder / "spiece.model")
    return folder


def _finetune_cli(task, model, data, out, *extra) -> dict:
    args = ["finetune", "--task", task, "--model", str(model), "--data", str(data), "--output", str(out)]
    if "--precision" not in extra:
        extra = ("--precision", "fp32", *extra)  # thresholds below are fp32's; `auto` has its own test
    args += [
        "--max-steps",
        "4",
        "--batch-size",
        "8",
        "--eval-every",
        "2",
        "--max-train-examples",
        "64",
        *extra,
    ]
    assert main(args) == 0
    return json.loads((out / "eval_results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "folder", "names", "dev_rows"),
    [
        ("rte", "RTE", {"accuracy"}, 277),  # the whole dev set, re-evaluated below
        ("stsb", "STS-B", {"pearson", "spearman"}, 300),
        ("cola", "CoLA", {"mcc"}, 300),
    ],
)
def test_glue_end_to_end(albert_data, tiny_model, tmp_path, capsys, task, folder, names, dev_rows):
    out, data = tmp_path / "out", albert_data / "glue" / folder
    results = _finetune_cli(
        task, tiny_model, data, out, *(["--max-eval-examples", "300"] if task != "rte" else [])
    )
    assert names <= set(results) and results["step"] in (2, 4)
    for name in names:
        assert -1.0 <= results[name] <= 1.0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "dev"]
    assert [e["step"] for e in evals] == [2, 4]
    # the kept checkpoint is the best evaluation
    main_metric = {"rte": "accuracy", "stsb": "spearman", "cola": "mcc"}[task]
    assert results[main_metric] == max(e[main_metric] for e in evals)
    rows = (out / "predictions" / "dev" / f"{folder}.tsv").read_text().splitlines()
    assert rows[0] == "index\tprediction" and len(rows) == dev_rows + 1
    assert not list(out.glob("**/*.tmp"))
    if task != "rte":
        return
    # `albert evaluate` on the kept checkpoint reproduces the dev metrics
    capsys.readouterr()
    assert main(["evaluate", "--task", task, "--model", str(out / "best"), "--data", str(data)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["accuracy"] == pytest.approx(results["accuracy"], abs=1e-6)
    # the fine-tuned classifier gives the same logits in transformers, with its label names
    transformers = pytest.importorskip("transformers")
    ours = AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    ids = torch.tensor([[2, 10975, 15, 51, 1952, 3]])
    with torch.no_grad():
        torch.testing.assert_close(
            ours(input_ids=ids).logits, theirs(input_ids=ids).logits, atol=1e-5, rtol=1e-4
        )
    assert theirs.config.id2label == {0: "entailment", 1: "not_entailment"}


@pytest.mark.slow
def test_squad2_sample_end_to_end(albert_data, tiny_model, tmp_path, capsys):
    dev = albert_data / "squad" / "dev-v2.0-small.json"
    out = tmp_path / "out"
    results = _finetune_cli("squad2", tiny_model, dev, out, "--max-seq-length", "128", "--doc-stride", "64")
    for name in (
        "exact_match",
        "f1",
        "HasAns_exact",
        "HasAns_f1",
        "NoAns_exact",
        "best_f1",
        "best_f1_thresh",
    ):
        assert name in results
    assert results["total"] == 14 and results["HasAns_total"] + results["NoAns_total"] == 14
    card = (out / "best" / "README.md").read_text()  # its head, and that it was scored on its training file
    assert "answer's start and end (AlbertForQuestionAnswering" in card and "through the pooler" not in card
    assert "14 (the training file itself: the dev scores below are not held-out scores)" in card
    preds = json.loads((out / "predictions" / "predictions.json").read_text())
    odds = json.loads((out / "predictions" / "null_odds.json").read_text())
    assert len(preds) == len(odds) == 14
    # every non-empty prediction is a piece of its own context
    contexts = {
        qa["id"]: par["context"]
        for art in json.loads(dev.read_text())["data"]
        for par in art["paragraphs"]
        for qa in par["qas"]
    }
    assert all(text in contexts[qid] for qid, text in preds.items())
    # the written predictions score as reported
    capsys.readouterr()
    pred_file = out / "predictions" / "predictions.json"
    assert main(["evaluate", "--task", "squad2", "--data", str(dev), "--predictions", str(pred_file)]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["f1"] == pytest.approx(results["f1"])
    assert scored["exact_match"] == pytest.approx(results["exact_match"])
    # and the kept model, run again by `albert evaluate --model`, gives the same scores
    assert main(["evaluate", "--task", "squad2", "--model", str(out / "best"), "--data", str(dev)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["f1"] == pytest.approx(results["f1"]) and again["best_f1"] == pytest.approx(
        results["best_f1"]
    )
    # evaluate answers with the model's threshold (as predict does), not one chosen on the data it scores
    moved = tmp_path / "moved"
    shutil.copytree(out / "best", moved)
    kept = json.loads((moved / "eval_results.json").read_text())
    (moved / "eval_results.json").write_text(json.dumps({**kept, "null_score_diff_threshold": 1e9}))
    assert main(["evaluate", "--task", "squad2", "--model", str(moved), "--data", str(dev)]) == 0
    answering = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answering["null_score_diff_threshold"] == 1e9 and answering["NoAns_exact"] == 0  # never abstains
    assert answering["best_f1"] == pytest.approx(results["best_f1"])
    from albert_lm.deploy.export import _null_threshold  # what export.json records beside the logits
    from albert_lm.runtime.finetuned import read_saved_settings

    assert _null_threshold(moved, read_saved_settings(moved)) == {"null_score_diff_threshold": 1e9}
    assert not _null_threshold(tiny_model, read_saved_settings(tiny_model))
    # predict says how sure each answer is, and what the threshold compared: answered as the model's is set
    rows = tmp_path / "q.jsonl"
    rows.write_text(
        "".join(json.dumps({"question": "Which?", "context": c}) + "\n" for c in list(contexts.values())[:3])
    )
    assert main(["predict", "--model", str(moved), "--input", str(rows)]) == 0
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(isinstance(r["score"], float) and r["null_score_diff"] <= 1e9 and r["answer"] for r in said)


def test_bad_label_fails_before_writing(albert_data, tiny_model, tmp_path, capsys):
    data = tmp_path / "RTE"
    data.mkdir()
    lines = (albert_data / "glue" / "RTE" / "train.tsv").read_text().splitlines()[:20]
    lines[7] = lines[7].rsplit("\t", 1)[0] + "\tmaybe"
    (data / "train.tsv").write_text("\n".join(lines) + "\n")
    shutil.copyfile(albert_data / "glue" / "RTE" / "dev.tsv", data / "dev.tsv")
    out = tmp_path / "out"
    args = [
        "finetune",
        "--task",
        "rte",
        "--model",
        str(tiny_model),
        "--data",
        str(data),
        "--output",
        str(out),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "train.tsv:8: label 'maybe' in column 'label' is not one of entailment, not_entailment" in err
    assert not out.exists()


@pytest.mark.slow
def test_race_end_to_end(albert_data, tiny_model, tmp_path):
    # the shared RACE-M dev file stands in for both train and dev (one file for every split)
    out = tmp_path / "out"
    results = _finetune_cli(
        "race",
        tiny_model,
        albert_data / "race" / "race_middle_dev.jsonl",
        out,
        "--max-seq-length",
        "96",
        "--max-eval-examples",
        "40",
        "--batch-size",
        "4",
    )
    assert 0.0 <= results["accuracy"] <= 1.0
    rows = (out / "predictions" / "dev_predictions.jsonl").read_text().splitlines()
    assert len(rows) == 40 and json.loads(rows[0])["answer"] in "ABCD"


def test_training_data_of_one_label_is_refused_naming_the_data_and_the_column(tiny_model, tmp_path, capsys):
    data = labelled_rows(tmp_path / "data", {"pos": ["good", "great"]}, {"train": 8, "dev": 4})
    argv = ["finetune", "--task", "classification", "--model", str(tiny_model), "--data", str(data)]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"--data {data}: column 'label': text classification needs at least 2 labels in training" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_own_data_end_to_end(tiny_model, tmp_path, capsys):
    words = {"pos": ["good", "great", "fine", "nice"], "neg": ["bad", "awful", "poor", "sad"]}
    data = labelled_rows(tmp_path / "data", words, {"train": 48, "dev": 16})
    out = tmp_path / "cls"
    # Learnable from random init: the loop must reach (near) perfect dev accuracy in 30 steps.
    more = ("--max-steps", "30", "--learning-rate", "1e-3", "--batch-size", "16", "--eval-every", "10")
    results = _finetune_cli("classification", tiny_model, data, out, *more)
    assert {"accuracy", "f1_macro"} <= set(results)
    assert results["accuracy"] >= 0.9
    saved = json.loads((out / "best" / "config.json").read_text())
    assert saved["id2label"] == {"0": "neg", "1": "pos"}
    # --eval-on-start's step 0 is a baseline, never best/ (at a rate too small to change a score every
    # evaluation ties, and a tie keeps the earliest evaluation)
    still = tmp_path / "still"
    flat = ("--max-steps", "2", "--learning-rate", "1e-12", "--eval-every", "1", "--eval-on-start")
    assert _finetune_cli("classification", tiny_model, data, still, *flat)["step"] == 1
    # --precision auto (the default) is recorded as what it resolved to on this machine
    auto = tmp_path / "auto"
    _finetune_cli("classification", tiny_model, data, auto, "--max-steps", "1", "--precision", "auto")
    settings = json.loads((auto / "best" / "finetune_config.json").read_text())
    assert settings["precision"] == resolve_precision("auto", "cpu")[0]
    # evaluation reads the label names back from the saved model
    capsys.readouterr()
    assert (
        main(["evaluate", "--task", "classification", "--model", str(out / "best"), "--data", str(data)]) == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] == results["accuracy"]
    # without --task: the task the model records
    assert main(["evaluate", "--model", str(out / "best"), "--data", str(data)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] == results["accuracy"]

    tokens = tmp_path / "ner"
    tokens.mkdir()
    sent = {"tokens": ["Ann", "met", "Bob", "in", "Rome"], "tags": ["B-PER", "O", "B-PER", "O", "B-LOC"]}
    for split in ("train", "dev"):
        (tokens / f"{split}.jsonl").write_text((json.dumps(sent) + "\n") * 8)
    # a checkpoint folder without spiece.model takes the tokenizer from --tokenizer
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model, bare, ignore=shutil.ignore_patterns("spiece.model"))
    with pytest.raises(FileNotFoundError, match="spiece.model"):
        finetune(FinetuneConfig(task="token-classification", model=str(bare), data=str(tokens), output="x"))
    tok = str(tiny_model / "spiece.model")
    results = _finetune_cli("token-classification", bare, tokens, tmp_path / "ner-out", "--tokenizer", tok)
    assert {"accuracy", "precision", "recall", "f1"} <= set(results)
    card = (tmp_path / "ner-out" / "best" / "README.md").read_text()  # the scores' meaning, on the card
    assert (
        "the words in `tokens`, tagged as `tags` was" in card and "are entity-level, micro-averaged" in card
    )


@pytest.mark.slow
def test_one_file_as_data_warns_that_dev_is_the_training_set(tiny_model, tmp_path, caplog):
    data = labelled_rows(tmp_path / "data", {"pos": ["good"], "neg": ["bad"]}, {"train": 16})
    with caplog.at_level("WARNING", logger="albert_lm"):
        _finetune_cli(
            "classification", tiny_model, data / "train.jsonl", tmp_path / "out", "--max-steps", "1"
        )
    assert "one file is both the training and the dev set" in caplog.text
    # a dev set of one label: no model scores better than always answering it, and the run says so,
    # naming the rate at this small width (a small model at albert-base's rate scored below the guess)
    dev = data / "dev.jsonl"
    dev.write_text("".join(json.dumps({"text": "good", "label": "pos"}) + "\n" for _ in range(6)))
    caplog.clear()
    with caplog.at_level("WARNING", logger="albert_lm"):
        result = _finetune_cli("classification", tiny_model, data, tmp_path / "flat", "--max-steps", "1")
    assert result["accuracy"] <= 1.0
    assert "no better than always answering 'pos' (1.0000)" in caplog.text
    assert "the usual cause is the rate: --learning-rate 2e-05" in caplog.text
    caplog.clear()  # a rate inside the range small models want: the others are what to try
    with caplog.at_level("WARNING", logger="albert_lm"):
        _finetune_cli(
            "classification", tiny_model, data, tmp_path / "in", "--max-steps", "1", "--learning-rate", "3e-4"
        )
    assert (
        "--learning-rate 0.0003; try the other rates of albert glue's grid (1e-4, 3e-4, 1e-3)" in caplog.text
    )


def test_a_stopped_fine_tuning_resumes_exactly(albert_data, tiny_model, tmp_path):
    """SIGTERM at step 3 of 6 saves a checkpoint and exits 143; `--output RUN --resume` alone continues it
    to the same best model and scores as a run never stopped; a finished run keeps no checkpoint."""
    from safetensors.torch import load_file

    def run(stop_at: int, *args: str):
        return run_stopped_at(stop_at, args)

    def argv(out: Path) -> list[str]:
        return ["finetune", "--task", "rte", "--model", str(tiny_model), "--data", str(albert_data / "glue" / "RTE"),
                "--output", str(out), "--max-steps", "6", "--batch-size", "8", "--eval-every", "2",
                "--max-train-examples", "64", "--max-eval-examples", "40", "--precision", "fp32", "-q"]  # fmt: skip

    ref = run(-1, *argv(tmp_path / "ref"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    cut = run(3, *argv(tmp_path / "run"))
    assert cut.returncode == 143, cut.stderr[-3000:]
    assert "continue with --resume" in cut.stderr
    assert (tmp_path / "run" / "checkpoint-3").is_dir() and not (
        tmp_path / "run" / "eval_results.json"
    ).exists()
    again = run(-1, *argv(tmp_path / "run"))  # the same command without --resume: refused, the run kept
    assert again.returncode == 1 and "pass --resume to continue it" in again.stderr
    changed = run(-1, *argv(tmp_path / "run"), "--resume", "--learning-rate", "1e-3")
    assert changed.returncode == 1 and "learning_rate" in changed.stderr
    resumed = run(-1, "finetune", "--output", str(tmp_path / "run"), "--resume", "-q")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = (load_file(tmp_path / r / "best" / "model.safetensors") for r in ("ref", "run"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    results = [json.loads((tmp_path / r / "eval_results.json").read_text()) for r in ("ref", "run")]
    assert results[0] == results[1]
    steps = [json.loads(ln)["step"] for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 6
    assert not list((tmp_path / "run").glob("checkpoint-*"))  # what --resume needed, gone with the run's end
    # Stopped at an evaluation step (4), before evaluating: the resumed run evaluates step 4 first.
    assert run(4, *argv(tmp_path / "at-eval")).returncode == 143
    resumed = run(-1, "finetune", "--output", str(tmp_path / "at-eval"), "--resume", "-q")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    b = load_file(tmp_path / "at-eval" / "best" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "at-eval" / "eval_results.json").read_text()) == results[0]
    dev = [
        [(r["step"], r.get("accuracy")) for r in map(json.loads, (tmp_path / name / "metrics.jsonl").open())
         if r["split"] == "dev"]
        for name in ("ref", "at-eval")
    ]  # fmt: skip
    assert dev[0] == dev[1] and [step for step, _ in dev[0]] == [2, 4, 6]


def _signal_at_dev_batch(monkeypatch, n: int) -> list[int]:
    """SIGTERM to this process as the model takes its nth dev batch (run_model's); returns the batches taken."""
    import os
    import signal

    import albert_lm.runtime.run as run_module

    batches: list[int] = []
    collate_rows = run_module.collate

    def signalled(chunk, pad):
        batches.append(len(chunk))
        if len(batches) == n:
            os.kill(os.getpid(), signal.SIGTERM)
        return collate_rows(chunk, pad)

    monkeypatch.setattr(run_module, "collate", signalled)
    return batches


def test_a_signal_during_an_evaluation_stops_it_at_once(
    albert_data, tiny_model, tmp_path, monkeypatch, one_thread
):
    """Ctrl-C and SIGTERM waited for the evaluation under way to end (8 minutes over SST-2's 67k training
    rows used as dev). Now the dev pass stops before its next batch, the step's checkpoint says the
    evaluation is due, and the resumed run scores as one never stopped; so too in the final evaluation,
    and in the due evaluation a resumed run starts with."""
    from albert_lm.training.finetune import FinetuneStopped

    def cfg(out: Path, **kw) -> FinetuneConfig:
        return FinetuneConfig(task="rte", model=str(tiny_model), data=str(albert_data / "glue" / "RTE"),
                              output=str(out), max_steps=6, batch_size=8, eval_batch_size=8, eval_every=2,
                              max_train_examples=64, max_eval_examples=40, precision="fp32", tensorboard=False,
                              plot=False, **kw)  # fmt: skip  # 5 dev batches an evaluation, at steps 2, 4, 6

    whole = finetune(cfg(tmp_path / "whole"))
    for name, signal_at, step in (("mid", 7, 4), ("final", 12, 6)):  # the nth dev batch of the run
        with monkeypatch.context() as m:
            batches = _signal_at_dev_batch(m, signal_at)
            with pytest.raises(FinetuneStopped) as stopped:
                finetune(cfg(tmp_path / name))
        assert stopped.value.step == step and len(batches) == signal_at  # no batch after the signal
        assert (tmp_path / name / f"checkpoint-{step}").is_dir()
        records = [json.loads(ln) for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if r["split"] == "dev"] == [2, 4][: step // 2 - 1]
        if name == "mid":  # stopped again in the due evaluation the resumed run starts with: still due
            with monkeypatch.context() as m:
                batches = _signal_at_dev_batch(m, 2)
                with pytest.raises(FinetuneStopped) as stopped:
                    finetune(cfg(tmp_path / name, resume=True))
            assert stopped.value.step == step and len(batches) == 2
        assert finetune(cfg(tmp_path / name, resume=True)) == whole, name


def test_a_data_path_typed_near_an_existing_one_is_named(tiny_model, tmp_path):
    """`--data glue/sst-2` said "no such file or folder" beside glue/SST-2, where --model had a did-you-mean.
    (A near spelling here: on a file system that ignores case, sst-2 would be SST-2.)"""
    (tmp_path / "SST-2").mkdir()
    with pytest.raises(
        FileNotFoundError,
        match=rf"--data {tmp_path / 'SST2'}: no such file or folder; did you mean {tmp_path / 'SST-2'}\?",
    ):
        finetune(
            FinetuneConfig(
                task="sst2", model=str(tiny_model), data=str(tmp_path / "SST2"), output=str(tmp_path / "o")
            )
        )
