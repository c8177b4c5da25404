"""`albert predict` and `albert_lm.Predictor` read the columns a model was fine-tuned on: the text (and
second text, or token list) columns recorded in finetune_config.json are the defaults, an option or
argument given wins, the standard names are the fallback, and a missing column's message says where its
name came from and names the option (the command) or the argument (Python) that reads another. And an
--output whose name says another format than JSON Lines is refused before anything is read."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
from conftest import two_step_finetune_argv

from albert_lm import Predictor
from albert_lm.cli import main
from albert_lm.files import write_json
from albert_lm.model.heads import AlbertForSequenceClassification, AlbertForTokenClassification

TEXTS = ["Kala bime to.", "Dunora pesi kalo bu vemi.", "Tura.", "Mepa lodi sure kana bo tema ri."]
PAIRS = ["Bime kala.", "Vemi bu.", "Pesi tura lodi.", "Kana."]


@pytest.fixture
def saved(tmp_path, tiny_config, tiny_corpus_and_tokenizer):
    """saved(cls, settings, name): a random model of that head with a finetune_config.json of `settings`."""
    _, tok = tiny_corpus_and_tokenizer

    def make(cls, settings: dict, name: str = "model", **changes):
        torch.manual_seed(0)
        out = tmp_path / name
        cls(tiny_config(vocab_size=200, **changes)).eval().save_pretrained(out)
        shutil.copy(tok / "spiece.model", out / "spiece.model")
        write_json(out / "finetune_config.json", {"max_seq_length": 64, **settings})
        return out

    return make


def classifier(saved, name: str = "model", **columns):
    settings = {"task": "classification", "labels": ["bad", "good"], **columns}
    return saved(AlbertForSequenceClassification, settings, name, num_labels=2)


def write_csv(path, header: list[str], rows) -> str:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def run(args: list[str], capsys) -> tuple[int, list[dict], str]:
    code = main(["predict", *args, "--precision", "fp32", "--device", "cpu"])
    captured = capsys.readouterr()
    return code, [json.loads(x) for x in captured.out.splitlines() if x.strip()], captured.err


def probabilities(rows: list[dict]) -> list[float]:
    return [r["probabilities"]["good"] for r in rows]


# --------------------------------------------------------------------------- the command
def test_predict_reads_the_columns_the_model_was_fine_tuned_on(saved, tmp_path, capsys):
    model = classifier(saved, text_column="review", text_pair_column="extra", label_column="stars")
    mine = write_csv(tmp_path / "dev.csv", ["id", "review", "extra", "stars"],
                     [(i, t, p, "good") for i, (t, p) in enumerate(zip(TEXTS, PAIRS, strict=True))])  # fmt: skip
    code, rows, err = run(["--model", str(model), "--input", mine], capsys)
    assert code == 0 and len(rows) == 4, err
    # the same rows under the standard names, the columns given: the same pairs, the same predictions
    plain = write_csv(tmp_path / "plain.csv", ["text", "text_pair"], zip(TEXTS, PAIRS, strict=True))
    code, given, _ = run(
        ["--model", str(model), "--input", plain, "--text-column", "text", "--text-pair-column", "text_pair"],
        capsys,
    )
    assert code == 0 and given == rows
    # the second text is read: read alone (single texts asked for, text_pair_column="") the predictions
    # differ; a row without it is refused (tests/test_deploy_own_tasks.py)
    alone = Predictor(model, device="cpu", precision="fp32", text_pair_column="").predict(TEXTS)
    assert probabilities(alone) != pytest.approx(probabilities(rows), abs=1e-6)
    # plain lines are the texts, whatever the model's column is named (a model of single texts)
    model = classifier(saved, "single", text_column="review", text_pair_column=None)
    single = write_csv(tmp_path / "single.csv", ["review"], [(t,) for t in TEXTS])
    _, from_csv, _ = run(["--model", str(model), "--input", single], capsys)
    lines = tmp_path / "in.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    code, from_lines, _ = run(["--model", str(model), "--input", str(lines)], capsys)
    assert code == 0 and probabilities(from_lines) == pytest.approx(probabilities(from_csv), abs=1e-6)
    assert probabilities(from_csv) == pytest.approx(probabilities(alone), abs=1e-6)


def test_a_missing_column_says_the_model_named_it_and_an_option_given_wins(saved, tmp_path, capsys):
    model = classifier(saved, text_column="review")
    other = write_csv(tmp_path / "other.csv", ["id", "text"], [(1, TEXTS[0])])
    code, _, err = run(["--model", str(model), "--input", other], capsys)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (
        f"{other}:2: missing or empty column 'review' (the row's columns: 'id', 'text'; the model was "
        "fine-tuned on column 'review'; --text-column NAME reads another)" in err
    )
    code, rows, _ = run(["--model", str(model), "--input", other, "--text-column", "text"], capsys)
    assert code == 0 and [r["line"] for r in rows] == [2]
    # no columns recorded (a GLUE model, an older finetune_config.json): the standard names, as before
    for name, settings in (
        ("glue", {"task": "sst2", "text_column": "review"}),
        ("old", {"task": "classification"}),
    ):
        plain = saved(AlbertForSequenceClassification, {"labels": ["0", "1"], **settings}, name, num_labels=2)
        code, _, err = run(
            ["--model", str(plain), "--input", write_csv(tmp_path / "r.csv", ["review"], [("x",)])], capsys
        )
        assert (
            code == 1 and "missing or empty column 'text' (the row's columns: 'review'; --text-column" in err
        )
        assert "fine-tuned on" not in err


def test_a_model_fine_tuned_on_single_texts_reads_no_second_text(saved, tmp_path, capsys):
    model = classifier(saved, text_column="review", text_pair_column=None)
    pairs = write_csv(tmp_path / "p.csv", ["review", "text_pair"], zip(TEXTS, PAIRS, strict=True))
    single = write_csv(tmp_path / "s.csv", ["review"], [(t,) for t in TEXTS])
    _, with_pairs, _ = run(["--model", str(model), "--input", pairs], capsys)
    _, alone, _ = run(["--model", str(model), "--input", single], capsys)
    assert with_pairs == alone and len(alone) == 4
    _, read, _ = run(["--model", str(model), "--input", pairs, "--text-pair-column", "text_pair"], capsys)
    assert probabilities(read) != pytest.approx(probabilities(alone), abs=1e-6)


def test_token_classification_reads_the_models_token_column(saved, tmp_path, capsys):
    settings = {"task": "token-classification", "labels": ["O", "X", "Y"], "tokens_column": "words"}
    model = saved(AlbertForTokenClassification, settings, num_labels=3)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"words": ["Kala", "bime"], "tokens": ["no"]}) + "\n")
    code, rows, _ = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 0 and rows[0]["tokens"] == ["Kala", "bime"]
    src.write_text(json.dumps({"toks": ["Kala"]}) + "\n")
    code, _, err = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 1 and (
        "missing or empty column 'words' (the row's columns: 'toks'; the model was fine-tuned on column "
        "'words'; --tokens-column NAME reads another)" in err
    )
    # a CSV's token column as fine-tuning reads it: words separated by spaces (or a JSON list)
    cells = [["Kala bime to"], ['["Kala", "bime"]'], ["[ Kala ] bime"]]  # the last: words, not JSON
    csv_in = write_csv(tmp_path / "in.csv", ["words"], cells)
    code, rows, _ = run(["--model", str(model), "--input", csv_in], capsys)
    assert code == 0
    assert [r["tokens"] for r in rows] == [
        ["Kala", "bime", "to"],
        ["Kala", "bime"],
        ["[", "Kala", "]", "bime"],
    ]
    deep = write_csv(tmp_path / "deep.csv", ["words"], [["[" * 100_000]])  # past the JSON parser's depth
    code, rows, err = run(["--model", str(model), "--input", deep], capsys)
    assert code == 1 and not rows and "deep.csv:2: column 'words': expected a JSON list" in err
    # a Python list's printed form (pandas' to_csv): refused, as fine-tuning refuses it
    listed = write_csv(tmp_path / "listed.csv", ["words"], [["['Kala', 'bime']"]])
    code, rows, err = run(["--model", str(model), "--input", listed], capsys)
    assert (
        code == 1
        and not rows
        and "listed.csv:2: column 'words': ['Kala', 'bime'] is a list but not JSON" in err
    )
    # the Python API: a list of words is one row's words, whatever its length (two is not a pair)
    predictor = Predictor(model)
    rows = predictor.predict([["Kala", "bime"], ["Kala", "bime", "to"], "Kala bime"])
    assert [r["tokens"] for r in rows] == [["Kala", "bime"], ["Kala", "bime", "to"], ["Kala", "bime"]]
    assert all(len(r["tags"]) == len(r["tokens"]) for r in rows)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("out.csv", "CSV"),
        ("OUT.TSV", "TSV"),
        ("out.json", "one JSON document"),
        ("out.jsonl.gz", "gzip-compressed"),
    ],
)
def test_an_output_named_for_another_format_is_refused(saved, tmp_path, capsys, name, says):
    model = classifier(saved)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / name
    code, _, err = run(["--model", str(model), "--input", str(src), "--output", str(out)], capsys)
    assert code == 1 and "Traceback" not in err
    assert f"--output {out}: predict writes JSON Lines (one JSON object a line), not {says}" in err
    assert f"name it {tmp_path / 'out.jsonl'}" in err.replace("OUT", "out")
    assert not list(tmp_path.glob("*out*")) and not list(tmp_path.glob("*OUT*"))
    code, _, _ = run(
        ["--model", str(model), "--input", str(src), "--output", str(tmp_path / "p.jsonl")], capsys
    )
    assert code == 0 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 4


# --------------------------------------------------------------------------- Python
def test_predictor_reads_the_models_columns_and_names_its_own_arguments(saved, tmp_path, capsys):
    model = classifier(saved, text_column="review", text_pair_column="extra")
    src = write_csv(tmp_path / "dev.csv", ["review", "extra"], zip(TEXTS, PAIRS, strict=True))
    _, cli, _ = run(["--model", str(model), "--input", src], capsys)
    clf = Predictor(model, device="cpu", precision="fp32")
    rows = [{"review": t, "extra": p} for t, p in zip(TEXTS, PAIRS, strict=True)]
    as_rows, as_pairs = clf.predict(rows), clf.predict(list(zip(TEXTS, PAIRS, strict=True)))
    assert probabilities(as_rows) == pytest.approx(probabilities(cli), abs=1e-6)
    assert probabilities(as_pairs) == pytest.approx(probabilities(cli), abs=1e-6)
    with pytest.raises(
        ValueError, match=r"inputs:1: a text alone, and this classification model reads pairs"
    ):
        clf.predict(TEXTS)  # a pair model reads no text alone
    with pytest.raises(ValueError) as e:
        clf.predict([{"text": "Kala."}])
    message = str(e.value)
    assert "inputs:1: missing or empty column 'review'" in message
    assert (
        "the model was fine-tuned on column 'review'; Predictor(..., text_column=NAME) reads another"
        in message
    )
    assert "--text-column" not in message
    # an argument given wins
    given = Predictor(model, device="cpu", precision="fp32", text_column="body", text_pair_column="second")
    renamed = [{"body": t, "second": p} for t, p in zip(TEXTS, PAIRS, strict=True)]
    assert probabilities(given.predict(renamed)) == pytest.approx(probabilities(cli), abs=1e-6)
    with pytest.raises(ValueError, match=r"missing or empty column 'body' \(the row's columns: 'review'; "
                       r"Predictor\(\.\.\., text_column=NAME\) reads another\)"):  # fmt: skip
        given.predict([{"review": "Kala."}])
    with pytest.raises(ValueError, match="text_column 3: expected a column name"):
        Predictor(model, text_column=3)  # type: ignore[arg-type]


def test_predictor_on_a_model_of_single_texts_refuses_a_pair(saved):
    clf = Predictor(classifier(saved, text_pair_column=None), device="cpu", precision="fp32")
    assert len(clf.predict([TEXTS[0]])) == 1
    with pytest.raises(ValueError, match="inputs:1: a pair, but this model reads single texts"):
        clf.predict([(TEXTS[0], PAIRS[0])])


# --------------------------------------------------------------------------- the audit's run, end to end
def test_finetune_on_own_columns_then_predict_on_the_same_file(tiny_sst2, tmp_path, capsys):
    data = tmp_path / "my_data"
    data.mkdir()
    words = ["bala", "kemo", "fira", "dusa"]
    made = [(i, f"{words[i % 4]} {words[(i + 1) % 4]}", "good" if i % 2 else "bad") for i in range(16)]
    for split in ("train", "dev"):
        write_csv(data / f"{split}.csv", ["id", "review", "stars"], made)
    run_dir = tmp_path / "runs" / "mine"
    argv = two_step_finetune_argv(tiny_sst2 / "base", data, run_dir, "--text-column", "review",
                                  "--label-column", "stars", "--device", "cpu")  # fmt: skip
    assert main(argv) == 0
    recorded = json.loads((run_dir / "best" / "finetune_config.json").read_text())
    assert (recorded["text_column"], recorded["label_column"]) == ("review", "stars")
    assert recorded["text_pair_column"] is None  # trained on single texts: predict feeds no second text
    capsys.readouterr()
    code, rows, err = run(["--model", str(run_dir / "best"), "--input", str(data / "dev.csv")], capsys)
    assert code == 0 and len(rows) == 16 and {r["label"] for r in rows} <= {"bad", "good"}, err
    clf = Predictor(run_dir / "best", device="cpu")
    assert len(clf.predict([{"review": "bala kemo"}])) == 1
    with pytest.raises(ValueError, match="inputs:1: a pair, but this model reads single texts"):
        clf.predict([("bala kemo", "fira dusa")])
