"""A model run on a task's features: length-sorted batches, outputs back in feature order, each trimmed
to its feature's length; what evaluation, prediction and distillation's teacher runs all do."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from albert_lm.kernels.device import autocast
from albert_lm.progress import progress_bar
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.task import Feature


class EvaluationStopped(Exception):
    """A stop asked for (`stoppable`) while the model ran: its outputs were dropped."""


# Checked before each batch (`stoppable`); a context variable, so a Predictor in another thread is never
# stopped by a training run's signal.
_stop_asked: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "stop_asked", default=None
)


@contextlib.contextmanager
def stoppable(asked: Callable[[], bool]) -> Iterator[None]:
    """Within: `run_model` raises EvaluationStopped before its next batch once `asked()` is true. A training
    loop's evaluation of a large dev set (fine-tuning's, task distillation's) runs for minutes; a signal
    then stops it at once, not after it. Pretraining's evaluation is bounded by --eval-batches instead."""
    token = _stop_asked.set(asked)
    try:
        yield
    finally:
        _stop_asked.reset(token)


@torch.no_grad()
def run_model(
    model: torch.nn.Module,
    features: Sequence[Feature],
    batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str = "fp32",
    desc: str = "eval",
    *,
    finite: bool = False,
) -> list[dict[str, np.ndarray]]:
    """Per-feature outputs in feature order, trimmed to each feature's length (logits as float32).
    `finite`: refuse non-finite scores (the commands that print them; a training loop's evaluation
    records what a diverging run scores instead)."""
    model.eval()
    outputs: dict[int, dict[str, np.ndarray]] = {}
    batches = length_bucketed_batches([feature_length(f) for f in features], batch_size, None)
    for idx in progress_bar(batches, desc=desc, unit="batch", leave=False):
        if (asked := _stop_asked.get()) is not None and asked():
            raise EvaluationStopped
        chunk = [features[i] for i in idx]
        batch = collate(chunk, pad_id)
        inputs = {k: batch[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")}
        with autocast(device, precision):
            out = model(**inputs)
        if getattr(out, "start_logits", None) is not None:
            starts, ends = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                outputs[i] = {"start_logits": starts[row, :n], "end_logits": ends[row, :n]}
        else:
            logits = out.logits.float().cpu().numpy()
            depth = getattr(out, "depth", None)  # early exit: the layer each row stopped after
            for row, i in enumerate(idx):
                value = logits[row]
                if value.ndim == 2:  # token classification: (L, num_labels)
                    value = value[: len(features[i]["input_ids"])]
                outputs[i] = {"logits": value}
                if depth is not None:
                    outputs[i]["depth"] = np.asarray(int(depth[row]))
    ordered = [outputs[i] for i in range(len(features))]
    if finite:
        check_finite_outputs(ordered, precision)
    return ordered


def check_finite_outputs(outputs: Sequence[dict[str, np.ndarray]], precision: str) -> None:
    """Refuse NaN or infinite scores: argmax reads a NaN row as class 0 and a metric as a wrong figure, so
    a broken model would otherwise answer with exit 0."""
    bad = [i for i, o in enumerate(outputs) if any(not np.isfinite(v).all() for v in o.values())]
    if bad:
        hint = (
            "; or try --precision fp32 (scores may overflow in reduced precision)"
            if precision != "fp32"
            else ""
        )
        raise ValueError(
            f"the model gave non-finite scores (NaN or infinity) for {len(bad)} of {len(outputs)} rows "
            f"(the first: row {bad[0] + 1}): its weights are damaged or a training run diverged{hint}"
        )
