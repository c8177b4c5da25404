"""Inference speed: albert-lm's AlbertModel against transformers' on the same weights, interleaved.

    python benchmarks/bench_inference.py --preset albert-base --batch 8 --seq 128 --repeats 10

Both models get the same random weights (ours saved, transformers loads the folder). Timings
alternate ours / theirs in one process so machine noise hits both alike; we report the median
tokens/s, min-max, and the ratio of medians. Also checks the outputs agree before timing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from albert_lm import AlbertConfig, AlbertModel


def _time(model, batch: dict[str, torch.Tensor], dtype: torch.dtype | None) -> float:
    start = time.perf_counter()
    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        model(**batch)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = p.parse_args()

    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = AlbertModel(AlbertConfig.from_preset(args.preset)).eval()
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        theirs = transformers.AlbertModel.from_pretrained(d).eval()
    ids = torch.randint(5, ours.config.vocab_size, (args.batch, args.seq))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.inference_mode():
        diff = (ours(**batch).last_hidden_state - theirs(**batch).last_hidden_state).abs().max().item()

    dtype = torch.bfloat16 if args.precision == "bf16" else None
    for _ in range(args.warmup):
        _time(ours, batch, dtype), _time(theirs, batch, dtype)
    t_ours, t_theirs = [], []
    for _ in range(args.repeats):
        t_ours.append(_time(ours, batch, dtype))
        t_theirs.append(_time(theirs, batch, dtype))
    tokens = args.batch * args.seq

    def row(name: str, ts: list[float]) -> str:
        med = statistics.median(ts)
        return f"| {name:<12} | {tokens / med:>9.0f} | {tokens / max(ts):>7.0f} - {tokens / min(ts):<7.0f} |"

    print(f"{args.preset} inference, batch {args.batch} x {args.seq}, {args.precision}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, transformers {transformers.__version__}")  # fmt: skip
    print(f"max |ours - transformers| on last_hidden_state (fp32): {diff:.2e}")
    print("| model        |  tokens/s | min - max         |")
    print("|--------------|-----------|-------------------|")
    print(row("albert-lm", t_ours))
    print(row("transformers", t_theirs))
    print(
        f"ratio (median tokens/s, albert-lm / transformers): {statistics.median(t_theirs) / statistics.median(t_ours):.2f}x"
    )


if __name__ == "__main__":
    main()
