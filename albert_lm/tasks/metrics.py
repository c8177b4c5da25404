"""Metrics for fine-tuning, computed the way the official scripts compute them.

- GLUE (the benchmark's own definitions, as transformers' `glue_compute_metrics`): accuracy; F1 of the
  positive class (MRPC, QQP); Matthews correlation (CoLA); Pearson and Spearman correlation (STS-B).
  Statistics come from scikit-learn and scipy so nobody has to trust a hand-rolled correlation.
- SQuAD 1.1 and 2.0: exact match and token F1 after the official answer normalization (lower case,
  drop punctuation, drop the articles a/an/the, collapse whitespace), the maximum over the gold
  answers. SQuAD 2.0 adds the HasAns / NoAns split and, given a no-answer probability per question,
  the best threshold on these questions (`evaluate-v2.0.py`'s `find_best_thresh`). Written from the
  published definition of `evaluate-v1.1.py` / `evaluate-v2.0.py`.
- RACE: accuracy over questions.
- Token classification: token accuracy and entity-level precision, recall, F1 (spans of BIO / IOB2,
  IOB1, BIOES or BILOU tags), micro-averaged as the CoNLL script does.

Scores are percentages for SQuAD (as the official scripts print) and fractions in [0, 1] elsewhere
(as the GLUE leaderboard's metric code returns them).
"""

from __future__ import annotations

import collections
import logging
import math
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- classification
def accuracy(preds: Sequence[Any], labels: Sequence[Any]) -> float:
    _check_lengths(preds, labels)
    if len(labels) == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(np.asarray(preds) == np.asarray(labels)))


