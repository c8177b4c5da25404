"""Which precision to compute in: bf16 only where this machine computes it fast (`--precision auto`).

A CUDA GPU of the Ampere generation or later computes bf16 natively. On a CPU it depends on the
instruction set, and nothing here trusts a CPU's name: bf16 is "native" when oneDNN's bf16 primitive
works and a bf16 product measures >= 1.2x the fp32 one (AVX512-BF16 or AMX in practice; a 2-core Zen 3
measured 17-21 against 97-176 GFLOP/s). bf16 asked for where it is slower still works, with one
warning that gives both rates.
"""

from __future__ import annotations

import functools
import warnings
from typing import Literal

import torch
import torch.nn.functional as F

from albert_lm.kernels import autotune, onednn
from albert_lm.kernels.hardware import cpu_info


def bf16_speed() -> dict[str, float]:
    """GFLOP/s of a 256 x 1024 x 1024 product in bf16 and in fp32, each on the fastest path there is
    here (F.linear, or oneDNN where it works); measured once per machine (cached with the kernel choices)."""

    def measure() -> dict[str, float]:
        m, k, n = 256, 1024, 1024
        rates = {}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
            fns: dict[str, autotune.Candidate] = {"flinear": functools.partial(F.linear, x, w)}
            if onednn.primitive_works(dtype):
                fns["onednn"] = functools.partial(onednn.mm, x, w, None)
            seconds = autotune.time_candidates(fns, budget_s=0.15, max_rounds=3)
            rates[f"{name}_gflops"] = round(2 * m * k * n / min(seconds.values()) / 1e9, 1)
        return rates

    return autotune.measured("bf16_vs_fp32_gemm", measure)


_NATIVE_BF16: bool | None = None


def native_bf16() -> bool:
    """bf16 is fast on this CPU: oneDNN's bf16 primitive works and multiplies >= 1.2x the fp32 rate.

    Measured once per machine (cached on disk with the kernel choices, even with ALBERT_LM_AUTOTUNE=0:
    `auto` needs it) and remembered for the process.
    """
    global _NATIVE_BF16
    if _NATIVE_BF16 is None:
        if not onednn.primitive_works(torch.bfloat16):
            _NATIVE_BF16 = False
        else:
            speed = bf16_speed()
            _NATIVE_BF16 = speed["bf16_gflops"] >= 1.2 * speed["fp32_gflops"]
    return _NATIVE_BF16


def _bf16_line() -> str:
    s = bf16_speed()
    return (
        f"{cpu_info().describe()}: bf16 matrix multiplies at {s['bf16_gflops']:.0f} GFLOP/s against "
        f"{s['fp32_gflops']:.0f} in fp32"
    )


class SlowBf16Warning(UserWarning):
    """bf16 was asked for on a CPU where it runs slower than fp32."""


_WARNED_BF16 = False


def warn_if_bf16_is_slow() -> None:
    """Once per process: warn if bf16 runs slower than fp32 here (called by every bf16 CPU product)."""
    global _WARNED_BF16
    if _WARNED_BF16:
        return
    _WARNED_BF16 = True
    if native_bf16():
        return
    s = bf16_speed()
    if s["bf16_gflops"] >= s["fp32_gflops"]:
        return  # not worth bf16 for speed here, but not slower either
    warnings.warn(
        f"bf16 on this CPU has no native support and will be about "
        f"{s['fp32_gflops'] / max(s['bf16_gflops'], 1e-3):.1f}x slower than fp32 ({_bf16_line()}); "
        "use precision fp32, or auto, which picks bf16 only where it is faster",
        SlowBf16Warning,
        stacklevel=3,
    )


Precision = Literal["fp32", "bf16", "fp16"]
_NAMED: dict[str, Precision] = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


def resolve_precision(precision: str, device: torch.device | str = "cpu") -> tuple[Precision, str]:
    """(fp32 | bf16 | fp16, why) for a requested precision; "auto" is bf16 where it is fast, else fp32.

    Fast: a CUDA device with bf16 (Ampere and later), or a CPU whose bf16 products measure >= 1.2x its
    fp32 ones (AVX512-BF16 or AMX in practice). A precision given explicitly is kept as it is.
    """
    device = torch.device(device)
    if precision != "auto":
        if precision not in _NAMED:
            raise ValueError(f"precision must be auto, fp32, bf16 or fp16, got {precision!r}")
        if precision == "fp16" and device.type != "cuda":
            raise ValueError(
                f"--precision fp16 needs a CUDA device, not {device.type}; use bf16 or fp32 here"
            )
        return _NAMED[precision], "asked for"
    if device.type == "cuda":
        if torch.cuda.get_device_capability(device)[0] >= 8:  # Ampere and later (older ones emulate it)
            return "bf16", f"{torch.cuda.get_device_name(device)} computes bf16 natively"
        return "fp32", f"{torch.cuda.get_device_name(device)} has no bf16"
    if device.type != "cpu":
        return "fp32", f"device {device.type}"
    if native_bf16():
        return "bf16", f"{_bf16_line()} (native bf16)"
    return "fp32", f"{_bf16_line()} (no native bf16)"
