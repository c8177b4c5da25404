"""`albert glue`: one model fine-tuned on CoLA, SST-2, MRPC, STS-B and RTE, several seeds and a small
learning-rate grid per task, scored on dev the way GLUE papers report it.

For each task and rate, every seed is a separate `finetune` run in a process of its own with one thread
(tiny models on a few cores: threads of one process mostly wait on each other, processes do not), `workers`
of them at a time. The rate of each task is the one with the best mean dev score over the seeds (dev is
the only labelled evaluation set GLUE publishes; papers choose on it and report it); the task's score is
that rate's mean +- standard deviation over seeds. GLUE-5 is the mean of CoLA MCC, SST-2 accuracy, MRPC
accuracy, STS-B Pearson and RTE accuracy, x100, beside the same average of majority-class guesses.

Each run writes OUTPUT/TASK/lr-RATE/seed-SEED/ (the `finetune` output) and, once finished, glue_run.json:
what its score depends on (a content hash of the model's config and weights, the tokenizer's fingerprint,
the hashes of the task's train and dev files, and every setting of the run). A finished run whose record
matches is not run again, so an interrupted suite continues where it stopped; one made from another model,
other data or other settings is refused, naming what differs, and redone with `overwrite`. A run stopped
part-way (the suite stopped, a worker killed) continues from its last checkpoint (one every `SAVE_EVERY`
steps, and one when a signal stops it) if the record it started with, glue_run.started.json, matches; one
that does not is refused (redone with `overwrite`), and one stopped before its first checkpoint starts again.
OUTPUT/glue_results.json holds every run's score and the table's numbers.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from albert_lm.distill.config import TaskDistillConfig
from albert_lm.files import (
    check_output_apart,
    describe_folder,
    file_sha256,
    folder_lock,
    read_json_object,
    write_json,
)
from albert_lm.glue.config import GLUE5, RESULTS_FILE, GlueConfig, check_inputs, run_folder, teacher_folder
from albert_lm.glue.report import summarize
from albert_lm.hub import resolve_model
from albert_lm.progress import logs_above_bars, progress_bar
from albert_lm.training.checkpoint import checkpoint_step, latest_checkpoint
from albert_lm.training.finetune_config import FinetuneConfig
from albert_lm.training.run_folder import changed_settings
from albert_lm.values import settings_where
from albert_lm.workers import run_pool

logger = logging.getLogger(__name__)


def finetune_config(cfg: GlueConfig, task: str, rate: float, seed: int) -> FinetuneConfig:
    cfg = cfg.for_task(task)
    return FinetuneConfig(
        task=task,
        model=cfg.model,
        data=str(Path(cfg.data) / GLUE5[task][0]),
        output=str(run_folder(cfg, task, rate, seed)),
        learning_rate=rate,
        seed=seed,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        max_seq_length=cfg.max_seq_length,
        device=glue_device(cfg),
        max_train_examples=cfg.max_train_examples,
        max_eval_examples=cfg.max_eval_examples,
        precision=cfg.precision,
        exit_heads=cfg.exit_heads,
        classifier_pooling=cfg.classifier_pooling,
        bi_encoder=cfg.bi_encoder,  # for_task: STS-B's alone
        log_every=10**9,
        tensorboard=False,
        plot=False,  # dozens of short runs
        overwrite=True,  # only unfinished runs are run: what a stopped one left is redone or resumed (_resumed)
        save_every=SAVE_EVERY,
    )


# A checkpoint of each run every this many steps (and one when a signal stops it): a run of hours (all of
# SST-2 on a CPU) killed without a signal loses at most these steps; a finished run removes them.
SAVE_EVERY = 500
# On a stop, the time a run has to finish its step and save its checkpoint before it is killed (a step of
# albert-base on a CPU can take seconds); runs that finish sooner end the suite sooner.
STOP_GRACE_S = 60.0


# What a task distillation run of the suite takes from the fine-tuning run it stands for.
_SHARED_SETTINGS = ("task", "model", "data", "output", "learning_rate", "seed", "epochs", "batch_size",
                    "max_seq_length", "max_train_examples", "max_eval_examples", "exit_heads", "precision",
                    "device", "log_every", "tensorboard", "plot", "overwrite", "save_every")  # fmt: skip


def distill_config(cfg: GlueConfig, task: str, rate: float, seed: int) -> TaskDistillConfig:
    """With --teachers: the run as `albert distill task` from the task's teacher, with the settings a
    fine-tuning run of the suite has (rate, seed, epochs, batch, length, caps)."""
    ft, cfg = finetune_config(cfg, task, rate, seed), cfg.for_task(task)
    return TaskDistillConfig(
        **{name: getattr(ft, name) for name in _SHARED_SETTINGS},
        teacher=str(teacher_folder(cfg, task)),
        augment=cfg.augment,
        max_steps=10**9,  # the epochs decide, as in fine-tuning
    )


def run_config(cfg: GlueConfig, task: str, rate: float, seed: int) -> FinetuneConfig | TaskDistillConfig:
    """A run of the suite: fine-tuning, or where the task has a teacher (--teachers) task distillation."""
    if cfg.for_task(task).teachers is None:
        return finetune_config(cfg, task, rate, seed)
    return distill_config(cfg, task, rate, seed)


_STEPS: Any = None  # in a worker: the pool's progress queue, where its runs count their optimizer steps
_UNSENT = [0, 0.0]  # in a worker: steps not yet put on the queue, and when it was last put to


def _quiet_one_thread(counts: Any) -> None:
    """A worker's set-up: one thread, and no progress bars of its own (a teacher's passes would draw some
    over the suite's log and its bar); its runs count their steps on `counts`, the pool's progress queue,
    which the suite's bar shows."""
    import torch

    global _STEPS
    _STEPS = counts
    torch.set_num_threads(1)
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers' own bars (loading a teacher)


