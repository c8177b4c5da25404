"""Sentence segmenters on the shared books: speed and the splits that matter for pretraining pairs.

    .venv/bin/pip install pysbd sentencex   # the candidates we did not pick (not dependencies)
    .venv/bin/python benchmarks/timings/bench_segmenters.py

Candidates that work offline from a pip package: Bling Fire (chosen), pysbd, sentencex. NLTK's punkt is
left out: its model is a separate download at run time. Measured on the paragraphs of the first books of
the `small` tier (Gutenberg header and footer removed), one call per paragraph, and Bling Fire also in
one call per block (how albert_lm.data.corpus uses it: paragraphs joined by U+2029).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("ALBERT_DATA", ROOT.parent / "shared" / "data"))
QUOTE = "\u201cThey may surmise something, but they don't interfere. Of course, it pays Mr. Daniels.\u201d"


def main() -> None:
    from albert_lm.data.corpus import iter_text_lines

    root = DATA / "pretrain" / "gutenberg"
    rows = [r.split("\t") for r in (root / "MANIFEST.tsv").read_text().splitlines()[2:]]
    books = sorted(root / "books" / r[0] for r in rows if r[1] == "small")[:4]
    text = "\n".join(ln for b in books for ln in iter_text_lines(b, strip_gutenberg=True))
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    mb = sum(len(p.encode()) for p in paragraphs) / 1e6
    print(f"{len(books)} books, {len(paragraphs)} paragraphs, {mb:.2f} MB")

    candidates = {}
    import blingfire

    candidates["blingfire"] = lambda p: blingfire.text_to_sentences(p).split("\n")
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False)
        candidates["pysbd"] = seg.segment
    except ImportError:
        print("pysbd not installed")
    try:
        import sentencex

        candidates["sentencex"] = lambda p: list(sentencex.segment("en", p))
    except ImportError:
        print("sentencex not installed")

    for name, split in candidates.items():
        sample = paragraphs if name != "pysbd" else paragraphs[: len(paragraphs) // 10]  # pysbd is slow
        smb = sum(len(p.encode()) for p in sample) / 1e6
        t0 = time.perf_counter()
        n = sum(len(split(p)) for p in sample)
        rate = smb / (time.perf_counter() - t0)
        print(
            f"{name:10s} {rate:7.2f} MB/s  {n * len(paragraphs) // len(sample):7d} sentences  {split(QUOTE)}"
        )
    t0 = time.perf_counter()
    n = len(blingfire.text_to_sentences("\u2029".join(paragraphs)).split("\n"))
    print(f"blingfire, one call per block: {mb / (time.perf_counter() - t0):.2f} MB/s, {n} sentences")


if __name__ == "__main__":
    main()
