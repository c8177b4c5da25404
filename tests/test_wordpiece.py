"""A BERT WordPiece vocabulary as an ALBERT model's tokenizer (`albert_lm.data.wordpiece`): the same ids as
transformers' BERT tokenizer for texts and pairs, a folder transformers reads back, the fingerprint, whole
words for masking, and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.wordpiece import WordPieceTokenizer, has_tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The Quick brown fox jumped over the lazy dog.",
    "Caf\u00e9 na\u00efve R\u00e9sum\u00e9: 1,000 things (and more)!",
    "unbelievable playing \u4e2d\u6587 words",
    "   spaces\tand\nlines   ",
    "",
]
WORDS = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "cafe", "naive", "resume", "1", "000",
         "things", "and", "more", "play", "words", "space", "line", "un", "believ", "\u4e2d", "\u6587"]  # fmt: skip
CONTINUATIONS = ["##ed", "##s", "##ing", "##able", "##believ", "##e"]
PUNCT = [".", ",", ":", "(", ")", "!"]


def _vocab_folder(folder: Path, specials: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] if specials is None else specials
    (folder / "vocab.txt").write_text("\n".join([*specials, *PUNCT, *WORDS, *CONTINUATIONS]) + "\n")
    return folder


@pytest.fixture
def bert_folder(tmp_path) -> Path:
    """transformers' own BERT tokenizer saved from a vocab.txt (tokenizer.json, vocab.txt, config)."""
    folder = _vocab_folder(tmp_path / "vocab")
    out = tmp_path / "bert"
    transformers.BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(out)
    return out


def test_the_same_ids_as_transformers_for_texts_pairs_truncation_and_padding(bert_folder):
    ours = AlbertTokenizer.from_pretrained(bert_folder)
    theirs = transformers.AutoTokenizer.from_pretrained(bert_folder)
    assert isinstance(ours, WordPieceTokenizer) and has_tokenizer(bert_folder)
    assert ours.vocab_size == len(theirs)
    assert (ours.cls_token_id, ours.sep_token_id, ours.pad_token_id, ours.mask_token_id) == (
        theirs.cls_token_id, theirs.sep_token_id, theirs.pad_token_id, theirs.mask_token_id,
    )  # fmt: skip
    for text in TEXTS:
        assert ours.encode(text) == theirs(text)["input_ids"], text
        assert ours.tokenize(text) == theirs.tokenize(text), text
    a, b = TEXTS[:3], TEXTS[1:4]
    for kw in ({}, {"truncation": True, "max_length": 9}, {"padding": True}):
        mine, want = ours(a, b, **kw), theirs(a, b, **kw)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert mine[key] == want[key], (kw, key)
    flat, lengths = ours.encode_flat(TEXTS)
    assert lengths.tolist() == [len(theirs(t, add_special_tokens=False)["input_ids"]) for t in TEXTS]
    assert flat.tolist() == [i for t in TEXTS for i in theirs(t, add_special_tokens=False)["input_ids"]]
    assert ours.decode(ours.encode(TEXTS[0]), skip_special_tokens=True) == theirs.decode(
        theirs(TEXTS[0])["input_ids"], skip_special_tokens=True
    )


def test_saved_folder_reads_back_in_transformers_and_here(bert_folder, tmp_path):
    ours = AlbertTokenizer.from_pretrained(bert_folder)
    saved = tmp_path / "student"
    ours.save_pretrained(saved)
    (saved / "config.json").write_text(json.dumps({"model_type": "albert", "vocab_size": ours.vocab_size}))
    theirs = transformers.AutoTokenizer.from_pretrained(saved)  # an ALBERT model folder, BERT's tokens
    assert "Bert" in type(theirs).__name__
    assert [theirs(t)["input_ids"] for t in TEXTS] == [ours.encode(t) for t in TEXTS]
    again = AlbertTokenizer.from_pretrained(saved)
    assert again.fingerprint == ours.fingerprint
    (saved / "tokenizer.json").unlink()  # vocab.txt alone builds the same tokenizer
    assert AlbertTokenizer.from_pretrained(saved).fingerprint == ours.fingerprint


