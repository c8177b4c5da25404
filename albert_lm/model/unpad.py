"""Unpadded encoding: the kept tokens of a padded batch as one (N, H) tensor, as ModernBERT runs them.

Fine-tuning, evaluation and inference batches are padded to their longest row; on GLUE text a good
part of (B, S) is padding. Every product, LayerNorm, dropout and residual of a layer treats tokens
independently, so the encoder runs them on the N kept tokens only (`Unpadding.unpad`); only attention
mixes tokens, and it gets its (B, nh, S, hd) layout back around the kernel call (`Unpadding.pad`,
zeros at the pads, which the padding mask already hides). The encoder pads its output back once, so
callers see (B, S, H) as before, with zeros at the padded positions where the padded path has the
pad tokens' own (meaningless) states.

When it pays (`for_mask`, by default): on a CPU, where the products dominate, and when at least
`MIN_PADDING` of the batch is padding. Measured with benchmarks/timings/bench_unpad.py
(docs/benchmarks.md), albert-base on a 2-core Xeon: 1.36-2.05x the useful tokens/s in fp32 and
1.30-1.45x in bf16 at 35-64% padding, 0.92-0.96x at 7-8%. On an H100 in bf16 eager the gathers cost
more than the products they save at every padding measured (0.74-0.96x, 3-65%), so a GPU keeps the
padded path. The batches albert-lm makes itself (fine-tuning, evaluation, `albert predict` and
`embed`) are grouped by length, 0-8% padding, so unpadding is for batches in the caller's order: a
Python loop over the model, a server's requests.

A graph being captured (torch.compile, tracing, ONNX export) cannot branch on the data and keeps the
padded path; `use_unpadding(False)` keeps it too within a block, `use_unpadding(True)` unpads every
padded batch on any device (the benchmark's comparison, the tests), and `use_unpadding(None)` is the
default choice above.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

__all__ = ["MIN_PADDING", "Unpadding", "enabled", "for_mask", "use_unpadding"]

_UNPADDING: bool | None = None  # switched by `use_unpadding`; None: where it pays (`for_mask`)
MIN_PADDING = 0.25  # the fraction of a batch's positions that must be padding for the default to unpad


@contextlib.contextmanager
def use_unpadding(enabled: bool | None = True) -> Iterator[None]:
    """Within this block, padded batches run unpadded (True: every padded batch, on any device), padded
    (False), or unpadded where it pays (None, the default: see the module's docstring); the setting
    before is restored after. Process-wide, as the kernels' `use` switches: switch it around whole
    forwards, not while another thread runs one."""
    global _UNPADDING
    was, _UNPADDING = _UNPADDING, enabled if enabled is None else bool(enabled)
    try:
        yield
    finally:
        _UNPADDING = was


def enabled() -> bool:
    """Unpadding not switched off and no graph being captured (a capture would bake one batch's N in)."""
    return (
        _UNPADDING is not False
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and not torch.onnx.is_in_onnx_export()
    )


@dataclass(frozen=True)
class Unpadding:
    """Where the kept tokens of a (B, S) batch are: `indices` (N,) into the flattened B x S positions."""

    indices: torch.Tensor
    batch: int
    seq: int

    @classmethod
    def of(cls, mask: torch.Tensor) -> Unpadding:
        """From the attention kernel's (B, 1, 1, S) boolean padding mask (True: a kept token)."""
        b, s = mask.shape[0], mask.shape[-1]
        # one host sync per forward, as padding_mask's own check: N decides every later shape
        indices = mask.reshape(b * s).nonzero().squeeze(1)  # (N,)
        return cls(indices, b, s)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, C) -> (N, C), the kept tokens in row-major order."""
        return x.reshape(self.batch * self.seq, x.shape[-1]).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C) -> (B, S, C), zeros at the padded positions."""
        out = x.new_zeros(self.batch * self.seq, x.shape[-1]).index_copy(0, self.indices, x)
        return out.view(self.batch, self.seq, x.shape[-1])


def for_mask(mask: torch.Tensor | None) -> Unpadding | None:
    """The kept tokens of a batch with this (B, 1, 1, S) padding mask when it runs unpadded, else None."""
    if mask is None or not enabled():
        return None
    if _UNPADDING is None and mask.device.type != "cpu":
        return None
    unpadded = Unpadding.of(mask)
    kept = unpadded.indices.numel() / (unpadded.batch * unpadded.seq)
    if _UNPADDING is None and kept > 1 - MIN_PADDING:
        return None
    return unpadded
