"""Shared fixtures: the one way tests find the real data in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]


def _data_root() -> Path:
    return Path(os.environ.get("ALBERT_DATA", _ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def albert_data() -> Path:
    """The real shared data folder (env ALBERT_DATA, default ../shared/data); skips when absent."""
    root = _data_root()
    if not (root / "README.md").is_file():
        pytest.skip(f"real data not found at {root} (set ALBERT_DATA to the shared data folder)")
    return root


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory) -> None:
    """Kernel timings go to a folder of this test session, never the user's ~/.cache (subprocesses too)."""
    os.environ["ALBERT_LM_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))
