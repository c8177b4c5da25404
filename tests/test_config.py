"""AlbertConfig: presets, validation and the config.json round trip (ours <-> transformers)."""

from __future__ import annotations

import json
import logging

import pytest

from albert_lm import PRESETS, AlbertConfig


def test_presets_match_paper_table_1():
    for name, (h, layers) in {
        "albert-base": (768, 12),
        "albert-large": (1024, 24),
        "albert-xlarge": (2048, 24),
        "albert-xxlarge": (4096, 12),
    }.items():
        c = AlbertConfig.from_preset(name)
        assert (c.hidden_size, c.num_hidden_layers, c.embedding_size) == (h, layers, 128)
        assert c.intermediate_size == 4 * h and c.num_attention_heads == h // 64
        assert c.vocab_size == 30000 and c.hidden_act == "gelu_new" and c.hidden_dropout_prob == 0.0
        assert c.sharing == "all"
    bert = AlbertConfig.from_preset("bert-base")
    assert bert.embedding_size == bert.hidden_size == 768 and bert.sharing == "none"
    assert bert.num_hidden_groups == 12
    assert AlbertConfig.from_preset("albert-base", embedding_size=64).embedding_size == 64
    assert "albert-tiny" in PRESETS


def test_json_round_trip_keeps_every_field_and_unknown_keys(tmp_path):
    c = AlbertConfig.from_preset("albert-tiny", sharing="ffn", id2label={0: "neg", 1: "pos"})
    c.extra["architectures"] = ["AlbertForSequenceClassification"]
    c.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    assert d["model_type"] == "albert" and d["label2id"] == {"neg": 0, "pos": 1}
    back = AlbertConfig.from_pretrained(tmp_path)
    assert back == c
    assert back.extra["architectures"] == ["AlbertForSequenceClassification"]
    assert [f.name for f in tmp_path.iterdir()] == ["config.json"]  # no temporary left behind


def test_transformers_reads_our_config_and_we_read_theirs(tmp_path):
    transformers = pytest.importorskip("transformers")
    ours = AlbertConfig.from_preset("albert-base", num_hidden_groups=2)
    ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.AlbertConfig.from_pretrained(tmp_path / "ours")
    for field in (
        "vocab_size",
        "embedding_size",
        "hidden_size",
        "num_hidden_groups",
        "inner_group_num",
        "intermediate_size",
        "hidden_act",
        "layer_norm_eps",
        "num_attention_heads",
    ):
        assert getattr(theirs, field) == getattr(ours, field), field
    theirs.save_pretrained(tmp_path / "theirs")
    back = AlbertConfig.from_pretrained(tmp_path / "theirs")
    assert back.hidden_size == 768 and back.num_hidden_groups == 2 and back.num_labels == 2


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"sharing": "some"}, "sharing must be one of"),
        ({"hidden_act": "tanh"}, "hidden_act"),
        ({"hidden_size": 100, "num_attention_heads": 3}, "multiple of num_attention_heads"),
        ({"num_hidden_groups": 20}, "num_hidden_groups 20 > num_hidden_layers"),
        ({"vocab_size": 0}, "vocab_size must be >= 1"),
    ],
)
def test_invalid_configs_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        AlbertConfig.from_preset("albert-base", **kw)


def test_unreadable_config_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 16,\n  oops}')
    with pytest.raises(ValueError, match=r"config.json:2: not valid JSON"):
        AlbertConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match="model_type is 'bert'"):
        AlbertConfig.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="unknown preset"):
        AlbertConfig.from_preset("albert-huge")


def test_another_label_count_drops_the_folders_label_names_and_a_conflict_is_said(tmp_path, caplog):
    AlbertConfig(num_labels=2, id2label={0: "neg", 1: "pos"}).save_pretrained(tmp_path)
    assert AlbertConfig.from_pretrained(tmp_path).id2label == {0: "neg", 1: "pos"}
    three = AlbertConfig.from_pretrained(tmp_path, num_labels=3)  # not quietly 2, as the names were
    assert three.num_labels == 3 and three.id2label is None
    with caplog.at_level(logging.WARNING):  # said, and read as transformers reads it: the names win
        assert AlbertConfig(num_labels=3, id2label={0: "a", 1: "b"}).num_labels == 2
    assert "num_labels 3, but id2label names 2 labels" in caplog.text
    assert AlbertConfig(id2label={0: "a", 1: "b", 2: "c"}).num_labels == 3  # num_labels left at its default
