"""Tests of example creation, masking, shards and PretrainingDataset (albert_lm.data.examples, masking,
shards, dataset), on generated documents and on the `small` tier of the shared Gutenberg books."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from albert_lm.cli import main
from albert_lm.data.dataset import PretrainingDataset, PretrainingSampler, collate_pretraining
from albert_lm.data.examples import (
    DataConfig,
    Document,
    ExampleBuffer,
    ExampleStats,
    examples_from_document,
    truncate_pair_randomly,
)
from albert_lm.data.manifest import format_summary
from albert_lm.data.masking import mask_sequence, replace_masked, word_spans, word_start_table
from albert_lm.data.shards import create_pretraining_data

MAX_LEN = 128


# ----------------------------------------------------------------------------- example creation (synthetic)
def _synthetic_docs(n_docs: int, rng: np.random.Generator) -> list[Document]:
    """Every id of document d's sentence s is 1000 * d + s + 5: the origin of any token is readable."""
    docs = []
    for d in range(n_docs):
        n_sent = int(rng.integers(1, 40))
        sents = [np.full(int(rng.integers(3, 40)), 1000 * d + s + 5) for s in range(n_sent)]
        docs.append(Document.from_sentences(sents, np.dtype(np.int32)))
    return docs


def _origin(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = ids.astype(np.int64) - 5
    return v // 1000, v % 1000  # (document, sentence)


@pytest.mark.parametrize("objective", ["sop", "nsp"])
def test_pairs_follow_the_objective(objective: str) -> None:
    rng = np.random.default_rng(0)
    docs = _synthetic_docs(60, rng)
    cfg = DataConfig(max_seq_length=64, objective=objective)
    out, stats = ExampleBuffer.empty(), ExampleStats()
    for d in range(len(docs)):
        examples_from_document(docs, d, cfg, rng, out, stats, dtype=np.dtype(np.int32))
    assert stats.examples == len(out.rows) > 300
    for row, a_len, label in zip(out.rows, out.a_lens, out.labels, strict=True):
        assert len(row) <= 64 and row[0] == 2 and row[a_len + 1] == 3 and row[-1] == 3
        a, b = row[1 : a_len + 1], row[a_len + 2 : -1]
        (da, sa), (db, sb) = _origin(a), _origin(b)
        assert len(set(da)) == 1 and len(set(db)) == 1  # each segment comes from one document
        assert np.all(np.diff(sa) >= 0) and np.all(np.diff(sb) >= 0)  # in order inside a segment
        if objective == "sop":
            assert da[0] == db[0]  # never another document in SOP mode
            assert (sa.max() < sb.min()) == (label == 0)  # label 1 <=> B comes before A
        else:
            assert (da[0] != db[0]) == (label == 1)  # label 1 <=> B from another document
            if label == 0:
                assert sa.max() < sb.min()
    if objective == "sop":
        assert abs(np.mean(out.labels) - 0.5) < 0.06
    else:  # google-research's rule, kept for NSP: a lone-sentence chunk always gets a random B
        assert 0.5 < np.mean(out.labels) < 0.65


def test_lone_last_sentence_is_dropped_and_counted() -> None:
    i32 = np.dtype(np.int32)
    docs = [
        Document.from_sentences([np.arange(5, 200)], i32),
        Document.from_sentences([np.full(10, 7), np.full(10, 8)], i32),
    ]
    out, stats = ExampleBuffer.empty(), ExampleStats()
    cfg = DataConfig(max_seq_length=64, short_seq_prob=0.0)
    rng = np.random.default_rng(1)
    examples_from_document(docs, 0, cfg, rng, out, stats, dtype=np.dtype(np.int32))
    assert stats.examples == 0 and stats.dropped_lone_sentences == 1
    examples_from_document(docs, 1, cfg, rng, out, stats, dtype=np.dtype(np.int32))
    assert stats.examples == 1 and sorted(out.rows[0][1:-1].tolist()) == [3] + [7] * 10 + [8] * 10


def test_truncate_pair_randomly_matches_the_reference_loop() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        la, lb, limit = (int(x) for x in rng.integers(1, 80, size=3))
        a, b = np.arange(la), np.arange(100, 100 + lb)
        ta, tb = truncate_pair_randomly(a, b, limit, rng)
        ra, rb = la, lb  # google-research truncate_seq_pair, lengths only
        while ra + rb > limit:
            if ra > rb:
                ra -= 1
            else:
                rb -= 1
        assert (len(ta), len(tb)) == (ra, rb)
        # what is left is one contiguous piece of each side
        assert np.all(np.diff(ta) == 1) and np.all(np.diff(tb) == 1)


# ----------------------------------------------------------------------------- masking (synthetic)
def test_word_spans_end_at_special_tokens() -> None:
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "\u2581a", "b", "\u2581c"]
    ids = np.array([2, 5, 6, 7, 3, 6, 7, 3])  # [CLS] ▁a b ▁c [SEP] b ▁c [SEP]
    special = np.isin(ids, [2, 3])
    starts, ends = word_spans(ids, word_start_table(pieces), special)
    # "b" right after [SEP] starts a word of its own: [CLS] and [SEP] end words
    assert starts.tolist() == [1, 3, 5, 6] and ends.tolist() == [3, 4, 6, 7]


