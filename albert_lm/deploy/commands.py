"""`albert predict` and `albert export`: the deploy stage's commands (registered by `albert_lm.cli`).

Like every command, each imports its module only when it runs: building the parser stays free of torch.
"""

from __future__ import annotations

import argparse
import sys

from albert_lm.deploy.predict_config import PredictConfig
from albert_lm.settings import add_options, option_values


def predict_options(p: argparse.ArgumentParser) -> None:
    add_options(p, PredictConfig, required=("model", "input"), metavars={"model": "DIR", "input": "FILE"})


def run_predict(args: argparse.Namespace) -> int:
    """run a fine-tuned model on new text: one JSON line per input row, in input order

    Classification: label and probabilities (regression: score); token classification: tags per word;
    question answering: the answer and its character offsets in the context; multiple choice: the
    answer letter and probabilities. Input: plain lines, CSV/TSV with a header, or JSON Lines; - is
    stdin / stdout. A bad row stops the run naming its line and column, or with --skip-bad is reported
    and left out."""
    from albert_lm.deploy.predict import predict

    summary = predict(PredictConfig(**option_values(args, PredictConfig)))
    skipped = f", {len(summary.skipped)} bad rows left out" if summary.skipped else ""
    where = "" if args.output == "-" else f" -> {args.output}"
    print(
        f"{summary.task}: {summary.predicted} of {summary.rows} rows predicted{skipped}{where}",
        file=sys.stderr,
    )
    return 0


def export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="model folder (fine-tuned, or pretrained), or hub id org/name[@rev]",
    )
    p.add_argument(
        "--output", required=True, metavar="DIR", help="new or empty folder for the exported model"
    )
    p.add_argument("--format", choices=("onnx",), default="onnx", help="export format (default onnx)")
    p.add_argument("--int8", action="store_true", help="also model.int8.onnx (ONNX Runtime dynamic int8)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="largest |ONNX Runtime - PyTorch| accepted (default 1e-4)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace what the output folder holds")


def run_export(args: argparse.Namespace) -> int:
    """export a model to ONNX (dynamic batch and sequence axes), checked in ONNX Runtime

    Writes model.onnx (and model.int8.onnx with --int8), the tokenizer and the config beside it, and
    export.json with the check's figures. ONNX Runtime runs the graph on two input shapes before
    anything is kept: fp32 outputs must be within --tolerance of PyTorch's, int8 at cosine >= 0.9.
    Needs the optional extra: pip install 'albert-lm[export]'."""
    from albert_lm.deploy.export import export_onnx

    r = export_onnx(args.model, args.output, args.opset, args.int8, args.tolerance, args.overwrite)
    int8 = f"; int8 cosine {r.int8_cosine:.5f}" if r.int8_cosine is not None else ""
    print(f"{r.folder}: outputs {', '.join(r.outputs)}; max |ORT - PyTorch| {r.max_abs_diff:.2e}{int8}")
    return 0
