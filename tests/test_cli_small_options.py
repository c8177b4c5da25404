"""Small command-line troubles a new user met: a misspelt option with no suggestion, convert's --config
that meant another thing than everywhere else, --max-steps silently beating --epochs, --init-from said
three times, and the demo's comma piece printed as ",,"."""

from __future__ import annotations

import logging
import math
import re

import pytest
from conftest import TINY_MODEL
from test_cli_vocabulary import _commands

from albert_lm.cli import build_parser, main


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2  # argparse's code for a bad command line
    return capsys.readouterr().err


# --------------------------------------------------------------------------- a) did you mean
@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["finetune", "--modle", "x"], "did you mean --model?"),
        (["pretrain", "--modle", "x"], "did you mean --model-config or --model-override?"),
        (["pretrain", "--mx-steps=3"], "did you mean --max-steps?"),
        (["data", "create", "--inptu", "x"], "did you mean --input?"),
        (["convert", "--from-tf", "a", "--output", "b", "--confg", "c"], "did you mean --model-config?"),
        (["convert", "--form-tf", "a", "--output", "b"], "did you mean --from-tf?"),  # "required: --from-tf"
    ],
)
def test_a_misspelt_option_gets_a_suggestion(capsys, argv, hint):
    err = _refused(capsys, argv)
    assert hint in err
    assert (
        f"albert {' '.join(w for w in argv[:2] if not w.startswith('-'))}" in err
    )  # the command's own usage


@pytest.mark.parametrize(
    ("argv", "hint"),
    [(["pretrian"], "did you mean pretrain?"), (["distill", "genral"], "did you mean general?")],
)
def test_a_misspelt_command_gets_a_suggestion(capsys, argv, hint):
    assert hint in _refused(capsys, argv)
    assert "did you mean" not in _refused(capsys, ["xyzzy"])  # nothing near: no guess


def test_every_command_suggests_its_options(capsys):
    for words, parser in _commands().items():
        flag = next(s for a in parser._actions for s in a.option_strings if s.startswith("--") and len(s) > 7)
        typo = flag[:3] + flag[4] + flag[3] + flag[5:]  # two letters swapped: --otuput
        err = _refused(capsys, [*words.split(), typo, "x"])
        assert "did you mean" in err and flag in err, (words, typo, err)


def test_no_suggestion_for_what_is_not_close(capsys):
    err = _refused(capsys, ["pretrain", "--xyzzy", "3"])
    assert "unrecognized arguments: --xyzzy 3" in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["finetune", "--num-train-epochs", "3"], "did you mean --epochs?"),
        (["pretrain", "--lr", "3"], "did you mean --learning-rate?"),
        (["finetune", "--fp16"], "did you mean --precision fp16?"),
        (["pretrain", "--model", "x"], "did you mean --init-from?"),  # argparse: "ambiguous option"
        (["predict", "--model-name-or-path", "x"], "did you mean --model?"),
    ],
)
def test_other_tools_names_get_ours(capsys, argv, hint):
    """transformers' and google-research's names for an option get albert-lm's as the hint."""
    assert hint in _refused(capsys, argv)


def test_a_group_without_its_action_and_a_misspelt_choice_say_what_to_type(capsys):
    err = _refused(capsys, ["distill"])
    assert "usage: albert distill" in err and "choose an action: general, task, teacher" in err
    assert "did you mean embedding?" in _refused(capsys, ["reproduce", "embeding"])  # a positional choice
    assert "argument --preset: empty value; give a value" in _refused(capsys, ["params", "--preset", ""])


# --------------------------------------------------------------------------- b) convert --model-config
def test_convert_takes_model_config_and_config_only_as_a_hidden_old_name(caplog, capsys):
    parser = build_parser()
    args = parser.parse_args(["convert", "--from-tf", "a", "--output", "b", "--model-config", "c.json"])
    assert args.model_config == "c.json"
    with caplog.at_level(logging.WARNING):
        old = parser.parse_args(["convert", "--from-tf", "a", "--output", "b", "--config", "c.json"])
    assert old.model_config == "c.json"
    assert "--config is now --model-config" in caplog.text
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    shown = capsys.readouterr().out
    assert "--model-config FILE" in shown and "--config" not in shown.replace("--model-config", "")


