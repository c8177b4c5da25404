"""`albert export --format onnx`: a model folder as an ONNX graph that ONNX Runtime runs, checked there.

What is exported: for a fine-tuned folder (finetune_config.json, or a head named in config.json) the
head's outputs (`logits`; `start_logits` and `end_logits` for question answering), for a pretrained
one the encoder's `last_hidden_state`. Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64),
(batch, sequence) with both axes dynamic, (batch, choices, sequence) for multiple choice. The graph is
captured by PyTorch's own exporter (`torch.onnx.export(dynamo=True)`) with albert-lm's CPU kernel
choices off (plain matmuls: the graph is the model, not this machine's tuning), at `opset`.

The output folder gets model.onnx (and model.int8.onnx with `int8`: ONNX Runtime's transformer optimizer,
then its dynamic quantization with int8 weights per channel; the optimizer's fused SkipLayerNormalization
/ FastGelu ops are ONNX Runtime's own, so that file is for ONNX Runtime), the tokenizer (spiece.model,
tokenizer_config.json, and tokenizer.json, which the `tokenizers` library runs to the same ids) and the
model's config.json / finetune_config.json, so `predict`-style code can pair them. Before anything is
kept, ONNX Runtime runs the graph on inputs of two shapes, padding included (sentences through its
tokenizer, `CHECK_TEXTS`), and the outputs must be within `tolerance` of PyTorch's (fp32), and at cosine
>= 0.9 for int8 (a warning below 0.99: tiny or untrained models lose more to int8 than trained ones);
otherwise nothing is written and the error says by how much. The folder is filled under a temporary name
and renamed.

The exporter and ONNX Runtime's tools log each step (about 70 lines for a tiny model, more for a big
one); they are kept to their errors unless the root logger is at DEBUG (`albert -v export`).
onnx, onnxscript and onnxruntime are the optional extra `albert-lm[export]`.

Running the ONNX file (with albert-lm's tokenizer, or with no albert-lm and no torch: onnxruntime,
tokenizers and numpy) is docs/deploy.md's "Running the ONNX file"; tests/test_deploy_api.py runs both.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import math
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.export_card import write_export_card
from albert_lm.deploy.loading import refuse_untrained_mlm
from albert_lm.deploy.onnx_exit import exit_graphs
from albert_lm.deploy.predict import NotFineTuned, model_task
from albert_lm.deploy.web_heads import head_model
from albert_lm.deploy.web_tokenizer import TOKENIZER_FILE, tokenizer_json
from albert_lm.files import atomic_folder, check_output_apart, describe_folder, folder_lock
from albert_lm.hub import resolve_model
from albert_lm.kernels import linear as kernels
from albert_lm.library_logs import quiet, verbose
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertModel
from albert_lm.model.unpad import use_unpadding
from albert_lm.runtime.finetuned import null_threshold, read_saved_settings
from albert_lm.runtime.fits import check_tokenizer_fits
from albert_lm.runtime.run_folders import no_model
from albert_lm.runtime.task_model import load_for_task

logger = logging.getLogger(__name__)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
INT8_FAIL, INT8_WARN = 0.9, 0.99  # cosine of the int8 graph's outputs to fp32: refused below / warned below
# The libraries whose loggers report every export step at INFO (onnx_ir's passes, onnxscript's rewriter)
# or warn of what does not concern an ALBERT graph (torch.onnx: "torchvision is not installed").
NOISY = ("torch.onnx", "torch.export", "torch._export", "onnxscript", "onnx_ir", "onnx", "onnxruntime")


class ExportCheckError(ValueError):
    """The exported graph does not compute what the model does (nothing was written)."""


COPIED = ("config.json", "finetune_config.json", "spiece.model", "tokenizer_config.json")
WORDPIECE_COPIED = ("tokenizer.json", "vocab.txt")  # a student of a BERT teacher (albert_lm.data.wordpiece)


@dataclass
class ExportResult:
    folder: Path
    outputs: list[str]
    max_abs_diff: float  # fp32 graph against PyTorch
    int8_cosine: float | None  # int8 graph against PyTorch fp32
    early_exit: bool = False  # exit/ holds the early-exit graphs (a classifier fine-tuned with exit heads)
    sizes: dict[str, int] = field(default_factory=dict)  # bytes of each .onnx file (and its weights file)


def _needs(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"export needs {module}: pip install -e '.[export]' in the albert-lm clone") from e


class _Graph(nn.Module):
    """The exported function: named int64 inputs -> the head's output tensors."""

    def __init__(self, model: nn.Module, outputs: list[str]) -> None:
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


