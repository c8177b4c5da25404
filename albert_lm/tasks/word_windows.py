"""A sentence of words longer than the model reads, in windows of whole words (token classification):
each window starts halfway through the one before, and each word is read, in training and in prediction,
from the one window where it has the most context."""

from __future__ import annotations

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.tasks.task import Feature, TokenizerLike


def word_windows(lengths: list[int], room: int) -> list[tuple[int, int]]:
    """(first word, end) of each window of whole words whose pieces (`lengths`) fit in `room`; each window
    starts halfway through the one before, the last ends with the sentence."""
    windows, start = [], 0
    while True:
        end, used = start, 0
        while end < len(lengths) and used + lengths[end] <= room:
            used, end = used + lengths[end], end + 1
        windows.append((start, end))
        if end == len(lengths):
            return windows
        start = end - (end - start) // 2


def owners(windows: list[tuple[int, int]], words: int) -> list[int]:
    """For each word, the window it is read from: the one where it has the most words on its shorter side
    (a sentence's own ends count as wide context), the first of those (as SQuAD's document windows choose
    a span's). Training takes each word's loss there alone; prediction reads its tag there."""
    best = [(-1, 0)] * words
    for k, (start, end) in enumerate(windows):
        for w in range(start, end):
            left = w - start if start > 0 else words
            right = end - 1 - w if end < words else words
            if min(left, right) > best[w][0]:
                best[w] = (min(left, right), k)
    return [k for _, k in best]


def window_feature(
    tokenizer: TokenizerLike,
    index: int,
    pieces: list[list[int]],
    tags: list[int] | None,
    start: int,
    end: int,
) -> Feature:
    """[CLS] the pieces of words start..end [SEP]; the tag sits on each word's first piece, the other pieces
    are ignored in the loss (IGNORE_INDEX)."""
    ids, labels, first = [tokenizer.cls_token_id], [IGNORE_INDEX], []
    for w in range(start, end):
        first.append(len(ids))
        ids += pieces[w]
        labels += [IGNORE_INDEX if tags is None else tags[w]] + [IGNORE_INDEX] * (len(pieces[w]) - 1)
    ids.append(tokenizer.sep_token_id)
    feat: Feature = {"input_ids": ids, "token_type_ids": [0] * len(ids), "example_index": index,
                     "word_starts": first, "word_offset": start}  # fmt: skip
    if tags is not None:
        feat["labels"] = labels + [IGNORE_INDEX]
    return feat
