"""The oneDNN linear path: same numbers as F.linear (values and gradients), fallbacks, and switches."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from albert_lm.kernels import hardware, onednn
from albert_lm.kernels import linear as kernels
from albert_lm.kernels import precision as prec  # (tests below have a `precision` parameter)
from albert_lm.kernels.attention import _attention_bf16_cpu
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertModel
from albert_lm.model.heads import AlbertForPreTraining

needs_onednn = pytest.mark.skipif(not kernels.enabled(), reason="oneDNN is not available in this torch build")


def _reference(x, w, b, activation):
    y = F.linear(x, w, b)
    return {"gelu": F.gelu, "gelu_new": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu}.get(
        activation, lambda t: t
    )(y)


@pytest.fixture
def tensors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 96, generator=g, requires_grad=True)
    w = (torch.randn(200, 96, generator=g) * 0.05).requires_grad_()
    b = torch.randn(200, generator=g).requires_grad_()
    return x, w, b


@needs_onednn
@pytest.mark.parametrize("activation", [None, "gelu", "gelu_new", "relu"])
def test_linear_matches_f_linear_values_and_gradients(tensors, activation):
    x, w, b = tensors
    y = kernels.linear(x, w, b, activation)
    ref = _reference(x, w, b, activation)
    assert y.shape == ref.shape == (3, 40, 200)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(y)
    ours = torch.autograd.grad(y, (x, w, b), grad)
    theirs = torch.autograd.grad(ref, (x, w, b), grad)
    for a, r in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # the inference path, activation fused
        torch.testing.assert_close(kernels.linear(x, w, b, activation), ref, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_linear_without_bias_and_grad_only_for_input(tensors):
    x, w, _ = tensors
    w = w.detach()
    y = kernels.linear(x, w, None)
    (gx,) = torch.autograd.grad(y.sum(), (x,))
    torch.testing.assert_close(gx, torch.autograd.grad(F.linear(x, w).sum(), (x,))[0], rtol=1e-5, atol=1e-5)


def test_switch_off_and_unsupported_dtypes_use_f_linear(tensors):
    x, w, b = (t.detach() for t in tensors)
    was = kernels._ENABLED
    try:
        kernels.set_enabled(False)
        assert not kernels.enabled()
        assert torch.equal(kernels.linear(x, w, b, "gelu"), F.gelu(F.linear(x, w, b)))
    finally:
        kernels.set_enabled(was)
    y = kernels.linear(x.double(), w.double(), b.double())
    assert y.dtype == torch.float64
    assert torch.equal(y, F.linear(x.double(), w.double(), b.double()))
    with pytest.raises(ValueError, match="unknown hidden_act"):
        kernels.linear(x, w, b, "tanh")


def _force(monkeypatch, paths: dict[str, str]) -> None:
    """Make `linear` take the given path per product ("forward", "grad_input", ...) where it exists here."""
    real = kernels._choose

    def forced(op, m, k, n, dtype, activation, packable, uses=1):
        wanted = paths.get(op)
        if wanted in kernels._paths(op, dtype, packable):
            return wanted
        return real(op, m, k, n, dtype, activation, packable, uses)

    monkeypatch.setattr(kernels, "_choose", forced)


PATH_SETS = [  # forward, grad-input, grad-weight: every path each product can take
    {"forward": "flinear", "grad_input": "mm", "grad_weight": "mm", "infer": "flinear"},
    {"forward": "onednn", "grad_input": "onednn", "grad_weight": "onednn", "infer": "onednn"},
    {"forward": "packed", "grad_input": "packed", "grad_weight": "mm", "infer": "packed"},
]


@pytest.mark.parametrize("paths", PATH_SETS, ids=lambda p: p["forward"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_path_matches_f_linear_in_values_and_gradients(monkeypatch, precision, paths):
    # The same weight used three times in one reuse_casts block (as ALBERT's shared layer): cast and
    # prepared once, its gradient summed over the uses, as F.linear under autocast gives. bf16 runs on
    # every CPU: where oneDNN has no bf16 primitive, only the plain path exists and is taken.
    _force(monkeypatch, paths)
    torch.manual_seed(0)
    x = torch.randn(4, 16, 32, requires_grad=True)
    w = torch.randn(48, 32, requires_grad=True)
    b = torch.randn(48, requires_grad=True)
    proj = torch.randn(48, 32) / 8
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def run(fn):
        for t in (x, w, b):
            t.grad = None
        h = x
        with cast:
            for _ in range(3):
                h = fn(h, w, b).float() @ proj
        h.square().mean().backward()
        with torch.no_grad(), cast:
            inference = fn(x, w, b, "gelu") if fn is kernels.linear else F.gelu(fn(x, w, b))
        return h.detach(), x.grad.clone(), w.grad.clone(), b.grad.clone(), inference.float()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", prec.SlowBf16Warning)
        with kernels.reuse_casts():
            ours = run(kernels.linear)
            prepared = [v for v in kernels._LOCAL.cache.values() if isinstance(v, kernels._Prepared)]
    ref = run(F.linear)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    assert len(prepared) == 1 and prepared[0].packable == kernels.can_pack(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-5} if precision == "fp32" else {"rtol": 3e-2, "atol": 3e-2}
    for a, r in zip(ours, ref, strict=True):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a / r.abs().max(), r / r.abs().max(), **tol)


def test_probes_follow_the_instruction_set():
    # oneDNN's bf16 inner product needs AVX-512 (or AVX-NE-CONVERT): on an AVX2 CPU, or under oneDNN's
    # AVX2 cap, the probe fails and bf16 takes the plain path; fp32 works everywhere.
    info = hardware.cpu_info()
    if not info.flags:
        pytest.skip("no CPU flags to compare with (not Linux on x86)")
    onednn_caps = {k: v for k, v in info.emulation.items() if k in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    isa = hardware._capped(info.hardware_isa, onednn_caps)
    assert onednn.primitive_works(torch.float32) == torch.backends.mkldnn.is_available()
    if isa in ("other", "avx2") and ("avx_ne_convert" not in info.flags or onednn_caps):
        assert not onednn.primitive_works(torch.bfloat16)
        assert not onednn.primitive_works(torch.bfloat16, packed=True)
        assert not prec.native_bf16()
    if isa in ("avx512_bf16", "amx"):
        assert onednn.primitive_works(torch.bfloat16)
    assert not onednn.primitive_works(torch.float32, activation="silu")  # not a fused post-op


def test_bf16_without_native_support_warns_once_and_auto_takes_fp32(monkeypatch, tensors):
    monkeypatch.setattr(prec, "_WARNED_BF16", False)
    monkeypatch.setattr(prec, "native_bf16", lambda: False)
    monkeypatch.setattr(prec, "bf16_speed", lambda: {"fp32_gflops": 120.0, "bf16_gflops": 17.0})
    x, w, b = (t.detach() for t in tensors)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            y = kernels.linear(x, w, b)
            kernels.linear(x, w, b)
    slow = [c for c in caught if issubclass(c.category, prec.SlowBf16Warning)]
    assert len(slow) == 1 and "7.1x slower than fp32" in str(slow[0].message)
    assert "17 GFLOP/s against 120" in str(slow[0].message)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), F.linear(x, w, b), rtol=3e-2, atol=3e-2)
    assert prec.resolve_precision("auto", "cpu")[0] == "fp32"
    monkeypatch.setattr(prec, "native_bf16", lambda: True)
    chosen, why = prec.resolve_precision("auto", "cpu")
    assert chosen == "bf16" and "GFLOP/s" in why
    assert prec.resolve_precision("fp32", "cpu") == ("fp32", "asked for")
    assert prec.resolve_precision("bf16", "cpu") == ("bf16", "asked for")


def test_a_onednn_path_that_fails_after_all_falls_back_to_pytorch(monkeypatch, tensors, caplog):
    # The probes run on a 2 x 3 product; if oneDNN still refuses a real shape, the layer computes the
    # plain way, logs it once, and no oneDNN error reaches the user.
    _force(monkeypatch, PATH_SETS[1])  # oneDNN for every product

    def refuse(*args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor for the inner product")

    monkeypatch.setattr(onednn, "mm", refuse)
    monkeypatch.setattr(kernels, "_FELL_BACK", set())
    x, w, b = tensors
    with caplog.at_level("WARNING", logger="albert_lm.kernels.linear"):
        y = kernels.linear(x, w, b, "gelu")
        grads = torch.autograd.grad(y.sum(), (x, w, b))
        with torch.no_grad():
            z = kernels.linear(x, w, b, "gelu")
    ref = F.gelu(F.linear(x, w, b))
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(z, ref)
    for g, r in zip(grads, torch.autograd.grad(ref.sum(), (x, w, b)), strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    if kernels.enabled():
        assert caplog.text.count("oneDNN onednn path failed here") == 1


def test_float64_under_autocast_stays_float64(tensors):
    x, w, b = (t.detach().double() for t in tensors)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = kernels.linear(x, w, b)
    assert y.dtype == torch.float64


def test_native_bf16_agrees_with_the_measurement():
    speed = prec.bf16_speed()
    assert speed["fp32_gflops"] > 0 and speed["bf16_gflops"] > 0
    expected = onednn.primitive_works(torch.bfloat16) and speed["bf16_gflops"] >= 1.2 * speed["fp32_gflops"]
    assert prec.native_bf16() == expected
    assert prec.resolve_precision("auto", "cpu")[0] == ("bf16" if expected else "fp32")


def test_reuse_casts_casts_each_weight_once_per_block(tensors):
    _, w, _ = tensors
    with kernels.reuse_casts():
        a, b = kernels._cast(w, torch.bfloat16), kernels._cast(w, torch.bfloat16)
        assert a is b
        with kernels.reuse_casts():  # nested: the same cache
            assert kernels._cast(w, torch.bfloat16) is a
    assert kernels._cast(w, torch.bfloat16) is not a  # outside the block: a fresh cast
    assert kernels._LOCAL.cache is None


def test_packing_is_offered_only_for_weights_used_twice_or_more():
    w = torch.randn(8, 4)
    with kernels.reuse_casts(uses=1):  # an unshared layer: the reorder would never pay
        assert not kernels._prepare(w, torch.float32, 4).packable
    with kernels.reuse_casts(uses=12):
        assert kernels._prepare(w, torch.float32, 4).packable == kernels.can_pack(torch.float32)
    shared = AlbertModel(AlbertConfig.from_preset("albert-tiny")).encoder
    assert shared.uses_per_weight == len(shared.schedule)  # all-shared: every layer uses the one block
    assert AlbertModel(AlbertConfig.from_preset("albert-tiny", sharing="none")).encoder.uses_per_weight == 1


def test_reuse_casts_caches_are_per_thread():
    # Interleaved blocks in two threads (A enters, B enters, A leaves, B leaves) must leave no cache
    # behind: a left-over cache would hand out stale weights after the next optimizer step.
    import threading

    w = torch.randn(4, 4)
    barrier, seen = threading.Barrier(2), {}

    def block(name: str, leave_first: bool) -> None:
        with kernels.reuse_casts():
            seen[name] = kernels._cast(w, torch.bfloat16)
            barrier.wait()
            if not leave_first:
                barrier.wait()
        if leave_first:
            barrier.wait()
        seen[name + " after"] = kernels._LOCAL.cache

    threads = [threading.Thread(target=block, args=(n, n == "a")) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"]  # each thread cast into its own cache
    assert seen["a after"] is None and seen["b after"] is None and kernels._LOCAL.cache is None


def test_model_gradients_match_with_the_switch_off():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", hidden_dropout_prob=0.0)).train()
    model.set_dropout(0.0, 0.0)
    ids = torch.randint(5, model.config.vocab_size, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0

    def grads():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask, labels=ids, sentence_order_label=torch.tensor([0, 1]))
        out.loss.backward()
        return out.loss.detach(), {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }

    loss_on, on = grads()
    was = kernels._ENABLED
    try:
        kernels.set_enabled(False)
        loss_off, off = grads()
    finally:
        kernels.set_enabled(was)
    torch.testing.assert_close(loss_on, loss_off, rtol=1e-5, atol=1e-5)
    assert on.keys() == off.keys()
    for name in on:
        torch.testing.assert_close(on[name], off[name], rtol=1e-3, atol=1e-5, msg=name)


def test_bf16_eager_attention_matches_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(2, 1, 1, 16, dtype=torch.bool)
    mask[1, ..., 12:] = False
    ours = _attention_bf16_cpu(q, k, v, mask, 0.0)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(ours.float(), ref, rtol=2e-2, atol=2e-2)


def test_bf16_inference_attention_by_blocks_matches_sdpa():
    # Long enough that the scores (2 x 2 x 1100 x 1100) go by query blocks of 476 rows; padding masked.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 1100, 8, generator=g, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(2, 1, 1, 1100, dtype=torch.bool)
    mask[1, ..., 900:] = False
    with torch.no_grad():
        ours = _attention_bf16_cpu(q, k, v, mask, 0.0)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    assert ours.shape == ref.shape == (2, 2, 1100, 8)
    torch.testing.assert_close(ours.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.filterwarnings("ignore::albert_lm.kernels.precision.SlowBf16Warning")
def test_bf16_training_runs_attention_and_backward():
    torch.manual_seed(0)
    model = AlbertModel(AlbertConfig.from_preset("albert-tiny")).train()
    ids = torch.randint(5, model.config.vocab_size, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    out.float().pow(2).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_tune_cpu_allocator_is_harmless():
    assert hardware.tune_cpu_allocator() in (True, False)
    assert torch.ones(4).sum().item() == 4


def test_every_config_activation_has_a_kernel_function():
    from albert_lm.model.config import ACTIVATIONS

    assert set(kernels.ACTIVATIONS) == set(ACTIVATIONS)
    x = torch.linspace(-3, 3, 7)
    torch.testing.assert_close(kernels.activation_fn("gelu_fast")(x), F.gelu(x, approximate="tanh"))


def test_one_device_layer_for_every_loop(monkeypatch):
    """`--device` means one thing everywhere: auto and cuda under torchrun are the process's own GPU,
    cuda:N is GPU N, and the autocast of a precision is the same for training and inference."""
    import torch

    from albert_lm.kernels.device import autocast, pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert pick_device("auto") == torch.device("cuda", 2) == pick_device("cuda")
    assert pick_device("cuda:1") == torch.device("cuda", 1) and pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="4 CUDA GPU"):
        pick_device("cuda:7")
    monkeypatch.delenv("LOCAL_RANK")
    assert pick_device("cuda") == torch.device("cuda")
    cpu = torch.device("cpu")
    with autocast(cpu, "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast(cpu, "fp32"):
        assert not torch.is_autocast_enabled("cpu")
