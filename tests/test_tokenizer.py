"""Tests of albert_lm.data.tokenizer: the original ALBERT tokenization rule, the transformers-like API, training."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

from albert_lm.cli import main
from albert_lm.data.corpus import iter_text_lines
from albert_lm.data.tokenizer import AlbertTokenizer, preprocess_text
from albert_lm.data.tokenizer_training import train_tokenizer
from albert_lm.data.truncation import truncate_pair_from_end

# The shipped model's folder: its tokenizer.json is a BERT WordPiece vocabulary behind the same API.
WORDPIECE_MODEL = Path(__file__).resolve().parents[1] / "models" / "albert-minilm-small-en"
SPECIAL_WORDS = ["Émile", "1,000", "2,5", "naïve", "café", "crème", "brûlée", "THE", "Town,", "yes!"]


def _vocabulary(seed: int = 0) -> list[str]:
    """A few hundred pseudo-words from syllables: enough variety for a 200-piece unigram model."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words = ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(400)]
    return words + SPECIAL_WORDS


def _synthetic_lines(n: int, seed: int = 0) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    words = _vocabulary()
    return [" ".join(rng.choice(words, size=int(rng.integers(3, 15)))) + "." for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory: pytest.TempPathFactory) -> AlbertTokenizer:
    d = tmp_path_factory.mktemp("tok")
    (d / "text.txt").write_text("\n".join(_synthetic_lines(2000)) + "\n", encoding="utf-8")
    return train_tokenizer([d / "text.txt"], d / "model", vocab_size=200, num_threads=1)


def reference_ids(sp: spm.SentencePieceProcessor, text: str) -> list[int]:
    """google-research tokenization.py, written out plainly: preprocess_text, encode_pieces, PieceToId."""
    text = " ".join(text.strip().split())
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.lower()
    new_pieces: list[str] = []
    for piece in sp.EncodeAsPieces(text):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur = sp.EncodeAsPieces(piece[:-1].replace("\u2581", ""))
            if piece[0] != "\u2581" and cur[0][0] == "\u2581":
                cur = cur[1:] if len(cur[0]) == 1 else [cur[0][1:], *cur[1:]]
            cur.append(piece[-1])
            new_pieces.extend(cur)
        else:
            new_pieces.append(piece)
    return [sp.PieceToId(p) for p in new_pieces]


@pytest.fixture(scope="module")
def released(albert_data: Path) -> AlbertTokenizer:
    return AlbertTokenizer.from_pretrained(albert_data / "tokenizer" / "albert-30k")


def test_released_model_known_ids(released: AlbertTokenizer) -> None:
    assert released.encode("hello, my dog is cute", add_special_tokens=False) == [
        10975,
        15,
        51,
        1952,
        25,
        10901,
    ]
    assert released.encode("Hello, my dog is cute") == [2, 10975, 15, 51, 1952, 25, 10901, 3]
    assert (released.pad_token_id, released.unk_token_id, released.cls_token_id) == (0, 1, 2)
    assert (released.sep_token_id, released.mask_token_id, released.vocab_size) == (3, 4, 30000)


def test_digit_comma_rule(released: AlbertTokenizer) -> None:
    sp = released.sp
    for text in ["It cost 1,000 dollars.", "on 12, 13 and 5,", "a1, b22,c", "3,4,5 and 10,000,000"]:
        ids = released.encode(text, add_special_tokens=False)
        assert ids == reference_ids(sp, text)
    # the rule is what makes "1," two pieces: plain SentencePiece keeps one
    plain = sp.encode("on 12, 13")
    assert any(released._digit_comma[i] for i in plain)
    assert sp.encode("on 12, 13", out_type=str) == ["\u2581on", "\u258112,", "\u258113"]
    assert released.tokenize("on 12, 13") == ["\u2581on", "\u258112", ",", "\u258113"]


def test_equals_original_rule_on_book_lines(albert_data: Path, released: AlbertTokenizer) -> None:
    """Our (batched, table-driven) encoding equals the plain reference on every line of three books."""
    root = albert_data / "pretrain" / "gutenberg"
    rows = [r.split("\t") for r in (root / "MANIFEST.tsv").read_text().splitlines()[2:]]
    small = sorted(r[0] for r in rows if r[1] == "small")[:3]
    lines = [
        ln for f in small for ln in iter_text_lines(root / "books" / f, strip_gutenberg=True) if ln.strip()
    ]
    assert len(lines) > 5000
    ours = released.encode_batch(lines, num_threads=2)
    mismatches = [i for i, line in enumerate(lines) if ours[i] != reference_ids(released.sp, line)]
    assert mismatches == [], f"{len(mismatches)} lines differ, first: {lines[mismatches[0]]!r}"
    flat, lens = released.encode_flat(lines)  # the array form the data pipeline uses
    assert lens.tolist() == [len(x) for x in ours] and flat.tolist() == [i for x in ours for i in x]
    assert sum(any(released._digit_comma[i] for i in released.sp.encode(ln.lower())) for ln in lines) > 0


