"""Unpadded encoding (albert_lm/model/unpad.py) computes what the padded path computes at every kept token:
hidden states, pooled outputs, heads' logits and weight gradients, in fp32 and under bf16 autocast; a
graph capture or a batch without padding takes the padded path."""

from __future__ import annotations

import pytest
import torch

import albert_lm
from albert_lm import AlbertConfig
from albert_lm.model import encoder, unpad
from albert_lm.model.config import SHARING
from albert_lm.model.unpad import Unpadding, use_unpadding

LENGTHS = [9, 5, 1, 7]  # a row without padding, and a row of one token


def tiny(sharing: str = "all", pooling: str = "cls", **kw) -> AlbertConfig:
    return AlbertConfig(
        vocab_size=99,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=4,
        num_hidden_groups=4 if sharing == "none" else 2,
        num_attention_heads=4,
        intermediate_size=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        classifier_dropout_prob=0.0,  # the paths draw different dropout masks
        max_position_embeddings=16,
        sharing=sharing,
        classifier_pooling=pooling,
        num_labels=3,
        **kw,
    )


def batch(lengths: list[int] = LENGTHS, seq: int = 9) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 99, (len(lengths), seq), generator=g).masked_fill(mask == 0, 0)
    types = (torch.arange(seq) >= 3).long().expand(len(lengths), seq) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def both(model, inputs, **kw):
    """(unpadded, padded) outputs of the same model on the same inputs."""
    with use_unpadding(True):
        a = model(**inputs, **kw)
    with use_unpadding(False):
        b = model(**inputs, **kw)
    return a, b


def kept(inputs) -> torch.Tensor:
    return inputs["attention_mask"].bool()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("sharing", SHARING)
