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
from albert_lm.tasks.squad_decoding import SquadExample, SquadPredictions, apply_threshold, decode
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

_WHITESPACE = frozenset(" \t\r\n\u202f")


# --------------------------------------------------------------------------- reading
def load_squad_json(path: str | Path) -> list[dict[str, Any]]:
    """The `data` list of an official SQuAD file, with clear errors for a missing or broken file."""
    path = Path(path)
    obj = read_json_object(path, "SQuAD")
    if not isinstance(obj.get("data"), list):
        raise InputError(path, 'expected a JSON object with a "data" list (the official SQuAD layout)')
    return obj["data"]


def _line_of(raw: str, qid: str) -> int | None:
    m = re.search(r'"id"\s*:\s*' + re.escape(json.dumps(qid)), raw)
    return raw.count("\n", 0, m.start()) + 1 if m else None


def read_squad(path: str | Path, version2: bool, require_answers: bool = True) -> list[SquadExample]:
    """Examples of an official SQuAD file; every answer's offset is checked against its context.

    `version2` False rejects unanswerable questions (a 2.0 file given to a 1.1 task).
    `require_answers` False reads a file without answers (a test set) and skips the checks.
    """
    path = Path(path)
    data = load_squad_json(path)
    fail = _SquadError(path)
    examples: list[SquadExample] = []
    for i, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise fail(f"data[{i}]", None, 'missing "paragraphs" list')
        title = str(article.get("title", ""))
        for j, par in enumerate(paragraphs):
            where = f"data[{i}].paragraphs[{j}]"
            if not isinstance(par, dict) or not isinstance(par.get("context"), str) or "qas" not in par:
                raise fail(where, None, 'missing field "context" or "qas"')
            if not isinstance(par["qas"], list):
                raise fail(where, None, f'field "qas": expected a list of questions, got {_kind(par["qas"])}')
            for k, qa in enumerate(par["qas"]):
                q = _Question(f"{where}.qas[{k}]", par["context"], title, version2, require_answers, fail)
                examples.append(q.read(qa))
    if not examples:
        raise InputError(path, "no questions found")
    return examples


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: null, a string "no", an object, ..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return f"the string {json.dumps(value[:40])}"
    kinds: dict[type, str] = {dict: "an object", list: "a list"}
    return kinds.get(type(value), f"the number {value}")


