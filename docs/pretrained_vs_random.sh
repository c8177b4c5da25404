#!/usr/bin/env bash
# Pretrained vs random initialisation on GLUE dev (docs/notes/pretrained_vs_random.md), end to end on CPU:
# 1. an 8000-piece tokenizer and SOP/MLM data from the 27 `small`-tier Gutenberg books,
# 2. albert-tiny (H128 L4 E32, 0.5M parameters) pretrained $PT_STEPS LAMB steps at batch 32,
# 3. the same architecture saved untrained (torch seed 1) with the same spiece.model,
# 4. both fine-tuned with identical settings on CoLA, SST-2, MRPC, STS-B and RTE,
# 5. a table of the dev scores.
# Usage: bash docs/pretrained_vs_random.sh   (from the repository root, venv in .venv)
# Big outputs go to $RUNS (default /work/runs), never into the repository.
set -euo pipefail

ALBERT=${ALBERT:-.venv/bin/albert}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-/work/shared/data}
RUNS=${RUNS:-/work/runs}
BOOKS=$DATA/pretrain/gutenberg/books
START=${START:-1}  # START=3: reuse $RUNS/tok8k, ptdata and pretrained, redo steps 3-5
PT_STEPS=${PT_STEPS:-6000}    # pretraining steps (the first, 2026-11-22 04:00 run: 700)
PT_WARMUP=${PT_WARMUP:-400}   # ~7% of them (first run: 50)
FT_EPOCHS=${FT_EPOCHS:-3}     # fine-tuning epochs on CoLA, MRPC, STS-B, RTE; SST-2 gets one
                              # (first run: fixed 60-150 steps, under one epoch everywhere)
mkdir -p "$RUNS"

TIER=${TIER:-small}            # books for the pretraining data: small (27 files, 10 MB) or all (253, 100 MB)

# The small tier of the books (27 files, 10 MB), from MANIFEST.tsv column `tier`; the tokenizer is
# always trained on these.
mapfile -t SMALL < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 == "small" {print d "/" $1}' \
    "$DATA/pretrain/gutenberg/MANIFEST.tsv")
mapfile -t ALL < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 != "tier" {print d "/" $1}' \
    "$DATA/pretrain/gutenberg/MANIFEST.tsv")
if [[ $TIER == all ]]; then PT_BOOKS=("${ALL[@]}"); else PT_BOOKS=("${SMALL[@]}"); fi
echo "${#SMALL[@]} small-tier books; pretraining data from ${#PT_BOOKS[@]} books"

if (( START <= 2 )); then
# 1. Tokenizer (8000 pieces, trained on the same books) and pretraining data.
if [[ ! -f $RUNS/tok8k/spiece.model ]]; then
time "$ALBERT" tokenizer train --input "${SMALL[@]}" --output "$RUNS/tok8k" \
    --vocab-size 8000 --strip-gutenberg --seed 1
fi
time "$ALBERT" data create --input "${PT_BOOKS[@]}" --tokenizer "$RUNS/tok8k/spiece.model" \
    --output "$RUNS/ptdata" --max-seq-length 128 --format paragraphs --strip-gutenberg --seed 1 \
    --no-progress

# 2. Pretraining: albert-tiny, LAMB, lr 0.01 at batch 32 (the demo's measured rate for this size),
#    PT_WARMUP warmup steps then linear decay to 0 at step PT_STEPS.
time "$ALBERT" pretrain --data "$RUNS/ptdata" --output "$RUNS/pretrained" --preset albert-tiny \
    --max-steps "$PT_STEPS" --batch-size 32 --learning-rate 0.01 --warmup-steps "$PT_WARMUP" \
    --eval-every $((PT_STEPS / 4)) --save-every $((PT_STEPS / 4)) --keep-last 1 --log-every 100 \
    --seed 1 --device cpu
fi

# 3. Random initialisation: the pretrained model's config.json, untrained, same tokenizer.
rm -rf "$RUNS/random" "$RUNS/ft"
"$PYTHON" benchmarks/experiments/random_init.py "$RUNS/pretrained" "$RUNS/random"

# 4. Fine-tuning, identical for both arms: batch 32, max length 128, lr 3e-4 (tiny models want more
#    than the paper's 1e-5..3e-5), seed 1, warmup = the task's default fraction, dropout = the task's
#    default; FT_EPOCHS epochs (SST-2: one), dev evaluated after each, the best kept.
#    The two arms run side by side.
declare -A DIR=([cola]=CoLA [sst2]=SST-2 [mrpc]=MRPC [stsb]=STS-B [rte]=RTE)
declare -A EPOCHS=([sst2]=1 [cola]=$FT_EPOCHS [mrpc]=$FT_EPOCHS [stsb]=$FT_EPOCHS [rte]=$FT_EPOCHS)
arm() {
    local init=$1
    for task in sst2 cola mrpc stsb rte; do
        /usr/bin/time -f "$init $task wall %e s" "$ALBERT" finetune --task "$task" \
            --model "$RUNS/$init" --data "$DATA/glue/${DIR[$task]}" --output "$RUNS/ft/$init/$task" \
            --epochs "${EPOCHS[$task]}" --batch-size 32 --learning-rate 3e-4 --max-seq-length 128 \
            --seed 1 --device cpu --log-every 100
    done
}
# One thread each: two 2-thread processes on 2 cores fight over them (OpenMP spin-waits) and both
# crawl (the first run: ~1.6 s per step of 32 sentences instead of a fraction of that).
OMP_NUM_THREADS=1 arm pretrained > "$RUNS/ft_pretrained.log" 2>&1 &
OMP_NUM_THREADS=1 arm random > "$RUNS/ft_random.log" 2>&1 &
wait
grep " wall " "$RUNS/ft_pretrained.log" "$RUNS/ft_random.log"

# 5. The table.
"$PYTHON" - "$RUNS" <<'EOF'
import json, sys
runs = sys.argv[1]
rows = [("cola", "mcc"), ("sst2", "accuracy"), ("mrpc", "accuracy"), ("mrpc", "f1"),
        ("stsb", "pearson"), ("stsb", "spearman"), ("rte", "accuracy")]
print("| task | metric | pretrained | random |\n|---|---|---|---|")
for task, metric in rows:
    r = [json.load(open(f"{runs}/ft/{a}/{task}/eval_results.json"))[metric] for a in ("pretrained", "random")]
    print(f"| {task} | {metric} | {r[0]:.3f} | {r[1]:.3f} |")
EOF

# Pretraining: held-out MLM/SOP accuracy against always guessing the most frequent masked piece.
grep '"eval"' "$RUNS/pretrained/metrics.jsonl"
"$PYTHON" -c "
import sys
from albert_lm.data.dataset import PretrainingDataset
from albert_lm.demo import unigram_baseline
d = sys.argv[1]
print(unigram_baseline(PretrainingDataset(d, 'train'), PretrainingDataset(d, 'eval')))
" "$RUNS/ptdata"