def test_replace_masked_keeps_the_80_10_10_split() -> None:
    ids = np.full(20000, 7)
    positions = np.arange(0, 20000, 2)
    out = replace_masked(ids, positions, np.random.default_rng(0), vocab_size=100, mask_id=4)
    assert np.all(out[1::2] == 7) and np.all((out[positions] == 4) | (out[positions] >= 5))
    assert abs(np.mean(out[positions] == 4) - 0.8) < 0.02


def test_mask_sequence_whole_words_and_replacements() -> None:
    pieces = (
        ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        + [f"\u2581w{i}" for i in range(50)]
        + [f"x{c}" for c in "abcdefghij"]
    )
    ws = word_start_table(pieces)
    rng = np.random.default_rng(0)
    replaced = kept = masked = total = 0
    for _ in range(400):
        body = rng.integers(5, len(pieces), size=120)
        body[0] = 5  # starts with a word start
        ids = np.concatenate([[2], body[:60], [3], body[60:], [3]])
        out, pos, lab = mask_sequence(ids, ws, rng, len(pieces))
        assert len(pos) <= 20 and np.all(lab == ids[pos])
        assert not np.isin(ids[pos], [2, 3]).any()
        chosen = set(pos.tolist())
        for p in pos:  # whole words: the pieces continuing a masked word are masked too
            q = p + 1
            while q < len(ids) and ids[q] not in (2, 3) and not ws[ids[q]]:
                assert q in chosen
                q += 1
        masked += int((out[pos] == 4).sum())
        kept += int((out[pos] == ids[pos]).sum())
        replaced += int(((out[pos] != 4) & (out[pos] != ids[pos])).sum())
        total += len(pos)
        assert (out[pos][out[pos] != 4] >= 5).all()  # random replacements are never special pieces
    assert (
        abs(masked / total - 0.8) < 0.03
        and abs(kept / total - 0.1) < 0.03
        and abs(replaced / total - 0.1) < 0.03
    )


# ----------------------------------------------------------------------------- real data: the small tier
def _small_books(albert_data: Path) -> list[Path]:
    root = albert_data / "pretrain" / "gutenberg"
    rows = [r.split("\t") for r in (root / "MANIFEST.tsv").read_text().splitlines()[2:]]
    return sorted(root / "books" / r[0] for r in rows if r[1] == "small")


