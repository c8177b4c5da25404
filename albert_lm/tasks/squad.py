"""SQuAD 1.1 and 2.0: the official JSON, sliding-window features, n-best span decoding.

Follows BERT's / google-research ALBERT's `run_squad` recipe:
- the context is split on whitespace into words with their character offsets, and each word is
  tokenized on its own, so every sub-token knows its word; where a word's pieces spell it out
  exactly (the usual case: ALBERT's normalization only lower-cases ASCII text) each piece also gets
  its own character span, otherwise its pieces share the word's span. Predictions are cut from the
  original context by these character offsets, so the answer keeps its original casing and accents;
- a context longer than the window is covered by windows of `max_seq_length` tokens moving by
  `doc_stride`; a token's prediction is trusted only in the window where it has the most context on
  both sides (BERT's `_check_is_max_context`);
- decoding takes the `n_best` top start and end logits per window, keeps pairs with start <= end, at
  most `max_answer_length` tokens, inside the context, and picks the best start + end score.

SQuAD 2.0 "no answer": the score of the [CLS] span (start = end = 0), the minimum over the question's
windows, as BERT and transformers do. A question is answered "" when
`null score - best span score > null_score_diff_threshold`; the threshold is chosen on dev to maximise
F1 (the official script's best threshold) unless given. google-research's ALBERT v2 runner instead
adds an answer-class head on [CLS]; we keep the [CLS] span because it needs no new parameters and the
fine-tuned checkpoint stays loadable as transformers' `AlbertForQuestionAnswering` (docs/finetune.md).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, atomic_write, read_json_object
from albert_lm.tasks import metrics
from albert_lm.tasks.squad_decoding import (
    SquadExample,
    SquadPredictions,
    _Context,
    answer_tokens,
    apply_threshold,
    context_windows,
    decode,
    is_max_context,
    tokenize_context,
)
from albert_lm.tasks.task import Feature, Task, TokenizerLike

logger = logging.getLogger(__name__)

__all__ = [
    "SquadExample",
    "SquadPredictions",
    "SquadTask",
    "apply_threshold",
    "decode",
    "featurize",
    "read_squad",
]


# --------------------------------------------------------------------------- reading
def load_squad_json(path: str | Path) -> list[dict[str, Any]]:
    """The `data` list of an official SQuAD file, with clear errors for a missing or broken file."""
    path = Path(path)
    obj = read_json_object(path, "SQuAD")
    if not isinstance(obj.get("data"), list):
        raise InputError(path, 'expected a JSON object with a "data" list (the official SQuAD layout)')
    return obj["data"]


def _lines_of(raw: str, key: str, value: Any) -> list[int]:
    """The lines where `"key": value` stands in a JSON file's text (a text escaped either way JSON does)."""
    for text in dict.fromkeys((json.dumps(value), json.dumps(value, ensure_ascii=False))):
        found = re.finditer(re.escape(json.dumps(key)) + r"\s*:\s*" + re.escape(text), raw)
        if lines := [raw.count("\n", 0, m.start()) + 1 for m in found]:
            return lines
    return []


