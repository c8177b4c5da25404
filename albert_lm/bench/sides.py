"""One side of a comparison (ours or transformers) per process, and `compare`, which times the two
sides alternately on the same weights: a user runs one library per process, and in one process each
would run on the heap the other grew.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from albert_lm.bench.workloads import (
    SIDES,
    Row,
    Workload,
    check_line,
    runner,
    workload_size,
    write_weights,
)
from albert_lm.kernels.hardware import tune_cpu_allocator
from albert_lm.model.config import AlbertConfig

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- one side per process
class BenchWorkerError(RuntimeError):
    """A worker process failed: the message names the worker and ends with its last error line."""


class _Worker:
    """One side of a comparison in its own process (`python -m albert_lm.bench.sides worker ...`).

    Why a process per side: in one process each model runs on the heap the other one grew. Measured
    here: transformers' bf16 pretraining step ran at 731 tokens/s in a fresh process and 797 after our
    step had run in it (its 123 MB logits no longer needed fresh pages), and our bf16 inference dropped
    from 4076 to 3590 tokens/s once transformers had run beside it. A user runs one of them, so each
    side gets a process; the parent still alternates them repeat by repeat, so machine noise hits both.
    """

    def __init__(self, args: list[str]):
        self._args = list(args)  # for error messages
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the worker)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "albert_lm.bench.sides", "worker", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        try:
            self._call("ready")
        except BaseException:
            self.kill()
            raise

    def _call(self, *command: str) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(" ".join(command) + "\n")
            self._proc.stdin.flush()
            for line in self._proc.stdout:
                if line.startswith(_REPLY):
                    return line[len(_REPLY) :].strip()
        except BrokenPipeError:
            pass
        self._proc.wait()
        self._log.seek(0)
        tail = self._log.read()[-4000:]
        if tail.strip():  # the worker's own output, traceback included: with `albert -v bench`
            logger.debug("bench worker %s output:\n%s", self._args[:5], tail.rstrip())
        last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "no output")
        kind, batch, seq, side, precision_ = self._args[:5]
        raise BenchWorkerError(
            f"bench worker ({side}, {kind} {batch} x {seq}, {precision_}) failed on {command[0]!r} "
            f"(exit {self._proc.returncode}): {last}"
        )

    def run(self) -> float:
        return float(self._call("run"))

    def check(self, path: Path) -> torch.Tensor:
        self._call("check", str(path))
        return torch.load(path, weights_only=True)

    def close(self) -> float:
        peak = float(self._call("quit"))
        self._proc.wait()
        return peak

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if not self._log.closed:
            self._log.close()


class _InProcess:
    """The same interface in this process (`--same-process`), for comparison with the workers."""

    def __init__(self, args: list[str]):
        self._run, self._check = _runner_from_args(args)

    def run(self) -> float:
        start = time.perf_counter()
        self._run()
        return time.perf_counter() - start

    def check(self, path: Path) -> torch.Tensor:
        return self._check()

    def close(self) -> float | None:
        return None

    def kill(self) -> None:
        pass


_REPLY = "@@bench "


def _runner_from_args(args: list[str]):
    kind, batch, seq, side, precision, folder, data = args
    workload = Workload(kind, int(batch), int(seq))
    return runner(workload, side, precision, Path(folder), Path(data) if data != "-" else None)


def _worker_main(args: list[str]) -> None:
    """Serve one side: `ready`, `check PATH` (save the output to check), `run` (seconds), `quit` (peak RSS)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tune_cpu_allocator()  # both sides alike: the table does not credit the setting to us
    run, check = _runner_from_args(args)
    for line in sys.stdin:
        command, *rest = line.split()
        if command == "ready":
            reply = "ok"
        elif command == "check":
            torch.save(check(), rest[0])
            reply = "ok"
        elif command == "run":
            start = time.perf_counter()
            run()
            reply = f"{time.perf_counter() - start:.6f}"
        else:
            print(f"{_REPLY}{_peak_rss_mib():.1f}", flush=True)
            return
        print(f"{_REPLY}{reply}", flush=True)


def _peak_rss_mib() -> float:
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork + exec, so a child started
    # by a big parent would report the parent's peak.
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compare(
    config: AlbertConfig,
    workload: Workload,
    precision: str,
    repeats: int,
    data: Path | None = None,
    warmup: int = 2,
    isolate: bool = True,
) -> Row:
    """Ours against transformers on one workload: same weights, outputs checked, repeats alternated."""
    unit, work, flops = workload_size(workload, config, data)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "model"
        write_weights(workload, config, folder, data)
        side_cls = _Worker if isolate else _InProcess
        sides = {}
        try:
            for side in SIDES:
                args = [*workload.as_args(), side, precision, str(folder), str(data) if data else "-"]
                sides[side] = side_cls(args)
            outputs = {side: s.check(Path(d) / f"{side}.pt") for side, s in sides.items()}
            for _ in range(warmup):
                for s in sides.values():
                    s.run()
            times: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(repeats):
                for side, s in sides.items():
                    times[side].append(s.run())
            peaks = {side: s.close() for side, s in sides.items()}
        finally:
            for s in sides.values():
                s.kill()  # no-op for a worker that quit
    rss = {k: v for k, v in peaks.items() if v is not None}
    check = check_line(workload, outputs["ours"], outputs["theirs"])
    return Row(workload.name, precision, unit, times["ours"], times["theirs"], work, flops, check, rss)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker_main(sys.argv[2:])
