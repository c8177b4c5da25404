"""Early exit on a model fine-tuned with `--exit-heads`: accuracy, layers used and rows/s by exit rule.

For each rule (full depth, each fixed depth, patience 1..4, a few confidence levels) it runs the task's dev
set through `albert evaluate`'s code (accuracy and mean layers used), then times the model on the same rows
as `albert predict` runs it, at batch 1 and at batch 32 (medians over repeats, in this process, on the same
threads; features made once, so tokenizing is outside every timing); transformers'
`AlbertForSequenceClassification` in fp32 on the same folder, features and length-grouped batches is timed
beside them, and int8 (`predict --int8`) at full depth and with patience 2. Writes OUTPUT.json and
OUTPUT.png (accuracy against mean layers used).

    python benchmarks/timings/bench_early_exit.py --model runs/sst2-exit/best --data glue/SST-2 \\
        --task sst2 --output runs/early-exit --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from albert_lm.deploy.predict import load_task_model, predict_examples
from albert_lm.kernels.hardware import cpu_info
from albert_lm.runtime.run import run_model
from albert_lm.training.evaluation import evaluate_model, read_split


def rules(layers: int, num_labels: int) -> list[tuple[str, dict[str, Any]]]:
    """The rules a model of `layers` and `num_labels` can run (`early_exit.check_rule`): a patience that
    leaves a layer to skip, a confidence for a classifier only."""
    found: list[tuple[str, dict[str, Any]]] = [("full depth", {})]
    found += [(f"depth {k}", {"depth": k}) for k in range(1, layers, 1 if layers <= 6 else 2)]
    found += [(f"patience {n}", {"patience": n}) for n in (1, 2, 3, 4) if n <= layers - 2]
    if num_labels > 1:
        found += [(f"confidence {c}", {"confidence": c}) for c in (0.8, 0.9, 0.95) if c > 1 / num_labels]
    return found


def rows_per_s(
    model: str, rule: dict[str, Any], examples: list[Any], batch: int, repeats: int, int8: bool = False
) -> float:
    """The model's rows/s on the examples' features (tokenized once, outside the timing, as for
    transformers below), batches of similar length as `albert predict` makes them."""
    tm = load_task_model(model, "cpu", "fp32", int8=int8, batch_size=batch, exit_rule=rule)
    features = tm.task.featurize(examples, tm.tokenizer, tm.max_len)
    pad = tm.tokenizer.pad_token_id
    run_model(tm.model, features[:batch], batch, pad, tm.device, tm.precision)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_model(tm.model, features, batch, pad, tm.device, tm.precision)
        times.append(time.perf_counter() - t0)
    return len(features) / statistics.median(times)


def labels(model: str, rule: dict[str, Any], examples: list[Any], int8: bool) -> list[str]:
    tm = load_task_model(model, "cpu", "fp32", int8=int8, exit_rule=rule)
    return [r["label"] for r in predict_examples(tm, examples, list(range(1, len(examples) + 1)))]


def int8_rows(model: str, examples: list[Any], repeats: int) -> list[dict[str, Any]]:
    """int8 (`predict --int8`) at full depth and with patience 2: rows/s, and the share of rows whose
    label equals fp32's under the same rule."""
    rows = []
    for name, rule in (("int8, full depth", {}), ("int8, patience 2", {"patience": 2})):
        same = labels(model, rule, examples, False)
        agree = sum(a == b for a, b in zip(same, labels(model, rule, examples, True), strict=True))
        row = {"rule": name, **rule, "agreement_with_fp32": agree / len(examples),
               "rows_per_s_batch1": rows_per_s(model, rule, examples, 1, repeats, int8=True),
               "rows_per_s_batch32": rows_per_s(model, rule, examples, 32, repeats, int8=True)}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def transformers_rows_per_s(model: str, examples: list[Any], batch: int, repeats: int) -> float:
    """transformers' model in fp32 on albert-lm's features (its model time: tokenizing is left out)."""
    import transformers

    tm = load_task_model(model, "cpu", "fp32", batch_size=batch)
    features = tm.task.featurize(examples, tm.tokenizer, tm.max_len)
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    from albert_lm.tasks.batches import collate, feature_length, length_bucketed_batches

    order = length_bucketed_batches([feature_length(f) for f in features], batch, None)  # as ours

    def run() -> None:
        with torch.no_grad():
            for idx in order:
                b = collate([features[i] for i in idx], tm.tokenizer.pad_token_id)
                hf(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")})

    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return len(features) / statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a fine-tuned folder with exit_heads.safetensors")
    p.add_argument("--data", required=True, help="the task's folder (its dev.tsv)")
    p.add_argument("--task", default="sst2")
    p.add_argument("--output", type=Path, required=True, help="OUTPUT.json and OUTPUT.png")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--max-rows", type=int, default=None, help="time this many dev rows (default: all; accuracy: all)"
    )
    args = p.parse_args()
    tm = load_task_model(args.model, "cpu", "fp32")
    layers = tm.model.config.num_hidden_layers
    examples = read_split(tm.task, Path(args.data), "dev", args.max_rows) or []
    report: dict[str, Any] = {"cpu": cpu_info().describe(), "threads": torch.get_num_threads(), "model": args.model,
                              "rows": len(examples), "rules": []}  # fmt: skip
    for name, rule in rules(layers, tm.model.config.num_labels):
        scores = evaluate_model(
            args.task, args.model, args.data, device="cpu", precision="fp32", exit_rule=rule
        )
        row = {"rule": name, **rule, "accuracy": scores.get(tm.task.main_metric),
               "mean_depth": scores.get("mean_depth", float(layers)),
               "rows_per_s_batch1": rows_per_s(args.model, rule, examples, 1, args.repeats),
               "rows_per_s_batch32": rows_per_s(args.model, rule, examples, 32, args.repeats)}  # fmt: skip
        report["rules"].append(row)
        print(json.dumps(row), flush=True)
    report["int8"] = int8_rows(args.model, examples, args.repeats)
    report["transformers_fp32"] = {
        "rows_per_s_batch1": transformers_rows_per_s(args.model, examples, 1, args.repeats),
        "rows_per_s_batch32": transformers_rows_per_s(args.model, examples, 32, args.repeats),
    }
    print(json.dumps(report["transformers_fp32"]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    plot(report, args.output.with_suffix(".png"), layers)


def plot(report: dict[str, Any], path: Path, layers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, marker in (("depth", "o-"), ("patience", "s"), ("confidence", "^")):
        pts = [
            r
            for r in report["rules"]
            if r["rule"].startswith(kind) or (kind == "depth" and r["rule"] == "full depth")
        ]
        pts.sort(key=lambda r: r["mean_depth"])
        ax.plot([r["mean_depth"] for r in pts], [r["accuracy"] for r in pts], marker, label=kind)
        if kind != "depth":
            for r in pts:
                ax.annotate(r["rule"].split()[-1], (r["mean_depth"], r["accuracy"]), fontsize=7)
    ax.set(
        xlabel=f"mean layers used (of {layers})", ylabel="dev accuracy", title="early exit: accuracy by depth"
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
