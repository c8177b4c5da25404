"""albert-base's whole pretraining step against transformers compiled at the same batch (docs/gpu.md).

Rows, in this order (after the first two compilations the batch-256 rows cost little; a killed run keeps
what it measured, --json being rewritten after every row; a failing row is kept in "errors"):
- "transformers": AlbertForPreTraining under torch.compile (the whole model), at --batch; every
  albert-lm row at that batch is alternated with it call by call (the ratio's denominator);
- "compiled": albert-lm's encoder under torch.compile, as `albert pretrain --torch-compile`;
- "static": the MLM head gathers a fixed --max-predictions positions per sequence (padded with ignored
  positions, BERT's max_predictions_per_seq): no data-dependent shape left in the step;
- "compiled-lamb": the global-norm clip and LAMB under torch.compile (fullgraph if it traces whole);
- "graphs": the static step (forward, backward, clip, LAMB) captured in one CUDA graph; "graphs+lamb":
  both; then transformers, compiled and graphs+lamb at --small-batch; last "graphs+lamb+objective".
Every side steps with albert-lm's LAMB; from compiled-lamb on `StaticLamb`, the same update with its
state and rate on the device (checked against albert-lm's LAMB on the CPU: lamb_check_max_abs_diff).
bf16 autocast, same seeded weights everywhere, one sequence in ten half padding, CUDA events, median of
--repeats; MFU as gpu_speed.py (encoder matrix multiplies, 3x forward, over the datasheet peak). Checks:
the first step's loss against eager albert-lm's (--loss-rtol) and the first update against an eager
step's, |dw - dw_eager| / |dw_eager| (bf16 gradients flip LAMB's smallest updates: a few tenths of a percent).
Rehearsal on a CPU (CUDA graphs skipped, the static step uncaptured; not a measurement):
  python benchmarks/experiments/gpu_step.py --device cpu --preset albert-tiny --batch 4 --repeats 2 \
    --budget 3000 --json step.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.bench.cuda import alternate, chip_peak, step_memory_mib
from albert_lm.bench.workloads import encoder_flops
from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.optim import build_optimizer, clip_by_global_norm, parameter_groups

# gpu_speed.py's helpers (this folder is sys.path[0]), imported so that mypy leaves that file to its own check
_speed = importlib.import_module("gpu_speed")
attempter, build, step_fn = _speed.attempter, _speed.build, _speed.step_fn
Step = Callable[[], torch.Tensor]
MAIN = ("transformers", "compiled", "static", "compiled-lamb", "graphs", "graphs+lamb")
# (row, which batch) in the run's order
ROWS = [(r, "batch") for r in MAIN] + [(r, "small") for r in ("transformers", "compiled", "graphs+lamb")]
ROWS.append(("graphs+lamb+objective", "batch"))
HF_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels", "sentence_order_label")


class StaticLamb:
    """albert-lm's LAMB (`albert_lm.training.optim.Lamb`: no bias correction, decoupled decay, per-tensor
    trust ratio) with all its state on the parameters' device and the rate a 0-d tensor (`lr.fill_`):
    a CUDA graph can capture its step, and torch.compile makes one graph whatever the schedule does."""

    def __init__(self, groups: list[dict], lr: float, betas=(0.9, 0.999), eps: float = 1e-6) -> None:
        self.groups = [(list(g["params"]), float(g["weight_decay"]), bool(g["trust_ratio"])) for g in groups]
        self.groups = [g for g in self.groups if g[0]]
        device = self.groups[0][0][0].device
        self.lr, self.step_count = torch.tensor(float(lr), device=device), torch.zeros((), device=device)
        self.betas, self.eps = betas, eps
        self.m = [[torch.zeros_like(p, dtype=torch.float32) for p in g[0]] for g in self.groups]
        self.v = [[torch.zeros_like(p, dtype=torch.float32) for p in g[0]] for g in self.groups]

    def reset(self) -> None:
        """Back to no step taken, in place (a captured graph keeps its addresses)."""
        self.step_count.zero_()
        for ts in self.m + self.v:
            torch._foreach_zero_(ts)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for params, _, _ in self.groups:
            for p in params:
                p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        self.step_count.add_(1)
        for (every, decay, trust), all_m, all_v in zip(self.groups, self.m, self.v, strict=True):
            live = [
                i for i, p in enumerate(every) if p.grad is not None
            ]  # as albert-lm's LAMB: the rest wait
            params, ms, vs = [every[i] for i in live], [all_m[i] for i in live], [all_v[i] for i in live]
            grads = [p.grad for p in params]
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, grads, alpha=1.0 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1.0 - b2)
            denominators = torch._foreach_sqrt(vs)
            torch._foreach_add_(denominators, self.eps)
            updates = torch._foreach_div(ms, denominators)  # m / (sqrt(v) + eps)
            if decay != 0:
                torch._foreach_add_(updates, params, alpha=decay)
            if trust:
                w_norm = torch.stack(torch._foreach_norm(params))
                u_norm = torch.stack(torch._foreach_norm(updates))
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                torch._foreach_mul_(updates, list((ratio * -self.lr).unbind()))
            else:
                torch._foreach_mul_(updates, -self.lr)
            torch._foreach_add_(params, updates)


def check_lamb() -> float:
    """Max |weight difference| of StaticLamb against albert-lm's LAMB after 3 clipped steps from the same
    weights and gradients (albert-tiny, CPU; the rate changed before the third step)."""
    torch.manual_seed(0)
    a = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny"))
    b = copy.deepcopy(a)
    ref, ours = build_optimizer(a, "lamb", lr=1e-3), StaticLamb(parameter_groups(b), lr=1e-3)
    pa, pb = list(a.parameters()), list(b.parameters())
    g = torch.Generator().manual_seed(1)
    for i in range(3):
        if i == 2:  # a new rate
            ref.param_groups[0]["lr"] = ref.param_groups[1]["lr"] = 5e-4
            ours.lr.fill_(5e-4)
        for x, y in zip(pa, pb, strict=True):
            x.grad = torch.randn(x.shape, generator=g)
            y.grad = x.grad.clone()
        clip_by_global_norm(pa, 1.0), clip_by_global_norm(pb, 1.0)
        ref.step(), ours.step()
    return max(float((x - y).detach().abs().max()) for x, y in zip(pa, pb, strict=True))


class StaticObjective(nn.Module):
    """`PretrainingObjective` (MLM + SOP, the same loss and STATS) with a fixed number of masked positions
    per sequence: `masked_lm_positions` (B, P), `masked_lm_ids` (B, P) IGNORE_INDEX at the padding slots.
    No data-dependent shape, no host sync: torch.compile needs no dynamic shapes, a CUDA graph can hold it."""

    def __init__(self, model: AlbertForPreTraining) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model.albert(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
        hidden = out.last_hidden_state
        b, s, h = hidden.shape
        rows = (batch["masked_lm_positions"] + torch.arange(b, device=hidden.device)[:, None] * s).reshape(-1)
        logits = self.model.predictions(hidden.reshape(b * s, h).index_select(0, rows)).float()  # (B P, V)
        target = batch["masked_lm_ids"].reshape(-1)
        valid = target != IGNORE_INDEX
        mlm_sum = F.cross_entropy(logits, target, reduction="sum", ignore_index=IGNORE_INDEX)
        count = valid.sum()
        sop_logits = self.model.sop_classifier(out.pooler_output).float()
        sop_target = batch["sentence_order_label"].view(-1)
        sop_sum = F.cross_entropy(sop_logits, sop_target, reduction="sum")
        loss = mlm_sum / count.clamp(min=1) + sop_sum / sop_target.numel()
        stats = [mlm_sum.detach(), count.float(), ((logits.argmax(-1) == target) & valid).sum().float()]
        stats += [sop_sum.detach(), torch.full_like(sop_sum, sop_target.numel()).detach()]
        stats += [(sop_logits.argmax(-1) == sop_target).sum().float(), batch["attention_mask"].sum().float()]
        return loss, torch.stack(stats)


def make_batch(vocab: int, batch: int, seq: int, pred: int, device: torch.device) -> dict[str, Any]:
    """Random ids, one sequence in ten half padding, min(pred, 15%) masked positions per sequence
    (never [CLS]) as dense `labels` and as (B, pred) `masked_lm_positions` / `masked_lm_ids`."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.full((batch,), seq)
    lengths[::10] = seq // 2
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    keep = torch.arange(seq)[None] < lengths[:, None]
    positions, targets = torch.zeros(batch, pred, dtype=torch.long), torch.full((batch, pred), IGNORE_INDEX)
    for i, n in enumerate(lengths.tolist()):
        k = min(pred, max(1, round(0.15 * n)))
        pos = (torch.randperm(n - 1, generator=g)[:k] + 1).sort().values
        positions[i, :k], targets[i, :k] = pos, ids[i, pos]
    labels = torch.full((batch, seq), IGNORE_INDEX).scatter_(1, positions, targets)  # slot 0: position 0
    data = dict(input_ids=ids.masked_fill(labels != IGNORE_INDEX, 4).masked_fill(~keep, 0), labels=labels)
    data.update(attention_mask=keep.long(), masked_lm_positions=positions, masked_lm_ids=targets)
    data["token_type_ids"] = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    data["sentence_order_label"] = torch.randint(0, 2, (batch,), generator=g)
    return {k: v.to(device) for k, v in data.items()}


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


