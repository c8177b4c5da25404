"""benchmarks/README.md is the index of benchmarks/: every script there has its line, and every script the
README names is there, so a reader can trust the list."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
README = BENCHMARKS / "README.md"
SKIPPED = {"results", "__pycache__"}  # recorded runs and Python's caches are not scripts
FOLDERS = ("timings", "experiments", "tools")
# A path under benchmarks/ as the README writes it: `timings/bench_gemm.py` or benchmarks/tools/x.py.
NAMED_PATH = re.compile(r"\b((?:" + "|".join(FOLDERS) + r")/[\w.-]*\w)")
# A file named alone, in backticks: `bench_data.py`.
NAMED_FILE = re.compile(r"`([\w.-]+\.(?:py|sh))`")


def _files() -> set[str]:
    """Every file under benchmarks/, as a path relative to it, results/ and caches aside."""
    return {
        path.relative_to(BENCHMARKS).as_posix()
        for path in BENCHMARKS.rglob("*")
        if path.is_file() and path != README and not SKIPPED & set(path.relative_to(BENCHMARKS).parts)
    }


def _named_paths() -> set[str]:
    return set(NAMED_PATH.findall(README.read_text(encoding="utf-8")))


def test_every_benchmark_file_is_in_the_readme():
    missing = _files() - _named_paths()
    assert not missing, f"files under benchmarks/ that benchmarks/README.md does not name: {sorted(missing)}"


def test_every_file_the_readme_names_exists():
    named = _named_paths()
    absent = sorted(name for name in named if not (BENCHMARKS / name).is_file())
    assert not absent, f"benchmarks/README.md names files that do not exist: {absent}"
    names = {Path(name).name for name in _files()}
    alone = set(NAMED_FILE.findall(README.read_text(encoding="utf-8")))
    assert alone <= names, (
        f"benchmarks/README.md names files that are not in benchmarks/: {sorted(alone - names)}"
    )


def test_scripts_live_in_a_purpose_folder():
    loose = sorted(name for name in _files() if "/" not in name)
    assert not loose, f"put these in benchmarks/{{timings,experiments,tools}}/ by purpose: {loose}"
