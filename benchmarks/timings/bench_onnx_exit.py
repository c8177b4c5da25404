"""Early exit in ONNX Runtime against the full-depth graph: accuracy, layers used and rows/s.

On an `albert export --int8` folder of a model fine-tuned with `--exit-heads`: model.onnx and
model.int8.onnx (full depth), then docs/finetune.md's loop (`albert_lm.deploy.onnx_exit.EXIT_SNIPPET`, as
written) on exit/ in fp32 and int8 at each patience. Accuracy on every dev row; speed on the first
--max-rows, texts sorted by length and cut into batches of 1 and 32 (tokenizing inside every timing, for
both), median of --repeats, on this process's threads. Writes OUTPUT (JSON).

    python benchmarks/timings/bench_onnx_exit.py --export runs/sst2-onnx --data glue/SST-2/dev.tsv \\
        --output runs/onnx-exit.json --max-rows 400
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from albert_lm import AlbertTokenizer
from albert_lm.deploy.onnx_exit import EXIT_SNIPPET
from albert_lm.kernels.hardware import cpu_info

Runner = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]


def full_depth(folder: Path, file: str, layers: int) -> Runner:
    tokenizer = AlbertTokenizer.from_pretrained(folder)
    session = ort.InferenceSession(str(folder / file), providers=["CPUExecutionProvider"])

    def run(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        batch = tokenizer(texts, padding=True, truncation=True, max_length=128)
        feed = {
            k: np.array(batch[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")
        }
        (logits,) = session.run(["logits"], feed)
        return logits, np.full(len(texts), layers)

    return run


def early_exit(folder: Path, int8: bool, patience: int) -> Runner:
    code = EXIT_SNIPPET.replace('"runs/sst2-onnx"', repr(str(folder)))
    if int8:
        code = code.replace('spec["layers"]]', 'spec["layers_int8"]]')
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # the documented loop, as written
    return lambda texts: namespace["predict"](texts, patience=patience)


def measure(
    run: Runner, texts: list[str], labels: np.ndarray, timed: list[str], repeats: int
) -> dict[str, Any]:
    logits, depth = zip(*(run(texts[i : i + 64]) for i in range(0, len(texts), 64)), strict=True)
    predicted = np.concatenate(logits).argmax(-1)
    row: dict[str, Any] = {
        "accuracy": float((predicted == labels).mean() * 100),
        "mean_depth": float(np.concatenate(depth).mean()),
    }
    order = sorted(timed, key=len)
    for batch in (1, 32):
        chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
        run(chunks[0])  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for chunk in chunks:
                run(chunk)
            times.append(time.perf_counter() - t0)
        row[f"rows_per_s_batch{batch}"] = len(order) / statistics.median(times)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--export", type=Path, required=True, help="albert export --int8 folder with exit/")
    p.add_argument("--data", type=Path, required=True, help="SST-2 dev.tsv (sentence, label)")
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--max-rows", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    spec = json.loads((args.export / "export.json").read_text())["early_exit"]
    layers = len(spec["schedule"])
    lines = [ln.rstrip("\n").split("\t") for ln in args.data.read_text().splitlines()[1:]]
    texts, labels = [x[0] for x in lines], np.array([int(x[1]) for x in lines])
    timed = texts[: args.max_rows]
    runs: list[tuple[str, Runner]] = [
        ("model.onnx, full depth", full_depth(args.export, "model.onnx", layers)),
        ("model.int8.onnx, full depth", full_depth(args.export, "model.int8.onnx", layers)),
    ]
    for patience in (2, 3, 4):
        runs.append((f"exit/ fp32, patience {patience}", early_exit(args.export, False, patience)))
        runs.append((f"exit/ int8, patience {patience}", early_exit(args.export, True, patience)))
    report: dict[str, Any] = {
        "cpu": cpu_info().describe(),
        "rows": len(texts),
        "timed_rows": len(timed),
        "runs": [],
    }
    for name, run in runs:
        row = {"run": name, **measure(run, texts, labels, timed, args.repeats)}
        print(json.dumps(row), flush=True)
        report["runs"].append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
