"""A corpus of N GB for the scale test of `albert data create`: the multilingual books of the shared data
repeated, each round with its paragraphs in another order (seeded), written into a folder of files.

    .venv/bin/python benchmarks/timings/big_corpus.py --gb 5 --output /tmp/big            # ~5 GB of .txt files
    .venv/bin/python benchmarks/timings/big_corpus.py --gb 1 --output /tmp/big --compress gz --languages de,fr
    .venv/bin/python benchmarks/timings/big_corpus.py --gb 1 --output /tmp/big --as jsonl  # a record per book and round

The files are `OUTPUT/<language>/part-00000.txt` ... of about `--file-mb` each (of text, before
compression); a book's round is a document of its own, its paragraphs separated by blank lines, the Project
Gutenberg header and licence left out (so no `--strip-gutenberg` is needed). The same arguments give the
same bytes. Memory: one book at a time. Then, e.g.:

    albert tokenizer train --input /tmp/big --language de --input-sentence-size 2000000 --output /tmp/big-tok
    albert data create --input /tmp/big --tokenizer /tmp/big-tok --output /tmp/big-data --max-seq-length 128

Not run by the tests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from albert_lm.data.corpus import gutenberg_body  # noqa: E402
from albert_lm.files import InputError  # noqa: E402

DATA = Path(os.environ.get("ALBERT_DATA", ROOT.parent / "shared" / "data"))
PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
MIN_PARAGRAPHS = 50  # fewer blank-line paragraphs: the book holds a paragraph per line (ELTeC, RusLit)


def book_paragraphs(path: Path) -> list[str]:
    """The paragraphs of a book (its Gutenberg body where it has the markers), without empty ones."""
    try:
        start, end = gutenberg_body(path)
    except InputError:
        start, end = 0, path.stat().st_size
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read(end - start).decode("utf-8").replace("\r\n", "\n")
    paragraphs = [p.strip("\n") for p in PARAGRAPH_BREAK.split(text)]
    if len(paragraphs) < MIN_PARAGRAPHS:
        paragraphs = text.split("\n")
    return [p for p in paragraphs if p.strip()]


def rounds(books: list[Path], seed: int) -> Iterator[tuple[int, Path, str]]:
    """(round, book, its text with the paragraphs shuffled by a generator seeded by (seed, round,
    book)), round after round, without end."""
    r = 0
    while True:
        for k, book in enumerate(books):
            paragraphs = book_paragraphs(book)
            random.Random(f"{seed}-{r}-{k}").shuffle(paragraphs)
            yield r, book, "\n\n".join(paragraphs) + "\n"
        r += 1


class Parts:
    """Files of about `file_bytes` of text each, opened one after the other in `folder`."""

    def __init__(self, folder: Path, file_bytes: int, suffix: str, compress: str) -> None:
        self.folder, self.file_bytes, self.suffix, self.compress = folder, file_bytes, suffix, compress
        self.index, self.written, self.total = 0, 0, 0
        self.f: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self.f is None or self.written >= self.file_bytes:
            self.close()
            name = self.folder / f"part-{self.index:05d}{self.suffix}"
            name.parent.mkdir(parents=True, exist_ok=True)
            # open across calls until the part is full (closed in `close`); mtime 0: the same arguments
            # give the same compressed bytes
            self.f = gzip.GzipFile(name, "wb", mtime=0) if self.compress == "gz" else open(name, "wb")  # noqa: SIM115
            self.index, self.written = self.index + 1, 0
        self.f.write(data)
        self.written += len(data)
        self.total += len(data)

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


def generate(args: argparse.Namespace) -> dict[str, int]:
    """Write the corpus; returns the bytes of text written per language."""
    root = DATA / "pretrain" / "multilingual"
    suffix = (".jsonl" if args.as_ == "jsonl" else ".txt") + (".gz" if args.compress == "gz" else "")
    languages = args.languages.split(",")
    target = int(args.gb * 1e9)
    streams = {}
    for lang in languages:
        books = sorted((root / lang).glob("*.txt"))
        if not books:
            raise SystemExit(f"no books in {root / lang} (set ALBERT_DATA to the shared data folder)")
        streams[lang] = (
            rounds(books, args.seed),
            Parts(args.output / lang, int(args.file_mb * 1e6), suffix, args.compress),
        )
    try:
        while sum(parts.total for _, parts in streams.values()) < target:
            for texts, parts in streams.values():  # the languages in turn, a book at a time
                r, book, text = next(texts)
                if args.as_ == "jsonl":
                    record = {"text": text, "source": book.name, "round": r}
                    parts.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
                else:
                    parts.write(text.encode() + b"\n")
    finally:
        for _, parts in streams.values():
            parts.close()
    return {lang: parts.total for lang, (_, parts) in streams.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gb", type=float, required=True, help="gigabytes (1e9 bytes) of text to write")
    p.add_argument("--output", type=Path, required=True, help="folder to write into (made; must be empty)")
    p.add_argument(
        "--languages", default="de,fr,ru,zh", help="comma-separated, of de, fr, ru, zh (default all)"
    )
    p.add_argument("--file-mb", type=float, default=64.0, help="MB of text per file (default 64)")
    p.add_argument(
        "--compress", choices=("none", "gz"), default="none", help="compress the files (default none)"
    )
    p.add_argument(
        "--as", dest="as_", choices=("txt", "jsonl"), default="txt", help="plain text or JSON Lines"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the paragraph orders (default 0)")
    args = p.parse_args()
    if args.output.exists() and any(args.output.iterdir()):
        raise SystemExit(f"--output {args.output}: not empty")
    t0 = time.perf_counter()
    written = generate(args)
    seconds = time.perf_counter() - t0
    total = sum(written.values())
    for lang, n in written.items():
        print(f"{lang}: {n / 1e9:.2f} GB of text")
    print(f"{total / 1e9:.2f} GB in {args.output} in {seconds:.0f} s ({total / 1e6 / seconds:.0f} MB/s)")


if __name__ == "__main__":
    main()
