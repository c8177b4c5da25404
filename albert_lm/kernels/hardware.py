"""What this machine is: CPU facts and instruction-set level, and the process set-up that suits it.

albert-lm runs on any x86-64 CPU (and others), from AVX2-only ones such as AMD Zen 3 to AVX-512 with
bf16 (Zen 4/5, Intel Cooper Lake and later) and AMX (Intel Sapphire Rapids and later). What differs
between them is not just speed but what works: oneDNN's bf16 matrix multiply needs AVX-512, and where
bf16 is emulated it runs several times slower than fp32 (a 2-core Zen 3: 10-17 GFLOP/s bf16 against
110-140 fp32). So nothing here trusts a CPU's name: `isa_level` reads the CPU's flags capped by the
emulation switches below, and `kernels` decides bf16 from a probe of the primitive and a measurement.

Emulation: oneDNN's ONEDNN_MAX_CPU_ISA, MKL's MKL_ENABLE_INSTRUCTIONS and ATen's ATEN_CPU_CAPABILITY
(all read when the process starts) make a bigger CPU behave like a smaller one; `isa_level` applies
the same caps, and the test suite runs its kernel tests a second time under AVX2 emulation.

Process set-up: `tune_cpu_allocator` makes glibc keep freed memory (fewer page faults per step); the
`albert` command calls it, the library never does.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

# Instruction-set levels that change what albert-lm can do, lowest first.
ISA_LEVELS = ("other", "avx2", "avx512", "avx512_bf16", "amx")
# The environment switches that cap what the libraries use, as a user would set them to emulate an
# AVX2-only CPU on a bigger one.
EMULATION_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
AVX2_EMULATION = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
}

# ONEDNN_MAX_CPU_ISA values (oneDNN's dnnl_cpu_isa names) -> our level; anything unknown caps nothing.
_ONEDNN_CAPS = {
    "SSE41": "other",
    "AVX": "other",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512",
    "AVX512_CORE_VNNI": "avx512",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16",
    "AVX10_1_512": "avx512_bf16",
}
_ATEN_CAPS = {"default": "other", "avx2": "avx2"}  # "avx512" caps nothing that matters here
_MKL_CAPS = {"SSE4_2": "other", "AVX": "other", "AVX2": "avx2", "AVX512": "avx512_bf16"}


@dataclass(frozen=True)
class CpuInfo:
    model: str  # "AMD EPYC 7B13", from /proc/cpuinfo (platform.processor() elsewhere)
    # "family 25 model 1 stepping 1": a virtual machine may name Zen 3 and Zen 5 both "AMD EPYC"
    generation: str
    cores: int  # logical CPUs this process may run on
    flags: frozenset[str]
    hardware_isa: str  # from the flags alone
    isa: str  # hardware_isa capped by the emulation variables in this process's environment
    emulation: dict[str, str]  # the emulation variables that are set

    def describe(self) -> str:
        emulated = f", emulating {self.isa} via {' '.join(f'{k}={v}' for k, v in self.emulation.items())}"
        generation = f" ({self.generation})" if self.generation else ""
        return f"{self.model}{generation}, {self.cores} cores, ISA {self.hardware_isa}" + (
            emulated if self.emulation else ""
        )


def _flag_level(flags: frozenset[str]) -> str:
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    avx512_core = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    if avx512_core and "avx512_bf16" in flags:
        return "avx512_bf16"
    if avx512_core:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "other"


def _capped(level: str, env: dict[str, str]) -> str:
    caps = [
        _ONEDNN_CAPS.get(env.get("ONEDNN_MAX_CPU_ISA", env.get("DNNL_MAX_CPU_ISA", "")).upper()),
        _MKL_CAPS.get(env.get("MKL_ENABLE_INSTRUCTIONS", "").upper()),
        _ATEN_CAPS.get(env.get("ATEN_CPU_CAPABILITY", "").lower()),
    ]
    rank = min([ISA_LEVELS.index(level)] + [ISA_LEVELS.index(c) for c in caps if c is not None])
    return ISA_LEVELS[rank]


def _read_cpuinfo() -> tuple[str, str, frozenset[str]]:
    """(model name, family/model/stepping, flags) of the first CPU in /proc/cpuinfo; elsewhere
    platform's name and no flags."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the end of the first CPU's block
            fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or platform.machine()
    generation = " ".join(
        f"{k.split()[-1]} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields
    )
    return model, generation, frozenset(fields.get("flags", "").split())


@functools.cache
def cpu_info() -> CpuInfo:
    """This machine's CPU as albert-lm sees it (read once per process)."""
    model, generation, flags = _read_cpuinfo()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    env = {k: os.environ[k] for k in EMULATION_ENV if os.environ.get(k)}
    level = _flag_level(flags)
    return CpuInfo(model, generation, cores, flags, level, _capped(level, env), env)


def isa_level() -> str:
    """avx2 / avx512 / avx512_bf16 / amx ("other" below AVX2 or off x86), emulation caps applied."""
    return cpu_info().isa


def tune_cpu_allocator() -> bool:
    """Keep freed memory in the process instead of returning it to the OS after every step.

    glibc hands blocks above its mmap threshold straight back to the kernel when freed, so a training
    step that frees and reallocates its activations takes hundreds of thousands of page faults (about
    7% of an albert-base bf16 step here, benchmarks/timings/bench_allocator.py). Raising the mmap threshold to
    its 32 MiB maximum and the trim threshold to 1 GiB keeps those pages mapped. Process-wide, so the
    `albert` command calls it rather than the library; returns False where glibc is not the allocator.
    """
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
