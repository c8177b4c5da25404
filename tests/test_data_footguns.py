"""The data stage's silent mistakes, made loud: `--format auto` (wrapped prose is not read a line per
sentence), a held-out share near the one asked on a small corpus, tokenizer training that leaves nothing
behind when it fails, and a hint when Project Gutenberg's licence text would be trained on."""

from __future__ import annotations

import json
import logging
import random
import textwrap
from pathlib import Path

import blingfire
import pytest
from conftest import data_argv, tokenizer_argv
from test_bad_input import folder_hash, refused

from albert_lm.data.corpus import guess_format, input_formats, plan_blocks
from albert_lm.data.examples import DataConfig
from albert_lm.data.manifest import format_summary
from albert_lm.data.plan import plan_id, plan_shards
from albert_lm.data.shards import create_pretraining_data

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choices(_SYLLABLES, k=rng.randint(1, 3))) for _ in range(300)]
    return [" ".join(rng.choices(words, k=rng.randint(6, 24))).capitalize() + "." for _ in range(n)]


def _paragraphs(n: int, seed: int = 0) -> list[list[str]]:
    sents = _sentences(6 * n, seed)
    return [sents[6 * k : 6 * k + 6] for k in range(n)]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _wrapped(path: Path, n: int = 60, seed: int = 0) -> Path:
    """Prose hard-wrapped at 70 columns, a blank line between paragraphs (a Gutenberg book's layout)."""
    return _write(path, "\n\n".join(textwrap.fill(" ".join(p), 70) for p in _paragraphs(n, seed)) + "\n")


def _sentence_per_line(path: Path, n: int = 60, seed: int = 0) -> Path:
    """google-research's format: a sentence per line, a blank line between documents."""
    return _write(path, "\n\n".join("\n".join(p) for p in _paragraphs(n, seed)) + "\n")


def _paragraph_per_line(path: Path, n: int = 60) -> Path:
    return _write(path, "\n\n".join(" ".join(p) for p in _paragraphs(n)) + "\n")


# ----------------------------------------------------------------------------------------- --format auto
def test_auto_reads_wrapped_prose_as_paragraphs_and_a_sentence_per_line_as_lines(tmp_path, caplog):
    wrapped = _wrapped(tmp_path / "wrapped.txt")
    lines = _sentence_per_line(tmp_path / "lines.txt")
    per_line = _paragraph_per_line(tmp_path / "paragraphs.txt")
    assert guess_format(wrapped).format == "paragraphs" and "wrapped prose" in guess_format(wrapped).reason
    assert guess_format(lines).format == "lines"
    assert (
        guess_format(per_line).format == "paragraphs"
        and "a paragraph per line" in guess_format(per_line).reason
    )
    with caplog.at_level(logging.INFO, logger="albert_lm.data"):
        formats = input_formats(plan_blocks([wrapped, lines], 1 << 20), "auto")
    assert formats == {str(wrapped): "paragraphs", str(lines): "lines"}
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(said) == 2 and all("--format auto" in m for m in said)  # one line a file, with its reason
    assert f"{wrapped}: --format auto: paragraphs (wrapped prose" in said[0]


def test_auto_on_many_files_says_their_formats_in_one_line(tmp_path, caplog):
    """A folder of books is one line, not a line a book; each file's guess is there under --verbose."""
    files = [_wrapped(tmp_path / f"book{i}.txt") for i in range(7)] + [_sentence_per_line(tmp_path / "l.txt")]
    with caplog.at_level(logging.DEBUG, logger="albert_lm.data"):
        input_formats(plan_blocks(files, 1 << 20), "auto")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert said == [
        "--format auto on 8 files: 7 paragraphs (wrapped prose, e.g. book0.txt); 1 lines (a sentence per "
        "line, e.g. l.txt) (each file's with --verbose)"
    ]
    assert (
        len([r for r in caplog.records if r.levelno == logging.DEBUG and "--format auto:" in r.getMessage()])
        == 8
    )


