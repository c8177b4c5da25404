"""`albert`: the command line. Each subcommand parses its arguments and calls one library function.

Subcommands import their module only when run, so `albert --help` stays fast and a missing optional
dependency of one command never breaks another.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- albert params
def _add_params(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "params",
        help="print parameter counts for the presets and the paper's ablation grid",
        description="Parameter counts of the presets (paper Table 1) and of the base-size ablation grid "
        "(embedding size E x cross-layer sharing, paper Tables 3 and 4), counted on the meta device.",
    )
    p.add_argument("--preset", action="append", help="count only these presets (repeatable)")
    p.set_defaults(func=_run_params)


def _run_params(args: argparse.Namespace) -> int:
    from albert_lm.params import format_parameter_tables

    print(format_parameter_tables(args.preset))
    return 0


# --------------------------------------------------------------------------- entry point
_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_params]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="albert",
        description="albert-lm: ALBERT end to end in PyTorch (tokenizer, data, pretraining, fine-tuning).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        # Bad input: one clear line, non-zero exit, no traceback.
        print(f"albert {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
