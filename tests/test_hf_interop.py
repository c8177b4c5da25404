"""Parity with transformers on identical weights, both ways, for every head: the model's correctness anchor."""

from __future__ import annotations

import logging

import pytest
import torch

import albert_lm
from albert_lm import AlbertConfig
from albert_lm.model.unpad import use_unpadding

transformers = pytest.importorskip("transformers")

HEADS = [
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForMaskedLM",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertForQuestionAnswering",
    "AlbertForMultipleChoice",
]
# (num_hidden_groups, inner_group_num, hidden_act)
SHAPES = [(1, 1, "gelu_new"), (2, 1, "gelu"), (2, 2, "gelu_new")]


@pytest.fixture(autouse=True)
def padded_path():
    """These tests compare every position with transformers, pads and losses over them included: the padded
    path, whose pad tokens have states as theirs do (the unpadded path leaves zeros there; test_unpad.py
    compares it with transformers at the kept tokens)."""
    with use_unpadding(False):
        yield


def tiny_hf_config(groups: int = 1, inner: int = 1, act: str = "gelu_new", **kw):
    return transformers.AlbertConfig(
        vocab_size=99,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=4,
        num_hidden_groups=groups,
        inner_group_num=inner,
        num_attention_heads=4,
        intermediate_size=32,
        hidden_act=act,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=32,
        num_labels=kw.pop("num_labels", 3),
        **kw,
    )


def small_config(**kw) -> AlbertConfig:
    """Our AlbertConfig of H 16 and 4 heads over the 99-piece vocabulary, with `kw` (layers, sharing...)."""
    return AlbertConfig(vocab_size=99, hidden_size=16, num_attention_heads=4, intermediate_size=32, **kw)


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Every weight non-zero and away from its init (LayerNorm gains too), so no mapping error hides."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + 0.05)


def padded_batch(num_choices: int | None = None, batch: int = 3, seq: int = 9) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    shape = (batch, num_choices, seq) if num_choices else (batch, seq)
    ids = torch.randint(5, 99, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[1, ..., 5:] = 0  # a padded row
    mask[2, ..., 7:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros(shape, dtype=torch.long)
    types[..., 4:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def outputs_of(model, name: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    fields = {
        "AlbertModel": ["last_hidden_state", "pooler_output"],
        "AlbertForPreTraining": ["prediction_logits", "sop_logits"],
        "AlbertForQuestionAnswering": ["start_logits", "end_logits"],
    }.get(name, ["logits"])
    res = {f: getattr(out, f) for f in fields}
    for i, h in enumerate(out.hidden_states):
        res[f"hidden_states[{i}]"] = h
    return res


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] - b[k]).abs().max().item() <= 1e-5, k


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"G{s[0]}-inner{s[1]}-{s[2]}")
@pytest.mark.parametrize("name", HEADS)
def test_transformers_to_ours_and_back(tmp_path, name, shape):
    groups, inner, act = shape
    hf_cls = getattr(transformers, name)
    ours_cls = getattr(albert_lm, name)
    labels = 2 if name in ("AlbertForPreTraining", "AlbertForQuestionAnswering") else 3
    hf = hf_cls(tiny_hf_config(groups, inner, act, num_labels=labels)).eval()
    randomize(hf)
    batch = padded_batch(num_choices=2 if name == "AlbertForMultipleChoice" else None)
    expected = outputs_of(hf, name, batch)

    hf.save_pretrained(tmp_path / "hf")
    ours = ours_cls.from_pretrained(tmp_path / "hf").eval()
    assert_same(outputs_of(ours, name, batch), expected)

    ours.save_pretrained(tmp_path / "ours")
    back = hf_cls.from_pretrained(tmp_path / "ours").eval()
    assert_same(outputs_of(back, name, batch), expected)


def test_ours_to_transformers_from_our_own_init(tmp_path):
    """The other direction starting on our side: our random weights, read by transformers."""
    hf_dict = tiny_hf_config(2, num_labels=2).to_dict()
    cfg = AlbertConfig(**{k: v for k, v in hf_dict.items() if k in AlbertConfig.__dataclass_fields__})
    ours = albert_lm.AlbertForPreTraining(cfg).eval()
    randomize(ours, seed=3)
    ours.save_pretrained(tmp_path)
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path).eval()
    batch = padded_batch()
    assert_same(
        outputs_of(hf, "AlbertForPreTraining", batch), outputs_of(ours, "AlbertForPreTraining", batch)
    )