def test_explicit_lines_on_wrapped_prose_warns_and_keeps_lines(tmp_path, caplog):
    wrapped = _wrapped(tmp_path / "wrapped.txt")
    lines = _sentence_per_line(tmp_path / "lines.txt")
    with caplog.at_level(logging.INFO, logger="albert_lm.data.corpus"):
        assert input_formats(plan_blocks([wrapped, lines], 1 << 20), "lines") == dict.fromkeys(
            [str(wrapped), str(lines)], "lines"
        )
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "1 of 2 input files look like prose" in warning and str(wrapped) in warning
    assert "--format paragraphs (or auto)" in warning and str(lines) not in warning
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="albert_lm.data.corpus"):
        input_formats(plan_blocks([lines], 1 << 20), "lines")
        input_formats(plan_blocks([wrapped], 1 << 20), "paragraphs")
    assert not caplog.records  # nothing to say: the format asked fits, or it is not guessed at all


def test_auto_on_the_shared_and_bundled_books(albert_data, tmp_path):
    books = sorted((albert_data / "pretrain" / "gutenberg" / "books").glob("*.txt"))[::50]
    demo = sorted((Path(__file__).parents[1] / "albert_lm" / "demo_corpus").glob("*.txt"))
    assert len(books) >= 5 and len(demo) == 5
    for book in [*books, *demo]:
        assert guess_format(book).format == "paragraphs", (book, guess_format(book))
    # one of them rewritten a sentence per line (Bling Fire), documents of 20 paragraphs
    text = books[0].read_text(encoding="utf-8").replace("\r\n", "\n")
    paras = [p.replace("\n", " ") for p in text.split("\n\n") if p.strip()]
    docs = [
        "\n".join(blingfire.text_to_sentences(" ".join(paras[k : k + 20])).split("\n"))
        for k in range(0, len(paras), 20)
    ]
    assert guess_format(_write(tmp_path / "spl.txt", "\n\n".join(docs) + "\n")).format == "lines"


def test_auto_is_the_default_and_the_manifest_says_what_each_file_got(tiny_corpus_and_tokenizer, tmp_path):
    corpus, tok = tiny_corpus_and_tokenizer
    wrapped = _wrapped(tmp_path / "wrapped.txt", n=120)
    assert DataConfig().input_format == "auto"
    cfg = DataConfig(max_seq_length=48, eval_fraction=0.0)
    manifest = create_pretraining_data(
        [corpus, wrapped], tok, tmp_path / "out", cfg, num_workers=1, progress=False
    )
    assert manifest["input_formats"] == {str(corpus): "lines", str(wrapped): "paragraphs"}
    # wrapped prose read as lines is cut into a "sentence" per line; read as paragraphs, into its 720
    # sentences (6 a paragraph; Bling Fire joins a few of these made-up ones)
    lines_cfg = DataConfig(max_seq_length=48, eval_fraction=0.0, input_format="lines")
    as_lines = create_pretraining_data(
        [wrapped], tok, tmp_path / "lines", lines_cfg, num_workers=1, progress=False
    )
    as_auto = create_pretraining_data([wrapped], tok, tmp_path / "auto", cfg, num_workers=1, progress=False)
    assert 690 <= as_auto["summary"]["sentences"] <= 720 < 1.1 * 720 < as_lines["summary"]["sentences"]


# ----------------------------------------------------------------------------------------- held-out share
def _two_small_files(tmp_path: Path) -> list[str]:
    """Two files of ~110 KB, a sentence per line: two 1 MiB blocks, so whole blocks held out 50%."""
    return [str(_sentence_per_line(tmp_path / f"c{k}.txt", n=800, seed=k)) for k in range(2)]