def _count_step(step: int, flush: bool = False) -> None:
    """After each optimizer step of a run in a worker: one more step on the suite's bar, put on the queue at
    most once a second (a GPU takes hundreds of steps a second); `flush`, at a run's end, puts the rest."""
    if _STEPS is None:  # not in a worker of the suite
        return
    _UNSENT[0] += not flush
    if _UNSENT[0] and (flush or time.monotonic() - _UNSENT[1] >= 1.0):
        _STEPS.put(_UNSENT[0])
        _UNSENT[:] = [0, time.monotonic()]


def _run(
    item: tuple[tuple[str, float, int], FinetuneConfig | TaskDistillConfig, dict[str, Any]],
) -> tuple[tuple[str, float, int], dict[str, Any]]:
    """One (task, rate, seed) run in a worker: the job beside its eval record. The run's glue_run.json is
    written once it has finished, so only finished runs are ever reused."""
    job, cfg, record = item
    logging.getLogger("albert_lm").setLevel(logging.ERROR)  # the suite logs; runs stay quiet (errors raise)
    Path(cfg.output).mkdir(parents=True, exist_ok=True)
    write_json(Path(cfg.output) / RUN_STARTED, record)  # what a checkpoint of this run is resumed against
    if isinstance(cfg, TaskDistillConfig):
        from albert_lm.distill.task import distill_task

        distill_task(cfg, on_step=_count_step)
        result = read_json_object(Path(cfg.output) / "eval_results.json", "evaluation results")
    else:
        from albert_lm.training.finetune import finetune

        result = finetune(cfg, on_step=_count_step)
    _count_step(0, flush=True)
    write_json(Path(cfg.output) / RUN_RECORD, record)
    (Path(cfg.output) / RUN_STARTED).unlink(missing_ok=True)
    return job, result


