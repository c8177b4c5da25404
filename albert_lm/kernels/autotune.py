"""Pick the fastest of several ways to compute the same thing, by timing them once, cached on disk.

The CPU decides which matrix-multiply path is fastest: on an AVX-512 Zen 5, oneDNN's inner product ran
2x MKL's sgemm; on an AVX2 Zen 3 the two ran at the same rate and oneDNN's grad-weight product on
transposed operands at half of it. So `kernels` asks this module, per product shape, and the answer is
measured here, as cudnn.benchmark does for convolutions: each candidate is timed on random inputs of
that shape, alternated round by round, and the fastest (minimum time) is kept.

The table lives in memory and in one JSON file per machine key (CPU model, cores, torch threads, torch
version, emulation variables) under $ALBERT_LM_CACHE_DIR, else $XDG_CACHE_HOME/albert-lm, else
~/.cache/albert-lm: a process tunes each shape once per machine, and a resumed run uses the choices of
the run it resumes (same machine, same torch threads, cache kept). A corrupt or stale file is ignored
and rewritten, an unwritable folder only logged. ALBERT_LM_AUTOTUNE=0 (or `set_enabled(False)`, or
`use(timing=False)` for a block) turns kernel timing off: callers then get their default. `measured`
values (the bf16 against fp32 rate that `--precision auto` needs) are still measured once.
No library does this for CPU linear layers, so it is written here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from albert_lm.files import write_json
from albert_lm.kernels.hardware import cpu_info

logger = logging.getLogger(__name__)

FORMAT = 1  # bump when the meaning of a stored choice changes: older files are then stale
_ENABLED = os.environ.get("ALBERT_LM_AUTOTUNE", "1") != "0"
_LOCK = threading.RLock()
_TABLE: dict[str, Any] | None = None  # {"choices": {key: {...}}, "values": {name: {...}}}
_FILE: Path | None = None
_MEMO: dict[tuple, str] = {}  # answers already given in this process, without reading the table


def set_enabled(enabled: bool) -> None:
    """Turn timing on or off for this process (on by default; env ALBERT_LM_AUTOTUNE=0 turns it off)."""
    global _ENABLED
    _ENABLED = bool(enabled)


def enabled() -> bool:
    return _ENABLED


@contextlib.contextmanager
def use(timing: bool = True) -> Iterator[None]:
    """Within this block, choose kernels by timing (True) or take each caller's default (False); the
    setting before is restored after. Process-wide, as `set_enabled`."""
    global _ENABLED
    was, _ENABLED = _ENABLED, bool(timing)
    try:
        yield
    finally:
        _ENABLED = was


def cache_dir() -> Path:
    if os.environ.get("ALBERT_LM_CACHE_DIR"):
        return Path(os.environ["ALBERT_LM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry
            base = tempfile.gettempdir()
    return Path(base) / "albert-lm"


def machine_key() -> dict[str, Any]:
    """What the timings depend on: a file made under another key is never read."""
    return dict(_machine_key(torch.get_num_threads()))


@functools.cache
def _machine_key(threads: int) -> tuple[tuple[str, Any], ...]:
    cpu = cpu_info()
    return tuple(
        {
            "format": FORMAT,
            "cpu": cpu.model,
            "generation": cpu.generation,
            "flags": hashlib.sha256(" ".join(sorted(cpu.flags)).encode()).hexdigest()[:12],
            "cores": cpu.cores,
            "threads": threads,
            "torch": torch.__version__,
            "emulation": cpu.emulation,
        }.items()
    )


def cache_file() -> Path:
    return cache_dir() / _file_name(torch.get_num_threads())


@functools.cache
def _file_name(threads: int) -> str:
    key = dict(_machine_key(threads))
    return f"kernels-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"


def _read(path: Path) -> dict[str, Any]:
    """The table in `path`, or an empty one if it is missing, corrupt or made under another key."""
    empty: dict[str, Any] = {"choices": {}, "values": {}}
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return empty
    except (OSError, ValueError) as e:
        logger.info("ignoring the kernel choices in %s (%s); they will be measured again", path, e)
        return empty
    ok = (
        isinstance(data, dict)
        and data.get("machine") == machine_key()
        and isinstance(data.get("choices"), dict)
        and isinstance(data.get("values"), dict)
    )
    if not ok:
        logger.info("ignoring %s: made for another machine, torch or albert-lm format", path)
        return empty
    return {"choices": data["choices"], "values": data["values"]}


def _table() -> dict[str, Any]:
    global _TABLE, _FILE
    path = cache_file()
    if _TABLE is None or path != _FILE:  # the key changes if a caller changes torch's threads
        _TABLE, _FILE = _read(path), path
    return _TABLE


def _save() -> None:
    """Merge this process's table into the file (another process may have added entries), atomically."""
    assert _TABLE is not None and _FILE is not None
    on_disk = _read(_FILE)
    for part in ("choices", "values"):
        _TABLE[part] = {**on_disk[part], **_TABLE[part]}
    payload = {"machine": machine_key(), **_TABLE}
    try:
        write_json(_FILE, payload, indent=1)
    except OSError as e:
        logger.info("could not write the kernel choices to %s (%s); keeping them in memory", _FILE, e)