def test_held_out_share_on_a_small_corpus_is_near_the_one_asked(tiny_corpus_and_tokenizer, tmp_path, caplog):
    _, tok = tiny_corpus_and_tokenizer
    inputs = _two_small_files(tmp_path)
    cfg = DataConfig(max_seq_length=48, eval_fraction=0.01)
    assert len(plan_blocks(inputs, cfg.block_bytes)) == 2  # the split in whole blocks: 1 of 2 held out
    with caplog.at_level(logging.WARNING):
        manifest = create_pretraining_data(inputs, tok, tmp_path / "out", cfg, num_workers=1, progress=False)
    s = manifest["summary"]
    assert 0.005 <= s["eval_share"] <= 0.02, s["eval_share"]
    assert 0.005 <= s["eval_example_share"] <= 0.02, s
    assert manifest["splits"]["eval"]["examples"] > 0
    assert manifest["split_block_bytes"] < cfg.block_bytes
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"{s['eval_share']:.2%} of the text held out" in format_summary(manifest)
    # no text in both splits: every held-out block's bytes lie outside every training block
    plan = plan_shards(inputs, cfg)
    held = {(b.path, b.start, b.end) for s_ in plan.shards["eval"] for b in s_}
    train = [(b.path, b.start, b.end) for s_ in plan.shards["train"] for b in s_]
    assert not any(p == q and a < d and c < b for p, a, b in held for q, c, d in train)
    assert sum(b - a for _, a, b in [*held, *train]) == sum(
        Path(f).stat().st_size for f in inputs
    )  # all text
    # the training documents stay long: neighbouring blocks are joined back up to the block size
    assert len(train) <= 2 + len(held)


def test_the_same_seed_gives_the_same_split(tmp_path):
    inputs = _two_small_files(tmp_path)
    cfg = DataConfig(eval_fraction=0.01, seed=7)
    first, again = plan_shards(inputs, cfg), plan_shards(inputs, cfg)
    assert first == again
    assert plan_id(first, cfg, "tok") == plan_id(again, cfg, "tok")
    other = plan_shards(inputs, DataConfig(eval_fraction=0.01, seed=8))
    assert other.shards["eval"] != first.shards["eval"]


def test_a_corpus_large_enough_for_its_blocks_keeps_its_split(tmp_path):
    inputs = _two_small_files(tmp_path)
    cfg = DataConfig(eval_fraction=0.1, block_bytes=4096, shard_bytes=1 << 20)
    plan = plan_shards(inputs, cfg)
    blocks = plan_blocks(inputs, 4096)
    assert plan.split_block_bytes == 4096
    planned = [b for s in plan.shards.values() for shard in s for b in shard]
    assert sorted(planned, key=lambda b: (b.path, b.start)) == blocks
    assert 0.05 <= plan.eval_share <= 0.2


def test_a_share_that_cannot_be_met_is_warned_about(tiny_corpus_and_tokenizer, caplog):
    corpus, _ = tiny_corpus_and_tokenizer
    with caplog.at_level(logging.WARNING, logger="albert_lm.data.plan"):
        plan = plan_shards([str(corpus)], DataConfig(eval_fraction=0.001))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert plan.eval_share > 0.002
    assert f"held out {100 * plan.eval_share:.2f}% of the text" in warning
    assert "--eval-fraction 0.001 asked for 0.10%" in warning


# ----------------------------------------------------------------------------------------- tokenizer
def test_a_vocabulary_too_large_names_the_most_and_leaves_no_folder(
    tiny_corpus_and_tokenizer, tmp_path, capsys
):
    corpus, _ = tiny_corpus_and_tokenizer
    out = tmp_path / "new" / "deeper" / "tok"
    message = refused(
        capsys,
        ["tokenizer", "train", "--input", str(corpus), "--vocab-size", "30000", "--output", str(out)],
        "--vocab-size 30000",
        "this text supports at most",
        "smaller --vocab-size",
    )
    most = int(message.split("at most ")[1].split()[0])
    assert 14 < most < 30000
    assert not (tmp_path / "new").exists()  # neither --output nor the folders above it that the run made


def test_a_failed_overwrite_leaves_the_tokenizer_that_was_there(tiny_corpus_and_tokenizer, tmp_path, capsys):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "tok"
    out.mkdir()
    for f in tok.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    refused(
        capsys,
        tokenizer_argv(corpus, out, "--vocab-size", "30000", "--overwrite"),
        "at most",
        untouched=(out,),
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in tok.iterdir())


