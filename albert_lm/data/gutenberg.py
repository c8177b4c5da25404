"""Project Gutenberg's books as pretraining text: the book's own text lies between a START and an END
marker line, after a header and before a licence that a model should not learn (`--strip-gutenberg`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from albert_lm.data.sources import is_records, reading, text_size
from albert_lm.files import InputError

logger = logging.getLogger(__name__)

_HEAD_WINDOW = 1 << 20  # Gutenberg headers (with the old "small print") end well within 1 MiB
_TAIL_WINDOW = 1 << 20
_HINT_WINDOW = 64 << 10  # where a book's first START marker line lies (the old small print is ~15 KB)
_START_RE = re.compile(rb"^(\*\*\* ?START OF[^\n]*|\*END\*THE SMALL PRINT[^\n]*)\n", re.M | re.I)
_END_RE = re.compile(rb"^(\*\*\* ?END OF|End of (the )?Project Gutenberg)", re.M | re.I)


def gutenberg_body(path: Path) -> tuple[int, int]:
    """Byte range of a Project Gutenberg book's text: after the START marker line, before the END marker
    (offsets in the decompressed text of a compressed book)."""
    found = _book_range(path)
    if found is None:
        raise InputError(
            path,
            f"no Project Gutenberg START marker ('*** START OF' or '*END*THE SMALL PRINT') in the "
            f"first {_HEAD_WINDOW} bytes; drop --strip-gutenberg for files that are not Gutenberg books",
        )
    return found


def _book_range(path: Path) -> tuple[int, int] | None:
    """`gutenberg_body`'s range, or None for a file without a START marker (not a book); a book whose
    END marker is missing is refused."""
    size = text_size(path)
    with reading(path) as f:
        head = f.read(_HEAD_WINDOW)
        tail_start = max(0, size - _TAIL_WINDOW)
        f.seek(tail_start)
        tail = f.read(_TAIL_WINDOW)
    starts = list(_START_RE.finditer(head))
    if not starts:
        return None
    start = starts[-1].end()  # old files have both a small-print start and end line: text follows the last
    end_match = next((m for m in _END_RE.finditer(tail) if tail_start + m.start() >= start), None)
    if end_match is None:
        raise InputError(
            path,
            f"no Project Gutenberg END marker ('*** END OF' or 'End of the Project Gutenberg') in "
            f"the last {_TAIL_WINDOW} bytes, after its START marker: the book looks cut short; give the whole "
            "file, or drop --strip-gutenberg",
        )
    return start, tail_start + end_match.start()


def has_gutenberg_start(path: str | os.PathLike, window: int = _HINT_WINDOW) -> bool:
    """Whether a text file holds Project Gutenberg's START marker line near its top."""
    with reading(path) as f:
        return _START_RE.search(f.read(window)) is not None


def text_range(path: Path, strip_gutenberg: bool) -> tuple[int, int | None]:
    """The byte range of `path` to read (end None: to its end). With `strip_gutenberg`, a Project
    Gutenberg book's text between its markers; a file without a START marker (another text of the
    corpus, or records) is read whole, as `warn_gutenberg_markers` says."""
    found = _book_range(path) if strip_gutenberg and not is_records(path) else None
    return found if found is not None else (0, None)


def warn_gutenberg_markers(paths: Sequence[str | os.PathLike], strip_gutenberg: bool = False) -> None:
    """One WARNING where the inputs and --strip-gutenberg disagree: without it, some inputs look like
    Project Gutenberg books (a START marker near the top), whose header and licence text would be trained
    on; with it, some hold no marker and are read whole. The output does not change; the option stays the
    user's to give."""
    if strip_gutenberg:
        found = [str(p) for p in paths if is_records(p) or not has_gutenberg_start(p, _HEAD_WINDOW)]
        what = "hold no Project Gutenberg START marker (%s%s): --strip-gutenberg reads them whole"
    else:
        found = [str(p) for p in paths if not is_records(p) and has_gutenberg_start(p)]
        what = (
            "hold Project Gutenberg's START marker (%s%s): their header and licence text will be trained "
            "on; pass --strip-gutenberg to keep only the text between the markers"
        )
    if found:
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        logger.warning(f"%d of %d input files {what}", len(found), len(paths), ", ".join(found[:3]), more)