def _model(model_dir: Path, head: str = "auto") -> tuple[nn.Module, list[str], bool]:
    """(model in eval mode, its output names, whether inputs carry a choices axis); `head` as
    `export_onnx`'s (web_heads.HEADS)."""
    if head == "masked_lm":
        refuse_untrained_mlm(model_dir)
    if head != "auto":
        return (*head_model(model_dir, head), False)
    try:
        task, _ = model_task(model_dir)
    except NotFineTuned:  # the encoder; a fine-tuned folder with a damaged settings file is refused
        return AlbertModel.from_pretrained(model_dir).eval(), ["last_hidden_state"], False
    model = load_for_task(task, model_dir, None).eval()
    if task.head == "question_answering":
        return model, ["start_logits", "end_logits"], False
    return model, ["logits"], task.head == "multiple_choice"


# The texts the graphs are checked on. Random token ids, as the traced example is made of, leave a classifier
# near its prior (logits about 0.001 for a lightly trained one), where int8's small absolute error reads as
# a cosine of 0.63 on a graph at cosine 0.99995 to fp32 on sentences.
CHECK_TEXTS = (
    ("A gripping, funny and moving film.", "The film was a joy to watch."),
    ("The committee will meet again on Tuesday to vote.", "No vote is planned."),
    ("It rained all night, and the river rose over its banks.", "The river flooded."),
    ("He sold his car because he could no longer afford it.", "He bought a car."),
)


def _text_samples(
    tokenizer: AlbertTokenizer, config: AlbertConfig, choices: bool
) -> list[dict[str, torch.Tensor]]:
    """Two batches, neither of the traced example's shape: a short text padded by 3 (the mask exercised)
    and CHECK_TEXTS' pairs padded to 37 (both token types), or to the model's positions; for multiple
    choice every batch's rows are its choices."""
    longest = min(37, config.max_position_embeddings)
    short = min(len(tokenizer.encode("Dull.")), longest - 3)
    one = tokenizer(["Dull."], padding="max_length", truncation=True, max_length=short + 3)
    texts, seconds = (list(column) for column in zip(*CHECK_TEXTS, strict=True))
    pairs = tokenizer(texts, seconds, padding="max_length", truncation=True, max_length=longest)
    batches = [{k: torch.tensor(found[k], dtype=torch.long) for k in INPUTS} for found in (one, pairs)]
    if choices:  # (1, 1, S) and (1, 4, S): one question, its choices the rows
        batches = [{k: v[None] for k, v in b.items()} for b in batches]
    return batches


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
    *,
    opset: int = 18,
    int8: bool = False,
    tolerance: float = 1e-4,
    overwrite: bool = False,
    head: str = "auto",
    exits: bool = True,
) -> ExportResult:
    """Export, check in ONNX Runtime, then write the folder (see the module docstring). `head`: "auto"
    (the fine-tuned head, else the encoder), "encoder" or "masked_lm" (albert_lm.deploy.web_heads);
    `exits`: the early-exit graphs too, for a classifier fine-tuned with exit heads."""
    _check_numbers(opset, tolerance)
    ort = _needs("onnxruntime")
    _needs("onnxscript")
    if not (isinstance(model_dir, Path) and model_dir.is_dir()):  # resolved already (the web export's)
        model_dir = resolve_model(model_dir)  # a hub id: its cached snapshot
    out = Path(output)
    with exclusive_output(model_dir, out, overwrite), quiet(*NOISY, root=False):
        return _export_locked(ort, model_dir, out, opset, int8, tolerance, head, exits)


