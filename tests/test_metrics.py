"""Metrics against hand-computed cases, the official SQuAD normalization, and gold-as-prediction = 100."""

from __future__ import annotations

import json
import math

import pytest

from albert_lm.tasks import metrics as M


def test_accuracy_and_f1_hand_computed():
    assert M.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # tp=1 fp=1 fn=1: P = R = 1/2, F1 = 1/2
    assert M.binary_f1([1, 1, 0, 0], [1, 0, 1, 0]) == pytest.approx(0.5)
    # tp=2 fp=1 fn=1: P = R = 2/3
    assert M.binary_f1([1, 1, 1, 0, 0], [1, 1, 0, 1, 0]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="3 predictions for 2 labels"):
        M.accuracy([1, 0, 1], [1, 0])


def test_matthews_hand_computed():
    # tp=2 fp=1 tn=1 fn=0: (2*1 - 1*0) / sqrt(3 * 2 * 2 * 1)
    assert M.matthews_corr([1, 1, 1, 0], [1, 1, 0, 0]) == pytest.approx(2 / math.sqrt(12))
    assert M.matthews_corr([1, 1, 0, 0], [1, 0, 1, 0]) == pytest.approx(0.0)
    assert M.matthews_corr([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    # All predicted one class: an empty margin, 0 by definition (not NaN)
    assert M.matthews_corr([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0


def test_pearson_spearman_hand_computed():
    # deviations (-1, 0, 1) and (-7/3, -1/3, 8/3): cov 5, var 2 and 114/9
    out = M.pearson_spearman([1, 2, 3], [2, 4, 7])
    assert out["pearson"] == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert out["spearman"] == pytest.approx(1.0)
    # rank differences (0, 1, 1, 0): rho = 1 - 6 * 2 / (4 * 15)
    assert M.pearson_spearman([1, 2, 3, 4], [1, 3, 2, 4])["spearman"] == pytest.approx(0.8)
    assert M.pearson_spearman([2, 2, 2], [1, 2, 3]) == {"pearson": 0.0, "spearman": 0.0}


def test_glue_metric_names():
    assert set(M.glue_metrics("cola", [1, 0], [1, 0])) == {"mcc"}
    assert set(M.glue_metrics("mrpc", [1, 0], [1, 0])) == {"accuracy", "f1"}
    assert set(M.glue_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 2.5, 2.9])) == {"pearson", "spearman", "corr"}
    assert M.glue_metrics("rte", [0, 1, 1], [0, 1, 0]) == {"accuracy": pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="unknown GLUE task"):
        M.glue_metrics("boolq", [1], [1])


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Quick, brown fox!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("theater anthem", "theater anthem"),  # articles only as whole words
        ("the-end", "theend"),  # punctuation goes first, so no article is left to drop
        ("A.B.C.", "abc"),
        ("  \t\n ", ""),
        ("The", ""),
        ("Élan vital", "élan vital"),  # non-ASCII letters stay
        ("it\u2019s", "it\u2019s"),  # the curly apostrophe is not string.punctuation
        ("1,000 (approx.)", "1000 approx"),
    ],
)
def test_squad_normalization(text, normalized):
    assert M.normalize_answer(text) == normalized


def test_squad_f1_hand_computed():
    # pred {cat, sat}, gold {cat, sat, on, mat}: P = 1, R = 1/2
    assert M.squad_f1("the cat sat", "cat sat on the mat") == pytest.approx(2 / 3)
    # repeated tokens count by multiset: common {x, y}, P = R = 2/3
    assert M.squad_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert M.squad_f1("dog", "cat") == 0.0
    assert M.squad_exact("The Cat.", "cat") == 1
    assert M.squad_f1("", "") == 1.0  # unanswerable, predicted unanswerable
    assert M.squad_f1("a cat", "") == 0.0


def test_squad1_and_squad2_rules_differ_on_empty_answers():
    # evaluate-v1.1.py: no shared token is F1 0, even when both sides normalize to nothing
    assert M.squad_f1(".", ".", version2=False) == 0.0 and M.squad_f1(".", ".", version2=True) == 1.0
    data = [
        {"paragraphs": [{"context": "x", "qas": [{"id": "q", "answers": [{"text": "."}, {"text": "Rome"}]}]}]}
    ]
    assert M.squad_gold_answers(data, version2=False) == {"q": [".", "Rome"]}
    assert M.squad_gold_answers(data, version2=True) == {"q": ["Rome"]}
    v1 = M.squad_metrics(M.squad_gold_answers(data, version2=False), {"q": ""})
    assert (v1["exact_match"], v1["f1"]) == (100.0, 0.0)  # "" equals "." after normalization


