"""`albert predict`: every head against transformers' model on the same weights, the input formats, the
order of rows, and bad input (named line and column, --skip-bad, nothing half-written)."""

from __future__ import annotations

import io
import json
import shutil
import sys

import numpy as np
import pytest
import torch

from albert_lm.cli import main
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import write_json
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albert_lm.tasks.task import pair_features

transformers = pytest.importorskip("transformers")

TEXTS = ["Kala bime to.", "Dunora pesi kalo bu vemi.", "Tura.", "Mepa lodi sure kana bo tema ri."]


@pytest.fixture
def make_model(tmp_path, tiny_config, tiny_corpus_and_tokenizer):
    """make_model(cls, task, **config): a random model of that head saved as a finetune run's best/."""
    _, tok = tiny_corpus_and_tokenizer

    def make(cls, task: str, labels=(), **changes):
        torch.manual_seed(0)
        config = tiny_config(vocab_size=200, **changes)
        if labels:
            config.id2label = dict(enumerate(labels))
        model = cls(config).eval()
        out = tmp_path / f"model-{task}"
        model.save_pretrained(out)
        shutil.copy(tok / "spiece.model", out / "spiece.model")
        write_json(out / "finetune_config.json", {"task": task, "labels": list(labels), "max_seq_length": 64})
        return out

    return make


def run(args: list[str], capsys) -> tuple[int, list[dict], str]:
    # fp32 unless a test asks otherwise: `auto` takes bf16 on CPUs with bf16 units (AMX, AVX512-BF16),
    # and these tests compare with transformers in fp32.
    precision = [] if "--precision" in args else ["--precision", "fp32"]
    code = main(["predict", *args, *precision])
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    return code, rows, captured.err


def pair_inputs(model_dir, a: str, b: str | None = None) -> dict[str, torch.Tensor]:
    tok = AlbertTokenizer.from_pretrained(model_dir)
    ids, types = pair_features(
        tok,
        tok.encode(a, add_special_tokens=False),
        tok.encode(b, add_special_tokens=False) if b else None,
        64,
    )
    return {"input_ids": torch.tensor([ids]), "token_type_ids": torch.tensor([types])}


def test_classification_matches_transformers_in_every_input_format(make_model, tmp_path, capsys, monkeypatch):
    model = make_model(
        AlbertForSequenceClassification, "classification", labels=("neg", "pos", "zero"), num_labels=3
    )
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    expected = []
    with torch.no_grad():
        for text in TEXTS:
            expected.append(torch.softmax(hf(**pair_inputs(model, text)).logits[0], -1).numpy())
    lines = tmp_path / "in.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    tsv = tmp_path / "in.tsv"
    tsv.write_text("id\tsentence\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(TEXTS)))
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    outputs = []
    for args in ([str(lines)], [str(tsv), "--text-column", "sentence"], [str(jsonl)]):
        code, rows, _ = run(["--model", str(model), "--input", *args, "--batch-size", "3"], capsys)
        assert code == 0 and len(rows) == len(TEXTS)
        outputs.append(rows)
        for row, want in zip(rows, expected, strict=True):
            got = np.array([row["probabilities"][k] for k in ("neg", "pos", "zero")])
            assert np.abs(got - want).max() < 1e-5
            assert row["label"] == ("neg", "pos", "zero")[int(want.argmax())]
    assert [r["line"] for r in outputs[0]] == [1, 2, 3, 4]  # input order, whatever the batching
    assert [r["line"] for r in outputs[1]] == [2, 3, 4, 5]  # after the header
    # TSV as GLUE writes it: a quote is text, not quoting
    quoted = tmp_path / "quoted.tsv"
    quoted.write_text('sentence\n"Kala bime\nto" dunora.\n')
    code, rows, _ = run(["--model", str(model), "--input", str(quoted), "--text-column", "sentence"], capsys)
    assert code == 0 and [r["line"] for r in rows] == [2, 3]
    # stdin to a file: the file is the same rows
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.read_bytes())))
    out = tmp_path / "out.jsonl"
    code, _, err = run(["--model", str(model), "--input", "-", "--output", str(out)], capsys)
    assert code == 0 and "4 of 4 rows" in err
    assert [json.loads(x) for x in out.read_text().splitlines()] == outputs[0]


