"""SQuAD scoring as a user meets it: the SQuAD 2.0 no-answer threshold reported is the one that scores as
reported (negative null-score differences, ties), and `albert evaluate --predictions` refuses a file of
another dev set's ids."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from albert_lm.cli import main
from albert_lm.files import InputError
from albert_lm.tasks import metrics
from albert_lm.tasks.squad import score_prediction_file
from albert_lm.tasks.squad_decoding import SquadPredictions, apply_threshold

METRIC = {"exact": "exact_match", "f1": "f1"}


def _score_at(gold, preds, na, threshold: float) -> dict[str, float]:
    return metrics.squad_metrics(gold, preds, na_probs=na, na_prob_threshold=threshold, version2=True)


def _check_best_is_what_its_threshold_scores(gold, preds, na) -> dict[str, float]:
    out = metrics.squad_metrics(gold, preds, na_probs=na, version2=True)
    candidates = [min(na.values()) - 1.0, *sorted(set(na.values()))]
    for name, metric in METRIC.items():
        best, threshold = out[f"best_{name}"], out[f"best_{name}_thresh"]
        assert _score_at(gold, preds, na, threshold)[metric] == best, (name, threshold)
        # the rule decoding applies (SquadTask.predict: null diff > threshold -> "") scores the same
        answered = apply_threshold(SquadPredictions(preds, na), threshold)
        assert metrics.squad_metrics(gold, answered, version2=True)[metric] == best
        # and no threshold does better
        assert best == pytest.approx(max(_score_at(gold, preds, na, c)[metric] for c in candidates))
    return out


@pytest.mark.parametrize("values", ["tied", "negative", "random"])
@pytest.mark.parametrize("seed", range(8))
def test_the_best_no_answer_threshold_scores_what_is_reported(values, seed):
    rng = np.random.default_rng(seed)
    n = 40
    pool = {
        "tied": [-0.5, -0.03125, -1e-5, 0.0, 0.25, 2.0],
        "negative": list(-rng.random(6) * 1e-3),
        "random": list(rng.normal(size=n)),
    }[values]
    gold = {f"q{i}": (["cat"] if rng.random() < 0.6 else [""]) for i in range(n)}
    preds = {q: str(rng.choice(["cat", "the cat", "dog", "", "cat dog"])) for q in gold}
    na = {q: float(rng.choice(pool)) for q in gold}
    _check_best_is_what_its_threshold_scores(gold, preds, na)


def test_all_negative_null_differences_can_abstain_on_every_question():
    # Both spans are wrong, so "no answer" everywhere is best (50: the unanswerable one is right). Its
    # threshold was 0.0, which answers every question here (each difference is below 0) and scores 0.
    gold = {"q1": ["cat"], "q2": [""]}
    preds = {"q1": "dog", "q2": "a span"}
    na = {"q1": -1e-5, "q2": -2e-5}
    out = _check_best_is_what_its_threshold_scores(gold, preds, na)
    assert out["best_f1"] == 50.0 and out["best_f1_thresh"] < -2e-5
    assert apply_threshold(SquadPredictions(preds, na), out["best_f1_thresh"]) == {"q1": "", "q2": ""}


def test_a_tie_is_let_in_whole():
    # Three questions share one difference: answering all three scores 1 of 3, abstaining on all 2 of 3.
    # Sweeping one at a time used to report 100 (after the right answer only) at a threshold scoring 33.
    gold = {"q1": ["cat"], "q2": [""], "q3": [""]}
    preds = {"q1": "cat", "q2": "x", "q3": "y"}
    na = dict.fromkeys(gold, -0.03125)
    out = _check_best_is_what_its_threshold_scores(gold, preds, na)
    assert out["best_f1"] == pytest.approx(200 / 3) and out["best_f1_thresh"] < -0.03125
    # positive values (probabilities, as the official script takes) keep the script's 0.0 for "abstain"
    out = _check_best_is_what_its_threshold_scores(gold, preds, dict.fromkeys(gold, 0.5))
    assert out["best_f1_thresh"] == 0.0


# --------------------------------------------------------------------------- evaluate --predictions
def _dev(tmp_path: Path) -> Path:
    context = "The Broncos beat the Panthers in Santa Clara."
    qas = [
        {"id": f"dev{i}", "question": "Who?", "answers": [{"text": "Broncos", "answer_start": 4}]}
        for i in range(3)
    ]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_evaluate_refuses_predictions_with_none_of_the_dev_ids(tmp_path, capsys):
    dev, pred = _dev(tmp_path), tmp_path / "pred.json"
    pred.write_text(json.dumps({"other1": "Broncos", "other2": "Panthers"}))
    assert main(["evaluate", "--task", "squad1", "--data", str(dev), "--predictions", str(pred)]) == 1
    err = capsys.readouterr().err
    assert f"{pred}: none of its 2 question ids is a question of {dev}" in err
    assert "'other1', 'other2'" in err and "'dev0', 'dev1'" in err
    pred.write_text("{}")
    with pytest.raises(InputError, match=r"pred.json: none of its 0 question ids"):
        score_prediction_file(dev, pred, version2=False)


def test_evaluate_counts_prediction_ids_not_in_the_dev_set(tmp_path, caplog):
    dev, pred = _dev(tmp_path), tmp_path / "pred.json"
    pred.write_text(json.dumps({"dev0": "Broncos", "dev1": "Panthers", "stray": "x"}))
    with caplog.at_level(logging.WARNING, logger="albert_lm"):
        out = score_prediction_file(dev, pred, version2=False)
    assert out["total"] == 3 and out["exact_match"] == pytest.approx(100 / 3) and out["missing"] == 1
    assert f"1 of 3 predictions in {pred} are for question ids not in {dev} ('stray', ...)" in caplog.text


def test_evaluate_refuses_a_dev_file_with_a_question_id_twice(tmp_path):
    dev, pred = _dev(tmp_path), tmp_path / "pred.json"
    doc = json.loads(dev.read_text())
    doc["data"][0]["paragraphs"][0]["qas"][2]["id"] = "dev0"
    dev.write_text(json.dumps(doc, indent=1))
    pred.write_text(json.dumps({"dev0": "Broncos"}))
    for version2 in (False, True):
        with pytest.raises(InputError, match=r"dev.json:\d+: .*qas\[2\] \(question id 'dev0'\): duplicate"):
            score_prediction_file(dev, pred, version2=version2)
