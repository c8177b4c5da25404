"""Training checkpoints: atomic folders, keep-last-k, every RNG, and resume from the newest complete one.

google-research's runner keeps the last `keep_checkpoint_max` (5) TF checkpoints every
`save_checkpoints_steps` (5000); a crash between its files could leave a half-written one. Here a
checkpoint is a folder `OUTPUT/checkpoint-STEP/` that is written under a temporary name
(`OUTPUT/.tmp-checkpoint-STEP/`) and renamed only once every file is written, the training state last and
fsynced (`albert_lm.files.atomic_folder`), so a folder with the final name is always complete, whatever
kills the process and when. A folder damaged afterwards (a file removed, a copy cut short) is skipped by
a resume, said, for the newest whole one, and removed by the next save (`checkpoint_problem`).

A folder holds:
- the model in transformers' layout (config.json + model.safetensors, via `model.save_pretrained`),
  loadable by `transformers.AlbertForPreTraining.from_pretrained`; plus the tokenizer, if given;
- `training_state.pt`: optimizer, scheduler, step, data position, the RNG states of every rank
  (python, numpy, torch CPU, CUDA), the metric accumulators. Only tensors and plain Python values,
  read back with `torch.load(weights_only=True)`, which refuses anything that could run code.
- `pretrain_config.json`, the run's configuration.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.files import atomic_folder, write_json
from albert_lm.model.encoder import AlbertPreTrainedModel
from albert_lm.model.weights import NATIVE, SAFETENSORS
from albert_lm.runtime.run_folders import (  # noqa: F401 (found where deploy finds them too)
    PREFIX,
    STATE_FILE,
    checkpoint_step,
    list_checkpoints,
)

logger = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-checkpoint-"
FINAL_TMP = ".final.tmp"  # where a finished run's model files are written before they are moved in
_OLD = re.compile(rf"^\.{PREFIX}\d+\.old$")  # atomic_folder's name for a folder being replaced


# --------------------------------------------------------------------------- RNG states
def capture_rng_state() -> dict[str, Any]:
    """Every generator a training step may draw from, as tensors and plain values (weights_only-safe)."""
    py_version, py_state, py_gauss = random.getstate()
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # (name, keys, position, has_gauss, cached_gaussian)
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = legacy
    state: dict[str, Any] = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": [np_name, torch.from_numpy(np_keys.astype(np.int64)), np_pos, np_has_gauss, np_gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------- writing them
def remove_stale_temporaries(output_dir: str | os.PathLike) -> None:
    """Half-written folders left by a run that was killed while saving (and a replaced folder's leftover)."""
    root = Path(output_dir)
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and (p.name.startswith(TMP_PREFIX) or _OLD.match(p.name) or p.name == FINAL_TMP):
                logger.info("removing incomplete checkpoint %s", p)
                shutil.rmtree(p, ignore_errors=True)


# --------------------------------------------------------------------------- save / load
def _save_durably(path: Path, obj: Any) -> None:
    """torch.save `obj` to `path` and fsync it (inside the temporary folder: the folder swap publishes it)."""
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(
    output_dir: str | os.PathLike,
    step: int,
    model: AlbertPreTrainedModel,
    training_state: dict[str, Any],
    run_config: dict[str, Any] | None = None,
    save_extra: Callable[[Path], None] | None = None,
    keep_last: int = 5,
    settings_file: str = "run_config.json",
) -> Path:
    """Write `output_dir/checkpoint-STEP/` atomically, then delete all but the newest `keep_last`.

    `model` must be the unwrapped model (not DDP): its `save_pretrained` writes the weights.
    `run_config` is written as `settings_file` (the run's kind names it: `run_folder.RunKind`);
    `save_extra(folder)` writes anything else into the folder before the rename (the tokenizer).
    The same step saved again (e.g. SIGTERM right after a periodic save) replaces the earlier folder.
    """
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step}"
    with atomic_folder(final, tmp=root / f"{TMP_PREFIX}{step}") as tmp:
        model.save_pretrained(tmp)
        if save_extra is not None:
            save_extra(tmp)
        if run_config is not None:
            write_json(tmp / settings_file, run_config)
        # The state file goes last: a folder is "complete" when it holds it (see list_checkpoints).
        _save_durably(tmp / STATE_FILE, training_state)
    _prune(root, final, keep_last, settings_file if run_config is not None else None)
    return final