def read_squad(
    path: str | Path, version2: bool, require_answers: bool = True, unique_ids: bool = True
) -> list[SquadExample]:
    """Examples of an official SQuAD file; every answer's offset is checked against its context, and a
    question id given twice is refused (predictions are keyed by id: one of the two would be lost).

    `version2` False rejects unanswerable questions (a 2.0 file given to a 1.1 task).
    `require_answers` False reads a file without answers (a test set) and skips the checks.
    `unique_ids` False takes repeated ids with a warning: training keys nothing by id, and merged training
    sets (MRQA's, several SQuAD-like files) repeat them.
    """
    path = Path(path)
    data = load_squad_json(path)
    fail = _SquadError(path)
    examples: list[SquadExample] = []
    seen: dict[str, str] = {}  # question id -> where it was first read
    repeated = 0
    for i, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            title = article.get("title") if isinstance(article, dict) else None
            near = [("title", title)] if isinstance(title, str) else []
            raise fail(f"data[{i}]", None, 'missing "paragraphs" list', near=near)
        title = str(article.get("title", ""))
        for j, par in enumerate(paragraphs):
            where = f"data[{i}].paragraphs[{j}]"
            _check_paragraph(par, where, fail)
            for k, qa in enumerate(par["qas"]):
                q = _Question(f"{where}.qas[{k}]", par["context"], title, version2, require_answers, fail)
                ex = q.read(qa)
                if ex.qid in seen and unique_ids:
                    raise fail(q.where, ex.qid, f"duplicate question id (first at {seen[ex.qid]})", nth=1)
                repeated += ex.qid in seen
                seen.setdefault(ex.qid, q.where)
                examples.append(ex)
    if not examples:
        raise InputError(path, "no questions found")
    if repeated:
        logger.warning(
            "%s: %d question%s an earlier question's id; all are trained on (a dev or test file must "
            "give each id once: predictions are keyed by id)", path, repeated, "s reuse" if repeated > 1 else " reuses"
        )  # fmt: skip
    return examples


def _check_paragraph(par: Any, where: str, fail: _SquadError) -> None:
    """A paragraph's "context" text and "qas" list; an error is found at its first question or its fields."""
    if not isinstance(par, dict):
        raise fail(where, None, f"expected a paragraph object, got {_kind(par)}")
    qas = par.get("qas")
    first = qas[0] if isinstance(qas, list) and qas and isinstance(qas[0], dict) else {}
    near = [(k, first[k]) for k in ("id", "question") if isinstance(first.get(k), str)]
    near += [(k, par[k]) for k in ("context", "qas") if k in par]
    for name, want, kind in (("context", str, "a text"), ("qas", list, "a list of questions")):
        if not isinstance(par.get(name), want):
            raise fail(where, None, _wrong(par, name, kind), near=near)


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: null, a string "no", an object, ..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return f"the string {json.dumps(value[:40])}"
    kinds: dict[type, str] = {dict: "an object", list: "a list"}
    return kinds.get(type(value), f"the number {value}")


def _wrong(obj: dict[str, Any], name: str, expected: str) -> str:
    """The message for field `name` of `obj`, missing or not `expected`."""
    if name not in obj:
        return f'missing field "{name}"'
    return f'field "{name}": expected {expected}, got {_kind(obj[name])}'


