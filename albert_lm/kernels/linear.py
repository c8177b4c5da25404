"""Linear layers whose CPU matrix multiplies take the fastest path this machine has, found by timing.

Why: which library multiplies fastest depends on the CPU. On a 2-core AMD EPYC Zen 5 (AVX-512) MKL's
fp32 sgemm, what nn.Linear calls, reached 170-190 GFLOP/s and oneDNN's inner product
(`torch.ops.mkldnn._linear_pointwise`, the op torch.compile emits for CPU linears) 370-430; on a
2-core Zen 3 (AVX2 only) both reach 110-145, and oneDNN's grad-weight product on transposed operands
only 50-90. oneDNN's bf16 product does not exist at all below AVX-512 (creating the primitive fails).
So nothing is chosen by CPU name:
- a oneDNN path is used only where a probe of that exact primitive (dtype, packed weight or not,
  fused activation) has worked in this process (`onednn.primitive_works`);
- among the paths that work, each product shape is timed once and the fastest kept (`albert_lm.kernels.autotune`,
  cached on disk per machine): the forward product (F.linear, oneDNN, oneDNN with a packed weight; in
  inference with the activation, fused where oneDNN can), and in training the grad-input and
  grad-weight products (torch.mm or oneDNN). `benchmarks/timings/bench_gemm.py` shows the rates on your machine.
No library exposes this as a module, so it is written here.

`linear(x, weight, bias, activation)` is the one entry point:
- under CPU autocast (bf16) the input is cast to the autocast dtype first, as F.linear would be;
- inside `shared_weights` (the encoder's layer loop) each weight is cast, and packed if that path
  wins, once per forward and reused by every layer (`_Prepared`); training goes through `_Linear`,
  whose backward reuses the same prepared weight;
- anything else (CUDA, float64, the switch off) is F.linear.
bf16 on a CPU without native bf16 works (the plain path, or oneDNN's emulated one on AVX-512 without
bf16, timed like any other) with one warning when it is slower than fp32 (`albert_lm.kernels.precision`).
The primitives and their probes are in `albert_lm.kernels.onednn`.

Switches: ALBERT_LM_ONEDNN=0 (or `set_enabled(False)`) never uses oneDNN; ALBERT_LM_AUTOTUNE=0 keeps
oneDNN's paths where they work without timing (the choices measured best on the Zen 5); `use(...)`
turns oneDNN, packing or the once-per-forward casts off within a block (`albert bench`'s ablations).
Results differ between paths by summation order only (about 1e-6 relative in fp32); the parity tests
against transformers run with the tuned choices.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.kernels import autotune, onednn, precision
from albert_lm.kernels.onednn import ACTIVATIONS, activate, activation_fn, primitive_works

__all__ = ["ACTIVATIONS", "Linear", "activation_fn", "linear", "plain_matmuls", "reuse_casts"]
__all__ += ["set_enabled", "shared_weights", "use"]

logger = logging.getLogger(__name__)


# The switches (`set_enabled`, `use`): oneDNN's paths, packed weights, weights prepared once per block.
_ENABLED = os.environ.get("ALBERT_LM_ONEDNN", "1") != "0"
_PACKING = True
_REUSE_CASTS = True


def set_enabled(enabled: bool) -> None:
    """Turn the oneDNN paths on or off for this process (on by default where they work)."""
    global _ENABLED
    _ENABLED = bool(enabled)


@contextlib.contextmanager
def use(
    onednn: bool | None = None, packing: bool | None = None, reuse_casts: bool | None = None
) -> Iterator[None]:
    """Within this block, turn a speed choice on or off (None: leave it as it is); restored after.

    onednn: oneDNN's products where they work (else F.linear); packing: weights in oneDNN's blocked
    layout where the tuner finds it pays; reuse_casts: each weight cast and packed once per
    `shared_weights` block, not at every use. The settings are process-wide: switch them around
    whole forwards, not while another thread runs one.
    """
    global _ENABLED, _PACKING, _REUSE_CASTS
    was = (_ENABLED, _PACKING, _REUSE_CASTS)
    asked = (onednn, packing, reuse_casts)
    _ENABLED, _PACKING, _REUSE_CASTS = (w if a is None else bool(a) for w, a in zip(was, asked, strict=True))
    try:
        yield
    finally:
        _ENABLED, _PACKING, _REUSE_CASTS = was


def plain_matmuls() -> contextlib.AbstractContextManager[None]:
    """Within this block every linear is F.linear (what a graph exporter should capture: the model, not
    this CPU's kernel choices); the switch is restored after."""
    return use(onednn=False)


def enabled() -> bool:
    """oneDNN switched on and its fp32 primitive working here."""
    return _ENABLED and primitive_works(torch.float32)


def can_pack(dtype: torch.dtype = torch.float32) -> bool:
    """Whether a weight can be pre-packed into oneDNN's blocked layout for this dtype here."""
    return _ENABLED and _PACKING and primitive_works(dtype, packed=True)


# --------------------------------------------------------------------------- prepared weights
class _Prepared:
    """One weight made ready in one dtype: cast once, packed once, transposed-and-packed once.

    Packing (oneDNN's blocked weight layout, `_reorder_linear_weight`) made each product 3-15% faster
    on the machines we measured, but costs a reorder, so it is offered only for a weight used several
    times: ALBERT's shared layer uses each weight L times per forward. Inside `reuse_casts` a weight is
    prepared once per forward and kept by every layer's autograd node, so backward packs the transpose
    (for grad-input) once too. Whether the packed path is used is the tuner's choice.
    """

    __slots__ = ("weight", "packable", "uses", "_rows", "_packed", "_packed_t")

    def __init__(self, weight: torch.Tensor, packable: bool, rows: int, uses: int = 1):
        self.weight = weight  # detached, already in the compute dtype
        self.packable = packable
        self.uses = uses  # uses per block (backward runs after the block: it reads this, not _LOCAL)
        self._rows = rows  # the batch-size hint oneDNN picks its layout for
        self._packed: torch.Tensor | None = None
        self._packed_t: torch.Tensor | None = None

    def packed(self) -> torch.Tensor:
        """The weight (N, K) in oneDNN's blocked layout."""
        if self._packed is None:
            self._packed = onednn.pack(self.weight, self._rows)
        return self._packed

    def packed_t(self) -> torch.Tensor:
        """The transposed weight (K, N) in oneDNN's blocked layout: grad_x = grad @ W."""
        if self._packed_t is None:
            self._packed_t = onednn.pack(self.weight.t().contiguous(), self._rows)
        return self._packed_t


class _Local(threading.local):
    # Per thread: two threads running forwards at once must not share, or leave behind, a cache.
    cache: dict[tuple, Any] | None = None  # (id(param), dtype) -> cast; (id, "prepared", dtype) -> _Prepared
    uses: int = 1  # how many times the block uses each weight (the packing cost is spread over them)


_LOCAL = _Local()


def shared_weights(uses: int, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The block of a forward that uses each weight `uses` times (ALBERT's shared layers): on CPU each
    weight is cast, and packed, once for the block (`reuse_casts`); elsewhere, and in a graph being
    captured (torch.compile), the products are plain F.linear and there is nothing to reuse."""
    if device.type == "cpu" and not torch.compiler.is_compiling():
        return reuse_casts(uses)
    return contextlib.nullcontext()


@contextlib.contextmanager
def reuse_casts(uses: int = 2) -> Iterator[None]:
    """Within this block, prepare each weight (cast to the compute dtype, pack) once, not at every use.

    ALBERT applies its shared layer L times per forward; autocast alone would cast its weights L times
    and send L gradients back through L casts. The encoder wraps its layer loop in this block, so each
    weight is cast and packed once per forward (`_Prepared`). `uses`: how many times the block uses each
    weight (at least); packing is offered only from 2, and the tuner charges each use 1/uses of the
    reorder. Nested blocks share the outer cache; each thread has its own.
    """
    outer, outer_uses = _LOCAL.cache, _LOCAL.uses
    if outer is None and _REUSE_CASTS:
        _LOCAL.cache, _LOCAL.uses = {}, max(1, int(uses))
    try:
        yield
    finally:
        _LOCAL.cache, _LOCAL.uses = outer, outer_uses


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
        uses = _LOCAL.uses
        hit = cache[key] = _Prepared(_cast(weight, dtype), can_pack(dtype) and uses >= 2, rows, uses)
    return hit


# --------------------------------------------------------------------------- choosing a path
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def _bucket(rows: int) -> int:
    """Products are tuned per power-of-two row count, 16 to 2048 (beyond, the rates no longer move and
    timing would take seconds per shape)."""
    return min(2048, max(16, 1 << max(0, rows - 1).bit_length()))


def _paths(op: str, dtype: torch.dtype, packable: bool) -> list[str]:
    plain = "flinear" if op in ("infer", "forward") else "mm"
    names = [plain]
    if _ENABLED and primitive_works(dtype):
        names.append("onednn")
        if packable and op != "grad_weight":
            names.append("packed")
    return names


def _default(op: str, dtype: torch.dtype, names: list[str]) -> str:
    """The choice without timing: oneDNN's paths where they work (what measured best on the Zen 5)."""
    if op == "grad_weight":
        return "onednn" if "onednn" in names and dtype == torch.float32 else "mm"
    return names[-1]


def _candidates(
    op: str, names: list[str], m: int, k: int, n: int, dtype: torch.dtype, activation: str | None, uses: int
):
    """Callables computing the product each way on random inputs of this shape, for the tuner; the
    packed path carries 1/uses of the time its reorder takes (a weight is packed once per block)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)
    b = torch.zeros(n, dtype=dtype)
    grad = torch.randn(m, n, generator=g).to(dtype)
    fns: dict[str, autotune.Candidate] = {}
    for name in names:
        if name == "packed":
            source = w if op != "grad_input" else w.t().contiguous()
            try:
                weight = onednn.pack(source, m)
                reorder = min(
                    autotune.time_candidates(
                        {"r": functools.partial(onednn.pack, source, m)}, 0.02, 3
                    ).values()
                )
            except (RuntimeError, NotImplementedError) as e:  # the tuner drops a candidate that raises
                fns[name] = functools.partial(_raise, e)
                continue
        else:
            weight, reorder = w, 0.0
        if op in ("infer", "forward"):
            fn = functools.partial(_forward, name, x, weight, b, activation)
        elif op == "grad_input":
            fn = functools.partial(_grad_input, name, grad, weight)
        else:
            fn = functools.partial(_grad_weight, name, grad, x)
        fns[name] = (fn, reorder / uses) if name == "packed" else fn
    return fns


def _raise(error: Exception) -> None:
    raise error


_FELL_BACK: set[str] = set()


def _guarded(plain: Callable[[], torch.Tensor], path: str, run: Callable[[], torch.Tensor]) -> torch.Tensor:
    """run() (a oneDNN path); if oneDNN refuses this shape after all, plain() instead, logged once."""
    if path in ("flinear", "mm"):
        return run()
    try:
        return run()
    except (RuntimeError, NotImplementedError) as e:
        if path not in _FELL_BACK:
            _FELL_BACK.add(path)
            logger.warning("oneDNN %s path failed here (%s); using PyTorch's", path, str(e).splitlines()[0])
        return plain()


def _choose(
    op: str,
    m: int,
    k: int,
    n: int,
    dtype: torch.dtype,
    activation: str | None,
    packable: bool,
    uses: int = 1,
) -> str:
    names = _paths(op, dtype, packable)
    bucket = _bucket(m)
    key = f"{op} {_DTYPE_NAMES[dtype]} {bucket}x{k}x{n}"
    if op == "infer" and activation is not None:
        key += f" {activation}"
    if "packed" in names:
        key += f" packable/{uses}"
    return autotune.choose(
        key,
        names,
        _default(op, dtype, names),
        lambda: _candidates(op, names, bucket, k, n, dtype, activation if op == "infer" else None, uses),
    )


def _forward(path: str, x, w, b, activation: str | None = None) -> torch.Tensor:
    """x @ w^T + b (and the activation) by `path`; w is packed for "packed"."""
    if path == "flinear":
        return activate(F.linear(x, w, b), activation)
    if activation is None or primitive_works(x.dtype, path == "packed", activation):
        return onednn.mm(x, w, b, activation)
    return activate(onednn.mm(x, w, b), activation)


def _grad_input(path: str, grad, w) -> torch.Tensor:
    """grad (M, N) @ W (N, K); for "packed" w is the packed transpose."""
    if path == "mm":
        return torch.mm(grad, w)
    if path == "onednn":
        return onednn.mm(grad, w.t(), None)
    return onednn.mm(grad, w, None)


def _grad_weight(path: str, grad, x) -> torch.Tensor:
    """grad^T (N, M) @ x (M, K)."""
    return torch.mm(grad.t(), x) if path == "mm" else onednn.mm(grad.t(), x.t(), None)


class _Linear(torch.autograd.Function):
    """y = x W^T + b for training, each of the three products by the path chosen for its shape.

    x comes in the compute dtype (fp32, or bf16 under autocast, cast by the caller); weight and bias are
    the parameters, whose gradients go back in their own dtype. The prepared weight (cast once, packed
    once) is shared by every use of the weight in a `reuse_casts` block.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, prepared: _Prepared):
        b = None if bias is None else _cast(bias, x.dtype)  # once per reuse_casts block
        m, k = x.shape
        n = weight.shape[0]
        path = _choose("forward", m, k, n, x.dtype, None, prepared.packable, prepared.uses)
        ctx.save_for_backward(x)
        ctx.prepared = prepared
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return _guarded(
            lambda: F.linear(x, prepared.weight, b),
            path,
            lambda: _forward(path, x, prepared.packed() if path == "packed" else prepared.weight, b),
        )

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        prepared: _Prepared = ctx.prepared
        grad = grad.to(x.dtype).contiguous()
        m, k = x.shape
        n = grad.shape[1]
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            path = _choose("grad_input", m, k, n, x.dtype, None, prepared.packable, prepared.uses)
            grad_x = _guarded(
                lambda: torch.mm(grad, prepared.weight),
                path,
                lambda: _grad_input(path, grad, prepared.packed_t() if path == "packed" else prepared.weight),
            )
        if ctx.needs_input_grad[1]:
            path = _choose("grad_weight", m, k, n, x.dtype, None, False)
            grad_w = _guarded(lambda: torch.mm(grad.t(), x), path, lambda: _grad_weight(path, grad, x))
            grad_w = grad_w.to(ctx.dtypes[0])
        if ctx.dtypes[1] is not None and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0, dtype=torch.float32).to(ctx.dtypes[1])
        return grad_x, grad_w, grad_b, None


try:  # the device-type autocast queries; older torch releases only have the CPU-specific ones
    torch.get_autocast_dtype("cpu")
    _cpu_autocast_on = lambda: torch.is_autocast_enabled("cpu")  # noqa: E731
    _cpu_autocast_dtype = lambda: torch.get_autocast_dtype("cpu")  # noqa: E731
except (AttributeError, TypeError):
    _cpu_autocast_on = torch.is_autocast_cpu_enabled
    _cpu_autocast_dtype = torch.get_autocast_cpu_dtype


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    # As autocast: float64 is left alone
    if x.device.type == "cpu" and x.dtype != torch.float64 and _cpu_autocast_on():
        return _cpu_autocast_dtype()
    return None


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """activation(x @ weight^T + bias); activation is None or a hidden_act name (`ACTIVATIONS`)."""
    cast = _autocast_dtype(x)
    dtype = cast or x.dtype
    if not (
        _ENABLED
        and not torch.compiler.is_compiling()  # a captured graph takes F.linear; the compiler chooses
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and dtype in _DTYPE_NAMES
        and (cast is not None or weight.dtype == dtype)
        and x.numel() > 0
    ):
        return activate(F.linear(x, weight, bias), activation)
    if dtype == torch.bfloat16:
        precision.warn_if_bf16_is_slow()
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if cast is not None:
        x = x.to(cast)  # as autocast would; differentiable
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    prepared = _prepare(weight, dtype, x2.shape[0])
    # (entering a disabled autocast costs ~8 us, a tenth of a small layer's product: only when it is on)
    with torch.autocast("cpu", enabled=False) if cast is not None else contextlib.nullcontext():
        if needs_grad:
            y = activate(_Linear.apply(x2, weight, bias, prepared), activation)
        else:
            b = None if bias is None else _cast(bias, dtype)
            m, k = x2.shape
            path = _choose(
                "infer", m, k, weight.shape[0], dtype, activation, prepared.packable, prepared.uses
            )
            y = _guarded(
                lambda: _forward("flinear", x2, prepared.weight, b, activation),
                path,
                lambda: _forward(
                    path, x2, prepared.packed() if path == "packed" else prepared.weight, b, activation
                ),
            )
    return y.view(*shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) computed by `linear`, with an optional activation."""

    def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
        return linear(x, self.weight, self.bias, activation)
