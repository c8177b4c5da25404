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
import json
import logging
from pathlib import Path
from typing import Any

import torch

from albert_lm.data.dataset import PretrainingDataset
from albert_lm.files import atomic_write, iter_jsonl, write_json
from albert_lm.model.weights import find_weights
from albert_lm.paper import measures
from albert_lm.paper.claims import CLAIMS, Cell, Claim
from albert_lm.paper.config import ReproduceConfig
from albert_lm.paper.report import format_table, plot_claim
from albert_lm.paper.verdicts import verdicts
from albert_lm.settings import recipe
from albert_lm.training.evaluation import pick_device
from albert_lm.training.pretrain import pretrain
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)


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
        "time_budget": f"{cfg.minutes * cell.budget * 60:.0f}s", "eval_every": 0, "tensorboard": False,
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


def run_cell(cfg: ReproduceConfig, cell: Cell, done: dict[str, dict[str, Any]], seed: int) -> dict[str, Any]:
    """Pretrain one cell at one seed (or find it finished); its steps, seconds and settings."""
    pcfg = cell_config(cfg, cell, done, seed)
    folder = Path(pcfg.output)
    if (finished := finished_cell(folder)) is not None:
        logger.info("%s (seed %d): finished earlier, kept", cell.name, seed)
        return {**finished, "seed": seed}
    logger.info(
        "%s (seed %d): pretraining (%s)", cell.name, seed, pcfg.time_budget or f"{pcfg.max_steps} steps"
    )
    result = pretrain(pcfg)
    if result.interrupted:
        raise KeyboardInterrupt(
            f"{cell.name} (seed {seed}): stopped at step {result.step}; run the command again to resume"
        )
    info = {"cell": cell.name, "seed": seed, "steps": result.step, "seconds": _train_seconds(folder),
            "model": pcfg.model_overrides, "settings": dict(cell.pretrain),
            "data": cell.data, "init_from": cell.init_from, "dropout_off_step": pcfg.dropout_off_step}  # fmt: skip
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
    return dict(json.loads(record.read_text()))


def _train_seconds(folder: Path) -> float | None:
    """The training time of the run's last record (metrics.jsonl's `elapsed_s`)."""
    seconds = None
    for _, record in iter_jsonl(folder / "metrics.jsonl"):
        seconds = record.get("elapsed_s", seconds)
    return seconds


def measure(cfg: ReproduceConfig, claim: Claim, runs: dict[int, dict[str, dict[str, Any]]]) -> None:
    """Score every cell of every seed on the same held-out examples (in place: each record gains its
    figures)."""
    device = pick_device(cfg.device)
    base = recipe(cfg.recipe)["pretrain"]
    batches = cfg.eval_batches or int(base.get("eval_batches", 100))
    batch_size = int(base.get("batch_size", 32))
    sop = PretrainingDataset(cfg.data, "eval")
    nsp = PretrainingDataset(cfg.nsp_data, "eval") if "sentence" in claim.measures and cfg.nsp_data else None
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
    selected = set(cfg.selected_cells())
    seeds = cfg.seed_list()
    runs: dict[int, dict[str, dict[str, Any]]] = {}
    waiting: list[str] = []
    for seed in seeds:
        cells: dict[str, dict[str, Any]] = {}
        for cell in claim.cells:
            if cell.name in selected:
                if cell.steps_of and cfg.max_steps is None and cell.steps_of not in cells:
                    raise ValueError(f"cell {cell.name} takes the steps of {cell.steps_of}, not finished yet")
                cells[cell.name] = run_cell(cfg, cell, cells, seed)
            elif (finished := finished_cell(cell_folder(cfg, cell.name, seed))) is not None:
                cells[cell.name] = {**finished, "seed": seed}
            else:
                waiting.append(cell.name if len(seeds) == 1 else f"{cell.name} (seed {seed})")
        runs[seed] = cells
    if waiting:
        logger.info("%s: cells %s not finished yet; the table is written by the run that finds them done",
                    claim.name, ", ".join(waiting))  # fmt: skip
        return {"claim": claim.name, "waiting_for": waiting}
    measure(cfg, claim, runs)
    cells = combine(runs)
    result = {
        "claim": claim.name, "title": claim.title, "paper": claim.paper, "paper_table": claim.paper_table,
        "settings": dataclasses.asdict(cfg), "seeds": seeds, "cells": cells,
        "cell_order": list(cells),  # JSON keys get sorted
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }  # fmt: skip
    result["verdicts"] = verdicts(claim.name, cells, [runs[s] for s in seeds] if len(seeds) > 1 else [])
    write_json(out / "results.json", result)
    atomic_write(out / "table.md", (format_table(result) + "\n").encode())
    plot_claim(result, out / f"{claim.name}.png")
    return result
