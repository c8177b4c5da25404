"""Settings of `albert export`, apart from the code that runs it: the command line builds its options
from this dataclass without importing torch or ONNX, and `--config FILE` reads the same fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from albert_lm.settings import check_fields


@dataclass
class ExportConfig:
    """What `albert export` writes, from which model, checked how closely."""

    model: str
    """model folder (fine-tuned, or pretrained), or hub id org/name[@rev]"""
    output: str
    """new or empty folder for the exported model"""
    format: Literal["onnx", "web"] = "onnx"
    """onnx: model.onnx for ONNX Runtime; web: a page that runs the model in the browser, with
    transformers.js"""
    int8: bool = False
    """also model.int8.onnx (ONNX Runtime dynamic int8; --format web always writes both)"""
    task: Literal["text-classification", "fill-mask", "feature-extraction"] | None = None
    """--format web: what the page does (default: a fine-tuned classifier classifies, a distilled student
    embeds, a pretraining checkpoint fills masks)"""
    npm_modules: str | None = None
    """--format web: the node_modules to copy transformers.js and ONNX Runtime Web from (default
    $ALBERT_WEB_MODULES, else .web/node_modules, which `make web` installs)"""
    opset: int = 18
    """ONNX opset"""
    tolerance: float = 1e-4
    """largest |ONNX Runtime - PyTorch| accepted"""
    overwrite: bool = False
    """replace what the output folder holds"""

    def __post_init__(self) -> None:
        check_fields(self)  # the opset's range and a finite tolerance: export_onnx's own checks
        if self.format != "web":
            for name, value in (("--task", self.task), ("--npm-modules", self.npm_modules)):
                if value is not None:
                    raise ValueError(f"{name}: only for --format web")
