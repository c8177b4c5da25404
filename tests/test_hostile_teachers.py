"""Hostile teachers and teacher caches for `albert distill`: a teacher is trusted only once its tokenizer
reads the text, its weights hold every weight its model uses (a task teacher's classifier included) and
its files load; every error loading one names the teacher's folder and the file; no code or pickled
object of the folder is ever run. A teacher cache edited between runs is computed again, never used as
it is, and two runs filling one entry at once do not mix their writes.

Teachers are tiny random BERTs made offline (transformers' BertModel / BertForSequenceClassification,
H 32, a WordPiece vocabulary of the test corpus' words)."""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TINY_BERT, TINY_MODEL, distill_general_argv, distill_task_argv
from test_bad_input import refused

from albert_lm.cli import main
from albert_lm.distill import cache as distill_cache
from albert_lm.distill import teacher
from albert_lm.distill.cache import TeacherCache
from albert_lm.files import InputError

transformers = pytest.importorskip("transformers")
# torch's weights-only reader warns about the pickle protocol of the hostile files before refusing them
pytestmark = pytest.mark.filterwarnings("ignore:Detected pickle protocol")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
STUDENT = ["hidden_size=32", "num_attention_heads=2", "intermediate_size=64", "embedding_size=16",
           "num_hidden_layers=2", "max_position_embeddings=64"]  # fmt: skip
QUICK = ["--max-steps", "2", "--warmup-steps", "1", "--batch-size", "8", "--precision", "fp32", "--no-tensorboard",
         "--no-plot", "-q"]  # fmt: skip


