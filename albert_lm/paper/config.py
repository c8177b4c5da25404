"""`albert reproduce`'s settings (light: the command line builds its options from them without torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albert_lm.data.manifest import split_labels
from albert_lm.files import read_json_object
from albert_lm.hints import missing
from albert_lm.paper.claims import CLAIMS, SPEED_TABLE
from albert_lm.settings import check_fields, check_ranges, device_name, parse_duration, seed_list

SPEED = "speed"  # Table 2's claim: measured on random batches (albert_lm/paper/speed_report.py), not cells
PHASES = ("forward", "backward", "wait_clip", "update")  # of a timed step (albert_lm/paper/speed.py)


@dataclass
class ReproduceConfig:
    claim: str
    """the claim to reproduce (see albert_lm/paper/claims.py)"""
    data: str | None = None
    """`albert data create` folder (SOP examples): every cell trains on it and is scored on its held-out split
    (every claim but speed, which trains on random batches)"""
    output: str = "runs/paper"
    """results go to OUTPUT/CLAIM (cells/NAME for each run, cells-seed-S/NAME for a seed S other than 1,
    results.json, table.md, CLAIM.png)"""
    time_budget: str = "10m"
    """pretraining time per cell, with a unit (90s, 10m, 1.5h; cells of the depth claim take a share, or
    equal steps)"""
    nsp_data: str | None = None
    """NSP examples of the same text and tokenizer (`albert data create --objective nsp`): the sentence claim"""
    recipe: str = "cpu-1h"
    """the base settings every cell starts from (a shipped recipe or a JSON file)"""
    seeds: str = "1"
    """seed of every cell (initialisation, data order, masking); several, comma-separated (e.g. 1,2,3):
    every cell is trained once per seed and the table gives each cell's mean and min-max over them"""
    max_steps: int | None = None
    """train every cell this many steps instead of --time-budget (a cell with a share of the time: that share
    of the steps): equal steps, as the paper compares, and the same result however busy the machine is"""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    """model config changes for every cell, under each cell's own switch"""
    cells: str | None = None
    """pretrain only these cells (names, comma-separated), e.g. one process per core or GPU, each with its
    own cells; results.json and the table are written by the run that finds every cell finished"""
    eval_batches: int | None = None
    """held-out batches each finished cell is scored on, the figures of the table (default: the recipe's
    eval_batches; the evaluations during a cell's training keep the recipe's)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    workers: int = 2
    """speed: the data-parallel processes (DDP workers) of its second set of rows (torchrun; gloo on a CPU,
    NCCL on GPUs); 1 measures one device only"""
    batch_size: int = 1
    """speed: sequences per process and step (the paper's models at --seq-length tokens; raise it where memory
    allows)"""
    seq_length: int = 512
    """speed: tokens per sequence (the paper's 512)"""
    timed_steps: int = 2
    """speed: timed pretraining steps per model, after one warm-up step"""
    models: str = ",".join(SPEED_TABLE)
    """speed: Table 2's models to measure (presets, comma-separated; BERT-large is the reference)"""
    bandwidths: str = "100,10,1"
    """speed: interconnects to simulate, in Gbit/s (comma-separated)"""
    precision: str = "auto"
    """speed: auto (bf16 where this machine computes it fast), fp32, bf16 or fp16 (CUDA)"""
    overwrite: bool = False
    """train again the cells finished earlier with other data, tokenizer, model or settings than this run's
    (default: refuse, naming what differs)"""

    def __post_init__(self) -> None:
        check_fields(self)  # types first: a list of cells or a number for a time budget is named as such
        if self.claim not in (*CLAIMS, SPEED):
            raise ValueError(f"claim {self.claim!r}: expected one of {', '.join((*CLAIMS, SPEED))}")
        device_name(self.device)
        if self.claim == SPEED:
            self._check_speed()
            return
        if not self.data:
            raise ValueError(f"data: missing --data DIR: the {self.claim} claim pretrains on your examples")
        if self.seconds() * min(c.budget for c in CLAIMS[self.claim].cells) < 1:
            raise ValueError(f"time budget {self.time_budget}: gives a cell less than a second of training")
        check_ranges(
            self, at_least_one=("max_steps", "eval_batches"), steps=("max_steps",), count=("eval_batches",)
        )
        if "sentence" in CLAIMS[self.claim].measures and not self.nsp_data:
            # No word of another option or field here (e.g. "claim", "data"): the settings' merge would
            # prefix the error with that option, as if the fault were there.
            raise ValueError(
                "--nsp-data: missing; the sentence ablation scores every model on held-out NSP pairs too: "
                "give --nsp-data DIR, NSP examples of the same text and tokenizer (made with --objective nsp)"
            )
        self.seed_list()  # a clear error now, not after the first cell
        names = [c.name for c in CLAIMS[self.claim].cells]
        unknown = [c for c in self.selected_cells() if c not in names]
        if unknown:
            raise ValueError(f"cells: {', '.join(unknown)} not in claim {self.claim} ({', '.join(names)})")
        for option, folder, objective in (
            ("--data", self.data, ""),
            ("--nsp-data", self.nsp_data, " --objective nsp"),
        ):
            make = f"make one with `albert data create{objective} --input TEXT --tokenizer TOK --output DIR`"
            if folder and not Path(folder).exists():
                raise FileNotFoundError(f"{missing(option, folder)}; {make}")
            if folder and not (Path(folder) / "manifest.json").is_file():
                raise FileNotFoundError(
                    f"{option} {folder}: not a folder made by `albert data create` (no manifest.json); {make}"
                )
        self._check_objectives()

    def _check_objectives(self) -> None:
        """--data holds SOP examples and --nsp-data NSP ones (their manifest's `objective`): a folder of the
        other kind would train and score the cells on the wrong pairs, their labels swapped."""
        if self.nsp_data and Path(self.nsp_data).resolve() == Path(str(self.data)).resolve():
            raise ValueError(
                f"--nsp-data {self.nsp_data}: the same folder as --data; --data takes SOP examples and "
                "--nsp-data NSP examples of the same text (`albert data create --objective nsp`)"
            )
        for option, folder, wanted in (("--data", self.data, "sop"), ("--nsp-data", self.nsp_data, "nsp")):
            if not folder:
                continue
            held = read_json_object(Path(folder) / "manifest.json", "data manifest").get("objective")
            if held != wanted:
                what = f"{held.upper()} examples" if isinstance(held, str) else "no objective in its manifest"
                swapped = (
                    "; were --data and --nsp-data swapped?"
                    if self.nsp_data and held in ("sop", "nsp")
                    else ""
                )
                raise ValueError(
                    f"{option} {folder}: holds {what}, and {option} takes {wanted.upper()} examples "
                    f"(`albert data create --objective {wanted}`){swapped}"
                )
        if "sentence" in CLAIMS[self.claim].measures:
            for option, folder in (("--data", self.data), ("--nsp-data", self.nsp_data)):
                _check_both_labels(option, str(folder))

    def _check_speed(self) -> None:
        check_ranges(self, at_least_one=("workers", "batch_size", "seq_length", "timed_steps"))
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"precision {self.precision!r}: expected auto, fp32, bf16 or fp16")
        unknown = [m for m in self.model_list() if m not in SPEED_TABLE]
        if unknown or not self.model_list():
            given = f"unknown model {', '.join(unknown)}" if unknown else "none given"
            raise ValueError(f"models: {given}; choose from {', '.join(SPEED_TABLE)}")
        self.bandwidth_list()

    def model_list(self) -> list[str]:
        """The models of `models`, in order, each once."""
        return list(dict.fromkeys(m.strip() for m in self.models.split(",") if m.strip()))

    def bandwidth_list(self) -> list[float]:
        """The bandwidths of `bandwidths` in Gbit/s (each > 0)."""
        try:
            values = [float(b) for b in self.bandwidths.split(",") if b.strip()]
        except ValueError:
            values = []
        if not values or min(values) <= 0:
            raise ValueError(f"bandwidths {self.bandwidths!r}: expected Gbit/s above 0, e.g. 100,10,1")
        return values

    def seconds(self) -> float:
        """The time budget per cell in seconds."""
        return parse_duration(self.time_budget)

    def seed_list(self) -> list[int]:
        """The seeds given by `seeds`, in order (whole numbers >= 0, each once: `values.seed_list`)."""
        return seed_list(self.seeds)

    def check_model_overrides(self) -> None:
        """A model override of a field the claim's cells set themselves is refused: each cell's own value would
        win, and the results would record an override that no cell has."""
        cells = CLAIMS[self.claim].cells
        for key in self.model_overrides:
            values = list(dict.fromkeys(c.model[key] for c in cells if key in c.model))
            if values:
                raise ValueError(
                    f"--model-override {key}: the {self.claim} claim sets it in its cells "
                    f"({', '.join(map(str, values))}), which is what the claim compares; leave it out (an "
                    "override of another field, e.g. hidden_size=256, applies to every cell)"
                )

    def selected_cells(self) -> list[str]:
        """The names given by `cells` (all the claim's cells when none)."""
        if not self.cells:
            return [c.name for c in CLAIMS[self.claim].cells]
        return [c.strip() for c in self.cells.split(",") if c.strip()]


# What label 1 and label 0 of a pair mean, by objective (the manifest counts label 1 as `label_ones`).
LABELS = {"sop": ("swapped", "in order"), "nsp": ("with a random next segment", "with the true next segment")}


def _check_both_labels(option: str, folder: str) -> None:
    """The sentence claim scores every cell's sentence head on the held-out pairs: a split of one label
    only scores nothing but which answer a head prefers, so it is refused, with the counts from the manifest
    (older manifests lack them: not checked)."""
    manifest = read_json_object(Path(folder) / "manifest.json", "data manifest")
    examples, ones = split_labels(manifest, "eval") or (0, 0)
    if not examples or 0 < ones < examples:
        return
    one, zero = LABELS.get(str(manifest.get("objective")), ("of label 1", "of label 0"))
    raise ValueError(
        f"{option} {folder}: its {examples} held-out pairs all have one label ({ones} {one}, "
        f"{examples - ones} {zero}, from its manifest.json), so the sentence head's accuracy on them would "
        "say nothing; make the examples again from more text (more documents) or with a larger --eval-fraction"
    )
