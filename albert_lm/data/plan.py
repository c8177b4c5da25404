"""The plan of `albert data create`, made before any text is read in full: the inputs cut into blocks, the
format each file is read in, the held-out split, and the shards, with a hash of all that (`plan_id`) that
tells a rerun of the same command (resume) from another.

The held-out split is a seeded choice of whole blocks, so no text is shared between the splits. On a
small corpus whole ~1 MiB blocks are too coarse for the fraction asked (one block of two is 50%, for an
`--eval-fraction 0.01`): when the share they give is more than 2x off, the split is drawn again on
blocks of about an eighth of the held-out text (at least 1 KiB; a blank-line-delimited document or
paragraph at the least), and the training blocks next to each other are joined back up to the block
size, so documents (a block, in "paragraphs" format) stay as long as before except at the held-out
holes. A corpus large enough for its blocks keeps the plan it always had.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass

import numpy as np

from albert_lm.data.corpus import input_formats, plan_blocks
from albert_lm.data.examples import DataConfig
from albert_lm.data.sources import Block

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
SPLITS = ("train", "eval")
HELD_OUT_PIECES = 8  # blocks a redrawn split holds out: the share then lands within ~1/8 of the one asked
MIN_PIECE_BYTES = 1 << 10  # a held-out piece holds at least a few sentences, so it gives examples
# DataConfig fields added after FORMAT_VERSION 1, with their defaults
ADDED_FIELDS = {"text_column": "text"}
FAR = 2.0  # a held-out share more than this factor off the one asked is redrawn, then warned about


@dataclass
class Plan:
    """Which blocks go to which shard of which split, and how each file is read."""

    shards: dict[str, list[list[Block]]]
    """split -> shards -> blocks"""
    formats: dict[str, str]
    """input file -> "lines" or "paragraphs" (`input_format` resolved)"""
    eval_share: float
    """share of the input bytes held out"""
    split_block_bytes: int
    """size of the blocks the held-out split was drawn on (below block_bytes on a small corpus)"""


def plan_shards(inputs: list[str], cfg: DataConfig) -> Plan:
    """Blocks of the inputs, each file's format, a seeded choice of held-out blocks, and consecutive
    blocks grouped into shards."""
    blocks = plan_blocks(inputs, cfg.block_bytes, cfg.strip_gutenberg, cfg.text_column)
    if not blocks:
        raise ValueError(
            f"no text in {_named(inputs)} (after stripping Gutenberg headers: {cfg.strip_gutenberg})"
        )
    formats = input_formats(blocks, cfg.input_format, cfg.text_column)
    blocks, eval_ids, unit = _held_out(inputs, blocks, cfg)
    share = _share(blocks, eval_ids)
    if cfg.eval_fraction > 0 and not _near(share, cfg.eval_fraction):
        logger.warning(
            "held out %.2f%% of the text for evaluation where --eval-fraction %g asked for %.2f%%: %s",
            100 * share,
            cfg.eval_fraction,
            100 * cfg.eval_fraction,
            _why_far(blocks, unit),
        )
    shards: dict[str, list[list[Block]]] = {}
    for split in SPLITS:
        shards[split] = []
        size = 0
        for k, b in enumerate(blocks):
            if (k in eval_ids) != (split == "eval"):
                continue
            if not shards[split] or size + b.nbytes > cfg.shard_bytes:
                shards[split].append([])
                size = 0
            shards[split][-1].append(b)
            size += b.nbytes
    return Plan(shards, formats, share, unit)


def _held_out(inputs: list[str], blocks: list[Block], cfg: DataConfig) -> tuple[list[Block], set[int], int]:
    """The blocks, the indices of the held-out ones, and the block size the choice was made on: `blocks`
    themselves when their share is near the one asked, else finer blocks (see the module docstring)."""
    eval_ids = _choose(len(blocks), cfg)
    if cfg.eval_fraction == 0 or _near(_share(blocks, eval_ids), cfg.eval_fraction):
        return blocks, eval_ids, cfg.block_bytes
    total = sum(b.nbytes for b in blocks)
    unit = max(MIN_PIECE_BYTES, int(cfg.eval_fraction * total / HELD_OUT_PIECES))
    if unit >= cfg.block_bytes:
        return blocks, eval_ids, cfg.block_bytes
    fine = plan_blocks(inputs, unit, cfg.strip_gutenberg, cfg.text_column)
    joined, joined_ids = _join(fine, _choose(len(fine), cfg), cfg.block_bytes)
    logger.info(
        "held-out split drawn on %d blocks of ~%d bytes: %.2f%% of the text held out (drawn on the %d blocks "
        "of up to ~%d bytes it would have been %.2f%%)",
        len(fine),
        unit,
        100 * _share(joined, joined_ids),
        len(blocks),
        cfg.block_bytes,
        100 * _share(blocks, eval_ids),
    )
    return joined, joined_ids, unit


def _choose(n: int, cfg: DataConfig) -> set[int]:
    """A seeded choice of round(eval_fraction * n) of n blocks (at least one when eval_fraction > 0 and
    there are two blocks or more)."""
    n_eval = max(1, round(cfg.eval_fraction * n)) if cfg.eval_fraction > 0 and n > 1 else 0
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 99]))
    return set(rng.choice(n, size=n_eval, replace=False).tolist()) if n_eval else set()


def _join(blocks: list[Block], eval_ids: set[int], limit: int) -> tuple[list[Block], set[int]]:
    """Adjacent blocks of one file and one split joined while they stay within `limit` bytes."""
    out: list[Block] = []
    out_eval: set[int] = set()
    for k, b in enumerate(blocks):
        last = out[-1] if out else None
        held = k in eval_ids
        if (
            last is not None
            and last.path == b.path
            and last.end == b.start
            and ((len(out) - 1) in out_eval) == held
            and last.nbytes + b.nbytes <= limit
        ):
            out[-1] = Block(b.path, last.start, b.end)
            continue
        if held:
            out_eval.add(len(out))
        out.append(b)
    return out, out_eval


def _named(inputs: list[str]) -> str:
    return ", ".join(inputs[:3]) + (f" and {len(inputs) - 3} more files" if len(inputs) > 3 else "")


def _share(blocks: list[Block], eval_ids: set[int]) -> float:
    total = sum(b.nbytes for b in blocks)
    return sum(blocks[k].nbytes for k in eval_ids) / total if total else 0.0


def _near(share: float, fraction: float) -> bool:
    return fraction / FAR <= share <= fraction * FAR


def _why_far(blocks: list[Block], unit: int) -> str:
    if len(blocks) < 2:
        return "the text is one block, which cannot be split; give more text, or --eval-fraction 0"
    return (
        f"the text ({sum(b.nbytes for b in blocks)} bytes) is held out in whole blocks of about {unit} bytes "
        "or more (cut at blank lines); give more text, or another --eval-fraction"
    )


def plan_id(plan: Plan, cfg: DataConfig, tokenizer_sha: str) -> str:
    """Hash of everything the output bytes depend on: settings, tokenizer, and each block's file and range
    (and, under --format auto, the format each file was given)."""
    files = sorted({b.path for shards in plan.shards.values() for s in shards for b in s})
    stamp = {f: (os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files}  # an edited input is a new plan
    config = asdict(cfg)
    for name, default in ADDED_FIELDS.items():  # hashed only when set: older outputs still resume
        if config.get(name) == default:
            del config[name]
    desc = {
        "config": config,
        "tokenizer": tokenizer_sha,
        "files": stamp,
        "plan": {k: [[(b.path, b.start, b.end) for b in s] for s in v] for k, v in plan.shards.items()},
        "version": FORMAT_VERSION,
    }
    if cfg.input_format == "auto":  # explicit formats hash as they always did: old outputs still resume
        desc["formats"] = plan.formats
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
