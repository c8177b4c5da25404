"""`albert reproduce CLAIM`: one of the paper's ablations (albert_lm/paper/claims.py) as small pretraining
runs on the user's data, measured, compared with the paper, and written as JSON + Markdown + PNG.

Each cell is an ordinary `albert pretrain` run (the base recipe's settings, the cell's switch, a time
budget per cell, the same seed for every cell) in OUTPUT/CLAIM/cells/NAME (OUTPUT/CLAIM/cells-seed-S/NAME
for a seed S other than 1); a cell already finished is not run again and one that was interrupted resumes
from its checkpoint, so the command continues where it stopped. Every cell is then scored on the same
held-out examples of `data` (and of `nsp_data` for the sentence claim): held-out MLM accuracy and loss,
the sentence head on SOP and NSP pairs, parameters, and per-layer transitions where the claim asks. With
several seeds each cell's figures are the mean over its seeds, its runs are kept beside them, and each
direction says in how many seeds it held. Results: OUTPUT/CLAIM/results.json, table.md, CLAIM.png.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import signal
from pathlib import Path
from typing import Any

import torch

from albert_lm.data.dataset import PretrainingDataset
from albert_lm.files import (
    atomic_write,
    check_output_apart,
    folder_lock,
    iter_jsonl,
    read_json_object,
    write_json,
)
from albert_lm.kernels.device import pick_device
from albert_lm.model.weights import find_weights
from albert_lm.paper import measures
from albert_lm.paper.claims import CLAIMS, Cell, Claim
from albert_lm.paper.config import ReproduceConfig
from albert_lm.paper.report import format_table, plot_claim
from albert_lm.paper.verdicts import verdicts
from albert_lm.settings import recipe
from albert_lm.training import preflight
from albert_lm.training.pretrain import pretrain, unigram_baseline
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)


# What a cell's pretraining tells its user, in reproduce's terms (pretraining's own lines name `albert
# pretrain`'s options: --resume, --recipe cpu-1h).
AGAIN = "run the same `albert reproduce` command again to continue from this step"
SLOW_ADVICE = (
    "Bound every cell: --time-budget 10m (the time each cell trains) or fewer --max-steps; the cpu-1h --recipe "
    "(the default) is the one made for a CPU"
)


class CellStopped(KeyboardInterrupt):
    """A signal stopped a cell's pretraining (its checkpoint saved): the claim goes on when run again."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


def cell_folder(cfg: ReproduceConfig, name: str, seed: int) -> Path:
    """Where the cell's run lives: cells/NAME for seed 1 (the default), cells-seed-S/NAME for another."""
    return Path(cfg.output) / cfg.claim / ("cells" if seed == 1 else f"cells-seed-{seed}") / name


def cell_config(
    cfg: ReproduceConfig, cell: Cell, done: dict[str, dict[str, Any]], seed: int | None = None
) -> PretrainConfig:
    """The cell's pretraining settings: the recipe's, then the run-wide overrides, then the cell's."""
    seed = cfg.seed_list()[0] if seed is None else seed
    base = dict(recipe(cfg.recipe)["pretrain"])
    model = {**base.pop("model_overrides", {}), **cfg.model_overrides, **cell.model}
    if "embedding_size" in cell.model or "embedding_size" in cfg.model_overrides:
        base.pop("projection_init_std", None)  # the recipe's init is for its own E
    folder = cell_folder(cfg, cell.name, seed)
    values: dict[str, Any] = {
        **base, **cell.pretrain, "data": cfg.nsp_data if cell.data == "nsp" else cfg.data,
        "output": str(folder), "model_overrides": model, "seed": seed, "device": cfg.device,
        "time_budget": _seconds(cfg.seconds() * cell.budget), "eval_every": 0, "tensorboard": False,
        "plot": False, "save_every": base.get("save_every", 2000), "keep_last": 1,
    }  # fmt: skip
    # Steps, not time, with --max-steps: the schedule runs over them (a share of the time: of them).
    if cfg.max_steps is not None:
        steps = max(1, round(cfg.max_steps * cell.budget))
    elif cell.steps_of:  # equal steps under a time budget: as many as the named cell took
        steps = done[cell.steps_of]["steps"]
    else:
        steps = 0
    if steps:
        values.update(
            time_budget=None, max_steps=steps, warmup_steps=min(values.get("warmup_steps", 0), steps)
        )
        if cell.dropout_off_at is not None:
            values["dropout_off_step"] = max(1, round(steps * cell.dropout_off_at))
    if cell.init_from:
        values["init_from"] = str(folder.parent / cell.init_from)
    values["resume"] = folder.is_dir() and any(folder.glob("checkpoint-*"))
    values["overwrite"] = folder.is_dir() and not values["resume"]  # killed before its first checkpoint
    return PretrainConfig(**values)


