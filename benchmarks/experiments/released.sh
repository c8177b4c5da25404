#!/usr/bin/env bash
# google-research's released albert-base-v2, converted and fine-tuned with albert-lm the way
# google-research fine-tuned it (run_glue.sh, the paper's Appendix A.4, run_squad_v1.py, run_race.py),
# scored on dev beside the figures google-research published (docs/released.md).
#
# Usage, from the repository root, on a machine with network access (a GPU for the full settings):
#   bash benchmarks/experiments/released.sh [--hub] [--seeds N] [--tasks LIST] [--output DIR] [--precision P] [--dry-run]
#
#   --hub          fine-tune the hub id albert/albert-base-v2 (transformers' conversion of the same
#                  weights): no download of the tarball, no `albert convert`
#   --seeds N      fine-tuning seeds per task, 1..N (default 3); each score is reported as mean, std,
#                  min and max over the seeds
#   --tasks LIST   comma-separated, in this order by default:
#                  rte,mrpc,stsb,cola,sst2,qnli,mnli,qqp,squad1,race
#                  a task whose data is absent is skipped with a message
#   --output DIR   everything goes here (default runs/released); runs already finished there are kept
#   --precision P  albert finetune --precision (auto, fp32, bf16, fp16; default: albert-lm's, auto)
#   --dry-run      print the commands instead of running them (data checks still run)
#
# Environment:
#   ALBERT_DATA         the data folder: glue/<Task>/{train,dev}.tsv and squad/dev-v1.1.json
#                       (default ../shared/data; see its README.md)
#   ALBERT_TARBALL      albert_base_v2.tar.gz already downloaded, its extracted folder, or a checkpoint
#                       prefix (default: downloaded from storage.googleapis.com into OUTPUT/downloads)
#   ALBERT_MODEL        a model folder already converted: no download, no conversion
#   ALBERT_SQUAD_TRAIN  train-v1.1.json (default: downloaded from the SQuAD site into OUTPUT/data)
#   ALBERT_RACE         the RACE release folder, RACE/{train,dev}/{middle,high}/*.txt; RACE is skipped
#                       without it (its 12000 steps over 4 x 512 tokens per question are the longest run)
#   ALBERT              the albert command (default: albert on PATH, else .venv/bin/albert)
#   PYTHON              python3 for the summary (standard library only; default python3)
#   ALBERT_EXTRA        extra options for every `albert finetune`, for rehearsals only (e.g.
#                       "--max-steps 4 --max-train-examples 64 --max-eval-examples 64"): scores then mean nothing
#
# Writes OUTPUT/results.json and OUTPUT/results.md (each task's dev scores over the seeds beside
# google-research's figure where it published one for albert-base-v2), OUTPUT/commands.txt (every
# command run), OUTPUT/logs/ (one log per run) and OUTPUT/runs/TASK/seed-N/ (albert finetune's folder:
# eval_results.json, metrics.jsonl, best/, predictions/).
set -euo pipefail

# ------------------------------------------------------------------------------ options
HUB=0
SEEDS=3
TASKS=rte,mrpc,stsb,cola,sst2,qnli,mnli,qqp,squad1,race
OUT=runs/released
PRECISION=
DRY=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --hub) HUB=1 ;;
        --seeds) SEEDS=${2:?--seeds needs a number}; shift ;;
        --tasks) TASKS=${2:?--tasks needs a list}; shift ;;
        --output) OUT=${2:?--output needs a folder}; shift ;;
        --precision) PRECISION=${2:?--precision needs a value}; shift ;;
        --dry-run) DRY=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "released.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ $SEEDS =~ ^[1-9][0-9]*$ ]] || { echo "released.sh: --seeds $SEEDS: expected a positive integer" >&2; exit 2; }

DATA=${ALBERT_DATA:-../shared/data}
PYTHON=${PYTHON:-python3}
if [[ -z ${ALBERT:-} ]]; then
    if command -v albert > /dev/null; then ALBERT=albert; else ALBERT=.venv/bin/albert; fi
fi
read -r -a EXTRA <<< "${ALBERT_EXTRA:-}"
TARBALL_URL=https://storage.googleapis.com/albert_models/albert_base_v2.tar.gz
SQUAD_TRAIN_URL=https://rajpurkar.github.io/SQuAD-explorer/dataset/train-v1.1.json
HUB_ID=albert/albert-base-v2

