"""Settings in one place: the CLI's options come from the config dataclasses, defaults and help included."""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Literal

import pytest

from albert_lm.cli import build_parser, main
from albert_lm.data.examples import DataConfig
from albert_lm.settings import add_options, field_docs, option_values
from albert_lm.training.finetune_config import FinetuneConfig
from albert_lm.training.pretrain_config import PretrainConfig


@dataclass
class _Toy:
    steps: int = 3
    """how many steps"""
    rate: float | None = None
    """a rate; 10% is a lot"""
    mode: Literal["a", "b"] = "a"
    """which mode"""
    plot: bool = True
    """draw it"""
    quiet: bool = False


def _parse(argv: list[str], **kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_options(p, _Toy, **kw)
    return p.parse_args(argv)


def test_fields_become_options_with_their_defaults_types_and_choices():
    assert vars(_parse([])) == {"steps": 3, "rate": None, "mode": "a", "plot": True, "quiet": False}
    got = _parse(["--steps", "5", "--rate", "0.5", "--mode", "b", "--no-plot", "--quiet"])
    assert vars(got) == {"steps": 5, "rate": 0.5, "mode": "b", "plot": False, "quiet": True}
    with pytest.raises(SystemExit):
        _parse(["--mode", "c"])
    with pytest.raises(SystemExit):
        _parse(["--steps", "x"])


def test_suppressed_options_are_absent_unless_typed():
    assert vars(_parse([], suppress=True)) == {}
    assert option_values(_parse(["--steps", "7"], suppress=True), _Toy) == {"steps": 7}


def test_help_comes_from_attribute_docstrings_with_the_default():
    assert field_docs(_Toy) == {
        "steps": "how many steps",
        "rate": "a rate; 10% is a lot",
        "mode": "which mode",
        "plot": "draw it",
    }
    p = argparse.ArgumentParser()
    add_options(p, _Toy)
    text = p.format_help()  # a "%" in a docstring must not break argparse's formatting
    assert "how many steps (default 3)" in text and "10% is a lot" in text


def test_every_config_field_is_documented_and_reachable_from_the_cli():
    help_of = {a.dest: a.help for a in _subparser("pretrain")._actions}
    for f in dataclasses.fields(PretrainConfig):
        assert f.name in field_docs(PretrainConfig), f"PretrainConfig.{f.name} has no docstring"
        assert f.name in help_of, f"--{f.name} missing from `albert pretrain`"
    help_of = {a.dest: a.help for a in _subparser("finetune")._actions}
    for f in dataclasses.fields(FinetuneConfig):
        assert f.name in field_docs(FinetuneConfig) and f.name in help_of, f.name
    data_opts = {a.dest for a in _subparser("data", "create")._actions}
    assert {f.name for f in dataclasses.fields(DataConfig)} - data_opts == {"block_bytes", "shard_bytes"}


def _subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def test_the_cli_default_is_the_dataclass_default():
    args = build_parser().parse_args(
        ["data", "create", "--input", "x", "--tokenizer", "t", "--output", "o", "--max-seq-length", "64"]
    )
    cfg = DataConfig(**option_values(args, DataConfig))
    assert (cfg.masked_lm_prob, cfg.max_ngram, cfg.input_format) == (0.15, 3, "auto")
    args = build_parser().parse_args(
        ["finetune", "--task", "rte", "--model", "m", "--data", "d", "--output", "o"]
    )
    assert FinetuneConfig(**option_values(args, FinetuneConfig)) == FinetuneConfig("rte", "m", "d", "o")


def test_pretrain_options_override_the_config_file_and_only_when_typed(tmp_path):
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"data": "d", "max_steps": 9, "learning_rate": 0.01}))
    args = build_parser().parse_args(["pretrain", "--config", str(file), "--max-steps", "4"])
    cfg = PretrainConfig.load(args.config, **option_values(args, PretrainConfig))
    assert (cfg.max_steps, cfg.learning_rate, cfg.warmup_steps) == (4, 0.01, PretrainConfig.warmup_steps)


def test_resume_and_overwrite_are_taken_only_as_typed(tmp_path, capsys):
    """A run's saved settings hold the --resume and --overwrite it was started with: used as --config, they
    must neither wipe another run's folder nor resume it, nor stop the run itself from resuming."""
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"data": "d", "max_steps": 9, "overwrite": True, "resume": True}))
    args = build_parser().parse_args(["pretrain", "--config", str(file)])
    cfg = PretrainConfig.load(args.config, **option_values(args, PretrainConfig))
    assert (cfg.max_steps, cfg.overwrite, cfg.resume) == (9, False, False)
    args = build_parser().parse_args(["pretrain", "--config", str(file), "--resume"])
    cfg = PretrainConfig.load(args.config, **option_values(args, PretrainConfig))
    assert (cfg.overwrite, cfg.resume) == (False, True)  # not "give one of them"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    assert main(["pretrain", "--config", str(file), "--output", str(victim), "--max-steps", "1"]) == 1
    assert (victim / "notes.txt").read_text() == "mine"
    capsys.readouterr()


