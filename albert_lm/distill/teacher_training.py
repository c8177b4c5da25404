"""`albert distill teacher`: a transformers encoder fine-tuned on a task, the teacher that `albert distill
task` and `albert glue --teachers` read.

albert-lm's own training loop trains ALBERT folders; a teacher is another architecture (BERT, MiniLM,
MPNet, ...), so it is fine-tuned by transformers' Trainer, the library made for those models (it needs
accelerate: the `[distill]` extra). Around it, what every albert-lm command does:
- the task's files are read by albert-lm's readers (`albert finetune`'s) and checked before anything is
  written; the labels are saved under GLUE's conventional names (id2label), which `albert distill task`
  matches the task's labels by;
- the output is apart from the inputs and holds no other run (unless --overwrite); the Trainer saves a
  checkpoint after each epoch (OUTPUT/checkpoints, the newest kept), so a killed run continues from its
  last finished epoch with --resume, its settings checked against OUTPUT/teacher_config.json;
- a training loss that turns inf or NaN stops the run with an error, and nothing is saved as a teacher;
- the teacher is written under a temporary name and moved in with config.json last, so a folder with a
  config.json is a whole teacher; OUTPUT/eval_results.json holds the final dev scores and each epoch's
  (per_epoch), under the task's metric names as `albert finetune` writes them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.data.sources import MissingExtra
from albert_lm.distill.config import TeacherConfig
from albert_lm.distill.task import texts_of
from albert_lm.distill.teacher_files import local_teacher
from albert_lm.files import (
    atomic_write,
    check_output_apart,
    clear_folder,
    describe_folder,
    file_mode,
    folder_lock,
    read_json_object,
)
from albert_lm.hints import missing
from albert_lm.kernels.device import pick_device, resolved_precision
from albert_lm.tasks import Task
from albert_lm.tasks.glue import GlueTask, label_names
from albert_lm.training.evaluation import read_split
from albert_lm.training.optim import NonFiniteLossError
from albert_lm.training.run_folder import changed_settings

logger = logging.getLogger(__name__)

SETTINGS_FILE = "teacher_config.json"
CHECKPOINTS = "checkpoints"


class Encoded(torch.utils.data.Dataset):
    """The teacher tokenizer's features of a task's examples, with their label ids (or scores)."""

    def __init__(self, tokenizer: Any, task: Task, examples: Sequence[Any], max_length: int) -> None:
        pairs = [texts_of(e) for e in examples]
        second = None if all(b is None for _, b in pairs) else [b or "" for _, b in pairs]
        self.features = tokenizer([a for a, _ in pairs], second, truncation=True, max_length=max_length)
        self.labels = [float(e.label) if not task.labels else task.labels.index(e.label) for e in examples]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**{k: v[i] for k, v in self.features.items()}, "labels": self.labels[i]}


def finetune_teacher(cfg: TeacherConfig, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Fine-tune `cfg.teacher` on `cfg.task`; returns the dev scores (also OUTPUT/eval_results.json).
    `callbacks`: more Trainer callbacks (the tests interrupt a run with one)."""
    for package in ("transformers", "accelerate"):
        if importlib.util.find_spec(package) is None:
            raise MissingExtra(
                f"albert distill teacher needs {package} (transformers' Trainer): pip install -e '.[distill]' in "
                "the albert-lm clone"
            )
    task, data, out = cfg.build_task(), Path(str(cfg.data)), Path(str(cfg.output))
    if not data.exists():
        raise missing("--data", data)
    train = read_split(task, data, "train", cfg.max_train_examples)
    dev = read_split(task, data, "dev", cfg.max_eval_examples)
    for split, examples in (("training", train), ("dev", dev)):
        if not examples:
            raise FileNotFoundError(f"--data {data}: no {split} examples for {cfg.task} there")
    assert train is not None and dev is not None
    task.fit_labels_of(train, data)
    check_output_apart(out, {"--data": data, "--teacher": local_teacher(cfg.teacher)})
    _check_output(cfg, out)
    device = pick_device(cfg.device)
    precision = resolved_precision(cfg.precision, device)  # fp16 on a CPU refused
    loaded = _load(cfg, task, train, device)  # checked before anything is written
    with folder_lock(out):
        _check_output(cfg, out)  # again, under the lock
        if cfg.overwrite and any(out.iterdir()):
            logger.info("--overwrite: removing %s from %s", describe_folder(out), out)
            clear_folder(out)
        if not cfg.resume or not (out / SETTINGS_FILE).is_file():
            atomic_write(out / SETTINGS_FILE, json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
        if cfg.resume:
            _drop_cut_checkpoints(out)
        return _train(cfg, task, loaded, precision, train, dev, out, callbacks)


RUN_FILES = (SETTINGS_FILE, CHECKPOINTS, "config.json", "eval_results.json")


def _check_output(cfg: TeacherConfig, out: Path) -> None:
    """The output holds no other run (unless --overwrite); --resume needs an interrupted one with these
    settings."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    ours = out.is_dir() and any((out / name).exists() for name in RUN_FILES)
    finished = (out / "config.json").is_file()
    epoch_saved = bool(saved_epochs(out))  # a killed run's last finished epoch
    if cfg.resume:
        if finished or not epoch_saved:
            what = "a finished teacher" if finished else "no finished epoch to continue from"
            raise FileExistsError(f"--resume: --output {out} holds {what}; pass --overwrite to start again")
        saved = (
            read_json_object(out / SETTINGS_FILE, "teacher settings")
            if (out / SETTINGS_FILE).is_file()
            else {}
        )
        differs = changed_settings(
            saved, cfg, {f.name for f in dataclasses.fields(cfg) if f.metadata["resume"]}
        )
        if differs:
            raise ValueError(
                f"--resume: the run in {out} was started with other settings ({'; '.join(differs)})"
            )
    elif ours and not cfg.overwrite:
        hint = "pass --resume to continue it, " if not finished and epoch_saved else ""
        raise FileExistsError(
            f"--output {out} holds another run ({describe_folder(out)}): {hint}pass --overwrite to replace it, "
            "or choose another --output"
        )


def saved_epochs(out: Path) -> list[Path]:
    """The whole epoch checkpoints of a run in `out`: the Trainer writes trainer_state.json last, so a
    checkpoint without it was cut short by a signal, and its --resume would fail on the missing file."""
    return sorted(p for p in (out / CHECKPOINTS).glob("checkpoint-*") if (p / "trainer_state.json").is_file())


def _drop_cut_checkpoints(out: Path) -> None:
    """Remove the checkpoints a signal cut short (`saved_epochs`): --resume continues the last whole one."""
    for p in sorted(set((out / CHECKPOINTS).glob("checkpoint-*")) - set(saved_epochs(out))):
        logger.warning("--resume: %s was cut short by the stop (no trainer_state.json): removed", p)
        shutil.rmtree(p)


def _train(
    cfg: TeacherConfig, task: Task, loaded: tuple[Any, Any], precision: str, train: list[Any], dev: list[Any],
    out: Path, callbacks: Sequence[Any],
) -> dict[str, Any]:  # fmt: skip
    import transformers

    tokenizer, model = loaded
    device = next(model.parameters()).device
    steps_per_epoch = -(-len(train) // cfg.batch_size)
    args = transformers.TrainingArguments(
        output_dir=str(out / CHECKPOINTS), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size, per_device_eval_batch_size=2 * cfg.batch_size,
        warmup_steps=int(0.1 * cfg.epochs * steps_per_epoch), weight_decay=0.01, eval_strategy="epoch",
        save_strategy="epoch", save_total_limit=1, logging_steps=max(1, min(100, steps_per_epoch)),
        seed=cfg.seed, bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=device.type == "cpu",
        report_to=[], disable_tqdm=True,  # its bar and printed dicts replaced by _progress()
    )  # fmt: skip

    def scores(prediction: Any) -> dict[str, float]:
        logits = np.asarray(prediction.predictions)
        return task.score(dev, task.predict(dev, [], [{"logits": row} for row in logits]))

    watch = _non_finite_watch()
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Encoded(tokenizer, task, train, cfg.max_seq_length),
        eval_dataset=Encoded(tokenizer, task, dev, cfg.max_seq_length), compute_metrics=scores,
        data_collator=transformers.DataCollatorWithPadding(tokenizer), callbacks=[watch, *callbacks],
    )  # fmt: skip
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # dicts of strings on stdout
    trainer.add_callback(_progress())
    logger.info("teacher %s on %s: %d training examples, %d dev, on %s (%s)", cfg.teacher, cfg.task,
                len(train), len(dev), device, precision)  # fmt: skip
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # its bars (saving the weights): _progress() shows ours
    try:
        trainer.train(resume_from_checkpoint=cfg.resume)
        if watch.bad is not None or not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            step = f" at step {watch.bad[0]} (loss {watch.bad[1]})" if watch.bad else ""
            raise NonFiniteLossError(
                f"the teacher's training went non-finite{step}: nothing saved as a teacher; lower "
                f"--learning-rate or check --teacher {cfg.teacher} (its weights may hold inf or NaN)"
            )
        result = _final_scores(trainer)
        _save(trainer, tokenizer, out, result)
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    return result


def _final_scores(trainer: Any) -> dict[str, Any]:
    """The dev scores of the trained teacher, with each epoch's (per_epoch): the last epoch's evaluation,
    which is of the final weights (a second pass over dev only where it is not)."""
    evals = [e for e in trainer.state.log_history if "eval_loss" in e]
    per_epoch = [{k.removeprefix("eval_"): v for k, v in e.items()} for e in evals]
    last = evals[-1] if evals and evals[-1].get("step") == trainer.state.global_step else trainer.evaluate()
    result: dict[str, Any] = {k.removeprefix("eval_"): v for k, v in last.items() if k != "step"}
    return {**result, "per_epoch": per_epoch}


def _load(cfg: TeacherConfig, task: Task, train: Sequence[Any], device: torch.device) -> tuple[Any, Any]:
    """The teacher's tokenizer, and its encoder with a new classifier for the task's labels (GLUE's names),
    both checked as `albert distill` checks a teacher (EncoderToFineTune): a folder whose tokenizer does not
    read the task's text, which lacks encoder weights or holds non-finite ones is refused, naming the file."""
    import transformers

    from albert_lm.distill.teacher import EncoderToFineTune

    transformers.set_seed(cfg.seed)  # the new classifier's first weights too
    names = list(label_names(task.name)) if isinstance(task, GlueTask) and task.labels else list(task.labels)
    encoder = EncoderToFineTune(cfg.teacher, device, names)
    positions = getattr(encoder.hf_config, "max_position_embeddings", None)
    if isinstance(positions, int) and 0 < positions < cfg.max_seq_length:
        raise ValueError(
            f"--max-seq-length {cfg.max_seq_length}: the teacher {cfg.teacher} reads at most {positions} "
            "tokens (config.json max_position_embeddings); pass --max-seq-length "
            f"{positions} or less"
        )
    encoder.check_reads([t for e in train for t in texts_of(e) if t])
    model = encoder.checked_model()
    outputs = ", ".join(names) if names else "a score"
    logger.info("a new classifier on %s's encoder: %d output(s), %s", cfg.teacher, task.num_labels, outputs)
    return encoder.tokenizer, model


def _progress() -> Any:
    """A Trainer callback that shows its progress as every albert command does: a bar on a terminal (none
    under --quiet) and the training loss and each epoch's dev scores as log lines."""
    import transformers

    from albert_lm.progress import progress_bar

    class Progress(transformers.TrainerCallback):
        bar: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar = progress_bar(
                total=state.max_steps, initial=state.global_step, desc="teacher", unit="step"
            )

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar.update(state.global_step - self.bar.n)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            skip = ("runtime", "per_second", "learning_rate", "epoch", "total_flos")
            shown = {k.removeprefix("eval_"): v for k, v in (logs or {}).items()
                     if isinstance(v, float) and not k.endswith(skip)}  # fmt: skip
            if shown:
                what = "dev" if any(k.startswith("eval_") for k in logs) else "train"
                line = "  ".join(f"{k} {v:.4g}" for k, v in shown.items())
                epoch = f"epoch {state.epoch:.3g}, " if state.epoch is not None else ""
                logger.info(
                    "teacher %sstep %d/%d (%s): %s", epoch, state.global_step, state.max_steps, what, line
                )

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar.close()

    return Progress()


def _non_finite_watch() -> Any:
    """A Trainer callback that stops training at the first logged loss that is inf or NaN (`bad`: its step
    and value)."""
    import transformers

    class Watch(transformers.TrainerCallback):
        bad: tuple[int, float] | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(loss):
                self.bad = (state.global_step, loss)
                control.should_training_stop = True

    return Watch()


def _save(trainer: Any, tokenizer: Any, out: Path, result: dict[str, Any]) -> None:
    """The teacher in OUTPUT: written under a temporary name, then moved in with config.json last; the
    scores beside it; the checkpoints removed."""
    tmp = out / ".teacher.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save_model(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    atomic_write(out / "eval_results.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
    for p in sorted(tmp.iterdir(), key=lambda p: p.name == "config.json"):
        p.chmod(file_mode())  # the Trainer's weights come private (0600): a teacher folder is shared
        os.replace(p, out / p.name)
    tmp.rmdir()
    shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
    if (out / "training_args.bin").is_file():
        (out / "training_args.bin").unlink()  # the Trainer's pickle: its settings are teacher_config.json
    logger.info("teacher saved in %s: %s", out, {k: v for k, v in result.items() if k != "per_epoch"})
