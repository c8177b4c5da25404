"""Deploying a model fine-tuned on your own columns, or on GLUE's files as they are: a pair classifier's
web page has its second text box, `albert predict` refuses a row (or --text, or a plain line) without a
pair model's second text instead of classifying the first alone, a GLUE model reads its task's own
columns (sentence1, sentence2, ...), and the exports say what they did: no library's stray print, a
regression page's own wording, the ONNX README's --output as given and, for a token classifier, the code
that tags words as `albert predict` does (README and docs/deploy.md)."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from albert_lm import Predictor
from albert_lm.cli import main
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import write_json
from albert_lm.model.heads import (
    AlbertForSentenceSimilarity,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["Kala bime to.", "Dunora pesi kalo bu vemi.", "Tura.", "Mepa lodi sure kana bo tema ri."]
PAIRS = ["Bime kala.", "Vemi bu.", "Pesi tura lodi.", "Kana."]
NLI = ["contradiction", "entailment", "neutral"]
# what `albert finetune --task classification --text-column premise --text-pair-column hypothesis
# --label-column gold` records in best/finetune_config.json, the training rows having had hypotheses
PAIR_SETTINGS = {"task": "classification", "labels": NLI, "text_column": "premise",
                 "text_pair_column": "hypothesis", "label_column": "gold"}  # fmt: skip


@pytest.fixture
def saved(tmp_path, tiny_config, tiny_corpus_and_tokenizer):
    """saved(cls, settings, name, **config): a random model of that head (weights spread wide, so labels
    and tags differ between inputs) with a finetune_config.json of `settings`."""
    _, tok = tiny_corpus_and_tokenizer

    def make(cls, settings: dict, name: str = "model", **changes):
        torch.manual_seed(0)
        out = tmp_path / name
        model = cls(tiny_config(vocab_size=200, initializer_range=0.1, **changes)).eval()
        if isinstance(model, AlbertForSentenceSimilarity):
            model.set_scale(0.0, 5.0)
        model.save_pretrained(out)
        shutil.copy(tok / "spiece.model", out / "spiece.model")
        write_json(out / "finetune_config.json", {"max_seq_length": 64, **settings})
        return out

    return make


def pair_classifier(saved, **settings) -> Path:
    return saved(AlbertForSequenceClassification, {**PAIR_SETTINGS, **settings}, num_labels=3)


def run(args: list[str], capsys) -> tuple[int, list[dict], str]:
    code = main(["predict", *args, "--precision", "fp32", "--device", "cpu"])
    captured = capsys.readouterr()
    return code, [json.loads(x) for x in captured.out.splitlines() if x.strip()], captured.err


def error_line(err: str) -> str:
    """The one line of a refusal on stderr (no traceback)."""
    lines = [x for x in err.strip().splitlines() if "error:" in x]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def tsv(path: Path, header: list[str], rows) -> str:
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def web_export(model: Path, out: Path, modules: Path, capsys) -> tuple[dict, str]:
    """albert-web.json of the web export of `model`, and what the command printed (stdout and stderr)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    args = ["export", "--format", "web", "--model", str(model), "--output", str(out), "--npm-modules"]
    assert main([*args, str(modules)]) == 0
    captured = capsys.readouterr()
    return json.loads((out / "albert-web.json").read_text()), captured.out + captured.err