@dataclass
class Side:
    """albert-lm at one batch: model (encoder compiled), weights, batch, eager losses, eager step's dw."""

    model: AlbertForPreTraining
    objective: PretrainingObjective
    static: StaticObjective
    init: dict[str, torch.Tensor]
    data: dict[str, torch.Tensor]
    eager_loss: float
    eager_static_loss: float
    w0: torch.Tensor
    dw: torch.Tensor


def make_side(config: AlbertConfig, batch: int, args: argparse.Namespace, device: torch.device) -> Side:
    model, objective = build(config, device, None, False, False)
    static = StaticObjective(model)
    data = make_batch(config.vocab_size, batch, args.seq, args.max_predictions, device)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        eager_static = float(static(data)[0])
    w0, step = flat(model), step_fn(model, objective, data, device)
    eager = float(step().detach())
    dw = flat(model) - w0
    model.load_state_dict(init)
    model.albert.compile()  # as `albert pretrain --torch-compile`
    return Side(model, objective, static, init, data, eager, eager_static, w0, dw)


def transformers_step(side: Side, device: torch.device) -> Step:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    side.model.load_state_dict(side.init)
    with tempfile.TemporaryDirectory() as d:
        side.model.save_pretrained(d)
        theirs: Any = transformers.AlbertForPreTraining.from_pretrained(d)
    theirs = theirs.to(device).train()
    theirs.sop_classifier.dropout.p = 0.0
    compiled = torch.compile(theirs, dynamic=False)
    data = {k: side.data[k] for k in HF_KEYS}
    return step_fn(theirs, lambda batch: (compiled(**batch).loss,), data, device)


