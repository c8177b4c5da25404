"""int8 inference on CPU: `quantize_int8(model)` returns a copy whose linear layers compute in int8.

Weights are quantized once, per output channel (symmetric, qint8), and packed for PyTorch's quantized
engine; activations are quantized per batch on the fly (dynamic quantization: no calibration data).
The encoder's layers, the embedding projection and the pooler are quantized; embeddings, layer norms,
attention's softmax and the task heads stay in fp32 (small, and where the error would show). With
cross-layer sharing a shared layer is one module: its packed weights are made once and every layer
application reuses them, so an all-shared model keeps one layer's int8 weights hot in cache (BERT's
twelve layers stream twelve sets).

Why by hand: `torch.ao.quantization.quantize_dynamic` swaps only `nn.Linear` modules and calls them
with one argument, while albert-lm's `Linear` takes the activation to fuse; this keeps the call and
applies the activation after the int8 product. The kernel is PyTorch's `quantized::linear_dynamic`
(fbgemm / x86 / onednn engines, chosen with `torch.backends.quantized.engine`).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from albert_lm.kernels.linear import Linear
from albert_lm.kernels.onednn import activate


class Int8Linear(nn.Module):
    """A `Linear` with int8 weights (per output channel) and dynamically quantized int8 inputs."""

    def __init__(self, source: nn.Linear) -> None:
        super().__init__()
        w = source.weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-8).double()
        zeros = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():
            # PyTorch marks its quantized tensors deprecated (pytorch#184982) in favour of torchao; the
            # kernel still ships in torch 2.13. Users see nothing; docs/deploy.md tracks the move.
            warnings.filterwarnings(
                "ignore", message=".*quantized tensor creation functions", category=UserWarning
            )
            qweight = torch.quantize_per_channel(w, scales, zeros, axis=0, dtype=torch.qint8)
        bias = None if source.bias is None else source.bias.detach().float()
        self.in_features, self.out_features = source.in_features, source.out_features
        self._packed = torch.ops.quantized.linear_prepack(qweight, bias)

    def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.quantized.linear_dynamic(
            x.reshape(-1, shape[-1]).float().contiguous(), self._packed, True
        )
        return activate(y.view(*shape[:-1], self.out_features), activation)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_int8(model: nn.Module, engine: str | None = None) -> nn.Module:
    """A copy of `model` (in eval mode) with every albert-lm `Linear` of its encoder (`model.albert`,
    or the model itself for an `AlbertModel`) replaced by `Int8Linear`; the same forward and outputs. `engine`: PyTorch's quantized engine (default: the one
    PyTorch picked for this CPU)."""
    if engine is not None:
        if engine not in torch.backends.quantized.supported_engines:
            raise ValueError(
                f"quantized engine {engine!r} is not available here; "
                f"choose one of {', '.join(torch.backends.quantized.supported_engines)}"
            )
        torch.backends.quantized.engine = engine
    out = copy.deepcopy(model).eval().float()
    encoder = getattr(out, "albert", out)  # a model with a head: its encoder; else the model itself
    done: dict[int, Int8Linear] = {}  # a shared module is quantized once, and stays shared
    for parent in list(encoder.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is Linear:
                if id(child) not in done:
                    done[id(child)] = Int8Linear(child)
                setattr(parent, name, done[id(child)])
    return out


__all__ = ["Int8Linear", "quantize_int8"]
