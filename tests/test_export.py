"""`albert export --format onnx`: every head's graph in ONNX Runtime against PyTorch at shapes the
export never saw, int8, and refusals (a folder in use, no model, a graph that fails its check)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from albert_lm.cli import main
from albert_lm.files import write_json
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
)
from albert_lm.model.unpad import use_unpadding

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture
def saved(tmp_path, tiny_config, tiny_corpus_and_tokenizer):
    _, tok = tiny_corpus_and_tokenizer

    def make(cls, task: str | None, **changes):
        torch.manual_seed(0)
        model = cls(tiny_config(vocab_size=200, **changes)).eval()
        out = tmp_path / f"model-{task}"
        model.save_pretrained(out)
        shutil.copy(tok / "spiece.model", out / "spiece.model")
        if task:
            write_json(
                out / "finetune_config.json", {"task": task, "labels": ["a", "b"], "max_seq_length": 64}
            )
        return model, out

    return make


def _inputs(shape, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 200, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[-1, ..., shape[-1] - 3 :] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


@pytest.mark.parametrize(
    "cls, task, outputs, shapes",
    [
        (AlbertForSequenceClassification, "classification", ["logits"], [(1, 5), (4, 50)]),
        (AlbertForQuestionAnswering, "squad1", ["start_logits", "end_logits"], [(2, 33)]),
        (AlbertForMultipleChoice, "race", ["logits"], [(2, 4, 21)]),
        (AlbertForPreTraining, None, ["last_hidden_state"], [(3, 11)]),
    ],
)
def test_onnx_graph_matches_pytorch_at_new_shapes(saved, tmp_path, capsys, cls, task, outputs, shapes):
    model, folder = saved(cls, task, num_labels=2)
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(folder), "--output", str(out)]) == 0
    assert "max |ORT - PyTorch|" in capsys.readouterr().out
    assert {"model.onnx", "spiece.model", "config.json", "export.json"} <= {p.name for p in out.iterdir()}
    assert not list(out.rglob("*.data"))  # the weights inside model.onnx: copying it alone is enough
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "model.onnx", alone / "model.onnx")
    session = ort.InferenceSession(str(alone / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == outputs
    encoder = model.albert if task is None else model
    for shape in shapes:
        x = _inputs(shape, 3)
        got = session.run(None, {k: v.numpy() for k, v in x.items()})
        with torch.no_grad(), use_unpadding(False):  # the graph's pads carry the pad tokens' states
            ref = encoder(**x)
        for name, value in zip(outputs, got, strict=True):
            assert np.abs(value - getattr(ref, name).numpy()).max() < 1e-4


def test_int8_export_and_refusals(saved, tmp_path, capsys):
    _, folder = saved(AlbertForSequenceClassification, "classification", num_labels=2)
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(folder), "--output", str(out), "--int8"]) == 0
    report = json.loads((out / "export.json").read_text())
    assert report["int8_cosine"] >= 0.9 and (out / "model.int8.onnx").stat().st_size > 0
    assert report["bytes"] == {p.name: p.stat().st_size for p in out.glob("model*.onnx")}  # what to ship
    assert "model.int8.onnx " in capsys.readouterr().out  # its size, said with the figures
    fp32_bytes = sum(p.stat().st_size for p in out.glob("model.onnx*"))
    assert (out / "model.int8.onnx").stat().st_size < 0.6 * fp32_bytes  # int8 weights, stored once
    assert sorted(p.name for p in out.glob("*.onnx")) == ["model.int8.onnx", "model.onnx"]  # no leftovers
    # the folder says what it holds and how it was checked: it travels to a device without the model's card
    card = (out / "README.md").read_text()
    assert f"albert export --model {folder} --output {out} --int8" in card  # --output as given
    assert "inputs `input_ids`, `attention_mask`, `token_type_ids`" in card and "outputs `logits`" in card
    assert f"at most {report['max_abs_diff_fp32']:.1e} from PyTorch" in card
    assert f"int8: cosine {report['int8_cosine']:.4f}" in card and "Running the ONNX file" in card
    # the folder now holds an export: refused without --overwrite, nothing changed
    before = (out / "model.onnx").read_bytes()
    assert main(["export", "--model", str(folder), "--output", str(out)]) == 1
    assert "is not empty" in capsys.readouterr().err and (out / "model.onnx").read_bytes() == before
    assert main(["export", "--model", str(tmp_path / "nothing"), "--output", str(tmp_path / "o2")]) == 1
    assert "no model at" in capsys.readouterr().err
    # a check that cannot pass: nothing is left behind
    assert main(["export", "--model", str(folder), "--output", str(tmp_path / "o3"), "--tolerance", "0"]) == 1
    err = capsys.readouterr().err
    assert "differ from PyTorch's" in err or "not exported" in err
    assert not (tmp_path / "o3").exists() and not list(tmp_path.glob(".o3*"))


@pytest.mark.parametrize("choices", [False, True])
def test_graphs_are_checked_on_sentences_padded_with_both_segments(
    tiny_config, tiny_corpus_and_tokenizer, choices
):
    """The check inputs are the tokenizer's sentences (random ids leave a classifier at its prior, where
    int8's error reads as a low cosine): a padded single text and padded pairs, within the positions."""
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.deploy.export import _text_samples

    _, tok = tiny_corpus_and_tokenizer
    tokenizer = AlbertTokenizer.from_pretrained(tok)
    config = tiny_config(vocab_size=200)
    one, pairs = _text_samples(tokenizer, config, choices)
    for batch in (one, pairs):
        assert batch["input_ids"].dim() == (3 if choices else 2)
        assert batch["input_ids"].shape[-1] <= config.max_position_embeddings
        assert not (batch["input_ids"] == tokenizer.unk_token_id).all()
    assert one["input_ids"].shape[-2] == 1 and pairs["input_ids"].shape[-2] == 4
    assert (one["attention_mask"] == 0).sum() == 3  # padding exercised
    assert set(pairs["token_type_ids"].unique().tolist()) == {0, 1}
