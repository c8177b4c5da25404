"""Hostile input on what every command shares: JSON nested too deeply for the parser, CSV fields over the
csv module's limit, empty values, and the last resort for an exception no reader turned into a message
(one line saying it is an internal error, never a bare traceback)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import made_up_text
from test_bad_input import refused

import albert_lm.cli as cli
from albert_lm.cli import main
from albert_lm.files import InputError, csv_rows, jsonl_rows, parse_json, read_json_object
from albert_lm.training.finetune_config import FinetuneConfig

DEEP = "[" * 100_000 + "]" * 100_000


# --------------------------------------------------------------------------- nested JSON
def test_json_nested_too_deeply_is_an_input_error_naming_the_file_and_line(tmp_path):
    f = tmp_path / "settings.json"
    f.write_text('{"max_steps": ' + DEEP + "}")
    with pytest.raises(InputError, match=r"settings.json: .*nested too deeply"):
        read_json_object(f)
    with pytest.raises(InputError, match=r"rows.jsonl:2: .*nested too deeply"):
        list(jsonl_rows(['{"text": "fine"}', '{"text": ' + DEEP + "}"], "rows.jsonl"))
    with pytest.raises(InputError, match=r"n.json: not readable JSON"):
        parse_json('{"n": ' + "9" * 5000 + "}", "n.json")  # more digits than Python converts


def test_commands_refuse_deeply_nested_json_in_one_line(tmp_path, capsys, tiny_corpus_and_tokenizer):
    corpus, tok = tiny_corpus_and_tokenizer
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    out = tmp_path / "out"
    finetune = ["finetune", "--task", "classification", "--model", str(tmp_path), "--data", str(tmp_path),
                "--output", str(out)]  # fmt: skip
    refused(capsys, [*finetune, "--config", str(deep)], "deep.json", "nested too deeply")
    refused(
        capsys,
        ["pretrain", "--data", str(tmp_path), "--output", str(out), "--config", str(deep)],
        "deep.json",
    )
    refused(
        capsys,
        ["tokenizer", "train", "--input", str(corpus), "--output", str(out), "--recipe", str(deep)],
        "deep.json",
    )
    refused(
        capsys,
        [
            "pretrain",
            "--data",
            str(tmp_path),
            "--output",
            str(out),
            "--preset",
            "albert-tiny",
            "--model-override",
            "hidden_size=" + "[" * 5000,
        ],
        "hidden_size",
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "a line of text"}\n{"text": ' + DEEP + "}\n")
    refused(
        capsys,
        [
            "data",
            "create",
            "--input",
            str(rows),
            "--tokenizer",
            str(tok),
            "--output",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ],
        "rows.jsonl",
        "line 2",
        "nested too deeply",
    )
    assert not out.exists()


# --------------------------------------------------------------------------- CSV
def test_a_csv_field_over_the_readers_limit_names_the_file_and_line():
    text = ["sentence\tlabel\n", "fine\t1\n", "x" * 200_000 + "\t0\n"]
    with pytest.raises(InputError, match=r"train.tsv:3: not readable as TSV: field larger"):
        list(csv_rows(text, "train.tsv", delimiter="\t", quotes=False))
    with pytest.raises(InputError, match=r"a.csv:2: .*quote left open"):
        list(csv_rows(["text,label\n", '"an open quote,1\n', *["more text,0\n"] * 20_000], "a.csv"))
    # a quote left open in a short file swallowed every row after it into one field, exit 0
    with pytest.raises(InputError, match=r"b.csv:3: .*unexpected end of data; is a quote left open"):
        list(csv_rows(["text\n", "first\n", '"unclosed, quote\n', "second\n", "third\n"], "b.csv"))
    rows = list(csv_rows(["text\n", '"two\n', 'lines"\n', "\n", '"a ""quoted"" word"\n'], "c.csv"))
    assert [row["text"] for _, row in rows] == ["two\nlines", 'a "quoted" word']  # RFC 4180 still read
    assert [line for line, _ in rows] == [2, 5]  # where each record starts (the blank line 4 skipped)
    with pytest.raises(InputError, match=r"d.csv:4: more fields than header columns"):
        list(csv_rows(["a,b\n", '1,"x\n', 'y"\n', '2,"three\n', "lines\n", 'here",3\n'], "d.csv"))


# --------------------------------------------------------------------------- empty values
@pytest.mark.parametrize(
    "argv, option",
    [
        (["finetune", "--task", "classification", "--model", "", "--data", "d", "--output", "o"], "--model"),
        (["predict", "--model", "m", "--input", "", "--output", "o"], "--input"),
        (["predict", "--model", "m", "--input", "i", "--output", ""], "--output"),
        (["data", "create", "--input", "", "--tokenizer", "t", "--output", "o"], "--input"),
        (["pretrain", "--data", "d", "--output", "o", "--init-from", " "], "--init-from"),
        (["export", "--model", "m", "--output", ""], "--output"),
        (["embed", "--model", "", "--text", "a"], "--model"),
    ],
)
def test_an_empty_value_is_refused_naming_the_option(capsys, tmp_path, monkeypatch, argv, option):
    monkeypatch.chdir(tmp_path)  # an empty path would otherwise mean this folder
    refused(capsys, argv, option, "empty value")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_string_in_a_settings_file_is_refused_naming_the_field(capsys, tmp_path):
    with pytest.raises(ValueError, match="model: expected a non-empty string"):
        FinetuneConfig(task="classification", model="", data="d", output="o")
    with pytest.raises(ValueError, match="tokenizer: expected a non-empty string or null"):
        FinetuneConfig(task="classification", model="m", data="d", output="o", tokenizer=" ")
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model": "", "task": "classification"}))
    corpus = made_up_text(tmp_path / "c.txt", 0)
    refused(
        capsys,
        ["finetune", "--config", str(config), "--data", str(corpus), "--output", str(tmp_path / "o")],
        "model",
        "non-empty",
    )


# --------------------------------------------------------------------------- the last resort
def test_an_exception_no_reader_caught_is_an_internal_error_in_one_line(capsys, monkeypatch, tmp_path):
    def broken(args):  # coloured as torch.export colours its messages
        raise RuntimeError("a fault \x1b[96mdeep\x1b[0m inside\nwith a second line")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for action in parser._actions:
        if action.dest == "command":
            action.choices["params"].set_defaults(func=broken)
    capsys.readouterr()
    assert main(["params"]) == cli.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0] == "albert params: internal error: RuntimeError: a fault deep inside"
    assert "please report it" in err
    assert main(["params", "-v"]) == cli.INTERNAL_ERROR  # --verbose shows where
    assert "Traceback" in capsys.readouterr().err


def test_a_torchrun_process_that_lost_the_others_says_so(capsys, monkeypatch):
    """After one process of a torchrun job was killed, the others failed in their next collective with
    "internal error: RuntimeError: ... Connection closed by peer": a fault of albert-lm's, it said."""

    def orphaned(args):
        raise RuntimeError(
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:2"
        )

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for action in parser._actions:
        if action.dest == "command":
            action.choices["params"].set_defaults(func=orphaned)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    refused(capsys, ["params"], "process 1 lost the other processes of this torchrun job", "--resume")
    monkeypatch.setenv("WORLD_SIZE", "1")  # alone, the same error is no lost peer: a fault of ours
    assert main(["params"]) == cli.INTERNAL_ERROR
    monkeypatch.setenv("WORLD_SIZE", "2")  # a backend's refusal of a call is a fault of ours, not a lost peer
    assert not cli.peer_lost(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert not cli.peer_lost(RuntimeError("NCCL error: invalid usage (ncclInvalidUsage)"))


def test_out_of_memory_is_one_line(capsys, monkeypatch):
    def hungry(args):
        raise MemoryError

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for action in parser._actions:
        if action.dest == "command":
            action.choices["params"].set_defaults(func=hungry)
    refused(capsys, ["params"], "out of memory")


def test_the_harness_families_load(monkeypatch):
    """benchmarks/tools/hostile_round.py finds every family module beside it and each has its interface."""
    import importlib.util

    file = Path(__file__).resolve().parents[1] / "benchmarks" / "tools" / "hostile_round.py"
    spec = importlib.util.spec_from_file_location("hostile_round", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "hostile_round", module)
    spec.loader.exec_module(module)
    families = module.families()
    assert "shared surfaces" in [f.FAMILY for f in families]
    for family in families:
        assert callable(family.build) and callable(family.cases)


# --------------------------------------------------------------------------- linked outputs
def test_writes_through_links_keep_the_links_and_reach_their_targets(tmp_path):
    from albert_lm.files import atomic_folder, atomic_write

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)  # an output folder that is a link
    atomic_write(tmp_path / "out" / "predictions" / "dev.jsonl", "rows\n")  # a new folder inside it
    assert (real / "predictions" / "dev.jsonl").read_text() == "rows\n"
    (real / "best").mkdir()
    (tmp_path / "best").symlink_to(real / "best")
    with atomic_folder(tmp_path / "best") as tmp:  # a linked folder swapped at its target
        (tmp / "config.json").write_text("{}")
    assert (tmp_path / "best").is_symlink() and (real / "best" / "config.json").is_file()
    assert sorted(p.name for p in real.iterdir()) == ["best", "predictions"]
    (tmp_path / "dangling").symlink_to(tmp_path / "missing-folder" / "f.txt")
    with pytest.raises(FileNotFoundError):  # a link into a folder that does not exist: as the shell's `>`
        atomic_write(tmp_path / "dangling", "x")
    assert not (tmp_path / "missing-folder").exists()