# ------------------------------------------------------------------------------ google-research's settings
# GLUE: learning rate, batch, steps, warm-up steps and checkpoint interval from run_glue.sh (max length 512
# there for every task); ALBERT dropout (encoder, hidden and attention) from the paper's Appendix A.4;
# classifier dropout 0.1 everywhere (classifier_utils.py). google-research evaluates every saved
# checkpoint on dev and keeps the best: --eval-every at the checkpoint interval does the same.
#   task  folder  lr    batch  steps  warmup  max_len  dropout  eval_every
GLUE_TABLE="
rte    RTE    3e-5  32   800    200   512  0.1  100
mrpc   MRPC   2e-5  32   800    200   512  0    100
stsb   STS-B  2e-5  16   3598   214   512  0    100
cola   CoLA   1e-5  16   5336   320   512  0    100
sst2   SST-2  1e-5  32   20935  1256  512  0    100
qnli   QNLI   1e-5  32   33112  1986  512  0    200
mnli   MNLI   3e-5  128  10000  1000  512  0    100
qqp    QQP    5e-5  128  14000  1000  512  0.1  100
"
# SQuAD 1.1 (README's run_squad_v1.py command; the paper's 3649 steps = 2 epochs of 87599 questions at
# batch 48, 365 = its 10% warm-up; checkpoints every 5000 steps, so only the last one is scored).
SQUAD1_FLAGS=(--learning-rate 5e-5 --batch-size 48 --max-steps 3649 --warmup-steps 365 --max-seq-length 384
    --dropout 0 --doc-stride 128 --max-query-length 64 --n-best 20 --max-answer-length 30 --eval-every 5000)
# RACE (README's run_race.py command: lr 1e-5, 12000 steps, warm-up 1000, batch 32, max length 512, question
# + option 128; for v2 "0 ALBERT DR"; run_race.py's dropout_prob 0.1 is the classifier's).
RACE_FLAGS=(--learning-rate 1e-5 --batch-size 32 --max-steps 12000 --warmup-steps 1000 --max-seq-length 512
    --max-qa-length 128 --dropout 0 --classifier-dropout 0.1 --eval-every 100)

IFS=, read -r -a WANTED <<< "$TASKS"
for task in "${WANTED[@]}"; do
    if [[ $task != squad1 && $task != race ]] && ! awk -v t="$task" '$1 == t {f = 1} END {exit !f}' <<< "$GLUE_TABLE"; then
        echo "released.sh: unknown task $task (GLUE: cola sst2 mrpc stsb rte qnli mnli qqp; squad1; race)" >&2
        exit 2
    fi
done

# ------------------------------------------------------------------------------ helpers
LOGS=$OUT/logs
RUNS=$OUT/runs
if ((!DRY)); then mkdir -p "$LOGS" "$RUNS"; fi
FAILED=()
exec 3>&1   # the console: commands are echoed there even when their own output goes to a log

# run CMD...: print the command (shell-quoted) and, unless --dry-run, run it and note it in commands.txt.
run() {
    local line
    printf -v line '%q ' "$@"
    echo "+ ${line% }" >&3
    ((DRY)) && return 0
    echo "${line% }" >> "$OUT/commands.txt"
    "$@"
}

skip() { echo "- $1: skipped, $2"; }

# finetune TASK DATA SEED FLAGS...: one `albert finetune` run in RUNS/TASK/seed-SEED, its output in LOGS.
# A run that finished there (eval_results.json) is kept; one that stopped half-way is redone (--overwrite).
finetune() {
    local task=$1 data=$2 seed=$3
    shift 3
    local dir=$RUNS/$task/seed-$seed
    if [[ -f $dir/eval_results.json ]]; then
        echo "= $task seed $seed: finished already ($dir/eval_results.json)"
        return 0
    fi
    local again=()
    [[ -d $dir ]] && again=(--overwrite)
    local cmd=("$ALBERT" finetune --task "$task" --model "$MODEL" --data "$data" --output "$dir" --seed "$seed"
        "$@" ${PRECISION:+--precision "$PRECISION"} "${again[@]}" "${EXTRA[@]}")
    if ((DRY)); then run "${cmd[@]}"; return 0; fi
    mkdir -p "$RUNS/$task"
    echo "> $task seed $seed: log in $LOGS/$task-seed-$seed.log"
    if ! run "${cmd[@]}" > "$LOGS/$task-seed-$seed.log" 2>&1; then
        echo "! $task seed $seed failed: see $LOGS/$task-seed-$seed.log (last lines below)" >&2
        tail -n 5 "$LOGS/$task-seed-$seed.log" >&2
        FAILED+=("$task/seed-$seed")
    fi
}

