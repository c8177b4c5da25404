"""The run folder, one way for every loop (pretraining, fine-tuning, distillation): what marks a folder as
a run's, refusing one that holds another run (unless `--resume` or `--overwrite`), what a resumed run may
change, and the training state a resume reads back.

Each loop describes its kind of run once (`RunKind`); the words a user reads are the same for all.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.files import check_not_busy, check_output_apart, describe_folder, fsync_dir, read_json_object
from albert_lm.model.card import CARD_FILE, is_model_card
from albert_lm.training import checkpoint as ckpt
from albert_lm.training.monitor import CURVES_FILE, METRICS_FILE, TENSORBOARD_DIR

logger = logging.getLogger(__name__)

# A model folder's files, which pretraining and distillation write into their output folder itself (a
# README.md of the user's is never replaced: model.card writes a card only where none is).
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "spiece.model",
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.txt",
)


@dataclass(frozen=True)
class RunKind:
    """One kind of run: the files that mark a folder as one, its settings file, the settings a resumed
    run may change, and the keys of its training state (checked when a resume reads it)."""

    name: str  # "pretraining", "fine-tuning", "distillation"
    run_files: tuple[str, ...]
    settings_file: str = ""
    may_change: frozenset[str] = frozenset()
    state_keys: tuple[str, ...] = ()
    # What the run writes into the output folder itself, which a folder of other things (a tokenizer's,
    # a model's) must not have: the run would replace it.
    writes: tuple[str, ...] = ()
    new_run_hint: str = "start a new run"  # the way forward when a resume changes a setting ({latest})
    # Whatever else the run writes into the output folder (besides its curves, TensorBoard events,
    # checkpoints, and with `writes` its model card): --overwrite removes that, and only that (`remove_run`).
    outputs: tuple[str, ...] = ()
    # The finished run in a folder in words ("a finished fine-tuning run (step 120, dev accuracy 0.61)"),
    # or None where it holds none: what the refusal to run there again says.
    finished: Callable[[Path], str | None] | None = None
    # The settings whose values differ from the saved ones (`saved`, `now`) but not what they name: the
    # same data in another place (`check_resume`).
    unchanged: Callable[[Mapping[str, Any], Any], Iterable[str]] | None = None
    # What else the run writes before its first checkpoint (fine-tuning's best/ at its first evaluation):
    # with the logs alone, a run killed before it saved (`logs_only`).
    interim: frozenset[str] = frozenset()


# A run's logs: what a run killed before its first checkpoint leaves (`logs_only`).
LOGS = frozenset({CURVES_FILE, METRICS_FILE, TENSORBOARD_DIR})
# The settings file of each kind of run, in its output folder or its checkpoints (`_check_kind`).
SETTINGS_FILES = {
    "pretrain_config.json": "pretraining",
    "finetune_config.json": "fine-tuning",
    "distill_config.json": "distillation",
}


def check_output(
    kind: RunKind,
    out: Path,
    inputs: Mapping[str, Any],
    *,
    resume: bool = False,
    overwrite: bool = False,
    latest: Path | None = None,
    locked: bool = False,
) -> None:
    """Refuse an output that is, holds or lies inside an input (always), that is a file, that another
    command is writing (unless `locked`: this process holds its lock), that holds another kind of run, or
    that holds another run (unless `resume`, which continues the newest checkpoint `latest`, or
    `overwrite`). A folder holding only the logs of a run killed before its first checkpoint holds no run
    (`logs_only`: the run replaces them)."""
    check_output_apart(out, inputs)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    if not locked:
        check_not_busy(out)
    if resume and overwrite:
        raise ValueError("--resume continues the run in --output, --overwrite replaces it: give one of them")
    if not out.is_dir() or logs_only(kind, out):
        return
    if not overwrite:
        _check_kind(kind, out, resume)
    saved = ckpt.all_checkpoints(out)
    finished = bool(saved) or any((out / name).exists() for name in kind.run_files)
    replaced = [name for name in kind.writes if (out / name).exists()]
    if replaced and latest is None and not finished and not overwrite:
        raise FileExistsError(
            f"--output {out} holds {', '.join(replaced)}, not a run's, which the run would replace: choose "
            "another --output, or --overwrite to replace what it holds"
        )
    done = kind.finished(out) if kind.finished is not None and latest is None and finished else None
    if done and not overwrite:  # a finished run, named as such (its step and score)
        again = "nothing to resume; " if resume else ""
        raise FileExistsError(
            f"--output {out} holds {done}: {again}--overwrite to redo it, or choose another --output"
        )
    if resume:
        if latest is None and saved:  # every checkpoint there damaged: each named
            ckpt.resume_checkpoint(out, kind.settings_file or None)
        if latest is None and finished:
            raise FileExistsError(
                f"--output {out} holds a run with no checkpoint to resume from ({describe_folder(out)}): "
                "pass --overwrite instead of --resume to replace it, or choose another --output"
            )
        return
    if (latest is not None or finished) and not overwrite:
        # a kind that resumes says what there is to resume: a checkpoint, or a run finished without one
        none = "no whole checkpoint; " if saved else "no checkpoint; "
        what = "" if not kind.state_keys else f"checkpoint {latest.name}; " if latest else none
        resumable = "pass --resume to continue it, " if kind.state_keys and latest else ""
        raise FileExistsError(
            f"--output {out} holds another run ({what}{describe_folder(out)}): {resumable}pass --overwrite "
            "to replace it, or choose another --output"
        )


def logs_only(kind: RunKind, out: Path) -> list[str]:
    """The names in `out` of a run's logs (metrics.jsonl, tensorboard/, training_curves.png, and what it
    writes before its first checkpoint, `interim`), where they are all of the run's files there: no
    checkpoint, no model, no results. A run killed before its first
    checkpoint leaves them: a resume starts it from step 0, and the same command runs it, either replacing
    them (`clear_logs`). Else []."""
    if not out.is_dir() or ckpt.all_checkpoints(out):
        return []
    names = {*kind.run_files, *kind.writes, *kind.outputs, kind.settings_file, *LOGS} - {""}
    found = sorted(name for name in names if (out / name).exists())
    return found if METRICS_FILE in found and set(found) <= LOGS | kind.interim else []  # its first: metrics


def clear_logs(kind: RunKind, out: Path, resume: bool) -> None:
    """Before a run starts (holding the folder): the logs of a run killed before its first checkpoint
    (`logs_only`) removed, said; a resume with nothing to continue says it starts from step 0. A run's
    curves must not carry another run's records."""
    found = logs_only(kind, out)
    if found:
        logger.warning(
            "%s%s holds only the logs of a %s run stopped before its first checkpoint (%s): starting from "
            "step 0, replacing them",
            "--resume: " if resume else "", out, kind.name, ", ".join(found),
        )  # fmt: skip
        for name in found:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
            else:
                (out / name).unlink()
    elif resume:
        logger.warning("--resume: no checkpoint in %s, starting from step 0", out)


