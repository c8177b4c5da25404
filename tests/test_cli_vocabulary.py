"""One vocabulary for the command line: every command's parser is walked, and a concept that appears
under two names, or one flag that means two things (type, choices or shared default), fails here."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections import defaultdict

import pytest

from albert_lm.cli import ROAD, build_parser, main
from albert_lm.settings import VOCABULARY

# Spellings of one concept seen in this field's tools; a command may use only the first (ours).
SYNONYMS = {
    "gradient accumulation": ("--gradient-accumulation-steps", "--gradient-accumulation", "--grad-accum",
                              "--accumulation-steps", "--accumulate-grad-batches"),
    "time budget": ("--time-budget", "--minutes", "--max-time", "--budget", "--hours"),
    "seeds": ("--seeds", "--num-seeds", "--n-seeds", "--runs"),
    "precision": ("--precision", "--dtype", "--amp", "--bf16", "--fp16", "--mixed-precision"),
    "device": ("--device", "--cuda", "--gpu", "--no-cuda", "--cpu"),
    "overwrite": ("--overwrite", "--force", "--redo", "--overwrite-output-dir"),
    "evaluation cadence": ("--eval-every", "--eval-steps", "--eval-interval", "--evaluate-every"),
    "log cadence": ("--log-every", "--logging-steps", "--log-interval"),
    "workers": ("--workers", "--num-workers", "--jobs", "--processes"),
    "settings file": ("--config", "--settings", "--config-file"),
}  # fmt: skip


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its words ("data create", "finetune", ...)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if words and not subs:
            found[" ".join(words)] = parser
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*words, name))

    walk(build_parser(), ())
    return found


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def test_every_command_is_walked():
    commands = _commands()
    for words in (
        "tokenizer train",
        "data create",
        "pretrain",
        "convert",
        "finetune",
        "glue",
        "evaluate",
        "predict",
        "export",
        "reproduce",
        "bench",
    ):
        assert words in commands


def test_one_concept_has_one_name():
    commands = _commands()
    for concept, (ours, *others) in SYNONYMS.items():
        for words, parser in commands.items():
            flags = {f for a in _options(parser) for f in a.option_strings}
            assert not flags & set(others), (
                f"albert {words}: {concept} is {ours} elsewhere, here {flags & set(others)}"
            )


# Flags whose choices are the command's own by nature: the formats of the file that command reads or
# writes, the tasks that command knows. Type and kind of option must still agree.
OWN_CHOICES = ("--format", "--task")


def test_one_name_means_one_thing():
    seen: dict[str, dict[str, tuple]] = defaultdict(dict)
    for words, parser in _commands().items():
        for a in _options(parser):
            if a.option_strings[0] in OWN_CHOICES:
                a = argparse.Action(a.option_strings, a.dest, type=a.type)
            kind = getattr(a.type, "__name__", a.type) or "str"  # argparse reads None as str
            switch = a.nargs == 0  # a switch, or an option that takes a value (once or repeated)
            seen[a.option_strings[0]][words] = (kind, tuple(a.choices or ()), switch)
    for flag, uses in seen.items():
        assert len(set(uses.values())) == 1, f"{flag} differs between commands: {uses}"


def test_shared_options_keep_the_shared_default():
    for words, parser in _commands().items():
        for a in _options(parser):
            word = VOCABULARY.get(a.dest)
            if word is None or word.default is None or a.option_strings[0] != word.flag:
                continue
            if a.default is argparse.SUPPRESS:  # settings from a file: the dataclass holds the default
                continue
            assert a.default == word.default, f"albert {words} {word.flag}: default {a.default!r}"


def test_old_spellings_still_work_hidden(tiny_corpus_and_tokenizer):
    args = build_parser().parse_args(["finetune", "--gradient-accumulation", "4"])
    assert args.gradient_accumulation_steps == 4
    assert "--gradient-accumulation " not in _help("finetune")


def _help(*words: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*words, "--help"])
    return out.getvalue()


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_and_quiet_anywhere(where):
    argv = ["-q", "params"] if where == "before" else ["params", "-q"]
    args = build_parser().parse_args(argv)
    assert args.quiet and not args.verbose
    args = build_parser().parse_args(["-v", "params"] if where == "before" else ["params", "--verbose"])
    assert args.verbose


def test_version_and_road_order(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("albert-lm ")
    listing = _help()
    positions = [listing.index(f"    {w} ") for w in ROAD if f"    {w} " in listing]
    assert positions == sorted(positions) and len(positions) >= 12


def test_long_helps_are_grouped():
    for words, parser in _commands().items():
        if len(_options(parser)) > 25:
            titles = [g.title for g in parser._action_groups if g._group_actions]
            assert len(titles) >= 4, f"albert {words}: {len(_options(parser))} options in {titles}"


def test_config_file_gives_settings_and_options_win(tmp_path):
    from albert_lm.glue.config import GlueConfig
    from albert_lm.settings import load_settings

    (tmp_path / "glue.json").write_text('{"model": "m", "data": "d", "output": "o", "seeds": "4,5"}')
    args = build_parser().parse_args(["glue", "--config", str(tmp_path / "glue.json"), "--output", "mine"])
    cfg = load_settings(GlueConfig, args, ("model", "data", "output"))
    assert (cfg.model, cfg.output, cfg.seed_list()) == ("m", "mine", [4, 5])
    (tmp_path / "bad.json").write_text('{"model": "m", "seedz": 3}')
    args = build_parser().parse_args(["glue", "--config", str(tmp_path / "bad.json")])
    with pytest.raises(ValueError, match="seedz"):
        load_settings(GlueConfig, args, ("model",))
    args = build_parser().parse_args(["glue", "--model", "m"])
    with pytest.raises(ValueError, match="missing --data, --output"):
        load_settings(GlueConfig, args, ("model", "data", "output"))


@pytest.mark.parametrize(
    "argv",
    [
        ["finetune", "--task", "SST-2"],
        ["evaluate", "--task", "sst_2"],
        ["distill", "teacher", "--task", "Sst2"],
        ["distill", "task", "--task", " SST-2 "],
    ],
)
def test_a_task_is_read_as_glue_writes_it(argv):
    assert build_parser().parse_args(argv).task == "sst2"


def test_glue_tasks_read_as_glue_writes_them():
    from albert_lm.glue.config import GlueConfig

    assert GlueConfig("m", "d", "o", tasks="CoLA, STS-B,rte").task_list() == ["cola", "stsb", "rte"]
    assert (
        build_parser().parse_args(["finetune", "--task", "token-classification"]).task
        == "token-classification"
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["finetune", "--task", "sst-3"])
