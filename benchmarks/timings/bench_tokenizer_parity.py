"""How often tokenizers agree with the original ALBERT tokenization on the shared books, line by line.

    .venv/bin/python benchmarks/timings/bench_tokenizer_parity.py [--tier small|all]

The reference is google-research/albert `tokenization.py` written out plainly (preprocess_text, then
SentencePiece pieces with the digit-comma rule, then PieceToId), with the released 30k model. Compared:
`albert_lm.AlbertTokenizer` (batched, table-driven) and transformers' `AlbertTokenizer` (in transformers 5
the `tokenizers`-based fast one, loaded offline from the same spiece.model). Prints counts, rates, speed
and the first differing lines. Not run by the tests (tests/test_tokenizer.py pins our parity).
"""

from __future__ import annotations

import argparse
import os
import time
import unicodedata
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("ALBERT_DATA", ROOT.parent / "shared" / "data"))
MODEL_DIR = DATA / "tokenizer" / "albert-30k"


def reference_ids(sp: spm.SentencePieceProcessor, text: str) -> list[int]:
    text = " ".join(text.strip().split())
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    pieces: list[str] = []
    for piece in sp.EncodeAsPieces(text):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur = sp.EncodeAsPieces(piece[:-1].replace("\u2581", ""))
            if piece[0] != "\u2581" and cur[0][0] == "\u2581":
                cur = cur[1:] if len(cur[0]) == 1 else [cur[0][1:], *cur[1:]]
            pieces += [*cur, piece[-1]]
        else:
            pieces.append(piece)
    return [sp.PieceToId(p) for p in pieces]


def main() -> None:
    from albert_lm.data.corpus import iter_text_lines
    from albert_lm.data.tokenizer import AlbertTokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=["small", "all"], default="small")
    args = ap.parse_args()
    root = DATA / "pretrain" / "gutenberg"
    rows = [r.split("\t") for r in (root / "MANIFEST.tsv").read_text().splitlines()[2:]]
    books = sorted(root / "books" / r[0] for r in rows if args.tier == "all" or r[1] == args.tier)
    lines = [ln for b in books for ln in iter_text_lines(b, strip_gutenberg=True) if ln.strip()]
    mb = sum(len(ln.encode()) for ln in lines) / 1e6

    ours = AlbertTokenizer.from_pretrained(MODEL_DIR)
    t0 = time.perf_counter()
    ref = [reference_ids(ours.sp, ln) for ln in lines]
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = ours.encode_batch(lines)
    t_ours = time.perf_counter() - t0
    print(f"{len(books)} books, {len(lines)} non-empty lines, {mb:.1f} MB")
    print(
        f"reference (plain Python): {mb / t_ref:.2f} MB/s; "
        f"albert_lm.AlbertTokenizer.encode_batch: {mb / t_ours:.2f} MB/s"
    )
    bad = [i for i in range(len(lines)) if got[i] != ref[i]]
    print(f"albert_lm.AlbertTokenizer: {len(bad)} of {len(lines)} lines differ from the reference")

    import transformers
    from transformers import AlbertTokenizer as HFAlbertTokenizer

    hf = HFAlbertTokenizer.from_pretrained(MODEL_DIR)
    t0 = time.perf_counter()
    hf_ids = hf(lines, add_special_tokens=False)["input_ids"]
    t_hf = time.perf_counter() - t0
    diff = [i for i in range(len(lines)) if hf_ids[i] != ref[i]]
    print(
        f"transformers {transformers.__version__} {type(hf).__name__}: {len(diff)} of {len(lines)} lines "
        f"differ ({100 * len(diff) / len(lines):.1f}%), {mb / t_hf:.2f} MB/s"
    )
    for i in diff[:5]:
        print(f"  {lines[i].strip()[:70]!r}")
        print(f"    reference:    {ours.sp.id_to_piece(ref[i])[:14]}")
        print(f"    transformers: {ours.sp.id_to_piece(hf_ids[i])[:14]}")


if __name__ == "__main__":
    main()