def reset() -> None:
    """Forget the in-memory table (the next use reads the file again); for tests and benchmarks."""
    global _TABLE, _FILE
    with _LOCK:
        _TABLE, _FILE = None, None
        _MEMO.clear()


Candidate = Callable[[], Any] | tuple[Callable[[], Any], float]


def time_candidates(
    candidates: dict[str, Candidate], budget_s: float = 0.25, max_rounds: int = 5
) -> dict[str, float]:
    """Minimum seconds per call of each candidate: one warm-up call each, then rounds alternating them.

    A candidate is a callable, or (callable, seconds of fixed cost to add to each call). A candidate
    that raises (a primitive that works on the probe's shape but not on this one) gets infinity and is
    never chosen; if every one raises, the first error is raised.
    """
    best = {name: float("inf") for name in candidates}
    extra = {name: c[1] if isinstance(c, tuple) else 0.0 for name, c in candidates.items()}
    working = {}
    errors = []
    for name, c in candidates.items():
        fn = c[0] if isinstance(c, tuple) else c
        try:
            fn()
            working[name] = fn
        except (RuntimeError, NotImplementedError) as e:
            logger.info("kernel candidate %s failed here (%s); not used", name, str(e).splitlines()[0])
            errors.append(e)
    if not working:
        raise errors[0]
    start = time.perf_counter()
    for i in range(max_rounds):
        for name, fn in working.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
        if i >= 1 and time.perf_counter() - start > budget_s:
            break
    return {name: t + extra[name] for name, t in best.items()}


def choose(key: str, names: Sequence[str], default: str, make: Callable[[], dict[str, Candidate]]) -> str:
    """The fastest of `names` for `key`: from the table, else timed now via `make()` and stored.

    `make` builds the candidates (callables on inputs of the right shape, or (callable, fixed cost in
    seconds) pairs) only when timing is needed.
    With timing off, or a single candidate, returns `default` (which must be in `names`).
    """
    if not _ENABLED or len(names) < 2:
        return default
    memo_key = (key, tuple(names), torch.get_num_threads(), os.environ.get("ALBERT_LM_CACHE_DIR"))
    hit = _MEMO.get(memo_key)
    if hit is not None:  # the hot path: every linear layer of every forward asks
        return hit
    with _LOCK:
        entry = _table()["choices"].get(key)
        if (
            isinstance(entry, dict)
            and entry.get("choice") in names
            and isinstance(entry.get("ms"), dict)
            and set(entry["ms"]) == set(names)
        ):
            _MEMO[memo_key] = entry["choice"]
            return entry["choice"]
        candidates = make()
        with torch.autocast("cpu", enabled=False), torch.no_grad():
            seconds = time_candidates(candidates)
        choice = min(seconds, key=seconds.__getitem__)
        _TABLE["choices"][key] = {  # type: ignore[index]
            "choice": choice,
            "ms": {n: round(s * 1e3, 6) if s != float("inf") else None for n, s in seconds.items()},
        }
        logger.debug("kernel %s: %s (%s)", key, choice, _TABLE["choices"][key]["ms"])  # type: ignore[index]
        _save()
        _MEMO[memo_key] = choice
        return choice


def measured(name: str, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    """A machine measurement (e.g. bf16 against fp32 GEMM rates), taken once per machine and cached."""
    with _LOCK:
        values = _table()["values"]
        hit = values.get(name)
        if isinstance(hit, dict) and hit and all(isinstance(v, (int, float)) for v in hit.values()):
            return dict(hit)
        with torch.autocast("cpu", enabled=False), torch.no_grad():
            result = measure()
        values[name] = result
        _save()
        return dict(result)


def choices() -> dict[str, Any]:
    """The table as this process knows it: {key: {"choice": name, "ms": {name: ms}}}."""
    with _LOCK:
        return dict(_table()["choices"])