def test_unpadded_equals_padded_at_kept_tokens(sharing, pooling):
    torch.manual_seed(0)
    inputs, keep = batch(), kept(batch())
    model = albert_lm.AlbertModel(tiny(sharing, pooling)).eval()
    with torch.no_grad():
        a, b = both(model, inputs, output_hidden_states=True)
    torch.testing.assert_close(a.last_hidden_state[keep], b.last_hidden_state[keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=1e-5)
    assert len(a.hidden_states) == len(b.hidden_states) == 5
    for ha, hb in zip(a.hidden_states, b.hidden_states, strict=True):
        assert ha.shape == hb.shape == (4, 9, 16)
        torch.testing.assert_close(ha[keep], hb[keep], atol=1e-5, rtol=1e-5)
    # the unpadded path ran: its pads are zeros, where the padded path has the pad tokens' states
    assert a.last_hidden_state[~keep].abs().max() == 0 < b.last_hidden_state[~keep].abs().max()

    heads = [albert_lm.AlbertForSequenceClassification, albert_lm.AlbertForMaskedLM]
    for cls in heads:
        head = cls(tiny(sharing, pooling)).eval()
        with torch.no_grad():
            a, b = both(head, inputs)
        if a.logits.dim() == 3:  # per token: the kept ones
            a, b = a.logits[keep], b.logits[keep]
        else:
            a, b = a.logits, b.logits
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_unpadded_path_matches_transformers_at_kept_tokens(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ours = albert_lm.AlbertForMaskedLM(tiny()).eval()
    ours.save_pretrained(tmp_path)
    theirs = transformers.AlbertForMaskedLM.from_pretrained(tmp_path).eval()
    inputs, keep = batch(), kept(batch())
    with torch.no_grad(), use_unpadding(True):
        got, want = ours(**inputs).logits, theirs(**inputs).logits
    torch.testing.assert_close(got[keep], want[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("sharing", ["all", "none"])
def test_weight_gradients_agree(sharing, checkpointing):
    torch.manual_seed(0)
    model = albert_lm.AlbertForSequenceClassification(tiny(sharing, "mean")).train()
    model.albert.encoder.gradient_checkpointing = checkpointing
    inputs, keep = batch(), kept(batch())
    labels = torch.tensor([0, 2, 1, 1])
    grads = []
    for on in (True, False):
        model.zero_grad()
        with use_unpadding(on):
            out = model(**inputs, labels=labels, output_hidden_states=True)
        (out.loss + out.hidden_states[-1][keep].pow(2).mean()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


class Spy:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = Unpadding.of.__func__

        def of(cls, mask):
            self.calls += 1
            return real(cls, mask)

        monkeypatch.setattr(Unpadding, "of", classmethod(of))


def test_plain_path_without_padding_switch_off_or_graph_capture(monkeypatch):
    model = albert_lm.AlbertModel(tiny()).eval()
    spy = Spy(monkeypatch)
    with torch.no_grad():
        model(**batch())
        assert spy.calls == 1  # padded: unpadded
        model(**batch([9, 9, 9, 9]))
        with use_unpadding(False):
            model(**batch())
        assert spy.calls == 1  # nothing padded, or the switch off: the plain path
    for capture in ("torch.jit.is_tracing", "torch.onnx.is_in_onnx_export"):
        with monkeypatch.context() as m:
            m.setattr(capture, lambda: True)
            assert not unpad.enabled()
    assert unpad.enabled() and encoder.use_unpadding is use_unpadding


def test_torch_compile_takes_the_padded_path(monkeypatch):
    torch._dynamo.reset()
    model = albert_lm.AlbertModel(tiny()).eval()
    inputs = batch()
    with torch.no_grad():
        with use_unpadding(False):
            want = model(**inputs).last_hidden_state
        spy = Spy(monkeypatch)
        got = torch.compile(model, backend="eager")(**inputs).last_hidden_state
    assert spy.calls == 0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)  # pads included: the padded path


def test_bf16_autocast_agrees():
    torch.manual_seed(0)
    model = albert_lm.AlbertForSequenceClassification(tiny("all", "cls")).eval()
    inputs, keep = batch(), kept(batch())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = both(model, inputs, output_hidden_states=True)
    assert a.hidden_states[-1].dtype == torch.bfloat16
    last_a, last_b = a.hidden_states[-1][keep].float(), b.hidden_states[-1][keep].float()
    torch.testing.assert_close(last_a, last_b, atol=5e-2, rtol=2e-2)
    torch.testing.assert_close(a.logits.float(), b.logits.float(), atol=2e-2, rtol=2e-2)


def test_unpad_and_pad_are_inverse():
    mask = batch()["attention_mask"].bool()
    where = Unpadding.of(mask[:, None, None, :])
    x = torch.randn(4, 9, 3)
    flat = where.unpad(x)
    assert flat.shape == (sum(LENGTHS), 3)
    back = where.pad(flat)
    torch.testing.assert_close(back[mask], x[mask])
    assert back[~mask].abs().max() == 0


def test_by_default_only_a_cpu_batch_with_enough_padding_runs_unpadded():
    def mask(lengths: list[int], s: int = 8) -> torch.Tensor:
        return (torch.arange(s)[None] < torch.tensor(lengths)[:, None])[:, None, None, :]

    assert unpad.for_mask(mask([8, 4, 2, 8])) is not None  # the default: 44% padding on a CPU
    with use_unpadding(None):
        assert unpad.for_mask(mask([8, 4, 2, 8])) is not None
        assert unpad.for_mask(mask([8, 8, 8, 7])) is None  # 3%: the gathers would cost more
        assert unpad.for_mask(mask([8, 4, 2, 8]).to("meta")) is None  # not a CPU (a GPU keeps padding)
        assert unpad.for_mask(None) is None
    with use_unpadding(True):  # forced: any padding, any device
        assert unpad.for_mask(mask([8, 8, 8, 7])) is not None
    with use_unpadding(False):
        assert unpad.for_mask(mask([8, 4, 2, 8])) is None
