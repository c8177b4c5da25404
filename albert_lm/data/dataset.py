"""Reading `albert data create` output in PyTorch: a map-style Dataset, a rank sampler, a padding collate.

API (what the pretraining loop uses):

    ds = PretrainingDataset(DIR, split="train")      # or split="eval" (the held-out blocks)
    len(ds); item = ds[i]                             # dict of int64 tensors:
        input_ids (T,), token_type_ids (T,), attention_mask (T,),
        labels (T,)  original id at masked positions, IGNORE_INDEX (-100) elsewhere,
        sentence_order_label ()  SOP: 1 = segments swapped; NSP: 1 = B from another document
    ds.objective ("sop" | "nsp"), ds.masking ("dynamic" | "static"), ds.max_seq_length, ds.vocab_size,
    ds.tokenizer_path (the spiece.model copied into DIR), ds.config (the DataConfig it was made with)
    ds.set_epoch(e)                                    # dynamic masking: item i of epoch e is a pure
                                                       # function of (seed, e, i), so training resumes exactly
    sampler = PretrainingSampler(ds, num_replicas=world, rank=rank, seed=s, batch_size=b, accumulation=k)
    sampler.set_epoch(e, offset)                       # epoch e's order from position `offset` (resume)
    loader = pretraining_loader(ds, sampler)           # DataLoader: micro-batches of b, collate_pretraining
    evaluation_loader(ev, b, max_batches, rank, world) # the first held-out batches, dealt to the ranks
    text_eval_dataset(FILE, tokenizer)                 # plain text -> a fixed MLM probe (no sentence labels)

The order is one definition, here: epoch e is a permutation seeded by (seed, e) (`epoch_permutation`), read
in global batches of b * k * world examples; slot `rank * k + micro` of a global batch is micro-batch
`micro` of `rank`, so 2 processes without accumulation and 1 process with 2 accumulation steps read the same
micro-batches. The examples past the last full global batch wait for the next epoch's permutation. The
padding is one definition too: `collate_pretraining`, for training and evaluation batches alike.

Dynamic masking (the default) draws the whole-word n-gram masks of `albert_lm.data.masking` when an item is read,
from a generator seeded by (data seed, epoch, index): new masks every epoch (RoBERTa's finding), the same
masks when a run is resumed. Call `set_epoch` on the dataset before each epoch (the sampler's `set_epoch`
does it for you). DataLoader workers copy the dataset when an iteration starts, so `pretraining_loader`
never keeps them across epochs (`persistent_workers=True` would keep the epoch they started with).

Shards are opened with `np.load(mmap_mode="r")`, so a Dataset costs a few file handles, not the data,
and pickles cheaply to DataLoader workers.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from albert_lm.data.examples import DataConfig
from albert_lm.data.masking import IGNORE_INDEX, mask_sequence
from albert_lm.files import InputError, file_sha256, read_json_object
from albert_lm.hints import legacy_encoding_hint

logger = logging.getLogger(__name__)

_DYNAMIC_STREAM = 7  # keeps mask draws apart from the creation draws made with the same seed


class PretrainingDataset(Dataset):
    """Map-style dataset over the shards of one split of a pretraining data folder."""

    def __init__(
        self,
        path: str | os.PathLike,
        split: str = "train",
        epoch: int = 0,
        masked_lm_prob: float | None = None,
        max_predictions_per_seq: int | None = None,
    ) -> None:
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not self.path.is_dir():
            raise FileNotFoundError(
                f"{self.path}: no such folder (expected the output of `albert data create`)"
                if not self.path.exists()
                else f"{self.path}: not a folder (expected the output of `albert data create`)"
            )
        if not manifest_file.is_file():
            raise FileNotFoundError(
                f"{self.path}: no manifest.json; not a finished `albert data create` output (an interrupted "
                "run leaves none: rerun the command to finish it)"
            )
        self.manifest = read_json_object(manifest_file, "manifest")
        if split not in self.manifest["splits"]:
            raise ValueError(f"split {split!r}: expected one of {sorted(self.manifest['splits'])}")
        self.split = split
        self.config = DataConfig.from_dict(self.manifest["config"])
        self.objective: str = self.manifest["objective"]
        self.masking: str = self.manifest["masking"]
        if masked_lm_prob is not None or max_predictions_per_seq is not None:
            self.config = self._remasked(masked_lm_prob, max_predictions_per_seq)
        self.max_seq_length: int = self.manifest["max_seq_length"]
        self.vocab_size: int = self.manifest["tokenizer"]["vocab_size"]
        self.tokenizer_path = self.path / self.manifest["tokenizer"]["file"]
        self.epoch = epoch
        self.word_start = _load_array(self.path / "word_start.npy")
        self._shard_dirs = [self.path / s["dir"] for s in self.manifest["splits"][split]["shards"]]
        counts = [s["examples"] for s in self.manifest["splits"][split]["shards"]]
        self._cum = [0, *np.cumsum(counts, dtype=np.int64).tolist()]  # ints even for a split with no shards
        self._shards: list[dict[str, np.ndarray] | None] = [None] * len(self._shard_dirs)
        self._checksums = [s.get("sha256", {}) for s in self.manifest["splits"][split]["shards"]]

    def _remasked(self, prob: float | None, cap: int | None) -> DataConfig:
        """This data's config with another masking rate and cap (dynamic masking draws them when an item
        is read, so a run can mask more than the data was made for). Without a cap the data's is scaled by
        the ratio of the rates, rounded up: 10 at 15% becomes 27 at 40%."""
        if self.masking != "dynamic":
            raise ValueError(
                f"{self.path}: masked_lm_prob / max_predictions_per_seq can only change dynamically masked "
                "data; this folder was made with --masking static (its masks are stored): recreate it with "
                "--masking dynamic, or pass --masked-lm-prob to `albert data create` instead"
            )
        data = self.config
        prob = data.masked_lm_prob if prob is None else prob
        if cap is None and data.masked_lm_prob > 0:
            cap = math.ceil(data.max_predictions_per_seq * prob / data.masked_lm_prob - 1e-9)
        elif cap is None:
            cap = max(1, math.ceil(data.max_seq_length * prob))
        config = dataclasses.replace(data, masked_lm_prob=prob, max_predictions_per_seq=cap)
        config.validate()
        return config

    def verify(self) -> None:
        """Check the tokenizer and this split's shard files against the manifest's sha256: a damaged or
        replaced file is an error that names it (pretraining calls this before its first step)."""
        expected = self.manifest["tokenizer"].get("sha256")
        if expected and file_sha256(self.tokenizer_path) != expected:
            raise ValueError(
                f"{self.tokenizer_path}: not the tokenizer this data was made with (its sha256 differs from "
                f"{self.path / 'manifest.json'}); the token ids belong to that one: restore it or recreate the data"
            )
        files = self.manifest.get("files")
        if files is None:  # made before the manifest listed these files: check what they must hold
            self._verify_unlisted()
        listed = [(self.path, files or {}), *zip(self._shard_dirs, self._checksums, strict=True)]
        for folder, checksums in listed:
            for name, sha in checksums.items():
                self._check_file(folder / name, sha)

    def _check_file(self, file: Path, sha: str) -> None:
        """`file` exists and has the sha256 the manifest lists for it."""
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: missing (listed in {self.path / 'manifest.json'}); the `albert data create` command "
                "that made the data, given again, makes it again"
            )
        if file_sha256(file) != sha:
            raise ValueError(
                f"{file}: damaged or changed (sha256 differs from {self.path / 'manifest.json'}); make the "
                "data again: the `albert data create` command that made it, with --overwrite"
            )

    def _verify_unlisted(self) -> None:
        """Data of an older version, whose manifest has no "files": word_start.npy must be the table of
        its tokenizer, and tokenizer_config.json must keep the manifest's lower-casing."""
        from albert_lm.data.masking import word_start_table
        from albert_lm.data.tokenizer import AlbertTokenizer

        tok = AlbertTokenizer.from_pretrained(self.path)
        pieces = tok.pieces
        file = self.path / "word_start.npy"
        if not any(np.array_equal(self.word_start, word_start_table(pieces, ref)) for ref in (False, True)):
            raise ValueError(
                f"{file}: damaged or changed (not the word starts of {self.tokenizer_path}); recreate the "
                "data with `albert data create`"
            )
        for key in ("do_lower_case", "keep_accents", "remove_space"):
            made = self.manifest["tokenizer"].get(key)
            if made is not None and getattr(tok, key) != made:
                raise ValueError(
                    f"{self.path / 'tokenizer_config.json'}: {key} {getattr(tok, key)}, but the data was "
                    f"made with {made} ({self.path / 'manifest.json'}); restore it or recreate the data"
                )

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


