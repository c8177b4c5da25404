"""RACE features fit `max_seq_length` (the article cut to make room, question+option cut when they alone
do not fit, the option kept), and dev predictions name each question (`index`, `line`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from albert_lm.cli import main
from albert_lm.tasks.race import RaceExample, RaceTask, read_race_jsonl

TF_RELEASE = Path(__file__).parent / "fixtures" / "tf_checkpoint" / "release"


class WordTokenizer:
    """A stand-in tokenizer: one id per lower-cased word, the same id for the same word."""

    cls_token_id, sep_token_id, pad_token_id, unk_token_id = 2, 3, 0, 1

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def tokenize(self, text: str) -> list[str]:
        return text.lower().split()

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.setdefault(w, 5 + len(self.vocab)) for w in tokens]

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        ids = self.convert_tokens_to_ids(self.tokenize(text))
        return [2, *ids, 3] if add_special_tokens else ids

    def words(self, ids: list[int]) -> list[str]:
        names = {i: w for w, i in self.vocab.items()}
        return [names.get(i, "[CLS]" if i == 2 else "[SEP]") for i in ids]


def _example(question: str, options: list[str], article: str = "the article says many things " * 20):
    return RaceExample("m1", article, question, options, "A", "middle")


def _qa_words(tok: WordTokenizer, ids: list[int]) -> list[str]:
    words = tok.words(ids)
    return words[words.index("[SEP]") + 1 : -1]


def _article_words(tok: WordTokenizer, ids: list[int]) -> list[str]:
    words = tok.words(ids)
    return words[1 : words.index("[SEP]")]


@pytest.mark.parametrize("max_seq_length", [8, 12, 40])
def test_long_question_and_option_fit_max_seq_length_keeping_option_and_article(max_seq_length):
    tok = WordTokenizer()
    question = " ".join(f"q{i}" for i in range(60)) + " ?"
    options = ["alpha", "beta gamma", "delta", "omega " + "long " * 50]
    feats = RaceTask().featurize([_example(question, options)], tok, max_seq_length)
    ids = feats[0]["input_ids"]
    assert len(ids) == 4 and all(len(seq) <= max_seq_length for seq in ids), [len(s) for s in ids]
    for seq, types, option in zip(ids, feats[0]["token_type_ids"], options, strict=True):
        assert len(types) == len(seq) and types[0] == 0 and types[-1] == 1
        assert _article_words(tok, seq), "the article was dropped"
        qa = _qa_words(tok, seq)
        first = option.split()[0]
        assert first in qa, (option, qa)  # the option (its start at least) is kept
        if option.split() == qa[-len(option.split()) :]:
            assert "?" in qa or len(qa) == len(option.split())  # the question's end before a whole option


def test_cloze_question_keeps_the_filled_blank():
    tok = WordTokenizer()
    question = "words before " * 30 + "the _ is here " + "words after " * 30
    feats = RaceTask().featurize([_example(question, ["cat", "dog", "cow", "pig"])], tok, 20)
    for seq, option in zip(feats[0]["input_ids"], ["cat", "dog", "cow", "pig"], strict=True):
        assert len(seq) <= 20 and option in _qa_words(tok, seq) and _article_words(tok, seq)


def test_max_qa_length_keeps_the_end_with_the_option_as_google_research_does():
    # race_utils: ending_tokens[-max_qa_length:], then the article cut to max_seq_length - 3 - len(qa)
    tok = WordTokenizer()
    question = " ".join(f"q{i}" for i in range(20))
    feats = RaceTask(max_qa_length=5).featurize(
        [_example(question, ["yes", "no", "maybe", "never"])], tok, 64
    )
    seq = feats[0]["input_ids"][0]
    assert _qa_words(tok, seq) == ["q16", "q17", "q18", "q19", "yes"]
    assert len(seq) == 64 and len(_article_words(tok, seq)) == 64 - 3 - 5


def test_short_texts_are_unchanged_and_a_tiny_limit_is_refused():
    tok = WordTokenizer()
    feats = RaceTask().featurize([_example("Who?", ["Tom", "Ann", "Bob", "Sue"], "Tom has a cat.")], tok, 64)
    assert tok.words(feats[0]["input_ids"][1]) == [
        "[CLS]",
        "tom",
        "has",
        "a",
        "cat.",
        "[SEP]",
        "who?",
        "ann",
        "[SEP]",
    ]
    with pytest.raises(ValueError, match=r"^--max-seq-length 4: RACE needs at least 5 tokens"):
        RaceTask().featurize([_example("Who?", ["a", "b", "c", "d"])], tok, 4)


def test_real_race_rows_fit_every_max_seq_length(albert_data):
    from albert_lm.data.tokenizer import AlbertTokenizer

    tokenizer = AlbertTokenizer(str(TF_RELEASE / "30k-clean.model"))
    examples = read_race_jsonl(albert_data / "race" / "race_middle_dev.jsonl")[:40]
    for max_seq_length in (8, 40, 96):
        for feat in RaceTask().featurize(examples, tokenizer, max_seq_length):
            assert all(len(seq) <= max_seq_length for seq in feat["input_ids"]), max_seq_length
            assert all(seq[1] != tokenizer.sep_token_id for seq in feat["input_ids"])  # an article is kept


def test_predictions_name_each_question(tmp_path):
    rows = [
        {
            "example_id": "same",
            "article": "a b",
            "question": f"q{i}",
            "options": ["1", "2", "3", "4"],
            "answer": "A",
        }
        for i in range(3)
    ]
    path = tmp_path / "race.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[1:]) + "\n")
    examples = read_race_jsonl(path)
    out = RaceTask().write_predictions(examples, [0, 1, 3], tmp_path / "predictions", "dev")
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == [
        {"example_id": "same", "index": 0, "answer": "A", "line": 1},
        {"example_id": "same", "index": 1, "answer": "B", "line": 3},
        {"example_id": "same", "index": 2, "answer": "D", "line": 4},
    ]


def test_race_on_a_model_with_40_positions(tmp_path, albert_data, capsys):
    """The audit's run: default --max-seq-length 512, fitted to the converted model's 40 positions."""
    model = tmp_path / "tiny-release"
    assert main(["convert", "--from-tf", str(TF_RELEASE), "--output", str(model)]) == 0
    out = tmp_path / "race"
    data = albert_data / "race" / "race_middle_dev.jsonl"
    args = ["finetune", "--task", "race", "--model", str(model), "--data", str(data), "--output", str(out),
            "--max-steps", "2", "--batch-size", "4", "--max-train-examples", "8", "--max-eval-examples", "8",
            "--precision", "fp32", "--no-tensorboard", "--no-plot"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    rows = [json.loads(r) for r in (out / "predictions" / "dev_predictions.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(8)) and len({r["line"] for r in rows}) == 8