def _seconds(seconds: float) -> str:
    """A time budget in seconds as `parse_duration` reads it ("600s", "0.75s")."""
    return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.3f}s"


# Settings of a cell's run that do not change what it learns, left out of its fingerprint: what a resumed
# pretraining run may change (where it writes, how often it saves...) except precision, the step count and
# gradient checkpointing, plus the cell's init and model overrides (the model is fingerprinted on its own);
# the data is in the fingerprint by content (tokenizer fingerprint, manifest), not path.
_NOT_FINGERPRINTED = (preflight.RESUME_MAY_CHANGE - {"precision", "gradient_checkpointing", "max_steps"}) | {
    "init_from",
    "model_overrides",
}


@functools.cache
def data_fingerprint(folder: str) -> dict[str, str]:
    """What a cell's examples are: their tokenizer's fingerprint and a hash of the manifest's contents
    (the settings, the shards' checksums and the tokenizer file's; not where the data lies)."""
    from albert_lm.data.tokenizer import AlbertTokenizer

    path = Path(folder)
    manifest = read_json_object(path / "manifest.json", "data manifest")
    try:
        tokenizer = AlbertTokenizer.from_pretrained(path / manifest["tokenizer"]["file"]).fingerprint
        content = {k: manifest[k] for k in ("config", "splits", "objective", "max_seq_length")}
        content["tokenizer_sha256"] = manifest["tokenizer"].get("sha256")
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path / 'manifest.json'}: not a manifest of `albert data create` ({e})") from None
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    return {"tokenizer": tokenizer, "data": digest}


def cell_fingerprint(pcfg: PretrainConfig) -> dict[str, Any]:
    """What decides what a cell's model learnt: its data (by content), model changes and settings."""
    settings = {k: v for k, v in pcfg.to_dict().items() if k not in _NOT_FINGERPRINTED}
    found = {**data_fingerprint(str(pcfg.data)), "model": pcfg.model_overrides, "settings": settings}
    return dict(json.loads(json.dumps(found, sort_keys=True, default=str)))  # as cell.json reads back


def fingerprint_differences(recorded: dict[str, Any] | None, wanted: dict[str, Any]) -> list[str]:
    """What differs between a finished cell's fingerprint and this run's, in words (empty: the same)."""
    if not recorded:
        return ["it was recorded without a fingerprint (an earlier albert-lm), so its data cannot be checked"]
    out = []
    for key, what in (("tokenizer", "the data's tokenizer"), ("data", "the data")):
        if recorded.get(key) != wanted[key]:
            out.append(f"{what} ({key} fingerprint {recorded.get(key)} there, {wanted[key]} now)")
    for group in ("model", "settings"):
        there, now = recorded.get(group) or {}, wanted[group]
        for k in sorted(set(there) | set(now)):
            if there.get(k) != now.get(k):
                out.append(f"{group} {k} ({json.dumps(there.get(k))} there, {json.dumps(now.get(k))} now)")
    return out


def check_reuse(
    cfg: ReproduceConfig, cell: Cell, seed: int, finished: dict[str, Any], wanted: dict[str, Any]
) -> bool:
    """Whether a finished cell was trained as this run would train it; False under `overwrite` when it was not
    (train it again); a ValueError naming what differs otherwise."""
    differs = fingerprint_differences(finished.get("fingerprint"), wanted)
    if not differs:
        return True
    if cfg.overwrite and cell.name in cfg.selected_cells():
        logger.warning(
            "%s (seed %d): trained earlier with %s; --overwrite: training it again",
            cell.name,
            seed,
            "; ".join(differs),
        )
        return False
    folder = cell_folder(cfg, cell.name, seed)
    how = (
        "--overwrite to train it again"
        if cell.name in cfg.selected_cells()
        else f"--overwrite --cells {cell.name}"
    )
    raise ValueError(
        f"cell {cell.name} (seed {seed}) in {folder} was trained differently from this run: "
        f"{'; '.join(differs)}. Its figures would not be comparable: choose another --output, or pass {how}"
    )


