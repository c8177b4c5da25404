"""The model albert-lm ships, models/albert-minilm-small-en: small, complete, transformers' ALBERT, and
taken by the commands the README shows for it, offline, on a fresh clone. Its zero-shot STS-B figure
holds on the real data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import distill_task_argv, labelled_rows, two_step_finetune_argv

from albert_lm.cli import main
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.model.encoder import AlbertModel

MODEL = Path(__file__).resolve().parents[1] / "models" / "albert-minilm-small-en"
WORDS = {"pos": ["good", "great", "fine", "lovely"], "neg": ["bad", "awful", "poor", "dreadful"]}


def test_it_is_small_and_says_how_it_was_made():
    files = [f for f in MODEL.rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) <= 10 * 2**20, "the shipped folder is at most 10 MB"
    assert AlbertModel.from_pretrained(MODEL).num_parameters() <= 8_000_000
    card = (MODEL / "README.md").read_text()
    assert "albert distill general --recipe student-cpu-2h" in card and "all-MiniLM-L6-v2" in card
    config = json.loads((MODEL / "config.json").read_text())
    assert config["model_type"] == "albert" and config["dtype"] == "float32"  # fp16 on disk, fp32 in memory


def test_transformers_reads_it_as_albert_lm_does():
    transformers = pytest.importorskip("transformers")
    tokenizer = AlbertTokenizer.from_pretrained(MODEL)
    batch = tokenizer(["A man is playing a guitar.", "The weather is cold today."], padding=True)
    inputs = {k: torch.tensor(v) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    ours = AlbertModel.from_pretrained(MODEL).eval()
    theirs = transformers.AlbertModel.from_pretrained(MODEL).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            ours(**inputs).last_hidden_state, theirs(**inputs).last_hidden_state, atol=1e-4, rtol=1e-4
        )


def test_embed_finetune_and_distill_task_take_it(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("A man is playing a guitar.\nA man plays the guitar.\nThe stock market fell sharply.\n")
    vectors = tmp_path / "vectors.npy"
    assert main(["embed", "--model", str(MODEL), "--input", str(texts), "--output", str(vectors), "-q"]) == 0
    v = np.load(vectors)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2  # two ways of saying one thing are nearer than another thing
    data = labelled_rows(tmp_path / "data", WORDS, {"train": 32, "dev": 16})
    tuned = tmp_path / "tuned"
    assert main(two_step_finetune_argv(MODEL, data, tuned, "--no-plot", "--no-tensorboard", "-q")) == 0
    taught = tmp_path / "taught"
    argv = distill_task_argv(MODEL, tuned / "best", data, taught, tmp_path / "cache", "--max-steps", "2")
    assert main([*argv, "--batch-size", "8", "--no-plot", "--no-tensorboard", "-q"]) == 0
    assert (taught / "best" / "model.safetensors").is_file()


@pytest.mark.slow
def test_export_makes_its_page(fake_modules, tmp_path, capsys):
    """`albert export --format web` on it: an embedding page, its graphs checked against PyTorch (the
    browser's run of such a page is tests/test_web_export.py's)."""
    out = tmp_path / "web"
    args = ["export", "--format", "web", "--model", str(MODEL), "--output", str(out)]
    assert main([*args, "--npm-modules", str(fake_modules), "-q"]) == 0
    assert "feature-extraction page" in capsys.readouterr().out
    assert (out / "onnx" / "model.onnx").is_file() and (out / "index.html").is_file()


@pytest.mark.slow
def test_its_zero_shot_stsb_figure_holds(albert_data):
    """The README's figure: Pearson of the cosines of its mean-pooled vectors on STS-B dev."""
    from albert_lm.deploy.api import Predictor
    from albert_lm.distill.data import sts_pairs, sts_scores

    sts = sts_pairs(albert_data / "glue" / "STS-B" / "dev.tsv")
    vectors = Predictor(MODEL, precision="fp32").embed(sts["sentences"])
    scores = sts_scores(np.asarray(vectors, dtype=np.float32), sts)
    assert scores["sts_pearson"] >= PEARSON - 0.005, scores


PEARSON = 0.822  # models/albert-minilm-small-en's card and docs/distill_results.md


def test_its_files_name_no_path_of_the_machine_it_was_made_on():
    """Its settings say where the text was relative to the folder the run starts in (the card says
    which): `albert distill general --config` on them runs the same distillation elsewhere."""
    settings = json.loads((MODEL / "distill_config.json").read_text())
    paths = [settings["output"], settings["sts"], *settings["text"]]
    assert not [p for p in paths if Path(p).is_absolute()]
    assert len(settings["text"]) == 253 and all(p.startswith("books/") for p in settings["text"])
    card = (MODEL / "README.md").read_text()
    assert "--config\nmodels/albert-minilm-small-en/distill_config.json" in card
    assert "license: apache-2.0" in card and "language:\n- en" in card