def test_fingerprint_names_the_vocabulary_and_the_case_rule(tmp_path):
    base = WordPieceTokenizer.from_pretrained(_vocab_folder(tmp_path / "a"))
    other = _vocab_folder(tmp_path / "b")
    (other / "vocab.txt").write_text((other / "vocab.txt").read_text() + "extra\n")
    cased = _vocab_folder(tmp_path / "c")
    (cased / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    prints = {base.fingerprint, WordPieceTokenizer.from_pretrained(other).fingerprint,
              WordPieceTokenizer.from_pretrained(cased).fingerprint}  # fmt: skip
    assert len(prints) == 3
    assert WordPieceTokenizer.from_pretrained(cased).encode("Dog", add_special_tokens=False) == [
        base.unk_token_id
    ]


def test_whole_words_for_masking(bert_folder):
    tok = AlbertTokenizer.from_pretrained(bert_folder)
    starts = tok.word_start_table()
    assert starts.shape == (tok.vocab_size,)
    assert not starts[tok.convert_tokens_to_ids("##ing")] and starts[tok.convert_tokens_to_ids("play")]
    ids = np.array(tok.encode("playing unbelievable", add_special_tokens=False))
    assert starts[ids].tolist() == [True, False, True, False, False]


def test_refusals_name_the_file_and_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="no spiece.model.*tokenizer.json or vocab.txt"):
        AlbertTokenizer.from_pretrained(tmp_path)
    no_mask = _vocab_folder(tmp_path / "no_mask", ["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    with pytest.raises(ValueError, match=r"vocab.txt: the vocabulary has no \[MASK\]"):
        AlbertTokenizer.from_pretrained(no_mask)
    from tokenizers import Tokenizer, models

    bpe = tmp_path / "bpe"
    bpe.mkdir()
    Tokenizer(models.BPE()).save(str(bpe / "tokenizer.json"))
    with pytest.raises(ValueError, match="tokenizer.json: a BPE tokenizer; expected a WordPiece"):
        AlbertTokenizer.from_pretrained(bpe)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer.json: not a tokenizers file"):
        AlbertTokenizer.from_pretrained(broken)


def test_pretraining_data_and_a_run_on_it(tiny_corpus_and_tokenizer, tmp_path, capsys):
    """`albert data create` with a WordPiece tokenizer: the folder carries it (checksummed), whole words
    are "##"-continued, and `albert pretrain` trains a model whose folder holds the same tokenizer."""
    from albert_lm.cli import main
    from albert_lm.data.dataset import PretrainingDataset

    corpus, _ = tiny_corpus_and_tokenizer
    words = sorted({w.strip(".").lower() for w in corpus.read_text().split()})
    folder = _vocab_folder(tmp_path / "vocab")
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n"
    )
    data = tmp_path / "data"
    assert main(["data", "create", "--input", str(corpus), "--tokenizer", str(folder), "--output", str(data),
                 "--max-seq-length", "32", "-q"]) == 0  # fmt: skip
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["tokenizer"]["file"] == "tokenizer.json" and "vocab.txt" in manifest["files"]
    ds = PretrainingDataset(data)
    ds.verify()
    tok = AlbertTokenizer.from_pretrained(folder)
    assert ds.tokenizer_path.name == "tokenizer.json"
    assert AlbertTokenizer.from_pretrained(ds.tokenizer_path).fingerprint == tok.fingerprint
    ids = ds[0]["input_ids"]
    assert ids[0] == tok.cls_token_id and tok.sep_token_id in ids.tolist()
    out = tmp_path / "run"
    tiny = ["--model-override", "hidden_size=32", "--model-override", "num_attention_heads=2",
            "--model-override", "intermediate_size=64", "--model-override", "embedding_size=16",
            "--model-override", "num_hidden_layers=2"]  # fmt: skip
    assert main(["pretrain", "--data", str(data), "--output", str(out), "--max-steps", "2", "--batch-size", "4",
                 "--no-tensorboard", "--no-plot", "-q", *tiny]) == 0  # fmt: skip
    assert AlbertTokenizer.from_pretrained(out).fingerprint == tok.fingerprint
    assert not (out / "spiece.model").exists()


def test_a_wordpiece_model_folder_exports_with_its_tokenizer(bert_folder, tmp_path):
    """`albert export` carries a WordPiece model's tokenizer.json and vocab.txt: the exported folder is
    read by transformers' tokenizer to the model's ids."""
    pytest.importorskip("onnxruntime")
    import torch

    from albert_lm import AlbertConfig, AlbertModel
    from albert_lm.cli import main

    tok = AlbertTokenizer.from_pretrained(bert_folder)
    model_dir = tmp_path / "model"
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)  # fmt: skip
    AlbertModel(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(model_dir), "--output", str(out), "-q"]) == 0
    assert {"tokenizer.json", "vocab.txt", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "spiece.model").exists()
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    assert [theirs(t)["input_ids"] for t in TEXTS] == [tok.encode(t) for t in TEXTS]