def lamb_update(params: list, opt: StaticLamb, notes: dict[str, Any], compiled: bool) -> Callable[[], None]:
    """clip + LAMB, eager or under torch.compile: fullgraph, or in pieces when that fails to trace (noted)."""

    def update() -> None:
        clip_by_global_norm(params, 1.0)
        opt.step()

    if not compiled:
        return update
    fns = [torch.compile(update, fullgraph=True), torch.compile(update)]

    def call() -> None:
        try:
            fns[0]()
            notes.setdefault("lamb_fullgraph", len(fns) == 2)
        except Exception as e:  # a graph break on the first call only: compiled in pieces
            if "lamb_fullgraph" in notes or len(fns) == 1:
                raise
            notes["lamb_fullgraph_error"] = f"{type(e).__name__}: {e}"[:300]
            fns.pop(0)
            call()

    return call


def captured(run_once: Step, step: Step, restore: Callable, device: torch.device, notes: dict) -> Step:
    """run_once (forward, backward, clip, LAMB) captured in a CUDA graph after 3 warm-up steps (`step`:
    run_once, gradients cleared) on a side stream; on a CPU `step` uncaptured. Then the weights and LAMB
    restored and one step replayed: the model is one step from its initial weights (notes["replay_loss"])."""
    cuda = device.type == "cuda"
    t0, stream = time.perf_counter(), torch.cuda.Stream() if cuda else None
    if stream is not None:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        losses = [step().detach() for _ in range(3)]
    if stream is not None:
        torch.cuda.current_stream().wait_stream(stream)
    notes["first_loss"] = float(losses[0])
    if cuda:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = run_once()  # the gradients are the graph's: replays overwrite them

        def replayed() -> torch.Tensor:
            graph.replay()
            return static_loss

        step = replayed
        notes["memory_mib"] = (torch.cuda.max_memory_allocated() - before) / 2**20
    else:
        notes["graphs"] = "skipped: CUDA graphs need a CUDA device (the static step ran uncaptured)"
    notes["first_step_s"] = time.perf_counter() - t0
    restore()
    notes["replay_loss"] = float(step())
    return step