class _SquadError:
    """The InputError of one SQuAD file: the field, the question id and, found in the file, a line: the
    question id's (its `nth` occurrence), else that of the first field of `near` ((key, value) pairs)
    found; its first occurrence is the one read, as every paragraph and question before it passed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw: str | None = None  # the file's text, read on the first error that needs a line

    def __call__(
        self, where: str, qid: str | None, message: str, near: Sequence[tuple[str, Any]] = (), nth: int = 0
    ) -> InputError:
        line = None
        for key, value in [("id", qid), *near] if qid else near:
            if line is None and not isinstance(value, dict | list):
                if self._raw is None:
                    self._raw = self.path.read_text(encoding="utf-8")
                lines = _lines_of(self._raw, key, value)
                line = lines[min(nth, len(lines) - 1)] if lines else None
        ident = f" (question id {qid!r})" if qid else ""
        return InputError(self.path, f"{where}{ident}: {message}", line=line)


@dataclass
class _Question:
    """Reads and checks one question of a paragraph (`where` names it in errors)."""

    where: str
    context: str
    title: str
    version2: bool
    require_answers: bool
    fail: _SquadError

    def read(self, qa: Any) -> SquadExample:
        qid = self._text(qa, "id", None)
        question = self._text(qa, "question", qid)
        impossible, listed = qa.get("is_impossible"), qa.get("answers")
        if not isinstance(impossible, bool | None):  # "no" would otherwise read as true
            raise self.fail(self.where, qid, _wrong(qa, "is_impossible", "true or false"))
        if impossible and not self.version2:
            raise self.fail(
                self.where, qid, "unanswerable question (is_impossible) in a SQuAD 1.1 task; use squad2"
            )
        if not isinstance(listed, list | None):
            raise self.fail(self.where, qid, _wrong(qa, "answers", "a list"))
        answers = [self._answer(a, n, qid) for n, a in enumerate(listed or [])]
        if self.require_answers and not impossible and not answers:
            raise self.fail(
                self.where, qid, 'answerable question without answers (field "answers" empty or null)'
            )
        if impossible and answers:
            raise self.fail(self.where, qid, "is_impossible is true but answers are given")
        gold = [t for t, _ in answers if not self.version2 or metrics.normalize_answer(t)] or [""]
        return SquadExample(qid, question, self.context, answers, bool(impossible), self.title, gold)

    def _text(self, qa: Any, name: str, qid: str | None) -> str:
        """Field `name` ("id", "question") of a question, a string; its errors found by the other field."""
        if not isinstance(qa, dict):
            raise self.fail(self.where, None, f"expected a question object, got {_kind(qa)}")
        if not isinstance(qa.get(name), str):
            near = [(k, qa[k]) for k in ("question", "id") if isinstance(qa.get(k), str)]
            raise self.fail(self.where, qid, _wrong(qa, name, "a text"), near=near)
        return qa[name]

    def _answer(self, a: Any, n: int, qid: str) -> tuple[str, int]:
        """(text, character start; -1 when absent) of answer `n`, its offset checked unless answers are optional."""
        where = f"{self.where}.answers[{n}]"
        if not isinstance(a, dict):
            raise self.fail(where, qid, f"expected an answer object, got {_kind(a)}")
        if not isinstance(a.get("text"), str):
            raise self.fail(where, qid, _wrong(a, "text", "a text"))
        text, start = a["text"], a.get("answer_start")
        if not isinstance(start, int) or isinstance(start, bool):
            if self.require_answers:
                raise self.fail(where, qid, _wrong(a, "answer_start", "a character offset in the context"))
            return text, -1
        found = self.context[start : start + len(text)]
        if self.require_answers and found != text:
            wrong = f"answer_start {start} does not point at the answer text {text!r} in the context"
            raise self.fail(where, qid, f"{wrong} (found {found!r})")
        return text, start


# --------------------------------------------------------------------------- features
def featurize(
    examples: Sequence[SquadExample],
    tokenizer: TokenizerLike,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    training: bool = False,
) -> list[Feature]:
    """Sliding-window features [CLS] question [SEP] context window [SEP].

    Training features carry `start_positions` / `end_positions` (0, 0 = [CLS] when the answer is not
    inside the window or there is none); all carry the context tokens' character spans.
    """
    cache: dict[str, _Context] = {}
    features: list[Feature] = []
    missed = 0
    for ei, ex in enumerate(examples):
        if ex.context not in cache:  # questions of a paragraph are adjacent: one context cached
            cache = {ex.context: tokenize_context(ex.context, tokenizer)}
        ctx = cache[ex.context]
        q = tokenizer.encode(ex.question, add_special_tokens=False)[:max_query_length]
        room = max_seq_length - len(q) - 3
        if room < 1:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the context")
        windows = context_windows(len(ctx.ids), room, doc_stride)
        answer = None
        if training and ex.answers and not ex.is_impossible:
            answer = answer_tokens(ctx, *ex.answers[0])
            missed += answer is None
        for window in windows:
            features.append(_window_feature(tokenizer, q, ctx, windows, window, ei, training, answer))
    if missed:
        logger.warning("%d answers fall on no token (whitespace-only); trained as no-answer", missed)
    return features


def _window_feature(
    tokenizer: TokenizerLike,
    q: list[int],
    ctx: _Context,
    windows: list[tuple[int, int]],
    window: tuple[int, int],
    example_index: int,
    training: bool,
    answer: tuple[int, int] | None,
) -> Feature:
    """One window's feature: training targets (0, 0 when the answer is not all inside), or the spans
    and max-context flags that decoding needs."""
    w_start, w_len = window
    offset = len(q) + 2
    ids = [tokenizer.cls_token_id, *q, tokenizer.sep_token_id, *ctx.ids[w_start : w_start + w_len]]
    ids.append(tokenizer.sep_token_id)
    types = [0] * offset + [1] * (w_len + 1)
    feat: Feature = {"input_ids": ids, "token_type_ids": types, "example_index": example_index}
    if training:
        if answer is not None and answer[0] >= w_start and answer[1] < w_start + w_len:
            feat["start_positions"] = answer[0] - w_start + offset
            feat["end_positions"] = answer[1] - w_start + offset
        else:
            feat["start_positions"] = feat["end_positions"] = 0
    else:
        feat["context_offset"] = offset
        feat["token_chars"] = ctx.chars[w_start : w_start + w_len]
        feat["max_context"] = [is_max_context(windows, window, w_start + i) for i in range(w_len)]
    return feat


# --------------------------------------------------------------------------- decoding
def oracle_predictions(
    examples: Sequence[SquadExample],
    tokenizer: TokenizerLike,
    max_seq_length: int = 384,
    doc_stride: int = 128,
) -> dict[str, str]:
    """The training target of each question cut back out of the context: the best any model can do
    with this tokenization and offset mapping (answers inside a piece, like "gold" in "golden", are lost)."""
    train = featurize(examples, tokenizer, max_seq_length, doc_stride, training=True)
    spans = featurize(examples, tokenizer, max_seq_length, doc_stride, training=False)
    out = {ex.qid: "" for ex in examples}
    for t, f in zip(train, spans, strict=True):
        if t["start_positions"]:
            ex, off = examples[t["example_index"]], f["context_offset"]
            start = f["token_chars"][t["start_positions"] - off][0]
            out[ex.qid] = ex.context[start : f["token_chars"][t["end_positions"] - off][1]]
    return out


# --------------------------------------------------------------------------- the task
class SquadTask(Task):
    head = "question_answering"

    def __init__(
        self,
        version2: bool,
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float | None = None,
    ) -> None:
        self.version2 = version2
        self.name = "squad2" if version2 else "squad1"
        self.main_metric = "f1"
        self.doc_stride, self.max_query_length = doc_stride, max_query_length
        self.n_best, self.max_answer_length = n_best, max_answer_length
        self.null_score_diff_threshold = null_score_diff_threshold
        self.chosen_threshold: float | None = None

    def split_file(self, data: Path, split: str) -> Path | None:
        return squad_file(data, split, self.version2)

    def read(self, path: Path, split: str) -> list[SquadExample]:
        return read_squad(path, self.version2, require_answers=split != "test", unique_ids=split != "train")

    def featurize(self, examples, tokenizer, max_seq_length, training: bool = False):
        return featurize(
            examples, tokenizer, max_seq_length, self.doc_stride, self.max_query_length, training=training
        )

    def predict(self, examples, features, outputs) -> dict[str, Any]:
        preds = decode(examples, features, outputs, self.n_best, self.max_answer_length)
        if not self.version2:
            return {"text": preds.text, "null_diff": None, "threshold": None}
        threshold = self.null_score_diff_threshold
        if threshold is None and all(ex.gold for ex in examples) and any(ex.answers for ex in examples):
            gold = {ex.qid: ex.gold for ex in examples}
            raw = metrics.squad_metrics(gold, preds.text, na_probs=preds.null_diff, version2=True)
            threshold = raw["best_f1_thresh"]
        threshold = 0.0 if threshold is None else float(threshold)
        return {"text": apply_threshold(preds, threshold), "raw": preds, "threshold": threshold}

    def score(self, examples, predictions) -> dict[str, float]:
        gold = {ex.qid: ex.gold for ex in examples}
        if not self.version2:
            return metrics.squad_metrics(gold, predictions["text"])
        out = metrics.squad_metrics(gold, predictions["text"], version2=True)
        raw = predictions["raw"]
        best = metrics.squad_metrics(gold, raw.text, na_probs=raw.null_diff, version2=True)
        out.update({k: v for k, v in best.items() if k.startswith("best_")})
        out["null_score_diff_threshold"] = predictions["threshold"]
        return out

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        """predictions.json (qid -> text, "" for no answer; `test_` prefix for the test split) and, for
        SQuAD 2.0, null_odds.json (qid -> null score - best span score, the official `--na-prob-file`)."""
        prefix = "" if split == "dev" else f"{split}_"
        if self.version2:
            odds = json.dumps(predictions["raw"].null_diff, indent=1) + "\n"
            atomic_write(folder / f"{prefix}null_odds.json", odds)
        text = json.dumps(predictions["text"], indent=1, ensure_ascii=False) + "\n"
        return atomic_write(folder / f"{prefix}predictions.json", text)


def squad_file(data: Path, split: str, version2: bool) -> Path | None:
    """`data` itself (a file), or the split's file in the folder `data`: SPLIT-v1.1.json (v2.0) or SPLIT.json."""
    names = (f"{split}-{'v2.0' if version2 else 'v1.1'}.json", f"{split}.json")
    return data if data.is_file() else next((data / n for n in names if (data / n).is_file()), None)


