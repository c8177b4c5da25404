"""Benchmark of `albert data create` against raw SentencePiece encoding of the same text.

    .venv/bin/python benchmarks/timings/bench_data.py --tier small   # the 10 MB tier of the shared books
    .venv/bin/python benchmarks/timings/bench_data.py --tier all     # all 100 MB
    .venv/bin/python benchmarks/timings/bench_data.py --tier all --format lines   # same text, a sentence per line

For the chosen books it measures
1. the practical limit: SentencePiece (the released 30k model) encoding the books' text (Gutenberg headers
   and footers removed, lower-cased, one call per line), text already in memory: on `--workers` threads
   for the wall-clock rate, on one thread for the rate per CPU-second;
2. `albert data create --format paragraphs --strip-gutenberg --max-seq-length 128` with `--workers`
   processes, end to end (reading, Bling Fire segmentation, normalization, encoding, SOP pairs, writing),
   as a subprocess whose process tree is sampled every 20 ms from /proc for the peak resident memory:
   the peak of the sum over all processes (shared pages counted in each: an upper bound) and the
   largest single process.
Not run by the tests; the figures go in docs/data.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("ALBERT_DATA", ROOT.parent / "shared" / "data"))


def books(tier: str) -> list[Path]:
    root = DATA / "pretrain" / "gutenberg"
    rows = [r.split("\t") for r in (root / "MANIFEST.tsv").read_text().splitlines()[2:]]
    return sorted(root / "books" / r[0] for r in rows if tier == "all" or r[1] == tier)


def sentencepiece_limit(files: list[Path], threads: int, strip: bool) -> tuple[float, float, int]:
    from albert_lm.data.corpus import gutenberg_body

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tokenizer" / "albert-30k" / "spiece.model"))
    lines, nbytes = [], 0
    for f in files:
        start, end = gutenberg_body(f) if strip else (0, f.stat().st_size)
        with open(f, "rb") as fh:
            fh.seek(start)
            body = fh.read(end - start)
        nbytes += len(body)
        lines += [ln.lower() for ln in body.decode("utf-8").splitlines()]
    t0 = time.perf_counter()
    sp.encode(lines, num_threads=threads)
    wall = time.perf_counter() - t0
    c0 = time.process_time()
    sp.encode(lines, num_threads=1)  # per CPU-second, one thread is SentencePiece's most efficient
    cpu = time.process_time() - c0
    return nbytes / 1e6 / wall, nbytes / 1e6 / cpu, nbytes


def _tree_rss_kib(root_pid: int) -> tuple[int, int]:
    """(sum, max) of VmRSS over root_pid and its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total = biggest = 0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kib = int(line.split()[1])
                    total += kib
                    biggest = max(biggest, kib)
        except OSError:
            pass
    return total, biggest


def measure(
    cmd: list[str], every: float = 0.2
) -> tuple[float, float, list[tuple[float, int, int]], str, int]:
    """Run `cmd`; (wall s, CPU s of it and its children, [(t, summed RSS KiB, largest KiB)], output, rc)."""
    samples: list[tuple[float, int, int]] = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sample() -> None:
        while proc.poll() is None:
            total, biggest = _tree_rss_kib(proc.pid)
            samples.append((time.perf_counter() - t0, total, biggest))
            time.sleep(every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, samples, output, proc.returncode


def to_lines_format(files: list[Path], out_dir: Path) -> list[Path]:
    """The books in google-research's format (a sentence per line, blank line between documents), made
    with our own reader and segmenter, untimed: for measuring `--format lines` on the same text."""
    from albert_lm.data.corpus import ReadStats, iter_documents, plan_blocks

    out = []
    for f in files:
        target = out_dir / f.name
        with open(target, "w", encoding="utf-8") as fh:
            for block in plan_blocks([f], 1 << 20, strip_gutenberg=True):
                for doc in iter_documents(block, "paragraphs", ReadStats()):
                    fh.write("\n".join(s.strip() for s in doc if s.strip()) + "\n\n")
        out.append(target)
    return out


def run_create(
    files: list[Path], workers: int, out: Path, fmt: str = "paragraphs"
) -> tuple[float, float, int, int, str]:
    cmd = [
        str(ROOT / ".venv" / "bin" / "albert"),
        "data",
        "create",
        "--input",
        *map(str, files),
        "--tokenizer",
        str(DATA / "tokenizer" / "albert-30k"),
        "--output",
        str(out),
        "--max-seq-length",
        "128",
        "--format",
        fmt,
        *(["--strip-gutenberg"] if fmt == "paragraphs" else []),
        "--workers",
        str(workers),
        "--no-progress",
    ]
    seconds, cpu, samples, output, rc = measure(cmd, every=0.02)
    peak = {
        "sum": max((t for _, t, _ in samples), default=0),
        "max": max((m for _, _, m in samples), default=0),
    }
    if rc != 0:
        sys.exit(f"albert data create failed:\n{output}")
    return seconds, cpu, peak["sum"], peak["max"], output


def startup_cpu() -> float:
    """CPU seconds of `albert --help`: interpreter start and package import, paid once per run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(ROOT / ".venv" / "bin" / "albert"), "--help"], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=["small", "all"], default="small")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--format",
        choices=["paragraphs", "lines"],
        default="paragraphs",
        help="paragraphs: the books as they are; lines: first rewritten one sentence per line (untimed)",
    )
    args = ap.parse_args()
    load0 = f"{os.getloadavg()[0]:.2f}"
    files = books(args.tier)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = files if args.format == "paragraphs" else to_lines_format(files, Path(tmp))
        # the reference encodes exactly the text the command reads
        limit, limit_cpu, nbytes = sentencepiece_limit(
            inputs, args.workers, strip=args.format == "paragraphs"
        )
        seconds, cpu, rss_sum, rss_max, output = run_create(
            inputs, args.workers, Path(tmp) / "data", args.format
        )
    startup = startup_cpu()
    speed, speed_cpu = nbytes / 1e6 / seconds, nbytes / 1e6 / cpu
    print(output.strip())
    print(f"books: {len(files)} ({args.tier}), input text ({args.format}): {nbytes / 1e6:.1f} MB")
    print(f"load average before/after: {load0} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(
        f"SentencePiece encoding alone: {args.workers} threads {limit:.2f} MB/s wall; "
        f"1 thread {limit_cpu:.2f} MB per CPU-second"
    )
    print(
        f"albert data create --format {args.format}, {args.workers} processes: {seconds:.1f} s, {speed:.2f} MB/s wall "
        f"= {100 * speed / limit:.0f}% of SentencePiece alone; {speed_cpu:.2f} MB per CPU-second "
        f"= {100 * speed_cpu / limit_cpu:.0f}% (start-up included)"
    )
    rest = nbytes / 1e6 / (cpu - startup)
    print(
        f"start-up of the `albert` command (Python and `import albert_lm`): {startup:.1f} "
        f"CPU-s; without it: {rest:.2f} MB per CPU-second = {100 * rest / limit_cpu:.0f}% of SentencePiece alone"
    )
    print(
        f"peak RSS: {rss_sum / 1024:.0f} MiB summed over processes, {rss_max / 1024:.0f} MiB largest process"
    )


if __name__ == "__main__":
    main()