def albert_step(side: Side, name: str, config: AlbertConfig, device: torch.device, notes) -> tuple[Step, Any]:
    """(step, model) of albert-lm row `name`, from the initial weights."""
    model, static = side.model, name != "compiled" and name != "compiled-lamb"
    objective: Any = side.static if static else side.objective
    if name == "graphs+lamb+objective":  # a model of its own: the encoder not compiled apart
        model = build(config, device, None, False, False)[0]
        objective = torch.compile(StaticObjective(model))
    model.load_state_dict(side.init)
    model.zero_grad(set_to_none=True)
    if name in ("compiled", "static"):
        return step_fn(model, objective, side.data, device), model
    params = [p for p in model.parameters() if p.requires_grad]
    opt = StaticLamb(parameter_groups(model), lr=1e-5)
    update = lamb_update(params, opt, notes, compiled="lamb" in name)
    graphs = name.startswith("graphs")

    def run_once() -> torch.Tensor:
        # the autocast cache of weight casts outlives a captured step: off (PyTorch's CUDA graphs notes)
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not graphs):
            loss = objective(side.data)[0]
        loss.backward()
        update()
        return loss

    def step() -> torch.Tensor:
        loss = run_once()
        opt.zero_grad()
        return loss

    def restore() -> None:
        model.load_state_dict(side.init)
        opt.reset()

    return (captured(run_once, step, restore, device, notes) if graphs else step), model


