"""SQuAD span decoding: from per-window start/end logits to each question's answer text.

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

from albert_lm.tasks.task import Feature


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
    return SquadPredictions(text, diff, spans)


def apply_threshold(preds: SquadPredictions, threshold: float) -> dict[str, str]:
    return {q: ("" if preds.null_diff[q] > threshold else t) for q, t in preds.text.items()}
