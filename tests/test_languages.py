"""Pretraining beyond lower-cased English: the normalization rule per language (recorded with the
tokenizer, applied everywhere, part of its fingerprint), text without spaces (sentence ends, wrapped lines,
masking units), the corpus formats users have (compressed, JSON Lines, Parquet, folders, globs), and the
road tokenizer -> data -> pretraining in each script. Generated corpora throughout; the shared books
(../shared/data/pretrain/multilingual) where a test says so, skipped when they are absent."""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import json
import logging
import lzma
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import data_argv, finetune_argv, pretrain_argv, tokenizer_argv

from albert_lm.cli import main
from albert_lm.data.corpus import (
    ReadStats,
    guess_format,
    gutenberg_body,
    iter_documents,
    iter_text_lines,
    plan_blocks,
    split_sentences,
)
from albert_lm.data.examples import DataConfig
from albert_lm.data.languages import LANGUAGES
from albert_lm.data.masking import is_start_piece, word_start_table
from albert_lm.data.shards import create_pretraining_data
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.tokenizer_training import train_tokenizer
from albert_lm.data.unspaced import CLOSERS

WORDS = {
    "de": [
        "schön",
        "Mädchen",
        "über",
        "Größe",
        "Bär",
        "Straße",
        "Haus",
        "Hund",
        "Katze",
        "gehen",
        "sehen",
        "Stadt",
        "Fluß",
        "Brücke",
        "Äpfel",
        "Öl",
        "müde",
        "grün",
        "weiß",
        "Sonne",
        "Mond",
        "Wald",
        "Feld",
        "lesen",
        "schreiben",
    ],
    "fr": [
        "où",
        "été",
        "garçon",
        "à",
        "déjà",
        "très",
        "élève",
        "fenêtre",
        "château",
        "forêt",
        "maison",
        "chien",
        "chat",
        "aller",
        "voir",
        "ville",
        "fleuve",
        "pont",
        "pomme",
        "huile",
        "fatigué",
        "vert",
        "blanc",
        "soleil",
        "lune",
        "bois",
        "champ",
        "lire",
        "écrire",
    ],
    "ru": [
        "мой",
        "ещё",
        "твой",
        "ёлка",
        "чай",
        "большой",
        "дом",
        "книга",
        "город",
        "река",
        "мост",
        "яблоко",
        "масло",
        "зелёный",
        "белый",
        "солнце",
        "луна",
        "лес",
        "поле",
        "читать",
        "писать",
        "идти",
        "видеть",
        "кошка",
        "собака",
    ],
}
HAN = "天下大勢分久必合國人問其故先生道從此定矣正乃上心地理中和見日之面一般山水風雲氣色"


