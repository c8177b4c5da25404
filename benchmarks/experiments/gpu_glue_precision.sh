#!/usr/bin/env bash
# Does fine-tuning in bf16 rather than fp32 cost a freshly pretrained model its CoLA and STS-B? (docs/gpu.md,
# round 3: the pretraining drop.) Round 1 ran `albert glue` in fp32 (its default then), round 2 in bf16
# autocast (`--precision auto` since); their GLUE-5 differ by 8.5 points, most of it CoLA and STS-B.
# Here one model pretrained on the GPU (the gpu-10min recipe, eager, MAX_STEPS steps, seed 1) is
# fine-tuned on CoLA and STS-B both ways, side by side: seeds 1,2,3, rate 1e-4, 3 epochs, at most 10,000
# training examples (both rounds' protocol).
# What the machine cannot fetch comes from $SRC: tok/ (`albert tokenizer train --recipe gpu-10min` on the
# books), book_sentences.txt.xz (the books' distinct sentences, one per line), glue/{CoLA,STS-B}/*.tsv.xz,
# and site/blingfire (Bling Fire's module and its library, xz-compressed: albert_lm.cli imports it).
# Results under $OUT: precision-log.txt and precision.tar.gz (logs, metrics, both tables).
# Rehearsal on a CPU (not a measurement):
#   DEVICE=cpu MAX_STEPS=5 GLUE_ARGS="--max-train-examples 32 --max-eval-examples 32" SEEDS=1 \
#   bash benchmarks/experiments/gpu_glue_precision.sh
set -uo pipefail

SRC=${SRC:-.gpu/s3}
OUT=${OUT:-out/gpu-students}       # beside the students' results: one call brings both back
RUNS=${RUNS:-runs/gpu-precision}
DEVICE=${DEVICE:-cuda}
DEADLINE=${DEADLINE:-570}
MAX_STEPS=${MAX_STEPS:-3000}
SEEDS=${SEEDS:-1,2,3}
GLUE_ARGS=${GLUE_ARGS:---max-train-examples 10000}
LIMIT_DATA=${LIMIT_DATA:-120}
LIMIT_PRETRAIN=${LIMIT_PRETRAIN:-280}
LIMIT_GLUE=${LIMIT_GLUE:-200}
PY=${PY:-python3}

source "$(dirname "$0")/timebox.sh"  # device_start LOG_NAME; run NAME LIMIT CMD...; carried_site FROM TO
device_start precision-log.txt || exit 1
carried_site "$SRC/site" "$RUNS/site" || exit 1

"$PY" - "$SRC" "$RUNS" <<'EOF' >> "$LOG" 2>&1 || { echo "inputs failed" | tee -a "$LOG"; exit 1; }
import lzma, shutil, sys
from pathlib import Path
src, runs = Path(sys.argv[1]), Path(sys.argv[2])
(runs / "text").mkdir(exist_ok=True)
with lzma.open(src / "book_sentences.txt.xz") as f, open(runs / "text" / "books.txt", "wb") as g:
    shutil.copyfileobj(f, g)
for task in ("CoLA", "STS-B"):
    for xz in (src / "glue" / task).glob("*.xz"):
        (runs / "glue" / task).mkdir(parents=True, exist_ok=True)
        with lzma.open(xz) as f, open(runs / "glue" / task / xz.stem, "wb") as g:
            shutil.copyfileobj(f, g)
EOF

run data "$LIMIT_DATA" "${ALBERT[@]}" data create --recipe gpu-10min --input "$RUNS/text/books.txt" --format lines \
    --tokenizer "$SRC/tok" --output "$RUNS/data" --seed 1 --workers 4 --no-progress --overwrite || exit 1
run pretrain "$LIMIT_PRETRAIN" "${ALBERT[@]}" pretrain --recipe gpu-10min --data "$RUNS/data" --output "$RUNS/pretrain" \
    --time-budget none --max-steps "$MAX_STEPS" --save-every 100000 --device "$DEVICE" --seed 1 --no-tensorboard \
    --no-plot --overwrite -q || exit 1
for p in fp32 bf16; do
    # shellcheck disable=SC2086
    run "glue-$p" "$LIMIT_GLUE" "${ALBERT[@]}" glue --model "$RUNS/pretrain" --data "$RUNS/glue" \
        --output "$RUNS/glue-$p" --tasks cola,stsb --seeds "$SEEDS" --learning-rates 1e-4 --epochs 3 --workers 6 \
        --device "$DEVICE" --precision "$p" -q $GLUE_ARGS &
done
wait
(cd "$RUNS" && tar czf "$OUT/precision.tar.gz" --exclude='*.safetensors' --exclude='checkpoint-*' --exclude='data' \
    --exclude='text' --exclude='glue' --exclude='site' --exclude='*.pt' --exclude='predictions' -- *) 2>> "$LOG"
echo "=== done $(date -u +%T)" | tee -a "$LOG"
