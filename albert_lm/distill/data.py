"""The text of general distillation: sentences from plain-text files, the held-out ones, the student's
token ids, and batches.

Sentences are read with albert-lm's corpus readers (`albert_lm.data.corpus`: `--format auto` per file,
`--strip-gutenberg`, the same input checks as `albert data create`), whitespace collapsed, kept from
`min_words` words (a character counted as a word in Chinese, Japanese, Thai), cut at MAX_WORDS words,
each distinct sentence once, up to `max_segments`. They depend on the files and these settings only, not
on the student, so every student on the same text shares one teacher cache entry. The held-out sentences
are chosen by content (the smallest hashes), so the same ones are held out whatever the seed or the order
of the files.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.data.corpus import (
    ReadStats,
    input_formats,
    iter_documents,
    plan_blocks,
    warn_gutenberg_markers,
)
from albert_lm.data.masking import IGNORE_INDEX, mask_sequence
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.unspaced import word_count
from albert_lm.files import InputError
from albert_lm.progress import progress_bar
from albert_lm.tasks.glue import GLUE_TASKS, read_glue_tsv
from albert_lm.tasks.metrics import pearson_spearman

logger = logging.getLogger(__name__)

BLOCK_BYTES = 1 << 20
MAX_WORDS = 96  # a longer "sentence" (a list, a table, an unsplit paragraph) is cut: both models truncate


def read_sentences(
    files: Sequence[str | os.PathLike],
    input_format: str,
    *,
    strip_gutenberg: bool,
    min_words: int,
    max_segments: int,
    progress: bool = True,
) -> list[str]:
    """Distinct sentences of the files, in reading order (module docstring). None: a clear error."""
    if not files:
        raise ValueError("no text: give --text FILE ... (plain-text files to distil on)")
    blocks = plan_blocks(files, BLOCK_BYTES, strip_gutenberg)
    warn_gutenberg_markers(files, strip_gutenberg)
    formats = input_formats(blocks, input_format)
    seen: set[bytes] = set()
    out: list[str] = []
    stats = ReadStats()
    bar = progress_bar(show=progress, total=max_segments, desc="reading text", unit="sentence")
    for block in blocks:
        for doc in iter_documents(block, formats[block.path], stats):
            for raw in doc:
                words = raw.split()
                if len(words) < min_words and word_count(raw) < min_words:  # Chinese: characters
                    continue
                sentence = " ".join(words[:MAX_WORDS])
                key = hashlib.blake2b(sentence.encode("utf-8", "surrogatepass"), digest_size=12).digest()
                if key not in seen:
                    seen.add(key)
                    out.append(sentence)
                    bar.update(1)
                if len(out) >= max_segments:
                    bar.close()
                    return _counted(out, files, stats)
    bar.close()
    if not out:
        names = ", ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
        raise InputError(
            names,
            f"no sentence of at least {min_words} words in the text given (--min-words){left_out(stats)}",
        )
    return _counted(out, files, stats)


def left_out(stats: ReadStats) -> str:
    """The records a reading left out for want of text (JSON Lines or Parquet records whose text field is
    null or empty), in words for its summary line ("" where none was)."""
    n = stats.without_text
    return f"; {n} record{'s' if n != 1 else ''} with a null or empty text field left out" if n else ""


def _counted(sentences: list[str], files: Sequence[str | os.PathLike], stats: ReadStats) -> list[str]:
    """`sentences`, the reading's summary logged: how many, from how many files, and the records left out
    for want of text (JSON Lines or Parquet records whose text field is null or empty), never silently."""
    logger.info("read %d distinct sentences from %d file(s)%s", len(sentences), len(files), left_out(stats))
    return sentences


def held_out(sentences: Sequence[str], count: int) -> np.ndarray:
    """(len(sentences),) bool: the `count` sentences with the smallest hashes (at most a tenth)."""
    n = min(count, len(sentences) // 10)
    keys = np.array(
        [
            int.from_bytes(hashlib.sha256(s.encode("utf-8", "surrogatepass")).digest()[:8], "big")
            for s in sentences
        ],
        dtype=np.uint64,
    )
    mask = np.zeros(len(sentences), dtype=bool)
    if n:
        mask[np.argsort(keys, kind="stable")[:n]] = True
    return mask


@dataclass
class Encoded:
    """The student's token ids of many texts, back to back: text i is ids[starts[i]:starts[i] + lengths[i]]
    (no [CLS] / [SEP]; truncated when batched)."""

    ids: np.ndarray  # (total,) int32
    starts: np.ndarray  # (N,) int64
    lengths: np.ndarray  # (N,) int64

    @classmethod
    def of(cls, tokenizer: AlbertTokenizer, texts: Sequence[str], chunk: int = 50_000) -> Encoded:
        parts, lens = [], []
        for i in range(0, len(texts), chunk):  # SentencePiece's batch call, a bounded list at a time
            flat, n = tokenizer.encode_flat(texts[i : i + chunk])
            parts.append(flat)
            lens.append(n)
        lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
        ids = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return cls(ids, starts, lengths)

    def row(self, i: int, limit: int) -> np.ndarray:
        return self.ids[self.starts[i] : self.starts[i] + min(int(self.lengths[i]), limit)]


def collate_ids(rows: Sequence[np.ndarray], cls_id: int, sep_id: int, pad_id: int) -> dict[str, torch.Tensor]:
    """[CLS] row [SEP], padded to the batch's longest: input_ids and attention_mask (B, S)."""
    width = max(len(r) for r in rows) + 2
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for b, r in enumerate(rows):
        ids[b, : len(r) + 2] = [cls_id, *r.tolist(), sep_id]
        mask[b, : len(r) + 2] = 1
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}


