"""Where and in what precision the model computes, one way for every loop and every command: the device
a `--device` value names (auto, cpu, cuda, cuda:N; under torchrun, a process's own GPU), the precision
`--precision auto` resolves to there, and the autocast context of that precision.
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch

from albert_lm.kernels.precision import Precision, resolve_precision

logger = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    """`auto` -> cuda when torch sees a GPU, else cpu; `cuda` (or auto with a GPU) under torchrun is the
    process's own GPU (cuda:LOCAL_RANK). A named device is checked to exist here, so a machine without it
    is one clear error instead of a traceback at the first tensor moved."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"--device {name!r}: not a device name (auto, cpu, cuda, cuda:1, ...)") from e
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {name}: torch sees no CUDA GPU on this machine; use --device cpu (or auto)"
            )
        if device.index is None and "LOCAL_RANK" in os.environ:  # one GPU per process under torchrun
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s) (cuda:0 to "
                f"cuda:{torch.cuda.device_count() - 1})"
            )
    elif device.type != "cpu":
        raise ValueError(f"--device {name}: expected auto, cpu or cuda[:N]")
    return device


def resolved_precision(precision: str, device: torch.device) -> Precision:
    """`auto` -> bf16 where this device computes it fast, else fp32 (logged); others unchanged."""
    resolved, why = resolve_precision(precision, device)
    if precision == "auto":
        logger.info("precision auto -> %s: %s", resolved, why)
    return resolved


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast of a resolved precision: fp32 computes as it is (an outer autocast switched off too),
    bf16 and fp16 under torch.autocast (fp16 training also needs loss scaling: its loop's GradScaler)."""
    if precision == "fp32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
