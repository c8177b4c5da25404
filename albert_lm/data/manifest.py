"""manifest.json, written last into a folder of pretraining data: what made it (settings, tokenizer,
inputs) and what it holds (every shard and file with its sha256, the counts), so that a run trusts a
folder only once it is complete and can check every file it reads.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from albert_lm.data.examples import DataConfig, ExampleStats
from albert_lm.data.plan import FORMAT_VERSION, SPLITS, Plan
from albert_lm.data.tokenizer import RULE_KEYS, AlbertTokenizer
from albert_lm.files import InputError, file_sha256

MANIFEST = "manifest.json"
WORD_START = "word_start.npy"
# Files of the folder a pretraining run reads besides the shards: their sha256 is in the manifest's
# "files" (the tokenizer's also under "tokenizer"), checked by `PretrainingDataset.verify`.
# A SentencePiece tokenizer is spiece.model; a WordPiece one (albert_lm.data.wordpiece) tokenizer.json and
# vocab.txt: those the folder holds are listed.
CHECKSUMMED = ("spiece.model", "tokenizer.json", "vocab.txt", "tokenizer_config.json", WORD_START)


def _splits(metas: list[dict]) -> tuple[dict[str, Any], ExampleStats]:
    """Each split's example count and shards (folder, examples, sha256) in order, and the counts summed."""
    splits: dict[str, Any] = {}
    total = ExampleStats()
    for split in SPLITS:
        ms = sorted((m for m in metas if m["split"] == split), key=lambda m: m["index"])
        st = ExampleStats()
        for m in ms:
            st.add(ExampleStats(**m["stats"]))
        total.add(st)
        shards = [
            {
                "dir": f"{split}/{m['index']:05d}",
                "examples": m["stats"]["examples"],
                "sha256": m["sha256"],
                **({"bytes": m["bytes"]} if "bytes" in m else {}),  # the sizes, checked by a rerun
            }
            for m in ms
        ]
        splits[split] = {"examples": st.examples, "label_ones": st.label_ones, "shards": shards}
    return splits, total


def build_manifest(
    out: Path, tok: AlbertTokenizer, cfg: DataConfig, pid: str, inputs: list, metas: list[dict], plan: Plan
) -> dict:
    """manifest.json of a finished folder: the settings, the tokenizer, every shard with its sha256, the
    counts; an error where no training example came out."""
    splits, total = _splits(metas)
    tok_file = "spiece.model" if (out / "spiece.model").is_file() else "tokenizer.json"
    skipped_invalid = sum(m["read"]["skipped_invalid_utf8"] for m in metas)
    without_text = sum(m["read"].get("without_text", 0) for m in metas)
    if total.examples == 0:
        raise ValueError(
            f"no training examples from {len(inputs)} input file(s): {total.documents} documents with "
            f"{total.sentences} sentences; each example needs a document of at least 2 sentences"
            + (f"; {without_text} records had a null or empty text field" if without_text else "")
        )
    summary = {
        **asdict(total),
        "label_one_rate": round(total.label_ones / total.examples, 4),
        "short_target_rate": round(total.short_targets / total.examples, 4),
        "masked_fraction": round(total.masked_tokens / max(1, total.tokens), 4),
        "skipped_invalid_utf8_lines": skipped_invalid,
        "records_without_text": without_text,
        "input_bytes": sum(m["input_bytes"] for m in metas),
        # the held-out share realised, of the text and of the examples, beside the one asked (the
        # config's eval_fraction): whole blocks of a small corpus cannot always meet it
        "eval_share": round(plan.eval_share, 4),
        "eval_example_share": round(splits["eval"]["examples"] / total.examples, 4),
    }
    return {
        "format_version": FORMAT_VERSION,
        "plan_id": pid,
        "objective": cfg.objective,
        "masking": cfg.masking,
        "max_seq_length": cfg.max_seq_length,
        "config": asdict(cfg),
        "tokenizer": {
            "file": tok_file,
            "sha256": file_sha256(out / tok_file),
            "vocab_size": tok.vocab_size,
            **{key: getattr(tok, key) for key in RULE_KEYS},
            "fingerprint": tok.fingerprint,
            "source": str(tok.model_file),
        },
        "inputs": [str(p) for p in inputs],
        "input_formats": plan.formats,
        "split_block_bytes": plan.split_block_bytes,
        "files": {name: file_sha256(out / name) for name in CHECKSUMMED if (out / name).is_file()},
        "splits": splits,
        "summary": summary,
    }


# --------------------------------------------------------------------------- what is still as written
def shard_problem(folder: Path, sha256: Any, sizes: Any = None, *, hashes: bool = True) -> str | None:
    """Why the shard in `folder` is not as it was written (None where it is): a file its record lists
    (`sha256`: name -> sha256) missing, of another size than `sizes` records (or, where no size is
    recorded, than its .npy header implies: cut short), or, with `hashes`, of another sha256."""
    if not isinstance(sha256, dict) or not sha256:
        return "its record lists no files"
    for name, sha in sorted(sha256.items()):
        file = folder / str(name)
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        want = sizes.get(name) if isinstance(sizes, dict) and name in sizes else npy_size(file)
        if want is None:
            return f"{name} is not a numpy file (its header does not read)"
        if size != want:
            return f"{name} is {size} bytes, {want} when it was written"
        if hashes and file_sha256(file) != sha:
            return f"{name} differs from what was written (its sha256)"
    return None


