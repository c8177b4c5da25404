"""The ablations of `albert bench`: each of our speed choices switched off in turn, against it on.

Each choice is switched off through its module's public switch (`_SWITCHES`: `kernels.linear.use`,
`kernels.attention.use`, `kernels.autotune.use`, the evaluation's batch order); `ablation_row` times
the workload with the choice on and off in the same process, interleaved, and reports the gain.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from albert_lm.bench.workloads import (
    Row,
    Workload,
    _autocast,
    _random_ids,
    interleaved,
    pretraining_batch,
    runner,
    train_step,
    workload_size,
    write_weights,
)
from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.kernels import attention, autotune, linear
from albert_lm.model.config import AlbertConfig

if TYPE_CHECKING:
    from albert_lm.model.heads import AlbertForPreTraining


def _file_order_batches(lengths, batch_size: int, rng=None, window: int = 50) -> list[list[int]]:
    """The ablation of length-sorted batches: consecutive examples, padded to each batch's longest."""
    return [list(range(i, min(i + batch_size, len(lengths)))) for i in range(0, len(lengths), batch_size)]


@contextlib.contextmanager
def _file_order_evaluation() -> Iterator[None]:
    """Evaluation batches in file order within this block: `length_bucketed_batches` replaced."""
    from albert_lm.runtime import run

    was = run.length_bucketed_batches
    run.length_bucketed_batches = _file_order_batches
    try:
        yield
    finally:
        run.length_bucketed_batches = was


# Each ablated choice: a block within which it is off.
_SWITCHES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "oneDNN linear": lambda: linear.use(onednn=False),
    "kernels chosen by timing": lambda: autotune.use(timing=False),
    "weights prepared once per forward": lambda: linear.use(reuse_casts=False),
    "bf16 eager attention": lambda: attention.use(eager_bf16=False),
    "packed weights": lambda: linear.use(packing=False),
    "length-sorted evaluation batches": _file_order_evaluation,
}
# Not a switch: the ablation computes the loss as transformers does instead.
MLM_MASKED_ONLY = "MLM logits at masked positions only"


def _switched_off(choice: str) -> contextlib.AbstractContextManager[None]:
    """A block within which `choice` is off; restored after."""
    return _SWITCHES[choice]()


def _rows(spec: str) -> tuple[tuple[str, str, int, int], ...]:
    """ "inference fp32, inference bf16 4x512" -> ((workload, precision, batch, seq), ...); 8x128 unless
    given, and no shape for SST-2 (its dev set decides)."""
    rows = []
    for item in spec.split(","):
        workload, precision, *shape = item.split()
        b, s = map(int, shape[0].split("x")) if shape else ((0, 0) if workload == "sst2" else (8, 128))
        rows.append((workload, precision, b, s))
    return tuple(rows)


# (choice, workload, precision, batch, seq): each choice on the workloads it is meant to speed up.
ABLATIONS = tuple(
    (choice, *row)
    for choice, spec in {
        "kernels chosen by timing": "inference fp32, pretraining fp32, inference bf16",
        "oneDNN linear": "inference fp32, pretraining fp32, inference bf16",
        "packed weights": "inference fp32, pretraining fp32, pretraining bf16",
        "weights prepared once per forward": "inference bf16",
        "bf16 eager attention": "inference bf16, inference bf16 4x512, pretraining bf16",
        MLM_MASKED_ONLY: "pretraining fp32, pretraining bf16",
        "length-sorted evaluation batches": "sst2 fp32",
    }.items()
    for row in _rows(spec)
)


def _all_positions_loss(model: AlbertForPreTraining, data: dict[str, torch.Tensor]) -> torch.Tensor:
    """MLM logits and their softmax at every position, as transformers' AlbertForPreTraining, + SOP."""
    out = model.albert(
        input_ids=data["input_ids"],
        attention_mask=data["attention_mask"],
        token_type_ids=data["token_type_ids"],
    )
    logits = model.predictions(out.last_hidden_state).float()
    mlm = F.cross_entropy(
        logits.view(-1, logits.shape[-1]), data["labels"].view(-1), ignore_index=IGNORE_INDEX
    )
    sop = F.cross_entropy(model.sop_classifier(out.pooler_output).float(), data["sentence_order_label"])
    return mlm + sop


def ablation_row(
    config: AlbertConfig,
    choice: str,
    workload: str,
    precision: str,
    repeats: int,
    data: Path | None = None,
    b: int = 8,
    s: int = 128,
) -> Row:
    """Ours with the choice on against ours with it off (in the `theirs` slot), interleaved."""
    from albert_lm.model.encoder import AlbertModel
    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.training.objective import PretrainingObjective

    torch.manual_seed(0)
    name, unit, work = f"{choice}: {workload} {b} x {s}", "tokens/s", float(b * s)
    if workload == "inference":
        model = AlbertModel(config).eval()
        ids = _random_ids(config.vocab_size, b, s)

        def fn():
            with torch.inference_mode(), _autocast(precision):
                model(input_ids=ids)
    elif workload == "pretraining":
        pretrainer = AlbertForPreTraining(config).train()
        pretrainer.sop_classifier.dropout.p = 0.0
        objective = PretrainingObjective(pretrainer, "sop")
        batch = pretraining_batch(config.vocab_size, b, s)
        fn = train_step(pretrainer, lambda: objective(batch)[0], precision)
        if choice == MLM_MASKED_ONLY:
            off = train_step(pretrainer, lambda: _all_positions_loss(pretrainer, batch), precision)
    else:
        assert data is not None
        with tempfile.TemporaryDirectory() as d:
            sst2 = Workload("sst2")
            write_weights(sst2, config, Path(d), data)
            fn, _ = runner(sst2, "ours", precision, Path(d), data)
        name, unit = f"{choice}: SST-2 dev end to end", "sentences/s"
        work = float(workload_size(sst2, config, data)[1])
    if choice != MLM_MASKED_ONLY:

        def off():
            with _switched_off(choice):
                fn()

    times = interleaved({"on": fn, "off": off}, repeats, 1)
    return Row(name, precision, unit, times["on"], times["off"], work)