def run_glue(cfg: GlueConfig) -> dict[str, Any]:
    """Every (task, rate, seed) run not done yet, then the table's numbers (also in glue_results.json)."""
    tasks = cfg.task_list()
    given, cfg = cfg.model, replace(cfg, model=str(resolve_model(cfg.model)))  # a hub id: its snapshot
    model, data, out = Path(cfg.model), Path(cfg.data), Path(cfg.output)
    check_inputs(cfg, tasks)
    _check_augment(cfg, tasks)
    teachers = {f"{GLUE5[t][0]} teacher": teacher_folder(cfg.for_task(t), t) for t in distilled(cfg, tasks)}
    check_output_apart(out, {"--model": model, "--data": data, "--teachers": cfg.teachers, **teachers})
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    if any((out / name).exists() for name in ("config.json", "spiece.model", "model.safetensors")):
        raise FileExistsError(
            f"--output {out}: holds a model ({describe_folder(out)}): choose a folder of its own"
        )
    glue_device(cfg)  # --device cuda on a machine without one: refused before any run starts
    jobs = [(t, r, s) for t in tasks for r in cfg.for_task(t).rates() for s in cfg.seed_list()]
    base = _inputs_fingerprint(cfg, tasks)
    records = {j: run_record(cfg, base, *j) for j in jobs}
    with folder_lock(out):  # one suite per output folder at a time
        todo = [j for j in jobs if not _finished(cfg, j, records[j])]
        logger.info(
            "glue: %d runs (%d done before), %d at a time", len(jobs), len(jobs) - len(todo), _workers(cfg)
        )
        if todo:
            from albert_lm.kernels.device import pick_device, resolved_precision

            resolved_precision(cfg.precision, pick_device(cfg.device))  # auto's choice, logged
        try:
            _execute(cfg, todo, records, _resumed(cfg, todo, records))
        except KeyboardInterrupt:
            _say_stopped(cfg, jobs, todo)
            raise
        result = summarize(cfg, jobs)
        if given != cfg.model:
            result["settings"]["model_given"] = given  # the hub id; "model" is its snapshot (by commit)
        write_json(out / RESULTS_FILE, result)
    return result


RUN_RECORD = "glue_run.json"
RUN_STARTED = "glue_run.started.json"  # the record, written as a run starts; gone once it has finished


def _inputs_fingerprint(cfg: GlueConfig, tasks: list[str]) -> dict[str, Any]:
    """What every run depends on beside its settings: the model's content, its tokenizer's vocabulary and
    each task's train and dev files."""
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.training.evaluation import model_fingerprint

    data = Path(cfg.data)
    base = {
        "model": model_fingerprint(cfg.model),
        "tokenizer": AlbertTokenizer.from_pretrained(cfg.model).fingerprint,
        "data": {
            t: {s: file_sha256(data / GLUE5[t][0] / f"{s}.tsv")[:16] for s in ("train", "dev")} for t in tasks
        },
    }
    if distilled(cfg, tasks):
        from albert_lm.distill.teacher_files import fingerprint

        base["teachers"] = {
            t: fingerprint(teacher_folder(cfg.for_task(t), t), "task teacher") for t in distilled(cfg, tasks)
        }
    return base


def distilled(cfg: GlueConfig, tasks: list[str]) -> list[str]:
    """The tasks whose runs are task distillation: those with a teacher (--teachers, or their own)."""
    return [t for t in tasks if cfg.for_task(t).teachers is not None]


# Settings of a run that do not change its score (where it reads and writes, how much it logs, the
# device), or whose content is recorded instead (the teacher's fingerprint), as their metadata says.
_NOT_RECORDED = settings_where(FinetuneConfig, "recorded", False) | settings_where(
    TaskDistillConfig, "recorded", False
)


def run_record(cfg: GlueConfig, base: dict[str, Any], task: str, rate: float, seed: int) -> dict[str, Any]:
    """The record a finished run keeps in glue_run.json: its inputs' hashes and its settings."""
    settings = asdict(run_config(cfg, task, rate, seed))
    for name in _NOT_RECORDED:
        settings.pop(name, None)
    record = {
        "model": base["model"],
        "tokenizer": base["tokenizer"],
        "data": base["data"][task],
        "settings": settings,
    }
    if task in base.get("teachers", {}):
        record["teacher"] = base["teachers"][task]
    return record


def _finished(cfg: GlueConfig, job: tuple[str, float, int], record: dict[str, Any]) -> bool:
    """Whether the run is done and may be reused: its eval_results.json and a record that matches. A
    finished run with another record is refused (naming what differs), or redone with `overwrite`."""
    folder = run_folder(cfg, *job)
    if not (folder / "eval_results.json").is_file():
        return False
    if not (folder / RUN_RECORD).is_file():
        differs = [f"no {RUN_RECORD} (made by an older albert, or stopped before its record was written)"]
    else:
        try:
            kept = read_json_object(folder / RUN_RECORD, "glue run record")
        except ValueError:
            kept = {}
        differs = _differences(kept, record, run_config(cfg, *job))
    if not differs:
        return True
    if cfg.overwrite:
        logger.info("glue: redoing %s: %s", folder, "; ".join(differs))
        return False
    raise ValueError(
        f"--output {cfg.output}: the finished run {folder} was not made from this model, data and settings "
        f"({'; '.join(differs)}): pass --overwrite to redo such runs, or choose another --output"
    )