# --------------------------------------------------------------------------- c) --max-steps over --epochs
def test_finetune_says_max_steps_overrides_epochs(caplog):
    from albert_lm.training.finetune_config import FinetuneConfig, schedule

    cfg = FinetuneConfig(
        task="classification", model="m", data="d", output="o", max_steps=3, epochs=1.0, batch_size=32
    ).resolved()
    with caplog.at_level(logging.INFO):
        total, _, per_epoch = schedule(cfg, 120 * 32)
    assert (total, per_epoch) == (3, 120)
    assert "--max-steps 3 ends the run before its 1 epoch (3 of 120 steps)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        schedule(
            FinetuneConfig(task="classification", model="m", data="d", output="o", epochs=1.0).resolved(), 64
        )
    assert "overrides" not in caplog.text  # one of the two given: nothing to say


def test_distill_task_says_max_steps_caps_epochs(caplog):
    from albert_lm.distill.config import TaskDistillConfig, task_steps

    cfg = TaskDistillConfig(task="sst2", max_steps=3, epochs=1.0)
    with caplog.at_level(logging.INFO):
        assert task_steps(cfg, 120) == 3
    assert "--max-steps 3 ends the run before its 1 epoch (3 of 120 steps)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert task_steps(TaskDistillConfig(task="sst2", max_steps=500, epochs=2.0), 120) == 240
    assert "overrides" not in caplog.text
    assert task_steps(TaskDistillConfig(task="sst2", max_steps=500, epochs=2.5), 3) == math.ceil(7.5)


# --------------------------------------------------------------------------- d) --init-from said once
def test_init_from_is_said_once(tmp_path, caplog, monkeypatch):
    import torch

    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.training import pretrain_setup
    from albert_lm.training.model_init import warm_start
    from albert_lm.training.pretrain_config import PretrainConfig

    torch.manual_seed(0)
    source = tmp_path / "source"
    AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **TINY_MODEL)).save_pretrained(source)

    class Stop(Exception):
        pass

    def stop(cfg):
        raise Stop

    monkeypatch.setattr(pretrain_setup, "_start_process", stop)  # setup's steps before the run starts
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        cfg = PretrainConfig.load(init_from=str(source), output=str(tmp_path / "out"), data=str(tmp_path))
        with pytest.raises(Stop):
            pretrain_setup.setup(cfg)
        warm_start(AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", **TINY_MODEL)), cfg.init_from)
    said = [r.getMessage() for r in caplog.records if str(source) in r.getMessage()]
    assert len(said) == 1, said


# --------------------------------------------------------------------------- e) the demo's comma
def test_demo_prints_the_comma_piece_readably():
    from albert_lm.demo.report import _probe_line

    line = _probe_line(
        {"sentence": "a [MASK] b", "top5": ["\u2581the", ",", "\u2581,", "\u2581", "."], "hit": True}
    )
    assert ",," not in line and ", ," not in line
    assert line.endswith('-> the, ",", ",", "\u2581", "."   (hit)')


def test_help_is_a_list_to_scan():
    """--help lists each option with the first sentence of its field's docstring (the rest stays in the
    field and the docs), under a usage line that names the required options, not every option."""
    from albert_lm.settings import first_sentence

    for words, parser in _commands().items():
        text = parser.format_help()
        usage = text.split("\n\n")[0]
        assert len(usage.splitlines()) <= 3, (words, usage)
        # names are never split at a hyphen (albert-⏎base cannot be copied)
        assert not [line for line in text.splitlines() if re.search(r"[a-z]-$", line.rstrip())], words
    usage = _commands()["finetune"].format_usage()
    assert "--task TASK --model MODEL --data DATA --output OUTPUT [options]" in " ".join(usage.split())
    assert "(0: at the end only) (default 0)" in " ".join(_commands()["pretrain"].format_help().split())
    assert first_sentence("std at start (default: 0.02, as google-research). With E << H it...") == (
        "std at start (default: 0.02, as google-research)."
    )
    assert first_sentence("stop after this much time (e.g. 10m, 1h); not bit-exact") == (
        "stop after this much time (e.g. 10m, 1h); not bit-exact"
    )
    assert (
        first_sentence("a depth drawn from 1 .. L-1, its losses. So that")
        == "a depth drawn from 1 .. L-1, its losses."
    )
