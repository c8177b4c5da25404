"""The glibc allocator setting of `albert` commands (`hardware.tune_cpu_allocator`): gain and page faults.

    python benchmarks/timings/bench_allocator.py --precision bf16

Runs albert-base pretraining steps (8 x 128, LAMB) for albert-lm and for transformers, each in a fresh
child process with the default allocator and with the tuned one (a process-wide setting cannot be
undone, hence one process each), and prints tokens/s, system CPU seconds and minor page faults.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def child(side: str, tuned: bool, precision: str, steps: int) -> None:
    import transformers

    from albert_lm.bench.workloads import pretraining_batch, train_step
    from albert_lm.kernels.hardware import tune_cpu_allocator
    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.training.objective import PretrainingObjective

    if tuned:
        tune_cpu_allocator()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-base")).train()
    batch = pretraining_batch(model.config.vocab_size, 8, 128)
    if side == "transformers":
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)
            model = transformers.AlbertForPreTraining.from_pretrained(d).train()
        loss_fn = lambda: model(**batch).loss  # noqa: E731
    else:
        objective = PretrainingObjective(model, "sop")
        loss_fn = lambda: objective(batch)[0]  # noqa: E731
    run = train_step(model, loss_fn, precision)

    def step() -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    step(), step()
    before = resource.getrusage(resource.RUSAGE_SELF)
    times = [step() for _ in range(steps)]
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"RESULT {1024 / statistics.median(times):.0f} {after.ru_stime - before.ru_stime:.2f} "
        f"{after.ru_minflt - before.ru_minflt}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--child", nargs=2, metavar=("SIDE", "TUNED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "tuned", args.precision, args.steps)
        return
    print(f"albert-base pretraining step 8 x 128, {args.precision}, {args.steps} steps after 2 warm-up")
    print("| model | allocator | tokens/s | system CPU s | minor page faults |\n|---|---|---|---|---|")
    for side in ("albert-lm", "transformers"):
        for tuned in ("default", "tuned"):
            cmd = [sys.executable, __file__, "--precision", args.precision, "--steps", str(args.steps)]
            out = subprocess.run([*cmd, "--child", side, tuned], capture_output=True, text=True, check=True)
            rate, sys_s, faults = next(x for x in out.stdout.splitlines() if x.startswith("RESULT")).split()[
                1:
            ]
            print(f"| {side} | {tuned} | {rate} | {sys_s} | {faults} |")


if __name__ == "__main__":
    main()