def score_prediction_file(
    data: str | Path,
    predictions: str | Path,
    version2: bool,
    na_probs: str | Path | None = None,
    na_prob_threshold: float = 1.0,
) -> dict[str, float]:
    """Score a predictions JSON (qid -> answer text) against a SQuAD file (or a folder's dev file), as the
    official scripts; the SQuAD file is read as fine-tuning reads it, and a predictions file that answers
    none of its questions is refused (it would score 0 with a warning)."""
    if (found := squad_file(Path(data), "dev", version2)) is None and Path(data).is_dir():
        raise FileNotFoundError(f"no dev-{'v2.0' if version2 else 'v1.1'}.json or dev.json in {data}")
    data = found or Path(data)
    gold = {ex.qid: ex.gold for ex in read_squad(data, version2)}
    preds = read_json_object(predictions, "predictions (question id -> answer text)")
    bad = [q for q, t in preds.items() if not isinstance(t, str)]
    if bad:
        raise InputError(predictions, f"prediction for {bad[0]!r} is not a string")
    _check_prediction_ids(preds, gold, predictions, data)
    probs = None
    if na_probs is not None:
        probs = read_json_object(na_probs, "no-answer probabilities (question id -> number)")
        if any(not isinstance(v, int | float) or not math.isfinite(v) for v in probs.values()):
            raise InputError(na_probs, "no-answer probabilities must be finite numbers")
    return metrics.squad_metrics(
        gold, preds, na_probs=probs, na_prob_threshold=na_prob_threshold, version2=version2
    )


def _check_prediction_ids(preds: dict[str, Any], gold: dict[str, Any], path: str | Path, data: Path) -> None:
    """Refuse predictions of another file (not one id of `data`); count the ids `data` does not have."""
    unknown = [q for q in preds if q not in gold]
    if len(unknown) == len(preds):
        ours, theirs = ", ".join(map(repr, list(preds)[:2])), ", ".join(map(repr, list(gold)[:2]))
        raise InputError(
            path,
            f"none of its {len(preds)} question ids is a question of {data} (its ids: {ours or 'none'}; "
            f"{data.name}'s: {theirs}, ...): predictions of another file?",
        )
    if unknown:
        logger.warning(
            "%d of %d predictions in %s are for question ids not in %s (%s, ...); they are ignored",
            len(unknown),
            len(preds),
            path,
            data,
            ", ".join(map(repr, unknown[:2])),
        )
