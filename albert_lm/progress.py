"""Progress bars, one way for every command: tqdm's, shown on a terminal only, never under `--quiet`.

tqdm takes the environment's TQDM_DISABLE (which `--quiet` sets) only as a default: a bar made with
`disable=False` draws anyway. `progress_bar` is the one place that decides, so a command's `-q` silences
its bars as it silences its log lines.
"""

from __future__ import annotations

import os
from typing import Any

from tqdm.auto import tqdm


def progress_bar(iterable: Any = None, *, show: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar over `iterable` (or updated by hand), drawn when `show`, stderr is a terminal and
    `--quiet` is off (TQDM_DISABLE unset)."""
    quiet = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
    return tqdm(iterable, disable=True if quiet or not show else None, **kwargs)