def test_regression_pairs_give_the_models_score(make_model, tmp_path, capsys):
    model = make_model(AlbertForSequenceClassification, "stsb", num_labels=1)
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    src = tmp_path / "pairs.csv"
    src.write_text(
        "text,text_pair\n" + "".join(f'"{a}","{b}"\n' for a, b in zip(TEXTS, TEXTS[1:], strict=False))
    )
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0 and len(rows) == 3
    with torch.no_grad():
        for row, a, b in zip(rows, TEXTS, TEXTS[1:], strict=False):
            assert abs(row["score"] - float(hf(**pair_inputs(model, a, b)).logits[0, 0])) < 1e-5


def test_token_classification_tags_every_word(make_model, tmp_path, capsys):
    model = make_model(
        AlbertForTokenClassification, "token-classification", labels=("B-X", "I-X", "O"), num_labels=3
    )
    src = tmp_path / "in.jsonl"
    long = ["Kala", "bime", "to"] * 40  # 120 words, past the model's 64 positions: read in windows
    src.write_text(
        json.dumps({"tokens": ["Kala", "bime", "to"]}) + "\n" + json.dumps({"text": "Dunora pesi"}) + "\n"
        + json.dumps({"tokens": long}) + "\n"
    )  # fmt: skip
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0
    assert [r["tokens"] for r in rows] == [["Kala", "bime", "to"], ["Dunora", "pesi"], long]
    assert [len(r["tags"]) for r in rows] == [3, 2, 120] and all(
        t in ("B-X", "I-X", "O") for r in rows for t in r["tags"]
    )
    # How sure: each word's tag's probability, the softmax over the tags at its first piece, as
    # transformers' logits give it
    tok = AlbertTokenizer.from_pretrained(model)
    pieces = [tok.encode(w, add_special_tokens=False) for w in ["Kala", "bime", "to"]]
    ids = [tok.cls_token_id, *[i for p in pieces for i in p], tok.sep_token_id]
    starts = [1 + sum(len(p) for p in pieces[:w]) for w in range(3)]
    hf = transformers.AlbertForTokenClassification.from_pretrained(model).eval()
    with torch.no_grad():
        p = hf(input_ids=torch.tensor([ids])).logits[0, starts].softmax(-1)
    assert rows[0]["tags"] == [("B-X", "I-X", "O")[i] for i in p.argmax(-1).tolist()]
    assert rows[0]["tag_probabilities"] == pytest.approx(p.max(-1).values.tolist(), abs=1e-5)
    assert [len(r["tag_probabilities"]) for r in rows] == [3, 2, 120]
    # the entities the tags name, as words: each B-X (or X after O) begins one, its I-X continue it
    for r in rows:
        starts = [
            i
            for i, t in enumerate(r["tags"])
            if t == "B-X" or (t == "I-X" and (i == 0 or r["tags"][i - 1] == "O"))
        ]
        assert [e["start"] for e in r["entities"]] == starts
        assert all(
            e["text"] == " ".join(r["tokens"][e["start"] : e["end"]]) and e["type"] == "X"
            for e in r["entities"]
        )
    # a text's entities carry their characters in it, its own spacing kept
    said = " Dunora  pesi Kala\tbime to "
    src.write_text(json.dumps({"text": said}) + "\n")
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0 and rows[0]["tokens"] == said.split() and rows[0]["entities"]
    for e in rows[0]["entities"]:
        assert said[e["char_start"] : e["char_end"]] == e["text"]
        assert e["text"].split() == rows[0]["tokens"][e["start"] : e["end"]]
    src.write_text(json.dumps({"tokens": ["Kala", " ", "to"]}) + "\n")  # the word at fault, named
    code, rows, err = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 1 and f"{src}:1: column 'tokens': word 2 is \" \", expected a non-blank text" in err


def test_question_answering_offsets_point_at_the_answer(make_model, tmp_path, capsys):
    model = make_model(AlbertForQuestionAnswering, "squad1", num_labels=2)
    context = "Kala bime to dunora. Pesi kalo bu vemi tura mepa."
    src = tmp_path / "qa.jsonl"
    src.write_text(
        "".join(json.dumps({"question": q, "context": context}) + "\n" for q in ("Kala?", "Vemi tura?"))
    )
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0 and len(rows) == 2
    for r in rows:
        assert r["answer"] and context[r["start"] : r["end"]] == r["answer"]
        assert isinstance(r["score"], float) and "null_score_diff" not in r  # how sure; SQuAD 1.1: no null
    from albert_lm import Predictor

    qa = Predictor(model, device="cpu", precision="fp32")
    assert qa.predict([("Kala?", context)])[0]["answer"] == rows[0]["answer"]
    with pytest.raises(
        TypeError, match=r"inputs:1: a text alone.*give a list of \(question, context\) pairs"
    ):
        qa.predict(("Kala?", context))  # a bare pair: read as two texts
    with pytest.raises(
        ValueError, match="^early exit: for classification and regression models, not a squad1"
    ):
        Predictor(model, exit_confidence=0.9)  # not "fine-tune with --exit-heads": a QA model has none
    squad = tmp_path / "dev-v1.1.json"  # a SQuAD file given whole: one JSON object, read as one row
    squad.write_text(json.dumps({"version": "1.1", "data": []}))
    code, rows, err = run(["--model", str(model), "--input", str(squad), "--format", "jsonl"], capsys)
    assert code == 1 and "a SQuAD dataset file (version, data); predict reads one question a row" in err
    code, rows, err = run(["--model", str(model), "--text", "Kala?"], capsys)  # a question without context
    assert (
        code == 1
        and not rows
        and "reads a question and a context: give them as the rows of an --input" in err
    )


