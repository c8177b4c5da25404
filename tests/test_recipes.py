"""Recipes: one JSON names the settings of every stage; each command takes its stage's, options win."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from albert_lm.cli import build_parser, main
from albert_lm.data.examples import DataConfig
from albert_lm.distill.commands import _general_settings
from albert_lm.distill.config import GeneralDistillConfig, TaskDistillConfig
from albert_lm.glue.config import GlueConfig
from albert_lm.settings import RECIPE_DIR, option_values, recipe, recipe_names
from albert_lm.training.pretrain_config import PretrainConfig


def test_shipped_recipes_load_and_hold_only_known_settings():
    assert {"cpu-10min", "cpu-1h", "gpu-10min", "paper-base"} <= set(recipe_names())  # the four
    for name in recipe_names():
        r = recipe(name)
        assert r["description"] and set(r) == {
            "description",
            "tokenizer",
            "data",
            "pretrain",
            "distill",
            "distill_task",
            "glue",
        }
        DataConfig(**r["data"]).validate()
        PretrainConfig.load(recipe=r["pretrain"])
        assert set(r["tokenizer"]) <= {"vocab_size"}
        GeneralDistillConfig(**r["distill"])
        TaskDistillConfig(**r["distill_task"])
        GlueConfig(model="m", data="d", output="o", teachers="t", **r["glue"])
        GlueConfig(model="m", data="d", output="o", **r["glue"])  # without teachers too


def test_distillations_help_names_the_shipped_recipes_it_takes(capsys):
    """Read from the recipes, not from a list in the help: a new recipe shows up where it applies."""
    helps = {}
    for words in (("distill", "general"), ("distill", "task")):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*words, "--help"])
        helps[words] = " ".join(capsys.readouterr().out.split())
    for name in recipe_names():
        sections = json.loads((RECIPE_DIR / f"{name}.json").read_text())
        assert name in helps["distill", "general"]  # its distillation settings, or its student's shape
        listed = re.search(r"recipe's task settings \(([^:)]*)", helps["distill", "task"])
        assert listed is not None and (name in listed.group(1).split(", ")) == ("distill_task" in sections)
    paper = PretrainConfig.load(recipe=recipe("paper-base")["pretrain"])
    assert (paper.preset, paper.learning_rate, paper.max_steps, paper.warmup_steps) == (
        "albert-base",
        0.00176,
        125000,
        3125,
    )
    assert paper.batch_size * paper.gradient_accumulation_steps == 4096  # the paper's global batch


def test_recipe_then_config_file_then_options(tmp_path):
    own = tmp_path / "mine.json"
    own.write_text(json.dumps({"pretrain": {"max_steps": 7, "learning_rate": 0.5, "seed": 3}}))
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"learning_rate": 0.25, "data": "d"}))
    args = build_parser().parse_args(
        ["pretrain", "--recipe", str(own), "--config", str(config), "--seed", "9"]
    )
    cfg = PretrainConfig.load(
        args.config, recipe(args.recipe)["pretrain"], **option_values(args, PretrainConfig)
    )
    assert (cfg.max_steps, cfg.learning_rate, cfg.seed, cfg.data) == (7, 0.25, 9, "d")


def test_bad_recipes_are_clear_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="shipped recipes are .*paper-base"):
        recipe("cpu-1year")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"pretrain": {"max_stepz": 1}}))
    with pytest.raises(ValueError, match="recipe: unknown setting"):
        PretrainConfig.load(recipe=recipe(str(bad))["pretrain"])
    code = main(["pretrain", "--recipe", str(bad), "--data", "d", "--output", str(tmp_path / "p")])
    assert code == 1 and "bad.json: unknown setting(s) max_stepz (max_stepz: did you mean max_steps?)" in (
        capsys.readouterr().err
    )  # the recipe's file named, and the field it meant
    bad.write_text(json.dumps({"training": {}}))
    with pytest.raises(ValueError, match="bad.json: unknown section"):
        recipe(str(bad))
    bad.write_text(json.dumps({"data": {"max_ngramz": 2}}))
    code = main(
        [
            "data",
            "create",
            "--input",
            "x.txt",
            "--tokenizer",
            "t",
            "--output",
            str(tmp_path / "o"),
            "--recipe",
            str(bad),
        ]
    )
    assert code == 1 and "unknown data field(s) max_ngramz" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["cpu-10min", "cpu-1h"])
def test_data_create_takes_the_recipes_block_size(name, tiny_corpus_and_tokenizer, tmp_path):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "data"
    code = main(
        [
            "data",
            "create",
            "--recipe",
            name,
            "--input",
            str(corpus),
            "--tokenizer",
            str(tok / "spiece.model"),
            "--output",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert json.dumps(manifest).count('"block_bytes": ' + str(recipe(name)["data"]["block_bytes"])) >= 1


def test_distill_recipe_then_config_file_then_options(tmp_path, capsys):
    """`albert distill general --recipe distill-cpu-1h` takes the recipe's settings, a pretraining recipe
    the student's shape only; a --config file and options win; a setting the command lacks is named."""

    def settings(*argv: str) -> GeneralDistillConfig:
        return _general_settings(build_parser().parse_args(["distill", "general", "--output", "o", *argv]))

    cfg = settings("--recipe", "distill-cpu-1h")
    assert (cfg.max_segments, cfg.time_budget, cfg.preset, cfg.model_overrides) == (50000, "47m", None, {})
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"max_segments": 10, "learning_rate": 0.25}))
    cfg = settings("--recipe", "distill-cpu-1h", "--config", str(config), "--learning-rate", "0.5")
    assert (cfg.max_segments, cfg.learning_rate, cfg.batch_size) == (10, 0.5, 64)
    shape = settings("--recipe", "cpu-1h")  # a pretraining recipe: the shape only
    assert (shape.preset, shape.model_overrides, shape.max_segments) == (
        "albert-tiny",
        {"sharing": "none", "embedding_size": 128},
        100_000,
    )
    code = main(["pretrain", "--recipe", "distill-cpu-1h", "--data", "d", "--output", str(tmp_path / "p")])
    assert code == 1 and not (tmp_path / "p").exists()
    assert "a distillation recipe (no pretrain settings)" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"distill": {"max_segmentz": 1}}))
    with pytest.raises(ValueError, match="bad.json: unknown setting.*max_segmentz"):
        settings("--recipe", str(bad))


