"""The command line's parser: a misspelt command or option gets the nearest one it could be ("did you
mean --model?"), and a command of many options gets a usage line that names its required ones only
(--help lists every option just below, in groups)."""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import typing
from collections.abc import Iterable
from typing import Any

SHORT_USAGE_FROM = 8  # more optional options than this: a short usage line (SuggestingParser)


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser (and so its subcommands' parsers) whose errors, exit code 2, name the option
    nearest one it does not know, of the command typed: `albert finetune --modle`: did you mean --model?"""

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
        needed = [a for a in self._actions if a.required or not a.option_strings]
        words = [a.option_strings[0] + " " + str(a.metavar or a.dest.upper()) if a.option_strings
                 else str(a.metavar or a.dest) for a in needed]  # fmt: skip
        self.usage = " ".join(["%(prog)s", *words, "[options]"])

    def error(self, message: str) -> typing.NoReturn:  # also "required: --from-tf" after a --form-tf
        super().error(message + did_you_mean(self, getattr(self, "_typed", [])) + self._command_hint(message))

    def _command_hint(self, message: str) -> str:
        """ "; did you mean pretrain?" after `albert pretrian`'s invalid choice (a subcommand's name)."""
        import difflib

        bad = re.search(r"invalid choice: '?([^'\s]+)'?", message)
        subs = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if bad is None or not subs:
            return ""
        close = difflib.get_close_matches(bad[1], list(subs[0].choices), n=1)
        return f"; did you mean {close[0]}?" if close else ""


def did_you_mean(parser: argparse.ArgumentParser, typed: Iterable[str]) -> str:
    """The hint "; did you mean --model?" for each option in `typed` unknown to `parser` and close (difflib)
    to one --help shows, or to the first or last words of some (pretrain's --modle: --model-config ...)."""
    import difflib

    every, names, hints = [s for a in parser._actions for s in a.option_strings], _option_names(parser), {}
    for flag in (t.split("=", 1)[0] for t in itertools.takewhile(lambda t: t != "--", typed)):
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