def binary_f1(preds: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """F1 of the positive class (GLUE's F1 for MRPC and QQP)."""
    from sklearn.metrics import f1_score

    _check_lengths(preds, labels)
    return float(f1_score(labels, preds, pos_label=positive, average="binary", zero_division=0))


def macro_f1(preds: Sequence[Any], labels: Sequence[Any]) -> float:
    from sklearn.metrics import f1_score

    _check_lengths(preds, labels)
    return float(f1_score(labels, preds, average="macro", zero_division=0))


def matthews_corr(preds: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation (CoLA); 0 when a confusion-matrix margin is empty, as scikit-learn."""
    from sklearn.metrics import matthews_corrcoef

    _check_lengths(preds, labels)
    return float(matthews_corrcoef(labels, preds))


def pearson_spearman(preds: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (STS-B); NaN-free: a constant input gives 0 with a warning."""
    from scipy.stats import pearsonr, spearmanr

    _check_lengths(preds, labels)
    p, y = np.asarray(preds, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if len(p) < 2 or np.all(p == p[0]) or np.all(y == y[0]):
        # A constant vector has no correlation; scipy would return NaN, which JSON cannot carry.
        logger.warning("correlation undefined for a constant input; reporting 0")
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(pearsonr(p, y)[0]), "spearman": float(spearmanr(p, y)[0])}


GLUE_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "stsb": ("pearson", "spearman"),
    "qqp": ("accuracy", "f1"),
    "mnli": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}


def constant_score(main: str, labels: Sequence[Any]) -> tuple[float, str] | None:
    """What a constant answer scores on the dev `labels` by metric `main`, and the answer: for accuracy,
    always the most frequent label; for a correlation (MCC, Pearson, Spearman), 0. None for other metrics
    or without labels."""
    if main in ("mcc", "pearson", "spearman"):
        return 0.0, "a constant answer"
    known = [str(label) for label in labels if label is not None]
    if main != "accuracy" or not known:
        return None
    label, n = collections.Counter(known).most_common(1)[0]
    return n / len(known), f"always answering {label!r}"


def guessing(main: str, score: float, labels: Sequence[Any]) -> str | None:
    """What a guess scores, where the best dev `score` of metric `main` is no better (`constant_score`);
    None where the score is better, or for other metrics."""
    guess = constant_score(main, labels)
    if guess is None or score > guess[0] + 1e-9:
        return None
    return f"{guess[1]} ({guess[0]:.4f})" if guess[0] else f"{guess[1]} (0)"


def glue_metrics(task: str, preds: Sequence[Any], labels: Sequence[Any]) -> dict[str, float]:
    """The GLUE metrics of `task` (label ids, or floats for STS-B) under their usual names."""
    if task not in GLUE_METRICS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {', '.join(GLUE_METRICS)}")
    if task == "stsb":
        out = pearson_spearman(preds, labels)
        out["corr"] = (out["pearson"] + out["spearman"]) / 2
        return out
    out = {}
    for name in GLUE_METRICS[task]:
        if name == "accuracy":
            out["accuracy"] = accuracy(preds, labels)
        elif name == "f1":
            out["f1"] = binary_f1(preds, labels)
        elif name == "mcc":
            out["mcc"] = matthews_corr(preds, labels)
    return out


# --------------------------------------------------------------------------- SQuAD
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """The official SQuAD normalization: lower case, drop ASCII punctuation, drop a/an/the, squeeze spaces.

    The order matters and is the script's: punctuation goes before articles, so "the-end" becomes
    "theend" (no article left), and articles become spaces before whitespace is collapsed.
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def squad_exact(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str, version2: bool = True) -> float:
    """Token-overlap F1 after normalization.

    SQuAD 2.0 (evaluate-v2.0.py): an empty side scores 1 when both are empty, else 0 (no-answer).
    SQuAD 1.1 (evaluate-v1.1.py): no shared token is 0, even for two answers that normalize to nothing.
    """
    pred_toks, gold_toks = _tokens(prediction), _tokens(gold)
    if version2 and (not pred_toks or not gold_toks):
        return float(pred_toks == gold_toks)
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def squad_gold_answers(dataset: Sequence[Mapping[str, Any]], version2: bool = True) -> dict[str, list[str]]:
    """qid -> gold answer texts from the official JSON's `data` list; [""] for an unanswerable question.

    SQuAD 2.0, as evaluate-v2.0.py: answers that normalize to nothing are dropped, and a question left
    with none is scored against the empty answer. SQuAD 1.1 keeps every answer as given (dev-v1.1 has
    three "." answers, which evaluate-v1.1.py keeps).
    """
    gold: dict[str, list[str]] = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                texts = [
                    a["text"] for a in qa.get("answers", []) if not version2 or normalize_answer(a["text"])
                ]
                gold[qa["id"]] = texts or [""]
    return gold


def squad_metrics(
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_threshold: float = 1.0,
    version2: bool = False,
) -> dict[str, float]:
    """EM and F1 in percent, the maximum over gold answers, averaged over every gold question.

    A question with no prediction scores 0 (evaluate-v1.1.py's rule; the v2.0 script would skip it and
    score the rest, which flatters a partial file, so the count is reported as `missing` instead).
    With `na_probs` (v2), a question whose no-answer probability exceeds `na_prob_threshold` counts as
    answered "no answer"; and the best thresholds on these questions are reported as `best_exact`,
    `best_exact_thresh`, `best_f1`, `best_f1_thresh`, as the official script does.
    """
    if not gold:
        raise ValueError("no gold questions to score")
    exact, f1, missing = squad_question_scores(gold, predictions, version2)
    has_ans = {qid: bool(answers != [""]) for qid, answers in gold.items()}
    if na_probs is not None:
        exact_t = _apply_na_threshold(exact, na_probs, has_ans, na_prob_threshold)
        f1_t = _apply_na_threshold(f1, na_probs, has_ans, na_prob_threshold)
    else:
        exact_t, f1_t = exact, f1
    out: dict[str, float] = {
        "exact_match": 100.0 * sum(exact_t.values()) / len(gold),
        "f1": 100.0 * sum(f1_t.values()) / len(gold),
        "total": len(gold),
    }
    if version2:
        for name, want in (("HasAns", True), ("NoAns", False)):
            ids = [q for q in gold if has_ans[q] == want]
            out[f"{name}_total"] = len(ids)
            if ids:
                out[f"{name}_exact"] = 100.0 * sum(exact_t[q] for q in ids) / len(ids)
                out[f"{name}_f1"] = 100.0 * sum(f1_t[q] for q in ids) / len(ids)
        if na_probs is not None:
            for name, raw in (("exact", exact), ("f1", f1)):
                out[f"best_{name}"], out[f"best_{name}_thresh"] = best_na_threshold(raw, na_probs, has_ans)
    if missing:
        out["missing"] = missing
    return out


def squad_question_scores(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str], version2: bool
) -> tuple[dict[str, float], dict[str, float], int]:
    """Per question: EM and F1 (0 to 1, the maximum over gold answers; 0 without a prediction), and the
    number of questions without a prediction (logged)."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    missing = 0
    for qid, answers in gold.items():
        if qid not in predictions:
            missing += 1
            exact[qid] = f1[qid] = 0.0
            continue
        pred = predictions[qid]
        exact[qid] = float(max(squad_exact(pred, a) for a in answers))
        f1[qid] = max(squad_f1(pred, a, version2) for a in answers)
    if missing:
        logger.warning("%d of %d questions have no prediction; they score 0", missing, len(gold))
    return exact, f1, missing


def _apply_na_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_ans: Mapping[str, bool], threshold: float
) -> dict[str, float]:
    out = {}
    for qid, s in scores.items():
        # Predicted "no answer": right exactly when the question has none.
        out[qid] = float(not has_ans[qid]) if na_probs.get(qid, 0.0) > threshold else s
    return out