def test_preprocess_text_matches_reference() -> None:
    for text in ["  Crème\tBRÛLÉE \n naïve ", "Ångström ﬁne", "plain ascii  text", "İstanbul"]:
        ref = "".join(
            c for c in unicodedata.normalize("NFKD", " ".join(text.split())) if not unicodedata.combining(c)
        )
        assert preprocess_text(text) == ref.lower()
        assert preprocess_text(text, lower=False) == ref


def test_trained_model_has_albert_specials_and_normalization(tiny_tok: AlbertTokenizer) -> None:
    assert [tiny_tok.sp.id_to_piece(i) for i in range(5)] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert all(tiny_tok.sp.is_control(i) for i in (0, 2, 3, 4))
    assert tiny_tok.vocab_size == 200
    pieces = [tiny_tok.sp.id_to_piece(i) for i in range(5, tiny_tok.vocab_size)]
    # lower-cased and accent-stripped training text: no capitals, no combining marks, no "é"
    assert not any(any(c.isupper() or c in "éèûïÉ" for c in p) for p in pieces)
    assert tiny_tok.tokenize("CAFÉ") == tiny_tok.tokenize("cafe")


def test_a_long_training_says_how_far_it_is(tmp_path: Path, monkeypatch, caplog) -> None:
    """Minutes of SentencePiece on a large text are not silent: a line every HEARTBEAT_S (here every poll)
    with the lines read so far, then that SentencePiece chooses the pieces."""
    from albert_lm.data import tokenizer_training

    monkeypatch.setattr(tokenizer_training, "HEARTBEAT_S", 0.0)
    (tmp_path / "a.txt").write_text("\n".join(_synthetic_lines(500, seed=1)), encoding="utf-8")
    with caplog.at_level("INFO", logger="albert_lm.data.tokenizer_training"):
        train_tokenizer([tmp_path / "a.txt"], tmp_path / "m", vocab_size=120, num_threads=1)
    beats = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenizer: ")]
    assert beats and all(" lines " in b and b.endswith(" s)") for b in beats), beats


