"""Progress bars: one maker for every command, silenced by --quiet even where a bar is asked for."""

from __future__ import annotations

import logging
import re
import time
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


def test_off_a_terminal_a_long_stage_logs_its_bar_and_a_short_one_nothing(monkeypatch, caplog):
    """stderr a file or a pipe (nohup, CI): a bar's carriage returns would pile up into one line, and tqdm
    alone would say nothing for the whole stage; instead a line every LOG_EVERY_S once it lasts that long."""
    from albert_lm import progress

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress, "_terminal", lambda: False)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.05)
    with caplog.at_level(logging.INFO, logger="albert_lm.progress"):
        for _ in progress_bar(range(4), desc="teacher"):
            time.sleep(0.06)
        lines = [r.getMessage() for r in caplog.records if r.name == "albert_lm.progress"]
        assert lines and all(ln.startswith("teacher:") and "\r" not in ln for ln in lines)
        assert "4/4" in lines[-1]  # its end, once it has shown
        caplog.clear()
        bar = progress_bar(total=2, desc="loop")
        time.sleep(0.06)
        for step in range(5):  # a loop's loss records: no line each, it waits for the next update's
            bar.set_postfix(step=step)
        assert not [r for r in caplog.records if r.name == "albert_lm.progress"]
        bar.close()
        caplog.clear()
        monkeypatch.setattr(progress, "LOG_EVERY_S", 60.0)
        for _ in progress_bar(range(4), desc="quick"):
            pass
        assert not [r for r in caplog.records if r.name == "albert_lm.progress"]


def test_a_logged_bar_line_carries_no_terminal_control_codes(caplog):
    """A bar closed inside another (an evaluation's, inside a training run's) wrote a bare cursor move,
    logged as `INFO albert_lm.progress: ^[[A`."""
    from albert_lm import progress

    with caplog.at_level(logging.INFO, logger="albert_lm.progress"):
        progress._LogLines().write("\x1b[A")
        progress._LogLines().write("\r\x1b[2Keval: 3/5 batches\x1b[A")
    assert [r.getMessage() for r in caplog.records] == ["eval: 3/5 batches"]


def test_a_terminal_of_no_width_gets_log_lines(monkeypatch):
    """A pseudo-terminal never sized (docker -t, some CI) drew nothing for a whole glue suite: tqdm draws
    no bar at 0 columns. Such a terminal gets the log lines instead."""
    import os
    import sys

    from albert_lm import progress

    class Tty:
        def isatty(self):
            return True

        def fileno(self):
            return 2

    monkeypatch.setattr(sys, "stderr", Tty())
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert not progress._terminal()
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((120, 40)))
    assert progress._terminal()
