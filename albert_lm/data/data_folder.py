"""The output folder of `albert data create`: what it may hold when a run starts (nothing, a stopped run
of the same plan to resume, data to replace under --overwrite), what a failed run removes, and whether a
finished one is still as its manifest records it.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from albert_lm.data.examples import DataConfig
from albert_lm.data.manifest import CHECKSUMMED, MANIFEST, damaged
from albert_lm.data.plan import SPLITS
from albert_lm.files import InputError, describe_folder, read_json_object

logger = logging.getLogger(__name__)

PLAN = ".albert-data-plan.json"
# What a run writes in its output folder (besides the shards in the split folders).
_OWN_FILES = (MANIFEST, PLAN, *CHECKSUMMED)


def check_output(out: Path, pid: str, cfg: DataConfig, overwrite: bool = False) -> None:
    """The output folder is new, empty, or a run of the same plan (resume), or holds data of any plan
    to replace (`overwrite`); anything else is an error."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    if not out.exists() or not any(out.iterdir()) or (overwrite and holds_data(out)):
        return
    for marker in (MANIFEST, PLAN):
        if (out / marker).is_file():
            try:
                kept = read_json_object(out / marker)
            except InputError:
                kept = {}
            if kept.get("plan_id") == pid:
                return
            raise FileExistsError(f"--output {out}: holds {_other_plan(out, marker, kept, cfg)}")
    raise FileExistsError(
        f"--output {out}: folder holds other files ({describe_folder(out)}); give a new or empty --output"
    )


def _other_plan(out: Path, marker: str, kept: dict[str, Any], cfg: DataConfig) -> str:
    """What the output holds, made by another plan, and what differs: the settings as the marker file
    records them, else the inputs or the tokenizer (whose content the plan's hash also covers)."""
    recorded = kept.get("config")
    before: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    now = asdict(cfg)
    differs = [
        f"{k}: {before[k]!r} there, {v!r} now" for k, v in now.items() if k in before and before[k] != v
    ]
    why = (
        "; ".join(differs)
        or "the same settings, other inputs or another tokenizer (or an input edited since)"
    )
    if marker == MANIFEST:
        return (
            f"finished pretraining data made otherwise ({why}); choose a new --output for this data, or "
            "--overwrite to replace it"
        )
    return (
        f"an unfinished run made otherwise ({why}; {describe_folder(out)}): rerun the command that started "
        "it to finish it, or choose a new --output (or --overwrite to replace it)"
    )


def holds_data(out: Path) -> bool:
    """Whether `out` holds data of `albert data create`, finished or not (its manifest or its plan)."""
    return (out / MANIFEST).is_file() or (out / PLAN).is_file()


def holds_nothing_finished(out: Path) -> bool:
    """Whether `out` holds only what a run writes, and no finished shard with examples: nothing of value,
    which a failed run removes, so that the rerun with corrected settings is not refused."""
    if (out / MANIFEST).exists() or any(p.name not in (*_OWN_FILES, *SPLITS) for p in out.iterdir()):
        return False
    for split in SPLITS:
        for shard in (out / split).iterdir() if (out / split).is_dir() else []:
            if ".tmp-" in shard.name:
                continue
            try:
                examples = read_json_object(shard / "meta.json")["stats"]["examples"]
            except (OSError, ValueError, KeyError, TypeError):
                return False  # not ours, or not readable: keep it
            if examples:
                return False
    return True


def remove_data(out: Path) -> None:
    """Remove what a run wrote in `out`: after a failed run that finished nothing (see
    `holds_nothing_finished`), and for --overwrite; anything else there stays."""
    for split in SPLITS:
        shutil.rmtree(out / split, ignore_errors=True)
    for name in _OWN_FILES:
        (out / name).unlink(missing_ok=True)


def still_complete(out: Path, pid: str) -> dict[str, Any] | None:
    """The manifest of a finished folder whose files are all there as written, checked cheaply
    (`manifest.damaged`); else None, with the damaged shards and the manifest removed and a line for
    each, so that the run makes them again and writes the manifest anew."""
    manifest = read_json_object(out / MANIFEST, "manifest")
    found = damaged(out, manifest)
    if not found:
        logger.info(
            "%s: already complete (plan %s; every file there, of its size); nothing to do (--overwrite "
            "makes it all again)",
            out,
            pid,
        )
        return manifest
    for where, why in found:
        logger.warning("%s: %s; making it again", out / where, why)
        if (out / where).is_dir():
            shutil.rmtree(out / where)
    (out / MANIFEST).unlink()  # unfinished now: a stop from here on resumes as any stopped run
    return None
