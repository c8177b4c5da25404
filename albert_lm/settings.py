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
import dataclasses
import os
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, read_json_object
from albert_lm.values import (  # noqa: F401 (the checks, importable from here as before)
    PRECISIONS,
    BadValue,
    Precision,
    _describe,
    _union_args,
    check_fields,
    check_range,
    check_ranges,
    device_name,
    field_docs,
    file_values,
    help_groups,
    json_repr,
    parse_duration,
    seed_list,
    task_name,
)

__all__ = [
    "DEVICE_HELP",
    "PRECISIONS",
    "RECIPE_DIR",
    "VOCABULARY",
    "add_config_option",
    "add_word",
    "load_settings",
    "merge_settings",
    "add_options",
    "check_fields",
    "check_ranges",
    "field_docs",
    "option_values",
    "parse_duration",
    "recipe",
    "recipe_names",
]


_METAVARS = {int: "N", float: "X"}
# Shared options whose meaning a command states in its own field docstring (a seed's role, what the
# time budget bounds); the flag, type and default still come from VOCABULARY.
_OWN_HELP = ("seed", "seeds", "time_budget", "overwrite", "workers")


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


# --------------------------------------------------------------------------- one vocabulary
# A concept that several commands share has one flag, one type, one set of choices and one default,
# written here once; `add_options` (dataclass settings) and `add_word` (hand-written options) both take
# them from here, and tests/test_cli_vocabulary.py fails if a command names one of them another way.
DEVICE_HELP = "auto (default: CUDA when there is a GPU, else CPU), cpu, cuda or cuda:N"
PRECISION_HELP = (
    "auto (default): bf16 where this machine computes it fast (a CUDA GPU with bf16, a CPU with "
    "AVX512-BF16 or AMX), else fp32; fp16 on CUDA only, for fine-tuning and inference (pretraining and "
    "distillation refuse it)"
)


@dataclasses.dataclass(frozen=True)
class Word:
    """One shared option: its flag, argparse type or choices, default, metavar and help; old spellings
    (`aliases`) are still accepted, hidden from --help, with a warning."""

    flag: str
    default: Any
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    aliases: tuple[str, ...] = ()


VOCABULARY: dict[str, Word] = {  # keyed by the settings field (argparse dest) that holds the value
    "precision": Word("--precision", "auto", PRECISION_HELP, choices=PRECISIONS),
    "device": Word("--device", "auto", DEVICE_HELP, type=device_name, metavar="DEVICE"),
    "gradient_accumulation_steps": Word(
        "--gradient-accumulation-steps",
        1,
        "micro-batches per optimizer step (gradients summed; the batch per step is --batch-size x this)",
        type=int,
        metavar="N",
        aliases=("--gradient-accumulation",),
    ),
    "seeds": Word("--seeds", None, "comma-separated seeds, each run once, e.g. 1,2,3", metavar="LIST"),
    "time_budget": Word(
        "--time-budget", None, "stop after this long, with a unit: 90s, 45m, 1.5h or 1h30m", metavar="TIME"
    ),
    "overwrite": Word("--overwrite", False, "replace what the output folder holds"),
    "seed": Word("--seed", None, "random seed", type=int, metavar="N"),
    "workers": Word(
        "--workers", None, "processes working at once (default: one per CPU core)", type=int, metavar="N"
    ),
}


