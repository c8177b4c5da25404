"""One row of `albert reproduce speed`, measured in the processes that run it (this module is what
`python -m albert_lm.paper.speed ROW OUT` and `torchrun ... -m albert_lm.paper.speed ROW OUT` start).

A row is one of Table 2's models (the presets bert-base, bert-large, albert-base ... albert-xxlarge with
the paper's 30,000-piece vocabulary) trained on random pretraining batches for a few steps, each step the
one `albert pretrain` takes (`albert_lm.training.loop.train_step`: forward, backward, clipping, LAMB),
with DDP over the processes when there are several. Hooks split every step into its phases:

- forward: until the loss is returned;
- backward: until the last parameter's gradient is accumulated (with DDP the all-reduce of the gradient
  buckets runs beside it, on the same cores here);
- wait + clip: from there to the optimizer's start: DDP's wait for the last all-reduce, then clipping;
- update: LAMB's step and clearing the gradients.

With several processes each timed step with gradient synchronisation is followed by one without
(`no_sync`): the difference is what the all-reduce adds to a step. The all-reduce alone is timed too, on
the gradients' bytes in DDP's 25 MB buckets. On a GPU the marks synchronise the device, except the
gradient hooks (one per parameter): there "backward" ends at the wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

VOCAB = 30000  # the paper's SentencePiece vocabulary
BUCKET_BYTES = 25 * 2**20  # DDP's default bucket size (bucket_cap_mb=25)


@dataclass(frozen=True)
class Row:
    """What one measurement runs: a model, on how many processes, on how much input."""

    config: str  # a preset of albert_lm.model.config.PRESETS
    processes: int
    threads: int  # torch threads per process (CPU)
    batch: int  # sequences per process and step
    seq: int
    steps: int  # timed steps, after one warm-up step
    precision: str  # fp32, bf16 or fp16 (resolved)
    device: str  # cpu or cuda
    overrides: dict[str, Any] = field(default_factory=dict)  # model config changes (e.g. a tiny test model)

    @property
    def name(self) -> str:
        return f"{self.config}-p{self.processes}"


class StepClock:
    """Timestamps inside a training step: the loss returned, the last gradient accumulated, the
    optimizer's step started and ended."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device):
        self.device, self.marks = device, dict[str, float]()
        if device.type == "cpu":  # one hook per parameter: a device sync in each would distort a GPU step
            for p in model.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(lambda _: self.mark("backward", sync=False))
        optimizer.register_step_pre_hook(lambda *_: self.mark("clipped"))

    def mark(self, name: str, sync: bool = True) -> None:
        if sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.marks[name] = time.perf_counter()

    def forward(self, module: torch.nn.Module) -> Callable[[Any], tuple[torch.Tensor, torch.Tensor]]:
        def loss(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
            out = module(batch)
            self.mark("forward")
            return out

        return loss

    def timed(self, step: Callable[[], Any]) -> dict[str, float]:
        """Seconds of each phase of one call of `step` (and `total`)."""
        self.marks = {}
        self.mark("start")
        step()
        self.mark("end")
        m = self.marks
        backward = m.get("backward", m["clipped"])  # no gradient hooks on a GPU: backward ends at the wait
        return {
            "forward": m["forward"] - m["start"],
            "backward": backward - m["forward"],
            "wait_clip": m["clipped"] - backward,
            "update": m["end"] - m["clipped"],
            "total": m["end"] - m["start"],
        }


def median_phases(steps: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in steps) for k in steps[0]} if steps else {}