# ----------------------------------------------------------------------------------------- Gutenberg
def test_gutenberg_markers_without_strip_gutenberg_give_a_hint(tmp_path, caplog):
    from albert_lm.data.tokenizer_training import train_tokenizer

    body = "\n".join(_sentences(400))
    book = _write(
        tmp_path / "book.txt",
        f"The Project Gutenberg eBook\n\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\n"
        f"{body}\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nlicence text\n",
    )
    plain = _sentence_per_line(tmp_path / "plain.txt")
    with caplog.at_level(logging.WARNING, logger="albert_lm.data.corpus"):
        train_tokenizer([book, plain], tmp_path / "t1", vocab_size=100, num_threads=1)
    (hint,) = [r.getMessage() for r in caplog.records]
    assert "1 of 2 input files" in hint and str(book) in hint and "--strip-gutenberg" in hint
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="albert_lm.data.corpus"):
        train_tokenizer([book], tmp_path / "t2", vocab_size=100, num_threads=1, strip_gutenberg=True)
    assert not caplog.records
    assert folder_hash(tmp_path / "t1") != folder_hash(tmp_path / "t2")  # the hint changed no output
    # books mixed with other text: the books are cut to their text, the other files read whole, named
    with caplog.at_level(logging.WARNING, logger="albert_lm.data.corpus"):
        train_tokenizer([book, plain], tmp_path / "t3", vocab_size=100, num_threads=1, strip_gutenberg=True)
    (said,) = [r.getMessage() for r in caplog.records]
    assert "1 of 2 input files hold no Project Gutenberg START marker" in said and str(plain) in said
    assert "reads them whole" in said and str(book) not in said


def test_nsp_pairs_without_random_next_segments_are_warned_about(tiny_corpus_and_tokenizer, tmp_path):
    """A held-out split of one document has no other document to draw NSP's random B from: its pairs
    are all "next", which would score an NSP head on one class; the summary says so."""
    _, tok = tiny_corpus_and_tokenizer
    rng = random.Random(0)
    words = ["kala", "bime", "to", "dunora", "pesi", "kalo", "vemi", "tura", "mepa", "lodi", "sure", "kana"]
    lines = (
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(400)
    )
    (tmp_path / "one.txt").write_text("\n".join(lines) + "\n")  # no blank line: documents are whole blocks
    cfg = DataConfig(max_seq_length=48, input_format="lines", eval_fraction=0.1, objective="nsp")
    manifest = create_pretraining_data(
        [tmp_path / "one.txt"], tok, tmp_path / "out", cfg, num_workers=1, progress=False
    )
    held, train = manifest["splits"]["eval"], manifest["splits"]["train"]
    assert held["examples"] > 0 and held["label_ones"] == 0 and train["label_ones"] > 0.3 * train["examples"]
    summary = format_summary(manifest)
    assert f"WARNING: 0% of the {held['examples']} eval pairs have a random next segment" in summary
    assert "train pairs" not in summary and "--eval-fraction" in summary