# ------------------------------------------------------------------------------ 1. the model
if [[ -n ${ALBERT_MODEL:-} ]]; then
    MODEL=$ALBERT_MODEL
    echo "model: $MODEL (ALBERT_MODEL, converted already)"
elif ((HUB)); then
    MODEL=$HUB_ID
    echo "model: $MODEL (hub id, no conversion)"
else
    MODEL=$OUT/albert-base-v2
    if [[ -n ${ALBERT_TARBALL:-} ]]; then
        SRC=$ALBERT_TARBALL
    else
        SRC=$OUT/downloads/albert_base_v2.tar.gz
        if [[ ! -f $SRC ]]; then
            ((DRY)) || mkdir -p "$OUT/downloads"
            run curl -fL --retry 3 -o "$SRC.part" "$TARBALL_URL"
            run mv "$SRC.part" "$SRC"
        fi
    fi
    if [[ -f $MODEL/config.json ]]; then
        echo "model: $MODEL (converted already)"
    else
        run "$ALBERT" convert --from-tf "$SRC" --output "$MODEL"
    fi
fi

# ------------------------------------------------------------------------------ 2. fine-tuning
for task in "${WANTED[@]}"; do
    case $task in
        squad1)
            dev=$DATA/squad/dev-v1.1.json
            if [[ ! -f $dev ]]; then skip squad1 "no $dev"; continue; fi
            sq=$OUT/data/squad1      # albert-lm reads train-v1.1.json and dev-v1.1.json from one folder
            if ((!DRY)); then mkdir -p "$sq"; fi
            [[ -e $sq/dev-v1.1.json ]] || run ln -s "$(cd "$(dirname "$dev")" && pwd)/dev-v1.1.json" "$sq/dev-v1.1.json"
            if [[ ! -e $sq/train-v1.1.json ]]; then
                if [[ -n ${ALBERT_SQUAD_TRAIN:-} ]]; then
                    [[ -f $ALBERT_SQUAD_TRAIN ]] || { skip squad1 "ALBERT_SQUAD_TRAIN=$ALBERT_SQUAD_TRAIN is no file"; continue; }
                    run ln -s "$(cd "$(dirname "$ALBERT_SQUAD_TRAIN")" && pwd)/$(basename "$ALBERT_SQUAD_TRAIN")" \
                        "$sq/train-v1.1.json"
                else
                    run curl -fL --retry 3 -o "$sq/train-v1.1.json.part" "$SQUAD_TRAIN_URL"
                    run mv "$sq/train-v1.1.json.part" "$sq/train-v1.1.json"
                fi
            fi
            for ((seed = 1; seed <= SEEDS; seed++)); do
                finetune squad1 "$sq" "$seed" "${SQUAD1_FLAGS[@]}"
                # The official evaluate-v1.1.py rule on the kept predictions: the same figures, scored apart.
                pred=$RUNS/squad1/seed-$seed/predictions/predictions.json
                if ((DRY)); then
                    run "$ALBERT" evaluate --task squad1 --data "$dev" --predictions "$pred"
                elif [[ -f $pred && ! -f $RUNS/squad1/seed-$seed/official_eval.json ]]; then
                    run "$ALBERT" evaluate --task squad1 --data "$dev" --predictions "$pred" \
                        2>> "$LOGS/squad1-seed-$seed.log" | tail -n 1 > "$RUNS/squad1/seed-$seed/official_eval.json"
                fi
            done
            ;;
        race)
            if [[ -z ${ALBERT_RACE:-} ]]; then skip race "set ALBERT_RACE to the RACE release folder"; continue; fi
            if [[ ! -d $ALBERT_RACE/train || ! -d $ALBERT_RACE/dev ]]; then
                skip race "no train/ and dev/ in ALBERT_RACE=$ALBERT_RACE"; continue
            fi
            for ((seed = 1; seed <= SEEDS; seed++)); do
                finetune race "$ALBERT_RACE" "$seed" "${RACE_FLAGS[@]}"
            done
            ;;
        *)
            row=$(awk -v t="$task" '$1 == t' <<< "$GLUE_TABLE")
            read -r _ folder lr batch steps warmup maxlen dropout every <<< "$row"
            dir=$DATA/glue/$folder
            if [[ ! -f $dir/train.tsv ]]; then skip "$task" "no $dir/train.tsv"; continue; fi
            if [[ ! -f $dir/dev.tsv && ! -f $dir/dev_matched.tsv ]]; then skip "$task" "no dev set in $dir"; continue; fi
            for ((seed = 1; seed <= SEEDS; seed++)); do
                finetune "$task" "$dir" "$seed" --learning-rate "$lr" --batch-size "$batch" --max-steps "$steps" \
                    --warmup-steps "$warmup" --max-seq-length "$maxlen" --dropout "$dropout" \
                    --classifier-dropout 0.1 --eval-every "$every"
            done
            ;;
    esac
