"""The way on from a bad input of finetune, evaluate, predict, embed and fill-mask: a CSV separated by ';'
(or tabs), an input without texts, a column the file lacks, a model path that is no model folder, and a
model without a task head."""

from __future__ import annotations

import io
import json
import shutil

import pytest
import torch

from albert_lm.cli import main
from albert_lm.deploy.inputs import read_input, read_texts
from albert_lm.deploy.predict import NotFineTuned, model_task
from albert_lm.files import InputError, write_json
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForSequenceClassification, AlbertModel
from albert_lm.tasks import get_task

SEMICOLONS = "; is the file separated by ';'? Save it comma-separated, or tab-separated as .tsv"


@pytest.fixture
def classifier(tmp_path, tiny_pretrained):
    """A random tiny classifier, as a fine-tuning run's best/ saves it."""
    torch.manual_seed(0)
    config = AlbertConfig.from_pretrained(tiny_pretrained)
    config.num_labels, config.id2label = 2, {0: "a", 1: "b"}
    out = tmp_path / "classifier"
    AlbertForSequenceClassification(config).save_pretrained(out)
    shutil.copy(tiny_pretrained / "spiece.model", out / "spiece.model")
    write_json(out / "finetune_config.json", {"task": "classification", "labels": ["a", "b"]})
    return out


def test_a_semicolon_csv_whose_texts_hold_commas_names_its_separator_in_every_reader(
    tmp_path, tiny_pretrained, capsys
):
    semi = tmp_path / "semi"
    semi.mkdir()
    for split in ("train", "dev"):
        (semi / f"{split}.csv").write_text(
            "review;sentiment\nGreat film, loved it;positive\nAwful;negative\n"
        )
    more = "more fields than header columns" + SEMICOLONS
    task = get_task("classification", text_column="review", label_column="sentiment")
    with pytest.raises(InputError, match="train.csv:2: " + more.replace("?", r"\?")):
        task.read(semi / "train.csv", "train")  # finetune's and evaluate's reader
    with pytest.raises(InputError, match="dev.csv:2: " + more.replace("?", r"\?")):
        read_input(str(semi / "dev.csv"), "auto")  # predict's, embed's and fill-mask's
    argv = ["--model", str(tiny_pretrained), "--text-column", "review"]
    assert main(["embed", *argv, "--input", str(semi / "dev.csv"), "--output", str(tmp_path / "e.npy")]) == 1
    assert f"{semi / 'dev.csv'}:2: {more}" in capsys.readouterr().err
    finetune = ["finetune", "--task", "classification", *argv, "--label-column", "sentiment"]
    assert main([*finetune, "--data", str(semi), "--output", str(tmp_path / "run")]) == 1
    assert f"{semi / 'train.csv'}:2: {more}" in capsys.readouterr().err
    # a tab-separated file named .csv; a ';' one whose texts have no comma: the column is missing
    (tmp_path / "tabs.csv").write_text("review\tsentiment\nGreat film, loved it\tpositive\n")
    with pytest.raises(
        InputError, match=r"tabs.csv:2: more fields .*; is the file tab-separated\? Name it .tsv"
    ):
        read_input(str(tmp_path / "tabs.csv"), "auto")
    (tmp_path / "plain.csv").write_text("review;sentiment\nGreat film;positive\n")
    with pytest.raises(
        InputError, match=r"plain.csv:2: missing or empty column 'review' .*" + SEMICOLONS[:30]
    ):
        read_texts(str(tmp_path / "plain.csv"), None, "auto", "review", ())


@pytest.mark.parametrize(
    ("name", "body", "what"),
    [
        ("empty.txt", "", "an empty file"),
        ("blank.txt", "\n  \n\n", "only blank lines"),
        ("header.csv", "text,id\n", "a header without rows"),
        ("blank.jsonl", "\n\n", "only blank lines"),
    ],
)
def test_an_input_without_texts_is_refused_and_nothing_written(
    tmp_path, tiny_pretrained, classifier, capsys, name, body, what
):
    src = tmp_path / name
    src.write_text(body)
    for command, model, out in (
        ("embed", tiny_pretrained, "e.npy"),
        ("predict", classifier, "p.jsonl"),
        ("fill-mask", tiny_pretrained, "f.jsonl"),
    ):
        argv = [command, "--model", str(model), "--input", str(src), "--output", str(tmp_path / out)]
        assert main(argv) == 1, command
        err = capsys.readouterr().err
        assert f"{src}: no texts in it ({what}), so nothing is written" in err and "Traceback" not in err
        assert not (tmp_path / out).exists()


