"""Settings of `albert glue` and where its runs go: the five tasks, `GlueConfig`, a run's folder."""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from albert_lm.settings import Precision, check_fields, check_ranges, device_name, seed_list
from albert_lm.values import _matches, task_name

# task -> (folder in the GLUE download, the metric GLUE-5 averages)
GLUE5 = {
    "cola": ("CoLA", "mcc"),
    "sst2": ("SST-2", "accuracy"),
    "mrpc": ("MRPC", "accuracy"),
    "stsb": ("STS-B", "pearson"),
    "rte": ("RTE", "accuracy"),
}
RESULTS_FILE = "glue_results.json"
# The settings one task's runs may have of their own (GlueConfig.task_settings): what a run computes with,
# not what the suite is (its model, data, output, tasks, seeds, device, workers).
PER_TASK = ("learning_rates", "epochs", "batch_size", "max_seq_length", "max_train_examples", "precision",
            "exit_heads", "classifier_pooling", "bi_encoder", "teachers", "augment")  # fmt: skip


@dataclass
class GlueConfig:
    """Settings of `albert glue`."""

    model: str
    """model folder to fine-tune (config.json, weights, spiece.model), or hub id org/name[@rev]"""
    data: str
    """the GLUE folder (CoLA/, SST-2/, MRPC/, STS-B/, RTE/ with train.tsv and dev.tsv)"""
    output: str
    """output folder: one sub-folder per run, glue_results.json"""
    tasks: str = "cola,sst2,mrpc,stsb,rte"
    """comma-separated tasks"""
    seeds: str = "1,2,3"
    """comma-separated fine-tuning seeds, each run for every task and rate"""
    learning_rates: str = "1e-4,3e-4,1e-3"
    """comma-separated peak rates tried per task (the best mean on dev is kept); small models want
    larger rates than the paper's 1e-5 to 3e-5 for albert-base"""
    epochs: float = 3.0
    """epochs per run"""
    batch_size: int = 32
    """training batch size"""
    max_seq_length: int = 128
    """tokens per example"""
    max_train_examples: int | None = None
    """use only the first N training examples of each task (quick runs)"""
    max_eval_examples: int | None = None
    """use only the first N dev examples of each task (quick runs; the table is then not GLUE's)"""
    workers: int | None = None
    """runs at a time, each a process with one thread (default: one per CPU core; on a GPU, 4 sharing it)"""
    precision: Precision = "auto"
    """auto, fp32, bf16 (autocast) or fp16 (CUDA); fp32 gives scores that do not depend on the CPU"""
    device: str = "auto"
    """where the runs train: auto is the GPU when torch sees one, else the CPU"""
    exit_heads: bool = False
    """train a classifier after every layer in each run, for early exit (finetune's --exit-heads)"""
    classifier_pooling: Literal["cls", "mean"] | None = None
    """what each run's classifier reads (finetune's --classifier-pooling): cls or mean"""
    bi_encoder: bool = False
    """fine-tune STS-B as a bi-encoder (finetune's --bi-encoder: the cosine of the two texts' mean vectors);
    the other tasks as usual"""
    teachers: str | None = None
    """a folder of fine-tuned teachers laid out as --data is (TEACHERS/CoLA, TEACHERS/SST-2, ...): each
    run is then task distillation from its task's teacher (`albert distill task`) instead of fine-tuning
    on the gold labels, and the table shows the teachers' scores beside the student's"""
    augment: int = 0
    """with --teachers: N variants of each training text, labelled by the teacher (distill task's
    --augment)"""
    task_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """settings of one task's runs that differ from the suite's, by task, e.g. {"stsb": {"bi_encoder": true,
    "learning_rates": "2e-5"}, "mrpc": {"teachers": null}}: each a setting above that a run computes with
    (PER_TASK), of its type; a task whose teachers is null fine-tunes on the gold labels, and a task
    without a teacher ignores its augment. On the command line: --task-setting TASK.NAME=VALUE, repeatable"""
    overwrite: bool = False
    """redo finished runs made from another model, other data or other settings (refused otherwise);
    runs that match are still reused"""

    def __post_init__(self) -> None:
        check_fields(self)
        check_ranges(
            self,
            at_least_one=(
                "batch_size",
                "max_seq_length",
                "max_train_examples",
                "max_eval_examples",
                "workers",
            ),
            positive=("epochs",),
            non_negative=("augment",),
            batch=("batch_size",),
            length=("max_seq_length",),
            count=("max_train_examples", "max_eval_examples"),
            workers=("workers",),
            epochs=("epochs",),
        )
        self._check_task_settings()
        if self.teachers is None and self.augment:
            raise ValueError("--augment: only with --teachers (the teacher labels the variants)")
        if (
            self.bi_encoder
            and (self.task_settings.get("stsb") or {}).get("teachers", self.teachers) is not None
        ):
            raise ValueError(  # STS-B distilled from its teacher: a cross-encoder
                "--bi-encoder: not with --teachers (task distillation trains a cross-encoder); "
                "--task-setting stsb.teachers=null fine-tunes STS-B on its gold scores"
            )
        if self.teachers is not None and self.classifier_pooling is not None:
            raise ValueError("--classifier-pooling: not with --teachers (task distillation reads [CLS])")
        self.task_list()
        self.rates()
        self.seed_list()
        device_name(self.device)

    def for_task(self, task: str) -> GlueConfig:
        """The settings of `task`'s runs: the suite's, with its task_settings over them."""
        own = dict(self.task_settings.get(task) or {})
        if self.bi_encoder and task != "stsb":
            own["bi_encoder"] = False  # --bi-encoder is STS-B's alone
        if not own:
            return self
        if own.get("teachers", self.teachers) is None and own.get("augment", self.augment):
            own["augment"] = 0  # the gold labels: no teacher to label augmented texts
        return replace(self, task_settings={}, **own)

    def _check_task_settings(self) -> None:
        """task_settings refused before any run: an unknown task or setting, or a task's settings that its
        runs would refuse, named as `task_settings.TASK`."""
        for task, own in self.task_settings.items():
            where = f"task_settings.{task}"
            if task not in GLUE5:
                raise ValueError(f"{where}: no such task; expected one of {', '.join(GLUE5)}")
            if not isinstance(own, dict):
                raise ValueError(f"{where}: expected a JSON object of settings, got {json.dumps(own)}")
            unknown = sorted(set(own) - set(PER_TASK))
            if unknown:
                raise ValueError(f"{where}: {', '.join(unknown)}: not a setting of one task's runs; "
                                 f"expected some of {', '.join(PER_TASK)}")  # fmt: skip
            if own.get("bi_encoder") and task != "stsb":
                raise ValueError(
                    f"{where}.bi_encoder: only STS-B (a score on a fixed scale) has a bi-encoder"
                )
            try:
                self.for_task(task)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None

    @staticmethod
    def parse_task_settings(pairs: list[str]) -> dict[str, dict[str, Any]]:
        """["stsb.epochs=4", "mrpc.teachers=null"] -> task_settings: a value its setting takes as text stays
        text (learning_rates "2e-5,1e-4", a folder, a precision), any other is read as JSON (4, true);
        null is "none" for every setting."""
        hints = typing.get_type_hints(GlueConfig)
        out: dict[str, dict[str, Any]] = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            task, dot, name = key.partition(".")
            if not sep or not dot or not task or not name:
                raise ValueError(f"--task-setting takes TASK.NAME=VALUE (e.g. stsb.epochs=4), got {pair!r}")
            value: Any = None if text == "null" else text
            if value is not None and not _matches(text, hints.get(name, str)):
                try:
                    value = json.loads(text)
                except (json.JSONDecodeError, RecursionError):
                    raise ValueError(
                        f"--task-setting {key}: {text[:40]!r} is not a value of {name}"
                    ) from None
            out.setdefault(task, {})[name] = value
        return out

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def task_list(self) -> list[str]:
        names = [task_name(t) for t in self.tasks.split(",") if t.strip()]
        unknown = [t for t in names if t not in GLUE5]
        if unknown or not names:
            raise ValueError(f"--tasks {self.tasks!r}: expected some of {', '.join(GLUE5)}")
        return names

    def rates(self) -> list[float]:
        try:
            values = [float(r) for r in self.learning_rates.split(",") if r.strip()]
        except ValueError as e:
            raise ValueError(
                f"--learning-rates {self.learning_rates!r}: expected numbers like 1e-4,3e-4"
            ) from e
        if not values or any(r <= 0 for r in values):
            raise ValueError(f"--learning-rates {self.learning_rates!r}: expected positive numbers")
        return values


