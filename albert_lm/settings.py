"""Settings in one place: a config dataclass's fields, defaults and attribute docstrings become the
command line's options, so no default or help text is written twice.

    @dataclass
    class PretrainConfig:
        max_steps: int = 125_000
        \"\"\"optimizer steps\"\"\"

gives `--max-steps N` with the help "optimizer steps (default 125000)". `Literal[...]` types become
choices, `bool` a switch (`--no-NAME` where the default is on), `X | None` an optional X.

Written here rather than taken from jsonargparse or tyro: both rewrite `--help` in their own layout
(grouped, typed, much longer than ours) and neither gives the one rule our pretraining CLI needs: an
option the user did not type must not override the value from `--config FILE`. That takes ~80 lines.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, read_json_object

__all__ = [
    "RECIPE_DIR",
    "add_options",
    "check_fields",
    "check_ranges",
    "field_docs",
    "option_values",
    "parse_duration",
    "recipe",
    "recipe_names",
]


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass: the string literal right under each field."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (frozen or zipped install): options without help
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for node, after in zip(body.body, [*body.body[1:], None], strict=True):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


_METAVARS = {int: "N", float: "X"}


def _union_args(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return None


def _matches(value: Any, hint: Any) -> bool:
    """Whether `value` (from JSON or the command line) is of type `hint` as a config field means it:
    no bool for an int, no string for a number, only finite floats."""
    if hint is Any:
        return True
    if (args := _union_args(hint)) is not None:
        return any(_matches(value, a) for a in args)
    if typing.get_origin(hint) is typing.Literal:
        return any(type(value) is type(c) and value == c for c in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    origin = typing.get_origin(hint) or hint
    return isinstance(value, origin) if isinstance(origin, type) else True


def _describe(hint: Any) -> str:
    if (args := _union_args(hint)) is not None:
        return " or ".join(_describe(a) for a in args)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(json_repr(c) for c in typing.get_args(hint))
    names = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false",
             type(None): "null", dict: "a JSON object", list: "a list"}  # fmt: skip
    return names.get(typing.get_origin(hint) or hint, str(hint))


def json_repr(value: Any) -> str:
    """A value as the user wrote it in JSON: "3" for a string, 3 for a number, null, true."""
    import json

    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


# Ranges `check_ranges` knows: (test, what the message says a value must be).
_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "at_least_one": (lambda v: v >= 1, ">= 1"),
    "positive": (lambda v: v > 0, "> 0"),
    "non_negative": (lambda v: v >= 0, ">= 0"),
    "fraction": (lambda v: 0 <= v < 1, "in [0, 1)"),
}


def check_ranges(obj: Any, where: str = "", **groups: Iterable[str]) -> None:
    """Each field named in a group (`at_least_one`, `positive`, `non_negative`, `fraction`) holds a value
    in that range, None aside; else one ValueError naming the field (after `check_fields`: types are
    right by then)."""
    for group, names in groups.items():
        test, bound = _RANGES[group]
        for name in names:
            value = getattr(obj, name)
            if value is not None and not test(value):
                prefix = f"{where}: " if where else ""
                raise ValueError(f"{prefix}{name} must be {bound}, got {value}")


def check_fields(obj: Any, where: str = "") -> None:
    """Refuse a dataclass instance whose fields do not hold their declared types: one ValueError naming
    the field, the type expected and the value given (`where` prefixes it: a file, a config's name).
    Config files, recipes, overrides and options all reach the configs' constructors, so this one check
    covers them all."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not _matches(value, hints[f.name]):
            prefix = f"{where}: " if where else ""
            raise ValueError(f"{prefix}{f.name}: expected {_describe(hints[f.name])}, got {json_repr(value)}")


def _option_type(hint: Any) -> tuple[Any, tuple[Any, ...] | None]:
    """(base type, choices) of a field's type hint: `int | None` -> int; Literal["a", "b"] -> choices."""
    if (union := _union_args(hint)) is not None:
        args = [a for a in union if a is not type(None)]
        if len(args) == 1:
            hint = args[0]
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices
    return hint, None


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    skip: Iterable[str] = (),
    suppress: bool = False,
    required: Iterable[str] = (),
    helps: Mapping[str, str] | None = None,
    choices: Mapping[str, Iterable[str]] | None = None,
    metavars: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> None:
    """One `--field-name` option per field of the dataclass `cls`, in field order.

    `suppress`: options left out of the command line are absent from the parsed namespace (so a config
    file's values stand), otherwise they take the field's default. `required`: options that must be given.
    `helps`, `choices`, `metavars`, `flags` (the option's name): per-field replacements. Fields of other types than str, int, float,
    bool (or their Optional / Literal forms) must be skipped and added by hand.
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    skip, required = set(skip), set(required)
    help_of, metavar_of, flag_of = dict(helps or {}), dict(metavars or {}), dict(flags or {})
    choices_of = dict(choices or {})
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        kind, options = _option_type(hints[f.name])
        if kind not in (str, int, float, bool):
            raise TypeError(
                f"{cls.__name__}.{f.name}: type {hints[f.name]} has no command-line form; skip it"
            )
        default = f.default if f.default is not dataclasses.MISSING else None
        text = help_of.get(f.name, docs.get(f.name, ""))
        if default not in (None, False, "") and "(default" not in text and f.name not in required:
            text = f"{text} (default {default})" if text else f"default {default}"
        kw: dict[str, Any] = {"help": text.replace("%", "%%") or None, "dest": f.name}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
        else:
            kw["type"] = kind
            kw["choices"] = tuple(choices_of.get(f.name, options or ())) or None
            kw["metavar"] = metavar_of.get(f.name, _METAVARS.get(kind)) if not kw["choices"] else None
        if f.name in required:
            kw["required"] = True
        elif suppress:
            kw["default"] = argparse.SUPPRESS
        else:
            kw["default"] = default
        parser.add_argument(flag_of.get(f.name, "--" + f.name.replace("_", "-")), **kw)


def option_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The parsed values that are fields of `cls` (absent ones, under `suppress`, stay absent)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in vars(args).items() if k in names}


def parse_duration(text: str) -> float:
    """Seconds in "90s", "45m", "1.5h" or "1h30m"; a ValueError otherwise.

    A bare number ("10") is refused: read as seconds it would end a run meant to last 10 minutes or 10
    hours almost at once, so the unit must be written."""
    value = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        raise ValueError(
            f"time budget {text!r}: give a unit, e.g. {value}s, {value}m or {value}h (a bare number is ambiguous)"
        )
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", value)
    if not value or parts is None:
        raise ValueError(f"time budget {text!r}: expected e.g. 90s, 45m, 1.5h or 1h30m")
    h, m, sec = (float(x) if x else 0.0 for x in parts.groups())
    seconds = 3600 * h + 60 * m + sec
    if not seconds > 0:
        raise ValueError(f"time budget {text!r}: expected a positive duration")
    if not math.isfinite(seconds):
        raise ValueError(f"time budget {text!r}: expected a finite duration")
    return seconds


# --------------------------------------------------------------------------- recipes
RECIPE_DIR = Path(__file__).resolve().parent / "recipes"
RECIPE_SECTIONS = ("tokenizer", "data", "pretrain")


def recipe_names() -> list[str]:
    """The recipes shipped in the package (albert_lm/recipes/NAME.json)."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.json"))