def _differences(
    kept: dict[str, Any], now: dict[str, Any], settings: FinetuneConfig | TaskDistillConfig
) -> list[str]:
    """What differs between a finished run's record `kept` and this suite's `now` for it: the inputs' hashes,
    then the run's `settings` as resuming compares them (a setting the record lacks counts as its default)."""
    what = {"model": "the model's config or weights", "tokenizer": "the tokenizer's vocabulary"}
    if "teacher" in now:
        what["teacher"] = "the task's teacher"
    out = [f"{what[k]} changed" for k in what if kept.get(k) != now[k]]
    out += [f"its {s}.tsv changed" for s in now["data"] if (kept.get("data") or {}).get(s) != now["data"][s]]
    before = kept.get("settings")
    return out + changed_settings(before if isinstance(before, dict) else {}, settings, _NOT_RECORDED)


def _resumed(
    cfg: GlueConfig, todo: list[tuple[str, float, int]], records: dict[tuple[str, float, int], dict[str, Any]]
) -> set[tuple[str, float, int]]:
    """The runs to continue from their last checkpoint: stopped part-way, started with the record they
    would have now (the same model, tokenizer, data and settings). One started from others is refused, as
    a finished one is (`overwrite` starts it again); one stopped before its first checkpoint starts again,
    said."""
    resumed: dict[tuple[str, float, int], int | None] = {}
    again = []
    for job in todo:
        folder = run_folder(cfg, *job)
        if not (folder / RUN_STARTED).is_file():
            continue
        latest = latest_checkpoint(folder)
        if latest is None:
            again.append(job)
            continue
        try:
            kept = read_json_object(folder / RUN_STARTED, "glue run record")
        except ValueError:
            kept = {}
        differs = _differences(kept, records[job], run_config(cfg, *job))
        if not differs:
            resumed[job] = checkpoint_step(latest)
        elif cfg.overwrite:
            logger.info("glue: starting %s again: %s", folder, "; ".join(differs))
        else:
            raise ValueError(
                f"--output {cfg.output}: the run {folder}, stopped at step {checkpoint_step(latest)}, was started "
                f"from another model, data or settings ({'; '.join(differs)}): give the same to continue it, "
                "--overwrite to start such runs again, or another --output"
            )
    if resumed:
        logger.info(
            "glue: continuing from checkpoints: %s",
            ", ".join(f"{_name(j)} (step {n})" for j, n in resumed.items()),
        )
    if again:
        logger.info(
            "glue: starting again, stopped before their first checkpoint: %s", ", ".join(map(_name, again))
        )
    return set(resumed)


def _name(job: tuple[str, float, int]) -> str:
    return f"{job[0]} lr {job[1]:g} seed {job[2]}"


def _say_stopped(
    cfg: GlueConfig, jobs: list[tuple[str, float, int]], todo: list[tuple[str, float, int]]
) -> None:
    """What a stopped suite keeps: its finished runs, and where each run under way was saved (a run whose
    step outlasted the time to save it starts again)."""
    left = [j for j in todo if not (run_folder(cfg, *j) / RUN_RECORD).is_file()]
    under_way = [j for j in left if (run_folder(cfg, *j) / RUN_STARTED).is_file()]
    saved = {j: latest_checkpoint(run_folder(cfg, *j)) for j in under_way}
    said = [f"{_name(j)} at step {checkpoint_step(c)}" if c else f"{_name(j)} before a first checkpoint (starts again)"
            for j, c in saved.items()]  # fmt: skip
    done, n = len(jobs) - len(left), len(left)
    rest = ("them" if n > 1 else "it") if not done else "the other one" if n == 1 else f"the {n} others"
    kept = (f"{done} of {len(jobs)} runs are finished and kept in {cfg.output}" if done else
            f"none of the {n} runs is finished" if n > 1 else "the run is not finished")  # fmt: skip
    logger.warning("glue: stopped; %s: the same command runs %s%s", kept, rest,
                   f"; stopped part-way, they continue where saved: {', '.join(said)}" if said else "")  # fmt: skip


