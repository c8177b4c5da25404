"""`albert predict` end to end against transformers' `pipeline("text-classification")`.

One fine-tuned sequence-classification folder (e.g. a `albert finetune --task sst2` run's best/) and a
TSV with a header (SST-2's dev.tsv: 872 sentences). Each repeat times, in this process and on the same
threads, the whole job a user runs: load the model and tokenizer, read and tokenize the rows, predict,
write the labels. albert-lm's `predict` (one JSON line per row) alternates with transformers' pipeline
at batch size 1 (its default) and at `--batch-size`; medians over repeats, and the share of rows whose
labels agree (transformers' own tokenizer for ALBERT splits some text differently, docs/data.md).

    python benchmarks/timings/bench_predict.py --model runs/sst2/best --input ../shared/data/glue/SST-2/dev.tsv \\
        --text-column sentence --repeats 3

With --against TEACHER the pipeline runs that transformers classifier instead (a distillation's teacher,
docs/distill.md): the same rows, each side's own tokenizer; tokens/s counts each side's own tokens.
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


def ours(model: str, source: str, column: str, batch_size: int, out: Path, int8: bool = False) -> list[str]:
    predict(
        PredictConfig(
            model=model, input=source, output=str(out), text_column=column, batch_size=batch_size, int8=int8
        )
    )
    return [json.loads(line)["label"] for line in out.read_text().splitlines()]


def theirs(model: str, texts: list[str], batch_size: int) -> list[str]:
    clf = transformers.pipeline("text-classification", model=model, tokenizer=model, device="cpu")
    rows = clf(texts, batch_size=batch_size, truncation=True, max_length=128)
    id_of = {v: k for k, v in clf.model.config.id2label.items()}
    return [str(id_of[r["label"]]) for r in rows]


def token_count(model: str, texts: list[str], ours: bool) -> int:
    """The tokens each side's model reads for `texts` (its own tokenizer, [CLS] and [SEP] included)."""
    if ours:
        from albert_lm.data.tokenizer import AlbertTokenizer

        tok = AlbertTokenizer.from_pretrained(model)
        return sum(len(tok.encode(t, max_length=128, truncation=True)) for t in texts)
    hf = transformers.AutoTokenizer.from_pretrained(model)
    return sum(len(ids) for ids in hf(texts, truncation=True, max_length=128)["input_ids"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--text-column", default="sentence")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--int8", action="store_true", help="also time `albert predict --int8`")
    p.add_argument("--against", help="a transformers classifier folder for the pipeline (default: --model)")
    a = p.parse_args()
    against = a.against or a.model
    with open(a.input, encoding="utf-8", newline="") as f:
        texts = [row[a.text_column] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    saved = json.loads((Path(a.model) / "finetune_config.json").read_text())
    # predict writes a GLUE task's conventional label names; the pipeline's ids map onto the same names
    labels = list(label_names(saved["task"])) if saved["task"] in GLUE_TASKS else saved["labels"]
    times: dict[str, list[float]] = {"albert-lm predict": [], "transformers pipeline, batch 1": [],
                                     f"transformers pipeline, batch {a.batch_size}": []}  # fmt: skip
    if a.int8:
        times["albert-lm predict --int8"] = []
    answers: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for name in times:
                start = time.perf_counter()
                if name.startswith("albert-lm predict"):
                    got = ours(
                        a.model,
                        a.input,
                        a.text_column,
                        a.batch_size,
                        Path(tmp) / "out.jsonl",
                        int8=name.endswith("--int8"),
                    )
                else:
                    batch = 1 if name.endswith("batch 1") else a.batch_size
                    # the pipeline gives the config's label names; map back to the task's labels by id
                    got = [labels[int(i)] for i in theirs(against, texts, batch)]
                times[name].append(time.perf_counter() - start)
                answers[name] = got
    base = statistics.median(times["albert-lm predict"])
    cpu = cpu_info()
    print(
        f"CPU: {cpu.model} ({cpu.generation}, {cpu.isa}), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {torch.get_num_threads()} threads; {len(texts)} rows, {a.repeats} repeats"
    )
    tokens = dict.fromkeys(
        [n for n in times if n.startswith("albert-lm")], token_count(a.model, texts, ours=True)
    )
    theirs_tokens = token_count(against, texts, ours=False)
    print(f"pipeline model: {against}")
    print("| path | median s | rows/s | tokens/s | albert-lm is | labels agree with albert-lm |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        n_tokens = tokens.get(name, theirs_tokens)
        agree = sum(x == y for x, y in zip(answers[name], answers["albert-lm predict"], strict=True)) / len(
            texts
        )
        print(
            f"| {name} | {m:.2f} | {len(texts) / m:.0f} | {n_tokens / m:.0f} | {m / base:.2f}x faster | {agree:.3f} |"
        )


if __name__ == "__main__":
    main()