def _check_kind(kind: RunKind, out: Path, resume: bool) -> None:
    """Refuse a folder holding another kind's run (its settings file in the folder or in its newest
    checkpoint, and not this kind's), naming it: a fine-tuning resumed in a pretraining run's folder found no
    settings file of its own there."""
    if not kind.settings_file:
        return
    newest = ckpt.all_checkpoints(out)[-1:]
    for folder in (*newest, out):
        theirs = [f for f in SETTINGS_FILES if f != kind.settings_file and (folder / f).is_file()]
        if theirs and not (folder / kind.settings_file).is_file():
            other = SETTINGS_FILES[theirs[0]]
            raise FileExistsError(
                f"--output {out} holds a {other} run ({folder / theirs[0]}), not a {kind.name} one: "
                f"{'nothing of it to resume; ' if resume else ''}choose another --output (the model there is "
                f"{folder}: give it as the model to start from)"
            )


def remove_run(kind: RunKind, out: Path) -> None:
    """--overwrite: remove what a run of `kind` wrote in `out` (also under the temporary names of an
    interrupted write, and its checkpoints); anything else the user keeps there stays, a README.md of
    their own included."""
    names = {*kind.run_files, *kind.writes, *kind.outputs, CURVES_FILE, TENSORBOARD_DIR}
    if kind.writes and is_model_card(out / CARD_FILE):  # a run that writes its model here writes its card
        names.add(CARD_FILE)
    names |= {f".{n}.{end}" for n in names for end in ("tmp", "old")} | {ckpt.FINAL_TMP}
    gone = sorted(p for p in out.iterdir() if p.name in names or ckpt.checkpoint_step(p) is not None)
    if gone:
        logger.info("--overwrite: removing %s from %s", ", ".join(p.name for p in gone), out)
    for p in gone:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def write_model_set(out: Path, fill: Callable[[Path], None]) -> None:
    """A finished run's model files (weights, config, tokenizer, settings, card) into its output folder as
    one set: `fill(folder)` writes them into a temporary folder there, then they are moved in, the old
    weights removed first and the new ones moved last. A run killed part-way never leaves weights beside
    another model's config or card: its weights are missing, and a resume writes the set again."""
    tmp = out / ckpt.FINAL_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        for file in (p for p in tmp.iterdir() if p.is_file()):
            with open(file, "rb") as f:
                os.fsync(f.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    names = sorted(p.name for p in tmp.iterdir())
    weights = [name for name in names if name in ckpt.WEIGHTS]
    for name in ckpt.WEIGHTS:
        (out / name).unlink(missing_ok=True)
    for name in [*(n for n in names if n not in weights), *weights]:
        os.replace(tmp / name, out / name)
    tmp.rmdir()
    fsync_dir(out)


def changed_settings(saved: Mapping[str, Any], now: Any, ignore: Iterable[str] = ()) -> list[str]:
    """Each setting of the settings dataclass `now` that differs from the settings file `saved`
    ("name: X there, Y now"), `ignore` aside, compared as the file holds them (tuples as lists). A setting
    the file lacks counts as its default: one added to albert-lm since the file was written changes
    nothing at its default, and is a change set otherwise. Resuming a run and reusing a finished GLUE
    run both compare this way."""
    values = _as_json(dataclasses.asdict(now))
    defaults = _as_json({f.name: _default(f) for f in dataclasses.fields(now)})
    skip = set(ignore)
    changed = []
    for name, value in values.items():
        if name in skip or (name not in saved and defaults[name] is dataclasses.MISSING):
            continue
        before = saved.get(name, defaults[name])
        if before != value and not _same_path(name, before, value):
            changed.append(f"{name}: {before!r} there, {value!r} now")
    return changed


# Settings that name a file or folder: "runs/x/", "runs/x" and its absolute path are one folder.
_PATH_SETTINGS = frozenset(
    {"data", "output", "model", "tokenizer", "init_from", "teacher", "teachers", "eval_text", "model_config"}
)


def _same_path(name: str, before: Any, now: Any) -> bool:
    """Whether two values of a path setting name the same place, seen from here: the same path, paths to
    one file or folder (through a link), or a path relative to the folder the run started in, not found
    from here, given again as a path from here that ends with it (what a refused resume asks for)."""
    if name not in _PATH_SETTINGS or not isinstance(before, str) or not isinstance(now, str):
        return False
    if not (before and now):
        return False
    if os.path.abspath(before) == os.path.abspath(now) or os.path.realpath(before) == os.path.realpath(now):
        return True
    if not os.path.isabs(before) and not os.path.exists(before) and os.path.exists(now):
        tail = Path(os.path.normpath(before)).parts
        return ".." not in tail and Path(os.path.abspath(now)).parts[-len(tail) :] == tail
    try:
        return os.path.samefile(before, now)
    except OSError:  # one of them is not there (a hub id, a folder since removed)
        return False


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING  # a setting without a default: a file without it cannot say it changed


def _as_json(values: dict[str, Any]) -> dict[str, Any]:
    """`values` as a JSON file would hold them (tuples as lists), MISSING kept."""
    return {k: v if v is dataclasses.MISSING else json.loads(json.dumps(v)) for k, v in values.items()}


def check_resume(kind: RunKind, latest: Path, now: Any) -> None:
    """A resumed run keeps the settings it was started with (`kind.may_change` aside, and what
    `kind.unchanged` finds the same): the settings dataclass `now` against the settings file saved in the
    checkpoint `latest` (`changed_settings`)."""
    saved = read_json_object(latest / kind.settings_file, f"{kind.name} settings")
    same = kind.unchanged(saved, now) if kind.unchanged is not None else ()
    changed = changed_settings(saved, now, {*kind.may_change, *same})
    if changed:
        raise ValueError(
            f"--resume: the settings differ from the run in {latest} ({'; '.join(changed)}). A resumed run "
            f"keeps its settings: drop the change, or {kind.new_run_hint.format(latest=latest)}"
        )


def read_state(kind: RunKind, latest: Path) -> dict[str, Any]:
    """The training state of checkpoint `latest` (read with weights_only), refused naming the file where
    it is not this kind's (another program's file, or another loop's)."""
    state = ckpt.load_training_state(latest)
    missing = [k for k in kind.state_keys if k not in state]
    if missing:
        raise ValueError(
            f"{latest / ckpt.STATE_FILE}: not a {kind.name} state (missing {', '.join(missing)})"
        )
    return state
