"""Users' own task files as a user's walkthrough found them misread: entity spans of BIOES and BILOU tags,
token and tag cells holding lists, whole-number labels in order, a test file of texts for a tagger, CoNLL
words with a space inside, and a dev label past --max-train-examples."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import finetune_argv

from albert_lm.cli import main
from albert_lm.files import InputError
from albert_lm.tasks import get_task, metrics
from albert_lm.tasks.token_classification import words_of


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- 1. entity spans of each scheme
@pytest.mark.parametrize(
    ("tags", "spans"),
    [
        # BIO / IOB2; an I- after O or after another type opens an entity, as conlleval reads it
        (
            ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-ORG"],
            {("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("ORG", 5, 6)},
        ),
        # IOB1: I- throughout, B- only between two entities of one type side by side
        (["I-PER", "I-PER", "B-PER", "O", "I-LOC"], {("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)}),
        # BIOES: S- is an entity of one token, E- closes one (its token included)
        (["B-PER", "E-PER", "O", "S-LOC"], {("PER", 0, 2), ("LOC", 3, 4)}),
        (
            ["B-ORG", "I-ORG", "E-ORG", "S-PER", "S-PER", "E-LOC"],
            {("ORG", 0, 3), ("PER", 3, 4), ("PER", 4, 5), ("LOC", 5, 6)},
        ),
        # BILOU: U- and L- as S- and E-
        (["U-PER", "B-LOC", "I-LOC", "L-LOC", "U-LOC"], {("PER", 0, 1), ("LOC", 1, 4), ("LOC", 4, 5)}),
        # an E- after an E- starts (and ends) another entity; tags without a scheme's prefix are outside
        (["E-PER", "E-PER", "NOUN", "O"], {("PER", 0, 1), ("PER", 1, 2)}),
    ],
)
def test_entity_spans_are_read_in_each_tagging_scheme(tags, spans):
    """`['B-PER','E-PER','O','S-LOC']` gave {('PER', 0, 1)}: S- entities dropped, E- tokens cut off."""
    assert metrics.entity_spans(tags) == spans


def test_bioes_and_bilou_tags_are_scored_by_entity_f1_without_the_no_prefix_warning(tmp_path, caplog):
    """A tag set of S-/E- (or U-/L-) tags alone was taken for tags without spans, as POS tags are: no
    entity F1, and the best checkpoint chosen by token accuracy."""
    gold = [["S-LOC", "O", "S-PER"], ["U-ORG", "O"]]
    pred = [["S-LOC", "O", "O"], ["U-ORG", "O"]]  # 2 of 3 entities found, none made up
    out = metrics.token_classification_metrics(pred, gold)
    assert (out["precision"], out["recall"], round(out["f1"], 4)) == (1.0, 2 / 3, 0.8)
    assert out["f1_LOC"] == 1.0 and out["f1_PER"] == 0.0
    for tags in (["S-LOC", "E-LOC", "O"], ["U-LOC", "L-LOC", "O"]):
        _jsonl(tmp_path / "train.jsonl", [{"tokens": ["Paris", "Rome", "x"], "tags": tags}])
        task = get_task("token-classification")
        with caplog.at_level(logging.WARNING, logger="albert_lm"):
            task.fit_labels(task.read(tmp_path / "train.jsonl", "train"))
        assert task.main_metric == "f1"
        assert "name no entity spans" not in caplog.text
    _jsonl(tmp_path / "train.jsonl", [{"tokens": ["Paris", "sings"], "tags": ["NOUN", "VERB"]}])
    with caplog.at_level(logging.WARNING, logger="albert_lm"):
        task.fit_labels(task.read(tmp_path / "train.jsonl", "train"))  # POS tags: no spans, said so
    assert task.main_metric == "accuracy" and "name no entity spans" in caplog.text


# --------------------------------------------------------------------------- 2. cells holding lists
def test_csv_cells_of_json_lists_are_read_as_lists_and_python_lists_are_refused(tmp_path):
    """A cell of pandas' to_csv ("['The', 'weather']") was split on spaces: words with their quotes and
    commas, and tags such as "'B-LOC',"."""
    task = get_task("token-classification")
    (tmp_path / "json.csv").write_text(
        'tokens,tags\n"[""New York"", ""is""]","[""B-LOC"", ""O""]"\nRome is,B-LOC O\n', encoding="utf-8"
    )
    read = task.read(tmp_path / "json.csv", "train")
    assert [(ex.tokens, ex.tags) for ex in read] == [
        (["New York", "is"], ["B-LOC", "O"]),  # a JSON list: a word may hold a space
        (["Rome", "is"], ["B-LOC", "O"]),
    ]
    (tmp_path / "pandas.csv").write_text(
        "tokens,tags\nRome is,B-LOC O\n\"['The', 'weather']\",\"['O', 'O']\"\n", encoding="utf-8"
    )
    with pytest.raises(InputError) as refused:
        task.read(tmp_path / "pandas.csv", "train")
    assert refused.value.line == 3
    assert "column 'tokens': ['The', 'weather'] is a list but not JSON" in str(refused.value)
    assert 'write a JSON list (["The", "weather"]) or the words separated by spaces' in str(refused.value)
    # words that begin with a bracket are words, as `albert predict` reads them
    assert words_of("[ Reuters ] said", "tokens", "f.csv", 2) == ["[", "Reuters", "]", "said"]
    with pytest.raises(
        InputError, match=r"f.csv:2: column 'tags': word 2 is \[\], expected a non-blank text"
    ):
        words_of('["O", []]', "tags", "f.csv", 2)


# --------------------------------------------------------------------------- 3. whole-number labels
def test_whole_number_labels_are_ordered_as_numbers(tmp_path):
    """Labels 0 to 11 were sorted as text: id2label {2: '10', 3: '11', 4: '2', ...}."""
    _jsonl(tmp_path / "train.jsonl", [{"text": f"topic {n}", "label": n} for n in (11, 2, 0, 10, 1, -1)])
    task = get_task("classification")
    task.fit_labels(task.read(tmp_path / "train.jsonl", "train"))
    assert task.labels == ("-1", "0", "1", "2", "10", "11")
    _jsonl(tmp_path / "dev.jsonl", [{"text": "x", "label": 2}, {"text": "y", "label": 3.0}])
    with pytest.raises(InputError, match=r"dev.jsonl:2: label '3.0' was not seen in training"):
        task.read(tmp_path / "dev.jsonl", "dev")
    # labels that are not all whole numbers keep the order of text
    _jsonl(tmp_path / "mixed.jsonl", [{"text": "a", "label": v} for v in ("10", "2", "2.5")])
    task = get_task("classification")
    task.fit_labels(task.read(tmp_path / "mixed.jsonl", "train"))
    assert task.labels == ("10", "2", "2.5")
    _jsonl(tmp_path / "tags.jsonl", [{"tokens": ["a", "b", "c"], "tags": ["10", "9", "0"]}])
    tagger = get_task("token-classification")
    tagger.fit_labels(tagger.read(tmp_path / "tags.jsonl", "train"))
    assert tagger.labels == ("0", "9", "10")


# --------------------------------------------------------------------------- 4. a tagger's test texts
def test_a_taggers_unlabelled_split_reads_a_text_column(tmp_path):
    """{"text": "Zoë visited Kraków"} was refused ("missing value for column 'tokens'"); predict reads it."""
    task = get_task("token-classification")
    _jsonl(tmp_path / "test.jsonl", [{"text": "Zoë visited  Kraków"}, {"tokens": ["Ann", "sings"]}])
    read = task.read(tmp_path / "test.jsonl", "test")
    assert [(ex.tokens, ex.tags, ex.line) for ex in read] == [
        (["Zoë", "visited", "Kraków"], None, 1),
        (["Ann", "sings"], None, 2),
    ]
    (tmp_path / "test.csv").write_text("id,text\n7,Zoë visited Kraków\n", encoding="utf-8")
    assert task.read(tmp_path / "test.csv", "test")[0].tokens == ["Zoë", "visited", "Kraków"]
    # a labelled split still needs its tokens column
    _jsonl(tmp_path / "dev.jsonl", [{"text": "Zoë visited Kraków", "tags": ["B-PER", "O", "B-LOC"]}])
    with pytest.raises(InputError, match=r"dev.jsonl:1: missing value for column 'tokens'"):
        task.read(tmp_path / "dev.jsonl", "dev")


# --------------------------------------------------------------------------- 5. CoNLL words with a space
def test_conll_lines_with_tabs_keep_a_word_with_a_space_inside_whole(tmp_path):
    """`New York<TAB>B-LOC` was read as the word "New" tagged B-LOC: "York" was lost."""
    (tmp_path / "train.conll").write_text(
        "-DOCSTART-\tO\n\nShe\tO\nflew to\tO\nNew York\tNNP\tB-LOC\n\nBob  B-PER\nsang O\n", encoding="utf-8"
    )
    task = get_task("token-classification")
    read = task.read(tmp_path / "train.conll", "train")
    assert [(ex.tokens, ex.tags, ex.line) for ex in read] == [
        (["She", "flew to", "New York"], ["O", "O", "B-LOC"], 3),
        (["Bob", "sang"], ["B-PER", "O"], 7),  # lines without a tab: fields apart by spaces
    ]
    (tmp_path / "bad.conll").write_text("She\tO\n\tB-LOC\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.conll:2: no word before the line's first tab"):
        task.read(tmp_path / "bad.conll", "train")


# --------------------------------------------------------------------------- 6. a dev label past the cap
def test_an_unseen_dev_label_says_the_training_examples_were_capped(tiny_pretrained, tmp_path, capsys):
    """`--max-train-examples` on a file sorted by label: "label 'shipping' was not seen in training",
    and nothing said that training read only its first rows."""
    rows = [
        {"text": f"note {n}", "label": label} for label in ("billing", "refund", "shipping") for n in range(4)
    ]
    data = tmp_path / "data"
    data.mkdir()
    _jsonl(data / "train.jsonl", rows)
    _jsonl(data / "dev.jsonl", [{"text": "late", "label": "billing"}, {"text": "x", "label": "shipping"}])
    more = ["--max-steps", "1", "--batch-size", "4", "--max-seq-length", "16", "--device", "cpu",
            "--precision", "fp32", "--no-tensorboard", "--no-plot"]  # fmt: skip
    argv = finetune_argv("classification", tiny_pretrained, data, tmp_path / "run", *more)
    assert main([*argv, "--max-train-examples", "8"]) == 1
    error = capsys.readouterr().err
    assert (
        "dev.jsonl:2: label 'shipping' was not seen in training (billing, refund); only the first 8 " in error
    )
    assert "training examples were read (--max-train-examples 8)" in error
    (data / "dev.jsonl").write_text('{"text": "x", "label": "other"}\n')
    assert main([*argv, "--max-train-examples", "100"]) == 1  # not capped: all 12 rows were read
    error = capsys.readouterr().err
    assert "dev.jsonl:1: label 'other' was not seen in training (billing, refund, shipping)" in error
    assert "--max-train-examples" not in error


def test_predicted_tags_are_grouped_into_the_entities_they_name():
    from albert_lm.tasks.token_classification import entities

    words = ["Angela", "Merkel", "visited", "the", "Red", "Cross", "in", "Tokyo"]
    tags = ["B-PER", "I-PER", "O", "O", "I-ORG", "I-ORG", "O", "S-LOC"]  # an I- after O begins one
    assert entities(words, tags) == [  # characters in the words joined by spaces
        {"type": "PER", "start": 0, "end": 2, "char_start": 0, "char_end": 13, "text": "Angela Merkel"},
        {"type": "ORG", "start": 4, "end": 6, "char_start": 26, "char_end": 35, "text": "Red Cross"},
        {"type": "LOC", "start": 7, "end": 8, "char_start": 39, "char_end": 44, "text": "Tokyo"},
    ]
    assert entities(["a", "b"], ["O", "O"]) == []
    # in the text the words were split from: its own spacing kept, the offsets point at it
    said = "  Angela\tMerkel visited the Red  Cross in Tokyo."
    found = entities(said.split(), tags, said)
    assert [(e["char_start"], e["char_end"], e["text"]) for e in found] == [
        (2, 15, "Angela\tMerkel"), (28, 38, "Red  Cross"), (42, 48, "Tokyo."),
    ]  # fmt: skip
    assert all(said[e["char_start"] : e["char_end"]] == e["text"] for e in found)
