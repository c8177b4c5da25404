"""Early exit in ONNX Runtime: the graphs `albert export` writes beside model.onnx for a classifier
fine-tuned with `--exit-heads`, and the loop that runs them.

One graph cannot stop some rows of a batch and go on with the others, so the model is cut where a row may
stop: `exit/embeddings.onnx` (input_ids, token_type_ids -> hidden: the embeddings and the E -> H
projection) and one graph per distinct layer of the schedule, `exit/layer_<k>.onnx` (hidden,
attention_mask, application -> hidden, logits: one layer application, then the classifier of that
application on the pooled [CLS]). ALBERT shares its layer, so albert-base's twelve applications are one
file run twelve times; `application` (int64, shape (1,), 1 .. L) picks the classifier: the exit heads
for 1 .. L-1, the model's own for L. Between two calls the caller drops the rows that have stopped, so the
batch shrinks as `albert predict --patience` does (see `EXIT_SNIPPET`, the loop in numpy).
export.json's "early_exit" names the files: embeddings, layers, schedule (the layer file of each
application), labels, and, with `--int8`, the int8 layer files (`layers_int8`: per-channel dynamic
quantization of each layer graph; the embeddings stay fp32, a table lookup).

Before anything is kept, ONNX Runtime runs the chain at full depth on two input shapes and every
application's logits must be within the export's tolerance of PyTorch's (int8: cosine >= 0.9).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_lm.kernels import linear as kernels
from albert_lm.kernels.attention import padding_mask
from albert_lm.library_logs import quiet
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import ExitHeads, exit_count
from albert_lm.model.heads import AlbertForSequenceClassification

EXIT_FOLDER = "exit"
_INT8_FAIL = 0.9  # as the whole graph's int8 check: refused below this cosine to fp32

# The loop of docs/finetune.md ("Early exit in ONNX Runtime"), run as written by tests/test_early_exit.py.
EXIT_SNIPPET = '''
import json

import numpy as np
import onnxruntime as ort

from albert_lm import AlbertTokenizer

folder = "runs/sst2-onnx"  # albert export --model runs/sst2/best --output runs/sst2-onnx (fine-tuned --exit-heads)
spec = json.load(open(f"{folder}/export.json"))["early_exit"]
session = lambda name: ort.InferenceSession(f"{folder}/{name}", providers=["CPUExecutionProvider"])
embeddings, layers = session(spec["embeddings"]), [session(name) for name in spec["layers"]]
tokenizer = AlbertTokenizer.from_pretrained(folder)


def predict(texts, patience=3):
    """(logits, depth): each row stops once `patience` consecutive applications agree on its label."""
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128)
    ids, mask, types = (np.array(batch[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids"))
    (hidden,) = embeddings.run(None, {"input_ids": ids, "token_type_ids": types})
    logits = np.zeros((len(texts), spec["labels"]), dtype=np.float32)
    depth = np.zeros(len(texts), dtype=np.int64)
    rows, last, streak = np.arange(len(texts)), np.full(len(texts), -1), np.zeros(len(texts), dtype=np.int64)
    for i, k in enumerate(spec["schedule"], start=1):
        feed = {"hidden": hidden, "attention_mask": mask, "application": np.array([i], dtype=np.int64)}
        hidden, out = layers[k].run(None, feed)
        guess = out.argmax(-1)
        streak, last = np.where(guess == last, streak + 1, 0), guess
        stop = (streak >= patience) | (i == len(spec["schedule"]))
        logits[rows[stop]], depth[rows[stop]] = out[stop], i
        keep = ~stop  # the rows still running: the batch shrinks
        rows, hidden, mask, last, streak = rows[keep], hidden[keep], mask[keep], last[keep], streak[keep]
        if not len(rows):
            break
    return logits, depth
'''


class _Embeddings(nn.Module):
    def __init__(self, model: AlbertForSequenceClassification) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        albert = self.model.albert
        return albert.encoder.embedding_projection(albert.embeddings(input_ids, token_type_ids, None, None))


class _Layer(nn.Module):
    """One layer application and the classifier of that application (`application`: 1 .. L)."""

    weight: torch.Tensor  # (L, C, H): the exit heads' weights, then the model's own classifier's
    bias: torch.Tensor  # (L, C)

    def __init__(self, model: AlbertForSequenceClassification, heads: ExitHeads, a: int, f: int) -> None:
        super().__init__()
        self.model, self.a, self.f = model, a, f
        classifiers = [*heads.classifiers, model.classifier]
        self.register_buffer("weight", torch.stack([c.weight.detach() for c in classifiers]))  # (L, C, H)
        self.register_buffer("bias", torch.stack([c.bias.detach() for c in classifiers]))  # (L, C)

    def forward(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor, application: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        albert = self.model.albert
        hidden = albert.encoder._layer(hidden, padding_mask(attention_mask), self.a, self.f)
        pooled = albert.pool(hidden, attention_mask)
        i = application.reshape(1) - 1
        weight, bias = self.weight.index_select(0, i)[0], self.bias.index_select(0, i)[0]
        return hidden, pooled @ weight.T + bias


class ExitCheckError(ValueError):
    """The early-exit graphs do not compute what the model does (nothing was written)."""


@dataclass
class ExitExport:
    spec: dict[str, Any]  # export.json's "early_exit"
    max_abs_diff: float  # every application's logits, fp32 chain against PyTorch
    int8_cosine: float | None


def exit_graphs(
    ort: Any,
    model: nn.Module,
    model_dir: Path,
    tmp: Path,
    samples: list,
    opset: int,
    int8: bool,
    tolerance: float,
) -> dict[str, Any]:
    """A classifier with exit heads: exit/ written and checked (albert_lm.deploy.onnx_exit); export.json's
    "early_exit" entry, or nothing for other models."""
    if not isinstance(model, AlbertForSequenceClassification):
        return {}
    heads = ExitHeads.load(model_dir, model.config)
    if heads is None:
        return {}
    made = export_exit(ort, model, heads.eval(), tmp, samples, opset, int8)
    if not made.max_abs_diff <= tolerance:
        raise ExitCheckError(
            f"early-exit graphs: ONNX Runtime's logits differ from PyTorch's by "
            f"{made.max_abs_diff:.2e} (> {tolerance:g}): not exported"
        )
    if made.int8_cosine is not None and not made.int8_cosine >= _INT8_FAIL:
        raise ExitCheckError(
            f"early-exit int8 graphs: logits at cosine {made.int8_cosine:.4f} to fp32 "
            f"(< {_INT8_FAIL}): not exported"
        )
    return {
        "early_exit": {**made.spec, "max_abs_diff_fp32": made.max_abs_diff, "int8_cosine": made.int8_cosine}
    }


def export_exit(
    ort: Any,
    model: AlbertForSequenceClassification,
    heads: ExitHeads,
    folder: Path,
    samples: list[dict[str, torch.Tensor]],
    opset: int,
    int8: bool,
) -> ExitExport:
    """Write exit/ into `folder` (the export's temporary folder), run it in ONNX Runtime on `samples`, and
    return its spec and how far it is from PyTorch (the caller decides what is too far)."""
    schedule = list(model.albert.encoder.full_schedule)
    exit_count(model.config)  # grouped inner layers are refused here too
    distinct = sorted(set(schedule))
    (folder / EXIT_FOLDER).mkdir()
    embed_name = f"{EXIT_FOLDER}/embeddings.onnx"
    _capture(
        _Embeddings(model),
        model.config,
        ("input_ids", "token_type_ids"),
        ("hidden",),
        folder / embed_name,
        opset,
    )
    names = []
    for k, (a, f) in enumerate(distinct):
        names.append(f"{EXIT_FOLDER}/layer_{k}.onnx")
        _capture(
            _Layer(model, heads, a, f),
            model.config,
            ("hidden", "attention_mask", "application"),
            ("next_hidden", "logits"),
            folder / names[-1],
            opset,
        )
    spec: dict[str, Any] = {
        "embeddings": embed_name,
        "layers": names,
        "schedule": [distinct.index(s) for s in schedule],
        "labels": model.config.num_labels,
    }
    references = [_reference(model, heads, s) for s in samples]
    diff, _ = _compare(ort, folder, spec["layers"], spec, samples, references)
    cosine = None
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        spec["layers_int8"] = [n.replace(".onnx", ".int8.onnx") for n in names]
        for name, quantized in zip(names, spec["layers_int8"], strict=True):
            with quiet("onnxruntime"):  # the quantizer's notes on each tensor, at INFO on the root logger
                quantize_dynamic(
                    folder / name, folder / quantized, weight_type=QuantType.QInt8, per_channel=True
                )
        _, cosine = _compare(ort, folder, spec["layers_int8"], spec, samples, references)
    return ExitExport(spec, diff, cosine)


def _capture(
    module: nn.Module,
    config: AlbertConfig,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    path: Path,
    opset: int,
) -> None:
    g = torch.Generator().manual_seed(0)
    example: dict[str, torch.Tensor] = {
        "input_ids": torch.randint(5, config.vocab_size, (2, 16), generator=g),
        "token_type_ids": torch.zeros(2, 16, dtype=torch.long),
        "hidden": torch.randn(2, 16, config.hidden_size, generator=g),
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
        "application": torch.tensor([1]),
    }
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=config.max_position_embeddings)
    axes = {"input_ids": {0: batch, 1: seq}, "token_type_ids": {0: batch, 1: seq},
            "hidden": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}, "application": None}  # fmt: skip
    with kernels.plain_matmuls(), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's notes on axis names and opset conversions
        torch.onnx.export(
            module.eval(),
            tuple(example[k] for k in inputs),
            str(path),
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_shapes={k: axes[k] for k in inputs},
            dynamo=True,
            external_data=False,  # the weights inside: one file to copy (ALBERTs are far below 2 GB)
            opset_version=opset,
            verbose=False,
        )


@torch.no_grad()
def _reference(
    model: AlbertForSequenceClassification, heads: ExitHeads, inputs: dict[str, torch.Tensor]
) -> np.ndarray:
    """(L, B, C): every application's logits in PyTorch, as `EarlyExit` computes them."""
    out = model(**inputs, output_hidden_states=True)
    classifiers = [*heads.classifiers, model.classifier]
    mask = inputs["attention_mask"]
    return np.stack(
        [
            c(model.albert.pool(h, mask)).float().numpy()
            for c, h in zip(classifiers, out.hidden_states[1:], strict=True)
        ]
    )


def _compare(
    ort: Any,
    folder: Path,
    layer_files: list[str],
    spec: dict[str, Any],
    samples: list[dict[str, torch.Tensor]],
    references: list[np.ndarray],
) -> tuple[float, float]:
    """(largest absolute difference, smallest cosine) of the chain's logits at every application."""
    options = ort.SessionOptions()
    options.log_severity_level = 3

    def open_(name: str) -> Any:
        return ort.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])

    embeddings, layers = open_(spec["embeddings"]), [open_(n) for n in layer_files]
    worst_diff, worst_cosine = 0.0, 1.0
    for inputs, wanted in zip(samples, references, strict=True):
        mask = inputs["attention_mask"].numpy()
        (hidden,) = embeddings.run(
            None,
            {"input_ids": inputs["input_ids"].numpy(), "token_type_ids": inputs["token_type_ids"].numpy()},
        )
        for i, k in enumerate(spec["schedule"], start=1):
            feed = {"hidden": hidden, "attention_mask": mask, "application": np.array([i], dtype=np.int64)}
            hidden, logits = layers[k].run(None, feed)
            ref = wanted[i - 1]
            worst_diff = float(
                np.maximum(worst_diff, np.abs(logits - ref).max())
            )  # a NaN stays NaN (max() drops it)
            a, b = logits.ravel().astype(np.float64), ref.ravel().astype(np.float64)
            worst_cosine = float(
                np.minimum(worst_cosine, a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
            )
    return worst_diff, worst_cosine


__all__ = ["EXIT_FOLDER", "EXIT_SNIPPET", "ExitCheckError", "ExitExport", "exit_graphs", "export_exit"]
