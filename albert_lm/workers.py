"""Work on several processes where the first failure ends the run at once, whatever it is: a worker's
error (bad input: its own message), an error that could not travel back (it fails to pickle or to
unpickle), a worker killed by a signal or for memory, or Ctrl-C or SIGTERM in the parent. The other
workers are stopped then, and what was finished is kept.

`concurrent.futures` does the pool: it notices a killed worker (BrokenProcessPool) and shares no lock that
a stopped worker could leave held. multiprocessing.Pool does neither: it replaces a killed worker and
waits forever for that worker's task, and its `terminate()` after a failed task can wait forever too
(CPython issues 73945 and 78178). This module adds the stopping, the progress counts and the errors the
commands report in one line.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)


def run_pool(
    work: Callable[[Any], Any],
    tasks: Sequence[Any],
    workers: int,
    command: str,
    *,
    load: Callable[..., None] | None = None,
    load_args: tuple = (),
    progress: Any = None,
    on_result: Callable[[Any], None] | None = None,
    start: str = "fork",
    grace_s: float = 5.0,
) -> list[Any]:
    """`work(task)` for every task on `workers` processes, each set up by `load(*load_args, counts)`
    (`counts`: a queue the work puts counts into, bytes read or steps taken, shown on `progress`, a tqdm
    bar). Results in the order they finish, each also passed to `on_result` as it comes. `command` names
    the command in the errors. `start`: "fork" keeps start-up cheap (no re-import of torch; spawn where
    fork does not exist), "spawn" gives each worker a fresh interpreter (never a fork of a process that
    holds torch's threads). On a stop, a worker has `grace_s` to end on its own before it is killed."""
    ctx = mp.get_context(start if start in mp.get_all_start_methods() else "spawn")
    counts = ctx.Queue()
    pool = ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=(load, load_args, counts, os.getpid())
    )
    results: list[Any] = []
    try:
        with _sigterm_interrupts():
            pending: set[Future] = {
                pool.submit(functools.partial(_travelling_errors, work), t) for t in tasks
            }
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(counts, progress)
                for future in done:
                    results.append(_result(future, command))
                    if on_result is not None:
                        on_result(results[-1])
            _drain(counts, progress)
    except BaseException:
        _stop_workers(pool, grace_s)
        raise
    else:
        pool.shutdown(wait=True)
        _drain(counts, progress)  # what the workers counted after the last result came back
    finally:  # every worker is gone by now
        _release(counts)
    return results


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the parent while its workers run (as Ctrl-C does), so the
    workers are stopped with it, also where the pool is used from Python rather than from a command
    (which sets the same up for itself). Nothing is changed off the main thread, where no handler can be
    set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # the command's own, or the caller's
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_IN_WORKER = False  # set in a worker process of `run_pool`


def in_worker() -> bool:
    """Whether this process is a worker of `run_pool`: its parent answers Ctrl-C for the command."""
    return _IN_WORKER


def _init_worker(load: Callable[..., None] | None, load_args: tuple, counts: Any, parent: int) -> None:
    """A worker process: Ctrl-C is the parent's to handle (it stops the workers), and SIGTERM ends the
    worker quietly (a forked worker would otherwise run the command's handler and print a traceback).
    A worker whose parent is gone (killed by SIGKILL or for memory, which no handler sees) ends too."""
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()
    counts.cancel_join_thread()  # a worker never waits at exit to flush progress counts
    # tqdm's write lock is a multiprocessing RLock, made by the first bar (a disabled one too): a named
    # semaphore that a stopped worker leaves, and the resource tracker warns of at exit. Workers draw no
    # bars (the parent draws the counts), so a thread lock does.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    if load is not None:
        load(*load_args, counts)


def _end_with_parent(parent: int, every_s: float = 0.5) -> None:
    """End this worker once its parent has gone (it is then another process's child). A forked worker
    holds the parent's folder lock and the pool's queues open: left running, it would wait on them forever
    and keep the output locked against the command run again. Polled by hand: the library way,
    prctl(PR_SET_PDEATHSIG), is Linux's only and fires when the parent's starting thread ends."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def _travelling_errors(work: Callable[[Any], Any], task: Any) -> Any:
    """`work(task)` in a worker; an error that could not travel to the parent (it fails to pickle or to
    unpickle) goes as a ChildProcessError with its type and message instead. Work stopped by a signal
    (a KeyboardInterrupt: a training run that saved its checkpoint) ends the worker: the pool is being
    stopped, and a worker waiting for its next task would sit there until it is killed."""
    try:
        return work(task)
    except KeyboardInterrupt:
        os._exit(128 + signal.SIGTERM)
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            raise ChildProcessError(f"{type(e).__name__}: {e}") from None
        raise


def _drain(counts: Any, progress: Any) -> None:
    while True:
        try:
            n = counts.get_nowait()
            if progress is not None:
                progress.update(n)
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


def _release(q: Any) -> None:
    """Close the parent's end of a multiprocessing queue and unlink its named semaphores now. Under
    "spawn" each of its locks is a POSIX semaphore in /dev/shm (sem.mp-*) that multiprocessing unlinks
    only when the queue is garbage-collected; after a failed pool the queue sits in a reference cycle
    (the pool's initializer arguments, the traceback's frames), so the files would stay as long as the
    process lives (a test session, a notebook, the Python API). Under "fork" they have no name: nothing
    to do. Called once no worker uses the queue."""
    from multiprocessing import util

    q.close()
    locks = [getattr(q, name, None) for name in ("_rlock", "_wlock", "_sem")]
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        ref = getattr(finalizer, "_weakref", None)  # the object each finalizer cleans up after
        if ref is not None and any(ref() is lock for lock in locks if lock is not None):
            finalizer()  # SemLock._cleanup: sem_unlink, and the resource tracker told; runs once


def _stop_workers(pool: ProcessPoolExecutor, grace_s: float = 5.0) -> None:
    """End the workers now and drop the queued tasks: SIGTERM (a worker takes its default action, or its
    own handler's: a training run saves a checkpoint), then SIGKILL for any still alive after `grace_s`,
    e.g. one that was signalled before its set-up reset the handler it inherited. No worker may outlive
    this: the pool's manager thread waits for every one of them, and the interpreter waits for that thread
    at exit."""
    manager = getattr(pool, "_executor_manager_thread", None)
    processes = dict(getattr(pool, "_processes", None) or {})
    for p in processes.values():
        if p.is_alive():
            p.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    processes.update(getattr(manager, "processes", None) or {})  # the manager thread's own list
    deadline = time.monotonic() + grace_s
    for p in processes.values():
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    if manager is not None:
        manager.join(timeout=5)