def test_stdin_without_texts_is_refused(tiny_pretrained, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\n\n")))
    assert main(["embed", "--model", str(tiny_pretrained), "--input", "-", "--output", "-"]) == 1
    captured = capsys.readouterr()
    assert "<stdin>: no texts in it (only blank lines)" in captured.err and not captured.out


def test_every_row_bad_and_skipped_is_refused_and_nothing_written(
    tmp_path, tiny_pretrained, classifier, capsys
):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps({"txt": "Kala."}) + "\n" + json.dumps({"txt": "Bime."}) + "\n")
    for command, model in (("embed", tiny_pretrained), ("predict", classifier)):
        out = tmp_path / f"{command}.jsonl"
        assert (
            main([command, "--model", str(model), "--input", str(src), "--output", str(out), "--skip-bad"])
            == 1
        )
        err = capsys.readouterr().err
        assert (
            f"{src}: no texts left: all 2 rows were bad and left out (--skip-bad); the first: {src}:1" in err
        )
        assert not out.exists()
    (tmp_path / "nomask.txt").write_text("Kala bime.\nTura.\n")  # fill-mask refuses a text without [MASK]
    out = tmp_path / "f.jsonl"
    argv = ["fill-mask", "--model", str(tiny_pretrained), "--input", str(tmp_path / "nomask.txt")]
    assert main([*argv, "--output", str(out), "--skip-bad"]) == 1
    assert "no texts left: all 2 rows were bad" in capsys.readouterr().err and not out.exists()


def test_a_model_without_a_task_head_says_how_to_get_one(tmp_path, tiny_pretrained):
    with pytest.raises(
        NotFineTuned, match=r"'AlbertForPreTraining' .*; fine-tune it first: albert finetune "
    ):
        model_task(tiny_pretrained)
    with pytest.raises(NotFineTuned, match=r"as it is, `albert fill-mask` fills its \[MASK\]s"):
        model_task(tiny_pretrained)
    encoder = tmp_path / "encoder"
    AlbertModel(AlbertConfig.from_pretrained(tiny_pretrained)).save_pretrained(encoder)
    with pytest.raises(NotFineTuned, match="as it is, `albert embed` gives its sentence vectors"):
        model_task(encoder)


def test_a_model_path_that_is_no_model_folder_is_named_alike_by_every_command(
    tmp_path, tiny_pretrained, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_pretrained, tmp_path / "models" / "tiny-en")
    (tmp_path / "empty").mkdir()
    (tmp_path / "in.txt").write_text("Kala [MASK] bime.\n")
    cases = {
        "models/tiny-en/model.safetensors": "--model models/tiny-en/model.safetensors: a weights file, not a "
        "model folder; give its folder, --model models/tiny-en",
        "models/tiny-e": "no model at models/tiny-e (--model: no such folder; did you mean models/tiny-en?)",
        str(tmp_path / "nothing"): f"no model at {tmp_path / 'nothing'} (--model: no such folder)",
        "empty": "--model empty: no config.json there (expected a model folder)",
    }
    for model, message in cases.items():
        for command in ("embed", "fill-mask", "predict", "finetune"):
            more = (
                ["--task", "classification", "--data", ".", "--output", "run"]
                if command == "finetune"
                else []
            )
            inputs = [] if more else ["--input", "in.txt"]
            assert main([command, "--model", model, *inputs, *more]) == 1
            err = capsys.readouterr().err
            assert message in err and "(no config.json)" not in err, (command, err)


@pytest.mark.parametrize(
    ("task", "options", "header", "message"),
    [
        ("classification", {"text_column": "review"}, "review,sentiment",
         "--label-column label: the file has no such column (its columns: 'review', 'sentiment'); did you "
         "mean --label-column sentiment?"),
        ("classification", {"text_column": "Review"}, "review,sentiment,label",
         "--text-column Review: the file has no such column (its columns: 'review', 'sentiment', 'label'); "
         "did you mean --text-column review?"),
        ("classification", {"text_pair_column": "second"}, "text,label,other",
         "--text-pair-column second: the file has no such column (its columns: 'text', 'label', 'other'); "
         "did you mean --text-pair-column other?"),
        ("token-classification", {"tags_column": "tags"}, "words,ner",
         "--tokens-column tokens: the file has no such column (its columns: 'words', 'ner'); "
         "--tokens-column NAME reads another"),
        ("token-classification", {"tokens_column": "words"}, "words,ner",
         "--tags-column tags: the file has no such column (its columns: 'words', 'ner'); did you mean "
         "--tags-column ner?"),
    ],
)  # fmt: skip
def test_a_column_the_header_lacks_is_named_against_the_header_with_the_option(
    tmp_path, task, options, header, message
):
    path = tmp_path / "train.csv"
    path.write_text(f"{header}\n" + ",".join(["a b"] * len(header.split(","))) + "\n")
    with pytest.raises(InputError) as e:
        get_task(task, **options).read(path, "train")
    assert str(e.value) == f"{path}:1: {message}"


def test_finetune_names_the_label_column_against_the_header(tmp_path, tiny_pretrained, capsys):
    data = tmp_path / "mydata"
    data.mkdir()
    (data / "train.csv").write_text("review,sentiment\nGreat film,positive\nAwful,negative\n")
    argv = ["finetune", "--task", "classification", "--model", str(tiny_pretrained), "--data", str(data)]
    assert main([*argv, "--text-column", "review", "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert f"{data / 'train.csv'}:1: --label-column label: the file has no such column" in err
    assert "did you mean --label-column sentiment?" in err and "Traceback" not in err
