"""Progress bars: one maker for every command, silenced by --quiet even where a bar is asked for."""

from __future__ import annotations

import re
from pathlib import Path

from albert_lm.progress import progress_bar

PACKAGE = Path(__file__).resolve().parents[1] / "albert_lm"


def test_quiet_silences_a_bar_that_asks_to_be_shown(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert progress_bar(show=False, total=3).disable
    monkeypatch.setenv("TQDM_DISABLE", "1")  # what `albert ... -q` sets
    bar = progress_bar(show=True, total=3)
    assert bar.disable  # tqdm alone would draw a bar made with disable=False


def test_every_bar_of_the_package_comes_from_progress_bar():
    made_elsewhere = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "progress.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\btqdm\(", line)
    ]
    assert not made_elsewhere, f"bars not made by albert_lm.progress.progress_bar: {made_elsewhere}"