def test_training_is_reproducible(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n".join(_synthetic_lines(500, seed=1)), encoding="utf-8")
    a = train_tokenizer([tmp_path / "a.txt"], tmp_path / "m1", vocab_size=120, num_threads=1)
    b = train_tokenizer([tmp_path / "a.txt"], tmp_path / "m2", vocab_size=120, num_threads=1)
    # the serialized protos differ only in the temporary model_prefix path: compare the vocabulary
    assert [(a.sp.id_to_piece(i), a.sp.get_score(i)) for i in range(120)] == [
        (b.sp.id_to_piece(i), b.sp.get_score(i)) for i in range(120)
    ]


def test_pair_encoding_truncation_and_padding(tiny_tok: AlbertTokenizer) -> None:
    a, b = " ".join(_vocabulary()[:12]), " ".join(_vocabulary()[20:25])
    ids_a = tiny_tok.encode(a, add_special_tokens=False)
    ids_b = tiny_tok.encode(b, add_special_tokens=False)
    enc = tiny_tok(a, b)
    assert enc["input_ids"] == [2, *ids_a, 3, *ids_b, 3]
    assert enc["token_type_ids"] == [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    assert enc["attention_mask"] == [1] * len(enc["input_ids"])
    short = tiny_tok(a, b, max_length=12, truncation=True)
    assert len(short["input_ids"]) == 12 and short["input_ids"][-1] == 3
    # longest_first cuts the longer side first: both sides end up within one id of each other or b intact
    n_a = short["token_type_ids"].count(0) - 2
    n_b = short["token_type_ids"].count(1) - 1
    assert n_a + n_b == 9 and (abs(n_a - n_b) <= 1 or n_b == len(ids_b))
    assert short["input_ids"][1 : 1 + n_a] == ids_a[:n_a]
    batch = tiny_tok([a, b], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, len(ids_a) + 2) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"][1].sum().item() == len(ids_b) + 2
    assert batch["input_ids"][1, -1].item() == tiny_tok.pad_token_id
    with pytest.raises(ValueError, match="truncat"):
        tiny_tok(a, b, max_length=12, truncation="only_weird")


@pytest.fixture(params=["sentencepiece", "wordpiece"])
def either_kind(request: pytest.FixtureRequest, tiny_tok: AlbertTokenizer) -> AlbertTokenizer:
    """Both tokenizers `AlbertTokenizer.from_pretrained` gives: SentencePiece, and BERT's WordPiece."""
    if request.param == "sentencepiece":
        return tiny_tok
    tok = AlbertTokenizer.from_pretrained(WORDPIECE_MODEL)
    assert type(tok).__name__ == "WordPieceTokenizer"
    return tok


def test_a_batch_of_pairs_equals_two_lists(either_kind: AlbertTokenizer) -> None:
    """`tok([(a1, b1), (a2, b2)])` is `tok([a1, a2], [b1, b2])`, as in transformers: each pair is
    [CLS] a [SEP] b [SEP] with type ids 1 on b, with every option; lists of two texts are pairs too."""
    tok = either_kind
    words = _vocabulary()
    a = [" ".join(words[:9]), " ".join(words[30:32])]
    b = [" ".join(words[40:43]), " ".join(words[50:60])]
    ids_a = tok.encode(a[0], add_special_tokens=False)
    ids_b = tok.encode(b[0], add_special_tokens=False)
    first = tok([(a[0], b[0])])
    assert first["input_ids"] == [[tok.cls_token_id, *ids_a, tok.sep_token_id, *ids_b, tok.sep_token_id]]
    assert first["token_type_ids"] == [[0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)]
    for options in (
        {},
        {"truncation": True, "max_length": 9},
        {"truncation": "only_second", "max_length": len(ids_a) + 5},
        {"padding": True},
        {"padding": "max_length", "max_length": 64, "return_tensors": "pt"},
        {"add_special_tokens": False},
    ):
        want = tok(a, b, **options)
        for batch in (list(zip(a, b, strict=True)), [list(p) for p in zip(a, b, strict=True)]):
            got = tok(batch, **options)
            for key in tok.model_input_names:
                same = (
                    torch.equal(got[key], want[key]) if torch.is_tensor(want[key]) else got[key] == want[key]
                )
                assert same, (options, key)
    # A batch may mix single texts and pairs, as transformers' may.
    mixed = tok([(a[0], b[0]), a[1]])
    assert mixed["input_ids"] == [tok(a[0], b[0])["input_ids"], tok(a[1])["input_ids"]]


def test_a_malformed_batch_is_refused_clearly(either_kind: AlbertTokenizer) -> None:
    """Items that are neither a text nor a pair of two texts are refused with what was expected, not an
    AttributeError from inside the tokenizer or a silently joined pair."""
    tok = either_kind
    for bad in (["one", ("a", "b", "c")], [["lonely"]], [7], [None], [("a", 7)], [b"bytes"]):
        with pytest.raises(TypeError, match=r"text\[\d\]: expected a text or a \(text, text_pair\) pair"):
            tok(bad)
    with pytest.raises(TypeError, match=r"text\[1\]: .* with text_pair\[1\] 3"):
        tok(["a", "b"], ["c", 3])
    with pytest.raises(TypeError, match=r"text\[0\]: .* with text_pair\[0\] 'c'"):
        tok([("a", "b")], ["c"])  # the second texts given twice
    with pytest.raises(TypeError, match="text: expected a text"):
        tok(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="encode_pair: expected a text"):
        tok.encode(("a", "b"))  # type: ignore[arg-type]


def test_truncate_pair_from_end_strategies() -> None:
    rng = random.Random(0)
    for _ in range(200):
        a, b = list(range(rng.randrange(0, 30))), list(range(100, 100 + rng.randrange(0, 30)))
        budget = rng.randrange(0, 50)
        ta, tb = truncate_pair_from_end(a, b, budget)
        ra, rb = list(a), list(b)  # BERT's _truncate_seq_pair
        while len(ra) + len(rb) > budget:
            (rb if len(rb) > len(ra) else ra).pop()
        assert (ta, tb) == (ra, rb)
    assert truncate_pair_from_end([1, 2, 3], [4, 5], 3, "only_first") == ([1], [4, 5])
    assert truncate_pair_from_end([1, 2, 3], [4, 5], 4, "only_second") == ([1, 2, 3], [4])
    assert truncate_pair_from_end([1, 2, 3], None, 2) == ([1, 2], None)
    with pytest.raises(ValueError, match="cannot truncate the second text"):
        truncate_pair_from_end([1, 2, 3], [4], 1, "only_second")


def test_decode_and_token_conversion(tiny_tok: AlbertTokenizer) -> None:
    text = " ".join(_vocabulary()[:6])
    ids = tiny_tok.encode(text)
    assert tiny_tok.decode(ids, skip_special_tokens=True) == text
    assert tiny_tok.decode(ids) == f"[CLS] {text} [SEP]"
    toks = tiny_tok.tokenize(text)
    assert tiny_tok.convert_tokens_to_ids(toks) == ids[1:-1]
    assert tiny_tok.convert_ids_to_tokens(ids[1:-1]) == toks


def test_save_and_load_round_trip(tiny_tok: AlbertTokenizer, tmp_path: Path) -> None:
    tok = AlbertTokenizer(tiny_tok.model_file, do_lower_case=False)
    tok.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "spiece.model").read_bytes() == tiny_tok.model_file.read_bytes()
    loaded = AlbertTokenizer.from_pretrained(tmp_path / "saved")
    assert loaded.do_lower_case is False
    # the bare file takes the rule of the tokenizer_config.json beside it; alone, the released models'
    assert AlbertTokenizer.from_pretrained(tmp_path / "saved" / "spiece.model").do_lower_case is False
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "spiece.model").write_bytes(tiny_tok.model_file.read_bytes())
    assert AlbertTokenizer.from_pretrained(tmp_path / "alone" / "spiece.model").do_lower_case is True


