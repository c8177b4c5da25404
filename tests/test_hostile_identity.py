"""Identity checked by content, not by shape: a teacher cache holding another teacher's outputs (of the same
texts, rows, width and dtype) is computed again, and a sharded teacher's fingerprint covers its shards; a
WordPiece vocabulary gives ids 0..V-1 exactly once each (a repeated line in vocab.txt, two pieces on one
id or a gap in tokenizer.json are refused, naming the file); a tokenizer config's booleans are JSON
booleans (`"tokenize_chinese_chars": "false"` is refused, not read as true), on the student's side and on
the teacher's.

Every fixture is tiny and made here, offline: WordPiece folders of a few words, teacher folders of
config.json and a vocabulary (no model is loaded), a teacher cache filled by a stand-in teacher."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_bad_input import refused

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.distill.cache import TeacherCache, cached_teacher_outputs
from albert_lm.distill.teacher_files import check_encoder, fingerprint
from albert_lm.files import InputError

pytest.importorskip("tokenizers")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "dog", "cat", "runs", "river", "bank", "##s", "."]
TEXTS = [f"text {i}" for i in range(10)]


def _wordpiece(folder: Path, pieces: list[str] | None = None, config: dict | None = None) -> Path:
    """A WordPiece tokenizer folder: vocab.txt (and tokenizer_config.json with `config`)."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(SPECIALS + WORDS if pieces is None else pieces) + "\n")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _with_tokenizer_json(folder: Path, edit: dict[str, int]) -> Path:
    """`folder` saved as tokenizer.json alone, its vocabulary's ids changed by `edit` (piece -> id)."""
    AlbertTokenizer.from_pretrained(folder).save_pretrained(folder)
    state = json.loads((folder / "tokenizer.json").read_text())
    state["model"]["vocab"].update(edit)
    (folder / "tokenizer.json").write_text(json.dumps(state))
    (folder / "vocab.txt").unlink()
    return folder


def _data_create(folder: Path, tmp_path: Path) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the dog runs by the river.\nthe cat runs.\n\nthe bank of the river.\n")
    return ["data", "create", "--input", str(corpus), "--tokenizer", str(folder), "--output",
            str(tmp_path / "data"), "--max-seq-length", "16", "--workers", "1", "--no-progress"]  # fmt: skip


# --------------------------------------------------------------------------- (a) caches of another teacher
def _cache(root: Path, teacher: str) -> TeacherCache:
    return TeacherCache(root, "sentence", teacher, TEXTS, 2, "float32", {"teacher": teacher})


def _outputs(value: float):
    return lambda batch: np.full((len(batch), 2), value, np.float32)


@pytest.mark.parametrize("record", ["another teacher's fingerprint", "no fingerprint (an older cache)"])
def test_a_cache_holding_another_teachers_outputs_is_computed_again(tmp_path, caplog, record):
    """Teacher A's entry put where teacher B's belongs (a cache copied or synced by hand): the texts,
    rows, width and dtype all match, but the record names teacher A (or no teacher); B's outputs are
    computed, never A's used, and the warning names the cache's record."""
    a = _cache(tmp_path, "teacher-a")
    a.fill(_outputs(1.0), batch_size=4, progress=False)
    b = _cache(tmp_path, "teacher-b")
    shutil.copytree(a.folder, b.folder)
    if record.startswith("no"):
        meta = json.loads((b.folder / "meta.json").read_text())
        del meta["teacher_fingerprint"]
        (b.folder / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="albert_lm.distill.cache"):
        values = cached_teacher_outputs(
            _cache(tmp_path, "teacher-b"), _outputs(2.0), 4, None, "t", progress=False
        )
    np.testing.assert_array_equal(values, np.full((len(TEXTS), 2), 2.0, np.float32))
    assert "meta.json" in caplog.text and "teacher" in caplog.text
    assert json.loads((b.folder / "meta.json").read_text())["teacher_fingerprint"] == "teacher-b"
    np.testing.assert_array_equal(a.values(), np.ones((len(TEXTS), 2), np.float32))  # A's entry is A's


