"""`albert data create` at scale: its throughput per CPU-second (what a core gives, whatever else runs
beside it) and wall-clock, and the resident memory of all its processes together over the run.

    .venv/bin/python benchmarks/timings/big_corpus.py --gb 5 --output /tmp/big
    .venv/bin/albert tokenizer train --input $D/pretrain/multilingual --language fr --vocab-size 30000 \
        --output /tmp/big-tok
    .venv/bin/python benchmarks/timings/scale_data.py --label "5 GB multilingual" --tokenizer /tmp/big-tok \
        --output /tmp/big-data --input /tmp/big
    .venv/bin/python benchmarks/timings/scale_data.py --label "English books" --tokenizer $D/tokenizer/albert-30k \
        --output /tmp/en-data --strip-gutenberg --input $D/pretrain/gutenberg/books

Each run: `albert data create --max-seq-length 128 --workers N --no-progress` (`--format auto`), its process
tree sampled every 0.2 s from /proc (VmRSS summed over the processes: shared pages counted in each, an
upper bound), the CPU seconds of the command and its workers from getrusage. Prints the command's summary
and one JSON line: the text's bytes (the manifest's `input_bytes`), wall and CPU seconds, MB/s and MB per
CPU-second, the peak of the summed RSS and of the largest process, and the peak summed RSS in each tenth of
the run (flat when memory does not grow with the corpus). Not run by the tests; figures in docs/data.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import measure  # noqa: E402


def by_tenth(samples: list[tuple[float, int, int]], wall: float) -> list[float]:
    """The peak summed RSS (MiB) in each tenth of the run."""
    peaks = [0.0] * 10
    for t, total, _ in samples:
        k = min(9, int(10 * t / wall))
        peaks[k] = max(peaks[k], total / 1024)
    return [round(p) for p in peaks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", nargs="+", required=True, help="files, folders or globs")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--output", required=True, help="data folder to write (removed first if there)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--strip-gutenberg", action="store_true")
    args = ap.parse_args()
    cmd = [str(ROOT / ".venv" / "bin" / "albert"), "data", "create", "--input", *args.input,
           "--tokenizer", args.tokenizer, "--output", args.output, "--max-seq-length", "128",
           "--workers", str(args.workers), "--no-progress",
           *(["--strip-gutenberg"] if args.strip_gutenberg else [])]  # fmt: skip
    shutil.rmtree(args.output, ignore_errors=True)  # a fresh run, not a resumed one
    wall, cpu, samples, output, rc = measure(cmd)
    print(output.strip())
    if rc != 0:
        sys.exit(f"albert data create failed ({rc})")
    manifest = json.loads((Path(args.output) / "manifest.json").read_text())
    nbytes = manifest["summary"]["input_bytes"]
    result = {
        "label": args.label,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "input_mb": round(nbytes / 1e6, 1),
        "examples": manifest["summary"]["examples"],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "mb_per_s": round(nbytes / 1e6 / wall, 3),
        "mb_per_cpu_s": round(nbytes / 1e6 / cpu, 3),
        "peak_rss_sum_mib": round(max(s[1] for s in samples) / 1024) if samples else None,
        "peak_rss_largest_mib": round(max(s[2] for s in samples) / 1024) if samples else None,
        "peak_rss_sum_mib_by_tenth": by_tenth(samples, wall),
        "load_average_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
