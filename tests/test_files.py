"""files.py: one atomic writer (file and folder) and one JSON / JSONL reader for every stage."""

from __future__ import annotations

import os
import stat

import pytest

from albert_lm.files import InputError, atomic_folder, atomic_write, iter_jsonl, read_json_object, write_json


def test_atomic_write_replaces_whole_files_with_the_usual_mode(tmp_path):
    target = tmp_path / "sub" / "a.json"
    write_json(target, {"b": 1, "a": [1, 2]})
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    atomic_write(target, b"new", durable=True)
    assert target.read_bytes() == b"new"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's private 0600
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a.txt"
    atomic_write(target, "old")
    with pytest.raises(TypeError):
        atomic_write(target, 123)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_folder_swaps_in_only_a_complete_folder(tmp_path):
    final = tmp_path / "best"
    with atomic_folder(final) as work:
        (work / "x").write_text("1")
    assert (final / "x").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_folder(final) as work:
        (work / "x").write_text("2")
        raise RuntimeError("killed half-way")
    assert (final / "x").read_text() == "1"  # the old folder stands
    with atomic_folder(final) as work:
        (work / "y").write_text("3")
    assert sorted(p.name for p in final.iterdir()) == ["y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]


@pytest.mark.parametrize("refused_move", [1, 2])
def test_a_swap_the_system_refuses_keeps_the_old_folder_and_no_temporary(tmp_path, monkeypatch, refused_move):
    """The final rename refused (an output that is a mount point, or immutable): the export was complete,
    and 18 MB of it stayed behind under .best.tmp. Refused at the first move (the old folder aside) or
    the second (the new one in): the old folder stands, and nothing else is left."""
    import albert_lm.files as files

    final = tmp_path / "best"
    with atomic_folder(final) as work:
        (work / "x").write_text("old")
    moves, replace = [], os.replace

    def refusing(src, dst):
        moves.append(src)
        if len(moves) == refused_move:
            raise PermissionError(1, "Operation not permitted", str(dst))
        replace(src, dst)

    monkeypatch.setattr(files.os, "replace", refusing)
    with pytest.raises(PermissionError), atomic_folder(final) as work:
        (work / "x").write_text("new")
    assert (final / "x").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]


def test_json_readers_name_the_file_and_the_line(tmp_path):
    f = tmp_path / "c.json"
    with pytest.raises(FileNotFoundError, match="no config file at"):
        read_json_object(f, "config")
    f.write_text("")
    with pytest.raises(InputError, match="c.json: empty file"):
        read_json_object(f)
    f.write_text('{\n  "a": 1,\n}')
    with pytest.raises(InputError, match=r"c.json:3: not valid JSON"):
        read_json_object(f)
    lines = tmp_path / "rows.jsonl"  # a record cut short: named at its end, not at the next line's start
    lines.write_text('{"text": "a", "label": "pos"}\n{"text": "abc", "label": "pos"\n')
    with pytest.raises(
        InputError, match=r"rows.jsonl:2: not valid JSON \(column 31\): Expecting ',' delimiter"
    ):
        list(iter_jsonl(lines))
    f.write_text("[1]")
    with pytest.raises(InputError, match="expected a JSON object of predictions, got list"):
        read_json_object(f, "predictions")
    rows = tmp_path / "r.jsonl"
    rows.write_text('\ufeff{"a": 1}\n\n{"a": 2}\n[3]\n', encoding="utf-8")
    it = iter_jsonl(rows)
    assert next(it) == (1, {"a": 1}) and next(it) == (3, {"a": 2})  # BOM ignored, blank lines skipped
    with pytest.raises(InputError, match="r.jsonl:4: expected a JSON object"):
        next(it)
