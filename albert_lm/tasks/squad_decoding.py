"""SQuAD span decoding: from per-window start/end logits to each question's answer text.

Decoding maps tokens back to text, so the map lives here too: each context token's character span
(`tokenize_context`), the windows over the context (`context_windows`) and the window in which a token's
prediction is trusted (`is_max_context`, BERT's `_check_is_max_context`); squad.py builds features on them.

The `n_best` top start and end logits per window, pairs with start <= end, at most `max_answer_length`
tokens, inside the context and in the window where the start token has the most context; the best
start + end score wins. SQuAD 2.0's null score is the [CLS] span's, the minimum over the question's
windows; `apply_threshold` answers "" where null - best span score exceeds the threshold.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from albert_lm.tasks.task import Feature, TokenizerLike

_WHITESPACE = frozenset(" \t\r\n\u202f")


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, character start in context)
    is_impossible: bool = False
    title: str = ""
    gold: list[str] = field(default_factory=list)  # all gold texts, for scoring


@dataclass
class SquadPredictions:
    text: dict[str, str]  # best non-null span per question
    null_diff: dict[str, float]  # null score - best span score (SQuAD 2.0's "na_prob")
    # each answer's [start, end) in its context (None: no span)
    spans: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    # the best span's score, its start + end logits (-inf: no span); higher is surer
    scores: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- context tokens and windows
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


def is_max_context(windows: list[tuple[int, int]], current: tuple[int, int], pos: int) -> bool:
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
def decode(
    examples: Sequence[SquadExample],
    features: Sequence[Feature],
    outputs: Sequence[dict[str, np.ndarray]],
    n_best: int = 20,
    max_answer_length: int = 30,
) -> SquadPredictions:
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for fi, f in enumerate(features):
        by_example[f["example_index"]].append(fi)
    text: dict[str, str] = {}
    diff: dict[str, float] = {}
    spans: dict[str, tuple[int, int] | None] = {}
    scores: dict[str, float] = {}
    for ei, ex in enumerate(examples):
        best, best_span, null = -math.inf, None, math.inf
        for fi in by_example[ei]:
            f, o = features[fi], outputs[fi]
            s_all, e_all = o["start_logits"], o["end_logits"]  # (L,)
            null = min(null, float(s_all[0] + e_all[0]))
            off, n = f["context_offset"], len(f["token_chars"])
            s, e = s_all[off : off + n], e_all[off : off + n]
            top_s = np.argsort(-s, kind="stable")[:n_best]
            top_e = np.argsort(-e, kind="stable")[:n_best]
            for i in top_s:
                if not f["max_context"][i]:
                    continue
                for j in top_e:
                    if j < i or j - i + 1 > max_answer_length:
                        continue
                    score = float(s[i] + e[j])
                    if score > best:
                        best, best_span = score, (f["token_chars"][i][0], f["token_chars"][j][1])
        text[ex.qid] = ex.context[best_span[0] : best_span[1]] if best_span else ""
        spans[ex.qid] = (int(best_span[0]), int(best_span[1])) if best_span else None
        diff[ex.qid] = null - best if best_span else 1e9
        scores[ex.qid] = best
    return SquadPredictions(text, diff, spans, scores)


def apply_threshold(preds: SquadPredictions, threshold: float) -> dict[str, str]:
    return {q: ("" if preds.null_diff[q] > threshold else t) for q, t in preds.text.items()}