def _bert(folder: Path, vocab: list[str], classifier: bool = False) -> Path:
    """A random tiny BERT (a neg/pos classifier with `classifier`) and its WordPiece tokenizer."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab), id2label={0: "neg", 1: "pos"}, **TINY_BERT)
    model = (transformers.BertForSequenceClassification if classifier else transformers.BertModel)(config)
    model.save_pretrained(folder)
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def world(tiny_corpus_and_tokenizer, tmp_path_factory) -> SimpleNamespace:
    """The corpus, the student's tokenizer, a sentence teacher and a task teacher of the corpus' words,
    and a classification task of its sentences."""
    corpus, tok = tiny_corpus_and_tokenizer
    root = tmp_path_factory.mktemp("teachers")
    sentences = [s for s in corpus.read_text().splitlines() if s.strip()]
    vocab = SPECIALS + sorted({w.strip(".").lower() for s in sentences for w in s.split()} | {"."})
    task = root / "task"
    task.mkdir()
    for name, part in (("train", sentences[:40]), ("dev", sentences[40:60])):
        rows = [json.dumps({"text": s, "label": "pos" if len(s) % 2 else "neg"}) for s in part]
        (task / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
    student = root / "student"
    torch.manual_seed(0)
    from albert_lm import AlbertConfig, AlbertForPreTraining, AlbertTokenizer

    AlbertForPreTraining(AlbertConfig(**{**TINY_MODEL, "vocab_size": 200})).save_pretrained(student)
    AlbertTokenizer.from_pretrained(tok).save_pretrained(student)
    return SimpleNamespace(
        root=root,
        corpus=corpus,
        tok=tok,
        vocab=vocab,
        task=task,
        student=student,
        sentence=_bert(root / "sentence", vocab),
        task_teacher=_bert(root / "task_teacher", vocab, True),
    )


def _general(w: SimpleNamespace, teacher_dir: Path, out: Path, cache: Path) -> list[str]:
    over = [x for o in STUDENT for x in ("--model-override", o)]
    segments = ["--max-segments", "200", "--eval-segments", "10"]
    return distill_general_argv(teacher_dir, w.corpus, w.tok, out, cache, *segments, *QUICK, *over)


def _task(w: SimpleNamespace, teacher_dir: Path, out: Path, cache: Path) -> list[str]:
    return distill_task_argv(w.student, teacher_dir, w.task, out, cache, "--max-seq-length", "32", *QUICK)


def _copy(source: Path, folder: Path) -> Path:
    shutil.copytree(source, folder)
    return folder


def _edit_json(file: Path, **changes: object) -> None:
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))


# --------------------------------------------------------------------------- 1. the tokenizer reads the text
def test_a_teacher_whose_tokenizer_cannot_read_the_text_is_refused(world, tmp_path, capsys):
    bare = _copy(world.sentence, tmp_path / "no_tokenizer")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()  # transformers would make a 5-token tokenizer: every word [UNK]
    out = tmp_path / "out"
    refused(capsys, _general(world, bare, out, tmp_path / "cache"), str(bare), "tokenizer.json", "vocab.txt")
    refused(capsys, _task(world, bare, out, tmp_path / "cache"), str(bare), "tokenizer.json")
    foreign = _bert(tmp_path / "english", SPECIALS + [f"english{i}" for i in range(200)])
    refused(
        capsys, _general(world, foreign, out, tmp_path / "cache"), str(foreign / "tokenizer.json"), "[UNK]"
    )
    larger = _copy(world.sentence, tmp_path / "larger")
    (larger / "tokenizer.json").unlink()
    (larger / "vocab.txt").write_text("\n".join(world.vocab + [f"extra{i}" for i in range(50)]) + "\n")
    refused(capsys, _general(world, larger, out, tmp_path / "cache"), str(larger / "vocab.txt"), "vocab_size")
    assert not out.exists() and not list((tmp_path / "cache").rglob("values.npy"))  # nothing was taught


# --------------------------------------------------------------------------- 2. the task teacher's head
def test_a_task_teacher_without_a_trained_classifier_is_refused(world, tmp_path, capsys):
    out = tmp_path / "out"
    line = refused(
        capsys,
        _task(world, world.sentence, out, tmp_path / "cache"),
        str(world.sentence / "model.safetensors"),
        "classifier.weight",
        "classifier.bias",
    )
    assert "random" in line
    as_bin = _copy(world.sentence, tmp_path / "bin")  # the same, saved by torch.save
    from safetensors.torch import load_file

    torch.save(load_file(as_bin / "model.safetensors"), as_bin / "pytorch_model.bin")
    (as_bin / "model.safetensors").unlink()
    refused(
        capsys, _task(world, as_bin, out, tmp_path / "cache"), str(as_bin / "pytorch_model.bin"), "classifier"
    )
    assert main(_task(world, world.task_teacher, out, tmp_path / "cache")) == 0  # a trained head teaches


# --------------------------------------------------------------------------- 3. errors name the file
class _Opens:
    """Unpickled, it would create a file: what a hostile pytorch_model.bin holds."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def _pickled(f: Path) -> None:
    (f / "model.safetensors").unlink()
    with open(f / "pytorch_model.bin", "wb") as out:
        pickle.dump({"embeddings.word_embeddings.weight": _Opens(str(f / "RAN"))}, out)


def _remote_code(f: Path) -> None:
    _edit_json(
        f / "config.json", model_type="hostile-bert", auto_map={"AutoConfig": "code.C", "AutoModel": "code.M"}
    )
    (f / "code.py").write_text(f"open({str(f / 'RAN')!r}, 'w')\n")