def _allreduce_seconds(gradient_bytes: int, device: torch.device, repeats: int = 3) -> float:
    """Seconds to all-reduce `gradient_bytes` of fp32 in DDP-sized buckets, one bucket after another."""
    import torch.distributed as dist

    bucket = torch.zeros(BUCKET_BYTES // 4, device=device)
    whole, rest = divmod(gradient_bytes // 4, bucket.numel())
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(whole):
            dist.all_reduce(bucket)
        if rest:
            dist.all_reduce(bucket[:rest])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _pretraining(row: Row, device: torch.device, rank: int, world: int):
    """The row's model (seeded), and one timed `albert pretrain` step of it, with DDP over `world` ranks:
    `step(sync)` gives the step's phases; `sync=False` skips the gradients' all-reduce (`no_sync`)."""
    from albert_lm.bench.workloads import pretraining_batch
    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.training.loop import train_step
    from albert_lm.training.loop_settings import LoopSettings
    from albert_lm.training.objective import PretrainingObjective
    from albert_lm.training.optim import build_optimizer

    torch.manual_seed(0)
    shape = {"vocab_size": VOCAB, "max_position_embeddings": max(512, row.seq), **row.overrides}
    config = AlbertConfig.from_preset(row.config, **shape)
    model = AlbertForPreTraining(config).to(device).train()
    objective = PretrainingObjective(model, "sop")
    module: torch.nn.Module = objective
    if world > 1:
        module = torch.nn.parallel.DistributedDataParallel(
            objective, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = build_optimizer(model, "lamb", lr=1e-5)  # a small rate: random batches, finite losses
    settings = LoopSettings(precision=row.precision)  # type: ignore[arg-type]
    batch = pretraining_batch(config.vocab_size, row.batch, row.seq, seed=rank)
    data = {k: v.to(device) for k, v in batch.items()}
    clock = StepClock(model, optimizer, device)

    def step(sync: bool) -> dict[str, float]:
        with contextlib.nullcontext() if sync or world == 1 else module.no_sync():  # type: ignore[operator]
            return clock.timed(
                lambda: train_step(
                    module, optimizer, None, [data], settings, device, loss=clock.forward(module)
                )
            )

    return config, model, step


def measure(row: Row) -> dict[str, Any]:
    """Time `row` in this process (one rank of it under torchrun); every rank returns its figures."""
    from albert_lm.kernels.device import pick_device
    from albert_lm.training.distributed import gather, init_distributed

    if row.device == "cpu":
        torch.set_num_threads(row.threads)
    device = pick_device(row.device)
    d = init_distributed(device, timeout_s=3600.0)
    config, model, step = _pretraining(row, device, d.rank, d.world)
    warmup = step(True)
    synced, local = [], []
    for _ in range(row.steps):
        synced.append(step(True))
        if d.world > 1:
            local.append(step(False))
    trained = [p for p in model.parameters() if p.requires_grad]
    gradient_bytes = sum(p.numel() * p.element_size() for p in trained)
    peak = _peak_memory_mib(device)
    return {
        "row": asdict(row),
        "rank": d.rank,
        "world": d.world,
        "parameters": sum(p.numel() for p in model.albert.parameters()),
        "trained_parameters": sum(p.numel() for p in trained),
        "gradient_bytes": gradient_bytes,
        "warmup_s": warmup["total"],
        "steps": synced,
        "local_steps": local,
        "allreduce_s": _allreduce_seconds(gradient_bytes, device) if d.world > 1 else None,
        "peak_memory_mib": max(gather(peak, d)),  # the largest process's
        "dropout": config.hidden_dropout_prob,
        "embedding_size": config.embedding_size,
    }


def main(argv: list[str]) -> int:
    """`python -m albert_lm.paper.speed ROW_JSON OUT`: measure the row; rank 0 writes OUT (JSON)."""
    from albert_lm.files import write_json

    row_json, out = argv
    result = measure(Row(**json.loads(row_json)))
    if result["rank"] == 0:
        write_json(out, result)
    if result["world"] > 1:
        # Every rank has its figures and rank 0's file is written: leave without tearing the process group
        # down. Its teardown aborted one rank in four on a loaded 2-core CPU (gloo: "terminate called
        # without an active exception", after a barrier too), which torchrun reports as a failed run.
        import torch.distributed as dist

        dist.barrier()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