def test_multiple_choice_matches_transformers(make_model, tmp_path, capsys):
    model = make_model(AlbertForMultipleChoice, "race")
    hf = transformers.AlbertForMultipleChoice.from_pretrained(model).eval()
    row = {"context": TEXTS[1], "question": "Kala _ bime?", "options": ["to", "tura", "mepa", "lodi"]}
    src = tmp_path / "mc.csv"
    src.write_text(
        'context,question,options\n"{}","{}","{}"\n'.format(
            row["context"], row["question"], json.dumps(row["options"]).replace('"', '""')
        )
    )
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0 and len(rows) == 1
    tok = AlbertTokenizer.from_pretrained(model)
    art = tok.encode(row["context"], add_special_tokens=False)
    ids, types = [], []
    for option in row["options"]:
        qa = tok.encode(row["question"].replace("_", option), add_special_tokens=False)
        ids.append([tok.cls_token_id, *art, tok.sep_token_id, *qa, tok.sep_token_id])
        types.append([0] * (len(art) + 2) + [1] * (len(qa) + 1))
    width = max(map(len, ids))
    mask = torch.tensor([[[1] * len(x) + [0] * (width - len(x)) for x in ids]])
    pad = lambda rows: torch.tensor([[x + [0] * (width - len(x)) for x in rows]])  # noqa: E731
    with torch.no_grad():
        p = torch.softmax(
            hf(input_ids=pad(ids), token_type_ids=pad(types), attention_mask=mask).logits[0], -1
        )
    assert np.abs(np.array(rows[0]["probabilities"]) - p.numpy()).max() < 1e-5
    assert rows[0]["index"] == int(p.argmax()) and rows[0]["answer"] == "ABCD"[int(p.argmax())]
    race = tmp_path / "race.jsonl"  # RACE's own JSON Lines, as fine-tuning reads them: `article`
    fields = {"article": row["context"], "question": row["question"], "options": row["options"]}
    race.write_text(json.dumps({"example_id": "m1", **fields, "answer": "B"}) + "\n")
    code, again, _ = run(["--model", str(model), "--input", str(race)], capsys)
    assert code == 0 and again[0]["probabilities"] == rows[0]["probabilities"]


