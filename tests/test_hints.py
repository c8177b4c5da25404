"""What refusals suggest: the near path that exists, and the conversion of text in an 8-bit encoding."""

from __future__ import annotations

import pytest

from albert_lm.hints import legacy_encoding_hint, missing, near_path

RUSSIAN = "Привет, как дела? Он открыл дверь и вошёл в комнату.\n"


@pytest.mark.parametrize(
    ("raw", "encoding"),
    [
        ("Schöne Grüße aus München, über die Brücke.\n".encode("cp1252"), "CP1252"),
        ('He said "hello" \u2014 and left, “twice”.\n'.encode("cp1252"), "CP1252"),  # punctuation only
        (RUSSIAN.encode("cp1251"), "CP1251"),  # told apart from cp1252, which reads it as accented Latin
        (RUSSIAN.encode("koi8_r"), "KOI8-R"),  # and from cp1251, which reads it in capitals
    ],
)
def test_text_in_an_8_bit_encoding_gets_its_conversion(raw, encoding):
    """A Russian cp1251 file was told to convert from cp1252, which garbles it."""
    hint = legacy_encoding_hint(raw, "book.txt")
    conversion = f'iconv -f {encoding} -t UTF-8 "book.txt" > converted.txt'
    assert hint == f"; it reads as {encoding} text: convert it to UTF-8 first, e.g. {conversion}"
    assert '"FILE"' in legacy_encoding_hint(raw, "<stdin>")  # stdin has no name to convert


def test_damaged_utf8_gets_no_conversion_and_unknown_bytes_a_plain_note():
    assert legacy_encoding_hint("café, naïve, über\n".encode() + b"bad \xff line\n", "f") == ""
    assert "8-bit encoding (CP1252, CP1251, ...)" in legacy_encoding_hint(b"\x81 abc", "f")


def test_a_path_that_does_not_exist_names_the_near_one(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "train.tsv").write_text("x")
    assert near_path(tmp_path / "SST2") == str(tmp_path / "SST-2")  # a near spelling
    assert near_path(tmp_path / "trian.tsv") == str(tmp_path / "train.tsv")
    assert near_path(tmp_path / "trian.tsv", folders_only=True) is None
    assert near_path(tmp_path / "nowhere" / "x") is None
    assert str(missing("--data", tmp_path / "SST2")).endswith(
        f"no such file or folder; did you mean {tmp_path / 'SST-2'}?"
    )
    assert str(missing("--data", tmp_path / "zzz")) == f"--data {tmp_path / 'zzz'}: no such file or folder"
