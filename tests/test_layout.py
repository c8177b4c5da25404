"""The shape of the package: no import circle between its modules (imports made only for type hints, and
imports made late inside a function, included: a circle there is a circle of concepts), and no module
over 450 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from albert_lm import _EXPORTS

ROOT = Path(__file__).resolve().parents[1] / "albert_lm"
MAX_LINES = 450


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """Every albert_lm module `module` imports, wherever the import stands: at the top, under `if
    TYPE_CHECKING:` or inside a function. A late import (made where it is used, to keep start-up light)
    is still an edge of the graph: it only puts off the circle to the first call that closes it.
    Relative imports are read from `module`'s package; a public name taken from `albert_lm` itself is
    the module that defines it (`albert_lm._EXPORTS`); a submodule taken from its package (`from
    albert_lm.tasks import metrics`) is that submodule, as `from albert_lm.tasks.metrics import x` is."""
    found: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..y import z
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            if not base.startswith("albert_lm"):
                continue
            for a in node.names:
                if f"{base}.{a.name}" in modules:  # a submodule: its package is only its parent
                    found.add(f"{base}.{a.name}")
                elif base == "albert_lm" and a.name in _EXPORTS:
                    found.add(f"albert_lm.{_EXPORTS[a.name]}")
                else:
                    found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("albert_lm"))
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", set(files))
        graph[name] = {t for t in targets if t in files and t != name and t != "albert_lm"}
    return graph


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_module_over_450_lines():
    """A module past this is two concepts in one room: split it along its seam."""
    long = {
        str(p.relative_to(ROOT.parent)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