def test_a_sharded_teachers_fingerprint_covers_its_shards(tmp_path):
    """Two teachers of one shape saved in shards have the same config.json and index, and differ only in
    their shard files: their fingerprints (the key of their cache entries) must differ."""
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = {"metadata": {"total_size": 8}, "weight_map": {"a.weight": shards[0], "b.weight": shards[1]}}
    prints = []
    for name, weights in (("one", b"1111"), ("two", b"2222")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        (folder / shards[0]).write_bytes(b"same")
        (folder / shards[1]).write_bytes(weights)
        prints.append(fingerprint(folder, "sentence;mean"))
    assert prints[0] != prints[1]


# --------------------------------------------------------------------------- (b) WordPiece ids
def test_a_vocab_txt_with_a_repeated_piece_is_refused(tmp_path, capsys):
    """One repeated line would leave its first id without a piece and give a later piece an id past the
    embedding rows: refused naming the file, the line and the piece, in the reader and in a command."""
    folder = _wordpiece(tmp_path / "dup", SPECIALS + ["the", "dog", "the", "cat", "runs", "."])
    with pytest.raises(InputError, match=r"dup/vocab.txt:8: .*'the'.*line 6"):
        AlbertTokenizer.from_pretrained(folder)
    refused(capsys, _data_create(folder, tmp_path), str(folder / "vocab.txt"), "'the'", "line 6")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "edit, named",
    [({"cat": 6}, ["id 6", "'dog'", "'cat'"]), ({"cat": 40}, ["id 40", "no piece has id"])],
    ids=["two pieces on one id", "a gap in the ids"],
)
def test_a_tokenizer_json_whose_ids_are_not_0_to_v_minus_1_once_each_is_refused(
    tmp_path, capsys, edit, named
):
    folder = _with_tokenizer_json(_wordpiece(tmp_path / "ids"), edit)
    with pytest.raises(InputError, match="tokenizer.json") as e:
        AlbertTokenizer.from_pretrained(folder)
    assert all(text in str(e.value) for text in named), str(e.value)
    refused(capsys, _data_create(folder, tmp_path), str(folder / "tokenizer.json"), *named)


def test_a_teachers_vocabulary_with_a_repeated_piece_is_refused(tmp_path):
    """The teacher's tokenizer is read by transformers, which maps a repeated line alike: refused before."""
    teacher = _wordpiece(
        tmp_path / "teacher", SPECIALS + ["the", "dog", "the", "cat"] + [f"w{i}" for i in range(99)]
    )
    (teacher / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 107}))
    with pytest.raises(InputError, match=r"teacher/vocab.txt:8: .*'the'"):
        check_encoder(teacher)


# --------------------------------------------------------------------------- (c) booleans
def test_a_string_where_a_tokenizer_boolean_belongs_is_refused(tmp_path, capsys):
    """ "false" is a non-empty string: read as a boolean it would be true. Every reader of a tokenizer
    config (WordPiece, SentencePiece, a teacher's) refuses it naming the file and the field."""
    folder = _wordpiece(tmp_path / "chinese", config={"tokenize_chinese_chars": "false"})
    message = r'tokenizer_config.json: tokenize_chinese_chars: expected true or false, got "false"'
    with pytest.raises(InputError, match=message):
        AlbertTokenizer.from_pretrained(folder)
    refused(
        capsys,
        _data_create(folder, tmp_path),
        str(folder / "tokenizer_config.json"),
        "tokenize_chinese_chars",
    )
    cased = _wordpiece(tmp_path / "cased", config={"do_lower_case": "false"})
    with pytest.raises(InputError, match=r'do_lower_case: expected true or false, got "false"'):
        AlbertTokenizer.from_pretrained(cased)
    teacher = _wordpiece(tmp_path / "teacher", config={"do_basic_tokenize": "false"})
    (teacher / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(
        InputError, match=r"teacher/tokenizer_config.json: do_basic_tokenize: expected true or"
    ):
        check_encoder(teacher)


def test_a_sentencepiece_configs_string_boolean_is_refused_alike(tiny_corpus_and_tokenizer, tmp_path):
    _, tok = tiny_corpus_and_tokenizer
    folder = tmp_path / "sp"
    AlbertTokenizer.from_pretrained(tok).save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "keep_accents": "false"}))
    with pytest.raises(
        InputError, match=r'sp/tokenizer_config.json: keep_accents: expected true or false, got "false"'
    ):
        AlbertTokenizer.from_pretrained(folder)
