#!/usr/bin/env bash
# Students made at GPU scale (docs/gpu.md, round 3; docs/distill.md): on one lent GPU, in one call,
#   1. the five GLUE-5 teachers: all-MiniLM-L6-v2 fine-tuned on each task's full training set
#      (`albert distill teacher`, five processes side by side), and beside them
#   2. general distillation over every sentence of the books (`albert distill general`): the teacher's
#      sentence vectors and in-batch similarities, and its last layer's self-attention relations and token
#      states computed online in each step (MiniLMv2), for two student shapes (GENERAL_ARMS); then
#   3. task distillation (`albert glue --teachers`, three seeds): CoLA and SST-2 learn their teachers'
#      labels on the training text and augmented variants of it, MRPC and RTE their gold labels, STS-B as
#      a bi-encoder on the gold scores; the same runs for the student albert-lm ships (models/) and for the
#      general student of step 2 with the better zero-shot STS-B; for the shipped one, MRPC and RTE
#      task-distilled too.
# What the machine cannot fetch comes from $SRC (made by benchmarks/experiments/carry_weights.py pack and
# xz, docs/gpu.md "Round 3"): teacher/ (int8 weights, packed.safetensors.xz), book_sentences.txt.xz (one
# sentence per line), glue/{CoLA,SST-2,MRPC,STS-B,RTE}/{train,dev}.tsv.xz, site/blingfire (Bling Fire's module
# and its library, xz-compressed: albert_lm.cli imports it).
# Everything is time-boxed so that the call ends before DEADLINE (seconds); results under $OUT:
# log.txt, results.tar.gz (logs, metrics, every run's scores), each general student in fp16 (a tar each).
# Rehearsal on a CPU (not a measurement):
#   DEVICE=cpu GENERAL_BUDGET=20s TEACHER_ARGS="--max-train-examples 64 --max-eval-examples 32 --epochs 1" \
#   GLUE_ARGS="--max-train-examples 32 --max-eval-examples 32" SENTENCES=3000 STS_ARGS= \
#   bash benchmarks/experiments/gpu_students.sh
set -uo pipefail

SRC=${SRC:-.gpu/s3}
OUT=${OUT:-out/gpu-students}
RUNS=${RUNS:-runs/gpu-students}
DEVICE=${DEVICE:-cuda}
DEADLINE=${DEADLINE:-570}
SENTENCES=${SENTENCES:-2000000}      # most sentences read (the books hold 818,677)
GENERAL_BUDGET=${GENERAL_BUDGET:-90s}
# NAME:OVERRIDES (comma-separated KEY=VALUE beside the shipped student's shape: E 80, one layer x 6)
GENERAL_ARMS=${GENERAL_ARMS:-g80:embedding_size=80 g128x2:embedding_size=128,num_hidden_groups=2}
GENERAL_ARGS=${GENERAL_ARGS:---batch-size 512 --learning-rate 1e-3 --warmup-steps 100 --token-relation-weight 1 --token-hidden-weight 1}
TEACHER_ARGS=${TEACHER_ARGS:-}
GLUE_ARGS=${GLUE_ARGS:-}
GLUE_WORKERS=${GLUE_WORKERS:-15}
SEEDS=${SEEDS:-1,2,3}
LIMIT_TEACHERS=${LIMIT_TEACHERS:-150}
LIMIT_GENERAL=${LIMIT_GENERAL:-230}
LIMIT_GLUE=${LIMIT_GLUE:-330}
PY=${PY:-python3}

source "$(dirname "$0")/timebox.sh"  # device_start LOG_NAME; run NAME LIMIT CMD...; carried_site FROM TO
device_start log.txt || exit 1
carried_site "$SRC/site" "$RUNS/site" || exit 1

# The inputs: the teacher's weights restored to fp32, the text and GLUE unpacked.
"$PY" - "$SRC" "$RUNS" "$(dirname "$0")/carry_weights.py" <<'EOF' >> "$LOG" 2>&1 || { echo "inputs failed" | tee -a "$LOG"; exit 1; }
import lzma, shutil, subprocess, sys
from pathlib import Path
src, runs = Path(sys.argv[1]), Path(sys.argv[2])
packed = runs / "teacher-packed"
shutil.copytree(src / "teacher", packed, dirs_exist_ok=True)
with lzma.open(packed / "packed.safetensors.xz") as f, open(packed / "packed.safetensors", "wb") as g:
    shutil.copyfileobj(f, g)
(packed / "packed.safetensors.xz").unlink()
subprocess.run([sys.executable, sys.argv[3], "unpack", str(packed), str(runs / "teacher-base")], check=True)
with lzma.open(src / "book_sentences.txt.xz") as f, open(runs / "book_sentences.txt", "wb") as g:
    shutil.copyfileobj(f, g)
for xz in (src / "glue").glob("*/*.xz"):
    dst = runs / "glue" / xz.parent.name / xz.stem
    dst.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(xz) as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
import torch, transformers
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))
EOF
STS=${STS_ARGS-"--sts $RUNS/glue/STS-B/dev.tsv"}

