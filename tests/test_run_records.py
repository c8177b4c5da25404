"""What runs leave beside their models: fine-tuning's TensorBoard events and curves (as pretraining's), and a
model card (README.md) in every model folder albert-lm saves, never over a README.md of the user's."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from conftest import labelled_rows
from test_pretrain import SyntheticData, tiny_run  # tests/ is on sys.path

from albert_lm.cli import main
from albert_lm.model.card import CARD_MARK, is_model_card, model_card, write_model_card
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.model.params import count_parameters
from albert_lm.training.pretrain import pretrain

FIXTURES = Path(__file__).parent / "fixtures" / "tf_checkpoint"
USERS_README = "# My model\n\nNotes of my own.\n"


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory) -> Path:
    """A two-label classification set in JSON Lines (train and dev)."""
    words = {"pos": ["bala", "kemo", "fira"], "neg": ["dusa", "tovi", "ramu"]}
    return labelled_rows(tmp_path_factory.mktemp("sentiment"), words, {"train": 32, "dev": 12})


def _finetune(model: Path, data: Path, out: Path, *extra: str) -> dict:
    args = ["finetune", "--task", "classification", "--model", str(model), "--data", str(data),
            "--output", str(out), "--max-steps", "4", "--eval-every", "2", "--log-every", "1",
            "--batch-size", "8", "--learning-rate", "1e-3", "--precision", "fp32", *extra]  # fmt: skip
    assert main(args) == 0
    return json.loads((out / "eval_results.json").read_text())


def _front_matter(card: str) -> list[str]:
    assert card.startswith("---\n"), card[:200]
    return card.split("---\n")[1].splitlines()


def _shown(value: float) -> str:
    return f"{value:.4g}"


# --------------------------------------------------------------------------- fine-tuning
def test_finetune_writes_tensorboard_events_curves_and_a_model_card(tiny_pretrained, sentiment, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "cls"
    results = _finetune(tiny_pretrained, sentiment, out)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert [s for s, _ in scalars["train/loss"]] == [1, 2, 3, 4] and [s for s, _ in scalars["train/lr"]] == [
        1,
        2,
        3,
        4,
    ]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "dev"]
    assert [e["step"] for e in evals] == [2, 4]  # metrics.jsonl: one line per evaluation (split "dev")
    assert {r["split"] for r in records} == {"train", "dev"}  # and the train records, as every loop writes
    for name in ("accuracy", "f1_macro"):
        assert scalars[f"dev/{name}"] == [(e["step"], pytest.approx(e[name])) for e in evals]
    assert (out / "training_curves.png").read_bytes().startswith(b"\x89PNG")

    card = (out / "best" / "README.md").read_text()
    front = _front_matter(card)
    assert {
        "library_name: transformers",
        "- albert",
        "- albert-lm",
        "pipeline_tag: text-classification",
    } <= set(front)
    assert CARD_MARK in card and "license" not in card  # no license is known for a user's model
    config = AlbertConfig.from_pretrained(out / "best")
    assert f"{count_parameters(config):,}" in card
    assert f"| dev accuracy | {_shown(results['accuracy'])} |" in card
    assert (
        "| task | classification |" in card
        and "| seed | 12345 |" in card
        and "| learning rate | 0.001" in card
    )
    assert (
        f"| base model | {tiny_pretrained} |" in card and str(out / "best") in card
    )  # the final name, not the temporary
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(out / "best")
    assert theirs.config.id2label == {0: "neg", 1: "pos"}


def test_no_tensorboard_and_no_plot_write_neither_and_overwrite_clears_them(
    tiny_pretrained, sentiment, tmp_path
):
    out = tmp_path / "cls"
    _finetune(tiny_pretrained, sentiment, out, "--no-tensorboard", "--no-plot")
    assert not (out / "tensorboard").exists() and not (out / "training_curves.png").exists()
    assert is_model_card(out / "best" / "README.md")
    # a run with both, then another over it: one run's events, not two
    again = tmp_path / "again"
    _finetune(tiny_pretrained, sentiment, again)
    _finetune(tiny_pretrained, sentiment, again, "--overwrite", "--max-steps", "2")
    files = list((again / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1


# --------------------------------------------------------------------------- pretraining
def test_pretraining_checkpoints_and_final_model_carry_cards_with_their_scores(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "README.md").write_text(USERS_README)  # the user's notes on the run: kept
    cfg = tiny_run(out, max_steps=6, save_every=3, eval_every=3, eval_batches=2, keep_last=0, plot=True)
    pretrain(cfg, train_dataset=SyntheticData(), eval_dataset=SyntheticData(n=16, seed=1))
    assert (out / "README.md").read_text() == USERS_README
    assert (out / "training_curves.png").read_bytes().startswith(b"\x89PNG")  # drawn by the shared code
    evals = {
        r["step"]: r
        for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
        if r["split"] == "eval"
    }
    assert sorted(evals) == [3, 6]
    for step in (3, 6):
        card = (out / f"checkpoint-{step}" / "README.md").read_text()
        assert "pipeline_tag: fill-mask" in _front_matter(card) and CARD_MARK in card
        assert (
            f"| held-out MLM accuracy (8 sequences) | {_shown(evals[step]['mlm_acc'])} |" in card
        )  # 2 batches of 4
        assert f"| held-out SOP accuracy (8 sequences) | {_shown(evals[step]['sop_acc'])} |" in card
        assert f"| steps | {step} of 6 |" in card and f"| sequences seen | {step * 4} |" in card
    config = AlbertConfig.from_pretrained(out / "checkpoint-3")
    assert f"{count_parameters(config):,}" in card and "| layers | 2 |" in card
    transformers = pytest.importorskip("transformers")
    transformers.AlbertForPreTraining.from_pretrained(out / "checkpoint-3")
    # without a README of the user's, the finished model has its own card
    fresh = tmp_path / "fresh"
    pretrain(tiny_run(fresh, max_steps=2, save_every=2), train_dataset=SyntheticData())
    card = (fresh / "README.md").read_text()
    assert "# ALBERT pretrained with albert-lm (2 steps)" in card and "None recorded" in card
    assert f'from_pretrained("{fresh}")' in card


def test_pretraining_overwrite_removes_the_runs_files_only(tmp_path):
    """--overwrite replaces the run, not the folder: the user's files beside it (their books, their
    README.md) stay, as fine-tuning's and distillation's --overwrite leave them."""
    out = tmp_path / "run"
    (out / "books").mkdir(parents=True)
    (out / "books" / "a.txt").write_text("mine\n")
    (out / "README.md").write_text(USERS_README)
    pretrain(tiny_run(out, max_steps=4, save_every=2, keep_last=0), train_dataset=SyntheticData())
    assert (out / "checkpoint-4").is_dir()
    pretrain(tiny_run(out, max_steps=2, save_every=2, overwrite=True), train_dataset=SyntheticData())
    assert (out / "books" / "a.txt").read_text() == "mine\n" and (
        out / "README.md"
    ).read_text() == USERS_README
    assert not (out / "checkpoint-4").exists() and (out / "checkpoint-2").is_dir()
    assert json.loads((out / "pretrain_config.json").read_text())["max_steps"] == 2
    # OUTPUT/data goes with the run only where the run's own --text made it (its settings say so)
    from albert_lm.training import preflight

    (out / "data").mkdir()
    preflight.remove_run(out)
    assert (out / "data").is_dir() and (out / "books").is_dir() and not (out / "model.safetensors").exists()
    (out / "pretrain_config.json").write_text(json.dumps({"data": str((out / "data").resolve())}))
    preflight.remove_run(out)
    assert not (out / "data").exists() and (out / "books" / "a.txt").is_file()
    assert preflight.is_text_data("runs/x/data/", "runs/x") and not preflight.is_text_data("runs/x", "runs/x")


def test_a_warmup_fitted_to_a_short_run_is_what_the_card_says_and_is_warned_about_once(tmp_path, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        pretrain(tiny_run(out, max_steps=4, warmup_steps=100, save_every=4), train_dataset=SyntheticData())
    card = (out / "README.md").read_text()
    assert "warmup 1 step (--warmup-steps 100, fitted to the run) |" in card, card
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # resumed for longer: the schedule is said once, the warm-up once
        longer = tiny_run(out, max_steps=8, warmup_steps=100, save_every=4, resume=True)
        pretrain(longer, train_dataset=SyntheticData())
    said = [r.getMessage() for r in caplog.records]
    assert sum("warm-up of 100 steps" in m for m in said) == 1, said
    assert sum("the learning-rate schedule is now" in m for m in said) == 1, said


# --------------------------------------------------------------------------- conversion
def test_converted_model_has_a_card_and_a_users_readme_survives_overwrite(
    tmp_path, tiny_corpus_and_tokenizer
):
    release = tmp_path / "albert_tiny"
    shutil.copytree(FIXTURES / "release", release)
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", release / "30k-clean.model")
    out = tmp_path / "converted"
    assert main(["convert", "--from-tf", str(release), "--output", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in _front_matter(card)
    assert "# ALBERT converted from albert_tiny" in card and "| checkpoint | model.ckpt-best |" in card
    assert f"{count_parameters(AlbertConfig.from_pretrained(out)):,}" in card
    assert "2 inner layers per group" in card  # the fixture's 2 groups x 2 inner groups
    transformers = pytest.importorskip("transformers")
    transformers.AlbertForPreTraining.from_pretrained(out)
    # the user's README.md stays when the folder is converted again over it
    (out / "README.md").write_text(USERS_README)
    assert main(["convert", "--from-tf", str(release), "--output", str(out), "--overwrite"]) == 0
    assert (out / "README.md").read_text() == USERS_README and (out / "model.safetensors").is_file()


# --------------------------------------------------------------------------- the card itself
def test_a_card_replaces_only_its_own_kind(tmp_path, tiny_config):
    folder = tmp_path / "m"
    AlbertForPreTraining(tiny_config()).save_pretrained(folder)
    made = {"command": "albert pretrain", "unknown": None}
    assert write_model_card(folder, title="first", made_by=made) == folder / "README.md"
    assert "| unknown |" not in (folder / "README.md").read_text()  # None: left out
    write_model_card(folder, title="second", made_by=made, scores={"acc": 0.5})
    assert "# second" in (folder / "README.md").read_text()  # its own card: replaced
    (folder / "README.md").write_text(USERS_README)
    assert write_model_card(folder, title="third", made_by=made) is None
    assert (folder / "README.md").read_text() == USERS_README
    # a new folder swapped in over the user's one carries the user's README.md over
    new = tmp_path / "new"
    AlbertForPreTraining(tiny_config()).save_pretrained(new)
    assert write_model_card(new, title="x", made_by=made, replaces=folder) is None
    assert (new / "README.md").read_text() == USERS_README


def test_card_says_what_the_head_is_and_whether_transformers_reads_it(tiny_config):
    qa = tiny_config(extra={"architectures": ["AlbertForQuestionAnswering"]})
    card = model_card("qa", {"task": "squad1"}, {"dev f1": 88.123456}, qa, "runs/squad/best")
    assert "pipeline_tag: question-answering" in card and "| dev f1 | 88.12 |" in card
    assert "albert predict --model runs/squad/best" in card
    native = tiny_config(sharing="attention", extra={"architectures": ["AlbertForPreTraining"]})
    card = model_card("native", {}, None, native, "m")
    assert "library_name" not in card and "transformers cannot load it" in card
    assert re.search(r"\| cross-layer sharing \| attention: attention blocks, one set shared by all", card)
    mc = tiny_config(extra={"architectures": ["AlbertForMultipleChoice"]})
    assert "pipeline_tag" not in model_card("race", {}, None, mc, "m")


def test_a_card_names_the_kind_of_vocabulary_beside_the_weights(tiny_config, tmp_path):
    """A student of its teacher's vocabulary carries a WordPiece vocab.txt, not a SentencePiece model."""
    config = tiny_config()
    for name, pieces in (("vocab.txt", "WordPiece"), ("spiece.model", "SentencePiece")):
        folder = tmp_path / name
        AlbertForPreTraining(config).save_pretrained(folder)
        (folder / name).write_text("x\n")
        card = write_model_card(folder, title="x", made_by={}).read_text()
        assert f"| vocabulary | {config.vocab_size:,} {pieces} pieces |" in card


