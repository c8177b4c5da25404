"""`albert demo`'s folder: runs/demo for the bundled books, runs/demo-LANG for text of your own; a folder
holding a demo made from other text, language or settings refused before anything is written (one line
naming the folder, what differs and what to do), or emptied with --overwrite; the same command continues
where it stopped; and demo_results.json never claims settings its folder's tokenizer was not made with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from albert_lm import demo
from albert_lm.cli import main


class Stop(Exception):
    """Raised by the stand-in tokenizer stage: the test ends the demo there, after the folder is set."""


@pytest.fixture
def stages(monkeypatch):
    """The demo stopped at its tokenizer stage; returns the tokenizer folders it was asked to fill."""
    seen: list[Path] = []

    def capture(files, tok_dir, settings):
        seen.append(Path(tok_dir))
        Path(tok_dir).mkdir(
            exist_ok=True
        )  # as if made: a folder with a tokenizer is a demo of its text and settings
        raise Stop

    monkeypatch.setattr(demo, "make_tokenizer", capture)
    return seen


@pytest.fixture
def books(tmp_path):
    de = tmp_path / "books-de"
    de.mkdir()
    (de / "a.txt").write_text("Die Tür ist grün.\n\nDer König war schön.\n", encoding="utf-8")
    return de


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_each_language_gets_its_own_default_folder(tmp_path, monkeypatch, stages, books):
    """README's `albert demo --language de --text books-de/` after `albert demo`: runs/demo-de, the
    English demo's folder untouched."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        demo.run_demo()
    english = _snapshot(tmp_path / "runs" / "demo")
    with pytest.raises(Stop):
        demo.run_demo(files=[books], language="de")
    assert stages == [Path("runs/demo/tokenizer"), Path("runs/demo-de/tokenizer")]
    assert _snapshot(tmp_path / "runs" / "demo") == english and not (tmp_path / "runs/demo/text").exists()
    assert (tmp_path / "runs/demo-de/text/0000_a.txt").is_file()
    record = json.loads((tmp_path / "runs/demo-de" / demo.RECORD).read_text())
    assert record["--language"] == "de" and record["tokenizer"]["keep_accents"] is True
    with pytest.raises(Stop):  # English text of your own: runs/demo-en, not the bundled books' folder
        demo.run_demo(files=[books])
    assert stages[-1] == Path("runs/demo-en/tokenizer")


def test_a_demo_of_another_language_is_refused_before_anything_changes(tmp_path, stages, books, capsys):
    out = tmp_path / "demo-seq"
    with pytest.raises(Stop):
        demo.run_demo(out, files=[books])  # English settings on German text
    before = _snapshot(out)
    for code in ("de", "fr"):
        rc = main(
            ["demo", "--language", code, "--text", str(books), "--output", str(out), "--max-steps", "10"]
        )
        err = capsys.readouterr().err
        assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"--output {out}: holds a demo made from --language en (this run {code})" in err
        assert "give another --output" in err and "--overwrite" in err
        assert _snapshot(out) == before
    assert len(stages) == 1


def test_other_text_or_settings_are_refused_and_the_same_command_continues(tmp_path, stages, books):
    out = tmp_path / "out"
    with pytest.raises(Stop):
        demo.run_demo(out, files=[books], language="de", max_steps=10)
    with pytest.raises(Stop):  # the same again: it continues
        demo.run_demo(out, files=[books], language="de", max_steps=10)
    record = json.loads((out / demo.RECORD).read_text())
    del record["pretrain"]["max_steps"]  # as a demo made before its length was recorded
    (out / demo.RECORD).write_text(json.dumps(record))
    with pytest.raises(Stop):  # such a demo continues too
        demo.run_demo(out, files=[books], language="de", max_steps=10)
    assert len(stages) == 3
    # another length is another demo: its report would be of a 10-step schedule stretched, not of a run
    # of that length from the start
    with pytest.raises(FileExistsError, match=r"from the pretrain setting max_steps 10 \(this run 20\)"):
        demo.run_demo(out, files=[books], language="de", max_steps=20)
    other = books.parent / "more"
    other.mkdir()
    (other / "b.txt").write_text("Ein Brief lag auf dem Tisch.\n", encoding="utf-8")
    with pytest.raises(
        FileExistsError, match=r"other text \(1 files, this run 1; compared by name and sha256\)"
    ):
        demo.run_demo(out, files=[other], language="de")
    with pytest.raises(FileExistsError, match=r"other text \(1 files, this run 2;"):
        demo.run_demo(out, files=[books, other], language="de")
    with pytest.raises(FileExistsError, match=r"from the tokenizer setting vocab_size 5000 \(this run 300\)"):
        demo.run_demo(out, files=[books], language="de", vocab_size=300)
    with pytest.raises(FileExistsError, match=r"--language de \(this run en\)"):
        demo.run_demo(out)
    with pytest.raises(FileExistsError, match=r"other text \(1 files, this run 5;"):
        demo.run_demo(out, language="de", files=demo.corpus_files())
    (books / "a.txt").write_text("Die Tür ist rot.\n", encoding="utf-8")
    with pytest.raises(FileExistsError, match=r"other text \(1 files, this run 1;"):
        demo.run_demo(out, files=[books], language="de")
    assert not (out / "text" / "0000_b.txt").exists() and len(stages) == 3


