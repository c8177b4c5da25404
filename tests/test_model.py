"""The encoder itself: sharing really shares, gradients accumulate, outputs behave like transformers'."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import albert_lm
from albert_lm import AlbertModel
from albert_lm.model.encoder import layer_schedule


@pytest.fixture
def tiny(tiny_config):
    """The shared tiny model (conftest.py) at the sizes the assertions below name: 4 layers (so sharing
    shows), hidden 16, 16 positions."""
    sizes = dict(embedding_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=4)
    return functools.partial(tiny_config, **sizes, max_position_embeddings=16)


@pytest.mark.parametrize(
    "sharing,n_attention,n_ffn", [("all", 1, 1), ("attention", 1, 4), ("ffn", 4, 1), ("none", 4, 4)]
)
def test_sharing_strategies_hold_one_tensor_per_shared_weight(tiny, sharing, n_attention, n_ffn):
    model = AlbertModel(tiny(sharing=sharing))
    assert len(model.encoder.attention) == n_attention
    assert len(model.encoder.ffn) == n_ffn
    assert len(model.encoder.schedule) == 4
    # No tensor is stored twice: unique parameters == all parameters listed.
    assert len({id(p) for p in model.parameters()}) == len(list(model.parameters()))


def test_groups_follow_transformers_layer_to_group_rule(tiny):
    # L=12, G=3 -> layers 0-3 group 0, 4-7 group 1, 8-11 group 2; inner_group_num=2 doubles each.
    cfg = tiny(num_hidden_layers=12, num_hidden_groups=3, inner_group_num=2)
    sched = layer_schedule(cfg)
    assert len(sched) == 24
    assert [a for a, _ in sched[:8]] == [0, 1] * 4
    assert [a for a, _ in sched[8:16]] == [2, 3] * 4
    assert [a for a, _ in sched[16:]] == [4, 5] * 4
    assert [cfg.group_of_layer(layer) for layer in range(5)] == [0, 0, 0, 0, 1]


def test_gradients_from_every_layer_accumulate_into_the_shared_weights(tiny):
    torch.manual_seed(0)
    shared = AlbertModel(tiny(sharing="all"))
    # The same network unrolled: 4 private copies of the one shared layer.
    unrolled = AlbertModel(tiny(sharing="none"))
    state = shared.state_dict()
    for i in range(4):
        for part in ("attention", "ffn"):
            for k, v in state.items():
                if k.startswith(f"encoder.{part}.0."):
                    state_key = k.replace(f"encoder.{part}.0.", f"encoder.{part}.{i}.")
                    unrolled.state_dict()[state_key].copy_(v)
    for k, v in state.items():
        if not k.startswith("encoder.attention") and not k.startswith("encoder.ffn"):
            unrolled.state_dict()[k].copy_(v)
    ids = torch.randint(1, 50, (2, 6))
    shared(ids).last_hidden_state.pow(2).sum().backward()
    unrolled(ids).last_hidden_state.pow(2).sum().backward()
    g_shared = shared.encoder.attention[0].qkv.weight.grad
    g_sum = sum(unrolled.encoder.attention[i].qkv.weight.grad for i in range(4))
    torch.testing.assert_close(g_shared, g_sum, atol=1e-6, rtol=1e-5)
    assert all(unrolled.encoder.attention[i].qkv.weight.grad.abs().sum() > 0 for i in range(4))
    g_ffn = sum(unrolled.encoder.ffn[i].up.weight.grad for i in range(4))
    torch.testing.assert_close(shared.encoder.ffn[0].up.weight.grad, g_ffn, atol=1e-6, rtol=1e-5)


def test_parameter_count_stays_flat_with_depth_under_full_sharing(tiny):
    n12 = AlbertModel(tiny(num_hidden_layers=12)).num_parameters()
    n24 = AlbertModel(tiny(num_hidden_layers=24)).num_parameters()
    assert n12 == n24
    assert AlbertModel(tiny(num_hidden_layers=8, sharing="none")).num_parameters() > n12


def test_mlm_decoder_is_tied_to_input_embeddings(tiny):
    model = albert_lm.AlbertForMaskedLM(tiny())
    assert model.predictions.decoder.weight is model.albert.embeddings.word_embeddings.weight
    assert model.albert.embeddings.word_embeddings.weight[0].abs().sum() == 0  # pad row stays zero
    assert model.num_parameters() == len(
        torch.nn.utils.parameters_to_vector({id(p): p for p in model.parameters()}.values())
    )


def test_padding_does_not_change_the_unpadded_tokens(tiny):
    model = AlbertModel(tiny()).eval()
    ids = torch.randint(5, 50, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    with torch.no_grad():
        a = model(ids).last_hidden_state
        b = model(padded, attention_mask=mask).last_hidden_state[:, :6]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_outputs_index_like_transformers_and_return_dict_false(tiny):
    model = albert_lm.AlbertForSequenceClassification(tiny(num_labels=3)).eval()
    ids = torch.randint(5, 50, (2, 5))
    out = model(ids, labels=torch.tensor([0, 2]))
    assert out[0] is out.loss and out[1] is out.logits and out["logits"] is out.logits
    loss, logits = model(ids, labels=torch.tensor([0, 2]), return_dict=False)
    torch.testing.assert_close(logits, out.logits)
    hs = model(ids, output_hidden_states=True).hidden_states
    assert len(hs) == 4 + 1 and hs[0].shape == (2, 5, 16)


def test_gradient_checkpointing_gives_the_same_gradients(tiny):
    torch.manual_seed(0)
    a = albert_lm.AlbertForPreTraining(tiny(classifier_dropout_prob=0.0))
    b = copy.deepcopy(a)
    b.albert.encoder.gradient_checkpointing = True
    ids = torch.randint(5, 50, (2, 6))
    labels = torch.where(torch.rand(2, 6) < 0.3, ids, -100)
    sop = torch.tensor([0, 1])
    a(ids, labels=labels, sentence_order_label=sop).loss.backward()
    b(ids, labels=labels, sentence_order_label=sop).loss.backward()
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


def test_set_dropout_switches_dropout_off(tiny):
    model = AlbertModel(tiny(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)).train()
    ids = torch.randint(5, 50, (2, 6))
    with torch.no_grad():
        assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
        model.set_dropout(0.0, 0.0)
        torch.testing.assert_close(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_bad_inputs_are_refused_clearly(tiny):
    model = AlbertModel(tiny())
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="output_attentions"):
        model(torch.ones(1, 3, dtype=torch.long), output_attentions=True)