@pytest.mark.parametrize(
    "name,labels",
    [
        ("AlbertForPreTraining", None),
        ("AlbertForMaskedLM", "mlm"),
        ("AlbertForSequenceClassification", "cls"),
        ("AlbertForTokenClassification", "tok"),
        ("AlbertForQuestionAnswering", "qa"),
        ("AlbertForMultipleChoice", "mc"),
    ],
)
def test_losses_match_transformers(tmp_path, name, labels):
    num_labels = 2 if name in ("AlbertForPreTraining", "AlbertForQuestionAnswering") else 3
    hf = getattr(transformers, name)(tiny_hf_config(num_labels=num_labels)).eval()
    randomize(hf)
    hf.save_pretrained(tmp_path)
    ours = getattr(albert_lm, name).from_pretrained(tmp_path).eval()
    batch = padded_batch(num_choices=2 if name == "AlbertForMultipleChoice" else None)
    g = torch.Generator().manual_seed(2)
    mlm = torch.full((3, 9), -100).masked_scatter(
        torch.rand(3, 9, generator=g) < 0.3, torch.randint(0, 99, (27,))
    )
    extra = {
        None: {"labels": mlm, "sentence_order_label": torch.tensor([0, 1, 1])},
        "mlm": {"labels": mlm},
        "cls": {"labels": torch.tensor([0, 2, 1])},
        "tok": {"labels": torch.randint(0, 3, (3, 9), generator=g)},
        "qa": {"start_positions": torch.tensor([1, 3, 20]), "end_positions": torch.tensor([2, 4, 5])},
        "mc": {"labels": torch.tensor([1, 0, 1])},
    }[labels]
    with torch.no_grad():
        a = hf(**batch, **extra).loss
        b = ours(**batch, **extra).loss
    assert torch.isfinite(b)
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_regression_head_matches_transformers(tmp_path):
    hf = transformers.AlbertForSequenceClassification(tiny_hf_config(num_labels=1)).eval()
    randomize(hf)
    hf.save_pretrained(tmp_path)
    ours = albert_lm.AlbertForSequenceClassification.from_pretrained(tmp_path).eval()
    batch = padded_batch()
    y = torch.tensor([0.5, 2.0, 4.5])
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch, labels=y).loss, hf(**batch, labels=y).loss)
    assert ours.config.problem_type == "regression"


def test_checkpoint_without_sop_head_loads_with_warning(tmp_path, caplog):
    hf = transformers.AlbertForMaskedLM(tiny_hf_config(num_labels=2)).eval()  # hub checkpoints look like this
    randomize(hf)
    hf.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING):
        ours = albert_lm.AlbertForPreTraining.from_pretrained(tmp_path).eval()
    assert "sop_classifier" in caplog.text and "initialised fresh" in caplog.text
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).prediction_logits, hf(**batch).logits, atol=1e-5, rtol=0)


def test_base_model_folder_loads_into_a_head(tmp_path, caplog):
    hf = transformers.AlbertModel(tiny_hf_config(2)).eval()  # saved without the "albert." prefix
    randomize(hf)
    hf.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING):
        ours = albert_lm.AlbertForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    assert "classifier" in caplog.text
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours.eval().albert(**batch).pooler_output, hf(**batch).pooler_output)


def test_a_classifier_of_other_labels_gets_a_new_head_in_a_run_that_trains_one(tmp_path, caplog):
    """Fine-tuning a model fine-tuned on 2 labels on a task of 3: its encoder is kept and a new classifier
    trained (with a warning); where the head must be the trained one (predict, evaluate) it is refused."""
    from albert_lm.model.hf_interop import load_model

    hf = transformers.AlbertForSequenceClassification(tiny_hf_config(num_labels=2)).eval()
    randomize(hf)
    hf.save_pretrained(tmp_path)
    cls = albert_lm.AlbertForSequenceClassification
    with caplog.at_level(logging.WARNING):
        ours = load_model(cls, tmp_path, new_head=True, num_labels=3).eval()
    assert "its classifier was trained for 2 outputs, this run's task has 3: a new one" in caplog.text
    assert ours.classifier.weight.shape[0] == 3
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours.albert(**batch).pooler_output, hf.albert(**batch).pooler_output)
    with pytest.raises(ValueError, match=r"wrong shape: classifier.weight \(checkpoint \(2, "):
        load_model(cls, tmp_path, require_head=True, num_labels=3)