class _OldSpelling(argparse.Action):
    """An option's former name: stores the value under the new one and says so once."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        import logging

        new = VOCABULARY[self.dest].flag
        logging.getLogger("albert_lm").warning("%s is now called %s", option, new)
        setattr(namespace, self.dest, values)


def add_word(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    dest: str,
    *,
    default: Any = None,
    help: str | None = None,
    suppress: bool = False,
) -> None:
    """The shared option `dest` (a key of VOCABULARY) with its flag, type, choices and default.
    `default` applies only where VOCABULARY has none (a seed, seeds or a time budget differ by command);
    `help` replaces the shared text where a command must say more."""
    word = VOCABULARY[dest]
    if word.default is not None and default is not None and default != word.default:
        raise TypeError(f"{word.flag}: the shared default is {word.default!r}, not {default!r}")
    value = word.default if word.default is not None else default
    text = help or word.help
    if value not in (None, False, "") and "(default" not in text:
        text = f"{text} (default {value})"
    kw: dict[str, Any] = {"dest": dest, "help": text.replace("%", "%%"),
                          "default": argparse.SUPPRESS if suppress else value}  # fmt: skip
    if isinstance(word.default, bool):
        kw["action"] = "store_true"
    else:
        kw.update(type=word.type or str, choices=word.choices, metavar=None if word.choices else word.metavar)
    parser.add_argument(word.flag, **kw)
    for alias in word.aliases:
        extra = {k: v for k, v in kw.items() if k not in ("help", "action")}
        parser.add_argument(
            alias, action=_OldSpelling, help=argparse.SUPPRESS, **{**extra, "default": argparse.SUPPRESS}
        )


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
    groups: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """One `--field-name` option per field of the dataclass `cls`, in field order.

    `groups` (title -> field names; by default the sections its fields' metadata name, `help_groups`) files
    options under headed sections of --help, in that order; the fields no group names follow under
    "other options".

    `suppress`: options left out of the command line are absent from the parsed namespace (so a config
    file's values stand), otherwise they take the field's default. `required`: options that must be given.
    `helps`, `choices`, `metavars`, `flags` (the option's name): per-field replacements. Fields of other
    types than str, int, float, bool (or their Optional / Literal forms) must be skipped and added by hand.
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    skip, required = set(skip), set(required)
    help_of, metavar_of, flag_of = dict(helps or {}), dict(metavars or {}), dict(flags or {})
    choices_of = dict(choices or {})
    target = _grouper(parser, groups if groups is not None else help_groups(cls))
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        where = target(f.name)
        if f.name in VOCABULARY and f.name not in help_of and f.name not in required:
            default = f.default if f.default is not dataclasses.MISSING else None
            own = docs.get(f.name) if f.name in _OWN_HELP else None
            add_word(where, f.name, default=default, suppress=suppress, help=own)
            continue
        kind, options = _option_type(hints[f.name])
        if kind not in (str, int, float, bool):
            raise TypeError(
                f"{cls.__name__}.{f.name}: type {hints[f.name]} has no command-line form; skip it"
            )
        default = f.default if f.default is not dataclasses.MISSING else None
        text = help_of.get(f.name, first_sentence(docs.get(f.name, "")))
        shown = default is not None and default is not False and default != ""  # 0 is shown, False not
        if shown and "(default" not in text and f.name not in required:
            text = f"{text} (default {default})" if text else f"default {default}"
        kw: dict[str, Any] = {"help": text.replace("%", "%%") or None, "dest": f.name}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
        else:
            kw["type"] = task_name if f.name == "task" else kind  # a task's name, as every command reads it
            kw["choices"] = tuple(choices_of.get(f.name, options or ())) or None
            fallback = "NAME" if f.name.endswith("_column") else _METAVARS.get(kind)  # a column's name
            kw["metavar"] = metavar_of.get(f.name, fallback) if not kw["choices"] else None
        kw.update(_presence(kw["help"], default, f.name in required, suppress))
        where.add_argument(flag_of.get(f.name, "--" + f.name.replace("_", "-")), **kw)


_SENTENCE_END = re.compile(r"(?<=[.)])(?<!\.\.)\s+(?=[A-Z])")  # ".." is a range (1 .. L-1), not an end


def first_sentence(doc: str) -> str:
    """An option's help: the first sentence of its field's docstring (the rest explains, and --help is a
    list to scan; the docs pages and the field itself keep all of it)."""
    return _SENTENCE_END.split(doc, maxsplit=1)[0]


def _presence(help_: str | None, default: Any, required: bool, suppress: bool) -> dict[str, Any]:
    """How an option's absence reads: required (under `suppress` it may come from --config FILE, which
    load_settings checks), absent from the namespace (`suppress`), or the field's default."""
    if required and suppress:
        return {"help": f"{help_ or ''} (required)".strip(), "default": argparse.SUPPRESS}
    if required:
        return {"required": True}
    return {"default": argparse.SUPPRESS if suppress else default}


def _grouper(
    parser: argparse.ArgumentParser, groups: Mapping[str, Iterable[str]] | None
) -> Callable[[str], argparse.ArgumentParser | argparse._ArgumentGroup]:
    """field name -> the parser or headed group its option goes to."""
    if not groups:
        return lambda name: parser
    made = {title: parser.add_argument_group(title) for title in groups}
    of = {name: made[title] for title, names in groups.items() for name in names}
    other = parser.add_argument_group("other options")
    return lambda name: of.get(name, other)


def option_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The parsed values that are fields of `cls` (absent ones, under `suppress`, stay absent)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in vars(args).items() if k in names}


def add_config_option(p: argparse.ArgumentParser, what: str, saved: str = "") -> None:
    """`--config FILE`: a command's settings from a JSON file of its fields (options typed win); `saved`
    names the file a run of the command saves that --config reads, where it has one."""
    example = f", e.g. {saved}" if saved else ""
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"JSON file of {what} settings (the options' names with _{example}); options given on the "
        "command line win",
    )


# Fields typed with an option of another name than theirs: a repeatable option names one of its values.
_TYPED_AS = {"task_settings": "--task-setting"}


def load_settings(
    cls: type,
    args: argparse.Namespace,
    required: Iterable[str] = (),
    ignored: Iterable[str] = (),
    recipe_values: dict[str, Any] | None = None,
    recipe_name: str = "",
) -> Any:
    """`cls` from a recipe's section (`recipe_values`, of the recipe `recipe_name`), `--config FILE` (if
    given) and the options typed (added with `suppress=True`): `merge_settings` on the command line's
    values."""
    return merge_settings(
        cls,
        option_values(args, cls),
        getattr(args, "config", None),
        recipe_values,
        recipe_name,
        required,
        ignored,
    )


PER_RUN = ("resume", "overwrite")  # options taken only as typed, never from a settings file or a recipe


def merge_settings(
    cls: type,
    given: Mapping[str, Any],
    file: str | os.PathLike | None = None,
    recipe_values: Mapping[str, Any] | None = None,
    recipe_name: str = "",
    required: Iterable[str] = (),
    ignored: Iterable[str] = (),
) -> Any:
    """The one way every command's settings are made: a recipe's section, then a settings FILE (a run's
    saved settings), then the values `given` (the options typed; None is "not given"): each wins over the
    one before. `required` fields must come from one of them; keys in `ignored` are a saved run's
    bookkeeping, skipped, as are PER_RUN's; any other key the file or the recipe has that `cls` lacks, or
    a value of another type than its field's (also one an option replaces), is an error naming it and the
    file, and a value the dataclass refuses is reported with where it came from (the recipe, the file or the option)."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    recipe_layer = (recipe_file(recipe_name) if recipe_name else "recipe", dict(recipe_values or {}), ())
    layers: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [recipe_layer]
    if file:
        layers.append((str(file), read_json_object(file, "settings"), tuple(ignored)))
    for where, layer, skip in layers:
        # --resume and --overwrite say what to do with the output folder this time: a saved run's file
        # holds the ones it was started with, which must not resume or wipe a folder later.
        own = file_values(cls, layer, where, skip)  # every key a field of `cls`, of its type
        own = {k: v for k, v in own.items() if k not in PER_RUN}
        _layer_over(values, own)
        source.update(dict.fromkeys(own, where))
    typed = {k: v for k, v in given.items() if v is not None}
    _layer_over(values, typed)
    source.update({k: _TYPED_AS.get(k, "--" + k.replace("_", "-")) for k in typed})
    missing = ["--" + r.replace("_", "-") for r in required if values.get(r) is None]
    if missing:
        them = "them" if len(missing) > 1 else "it"
        raise ValueError(f"missing {', '.join(missing)}: give {them} on the command line or in --config FILE")
    try:
        return cls(**values)
    except ValueError as e:  # the field's own check: say where the value came from (the first field named)
        text = str(e).removeprefix(f"{cls.__name__}: ")
        named = (w.lstrip("-").replace("-", "_") for w in re.findall(r"[\w-]+", text))
        field = next((w for w in named if w in source), None)
        origin = source[field] if field else None
        if origin and origin.startswith("--") and field and re.match(rf"{field}[:. ]", text):
            rest = text[len(field) :]  # the option typed, by its name: --models: none given
            text = origin + (" " + rest[1:] if rest.startswith(".") else rest)  # --task-setting rte: ...
        elif origin and not text.startswith(origin):
            text = f"{origin}: {text}"
        raise ValueError(text) from None


def _layer_over(values: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """`layer`'s values win over `values`'; model_overrides is changed key by key, so that `--model-override
    sharing=attention` on a recipe keeps the recipe's other overrides (glue's task_settings have their own
    two-level merge, `glue.commands`)."""
    for key, value in layer.items():
        before = values.get(key)
        if key == "model_overrides" and isinstance(before, dict) and isinstance(value, dict):
            value = {**before, **value}
        values[key] = value


# --------------------------------------------------------------------------- recipes
RECIPE_DIR = Path(__file__).resolve().parent / "recipes"
RECIPE_SECTIONS = ("tokenizer", "data", "pretrain", "distill", "distill_task", "glue")


def recipe_names(section: str | None = None) -> list[str]:
    """The recipes shipped in the package (albert_lm/recipes/NAME.json); with `section`, those that have
    that stage's settings (for a command's --help)."""
    names = sorted(p.stem for p in RECIPE_DIR.glob("*.json"))
    return [  # an empty section is none: a recipe of another stage
        n
        for n in names
        if section is None or read_json_object(RECIPE_DIR / f"{n}.json", "recipe").get(section)
    ]


def recipe(name: str) -> dict[str, Any]:
    """A recipe: the package's NAME.json, or a JSON file of the user's, with the settings of each stage
    under "tokenizer" (vocab_size), "data" (DataConfig fields), "pretrain" (PretrainConfig fields),
    "distill" (`albert distill general`'s fields), "distill_task" (`albert distill task`'s) and "glue"
    (`albert glue`'s).
    Commands take their stage's section as defaults; options given on the command line win."""
    path = Path(name) if name.endswith(".json") else RECIPE_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no recipe {name!r}: shipped recipes are {', '.join(recipe_names())}, or give a JSON file"
        )
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


def add_recipe_option(p: argparse.ArgumentParser, section: str) -> None:
    """`--recipe NAME`: a command takes its stage's settings (`section`) from a recipe; its help lists the
    shipped recipes that have them."""
    p.add_argument(
        "--recipe",
        metavar="NAME",
        help="take this stage's settings from a recipe (albert_lm/recipes/NAME.json, "
        "or a JSON file); options given here win. Shipped: " + ", ".join(recipe_names(section)),
    )


def recipe_section(args: argparse.Namespace, section: str) -> dict:
    """The `section` of `--recipe` ({} without one). A distillation recipe has no data or pretraining
    settings: asked for them, it is refused rather than read as "all defaults"."""
    if not args.recipe:
        return {}
    values = recipe(args.recipe)
    if section in ("data", "pretrain") and values["distill"] and not values[section]:
        raise ValueError(
            f"--recipe {args.recipe}: a distillation recipe (no {section} settings); use it with "
            "`albert distill general --recipe` (and `albert tokenizer train --recipe`)"
        )
    return values[section]


def recipe_file(name: str) -> str:
    """The file of a recipe (a shipped recipe's name or a JSON file), for messages."""
    return name if name.endswith(".json") else str(RECIPE_DIR / f"{name}.json")
