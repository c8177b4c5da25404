"""This machine's matrix-multiply limits on a preset's shapes (the "of GEMM limit" column of `albert bench`).

    python benchmarks/timings/bench_gemm.py --preset albert-base --tokens 1024

Times (tokens x H) @ (H x 3H), (tokens x H) @ (H x 4H) and (tokens x 4H) @ (4H x H), the encoder's three
products, through F.linear (MKL in fp32, what nn.Linear uses; oneDNN in bf16, what autocast uses) and
through oneDNN directly, with plain and with pre-packed weights (what albert-lm's `kernels.linear` uses),
fp32 and bf16, and prints GFLOP/s per path, the mean over the three shapes.
"""

from __future__ import annotations

import argparse

from albert_lm.bench.workloads import gemm_limits
from albert_lm.model.config import AlbertConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--tokens", type=int, default=1024, help="rows of the activation matrix (batch x seq)")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    result = gemm_limits(AlbertConfig.from_preset(args.preset), args.tokens, args.repeats)
    print("| path | GFLOP/s |\n|---|---|")
    for name, path in result["paths"].items():
        print(f"| {name} | {path['gflops']:.0f} |")


if __name__ == "__main__":
    main()
