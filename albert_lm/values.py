"""A setting's value checked, apart from the command line: its type as the dataclass field declares it
(`check_fields`: no bool for an int, no string for a number, finite floats, non-empty strings), its range
(`check_ranges`), durations with their unit, device names and seed lists. Every config dataclass runs
these in `__post_init__`, whether its values come from options, a settings file, a recipe or the Python
API. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import inspect
import math
import os
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

_T = typing.TypeVar("_T", bound=type)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass, its bases' first: the string literal right under each
    field (a subclass that redeclares a field to change its default keeps the base's docstring)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_docs(klass))
    return docs


def _own_docs(cls: type) -> dict[str, str]:
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


def documented(cls: _T) -> _T:
    """A public settings dataclass with its fields' docstrings in its `__doc__`, so that `help(cls)` in a
    notebook lists each field, its default and what it does, as `--help` does (Python keeps attribute
    docstrings nowhere at run time: they are read from the source, as the options' help is)."""
    lines = []
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    for f in [*required, *(f for f in fields if f not in required)]:
        if f.default is not dataclasses.MISSING:
            default = f" (default {f.default!r})"
        elif f.default_factory is not dataclasses.MISSING:
            default = f" (default {f.default_factory()!r})"
        else:
            default = " (required)"
        doc = field_docs(cls).get(f.name, "")
        lines.append(
            textwrap.fill(
                f"{f.name}{default}: {doc}".rstrip(": "), 96, subsequent_indent="    ", break_on_hyphens=False
            )
        )
    cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\nFields:\n\n" + "\n".join(lines)
    return cls


# The --help sections of the training commands, in the order they are shown.
SECTIONS = ("data and output", "teacher and data", "the model", "the student", "losses",
            "objective", "how long", "batch and optimizer", "sizes", "machine", "checkpoints",
            "evaluation and records", "question answering and multiple choice", "your own data's columns")  # fmt: skip


def setting(
    default: Any = dataclasses.MISSING,
    *,
    group: str,
    resume: bool = False,
    recorded: bool = True,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A settings dataclass field and what it is: `group`, the --help section it is shown under (one of
    SECTIONS); `resume`, whether a resumed run may change it (where it reads and writes, how often it logs
    and saves, where it runs: not what it computes); `recorded`, whether a run's record keeps it (False:
    it does not change the result, or its content is recorded instead, as a model's hash for its path).
    The lists of what may change on resume and what a record ignores are read from these, never typed."""
    if group not in SECTIONS:
        raise ValueError(f"setting group {group!r}: expected one of {', '.join(SECTIONS)}")
    meta = {"group": group, "resume": resume, "recorded": recorded}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def help_groups(cls: type) -> dict[str, tuple[str, ...]]:
    """Section title -> the fields shown under it, in SECTIONS' order (fields without a group: none)."""
    groups: dict[str, list[str]] = {}
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            groups.setdefault(f.metadata["group"], []).append(f.name)
    return {title: tuple(groups[title]) for title in SECTIONS if title in groups}


def settings_where(cls: type, flag: str, value: bool = True) -> frozenset[str]:
    """The fields of `cls` whose `setting` metadata `flag` ("resume" or "recorded") is `value`."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(flag, not value) == value)


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
    if hint is str:  # an empty string never stands for something else (the current folder, a default)
        return isinstance(value, str) and value.strip() != ""
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
    names = {int: "an integer", float: "a finite number", str: "a non-empty string", bool: "true or false",
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


# Upper bounds of the counts a user gives, far above any real run: a value past one is a slip (extra
# zeros, another unit) that would hang the command, fill its memory or overflow a C integer once work has
# started, so it is refused before. A config lists its fields under these names in `check_ranges`.
BOUNDS: dict[str, int] = {
    "batch": 1 << 16,  # rows in a batch, micro-batches per step, texts per teacher pass
    "length": 1 << 16,  # tokens: sequence lengths, strides, questions and answers, masked tokens, words
    "steps": 10**9,  # optimizer steps, every "every N steps", a timeout's seconds
    "epochs": 10**6,  # passes over the training data
    "count": 10**9,  # examples, sentences, batches, checkpoints kept, candidates, layers
    "workers": 1024,  # processes at once
    "repeats": 1000,  # the same work again: the dupe factor, timed repeats
    "seed": (1 << 63) - 1,  # torch's seeds are signed 64-bit integers
}


def _at_most(cap: int, value: Any) -> bool:
    return value <= cap


# Ranges `check_ranges` knows: (test, what the message says a value must be).
_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "at_least_one": (lambda v: v >= 1, ">= 1"),
    "positive": (lambda v: v > 0, "> 0"),
    "non_negative": (lambda v: v >= 0, ">= 0"),
    "fraction": (lambda v: 0 <= v < 1, "in [0, 1)"),
    **{group: (functools.partial(_at_most, cap), f"<= {cap:,}") for group, cap in BOUNDS.items()},
}


def check_ranges(obj: Any, where: str = "", **groups: Iterable[str]) -> None:
    """Each field named in a group holds a value in that range, None aside; else one ValueError naming
    the field, the bound and the value (after `check_fields`: types are right by then). Lower bounds:
    `at_least_one`, `positive`, `non_negative`, `fraction`; upper bounds: the names of BOUNDS (a field
    is usually in one group of each)."""
    for group, names in groups.items():
        for name in names:
            check_range(getattr(obj, name), group, name, where)


def check_range(value: Any, group: str, name: str, where: str = "") -> None:
    """`value` of the setting `name` within the range `group` (see `check_ranges`), None aside: also for
    an option that is no config field (`--workers` of data create, `--repeats` of bench)."""
    test, bound = _RANGES[group]
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
        value = _as_text(getattr(obj, f.name))
        if value is not getattr(obj, f.name) and _matches(value, hints[f.name]):
            # a pathlib.Path given from Python: its text, as a settings file holds it
            object.__setattr__(obj, f.name, value)
        if not _matches(value, hints[f.name]):
            prefix = f"{where}: " if where else ""
            raise ValueError(f"{prefix}{f.name}: expected {_describe(hints[f.name])}, got {json_repr(value)}")


def _as_text(value: Any) -> Any:
    """`value` with paths (os.PathLike) as their text, in a list or tuple too; other values as they are."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple) and any(isinstance(v, os.PathLike) for v in value):
        return type(value)(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
    return value


def file_values(cls: type, values: dict[str, Any], where: str, ignored: Iterable[str] = ()) -> dict[str, Any]:
    """The keys of a settings file or a recipe's section (`values`, read from `where`) that are fields of
    the dataclass `cls`, each of its field's type as `check_fields` checks them. A key that is no field
    (and not `ignored`: a saved run's bookkeeping) or a value of another type is an InputError naming
    `where` and the field: "run.json: max_steps: expected an integer, got "3"". The file is checked whole,
    also where an option replaces one of its values: a wrong type means the file is not what its writer
    thinks, and the run would differ from it as soon as the option is left out."""
    from albert_lm.files import InputError

    hints, names = typing.get_type_hints(cls), {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names - set(ignored))
    if unknown:
        near = {k: m[0] for k in unknown if (m := difflib.get_close_matches(k, names, n=1, cutoff=0.75))}
        meant = "; ".join(f"{k}: did you mean {v}?" for k, v in near.items())
        listed = f"; expected some of {', '.join(sorted(names))}" if len(near) < len(unknown) else ""
        raise InputError(
            where, f"unknown setting(s) {', '.join(unknown)}" + (f" ({meant})" if meant else "") + listed
        )
    own = {k: v for k, v in values.items() if k in names}
    for name, value in own.items():
        if not _matches(value, hints[name]):
            raise InputError(where, f"{name}: expected {_describe(hints[name])}, got {json_repr(value)}")
    return own


# --------------------------------------------------------------------------- shared values
# A concept that several commands share has one type and one set of choices, written here once.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
Precision = typing.Literal["auto", "fp32", "bf16", "fp16"]  # the type of every settings field "precision"


class BadValue(argparse.ArgumentTypeError, ValueError):
    """A value refused (a ValueError): argparse prints the message as it is, a settings check reads it as a
    ValueError."""


def device_name(text: str) -> str:
    """A --device value: auto, cpu, cuda or cuda:N (an argparse type; a ValueError names what is wrong)."""
    value = str(text).strip().lower()
    if value in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", value):
        return value
    raise BadValue(f"device {text!r}: expected auto, cpu, cuda or cuda:N")


def task_name(text: str) -> str:
    """A --task value as people write it: GLUE's own spellings (SST-2, STS-B, CoLA) read as albert-lm's
    names (sst2, stsb, cola); a name of two words (token-classification) keeps its hyphen. An argparse
    type: the command's choices then check the name."""
    return re.sub(r"[-_ ](?=[a-z0-9]$)", "", str(text).strip().lower())


def seed_list(text: str | int, option: str = "--seeds") -> list[int]:
    """The seeds of a --seeds value ("1,2,3", or one number), in order. A seed given twice is refused: it
    would run once, not twice, and a table would count fewer seeds than were typed."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+", part):
            raise ValueError(f"{option} {text!r}: expected comma-separated whole numbers >= 0, e.g. 1,2,3")
        seeds.append(int(part))
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        once = ",".join(map(str, dict.fromkeys(seeds)))
        raise ValueError(
            f"{option} {text!r}: {', '.join(map(str, twice))} given more than once, and each seed runs once; "
            f"give each seed once, e.g. {once}"
        )
    return seeds


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