# --------------------------------------------------------------------------- the web page of a pair model
def test_web_page_of_a_pair_classifier_on_your_own_columns_has_a_second_text_box(
    saved,
    fake_modules,
    tmp_path,
    capsys,
):
    import albert_lm.deploy.web as web
    from albert_lm.model.config import AlbertConfig

    manifest, _ = web_export(pair_classifier(saved), tmp_path / "web", fake_modules, capsys)
    assert manifest["pair"] is True and manifest["labels"] == NLI
    assert "classifies the pair of texts" in manifest["about"] and manifest["example2"]
    # fine-tuned on single texts (no second column recorded): one box, as before
    single = pair_classifier(saved, text_pair_column=None)
    config, tokenizer = AlbertConfig.from_pretrained(single), AlbertTokenizer.from_pretrained(single)
    alone = web._manifest(single, "text-classification", config, tokenizer)
    assert alone["pair"] is False and alone["example2"] == "" and "classifies the text," in alone["about"]

    # any task on your own files with a second text column reads pairs: a regression (--task regression)
    settings = {"task": "regression", "labels": [], "text_column": "a", "text_pair_column": "b",
                "score_range": [0.0, 10.0]}  # fmt: skip
    scorer = saved(
        AlbertForSequenceClassification, settings, "scores", num_labels=1, problem_type="regression"
    )
    scores = web._manifest(scorer, "text-classification", config, tokenizer)
    assert scores["pair"] is True and scores["problem_type"] == "regression"
    assert "scores the pair of texts" in scores["about"] and scores["example2"]
    code = main(["predict", "--model", str(scorer), "--text", TEXTS[0], "--device", "cpu"])
    assert code == 1 and "columns 'a' and 'b'" in error_line(capsys.readouterr().err)


