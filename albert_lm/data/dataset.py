"""Reading `albert data create` output in PyTorch: a map-style Dataset, a rank sampler, a padding collate.

API (what the pretraining loop uses):

    ds = PretrainingDataset(DIR, split="train")      # or split="eval" (the held-out blocks)
    len(ds); item = ds[i]                             # dict of int64 tensors:
        input_ids (T,), token_type_ids (T,), attention_mask (T,),
        labels (T,)  original id at masked positions, -100 elsewhere,
        sentence_order_label ()  SOP: 1 = segments swapped; NSP: 1 = B from another document
    ds.objective ("sop" | "nsp"), ds.masking ("dynamic" | "static"), ds.max_seq_length, ds.vocab_size,
    ds.tokenizer_path (the spiece.model copied into DIR), ds.config (the DataConfig it was made with)
    ds.set_epoch(e)                                    # dynamic masking: item i of epoch e is a pure
                                                       # function of (seed, e, i), so training resumes exactly
    sampler = PretrainingSampler(ds, num_replicas=world, rank=rank, seed=s); sampler.set_epoch(e)
    loader = DataLoader(ds, batch_size=b, sampler=sampler, collate_fn=collate_pretraining)

Dynamic masking (the default) draws the whole-word n-gram masks of `albert_lm.data.masking` when an item is read,
from a generator seeded by (data seed, epoch, index): new masks every epoch (RoBERTa's finding), the same
masks when a run is resumed. Call `set_epoch` on the dataset before each epoch (the sampler's `set_epoch`
does it for you); with `persistent_workers=True` DataLoader workers keep the epoch they started with.

Shards are opened with `np.load(mmap_mode="r")`, so a Dataset costs a few file handles, not the data,
and pickles cheaply to DataLoader workers.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from albert_lm.data.examples import DataConfig
from albert_lm.data.masking import mask_sequence

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
_DYNAMIC_STREAM = 7  # keeps mask draws apart from the creation draws made with the same seed


class PretrainingDataset(Dataset):
    """Map-style dataset over the shards of one split of a pretraining data folder."""

    def __init__(self, path: str | os.PathLike, split: str = "train", epoch: int = 0) -> None:
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not manifest_file.is_file():
            raise FileNotFoundError(
                f"{self.path}: no manifest.json; not a finished `albert data create` output (an interrupted "
                "run leaves none: rerun the command to finish it)"
            )
        self.manifest = json.loads(manifest_file.read_text())
        if split not in self.manifest["splits"]:
            raise ValueError(f"split {split!r}: expected one of {sorted(self.manifest['splits'])}")
        self.split = split
        self.config = DataConfig.from_dict(self.manifest["config"])
        self.objective: str = self.manifest["objective"]
        self.masking: str = self.manifest["masking"]
        self.max_seq_length: int = self.manifest["max_seq_length"]
        self.vocab_size: int = self.manifest["tokenizer"]["vocab_size"]
        self.tokenizer_path = self.path / self.manifest["tokenizer"]["file"]
        self.epoch = epoch
        self.word_start = np.load(self.path / "word_start.npy")
        self._shard_dirs = [self.path / s["dir"] for s in self.manifest["splits"][split]["shards"]]
        counts = [s["examples"] for s in self.manifest["splits"][split]["shards"]]
        self._cum = [0, *np.cumsum(counts, dtype=np.int64).tolist()]  # ints even for a split with no shards
        self._shards: list[dict[str, np.ndarray] | None] = [None] * len(self._shard_dirs)

    def __len__(self) -> int:
        return self._cum[-1]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_shards"] = [None] * len(self._shard_dirs)  # reopen the memory maps in each worker
        return state

    def _shard(self, k: int) -> dict[str, np.ndarray]:
        shard = self._shards[k]
        if shard is None:
            names = ["tokens", "offsets", "a_lens", "labels"]
            if self.masking == "static":
                names += ["masked_positions", "mask_offsets", "masked_labels"]
            shard = {n: np.load(self._shard_dirs[k] / f"{n}.npy", mmap_mode="r") for n in names}
            self._shards[k] = shard
        return shard

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} examples")
        k = bisect.bisect_right(self._cum, index) - 1
        local = index - self._cum[k]
        s = self._shard(k)
        lo, hi = int(s["offsets"][local]), int(s["offsets"][local + 1])
        ids = np.asarray(s["tokens"][lo:hi], dtype=np.int64)  # (T,)
        a_len = int(s["a_lens"][local])
        labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)  # (T,)
        if self.masking == "static":
            mlo, mhi = int(s["mask_offsets"][local]), int(s["mask_offsets"][local + 1])
            positions = np.asarray(s["masked_positions"][mlo:mhi], dtype=np.int64)
            labels[positions] = np.asarray(s["masked_labels"][mlo:mhi], dtype=np.int64)
        else:
            rng = np.random.default_rng(
                np.random.SeedSequence([self.config.seed, _DYNAMIC_STREAM, self.epoch, index])
            )
            masked, positions, original = mask_sequence(
                ids,
                self.word_start,
                rng,
                self.vocab_size,
                self.config.masked_lm_prob,
                self.config.max_predictions_per_seq,
                self.config.max_ngram,
            )
            labels[positions] = original
            ids = masked
        token_type_ids = np.zeros(len(ids), dtype=np.int64)
        token_type_ids[a_len + 2 :] = 1  # [CLS] A [SEP] are type 0
        return {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "attention_mask": torch.ones(len(ids), dtype=torch.long),
            "labels": torch.from_numpy(labels),
            "sentence_order_label": torch.tensor(int(s["labels"][local]), dtype=torch.long),
        }


class PretrainingSampler(Sampler[int]):
    """Splits a dataset across `num_replicas` ranks without overlap: a seeded permutation per epoch, cut to
    a multiple of the world size (the few leftover examples wait for the next epoch's permutation), every
    rank taking one stride of it. torch's DistributedSampler pads with repeats instead, so two ranks can
    see the same example; this sampler never does.
    """

    def __init__(
        self,
        dataset: Dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if num_replicas is None or rank is None:
            import torch.distributed as dist

            ready = dist.is_available() and dist.is_initialized()
            num_replicas = (
                num_replicas if num_replicas is not None else (dist.get_world_size() if ready else 1)
            )
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.epoch = 0
        self.num_samples = len(dataset) // num_replicas  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        used = order[: self.num_samples * self.num_replicas]
        return iter(used[self.rank :: self.num_replicas].tolist())


def collate_pretraining(
    batch: Sequence[dict[str, torch.Tensor]], pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """Stack items, padding to the longest in the batch (dynamic padding): (B, T_max) tensors.

    Padding: input_ids `pad_token_id`, token_type_ids 0, attention_mask 0, labels -100.
    """
    width = max(len(item["input_ids"]) for item in batch)
    pad_values = {"input_ids": pad_token_id, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE_INDEX}
    out = {}
    for key, value in pad_values.items():
        rows = torch.full((len(batch), width), value, dtype=torch.long)  # (B, T)
        for b, item in enumerate(batch):
            rows[b, : len(item[key])] = item[key]
        out[key] = rows
    out["sentence_order_label"] = torch.stack([item["sentence_order_label"] for item in batch])  # (B,)
    return out