@pytest.fixture(scope="module")
def small_data(albert_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small") / "data"
    cfg = DataConfig(
        max_seq_length=MAX_LEN, input_format="paragraphs", strip_gutenberg=True, eval_fraction=0.05
    )
    create_pretraining_data(
        _small_books(albert_data),
        albert_data / "tokenizer" / "albert-30k",
        out,
        cfg,
        num_workers=2,
        progress=False,
    )
    return out


def test_real_data_pairs_lengths_and_rates(small_data: Path) -> None:
    manifest = json.loads((small_data / "manifest.json").read_text())
    ds = PretrainingDataset(small_data)
    assert ds.objective == "sop" and ds.max_seq_length == MAX_LEN and ds.vocab_size == 30000
    assert ds.tokenizer_path.read_bytes()[:2] and len(ds) > 10_000
    lengths, labels = [], []
    for k in range(len(ds._shard_dirs)):
        s = ds._shard(k)
        lengths.append(np.diff(s["offsets"]))
        labels.append(np.asarray(s["labels"]))
    lengths, labels = np.concatenate(lengths), np.concatenate(labels)
    assert lengths.max() <= MAX_LEN  # no example over max_seq_length
    assert abs(labels.mean() - 0.5) <= 0.02  # swap rate
    assert abs(manifest["summary"]["short_target_rate"] - 0.10) <= 0.015  # about 10% short targets
    # short targets show in the lengths: about 10% are well below the limit (a few more: document ends)
    assert 0.04 <= (lengths < 0.8 * MAX_LEN).mean() <= 0.16


def test_real_data_masking_statistics(small_data: Path) -> None:
    ds = PretrainingDataset(small_data)
    idx = np.random.default_rng(0).choice(len(ds), size=4000, replace=False)
    masked = maskable = 0
    for i in idx.tolist():
        item = ds[int(i)]
        n_masked = int((item["labels"] != -100).sum())
        masked += n_masked
        maskable += len(item["input_ids"]) - 3
        assert n_masked <= ds.config.max_predictions_per_seq
    assert abs(masked / maskable - 0.15) <= 0.005  # masked fraction of the text tokens
    spans: list[int] = []
    rng = np.random.default_rng(1)
    s = ds._shard(0)
    for e in range(3000):
        ids = np.asarray(s["tokens"][s["offsets"][e] : s["offsets"][e + 1]], dtype=np.int64)
        mask_sequence(ids, ds.word_start, rng, ds.vocab_size, span_log=spans)
    freq = np.bincount(spans, minlength=4)[1:4] / len(spans)
    assert np.all(np.abs(freq - np.array([6, 3, 2]) / 11) <= 0.02), freq


def test_dataset_items_and_dynamic_masking(small_data: Path) -> None:
    ds = PretrainingDataset(small_data)
    item = ds[5]
    assert set(item) == {"input_ids", "token_type_ids", "attention_mask", "labels", "sentence_order_label"}
    assert all(v.dtype == torch.int64 for v in item.values()) and item["sentence_order_label"].dim() == 0
    t = len(item["input_ids"])
    assert all(item[k].shape == (t,) for k in ("token_type_ids", "attention_mask", "labels"))
    first_sep = int((item["token_type_ids"] == 0).sum()) - 1
    assert item["input_ids"][0] == 2 and item["input_ids"][first_sep] == 3 and item["input_ids"][-1] == 3
    assert torch.equal(ds[5]["input_ids"], item["input_ids"])  # deterministic within an epoch
    ds.set_epoch(1)
    assert not torch.equal(ds[5]["labels"], item["labels"])  # new masks each epoch
    ds.set_epoch(0)
    assert torch.equal(ds[5]["labels"], item["labels"])  # and the same again on resume
    ev = PretrainingDataset(small_data, split="eval")
    assert 0 < len(ev) < len(ds) // 5
    batch = collate_pretraining([ds[0], ds[1], ev[0]])
    width = max(len(ds[0]["input_ids"]), len(ds[1]["input_ids"]), len(ev[0]["input_ids"]))
    assert batch["input_ids"].shape == (3, width) and batch["sentence_order_label"].shape == (3,)
    for b, it in enumerate([ds[0], ds[1], ev[0]]):
        n = len(it["input_ids"])
        assert batch["attention_mask"][b].sum() == n and (batch["labels"][b, n:] == -100).all()


def test_two_ranks_see_disjoint_examples(small_data: Path) -> None:
    ds = PretrainingDataset(small_data)
    r0 = list(PretrainingSampler(ds, num_replicas=2, rank=0, seed=3))
    r1 = list(PretrainingSampler(ds, num_replicas=2, rank=1, seed=3))
    assert len(r0) == len(r1) == len(ds) // 2
    assert not set(r0) & set(r1) and len(set(r0) | set(r1)) == 2 * (len(ds) // 2)
    s = PretrainingSampler(ds, num_replicas=2, rank=0, seed=3)
    s.set_epoch(1)
    assert list(s) != r0 and ds.epoch == 1


# ----------------------------------------------------------------------------- reproducibility, resume, bad input
@pytest.fixture(scope="module")
def tiny_setup(tiny_corpus_and_tokenizer: tuple[Path, Path]) -> tuple[Path, Path]:
    """A generated corpus in google-research's format and a 200-piece tokenizer trained on it."""
    return tiny_corpus_and_tokenizer


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_whatever_the_workers(tiny_setup: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, tok = tiny_setup
    cfg = dict(max_seq_length=48, block_bytes=2048, shard_bytes=4096, masking="static", dupe_factor=2)
    create_pretraining_data([corpus], tok, tmp_path / "a", DataConfig(**cfg), num_workers=1, progress=False)
    create_pretraining_data([corpus], tok, tmp_path / "b", DataConfig(**cfg), num_workers=2, progress=False)
    create_pretraining_data(
        [corpus], tok, tmp_path / "c", DataConfig(**cfg, seed=7), num_workers=2, progress=False
    )
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert len(a) > 20 and a == b
    assert a["train/00000/tokens.npy"] != c["train/00000/tokens.npy"]
    ds = PretrainingDataset(tmp_path / "a")
    assert ds.masking == "static" and all(int((ds[i]["labels"] != -100).sum()) > 0 for i in range(20))


def test_killed_run_is_not_trusted_and_resumes(tiny_setup: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, tok = tiny_setup
    cfg = DataConfig(max_seq_length=48, block_bytes=2048, shard_bytes=4096)
    out = tmp_path / "out"
    create_pretraining_data([corpus], tok, out, cfg, num_workers=1, progress=False)
    reference = _files(out)
    # simulate a run killed in the middle: no manifest, one shard half written, one never renamed
    (out / "manifest.json").unlink()
    shutil.rmtree(out / "train" / "00002")
    (out / "train" / "00003.tmp-999").mkdir()
    (out / "train" / "00003.tmp-999" / "tokens.npy").write_bytes(b"half")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        PretrainingDataset(out)
    mtime = (out / "train" / "00000" / "tokens.npy").stat().st_mtime_ns
    resumed = create_pretraining_data([corpus], tok, out, cfg, num_workers=2, progress=False)
    assert (out / "train" / "00000" / "tokens.npy").stat().st_mtime_ns == mtime  # finished shard skipped
    assert _files(out) == reference
    # its summary says what was kept, and its rate is that of the text it made, not the kept shards'
    shards = len(list((out / "train").iterdir())) + len(list((out / "eval").iterdir()))
    kept = resumed["summary"]["resumed"]
    assert kept["shards_kept"] == shards - 1 and kept["shards"] == shards  # 00002 made again
    assert 0 < kept["made_bytes"] < resumed["summary"]["input_bytes"]
    assert f"{shards - 1} of {shards} shards kept from the stopped run" in format_summary(resumed)
    # the same command again: nothing to do; other settings: refused
    create_pretraining_data([corpus], tok, out, cfg, num_workers=1, progress=False)
    other = DataConfig(max_seq_length=64, block_bytes=2048, shard_bytes=4096)
    with pytest.raises(FileExistsError, match="finished pretraining data made otherwise") as refused:
        create_pretraining_data([corpus], tok, out, other, progress=False)
    assert "(max_seq_length: 48 there, 64 now)" in str(refused.value)  # what differs, named
    assert "rerun the command" not in str(refused.value)  # it is finished: nothing to rerun


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["data", "create", "--no-progress", "--workers", "1", *args])
    return code, capsys.readouterr().err


def test_cli_bad_input(
    tiny_setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, tok = tiny_setup
    base = ["--tokenizer", str(tok), "--max-seq-length", "48"]
    code, _ = _cli(["--input", str(corpus), "--output", str(tmp_path / "ok"), *base], capsys)
    assert code == 0 and (tmp_path / "ok" / "manifest.json").is_file()

    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes(corpus.read_bytes()[:300] + b"caf\xe9\n\n" + corpus.read_bytes()[300:])
    one_sentence = tmp_path / "one.txt"
    one_sentence.write_text(
        "\n\n".join(f"Document {i} has one sentence." for i in range(50)), encoding="utf-8"
    )
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    cases = [
        (["--input", str(empty), "--output", str(tmp_path / "o1"), *base], "empty input file"),
        (["--input", str(binary), "--output", str(tmp_path / "o2"), *base], "binary file"),
        (
            ["--input", str(latin), "--output", str(tmp_path / "o3"), *base],
            "invalid UTF-8 at byte offset 303",
        ),
        (["--input", str(one_sentence), "--output", str(tmp_path / "o4"), *base], "no training examples"),
        (["--input", str(corpus), "--output", str(tmp_path / "taken"), *base], "holds other files"),
        (
            [
                "--input",
                str(corpus),
                "--output",
                str(tmp_path / "o5"),
                "--tokenizer",
                str(corpus),
                "--max-seq-length",
                "48",
            ],
            "not a SentencePiece model",
        ),
    ]
    for args, message in cases:
        code, err = _cli(args, capsys)
        assert code == 1 and message in err, (args, err)
        assert err.count("\n") == 1  # one line, no traceback
    code, err = _cli(
        ["--input", str(latin), "--output", str(tmp_path / "o6"), "--skip-invalid-utf8", *base], capsys
    )
    assert code == 0
    assert (
        json.loads((tmp_path / "o6" / "manifest.json").read_text())["summary"]["skipped_invalid_utf8_lines"]
        == 1
    )


@pytest.mark.parametrize("argv", [["data", "create", "--help"], ["tokenizer", "train", "--help"]])
def test_cli_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0 and "--input" in capsys.readouterr().out


def test_nsp_data_end_to_end(tiny_setup: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, tok = tiny_setup
    cfg = DataConfig(
        max_seq_length=48, objective="nsp", block_bytes=4096, shard_bytes=16384, eval_fraction=0.0
    )
    manifest = create_pretraining_data([corpus], tok, tmp_path / "nsp", cfg, num_workers=1, progress=False)
    ds = PretrainingDataset(tmp_path / "nsp")
    assert (
        ds.objective == "nsp"
        and manifest["objective"] == "nsp"
        and len(PretrainingDataset(tmp_path / "nsp", "eval")) == 0
    )
    labels = np.array([int(ds[i]["sentence_order_label"]) for i in range(len(ds))])
    assert 0.4 < labels.mean() < 0.7  # about half random B (more: lone-sentence chunks, as google-research)


def test_real_text_same_seed_same_bytes(albert_data: Path, tmp_path: Path) -> None:
    books = _small_books(albert_data)[:3]
    tok = albert_data / "tokenizer" / "albert-30k"
    cfg = dict(max_seq_length=MAX_LEN, input_format="paragraphs", strip_gutenberg=True, shard_bytes=1 << 19)
    cfg["block_bytes"] = 1 << 18
    for name, workers in (("a", 1), ("b", 2)):
        create_pretraining_data(
            books, tok, tmp_path / name, DataConfig(**cfg), num_workers=workers, progress=False
        )
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert sum(k.endswith("tokens.npy") for k in a) > 2 and a == b


def test_training_masking_rate_overrides_the_datas(tiny_setup: tuple[Path, Path], tmp_path: Path) -> None:
    """`PretrainConfig.masked_lm_prob`: the training split masked at another rate, drawn when read; the
    held-out split keeps the data's rate (pretrain_setup), static data refuses."""
    corpus, tok = tiny_setup
    out = tmp_path / "dyn"
    cfg = DataConfig(max_seq_length=48, block_bytes=2048, shard_bytes=4096, max_predictions_per_seq=8)
    create_pretraining_data([corpus], tok, out, cfg, num_workers=1, progress=False)

    def masked(ds: PretrainingDataset) -> np.ndarray:
        return np.array([int((ds[i]["labels"] != -100).sum()) for i in range(len(ds))])

    base, more = PretrainingDataset(out), PretrainingDataset(out, masked_lm_prob=0.4)
    assert more.config.max_predictions_per_seq == 22  # 8 x 0.4 / 0.15 = 21.3, rounded up
    assert (more.config.masked_lm_prob, base.config.masked_lm_prob) == (0.4, 0.15)
    n_base, n_more = masked(base), masked(more)
    assert n_base.max() <= 8 and n_more.max() <= 22
    assert n_more.mean() > 2 * n_base.mean()
    assert torch.equal(base[0]["input_ids"], PretrainingDataset(out)[0]["input_ids"])  # still a pure function
    capped = PretrainingDataset(out, masked_lm_prob=0.4, max_predictions_per_seq=3)
    assert masked(capped).max() <= 3

    from albert_lm.training.pretrain_config import PretrainConfig
    from albert_lm.training.pretrain_setup import _load_data

    train, held_out, _ = _load_data(PretrainConfig(data=str(out), masked_lm_prob=0.4))
    assert train.config.masked_lm_prob == 0.4 and held_out.config.masked_lm_prob == 0.15
    with pytest.raises(ValueError, match=r"masked_lm_prob must be in \[0, 1\)"):
        PretrainConfig(masked_lm_prob=1.5)

    static = tmp_path / "static"
    create_pretraining_data(
        [corpus], tok, static, dataclasses.replace(cfg, masking="static"), num_workers=1, progress=False
    )
    with pytest.raises(ValueError, match="static.*recreate it with --masking dynamic"):
        PretrainingDataset(static, masked_lm_prob=0.4)


def test_a_missing_data_folder_or_a_folder_for_eval_text_is_named_as_such(tmp_path: Path) -> None:
    from albert_lm.data.dataset import text_eval_dataset

    with pytest.raises(FileNotFoundError, match="no-data: no such folder"):
        PretrainingDataset(tmp_path / "no-data")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="file: not a folder"):
        PretrainingDataset(tmp_path / "file")
    with pytest.raises(IsADirectoryError, match="is a folder; expected one text file"):
        text_eval_dataset(tmp_path, None, 64)