# --------------------------------------------------------------------------- the Python API
def test_the_python_api_refuses_bad_arguments_when_given(tmp_path):
    from albert_lm import AlbertConfig, AlbertTokenizer, Predictor, quantize_int8

    (tmp_path / "config.json").write_text("{}")  # a folder Predictor accepts before loading anything
    for kwargs, words in (({"device": "tpu"}, "device 'tpu'"), ({"precision": "fp8"}, "precision 'fp8'")):
        with pytest.raises(ValueError, match=words):
            Predictor(tmp_path, **kwargs)  # at once, not at the first call
    for load in (AlbertConfig.from_pretrained, AlbertTokenizer.from_pretrained):
        with pytest.raises(ValueError, match="empty"):
            load("")
    with pytest.raises(TypeError, match="expected a model"):
        quantize_int8("not a model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no albert-lm Linear in this Linear"):
        quantize_int8(torch.nn.Linear(4, 4))  # an unchanged copy would pass for quantized
    for kwargs, words in (
        ({"batch_size": "8"}, "batch_size: expected an integer, got '8'"),
        ({"max_seq_length": 64.0}, "max_seq_length: expected an integer or None, got 64.0"),
        ({"depth": True}, "depth: expected an integer or None, got True"),
        ({"int8": "no"}, "int8: expected True or False, got 'no'"),
    ):
        with pytest.raises(TypeError, match=re.escape(words)):
            Predictor(tmp_path, **kwargs)
    with pytest.raises(TypeError, match="model: expected a model folder or hub id"):
        Predictor(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("top_k: expected an integer, got '3'")):
        Predictor(tmp_path).fill_mask(["a [MASK]"], top_k="3")  # type: ignore[arg-type]