def glue_device(cfg: GlueConfig) -> str:
    """cpu or cuda: `device` with auto resolved (a GPU when torch sees one), checked to exist here."""
    from albert_lm.kernels.device import pick_device

    return pick_device(cfg.device).type


def _check_augment(cfg: GlueConfig, tasks: list[str]) -> None:
    """--augment's texts of each task counted before any run starts (`distill.augment.check_augment`):
    each run would refuse them itself, but only once the suite's other runs were under way."""
    from albert_lm.distill.augment import check_augment
    from albert_lm.training.evaluation import build_task, read_split

    for task in distilled(cfg, tasks):
        own = cfg.for_task(task)
        if not own.augment:
            continue
        ft = finetune_config(cfg, task, own.rates()[0], cfg.seed_list()[0])
        train = read_split(build_task(ft), Path(ft.data), "train", own.max_train_examples) or []
        check_augment(len(train), own.augment, f"{GLUE5[task][0]} training examples")


# Runs sharing one GPU by default: each is a process with its own CUDA context (~0.5 GB), and a small
# model's fine-tuning leaves the GPU mostly idle between its kernels, so a few at once fill it.
GPU_WORKERS = 4


def _workers(cfg: GlueConfig) -> int:
    if cfg.workers:
        return cfg.workers
    return GPU_WORKERS if glue_device(cfg) == "cuda" else os.cpu_count() or 1


def _execute(
    cfg: GlueConfig,
    todo: list[tuple[str, float, int]],
    records: dict[tuple[str, float, int], dict[str, Any]],
    resumed: set[tuple[str, float, int]],
) -> None:
    """The runs not done yet, `_workers` at a time. Each worker is a fresh interpreter (spawn), never a
    fork of a process that may hold torch's threads. A failed run, Ctrl-C or SIGTERM stops the running
    fine-tunings instead of leaving them on every core (a failed run fails the suite with its own error);
    finished runs are on disk and are skipped when the suite is started again."""
    if not todo:
        return
    done, started, workers = 0, time.monotonic(), _workers(cfg)
    # The runs' optimizer steps as they are taken: a run of all of SST-2 on a CPU says nothing else for an
    # hour (each finished run is logged below).
    bar = progress_bar(desc="glue", unit="step", postfix={"runs finished": f"0/{len(todo)}"},
                       bar_format="{desc}: {n_fmt} steps [{elapsed}, {rate_fmt}{postfix}]")  # fmt: skip

    def log(result: tuple[tuple[str, float, int], dict[str, Any]]) -> None:
        nonlocal done
        done += 1
        bar.set_postfix({"runs finished": f"{done}/{len(todo)}"})
        (task, rate, seed), record = result
        metric = GLUE5[task][1]
        spent = time.monotonic() - started
        left = (
            f", about {_minutes(time_left(spent, done, len(todo), workers))} left" if done < len(todo) else ""
        )
        logger.info(
            "glue %d/%d: %s lr %g seed %d -> %s %.4f (%s in%s)",
            done, len(todo), task, rate, seed, metric, record.get(metric), _minutes(spent), left,
        )  # fmt: skip

    def config(job: tuple[str, float, int]) -> FinetuneConfig | TaskDistillConfig:
        run = run_config(cfg, *job)
        return replace(run, resume=True, overwrite=False) if job in resumed else run

    jobs = [(job, config(job), records[job]) for job in todo]
    with bar, logs_above_bars():
        run_pool(_run, jobs, workers, "glue", load=_quiet_one_thread, progress=bar, on_result=log,
                 start="spawn", grace_s=STOP_GRACE_S)  # fmt: skip


def time_left(spent: float, done: int, runs: int, workers: int) -> float:
    """Seconds the suite's other runs take, from `spent` on `done` of `runs`: the runs under way (one a
    worker) count as half done, as they started with the ones that finished (a suite of 4 runs on 2
    workers, its first done at 55 s, has about 55 s left, not 165)."""
    under_way = min(workers, runs - done) / 2
    return spent / (done + under_way) * (runs - done - under_way)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
