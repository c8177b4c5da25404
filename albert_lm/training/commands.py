"""The training stage's commands: `albert pretrain`, `finetune` and `evaluate` (registered by
`albert_lm.cli`).

Like every command, it imports the training code only when it runs: building the parser stays free of torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from albert_lm.model.config import PRESETS
from albert_lm.settings import (
    add_config_option,
    add_options,
    add_recipe_option,
    field_docs,
    load_settings,
    option_values,
    recipe_section,
)

FINETUNE_REQUIRED = ("task", "model", "data", "output")
FINETUNE_BOOKKEEPING = ("labels", "tokenizer_fingerprint", "model_given")  # in a run's finetune_config.json
EVALUATE_REQUIRED = ("task", "data")


def pretrain_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.training.pretrain_config import PretrainConfig

    p.add_argument("--config", default=None, metavar="FILE", help="JSON file of pretraining settings")
    add_recipe_option(p, "pretrain")
    # Options not typed keep the config file's value (or the default): suppress=True.
    add_options(
        p,
        PretrainConfig,
        skip=("model_overrides",),
        suppress=True,
        choices={"preset": PRESETS},
        metavars={
            "model_config": "FILE",
            "init_from": "MODEL",
            "eval_text": "FILE",
            "data": "DIR",
            "time_budget": "TIME",
        },
        helps={"learning_rate": _learning_rate_help(PretrainConfig)},
    )
    p.add_argument(
        "--model-override",
        action="append",
        default=argparse.SUPPRESS,
        metavar="KEY=VALUE",
        dest="model_overrides",
        help="change one model config field, e.g. num_hidden_layers=24 (repeatable)",
    )
    p.add_argument(
        "--text",
        nargs="+",
        metavar="PATH",
        help="text files, folders or globs instead of --data: with --init-from MODEL, "
        "continued pretraining on your own text in one command (examples made with the model's tokenizer in "
        "OUTPUT/data; the recipe's data settings apply)",
    )
    p.add_argument(
        "--strip-gutenberg",
        action="store_true",
        help="with --text: keep only the text between Project Gutenberg markers of the books that have them "
        "(as `albert data create`)",
    )
    p.add_argument(
        "--text-column",
        metavar="NAME",
        help="with --text: field of JSON Lines records and column of Parquet files that holds the text "
        "(default text)",
    )


def run_pretrain(args: argparse.Namespace) -> int:
    """pretrain ALBERT (masked LM + SOP, LAMB) on a folder from `albert data create`

    Pretrain ALBERT as the paper did (Section 4.1: MLM + SOP, LAMB, lr 0.00176 at batch 4096, warmup
    then linear decay). Settings come from --config (a JSON of PretrainConfig fields, e.g. a run's
    pretrain_config.json), then these options. Writes OUTPUT/checkpoint-STEP/ every --save-every steps
    (transformers' layout + training state; the last --keep-last kept), the final model in OUTPUT/,
    OUTPUT/metrics.jsonl, TensorBoard events and training_curves.png. SIGTERM/SIGINT save and exit;
    --resume continues exactly. Several processes: `torchrun --nproc-per-node N -m albert_lm.cli
    pretrain ...` (batch size is per process). The bundled demo is `albert demo`."""
    import json

    from albert_lm.training.pretrain import PretrainConfig, pretrain

    given = option_values(args, PretrainConfig)
    if given.get("resume") and not args.config and given.get("output"):
        _resume_settings(args, "pretrain_config.json", ("data",) if not args.text else ())
    elif args.config:
        _check_started_here(args, Path(args.config), resumed=False)
    if "model_overrides" in given:
        given["model_overrides"] = PretrainConfig.parse_overrides(given["model_overrides"])
    cfg = PretrainConfig.load(args.config, recipe_section(args, "pretrain"), args.recipe or "", **given)
    cfg = _shape_from_init(cfg, args, given)
    for option, value in (("--strip-gutenberg", args.strip_gutenberg), ("--text-column", args.text_column)):
        if value and not args.text:
            raise ValueError(f"{option} applies to --text (plain text); --data holds examples made already")
    if args.text:
        from albert_lm.training.text_data import data_from_text

        section = dict(recipe_section(args, "data"))
        section.update({"strip_gutenberg": True} if args.strip_gutenberg else {})
        section.update({"text_column": args.text_column} if args.text_column else {})
        cfg = data_from_text(cfg, args.text, section)
    if cfg.data is None:
        raise ValueError(
            "no data: pass --data DIR (a folder made by `albert data create`), --text FILE with --init-from "
            "MODEL, or a --config FILE that names data; `albert demo` runs the bundled demo"
        )
    result = pretrain(cfg)
    # saved, but not finished: scripts must not go on as if it had
    code = 128 + int(result.signum or 15) if result.interrupted else 0
    # under torchrun, rank 0 speaks for the run: one result line, not one a process
    if os.environ.get("RANK", "0") != "0":
        return code
    print(json.dumps({"output": str(result.output), "step": result.step, "interrupted": result.interrupted}))
    if result.interrupted:
        print(
            f"albert pretrain: stopped at step {result.step} (checkpoint saved); continue with --resume",
            file=sys.stderr,
        )
    return code


def _learning_rate_help(cls: Any) -> str:
    """The rate's help with the square-root rule's figures computed, never typed by hand."""
    figures = ", ".join(f"{cls.scaled_learning_rate(b):.2g} at {b}" for b in (64, 256, 512, 1024, 2048))
    return (
        "peak learning rate for your global batch B (batch-size x accumulation x processes). The paper's "
        f"0.00176 is for 4096; scale it by sqrt(B / 4096) (LAMB's square-root rule): {figures} (default 0.00176)"
    )


def _run_settings(run: Path, name: str = "pretrain_config.json") -> str | None:
    """The settings file `name` of the run in `run`: its own (a finished run's), else its newest
    checkpoint's."""
    if (run / name).is_file():
        return str(run / name)
    steps = [
        (int(p.name.split("-")[1]), p) for p in run.glob("checkpoint-*") if p.name.split("-")[1].isdigit()
    ]
    for _, folder in sorted(steps, reverse=True):
        if (folder / name).is_file():
            return str(folder / name)
    return None


def _resume_settings(args: argparse.Namespace, name: str, needed: Sequence[str]) -> None:
    """`--output RUN --resume` with no --config: the run's own settings as --config. Where the run has
    none and the options `needed` are not all typed, say why there is nothing to resume."""
    from albert_lm.files import describe_folder

    run = Path(args.output)
    args.config = _run_settings(run, name)
    if args.config is not None:
        _check_started_here(args, Path(args.config))
        return
    if all(getattr(args, n, None) is not None for n in needed):
        return
    if not run.is_dir():
        raise FileNotFoundError(f"--output {run} --resume: no such folder, so no run to resume")
    done = (run / "best").is_dir() or (run / "model.safetensors").is_file()
    raise ValueError(
        f"--output {run} --resume: "
        + (
            "the run there has finished (its checkpoints are gone with its end): nothing to resume"
            if done
            else f"no checkpoint to resume there (it holds {describe_folder(run)})"
        )
    )


def _check_started_here(args: argparse.Namespace, settings: Path, resumed: bool = True) -> None:
    """A run resumed (or a --config file read, `resumed` False) from another folder than the one it was
    started in: its relative paths (--data glue/SST-2) are read from here and not found. Say so, and name
    the folder it started in where the run's own relative --output shows it, rather than "no such folder"
    of a path the user never typed."""
    from albert_lm.files import read_json_object

    saved = read_json_object(settings, "settings")
    lost = [
        n
        for n in ("data", "eval_text", "model_config", "tokenizer")  # paths only (a --model may be a hub id)
        if getattr(args, n, None) is None  # typed again now: that path is the one read
        and isinstance(saved.get(n), str)
        and not os.path.isabs(saved[n])
        and not os.path.exists(saved[n])
    ]
    if not lost:
        return
    typed = getattr(args, "output", None)  # absent where not given (argparse.SUPPRESS)
    given, out = Path(os.path.abspath(typed or ".")), saved.get("output")
    started = None
    if typed and isinstance(out, str) and out and not os.path.isabs(out):
        parts = Path(os.path.normpath(out)).parts
        if given.parts[-len(parts) :] == parts:
            started = Path(*given.parts[: -len(parts)])
    paths = " and ".join(f"--{n.replace('_', '-')} {saved[n]}" for n in lost)
    where = f"from {started}" if started is not None else "from the folder it was started in"
    if not resumed:  # a settings file's relative paths are read from the current folder
        raise FileNotFoundError(
            f"--config {settings}: its {paths}: not found from the current folder ({os.getcwd()}), from "
            f"which a settings file's relative paths are read: run the command "
            f"{where if started not in (None, Path.cwd()) else 'from the folder they are relative to'}, or give "
            f"{'that option' if len(lost) == 1 else 'those options'} again with a path from here"
        )
    raise FileNotFoundError(
        f"--output {args.output} --resume: the run's {paths} {'is' if len(lost) == 1 else 'are'} relative "
        f"to the folder it was started in, not found from here ({os.getcwd()}): run the same command {where}, "
        f"or give {'that option' if len(lost) == 1 else 'those options'} again with a path from here"
    )


def _shape_from_init(cfg: Any, args: argparse.Namespace, given: dict) -> Any:
    """`--init-from MODEL` with no shape asked for (no --preset or --model-config on the command line, in
    the --config file or in the recipe) takes MODEL's shape, as a user means: building the default preset
    instead would load none of MODEL's tensors. --model-override still changes it on request."""
    import dataclasses

    from albert_lm.files import read_json_object

    if not cfg.init_from or cfg.resume:
        return cfg
    sources = [given, recipe_section(args, "pretrain")]
    if args.config:
        sources.append(read_json_object(args.config, "pretraining settings"))
    if any(key in source for source in sources for key in ("preset", "model_config")):
        return cfg
    config = Path(cfg.init_from) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"--init-from {cfg.init_from}: no config.json there (expected a model folder)"
        )
    return dataclasses.replace(cfg, model_config=str(config))


# --------------------------------------------------------------------------- albert finetune
def finetune_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.tasks import TASK_NAMES  # numpy only: --help stays fast
    from albert_lm.training.finetune_config import FinetuneConfig

    add_config_option(p, "fine-tuning", "a run's finetune_config.json")
    add_options(
        p,
        FinetuneConfig,
        required=FINETUNE_REQUIRED,
        choices={"task": TASK_NAMES},
        suppress=True,
    )


def run_finetune(args: argparse.Namespace) -> int:
    """fine-tune a checkpoint on GLUE, SQuAD 1.1/2.0, RACE or your own CSV/JSONL data

    Fine-tune an ALBERT checkpoint (a transformers-layout folder with its tokenizer) on a downstream
    task, evaluating on dev as it goes and keeping the best checkpoint in OUTPUT/best. Unset options
    take google-research's per-task defaults (docs/finetune.md). Writes OUTPUT/eval_results.json,
    OUTPUT/metrics.jsonl, TensorBoard events, training_curves.png and OUTPUT/predictions/; OUTPUT/best has
    a model card (README.md) with the settings and dev scores."""
    import json

    from albert_lm.runtime.finetuned import SAVED_FILE
    from albert_lm.training.finetune import FinetuneConfig, FinetuneStopped, finetune

    if getattr(args, "resume", False) and not args.config and getattr(args, "output", None):
        _resume_settings(args, SAVED_FILE, ("task", "model", "data"))
    elif args.config:
        _check_started_here(args, Path(args.config), resumed=False)
    cfg = load_settings(FinetuneConfig, args, FINETUNE_REQUIRED, ignored=FINETUNE_BOOKKEEPING)
    try:
        result = finetune(cfg)
    except FinetuneStopped as stopped:  # saved, but not finished: scripts must not go on as if it had
        print(f"albert finetune: {stopped}", file=sys.stderr)
        return 128 + stopped.signum
    print(json.dumps(result, sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert evaluate
def evaluate_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.runtime.exits import ExitSettings
    from albert_lm.training.finetune_config import EvaluateConfig

    add_config_option(p, "evaluate")
    add_options(
        p,
        EvaluateConfig,
        required=("data",),  # and --task, which a fine-tuned --model records (run_evaluate)
        suppress=True,
        helps={"overwrite": field_docs(EvaluateConfig)["overwrite"], **field_docs(ExitSettings)},
        metavars={
            "model": "MODEL",
            "output": "DIR",
            "data": "PATH",
            "predictions": "FILE",
            "na_probs": "FILE",
        },
        groups={
            "task and data": ("task", "data", "max_eval_examples"),
            "a SQuAD predictions file": ("predictions", "na_probs", "na_prob_thresh"),
            "a fine-tuned model": ("model", "output", "overwrite", "batch_size", "max_seq_length"),
            "early exit (a model fine-tuned with --exit-heads)": ("patience", "exit_confidence", "depth"),
            "your own data's columns": (
                "text_column",
                "text_pair_column",
                "label_column",
                "tokens_column",
                "tags_column",
            ),
            "machine": ("device", "precision"),
        },
    )


def _recorded_task(args: argparse.Namespace) -> None:
    """No --task with a fine-tuned local --model: the task its finetune_config.json records, said."""
    from albert_lm.runtime.finetuned import read_saved_settings

    model = getattr(args, "model", None)
    given = getattr(args, "task", None) is not None or getattr(args, "config", None)  # --config may name it
    task = read_saved_settings(model).get("task") if not given and model and Path(model).is_dir() else None
    if task:
        logging.getLogger("albert_lm").info("--task %s, as %s was fine-tuned", task, model)
        args.task = task


def run_evaluate(args: argparse.Namespace) -> int:
    """score a SQuAD predictions file, or a fine-tuned model on a task's dev set

    With --predictions: score a SQuAD predictions JSON (question id -> answer text) against the official
    dev JSON as evaluate-v1.1.py / evaluate-v2.0.py do. With --model: run a fine-tuned model on the
    task's dev set. Either way the metrics are printed as one JSON object on the last line."""
    import json

    from albert_lm.training.finetune_config import EvaluateConfig

    _recorded_task(args)
    cfg = load_settings(EvaluateConfig, args, EVALUATE_REQUIRED)
    if cfg.predictions and cfg.model:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model), not both")
    if cfg.output and not cfg.model:
        raise ValueError("--output goes with --model (the scores of --predictions are printed only)")
    if cfg.predictions:
        if cfg.task not in ("squad1", "squad2"):
            raise ValueError(f"--predictions scores SQuAD files only; got --task {cfg.task}")
        from albert_lm.tasks.squad import score_prediction_file

        result = score_prediction_file(
            cfg.data, cfg.predictions, cfg.task == "squad2", cfg.na_probs, cfg.na_prob_thresh
        )
    elif cfg.model:
        from albert_lm.training.evaluation import evaluate_model

        result = evaluate_model(
            cfg.task,
            cfg.model,
            cfg.data,
            cfg.output,
            batch_size=cfg.batch_size,
            max_seq_length=cfg.max_seq_length,
            device=cfg.device,
            precision=cfg.precision,
            overwrite=cfg.overwrite,
            exit_rule=cfg.exit_rule_values(),
            max_eval_examples=cfg.max_eval_examples,
            columns=cfg.columns(),
        )
    else:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model)")
    print(json.dumps(result, sort_keys=True))
    return 0
