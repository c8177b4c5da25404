"""`albert export --format onnx`: a model folder as an ONNX graph that ONNX Runtime runs, checked there.

What is exported: for a fine-tuned folder (finetune_config.json, or a head named in config.json) the
head's outputs (`logits`; `start_logits` and `end_logits` for question answering), for a pretrained
one the encoder's `last_hidden_state`. Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64),
(batch, sequence) with both axes dynamic, (batch, choices, sequence) for multiple choice. The graph is
captured by PyTorch's own exporter (`torch.onnx.export(dynamo=True)`) with albert-lm's CPU kernel
choices off (plain matmuls: the graph is the model, not this machine's tuning), at `opset`.

The output folder gets model.onnx (and model.int8.onnx with `int8`: ONNX Runtime's dynamic
quantization, int8 weights per channel), the tokenizer (spiece.model, tokenizer_config.json) and the
model's config.json / finetune_config.json, so `predict`-style code can pair them. Before anything is
kept, ONNX Runtime runs the graph on inputs of two shapes, padding included, and the outputs must be
within `tolerance` of PyTorch's (fp32), and at cosine >= 0.9 for int8 (a warning below 0.99: tiny or
untrained models lose more to int8 than trained ones); otherwise nothing is written and the error says
by how much. The folder is filled under a temporary name and renamed.

onnx, onnxscript and onnxruntime are the optional extra `albert-lm[export]`.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.predict import model_task
from albert_lm.files import atomic_folder, describe_folder
from albert_lm.kernels import linear as kernels
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertModel
from albert_lm.training.evaluation import load_for_task

logger = logging.getLogger(__name__)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
INT8_FAIL, INT8_WARN = 0.9, 0.99  # cosine of the int8 graph's outputs to fp32: refused below / warned below


class ExportCheckError(ValueError):
    """The exported graph does not compute what the model does (nothing was written)."""


COPIED = ("config.json", "finetune_config.json", "spiece.model", "tokenizer_config.json")


@dataclass
class ExportResult:
    folder: Path
    outputs: list[str]
    max_abs_diff: float  # fp32 graph against PyTorch
    int8_cosine: float | None  # int8 graph against PyTorch fp32


def _needs(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"export needs {module}: pip install 'albert-lm[export]'") from e


class _Graph(nn.Module):
    """The exported function: named int64 inputs -> the head's output tensors."""

    def __init__(self, model: nn.Module, outputs: list[str]) -> None:
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


def _model(model_dir: Path) -> tuple[nn.Module, list[str], bool]:
    """(model in eval mode, its output names, whether inputs carry a choices axis)."""
    try:
        task, _ = model_task(model_dir)
    except ValueError:  # not fine-tuned: the encoder
        return AlbertModel.from_pretrained(model_dir).eval(), ["last_hidden_state"], False
    model = load_for_task(task, model_dir, None).eval()
    if task.head == "question_answering":
        return model, ["start_logits", "end_logits"], False
    return model, ["logits"], task.head == "multiple_choice"


def _sample(shape: tuple[int, ...], vocab: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[0, ..., shape[-1] // 2 :] = 0  # the first example padded: the mask is exercised
    types = torch.zeros_like(ids)
    types[..., shape[-1] // 3 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def export_onnx(
    model_dir: str | Path,
    output: str | Path,
    opset: int = 18,
    int8: bool = False,
    tolerance: float = 1e-4,
    overwrite: bool = False,
) -> ExportResult:
    """Export, check in ONNX Runtime, then write the folder (see the module docstring)."""
    ort = _needs("onnxruntime")
    _needs("onnxscript")
    model_dir, out = Path(model_dir), Path(output)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"no model at {model_dir} (no config.json)")
    if out.resolve() == model_dir.resolve():
        raise ValueError(f"--output {out} is the model folder: export into another folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out} is not empty ({describe_folder(out)}); choose another folder or --overwrite"
        )
    AlbertTokenizer.from_pretrained(model_dir)  # the tokenizer is part of the export: it must load
    model, names, choices = _model(model_dir)
    config = AlbertConfig.from_pretrained(model_dir)
    graph = _Graph(model, names)
    example = _sample((2, 3, 16) if choices else (2, 16), config.vocab_size, 0)
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("sequence", max=config.max_position_embeddings)
    axes = {0: batch, 2: seq} if choices else {0: batch, 1: seq}
    if choices:
        axes[1] = torch.export.Dim("choices")
    with atomic_folder(out) as tmp:
        was = kernels._ENABLED
        kernels.set_enabled(False)  # plain matmuls in the graph, not this CPU's oneDNN choices
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    graph, tuple(example[k] for k in INPUTS), str(tmp / "model.onnx"), input_names=list(INPUTS),
                    output_names=names, dynamic_shapes={k: axes for k in INPUTS}, dynamo=True,
                    opset_version=opset, verbose=False,
                )  # fmt: skip
        finally:
            kernels.set_enabled(was)
        checks = [_sample((1, 3, 9) if choices else (1, 9), config.vocab_size, 1),
                  _sample((3, 4, 37) if choices else (3, 37), config.vocab_size, 2)]  # fmt: skip
        diff = _check(ort, tmp / "model.onnx", graph, checks)
        if diff > tolerance:
            raise ExportCheckError(
                f"ONNX Runtime's outputs differ from PyTorch's by {diff:.2e} (> {tolerance:g}): not exported"
            )
        cosine = None
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(
                tmp / "model.onnx", tmp / "model.int8.onnx", weight_type=QuantType.QInt8, per_channel=True
            )
            cosine = _cosine(ort, tmp / "model.int8.onnx", graph, checks)
            if cosine < INT8_FAIL:
                raise ExportCheckError(
                    f"the int8 graph's outputs are at cosine {cosine:.4f} to fp32 (< {INT8_FAIL}): not exported"
                )
            if cosine < INT8_WARN:
                logger.warning("the int8 graph's outputs are at cosine %.4f to fp32: check its accuracy on your "
                               "dev set before you ship it", cosine)  # fmt: skip
        for name in COPIED:
            if (model_dir / name).is_file():
                shutil.copy(model_dir / name, tmp / name)
        (tmp / "export.json").write_text(json.dumps({
            "format": "onnx", "opset": opset, "inputs": list(INPUTS), "outputs": names,
            "max_abs_diff_fp32": diff, "int8_cosine": cosine, "torch": torch.__version__,
            "onnxruntime": ort.__version__,
        }, indent=1) + "\n")  # fmt: skip
    logger.info("exported %s -> %s (max |ORT - PyTorch| %.2e)", model_dir, out, diff)
    return ExportResult(out, names, diff, cosine)


def _run(ort: Any, path: Path, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in inputs.items()})


def _reference(graph: _Graph, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.numpy() for t in graph(*(inputs[k] for k in INPUTS))]


def _check(ort: Any, path: Path, graph: _Graph, samples: list[dict[str, torch.Tensor]]) -> float:
    worst = 0.0
    for inputs in samples:
        for got, want in zip(_run(ort, path, inputs), _reference(graph, inputs), strict=True):
            worst = max(worst, float(np.abs(got - want).max()))
    return worst


def _cosine(ort: Any, path: Path, graph: _Graph, samples: list[dict[str, torch.Tensor]]) -> float:
    worst = 1.0
    for inputs in samples:
        for got, want in zip(_run(ort, path, inputs), _reference(graph, inputs), strict=True):
            a, b = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
            worst = min(worst, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)))
    return worst


__all__ = ["ExportCheckError", "ExportResult", "export_onnx"]
