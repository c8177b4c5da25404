"""The whole road once, through the CLI a user types: text -> tokenizer -> pretraining data -> pretraining
-> checkpoint -> fine-tuning -> evaluation -> the folders load in transformers with the same outputs."""

from __future__ import annotations

import json
import random

import pytest
import torch
from conftest import data_argv, finetune_argv, pretrain_argv, tokenizer_argv

from albert_lm import AlbertForPreTraining, AlbertForSequenceClassification, AlbertTokenizer
from albert_lm.cli import main

WORDS = [
    "the",
    "a",
    "river",
    "town",
    "mill",
    "boat",
    "harbour",
    "old",
    "new",
    "small",
    "wide",
    "green",
    "grey",
    "north",
    "south",
    "road",
    "bridge",
    "market",
    "farmer",
    "baker",
    "sailor",
    "child",
    "mother",
    "father",
    "walked",
    "sailed",
    "carried",
    "found",
    "lost",
    "built",
    "opened",
    "closed",
    "watched",
    "morning",
    "evening",
    "winter",
    "summer",
    "quickly",
    "slowly",
    "quietly",
    "near",
    "beyond",
    "across",
    "under",
    "over",
    "with",
]


def _corpus(path, docs: int = 60, seed: int = 0) -> None:
    """Documents in google-research's format: one sentence per line, a blank line between documents."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(docs):
            for _ in range(rng.randint(4, 9)):
                words = rng.choices(WORDS, k=rng.randint(5, 12))
                f.write(" ".join(words).capitalize() + ".\n")
            f.write("\n")


def _classification(folder, n: int, seed: int) -> None:
    """A separable task: does the sentence mention the river?"""
    rng = random.Random(seed)
    folder.mkdir(exist_ok=True)
    for split, count in (("train", n), ("dev", n // 4)):
        with open(folder / f"{split}.jsonl", "w") as f:
            for _ in range(count):
                words = rng.choices([w for w in WORDS if w != "river"], k=8)
                label = rng.random() < 0.5
                if label:
                    words[rng.randrange(8)] = "river"
                f.write(json.dumps({"text": " ".join(words), "label": "yes" if label else "no"}) + "\n")


@pytest.mark.slow
def test_text_to_transformers_through_the_cli(tmp_path):
    transformers = pytest.importorskip("transformers")
    corpus = tmp_path / "corpus.txt"
    _corpus(corpus)

    assert main(tokenizer_argv(corpus, tmp_path / "tok", "--vocab-size", "64")) == 0
    tok = AlbertTokenizer.from_pretrained(tmp_path / "tok")
    assert tok.vocab_size == 64 and tok.mask_token_id == 4

    assert main(data_argv(corpus, tmp_path / "tok", tmp_path / "data", "--max-seq-length", "32", "--seed",
                          "1", "--eval-fraction", "0.2", "--workers", "1", "--no-progress")) == 0  # fmt: skip
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest  # written last: its presence means the data is complete

    run = tmp_path / "run"
    assert main(pretrain_argv(tmp_path / "data", run, "--preset", "albert-tiny", "--max-steps", "6",
                              "--batch-size", "4", "--warmup-steps", "2", "--learning-rate", "0.005",
                              "--save-every", "3", "--log-every", "2", "--seed", "3")) == 0  # fmt: skip
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("step") == 6 for r in records) and all("loss" in r for r in records if "step" in r)
    assert (run / "checkpoint-3").is_dir() and (run / "spiece.model").is_file()

    # The pretrained folder is transformers' layout: same outputs there as here.
    ours = AlbertForPreTraining.from_pretrained(run).eval()
    theirs = transformers.AlbertForPreTraining.from_pretrained(run).eval()
    enc = tok(["the river town", "a sailor walked over the bridge"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = ours(**enc), theirs(**enc)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, atol=1e-5, rtol=0)

    task = tmp_path / "task"
    _classification(task, 160, seed=2)
    out = tmp_path / "ft"
    assert main(finetune_argv("classification", run, task, out, "--max-steps", "8", "--batch-size", "16",
                              "--learning-rate", "1e-3", "--seed", "4")) == 0  # fmt: skip
    results = json.loads((out / "eval_results.json").read_text())
    assert 0.0 <= results["accuracy"] <= 1.0
    assert (
        main(["evaluate", "--task", "classification", "--model", str(out / "best"), "--data", str(task)]) == 0
    )

    clf = AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    hf_clf = transformers.AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    with torch.no_grad():
        torch.testing.assert_close(clf(**enc).logits, hf_clf(**enc).logits, atol=1e-5, rtol=0)
