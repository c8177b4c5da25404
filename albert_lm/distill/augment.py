"""Variants of a task's training texts for task distillation (`albert distill task --augment N`).

A student taught only on the labelled examples sees the teacher's judgement on a few thousand inputs; the
teacher can label any text, so more text is more teaching (Tang et al., 2019, "Distilling Task-Specific
Knowledge from BERT into Simple Neural Networks": 90.7 on SST-2 with a BiLSTM student; TinyBERT's
augmentation does the same with a masked LM). Their three rules, as far as they need no tagger or model:

- each word, with probability `replace` (0.1), becomes a word of the task's training text drawn by its
  frequency there (theirs: a word of the same part of speech; a tagger per language would be a dependency);
- each word, with probability `drop` (0.1), is left out (theirs: replaced by [MASK], which the teacher's
  and the student's tokenizers would read differently);
- with probability `window` (0.25), a single text is cut to a window of 1-5 consecutive words (a pair's
  texts never are: a window of each would rarely still be a pair).

Each variant is a function of (seed, the text's index, the round) only, so the same command gives the
same texts, and the teacher cache finds them again. A variant equal to its text, or to one already made,
is left out (short texts give fewer than N).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate

Pair = tuple[str, str | None]
# The most texts a task distillation holds for its teacher to label, the training examples and their
# variants together: Tang et al.'s 20 variants of SST-2's 67k sentences (1.4M), MNLI's 393k pairs with 11
# each. Each text is held in memory with its features, and a CPU teacher labels a few thousand a minute.
MAX_TEXTS = 5_000_000


def check_augment(examples: int, rounds: int, what: str = "training examples") -> int:
    """The texts `rounds` variants (--augment) of `examples` texts make at most, the texts included:
    examples x (1 + rounds); refused over MAX_TEXTS before one is built, naming the option, the value, the
    cap and the count."""
    texts = examples * (1 + rounds)
    if texts > MAX_TEXTS:
        most = max(0, MAX_TEXTS // max(1, examples) - 1)
        raise ValueError(
            f"--augment {rounds}: {examples:,} {what} x (1 + {rounds:,}) = {texts:,} texts to build and have "
            f"the teacher label, over the cap of {MAX_TEXTS:,}; give --augment {most} or less, or fewer "
            "examples (--max-train-examples)"
        )
    return texts


def augment_texts(
    texts: Sequence[Pair],
    rounds: int,
    seed: int,
    replace: float = 0.1,
    drop: float = 0.1,
    window: float = 0.25,
) -> list[Pair]:
    """Up to `rounds` new variants of each of `texts` (module docstring), in order: text 0's, then 1's;
    refused before any is made where they would be too many (`check_augment`)."""
    check_augment(len(texts), rounds)
    counts = Counter(w for a, b in texts for t in (a, b) if t for w in t.split())
    words = list(counts)
    cumulative = list(accumulate(counts[w] for w in words))
    seen = set(texts)
    out: list[Pair] = []
    for i, (a, b) in enumerate(texts):
        for r in range(rounds):
            rng = random.Random(f"{seed}/{i}/{r}")
            first = _vary(a.split(), rng, words, cumulative, replace, drop, window if b is None else 0.0)
            second = None if b is None else _vary(b.split(), rng, words, cumulative, replace, drop, 0.0)
            variant = (first, second)
            if first and (second is None or second) and variant not in seen:
                seen.add(variant)
                out.append(variant)
    return out


def _vary(
    tokens: list[str],
    rng: random.Random,
    words: list[str],
    cumulative: list[int],
    replace: float,
    drop: float,
    window: float,
) -> str:
    kept = []
    for w in tokens:
        u = rng.random()
        if u < replace:
            kept.append(rng.choices(words, cum_weights=cumulative)[0])
        elif u >= replace + drop:
            kept.append(w)
    if window and len(kept) > 1 and rng.random() < window:
        n = rng.randint(1, min(5, len(kept)))
        start = rng.randrange(len(kept) - n + 1)
        kept = kept[start : start + n]
    return " ".join(kept)
