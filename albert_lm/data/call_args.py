"""The arguments of a tokenizer call, checked as transformers reads them: a text or a batch of texts or
pairs, the padding and truncation strategies, the ids to decode. Anything else is refused naming the
argument or the item, not read as True or character by character."""

from __future__ import annotations

from typing import Any

# transformers' values of padding= and truncation= (the strings of its PaddingStrategy and
# TruncationStrategy); any other is refused rather than read as True.
PADDINGS = (False, True, "longest", "max_length", "do_not_pad")
TRUNCATIONS = (False, True, "longest_first", "only_first", "only_second", "do_not_truncate")


def checked_ids(ids: Any, vocab_size: int) -> list[int]:
    """`ids` (a list, a tensor or an array of integers) as ints, each a piece of the vocabulary; anything
    else is refused naming the first bad one (a string would be read character by character)."""
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise TypeError(f"decode: expected a sequence of token ids, got {type(ids).__name__}")
    out = []
    for n, i in enumerate(ids):
        value = i.item() if hasattr(i, "item") else i  # a tensor's or an array's element
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            raise ValueError(f"decode: ids[{n}] is {i!r}, expected a token id from 0 to {vocab_size - 1}")
        out.append(value)
    return out


def texts_and_pairs(text: Any, text_pair: Any) -> tuple[list[str], list[str | None]]:
    """The (first, second) texts of a call's rows, as transformers reads them: `text` is a text or a batch
    whose items are texts or (text, text_pair) tuples or lists of two; `text_pair` a text or a batch as
    long as `text` (None: no second text). Anything else is a TypeError naming the item."""
    items = [text] if isinstance(text, str) else batch_items(text, "text")
    if text_pair is None:
        seconds: list[Any] = [None] * len(items)
    else:
        seconds = [text_pair] if isinstance(text_pair, str) else batch_items(text_pair, "text_pair")
    if len(seconds) != len(items):
        raise ValueError(f"text has {len(items)} items but text_pair has {len(seconds)}")
    for n, (item, second) in enumerate(zip(items, seconds, strict=True)):
        if isinstance(item, tuple | list) and len(item) == 2 and second is None:
            item, second = item
        if not isinstance(item, str) or not isinstance(second, str | None):
            raise TypeError(
                f"text[{n}]: expected a text or a (text, text_pair) pair of two texts, got {items[n]!r:.80}"
                + ("" if seconds[n] is None else f" with text_pair[{n}] {seconds[n]!r:.80}")
            )
        items[n], seconds[n] = item, second
    return items, seconds


def batch_items(value: Any, name: str) -> list[Any]:
    """The items of a batch argument: a list, tuple or other iterable that is not a text."""
    if isinstance(value, bytes | bytearray | dict) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name}: expected a text (str) or a batch of them, got {type(value).__name__}")
    return list(value)
