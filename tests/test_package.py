"""The package surface: every export resolves, importing the package stays light, and the stages import
only the stages before them."""

from __future__ import annotations

import subprocess
import sys

import albert_lm


def test_every_export_resolves():
    assert sorted(albert_lm.__all__) == sorted([*albert_lm._EXPORTS, "__version__"])
    for name in albert_lm.__all__:
        assert getattr(albert_lm, name) is not None, name


def test_the_command_line_parser_does_not_load_torch():
    # `albert --help` and every command's options are built before any command runs.
    code = "import sys; from albert_lm.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_import_and_tokenizer_do_not_load_torch():
    # Data-creation workers import only this much; torch would cost each one ~200 MB.
    code = "import sys, albert_lm; from albert_lm import AlbertTokenizer, DataConfig; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# The road, in order: a module imports only from its own stage and the stages before it.
STAGES = [
    "files",
    "progress",
    "workers",
    "values",
    "settings",
    "hub",
    "data",
    "kernels",
    "model",
    "tasks",
    "training",
    "distill",
    "glue",
    "deploy",
    "bench",
    "paper",
    "demo",
    "cli",
]


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_each_stage_imports_only_from_the_stages_before_it():
    import ast
    from pathlib import Path

    root = Path(albert_lm.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "__init__.py":
            continue  # the public exports name every stage
        here = path.stem if path.parent == root else path.relative_to(root).parts[0]
        assert here in STAGES, f"{path.relative_to(root)}: a module outside the stages {STAGES}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("albert_lm"):
                assert node.module is not None
                targets = (
                    [node.module]
                    if node.module != "albert_lm"
                    else [f"albert_lm.{a.name}" for a in node.names]
                )
                for target in targets:
                    there = _stage(target)
                    if there in STAGES and STAGES.index(there) > STAGES.index(here):
                        wrong.append(f"{path.relative_to(root)} imports {target}")
    assert not wrong, "imports against the road:\n" + "\n".join(wrong)