def test_an_older_manifest_still_reads(tiny_corpus_and_tokenizer, tmp_path):
    from albert_lm.data.dataset import PretrainingDataset

    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "out"
    cfg = DataConfig(max_seq_length=48, input_format="lines", eval_fraction=0.1, block_bytes=4096)
    create_pretraining_data([corpus], tok, out, cfg, num_workers=1, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    for key in ("input_formats", "split_block_bytes"):
        del manifest[key]
    for key in ("eval_share", "eval_example_share"):
        del manifest["summary"][key]
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert len(PretrainingDataset(out, split="eval")) > 0
    assert "held out" not in format_summary(manifest)


@pytest.mark.parametrize("fmt", ["lines", "paragraphs"])
def test_an_explicit_format_is_read_as_before(tiny_corpus_and_tokenizer, tmp_path, fmt):
    """An explicit --format hashes as before (its plan id does not depend on what auto would guess), so
    an output made by an earlier version resumes instead of being refused."""
    corpus, _ = tiny_corpus_and_tokenizer
    cfg = DataConfig(input_format=fmt, eval_fraction=0.1, block_bytes=4096)
    plan = plan_shards([str(corpus)], cfg)
    assert set(plan.formats.values()) == {fmt}
    plan.formats = {k: "other" for k in plan.formats}
    assert plan_id(plan, cfg, "tok") == plan_id(plan_shards([str(corpus)], cfg), cfg, "tok")


def test_a_failed_data_create_leaves_no_folder(tiny_corpus_and_tokenizer, tmp_path, capsys):
    corpus, tok = tiny_corpus_and_tokenizer
    out = tmp_path / "new" / "data"
    refused(
        capsys,
        data_argv(corpus, tok, out, "--max-seq-length", "48", "--max-line-bytes", "10", "--no-progress"),
        "--max-line-bytes 10",
    )
    assert not (tmp_path / "new").exists()


def test_the_english_rule_on_accented_text_gives_a_hint(tmp_path, caplog):
    """Text whose letters carry accents (German here) trained with the English rule loses them (schöne
    becomes schone): one warning names --language; none with --keep-accents, none for English text."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    rng = random.Random(0)
    words = [
        "schöne",
        "grüße",
        "aus",
        "münchen",
        "über",
        "die",
        "brücke",
        "hören",
        "wir",
        "mädchen",
        "und",
        "jungen",
        "am",
        "see",
    ]
    german = _write(
        tmp_path / "de.txt", "\n".join(" ".join(rng.choices(words, k=9)) + "." for _ in range(400))
    )
    with caplog.at_level(logging.WARNING):
        train_tokenizer([german], tmp_path / "t1", vocab_size=35, num_threads=1)
    (said,) = [r.getMessage() for r in caplog.records if "accents" in r.getMessage()]
    assert "carry accents (" in said and "ü" in said and "--language" in said
    assert "removes (ü becomes u)" in said  # the text's own most frequent accent, not a German example
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train_tokenizer([german], tmp_path / "t2", vocab_size=35, num_threads=1, keep_accents=True)
        train_tokenizer(
            [_sentence_per_line(tmp_path / "en.txt")], tmp_path / "t3", vocab_size=100, num_threads=1
        )
    assert not [r for r in caplog.records if "accents" in r.getMessage()]


def test_chinese_under_the_english_rule_names_its_language(tmp_path, caplog):
    """Chinese trained without --language zh gave no warning, and 4.2% of its data's tokens were lone
    word-start pieces. Text mostly of a script without spaces names the --language to give."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    rng = random.Random(0)
    han = "天地玄黃宇宙洪荒日月盈昃辰宿列張寒來暑往秋收冬藏"
    chinese = _write(
        tmp_path / "zh.txt", "\n".join("".join(rng.choices(han, k=20)) + "。" for _ in range(400))
    )
    with caplog.at_level(logging.WARNING):
        train_tokenizer([chinese], tmp_path / "t1", vocab_size=60, num_threads=1)
    (said,) = [r.getMessage() for r in caplog.records if "without spaces" in r.getMessage()]
    assert "give --language zh or ja" in said and said.startswith("100% of the letters")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        from albert_lm.data.languages import language

        zh = language("zh").settings()  # what --language zh sets
        train_tokenizer([chinese], tmp_path / "t2", vocab_size=60, num_threads=1, **zh)
    assert not [r for r in caplog.records if "without spaces" in r.getMessage()]


def test_thai_marks_are_not_counted_as_letters(tmp_path, caplog):
    """Thai's vowel and tone marks are no letters (isalpha), but were counted in the script's share:
    the warning read "133% of the letters"."""
    from albert_lm.data.languages import warn_english_rule

    thai = _write(tmp_path / "th.txt", "ภาษาไทยเป็นภาษาที่สวยงาม ผู้คนพูดกันทั่วประเทศ\n" * 50)
    with caplog.at_level(logging.WARNING):
        warn_english_rule([thai])
    (said,) = [r.getMessage() for r in caplog.records if "without spaces" in r.getMessage()]
    assert said.startswith("100% of the letters") and "--language th" in said
