"""Other libraries' log lines, kept to errors unless the user asked for every library's log (`albert -v`):
those an export runs (torch.onnx, onnxscript, ONNX Runtime's optimizer and quantizer: the ONNX export and
its early-exit graphs) and those a teacher's load prints on a healthy install (torchao's optional kernels,
torch's deprecation notes, transformers' progress bar)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


def verbose() -> bool:
    """Whether the user asked for every library's log (`albert -v`: the root logger at DEBUG)."""
    return logging.getLogger().getEffectiveLevel() <= logging.DEBUG


@contextlib.contextmanager
def quiet(*loggers: str, root: bool = True) -> Iterator[None]:
    """These loggers (and the root logger, where ONNX Runtime's optimizer and quantizer log their advice
    at WARNING) at ERROR for the block, unless `verbose()`: errors still show, and exceptions reach the
    caller as they are; albert-lm's own loggers keep their level unless `root`."""
    if verbose():
        yield
        return
    names = ("", *loggers) if root else loggers
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    for log, _ in saved:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in saved:
            log.setLevel(level)