def _load_array(file: Path) -> np.ndarray:
    """A .npy file of a data folder; a missing or unreadable one is an error naming it."""
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing; recreate the data with `albert data create`")
    try:
        return np.load(file)
    except (ValueError, OSError, EOFError) as e:
        raise InputError(
            file, f"not a readable .npy array (damaged?): {e}; recreate the data with `albert data create`"
        ) from None


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order of epoch `epoch`: a permutation of range(n), a pure function of (n, seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g)


class PretrainingSampler(Sampler[int]):
    """The examples one of `num_replicas` ranks reads, in the order it reads them.

    Epoch e's order (`epoch_permutation`, or range(n) without `shuffle`) is read in global batches of
    `batch_size * accumulation * num_replicas` examples from position `offset` (0 unless resuming). Slot
    `rank * accumulation + micro` of a global batch (`batch_size` examples) is micro-batch `micro` of
    `rank`: W=2, K=1 and W=1, K=2 read the same micro-batches, and no two ranks ever read the same example
    (torch's DistributedSampler pads with repeats instead). The examples past the last full global batch
    wait for the next epoch's permutation. Read it in batches of `batch_size`: `pretraining_loader`.
    """

    def __init__(
        self,
        dataset: Dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        batch_size: int = 1,
        accumulation: int = 1,
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
        if batch_size < 1 or accumulation < 1:
            raise ValueError(f"batch_size and accumulation must be >= 1, got {batch_size}, {accumulation}")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.batch_size, self.accumulation = batch_size, accumulation
        self.epoch, self.offset = 0, 0

    @property
    def global_batch(self) -> int:
        """Examples per optimizer step, all ranks and micro-batches together."""
        return self.batch_size * self.accumulation * self.num_replicas

    def set_epoch(self, epoch: int, offset: int = 0) -> None:
        """Read epoch `epoch` from position `offset` of its order (the dataset's epoch follows)."""
        self.epoch, self.offset = epoch, offset
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def epoch_ends_before(self, offset: int) -> bool:
        """Whether no full global batch is left at `offset`: the next step reads the next epoch."""
        return offset + self.global_batch > len(self.dataset)  # type: ignore[arg-type]

    def _starts(self) -> range:
        """Where this epoch's remaining full global batches start in its order."""
        n = len(self.dataset)  # type: ignore[arg-type]
        return range(self.offset, n - self.global_batch + 1, self.global_batch)

    def __len__(self) -> int:
        return len(self._starts()) * self.batch_size * self.accumulation

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)  # type: ignore[arg-type]
        order = epoch_permutation(n, self.seed, self.epoch) if self.shuffle else torch.arange(n)
        per_rank = self.batch_size * self.accumulation  # this rank's slots of a global batch are adjacent
        first = self.rank * per_rank
        mine = [order[s + first : s + first + per_rank] for s in self._starts()]
        return iter(torch.cat(mine).tolist() if mine else [])


