"""Work on several processes where the first failure ends the run at once, whatever it is: a worker's
error (bad input: its own message), an error that could not travel back (it fails to pickle or to
unpickle), or a worker killed by a signal or for memory. The other workers are stopped then, and what
was finished is kept. `concurrent.futures` does the pool (it notices a killed worker: BrokenProcessPool,
where multiprocessing.Pool waits forever); this module adds the stopping, the progress counts and the
errors the commands report in one line.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import pickle
import queue
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

logger = logging.getLogger(__name__)


def run_pool(
    work: Callable[[Any], Any],
    tasks: Sequence[Any],
    workers: int,
    load: Callable[..., None],
    load_args: tuple,
    progress: Any,
    command: str,
) -> list[Any]:
    """`work(task)` for every task on `workers` processes, each set up by `load(*load_args, counts)`
    (`counts`: a queue the work puts byte counts into, shown on `progress`, a tqdm bar). Results in
    the order they finish. `command` names the command in the errors."""
    # fork keeps start-up cheap (no re-import of torch); spawn where fork does not exist
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    counts = ctx.Queue()
    pool = ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=(load, load_args, counts)
    )
    results: list[Any] = []
    try:
        pending: set[Future] = {pool.submit(functools.partial(_travelling_errors, work), t) for t in tasks}
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(counts, progress)
            results.extend(_result(f, command) for f in done)
        _drain(counts, progress)
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return results


def _init_worker(load: Callable[..., None], load_args: tuple, counts: Any) -> None:
    """A worker process: Ctrl-C is the parent's to handle (it stops the workers), and SIGTERM ends the
    worker quietly (a forked worker would otherwise run the command's handler and print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    counts.cancel_join_thread()  # a worker never waits at exit to flush progress counts
    load(*load_args, counts)


def _travelling_errors(work: Callable[[Any], Any], task: Any) -> Any:
    """`work(task)` in a worker; an error that could not travel to the parent (it fails to pickle or to
    unpickle) goes as a ChildProcessError with its type and message instead."""
    try:
        return work(task)
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            raise ChildProcessError(f"{type(e).__name__}: {e}") from None
        raise


def _drain(counts: Any, progress: Any) -> None:
    while True:
        try:
            progress.update(counts.get_nowait())
        except queue.Empty:
            return


def _result(future: Future, command: str) -> Any:
    """A finished task's result, or the worker's failure as an error the command reports in one line."""
    try:
        return future.result()
    except (ValueError, OSError):  # bad input (InputError names the file and line), a full disk, ...
        raise
    except BrokenProcessPool as e:
        raise ChildProcessError(
            f"a `{command}` worker process ended without a result (killed by a signal, or out of memory?); "
            "what was finished is kept: rerun the same command to go on (fewer --workers use less memory)"
        ) from e
    except Exception as e:  # a bug: its type and message here; the worker's traceback with -v
        logger.debug("worker traceback: %s", getattr(e.__cause__, "tb", ""))
        raise ChildProcessError(f"a `{command}` worker failed: {type(e).__name__}: {e}") from e


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the workers now (SIGTERM; they take its default action) and drop the queued tasks."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        if p.is_alive():
            p.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        p.join(timeout=5)