DAMAGE = {  # name: (what is done to a copy of the sentence teacher, the file the refusal names, a word of it)
    "pickled weights": (_pickled, "pytorch_model.bin", "weights only"),
    "truncated weights": (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:999]),
                          "model.safetensors", "header"),
    "weights of another shape": (lambda f: _edit_json(f / "config.json", hidden_size=64, num_attention_heads=4),
                                 "model.safetensors", "shapes"),
    "weights of other names": (lambda f: (f / "model.safetensors").write_bytes(_renamed(f / "model.safetensors")),
                               "model.safetensors", "not in the weights"),
    "unknown model type": (lambda f: _edit_json(f / "config.json", model_type="hostile-bert"), "config.json",
                           "hostile-bert"),
    "the folder's own code": (_remote_code, "config.json", "never loaded"),
    "a config value of the wrong type": (lambda f: _edit_json(f / "config.json", hidden_size="32"), "config.json",
                                         "hidden_size"),
    "tokenizer config nested too deeply": (
        lambda f: (f / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000), "tokenizer_config.json",
        "nested"),
    "a vocabulary that is not text": (lambda f: ((f / "tokenizer.json").unlink(),
                                                 (f / "vocab.txt").write_bytes(bytes(range(256)) * 4)),
                                      "vocab.txt", "UTF-8"),
    "weights that give NaN": (lambda f: (f / "model.safetensors").write_bytes(
                                  _renamed(f / "model.safetensors", nan=True)),
                              "model.safetensors", "not finite"),
}  # fmt: skip


def _renamed(weights: Path, nan: bool = False) -> bytes:
    """The weights' bytes, each tensor renamed (or, with `nan`, its layer norms made NaN)."""
    from safetensors.torch import load_file, save

    tensors = load_file(weights)
    if nan:
        return save({k: v * torch.nan if "LayerNorm.weight" in k else v for k, v in tensors.items()})
    return save({f"other.{k}": v for k, v in tensors.items()})


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_error_loading_a_teacher_names_its_file(world, tmp_path, capsys, damage):
    change, file, word = DAMAGE[damage]
    folder = _copy(world.sentence, tmp_path / "teacher")
    change(folder)
    out = tmp_path / "out"
    refused(
        capsys,
        _general(world, folder, out, tmp_path / "cache"),
        str(folder / file),
        word,
        untouched=(folder,),
    )
    assert not (folder / "RAN").exists() and not out.exists()  # no code of the folder ran, nothing written


def test_the_teacher_api_refuses_as_the_command_does(world, tmp_path):
    folder = _copy(world.sentence, tmp_path / "teacher")
    _pickled(folder)
    with pytest.raises(InputError, match="pytorch_model.bin") as e:
        teacher.TaskTeacher(str(folder), torch.device("cpu"))([("ba ke di", None)])
    assert str(folder) in str(e.value) and not (folder / "RAN").exists()


# --------------------------------------------------------------------------- 4. the teacher cache
@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(distill_cache, "CHUNK", 4)
    monkeypatch.setattr(distill_cache, "LOCK_WAIT_S", 0.05, raising=False)


TEXTS = [f"text number {i}" for i in range(10)]


def _value(t: str) -> list[float]:
    return [float(len(t)), float(sum(map(ord, t)) % 97)]


EXPECTED = np.array([_value(t) for t in TEXTS], dtype=np.float32)


def _filled(root: Path) -> tuple[TeacherCache, list[int]]:
    calls: list[int] = []

    def compute(batch: list[str]) -> np.ndarray:
        calls.append(len(batch))
        return np.array([_value(t) for t in batch])

    cache = TeacherCache(root, "sentence", "teacher-key", TEXTS, 2, "float32", {"teacher": "t"})
    np.testing.assert_array_equal(cache.fill(compute, batch_size=4, progress=False), EXPECTED)
    calls.clear()
    return cache, calls


def _refill(cache: TeacherCache, calls: list[int]) -> np.ndarray:
    """The entry read again by a new run (a new TeacherCache), computing what is missing."""
    again = TeacherCache(
        cache.folder.parent, "sentence", "teacher-key", TEXTS, 2, "float32", {"teacher": "t"}
    )
    return np.asarray(
        distill_cache.cached_teacher_outputs(
            again,
            lambda b: (calls.append(len(b)), np.array([_value(t) for t in b]))[1],
            4,
            None,
            "t",
            progress=False,
        )
    )


