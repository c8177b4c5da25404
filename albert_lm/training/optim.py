"""LAMB as ALBERT was pretrained with it, google-research's AdamW, global-norm clipping, and the schedule.

Paper Section 4.1: "we use the LAMB optimizer with a learning rate of 0.00176", batch 4096, 125k steps.
The reference is google-research/albert `lamb_optimizer.py` + `optimization.py`; this module follows
them step for step and writes down each choice:

- Moments: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 with b1 0.9, b2 0.999, eps 1e-6.
- **No bias correction** by default: google-research's LAMBOptimizer and AdamWeightDecayOptimizer
  both use the raw m / (sqrt(v) + eps). `bias_correction=True` gives Adam's m/(1-b1^t), v/(1-b2^t)
  (what NVIDIA's and the LAMB paper's v3 algorithm do), for those who want it.
- Decoupled weight decay 0.01 added to the update (update += wd * w), not to the gradient.
- Trust ratio ||w|| / ||update|| per tensor, 1 when either norm is 0.
- LayerNorm weights and every bias (google-research's name patterns "LayerNorm", "layer_norm", "bias",
  which also catch the MLM and SOP output biases) are excluded from weight decay *and* from the trust
  ratio (google-research sets exclude_from_layer_adaptation = exclude_from_weight_decay). Here they are
  found by module type (nn.LayerNorm) and by ndim == 1, which selects the same tensors.
- Gradients are clipped to global norm 1.0 with TF's formula g * c / max(||g||, c) before the step.
- Learning rate: tf.train.polynomial_decay from the peak to 0 over all training steps (power 1 =
  linear), with the first `warmup` steps replaced by peak * step / warmup. So step 0 runs with lr 0,
  and after warmup the rate is peak * (1 - step / total) ** power, not a decay restarted at warmup's end.

AdamW here is google-research's AdamWeightDecayOptimizer: the same update without the trust ratio.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import overload

import torch
from torch import nn

logger = logging.getLogger(__name__)

OPTIMIZERS = ("lamb", "adamw")


class NonFiniteLossError(ValueError):
    """The loss (or the gradient) became inf or NaN: the run stops without saving the step."""


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2020) as google-research/albert's LAMBOptimizer.

    Each param group may set `weight_decay` and `trust_ratio` (bool); `parameter_groups()` builds the
    two groups the paper used. `trust_ratio=False` everywhere is google-research's AdamW (see `AdamW`).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1.76e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        trust_ratio: bool = True,
        bias_correction: bool = False,
    ) -> None:
        if lr < 0:
            raise ValueError(f"learning rate must be >= 0, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            trust_ratio=trust_ratio,
            bias_correction=bias_correction,
        )
        super().__init__(params, defaults)

    # The overloads of `torch.optim.Optimizer.step`: a closure's loss is returned, else None.
    @overload
    def step(self, closure: None = None) -> None: ...
    @overload
    def step(self, closure: Callable[[], float]) -> float: ...
    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            params = [p for p in group["params"] if p.grad is not None]
            if _foreach_ready(params, group):
                self._step_foreach(group, params)
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                # Moments in fp32 whatever the parameter dtype (google-research keeps them fp32).
                g = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                m.mul_(b1).add_(g, alpha=1.0 - b1)
                v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
                if group["bias_correction"]:
                    t = float(state["step"])
                    update = (m / (1.0 - b1**t)) / ((v / (1.0 - b2**t)).sqrt_().add_(group["eps"]))
                else:
                    update = m / v.sqrt().add_(group["eps"])
                w = p.float()
                if group["weight_decay"] != 0:
                    update.add_(w, alpha=group["weight_decay"])
                ratio: float | torch.Tensor = 1.0
                if group["trust_ratio"]:
                    w_norm = torch.linalg.vector_norm(w)
                    u_norm = torch.linalg.vector_norm(update)
                    # Kept as a tensor: no host sync per parameter on GPU.
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    state["trust_ratio"] = ratio.detach()
                p.copy_((w - group["lr"] * ratio * update).to(p.dtype))
        return loss

    def _step_foreach(self, group: dict, params: list[torch.Tensor]) -> None:
        """The same update for a whole group in a few multi-tensor kernels (`torch._foreach_*`): on a GPU
        the per-tensor loop launches ~12 small kernels per tensor, which for a 100-tensor model costs more
        than the arithmetic. Elementwise it is the loop's arithmetic; only the norms' summation order may
        differ. Used on CUDA (`_foreach_ready`); the CPU keeps the loop."""
        b1, b2 = group["betas"]
        states = [self.state[p] for p in params]
        for p, state in zip(params, states, strict=True):
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        grads = [p.grad for p in params if p.grad is not None]  # all of them: the caller's selection
        ms = [s["exp_avg"] for s in states]
        vs = [s["exp_avg_sq"] for s in states]
        torch._foreach_add_([s["step"] for s in states], 1)
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, grads, alpha=1.0 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1.0 - b2)
        denominators = torch._foreach_sqrt(vs)
        torch._foreach_add_(denominators, group["eps"])
        updates = torch._foreach_div(ms, denominators)  # m / (sqrt(v) + eps)
        if group["weight_decay"] != 0:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        if group["trust_ratio"]:
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(updates))
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            for state, r in zip(states, ratio.unbind(), strict=True):
                state["trust_ratio"] = r
            torch._foreach_mul_(updates, list(ratio.unbind()))
        torch._foreach_add_(params, updates, alpha=-group["lr"])


def _foreach_ready(params: list[torch.Tensor], group: dict) -> bool:
    """Whether `Lamb._step_foreach` may take this group: fp32 CUDA tensors with dense fp32 gradients, no
    bias correction (its step counts are per tensor)."""
    return (
        bool(params)
        and not group["bias_correction"]
        and all(
            p.is_cuda
            and p.dtype == torch.float32
            and p.grad is not None
            and p.grad.dtype == torch.float32
            and not p.grad.is_sparse
            for p in params
        )
    )


class AdamW(Lamb):
    """google-research's AdamWeightDecayOptimizer: Adam without bias correction, decoupled decay."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], **kwargs) -> None:
        super().__init__(params, **kwargs)
        for group in self.param_groups:
            group["trust_ratio"] = False


