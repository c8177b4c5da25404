"""`--task regression`: one score per text or text pair from the user's own files, on the data's scale,
through finetune, evaluate, predict and a bi-encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import finetune_argv
from safetensors.numpy import load_file

from albert_lm.cli import main
from albert_lm.tasks import get_task

QUICK = ["--batch-size", "8", "--max-seq-length", "32", "--precision", "fp32", "--no-tensorboard", "--no-plot",
         "--learning-rate", "1e-3", "-q"]  # fmt: skip
GOOD, BAD = ["fine", "grand", "lovely", "bright"], ["grim", "dull", "awful", "bleak"]


def _scored(folder: Path, pairs: bool, sizes: dict[str, int], scale: float = 10.0) -> Path:
    """SPLIT.jsonl rows of 4 words; the score is `scale` times the share of GOOD words (a second text, with
    `pairs`, of the same words shuffled)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        rows = []
        for _ in range(n):
            good = int(rng.integers(0, 5))
            words = list(rng.choice(GOOD, good)) + list(rng.choice(BAD, 4 - good))
            row = {"text": " ".join(words), "label": scale * good / 4}
            if pairs:
                row["text_pair"] = " ".join(rng.permutation(words))
            rows.append(json.dumps(row))
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def test_a_regression_on_own_pairs_trains_scores_and_predicts_on_the_data_scale(
    tiny_pretrained, tmp_path, capsys
):
    data = _scored(tmp_path / "data", pairs=True, sizes={"train": 48, "dev": 16})
    out = tmp_path / "run"
    assert main(finetune_argv("regression", tiny_pretrained, data, out, "--max-steps", "4", *QUICK)) == 0
    results = json.loads((out / "eval_results.json").read_text())
    assert {"pearson", "spearman", "mse"} <= set(results), results
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["num_labels"] == 1
    saved = json.loads((out / "best" / "finetune_config.json").read_text())
    assert saved["task"] == "regression" and saved["score_range"] == [0.0, 10.0]
    card = (out / "best" / "README.md").read_text()  # what the model reads and what its scores are
    assert (
        "a pair of texts, `text` and `text_pair`; gives a score on the scale of `label`, 0 to 10 in training"
        in card
    )
    assert "`mse`, the mean squared error on the data's scale" in card
    dev = [
        json.loads(line) for line in (out / "predictions" / "dev_predictions.jsonl").read_text().splitlines()
    ]
    assert len(dev) == 16 and all(isinstance(r["score"], float) for r in dev)
    gold = [json.loads(line)["label"] for line in (data / "dev.jsonl").read_text().splitlines()]
    assert [r["gold"] for r in dev] == gold  # beside each prediction, what it should have been
    capsys.readouterr()
    assert main(["predict", "--model", str(out / "best"), "--input", str(data / "dev.jsonl"), "-q"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 16 and all(set(r) >= {"line", "score"} and "label" not in r for r in rows)
    assert main(["evaluate", "--model", str(out / "best"), "--data", str(data), "-q"]) == 0
    same = json.loads(capsys.readouterr().out.splitlines()[-1])
    # the same rows under other column names: evaluate reads them where it is told to
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    dev_rows = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
    (renamed / "dev.jsonl").write_text("".join(
        json.dumps({"a": r["text"], "b": r["text_pair"], "sim": r["label"]}) + "\n" for r in dev_rows))  # fmt: skip
    args = ["evaluate", "--model", str(out / "best"), "--data", str(renamed), "-q", "--text-column", "a",
            "--text-pair-column", "b", "--label-column", "sim"]  # fmt: skip
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["pearson"] == pytest.approx(same["pearson"])


def test_a_single_text_regression_reads_single_texts_and_records_no_scale(tiny_pretrained, tmp_path, capsys):
    data = _scored(tmp_path / "data", pairs=False, sizes={"train": 32, "dev": 8}, scale=1.0)
    out = tmp_path / "run"
    assert main(finetune_argv("regression", tiny_pretrained, data, out, "--max-steps", "2", *QUICK)) == 0
    saved = json.loads((out / "best" / "finetune_config.json").read_text())
    assert saved["text_pair_column"] is None and saved["score_range"] == []
    assert "a text, `text`; gives a score on the scale of `label`" in (out / "best" / "README.md").read_text()
    capsys.readouterr()
    assert main(["predict", "--model", str(out / "best"), "--text", "fine grand dull grim", "-q"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)["score"], float)
    bi = finetune_argv(
        "regression", tiny_pretrained, data, tmp_path / "bi", "--bi-encoder", "--max-steps", "1"
    )
    assert main([*bi, *QUICK]) == 1
    assert "--bi-encoder: --data" in capsys.readouterr().err


def test_a_bi_encoder_on_own_pairs_maps_its_cosine_onto_the_training_scores_range(tiny_pretrained, tmp_path):
    data = _scored(tmp_path / "data", pairs=True, sizes={"train": 32, "dev": 8}, scale=1.0)
    out = tmp_path / "bi"
    argv = finetune_argv("regression", tiny_pretrained, data, out, "--bi-encoder", "--max-steps", "1", *QUICK)
    assert main([*argv, "--learning-rate", "1e-9"]) == 0  # the scale as set: one step this small keeps it
    weights = load_file(str(out / "best" / "model.safetensors"))
    scale = {k: v for k, v in weights.items() if k.startswith("similarity.")}
    assert scale and float(scale["similarity.weight"].reshape(-1)[0]) == pytest.approx(1.0, abs=1e-4)  # 1 - 0
    assert float(scale["similarity.bias"].reshape(-1)[0]) == pytest.approx(0.0, abs=1e-4)


def test_a_score_that_is_not_a_number_is_refused_with_its_line_and_column(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("text,label\na fine day,0.5\na grim day,very bad\n")
    with pytest.raises(
        ValueError, match=r"train\.csv:3: column 'label': expected a number \(the score\), got 'very bad'"
    ):
        get_task("regression").read(data, "train")
    (tmp_path / "same.csv").write_text("text,label\na,1\nb,1\n")
    task = get_task("regression")
    with pytest.raises(ValueError, match="at least 2 different scores"):
        task.fit_labels(task.read(tmp_path / "same.csv", "train"))
    (tmp_path / "nan.jsonl").write_text('{"text": "a", "label": "nan"}\n')
    with pytest.raises(ValueError, match="expected a number"):
        get_task("regression").read(tmp_path / "nan.jsonl", "train")


def test_training_scores_on_a_wide_scale_are_warned_of(tmp_path, caplog):
    """A 1-to-10 rating barely learned where the same scores mapped to -1..1 did: said at the start."""
    task = get_task("regression")
    for scale, warned in ((10.0, True), (1.0, False)):
        data = _scored(tmp_path / f"x{scale:g}", pairs=False, sizes={"train": 32}, scale=scale)
        caplog.clear()
        with caplog.at_level("WARNING", logger="albert_lm.tasks.text_regression"):
            task.fit_labels(task.read(data / "train.jsonl", "train"))
        assert ("the training scores spread wide" in caplog.text) == warned