def test_an_encoders_card_shows_sentence_vectors_and_its_snippets_run(tmp_path):
    """An encoder (feature-extraction) card says how to get a sentence vector: `albert embed`, and a
    Python snippet for albert-lm and one for transformers, each run here as written (on a copy of the
    shipped encoder) and giving `albert embed`'s mean-pooled vectors."""
    import numpy as np

    pytest.importorskip("transformers")
    from albert_lm.deploy.api import Predictor

    folder = tmp_path / "encoder"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "albert-minilm-small-en", folder)
    (folder / "README.md").unlink()
    card = write_model_card(folder, title="x", made_by={}).read_text()
    assert f"albert embed --model {folder} --input texts.txt --output vectors.npy --normalize" in card
    ours, theirs = (block.split("```")[0] for block in card.split("```python\n")[1:3])
    assert "pooler_output" not in theirs  # the mean over attention_mask, as albert embed takes it
    for snippet, normalized in ((ours, True), (theirs, False)):
        scope: dict = {}
        exec(snippet, scope)
        got = np.asarray(scope["vectors"], dtype=np.float32)
        texts = scope.get("texts", ["A man is playing a guitar.", "The weather is cold today."])
        want = Predictor(folder, precision="fp32").embed(texts, normalize=normalized)
        cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert got.shape == want.shape == (2, 384) and cosine.min() > 0.999, (
            cosine
        )  # bf16 where auto takes it
