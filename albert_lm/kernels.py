"""Linear layers whose CPU matrix multiplies run through oneDNN instead of MKL.

Why: on x86 CPUs PyTorch's fp32 nn.Linear calls MKL sgemm, which on the machines we measured (an AMD
EPYC with AVX-512) reaches 170-190 GFLOP/s on two threads; the same products through oneDNN's
inner-product primitive (`torch.ops.mkldnn._linear_pointwise`, the op torch.compile emits for CPU
linears) reach 370-430, with the activation fused into the output write. `benchmarks/bench_gemm.py`
measures both on your machine. No library exposes that path as a module, so this one is written here.

`linear(x, weight, bias, activation)` is the one entry point:
- no gradient needed (inference, evaluation): one oneDNN call, gelu (erf or tanh) / relu fused;
- gradient needed (training): `_OneDnnLinear`, whose forward and grad-input products go through
  oneDNN (grad-weight too in fp32); the activation then runs as its own op for autograd;
- under CPU autocast (bf16) the input is cast to the autocast dtype first, as F.linear would be;
- inside `reuse_casts` (the encoder's layer loop) each weight is cast and packed into oneDNN's blocked
  layout once per forward and reused by every layer (`_Prepared`);
- anything else (CUDA, float64, oneDNN missing, the switch off) falls back to F.linear.

The switch: environment variable ALBERT_LM_ONEDNN=0, or `set_enabled(False)`, turns it off (the
benchmarks use it to show the gain). Results differ from MKL's only by summation order (about 1e-6
relative in fp32); the parity tests against transformers run with it on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_ENABLED = os.environ.get("ALBERT_LM_ONEDNN", "1") != "0"
_TANH_GELU = functools.partial(F.gelu, approximate="tanh")
# hidden_act names (transformers' spellings) -> function. F.gelu(approximate="tanh") is gelu_new in one
# kernel; transformers builds it from 7 ops.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": _TANH_GELU,
    "gelu_pytorch_tanh": _TANH_GELU,
    "gelu_fast": _TANH_GELU,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}
# The ones oneDNN fuses into the matrix multiply: (post-op, algorithm).
_FUSED = {"gelu": ("gelu", "none"), "relu": ("relu", "")} | {
    name: ("gelu", "tanh") for name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
}


def _available() -> bool:
    """oneDNN built in, the op registered, and one tiny call working (some builds lack the kernel)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 3), torch.ones(4, 3), None, "none", [], "")
        return y.shape == (2, 4) and bool((y == 3).all())
    except (RuntimeError, NotImplementedError):
        return False


_AVAILABLE = _available()


def set_enabled(enabled: bool) -> None:
    """Turn the oneDNN path on or off for this process (it is on by default where available)."""
    global _ENABLED
    _ENABLED = bool(enabled)


def enabled() -> bool:
    return _ENABLED and _AVAILABLE


def _can_pack() -> bool:
    """Whether this torch build can pre-pack a linear weight into oneDNN's blocked layout."""
    if not _AVAILABLE or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(4, 3), 2)
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 3), w, None, "none", [], "")
        return y.shape == (2, 4) and bool((y == 3).all())
    except (RuntimeError, NotImplementedError):
        return False


_CAN_PACK = _can_pack()


def can_pack() -> bool:
    return enabled() and _CAN_PACK


def _pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """weight (N, K) reordered into oneDNN's blocked layout for inputs of about `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


class _Prepared:
    """One weight made ready for oneDNN in one dtype: cast once, packed once, transposed-and-packed once.

    Packing (oneDNN's blocked weight layout, `_reorder_linear_weight`) makes each product 8-15% faster
    on this machine's shapes (bf16 890 against 780 GFLOP/s, fp32 440 against 400; more for short
    inputs), but costs a reorder, so it pays only for a weight used several times: ALBERT's shared layer
    uses each weight L times per forward. Inside `reuse_casts` a weight is prepared once per forward and
    kept by every layer's autograd node, so backward packs the transpose (for grad-input) once too.
    """

    __slots__ = ("weight", "_pack", "_rows", "_packed", "_packed_t")

    def __init__(self, weight: torch.Tensor, pack: bool, rows: int):
        self.weight = weight  # detached, already in the compute dtype
        self._pack = pack and _CAN_PACK
        self._rows = rows  # the batch-size hint oneDNN picks its layout for
        self._packed: torch.Tensor | None = None
        self._packed_t: torch.Tensor | None = None

    def packed(self) -> torch.Tensor:
        """The weight (N, K) for `_mm`."""
        if not self._pack:
            return self.weight
        if self._packed is None:
            self._packed = _pack(self.weight, self._rows)
        return self._packed

    def packed_t(self) -> torch.Tensor:
        """The transposed weight (K, N) for `_mm`: grad_x = grad @ W."""
        if not self._pack:
            return self.weight.t()
        if self._packed_t is None:
            self._packed_t = _pack(self.weight.t().contiguous(), self._rows)
        return self._packed_t


class _Local(threading.local):
    # Per thread: two threads running forwards at once must not share, or leave behind, a cache.
    cache: dict[tuple, Any] | None = None  # (id(param), dtype) -> cast; (id, "prepared", dtype) -> _Prepared


_LOCAL = _Local()
_REUSE_CASTS = True  # `albert bench` turns it off to show the gain


@contextlib.contextmanager
def reuse_casts() -> Iterator[None]:
    """Within this block, prepare each weight (cast to the compute dtype, pack) once, not at every use.

    ALBERT applies its shared layer L times per forward; autocast alone would cast its weights L times
    and send L gradients back through L casts. The encoder wraps its layer loop in this block, so each
    weight is cast and packed once per forward (`_Prepared`). Nested blocks share the outer cache; each
    thread has its own.
    """
    outer = _LOCAL.cache
    if outer is None and _REUSE_CASTS:
        _LOCAL.cache = {}
    try:
        yield
    finally:
        _LOCAL.cache = outer


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t (a parameter) in dtype, detached from autograd; cast once per `reuse_casts` block."""
    cache = _LOCAL.cache
    if cache is None:
        return t.detach().to(dtype)
    key = (id(t), dtype)  # t is a parameter, alive for the whole block, so its id is stable
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = t.detach().to(dtype)
    return hit


