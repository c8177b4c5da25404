"""`albert predict` end to end against transformers' `pipeline("text-classification")` (issue 14).

One fine-tuned sequence-classification folder (e.g. a `albert finetune --task sst2` run's best/) and a
TSV with a header (SST-2's dev.tsv: 872 sentences). Each repeat times, in this process and on the same
threads, the whole job a user runs: load the model and tokenizer, read and tokenize the rows, predict,
write the labels. albert-lm's `predict` (one JSON line per row) alternates with transformers' pipeline
at batch size 1 (its default) and at `--batch-size`; medians over repeats, and the share of rows whose
labels agree (transformers' own tokenizer for ALBERT splits some text differently, docs/data.md).

    python benchmarks/bench_predict.py --model runs/sst2/best --input ../shared/data/glue/SST-2/dev.tsv \\
        --text-column sentence --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

from albert_lm.deploy.predict import PredictConfig, predict
from albert_lm.kernels.hardware import cpu_info
from albert_lm.tasks.glue import GLUE_TASKS, label_names


def ours(model: str, source: str, column: str, batch_size: int, out: Path) -> list[str]:
    predict(
        PredictConfig(model=model, input=source, output=str(out), text_column=column, batch_size=batch_size)
    )
    return [json.loads(line)["label"] for line in out.read_text().splitlines()]


def theirs(model: str, texts: list[str], batch_size: int) -> list[str]:
    clf = transformers.pipeline("text-classification", model=model, tokenizer=model, device="cpu")
    rows = clf(texts, batch_size=batch_size, truncation=True, max_length=128)
    id_of = {v: k for k, v in clf.model.config.id2label.items()}
    return [str(id_of[r["label"]]) for r in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--text-column", default="sentence")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    with open(a.input, encoding="utf-8", newline="") as f:
        texts = [row[a.text_column] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    saved = json.loads((Path(a.model) / "finetune_config.json").read_text())
    # predict writes a GLUE task's conventional label names; the pipeline's ids map onto the same names
    labels = list(label_names(saved["task"])) if saved["task"] in GLUE_TASKS else saved["labels"]
    times: dict[str, list[float]] = {"albert-lm predict": [], "transformers pipeline, batch 1": [],
                                     f"transformers pipeline, batch {a.batch_size}": []}  # fmt: skip
    answers: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for name in times:
                start = time.perf_counter()
                if name == "albert-lm predict":
                    got = ours(a.model, a.input, a.text_column, a.batch_size, Path(tmp) / "out.jsonl")
                else:
                    batch = 1 if name.endswith("batch 1") else a.batch_size
                    # the pipeline gives the config's label names; map back to the task's labels by id
                    got = [labels[int(i)] for i in theirs(a.model, texts, batch)]
                times[name].append(time.perf_counter() - start)
                answers[name] = got
    base = statistics.median(times["albert-lm predict"])
    cpu = cpu_info()
    print(f"CPU: {cpu.model} ({cpu.generation}, {cpu.isa}), torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {torch.get_num_threads()} threads; {len(texts)} rows, {a.repeats} repeats")  # fmt: skip
    print("| path | median s | rows/s | albert-lm is | labels agree with albert-lm |\n|---|---|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        agree = sum(x == y for x, y in zip(answers[name], answers["albert-lm predict"], strict=True)) / len(
            texts
        )
        print(f"| {name} | {m:.2f} | {len(texts) / m:.0f} | {m / base:.2f}x faster | {agree:.3f} |")


if __name__ == "__main__":
    main()
