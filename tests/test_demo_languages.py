"""`albert demo --language CODE --text ...`: the demo's road in another language (its tokenizer rule,
its text prepared, its own fill-mask probes with a word rule that suits the script), and its refusals."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from albert_lm import demo
from albert_lm.cli import main
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.demo import DEMO_LANGUAGES, LANGUAGE_PROBES


class _Answers:
    """A stand-in for the demo's fill-mask model: fixed top 5s by sentence."""

    answers: dict[str, list[str]] = {}

    def __init__(self, model_dir):
        pass

    def __call__(self, sentence, top_k=5):
        return self.answers[sentence]


def test_probes_per_language_count_words_by_the_script(monkeypatch):
    _Answers.answers = {
        "x [MASK].": ["\u2581der", "Tür", "\u2581die", ",", "\u2581und"],  # "Tür" inside a word: no
        "y [MASK].": ["\u2581der", "\u2581Tür", "\u2581die", ",", "\u2581und"],
        "z [MASK].": ["\u2581the", "\u2581Door", "\u2581a", ",", "\u2581of"],
        "馬[MASK]。": ["，", "的", "馬", "了", "他"],  # no word-start mark in Chinese: any piece counts
    }
    monkeypatch.setattr(demo, "_FillMask", _Answers)
    german = demo.probe(
        "unused", [("x [MASK].", ("Tür",)), ("y [MASK].", ("Tür",)), ("y [MASK].", ("tür",))], "de"
    )
    assert [p["hit"] for p in german] == [False, True, False]  # German is cased: tür is not Tür
    assert [p["hit"] for p in demo.probe("unused", [("z [MASK].", ("door",))], "en")] == [True]  # lower-cased
    assert [p["hit"] for p in demo.probe("unused", [("馬[MASK]。", ("馬",))], "zh")] == [True]
    assert [p["hit"] for p in demo.probe("unused", [("馬[MASK]。", ("馬",))], "en")] == [False]


def test_every_language_has_probes_with_one_mask():
    assert DEMO_LANGUAGES[0] == "en" and set(DEMO_LANGUAGES[1:]) == {"de", "fr", "ru", "zh"}
    for code, probes in LANGUAGE_PROBES.items():
        assert len(probes) == 5, code
        assert all(s.count("[MASK]") == 1 and words for s, words in probes), code


def test_the_next_step_is_a_fill_mask_probe_in_the_demo_language():
    """A German demo suggested `albert fill-mask ... --text "The cat sat on the [MASK]."`."""
    from albert_lm.demo.report import next_steps

    german = demo.fill_mask_example("de")
    assert german in [s for s, _ in LANGUAGE_PROBES["de"]] and "[MASK]" in german
    assert f'--text "{german}"' in next_steps(Path("runs/demo-de"), german)
    assert demo.fill_mask_example("en") == "She wrote a [MASK] to her mother."


def test_other_languages_need_text(tmp_path, capsys):
    with pytest.raises(ValueError, match="bundles English books only; give --text") as e:
        demo.run_demo(tmp_path / "out", language="de")
    assert "gutenberg.org" in str(e.value) and "shared data" not in str(e.value)  # a place any user can reach
    assert main(["demo", "--language", "ru", "--output", str(tmp_path / "out")]) != 0
    assert "give --text" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):  # no such language: argparse's choices
        main(["demo", "--language", "xx", "--text", str(tmp_path)])
    assert main(["demo", "--language", "ja", "--text", str(tmp_path), "--output", str(tmp_path / "out")]) != 0
    assert (
        "the demo has probes for en, de, fr, ru, zh" in capsys.readouterr().err
    )  # a tokenizer language, no probes
    assert not (tmp_path / "out").exists()


def test_prepare_texts_cuts_gutenberg_headers_where_a_file_has_them(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    body = "Es war einmal ein König.\n\nDer König hatte drei Töchter.\n"
    (books / "a.txt").write_text(
        "The Project Gutenberg eBook\r\n\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\n"
        + body
        + "*** END OF THE PROJECT GUTENBERG EBOOK X ***\r\nlicence text\r\n"
    )
    (books / "b.txt").write_text(body)
    copies = demo.prepare_texts(demo.text_sources([books]), tmp_path / "text")
    assert [c.name for c in copies] == ["0000_a.txt", "0001_b.txt"]
    assert "licence" not in copies[0].read_text() and "König" in copies[0].read_text()
    assert copies[1].read_text() == body
    assert demo.prepare_texts(demo.text_sources([books]), tmp_path / "text") == copies  # kept on a rerun


def _german_text(n: int = 1500) -> str:
    rng = random.Random(0)
    words = ["Haus", "Tür", "schön", "Mädchen", "Straße", "über", "König", "Größe", "grün", "Brief", "Tisch"]
    small = ["der", "die", "das", "und", "ist", "war", "nicht", "mit", "auf", "ein"]
    paragraphs = []
    for _ in range(n // 5):
        sents = [
            " ".join(rng.choice(words + small) for _ in range(rng.randint(5, 12))).capitalize() + "."
            for _ in range(5)
        ]
        paragraphs.append(" ".join(sents))
    return "\n\n".join(paragraphs) + "\n"


@pytest.mark.slow
def test_german_demo_end_to_end_keeps_case_and_accents(tmp_path, one_thread, capsys):
    text = tmp_path / "de.txt"
    text.write_text(_german_text())
    report = demo.run_demo(
        tmp_path / "out", max_steps=3, files=[text], language="de", eval_every=2, batch_size=4, vocab_size=60
    )
    assert report["language"] == "de" and len(report["probes"]) == 5 and report["more_probes"] == []
    assert report["settings"]["data"]["input_format"] == "auto"
    tok = AlbertTokenizer.from_pretrained(tmp_path / "out" / "tokenizer")
    assert tok.decode(tok.encode("Die Tür ist schön.", add_special_tokens=False)) == "Die Tür ist schön."
    saved = json.loads((tmp_path / "out" / "demo_results.json").read_text())
    assert (
        saved["settings"]["tokenizer"]["keep_accents"] is True
        and saved["settings"]["tokenizer"]["language"] == "de"
    )
    assert "more probes" not in demo.format_report(report)
    assert (
        f"all of it in {tmp_path / 'out' / 'demo_results.json'}" in capsys.readouterr().out
    )  # and what next
    again = demo.run_demo(
        tmp_path / "out", max_steps=3, files=[text], language="de", eval_every=2, batch_size=4, vocab_size=60
    )  # the same demo again: its stages are found done, and their times stay what they took
    assert again["seconds"]["pretrain_s"] >= report["seconds"]["pretrain_s"] > 0
    assert again["seconds"]["tokenizer_s"] >= report["seconds"]["tokenizer_s"]


def test_chinese_demo_gets_room_for_its_characters(tmp_path, monkeypatch):
    seen = {}

    class Stop(Exception):
        pass

    def capture(files, tok_dir, settings):
        seen.update(settings)
        raise Stop

    monkeypatch.setattr(demo, "make_tokenizer", capture)
    text = tmp_path / "zh.txt"
    text.write_text("兩人騎著馬出城去了。\n")
    with pytest.raises(Stop):
        demo.run_demo(tmp_path / "out", files=[text], language="zh")
    assert (
        seen["vocab_size"] == 8000
        and seen["add_dummy_prefix"] is False
        and seen["character_coverage"] == 0.9995
    )
    with pytest.raises(Stop):
        demo.run_demo(tmp_path / "out2", files=[text], language="zh", vocab_size=9000)  # an override wins
    assert seen["vocab_size"] == 9000
