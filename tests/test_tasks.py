"""Task readers, features and decoding: SQuAD windows and offsets, GLUE / RACE / generic readers, bad input."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from albert_lm.cli import main
from albert_lm.tasks import squad


class ChunkTokenizer:
    """A stand-in tokenizer: lower-cased words cut into 3-character pieces, "▁" on each word's first piece."""

    cls_token_id, sep_token_id, pad_token_id = 2, 3, 0

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def tokenize(self, text: str) -> list[str]:
        out = []
        for word in text.lower().split():
            chunks = [word[i : i + 3] for i in range(0, len(word), 3)]
            out += ["\u2581" + chunks[0], *chunks[1:]]
        return out

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.setdefault(t, 5 + len(self.vocab)) for t in tokens]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.convert_tokens_to_ids(self.tokenize(text))
        return [2, *ids, 3] if add_special_tokens else ids


def _squad_file(
    tmp_path: Path, qas: list[dict], context: str = "The Broncos beat the Panthers in Santa Clara."
) -> Path:
    path = tmp_path / "squad.json"
    doc = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(doc, indent=1))
    return path


# --------------------------------------------------------------------------- SQuAD
def test_squad_reader_rejects_offsets_that_miss_the_answer(tmp_path):
    qas = [
        {"id": "ok", "question": "Who won?", "answers": [{"text": "Broncos", "answer_start": 4}]},
        {"id": "off", "question": "Where?", "answers": [{"text": "Santa Clara", "answer_start": 30}]},
    ]
    path = _squad_file(tmp_path, qas)
    with pytest.raises(ValueError, match=r"squad\.json:\d+: .*'off'.*answer_start 30 does not point at"):
        squad.read_squad(path, version2=False)
    lines = path.read_text().splitlines()
    # The line named in the error is the line of the offending question's id.
    with pytest.raises(ValueError) as e:
        squad.read_squad(path, version2=False)
    line = int(str(e.value).split(":")[1])
    assert '"off"' in lines[line - 1]