def recipe(name: str) -> dict[str, Any]:
    """A recipe: the package's NAME.json, or a JSON file of the user's, with the settings of each stage
    under "tokenizer" (vocab_size), "data" (DataConfig fields) and "pretrain" (PretrainConfig fields).
    Commands take their stage's section as defaults; options given on the command line win."""
    path = Path(name) if name.endswith(".json") else RECIPE_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no recipe {name!r}: shipped recipes are {', '.join(recipe_names())}, "
                                "or give a JSON file")  # fmt: skip
    values = read_json_object(path, "recipe")
    unknown = sorted(set(values) - {*RECIPE_SECTIONS, "description"})
    if unknown:
        raise InputError(
            path, f"unknown section(s) {', '.join(unknown)}; expected {', '.join(RECIPE_SECTIONS)}"
        )
    for section in RECIPE_SECTIONS:
        if not isinstance(values.setdefault(section, {}), dict):
            raise InputError(path, f"section {section!r} must be a JSON object")
    return values


def add_recipe_option(p: argparse.ArgumentParser) -> None:
    """`--recipe NAME`: a command takes its stage's settings from a recipe."""
    p.add_argument(
        "--recipe", metavar="NAME", help="take this stage's settings from a recipe (albert_lm/recipes/NAME.json, "
        "or a JSON file); options given here win. Shipped: " + ", ".join(recipe_names()),
    )  # fmt: skip


def recipe_section(args: argparse.Namespace, section: str) -> dict:
    """The `section` of `--recipe` ({} without one)."""
    return recipe(args.recipe)[section] if args.recipe else {}


def recipe_file(name: str) -> str:
    """The file of a recipe (a shipped recipe's name or a JSON file), for messages."""
    return name if name.endswith(".json") else str(RECIPE_DIR / f"{name}.json")