def test_time_budget_none_clears_a_recipes_budget():
    from albert_lm.distill.config import GeneralDistillConfig
    from albert_lm.settings import merge_settings, recipe

    for argv, cls, section in (
        (["pretrain", "--recipe", "cpu-1h", "--data", "d", "--output", "o"], PretrainConfig, "pretrain"),
        (["distill", "general", "--recipe", "student-cpu-2h", "--text", "t", "--output", "o"],
         GeneralDistillConfig, "distill"),
    ):  # fmt: skip
        recipes = recipe(argv[argv.index("--recipe") + 1])[section]
        for budget, expected in (
            (None, recipes["time_budget"]),
            ("none", None),
            ("Off", None),
            ("20m", "20m"),
        ):
            args = build_parser().parse_args(argv + (["--time-budget", budget] if budget else []))
            cfg = merge_settings(cls, option_values(args, cls), None, recipes)
            assert cfg.time_budget == expected, (argv[0], budget)
            assert (cfg.time_budget_s is None) == (expected is None)
    with pytest.raises(ValueError, match="time_budget"):
        PretrainConfig(data="d", time_budget="nothing")


def test_pretrain_without_data_is_an_error_that_says_what_to_pass(tmp_path, capsys):
    assert main(["pretrain", "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "--data" in err and "albert data create" in err and "albert demo" in err
    assert not (tmp_path / "run").exists()


def test_a_model_override_changes_one_field_of_a_recipes_overrides(tmp_path):
    """`--recipe cpu-1h --model-override sharing=attention`: the recipe's embedding_size 128 stays (it had
    been replaced by the typed overrides, so the run trained another model than the recipe's)."""
    from albert_lm.settings import merge_settings, recipe

    recipes = recipe("cpu-1h")["pretrain"]
    argv = [
        "pretrain",
        "--recipe",
        "cpu-1h",
        "--data",
        "d",
        "--output",
        "o",
        "--model-override",
        "sharing=attention",
    ]
    args = build_parser().parse_args(argv)
    given = option_values(args, PretrainConfig)
    given["model_overrides"] = PretrainConfig.parse_overrides(given["model_overrides"])
    cfg = merge_settings(PretrainConfig, given, None, recipes)
    assert cfg.model_overrides == {**recipes["model_overrides"], "sharing": "attention"}
    saved = tmp_path / "pretrain_config.json"  # a run's settings file, then one field changed
    saved.write_text(json.dumps({"data": "d", "output": "o", "model_overrides": {"embedding_size": 64}}))
    cfg = merge_settings(PretrainConfig, {"model_overrides": {"num_hidden_layers": 2}}, saved)
    assert cfg.model_overrides == {"embedding_size": 64, "num_hidden_layers": 2}


def test_model_overrides_read_values_as_json_where_they_are():
    got = PretrainConfig.parse_overrides(["num_hidden_layers=24", "hidden_act=gelu", "p=0.1", "s=[1, 2]"])
    assert got == {"num_hidden_layers": 24, "hidden_act": "gelu", "p": 0.1, "s": [1, 2]}
    for bad in ("num_hidden_layers", "=3"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            PretrainConfig.parse_overrides([bad])


def test_evaluate_and_reproduce_take_a_settings_file(tmp_path, capsys):
    """`--config FILE` in every command that takes settings: its values stand where no option is typed,
    a typed option wins, and a key the command does not know is refused naming the file."""
    from test_bad_input import refused

    config = tmp_path / "evaluate.json"
    config.write_text(json.dumps({"task": "rte", "data": str(tmp_path)}))
    # task and data come from the file: what is left missing is what to evaluate
    refused(capsys, ["evaluate", "--config", str(config)], "give --predictions")
    refused(capsys, ["evaluate", "--config", str(config), "--task", "squad1", "--predictions", "p.json",
                     "--model", "m"], "not both")  # fmt: skip
    config.write_text(json.dumps({"task": "rte", "data": str(tmp_path), "modle": "m"}))
    refused(capsys, ["evaluate", "--config", str(config)], "evaluate.json", "modle")
    paper = tmp_path / "reproduce.json"
    paper.write_text(json.dumps({"data": str(tmp_path / "no-such-data"), "time_budget": "10"}))
    refused(capsys, ["reproduce", "sharing", "--config", str(paper)], "time budget '10'")  # the file was read
    refused(capsys, ["reproduce", "sharing"], "missing --data")


def test_every_field_of_a_loops_settings_says_what_it_is():
    """Each field of the training loops' settings carries its metadata (`values.setting`: its --help
    section, whether a resumed run may change it, whether a run record keeps it), from which the help
    sections, RESUME_MAY_CHANGE and glue's unrecorded settings are read; a new field without it fails
    here. A class redeclares a field of its base (LoopSettings, ResumableSettings) only to change its
    default: same type, same metadata."""
    import dataclasses
    import typing

    from albert_lm.distill.config import GeneralDistillConfig, TaskDistillConfig
    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.loop_settings import LoopSettings, ResumableSettings
    from albert_lm.training.pretrain_config import PretrainConfig
    from albert_lm.values import SECTIONS

    for cls in (PretrainConfig, FinetuneConfig, GeneralDistillConfig, TaskDistillConfig):
        for f in dataclasses.fields(cls):
            assert set(f.metadata) == {"group", "resume", "recorded"}, (
                f"{cls.__name__}.{f.name}: no setting()"
            )
            assert f.metadata["group"] in SECTIONS
        base = ResumableSettings if issubclass(cls, ResumableSettings) else LoopSettings
        assert issubclass(cls, base)
        ours, theirs = typing.get_type_hints(cls), typing.get_type_hints(base)
        inherited = {f.name: f for f in dataclasses.fields(base)}
        for f in dataclasses.fields(cls):
            if f.name in inherited:
                assert ours[f.name] == theirs[f.name], (
                    f"{cls.__name__}.{f.name}: another type than its base's"
                )
                assert f.metadata == inherited[f.name].metadata, f"{cls.__name__}.{f.name}: other metadata"


def test_every_field_of_a_loops_settings_is_read_by_the_package():
    """A setting declared but read nowhere is an option that does nothing: each field of the loops'
    settings is read (`.NAME`, or by its name as a string) somewhere in the package besides the module that
    declares it. Adding an option to every loop is a field in `training/loop_settings.py` and its use in
    `training/loop.py`; forgetting the use fails here."""
    import dataclasses
    import inspect
    import re
    from pathlib import Path

    import albert_lm
    from albert_lm.distill.config import GeneralDistillConfig, TaskDistillConfig
    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.pretrain_config import PretrainConfig

    package = Path(albert_lm.__file__).parent
    sources = {p: p.read_text() for p in package.rglob("*.py")}
    for cls in (PretrainConfig, FinetuneConfig, GeneralDistillConfig, TaskDistillConfig):
        for f in dataclasses.fields(cls):
            owner = next(c for c in cls.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
            declared = Path(inspect.getfile(owner))
            use = re.compile(rf"\.{f.name}\b|[\"']{f.name}[\"']")
            assert any(use.search(text) for p, text in sources.items() if p != declared), (
                f"{owner.__name__}.{f.name}: read nowhere outside {declared.name}"
            )


def test_a_fine_tuned_folders_readers_check_its_task_settings_as_finetune_checks_them():
    """`albert_lm.runtime.finetuned.SavedTask` stands before training: it declares the task settings of
    FinetuneConfig that predict, export and evaluate read from finetune_config.json, alike."""
    from albert_lm.runtime.finetuned import SavedTask

    ours = {f.name: f for f in dataclasses.fields(FinetuneConfig)}
    hints, theirs = typing.get_type_hints(FinetuneConfig), typing.get_type_hints(SavedTask)
    for f in dataclasses.fields(SavedTask):
        assert f.name in ours, f.name
        assert theirs[f.name] == hints[f.name], f.name
        if f.name != "task":  # FinetuneConfig requires it; a saved file without one is a classifier
            assert f.default == ours[f.name].default, f.name


def test_a_seed_given_twice_is_refused_by_every_command_that_takes_seeds(capsys):
    """`--seeds 1,2,1` ran seeds 1 and 2 in `albert glue` while the table said what was typed; glue and
    reproduce read --seeds through one function, which names the repeat."""
    from albert_lm.values import seed_list

    assert seed_list("3,1,2") == [3, 1, 2] and seed_list(7) == [7]
    with pytest.raises(ValueError, match=r"--seeds '1,2,1': 1 given more than once.*e\.g\. 1,2$"):
        seed_list("1,2,1")
    assert main(["glue", "--model", "m", "--data", "d", "--output", "o", "--seeds", "1,2,1"]) != 0
    assert "1 given more than once" in capsys.readouterr().err