done

# ------------------------------------------------------------------------------ 3. the summary
if ((DRY)); then
    echo "+ $PYTHON - $OUT   # the summary: $OUT/results.json and $OUT/results.md"
    exit 0
fi
"$PYTHON" - "$OUT" "$MODEL" "$SEEDS" <<'EOF'
import json
import statistics
import sys
from pathlib import Path

out, model, seeds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
# task -> the metrics reported (the first is the one google-research picks checkpoints by), and
# whether albert-lm gives it as a fraction (x100 here) or, as SQuAD's, a percentage.
METRICS = {
    "cola": ["mcc"], "sst2": ["accuracy"], "mrpc": ["accuracy", "f1"], "stsb": ["pearson", "spearman"],
    "rte": ["accuracy"], "qnli": ["accuracy"], "mnli": ["accuracy", "accuracy_mm"], "qqp": ["accuracy", "f1"],
    "squad1": ["f1", "exact_match"], "race": ["accuracy"],
}
PERCENT = {"squad1"}
# google-research's README, albert-base v2 row (Average, SQuAD1.1, SQuAD2.0, MNLI, SST-2, RACE):
# the tasks here it gives a figure for.
PUBLISHED = {"sst2": {"accuracy": 92.9}, "mnli": {"accuracy": 84.6},
             "squad1": {"f1": 90.2, "exact_match": 83.2}, "race": {"accuracy": 66.8}}

tasks = {}
for task, names in METRICS.items():
    runs = sorted((out / "runs" / task).glob("seed-*/eval_results.json"))
    if not runs:
        continue
    results = [json.loads(p.read_text()) for p in runs]
    scale = 1.0 if task in PERCENT else 100.0
    row = {"seeds": [int(p.parent.name.split("-")[1]) for p in runs], "metrics": {}}
    for name in names:
        vals = [r[name] * scale for r in results if r.get(name) is not None]
        if not vals:
            continue
        row["metrics"][name] = {
            "values": vals, "mean": statistics.fmean(vals),
            "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "min": min(vals), "max": max(vals),
            "published": PUBLISHED.get(task, {}).get(name),
        }
    row["best_steps"] = [r.get("step") for r in results]
    tasks[task] = row

commands = (out / "commands.txt").read_text().splitlines() if (out / "commands.txt").is_file() else []
summary = {"model": model, "seeds_asked": seeds, "tasks": tasks, "commands": commands,
           "published_source": "github.com/google-research/albert README, ALBERT-base V2 row"}
(out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")

lines = [
    f"# {model} fine-tuned with albert-lm, google-research's settings",
    "",
    "Dev scores x100 (SQuAD: the official script's percentages), mean +- std [min, max] over the seeds,",
    "each run scored at its best dev checkpoint as google-research's runners do.",
    "",
    "| task | metric | seeds | albert-lm | google-research |",
    "|---|---|---|---|---|",
]
for task, row in tasks.items():
    for name, m in row["metrics"].items():
        spread = f"{m['mean']:.1f} +- {m['std']:.1f} [{m['min']:.1f}, {m['max']:.1f}]"
        pub = "-" if m["published"] is None else f"{m['published']:.1f}"
        lines.append(f"| {task} | {name} | {len(m['values'])} | {spread} | {pub} |")
(out / "results.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "results: $OUT/results.json, $OUT/results.md"
if ((${#FAILED[@]})); then
    echo "failed runs: ${FAILED[*]}" >&2
    exit 1
fi