def test_an_int8_model_refuses_to_be_saved_without_its_weights(tmp_path, tiny_config):
    from albert_lm import AlbertForSequenceClassification, quantize_int8

    model = quantize_int8(AlbertForSequenceClassification(tiny_config()))
    with pytest.raises(ValueError, match="an int8 model .* runs in this process only"):
        model.save_pretrained(tmp_path / "q")  # it would write the encoder without its linear layers
    assert not (tmp_path / "q").exists()


# --------------------------------------------------------------------------- records without text
def test_records_without_text_are_counted_never_dropped_silently(capsys, tmp_path, tiny_corpus_and_tokenizer):
    corpus, tok = tiny_corpus_and_tokenizer
    docs = corpus.read_text().split("\n\n")[:40]
    rows = [json.dumps({"text": d}) for d in docs] + [json.dumps({"text": None}), json.dumps({"text": ""})]
    (tmp_path / "some.jsonl").write_text("\n".join(rows) + "\n")
    argv = [
        "data",
        "create",
        "--tokenizer",
        str(tok),
        "--workers",
        "1",
        "--no-progress",
        "--max-seq-length",
        "48",
    ]
    capsys.readouterr()
    assert main([*argv, "--input", str(tmp_path / "some.jsonl"), "--output", str(tmp_path / "a")]) == 0
    assert "2 records had a null or empty text field" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["summary"]["records_without_text"] == 2
    (tmp_path / "none.jsonl").write_text("\n".join([json.dumps({"text": None})] * 5) + "\n")
    refused(
        capsys,
        [*argv, "--input", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "b")],
        "5 records had a null or empty text field",
    )


def test_the_model_and_tokenizer_refuse_what_they_cannot_read_by_name(tiny_config, tiny_corpus_and_tokenizer):
    from albert_lm import AlbertModel, AlbertTokenizer, collate_pretraining, finetune, pretrain

    model = AlbertModel(tiny_config()).eval()
    for ids, error, words in (
        ([[2, 3]], TypeError, "input_ids: expected a torch tensor of shape (batch, sequence), got list"),
        (torch.tensor([2, 3]), ValueError, "of shape (2,); one sequence is a batch of one: t[None]"),
        (torch.tensor([[2.0, 3.0]]), ValueError, "input_ids: expected integers of shape (batch, sequence)"),
    ):
        with pytest.raises(error, match=re.escape(words)):
            model(input_ids=ids)
    mask = torch.ones(1, 2)  # a float 0/1 mask is a mask, as transformers takes it
    assert model(input_ids=torch.tensor([[2, 3]]), attention_mask=mask).last_hidden_state.shape[:2] == (1, 2)
    with pytest.raises(TypeError, match="from_pretrained: expected a model folder or hub id"):
        AlbertModel.from_pretrained(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from_pretrained: empty path"):
        AlbertModel.from_pretrained("")
    with pytest.raises(TypeError, match="finetune: expected a FinetuneConfig, got dict"):
        finetune({"task": "sst2"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pretrain: expected a PretrainConfig, got dict"):
        pretrain({})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="collate_pretraining: an empty batch"):
        collate_pretraining([])
    tok = AlbertTokenizer.from_pretrained(tiny_corpus_and_tokenizer[1])
    ids = tok("kala bime")["input_ids"]
    assert tok.decode(ids) == tok.decode(torch.tensor(ids))  # a tensor's elements are ids too
    with pytest.raises(TypeError, match="decode: expected a sequence of token ids, got str"):
        tok.decode("kala")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"decode: ids\[1\] is {tok.vocab_size}, expected a token id from 0"
    ):
        tok.decode([2, tok.vocab_size])
