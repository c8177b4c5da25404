"""Hostile cases on `albert distill teacher` (benchmarks/tools/hostile_round.py loads this family): every bad
encoder of the teachers family (benchmarks/tools/hostile_teachers.py) given as the encoder to fine-tune,
task folders it cannot learn from, outputs it must not write, --resume against runs it cannot continue,
settings out of range, and valid runs.

A refusal must name the teacher folder and the file (or the option, or the data file), and leave no output
folder behind; an encoder of the teachers' own words fine-tuned on the world's task for two steps is a
valid run.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

FAMILY = "teacher fine-tuning"
QUICK = ["--epochs", "1", "--batch-size", "8", "--max-seq-length", "32", "--precision", "fp32", "--device", "cpu",
         "-q"]  # fmt: skip
# The bad encoders of the teachers family that fine-tuning reads as `albert distill` does: each is refused.
# pooling files (modules.json, 1_Pooling) are a sentence teacher's, not read here: "either".
POOLING_ONLY = ("modules-deep", "pooling-not-json")


def _teachers() -> object:
    return sys.modules["hostile_teachers"]  # loaded by hostile_round.families() with this module


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """The teachers family's encoders (built by it when it has not been yet), and runs to resume: one
    killed after its first epoch (its checkpoint kept), one finished."""
    made = _teachers().build(world, p)  # type: ignore[attr-defined]
    d = world / "teacher-runs"
    runs = {"r:finished": d / "finished", "r:killed": d / "killed", "r:settings-only": d / "settings-only"}
    if (d / "READY").is_file():
        return {**made, **runs}
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    _teachers().must_run(_argv({**p, **made}, made["t:sentence"], str(runs["r:finished"])), "a teacher run")  # type: ignore[attr-defined]
    shutil.copytree(runs["r:finished"], runs["r:killed"])  # what a run killed after an epoch leaves
    (runs["r:killed"] / "config.json").unlink()
    (runs["r:killed"] / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (runs["r:killed"] / "checkpoints" / "checkpoint-5" / "trainer_state.json").write_text(
        "{}"
    )  # a whole epoch
    runs["r:settings-only"].mkdir()
    shutil.copy(runs["r:finished"] / "teacher_config.json", runs["r:settings-only"])
    (d / "READY").write_text("")
    return {**made, **runs}


def _argv(
    p: dict[str, Path], teacher: Path | str, output: str, *more: str, data: Path | None = None
) -> list[str]:
    return ["distill", "teacher", "--task", "classification", "--teacher", str(teacher), "--data",
            str(data or p["task"]), "--output", output, *QUICK, *more]  # fmt: skip


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    """The family's cases (class, argv, expect, what the refusal names)."""
    t = _teachers()
    cs: list[tuple[str, list[str], str, list[str]]] = []
    named = t.NAMED  # type: ignore[attr-defined]
    for name in t.SENTENCE_VARIANTS:  # type: ignore[attr-defined]
        teacher = p[f"t:{name}"]
        expect = "either" if name in POOLING_ONLY else "refuse"
        cs.append(
            ("teacher runs: encoders", _argv(p, teacher, out("out")), expect, [str(teacher), named[name]])
        )
    cs.append(("teacher runs: encoders", _argv(p, p["t:remote-code-known-type"], out("out")), "either", []))
    cs.append(("teacher runs: encoders", _argv(p, p["a.txt"].parent / "no-such-teacher", out("out")), "refuse",
               ["--teacher", "no-such-teacher"]))  # fmt: skip
    cs += _data_cases(p, out)
    cs += _output_cases(p, out)
    for option, value in (("--epochs", "0"), ("--epochs", "nan"), ("--learning-rate", "-1"),
                          ("--learning-rate", "inf"), ("--batch-size", "0"), ("--max-seq-length", "200"),
                          ("--max-train-examples", "0"), ("--precision", "fp16"), ("--seed", "-5")):  # fmt: skip
        cs.append(("teacher runs: settings", _argv(p, p["t:sentence"], out("out"), option, value), "refuse",
                   [option if option != "--max-seq-length" else "max_position_embeddings"]))  # fmt: skip
    cs.append(("valid (teacher runs)", _argv(p, p["t:sentence"], out("out")), "ok", []))
    cs.append(("valid (teacher runs)", _argv(p, p["t:task"], out("out")), "ok", []))  # its head replaced
    return cs


def _data_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    """Task folders it cannot learn from: missing, no dev split, one label only, rows without a label."""
    root = Path(out("data"))
    root.mkdir(parents=True)
    rows = [json.loads(line) for line in (p["task"] / "train.jsonl").read_text().splitlines()]
    folders = {"no-dev": root / "no-dev", "one-label": root / "one-label", "no-label": root / "no-label"}
    for folder in folders.values():
        folder.mkdir()
    shutil.copy(p["task"] / "train.jsonl", folders["no-dev"])
    one = "".join(json.dumps({**r, "label": "yes"}) + "\n" for r in rows)
    for split in ("train", "dev"):
        (folders["one-label"] / f"{split}.jsonl").write_text(one)
        (folders["no-label"] / f"{split}.jsonl").write_text("".join(json.dumps({"text": r["text"]}) + "\n"
                                                                   for r in rows))  # fmt: skip
    t = p["t:sentence"]
    return [
        (
            "teacher runs: data",
            _argv(p, t, out("out"), data=root / "missing"),
            "refuse",
            ["--data", "missing"],
        ),
        ("teacher runs: data", _argv(p, t, out("out"), data=folders["no-dev"]), "refuse", ["no-dev", "dev"]),
        (
            "teacher runs: data",
            _argv(p, t, out("out"), data=folders["one-label"]),
            "refuse",
            ["one-label", "2 labels"],
        ),
        ("teacher runs: data", _argv(p, t, out("out"), data=folders["no-label"]), "refuse", ["label"]),
        ("teacher runs: data", _argv(p, t, out("out"), "--label-column", "stars"), "refuse", ["stars"]),
    ]


def _output_cases(
    p: dict[str, Path], out: Callable[[str], str]
) -> list[tuple[str, list[str], str, list[str]]]:
    """Outputs it must not write (a file, inside the data or the teacher) and runs it cannot resume."""
    t = p["t:sentence"]
    return [
        ("teacher runs: outputs", _argv(p, t, str(p["a.txt"])), "refuse", [str(p["a.txt"])]),
        ("teacher runs: outputs", _argv(p, t, str(p["task"] / "teacher")), "refuse", ["--data"]),
        ("teacher runs: outputs", _argv(p, t, str(t / "fine-tuned")), "refuse", ["--teacher"]),
        ("teacher runs: outputs", _argv(p, t, str(p["r:finished"])), "refuse", ["--overwrite"]),
        (
            "teacher runs: outputs",
            _argv(p, t, str(p["r:finished"]), "--resume"),
            "refuse",
            ["finished teacher"],
        ),
        (
            "teacher runs: outputs",
            _argv(p, t, str(p["r:settings-only"]), "--resume"),
            "refuse",
            ["no finished epoch"],
        ),  # fmt: skip
        (
            "teacher runs: outputs",
            _argv(p, t, str(p["r:killed"]), "--resume", "--seed", "9"),
            "refuse",
            ["seed"],
        ),  # fmt: skip
        (
            "teacher runs: outputs",
            _argv(p, t, str(p["r:killed"]), "--resume", "--overwrite"),
            "refuse",
            ["--resume", "--overwrite"],
        ),  # fmt: skip
    ]
