"""Scaled dot-product attention on the fastest path this device has, and the padding mask it takes.

The model asks for softmax(q k^T / sqrt(d)) v by calling `attention`; which kernel computes it is
decided here. Everywhere but one case that is F.scaled_dot_product_attention (PyTorch's fused
kernels, no attention matrix kept). The case: bf16 on a CPU with native bf16, where PyTorch's CPU
flash kernel is slower than three eager ops (q k^T, softmax in fp32, @ v) for inference at every
length we measured and for training up to 256 tokens; training beyond that keeps the flash kernel.
Long inference inputs compute their scores by blocks of query rows, so the score tensor stays small
enough to live in the cache instead of in fresh pages. Without native bf16 the two bf16 products
would take ATen's slow fallback GEMM, so attention stays with SDPA there. The timings behind these
thresholds are in docs/benchmarks.md and docs/notes/benchmarks_history.md.

`use(eager_bf16=False)` keeps every attention on SDPA within a block (`albert bench` times the gain).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from albert_lm.kernels.precision import native_bf16

__all__ = ["attention", "padding_mask", "use"]

_EAGER_BF16 = True  # switched by `use`
# Training takes the eager path up to this many tokens per sequence; beyond, the flash kernel is faster.
_EAGER_TRAINING_TOKENS = 256
# Inference scores go by blocks of at most this many (fp32, 4 MB) once the whole score tensor would
# exceed two blocks: at 4 x 512 albert-base's 12.6M scores (50 MB) cost page faults and cache misses.
_SCORE_BLOCK = 1 << 20


@contextlib.contextmanager
def use(eager_bf16: bool = True) -> Iterator[None]:
    """Within this block, bf16 attention on a CPU with native bf16 takes the eager path where it is
    faster (True, the default) or always SDPA (False); the setting before is restored after.

    The setting is process-wide, as the linear layers' switches (`kernels.linear.use`) are: switch it
    around whole forwards, not while another thread runs one.
    """
    global _EAGER_BF16
    was, _EAGER_BF16 = _EAGER_BF16, bool(eager_bf16)
    try:
        yield
    finally:
        _EAGER_BF16 = was


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) 1/0 padding mask -> (B, 1, 1, S) boolean for `attention`, or None when nothing is padded.

    No mask lets SDPA pick its fastest kernel; a graph being captured (torch.compile, ONNX export)
    cannot branch on the data, so it always keeps the mask.
    """
    if attention_mask is None:
        return None
    if not torch.compiler.is_compiling() and bool(attention_mask.all()):
        return None
    return attention_mask[:, None, None, :].bool()


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d), masked) v with dropout on the probabilities; q, k, v and the result are
    (B, nh, S, hd), mask (B, 1, 1, S) boolean (True: attend) or None."""
    if _eager_is_faster(q):
        return _attention_bf16_cpu(q, k, v, mask, dropout)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def _eager_is_faster(q: torch.Tensor) -> bool:
    """bf16 on a CPU with native bf16, inference or short training sequences, not inside a graph capture."""
    return (
        _EAGER_BF16
        and q.dtype == torch.bfloat16
        and q.device.type == "cpu"
        and (q.shape[2] <= _EAGER_TRAINING_TOKENS or not torch.is_grad_enabled())
        and not torch.compiler.is_compiling()
        and native_bf16()  # last: measured once per machine
    )


def _eager_attention(q, k, v, mask, dropout: float) -> torch.Tensor:
    scores = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5  # (B, nh, S, S), fp32
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = F.dropout(scores.softmax(-1), dropout).to(v.dtype)
    return probs @ v


def _attention_bf16_cpu(q, k, v, mask, dropout: float) -> torch.Tensor:
    """The eager path: in one piece when the scores are small or gradients are needed, else by blocks
    of query rows, one sequence at a time."""
    b, h, s, d = q.shape
    if b * h * s * s <= 2 * _SCORE_BLOCK or torch.is_grad_enabled():
        return _eager_attention(q, k, v, mask, dropout)
    out = q.new_empty(b, s, h, d)
    rows = max(16, _SCORE_BLOCK // (h * s))
    for i in range(b):
        m = None if mask is None else mask[i : i + 1]
        for j in range(0, s, rows):
            block = _eager_attention(q[i : i + 1, :, j : j + rows], k[i : i + 1], v[i : i + 1], m, dropout)
            out[i, j : j + rows] = block[0].transpose(0, 1)
    return out.transpose(1, 2)  # (B, nh, S, hd), as the caller expects
