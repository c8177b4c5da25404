"""The GLUE stage's command: `albert glue` (registered by `albert_lm.cli`); it imports the suite's code only
when it runs."""

from __future__ import annotations

import argparse

from albert_lm.settings import (
    add_config_option,
    add_options,
    add_recipe_option,
    load_settings,
    recipe_section,
)

GLUE_REQUIRED = ("model", "data", "output")
GLUE_GROUPS = {
    "model, data and output": ("model", "data", "output", "tasks", "teachers", "overwrite"),
    "the runs": (
        "seeds",
        "learning_rates",
        "epochs",
        "batch_size",
        "max_seq_length",
        "max_train_examples",
        "max_eval_examples",
        "augment",
        "exit_heads",
        "classifier_pooling",
        "bi_encoder",
    ),  # fmt: skip
    "machine": ("workers", "precision", "device"),
}


def glue_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.glue.config import GlueConfig

    add_config_option(p, "glue")
    add_recipe_option(p, "glue")
    add_options(
        p,
        GlueConfig,
        skip=("task_settings",),
        required=GLUE_REQUIRED,
        metavars={
            "model": "DIR",
            "data": "DIR",
            "teachers": "DIR",
            "tasks": "LIST",
            "learning_rates": "LIST",
        },
        suppress=True,
        groups=GLUE_GROUPS,
    )
    runs = next(g for g in p._action_groups if g.title == "the runs")
    runs.add_argument(
        "--task-setting",
        action="append",
        default=argparse.SUPPRESS,
        metavar="TASK.NAME=VALUE",
        dest="task_settings",
        help="one task's own value of a setting above, e.g. stsb.bi_encoder=true, stsb.learning_rates=2e-5, "
        "mrpc.teachers=null (fine-tuned on the gold labels though --teachers is given); repeatable",
    )


def run_glue(args: argparse.Namespace) -> int:
    """fine-tune one model on CoLA, SST-2, MRPC, STS-B and RTE (seeds x rates) and print the GLUE-5 table

    Fine-tunes the model on each task with every rate of --learning-rates and --seeds seeds, one process
    with one thread per run, --workers at a time; per task, the rate with the best mean dev score is kept
    and its mean +- std over seeds reported, beside the majority-class score; GLUE-5 averages CoLA MCC,
    SST-2 accuracy, MRPC accuracy, STS-B Pearson and RTE accuracy. Runs already finished in OUTPUT are
    not run again. Writes OUTPUT/glue_results.json, of the runs this command asked for (runs of other
    tasks, rates or seeds stay in OUTPUT, reused when asked for again)."""
    from albert_lm.glue.config import GlueConfig
    from albert_lm.glue.grid import run_glue
    from albert_lm.glue.report import format_table

    section = recipe_section(args, "glue")
    if "task_settings" in args:
        args.task_settings = _typed_over(
            GlueConfig.parse_task_settings(args.task_settings), section, args.config
        )
    cfg = load_settings(GlueConfig, args, GLUE_REQUIRED, recipe_values=section, recipe_name=args.recipe or "")
    print(format_table(run_glue(cfg)))
    return 0


def _typed_over(typed: dict[str, dict], recipe: dict, config: str | None) -> dict[str, dict]:
    """--task-setting's values over the task settings below them (the --config file's, else the recipe's),
    setting by setting: `--recipe R --task-setting stsb.epochs=5` changes that one value of R's STS-B."""
    from albert_lm.files import read_json_object

    below = recipe.get("task_settings")
    if config is not None:
        below = read_json_object(config, "settings").get("task_settings", below)
    if not isinstance(below, dict):
        return typed  # none below (or not an object, which the settings' own check names)
    return {t: {**(below.get(t) or {}), **typed.get(t, {})} for t in {*below, *typed}}
