"""Pretraining speed: one full training step (forward, backward, clipping, LAMB) in tokens/s.

    python benchmarks/bench_pretrain.py --preset albert-base --batch 8 --seq 128 --repeats 5

Compares, in one process with interleaved timings so machine noise hits both alike:
- ours: albert-lm's `PretrainingObjective` (MLM logits only at the ~15% masked positions, as
  google-research gathers them) on albert-lm's AlbertForPreTraining;
- transformers: `transformers.AlbertForPreTraining(..., labels=, sentence_order_label=)`, which computes
  all B x S x V logits and its own loss.
Both start from the same weights and use the same optimizer (albert-lm's LAMB) and the same batch
(15% of the tokens masked), for each precision asked (fp32, and bf16 autocast). Reports the median
tokens/s (B x S per step, padding none) with min-max, and the ratio ours / transformers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time

import torch

from albert_lm.config import AlbertConfig
from albert_lm.heads import AlbertForPreTraining
from albert_lm.optim import build_optimizer, clip_by_global_norm
from albert_lm.pretrain import PretrainingObjective


def _batch(vocab: int, b: int, s: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, s), generator=g)
    masked = torch.rand(b, s, generator=g) < 0.15
    masked[:, 0] = False
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    ids = torch.where(masked, torch.full_like(ids, 4), ids)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": (torch.arange(s) >= s // 2).long().expand(b, s).contiguous(),
        "labels": labels,
        "sentence_order_label": torch.randint(0, 2, (b,), generator=g),
    }


def _step(loss_fn, model, opt, batch, precision: str) -> float:
    start = time.perf_counter()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with ctx:
        loss = loss_fn(batch)
    loss.backward()
    clip_by_global_norm(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = p.parse_args()

    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = AlbertForPreTraining(AlbertConfig.from_preset(args.preset)).train()
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d).train()
    # Pretraining as google-research runs it: no dropout anywhere (the v2 configs), none in the SOP head.
    ours.sop_classifier.dropout.p = 0.0
    theirs.sop_classifier.dropout.p = 0.0
    objective = PretrainingObjective(ours, "sop")
    batch = _batch(ours.config.vocab_size, args.batch, args.seq)
    with torch.no_grad():
        a = objective(batch)[0].item()
        b = theirs(**batch).loss.item()
    print(f"same weights, same batch: loss ours {a:.5f}, transformers {b:.5f}")

    def ours_loss(x):
        return objective(x)[0]

    def theirs_loss(x):
        return theirs(**x).loss

    opt_ours = build_optimizer(ours, "lamb", lr=1e-4)
    opt_theirs = build_optimizer(theirs, "lamb", lr=1e-4)
    tokens = args.batch * args.seq
    results = []
    for precision in args.precision:
        for _ in range(args.warmup):
            _step(ours_loss, ours, opt_ours, batch, precision)
            _step(theirs_loss, theirs, opt_theirs, batch, precision)
        t_ours, t_theirs = [], []
        for _ in range(args.repeats):
            t_ours.append(_step(ours_loss, ours, opt_ours, batch, precision))
            t_theirs.append(_step(theirs_loss, theirs, opt_theirs, batch, precision))
        row = {"precision": precision}
        for name, ts in (("ours", t_ours), ("transformers", t_theirs)):
            row[name] = {
                "tok_per_s": tokens / statistics.median(ts),
                "min": tokens / max(ts),
                "max": tokens / min(ts),
            }
        row["ratio"] = row["ours"]["tok_per_s"] / row["transformers"]["tok_per_s"]
        results.append(row)
    print(
        f"\n{args.preset}, batch {args.batch} x seq {args.seq}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print("| precision | albert-lm tok/s (min-max) | transformers tok/s (min-max) | ratio |")
    print("|---|---|---|---|")
    for r in results:
        o, t = r["ours"], r["transformers"]
        print(
            f"| {r['precision']} | {o['tok_per_s']:.0f} ({o['min']:.0f}-{o['max']:.0f}) | "
            f"{t['tok_per_s']:.0f} ({t['min']:.0f}-{t['max']:.0f}) | {r['ratio']:.2f}x |"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