def test_squad_reader_bad_input(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.json: empty file"):
        squad.read_squad(empty, version2=False)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{]')
    with pytest.raises(ValueError, match=r"broken.json:2: not valid JSON"):
        squad.read_squad(broken, version2=False)
    impossible = _squad_file(tmp_path, [{"id": "q", "question": "?", "answers": [], "is_impossible": True}])
    with pytest.raises(ValueError, match="use squad2"):
        squad.read_squad(impossible, version2=False)
    assert squad.read_squad(impossible, version2=True)[0].gold == [""]
    with pytest.raises(FileNotFoundError):
        squad.read_squad(tmp_path / "nope.json", version2=True)


def test_squad_windows_positions_and_decoding(tmp_path):
    context = " ".join(f"word{i}" for i in range(40)) + " Denver Broncos won."
    start = context.index("Denver Broncos")
    qas = [
        {"id": "q1", "question": "who won", "answers": [{"text": "Denver Broncos", "answer_start": start}]}
    ]
    examples = squad.read_squad(_squad_file(tmp_path, qas, context), version2=True)
    tok = ChunkTokenizer()
    train = squad.featurize(examples, tok, max_seq_length=32, doc_stride=8, training=True)
    evalf = squad.featurize(examples, tok, max_seq_length=32, doc_stride=8)
    assert len(train) > 3 and all(len(f["input_ids"]) <= 32 for f in train)
    # Exactly the windows holding the answer point at it; the rest point at [CLS].
    hits = [(f, g) for f, g in zip(train, evalf, strict=True) if f["start_positions"] > 0]
    assert hits and len(hits) < len(train)
    for f, g in hits:
        off = g["context_offset"]
        s = g["token_chars"][f["start_positions"] - off][0]
        e = g["token_chars"][f["end_positions"] - off][1]
        assert context[s:e] == "Denver Broncos"
    # Every context token is the max-context token of exactly one window.
    count: dict[tuple[int, int], int] = {}
    for g in evalf:
        for span, best in zip(g["token_chars"], g["max_context"], strict=True):
            count[span] = count.get(span, 0) + best
    assert set(count.values()) == {1}
    # Decoding: logits peaking on the gold span recover the original text; a strong [CLS] gives "".
    outputs = []
    for f, g in zip(train, evalf, strict=True):
        n = len(g["input_ids"])
        s, e = np.zeros(n), np.zeros(n)
        if f["start_positions"]:
            s[f["start_positions"]], e[f["end_positions"]] = 5.0, 5.0
        outputs.append({"start_logits": s, "end_logits": e})
    preds = squad.decode(examples, evalf, outputs)
    assert preds.text == {"q1": "Denver Broncos"}
    assert preds.null_diff["q1"] == pytest.approx(-10.0)
    assert squad.apply_threshold(preds, -11.0) == {"q1": ""}


def test_squad_context_windows_and_answer_tokens():
    assert squad.context_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert squad.context_windows(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # the stride never skips tokens
    assert squad.context_windows(3, 4, 2) == [(0, 3)]
    ctx = squad._Context([7, 8, 9], [(0, 3), (4, 6), (6, 9)])  # "The cat's"
    assert squad.answer_tokens(ctx, "cat's", 4) == (1, 2)
    assert squad.answer_tokens(ctx, " ", 3) is None


def test_squad_decode_respects_max_answer_length(tmp_path):
    context = "alpha beta gamma delta"
    qas = [{"id": "q", "question": "x", "answers": [{"text": "alpha", "answer_start": 0}]}]
    ex = squad.read_squad(_squad_file(tmp_path, qas, context), version2=False)
    f = squad.featurize(ex, ChunkTokenizer(), 64)
    off, n = f[0]["context_offset"], len(f[0]["input_ids"])
    s, e = np.zeros(n), np.zeros(n)
    s[off], e[off + len(f[0]["token_chars"]) - 1] = 9.0, 9.0  # best pair spans everything
    e[off + 1] = 8.0
    out = squad.decode(ex, f, [{"start_logits": s, "end_logits": e}], max_answer_length=2)
    assert out.text["q"] == context[: f[0]["token_chars"][1][1]]


def test_evaluate_cli_gold_as_predictions(albert_data, tmp_path, capsys):
    dev = albert_data / "squad" / "dev-v1.1.json"
    gold = {
        qa["id"]: qa["answers"][0]["text"]
        for article in json.loads(dev.read_text())["data"]
        for par in article["paragraphs"]
        for qa in par["qas"]
    }
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps(gold))
    assert main(["evaluate", "--task", "squad1", "--data", str(dev), "--predictions", str(pred)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["exact_match"] == 100.0 and result["f1"] == 100.0 and result["total"] == 10570
    # the folder, as --model takes it: its dev-v1.1.json
    assert main(["evaluate", "--task", "squad1", "--data", str(dev.parent), "--predictions", str(pred)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    # a SQuAD 2.0 file in a 1.1 task: refused, as fine-tuning refuses it (it scored EM 100, F1 57)
    v2 = albert_data / "squad" / "dev-v2.0-small.json"
    assert main(["evaluate", "--task", "squad1", "--data", str(v2), "--predictions", str(pred)]) == 1
    assert "unanswerable question (is_impossible) in a SQuAD 1.1 task; use squad2" in capsys.readouterr().err


def test_evaluate_cli_squad2_sample(albert_data, tmp_path, capsys):
    dev = albert_data / "squad" / "dev-v2.0-small.json"
    examples = squad.read_squad(dev, version2=True)
    assert any(ex.is_impossible for ex in examples)
    # Gold for answerable questions, a wrong span for every unanswerable one.
    pred = {ex.qid: ("wrong" if ex.is_impossible else ex.answers[0][0]) for ex in examples}
    na = {ex.qid: (0.9 if ex.is_impossible else 0.1) for ex in examples}
    (tmp_path / "p.json").write_text(json.dumps(pred))
    (tmp_path / "na.json").write_text(json.dumps(na))
    args = ["evaluate", "--task", "squad2", "--data", str(dev), "--predictions", str(tmp_path / "p.json")]
    assert main(args) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["HasAns_exact"] == 100.0 and r["NoAns_exact"] == 0.0
    assert main([*args, "--na-probs", str(tmp_path / "na.json"), "--na-prob-thresh", "0.5"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["exact_match"] == 100.0 and r["best_f1"] == 100.0 and r["best_f1_thresh"] == pytest.approx(0.1)


def test_evaluate_cli_bad_predictions_file(tmp_path, capsys):
    data = _squad_file(
        tmp_path, [{"id": "q", "question": "?", "answers": [{"text": "The", "answer_start": 0}]}]
    )
    bad = tmp_path / "pred.json"
    bad.write_text("[1, 2]")
    assert main(["evaluate", "--task", "squad1", "--data", str(data), "--predictions", str(bad)]) == 1
    assert "pred.json: expected a JSON object" in capsys.readouterr().err


# --------------------------------------------------------------------------- GLUE
def test_glue_reads_every_shared_task(albert_data):
    from albert_lm.tasks import get_task

    rows = {"cola": 1043, "sst2": 872, "mrpc": 408, "stsb": 1500, "qnli": 5463, "rte": 277, "wnli": 71}
    for name, n in rows.items():
        task = get_task(name)
        path = task.split_file(albert_data / "glue", "dev")  # the GLUE root finds the task's folder
        examples = task.read(path, "dev")
        assert len(examples) == n, name
        assert all(ex.text_a for ex in examples)
        assert (examples[0].text_b is None) == (name in ("cola", "sst2"))
    mrpc = get_task("mrpc").read(albert_data / "glue" / "MRPC" / "dev.tsv", "dev")
    assert mrpc[0].text_b.startswith('" The foodservice')  # a leading quote is text, not CSV quoting


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("", r"dev.tsv: empty file"),
        ("index\tsentence1\tsentence2\tlabel\n", r"dev.tsv: no examples"),
        ("index\tsentence1\tlabel\n0\ta\tentailment\n", r"dev.tsv:1: missing column 'sentence2'"),
        (
            "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\n",
            r"dev.tsv:3: 3 fields, no value for column 'label'",
        ),
        (
            "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tyes\n",
            r"dev.tsv:2: label 'yes' in column 'label' is not one of",
        ),
    ],
)
def test_glue_bad_input(tmp_path, content, error):
    from albert_lm.tasks.glue import GLUE_TASKS, read_glue_tsv

    (tmp_path / "dev.tsv").write_text(content)
    with pytest.raises(ValueError, match=error):
        read_glue_tsv(tmp_path / "dev.tsv", GLUE_TASKS["rte"])


def test_glue_stsb_scores_and_test_files(tmp_path):
    from albert_lm.tasks.glue import GLUE_TASKS, GlueTask, read_glue_tsv

    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (tmp_path / "dev.tsv").write_text(header + "0\tg\tf\ty\t0\ts\ts\ta\tb\t5.5\n")
    with pytest.raises(ValueError, match=r"dev.tsv:2: column 'score': score 5.5 outside \[0.0, 5.0\]"):
        read_glue_tsv(tmp_path / "dev.tsv", GLUE_TASKS["stsb"])
    # a test file has no label column; predictions become a submission file
    (tmp_path / "test.tsv").write_text("index\tsentence1\tsentence2\n7\ta b\tc\n9\td\te f\n")
    task = GlueTask("rte")
    examples = task.read(tmp_path / "test.tsv", "test")
    assert [ex.label for ex in examples] == [None, None]
    path = task.write_predictions(examples, [1, 0], tmp_path / "pred", "test")
    assert path.name == "RTE.tsv" and path.parent.name == "test"
    assert path.read_text() == "index\tprediction\n7\tnot_entailment\n9\tentailment\n"
    mnli = GlueTask("mnli")
    assert mnli.eval_splits == (("", "dev_matched"), ("_mm", "dev_mismatched"))
    assert mnli.write_predictions(examples, [0, 2], tmp_path / "p", "test_mismatched").name == "MNLI-mm.tsv"


def test_glue_features_truncate_longest_first():
    from albert_lm.tasks.glue import GlueExample, GlueTask

    tok = ChunkTokenizer()
    ex = GlueExample("0", "aaa bbb ccc ddd eee fff", "ggg hhh", "entailment", 2)
    (f,) = GlueTask("rte").featurize([ex], tok, max_seq_length=8)
    # budget 5 = 8 - 3 specials: the longer first text is cut to 3, the second keeps 2
    assert len(f["input_ids"]) == 8 and f["token_type_ids"] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert f["input_ids"][0] == 2 and f["input_ids"][4] == 3 and f["labels"] == 0


def test_pair_features_cut_the_longer_side_from_the_end():
    from albert_lm.tasks.task import pair_features

    tok = ChunkTokenizer()
    ids, types = pair_features(tok, [10, 11, 12, 13, 14], [20, 21], max_seq_length=8)
    assert ids == [2, 10, 11, 12, 3, 20, 21, 3] and types == [0] * 5 + [1] * 3
    ids, types = pair_features(tok, [10, 11, 12], None, max_seq_length=4)
    assert ids == [2, 10, 11, 3] and types == [0] * 4


def test_input_error_is_one_class():
    from albert_lm import files, tasks
    from albert_lm.tasks import task

    assert task.InputError is files.InputError is tasks.InputError
    assert str(files.InputError("a.json", "bad", line=3)) == "a.json:3: bad"


# --------------------------------------------------------------------------- RACE
def test_race_jsonl_and_original_layout(albert_data, tmp_path):
    from albert_lm.tasks.race import RaceTask, qa_text, read_race_folder

    task = RaceTask()
    examples = task.read(task.split_file(albert_data / "race", "dev"), "dev")
    assert len(examples) == 1436 and all(len(ex.options) == 4 for ex in examples)
    assert {ex.answer for ex in examples} == {"A", "B", "C", "D"}
    # the original release: RACE/dev/{middle,high}/N.txt, one article with several questions each
    for level in ("middle", "high"):
        (tmp_path / "dev" / level).mkdir(parents=True)
        doc = {
            "id": f"{level}1.txt",
            "article": "Tom has a cat.",
            "questions": ["Tom has a _.", "Who?"],
            "options": [["cat", "dog", "cow", "pig"], ["Tom", "Ann", "Bob", "Sue"]],
            "answers": ["A", "A"],
        }
        (tmp_path / "dev" / level / "1.txt").write_text(json.dumps(doc))
    folder = task.split_file(tmp_path, "dev")
    examples = read_race_folder(folder)
    assert len(examples) == 4 and {ex.level for ex in examples} == {"middle", "high"}
    assert qa_text("Tom has a _.", "cat") == "Tom has a cat." and qa_text("Who?", "Tom") == "Who? Tom"
    feats = task.featurize(examples, ChunkTokenizer(), max_seq_length=12)
    assert len(feats[0]["input_ids"]) == 4 and all(len(c) <= 12 for c in feats[0]["input_ids"])
    scores = task.score(examples, [0, 1, 0, 0])
    assert scores["accuracy"] == 0.75 and {"accuracy_middle", "accuracy_high"} <= set(scores)


def test_race_bad_input(tmp_path):
    from albert_lm.tasks.race import read_race_jsonl

    good = {
        "example_id": "m1",
        "article": "a",
        "question": "q",
        "options": ["1", "2", "3", "4"],
        "answer": "B",
    }
    path = tmp_path / "race.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "answer": "E"}) + "\n")
    with pytest.raises(ValueError, match=r"race.jsonl:2: answer 'E' is not one of A, B, C, D"):
        read_race_jsonl(path)
    path.write_text(json.dumps({**good, "options": ["1", "2"]}) + "\n")
    with pytest.raises(ValueError, match=r"race.jsonl:1: field 'options' must be a list of 4 strings"):
        read_race_jsonl(path)
    path.write_text(json.dumps({**good, "options": ["1", " ", "3", ""]}) + "\n")  # read as a real choice
    with pytest.raises(ValueError, match=r"race.jsonl:1: field 'options': option B, D is empty"):
        read_race_jsonl(path)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "article"}) + "\n")
    with pytest.raises(ValueError, match=r"race.jsonl:1: missing field 'article'"):
        read_race_jsonl(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match=r"race.jsonl: empty file"):
        read_race_jsonl(path)


# --------------------------------------------------------------------------- users' own data
def test_text_classification_csv_and_jsonl(tmp_path):
    from albert_lm.tasks import get_task

    (tmp_path / "train.csv").write_text('text,label\n"good, really",pos\nbad,neg\nfine,pos\n')
    (tmp_path / "dev.jsonl").write_text(
        '{"text": "nice", "label": "pos"}\n{"text": "awful", "label": "meh"}\n'
    )
    task = get_task("classification")
    train = task.read(task.split_file(tmp_path, "train"), "train")
    assert train[0].text == "good, really"
    task.fit_labels(train)
    assert task.labels == ("neg", "pos")
    with pytest.raises(ValueError, match=r"dev.jsonl:2: label 'meh' was not seen in training"):
        task.read(task.split_file(tmp_path, "dev"), "dev")
    (tmp_path / "bad.csv").write_text("sentence,label\nx,pos\n")
    with pytest.raises(ValueError, match=r"bad.csv:1: --text-column text: the file has no such column"):
        task.read(tmp_path / "bad.csv", "train")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl: empty file"):
        task.read(tmp_path / "empty.jsonl", "train")
    (tmp_path / "latin.csv").write_bytes("text,label\nok,pos\ncaf\u00e9,neg\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.csv:3: not UTF-8 \(byte 21 of the file\)"):
        task.read(tmp_path / "latin.csv", "train")
    assert (
        get_task("classification", text_column="sentence").read(tmp_path / "bad.csv", "train")[0].text == "x"
    )


def test_labels_and_tags_are_read_in_composed_unicode(tmp_path):
    """A dev file saved on a Mac writes "Märchen" as a + a combining diaeresis: it was refused as a label
    not seen in training, though it looks the same. Labels and tags are read in NFC."""
    import unicodedata

    from albert_lm.tasks import get_task

    composed, decomposed = "Märchen", unicodedata.normalize("NFD", "Märchen")
    assert composed != decomposed
    (tmp_path / "train.tsv").write_text(f"text\tlabel\nes war einmal\t{composed}\nder Zauberberg\tRoman\n")
    (tmp_path / "dev.tsv").write_text(f"text\tlabel\nes war einmal\t{decomposed}\n")
    task = get_task("classification")
    task.fit_labels(task.read(tmp_path / "train.tsv", "train"))
    assert [ex.label for ex in task.read(tmp_path / "dev.tsv", "dev")] == [composed]
    tagger = get_task("token-classification")
    (tmp_path / "tags.jsonl").write_text(
        json.dumps({"tokens": ["Grimm"], "tags": [f"B-{decomposed}"]}) + "\n"
    )
    assert tagger.read(tmp_path / "tags.jsonl", "train")[0].tags == [f"B-{composed}"]


def test_token_classification_reader_features_and_predictions(tmp_path):
    from albert_lm.tasks import get_task

    (tmp_path / "train.jsonl").write_text(
        '{"tokens": ["Ann", "lives", "in", "Paris"], "tags": ["B-PER", "O", "O", "B-LOC"]}\n'
        '{"tokens": ["Bob"], "tags": ["B-PER"]}\n'
    )
    (tmp_path / "dev.csv").write_text("tokens,tags\nAnn lives,B-PER O O\n")
    task = get_task("token-classification")
    train = task.read(tmp_path / "train.jsonl", "train")
    task.fit_labels(train)
    assert task.labels == ("B-LOC", "B-PER", "O")
    with pytest.raises(ValueError, match=r"dev.csv:2: 2 tokens but 3 tags"):
        task.read(tmp_path / "dev.csv", "dev")
    (f, _) = task.featurize(train, ChunkTokenizer(), max_seq_length=64)
    # "lives" is two pieces: the tag sits on the first, the second is ignored
    assert f["labels"] == [-100, 1, 2, -100, 2, 0, -100, -100]
    logits = np.eye(3)[[0, 1, 2, 2, 2, 0, 0, 0]]  # first pieces -> B-PER, O, O, B-LOC
    preds = task.predict(train[:1], [f], [{"logits": logits}])
    assert preds == [["B-PER", "O", "O", "B-LOC"]]
    assert task.score(train[:1], preds)["f1"] == 1.0


def test_a_long_sentence_is_read_in_windows_and_each_word_tagged_where_it_has_most_context(caplog):
    """Words past max_seq_length were predicted "O" and left out of training. Now windows of whole words
    overlap by half; each word takes its tag from the window with the most words on its shorter side."""
    from albert_lm.tasks import get_task
    from albert_lm.tasks.text_classification import TokenExample

    task = get_task("token-classification")
    task.labels = ("W0", "W1", "W2", "W3")  # a tag per window: the tag a word gets names its window
    words = [f"w{n}" for n in range(10)]  # one piece each
    ex = TokenExample(words, [f"W{n % 4}" for n in range(10)], 1)
    with caplog.at_level("INFO", logger="albert_lm"):
        features = task.featurize([ex], ChunkTokenizer(), max_seq_length=6)  # 4 words a window
    assert "1 sentences longer than max_seq_length 6 are read in overlapping windows" in caplog.text
    assert [(f["word_offset"], len(f["word_starts"])) for f in features] == [(0, 4), (2, 4), (4, 4), (6, 4)]
    # words 2-5, each trained only in the window it is read from: 3 and 4 here (not once per window)
    assert features[1]["labels"] == [-100, -100, 3, 0, -100, -100]
    trained_in = [[k for k, f in enumerate(features) if f["word_offset"] <= w < f["word_offset"] + 4
                   and f["labels"][1 + w - f["word_offset"]] != -100] for w in range(10)]  # fmt: skip
    assert trained_in == [[0], [0], [0], [1], [1], [2], [2], [3], [3], [3]]  # the windows predict reads
    outputs = [{"logits": np.tile(np.eye(4)[j], (6, 1))} for j in range(4)]  # window j says Wj everywhere
    (tags,) = task.predict([ex], features, outputs)
    assert tags == ["W0", "W0", "W0", "W1", "W1", "W2", "W2", "W3", "W3", "W3"]
    long = TokenExample(["abcdefghijklmnop", "x"], None, 1)  # a word of 6 pieces, longer than a window
    assert [len(f["input_ids"]) for f in task.featurize([long], ChunkTokenizer(), max_seq_length=6)] == [6, 3]


def test_token_classification_reads_conll_and_tsv_quotes_and_scores_tags_without_spans(tmp_path, caplog):
    """CoNLL files (a word and its tag a line), a quote as a word in TSV (as predict reads it), and tags
    that name no spans (POS): their entity F1 was 0 whatever the model did, and it chose the checkpoint."""
    from albert_lm.tasks import get_task

    (tmp_path / "train.txt").write_text(
        "-DOCSTART- -X- -X- O\n\nAnn NNP B-NP B-PER\nlives VBZ B-VP O\n\nBob NNP B-NP B-PER\n"
    )
    task = get_task("token-classification")
    assert task.split_file(tmp_path, "train") == tmp_path / "train.txt"
    train = task.read(tmp_path / "train.txt", "train")
    assert [(ex.tokens, ex.tags, ex.line) for ex in train] == [
        (["Ann", "lives"], ["B-PER", "O"], 3),
        (["Bob"], ["B-PER"], 6),
    ]
    (tmp_path / "test.conll").write_text("Ann\nsings\n")  # a test file: words without tags
    assert task.read(tmp_path / "test.conll", "test")[0].tags is None
    (tmp_path / "bad.conll").write_text("Ann B-PER\nlives\n")
    with pytest.raises(ValueError, match=r"bad.conll:2: a word without a tag"):
        task.read(tmp_path / "bad.conll", "train")
    (tmp_path / "quote.tsv").write_text('tokens\ttags\nhe said " hi\tO O O O\n')
    assert task.read(tmp_path / "quote.tsv", "train")[0].tokens == ["he", "said", '"', "hi"]
    task.fit_labels(train)
    assert task.main_metric == "f1"
    (tmp_path / "dev.conll").write_text("Ann B-PER\nParis B-LOC\n")  # a type training never saw
    with caplog.at_level(logging.WARNING):
        dev = task.read(tmp_path / "dev.conll", "dev")
    assert (
        "tags not seen in training (B-LOC x1): the model cannot predict them, so they count as misses"
        in caplog.text
    )
    (f,) = task.featurize(dev, ChunkTokenizer(), max_seq_length=64)
    assert f["labels"][1] == task.labels.index("B-PER") and -100 in f["labels"][2:]  # no id, no loss
    assert task.score(dev, [["B-PER", "O"]])["recall"] == 0.5  # Paris: a miss
    pos = get_task("token-classification")
    (tmp_path / "pos.jsonl").write_text('{"tokens": ["Ann", "sings"], "tags": ["NOUN", "VERB"]}\n')
    with caplog.at_level(logging.WARNING):
        pos.fit_labels(pos.read(tmp_path / "pos.jsonl", "train"))
    assert pos.main_metric == "accuracy" and "no B- or I- prefix" in caplog.text
    assert pos.score(pos.read(tmp_path / "pos.jsonl", "dev"), [["NOUN", "VERB"]]) == {"accuracy": 1.0}


def test_squad_offsets_with_the_real_tokenizer(albert_data):
    """Training targets mapped back through character offsets give back the gold answers."""
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.tasks import metrics

    tok = AlbertTokenizer.from_pretrained(albert_data / "tokenizer" / "albert-30k" / "spiece.model")
    examples = squad.read_squad(albert_data / "squad" / "dev-v1.1.json", version2=False)[:400]
    preds = squad.oracle_predictions(examples, tok)
    scores = metrics.squad_metrics({ex.qid: ex.gold for ex in examples}, preds)
    # 97.25 EM here, 99.76 on all of dev-v1.1: only answers inside one piece ("8" in "18") are lost.
    assert scores["exact_match"] >= 96.0 and scores["f1"] >= 97.0
    # The answer keeps the context's own characters (case, accents) and never grows past the gold span.
    first = examples[0]
    assert preds[first.qid] == first.answers[0][0]


def test_glue_mnli_and_qqp_layouts(tmp_path):
    from albert_lm.tasks.glue import GlueTask

    cols = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse"
    cols += "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
    row = "0\t1\t1n\tfiction\t(a)\t(b)\t(a)\t(b)\tThe cat sat.\tA cat sat.\tentailment\tentailment\n"
    for stem in ("dev_matched", "dev_mismatched"):
        (tmp_path / f"{stem}.tsv").write_text(cols + row + row.replace("\tentailment\n", "\tneutral\n"))
    task = GlueTask("mnli")
    for _, split in task.eval_splits:
        examples = task.read(task.split_file(tmp_path, split), split)
        assert [ex.label for ex in examples] == ["entailment", "neutral"] and examples[
            0
        ].text_b == "A cat sat."
    (tmp_path / "qqp.tsv").write_text(
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n5\t1\t2\tWhy?\tHow?\t2\n"
    )
    with pytest.raises(ValueError, match=r"qqp.tsv:2: label '2' in column 'is_duplicate' is not one of 0, 1"):
        GlueTask("qqp").read(tmp_path / "qqp.tsv", "dev")


def test_json_files_write_other_scripts_as_themselves(tmp_path):
    """Predictions, settings and configs wrote "Достоевский" as \\u0414\\u043e..., while predict wrote it
    as itself; every JSON file is UTF-8 text now."""
    from albert_lm.files import write_json
    from albert_lm.model.config import AlbertConfig
    from albert_lm.tasks import get_task
    from albert_lm.tasks.text_classification import TextExample

    task = get_task("classification")
    task.labels = ("Достоевский", "Толстой")
    examples = [TextExample("text", None, "Толстой", 2)]
    written = task.write_predictions(examples, [0], tmp_path, "dev").read_text(encoding="utf-8")
    assert json.loads(written) == {"line": 2, "label": "Достоевский", "gold": "Толстой"}
    assert "Достоевский" in written and "Толстой" in written
    assert "Märchen" in write_json(tmp_path / "s.json", {"label": "Märchen"}).read_text(encoding="utf-8")
    escaped = os.fsdecode(
        b"caf\xe9"
    )  # a Linux path whose bytes are not UTF-8: kept as \u escapes, not refused
    assert json.loads(write_json(tmp_path / "p.json", {"data": escaped}).read_text()) == {"data": escaped}
    config = AlbertConfig(id2label={0: "是", 1: "否"})
    assert "是" in config.save_pretrained(tmp_path / "m").read_text(encoding="utf-8")
    assert AlbertConfig.from_pretrained(tmp_path / "m").id2label == config.id2label


def test_a_semicolon_separated_csv_is_named_as_such(tmp_path):
    """German and French Excel save "CSV" with semicolons: the one column 'text;label' was named, not why."""
    from albert_lm.tasks import get_task

    (tmp_path / "train.csv").write_text("\ufefftext;label\nein gutes Buch;gut\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"train.csv:1: .*its columns: 'text;label'\); is the file separated by ';'"
    ):
        get_task("classification").read(tmp_path / "train.csv", "train")


def test_another_glue_tasks_file_names_the_task_it_looks_like(tmp_path):
    """`--task sst2 --data glue/CoLA` said "missing column 'sentence' (header: gj04, 1, , Our friends...)":
    CoLA's headerless row read as a header. The message now says whose file it looks like."""
    from albert_lm.tasks import get_task

    (tmp_path / "cola.tsv").write_text("gj04\t1\t\tOur friends won't buy this analysis.\n")
    with pytest.raises(
        ValueError, match=r"reads as a CoLA row, which has no header: is --task right for SST-2\?"
    ):
        get_task("sst2").read(tmp_path / "cola.tsv", "dev")
    (tmp_path / "rte.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n0\tA dog.\tAn animal.\tentailment\n"
    )
    with pytest.raises(
        ValueError, match=r"'sentence' .*; these are the columns of RTE or WNLI: --task rte or wnli\?"
    ):
        get_task("sst2").read(tmp_path / "rte.tsv", "dev")
    (tmp_path / "sst2.tsv").write_text(
        "sentence\tlabel\na fine film\t1\n"
    )  # CoLA's columns too, but no header
    with pytest.raises(ValueError, match=r"; these are the columns of SST-2: --task sst2\?"):
        get_task("qnli").read(tmp_path / "sst2.tsv", "dev")
    (tmp_path / "own.tsv").write_text("text\tlabel\nfine\t1\n")
    with pytest.raises(ValueError, match=r"missing column 'sentence' \(header: text, label\)$"):
        get_task("sst2").read(tmp_path / "own.tsv", "dev")