# 1 and 2 side by side: five teachers, then each general arm (with the token-level losses the teacher's
# sentence vectors come from its pass in each step; without them the first arm fills the teacher cache
# and the second waits and reads it).
teacher_pids=()
for t in CoLA:cola:6:32:1e-4 SST-2:sst2:3:128:1e-4 MRPC:mrpc:6:32:1e-4 STS-B:stsb:3:32:1e-4 RTE:rte:6:32:1e-4; do
    IFS=: read -r folder task epochs batch lr <<< "$t"
    # shellcheck disable=SC2086
    run "teacher-$folder" "$LIMIT_TEACHERS" "${ALBERT[@]}" distill teacher --task "$task" --data "$RUNS/glue/$folder" \
        --teacher "$RUNS/teacher-base" --output "$RUNS/teachers/$folder" --epochs "$epochs" --batch-size "$batch" \
        --learning-rate "$lr" --device "$DEVICE" --overwrite -q $TEACHER_ARGS &
    teacher_pids+=($!)
done
general_pids=()
for arm in $GENERAL_ARMS; do
    IFS=: read -r name overrides <<< "$arm"
    over=()
    for kv in ${overrides//,/ }; do over+=(--model-override "$kv"); done
    # shellcheck disable=SC2086
    run "$name" "$LIMIT_GENERAL" "${ALBERT[@]}" distill general --recipe student-cpu-2h "${over[@]}" \
        --text "$RUNS/book_sentences.txt" --format lines --max-segments "$SENTENCES" --teacher "$RUNS/teacher-base" \
        $STS --time-budget "$GENERAL_BUDGET" --teacher-batch-size 1024 --eval-every 1000 --save-every 100000 \
        --log-every 100 --cache "$RUNS/cache" --output "$RUNS/$name" --device "$DEVICE" --overwrite -q \
        --no-tensorboard $GENERAL_ARGS &
    general_pids+=($!)
    sleep 20  # where a cache is filled, the first arm fills it; the second waits for it
done
wait "${teacher_pids[@]}"

# 3: task distillation, the shipped student first (its teachers are ready), then the better new one.
glue() { # glue NAME MODEL [more options]
    local name=$1 model=$2
    shift 2
    # shellcheck disable=SC2086
    run "glue-$name" "$LIMIT_GLUE" "${ALBERT[@]}" glue --model "$model" --data "$RUNS/glue" --teachers "$RUNS/teachers" \
        --output "$RUNS/glue-$name" --seeds "$SEEDS" --workers "$GLUE_WORKERS" --device "$DEVICE" -q \
        --learning-rates 3e-5 --epochs 3 \
        --task-setting cola.augment=16 --task-setting cola.epochs=1 --task-setting cola.batch_size=128 \
        --task-setting cola.learning_rates=2e-4 \
        --task-setting sst2.augment=2 --task-setting sst2.epochs=1 --task-setting sst2.batch_size=128 \
        --task-setting sst2.learning_rates=3e-4 \
        --task-setting mrpc.teachers=null --task-setting mrpc.learning_rates=1e-4 \
        --task-setting rte.teachers=null \
        --task-setting stsb.teachers=null --task-setting stsb.bi_encoder=true --task-setting stsb.learning_rates=2e-5 \
        --task-setting stsb.epochs=4 --task-setting stsb.batch_size=16 --task-setting stsb.precision=fp32 \
        $GLUE_ARGS "$@"
}
pairs() { # pairs NAME MODEL: MRPC and RTE task-distilled with 16 augmented variants (the shipped recipe
    # fine-tunes them on their gold labels)
    # shellcheck disable=SC2086
    run "glue-$1-pairs" "$LIMIT_GLUE" "${ALBERT[@]}" glue --model "$2" --data "$RUNS/glue" --teachers "$RUNS/teachers" \
        --output "$RUNS/glue-$1-pairs" --tasks mrpc,rte --seeds "$SEEDS" --workers 6 --device "$DEVICE" -q \
        --learning-rates 1e-4 --epochs 1 --batch-size 128 --augment 16 $GLUE_ARGS
}
{ glue shipped models/albert-minilm-small-en; pairs shipped models/albert-minilm-small-en; } &
shipped_pid=$!
wait "${general_pids[@]}"
best=$("$PY" - "$RUNS" $GENERAL_ARMS <<'EOF'
import json, sys
from pathlib import Path
runs, scores = Path(sys.argv[1]), {}
for arm in sys.argv[2:]:
    name = arm.split(":")[0]
    f = runs / name / "distill_results.json"
    if f.is_file():
        scores[name] = json.loads(f.read_text()).get("sts_pearson") or -1.0
print(max(scores, key=scores.get) if scores else "")
EOF
)
echo "=== general arm chosen by zero-shot STS-B: ${best:-none}" | tee -a "$LOG"
[[ -n $best ]] && glue "$best" "$RUNS/$best"
wait "$shipped_pid"

# What comes back: logs, scores and curves (no weights), and each general student in fp16.
(cd "$RUNS" && tar czf "$OUT/results.tar.gz" --exclude='*.safetensors' --exclude='checkpoint-*' --exclude='cache' \
    --exclude='glue' --exclude='book_sentences.txt' --exclude='teacher-base' --exclude='teacher-packed' \
    --exclude='site' --exclude='*.pt' --exclude='vocab.txt' \
    --exclude='tokenizer.json' --exclude='predictions' -- *) 2>> "$LOG"
for arm in $GENERAL_ARMS; do
    name=${arm%%:*}
    [[ -f $RUNS/$name/model.safetensors ]] || continue
    tar cf "$OUT/$name.tar" -C "$RUNS" --exclude='checkpoint-*' --exclude='events.*' --exclude='tokenizer.json' \
        --exclude='vocab.txt' "$name"  # the teacher's tokenizer files: here already
done
echo "=== done $(date -u +%T)" | tee -a "$LOG"
