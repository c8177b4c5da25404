"""Capped evaluations say so: `finetune --max-eval-examples` logs and records how many dev examples it
scored of how many, and `albert glue` marks a capped table and one without a spread (a single seed)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from albert_lm.cli import main
from albert_lm.glue.config import GlueConfig, run_folder
from albert_lm.glue.report import format_table, summarize

DEV_ROWS = 12


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    """A GLUE-like folder: SST-2 and RTE with train.tsv (24 rows) and dev.tsv (12 rows)."""
    root = tmp_path_factory.mktemp("glue")
    rng = np.random.default_rng(0)
    words = ["bala", "kemo", "fira", "dusa", "tovi", "ramu"]

    def text() -> str:
        return " ".join(rng.choice(words, size=4))

    for split, n in (("train", 24), ("dev", DEV_ROWS)):
        sst = root / "SST-2"
        sst.mkdir(exist_ok=True)
        rows = [f"{text()}\t{i % 2}" for i in range(n)]
        (sst / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
        rte = root / "RTE"
        rte.mkdir(exist_ok=True)
        labels = ["entailment", "not_entailment", "not_entailment"]
        rows = [f"{i}\t{text()}\t{text()}\t{labels[i % 3]}" for i in range(n)]
        (rte / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    return root


def _finetune(model: Path, data: Path, out: Path, *extra: str) -> dict:
    args = ["finetune", "--task", "sst2", "--model", str(model), "--data", str(data), "--output", str(out),
            "--max-steps", "2", "--eval-every", "1", "--batch-size", "8", "--max-seq-length", "32",
            "--device", "cpu", "--precision", "fp32", "--no-tensorboard", "--no-plot", *extra]  # fmt: skip
    assert main(args) == 0
    return json.loads((out / "eval_results.json").read_text())


# --------------------------------------------------------------------------- finetune
def test_capped_finetune_logs_and_records_the_dev_examples_of_the_file(
    tiny_pretrained, glue, tmp_path, caplog
):
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        results = _finetune(tiny_pretrained, glue / "SST-2", out, "--max-eval-examples", "5")
    assert f"dev: 5 of {DEV_ROWS} examples from" in caplog.text
    assert "(capped by --max-eval-examples)" in caplog.text
    assert results["eval_examples"] == {"dev": 5}
    assert results["max_eval_examples"] == 5
    assert results["eval_examples_in_file"] == {"dev": DEV_ROWS}
    # added beside the existing keys, which stay
    assert set(results) >= {
        "step",
        "epoch",
        "accuracy",
        "eval_examples",
        "max_eval_examples",
        "eval_examples_in_file",
    }
    assert json.loads((out / "best" / "eval_results.json").read_text())["max_eval_examples"] == 5
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "dev"]
    assert [e["eval_examples"] for e in evals] == [{"dev": 5}, {"dev": 5}]
    card = (out / "best" / "README.md").read_text()
    assert (
        f"| dev examples | 5 of {DEV_ROWS} (capped by --max-eval-examples 5: not the whole dev set) |" in card
    )
    # the counts are a setting row, not scores: the card's dev rows are the examples and the metric
    assert [ln.split(" | ")[0] for ln in card.splitlines() if ln.startswith("| dev ")] == [
        "| dev examples",
        "| dev accuracy",
    ]


def test_uncapped_finetune_records_the_full_dev_count_and_no_cap(tiny_pretrained, glue, tmp_path):
    out = tmp_path / "run"
    # a cap above the dev set's size keeps every example: not a capped evaluation
    results = _finetune(tiny_pretrained, glue / "SST-2", out, "--max-eval-examples", "100")
    assert results["eval_examples"] == {"dev": DEV_ROWS}
    assert set(results) & {"eval_examples", "max_eval_examples", "eval_examples_in_file"} == {"eval_examples"}
    card = (out / "best" / "README.md").read_text()
    assert f"| dev examples | {DEV_ROWS} |" in card
    rows = len((glue / "SST-2" / "train.tsv").read_text().splitlines()) - 1
    assert f"| training examples | all {rows:,} of the training split |" in card
    capped = _finetune(tiny_pretrained, glue / "SST-2", tmp_path / "few", "--max-train-examples", "4")
    assert capped["step"] >= 1  # the card of a run on the first 4 training rows said nothing of the cap
    card = (tmp_path / "few" / "best" / "README.md").read_text()
    assert "| training examples | the first 4 of the training split (--max-train-examples) |" in card
    _finetune(tiny_pretrained, glue / "SST-2", tmp_path / "above", "--max-train-examples", "100000")
    card = (tmp_path / "above" / "best" / "README.md").read_text()  # a cap above the rows: all of them
    assert f"| training examples | all {rows:,} of the training split |" in card


def test_evaluate_takes_the_cap_and_says_what_it_evaluated(tiny_pretrained, glue, tmp_path, capsys):
    """`albert evaluate --max-eval-examples`, as finetune takes it: the counts in its results."""
    _finetune(tiny_pretrained, glue / "SST-2", tmp_path / "run")
    args = ["evaluate", "--task", "sst2", "--model", str(tmp_path / "run" / "best"), "--data", str(glue / "SST-2"),
            "--device", "cpu", "--precision", "fp32", "-q"]  # fmt: skip
    capsys.readouterr()
    assert main([*args, "--max-eval-examples", "5"]) == 0
    capped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert capped["eval_examples"] == {"dev": 5} and capped["max_eval_examples"] == 5
    assert capped["eval_examples_in_file"] == {"dev": DEV_ROWS}
    assert main(args) == 0
    whole = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert whole["eval_examples"] == {"dev": DEV_ROWS} and "max_eval_examples" not in whole
    assert main([*args, "--max-seq-length", "65"]) == 1  # past the tiny model's 64 positions
    assert "--max-seq-length 65: the model in " in capsys.readouterr().err


# --------------------------------------------------------------------------- glue
def _finished_runs(cfg: GlueConfig, scores: dict[tuple[str, int], float]) -> list[tuple[str, float, int]]:
    """eval_results.json of finished runs (task, seed) -> score, at the config's one rate."""
    rate = cfg.rates()[0]
    for (task, seed), score in scores.items():
        folder = run_folder(cfg, task, rate, seed)
        folder.mkdir(parents=True)
        (folder / "eval_results.json").write_text(json.dumps({"step": 3, "epoch": 1.0, "accuracy": score}))
    return [(task, rate, seed) for task, seed in scores]


