"""Tests of albert_lm.data.corpus: formats, sentence splitting, Gutenberg stripping, blocks, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from albert_lm.data.corpus import (
    Block,
    ReadStats,
    gutenberg_body,
    iter_documents,
    iter_text_lines,
    plan_blocks,
    split_sentences,
)


def _docs(path: Path, fmt: str, block_bytes: int = 1 << 20) -> list[list[str]]:
    stats = ReadStats()
    return [d for b in plan_blocks([path], block_bytes) for d in iter_documents(b, fmt, stats)]


def test_lines_format_documents(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_bytes(b"First doc one.\r\nFirst doc two.\r\n\r\n\r\nSecond doc.\r\n  \r\nThird a.\nThird b.")
    assert _docs(f, "lines") == [
        ["First doc one.", "First doc two."],
        ["Second doc."],
        ["Third a.", "Third b."],
    ]


def test_paragraphs_format_splits_sentences_not_paragraphs(tmp_path: Path) -> None:
    f = tmp_path / "book.txt"
    f.write_text(
        "CHAPTER I\n\n\u201cThey may surmise something, but they don't\n"
        "interfere. Of course, it pays Mr. Daniels.\u201d\n"
        "He left.\n\n    THE END\n",
        encoding="utf-8",
    )
    (doc,) = [[s.strip() for s in d if s.strip()] for d in _docs(f, "paragraphs")]
    assert doc[0] == "CHAPTER I"  # a heading stays a sentence of its own
    assert doc[1].startswith("\u201cThey may surmise") and doc[1].endswith("interfere.")  # split in quotes
    assert "Mr. Daniels" in doc[2]  # no split after "Mr."
    assert doc[-1].strip() == "THE END"
    assert split_sentences("One. Two? Three!") == ["One.", "Two?", "Three!"]


def test_blocks_cut_after_blank_lines_and_cover_everything(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    docs = [[f"doc {d} sentence {s} " + "x" * 50 for s in range(5)] for d in range(200)]
    f.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    blocks = plan_blocks([f], block_bytes=4096)
    assert len(blocks) > 10
    assert blocks[0].start == 0 and blocks[-1].end == f.stat().st_size
    assert all(a.end == b.start for a, b in zip(blocks, blocks[1:], strict=False))
    data = f.read_bytes()
    assert all(data[b.start - 2 : b.start] == b"\n\n" for b in blocks[1:])
    assert _docs(f, "lines", block_bytes=4096) == docs  # no document cut or lost


def test_a_document_without_blank_lines_is_cut_to_bound_memory(tmp_path: Path) -> None:
    f = tmp_path / "one_doc.txt"
    f.write_text("".join(f"sentence {i} of a very long document\n" for i in range(3000)), encoding="utf-8")
    blocks = plan_blocks([f], block_bytes=4096)
    assert len(blocks) > 5 and max(b.nbytes for b in blocks) <= 3 * 4096 + 100


GUTENBERG = (
    "The Project Gutenberg EBook of Test\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK TEST ***\r\n\r\n"
    "Body text here.\r\n\r\nMore body.\r\n\r\nEnd of the Project Gutenberg EBook of Test\r\n\r\n"
    "*** END OF THIS PROJECT GUTENBERG EBOOK TEST ***\r\nLicense text.\r\n"
)
OLD_GUTENBERG = (
    "Header\n***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\nlegal\n"
    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\nOld body.\n\n"
    "End of The Project Gutenberg Etext of Test\n"
)


def test_gutenberg_headers_and_footers_are_stripped(tmp_path: Path) -> None:
    for name, text, body in [
        ("new.txt", GUTENBERG, ["Body text here.", "More body."]),
        ("old.txt", OLD_GUTENBERG, ["Old body."]),
    ]:
        f = tmp_path / name
        f.write_text(text, encoding="utf-8")
        lines = [ln for ln in iter_text_lines(f, strip_gutenberg=True) if ln.strip()]
        assert lines == body
    plain = tmp_path / "plain.txt"  # not a book: read whole (the commands say which files were)
    plain.write_text("no markers here\n", encoding="utf-8")
    assert [ln for ln in iter_text_lines(plain, strip_gutenberg=True) if ln.strip()] == ["no markers here"]
    cut = tmp_path / "cut.txt"  # a book cut short: its START marker, no END marker
    cut.write_text(GUTENBERG.split("End of the Project")[0], encoding="utf-8")
    with pytest.raises(ValueError, match="no Project Gutenberg END marker"):
        list(iter_text_lines(cut, strip_gutenberg=True))


def test_every_shared_book_has_its_markers_found(albert_data: Path) -> None:
    books = sorted((albert_data / "pretrain" / "gutenberg" / "books").glob("*.txt"))
    assert len(books) == 253
    for book in books:
        start, end = gutenberg_body(book)
        size = book.stat().st_size
        assert 0 < start < end < size
        assert size - end < 25_000  # the license footer, not the book, is what is cut


def test_bad_input_messages(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty input file"):
        plan_blocks([empty], 4096)
    binary = tmp_path / "bin.dat"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    with pytest.raises(ValueError, match="binary file"):
        plan_blocks([binary], 4096)
    with pytest.raises(FileNotFoundError, match="no such input file"):
        plan_blocks([tmp_path / "missing.txt"], 4096)

    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"good line\nbad caf\xe9 line\nanother good line\n")
    with pytest.raises(ValueError, match=r"latin1.txt: invalid UTF-8 at byte offset 17") as e:
        _docs(bad, "lines")
    # Latin-1 text: the conversion is the way on (skipping dropped 70% of a German book, every umlaut's line)
    assert "it reads as CP1252 text: convert it to UTF-8 first, e.g. iconv -f CP1252 -t UTF-8" in str(e.value)
    assert "--skip-invalid-utf8 would drop every line holding a non-ASCII letter" in str(e.value)
    stats = ReadStats()
    with caplog.at_level("WARNING", logger="albert_lm"):
        docs = [
            d
            for b in plan_blocks([bad], 4096)
            for d in iter_documents(b, "lines", stats, skip_invalid_utf8=True)
        ]
    assert docs == [["good line", "another good line"]] and stats.skipped_invalid_utf8 == 1
    assert (
        len(caplog.records) == 1 and "skipped 1 of 4 lines of invalid UTF-8" in caplog.text
    )  # not one a line
    damaged = tmp_path / "damaged.txt"  # UTF-8 with one bad byte: no conversion offered
    damaged.write_bytes("café\n".encode() + b"bad \xff line\n")
    with pytest.raises(ValueError, match="pass --skip-invalid-utf8") as e:
        _docs(damaged, "lines")
    assert "reads as" not in str(e.value)

    long = tmp_path / "long.txt"
    long.write_bytes(b"short line\n" + b"x" * (10 << 20) + b"\n")
    with pytest.raises(ValueError, match=r"line at byte offset 11 is 10485760 bytes"):
        _docs(long, "lines")


def test_block_reading_is_bounded_to_its_range(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("a\n\nb\n\nc\n", encoding="utf-8")
    stats = ReadStats()
    assert list(iter_documents(Block(str(f), 3, 6), "lines", stats)) == [["b"]]
    assert stats.documents == 1 and stats.sentences == 1