def test_sharing_transformers_cannot_express_is_saved_natively(tmp_path):
    cfg = small_config(embedding_size=8, num_hidden_layers=3, sharing="attention")
    model = albert_lm.AlbertForPreTraining(cfg).eval()
    with pytest.raises(ValueError, match="cannot be expressed in transformers"):
        model.save_pretrained(tmp_path / "hf", layout="transformers")
    model.save_pretrained(tmp_path / "native")
    assert (tmp_path / "native" / "albert_lm.safetensors").is_file()
    assert not (tmp_path / "native" / "model.safetensors").exists()
    back = albert_lm.AlbertForPreTraining.from_pretrained(tmp_path / "native").eval()
    assert back.config.sharing == "attention"
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(back(**batch).prediction_logits, model(**batch).prediction_logits)
    with pytest.raises(Exception):  # noqa: B017 - transformers must refuse, whatever its error type
        transformers.AlbertForPreTraining.from_pretrained(tmp_path / "native")


def test_bert_like_config_without_projection_exports_exactly(tmp_path):
    cfg = small_config(embedding_size=16, num_hidden_layers=2, sharing="none")
    ours = albert_lm.AlbertModel(cfg).eval()
    randomize(ours)
    ours.save_pretrained(tmp_path)
    hf = transformers.AlbertModel.from_pretrained(tmp_path).eval()
    assert hf.config.num_hidden_groups == 2
    batch = padded_batch()
    assert_same(outputs_of(hf, "AlbertModel", batch), outputs_of(ours, "AlbertModel", batch))
    again = albert_lm.AlbertModel.from_pretrained(tmp_path)
    assert isinstance(again.encoder.embedding_projection, torch.nn.Identity)


def test_transformers_model_with_trained_projection_at_e_equals_h_loads_exactly(tmp_path):
    """transformers always has an E -> H projection; a model trained there with E == H has a trained one
    (not the identity albert-lm writes), which albert-lm keeps (embedding_projection) both ways."""
    config = tiny_hf_config()
    config.embedding_size = config.hidden_size
    hf = transformers.AlbertForMaskedLM(config).eval()
    randomize(hf)
    hf.save_pretrained(tmp_path / "hf")
    ours = albert_lm.AlbertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    assert ours.config.embedding_projection and ours.config.has_projection
    assert isinstance(ours.albert.encoder.embedding_projection, torch.nn.Linear)
    batch = padded_batch()
    assert_same(outputs_of(hf, "AlbertForMaskedLM", batch), outputs_of(ours, "AlbertForMaskedLM", batch))
    ours.save_pretrained(tmp_path / "ours")  # and back: transformers reads the trained projection
    again = transformers.AlbertForMaskedLM.from_pretrained(tmp_path / "ours").eval()
    assert_same(outputs_of(hf, "AlbertForMaskedLM", batch), outputs_of(again, "AlbertForMaskedLM", batch))
    assert albert_lm.AlbertForMaskedLM.from_pretrained(tmp_path / "ours").config.embedding_projection


def test_every_model_class_shows_transformers_arguments():
    """The shared forward shows each class's own arguments, in transformers' order: tools that read the
    signature (transformers' Trainer keeps only the dataset columns it names) see the labels."""
    import inspect

    import albert_lm
    from albert_lm.model.encoder import AlbertModel

    for name in HEADS:
        ours = list(inspect.signature(getattr(albert_lm, name).forward).parameters)
        theirs = [
            p for p in inspect.signature(getattr(transformers, name).forward).parameters if p != "kwargs"
        ]
        assert ours[: len(theirs)] == theirs, (name, ours, theirs)
    assert "targets" not in inspect.signature(AlbertModel.forward).parameters