def npy_size(file: Path) -> int | None:
    """The size of a .npy file as its header gives it (header and data), None where it does not read:
    the size check of a shard made before shards recorded their sizes."""
    try:
        with open(file, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(f)
            return f.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    except (OSError, ValueError, EOFError):
        return None


def damaged(out: Path, manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """What of a finished folder is no longer as manifest.json records it, cheaply: each shard's files
    there and of their size (reading them whole to hash them is pretraining's check, minutes on a large
    corpus), its meta.json there, and the small files beside (the tokenizer, word_start.npy) by their
    sha256. (folder or file, why) for each, in order."""
    found = []
    for name, sha in sorted(_field(manifest, "files", dict, out).items()):
        if name not in CHECKSUMMED:  # a path the folder's own files never are: what is damaged is removed
            raise InputError(out / MANIFEST, f"files: {name!r} is not one of {', '.join(CHECKSUMMED)}")
        file = out / name
        if not file.is_file() or file_sha256(file) != sha:
            found.append((name, "missing" if not file.is_file() else "differs from what was written"))
    splits = _field(manifest, "splits", dict, out)
    for split in SPLITS:
        shards = _field(
            _field(splits, split, dict, out, f"splits.{split}"), "shards", list, out, f"splits.{split}"
        )
        for n, shard in enumerate(shards):
            where = shard.get("dir") if isinstance(shard, dict) else None
            if not isinstance(where, str) or not re.fullmatch(rf"{split}/\d{{5}}", where):
                raise InputError(
                    out / MANIFEST,
                    f"splits.{split}.shards[{n}].dir: {where!r}, expected a shard folder {split}/NNNNN",
                )
            folder = out / where
            why = shard_problem(folder, shard.get("sha256"), shard.get("bytes"), hashes=False)
            if why is None and not (folder / "meta.json").is_file():
                why = "meta.json is missing"
            if why is not None:
                found.append((where, why))
    return found


def _field(record: dict[str, Any], key: str, kind: type, out: Path, where: str = "") -> Any:
    """`record[key]`, of type `kind` (a missing one: empty), or an error naming the manifest and the field."""
    value = record.get(key) or kind()
    if not isinstance(value, kind):
        name = f"{where}.{key}" if where else key
        raise InputError(out / MANIFEST, f"{name}: expected a JSON {'object' if kind is dict else 'list'}")
    return value


# NSP draws B from another document in half of the pairs; a split whose shards hold one document each
# (a small text, a small held-out share) has none to draw from, and its pairs are all "next".
FEW_RANDOM_NEXT = 0.25


def split_labels(manifest: dict, split: str) -> tuple[int, int] | None:
    """A split's example count and how many have label 1 (swapped for SOP, a random next segment for NSP),
    or None where the manifest does not record both (older manifests lack `label_ones`)."""
    info = (manifest.get("splits") or {}).get(split)
    examples, ones = (
        (info.get("examples"), info.get("label_ones")) if isinstance(info, dict) else (None, None)
    )
    return (examples, ones) if isinstance(examples, int) and isinstance(ones, int) else None


def _few_random_next(manifest: dict) -> list[str]:
    """A warning for each split of NSP pairs of which few have a random next segment."""
    if manifest["objective"] != "nsp":
        return []
    out = []
    for split in manifest["splits"]:
        examples, ones = split_labels(manifest, split) or (0, 0)
        if examples and ones / examples < FEW_RANDOM_NEXT:
            more = " or a larger --eval-fraction" if split == "eval" else ""
            out.append(
                f"WARNING: {ones / examples:.0%} of the {examples} {split} pairs have a random next segment, "
                "where NSP wants about half: a random B comes from another document of the same shard, and "
                f"this split's shards hold too few documents; give more text (more documents){more}"
            )
    return out


def format_summary(manifest: dict) -> str:
    """The counts `albert data create` prints at the end."""
    s = manifest["summary"]
    what = "swap rate" if manifest["objective"] == "sop" else "random-next rate"
    masked = f"{s['masked_tokens']}" if manifest["masking"] == "static" else "dynamic (drawn when read)"
    held = (
        f"; {s['eval_share']:.2%} of the text held out" if "eval_share" in s else ""
    )  # older manifests lack it
    lines = [
        f"documents {s['documents']}  sentences {s['sentences']}  examples {s['examples']} "
        f"(train {manifest['splits']['train']['examples']}, eval {manifest['splits']['eval']['examples']}{held})",
        f"tokens {s['tokens']}  masked tokens {masked}  {what} {s['label_one_rate']:.4f}  "
        f"short targets {s['short_target_rate']:.4f}  dropped lone sentences {s['dropped_lone_sentences']}",
    ]
    lines += _few_random_next(manifest)
    if s.get("records_without_text"):
        lines.append(
            f"WARNING: {s['records_without_text']} records had a null or empty text field (left out)"
        )
    if s.get("skipped_invalid_utf8_lines"):
        lines.append(f"WARNING: skipped {s['skipped_invalid_utf8_lines']} lines of invalid UTF-8")
    if "resumed" in s:  # a stopped run resumed: its finished shards kept, the rest made now
        r = s["resumed"]
        lines.append(
            f"{r['shards_kept']} of {r['shards']} shards kept from the stopped run; {r['made_bytes'] / 1e6:.1f} of "
            f"{s['input_bytes'] / 1e6:.1f} MB of text made in {s['seconds']:.1f} s ({s['input_mb_per_s']} MB/s)"
        )
    elif "seconds" in s:
        lines.append(
            f"{s['input_bytes'] / 1e6:.1f} MB of text in {s['seconds']:.1f} s ({s['input_mb_per_s']} MB/s)"
        )
    return "\n".join(lines)
