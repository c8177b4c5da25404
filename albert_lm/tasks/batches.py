"""Batches for fine-tuning: grouped by length so short examples are not padded to long ones.

Training batches: shuffle, sort by length inside windows of `window` batches, cut, shuffle the batches
(the "bucket by sequence length" idea of fairseq and tensor2tensor, kept random enough for SGD).
Evaluation batches: one global sort by length. Each batch is padded to its own longest feature only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.tasks.task import MODEL_KEYS, Feature


def feature_length(f: Feature) -> int:
    ids = f["input_ids"]
    return max(len(c) for c in ids) if ids and isinstance(ids[0], list) else len(ids)


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator | None, window: int = 50
) -> list[list[int]]:
    """Batches of indices with similar lengths.

    Training (`rng` given): shuffle, sort by length within windows of `window` batches, cut, shuffle
    the batches. Evaluation (`rng` None): one global sort, so padding is minimal and order is fixed.
    """
    lens = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lens, kind="stable")
        return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    perm = rng.permutation(len(lens))
    batches = []
    span = batch_size * window
    for i in range(0, len(perm), span):
        chunk = perm[i : i + span]
        chunk = chunk[np.argsort(lens[chunk], kind="stable")]
        batches += [chunk[j : j + batch_size].tolist() for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(features: Sequence[Feature], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest feature of the batch: (B, L), or (B, C, L) for multiple choice."""
    choices = isinstance(features[0]["input_ids"][0], list)
    length = max(feature_length(f) for f in features)

    def pad(seq: list[int], value: int) -> list[int]:
        return seq + [value] * (length - len(seq))

    if choices:
        ids = torch.tensor([[pad(c, pad_id) for c in f["input_ids"]] for f in features])
        types = torch.tensor([[pad(c, 0) for c in f["token_type_ids"]] for f in features])
        mask = torch.tensor([[pad([1] * len(c), 0) for c in f["input_ids"]] for f in features])
    else:
        ids = torch.tensor([pad(f["input_ids"], pad_id) for f in features])
        types = torch.tensor([pad(f["token_type_ids"], 0) for f in features])
        mask = torch.tensor([pad([1] * len(f["input_ids"]), 0) for f in features])
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    for key in MODEL_KEYS[2:]:
        if key in features[0]:
            values = [f[key] for f in features]
            if isinstance(values[0], list):  # token labels: ignored beyond each sequence
                batch[key] = torch.tensor([pad(v, IGNORE_INDEX) for v in values])
            else:
                batch[key] = torch.tensor(values)
    return batch