@contextlib.contextmanager
def exclusive_output(model_dir: Path, out: Path, overwrite: bool) -> Iterator[None]:
    """The export's output folder, checked, then locked (a second export to it is refused, not mixed
    with this one) and checked again now that no other export can change it; a failure leaves no folder
    that was made only to hold the lock."""
    _check_folders(model_dir, out, overwrite)
    with folder_lock(out):
        _check_folders(model_dir, out, overwrite)
        yield


def _export_locked(
    ort: Any, model_dir: Path, out: Path, opset: int, int8: bool, tolerance: float, head: str, exits: bool
) -> ExportResult:
    config = AlbertConfig.from_pretrained(model_dir)
    # The tokenizer is part of the export: it must load and be the model's (as predict and embed check)
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    saved = read_saved_settings(model_dir)
    check_tokenizer_fits(tokenizer, model_dir, config, saved.get("tokenizer_fingerprint"))
    model, names, choices = _model(model_dir, head)
    graph = _Graph(model, names)
    samples = _text_samples(tokenizer, config, choices)
    # A captured graph runs padded (it cannot unpad), pad tokens' states included: so does its reference
    with torch.no_grad(), use_unpadding(False):
        references = [[t.numpy() for t in graph(*(x[k] for k in INPUTS))] for x in samples]
    need = sum(p.numel() * p.element_size() for p in model.parameters())  # bytes of the graph's weights
    logger.info("capturing the graph and checking it in ONNX Runtime (%.0f MB of weights)", need / 1e6)
    with atomic_folder(out) as tmp, _write_errors_named(out, tmp, need):
        _capture(graph, config, choices, tmp / "model.onnx", opset)
        written = _written_opset(tmp / "model.onnx")
        if written != opset:  # the exporter falls back to its own opset when it cannot convert
            raise ExportCheckError(
                f"--opset {opset}: torch {torch.__version__}'s exporter cannot write this opset (it wrote opset "
                f"{written}): choose --opset {written} or another it can write; not exported"
            )
        diff, _ = _compare(ort, tmp / "model.onnx", samples, references)
        if not diff <= tolerance:  # NaN outputs fail too
            raise ExportCheckError(
                f"ONNX Runtime's outputs differ from PyTorch's by {diff:.2e} (> {tolerance:g}): not exported"
            )
        cosine = _int8(ort, tmp, config, samples, references) if int8 else None
        exit_entry = exit_graphs(ort, model, model_dir, tmp, samples, opset, int8, tolerance) if exits else {}
        sizes = {p.name: p.stat().st_size for p in sorted(tmp.glob("*.onnx*"))}  # what a device is sent
        _tokenizer_files(model_dir, tmp, tokenizer)
        record = {"format": "onnx", "opset": opset, "inputs": list(INPUTS), "outputs": names,
                  "max_abs_diff_fp32": diff, "int8_cosine": cosine, "torch": torch.__version__,
                  "onnxruntime": ort.__version__, "bytes": sizes, **exit_entry,
                  **_null_threshold(model_dir, saved)}  # fmt: skip
        (tmp / "export.json").write_text(json.dumps(record, indent=1) + "\n")
        write_export_card(tmp, model_dir, record, str(out), tokenizer)
    logger.debug("exported %s -> %s (max |ORT - PyTorch| %.2e)", model_dir, out, diff)
    return ExportResult(out, names, diff, cosine, bool(exit_entry), sizes)