def test_the_demo_is_described_as_the_model_it_trains():
    """`albert --help`, `albert demo --help` and the README name the demo's model by its size: the one the
    cpu-10min recipe builds (its tokenizer's 5000 pieces), not albert-tiny's 0.4M."""
    from albert_lm.demo import run_demo_command
    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForPreTraining

    r = recipe("cpu-10min")
    config = AlbertConfig.from_preset(
        r["pretrain"]["preset"], vocab_size=r["tokenizer"]["vocab_size"], **r["pretrain"]["model_overrides"]
    )
    millions = f"{AlbertForPreTraining(config).num_parameters() / 1e6:.1f}M"
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert run_demo_command.__doc__ is not None
    for where, text in (("albert demo --help", run_demo_command.__doc__), ("README.md", readme)):
        assert f"{millions}-parameter ALBERT" in text, where
    assert "albert-tiny" not in run_demo_command.__doc__


def test_each_commands_help_lists_the_recipes_it_takes():
    """A distillation recipe has empty data and pretraining sections: `pretrain --help` listed it, and
    `pretrain --recipe` then refused it."""
    import contextlib
    import io

    from albert_lm.cli import main

    for command, section in ((["pretrain"], "pretrain"), (["data", "create"], "data"), (["glue"], "glue")):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
            main([*command, "--help"])
        listed = " ".join(shown.getvalue().split()).split("Shipped: ")[1]
        for name in recipe_names():
            assert (name in listed) == bool(recipe(name)[section]), (command, name)
    assert "distill-cpu-1h" not in recipe_names("pretrain") and "student-cpu-2h" in recipe_names("glue")
