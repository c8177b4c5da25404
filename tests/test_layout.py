"""The shape of the package: no import circle between its modules (imports made only for type hints
included: a circle there is a circle of concepts), and no module over 450 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "albert_lm"
MAX_LINES = 450


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_at_module_level(tree: ast.Module) -> set[str]:
    """albert_lm modules imported at the top of a module or in its `if TYPE_CHECKING:` block (an import
    inside a function is a deliberate late import, made where it is used)."""
    found: set[str] = set()
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If):
            body.extend(node.body)
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("albert_lm"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("albert_lm"))
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = _imports_at_module_level(ast.parse(path.read_text()))
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