def run_row(name: str, batch: int, state: dict[str, Any], config, args, device, peak) -> dict[str, Any]:
    """One row: its step built (compiled, captured), its first step checked, then timed alternated with
    transformers compiled at the same batch."""
    sides, refs = state["sides"], state["refs"]
    if batch not in sides:
        sides[batch] = make_side(config, batch, args, device)
    side, notes, t0 = sides[batch], dict[str, Any](), time.perf_counter()
    tf = name == "transformers"
    step, model = (
        (transformers_step(side, device), None) if tf else albert_step(side, name, config, device, notes)
    )
    if "first_loss" not in notes:
        notes["first_loss"] = float(step().detach())
    notes.setdefault("first_step_s", time.perf_counter() - t0)  # building, compiling, the first step
    if model is not None:
        notes["update_rel_diff"] = float((flat(model) - side.w0 - side.dw).norm() / side.dw.norm())
    refs.update({batch: step} if tf else {})
    ref = None if tf else refs.get(batch)
    times = alternate({"row": step, **({"ref": ref} if ref else {})}, args.repeats, args.warmup, device)
    ms = statistics.median(times["row"])
    ref_ms = statistics.median(times["ref"]) if ref else (ms if tf else None)
    flops = 3 * encoder_flops(config, batch, args.seq)
    losses = [notes[k] for k in ("first_loss", "replay_loss") if k in notes]
    loss_ok = [abs(x / side.eager_loss - 1) <= args.loss_rtol for x in losses]
    memory = notes.pop("memory_mib", None)
    return {
        "variant": name, "batch": batch, "seq": args.seq, "ms": ms, "tokens_per_s": batch * args.seq / ms * 1e3,
        "mfu": flops / ms / 1e9 / peak if peak else None, "vs_transformers": ref_ms / ms if ref_ms else None,
        "transformers_ms": ref_ms, "memory_mib": memory if memory is not None else step_memory_mib(step, device),
        "eager_loss": side.eager_loss, "eager_static_loss": side.eager_static_loss, "loss_ok": all(loss_ok),
        **notes,
    }  # fmt: skip


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(result: dict[str, Any]) -> str:
    out = [f"{result['device']}, {result['preset']}, seq {result['seq']}, torch {result['torch']}"]
    out += ["| row | batch | ms | tokens/s | MFU | vs transformers | peak MiB | loss / eager | dw diff |"]
    out += ["|---" * 9 + "|"]
    for r in result["rows"]:
        out.append(
            f"| {r['variant']} | {r['batch']} | {r['ms']:.1f} | {r['tokens_per_s']:,.0f} | {_f(r['mfu'], '.1%')} "
            f"| {_f(r['vs_transformers'], '.2f')}x | {_f(r['memory_mib'], ',.0f')} | {r['first_loss']:.4f} / "
            f"{r['eager_loss']:.4f}{'' if r['loss_ok'] else ' (!)'} | {_f(r.get('update_rel_diff'), '.3f')} |"
        )
    out += [f"error: {k}: {v.splitlines()[0][:150]}" for k, v in result.get("errors", {}).items()]
    out += [f"skipped: {k}: {v}" for k, v in result.get("skipped", {}).items()]
    return "\n".join(out)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--batch", type=int, default=256, help="every row's batch")
    p.add_argument("--small-batch", type=int, help="the second batch (default: --batch / 2; 0: none)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--max-predictions", type=int, default=20, help="masked positions a sequence (static)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3, help="alternated calls before timing")
    p.add_argument("--rows", default=",".join(dict.fromkeys(r for r, _ in ROWS)), help="comma-separated rows")
    p.add_argument("--budget", type=float, default=125.0, help="seconds after which no row starts")
    p.add_argument("--loss-rtol", type=float, default=1e-2, help="first-step loss against the eager one")
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args()
    if args.small_batch is None:
        args.small_batch = args.batch // 2
    return args


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    torch._dynamo.config.automatic_dynamic_shapes = False  # each batch its own static graph, as a real run
    torch._dynamo.config.recompile_limit = 64  # many models and batches in one process: never fall to eager
    torch._dynamo.config.accumulated_recompile_limit = 512
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (rehearsal)"
    peak = chip_peak(name) if device.type == "cuda" else None
    result: dict[str, Any] = dict(device=name, torch=torch.__version__, peak_bf16_tflops=peak, rows=[])
    result.update(preset=args.preset, seq=args.seq, date=time.strftime("%Y-%m-%d"), command=sys.argv[1:])
    attempt = attempter(result, args.json, device)
    result["lamb_check_max_abs_diff"] = attempt("LAMB check (CPU)", check_lamb)
    config = AlbertConfig.from_preset(args.preset)
    state: dict[str, Any] = {"sides": {}, "refs": {}}
    wanted = args.rows.split(",")
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by `timeout`: the table of what it measured printed
    try:
        for row, which in ROWS:
            batch = args.batch if which == "batch" else args.small_batch
            if row not in wanted or not batch:
                continue
            result["running"] = label = f"{row} b{batch}"  # left in the JSON of a run stopped during it
            if time.perf_counter() - start > args.budget:
                result.setdefault("skipped", {})[label] = f"--budget {args.budget:.0f} s spent"
                continue
            out = attempt(label, lambda r=row, b=batch: run_row(r, b, state, config, args, device, peak))
            if out:
                out["elapsed_s"] = time.perf_counter() - start
                result["rows"].append(out)
                args.json.write_text(json.dumps(result, indent=1))
        result.pop("running", None)
    finally:
        result["elapsed_s"] = time.perf_counter() - start
        args.json.write_text(json.dumps(result, indent=1))
        print(table(result), flush=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # stopped (SIGTERM or Ctrl-C): the table of what it measured is printed
        sys.exit(130)
