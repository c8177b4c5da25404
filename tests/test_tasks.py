"""Task readers, features and decoding: SQuAD windows and offsets, GLUE / RACE / generic readers, bad input."""

from __future__ import annotations

import json
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
