"""A pair of texts' ids cut to a length from the end, by transformers' truncation strategies: the rule of
every fine-tuning input (`AlbertTokenizer.encode_pair`, a task's features)."""

from __future__ import annotations

from collections.abc import Sequence


def truncate_pair_from_end(
    ids_a: Sequence[int], ids_b: Sequence[int] | None, budget: int, strategy: bool | str = True
) -> tuple[list[int], list[int] | None]:
    """Cut (ids_a, ids_b) to at most `budget` ids in all, from the end (transformers' strategies).

    True / "longest_first" is BERT's `_truncate_seq_pair`: one id at a time from the end of the longer
    side (of A on a tie). Fine-tuning's rule; pretraining cuts at random ends instead
    (`albert_lm.data.examples.truncate_pair_randomly`). Returns new lists.
    """
    if budget < 0:
        raise ValueError(f"max_length leaves no room for the special tokens (budget {budget})")
    a, b = list(ids_a), None if ids_b is None else list(ids_b)
    excess = len(a) + len(b or []) - budget
    if excess <= 0:
        return a, b
    if strategy in (True, "longest_first"):
        for _ in range(excess):
            if b is not None and len(b) > len(a):
                b.pop()
            else:
                a.pop()
    elif strategy == "only_first":
        if excess > len(a):
            raise ValueError(f"cannot truncate the first text by {excess} ids: it has {len(a)}")
        a = a[: len(a) - excess]
    elif strategy == "only_second":
        if b is None or excess > len(b):
            raise ValueError(f"cannot truncate the second text by {excess} ids: it has {len(b or [])}")
        b = b[: len(b) - excess]
    else:
        raise ValueError(
            f"truncation={strategy!r}: expected True, 'longest_first', 'only_first' or 'only_second'"
        )
    return a, b