def run_cell(cfg: ReproduceConfig, cell: Cell, done: dict[str, dict[str, Any]], seed: int) -> dict[str, Any]:
    """Pretrain one cell at one seed (or find it finished); its steps, seconds and settings."""
    pcfg = cell_config(cfg, cell, done, seed)
    folder = Path(pcfg.output)
    wanted = cell_fingerprint(pcfg)
    if (finished := finished_cell(folder)) is not None:
        if check_reuse(cfg, cell, seed, finished, wanted):
            logger.info("%s (seed %d): finished earlier, kept", cell.name, seed)
            return {**finished, "seed": seed}
        (folder / "cell.json").unlink()  # not finished any more, whatever happens next
        pcfg = dataclasses.replace(pcfg, resume=False, overwrite=True)
    logger.info(
        "%s (seed %d): pretraining (%s)", cell.name, seed, pcfg.time_budget or f"{pcfg.max_steps} steps"
    )
    result = pretrain(pcfg, again=AGAIN, slow_advice=SLOW_ADVICE)
    if result.interrupted:
        raise CellStopped(
            result.signum or signal.SIGINT,
            f"{cell.name} (seed {seed}): stopped at step {result.step}; {AGAIN}",
        )
    info = {"cell": cell.name, "seed": seed, "steps": result.step, "seconds": _train_seconds(folder),
            "model": pcfg.model_overrides, "settings": dict(cell.pretrain),
            "data": cell.data, "init_from": cell.init_from, "dropout_off_step": pcfg.dropout_off_step,
            "fingerprint": wanted}  # fmt: skip
    write_json(folder / "cell.json", info)
    return info


def finished_cell(folder: Path) -> dict[str, Any] | None:
    """The cell.json of a cell pretrained to the end (its model written), else None."""
    record = folder / "cell.json"
    if not record.is_file():
        return None
    try:  # model.safetensors, or albert_lm.safetensors for sharing transformers cannot express
        find_weights(folder)
    except FileNotFoundError:
        return None
    return read_json_object(record, "cell record")


def _train_seconds(folder: Path) -> float | None:
    """The training time of the run's last record (metrics.jsonl's `elapsed_s`)."""
    seconds = None
    for _, record in iter_jsonl(folder / "metrics.jsonl"):
        seconds = record.get("elapsed_s", seconds)
    return seconds


def measure(cfg: ReproduceConfig, claim: Claim, runs: dict[int, dict[str, dict[str, Any]]]) -> float:
    """Score every cell of every seed on the same held-out examples (in place: each record gains its
    figures); returns the unigram guess's held-out MLM accuracy on them (always the most frequent masked
    piece of the training split), what a cell that learnt word frequencies only scores."""
    device = pick_device(cfg.device)
    base = recipe(cfg.recipe)["pretrain"]
    batches = cfg.eval_batches or int(base.get("eval_batches", 100))
    batch_size = int(base.get("batch_size", 32))
    sop = PretrainingDataset(str(cfg.data), "eval")  # a cell claim: its config checked that data is given
    nsp = PretrainingDataset(cfg.nsp_data, "eval") if "sentence" in claim.measures and cfg.nsp_data else None
    train = PretrainingDataset(str(cfg.data), "train")
    unigram = unigram_baseline(train, sop, eval_limit=batches * batch_size)["unigram_mlm_acc"]
    majority = {}
    if nsp is not None:
        majority = {
            name: measures.majority_rate(data, batch_size, batches)
            for name, data in (("sop", sop), ("nsp", nsp))
        }
    for seed, cells in runs.items():
        for name, info in cells.items():
            if majority:
                info["majority"] = dict(majority)
            model = measures.load_cell(cell_folder(cfg, name, seed)).to(device)
            info["parameters"] = measures.encoder_parameters(model)
            with torch.no_grad():
                info["held_out"] = measures.held_out(model, sop, batch_size, batches, device)
                if nsp is not None:
                    info["held_out_nsp"] = measures.held_out(model, nsp, batch_size, batches, device)
                if "layers" in claim.measures:
                    info["layers"] = measures.layer_transitions(model, sop, batch_size, batches, device)
    return unigram


def _mean(values: list[Any]) -> Any:
    """The element-wise mean of equally shaped figures (numbers, lists of them, dicts of them)."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _mean([v[k] for v in values]) for k in first}
    if isinstance(first, list):
        return [_mean(list(col)) for col in zip(*values, strict=True)]
    return sum(values) / len(values)


FIGURES = ("held_out", "held_out_nsp", "layers", "seconds")


def combine(runs: dict[int, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One record per cell: with one seed its run's; with several the mean of each figure over the seeds,
    the runs themselves under "runs" (seed, steps, seconds and figures of each)."""
    seeds = list(runs)
    if len(seeds) == 1:
        return runs[seeds[0]]
    cells: dict[str, dict[str, Any]] = {}
    for name, first in runs[seeds[0]].items():
        records = [runs[s][name] for s in seeds]
        cell = {k: v for k, v in first.items() if k != "seed"}
        for key in FIGURES:
            if key in first and all(r.get(key) is not None for r in records):
                cell[key] = _mean([r[key] for r in records])
        cell["runs"] = [{k: r[k] for k in ("seed", "steps", *FIGURES) if k in r} for r in records]
        cells[name] = cell
    return cells


