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
on the engine (onednn / x86 / fbgemm) timed fastest here for the model's feed-forward shape.
"""

from __future__ import annotations

import copy
import functools
import statistics
import time
import warnings

import torch
from torch import nn

from albert_lm.kernels.linear import Linear
from albert_lm.kernels.onednn import activate


class Int8Linear(nn.Module):
    """A `Linear` with int8 weights (per output channel) and dynamically quantized int8 inputs."""

    # Its packed weights are no tensors of a state dict: saving would write the model without them.
    save_refused = (
        "an int8 model (albert_lm.quantize_int8) runs in this process only: its packed weights are not "
        "saved; save the fp32 model and quantize it after loading (albert predict --int8 does)"
    )

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


ENGINES = ("onednn", "x86", "fbgemm")  # PyTorch's quantized engines with a dynamic int8 linear on x86


@functools.cache
def fastest_engine(in_features: int, out_features: int, rows: int = 512) -> str:
    """The quantized engine whose dynamic int8 product of this shape is fastest here, by timing each
    (median of 5 after a warm-up; cached per process). On the 2-core Zen 3 (AVX2) onednn led at
    8 x 128 and 4 x 512 tokens with albert-base (docs/deploy.md); other CPUs may differ, hence the timing."""
    engines = [e for e in ENGINES if e in torch.backends.quantized.supported_engines]
    if len(engines) < 2:
        return engines[0] if engines else torch.backends.quantized.engine
    x = torch.randn(rows, in_features)
    layer = nn.Linear(in_features, out_features)
    old, times = torch.backends.quantized.engine, {}
    try:
        for engine in engines:
            torch.backends.quantized.engine = engine
            q = Int8Linear(layer)
            q(x)
            runs = []
            for _ in range(5):
                start = time.perf_counter()
                q(x)
                runs.append(time.perf_counter() - start)
            times[engine] = statistics.median(runs)
    finally:
        torch.backends.quantized.engine = old
    return min(times, key=times.__getitem__)


def quantize_int8(model: nn.Module, engine: str = "auto") -> nn.Module:
    """A copy of `model` (in eval mode) with every albert-lm `Linear` of its encoder (`model.albert`,
    or the model itself for an `AlbertModel`) replaced by `Int8Linear`; the same forward and outputs.
    `engine`: PyTorch's quantized engine, or "auto" (`fastest_engine` for the feed-forward's shape)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_int8: expected a model (torch.nn.Module), got {type(model).__name__}")
    if engine == "auto":
        config = getattr(model, "config", None)
        h = getattr(config, "hidden_size", 768)
        engine = fastest_engine(h, getattr(config, "intermediate_size", 4 * h))
    if engine not in torch.backends.quantized.supported_engines:
        raise ValueError(
            f"quantized engine {engine!r} is not available here; "
            f"choose auto or one of {', '.join(torch.backends.quantized.supported_engines)}"
        )
    encoder = getattr(model, "albert", model)  # a model with a head: its encoder; else the model itself
    if not any(type(m) is Linear for m in encoder.modules()):
        raise ValueError(
            f"quantize_int8: no albert-lm Linear in this {type(model).__name__} to quantize; it takes an "
            "albert-lm model (albert_lm.AlbertModel and its heads), not a transformers one or another module"
        )
    torch.backends.quantized.engine = engine  # the packed weights and the products use it
    out = copy.deepcopy(model).eval().float()
    encoder = getattr(out, "albert", out)
    done: dict[int, Int8Linear] = {}  # a shared module is quantized once, and stays shared
    for parent in list(encoder.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is Linear:
                if id(child) not in done:
                    done[id(child)] = Int8Linear(child)
                setattr(parent, name, done[id(child)])
    return out


__all__ = ["Int8Linear", "quantize_int8"]
