"""The shape of the code: functions and modules by length (the layout issue's goals: no module over 450
lines, no function over 80, at most three over 60).

    python benchmarks/tools/code_shape.py [albert_lm]
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path


def main(root: Path) -> None:
    functions: list[tuple[int, str]] = []
    modules: list[tuple[int, str]] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        modules.append((len(text.splitlines()), str(path)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                functions.append((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}"))
    lengths = [n for n, _ in functions]
    top = [p for p in root.glob("*.py")]
    print(
        f"{len(modules)} modules ({len(top)} at the top of {root}), {len(functions)} functions, "
        f"median {statistics.median(lengths):g} lines, {sum(n > 80 for n in lengths)} over 80, "
        f"{sum(n > 60 for n in lengths)} over 60"
    )
    print(
        "longest functions:",
        *(f"  {n:4d} {name}" for n, name in sorted(functions, reverse=True)[:5]),
        sep="\n",
    )
    print(
        "longest modules:", *(f"  {n:4d} {name}" for n, name in sorted(modules, reverse=True)[:5]), sep="\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "albert_lm"))