def test_bad_tokenizer_files(tmp_path: Path) -> None:
    (tmp_path / "spiece.model").write_bytes(b"this is not a sentencepiece model\n")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        AlbertTokenizer.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such"):
        AlbertTokenizer.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no spiece.model"):
        AlbertTokenizer.from_pretrained(tmp_path / "empty")
    # a valid SentencePiece model without ALBERT's special ids
    (tmp_path / "t.txt").write_text("\n".join(_synthetic_lines(300)), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "t.txt"), model_prefix=str(tmp_path / "plain"), vocab_size=60, minloglevel=2
    )
    with pytest.raises(ValueError, match="ids 0-4"):
        AlbertTokenizer.from_pretrained(tmp_path / "plain.model")


def test_cli_tokenizer_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.txt").write_text("\n".join(_synthetic_lines(400)), encoding="utf-8")
    out = tmp_path / "tok"
    assert (
        main(
            [
                "tokenizer",
                "train",
                "--input",
                str(tmp_path / "a.txt"),
                "--vocab-size",
                "100",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert AlbertTokenizer.from_pretrained(out).vocab_size == 100
    (tmp_path / "empty.txt").write_bytes(b"")
    assert (
        main(["tokenizer", "train", "--input", str(tmp_path / "empty.txt"), "--output", str(tmp_path / "t2")])
        == 1
    )
    assert "empty input file" in capsys.readouterr().err


def test_padding_and_truncation_take_transformers_values_only(either_kind: AlbertTokenizer) -> None:
    """ "do_not_pad" pads nothing, an unknown strategy is refused (not read as True), truncation=True
    without max_length cuts to the model's 512 positions, and an empty batch is an empty batch."""
    tok = either_kind
    words = _vocabulary()
    short, longer = words[0], " ".join(words[:5])
    assert tok([short, longer], padding="do_not_pad") == tok([short, longer])
    for bad in ({"padding": "yes"}, {"truncation": "cut"}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}='"):
            tok([short], **bad)
    long_text = " ".join(words[:20] * 40)
    assert len(tok(long_text)["input_ids"]) > 512
    assert len(tok(long_text, truncation=True)["input_ids"]) == tok.model_max_length == 512
    assert tok([], padding=True) == {k: [] for k in tok.model_input_names}
    empty = tok([], padding=True, return_tensors="pt")
    assert all(empty[k].shape == (0, 0) for k in tok.model_input_names)
    arrays = tok([short, "a"], padding=True, return_tensors="np")  # numpy, as ONNX Runtime takes it
    tensors = tok([short, "a"], padding=True, return_tensors="pt")
    assert all(arrays[k].dtype == np.int64 and (arrays[k] == tensors[k].numpy()).all() for k in arrays)