def _glue_config(glue: Path, out: Path, **kw) -> GlueConfig:
    return GlueConfig(
        model="m", data=str(glue), output=str(out), tasks="sst2,rte", learning_rates="1e-3", **kw
    )


def test_a_capped_single_seed_glue_table_says_so_and_shows_no_spread(glue, tmp_path):
    cfg = _glue_config(glue, tmp_path / "out", seeds="1", max_eval_examples=5)
    result = summarize(cfg, _finished_runs(cfg, {("sst2", 1): 0.6, ("rte", 1): 0.4}))
    table = format_table(result)
    assert table.splitlines()[0].startswith("capped: 5 dev examples per task")
    assert "1 seed, no spread" in table.splitlines()[1]
    assert "+-" not in table and "60.0" in table and "40.0" in table
    assert result["evaluation"]["seeds"] == 1 and result["evaluation"]["spread"] is False
    assert result["evaluation"]["capped"] is True and result["evaluation"]["max_eval_examples"] == 5
    assert result["evaluation"]["note"] == "capped: 5 dev examples per task; 1 seed, no spread"
    assert "training examples" not in table  # no --max-train-examples: the full training sets
    for row in result["tasks"].values():
        assert row["dev_examples"] == 5 and row["dev_examples_in_file"] == DEV_ROWS
    json.dumps(result)  # what glue_results.json holds


def test_a_glue_table_says_how_many_training_examples_its_runs_read(glue, tmp_path):
    """--max-train-examples, the suite's and a task's own, said above the table as the dev cap is."""
    runs = {("sst2", 1): 0.6, ("rte", 1): 0.4}
    cfg = _glue_config(glue, tmp_path / "a", seeds="1", max_train_examples=200)
    table = format_table(summarize(cfg, _finished_runs(cfg, runs)))
    assert table.splitlines()[0] == "at most 200 training examples per task (--max-train-examples)"
    cfg = _glue_config(glue, tmp_path / "b", seeds="1", task_settings={"rte": {"max_train_examples": 50}})
    table = format_table(summarize(cfg, _finished_runs(cfg, runs)))
    assert "(--max-train-examples): SST-2 all, RTE 50" in table.splitlines()[0]


def test_an_uncapped_glue_summary_over_seeds_records_them_and_no_cap(glue, tmp_path):
    # a cap above every dev set's size keeps every example: not capped
    cfg = _glue_config(glue, tmp_path / "out", seeds="1,2", max_eval_examples=100)
    scores = {("sst2", 1): 0.6, ("sst2", 2): 0.7, ("rte", 1): 0.4, ("rte", 2): 0.5}
    result = summarize(cfg, _finished_runs(cfg, scores))
    evaluation = {"seeds": 2, "spread": True, "capped": False, "max_eval_examples": None, "note": ""}
    assert result["evaluation"] == evaluation
    assert result["tasks"]["rte"]["dev_examples"] == DEV_ROWS


def test_albert_glue_prints_and_writes_the_marks(tiny_pretrained, glue, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["glue", "--model", str(tiny_pretrained), "--data", str(glue), "--output", str(out), "--tasks", "rte",
            "--seeds", "1", "--learning-rates", "1e-3", "--epochs", "1", "--batch-size", "8",
            "--max-seq-length", "32", "--max-eval-examples", "5", "--workers", "1", "--device", "cpu",
            "--precision", "fp32"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "capped: 5 dev examples per task" in printed and "1 seed, no spread" in printed
    assert "+-" not in printed
    saved = json.loads((out / "glue_results.json").read_text())
    assert saved["evaluation"]["seeds"] == 1 and saved["evaluation"]["max_eval_examples"] == 5
    assert saved["tasks"]["rte"]["dev_examples"] == 5
    run = json.loads(
        (run_folder(GlueConfig(**saved["settings"]), "rte", 1e-3, 1) / "eval_results.json").read_text()
    )
    assert run["eval_examples"] == {"dev": 5} and run["max_eval_examples"] == 5