def best_na_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_ans: Mapping[str, bool]
) -> tuple[float, float]:
    """evaluate-v2.0.py's `find_best_thresh`, made to agree with the rule that applies a threshold.

    A question is answered "no answer" when its value (`na_probs`, 0 where absent) is greater than the
    threshold, as `_apply_na_threshold` and `squad_decoding.apply_threshold` decide. The sweep starts
    below every value (all abstain) and lets in the questions in order of value, a group of equal values
    at a time: no threshold answers only part of a tie, so the score is compared only between groups.
    Values here are null-score differences, which may all be negative: "abstain on all" is then a
    threshold under the lowest, not the script's 0.0. Returns (best score in percent, the threshold),
    the score being exactly what applying that threshold gives.
    """
    values = {q: float(na_probs.get(q, 0.0)) for q in scores}
    order = sorted(scores, key=values.__getitem__)
    score = best = sum(float(not has_ans[q]) for q in scores)
    best_thresh = _under(values[order[0]]) if order else 0.0
    for n, qid in enumerate(order):
        score += scores[qid] - float(not has_ans[qid])  # answered instead of "no answer"
        group_ends = n + 1 == len(order) or values[order[n + 1]] != values[qid]
        if group_ends and score > best:
            best, best_thresh = score, values[qid]
    applied = _apply_na_threshold(scores, values, has_ans, best_thresh)
    return 100.0 * sum(applied.values()) / len(scores), best_thresh


def _under(lowest: float) -> float:
    """A threshold under every value: the script's 0.0 where all are positive (probabilities), else a
    round number under the lowest (or the next float down, where the number is too large for 1 to count)."""
    if lowest > 0:
        return 0.0
    under = math.floor(lowest) - 1.0 if math.isfinite(lowest) else lowest
    return under if under < lowest else math.nextafter(lowest, -math.inf)


# --------------------------------------------------------------------------- token classification
# Each tagging scheme's prefixes as conlleval's: B- begins an entity, I- continues one, E- (BIOES) or L-
# (BILOU) is its last token, S- (BIOES) or U- (BILOU) a one-token entity.
_PREFIXES = {"B": "B", "I": "I", "E": "E", "L": "E", "S": "S", "U": "S"}


def has_spans(labels: Sequence[str]) -> bool:
    """Whether a tag set names entity spans: some tag is PREFIX-TYPE with a prefix of BIO / IOB, BIOES or
    BILOU (B-PER, I-PER, E-PER, S-PER, L-PER, U-PER)."""
    return any(_scheme_tag(t)[0] != "O" for t in labels)


def _scheme_tag(tag: str) -> tuple[str, str]:
    """(B, I, E, S or O, the entity type) of a tag; L- is read as E- and U- as S-; a tag without one of
    these prefixes (O, a POS tag) is outside every entity."""
    prefix, dash, kind = tag.partition("-")
    if not dash or not kind or prefix not in _PREFIXES:
        return "O", ""
    return _PREFIXES[prefix], kind


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) entity spans of a BIO / IOB2, IOB1, BIOES or BILOU sequence, by conlleval's rules
    (seqeval's default mode counts the same): an entity ends after an E- or S- token, or before a B-, S-,
    O or a token of another type; an entity begins at a B- or S-, and at an I- or E- that does not continue
    one (after O, after an entity's end, or of another type). So a lone S-LOC (or U-LOC) is one entity,
    B-PER E-PER is one of two tokens, and I-PER after O opens one (IOB1)."""
    spans = set()
    kind, start, last = None, 0, "O"  # the open entity's type and first token, the previous token's prefix
    for i, tag in enumerate([*tags, "O"]):
        prefix, typ = _scheme_tag(tag)
        if kind is not None and (last in ("E", "S") or prefix in ("B", "S", "O") or typ != kind):
            spans.add((kind, start, i))
            kind = None
        if kind is None and prefix != "O":
            kind, start = typ, i
        last = prefix
    return spans


def token_classification_metrics(
    preds: Sequence[Sequence[str]], labels: Sequence[Sequence[str]], spans: bool | None = None
) -> dict[str, float]:
    """Token accuracy, and entity-level precision / recall / F1 over the tags' spans (`entity_spans`;
    micro-averaged over entities, as conlleval) with each entity type's F1 (`f1_PER`, as seqeval's report
    gives it) where the tags name spans (`spans`: the task's tag set says, so that a dev set without
    entities still scores F1; None: the gold tags say)."""
    _check_lengths(preds, labels)
    correct = total = 0
    found: dict[str, collections.Counter[str]] = {"tp": collections.Counter(), "pred": collections.Counter(),
                                                  "gold": collections.Counter()}  # fmt: skip
    for p, y in zip(preds, labels, strict=True):
        _check_lengths(p, y)
        correct += sum(a == b for a, b in zip(p, y, strict=True))
        total += len(y)
        ps, ys = entity_spans(p), entity_spans(y)
        for key, these in (("tp", ps & ys), ("pred", ps), ("gold", ys)):
            found[key].update(kind for kind, _, _ in these)
    accuracy = correct / total if total else 0.0
    if not (has_spans([t for y in labels for t in y]) if spans is None else spans):  # POS or IO tags
        return {"accuracy": accuracy}
    tp, n_pred, n_gold = (sum(found[k].values()) for k in ("tp", "pred", "gold"))
    out = {"accuracy": accuracy, **_prf(tp, n_pred, n_gold)}
    for kind in sorted(set(found["gold"]) | set(found["pred"])):
        out[f"f1_{kind}"] = _prf(found["tp"][kind], found["pred"][kind], found["gold"][kind])["f1"]
    return out


def _prf(tp: int, n_pred: int, n_gold: int) -> dict[str, float]:
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _check_lengths(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions for {len(b)} labels")
