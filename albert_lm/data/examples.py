"""ALBERT's pretraining examples from documents of tokenized sentences (paper sections 3.1 and 4.1).

Follows google-research/albert `create_pretraining_data.py` (`create_instances_from_document`,
`truncate_seq_pair`):
- a target length of max_seq_length - 3 tokens, or with probability `short_seq_prob` (0.1) a shorter one
  drawn uniformly from [2, max_seq_length - 3];
- sentences of one document are gathered until the target is reached; A is the first `a_end` of them,
  `a_end` uniform in [1, sentences - 1], and B the rest;
- SOP (the paper's objective): A and B swapped with probability 0.5, `sentence_order_label` 1 when swapped;
  NSP (BERT's, for the paper's comparison): with probability 0.5 B is taken from a random other document
  (label 1) and the unused sentences are put back;
- `[CLS] A [SEP] B [SEP]`, token type 0 up to the first [SEP], 1 after; pairs over the limit lose one
  token at a time from the longer side, from the front or the back with probability 0.5 each.

The reference's quirks, and what we do instead:
- the short target is drawn once per *document*, so a long document gets either all-short or no short
  examples, and about 10% of documents (not of examples) are short: we draw it for every example;
- a chunk of one sentence (a sentence longer than the target, or a document's last) always gets a B from
  a random other document and label "random", even in SOP mode, which then teaches the SOP head a third,
  topic-based signal: in SOP mode we add the document's next sentence to such a chunk, and drop (and
  count) a lone sentence that ends its document; we never mix documents in SOP mode;
- the "other" document is searched with 10 random tries and may still be the same document: we draw
  uniformly from the other documents;
- the random generator (Python's `random.Random`) is shared by all input files in the parallel mode, so
  every file sees the same stream: each shard here has its own `numpy.random.Generator`, seeded by
  (seed, split, shard index);
- all documents and instances of the corpus are held in memory and shuffled together: we hold one shard,
  shuffle the examples within it, and leave the global shuffle to the training sampler;
- truncation draws front-or-back per removed token in a Python loop: we draw the counts from the same
  binomial distribution at once.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from albert_lm.data.masking import UniformStream, mask_sequence
from albert_lm.settings import check_fields, check_ranges
from albert_lm.values import documented

logger = logging.getLogger(__name__)

OBJECTIVES = ("sop", "nsp")
MASKINGS = ("dynamic", "static")
INPUT_FORMATS = ("auto", "lines", "paragraphs")  # "auto": `albert_lm.data.corpus.guess_format` per file
TOKEN_DTYPE = np.dtype(np.uint16)  # vocabularies up to 65536 pieces; larger ones use int32


@documented
@dataclass
class DataConfig:
    """Settings of `albert data create`; the paper's (and google-research's) defaults. Saved in the manifest."""

    max_seq_length: int = 512
    """tokens per example, [CLS] and the two [SEP]s included"""
    objective: str = "sop"
    """sentence-level objective: "sop" (ALBERT) or "nsp" (BERT)"""
    masking: str = "dynamic"
    """"dynamic": masks drawn when an example is read, new each epoch; "static": fixed at creation"""
    dupe_factor: int = 1
    """times each document is turned into examples (with other splits and, if static, other masks)"""
    short_seq_prob: float = 0.1
    """probability of a target shorter than max_seq_length"""
    masked_lm_prob: float = 0.15
    """fraction of tokens masked"""
    max_predictions_per_seq: int = 20
    """cap on masked tokens per example (google-research's default)"""
    max_ngram: int = 3
    """longest masked n-gram, in words; p(n) proportional to 1/n"""
    seed: int = 12345
    """seed of every random draw"""
    input_format: str = "auto"
    """"lines": one sentence per line, blank line between documents; "paragraphs": raw text (wrapped
    prose, or a paragraph per line); "auto": chosen for each file from its first 256 KiB"""
    strip_gutenberg: bool = False
    """keep only the text between Project Gutenberg's START and END markers of the books that have them
    (other files are read whole)"""
    eval_fraction: float = 0.01
    """share of the input text held out for evaluation, in whole blocks (smaller ones on a small corpus)"""
    block_bytes: int = 1 << 20
    """input is cut into blocks of about this many bytes at blank lines (unit of reading and of the split)"""
    shard_bytes: int = 4 << 20
    """input bytes per output shard (a worker holds one shard in memory)"""
    skip_invalid_utf8: bool = False
    """skip (and count) lines that are not UTF-8 instead of failing"""
    max_line_bytes: int = 1 << 20
    """longest accepted input line (default 1048576 = 1 MiB; a JSON Lines record may be 64 times longer)"""
    text_column: str = "text"
    """field of JSON Lines records and column of Parquet files that holds the text"""

    def validate(self) -> None:
        check_fields(self, "data settings")
        check_ranges(
            self,
            "data settings",
            length=("max_seq_length", "max_predictions_per_seq", "max_ngram"),
            repeats=("dupe_factor",),
            seed=("seed",),
        )
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length {self.max_seq_length}: expected at least 8")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r}: expected one of {OBJECTIVES}")
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"input_format {self.input_format!r}: expected one of {INPUT_FORMATS}")
        if self.masking not in MASKINGS:
            raise ValueError(f"masking {self.masking!r}: expected one of {MASKINGS}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor {self.dupe_factor}: expected >= 1")
        for name in ("short_seq_prob", "masked_lm_prob", "eval_fraction"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} {getattr(self, name)}: expected a probability in [0, 1)")
        for name in ("max_predictions_per_seq", "max_ngram"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} {getattr(self, name)}: expected >= 1")
        if self.seed < 0:  # numpy's seeds are non-negative
            raise ValueError(f"seed {self.seed}: expected >= 0")
        if self.block_bytes < 1024 or self.shard_bytes < self.block_bytes:
            raise ValueError("block_bytes must be >= 1024 and shard_bytes >= block_bytes")
        if self.max_line_bytes < 1:
            raise ValueError(f"max_line_bytes {self.max_line_bytes}: expected at least 1")
        if not self.text_column:
            raise ValueError("text_column: expected the name of a field, got an empty string")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> DataConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class ExampleStats:
    """Counts for the summary and the manifest (summed over shards)."""

    documents: int = 0
    sentences: int = 0
    examples: int = 0
    tokens: int = 0
    masked_tokens: int = 0
    label_ones: int = 0  # swapped (SOP) or random-next (NSP) pairs
    short_targets: int = 0
    dropped_lone_sentences: int = 0

    def add(self, other: ExampleStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class Document:
    """A document's token ids back to back (no special tokens); sentence s is
    `tokens[bounds[s]:bounds[s + 1]]`. Slices of one array, so segments are views, never copies."""

    tokens: np.ndarray
    bounds: list[int]

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sequence[int]], dtype: np.dtype = TOKEN_DTYPE) -> Document:
        """One document from its sentences' ids; empty sentences are dropped."""
        lens = [len(x) for x in sentences if len(x)]
        tokens = np.fromiter(itertools.chain.from_iterable(sentences), dtype=dtype, count=sum(lens))
        return cls(tokens, [0, *itertools.accumulate(lens)])

    @classmethod
    def from_flat(cls, tokens: np.ndarray, lengths: np.ndarray) -> Document:
        """One document from `AlbertTokenizer.encode_flat` output; empty sentences are dropped."""
        return cls(tokens, [0, *np.cumsum(lengths[lengths > 0]).tolist()])

    def __len__(self) -> int:
        return len(self.bounds) - 1


