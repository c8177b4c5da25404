"""The command line as users know it: every option of every command, with its type, choices, default
and whether it is required, is kept in tests/fixtures/cli_options.json; an option removed or changed
fails here (a new option is added to the file on purpose, with the change that adds it).

    python tests/test_cli_options.py > tests/fixtures/cli_options.json   # after a deliberate change
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from test_cli_vocabulary import _commands

FIXTURE = Path(__file__).parent / "fixtures" / "cli_options.json"


def _options(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    out = {}
    for a in parser._actions:
        if a.dest == "help":
            continue
        plain = isinstance(a.default, str | int | float | bool | type(None))
        out[" ".join(a.option_strings) or a.dest] = {
            "dest": a.dest,
            "type": getattr(a.type, "__name__", None) if a.type else None,
            "choices": sorted(map(str, a.choices)) if a.choices else None,
            "default": a.default if plain else repr(a.default),
            "required": a.required,
            "nargs": a.nargs,
        }
    return out


def current() -> dict[str, dict[str, dict[str, Any]]]:
    return {name: _options(p) for name, p in sorted(_commands().items())}


def test_every_option_of_every_command_is_kept():
    saved, now = json.loads(FIXTURE.read_text()), current()
    assert sorted(now) == sorted(saved), "commands added or removed: update the fixture on purpose"
    for command, options in saved.items():
        for flag, spec in options.items():
            assert flag in now[command], f"albert {command}: {flag} is gone"
            assert now[command][flag] == spec, f"albert {command} {flag}: {spec} became {now[command][flag]}"
        added = sorted(set(now[command]) - set(options))
        assert not added, f"albert {command}: new options {added}: add them to the fixture on purpose"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(json.dumps(current(), indent=1, sort_keys=True))
