"""CONTRIBUTING.md's code map is the tree: every folder and module of the package has its line, and the
map names nothing that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mapped() -> set[str]:
    """The paths the code map names, as `folder/module.py` relative to albert_lm/."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("```\nalbert_lm/\n", 1)[1].split("```", 1)[0]
    found, folder = set(), ""
    for line in block.splitlines():
        m = re.match(r"^( +)(\S+)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        if indent == 2:
            folder = name if name.endswith("/") else ""
            found.add(name)
        elif indent == 4 and folder:
            found.add(folder + name)
    return found


def _tree() -> set[str]:
    package = ROOT / "albert_lm"
    found = set()
    for path in package.iterdir():
        if path.name.startswith(("_", ".")):
            continue
        if path.is_dir():
            found.add(path.name + "/")
            found.update(f"{path.name}/{p.name}" for p in path.glob("*.py") if p.name != "__init__.py")
        elif path.suffix == ".py":
            found.add(path.name)
    return found


def test_the_code_map_is_the_tree():
    mapped, tree = _mapped(), _tree()
    assert not tree - mapped, f"in the tree but not in CONTRIBUTING.md's code map: {sorted(tree - mapped)}"
    assert not mapped - tree, f"in CONTRIBUTING.md's code map but not in the tree: {sorted(mapped - tree)}"


def test_every_command_has_its_tests_listed_and_they_exercise_it():
    from albert_lm.cli import build_parser

    text = (ROOT / "CONTRIBUTING.md").read_text()
    listed = dict(re.findall(r"^\| `albert ([a-z-]+)` \| (.+) \|$", text, flags=re.M))
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert commands == set(listed), (
        f"CONTRIBUTING.md's test table against the commands: {commands ^ set(listed)}"
    )
    for command, files in listed.items():
        names = re.findall(r"`(test_\w+\.py)`", files)
        assert names, command
        for name in names:
            assert (ROOT / "tests" / name).is_file(), f"{command}: {name} does not exist"
        assert any(f'"{command}"' in (ROOT / "tests" / n).read_text() for n in names), (
            f"none of {names} runs `albert {command}`"
        )