def _prune(root: Path, saved: Path, keep_last: int, settings_file: str | None) -> None:
    """After `saved` is written: every damaged checkpoint folder (`checkpoint_problem`: a resume skips it)
    removed, then all but the newest `keep_last` of the others (0: every one kept)."""
    whole = []
    for folder in all_checkpoints(root):
        problem = None if folder == saved else checkpoint_problem(folder, settings_file)
        if problem is None:
            whole.append(folder)
        else:
            logger.info("removing the damaged checkpoint %s (%s)", folder, problem)
            shutil.rmtree(folder, ignore_errors=True)
    if keep_last > 0:
        for old in whole[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- which one a resume reads
WEIGHTS = (SAFETENSORS, NATIVE)  # transformers' layout, albert-lm's own


def all_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Every checkpoint-STEP folder under `output_dir`, complete or not, oldest first."""
    root = Path(output_dir)
    found = (
        [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None] if root.is_dir() else []
    )
    return sorted(found, key=lambda p: checkpoint_step(p) or 0)


def checkpoint_problem(folder: Path, settings_file: str | None = None) -> str | None:
    """What keeps checkpoint `folder` from being resumed, in words, or None where its files are whole: the
    training state and the weights present and not cut short (as far as their headers and ends show: a
    file damaged inside is found when it is read), config.json and the run's `settings_file` present. A
    checkpoint is written under a temporary name and renamed once complete: a folder that is not whole was
    damaged afterwards (a file removed, a copy cut short)."""
    from albert_lm.model.weights import safetensors_names

    state = folder / STATE_FILE
    if not state.is_file():
        return f"no {STATE_FILE}"
    if not zipfile.is_zipfile(state):  # torch.save writes a zip archive, whose directory is at its end
        return f"{STATE_FILE} is cut short or damaged: not a whole torch file"
    weights = [folder / name for name in WEIGHTS if (folder / name).is_file()]
    if not weights:
        return f"no weights: neither {' nor '.join(WEIGHTS)}"
    try:
        safetensors_names(weights[0])
    except ValueError:
        return f"{weights[0].name} is cut short or damaged: not a readable safetensors file"
    for name in ("config.json", settings_file):
        if name and not (folder / name).is_file():
            return f"no {name}"
    return None


def newest_checkpoint(
    output_dir: str | os.PathLike, settings_file: str | None = None
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the newest checkpoint in `output_dir` a resume can read, or None; the damaged ones newer than it,
    each with its problem, newest first: with no whole one, every checkpoint folder there)."""
    damaged: list[tuple[Path, str]] = []
    for folder in reversed(all_checkpoints(output_dir)):
        problem = checkpoint_problem(folder, settings_file)
        if problem is None:
            return folder, damaged
        damaged.append((folder, problem))
    return None, damaged


def latest_checkpoint(output_dir: str | os.PathLike, settings_file: str | None = None) -> Path | None:
    """The newest checkpoint in `output_dir` a resume can read (`newest_checkpoint`), or None."""
    return newest_checkpoint(output_dir, settings_file)[0]


def resume_checkpoint(
    output_dir: str | os.PathLike, settings_file: str | None = None, say: bool = True
) -> Path | None:
    """The checkpoint a resume continues: the newest whole one, each newer damaged one skipped with a
    warning (`say`) naming it and what is wrong (the next save removes it). None where `output_dir` holds
    no checkpoint folder; a ValueError naming each one where none is whole."""
    latest, damaged = newest_checkpoint(output_dir, settings_file)
    if latest is None and damaged:
        each = "; ".join(f"{folder}: {problem}" for folder, problem in damaged)
        raise ValueError(
            f"--resume: no checkpoint in {output_dir} can be resumed ({each}): --overwrite to start the run "
            "again, or choose another --output"
        )
    for folder, problem in damaged if say else ():
        logger.warning(
            "--resume: skipping the damaged checkpoint %s (%s): resuming from %s; the next save removes it",
            folder, problem, latest,
        )  # fmt: skip
    return latest


def load_training_state(checkpoint_dir: str | os.PathLike) -> dict[str, Any]:
    """The non-weight state of a checkpoint, read with weights_only=True (no code runs)."""
    file = Path(checkpoint_dir) / STATE_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no {STATE_FILE} in {checkpoint_dir}: not a complete checkpoint")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors come in many types; name the file whatever they are
        raise ValueError(f"{file}: cannot read the training state ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict):
        raise ValueError(f"{file}: not an albert-lm training state (expected a dict)")
    return state
