#!/usr/bin/env bash
# Task distillation on a GLUE task (TASK and its FOLDER: sst2 and SST-2 unless set) end to end on one
# machine (docs/distill.md, goal c): fine-tune the teacher (benchmarks/experiments/finetune_teacher.py), then
# `albert distill task` several students side by side, each with its own teacher cache, and pack what
# comes back. Made for a lent GPU, where the whole road fits in minutes; on a 2-core CPU an SST-2 epoch
# of the teacher alone takes about an hour.
#
# $SRC holds what the machine cannot fetch:
#   teacher/   a transformers encoder folder (fp16 weights are widened to fp32 first)
#   student/   the general-distilled ALBERT folder (config.json, spiece.model, model.safetensors, any dtype)
#   SST-2/     (FOLDER) train.tsv (or train.tsv.gz) and dev.tsv
#   text/      (with GENERAL_ARMS) plain-text files for general distillation (no Gutenberg headers)
#   STS-B/     (with GENERAL_ARMS) dev.tsv, the zero-shot check of general distillation
# Arms (ARMS, each NAME:START:LR:AUGMENT[:BATCH]; START is `student` or `random`, the same shape
#   untrained; BATCH 128 unless given): the general-distilled student at two rates with --augment, the
#   untrained one likewise, and the general-distilled one without augmentation. Each arm trains for
#   $BUDGET after its set-up.
# The teacher's GLUE-5 (TEACHER_GLUE, options of benchmarks/experiments/teacher_glue.py, e.g. "--workers 6"): the
#   teacher fine-tuned on five tasks beside the rest, from $SRC/glue/ (the GLUE-5 folders other than
#   FOLDER, each train.tsv or train.tsv.gz and dev.tsv; FOLDER's is the one above).
# General arms (GENERAL_ARMS, each NAME:GLOB): `albert distill general` on $SRC/text/GLOB for
# $GENERAL_BUDGET with the teacher's own weights, beside the teacher's fine-tuning; an arm's START may
# then name one (the student/ folder's weights are not needed then, only its config and spiece.model).
# Rehearsal on a CPU: DEVICE=cpu TEACHER_ARGS="--epochs 0.02 --max-train-examples 512" BUDGET=20s \
#   ARM_ARGS="--max-train-examples 256 --max-eval-examples 64" bash benchmarks/experiments/distill_glue_task.sh
set -uo pipefail

SRC=${SRC:-.gpu/d33}
TASK=${TASK:-sst2}
FOLDER=${FOLDER:-SST-2}
OUT=${OUT:-out/distill-$TASK}
RUNS=${RUNS:-runs/distill-$TASK}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-180s}
ARMS=${ARMS:-gd-1e-4:student:1e-4:8 gd-3e-4:student:3e-4:8 rnd-3e-4:random:3e-4:8 gd-3e-4-noaug:student:3e-4:0}
TEACHER_ARGS=${TEACHER_ARGS:---epochs 3 --batch-size 64 --learning-rate 5e-5}
ARM_ARGS=${ARM_ARGS:-}
GENERAL_ARMS=${GENERAL_ARMS:-}
GENERAL_BUDGET=${GENERAL_BUDGET:-90s}
GENERAL_ARGS=${GENERAL_ARGS:---max-segments 250000 --batch-size 256}
LIMIT_GENERAL=${LIMIT_GENERAL:-240}
LIMIT_TEACHER=${LIMIT_TEACHER:-200}
LIMIT_ARMS=${LIMIT_ARMS:-400}
TEACHER_GLUE=${TEACHER_GLUE:-}
LIMIT_GLUE=${LIMIT_GLUE:-400}
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT" "$RUNS"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/log.txt

source "$(dirname "$0")/timebox.sh"  # run NAME LIMIT CMD...

