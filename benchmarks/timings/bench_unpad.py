"""Unpadded encoding against the padded path on real GLUE text: useful (non-pad) tokens per second.

    PYTHONPATH=. python benchmarks/timings/bench_unpad.py --data ../shared/data/glue \\
        --tokenizer ../shared/data/tokenizer/albert-30k/spiece.model --precision fp32 --json unpad.json

One model (random weights of --config: speed only), each workload run padded (`use_unpadding(False)`)
and unpadded on the same batches, the two alternated pass by pass (the order swapped every repeat),
the median of --repeats passes. The workloads, each in two batch orders:
- evaluation (no_grad forward of a sequence classifier): SST-2 dev sentences and MRPC dev pairs,
  batches of 64 in file order, and as albert-lm's evaluation batches them (one global sort by length);
- a fine-tuning step (forward, backward, AdamW step) on SST-2 train sentences, batches of 32 in file
  order, and as the fine-tuning loop batches them (sorted by length within windows of 50 batches).
Every batch is padded to its longest row by the tasks' own `collate`, as fine-tuning and evaluation
pad theirs. The training workload runs on two copies of the same weights, one per path, so each path
keeps its own optimizer state. On CUDA every timed call is bracketed by torch.cuda.synchronize.
--max-batches takes that many batches spread evenly over each workload (a sorted order's short and
long batches both), to bound the time on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.kernels.device import autocast, pick_device, resolved_precision
from albert_lm.kernels.hardware import cpu_info
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import use_unpadding
from albert_lm.model.heads import AlbertForSequenceClassification
from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches
from albert_lm.tasks.glue import GlueTask
from albert_lm.training.optim import build_optimizer

Batch = dict[str, torch.Tensor]


def features_of(data: Path, task: str, split: str, tokenizer: AlbertTokenizer, max_len: int) -> list[dict]:
    glue = GlueTask(task)
    path = glue.split_file(data, split)
    if path is None:
        raise SystemExit(f"--data {data}: no {task} {split}.tsv under it")
    return glue.featurize(glue.read(path, split), tokenizer, max_len)


def batch_orders(features: list[dict], size: int, training: bool) -> dict[str, list[list[int]]]:
    """File order, and albert-lm's own order: evaluation's global sort, or the fine-tuning loop's
    windows (seed 0)."""
    n = len(features)
    lengths = [feature_length(f) for f in features]
    rng = np.random.default_rng(0) if training else None
    return {
        "file order": [list(range(i, min(i + size, n))) for i in range(0, n, size)],
        "albert-lm order": length_bucketed_batches(lengths, size, rng),
    }


def spread(batches: list[list[int]], most: int | None) -> list[list[int]]:
    if most is None or most >= len(batches):
        return batches
    return [batches[int(i)] for i in np.linspace(0, len(batches) - 1, most)]


def timed(device: torch.device, fn: Callable[[], None]) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def eval_pass(model, batches: list[Batch], device, precision: str) -> Callable[[], float]:
    def run() -> float:
        with torch.no_grad(), autocast(device, precision):
            return sum(timed(device, lambda b=b: model(**b)) for b in batches)

    return run


def train_pass(model, batches: list[Batch], device, precision: str) -> Callable[[], float]:
    optimizer = build_optimizer(model, "adamw", lr=1e-5)  # the fine-tuning loop's optimizer

    def step(batch: Batch) -> None:
        with autocast(device, precision):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return lambda: sum(timed(device, lambda b=b: step(b)) for b in batches)


def compare(passes: dict[bool, Callable[[], float]], repeats: int) -> dict[bool, float]:
    """Median seconds per pass of each path (True: unpadded), alternated, after one warm-up each (the
    kernels' tuner times each new product shape once)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(repeats + 1):
        for unpadded in (True, False) if r % 2 else (False, True):
            with use_unpadding(unpadded):
                seconds = passes[unpadded]()
            if r:
                times[unpadded].append(seconds)
    return {k: statistics.median(v) for k, v in times.items()}


def workload_row(name, batches: list[Batch], passes, args, device, precision) -> dict:
    useful = sum(int(b["attention_mask"].sum()) for b in batches)
    total = sum(b["attention_mask"].numel() for b in batches)
    seconds = compare(passes, args.repeats)
    row = {
        "workload": name,
        "device": str(device),
        "precision": precision,
        "batches": len(batches),
        "padded_tokens_per_s": useful / seconds[False],
        "unpadded_tokens_per_s": useful / seconds[True],
        "ratio": seconds[False] / seconds[True],
        "padding_fraction": 1 - useful / total,
    }
    print(
        f"| {name} | {precision} | {len(batches)} | {row['padding_fraction']:.0%} "
        f"| {row['padded_tokens_per_s']:,.0f} | {row['unpadded_tokens_per_s']:,.0f} | {row['ratio']:.2f}x |",
        flush=True,
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"], help="bf16: autocast")
    p.add_argument("--data", type=Path, required=True, help="a folder holding SST-2/ and MRPC/")
    p.add_argument("--tokenizer", type=Path, required=True, help="spiece.model or a tokenizer folder")
    p.add_argument("--config", default="albert-base", help="a preset name (random weights)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-batches", type=int, default=None, help="per workload, spread evenly")
    p.add_argument("--max-seq-length", type=int, default=512, help="as fine-tuning's table (512)")
    p.add_argument("--workloads", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    p.add_argument("--json", type=Path, help="write the rows and the machine here")
    args = p.parse_args()

    device = pick_device(args.device)
    precision = resolved_precision(args.precision, device)
    tokenizer = AlbertTokenizer.from_pretrained(args.tokenizer)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.config, num_labels=2, vocab_size=tokenizer.vocab_size)
    model = AlbertForSequenceClassification(config).to(device)
    model.set_dropout(0.0, 0.0)  # SST-2's and MRPC's row of the fine-tuning table: ALBERT DR 0
    where = cpu_info().describe() if device.type == "cpu" else torch.cuda.get_device_name(device)
    print(f"{args.config} on {where}, torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| workload | precision | batches | padding | padded tok/s | unpadded tok/s | speed-up |")
    print("|---|---|---|---|---|---|---|")

    def batches_of(features, orders_of: list[list[int]]) -> list[Batch]:
        return [
            {k: v.to(device) for k, v in collate([features[i] for i in idx], tokenizer.pad_token_id).items()}
            for idx in spread(orders_of, args.max_batches)
        ]

    rows = []
    if "eval" in args.workloads:
        model.eval()
        for task, folder in (("sst2", "SST-2"), ("mrpc", "MRPC")):
            feats = features_of(args.data / folder, task, "dev", tokenizer, args.max_seq_length)
            for order, idx in batch_orders(feats, 64, training=False).items():
                b = batches_of(feats, idx)
                passes = {u: eval_pass(model, b, device, precision) for u in (True, False)}
                rows.append(workload_row(f"eval {task} dev, {order}", b, passes, args, device, precision))
    if "train" in args.workloads:
        feats = features_of(args.data / "SST-2", "sst2", "train", tokenizer, args.max_seq_length)
        for order, idx in batch_orders(feats, 32, training=True).items():
            b = batches_of(feats, idx)
            passes = {
                u: train_pass(copy.deepcopy(model).train(), b, device, precision) for u in (True, False)
            }
            rows.append(workload_row(f"train step sst2, {order}", b, passes, args, device, precision))
    if args.json:
        meta = {
            "config": args.config,
            "device": where,
            "torch": torch.__version__,
            "python": platform.python_version(),
        }
        meta |= {"threads": torch.get_num_threads(), "repeats": args.repeats, "max_batches": args.max_batches}
        args.json.write_text(json.dumps({"machine": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