class _SquadError:
    """The InputError of one SQuAD file: the field, the question id and, found in the file, its line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw: str | None = None  # the file's text, read on the first error that needs a line

    def __call__(self, where: str, qid: str | None, message: str) -> InputError:
        if qid and self._raw is None:
            self._raw = self.path.read_text(encoding="utf-8")
        line = _line_of(self._raw, qid) if qid and self._raw is not None else None
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
        qid = qa.get("id") if isinstance(qa, dict) else None
        if not isinstance(qid, str) or not isinstance(qa.get("question"), str):
            raise self.fail(
                self.where, qid if isinstance(qid, str) else None, 'missing field "id" or "question"'
            )
        impossible, listed = qa.get("is_impossible"), qa.get("answers")
        if not isinstance(impossible, bool | None):  # "no" would otherwise read as true
            raise self.fail(
                self.where, qid, f'field "is_impossible": expected true or false, got {_kind(impossible)}'
            )
        if impossible and not self.version2:
            raise self.fail(
                self.where, qid, "unanswerable question (is_impossible) in a SQuAD 1.1 task; use squad2"
            )
        if not isinstance(listed, list | None):
            raise self.fail(self.where, qid, f'field "answers": expected a list, got {_kind(listed)}')
        answers = [self._answer(a, n, qid) for n, a in enumerate(listed or [])]
        if self.require_answers and not impossible and not answers:
            raise self.fail(
                self.where, qid, 'answerable question without answers (field "answers" empty or null)'
            )
        if impossible and answers:
            raise self.fail(self.where, qid, "is_impossible is true but answers are given")
        gold = [t for t, _ in answers if not self.version2 or metrics.normalize_answer(t)] or [""]
        return SquadExample(qid, qa["question"], self.context, answers, bool(impossible), self.title, gold)

    def _answer(self, a: Any, n: int, qid: str) -> tuple[str, int]:
        """(text, character start; -1 when absent) of answer `n`, its offset checked unless answers are optional."""
        where = f"{self.where}.answers[{n}]"
        if not isinstance(a, dict) or not isinstance(a.get("text"), str):
            raise self.fail(where, qid, 'missing field "text"')
        text, start = a["text"], a.get("answer_start")
        found = self.context[start : start + len(text)] if isinstance(start, int) else None
        if self.require_answers and found != text:
            raise self.fail(
                where,
                qid,
                f"answer_start {start!r} does not point at the answer text {text!r} in the context "
                f"(found {found!r})",
            )
        return text, start if isinstance(start, int) else -1


# --------------------------------------------------------------------------- features
def split_words(text: str) -> tuple[list[str], list[int]]:
    """Whitespace-separated words and their character starts (BERT's SQuAD word split)."""
    words: list[str] = []
    starts: list[int] = []
    prev_ws = True
    for i, ch in enumerate(text):
        if ch in _WHITESPACE:
            prev_ws = True
        elif prev_ws:
            words.append(ch)
            starts.append(i)
            prev_ws = False
        else:
            words[-1] += ch
    return words, starts


@dataclass
class _Context:
    ids: list[int]
    chars: list[tuple[int, int]]  # character span of each sub-token in the context


def tokenize_context(text: str, tokenizer: TokenizerLike) -> _Context:
    ids: list[int] = []
    chars: list[tuple[int, int]] = []
    for word, start in zip(*split_words(text), strict=True):
        pieces = tokenizer.tokenize(word)
        if not pieces:
            continue
        ids.extend(tokenizer.convert_tokens_to_ids(pieces))
        lengths = [len(p.replace("\u2581", "")) for p in pieces]
        if sum(lengths) == len(word):
            pos = start
            for n in lengths:
                chars.append((pos, pos + n))
                pos += n
        else:
            # Normalization changed the characters (accents, quotes, <unk>): pieces share the word's span.
            chars.extend([(start, start + len(word))] * len(pieces))
    return _Context(ids, chars)


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


def context_windows(n_tokens: int, room: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of windows of at most `room` tokens over `n_tokens` context tokens, each starting
    `doc_stride` tokens after the last (or right after it, when shorter), the last reaching the end."""
    windows = []
    start = 0
    while True:
        length = min(n_tokens - start, room)
        windows.append((start, length))
        if start + length >= n_tokens:
            return windows
        start += min(length, doc_stride)


def answer_tokens(ctx: _Context, text: str, start: int) -> tuple[int, int] | None:
    """First and last context token overlapping the answer's characters; None when it falls on none."""
    end = start + len(text)
    inside = [t for t, (s, e) in enumerate(ctx.chars) if e > start and s < end]
    return (inside[0], inside[-1]) if inside else None


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
        feat["max_context"] = [_is_max_context(windows, window, w_start + i) for i in range(w_len)]
    return feat


def _is_max_context(windows: list[tuple[int, int]], current: tuple[int, int], pos: int) -> bool:
    """Whether `current` is the window where token `pos` has the most context (BERT's rule)."""
    best, best_score = None, -math.inf
    for start, length in windows:
        end = start + length - 1
        if start <= pos <= end:
            score = min(pos - start, end - pos) + 0.01 * length
            if score > best_score:
                best, best_score = (start, length), score
    return best == current


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
        return read_squad(path, self.version2, require_answers=split != "test")

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
    official scripts."""
    if (found := squad_file(Path(data), "dev", version2)) is None and Path(data).is_dir():
        raise FileNotFoundError(f"no dev-{'v2.0' if version2 else 'v1.1'}.json or dev.json in {data}")
    data = found or data
    dataset = load_squad_json(data)
    if not version2:
        read_squad(data, version2=False)  # a 2.0 file's unanswerable question is refused, named: use squad2
    try:
        gold = metrics.squad_gold_answers(dataset, version2)
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(
            data,
            f"not a SQuAD file (expected data[].paragraphs[].qas[] with id and answers; {type(e).__name__}: {e})",
        ) from None
    if not gold:
        raise InputError(data, "no questions found")
    preds = read_json_object(predictions, "predictions (question id -> answer text)")
    bad = [q for q, t in preds.items() if not isinstance(t, str)]
    if bad:
        raise InputError(predictions, f"prediction for {bad[0]!r} is not a string")
    probs = None
    if na_probs is not None:
        probs = read_json_object(na_probs, "no-answer probabilities (question id -> number)")
        if any(not isinstance(v, (int, float)) for v in probs.values()):
            raise InputError(na_probs, "no-answer probabilities must be numbers")
    if unknown := set(preds) - set(gold):
        logger.warning("%d predictions are for questions not in %s", len(unknown), data)
    return metrics.squad_metrics(
        gold, preds, na_probs=probs, na_prob_threshold=na_prob_threshold, version2=version2
    )