def is_excluded_from_decay(module: nn.Module, param_name: str, param: torch.Tensor) -> bool:
    """LayerNorm weights and all biases (1-D tensors): google-research's "LayerNorm|layer_norm|bias"."""
    return isinstance(module, nn.LayerNorm) or param.ndim <= 1


def parameter_groups(model: nn.Module, weight_decay: float = 0.01) -> list[dict]:
    """Two groups: decayed + trust-ratio tensors, and LayerNorm/bias tensors with neither.

    Shared (tied) parameters appear once. Parameters with requires_grad=False are left out.
    """
    decay: list[torch.Tensor] = []
    no_decay: list[torch.Tensor] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            (no_decay if is_excluded_from_decay(module, name, p) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay, "trust_ratio": True},
        {"params": no_decay, "weight_decay": 0.0, "trust_ratio": False},
    ]


def build_optimizer(
    model: nn.Module,
    name: str = "lamb",
    lr: float = 1.76e-3,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    bias_correction: bool = False,
) -> Lamb:
    """The paper's optimizer (`lamb`) or google-research's `adamw`, with the paper's parameter groups."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    groups = parameter_groups(model, weight_decay)
    cls = Lamb if name == "lamb" else AdamW
    return cls(
        groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction
    )


@torch.no_grad()
def clip_by_global_norm(params: Iterable[torch.Tensor], max_norm: float = 1.0) -> torch.Tensor:
    """Scale all gradients by max_norm / max(global_norm, max_norm), TF's clip_by_global_norm.

    Returns the global norm before clipping (a 0-d fp32 tensor). torch's clip_grad_norm_ adds 1e-6 to
    the denominator; TF's formula is kept so a step matches google-research exactly.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if all(g.is_cuda and g.dtype == torch.float32 for g in grads):  # two multi-tensor kernels, not 2N
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        scale = max_norm / torch.clamp(total, min=max_norm)
        torch._foreach_mul_(grads, scale)
        return total
    norms = torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
    total = torch.linalg.vector_norm(norms)
    scale = max_norm / torch.clamp(total, min=max_norm)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total


def learning_rate_factor(step: int, warmup_steps: int, total_steps: int, power: float = 1.0) -> float:
    """The multiplier of the peak rate at optimizer step `step` (0-based), as google-research.

    Warmup: step / warmup_steps while step < warmup_steps. Then polynomial decay computed from step 0:
    (1 - min(step, total) / total) ** power, reaching 0 at `total_steps`.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return step / warmup_steps
    if total_steps <= 0:
        return 1.0
    return (1.0 - min(step, total_steps) / total_steps) ** power


PAPER_WARMUP_FRACTION = 3125 / 125_000  # the paper's warm-up: 3125 of 125,000 steps (2.5%)


def fitted_warmup(warmup_steps: int, total_steps: int, fraction: float) -> int:
    """`fit_warmup`'s warm-up, without its warning (for what reports the run)."""
    if total_steps <= 0 or warmup_steps < total_steps:
        return warmup_steps
    return max(1, round(total_steps * fraction))


