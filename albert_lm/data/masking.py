"""ALBERT's masked-LM targets: whole-word n-gram masking (paper section 4.1, google-research
`create_masked_lm_predictions` with `ngram=3`, `favor_shorter_ngram=True`, `do_whole_word_mask=True`).

The recipe, as google-research runs it:
- words are runs of pieces; a piece starts a word when `_is_start_piece_sp` says so: it begins with "▁"
  or "<", is a punctuation piece, or holds a character outside a-z (digits, accented or foreign letters);
- the budget is `min(max_predictions_per_seq, max(1, round(n_tokens * masked_lm_prob)))`;
- word starts are visited in random order; at each, an n-gram length n <= 3 is drawn with p(n) ~ 1/n
  (renormalized where fewer than 3 words remain); when the span would overflow the budget, shorter n are
  tried, and a span that still does not fit, or touches an already masked token, is skipped;
- each chosen token becomes [MASK] with probability 0.8, a random piece 0.1, itself 0.1.

What we do instead, and why (each a quirk of the reference):
- n-gram lengths come from numpy's global, unseeded `np.random.choice`, so two runs with the same seed mask
  differently: every draw here comes from the `numpy.random.Generator` passed in;
- picking the start word first and then backing off to shorter n-grams (and skipping spans that touch
  masked words) skews the realized lengths to 58/26/16% on the books instead of the paper's
  p(n) ~ 1/n = 55/27/18%: we draw n first, then place the span uniformly among the start words whose n
  words are all free (rejection sampling), so the realized lengths follow p(n);
- the rounded budget is filled greedily, so the last span is whatever still fits: we stop at the target
  `masked_lm_prob * n` itself, and keep a span that crosses it with probability
  (target - masked so far) / (mean span length), a rule that does not look at the span drawn: the masked
  count is right on average and the length distribution stays unbiased; `max_predictions_per_seq`
  remains a hard cap (a span over it ends the example's masking);
- the budget counts [CLS] and the two [SEP]s, which can never be masked, so the share of the text it
  asks for depends on the length (19 of 125 text tokens = 15.2% at 128 tokens, 3 of 17 = 17.6% at 20):
  we take 15% of the maskable tokens, so 15% of the text is masked on average at every length;
- `max(1, ...)` forces a mask into every example, over-masking short ones: we keep the expectation instead;
- the random replacement is any vocabulary entry, `<pad>`, `[CLS]`, `[SEP]`, `[MASK]` included: we draw
  from the ordinary pieces (ids 5 and up) only;
- a piece right after [SEP] that continues a word (B truncated at the front) is glued to A's last word:
  [CLS] and [SEP] end words here;
- a dead loop meant to skip covered pieces, and the permutation option, are left out;
- a piece with a letter outside a-z starts a word, which in any language but English cuts words apart
  ("▁sch" "ön" are two words, and every piece of Russian is a word of its own): here a letter (or
  combining mark) continues a word in any script written with spaces, and starts one in the scripts
  written without (Chinese, Japanese, Thai: `albert_lm.data.unspaced`), where each SentencePiece piece is
  a word, so n-grams of 1-3 pieces (of one or more characters each) are masked together. Digits and
  symbols start words as in the reference. On the released English model's vocabulary (no piece with a
  letter outside a-z) the table is the reference's, bit for bit.

`mask_sequence` serves both static masking (at data creation) and dynamic masking (in
`PretrainingDataset.__getitem__`, a new draw for each epoch).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

from albert_lm.data.unspaced import has_no_space_letter

_PUNCT = set("!\"#$%&'()*+,-./:;?@[\\]^_`{|}~")
_ENGLISH = set("abcdefghijklmnopqrstuvwxyz")
NUM_SPECIAL_IDS = 5  # <pad> <unk> [CLS] [SEP] [MASK]
# The label of a position with no target: PyTorch's cross-entropy default, transformers' convention.
IGNORE_INDEX = -100


def is_start_piece(piece: str) -> bool:
    """Does this SentencePiece piece begin a new word? google-research `_is_start_piece_sp`, except that
    letters of scripts written with spaces continue a word (see the module docstring)."""
    if piece.startswith("\u2581") or piece.startswith("<") or piece in _PUNCT:
        return True
    return has_no_space_letter(piece) or not all(_continues_word(c) for c in piece)


def is_start_piece_reference(piece: str) -> bool:
    """google-research `_is_start_piece_sp` as it is: any character outside a-z starts a word."""
    if piece.startswith("\u2581") or piece.startswith("<") or piece in _PUNCT:
        return True
    return not all(c.lower() in _ENGLISH or c in _PUNCT for c in piece)


@functools.lru_cache(maxsize=4096)
def _continues_word(c: str) -> bool:
    return c.lower() in _ENGLISH or c in _PUNCT or unicodedata.category(c)[0] in "LM"


def word_start_table(pieces: Sequence[str], reference: bool = False) -> np.ndarray:
    """(V,) bool: `is_start_piece` of every id (`reference`: google-research's own rule), so grouping a
    sequence into words is one lookup."""
    rule = is_start_piece_reference if reference else is_start_piece
    return np.array([rule(p) for p in pieces], dtype=bool)


def ngram_probabilities(max_ngram: int) -> np.ndarray:
    """p(n) proportional to 1/n for n = 1..max_ngram (3 gives 6/11, 3/11, 2/11)."""
    p = 1.0 / np.arange(1, max_ngram + 1)
    return p / p.sum()


@functools.lru_cache(maxsize=8)
def _ngram_cdf(max_ngram: int) -> tuple[list[float], float]:
    """Cumulative p(n) and the mean n, computed once per max_ngram."""
    p = ngram_probabilities(max_ngram)
    return np.cumsum(p).tolist(), float(np.dot(p, np.arange(1, max_ngram + 1)))


def mask_sequence(
    ids: np.ndarray,
    word_start: np.ndarray,
    rng: np.random.Generator,
    vocab_size: int,
    masked_lm_prob: float = 0.15,
    max_predictions: int = 20,
    max_ngram: int = 3,
    mask_id: int = 4,
    special_ids: tuple[int, ...] = (2, 3),
    span_log: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask one example. ids: (T,) ints with [CLS]/[SEP]. Returns (masked ids (T,), positions (k,), labels (k,)).

    positions are sorted; labels are the original ids there; k <= max_predictions. `span_log`, when given,
    receives the length in words of every masked span (for the statistics tests).
    """
    ids = np.asarray(ids)
    special = np.zeros(len(ids), dtype=bool)  # (T,)
    for sid in special_ids:
        special |= ids == sid
    n_maskable = int((~special).sum())
    if n_maskable == 0 or masked_lm_prob <= 0:
        return ids.copy(), np.zeros(0, np.int64), np.zeros(0, ids.dtype)
    starts, ends = word_spans(ids, word_start, special)
    chosen = choose_masked_tokens(
        starts.tolist(),
        ends.tolist(),
        n_maskable,
        UniformStream(rng),
        masked_lm_prob,
        max_predictions,
        max_ngram,
        span_log,
    )
    positions = np.array(sorted(chosen), dtype=np.int64)
    return replace_masked(ids, positions, rng, vocab_size, mask_id), positions, ids[positions]


def word_spans(ids: np.ndarray, word_start: np.ndarray, special: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W,) first token and (W,) end (exclusive) of every maskable word of `ids` (T,).

    A word starts at a start piece (`word_start[id]`) or at the first piece after a special token, and
    runs to the next start or to the next special token, whichever comes first. `special`: (T,) bool.
    """
    after_special = np.concatenate(([True], special[:-1]))
    starts = np.flatnonzero(~special & (word_start[ids] | after_special))  # (W,)
    next_special = np.flatnonzero(special)
    ends = np.minimum(
        np.append(starts[1:], len(ids)),
        next_special[np.searchsorted(next_special, starts)] if len(next_special) else len(ids),
    )  # (W,)
    return starts, ends


def choose_masked_tokens(
    starts: Sequence[int],
    ends: Sequence[int],
    n_maskable: int,
    uniforms: UniformStream,
    masked_lm_prob: float,
    max_predictions: int,
    max_ngram: int,
    span_log: list[int] | None = None,
) -> list[int]:
    """Positions to mask, span by span, in the order chosen (the rules in the module docstring).

    Each span: n words with p(n) ~ 1/n, placed uniformly among the start words whose n words are all
    free; spans are added until `masked_lm_prob * n_maskable` is reached (a span crossing it kept with
    probability (target - masked so far) / (mean span length)) or one would pass `max_predictions`.
    """
    n_words = len(starts)
    cdf, mean_words = _ngram_cdf(max_ngram)
    # Expected tokens of one span: decides, independently of the span drawn, whether a span that crosses
    # the target is kept, so the masked count is right on average and the span lengths stay unbiased.
    mean_span = mean_words * n_maskable / n_words
    target = n_maskable * masked_lm_prob
    word_used = [False] * n_words
    chosen: list[int] = []
    for _ in range(4 * n_words):  # a bound, never reached in practice: the target stops the loop first
        if len(chosen) >= target:
            break
        u = uniforms.next()
        n = 1
        while n < max_ngram and u >= cdf[n - 1]:
            n += 1
        w = _place_span(uniforms, word_used, n) if n <= n_words else None
        if w is None:
            continue
        # The span's tokens, word by word: a span may run across [SEP] (as in the reference), never into it.
        span = [t for j in range(w, w + n) for t in range(starts[j], ends[j])]
        after = len(chosen) + len(span)
        if after > max_predictions:
            break
        if after > target and uniforms.next() >= (target - len(chosen)) / mean_span:
            break
        word_used[w : w + n] = [True] * n
        chosen.extend(span)
        if span_log is not None:
            span_log.append(n)
    return chosen


def _place_span(uniforms: UniformStream, word_used: list[bool], n: int) -> int | None:
    """First word of an n-word span, uniform among the starts whose n words are all free (rejection
    sampling, 32 tries); None when every try touched a masked word."""
    n_words = len(word_used)
    for _try in range(32):
        w = int(uniforms.next() * (n_words - n + 1))
        if not any(word_used[w : w + n]):
            return w
    return None


def replace_masked(
    ids: np.ndarray, positions: np.ndarray, rng: np.random.Generator, vocab_size: int, mask_id: int
) -> np.ndarray:
    """A copy of `ids` with each of `positions` made [MASK] (p 0.8), a random ordinary piece (ids 5 and
    up, p 0.1) or left as it is (p 0.1)."""
    out = ids.copy()
    u = rng.random(len(positions))
    to_mask = u < 0.8
    to_random = u >= 0.9
    out[positions[to_mask]] = mask_id
    out[positions[to_random]] = rng.integers(NUM_SPECIAL_IDS, vocab_size, size=int(to_random.sum()))
    return out


class UniformStream:
    """Uniform draws fetched from the generator in blocks: one numpy call per 64 draws, not per draw."""

    def __init__(self, rng: np.random.Generator, block: int = 64) -> None:
        self.rng, self.block = rng, block
        self.buf: list[float] = []

    def next(self) -> float:
        if not self.buf:
            self.buf = self.rng.random(self.block).tolist()
        return self.buf.pop()

    def integer(self, low: int, high: int) -> int:
        """Uniform integer in [low, high)."""
        return low + min(int(self.next() * (high - low)), high - low - 1)