@dataclass
class ExampleBuffer:
    """Examples of one shard, in creation order: token rows with [CLS]/[SEP], A lengths, labels."""

    rows: list[np.ndarray]
    a_lens: list[int]
    labels: list[int]

    @classmethod
    def empty(cls) -> ExampleBuffer:
        return cls([], [], [])

    def append(self, tokens: np.ndarray, a_len: int, label: int) -> None:
        self.rows.append(tokens)
        self.a_lens.append(a_len)
        self.labels.append(label)


def draw_target(cfg: DataConfig, u: UniformStream) -> tuple[int, bool]:
    """(target length of A + B, whether it is a short one)."""
    max_num_tokens = cfg.max_seq_length - 3
    if u.next() < cfg.short_seq_prob:
        return u.integer(2, max_num_tokens + 1), True
    return max_num_tokens, False


def truncate_pair_randomly(
    a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """google-research `truncate_seq_pair`: trim the longer side one token at a time, front or back at random.

    Pretraining's rule; fine-tuning cuts from the end only (`albert_lm.data.truncation.truncate_pair_from_end`).
    The reference's loop removes from A while len(A) > len(B), else from B; the number removed from each
    side follows from the lengths alone, and the front/back choices are i.i.d. fair coins, so drawing
    each side's front count from Binomial(k, 0.5) gives the same distribution in one call.
    """
    la, lb = len(a), len(b)
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return a, b
    # Longer-side rule in closed form: the longer side is cut down to the other's length (ties go to B),
    # then the cuts alternate B, A, B, ...
    level = min(excess, abs(la - lb))
    rest = excess - level
    from_a = (level if la > lb else 0) + rest // 2
    from_b = (level if lb >= la else 0) + rest - rest // 2
    front_a = int(rng.binomial(from_a, 0.5)) if from_a else 0
    front_b = int(rng.binomial(from_b, 0.5)) if from_b else 0
    return a[front_a : la - (from_a - front_a)], b[front_b : lb - (from_b - front_b)]


def chunk_end(doc: Document, s: int, target: int, objective: str) -> int | None:
    """End (exclusive) of the chunk that starts at sentence `s`: the fewest sentences whose length
    reaches `target`, or the rest of the document.

    In SOP mode a chunk of one sentence takes the next sentence too (B is never another document's);
    None when that lone sentence ends the document (it is dropped).
    """
    n = len(doc)
    k = min(bisect.bisect_left(doc.bounds, doc.bounds[s] + target, s + 1), n)
    if k - s == 1 and objective == "sop":
        if k == n:
            return None
        k += 1
    return k


def random_next(docs: Sequence[Document], d: int, room: int, u: UniformStream) -> np.ndarray:
    """NSP's random B: sentences of a document other than `d` (uniform over the others), from a random
    sentence on, the fewest that reach `room` tokens (or that document's end)."""
    other = u.integer(0, len(docs) - 1)
    other += other >= d  # fix: uniform over the *other* documents
    r = docs[other]
    j0 = u.integer(0, len(r))
    j1 = min(bisect.bisect_left(r.bounds, r.bounds[j0] + room, j0 + 1), len(r))
    return r.tokens[r.bounds[j0] : r.bounds[j1]]


def _append_pair(
    out: ExampleBuffer,
    stats: ExampleStats,
    a: np.ndarray,
    b: np.ndarray,
    label: int,
    short: bool,
    specials: tuple[np.ndarray, np.ndarray],
    dtype: np.dtype,
) -> None:
    """`[CLS] a [SEP] b [SEP]` into `out` and the counts, unless a side is empty."""
    if not (len(a) and len(b)):
        return
    cls, sep = specials
    tokens = np.concatenate([cls, a, sep, b, sep]).astype(dtype, copy=False)
    out.append(tokens, len(a), label)
    stats.examples += 1
    stats.tokens += len(tokens)
    stats.label_ones += label
    stats.short_targets += short


def examples_from_document(
    docs: list[Document],
    d: int,
    cfg: DataConfig,
    rng: np.random.Generator,
    out: ExampleBuffer,
    stats: ExampleStats,
    cls_id: int = 2,
    sep_id: int = 3,
    dtype: np.dtype = TOKEN_DTYPE,
) -> None:
    """Append the examples of document `d` to `out` (google-research `create_instances_from_document`)."""
    doc = docs[d]
    n, cum, toks = len(doc), doc.bounds, doc.tokens
    max_num_tokens = cfg.max_seq_length - 3
    u = UniformStream(rng)  # scalar draws from blocks: one generator call per 64 draws
    target, short = draw_target(cfg, u)
    specials = (np.array([cls_id], dtype), np.array([sep_id], dtype))
    s = 0  # first sentence of the current chunk
    while s < n:
        k = chunk_end(doc, s, target, cfg.objective)  # the chunk: sentences s..k-1
        if k is None:
            stats.dropped_lone_sentences += 1
            break
        size = k - s
        a_end = 1 if size < 2 else u.integer(1, size)
        a = toks[cum[s] : cum[s + a_end]]
        next_s = k
        if cfg.objective == "nsp" and len(docs) > 1 and (size == 1 or u.next() < 0.5):
            b, label = random_next(docs, d, target - len(a), u), 1
            next_s = s + a_end  # put the unused sentences back
        elif size == 1:  # NSP with a single document in the shard: nothing to pair with
            stats.dropped_lone_sentences += 1
            s = k
            continue
        else:
            b, label = toks[cum[s + a_end] : cum[k]], 0
            if cfg.objective == "sop" and u.next() < 0.5:
                a, b, label = b, a, 1
        a, b = truncate_pair_randomly(a, b, max_num_tokens, rng)
        _append_pair(out, stats, a, b, label, short, specials, dtype)
        target, short = draw_target(cfg, u)  # fix: a new target for every example
        s = next_s


def create_examples(
    docs: list[Document],
    cfg: DataConfig,
    rng: np.random.Generator,
    stats: ExampleStats,
    dtype: np.dtype = TOKEN_DTYPE,
) -> ExampleBuffer:
    """Examples of a shard's documents, `dupe_factor` passes, in a shuffled order."""
    out = ExampleBuffer.empty()
    for _ in range(cfg.dupe_factor):
        for d in range(len(docs)):
            examples_from_document(docs, d, cfg, rng, out, stats, dtype=dtype)
    order = rng.permutation(len(out.rows))
    return ExampleBuffer(
        [out.rows[k] for k in order], [out.a_lens[k] for k in order], [out.labels[k] for k in order]
    )


def static_masks(
    buf: ExampleBuffer,
    cfg: DataConfig,
    word_start: np.ndarray,
    vocab_size: int,
    rng: np.random.Generator,
    stats: ExampleStats,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Masked rows, masked positions and original ids of every example (static masking)."""
    rows, positions, labels = [], [], []
    for tokens in buf.rows:
        masked, pos, lab = mask_sequence(
            tokens,
            word_start,
            rng,
            vocab_size,
            cfg.masked_lm_prob,
            cfg.max_predictions_per_seq,
            cfg.max_ngram,
        )
        rows.append(masked)
        positions.append(pos.astype(np.uint16 if cfg.max_seq_length < 65536 else np.int32))
        labels.append(lab)
        stats.masked_tokens += len(pos)
    return rows, positions, labels