def test_squad_metrics_max_over_gold_and_missing():
    gold = {"q1": ["Denver Broncos", "Broncos"], "q2": ["1990"]}
    out = M.squad_metrics(gold, {"q1": "the Broncos", "q2": "in 1990s"})
    assert out["exact_match"] == pytest.approx(50.0)
    assert out["f1"] == pytest.approx(50.0)  # q1 exact; q2 shares no token ("1990s" != "1990")
    out = M.squad_metrics(gold, {"q1": "Broncos"})
    assert out["exact_match"] == 50.0 and out["missing"] == 1


def test_squad2_unanswerable_and_best_threshold():
    gold = {"q1": ["cat"], "q2": ["dog"], "q3": [""], "q4": [""]}
    preds = {"q1": "cat", "q2": "fish", "q3": "x", "q4": ""}
    na = {"q1": 0.1, "q2": 0.6, "q3": 0.8, "q4": 0.3}
    out = M.squad_metrics(gold, preds, na_probs=na, version2=True)
    # threshold 1.0: raw predictions, q1 and q4 right
    assert out["exact_match"] == 50.0
    assert (out["HasAns_exact"], out["NoAns_exact"]) == (50.0, 50.0)
    assert (out["HasAns_total"], out["NoAns_total"]) == (2, 2)
    # sweep: start 2 (both unanswerable right), +1 at q1 (0.1) -> 3, q4 +0, q2 +0, q3 -1
    assert out["best_exact"] == 75.0 and out["best_exact_thresh"] == pytest.approx(0.1)
    assert out["best_f1"] == 75.0
    # threshold 0.5: q2 and q3 become "no answer" (q2 wrong either way, q3 now right)
    out = M.squad_metrics(gold, preds, na_probs=na, na_prob_threshold=0.5, version2=True)
    assert out["exact_match"] == 75.0 and out["NoAns_exact"] == 100.0


def test_token_classification_spans():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"]]
    out = M.token_classification_metrics(pred, gold)
    assert out["accuracy"] == 0.75
    assert (out["precision"], out["recall"], out["f1"]) == (0.5, 0.5, 0.5)
    assert (out["f1_PER"], out["f1_LOC"], out["f1_ORG"]) == (
        1.0,
        0.0,
        0.0,
    )  # each type's, as seqeval's report
    # a dev set without entities, of a task whose tags name them: F1 scored (0), not left out
    assert M.token_classification_metrics([["O"]], [["O"]], spans=True)["f1"] == 0.0
    assert "f1" not in M.token_classification_metrics([["NOUN"]], [["NOUN"]])  # POS tags: no entities
    # a truncated entity is a miss, not half a hit
    out = M.token_classification_metrics([["B-PER", "O"]], [["B-PER", "I-PER"]])
    assert out["f1"] == 0.0


def test_gold_answers_as_predictions_score_100(albert_data):
    path = albert_data / "squad" / "dev-v1.1.json"
    dataset = json.loads(path.read_text())["data"]
    gold = M.squad_gold_answers(dataset, version2=False)
    assert len(gold) == 10570
    preds = {qid: answers[0] for qid, answers in gold.items()}
    out = M.squad_metrics(gold, preds)
    assert out["exact_match"] == 100.0 and out["f1"] == 100.0 and out["total"] == 10570
    # evaluate-v1.1.py's quirk, kept: one question's last gold answer is ".", whose F1 is 0 even
    # against itself (nothing left after normalization), so last answers score F1 = 100 - 100 / 10570.
    out = M.squad_metrics(gold, {qid: answers[-1] for qid, answers in gold.items()})
    assert out["exact_match"] == 100.0 and out["f1"] == pytest.approx(100.0 - 100.0 / 10570)


def test_guessing_names_what_a_guess_scores_where_a_best_score_is_no_better():
    from albert_lm.tasks.metrics import guessing

    labels = ["a", "b", "b", "b", None]
    assert guessing("accuracy", 0.75, labels) == "always answering 'b' (0.7500)"
    assert guessing("accuracy", 0.76, labels) is None
    assert guessing("mcc", 0.0, labels) == guessing("pearson", -0.1, []) == "a constant answer (0)"
    assert guessing("spearman", 0.2, []) is None and guessing("f1", 0.0, labels) is None
    assert guessing("accuracy", 0.0, [None]) is None  # a dev set without labels: nothing to compare