def collate_pretraining(
    batch: Sequence[dict[str, torch.Tensor]], pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """Stack items, padding to the longest in the batch (dynamic padding): (B, T_max) int64 tensors.

    Padding: input_ids `pad_token_id`, token_type_ids 0, attention_mask 0, labels IGNORE_INDEX.
    `sentence_order_label` (B,) when the items have one (plain-text evaluation items do not).
    """
    if not batch:
        raise ValueError("collate_pretraining: an empty batch; expected at least one item")
    width = max(len(item["input_ids"]) for item in batch)
    pad_values = {"input_ids": pad_token_id, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE_INDEX}
    out = {}
    for key, value in pad_values.items():
        rows = torch.full((len(batch), width), value, dtype=torch.long)  # (B, T)
        for b, item in enumerate(batch):
            rows[b, : len(item[key])] = item[key]
        out[key] = rows
    if "sentence_order_label" in batch[0]:
        labels = [item["sentence_order_label"].long().view(()) for item in batch]
        out["sentence_order_label"] = torch.stack(labels)  # (B,)
    return out


def pretraining_loader(
    dataset: Dataset, sampler: PretrainingSampler, num_workers: int = 0, pin_memory: bool = False
) -> DataLoader:
    """Micro-batches of `sampler.batch_size` in the sampler's order, padded by `collate_pretraining`.

    Workers start afresh with each iteration (after `sampler.set_epoch`), so they read the right epoch.
    The loader draws its workers' base seed from its own generator, never from torch's global one: making
    an iterator must not move the RNG stream that dropout draws from, or a resumed run would drift.
    """
    return DataLoader(
        dataset,
        batch_size=sampler.batch_size,
        sampler=sampler,
        collate_fn=collate_pretraining,
        num_workers=num_workers,
        pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(sampler.seed),
    )


def evaluation_loader(
    dataset: Dataset, batch_size: int, max_batches: int, rank: int = 0, world: int = 1
) -> DataLoader:
    """The first `max_batches` batches of `dataset` in order, dealt out to the ranks in turn (the last
    batch may be short), padded by `collate_pretraining`. Like `pretraining_loader`, it leaves torch's
    global generator alone."""
    n = len(dataset)  # type: ignore[arg-type]
    starts = range(rank * batch_size, min(n, max_batches * batch_size), world * batch_size)
    batches = [list(range(i, min(i + batch_size, n))) for i in starts]
    return DataLoader(
        dataset, batch_sampler=batches, collate_fn=collate_pretraining, generator=torch.Generator()
    )


def text_eval_dataset(
    path: str | os.PathLike, tokenizer: Any, seq_length: int = 128, max_sequences: int = 256, seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """Out-of-domain MLM examples from plain text: consecutive [CLS] chunk [SEP] windows, 15% of the
    pieces replaced by [MASK] (single pieces, always [MASK]: a fixed, simple probe, not the training
    recipe's n-gram 80/10/10 masking). Same file and seed, same examples. Items as `PretrainingDataset`'s,
    without `sentence_order_label`."""
    file = Path(path)
    if file.is_dir():
        raise IsADirectoryError(f"--eval-text {file}: is a folder; expected one text file of held-out text")
    if not file.is_file():
        raise FileNotFoundError(f"--eval-text {file}: no such file")
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            file,
            f"not UTF-8 text (byte {e.start}); --eval-text takes a plain-text file"
            + legacy_encoding_hint(raw[: 1 << 20], file),
        ) from None
    if "\0" in text:
        raise InputError(
            file, f"NUL byte at {text.index(chr(0))}: not text; --eval-text takes a plain-text file"
        )
    lines = [ln for ln in text.splitlines() if ln.strip()]
    ids = [i for row in tokenizer.encode_batch(lines) for i in row]
    rng = np.random.default_rng(seed)
    body = seq_length - 2
    items = []
    for start in range(0, len(ids) - body + 1, body):
        piece = torch.tensor(ids[start : start + body], dtype=torch.long)
        n_mask = max(1, round(0.15 * body))
        pos = torch.from_numpy(rng.choice(body, size=n_mask, replace=False)).long()
        labels = torch.full((seq_length,), IGNORE_INDEX, dtype=torch.long)
        labels[pos + 1] = piece[pos]
        piece[pos] = tokenizer.mask_token_id
        input_ids = torch.cat(
            [torch.tensor([tokenizer.cls_token_id]), piece, torch.tensor([tokenizer.sep_token_id])]
        )
        items.append(
            {
                "input_ids": input_ids,
                "token_type_ids": torch.zeros(seq_length, dtype=torch.long),
                "attention_mask": torch.ones(seq_length, dtype=torch.long),
                "labels": labels,
            }
        )
        if len(items) >= max_sequences:
            break
    if not items:
        raise InputError(
            file,
            f"{len(ids)} tokens, fewer than one evaluation sequence's {body}; --eval-text takes a longer text",
        )
    return items
