"""Float8 training of the encoder's linear layers, on GPUs with float8 matrix units (NVIDIA Ada and
Hopper: compute capability 8.9 and later), through torchao's `Float8Linear`.

Each product casts its input, weight and output gradient to float8 with one scale per tensor, computed
from the tensor at every call (torchao's dynamic tensor-wise recipe), multiplies in float8 and
accumulates in fp32; the weights, their gradients and the optimizer stay fp32, everything else runs
under bf16 autocast. A weight shared by L layers is cast at each of its L uses, which keeps the scale
right for each use; torch.compile fuses each cast into the kernels around it, and torchao's float8 is
slower than bf16 without it, so `--float8` goes with `--torch-compile`.

torchao is the library made for this (the float8 recipes of torchtitan); it is an optional extra,
`pip install -e '.[float8]'` in the albert-lm clone. Only the layers of the attention and feed-forward blocks are
converted: their sizes are multiples of 16, as the float8 product requires, and they hold nearly every
FLOP; the embeddings' projection and the heads stay bf16.
"""

from __future__ import annotations

from typing import Any

import torch

from albert_lm.kernels.linear import Linear
from albert_lm.kernels.onednn import activate

__all__ = ["check_float8", "convert_to_float8"]

MIN_CAPABILITY = (8, 9)


def check_float8(device: torch.device) -> None:
    """Raise a ValueError that says what is missing when float8 training cannot run on `device`."""
    if device.type != "cuda":
        raise ValueError(
            f"--float8 needs a CUDA GPU with float8 matrix units (compute capability 8.9 or later: "
            f"Ada, Hopper); the device is {device.type}"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        raise ValueError(
            f"--float8: {torch.cuda.get_device_name(device)} has compute capability "
            f"{capability[0]}.{capability[1]}; float8 products need 8.9 or later (Ada, Hopper)"
        )
    try:
        import torchao.float8  # noqa: F401
    except ImportError as e:
        raise ValueError(
            "--float8 needs torchao: pip install -e '.[float8]' in the albert-lm clone (or pip install torchao)"
        ) from e


def _float8_class() -> Any:
    from torchao.float8.float8_linear import Float8Linear

    class Float8EncoderLinear(Float8Linear):
        """torchao's Float8Linear with the optional activation of our `Linear.forward`."""

        def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
            return activate(super().forward(x), activation)

    return Float8EncoderLinear


def convert_to_float8(encoder: Any, config: Any = None) -> int:
    """Swap the linear layers of `encoder`'s attention and feed-forward blocks for float8 ones, in place;
    the parameters stay the same tensors (same names, same state_dict). Returns how many were swapped.

    config: a torchao `Float8LinearConfig` (default: dynamic tensor-wise scales)."""
    from torchao.float8 import Float8LinearConfig

    cls = _float8_class()
    config = config or Float8LinearConfig()
    swapped = 0
    for blocks in (encoder.attention, encoder.ffn):
        for block in blocks:
            for name, child in list(block.named_children()):
                if isinstance(child, Linear) and child.in_features % 16 == 0 and child.out_features % 16 == 0:
                    setattr(block, name, cls.from_float(child, config=config))
                    swapped += 1
    return swapped