def _tokenizer_files(model_dir: Path, tmp: Path, tokenizer: AlbertTokenizer) -> None:
    """The model's settings and tokenizer files beside the graphs, and for a SentencePiece model the
    tokenizers library's tokenizer.json (a deployment without albert-lm or torch reads it)."""
    wordpiece = () if (model_dir / "spiece.model").is_file() else WORDPIECE_COPIED
    if not wordpiece:
        (tmp / TOKENIZER_FILE).write_text(json.dumps(tokenizer_json(tokenizer), ensure_ascii=False) + "\n")
    for name in (*COPIED, *wordpiece):
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, tmp / name)


def _null_threshold(model_dir: Path, saved: dict[str, Any]) -> dict[str, float]:
    """A SQuAD 2.0 model's threshold for "no answer" (null score - best span score above it), which the
    graph's start and end logits need beside them; {} for the other models. `saved`: its
    finetune_config.json."""
    if saved.get("task") != "squad2" or (threshold := null_threshold(model_dir, saved)) is None:
        return {}
    return {"null_score_diff_threshold": threshold}


@contextlib.contextmanager
def _write_errors_named(out: Path, tmp: Path, need: int) -> Iterator[None]:
    """A write into the export's temporary folder `tmp` that fails is an OSError naming the file (under
    its final name in `out`) and the cause. ONNX's writer (numpy's `tofile`) says only "problem writing
    element N to file", with neither the errno nor the file, and removes what it wrote; the cause is then
    read from the machine: the graph's `need` bytes over this process's file-size limit (`ulimit -f`),
    or over the free space."""
    try:
        yield
    except OSError as e:
        if e.errno and e.filename:
            raise
        written = [p for p in tmp.rglob("*") if p.is_file()]
        last = max(written, key=lambda p: p.stat().st_mtime_ns, default=None)  # the file being written
        where = out / (last.relative_to(tmp) if last is not None else "model.onnx")
        code, reason = _write_failure(tmp, max(need, last.stat().st_size if last else 0), e)
        raise OSError(code, f"writing the export failed: {reason}", str(where)) from e


def _write_failure(folder: Path, size: int, e: OSError) -> tuple[int, str]:
    """(errno, reason) of a failed write of about `size` bytes into `folder`: the error's own errno where
    it has one, else the file-size limit or the free space that `size` does not fit in."""
    limit = _file_size_limit()
    if e.errno:
        code = e.errno
    elif limit is not None and size >= limit:
        code = errno.EFBIG
    elif shutil.disk_usage(folder).free < size:
        code = errno.ENOSPC
    else:
        return errno.EIO, str(e)
    if code == errno.EFBIG and limit is not None:
        return code, f"{os.strerror(code)} (ulimit -f lets this process write at most {limit} bytes a file)"
    return code, os.strerror(code)


def _file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (`ulimit -f`); None without a limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _check_numbers(opset: int, tolerance: float) -> None:
    """Refuse settings that would silently mean something else: a NaN tolerance passes every check."""
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"--tolerance {tolerance}: expected a finite number >= 0 (e.g. 1e-4)")
    try:
        import onnx.defs

        newest = int(onnx.defs.onnx_opset_version())
    except ImportError:
        newest = None
    if opset < 7 or (newest is not None and opset > newest):
        known = f"7 to {newest}" if newest is not None else "7 or later"
        raise ValueError(f"--opset {opset}: expected an ONNX opset from {known} (default 18)")