def test_a_cache_edited_between_runs_is_computed_again(small_chunks, tmp_path, caplog):
    cache, calls = _filled(tmp_path / "rows")
    values = np.load(cache.folder / "values.npy", mmap_mode="r+")
    values[5] = 0.0  # one row of the second chunk replaced
    values.flush()
    del values
    with caplog.at_level(logging.WARNING, logger="albert_lm.distill.cache"):
        np.testing.assert_array_equal(_refill(cache, calls), EXPECTED)
    assert calls == [4, 2]  # from that chunk on: the first one is kept
    assert any("values.npy: rows 4-7 differ" in r.getMessage() for r in caplog.records)

    cache, calls = _filled(tmp_path / "truncated")
    path = cache.folder / "values.npy"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    np.testing.assert_array_equal(_refill(cache, calls), EXPECTED)
    assert calls == [4, 4, 2]

    cache, calls = _filled(tmp_path / "claims")  # the record claims rows that were never written
    np.save(cache.folder / "values.npy", np.zeros((10, 2), np.float32))
    np.testing.assert_array_equal(_refill(cache, calls), EXPECTED)

    cache, calls = _filled(tmp_path / "index")
    _edit_json(cache.folder / "meta.json", rows=3)
    np.testing.assert_array_equal(_refill(cache, calls), EXPECTED)
    assert calls == [4, 4, 2]


def test_a_cache_file_that_is_a_link_is_replaced_not_written_through(small_chunks, tmp_path):
    cache, calls = _filled(tmp_path / "cache")
    mine = tmp_path / "mine.npy"
    np.save(mine, np.zeros((10, 2), np.float32))
    before = mine.read_bytes()
    (cache.folder / "values.npy").unlink()
    (cache.folder / "values.npy").symlink_to(mine)
    np.testing.assert_array_equal(_refill(cache, calls), EXPECTED)
    assert mine.read_bytes() == before and not (cache.folder / "values.npy").is_symlink()


def test_a_fill_that_fails_at_once_leaves_no_entry(small_chunks, tmp_path):
    def failing(batch: list[str]) -> np.ndarray:
        raise ValueError("the teacher does not load")

    cache = TeacherCache(tmp_path, "sentence", "teacher-key", TEXTS, 2, "float32", {})
    with pytest.raises(ValueError, match="does not load"):
        cache.fill(failing, batch_size=4, progress=False)
    assert not cache.folder.exists()  # no record a later run could take for a start, not even the folder


def test_two_runs_filling_one_entry_at_once_share_it(small_chunks, tmp_path):
    calls: list[str] = []

    def slow(batch: list[str]) -> np.ndarray:
        calls.extend(batch)
        time.sleep(0.1)
        return np.array([_value(t) for t in batch])

    results: dict[str, np.ndarray] = {}

    def run(name: str) -> None:
        cache = TeacherCache(tmp_path, "sentence", "teacher-key", TEXTS, 2, "float32", {})
        results[name] = np.asarray(cache.fill(slow, batch_size=2, progress=False))

    first = threading.Thread(target=run, args=("first",))
    first.start()
    time.sleep(0.15)  # the first is filling
    run("second")  # waits for the first, then reads what it wrote
    first.join()
    np.testing.assert_array_equal(results["first"], EXPECTED)
    np.testing.assert_array_equal(results["second"], EXPECTED)
    assert sorted(calls) == sorted(TEXTS)  # each text through the teacher once


def test_a_run_on_an_edited_cache_runs_the_teacher_again(world, tmp_path, caplog):
    cache = tmp_path / "cache"
    assert main(_general(world, world.sentence, tmp_path / "one", cache)) == 0
    values = np.load(next(cache.glob("sentence-*/values.npy")), mmap_mode="r+")
    values[:] = 0.0
    values.flush()
    del values
    before = teacher.forward_batches
    with caplog.at_level(logging.WARNING, logger="albert_lm.distill.cache"):
        assert main(_general(world, world.sentence, tmp_path / "two", cache)) == 0
    assert teacher.forward_batches > before
    assert any("values.npy" in r.getMessage() for r in caplog.records)
    assert np.abs(np.load(next(cache.glob("sentence-*/values.npy"))).astype(np.float32)).sum() > 0
