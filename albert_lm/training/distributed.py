"""Process-group plumbing for the training loops: torchrun's environment, gloo or nccl, collectives that
are no-ops in a single process, and a SIGTERM / SIGINT flag that lets a run save before it exits.

Kept apart from the loop so the loop reads as training; the model never imports torch.distributed.
A collective that waits longer than the timeout fails instead of hanging, so a dead rank ends the job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from albert_lm.progress import say_kept
from albert_lm.workers import in_worker


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # this run created the process group, so it destroys it at the end

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device, timeout_s: float) -> DistInfo:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    owned = not dist.is_initialized()
    if owned:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")), owned)


def all_reduce(t: torch.Tensor, d: DistInfo, op: Any = None) -> torch.Tensor:
    if d.world > 1:
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t


def slowest(d: DistInfo, device: torch.device) -> Callable[[float], float] | None:
    """The time spent as all ranks agree on it, the slowest rank's (None in a single process)."""
    if d.world == 1:
        return None

    def agree(elapsed_s: float) -> float:
        spent = torch.tensor([elapsed_s], dtype=torch.float64, device=device)
        return float(all_reduce(spent, d, dist.ReduceOp.MAX).item())

    return agree


def gather(obj: Any, d: DistInfo) -> list[Any]:
    if d.world == 1:
        return [obj]
    out: list[Any] = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


class StopFlag:
    """SIGTERM / SIGINT set a flag; the loop finishes its step, saves, and returns.

    The first signal is answered at once, from the handler, in one line (on the main rank: a step of a
    large model on a CPU takes long enough to press Ctrl-C again, or to reach for kill -9, thinking it
    went unheard); a second Ctrl-C quits at once, unsaved (KeyboardInterrupt, exit 130). A checkpoint
    it lands in the middle of is never half there: it is written in a temporary folder and renamed
    (`albert_lm.files.atomic_folder`); the KeyboardInterrupt removes that folder (and puts back the
    folder of the same step it was replacing), and one a kill leaves is removed when the run resumes."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        # under torchrun rank 0 speaks for the job; in a worker of a pool (albert glue), the command does
        self._says = os.environ.get("RANK", "0") == "0" and not in_worker()
        self._pid = os.getpid()  # a DataLoader worker forked from the run inherits this handler: it is silent

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            stop = KeyboardInterrupt("Ctrl-C again")
            say_kept(stop, "not saved: --resume goes on from the last checkpoint saved before, if any")
            raise stop
        if self.signum is None and self._says and os.getpid() == self._pid:
            with contextlib.suppress(OSError):  # a closed stderr must not stop the run
                os.write(2, _stopping_line(signum).encode())
        self.signum = self.signum or signum

    def install(self) -> None:
        if hasattr(signal, "SIGTERM"):
            for s in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                    self._previous[s] = signal.signal(s, self)

    def restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    def any_rank(self, d: DistInfo, device: torch.device) -> bool:
        """Whether any rank got SIGTERM / SIGINT: all ranks agree, so they stop after the same step."""
        flag = torch.tensor([float(self.signum is not None)], device=device)
        return bool(all_reduce(flag, d, dist.ReduceOp.MAX).item())


def _stopping_line(signum: int) -> str:
    """What the first signal is answered with (a terminal's line starts after the ^C it echoed)."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    start = "\n" if sys.stderr is not None and sys.stderr.isatty() else ""
    return (
        f"{start}{name}: stopping after this step and saving a checkpoint (Ctrl-C again to quit at once, "
        "unsaved)\n"
    )
