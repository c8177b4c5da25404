"""The web export's tokenizer (albert_lm.deploy.web_tokenizer): transformers.js, run by node on the
tokenizer.json and tokenizer_config.json it writes, gives albert-lm's AlbertTokenizer ids, type ids and
attention masks; the Python `tokenizers` library reading the same tokenizer.json too."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import web_missing  # tests/ is on sys.path

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.web_tokenizer import write_web_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "albert_lm" / "deploy" / "web" / "tokenize.mjs"
RELEASE_MODEL = ROOT / "tests" / "fixtures" / "tf_checkpoint" / "release" / "30k-clean.model"
ENTRY = Path("@huggingface") / "transformers" / "dist" / "transformers.node.mjs"

Item = Any  # a text, or [text, pair]

TRICKY: list[Item] = [
    "Hello, my dog is cute",
    "Café, naïve résumé; Émile's crème brûlée.",
    "1,000 people paid $2,500,000 -- or 3,14 -- in 1990, 2010, and 19th, 2,5",
    'x-2 y--z (a) "b" -- end .',
    "a trailing space and dot .",
    "  multiple   spaces\tand\ttabs\nand\r\nnew lines  ",
    "\u201cunicode quotes\u201d \u2018single\u2019 \u2013 \u2014 \u2026 \u00a3 \u20ac",
    "emoji \U0001f600\U0001f44d\U0001f3fd and \u2603",
    "\u4e2d\u6587\u6c49\u5b57 \u65e5\u672c\u8a9e\u306e\u304b\u306a \ud55c\uad6d\uc5b4",
    "",
    " ",
    "[CLS] [SEP] [MASK] <pad> <unk> <s> </s>",
    "\u0130stanbul \u039f\u0394\u039f\u03a3 STRASSE stra\u00dfe \ufb01ne \u2460 \u00bd \uff21\uff22",
    "zero\u200bwidth\u00a0no-break\u2028line\u3000ideographic \x1c\x85sep\x0b",
    "e\u0301 a\u0308 n\u0303 decomposed, \u212b \u2126",
    "marks out of order o\u0301\u0323 e\u0302\u0323, decomposing ones a\u0344 \u03b9\u0344 \u0341",
    "\uff5e\u301c full-width tilde, \u2581 lower one eighth block",
    "nnn mmm zzz ooo ---- .... !!!! ????",
    "Numbers: 0,5 10,000th 1,2,3 a1,b 12, ,5",
]
PAIRS: list[Item] = [
    ["How old are you?", "I am 1,000 years old."],
    ["", "an empty first text"],
    ["tabs\tand  spaces", "   "],
    ["\u4e2d\u6587", "Caf\u00e9 --"],
]


def _modules() -> Path:
    return Path(os.environ.get("ALBERT_WEB_MODULES") or ROOT / ".web" / "node_modules")


@pytest.fixture(scope="session")
def node() -> str:
    """The node executable, with transformers.js installed (`make web`); skips when either is missing."""
    exe = shutil.which("node")
    if exe is None:
        web_missing("node is not installed")
    if not (_modules() / ENTRY).is_file():
        web_missing(f"transformers.js not installed in {_modules()} (make web, or set ALBERT_WEB_MODULES)")
    return exe


def _split(item: Item) -> tuple[str, str | None, bool]:
    if isinstance(item, dict):
        return item["text"], item.get("text_pair"), item.get("add_special_tokens", True)
    if isinstance(item, list):
        return item[0], item[1], True
    return item, None, True


def run_node(node: str, folder: Path, items: Sequence[Item], work: Path) -> list[dict[str, list[int]]]:
    """transformers.js's encodings of `items` (tokenize.mjs), one per item."""
    texts = work / "texts.jsonl"
    texts.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items), encoding="utf-8")
    env = {**os.environ, "ALBERT_WEB_MODULES": str(_modules())}
    done = subprocess.run(
        [node, str(SCRIPT), str(folder), str(texts)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(items)
    return out


def expected(tok: AlbertTokenizer, item: Item) -> dict[str, list[int]]:
    text, pair, special = _split(item)
    return tok.encode_pair(text, pair, add_special_tokens=special)


def node_mismatches(tok: AlbertTokenizer, node: str, items: Sequence[Item], work: Path) -> list[Any]:
    """The items where transformers.js and albert-lm disagree: (item, transformers.js's, albert-lm's)."""
    folder = work / "web"
    write_web_tokenizer(tok, folder)
    got = run_node(node, folder, items, work)
    return [(it, g, w) for it, g in zip(items, got, strict=True) if g != (w := expected(tok, it))]


def python_mismatches(tok: AlbertTokenizer, folder: Path, items: Sequence[Item]) -> list[Any]:
    """The same with the Python `tokenizers` library reading tokenizer.json."""
    from tokenizers import Tokenizer

    fast = Tokenizer.from_file(str(folder / "tokenizer.json"))
    bad = []
    for item in items:
        text, pair, special = _split(item)
        enc = fast.encode(text, pair, add_special_tokens=special)
        want = expected(tok, item)
        got = {"input_ids": enc.ids, "token_type_ids": enc.type_ids, "attention_mask": enc.attention_mask}
        if got != want:
            bad.append((item, got, want))
    return bad


def _with_plain(items: Sequence[Item]) -> list[Item]:
    """`items`, then each again without special tokens."""
    plain = [{"text": t, "text_pair": p, "add_special_tokens": False} for t, p, _ in map(_split, items)]
    return [*items, *plain]


RULES = [  # (do_lower_case, keep_accents, remove_space): the languages' rules, and spaces kept
    (True, False, True),
    (True, True, True),
    (False, True, True),
    (False, False, True),
    (True, False, False),
]


@pytest.mark.parametrize(("lower", "accents", "spaces"), RULES)
def test_release_tokenizer_every_rule(node, tmp_path, lower, accents, spaces):
    """The release fixture's 30k-clean.model under each normalization rule, on strings that trip
    converters (accents, "--", "1,000", "x-2", " .", whitespace of all kinds, quotes, emoji, CJK, empty
    texts, special-token strings, which albert-lm does not parse), single and paired, with and without
    special tokens."""
    tok = AlbertTokenizer(RELEASE_MODEL, do_lower_case=lower, keep_accents=accents, remove_space=spaces)
    items = _with_plain(TRICKY + PAIRS)
    assert node_mismatches(tok, node, items, tmp_path) == []
    assert python_mismatches(tok, tmp_path / "web", items) == []


@pytest.mark.parametrize(  # the English rule in the fast loop, the others in the full suite
    ("lower", "accents", "spaces"), [RULES[0], *(pytest.param(*r, marks=pytest.mark.slow) for r in RULES[1:])]
)
def test_tiny_fixture_tokenizer(node, tmp_path, tiny_corpus_and_tokenizer, lower, accents, spaces):
    """The test session's 200-piece tokenizer (trained by albert-lm: SentencePiece's nmt_nfkc charsmap,
    which the release fixture lacks) under each rule, on its own corpus and on the tricky strings."""
    corpus, folder = tiny_corpus_and_tokenizer
    tok = AlbertTokenizer(
        folder / "spiece.model", do_lower_case=lower, keep_accents=accents, remove_space=spaces
    )
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()][:300]
    boms = [
        "\ufeffa byte order mark",
        "in\ufeffside",
        "end \ufeff",
    ]  # nmt_nfkc: spaces, as for transformers.js
    items = (
        _with_plain(TRICKY + PAIRS + boms)
        + lines
        + [[a, b] for a, b in zip(lines[::2], lines[1::2], strict=False)]
    )
    assert node_mismatches(tok, node, items, tmp_path) == []
    assert python_mismatches(tok, tmp_path / "web", items) == []


def test_piece_nfkc_would_change(node, tmp_path):
    """A vocabulary holding "～" (U+FF5E), which SentencePiece's charsmap keeps and NFKC makes "~": it
    goes through transformers.js's NFKC under a stand-in and comes back."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijk") for _ in range(rng.randint(2, 6))) for _ in range(200)]
    text = "\n".join(
        " ".join(rng.choice(words) + "\uff5e" * (rng.random() < 0.3) for _ in range(10)) for _ in range(3000)
    )
    (tmp_path / "corpus.txt").write_text(text + "\n", encoding="utf-8")
    tok = train_tokenizer(
        [tmp_path / "corpus.txt"], tmp_path / "tok", vocab_size=150, num_threads=1, keep_accents=True,
        character_coverage=1.0,
    )  # fmt: skip
    assert tok.sp.piece_to_id("\uff5e") != tok.unk_token_id
    items = [
        "abc\uff5edef",
        "\uff5e",
        "a \uff5e \uff5e\uff5e b~c",
        "\uff21\uff22\uff5e",
        *text.splitlines()[:50],
    ]
    assert node_mismatches(tok, node, items, tmp_path) == []


def test_empty_second_text_is_dropped_by_transformers_js(node, tmp_path):
    """The one difference no tokenizer.json can remove: transformers.js reads an empty second text as
    none (`text_pair || null`), so ("a", "") is [CLS] a [SEP], where albert-lm gives [CLS] a [SEP] [SEP]
    (the web page builds pairs from each text's ids itself, so it is not affected)."""
    tok = AlbertTokenizer(RELEASE_MODEL)
    bad = node_mismatches(tok, node, [["a", ""]], tmp_path)
    assert len(bad) == 1
    _, got, want = bad[0]
    assert got["input_ids"] == want["input_ids"][:-1] and got["token_type_ids"] == [0, 0, 0]


def test_byte_order_mark_where_the_model_keeps_it(node, tmp_path):
    """The other known difference: transformers.js collapses whitespace itself when tokenizer_config.json
    says `remove_space` (albert-lm's rule key, kept there), and JavaScript's `\\s` holds U+FEFF, which
    Python's `str.split` does not. Models trained by albert-lm (SentencePiece's nmt_nfkc) turn U+FEFF into
    a space anyway (test_tiny_fixture_tokenizer); a model with identity normalization, as the release
    fixture, keeps it as a character of its own, which transformers.js cannot see."""
    tok = AlbertTokenizer(RELEASE_MODEL)
    bad = node_mismatches(tok, node, ["in\ufeffside", "inside"], tmp_path)
    assert [item for item, _, _ in bad] == ["in\ufeffside"]


def test_config_keeps_keys_and_rule(tmp_path):
    """tokenizer_config.json gets transformers.js's keys beside the ones already there; albert-lm still
    reads the folder's rule from it."""
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(RELEASE_MODEL, folder / "spiece.model")
    rule = {"do_lower_case": False, "keep_accents": True, "remove_space": True}
    (folder / "tokenizer_config.json").write_text(json.dumps({**rule, "model_max_length": 512}))
    tok = AlbertTokenizer.from_pretrained(folder)
    paths = write_web_tokenizer(tok, folder)
    assert sorted(p.name for p in paths) == ["tokenizer.json", "tokenizer_config.json"]
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 512 and config["tokenizer_class"] == "AlbertTokenizer"
    assert {k: config[k] for k in rule} == rule
    again = AlbertTokenizer.from_pretrained(folder)
    assert again.fingerprint == tok.fingerprint
    spec = json.loads((folder / "tokenizer.json").read_text())
    names = [piece for piece, _ in spec["model"]["vocab"]]
    assert len(names) == tok.vocab_size and names[5:20] == [tok.sp.id_to_piece(i) for i in range(5, 20)]
    assert config["mask_token"] == names[tok.mask_token_id] and config["pad_token"] == names[0]
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_unreadable_config_is_one_clear_error(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json: not readable JSON"):
        write_web_tokenizer(AlbertTokenizer(RELEASE_MODEL), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer_config.json"]


# --------------------------------------------------------------------------- the real data (slow)
def _tsv(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def english_lines(data: Path) -> list[Item]:
    """Held-out English: WikiText-2 valid, GLUE dev sentences (pairs as pairs), lines of 10 books."""
    items: list[Item] = [
        line
        for line in (data / "pretrain/wikitext-2/valid.txt").read_text("utf-8").splitlines()
        if line.strip()
    ]
    columns = {
        "MRPC": (3, 4),
        "STS-B": (7, 8),
        "RTE": (1, 2),
        "QNLI": (1, 2),
        "WNLI": (1, 2),
        "SST-2": (0, None),
    }
    for task, (a, b) in columns.items():
        for row in _tsv(data / "glue" / task / "dev.tsv")[1:]:
            items.append(row[a] if b is None else [row[a], row[b]])
    items += [row[3] for row in _tsv(data / "glue/CoLA/dev.tsv")]
    rng = random.Random(0)
    books = sorted((data / "pretrain/gutenberg/books").glob("*.txt"))
    for book in rng.sample(books, 10):
        lines = [line for line in book.read_text("utf-8", errors="replace").splitlines() if line.strip()]
        items += rng.sample(lines, min(200, len(lines)))
    return items


@pytest.mark.slow
def test_released_30k_tokenizer_on_held_out_english(node, tmp_path, albert_data):
    """The released spiece.model: identical ids on every line, in transformers.js and in `tokenizers`."""
    tok = AlbertTokenizer.from_pretrained(albert_data / "tokenizer/albert-30k/spiece.model")
    items = english_lines(albert_data)
    assert len(items) >= 4000
    assert node_mismatches(tok, node, items, tmp_path) == []
    assert python_mismatches(tok, tmp_path / "web", items) == []


@pytest.mark.slow
@pytest.mark.parametrize(("code", "vocab_size"), [("fr", 2000), ("zh", 5000)])
def test_french_and_chinese_books(node, tmp_path, albert_data, code, vocab_size):
    """Small tokenizers trained on the language's rule (fr: lower-cased, accents kept; zh: no dummy
    prefix, accents kept) from 400 lines of each book, checked on 300 other lines of each, and pairs."""
    from albert_lm.data.languages import language
    from albert_lm.data.tokenizer_training import train_tokenizer

    rng = random.Random(0)
    train, held = [], []
    for book in sorted((albert_data / "pretrain/multilingual" / code).glob("*.txt")):
        lines = [line for line in book.read_text("utf-8").splitlines() if line.strip()]
        rng.shuffle(lines)
        train += lines[:400]
        held += lines[400:700]
    (tmp_path / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    tok = train_tokenizer(
        [tmp_path / "train.txt"],
        tmp_path / "tok",
        vocab_size=vocab_size,
        num_threads=1,
        **language(code).settings(),
    )
    items = held + [[a, b] for a, b in zip(held[::7], held[3::7], strict=False)]
    assert len(held) >= 1500
    assert node_mismatches(tok, node, items, tmp_path) == []
    assert python_mismatches(tok, tmp_path / "web", items) == []


def test_wordpiece_student_tokenizer(node, tmp_path):
    """A student of a BERT teacher (`--tokenizer teacher`) carries BERT's own tokenizer.json: transformers.js
    reads it to the same ids on the tricky strings, single and paired."""
    transformers = pytest.importorskip("transformers")
    words = ["the", "quick", "brown", "fox", "cafe", "1", "000", "x", "2", "un", "##believ", "##able", "##s"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "-", "!", *words]
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(str(tmp_path / "vocab" / "vocab.txt")).save_pretrained(tmp_path / "bert")
    tok = AlbertTokenizer.from_pretrained(tmp_path / "bert")
    items = _with_plain(TRICKY + PAIRS)
    assert node_mismatches(tok, node, items, tmp_path) == []
    config = json.loads((tmp_path / "web" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer" and config["do_lower_case"] is True