def test_bad_rows_named_or_skipped_and_nothing_half_written(make_model, tmp_path, capsys, caplog):
    model = make_model(AlbertForSequenceClassification, "classification", labels=("a", "b"), num_labels=2)
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"text": "Kala."})
        + "\n"
        + json.dumps({"txt": "Bime."})
        + "\n"
        + json.dumps({"text": ["not", "text"]})
        + "\n"
        + json.dumps({"text": "To."})
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    code, _, err = run(["--model", str(model), "--input", str(src), "--output", str(out)], capsys)
    assert code == 1 and f"{src}:2: missing or empty column 'text'" in err and "Traceback" not in err
    assert "(the row's columns: 'txt'; --text-column NAME reads another)" in err
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))
    code, _, err = run(
        ["--model", str(model), "--input", str(src), "--output", str(out), "--skip-bad"], capsys
    )
    assert (
        code == 0
        and "2 of 4 rows predicted, 2 bad rows left out" in err
        and f"{src}:3: column 'text'" in caplog.text
    )
    assert [json.loads(x)["line"] for x in out.read_text().splitlines()] == [1, 4]
    # not a fine-tuned model; a missing input; a file that is not UTF-8
    pretrained = tmp_path / "pretrained"
    AlbertForPreTraining(AlbertConfig.from_pretrained(model)).save_pretrained(pretrained)
    code, _, err = run(["--model", str(pretrained), "--input", str(src)], capsys)
    assert code == 1 and "not a fine-tuned model" in err
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe broken\n")
    code, _, err = run(["--model", str(model), "--input", str(tmp_path / "bad.txt")], capsys)
    assert code == 1 and "bad.txt:2: not UTF-8" in err
    code, _, err = run(["--model", str(model), "--input", str(tmp_path / "nope.txt")], capsys)
    assert code == 1 and f"--input {tmp_path / 'nope.txt'}: no such file or folder" in err
    code, _, err = run(
        ["--model", str(model), "--input", str(tmp_path / "bad.tx")], capsys
    )  # a near spelling (a case-insensitive file system would find BAD.txt)
    assert code == 1 and f"no such file or folder; did you mean {tmp_path / 'bad.txt'}?" in err
    code, _, err = run(["--model", str(model), "--input", str(tmp_path)], capsys)  # it said "no input file"
    assert code == 1 and f"--input {tmp_path}: is a folder; expected one file" in err
    code, _, err = run(["--model", str(tmp_path), "--input", str(src)], capsys)
    assert code == 1 and f"--model {tmp_path}: no config.json there (expected a model folder)" in err
    # a run's folder for the model it made: a fine-tuning's best/, a stopped run's newest checkpoint
    shutil.copytree(model, tmp_path / "run" / "best")
    code, _, err = run(["--model", str(tmp_path / "run"), "--input", str(src)], capsys)
    assert code == 1 and f"; the fine-tuning run's model is {tmp_path / 'run' / 'best'}" in err
    from albert_lm.training.checkpoint import STATE_FILE

    for step in (3, 12):  # a stopped run's checkpoints: a model folder and its training state
        shutil.copytree(model, tmp_path / "stopped" / f"checkpoint-{step}")
        (tmp_path / "stopped" / f"checkpoint-{step}" / STATE_FILE).write_bytes(b"")
    code, _, err = run(["--model", str(tmp_path / "stopped"), "--input", str(src)], capsys)
    assert code == 1 and f"its newest checkpoint, {tmp_path / 'stopped' / 'checkpoint-12'}, is a model" in err


# --------------------------------------------------------------------------- int8
def test_int8_keeps_the_forward_and_quantizes_a_shared_layer_once(tiny_config):
    from albert_lm import quantize_int8
    from albert_lm.deploy.int8 import Int8Linear

    torch.manual_seed(0)
    for sharing, distinct in (("all", 6), ("none", 10)):  # projection, pooler, (qkv, out, up, down) per block
        model = AlbertForSequenceClassification(tiny_config(sharing=sharing, num_labels=3)).eval()
        q = quantize_int8(model)
        assert len({id(m) for m in q.modules() if isinstance(m, Int8Linear)}) == distinct
        assert not any(isinstance(m, Int8Linear) for m in model.modules())  # the original is untouched
        x = torch.randint(5, 99, (4, 20))
        mask = torch.ones_like(x)
        mask[1, 12:] = 0
        with torch.no_grad():
            a = model(input_ids=x, attention_mask=mask).logits
            b = q(input_ids=x, attention_mask=mask).logits
            ha = model.albert(input_ids=x).last_hidden_state.flatten()
            hb = q.albert(input_ids=x).last_hidden_state.flatten()
        assert torch.nn.functional.cosine_similarity(ha, hb, dim=0) > 0.999
        assert (a - b).abs().max() < 0.05 * a.abs().max()
    with pytest.raises(ValueError, match="quantized engine 'nope'"):
        quantize_int8(model, engine="nope")


def test_predict_int8_agrees_with_fp32(make_model, tmp_path, capsys):
    model = make_model(AlbertForSequenceClassification, "classification", labels=("neg", "pos"), num_labels=2)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS * 5) + "\n")
    _, fp32, _ = run(["--model", str(model), "--input", str(src)], capsys)
    code, int8, _ = run(["--model", str(model), "--input", str(src), "--int8"], capsys)
    assert code == 0 and len(int8) == len(fp32) == 20
    diffs = [
        abs(a["probabilities"]["pos"] - b["probabilities"]["pos"]) for a, b in zip(fp32, int8, strict=True)
    ]
    assert max(diffs) < 0.02


def test_int8_engine_is_chosen_by_timing(tiny_config):
    from albert_lm.deploy.int8 import ENGINES, fastest_engine, quantize_int8

    chosen = fastest_engine(32, 64)
    assert chosen in torch.backends.quantized.supported_engines and chosen in ENGINES
    model = AlbertForSequenceClassification(tiny_config(num_labels=2)).eval()
    quantize_int8(model)  # auto
    assert torch.backends.quantized.engine == chosen