def fit_warmup(warmup_steps: int, total_steps: int, fraction: float, what: str) -> int:
    """The warm-up a run of `total_steps` gets: `warmup_steps`, unless that is the whole run or more (the
    rate would never reach its peak, and the run would train at a sliver of it without a word): then
    `fraction` of the run, said in a warning."""
    fitted = fitted_warmup(warmup_steps, total_steps, fraction)
    if fitted == warmup_steps:
        return warmup_steps
    logging.getLogger("albert_lm").warning(
        "%s: warm-up of %d steps is not shorter than the run (%d steps): the learning rate would never reach "
        "its peak; warming up over %d step%s instead (%.3g%% of the run). A --warmup-steps below %d is used "
        "as given.",
        what,
        warmup_steps,
        total_steps,
        fitted,
        "" if fitted == 1 else "s",
        100 * fitted / total_steps,
        total_steps,
    )
    return fitted


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, power: float = 1.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR over `learning_rate_factor`; its state (the step) goes into checkpoints."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: learning_rate_factor(s, warmup_steps, total_steps, power)
    )


class TimeBudgetFactor:
    """The learning-rate factor of a run bounded by time (Izsak et al., 2021: the schedule follows the
    clock, so it is complete when the budget is spent, whatever the machine's speed).

    Warmup over the first `warmup_steps` optimizer steps as `learning_rate_factor`; then polynomial decay
    over the fraction of the budget spent, `progress`, which the loop sets before each step:
    (1 - progress) ** power, 0 when the budget is gone. A callable object, so LambdaLR saves `progress`
    in checkpoints and a resumed run continues the schedule where it stood.
    """

    def __init__(self, warmup_steps: int, power: float = 1.0) -> None:
        self.warmup_steps, self.power, self.progress = warmup_steps, power, 0.0

    def __call__(self, step: int) -> float:
        decay = max(0.0, 1.0 - self.progress) ** self.power
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return min(step / self.warmup_steps, decay)
        return decay


def scheduled_warmup(
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    warmup_steps: int,
    max_steps: int,
    fraction: float = PAPER_WARMUP_FRACTION,
) -> int:
    """The warm-up a run's `scheduler` has: `warmup_steps` fitted to a run not longer than it (`fit_warmup`,
    `fraction` of the run: pretraining's is the paper's), or, under a time budget, to the steps the budget
    allows (the clock sets it once it has measured the pace)."""
    factor = getattr(scheduler, "lr_lambdas", [None])[0]
    if isinstance(factor, TimeBudgetFactor):
        return factor.warmup_steps
    return fitted_warmup(warmup_steps, max_steps, fraction)


def build_time_budget_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, power: float = 1.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR over a `TimeBudgetFactor` (reach it as `scheduler.lr_lambdas[0]` to set its progress)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, TimeBudgetFactor(warmup_steps, power))


def scale_learning_rate(batch_size: int, reference_lr: float = 1.76e-3, reference_batch: int = 4096) -> float:
    """The paper's rate scaled to another global batch by the square root rule.

    LAMB's authors scale the rate with sqrt(batch) (You et al., 2020, Section 4); from 0.00176 at
    4096 this gives e.g. 2.2e-4 at 64 and 6.2e-4 at 512. A starting point, not a guarantee: small
    batches are noisier, and a longer warmup helps more than a smaller rate.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    return reference_lr * math.sqrt(batch_size / reference_batch)


def time_budget_spent(
    scheduler: torch.optim.lr_scheduler.LRScheduler, elapsed_s: float, budget_s: float | None
) -> bool:
    """With a time budget: set the schedule's progress from the time spent (the scheduler is
    `build_time_budget_scheduler`'s) and say whether the budget is gone. Without one: False. The one
    check of every loop bounded by time (pretraining, distillation)."""
    if budget_s is None:
        return False
    factor = scheduler.lr_lambdas[0]  # type: ignore[attr-defined]
    assert isinstance(factor, TimeBudgetFactor), "a time budget needs build_time_budget_scheduler"
    factor.progress = min(1.0, elapsed_s / budget_s)
    return elapsed_s >= budget_s


def rate_from_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """The optimizer's learning rate set from `scheduler` at its restored step: a run resumed with another
    length has a schedule of that length, whose rate its next step must take (the rate a checkpoint restores
    is the old schedule's). Of the run's own schedule, the rate it restored (the same product as its step)."""
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        step, groups = scheduler.last_epoch, scheduler.optimizer.param_groups
        for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
            group["lr"] = base * factor(step)
        scheduler._last_lr = [group["lr"] for group in groups]  # what get_last_lr() says