def _written_opset(path: Path) -> int | None:
    """The default-domain opset the ONNX file declares."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _check_folders(model_dir: Path, out: Path, overwrite: bool) -> None:
    if not (model_dir / "config.json").is_file():
        raise no_model(model_dir)
    if out.resolve() == model_dir.resolve():
        raise ValueError(f"--output {out} is the model folder: export into another folder")
    check_output_apart(out, {"--model": model_dir})
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(
            f"--output {out}: exists and is not a folder; give a folder for the exported files"
        )
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out} is not empty ({describe_folder(out)}); choose another folder or --overwrite"
        )


def _capture(graph: _Graph, config: AlbertConfig, choices: bool, path: Path, opset: int) -> None:
    """The graph as ONNX, batch and sequence (and choices) axes dynamic, captured with plain matmuls."""
    example = _sample((2, 3, 16) if choices else (2, 16), config.vocab_size, 0)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=config.max_position_embeddings)
    axes = {0: batch, 1: torch.export.Dim("choices"), 2: seq} if choices else {0: batch, 1: seq}
    with kernels.plain_matmuls(), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's notes on axis names and opset conversions
        torch.onnx.export(
            graph,
            tuple(example[k] for k in INPUTS),
            str(path),
            input_names=list(INPUTS),
            output_names=graph.outputs,
            dynamic_shapes={k: axes for k in INPUTS},
            dynamo=True,
            external_data=False,  # the weights inside: one file to copy (ALBERTs are far below 2 GB)
            opset_version=opset,
            verbose=False,
        )


def _int8(ort: Any, folder: Path, config: AlbertConfig, samples: list, references: list) -> float:
    """model.int8.onnx by ONNX Runtime's transformer optimizer and dynamic quantization, and its worst
    cosine to PyTorch fp32.

    Why the optimizer first: quantizing the exported graph as it is gave a 31.9 MiB file for albert-base
    (the shared layer's weights quantized once per use) that ran no faster than fp32 (691 against 704
    tokens/s at 8 x 128 on a Zen 3); after the optimizer (it fuses residual + LayerNorm and GELU and
    stores the shared weights once) the int8 file is 10.9 MiB and runs at 1151 tokens/s
    (benchmarks/timings/bench_int8.py, docs/deploy.md).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = folder / "model.optimized.onnx"
    # The optimizer prints (print(), past its logger and with no option to stop it) "failed in shape
    # inference <class 'TypeError'>" where its symbolic shape inference cannot follow the graph (a
    # bi-encoder's); it then fuses what needs no shapes, and the check below measures the result. Its
    # stdout is kept for -v, not sent to the user's terminal or to a pipe that reads the command's output.
    printed = io.StringIO()
    with quiet("onnxruntime", "onnxruntime.transformers"), contextlib.redirect_stdout(printed):
        graph = optimize_model(
            str(folder / "model.onnx"),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
        graph.save_model_to_file(str(optimized))
        quantize_dynamic(optimized, folder / "model.int8.onnx", weight_type=QuantType.QInt8, per_channel=True)
    optimized.unlink()
    if printed.getvalue().strip():
        logger.debug("ONNX Runtime's optimizer printed: %s", printed.getvalue().strip())
    _, cosine = _compare(ort, folder / "model.int8.onnx", samples, references)
    if not cosine >= INT8_FAIL:  # NaN outputs fail too
        raise ExportCheckError(
            f"the int8 graph's outputs are at cosine {cosine:.4f} to fp32 (< {INT8_FAIL}): not exported"
        )
    if cosine < INT8_WARN:
        logger.warning(
            "the int8 graph's outputs are at cosine %.4f to fp32: check its accuracy on your "
            "dev set before you ship it",
            cosine,
        )
    return cosine


def _compare(
    ort: Any, path: Path, samples: list[dict[str, torch.Tensor]], references: list[list[np.ndarray]]
) -> tuple[float, float]:
    """(largest absolute difference, smallest cosine) of the graph's outputs to PyTorch's, one session."""
    options = ort.SessionOptions()
    # ONNX Runtime's own (C++) log: errors only, unless -v (then its default: warnings)
    options.log_severity_level = 2 if verbose() else 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    worst_diff, worst_cosine = 0.0, 1.0
    for inputs, wanted in zip(samples, references, strict=True):
        got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
        for a, b in zip(got, wanted, strict=True):
            worst_diff = float(
                np.maximum(worst_diff, np.abs(a - b).max())
            )  # a NaN stays NaN (max() drops it)
            a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
            worst_cosine = float(
                np.minimum(worst_cosine, a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
            )
    return worst_diff, worst_cosine


__all__ = ["ExportCheckError", "ExportResult", "export_onnx"]
