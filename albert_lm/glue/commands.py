"""The GLUE stage's command: `albert glue` (registered by `albert_lm.cli`); it imports the suite's code only
when it runs."""

from __future__ import annotations

import argparse

from albert_lm.settings import add_config_option, add_options, load_settings

GLUE_REQUIRED = ("model", "data", "output")


def glue_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.glue.config import GlueConfig

    add_config_option(p, "glue")
    add_options(
        p,
        GlueConfig,
        required=GLUE_REQUIRED,
        metavars={"model": "DIR", "data": "DIR", "teachers": "DIR"},
        suppress=True,
    )


def run_glue(args: argparse.Namespace) -> int:
    """fine-tune one model on CoLA, SST-2, MRPC, STS-B and RTE (seeds x rates) and print the GLUE-5 table

    Fine-tunes the model on each task with every rate of --learning-rates and --seeds seeds, one process
    with one thread per run, --workers at a time; per task, the rate with the best mean dev score is kept
    and its mean +- std over seeds reported, beside the majority-class score; GLUE-5 averages CoLA MCC,
    SST-2 accuracy, MRPC accuracy, STS-B Pearson and RTE accuracy. Runs already finished in OUTPUT are
    not run again. Writes OUTPUT/glue_results.json."""
    from albert_lm.glue.config import GlueConfig
    from albert_lm.glue.grid import run_glue
    from albert_lm.glue.report import format_table

    print(format_table(run_glue(load_settings(GlueConfig, args, GLUE_REQUIRED))))
    return 0
