"""Linear layers whose CPU matrix multiplies run through oneDNN instead of MKL.

Why: on x86 CPUs PyTorch's fp32 nn.Linear calls MKL sgemm, which on the machines we measured (an AMD
EPYC with AVX-512) reaches 170-190 GFLOP/s on two threads; the same products through oneDNN's
inner-product primitive (`torch.ops.mkldnn._linear_pointwise`, the op torch.compile emits for CPU
linears) reach 370-430, with the activation fused into the output write. `benchmarks/bench_gemm.py`
measures both on your machine. No library exposes that path as a module, so this one is written here.

`linear(x, weight, bias, activation)` is the one entry point:
- no gradient needed (inference, evaluation): one oneDNN call, gelu (erf or tanh) / relu fused;
- gradient needed (fp32 training): `_OneDnnLinear`, whose forward and both backward products (grad
  input, grad weight) also go through oneDNN; the activation then runs as its own op for autograd;
- under CPU autocast (bf16 inference) the inputs are cast to the autocast dtype first, as F.linear
  would be, each weight once per forward (`reuse_casts`); bf16 training keeps F.linear (see `linear`);
- anything else (CUDA, float64, oneDNN missing, the switch off) falls back to F.linear.

The switch: environment variable ALBERT_LM_ONEDNN=0, or `set_enabled(False)`, turns it off (the
benchmarks use it to show the gain). Results differ from MKL's only by summation order (about 1e-6
relative in fp32); the parity tests against transformers run with it on.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

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


_CAST_CACHE: dict[tuple[int, torch.dtype], torch.Tensor] | None = None
_REUSE_CASTS = True  # `albert bench` turns it off to show the gain


@contextlib.contextmanager
def reuse_casts() -> Iterator[None]:
    """Within this block, cast each weight to the autocast dtype once, not at every use.

    ALBERT applies its shared layer L times per forward; autocast alone would cast its weights L times
    and send L gradients back through L casts. The encoder wraps its layer loop in this block (as
    autocast caches casts of leaf tensors within its region), so weights are cast once per forward.
    Nested blocks share the outer cache.
    """
    global _CAST_CACHE
    outer = _CAST_CACHE
    if outer is None and _REUSE_CASTS:
        _CAST_CACHE = {}
    try:
        yield
    finally:
        _CAST_CACHE = outer


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if t.dtype == dtype or _CAST_CACHE is None:
        return t.to(dtype)
    key = (id(t), dtype)  # t is a parameter, alive for the whole block, so its id is stable
    hit = _CAST_CACHE.get(key)
    if hit is None:
        hit = _CAST_CACHE[key] = t.to(dtype)
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
    """y = x W^T + b with all three products (forward, grad x, grad W) through oneDNN."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _mm(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _mm(grad, weight.t(), None)  # (M, N) @ (N, K)
        if ctx.needs_input_grad[1]:
            grad_w = _mm(grad.t(), x.t(), None)  # (N, M) @ (M, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


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
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if not (
        _ENABLED
        and _AVAILABLE
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        # bf16 training stays with F.linear: autocast's bf16 matmuls are oneDNN already, and its
        # step ran 10% faster than with `_OneDnnLinear` (1093 against 987 tokens/s, albert-base 8 x 128).
        and (dtype == torch.float32 or (dtype == torch.bfloat16 and not needs_grad))
        and (cast is not None or weight.dtype == dtype)
        and x.numel() > 0
    ):
        return _activate(F.linear(x, weight, bias), activation)
    if cast is not None:
        x, weight = x.to(cast), _cast(weight, cast)
        bias = _cast(bias, cast) if bias is not None else None
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    with torch.autocast("cpu", enabled=False):
        if needs_grad:
            y = _activate(_OneDnnLinear.apply(x2, weight, bias), activation)
        elif activation in _FUSED:
            y = _mm(x2, weight, bias, *_FUSED[activation])
        else:
            y = _activate(_mm(x2, weight, bias), activation)
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
