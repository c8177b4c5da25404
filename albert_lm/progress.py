"""Progress bars, one way for every command: tqdm's, never under `--quiet`.

On a terminal, tqdm's bar. Where stderr is a file or a pipe (a run under nohup, a CI log), a bar's
carriage returns would pile up into one long line, so tqdm is silent there by default; a long stage would
then say nothing for minutes. Instead, a stage that lasts more than LOG_EVERY_S seconds writes its bar as
a log line every LOG_EVERY_S seconds (and once at its end); a short one writes nothing.

tqdm takes the environment's TQDM_DISABLE (which `--quiet` sets) only as a default: a bar made with
`disable=False` draws anyway. `progress_bar` is the one place that decides, so a command's `-q` silences
its bars as it silences its log lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from typing import Any

from tqdm import tqdm as plain_tqdm
from tqdm.auto import tqdm

LOG_EVERY_S = 30.0
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal control sequences (cursor moves, erases)
logger = logging.getLogger("albert_lm.progress")


class _LogLines:
    """A file for tqdm that writes each state of the bar as one log line (by hand: tqdm writes to files,
    and a log line carries the time and goes where the command's other lines go)."""

    def write(self, text: str) -> None:
        # a bar closed inside another writes a cursor move ("\x1b[A"): a terminal's, never a log's
        line = _ESCAPES.sub("", text).strip("\r\n ")
        if line:
            logger.info("%s", line)

    def flush(self) -> None:
        pass


class _LoggedBar(plain_tqdm):
    """A bar written as log lines: a new postfix or description waits for the next line (a line each
    time a loop records its loss would double the loop's own log lines)."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)


def progress_bar(iterable: Any = None, *, show: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar over `iterable` (or updated by hand), drawn when `show` and `--quiet` is off
    (TQDM_DISABLE unset): on a terminal as tqdm draws it, elsewhere as a log line every LOG_EVERY_S
    seconds once the stage has lasted that long (in a notebook, tqdm's own widget)."""
    quiet = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
    if quiet or not show:
        return tqdm(iterable, disable=True, **kwargs)
    if _terminal() or "ipykernel" in sys.modules:
        return tqdm(iterable, disable=None, **kwargs)
    for key, value in (("mininterval", LOG_EVERY_S), ("delay", LOG_EVERY_S), ("ncols", 100), ("ascii", True)):
        kwargs.setdefault(key, value)
    return _LoggedBar(iterable, file=_LogLines(), **kwargs)


def _terminal() -> bool:
    """stderr is a terminal a bar can be drawn on: one of no width (a docker -t or CI pseudo-terminal
    never sized) draws nothing, so it gets the log lines."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # replaced by an object without it, or closed
        return False


def logs_above_bars() -> contextlib.AbstractContextManager[None]:
    """Within: on a terminal, log lines are written above the bars drawn (tqdm's own redirect), not onto
    the end of a bar's line; elsewhere, where bars are log lines themselves, nothing changes."""
    if not _terminal():
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


# --------------------------------------------------------------------------- what a stopped stage kept
def say_kept(stop: BaseException, what: str) -> None:
    """Record on the Ctrl-C or SIGTERM (`stop`) that ends a command what its stage keeps of the work done,
    and how it goes on ("the shards finished in data/ are kept: the same command continues"): the command
    line says it after "interrupted". A stage nearer the stop speaks first: what it said stays."""
    if kept_by(stop) is None:
        stop.albert_kept = what  # type: ignore[attr-defined]  # (exceptions take attributes; no notes on 3.10)


def kept_by(stop: BaseException) -> str | None:
    """What `say_kept` recorded on `stop`, if anything."""
    what = getattr(stop, "albert_kept", None)
    return what if isinstance(what, str) else None
