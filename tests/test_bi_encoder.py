"""STS-B as a bi-encoder (`albert finetune --bi-encoder`): the head scores a pair by the cosine of its two
texts encoded alone, the fine-tuned folder is a sentence embedder, and every command that reads a
fine-tuned folder (evaluate, predict, export) scores pairs with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from albert_lm.cli import main
from albert_lm.model.encoder import AlbertModel
from albert_lm.model.heads import AlbertForSentenceSimilarity
from albert_lm.model.unpad import use_unpadding

WORDS = ["bala", "kemo", "fira", "dusa", "tovi", "ramu", "sibe", "lodu"]


def _pair_batch(pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    """[CLS] a [SEP] b [SEP] rows, padded with 0 to the longest."""
    rows = [([2, *a, 3, *b, 3], [0] * (len(a) + 2) + [1] * (len(b) + 1)) for a, b in pairs]
    width = max(len(ids) for ids, _ in rows)
    pad = [width - len(ids) for ids, _ in rows]
    return {
        "input_ids": torch.tensor([ids + [0] * n for (ids, _), n in zip(rows, pad, strict=True)]),
        "token_type_ids": torch.tensor([types + [0] * n for (_, types), n in zip(rows, pad, strict=True)]),
        "attention_mask": torch.tensor(
            [[1] * len(ids) + [0] * n for (ids, _), n in zip(rows, pad, strict=True)]
        ),
    }


@pytest.mark.parametrize("unpadded", [False, True])
def test_a_pairs_score_is_the_cosine_of_its_texts_encoded_alone(tiny_config, unpadded):
    torch.manual_seed(0)
    model = AlbertForSentenceSimilarity(tiny_config(vocab_size=60)).eval()
    model.set_scale(0.0, 5.0)
    pairs = [
        ([5, 6, 7], [8, 9]),
        ([10], [11, 12, 13, 14, 15]),
        ([16, 17, 18, 19], [20]),
        ([21, 22], [21, 22]),
    ]

    def alone(ids: list[int]) -> torch.Tensor:  # one text as `albert embed` encodes it: mean of its tokens
        return model.albert(input_ids=torch.tensor([[2, *ids, 3]])).last_hidden_state.mean(1)[0]

    with torch.no_grad(), use_unpadding(unpadded):
        expected = torch.stack([5 * F.cosine_similarity(alone(a), alone(b), dim=0) for a, b in pairs])
        out = model(**_pair_batch(pairs), labels=torch.tensor([1.0, 2.0, 3.0, 5.0]))
    torch.testing.assert_close(out.logits.squeeze(-1), expected, atol=1e-5, rtol=1e-5)
    assert out.logits[3].item() == pytest.approx(5.0, abs=1e-4)  # a text paired with itself: cosine 1
    assert out.loss.item() == pytest.approx(
        F.mse_loss(expected, torch.tensor([1.0, 2.0, 3.0, 5.0])).item(), rel=1e-4
    )


def test_the_head_needs_the_pairs_segments(tiny_config):
    model = AlbertForSentenceSimilarity(tiny_config(vocab_size=60))
    with pytest.raises(ValueError, match="token_type_ids"):
        model(input_ids=torch.tensor([[2, 5, 3, 6, 3]]))


def _stsb(folder: Path, seed: int = 0) -> Path:
    """An STS-B-like folder (GLUE's columns): 48 train and 16 dev pairs of made-up words, each scored by
    the words the two texts share (0 to 5), so the task can be learnt."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for split, n in (("train", 48), ("dev", 16)):
        rows = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
        for i in range(n):
            a = list(rng.choice(WORDS, size=5))
            shared = int(rng.integers(0, 6))
            b = a[:shared] + list(rng.choice(WORDS, size=5 - shared))
            rows.append(f"{i}\tmain\tx\t2012\t{i}\tx\tx\t{' '.join(a)}\t{' '.join(b)}\t{float(shared):.3f}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def bi_run(tiny_sst2, tmp_path_factory) -> dict[str, Path]:
    """A bi-encoder fine-tuned on the made-up STS-B for 6 steps (read only)."""
    root = tmp_path_factory.mktemp("bi-encoder")
    data, out = _stsb(root / "STS-B"), root / "run"
    argv = ["finetune", "--task", "stsb", "--bi-encoder", "--model", str(tiny_sst2 / "base"), "--data", str(data),
            "--output", str(out), "--max-steps", "6", "--batch-size", "8", "--eval-every", "3",
            "--learning-rate", "1e-3", "--max-seq-length", "32", "--precision", "fp32", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    return {"data": data, "out": out, "best": out / "best", "root": root}


def test_finetune_saves_a_bi_encoder_that_evaluate_and_predict_read_back(bi_run, tmp_path, capsys):
    best = bi_run["best"]
    config = json.loads((best / "config.json").read_text())
    assert config["architectures"] == ["AlbertForSentenceSimilarity"] and config["num_labels"] == 1
    assert json.loads((best / "finetune_config.json").read_text())["bi_encoder"] is True
    assert "bi-encoder" in (best / "README.md").read_text()
    results = json.loads((bi_run["out"] / "eval_results.json").read_text())
    # evaluate on the saved folder reproduces the run's dev scores
    capsys.readouterr()
    assert main(["evaluate", "--task", "stsb", "--model", str(best), "--data", str(bi_run["data"]),
                 "--precision", "fp32"]) == 0  # fmt: skip
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["pearson"] == pytest.approx(results["pearson"], abs=1e-6)
    # predict scores pairs as 5 x the cosine of the vectors `albert embed` gives each text
    pairs = [("bala kemo fira dusa tovi", "bala kemo ramu sibe lodu"), ("tovi tovi", "lodu sibe fira")]
    rows = tmp_path / "pairs.jsonl"
    rows.write_text("".join(json.dumps({"text": a, "text_pair": b}) + "\n" for a, b in pairs))
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"{a}\n{b}\n" for a, b in pairs))
    assert main(["predict", "--model", str(best), "--input", str(rows), "--output", str(tmp_path / "p.jsonl"),
                 "--precision", "fp32"]) == 0  # fmt: skip
    assert main(["embed", "--model", str(best), "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                 "--precision", "fp32"]) == 0  # fmt: skip
    scores = [json.loads(line)["score"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    vectors = torch.from_numpy(np.load(tmp_path / "v.npy"))
    cosines = F.cosine_similarity(vectors[0::2], vectors[1::2], dim=-1)
    head = AlbertForSentenceSimilarity.from_pretrained(best).similarity
    expected = (head(cosines[:, None]).squeeze(-1)).tolist()
    assert scores == pytest.approx(expected, abs=1e-4)


def test_transformers_reads_the_bi_encoders_encoder(bi_run):
    transformers = pytest.importorskip("transformers")
    ours = AlbertModel.from_pretrained(bi_run["best"]).eval()
    theirs = transformers.AlbertModel.from_pretrained(bi_run["best"]).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        torch.testing.assert_close(
            ours(input_ids=ids).last_hidden_state,
            theirs(input_ids=ids).last_hidden_state,
            atol=1e-5,
            rtol=1e-4,
        )


@pytest.mark.parametrize(
    ("task", "extra", "message"),
    [
        (
            "sst2",
            [],
            "--bi-encoder: for text pairs scored on a scale (stsb, or regression on your own pairs), not sst2",
        ),
        ("stsb", ["--exit-heads"], "--exit-heads: not with --bi-encoder"),
        ("stsb", ["--classifier-pooling", "mean"], "--classifier-pooling: not with --bi-encoder"),
    ],
)
def test_bi_encoder_refuses_what_it_cannot_do(tiny_sst2, tmp_path, capsys, task, extra, message):
    data = tiny_sst2 / "sst2" if task == "sst2" else _stsb(tmp_path / "STS-B")
    argv = ["finetune", "--task", task, "--bi-encoder", "--model", str(tiny_sst2 / "base"), "--data", str(data),
            "--output", str(tmp_path / "out"), "--max-steps", "1", *extra]  # fmt: skip
    assert main(argv) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_bi_encoder_is_scored_only_on_its_scale(bi_run, tiny_sst2, capsys):
    """The folder's head scores pairs on STS-B's scale: evaluating it on a classification task is refused."""
    assert main(["evaluate", "--task", "sst2", "--model", str(bi_run["best"]), "--data",
                 str(tiny_sst2 / "sst2")]) != 0  # fmt: skip
    assert "bi-encoder" in capsys.readouterr().err


def test_glue_runs_stsb_as_a_bi_encoder_and_the_rest_as_cross_encoders():
    from albert_lm.glue.config import GlueConfig
    from albert_lm.glue.grid import finetune_config

    cfg = GlueConfig(model="m", data="d", output="o", bi_encoder=True)
    assert finetune_config(cfg, "stsb", 1e-4, 1).bi_encoder
    assert not finetune_config(cfg, "mrpc", 1e-4, 1).bi_encoder
    with pytest.raises(ValueError, match="--bi-encoder: not with --teachers"):
        GlueConfig(model="m", data="d", output="o", bi_encoder=True, teachers="t")


def test_the_onnx_export_scores_pairs_as_pytorch_does(bi_run, tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(bi_run["best"]), "--output", str(out)]) == 0
    assert "max |ORT - PyTorch|" in capsys.readouterr().out
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    model = AlbertForSentenceSimilarity.from_pretrained(bi_run["best"]).eval()
    # shapes the export never saw: a longer batch, halves of other lengths, padding in one row
    batch = _pair_batch(
        [([5, 6, 7, 8, 9, 10, 11], [12, 13]), ([14], [15, 16, 17]), ([18, 19, 20], [21, 22, 23])]
    )
    got = session.run(None, {k: v.numpy() for k, v in batch.items()})[0]
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    assert np.abs(got - expected).max() < 1e-4


def test_predict_refuses_a_row_without_its_second_text(bi_run, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"text": "bala kemo", "text_pair": "kemo fira"})
        + "\n"
        + json.dumps({"text": "tovi"})
        + "\n"
    )
    assert (
        main(
            [
                "predict",
                "--model",
                str(bi_run["best"]),
                "--input",
                str(rows),
                "--output",
                str(tmp_path / "p.jsonl"),
            ]
        )
        != 0
    )
    err = capsys.readouterr().err
    assert "rows.jsonl:2: missing or empty column 'text_pair'" in err
    assert not (tmp_path / "p.jsonl").exists()


def test_glue_bi_encoder_runs_stsb_as_one_and_says_so(bi_run, tiny_sst2, tmp_path, capsys):
    out = tmp_path / "glue"
    argv = ["glue", "--model", str(tiny_sst2 / "base"), "--data", str(bi_run["root"]), "--output", str(out),
            "--tasks", "stsb", "--bi-encoder", "--seeds", "1", "--learning-rates", "1e-3", "--epochs", "1",
            "--batch-size", "8", "--max-seq-length", "32", "--workers", "1", "--precision", "fp32"]  # fmt: skip
    assert main(argv) == 0
    assert "STS-B: a bi-encoder (--bi-encoder)" in capsys.readouterr().out
    best = out / "stsb" / "lr-0.001" / "seed-1" / "best"
    assert json.loads((best / "config.json").read_text())["architectures"] == ["AlbertForSentenceSimilarity"]
    assert json.loads((out / "glue_results.json").read_text())["settings"]["bi_encoder"] is True