def run_folder(cfg: GlueConfig, task: str, rate: float, seed: int) -> Path:
    return Path(cfg.output) / task / f"lr-{rate:g}" / f"seed-{seed}"


def teacher_folder(cfg: GlueConfig, task: str) -> Path:
    """The task's fine-tuned teacher under --teachers, named as its folder under --data is."""
    assert cfg.teachers is not None
    return Path(cfg.teachers) / GLUE5[task][0]


def check_inputs(cfg: GlueConfig, tasks: list[str]) -> None:
    """The model folder, each task's train and dev files under the GLUE root, and its teacher if it has one."""
    from albert_lm.runtime.run_folders import no_model  # the runtime package: not on the command line's start

    model, data = Path(cfg.model), Path(cfg.data)
    if not (model / "config.json").is_file():
        raise no_model(model)
    for task in tasks:
        for split in ("dev", "train"):
            if not (data / GLUE5[task][0] / f"{split}.tsv").is_file():
                one_task = (data / "train.tsv").is_file() or (data / "dev.tsv").is_file()
                hint = (
                    "; --data is the GLUE root (holding CoLA/, SST-2/, ...), not one task's"
                    if one_task
                    else ""
                )
                raise FileNotFoundError(f"no {GLUE5[task][0]}/{split}.tsv under --data {cfg.data}{hint}")
        own = cfg.for_task(task)
        if own.teachers is not None and not (teacher_folder(own, task) / "config.json").is_file():
            raise FileNotFoundError(
                f"--teachers {own.teachers}: no teacher for {GLUE5[task][0]} (expected a fine-tuned "
                f"transformers folder at {teacher_folder(own, task)})"
            )
