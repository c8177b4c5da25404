"""LAMB, AdamW, clipping and the schedule against hand computations (google-research's formulas)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from albert_lm.training.optim import (
    AdamW,
    Lamb,
    build_optimizer,
    build_scheduler,
    clip_by_global_norm,
    learning_rate_factor,
    parameter_groups,
    scale_learning_rate,
)


def _hand_lamb(w, grads, lr, wd, trust, b1=0.9, b2=0.999, eps=1e-6, bias_correction=False):
    """Plain-Python LAMB on a list of floats, written from google-research's lamb_optimizer.py."""
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    w = list(w)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        if bias_correction:
            mh = [mi / (1 - b1**t) for mi in m]
            vh = [vi / (1 - b2**t) for vi in v]
        else:
            mh, vh = m, v
        u = [mi / (math.sqrt(vi) + eps) + wd * wi for mi, vi, wi in zip(mh, vh, w, strict=True)]
        ratio = 1.0
        if trust:
            wn = math.sqrt(sum(x * x for x in w))
            un = math.sqrt(sum(x * x for x in u))
            ratio = wn / un if wn > 0 and un > 0 else 1.0
        w = [wi - lr * ratio * ui for wi, ui in zip(w, u, strict=True)]
    return w


W0 = [0.5, -1.0, 2.0]
GRADS = [[0.1, -0.2, 0.3], [-0.05, 0.4, 0.02], [0.3, 0.3, -0.1]]


def _run(opt_cls, lr=0.1, wd=0.01, **kw):
    p = nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = opt_cls([p], lr=lr, weight_decay=wd, **kw)
    for g in GRADS:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().tolist()


def test_lamb_steps_equal_hand_computation():
    got = _run(Lamb)
    want = _hand_lamb(W0, GRADS, lr=0.1, wd=0.01, trust=True)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)
    # The trust ratio matters here: plain AdamW ends elsewhere.
    assert got != pytest.approx(_hand_lamb(W0, GRADS, lr=0.1, wd=0.01, trust=False), rel=1e-3)


def test_lamb_single_step_by_hand():
    # One step, no decay: m = 0.1 g, v = 0.001 g^2, update = 0.1 g / (sqrt(0.001)|g| + eps) ~ 3.1623 sign(g)
    p = nn.Parameter(torch.tensor([3.0, 4.0]))  # ||w|| = 5
    opt = Lamb([p], lr=0.01, weight_decay=0.0)
    p.grad = torch.tensor([1.0, -2.0])
    opt.step()
    u1 = 0.1 * 1.0 / (math.sqrt(0.001) * 1.0 + 1e-6)
    u2 = -0.1 * 2.0 / (math.sqrt(0.001) * 2.0 + 1e-6)
    ratio = 5.0 / math.hypot(u1, u2)
    want = [3.0 - 0.01 * ratio * u1, 4.0 - 0.01 * ratio * u2]
    assert p.tolist() == pytest.approx(want, rel=1e-6)
    assert float(opt.state[p]["trust_ratio"]) == pytest.approx(ratio, rel=1e-6)


def test_bias_correction_option_matches_hand():
    got = _run(Lamb, bias_correction=True)
    assert got == pytest.approx(_hand_lamb(W0, GRADS, 0.1, 0.01, True, bias_correction=True), rel=1e-6)
    assert got != pytest.approx(_run(Lamb), rel=1e-4)


def test_adamw_has_no_trust_ratio():
    assert _run(AdamW) == pytest.approx(_hand_lamb(W0, GRADS, 0.1, 0.01, trust=False), rel=1e-6)


def test_trust_ratio_is_one_for_zero_weights():
    p = nn.Parameter(torch.zeros(3))
    opt = Lamb([p], lr=0.1, weight_decay=0.01)
    p.grad = torch.tensor([1.0, -1.0, 0.5])
    opt.step()
    assert float(opt.state[p]["trust_ratio"]) == 1.0
    # ratio 1: the step is lr * m / (sqrt(v) + eps) = lr * 0.1 / sqrt(0.001) * sign(g), no bias correction
    step = 0.1 * 0.1 / math.sqrt(0.001)
    assert p.tolist() == pytest.approx([-step, step, -step], rel=1e-4)


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.emb = nn.Embedding(10, 4)
        self.out_bias = nn.Parameter(torch.zeros(10))


def test_layernorm_and_biases_excluded_from_decay_and_trust_ratio():
    model = _Tiny()
    decay, no_decay = parameter_groups(model, 0.01)
    assert {id(p) for p in decay["params"]} == {id(model.dense.weight), id(model.emb.weight)}
    assert {id(p) for p in no_decay["params"]} == {
        id(model.dense.bias),
        id(model.norm.weight),
        id(model.norm.bias),
        id(model.out_bias),
    }
    assert decay["weight_decay"] == 0.01 and decay["trust_ratio"]
    assert no_decay["weight_decay"] == 0.0 and not no_decay["trust_ratio"]
    # An excluded tensor steps as plain Adam without decay: lr * m / (sqrt(v) + eps).
    opt = build_optimizer(model, "lamb", lr=0.5)
    before = model.norm.weight.detach().clone()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.2)
    opt.step()
    step = 0.5 * 0.02 / (math.sqrt(0.001 * 0.04) + 1e-6)
    assert (before - model.norm.weight.detach()).tolist() == pytest.approx([step] * 4, rel=1e-5)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        build_optimizer(model, "sgd")


def test_clip_by_global_norm_tf_formula():
    a = nn.Parameter(torch.zeros(2))
    b = nn.Parameter(torch.zeros(1))
    a.grad = torch.tensor([3.0, 0.0])
    b.grad = torch.tensor([4.0])  # global norm 5
    norm = clip_by_global_norm([a, b], 1.0)
    assert float(norm) == pytest.approx(5.0)
    assert a.grad.tolist() == pytest.approx([0.6, 0.0]) and b.grad.tolist() == pytest.approx([0.8])
    # Below the threshold: untouched.
    a.grad = torch.tensor([0.3, 0.4])
    b.grad = None
    assert float(clip_by_global_norm([a, b], 1.0)) == pytest.approx(0.5)
    assert a.grad.tolist() == pytest.approx([0.3, 0.4])


def test_schedule_warmup_then_polynomial_decay_to_zero():
    f = [learning_rate_factor(s, warmup_steps=4, total_steps=10) for s in range(12)]
    assert f[:4] == pytest.approx([0.0, 0.25, 0.5, 0.75])
    # After warmup the decay is measured from step 0 (google-research), not restarted.
    assert f[4:] == pytest.approx([0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    assert learning_rate_factor(5, 0, 10, power=2.0) == pytest.approx(0.25)
    p = nn.Parameter(torch.zeros(1))
    opt = Lamb([p], lr=2.0)
    sched = build_scheduler(opt, 4, 10)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.0, 0.5, 1.0, 1.5, 1.2, 1.0])


def test_scale_learning_rate_square_root_rule():
    assert scale_learning_rate(4096) == pytest.approx(1.76e-3)
    assert scale_learning_rate(64) == pytest.approx(1.76e-3 / 8)
    with pytest.raises(ValueError):
        scale_learning_rate(0)