class Masker:
    """Whole-word n-gram masking of a batch (as pretraining masks), drawn from a generator per step."""

    def __init__(self, tokenizer: AlbertTokenizer, prob: float) -> None:
        self.word_start, self.vocab, self.prob = tokenizer.word_start_table(), tokenizer.vocab_size, prob
        self.special = (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
        self.mask_id = tokenizer.mask_token_id

    def __call__(
        self, input_ids: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked input ids, labels: the original ids at masked positions, IGNORE_INDEX elsewhere)."""
        ids = input_ids.numpy()
        masked, labels = ids.copy(), np.full_like(ids, IGNORE_INDEX)
        for b in range(len(ids)):
            n = int((ids[b] != self.special[2]).sum())
            cap = max(1, int(np.ceil(n * self.prob)))
            new, pos, lab = mask_sequence(
                ids[b, :n],
                self.word_start,
                rng,
                self.vocab,
                self.prob,
                cap,
                mask_id=self.mask_id,
                special_ids=self.special[:2],
            )
            masked[b, :n], labels[b, pos] = new, lab
        return torch.from_numpy(masked), torch.from_numpy(labels)


def read_sts(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """STS-B pairs (a GLUE STS-B dev.tsv, or its folder): (first sentences, second ones, gold scores)."""
    file = Path(path)
    if file.is_dir():
        file = next(
            (f for f in (file / "dev.tsv", file / "STS-B" / "dev.tsv") if f.is_file()), file / "dev.tsv"
        )
    examples = read_glue_tsv(file, GLUE_TASKS["stsb"])
    return (
        [e.text_a for e in examples],
        [e.text_b or "" for e in examples],
        np.array([float(e.label) for e in examples if e.label is not None], dtype=np.float64),
    )


def sts_pairs(path: str | os.PathLike) -> dict[str, Any]:
    """STS-B's sentences (each once), its pairs as row indices, its gold scores (read before the teacher
    runs, so a bad file is named at once)."""
    try:
        first, second, gold = read_sts(path)
    except (FileNotFoundError, ValueError) as e:  # named by the option it came from
        raise (FileNotFoundError if isinstance(e, FileNotFoundError) else ValueError)(f"--sts: {e}") from None
    sentences = sorted(set(first) | set(second))
    row = {s: i for i, s in enumerate(sentences)}
    pairs = [np.array([row[s] for s in side]) for side in (first, second)]
    return {"sentences": sentences, "first": pairs[0], "second": pairs[1], "gold": gold}


def sts_scores(vectors: np.ndarray, sts: dict[str, Any]) -> dict[str, float]:
    """Spearman and Pearson (x1, as GLUE's STS-B metric) of the pairs' cosines against the gold scores."""
    norm = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    a, b = norm[sts["first"]], norm[sts["second"]]
    scores = pearson_spearman((a * b).sum(1).tolist(), sts["gold"].tolist())
    return {"sts_spearman": scores["spearman"], "sts_pearson": scores["pearson"]}
