"""The package surface: every export resolves, importing the package stays light, and the stages import
only the stages before them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import albert_lm


def test_every_export_resolves():
    assert sorted(albert_lm.__all__) == sorted([*albert_lm._EXPORTS, "__version__"])
    for name in albert_lm.__all__:
        assert getattr(albert_lm, name) is not None, name


def test_help_on_a_settings_class_lists_each_field_with_its_default_and_help():
    """`help(albert_lm.FinetuneConfig)` in a notebook shows what `--help` shows: Python keeps no
    attribute docstrings at run time, so the public settings classes carry them in their `__doc__`."""
    import pydoc

    from albert_lm.values import field_docs

    for name in ("PretrainConfig", "FinetuneConfig", "PredictConfig", "DataConfig"):
        cls = getattr(albert_lm, name)
        text = " ".join(pydoc.render_doc(cls, renderer=pydoc.plaintext).replace("|", " ").split())
        for field, doc in field_docs(cls).items():
            assert f"{field} (" in text and doc in text, (name, field)
    doc = albert_lm.FinetuneConfig.__doc__ or ""
    assert "task (required): the task" in doc  # required fields first, then the defaults
    assert doc.index("output (required)") < doc.index("learning_rate (default None)")
    assert "keep_last (default 5)" in (albert_lm.PretrainConfig.__doc__ or "")


def test_type_checkers_see_every_export_as_what_it_is():
    """Each lazy export is also imported under `if TYPE_CHECKING:` from the module that defines it, so
    that mypy and IDEs see its type (not Any); the lazy `__getattr__` is hidden from them."""
    tree = ast.parse(Path(albert_lm.__file__).read_text())
    typed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in (n for n in ast.walk(node) if isinstance(n, ast.ImportFrom)):
                typed.update({a.name: imp.module for a in imp.names})
    assert typed == {name: f"albert_lm.{module}" for name, module in albert_lm._EXPORTS.items()}


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
    "hints",
    "files",
    "progress",
    "library_logs",
    "workers",
    "values",
    "settings",
    "parser",
    "hub",
    "data",
    "kernels",
    "model",
    "tasks",
    "runtime",
    "training",
    "distill",
    "glue",
    "deploy",
    "bench",
    "paper",
    "demo",
    "cli",
]
# Stages that stand after others on the road but take only their output: deploy uses a saved model
# folder (the checkpoint), never the code of the loops that made it.
APART = {"deploy": ("training", "distill", "glue")}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> list[tuple[str, str, str]]:
    """(the module's file, its stage, the albert_lm module it imports) for every import of every module,
    wherever it stands (top, `if TYPE_CHECKING:`, inside a function): `import albert_lm.x`, `from
    albert_lm.x import y`, relative forms, and public names taken from `albert_lm` itself (the module
    that defines each)."""
    import ast
    from pathlib import Path

    root = Path(albert_lm.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "__init__.py":
            continue  # the public exports name every stage
        here = path.stem if path.parent == root else path.relative_to(root).parts[0]
        assert here in STAGES, f"{path.relative_to(root)}: a module outside the stages {STAGES}"
        package = ["albert_lm", *path.relative_to(root).parent.parts]
        name = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
                if base == "albert_lm":
                    targets = [f"albert_lm.{albert_lm._EXPORTS.get(a.name, a.name)}" for a in node.names]
                else:
                    targets = [base]
            found += [(name, here, t) for t in targets if t.startswith("albert_lm.")]
    return found


def test_each_stage_imports_only_from_the_stages_before_it():
    wrong = [
        f"{name} imports {target}"
        for name, here, target in _imports()
        if (there := _stage(target)) in STAGES and STAGES.index(there) > STAGES.index(here)
    ]
    assert not wrong, "imports against the road:\n" + "\n".join(wrong)


def test_deploy_imports_no_training_loop():
    """A model folder is all deploy needs of training: what both use (loading a model for a task, running
    it, checking a tokenizer and a head against it, a fine-tuned folder's saved settings) stands before
    training, in `albert_lm.runtime`."""
    wrong = [
        f"{name} imports {target}"
        for name, here, target in _imports()
        if _stage(target) in APART.get(here, ())
    ]
    assert not wrong, "imports of a stage kept apart:\n" + "\n".join(wrong)
