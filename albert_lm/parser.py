"""The command line's parser: a misspelt command or option gets the nearest one it could be ("did you
mean --model?"), and a command of many options gets a usage line that names its required ones only
(--help lists every option just below, in groups)."""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import textwrap
import typing
from collections.abc import Iterable
from typing import Any

SHORT_USAGE_FROM = 8  # more optional options than this: a short usage line (SuggestingParser)

# Other tools' names for options albert-lm names otherwise (transformers' Trainer and run_glue.py,
# google-research's flags): typed here, they get ours as the hint, where the command has it.
KNOWN_AS = {
    "--num-train-epochs": "--epochs",
    "--lr": "--learning-rate",
    "--fp16": "--precision fp16",
    "--bf16": "--precision bf16",
    "--output-dir": "--output",
    "--model-name-or-path": "--model",
    "--model": "--init-from",
    "--per-device-train-batch-size": "--batch-size",
    "--train-batch-size": "--batch-size",
    "--max-length": "--max-seq-length",
    "--num-warmup-steps": "--warmup-steps",
    "--num-train-steps": "--max-steps",
    "--vocab-file": "--tokenizer",
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped between words only: a name such as albert-base or --exit-confidence is
    never split at its hyphen, so what --help shows can be copied as it is."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.fill(
            text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser (and so its subcommands' parsers) whose errors, exit code 2, name the option
    nearest one it does not know, of the command typed: `albert finetune --modle`: did you mean --model?"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._typed = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # said by the command typed, with its usage (argparse's own error names the top parser)
            chosen = self
            while subs := [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]:
                if (name := getattr(parsed, subs[0].dest, None)) not in subs[0].choices:
                    break
                chosen = subs[0].choices[name]
            chosen.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def format_usage(self) -> str:
        self._shorten_usage()
        return super().format_usage()

    def format_help(self) -> str:
        self._shorten_usage()
        return super().format_help()

    def _shorten_usage(self) -> None:
        """A command of many options says `usage: albert pretrain [options]` with its required ones,
        not twenty lines of every option in brackets (--help lists them, in groups, just below)."""
        optional = [a for a in self._actions if a.option_strings and not a.required]
        if self.usage is not None or len(optional) <= SHORT_USAGE_FROM:
            return
        # required: argparse's, or one a --config FILE may give instead (its help says "(required)")
        needed = [a for a in self._actions if a.required or not a.option_strings
                  or str(a.help or "").endswith("(required)")]  # fmt: skip
        words = [a.option_strings[0] + " " + str(a.metavar or a.dest.upper()) if a.option_strings
                 else str(a.metavar or a.dest) for a in needed]  # fmt: skip
        self.usage = " ".join(["%(prog)s", *words, "[options]"])

    def error(self, message: str) -> typing.NoReturn:  # also "required: --from-tf" after a --form-tf
        empty = re.match(r"(argument \S+): invalid choice: ''", message)
        if empty:  # said as an empty value is everywhere (the shell variable that was never set)
            super().error(f"{empty[1]}: empty value; give a value or leave the option out")
        super().error(message + did_you_mean(self, getattr(self, "_typed", [])) + self._command_hint(message))

    def _command_hint(self, message: str) -> str:
        """ "; did you mean pretrain?" after `albert pretrian`'s invalid choice (a subcommand's name, or a
        positional argument's choice: `albert reproduce embeding`)."""
        import difflib

        bad = re.search(r"invalid choice: '?([^'\s]+)'?", message)
        listed = re.search(r"\(choose from (.*)\)", message)
        if bad is None or listed is None:
            return ""
        choices = [c.strip().strip("'") for c in listed[1].split(",")]
        close = difflib.get_close_matches(bad[1], choices, n=1)
        return f"; did you mean {close[0]}?" if close else ""


def did_you_mean(parser: argparse.ArgumentParser, typed: Iterable[str]) -> str:
    """The hint "; did you mean --model?" for each option in `typed` unknown to `parser` and close (difflib)
    to one --help shows, or to the first or last words of some (pretrain's --modle: --model-config ...)."""
    import difflib

    every, names, hints = [s for a in parser._actions for s in a.option_strings], _option_names(parser), {}
    for flag in (t.split("=", 1)[0] for t in itertools.takewhile(lambda t: t != "--", typed)):
        if flag not in every and KNOWN_AS.get(flag, "").split(" ")[0] in every:
            hints[flag] = KNOWN_AS[flag]  # another tool's name for one of ours
            continue
        if flag[:1] != "-" or any(s == flag or (flag[:2] == "--" and s.startswith(flag)) for s in every):
            continue  # a value, or a known option (or its abbreviation, which argparse takes)
        if close := difflib.get_close_matches(flag.lstrip("-"), names, n=1):
            options = [o for o in names[close[0]] if o.lstrip("-") == close[0]] or names[close[0]][:3]
            hints[flag] = " or ".join(options)
    if len(hints) == 1:
        return f"; did you mean {next(iter(hints.values()))}?"
    return "".join(f"; {k}: did you mean {v}?" for k, v in hints.items())


def _option_names(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """The options --help shows by their names without dashes, and by their first and last words."""
    names: dict[str, list[str]] = {}
    for flag in (s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings):
        words = flag.lstrip("-").split("-")  # "model" and "config" of --model-config name it too
        ends = [words[:n] for n in range(1, len(words) + 1)] + [words[n:] for n in range(len(words))]
        for part in {"-".join(w) for w in ends}:
            names.setdefault(part, []).append(flag)
    return names
