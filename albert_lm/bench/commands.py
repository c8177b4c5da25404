"""`albert bench`: the bench's command (registered by `albert_lm.cli`). It imports the suites only when
it runs: building the parser stays free of torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from albert_lm.model.config import PRESETS
from albert_lm.settings import add_word


def bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preset", default="albert-base", choices=PRESETS, help="model size (default albert-base)"
    )
    p.add_argument(
        "--data",
        metavar="DIR",
        help="a folder holding glue/SST-2/dev.tsv (the sst2 rows) and tokenizer/albert-30k/spiece.model (the "
        "onnx rows); rows whose files are missing are skipped (default: $ALBERT_DATA)",
    )
    p.add_argument(
        "--repeats", type=int, default=10, metavar="N", help="timed repeats per inference row (default 10)"
    )
    parts = (
        "gemm",
        "inference",
        "int8",
        "onnx",
        "pretraining",
        "sst2",
        "ablations",
    )  # = bench.PARTS (not imported: --help stays fast)
    p.add_argument(
        "--only", nargs="+", choices=parts, default=parts, help="time only these parts (default: all)"
    )
    p.add_argument(
        "--precisions",  # not --precision: "all" is no precision, and one name means one thing
        choices=("auto", "fp32", "bf16", "all"),
        default="auto",
        dest="precision",
        help="which precisions to time: auto (default) is fp32, plus bf16 where this CPU measures it fast; "
        "all = both",
    )
    p.add_argument(
        "--same-process",
        action="store_true",
        help="run ours and transformers in this one process instead of a worker process each",
    )
    add_word(
        p,
        "device",
        help="cpu: the suite above; cuda: pretraining step and inference in bf16 against "
        "transformers on this GPU, with MFU and peak memory (--only, --precisions and --same-process do not "
        "apply); auto (default): cuda when there is a GPU, else cpu",
    )
    p.add_argument(
        "--compile",
        choices=("both", "no", "yes"),
        default="both",
        help="--device cuda: rows without torch.compile, with it, or both (default)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the results to this JSON file")


def run_bench(args: argparse.Namespace) -> int:
    """time albert-lm against transformers on this machine and print the table

    Speed of albert-lm against transformers with the same weights, timings interleaved: this machine's
    matrix-multiply limits, inference (1x128, 8x128, 4x512), a pretraining step (8x128), in fp32 and, where
    this CPU computes bf16 fast (--precisions), in bf16, SST-2 dev end to end, peak memory, and the gain
    of each of our speed choices. Each library runs in its own worker process, the two alternated repeat
    by repeat; a ratio whose repeats spread two-fold or more is marked noisy. Needs transformers (pip
    install transformers). About 17 minutes for albert-base on 2 cores."""
    import os
    from pathlib import Path

    from albert_lm.bench.runner import check_settings
    from albert_lm.bench.sides import BenchWorkerError
    from albert_lm.files import check_output_apart

    data = args.data or os.environ.get("ALBERT_DATA")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    check_settings(args.repeats, tuple(args.only), args.precision, Path(data) if data else None)
    if args.json:  # checked now, not after the minutes the bench takes
        check_output_apart(args.json, {"--data": data}, output_option="--json")
        if Path(args.json).is_dir():
            raise IsADirectoryError(f"--json {args.json}: is a folder; give a file name")
    try:
        return _bench(args, data, log)
    except BenchWorkerError as e:  # the worker's whole output is logged with -v; here its last line
        raise ValueError(str(e)) from None
    except OSError as e:  # a full disk, a device: say which file (the table is printed above)
        if e.filename is None and args.json:
            raise OSError(e.errno, f"--json {args.json}: {e.strerror or e}") from None
        raise


def _bench(args: argparse.Namespace, data: str | None, log: Callable[[str], None]) -> int:
    from pathlib import Path

    from albert_lm.bench.runner import format_table, run_suite
    from albert_lm.files import write_json

    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda"):
        from albert_lm.bench.cuda import format_cuda_table, run_cuda_suite

        modes = {"both": (False, True), "no": (False,), "yes": (True,)}[args.compile]

        def save(r: dict) -> None:
            if args.json:
                write_json(Path(args.json), r, indent=1)

        print(
            format_cuda_table(
                run_cuda_suite(args.preset, args.repeats, modes, log=log, on_row=save, device=args.device)
            )
        )
        return 0
    result = run_suite(
        args.preset,
        Path(data) if data else None,
        args.repeats,
        tuple(args.only),
        log,
        isolate=not args.same_process,
        precision=args.precision,
    )
    print(format_table(result))
    if args.json:
        write_json(Path(args.json), result, indent=1)
    return 0
