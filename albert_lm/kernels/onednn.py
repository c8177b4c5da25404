"""oneDNN's linear primitive as PyTorch exposes it, and which of its forms work on this CPU.

`torch.ops.mkldnn._linear_pointwise` (the op torch.compile emits for CPU linears) multiplies with an
optional fused activation; `_reorder_linear_weight` packs a weight into oneDNN's blocked layout. Which
forms exist depends on the CPU: below AVX-512 the bf16 ones fail to create ("could not create a primitive
descriptor"). `primitive_works` tries each form once per process; `albert_lm.kernels.linear` uses a form only
where it worked. Also here: the hidden_act table, shared by the fused and the plain paths.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

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
FUSED = {"gelu": ("gelu", "none"), "relu": ("relu", "")} | {
    name: ("gelu", "tanh") for name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
}


def activation_fn(name: str):
    """The function for a config's hidden_act."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown hidden_act {name!r} (expected one of {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    return y if activation is None else activation_fn(activation)(y)


@functools.cache
def primitive_works(dtype: torch.dtype, packed: bool = False, activation: str | None = None) -> bool:
    """Whether oneDNN's linear primitive runs here for this dtype, weight layout and fused activation.

    Tried once per process on a 2 x 3 product. Below AVX-512, bf16 fails ("could not create a primitive
    descriptor"); emulation variables (hardware.EMULATION_ENV) make a bigger CPU fail the same way.
    """
    ops = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")):
        return False
    if packed and not hasattr(ops, "_reorder_linear_weight"):
        return False
    if activation is not None and activation not in FUSED:
        return False
    attr, alg = FUSED.get(activation, ("none", "")) if activation else ("none", "")
    try:
        w = torch.ones(4, 3, dtype=dtype)
        if packed:
            w = ops._reorder_linear_weight(w, 2)
        y = ops._linear_pointwise(torch.ones(2, 3, dtype=dtype), w, None, attr, [], alg)
        expected = activate(torch.full((2, 4), 3.0), activation)
        return y.shape == (2, 4) and torch.allclose(y.float(), expected, rtol=1e-2, atol=1e-2)
    except (RuntimeError, NotImplementedError):
        return False


def pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """weight (N, K) reordered into oneDNN's blocked layout for inputs of about `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def mm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str | None = None):
    """x (M, K) @ w (N, K)^T + b through oneDNN, the activation fused when given (it must be in FUSED)."""
    attr, alg = FUSED[activation] if activation is not None else ("none", "")
    return torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], alg)
