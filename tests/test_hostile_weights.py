"""A broken model says so: a non-finite or integer weight in any model folder, and damaged early-exit
heads, are refused by every command that loads them, naming the file and the tensor; scores that come out
non-finite anyway are refused rather than printed; a head that never trained is not used as if trained."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from test_bad_input import refused

from albert_lm.model.early_exit import EXIT_FILE

LAYER_NORM = "albert.embeddings.LayerNorm.weight"  # transformers' name, in a fine-tuned folder's file


def _damaged(src: Path, dst: Path, name: str | None = None, value: float = float("nan"), dtype=None) -> Path:
    """A copy of the model folder `src` with one value of tensor `name` (default: the embedding
    LayerNorm's) set to `value`, or the tensor cast to `dtype`."""
    shutil.copytree(src, dst)
    file = dst / "model.safetensors"
    state = load_file(file)
    name = name or next(n for n in state if n.endswith("embeddings.LayerNorm.weight"))
    if dtype is not None:
        state[name] = state[name].to(dtype)
    else:
        state[name].view(-1)[0] = value
    save_file(state, file)
    return dst


def _commands(model: Path, pretrained: Path, texts: Path, masked: Path, out: Path) -> dict[str, list[str]]:
    return {
        "predict": [
            "predict",
            "--model",
            str(model),
            "--input",
            str(texts),
            "--output",
            str(out / "p.jsonl"),
        ],
        "evaluate": [
            "evaluate",
            "--task",
            "sst2",
            "--model",
            str(model),
            "--data",
            str(texts.parent / "sst2"),
            "--output",
            str(out / "eval"),
        ],  # fmt: skip
        "embed": ["embed", "--model", str(model), "--input", str(texts), "--output", str(out / "e.npy")],
        "fill-mask": [
            "fill-mask",
            "--model",
            str(pretrained),
            "--input",
            str(masked),
            "--output",
            str(out / "f.jsonl"),
        ],  # fmt: skip
        "finetune": [
            "finetune",
            "--task",
            "sst2",
            "--model",
            str(pretrained),
            "--data",
            str(texts.parent / "sst2"),
            "--output",
            str(out / "ft"),
            "--max-steps",
            "1",
            "--no-tensorboard",
            "--no-plot",
        ],  # fmt: skip
        "export": ["export", "--model", str(model), "--output", str(out / "onnx")],
    }


COMMANDS = ("predict", "evaluate", "embed", "fill-mask", "finetune", "export")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_weight_is_refused_naming_the_file_and_tensor(
    tiny_exit_run, tiny_sst2, tmp_path, capsys, command, value
):
    if command == "export":
        pytest.importorskip("onnxruntime")
    model = _damaged(tiny_exit_run / "run" / "best", tmp_path / "model", value=value)
    base = _damaged(tiny_sst2 / "base", tmp_path / "base", value=value)
    (tmp_path / "sst2").symlink_to(tiny_sst2 / "sst2", target_is_directory=True)
    shutil.copy(tiny_exit_run / "texts.txt", tmp_path / "texts.txt")
    argv = _commands(model, base, tmp_path / "texts.txt", tiny_exit_run / "masked.txt", tmp_path / "out")[
        command
    ]
    refused(capsys, argv, "model.safetensors", "LayerNorm.weight", "non-finite", untouched=(model, base))
    assert not [f for f in (tmp_path / "out").rglob("*") if f.is_file()], "files written by a refused run"


def test_an_integer_weight_is_refused_naming_the_file_and_tensor(tiny_exit_run, tmp_path, capsys):
    model = _damaged(
        tiny_exit_run / "run" / "best", tmp_path / "model", "classifier.weight", dtype=torch.int32
    )
    shutil.copy(tiny_exit_run / "texts.txt", tmp_path / "texts.txt")
    argv = ["predict", "--model", str(model), "--input", str(tmp_path / "texts.txt")]
    refused(capsys, argv, "model.safetensors", "classifier.weight", "int32")


def _exit_heads(folder: Path, kind: str) -> None:
    """Damage `folder`'s exit_heads.safetensors in the way `kind` names."""
    file = folder / EXIT_FILE
    if kind in ("nan", "inf", "int32", "shape"):
        state = load_file(file)
        name = sorted(state)[0]
        if kind == "int32":
            state[name] = state[name].to(torch.int32)
        elif kind == "shape":
            state[name] = state[name][..., :-1].contiguous()
        else:
            state[name].view(-1)[0] = float(kind)
        save_file(state, file)
    elif kind == "garbage":
        file.write_bytes(b"not a safetensors file at all" * 10)
    elif kind == "empty":
        file.write_bytes(b"")
    elif kind == "truncated":
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    elif kind == "huge-header":
        file.write_bytes(struct.pack("<Q", 2**62) + b"{}")


EXIT_DAMAGE = ("nan", "inf", "int32", "shape", "garbage", "empty", "truncated", "huge-header")


@pytest.mark.parametrize("kind", EXIT_DAMAGE)
@pytest.mark.parametrize("rule", [["--depth", "1"], ["--patience", "1"], ["--exit-confidence", "0.5"]])
def test_damaged_exit_heads_are_refused_naming_the_file(tiny_exit_run, tmp_path, capsys, kind, rule):
    model = tmp_path / "model"
    shutil.copytree(tiny_exit_run / "run" / "best", model)
    _exit_heads(model, kind)
    argv = ["predict", "--model", str(model), "--input", str(tiny_exit_run / "texts.txt"), *rule]
    refused(capsys, argv, EXIT_FILE, untouched=(model,))


def test_damaged_exit_heads_are_refused_by_export(tiny_exit_run, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = tmp_path / "model"
    shutil.copytree(tiny_exit_run / "run" / "best", model)
    _exit_heads(model, "inf")
    refused(capsys, ["export", "--model", str(model), "--output", str(tmp_path / "o")], EXIT_FILE)
    assert not (tmp_path / "o").exists()


def test_non_finite_scores_are_refused_not_printed(tiny_exit_run, tiny_sst2, tmp_path, capsys, monkeypatch):
    """Finite weights can still give non-finite scores (an overflow in reduced precision): predict and
    evaluate refuse them instead of writing NaN (not JSON) or scoring every row as class 0."""
    from albert_lm.model.heads import AlbertForSequenceClassification

    forward = AlbertForSequenceClassification.forward

    def overflowing(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        out.logits = out.logits * float("inf")
        return out

    monkeypatch.setattr(AlbertForSequenceClassification, "forward", overflowing)
    out = tmp_path / "p.jsonl"
    best = tiny_exit_run / "run" / "best"
    refused(capsys, ["predict", "--model", str(best), "--input", str(tiny_exit_run / "texts.txt"),
                     "--output", str(out)], "non-finite scores")  # fmt: skip
    assert not out.exists()
    refused(capsys, ["evaluate", "--task", "sst2", "--model", str(tiny_exit_run / "run" / "best"), "--data",
                     str(tiny_sst2 / "sst2"), "--output", str(tmp_path / "eval")], "non-finite scores")  # fmt: skip
    assert not (tmp_path / "eval" / "eval_results.json").exists()


def test_the_exports_comparison_keeps_a_nan_difference(tmp_path):
    """Python's max() drops a NaN (max(0.0, nan) is 0.0), which passed a NaN graph with
    'max |ORT - PyTorch| 0.00e+00'; the comparison must carry it to the tolerance check, which fails."""
    from types import SimpleNamespace

    from albert_lm.deploy.export import _compare

    class Session:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self, names, feed):
            return [np.array([[0.5, float("nan")]], dtype=np.float32)]

    ort = SimpleNamespace(SessionOptions=lambda: SimpleNamespace(), InferenceSession=Session)
    samples = [{"input_ids": torch.zeros(1, 2, dtype=torch.long)}] * 2
    references = [[np.array([[0.5, 0.25]], dtype=np.float32)]] * 2
    diff, cosine = _compare(ort, tmp_path / "model.onnx", samples, references)
    assert not diff <= 1e-4 and not cosine >= 0.9


def test_a_student_without_a_trained_mlm_head_is_refused_by_fill_mask(
    tiny_sst2, tiny_exit_run, tmp_path, capsys
):
    """An older student of `distill general` (mlm_weight 0) kept the random masked-LM head."""
    student = tmp_path / "student"
    shutil.copytree(tiny_sst2 / "base", student)
    (student / "distill_config.json").write_text(json.dumps({"mlm_weight": 0.0}))
    refused(capsys, ["fill-mask", "--model", str(student), "--input", str(tiny_exit_run / "masked.txt")],
            str(student), "never trained", "distill_config.json")  # fmt: skip
    pytest.importorskip("onnxruntime")
    from albert_lm.deploy.export import export_onnx

    with pytest.raises(ValueError, match="never trained"):  # the web page's fill-mask graph
        export_onnx(student, tmp_path / "o", head="masked_lm")


def test_onnx_export_refuses_a_tokenizer_that_is_not_the_models(
    tiny_exit_run, tiny_corpus_and_tokenizer, tmp_path, capsys
):
    """The export copies the tokenizer beside the graph: one with more pieces than the model's embedding
    rows would give ids the graph cannot look up, so it is refused as predict refuses it."""
    pytest.importorskip("onnxruntime")
    from albert_lm.data.tokenizer_training import train_tokenizer

    model = tmp_path / "model"
    shutil.copytree(tiny_exit_run / "run" / "best", model)
    train_tokenizer([tiny_corpus_and_tokenizer[0]], tmp_path / "tok", vocab_size=220, num_threads=1)
    shutil.copy(tmp_path / "tok" / "spiece.model", model / "spiece.model")
    refused(capsys, ["export", "--model", str(model), "--output", str(tmp_path / "o")], "spiece.model", "220")
    assert not (tmp_path / "o").exists()