# --------------------------------------------------------------------------- predict on a pair model
def test_predict_refuses_a_row_without_a_pair_models_second_text(saved, tmp_path, capsys, monkeypatch):
    model = pair_classifier(saved)
    gold = ["neutral"] * 4
    good = tsv(tmp_path / "dev.tsv", ["premise", "hypothesis", "gold"], zip(TEXTS, PAIRS, gold, strict=True))
    code, rows, err = run(["--model", str(model), "--input", good], capsys)
    assert code == 0 and len(rows) == 4, err
    pairs = [r["probabilities"] for r in rows]
    # the header's Hypothesis is not the model's hypothesis: refused, not classified on the premise alone
    bad = tsv(tmp_path / "rows.tsv", ["premise", "Hypothesis", "gold"], zip(TEXTS, PAIRS, gold, strict=True))
    code, rows, err = run(["--model", str(model), "--input", bad], capsys)
    assert code == 1 and rows == []
    assert error_line(err).endswith(
        f"{bad}:2: missing or empty column 'hypothesis' (the row's columns: 'premise', 'Hypothesis', 'gold'; "
        "the model reads pairs of texts, and this row has no second; the model was fine-tuned on column "
        "'hypothesis'; --text-pair-column NAME reads another)"
    )
    code, rows, _ = run(["--model", str(model), "--input", bad, "--text-pair-column", "Hypothesis"], capsys)
    assert code == 0 and [r["probabilities"] for r in rows] == pairs
    short = tmp_path / "short.csv"  # a CSV row that ends before the second text: no text there either
    short.write_text(f"premise,hypothesis\n{TEXTS[0]}\n", encoding="utf-8")
    code, rows, err = run(["--model", str(model), "--input", str(short)], capsys)
    assert code == 1 and rows == [] and f"{short}:2: no value in column 'hypothesis'" in error_line(err)
    # a JSON Lines row without it: its line, or left out under --skip-bad
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"premise": TEXTS[0], "hypothesis": PAIRS[0]}) + "\n"
                   + json.dumps({"premise": TEXTS[1]}) + "\n")  # fmt: skip
    code, _, err = run(["--model", str(model), "--input", str(src)], capsys)
    assert code == 1 and f"{src}:2: missing or empty column 'hypothesis'" in error_line(err)
    code, rows, err = run(["--model", str(model), "--input", str(src), "--skip-bad"], capsys)
    assert code == 0 and [r["line"] for r in rows] == [1] and "1 bad row left out" in err
    # single texts: --text and plain lines (stdin) are refused, saying how to give pairs
    code, rows, err = run(["--model", str(model), "--text", TEXTS[0]], capsys)
    assert code == 1 and rows == []
    assert error_line(err).endswith(
        "--text gives single texts, and this classification model reads pairs of texts: give each pair as a "
        "row of an --input file (CSV, TSV or JSON Lines) with columns 'premise' and 'hypothesis'"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{TEXTS[0]}\n".encode())))
    code, rows, err = run(["--model", str(model), "--input", "-"], capsys)
    line = error_line(err)
    assert code == 1 and rows == [] and "<stdin>:1: a plain line gives single texts" in line
    assert "columns 'premise' and 'hypothesis'; for stdin, --format csv, tsv or jsonl" in line
    # Predictor: a text alone is refused too; pairs (or single texts asked for) are read
    clf = Predictor(model, device="cpu", precision="fp32")
    with pytest.raises(
        ValueError, match=r"inputs:1: a text alone, and this classification model reads pairs"
    ):
        clf.predict([TEXTS[0]])
    assert [r["probabilities"] for r in clf.predict(list(zip(TEXTS, PAIRS, strict=True)))] == pairs
    alone = Predictor(model, device="cpu", precision="fp32", text_pair_column="").predict(TEXTS)
    assert [r["probabilities"] for r in alone] != pairs
    # the default column recorded: an older albert-lm recorded it for single texts too, and the way out is said
    older = pair_classifier(saved, text_column="text", text_pair_column="text_pair")
    code, _, err = run(["--model", str(older), "--text", TEXTS[0]], capsys)
    assert code == 1 and error_line(err).endswith('set "text_pair_column": null in its finetune_config.json)')


# --------------------------------------------------------------------------- predict on GLUE's own files
def test_predict_reads_a_glue_models_own_columns_where_the_standard_ones_are_absent(saved, tmp_path, capsys):
    # as `albert finetune --task stsb` leaves it: the own-data column options at their defaults, unused
    stsb = saved(AlbertForSequenceClassification, {"task": "stsb", "labels": [], "text_column": "text",
                 "text_pair_column": "text_pair"}, "stsb", num_labels=1)  # fmt: skip
    scores = [str(s) for s in (0.5, 1.5, 2.5, 3.5)]
    glue = tsv(
        tmp_path / "dev.tsv", ["sentence1", "sentence2", "score"], zip(TEXTS, PAIRS, scores, strict=True)
    )
    plain = tsv(tmp_path / "plain.tsv", ["text", "text_pair"], zip(TEXTS, PAIRS, strict=True))
    code, read, err = run(["--model", str(stsb), "--input", glue], capsys)
    assert code == 0 and len(read) == 4, err
    _, standard, _ = run(["--model", str(stsb), "--input", plain], capsys)
    assert [r["score"] for r in read] == [r["score"] for r in standard]
    # the columns given win over the task's own: here the two sentences swapped
    swapped = ["--text-column", "sentence2", "--text-pair-column", "sentence1"]
    _, given, _ = run(["--model", str(stsb), "--input", glue, *swapped], capsys)
    back = tsv(tmp_path / "back.tsv", ["text", "text_pair"], zip(PAIRS, TEXTS, strict=True))
    _, expected, _ = run(["--model", str(stsb), "--input", back], capsys)
    assert [r["score"] for r in given] == [r["score"] for r in expected] != [r["score"] for r in read]
    # a classifier too (QNLI: question, sentence); a row of neither names both
    qnli = saved(AlbertForSequenceClassification, {"task": "qnli"}, "qnli", num_labels=2)
    questions = tsv(tmp_path / "q.tsv", ["index", "question", "sentence"], [("0", TEXTS[1], PAIRS[1])])
    code, rows, _ = run(["--model", str(qnli), "--input", questions], capsys)
    pair = Predictor(qnli, device="cpu", precision="fp32").predict([(TEXTS[1], PAIRS[1])])
    assert code == 0 and [r["probabilities"] for r in rows] == [r["probabilities"] for r in pair]
    other = tsv(tmp_path / "o.tsv", ["query", "sentence"], [(TEXTS[1], PAIRS[1])])
    code, _, err = run(["--model", str(qnli), "--input", other], capsys)
    assert code == 1 and error_line(err).endswith(
        f"{other}:2: missing or empty column 'text' (the row's columns: 'query', 'sentence'; --text-column "
        "NAME reads another, and the GLUE task's own column 'question' is read where present)"
    )


# --------------------------------------------------------------------------- what the exports say
def test_web_export_of_a_bi_encoder_prints_no_library_line_and_its_page_scores_the_pair(
    saved,
    fake_modules,
    tmp_path,
    capsys,
):
    """ONNX Runtime's optimizer prints "failed in shape inference" for a bi-encoder's graph: not to the
    user. The page of a regression says it scores, and offers a pair of texts that fit a similarity."""
    bi = saved(AlbertForSentenceSimilarity, {"task": "stsb", "bi_encoder": True}, num_labels=1)
    manifest, printed = web_export(bi, tmp_path / "web", fake_modules, capsys)
    assert "shape inference" not in printed and "text-classification page" in printed
    assert manifest["pair"] is True and manifest["problem_type"] == "regression"
    assert "scores the pair of texts" in manifest["about"] and "classifies" not in manifest["about"]
    assert manifest["example2"] and "film" not in manifest["example"]
    assert manifest["title"].endswith(": regression")


def _python_block(text: str, containing: str) -> str:
    """The ```python block of a Markdown `text` that holds `containing`."""
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    return next(b for b in blocks if containing in b)


def test_onnx_readme_of_a_token_classifier_has_the_output_as_given_and_how_to_tag_words(
    saved, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    pytest.importorskip("tokenizers")
    from albert_lm.deploy.export_card import write_export_card

    tags = ["B-X", "I-X", "O"]
    settings = {"task": "token-classification", "labels": tags, "tokens_column": "tokens"}
    model = saved(AlbertForTokenClassification, settings, "ner", num_labels=3,
                  id2label=dict(enumerate(tags)))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--model", str(model), "--output", "runs/ner_onnx"]) == 0
    readme = (tmp_path / "runs" / "ner_onnx" / "README.md").read_text()
    assert f"Made by `albert export --model {model} --output runs/ner_onnx`." in readme
    # the README's code, as written (its folder is the --output, from where the export ran)
    words = ["Kala", "bime", "to", "dunora", "pesi", "kalo", "bu", "vemi", "tura"]
    wanted = Predictor(model, device="cpu", precision="fp32").predict([words])[0]["tags"]
    assert len(set(wanted)) > 1  # the tags differ between words: reading the wrong piece would show
    code = _python_block(readme, "firsts")
    assert 'folder = "runs/ner_onnx"' in code
    scope: dict = {}
    exec(
        compile(code.replace('["Anna", "lives", "in", "Berlin", "."]', repr(words)), "README.md", "exec"),
        scope,
    )
    assert scope["tags"] == wanted
    # docs/deploy.md's, with the special ids read from tokenizer.json
    docs = _python_block((ROOT / "docs" / "deploy.md").read_text(), "firsts")
    docs = docs.replace('folder = "runs/ner-onnx"', f"folder = {str(tmp_path / 'runs' / 'ner_onnx')!r}")
    scope = {}
    exec(
        compile(docs.replace('["Anna", "lives", "in", "Berlin", "."]', repr(words)), "deploy.md", "exec"),
        scope,
    )
    assert scope["tags"] == wanted
    # a sequence classifier's README has no such section
    clf = pair_classifier(saved)
    record = {"inputs": ["input_ids"], "outputs": ["logits"], "opset": 18, "onnxruntime": "1", "torch": "2",
              "max_abs_diff_fp32": 0.0, "bytes": {}}  # fmt: skip
    (tmp_path / "card").mkdir()
    card = write_export_card(tmp_path / "card", clf, record, "out", AlbertTokenizer.from_pretrained(clf))
    assert "Tagging words" not in card.read_text() and "firsts" not in card.read_text()