def _spaced_corpus(path: Path, lang: str, docs: int = 40, seed: int = 0) -> Path:
    """Documents of a sentence per line (google-research's format) in a language written with spaces."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(rng.randint(4, 8)):
                words = rng.choices(WORDS[lang], k=rng.randint(5, 11))
                f.write(" ".join(words).capitalize() + rng.choice(".!?") + "\n")
            f.write("\n")
    return path


def _chinese_sentence(rng: random.Random) -> str:
    body = "".join(rng.choice(HAN) for _ in range(rng.randint(6, 16)))
    if rng.random() < 0.3:
        return f"{body[:3]}道：「{body[3:]}{rng.choice('。！？')}」"
    return body + rng.choice("。！？")


def _chinese_book(path: Path, paragraphs: int = 150, seed: int = 0, width: int = 30) -> Path:
    """Paragraphs of Chinese sentences (no spaces), wrapped at `width` characters inside words, a blank
    line between paragraphs: the layout of the Project Gutenberg Chinese books."""
    rng = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        text = "".join(_chinese_sentence(rng) for _ in range(rng.randint(3, 7)))
        out.append("\n".join(text[i : i + width] for i in range(0, len(text), width)))
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")
    return path


SIZES = {"de": "60", "fr": "50", "ru": "50", "zh": "80"}  # what the generated corpora support


def _train(argv: list[str]) -> None:
    assert main(["tokenizer", "train", *argv]) == 0


# ------------------------------------------------------------------------------------ normalization
@pytest.mark.parametrize("lang", ["de", "fr", "ru"])
def test_accents_survive_with_the_language_and_round_trip(tmp_path, lang) -> None:
    corpus = _spaced_corpus(tmp_path / "c.txt", lang)
    _train(
        [
            "--input",
            str(corpus),
            "--language",
            lang,
            "--vocab-size",
            SIZES[lang],
            "--output",
            str(tmp_path / "tok"),
        ]
    )
    tok = AlbertTokenizer.from_pretrained(tmp_path / "tok")
    saved = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert saved["keep_accents"] is True and saved["do_lower_case"] is LANGUAGES[lang].do_lower_case
    for line in iter_text_lines(corpus):
        if line.strip():
            want = tok.sp.normalize(tok.preprocess(line)).replace("\u2581", " ").strip()
            assert tok.decode(tok.encode(line, add_special_tokens=False)) == want
    word = WORDS[lang][0]  # schön, où, мой: the accent (or the breve of й) is kept
    assert tok.decode(tok.encode(word, add_special_tokens=False)) == word
    assert 1 not in tok.encode(" ".join(WORDS[lang]), add_special_tokens=False)  # no <unk>: coverage 1.0


def test_the_english_default_still_removes_accents_and_options_win_over_the_language(tmp_path) -> None:
    corpus = _spaced_corpus(tmp_path / "c.txt", "de")
    _train(["--input", str(corpus), "--vocab-size", "50", "--output", str(tmp_path / "en")])
    en = AlbertTokenizer.from_pretrained(tmp_path / "en")
    assert (en.do_lower_case, en.keep_accents) == (True, False)
    assert en.decode(en.encode("Schön", add_special_tokens=False)) == "schon"
    _train(
        [
            "--input",
            str(corpus),
            "--language",
            "de",
            "--no-cased",
            "--no-keep-accents",
            "--vocab-size",
            "50",
            "--output",
            str(tmp_path / "de"),
        ]
    )
    de = AlbertTokenizer.from_pretrained(tmp_path / "de")
    assert (de.do_lower_case, de.keep_accents) == (True, False)
    with pytest.raises(SystemExit):  # argparse refuses it, naming the choices
        main(["tokenizer", "train", "--input", str(corpus), "--language", "xx", "--output", "x"])


def test_the_rule_is_in_the_fingerprint_and_a_bare_model_file_takes_the_rule_beside_it(
    tmp_path, caplog
) -> None:
    corpus = _spaced_corpus(tmp_path / "c.txt", "de")
    _train(
        ["--input", str(corpus), "--language", "de", "--vocab-size", "60", "--output", str(tmp_path / "tok")]
    )
    tok = AlbertTokenizer.from_pretrained(tmp_path / "tok")
    bare = AlbertTokenizer.from_pretrained(tmp_path / "tok" / "spiece.model")
    assert (bare.do_lower_case, bare.keep_accents) == (False, True) and bare.fingerprint == tok.fingerprint
    english = AlbertTokenizer(tok.model_file)  # the same pieces under the released models' rule
    assert english.fingerprint != tok.fingerprint
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tok.model_file, alone / "spiece.model")
    with caplog.at_level(logging.WARNING):
        AlbertTokenizer.from_pretrained(alone / "spiece.model")
    assert "never produces" in caplog.text and "--cased or --keep-accents" in caplog.text


def test_data_and_model_of_different_rules_are_refused(tmp_path, capsys) -> None:
    corpus = _spaced_corpus(tmp_path / "c.txt", "fr", docs=60)
    _train(
        ["--input", str(corpus), "--language", "fr", "--vocab-size", "50", "--output", str(tmp_path / "tok")]
    )
    other = tmp_path / "tok-no-accents"  # the same spiece.model, saved with accents removed
    other.mkdir()
    shutil.copy(tmp_path / "tok" / "spiece.model", other / "spiece.model")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "keep_accents": False}))
    for tok, data in ((tmp_path / "tok", "data"), (other, "data-other")):
        assert main(data_argv(corpus, tok, tmp_path / data, "--max-seq-length", "32", "--workers", "1",
                              "--no-progress")) == 0  # fmt: skip
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"]["keep_accents"] is True
    run = tmp_path / "run"
    assert main(pretrain_argv(tmp_path / "data", run, "--preset", "albert-tiny", "--max-steps", "2",
                              "--batch-size", "4", "--warmup-steps", "1", "--seed", "1")) == 0  # fmt: skip
    capsys.readouterr()
    argv = pretrain_argv(tmp_path / "data-other", tmp_path / "run2", "--init-from", str(run), "--preset",
                         "albert-tiny", "--max-steps", "2")  # fmt: skip
    assert main(argv) == 1
    assert "fingerprint" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ without spaces
def test_chinese_sentence_ends_closing_quotes_and_wrapped_lines(tmp_path) -> None:
    sentences = split_sentences("王冕道：「娘說的是。」當夜商議定了。此開卷第一回也．作者自云：好！")
    assert sentences == ["王冕道：「娘說的是。」", "當夜商議定了。", "此開卷第一回也．", "作者自云：好！"]
    assert split_sentences("子時得陽氣，而丑則雞鳴﹔寅不通光；辰時食後") == [
        "子時得陽氣，而丑則雞鳴﹔寅不通光；辰時食後"
    ]
    assert split_sentences("圓周率約為３．１４。") == ["圓周率約為３．１４。"]  # a decimal point
    english = ["He said “Go.”", "Then left.", "’Tis fine."]  # English closers stay where Bling Fire puts them
    assert split_sentences(" ".join(english)) == english
    book = _chinese_book(tmp_path / "book.txt")
    docs = [d for b in plan_blocks([book], 1 << 20) for d in iter_documents(b, "paragraphs", ReadStats())]
    got = [s.strip() for d in docs for s in d if s.strip()]
    assert not [s for s in got if s[0] in CLOSERS]
    assert not [s for s in got if " " in s]  # a wrapped line break is no space between two characters
    text = book.read_text().replace("\n", "")
    assert "".join(got) == text  # nothing lost or added


def test_long_lines_of_chinese_fit_sentencepiece_without_spaces_added() -> None:
    from albert_lm.data.training_lines import fit_line

    text = "".join(f"天下大勢分久必合{k}。" for k in range(3000))
    parts = fit_line(text, 1000)
    assert "".join(parts) == text and max(len(p.encode()) for p in parts) <= 1000
    english = " ".join(f"Sentence number {k}." for k in range(3000))
    assert " ".join(fit_line(english, 1000)) == english


def test_masking_units_pieces_in_chinese_words_elsewhere() -> None:
    assert all(is_start_piece(p) for p in ["天下", "道", "。", "「", "▁中國", "ですか"])  # a piece is a word
    assert not is_start_piece("ön") and not is_start_piece("ать") and not is_start_piece("é")  # continue
    assert is_start_piece("▁sch") and is_start_piece("990") and is_start_piece(",")  # as the reference
    pieces = ["<pad>", "▁sch", "ön", "▁мо", "й", "天", "下", "▁the", "re"]
    assert word_start_table(pieces).tolist() == [True, True, False, True, False, True, True, True, False]
    reference = word_start_table(pieces, reference=True).tolist()
    assert reference == [True, True, True, True, True, True, True, True, False]


def test_released_model_word_starts_are_the_references(albert_data) -> None:
    tok = AlbertTokenizer.from_pretrained(albert_data / "tokenizer" / "albert-30k")
    pieces = [tok.sp.id_to_piece(i) for i in range(tok.vocab_size)]
    assert np.array_equal(word_start_table(pieces), word_start_table(pieces, reference=True))


def test_chinese_tokenizer_has_no_dummy_prefix_and_sees_whole_words(tmp_path) -> None:
    book = _chinese_book(tmp_path / "book.txt", paragraphs=300)
    _train(
        ["--input", str(book), "--language", "zh", "--vocab-size", "80", "--output", str(tmp_path / "tok")]
    )
    tok = AlbertTokenizer.from_pretrained(tmp_path / "tok")
    assert tok.tokenize("天下大勢")[0] != "\u2581"  # no lone word start before every sentence
    assert "\u2581" not in "".join(tok.tokenize("天下大勢，分久必合。"))
    assert tok.decode(tok.encode("天下　山水", add_special_tokens=False)) == "天下 山水"  # a space stays one


def test_chinese_books_split_into_sentences(albert_data) -> None:
    for book in sorted((albert_data / "pretrain" / "multilingual" / "zh").glob("*.txt")):
        stats = ReadStats()
        docs = [d for b in plan_blocks([book], 1 << 20) for d in iter_documents(b, "paragraphs", stats)]
        sentences = [s.strip() for d in docs for s in d if s.strip()]
        assert not [s for s in sentences if s[0] in CLOSERS], book.name
        joined = "\n".join(sentences)
        space = re.compile("[\u4e00-\u9fff] [\u4e00-\u9fff]")  # a space inside Chinese: only the book's own
        assert len(space.findall(joined)) <= len(space.findall(book.read_text(encoding="utf-8")))
        assert not re.search("．[\u4e00-\u9fff]", joined), (
            book.name
        )  # the full-width full stop ends sentences
        assert 10_000 < len(sentences) < 40_000, (book.name, len(sentences))


# ------------------------------------------------------------------------------------ input formats
def _formats(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """A German corpus as plain text, and the same text compressed every way available."""
    plain = tmp_path / "plain" / "c.txt"
    plain.parent.mkdir()
    _spaced_corpus(plain, "de", docs=60)
    data = plain.read_bytes()
    out = {}
    for suffix, write in ((".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)):
        out[suffix] = tmp_path / suffix[1:] / f"c.txt{suffix}"
        out[suffix].parent.mkdir()
        out[suffix].write_bytes(write(data))
    if importlib.util.find_spec("zstandard"):
        import zstandard

        out[".zst"] = tmp_path / "zst" / "c.txt.zst"
        out[".zst"].parent.mkdir()
        out[".zst"].write_bytes(zstandard.ZstdCompressor().compress(data))
    tok = tmp_path / "tok"
    train_tokenizer([plain], tok, vocab_size=50, num_threads=1, keep_accents=True)
    return plain, tok, out


def _shards(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.glob("*/*/*.npy"))}


def test_compressed_text_gives_the_same_tokenizer_and_the_same_data(tmp_path) -> None:
    plain, tok, compressed = _formats(tmp_path)
    cfg = DataConfig(max_seq_length=32, block_bytes=2048, shard_bytes=4096)
    create_pretraining_data([plain], tok, tmp_path / "data-plain", cfg, num_workers=1, progress=False)
    want = _shards(tmp_path / "data-plain")
    for suffix, path in compressed.items():
        create_pretraining_data([path], tok, tmp_path / f"data{suffix}", cfg, num_workers=2, progress=False)
        assert _shards(tmp_path / f"data{suffix}") == want, suffix
        trained = train_tokenizer(
            [path], tmp_path / f"tok{suffix}", vocab_size=50, num_threads=1, keep_accents=True
        )
        assert trained.model_file.read_bytes() == (tok / "spiece.model").read_bytes(), suffix
        assert list(iter_text_lines(path)) == list(iter_text_lines(plain)), suffix
        assert guess_format(path) == guess_format(plain), suffix  # --format auto reads the decompressed text
    book = tmp_path / "book.txt"
    book.write_text(
        "Header\n*** START OF THE BOOK ***\n" + plain.read_text() + "*** END OF THE BOOK ***\nLicence\n"
    )
    (tmp_path / "book.txt.gz").write_bytes(gzip.compress(book.read_bytes()))
    assert gutenberg_body(tmp_path / "book.txt.gz") == gutenberg_body(book)
    assert list(iter_text_lines(tmp_path / "book.txt.gz", strip_gutenberg=True)) == list(
        iter_text_lines(book, strip_gutenberg=True)
    )


def test_zstd_without_its_package_is_a_clear_error(tmp_path, capsys, monkeypatch) -> None:
    import albert_lm.data.sources as sources

    monkeypatch.setitem(sources._EXTRAS, ".zst", ("no_such_zstd_module", "zstd", "a .zst file"))
    (tmp_path / "c.txt.zst").write_bytes(b"(\xb5/\xfd...")
    assert (
        main(["tokenizer", "train", "--input", str(tmp_path / "c.txt.zst"), "--output", str(tmp_path / "t")])
        == 1
    )
    assert "pip install -e '.[zstd]' in the albert-lm clone" in capsys.readouterr().err


def test_damaged_compressed_text_names_the_file_and_the_offset_in_the_text(tmp_path, capsys) -> None:
    text = "Ein Satz hier. Noch einer dort.\n" * 4000
    raw = text.encode()
    (tmp_path / "bad.txt.gz").write_bytes(gzip.compress(raw[:70001] + b"\xff" + raw[70001:]))
    (tmp_path / "nul.txt.xz").write_bytes(lzma.compress(raw[:90000] + b"\0" + raw[90000:]))
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(raw)[:-12])  # the end of the stream cut off
    (tmp_path / "junk.txt.bz2").write_bytes(b"BZh9 this is not bzip2 data at all")
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))
    cases = {
        "bad.txt.gz": "invalid UTF-8 at byte offset 70001, line 2188",
        "nul.txt.xz": "NUL byte at offset 90000",
        "cut.txt.gz": "truncated",
        "junk.txt.bz2": "damaged data",
        "empty.txt.gz": "no text in it after decompressing",
    }
    for name, message in cases.items():
        for command in (
            ["tokenizer", "train", "--vocab-size", "50"],
            ["data", "create", "--tokenizer", str(_tiny_tokenizer(tmp_path)), "--no-progress"],
        ):
            out = tmp_path / "out"
            assert main([*command, "--input", str(tmp_path / name), "--output", str(out)]) == 1
            err = capsys.readouterr().err
            assert message in err and name in err and "Traceback" not in err, (name, err)
            shutil.rmtree(out, ignore_errors=True)
    assert main(tokenizer_argv(tmp_path / "bad.txt.gz", tmp_path / "skipped", "--skip-invalid-utf8",
                               "--vocab-size", "27")) == 0  # fmt: skip


def _tiny_tokenizer(tmp_path: Path) -> Path:
    tok = tmp_path / "tiny-tok"
    if not tok.is_dir():
        train_tokenizer([_spaced_corpus(tmp_path / "tiny.txt", "de")], tok, vocab_size=50, num_threads=1)
    return tok


def test_json_lines_a_document_a_record_with_the_text_column(tmp_path, capsys) -> None:
    rng = random.Random(1)
    docs = [
        [" ".join(rng.choices(WORDS["fr"], k=8)) + "." for _ in range(rng.randint(2, 5))] for _ in range(40)
    ]
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for k, doc in enumerate(docs):
            f.write(json.dumps({"id": k, "content": "\n".join(doc)}, ensure_ascii=False) + "\n")
    tok = tmp_path / "tok"
    _train(
        [
            "--input",
            str(path),
            "--text-column",
            "content",
            "--language",
            "fr",
            "--vocab-size",
            "50",
            "--output",
            str(tok),
        ]
    )
    stats = ReadStats()
    got = [
        d for b in plan_blocks([path], 1024) for d in iter_documents(b, "lines", stats, text_column="content")
    ]
    assert got == docs and stats.documents == len(docs)  # a record is a document, never joined or cut
    assert main(data_argv(path, tok, tmp_path / "d", "--text-field", "content", "--format", "lines",
                          "--max-seq-length", "32", "--no-progress")) == 0  # fmt: skip
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["config"]["text_column"] == "content"
    with pytest.raises(
        ValueError, match="line [0-9]+: no field 'text' \\(its fields: id, content\\); pass --text-column"
    ):
        create_pretraining_data([path], tok, tmp_path / "d2", DataConfig(max_seq_length=32), progress=False)
    (tmp_path / "bad.jsonl").write_text('{"text": "ok."}\n{"text": 3}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl: line 2: field 'text' holds a int"):
        list(iter_text_lines(tmp_path / "bad.jsonl"))


def test_parquet_rows_or_the_extra_to_install(tmp_path, capsys) -> None:
    path = tmp_path / "c.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        path.write_bytes(b"PAR1 not really")
        assert main(["tokenizer", "train", "--input", str(path), "--output", str(tmp_path / "t")]) == 1
        assert "pip install -e '.[parquet]' in the albert-lm clone" in capsys.readouterr().err
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(2)
    texts = ["\n".join(" ".join(rng.choices(WORDS["ru"], k=7)) + "." for _ in range(4)) for _ in range(50)]
    pq.write_table(pa.table({"body": [*texts, None], "n": list(range(51))}), path, row_group_size=16)
    got = [
        d
        for b in plan_blocks([path], 1024, text_column="body")
        for d in iter_documents(b, "lines", ReadStats(), text_column="body")
    ]
    assert got == [t.split("\n") for t in texts]
    assert main(tokenizer_argv(path, tmp_path / "t", "--text-column", "nope")) == 1
    assert "--text-column nope: no such column (columns: body, n)" in capsys.readouterr().err
    _train(
        [
            "--input",
            str(path),
            "--text-column",
            "body",
            "--language",
            "ru",
            "--vocab-size",
            "44",
            "--output",
            str(tmp_path / "tok"),
        ]
    )


def test_folders_and_globs_of_many_files(tmp_path, caplog) -> None:
    rng = random.Random(3)
    for k in range(300):
        sub = tmp_path / "corpus" / f"part{k % 7}" / ("deep" if k % 3 else "")
        sub.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choices(WORDS["de"], k=6)) + "." for _ in range(rng.randint(2, 4))]
        (sub / f"doc{k:04d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "corpus" / ".hidden.txt").write_bytes(b"\0binary")
    files = sorted(str(p) for p in (tmp_path / "corpus").rglob("doc*.txt"))
    from albert_lm.data.sources import expand_inputs

    assert sorted(expand_inputs([tmp_path / "corpus"])) == files
    (tmp_path / "corpus" / "MANIFEST.tsv").write_text("id\ttitle\n1\tA book\n")  # a catalogue beside the text
    with caplog.at_level(logging.WARNING, logger="albert_lm.data.sources"):
        assert len(expand_inputs([tmp_path / "corpus"])) == len(files) + 1
    assert "1 file(s) that look like tables or documents, not text (MANIFEST.tsv)" in caplog.text
    (tmp_path / "corpus" / "MANIFEST.tsv").unlink()
    assert sorted(expand_inputs([str(tmp_path / "corpus" / "**" / "*.txt")])) == files
    with pytest.raises(FileNotFoundError, match="no file matches"):
        expand_inputs([str(tmp_path / "corpus" / "*.nothing")])
    tok = tmp_path / "tok"
    _train(
        ["--input", str(tmp_path / "corpus"), "--language", "de", "--vocab-size", "60", "--output", str(tok)]
    )
    cfg = DataConfig(max_seq_length=32, input_format="lines")
    manifest = create_pretraining_data(
        [str(tmp_path / "corpus" / "**" / "*.txt")], tok, tmp_path / "d", cfg, progress=False
    )
    assert len(manifest["inputs"]) == 300 and manifest["summary"]["examples"] > 0
    with pytest.raises(ValueError, match="lies inside the --input folder"):
        create_pretraining_data([tmp_path / "corpus"], tok, tmp_path / "corpus" / "out", cfg, progress=False)


def test_iter_text_lines_streams_the_lines_it_always_gave(tmp_path) -> None:
    rng = random.Random(4)
    lines = ["".join(rng.choice("abc dé\t") for _ in range(rng.randint(0, 300))) for _ in range(12_000)]
    path = tmp_path / "big.txt"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    assert path.stat().st_size > 1 << 20  # read in several pieces
    assert list(iter_text_lines(path)) == [*lines, ""]
    path.write_bytes("\n".join(lines).encode())  # no final line end
    assert list(iter_text_lines(path)) == lines


# ------------------------------------------------------------------------------------ the road per script
@pytest.mark.slow
@pytest.mark.parametrize("lang", ["de", "fr", "ru", "zh"])
def test_tokenizer_data_and_pretraining_in_each_script(tmp_path, lang) -> None:
    corpus = (
        _chinese_book(tmp_path / "c.txt")
        if lang == "zh"
        else _spaced_corpus(tmp_path / "c.txt", lang, docs=80)
    )
    size = SIZES[lang]
    _train(
        ["--input", str(corpus), "--language", lang, "--vocab-size", size, "--output", str(tmp_path / "tok")]
    )
    assert main(data_argv(corpus, tmp_path / "tok", tmp_path / "data", "--max-seq-length", "32",
                          "--eval-fraction", "0.1", "--no-progress")) == 0  # fmt: skip
    run = tmp_path / "run"
    assert main(pretrain_argv(tmp_path / "data", run, "--preset", "albert-tiny", "--max-steps", "3",
                              "--batch-size", "4", "--warmup-steps", "1", "--seed", "2")) == 0  # fmt: skip
    tok = AlbertTokenizer.from_pretrained(run)  # the model folder keeps the language's rule
    assert (tok.do_lower_case, tok.keep_accents) == (LANGUAGES[lang].do_lower_case, True)
    # the cards name the language the tokenizer was trained for (the hub's `language` field)
    assert f"language:\n- {lang}\n" in (run / "README.md").read_text(encoding="utf-8")
    # fine-tuning and prediction on text of the same script, the rule carried through
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()][:40]
    task = tmp_path / "task"
    task.mkdir()
    for split, rows in (("train", lines[:30]), ("dev", lines[30:])):
        records = [{"text": t, "label": "a" if i % 2 else "b"} for i, t in enumerate(rows)]
        (task / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        )
    ft = tmp_path / "ft"
    assert main(finetune_argv("classification", run, task, ft, "--max-steps", "2", "--batch-size", "8",
                              "--no-plot", "-q")) == 0  # fmt: skip
    assert AlbertTokenizer.from_pretrained(ft / "best").keep_accents
    assert f"| language | {lang} (the tokenizer's `--language`) |" in (ft / "best" / "README.md").read_text()
    (tmp_path / "in.txt").write_text("\n".join(lines[30:33]) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "predict",
                "--model",
                str(ft / "best"),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "p.jsonl"),
                "-q",
            ]
        )
        == 0
    )
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 3


# ------------------------------------------------------------------------------------ the real books
@pytest.mark.slow
@pytest.mark.parametrize("lang", ["de", "fr"])
def test_accents_round_trip_on_every_line_of_the_books(albert_data, tmp_path, lang) -> None:
    books = sorted((albert_data / "pretrain" / "multilingual" / lang).glob("*.txt"))
    tok = train_tokenizer(
        books, tmp_path / "tok", vocab_size=8000, num_threads=2, **LANGUAGES[lang].settings()
    )
    checked = failed = 0
    for book in books:
        batch = [line for line in iter_text_lines(book) if line.strip()]
        for line, ids in zip(batch, tok.encode_batch(batch), strict=True):
            checked += 1
            failed += tok.decode(ids) != tok.sp.normalize(tok.preprocess(line)).replace("\u2581", " ").strip()
    assert failed == 0 and checked > {"de": 100_000, "fr": 35_000}[lang]


def test_distillation_text_counts_characters_as_words_where_there_are_no_spaces(tmp_path):
    from albert_lm.data.unspaced import word_count
    from albert_lm.distill.data import read_sentences

    assert word_count("他拿起筆來，寫了一封書。") == 10 and word_count("The cat sat.") == 3
    assert word_count("a 中文 b") == 4 and word_count("。") == 1
    text = tmp_path / "zh.txt"
    text.write_text("他拿起筆來，寫了一封書。我有一句話要對你說。好。\n\n兩人騎著馬出城去了。\n")
    got = read_sentences(
        [text], "paragraphs", strip_gutenberg=False, min_words=3, max_segments=100, progress=False
    )
    assert got == [
        "他拿起筆來，寫了一封書。",
        "我有一句話要對你說。",
        "兩人騎著馬出城去了。",
    ]  # 好。 is too short