def reproduce(cfg: ReproduceConfig) -> dict[str, Any]:
    """Run the claim's cells in order (seed by seed), measure them, write results.json / table.md / CLAIM.png.

    With `cfg.cells`, only those cells are pretrained; the others are taken as finished by another
    process, and the measures wait until all are (returns {"waiting_for": [names]} until then)."""
    claim = CLAIMS[cfg.claim]
    out = Path(cfg.output) / cfg.claim
    if Path(cfg.output).exists() and not Path(cfg.output).is_dir():
        raise NotADirectoryError(f"--output {cfg.output}: exists and is not a folder")
    recipe_file = cfg.recipe if cfg.recipe.endswith(".json") else None
    check_output_apart(out, {"--data": cfg.data, "--nsp-data": cfg.nsp_data, "--recipe": recipe_file})
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {cfg.output}: {out} exists and is not a folder")
    cfg.check_model_overrides()
    _check_held_out(cfg)
    _check_recipe(cfg, claim)
    if cfg.cells:  # one process's share: the others write beside it; each cell's run locks its own folder
        return _reproduce(cfg, claim, out)
    with folder_lock(out):  # the whole claim: a second run of it into the same folder is refused at once
        return _reproduce(cfg, claim, out)


def _check_held_out(cfg: ReproduceConfig) -> None:
    """Every cell is scored on the data's held-out split: an empty one is refused before any training."""
    for option, folder in (("--data", cfg.data), ("--nsp-data", cfg.nsp_data)):
        if folder and len(PretrainingDataset(folder, "eval")) == 0:
            raise ValueError(
                f"{option} {folder}: its held-out split is empty (too little text for its --eval-fraction), and "
                "every cell is scored on it: make the data again with more text or a larger --eval-fraction"
            )


def _check_recipe(cfg: ReproduceConfig, claim: Claim) -> None:
    """The recipe and the first cell's settings made from it, refused before anything is written (the
    claim's folder, its lock)."""
    try:
        cell_config(cfg, claim.cells[0], {})
    except TypeError as e:  # a key of its pretrain section that pretraining does not have
        raise ValueError(
            f"--recipe {cfg.recipe}: its pretrain section does not fit pretraining: {e}"
        ) from None


def _reproduce(cfg: ReproduceConfig, claim: Claim, out: Path) -> dict[str, Any]:
    selected = set(cfg.selected_cells())
    seeds = cfg.seed_list()
    runs: dict[int, dict[str, dict[str, Any]]] = {}
    waiting: list[str] = []
    for seed in seeds:  # cells another process finished: checked before this one trains anything
        for cell in claim.cells:
            folder = cell_folder(cfg, cell.name, seed)
            if cell.name not in selected and (finished := finished_cell(folder)) is not None:
                done = {cell.steps_of: finished} if cell.steps_of else {}
                check_reuse(cfg, cell, seed, finished, cell_fingerprint(cell_config(cfg, cell, done, seed)))
    for seed in seeds:
        cells: dict[str, dict[str, Any]] = {}
        for cell in claim.cells:
            if cell.name in selected:
                if cell.steps_of and cfg.max_steps is None and cell.steps_of not in cells:
                    raise ValueError(f"cell {cell.name} takes the steps of {cell.steps_of}, not finished yet")
                cells[cell.name] = run_cell(cfg, cell, cells, seed)
            elif (finished := finished_cell(cell_folder(cfg, cell.name, seed))) is not None:
                # trained by another process: as this run would have trained it? (equal-steps cells: as
                # many steps as they took, the named cell's)
                done = {**cells, **({cell.steps_of: finished} if cell.steps_of else {})}
                check_reuse(cfg, cell, seed, finished, cell_fingerprint(cell_config(cfg, cell, done, seed)))
                cells[cell.name] = {**finished, "seed": seed}
            else:
                waiting.append(cell.name if len(seeds) == 1 else f"{cell.name} (seed {seed})")
        runs[seed] = cells
    if waiting:
        logger.info(
            "%s: cells %s not finished yet; the table is written by the run that finds them done",
            claim.name,
            ", ".join(waiting),
        )
        return {"claim": claim.name, "waiting_for": waiting}
    unigram = measure(cfg, claim, runs)
    cells = combine(runs)
    result = {
        "claim": claim.name, "title": claim.title, "paper": claim.paper, "paper_table": claim.paper_table,
        "settings": dataclasses.asdict(cfg), "seeds": seeds, "cells": cells,
        "cell_order": list(cells),  # JSON keys get sorted
        "torch": torch.__version__, "threads": torch.get_num_threads(), "unigram_mlm_acc": unigram,
    }  # fmt: skip
    per_seed = [runs[s] for s in seeds] if len(seeds) > 1 else []
    result["verdicts"] = verdicts(claim.name, cells, per_seed, unigram)
    write_json(out / "results.json", result)
    atomic_write(out / "table.md", (format_table(result) + "\n").encode())
    plot_claim(result, out / f"{claim.name}.png")
    return result
