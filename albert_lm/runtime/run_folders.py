"""A training run's folder as the commands that read it find their model there: its checkpoints (each a
model folder beside its training state; `albert_lm.training.checkpoint` writes them) and, for a folder
given as a model that holds none, the model folder the user likely meant. Training resumes from these
checkpoints; predict, evaluate and export read them as models."""

from __future__ import annotations

import os
import re
from pathlib import Path

from albert_lm.hints import near_path, not_a_folder

PREFIX = "checkpoint-"
STATE_FILE = "training_state.pt"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    m = _NAME.match(path.name)
    return int(m.group(1)) if m else None


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders under `output_dir`, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    complete = [p for p in found if (p / STATE_FILE).is_file()]
    return sorted(complete, key=lambda p: checkpoint_step(p) or 0)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def model_hint(folder: str | os.PathLike) -> str:
    """Where `folder` holds no config.json: the model folder the user likely meant, as "; ..." (a run's
    folder for the model it made: a fine-tuning's best/, the demo's model/, a stopped run's newest
    checkpoint; a name near it for a folder that does not exist). Else nothing."""
    folder = Path(folder)
    for inside, what in (("best", "the fine-tuning run's model"), ("model", "the model made there")):
        if (folder / inside / "config.json").is_file():
            return f"; {what} is {folder / inside}"
    newest = latest_checkpoint(folder) if folder.is_dir() else None
    if newest is not None and (newest / "config.json").is_file():
        return f"; a run there has not finished: its newest checkpoint, {newest}, is a model folder"
    near = None if folder.exists() else near_path(folder, folders_only=True)
    return f"; did you mean {near}?" if near else ""


def no_model(path: str | os.PathLike, option: str = "--model") -> FileNotFoundError:
    """The error of an `option` path that is no model folder, worded the same by every command: a file or
    a path that does not exist (`hints.not_a_folder`), or a folder without config.json (`model_hint`)."""
    path = Path(path)
    if path.is_file() or not path.exists():
        return not_a_folder(path, option)
    return FileNotFoundError(
        f"{option} {path}: no config.json there (expected a model folder){model_hint(path)}"
    )