# The inputs: the task's files unpacked, the weights widened to fp32 (fp16 made them fit the trip here),
# the untrained arm's model (torch seed 1, the student's shape and tokenizer).
mkdir -p "$RUNS/teacher-base" "$RUNS/student" "$RUNS/random"
[[ -d $SRC/STS-B ]] && cp -r "$SRC/STS-B" "$RUNS/"
mkdir -p "$RUNS/$FOLDER" && rm -f "$RUNS/$FOLDER"/*.gz
cp "$SRC/$FOLDER/dev.tsv" "$RUNS/$FOLDER/"
if [[ -f $SRC/$FOLDER/train.tsv.gz ]]; then gzip -dc "$SRC/$FOLDER/train.tsv.gz" > "$RUNS/$FOLDER/train.tsv"
else cp "$SRC/$FOLDER/train.tsv" "$RUNS/$FOLDER/"; fi
cp -r "$SRC"/teacher/. "$RUNS/teacher-base/"
cp "$SRC"/student/config.json "$SRC"/student/spiece.model "$RUNS/student/"
cp "$SRC"/student/config.json "$SRC"/student/spiece.model "$RUNS/random/"
run inputs 60 "$PY" -c "import torch
from safetensors.torch import load_file, save_file
import os
for src, dst in (('$SRC/teacher', '$RUNS/teacher-base'), ('$SRC/student', '$RUNS/student')):
    if not os.path.isfile(src + '/model.safetensors'):
        continue
    w = load_file(src + '/model.safetensors')
    save_file({k: v.float().contiguous() for k, v in w.items()}, dst + '/model.safetensors', metadata={'format': 'pt'})
from albert_lm import AlbertConfig, AlbertForPreTraining
torch.manual_seed(1)
AlbertForPreTraining(AlbertConfig.from_pretrained('$RUNS/student')).save_pretrained('$RUNS/random')
import transformers, sys
print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__,
      'cuda', torch.cuda.is_available() and torch.cuda.get_device_name(0))" || exit 1

glue_pid=
if [[ -n $TEACHER_GLUE ]]; then
    mkdir -p "$RUNS/glue"
    cp -r "$SRC"/glue/. "$RUNS/glue/" && cp -r "$RUNS/$FOLDER" "$RUNS/glue/"
    for f in "$RUNS"/glue/*/*.gz; do [[ -f $f ]] && gzip -df "$f"; done
    # shellcheck disable=SC2086
    run teacher-glue "$LIMIT_GLUE" "$PY" benchmarks/experiments/teacher_glue.py --model "$RUNS/teacher-base" \
        --data "$RUNS/glue" --output "$RUNS/teacher-glue" $TEACHER_GLUE &
    glue_pid=$!
fi

general_pids=()
for arm in $GENERAL_ARMS; do
    IFS=: read -r name set <<< "$arm"  # set: a glob under $SRC/text
    # shellcheck disable=SC2086  # the *_ARGS are lists of options
    run "$name" "$LIMIT_GENERAL" "$PY" -m albert_lm.cli distill general --text "$SRC"/text/$set \
        --tokenizer "$RUNS/student" --teacher "$RUNS/teacher-base" --sts "$RUNS/STS-B/dev.tsv" \
        --time-budget "$GENERAL_BUDGET" --max-steps 1000000 --teacher-batch-size 512 --eval-every 500 \
        --save-every 100000 --log-every 200 --cache "$RUNS/cache-$name" --output "$RUNS/$name" --device "$DEVICE" \
        --overwrite --no-tensorboard $GENERAL_ARGS &
    general_pids+=($!)
done

# shellcheck disable=SC2086
run teacher "$LIMIT_TEACHER" "$PY" benchmarks/experiments/finetune_teacher.py --model "$RUNS/teacher-base" --task "$TASK" \
    --data "$RUNS/$FOLDER" --output "$RUNS/teacher" $TEACHER_ARGS || exit 1
((${#general_pids[@]})) && wait "${general_pids[@]}"

pids=()
for arm in $ARMS; do
    IFS=: read -r name start lr augment batch <<< "$arm"
    # shellcheck disable=SC2086
    run "$name" "$LIMIT_ARMS" "$PY" -m albert_lm.cli distill task --task "$TASK" --model "$RUNS/$start" \
        --teacher "$RUNS/teacher" --data "$RUNS/$FOLDER" --output "$RUNS/$name" --cache "$RUNS/cache-$name" \
        --augment "$augment" --learning-rate "$lr" --batch-size "${batch:-128}" --warmup-steps 300 --teacher-batch-size 512 \
        --time-budget "$BUDGET" --epochs 100 --eval-every 500 --save-every 100000 --log-every 200 \
        --device "$DEVICE" --seed 1 --overwrite --no-tensorboard $ARM_ARGS &
    pids+=($!)
done
wait "${pids[@]}"
[[ -n $glue_pid ]] && wait "$glue_pid"

# What comes back: logs, scores and curves; each arm's best student in fp16 (a tar each).
(cd "$RUNS" && tar czf "$OUT/results.tar.gz" --exclude='*.safetensors' --exclude='checkpoint-*' \
    --exclude='cache-*' --exclude="$FOLDER" --exclude='STS-B' --exclude='glue' --exclude='spiece.model' --exclude='*.pt' -- *) \
    2>> "$LOG"
for arm in $ARMS; do
    name=${arm%%:*}
    [[ -f $RUNS/$name/best/model.safetensors ]] || continue
    mkdir -p "$RUNS/pack/$name"
    cp "$RUNS/$name/best/"*.json "$RUNS/$name/best/spiece.model" "$RUNS/pack/$name/"
    "$PY" -c "import torch; from safetensors.torch import load_file, save_file
w = load_file('$RUNS/$name/best/model.safetensors')
save_file({k: v.half() for k, v in w.items()}, '$RUNS/pack/$name/model.safetensors', metadata={'format': 'pt'})"
    tar cf "$OUT/$name.tar" -C "$RUNS/pack" "$name"
done
echo "=== done $(date -u +%T)" | tee -a "$LOG"