def _prepare(weight: torch.Tensor, dtype: torch.dtype, rows: int) -> _Prepared:
    cache = _LOCAL.cache
    if cache is None:  # one use: packing would not pay for its reorder
        return _Prepared(weight.detach().to(dtype), False, rows)
    key = (id(weight), "prepared", dtype)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _Prepared(_cast(weight, dtype), True, rows)
    return hit


try:  # the device-type autocast queries; older torch releases only have the CPU-specific ones
    torch.get_autocast_dtype("cpu")
    _cpu_autocast_on = lambda: torch.is_autocast_enabled("cpu")  # noqa: E731
    _cpu_autocast_dtype = lambda: torch.get_autocast_dtype("cpu")  # noqa: E731
except (AttributeError, TypeError):
    _cpu_autocast_on = torch.is_autocast_cpu_enabled
    _cpu_autocast_dtype = torch.get_autocast_cpu_dtype


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    if x.device.type == "cpu" and _cpu_autocast_on():
        return _cpu_autocast_dtype()
    return None


def _mm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, attr: str = "none", alg: str = ""):
    """x (M, K) @ w (N, K)^T + b, with an optional fused pointwise op, through oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], alg)


class _OneDnnLinear(torch.autograd.Function):
    """y = x W^T + b for training: forward and grad-input through oneDNN with the prepared weight.

    x comes in the compute dtype (fp32, or bf16 under autocast, cast by the caller); weight and bias are
    the parameters, whose gradients go back in their own dtype. grad-W: oneDNN in fp32 (360-390
    against MKL's 195 GFLOP/s here); in bf16 torch.mm, which is oneDNN already and was faster than
    `_mm` on transposed operands (830-850 against 665-810).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, prepared: _Prepared):  # type: ignore[override]
        b = None if bias is None else _cast(bias, x.dtype)  # once per reuse_casts block
        ctx.save_for_backward(x)
        ctx.prepared = prepared
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return _mm(x, prepared.packed(), b)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        grad = grad.to(x.dtype).contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _mm(grad, ctx.prepared.packed_t(), None)  # (M, N) @ (N, K)
        if ctx.needs_input_grad[1]:
            if x.dtype == torch.float32:
                grad_w = _mm(grad.t(), x.t(), None)  # (N, M) @ (M, K)
            else:
                grad_w = torch.mm(grad.t(), x)
            grad_w = grad_w.to(ctx.dtypes[0])
        if ctx.dtypes[1] is not None and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0, dtype=torch.float32).to(ctx.dtypes[1])
        return grad_x, grad_w, grad_b, None


def activation_fn(name: str):
    """The function for a config's hidden_act."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown hidden_act {name!r} (expected one of {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def _activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    return y if activation is None else activation_fn(activation)(y)


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """activation(x @ weight^T + bias); activation is None or a hidden_act name (`ACTIVATIONS`)."""
    cast = _autocast_dtype(x)
    dtype = cast or x.dtype
    if not (
        _ENABLED
        and _AVAILABLE
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and dtype in (torch.float32, torch.bfloat16)
        and (cast is not None or weight.dtype == dtype)
        and x.numel() > 0
    ):
        return _activate(F.linear(x, weight, bias), activation)
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if cast is not None:
        x = x.to(cast)  # as autocast would; differentiable
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    prepared = _prepare(weight, dtype, x2.shape[0])
    with torch.autocast("cpu", enabled=False):
        if needs_grad:
            y = _activate(_OneDnnLinear.apply(x2, weight, bias, prepared), activation)
        else:
            b = None if bias is None else _cast(bias, dtype)
            if activation in _FUSED:
                y = _mm(x2, prepared.packed(), b, *_FUSED[activation])
            else:
                y = _activate(_mm(x2, prepared.packed(), b), activation)
    return y.view(*shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) computed by `linear`, with an optional activation."""

    def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
        return linear(x, self.weight, self.bias, activation)


def tune_cpu_allocator() -> bool:
    """Keep freed memory in the process instead of returning it to the OS after every step.

    glibc hands blocks above its mmap threshold straight back to the kernel when freed, so a training
    step that frees and reallocates its activations takes hundreds of thousands of page faults (about
    7% of an albert-base bf16 step here, benchmarks/bench_allocator.py). Raising the mmap threshold to
    its 32 MiB maximum and the trim threshold to 1 GiB keeps those pages mapped. Process-wide, so the
    `albert` command calls it rather than the library; returns False where glibc is not the allocator.
    """
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
        ok = libc.mallopt(m_mmap_threshold, 32 << 20) == 1
        ok &= libc.mallopt(m_trim_threshold, 1 << 30) == 1
        ok &= libc.mallopt(m_top_pad, 64 << 20) == 1
        return bool(ok)
    except (OSError, AttributeError):
        return False