def test_the_default_folder_is_named_as_the_default(tmp_path, monkeypatch, stages, books, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        demo.run_demo(files=[books], language="de")
    (books / "b.txt").write_text("Noch ein Buch.\n", encoding="utf-8")
    assert main(["demo", "--language", "de", "--text", str(books)]) != 0
    err = capsys.readouterr().err
    assert "runs/demo-de (the default --output for --language de --text): holds a demo made from other" in err


def test_overwrite_replaces_only_a_demo(tmp_path, stages, books):
    out = tmp_path / "out"
    with pytest.raises(Stop):
        demo.run_demo(out, files=[books])
    (out / "model").mkdir()
    (out / "model" / "checkpoint-5").mkdir()
    with pytest.raises(Stop):
        demo.run_demo(out, files=[books], language="de", overwrite=True)
    assert not (out / "model").exists() and json.loads((out / demo.RECORD).read_text())["--language"] == "de"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"holds files that are not a demo's \(notes.txt\)"):
            demo.run_demo(mine, files=[books], overwrite=overwrite)
    assert (mine / "notes.txt").read_text() == "mine\n" and sorted(p.name for p in mine.iterdir()) == [
        "notes.txt"
    ]
    with pytest.raises(
        ValueError, match=f"--output {books.parent} .*--text {books}"
    ):  # it would delete the text
        demo.run_demo(books.parent, files=[books], overwrite=True)
    with pytest.raises(ValueError, match=f"--output {books} is the --text {books}"):
        demo.run_demo(books, files=[books], overwrite=True)
    assert (books / "a.txt").is_file() and len(stages) == 2


def test_a_demo_stopped_before_its_tokenizer_starts_again_with_other_text(tmp_path, monkeypatch, books):
    """Nothing made but the text copies (the tokenizer failed on them): the rerun with other text is not
    refused, and the old copies go."""

    def fail(files, tok_dir, settings):
        raise ValueError("no text")

    monkeypatch.setattr(demo, "make_tokenizer", fail)
    with pytest.raises(ValueError, match="no text"):
        demo.run_demo(tmp_path / "out", files=[books / "a.txt"])
    other = tmp_path / "b.txt"
    other.write_text("Another text.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no text"):
        demo.run_demo(tmp_path / "out", files=[other])
    assert [p.name for p in (tmp_path / "out" / "text").iterdir()] == ["0000_b.txt"]


def test_a_demo_folder_without_a_record_is_judged_by_its_tokenizer(tmp_path, stages, books):
    """A folder of an albert-lm that kept no record (the English-settings demo of German text, bug (a)):
    its tokenizer's rule against this run's; the same rule continues."""
    out = tmp_path / "old"
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "remove_space": True, "keep_accents": False})
    )
    demo.prepare_texts(demo.text_sources([books]), out / "text")
    with pytest.raises(
        FileExistsError, match=r"from the tokenizer setting do_lower_case True \(this run False\)"
    ):
        demo.run_demo(out, files=[books], language="de")
    assert not (out / demo.RECORD).exists()
    with pytest.raises(Stop):
        demo.run_demo(out, files=[books])  # its own settings: it continues, now recorded
    assert json.loads((out / demo.RECORD).read_text())["--language"] == "en"


@pytest.mark.slow
def test_the_results_record_the_settings_the_tokenizer_was_made_with(tmp_path, one_thread):
    """The audit's sequence for real (tiny): English settings on German text, then --language de on the
    same folder: refused, and demo_results.json still the first run's, agreeing with its tokenizer."""
    from test_demo_languages import _german_text

    text = tmp_path / "de.txt"
    text.write_text(_german_text(), encoding="utf-8")
    out = tmp_path / "seq"
    tiny: dict[str, Any] = dict(eval_every=2, batch_size=4, vocab_size=40)
    demo.run_demo(out, max_steps=2, files=[text], **tiny)
    results = (out / "demo_results.json").read_bytes()
    with pytest.raises(FileExistsError, match="--language en"):
        demo.run_demo(out, max_steps=2, files=[text], language="de", **tiny)
    assert (out / "demo_results.json").read_bytes() == results
    saved = json.loads(results)["settings"]["tokenizer"]
    tok = json.loads((out / "tokenizer" / "tokenizer_config.json").read_text())
    assert (saved["language"], saved["do_lower_case"], saved["keep_accents"]) == ("en", True, False)
    assert (tok["do_lower_case"], tok["keep_accents"]) == (True, False)
    again = demo.run_demo(out, max_steps=2, files=[text], **tiny)  # the same again: it continues
    assert again["settings"]["pretrain"]["max_steps"] == 2 and again["language"] == "en"
