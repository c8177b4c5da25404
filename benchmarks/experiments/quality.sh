#!/usr/bin/env bash
# docs/quality.md, end to end on a CPU: does albert-lm's pretraining transfer, and does it beat
# transformers' own MLM pipeline at the same wall-clock budget?
#   1. a tokenizer and SOP/MLM data from the shared Gutenberg books, by the recipe ($RECIPE, cpu-1h),
#   2. side by side, one thread each, the same budget ($MINUTES): `albert pretrain --recipe $RECIPE` and
#      benchmarks/experiments/hf_mlm_pipeline.py (AlbertForMaskedLM + DataCollatorForLanguageModeling + AdamW, the
#      same tokenizer, books and model shape),
#   3. the same architecture untrained (random initialisation),
#   4. `albert glue` on all three (CoLA, SST-2, MRPC, STS-B, RTE; seeds and rates below),
#   5. with TAPT_MINUTES > 0, the task-adaptive row (d): the albert-lm model continued on the five tasks'
#      training text (`albert pretrain --init-from MODEL --text FILE`), then `albert glue` on it,
#   6. benchmarks/experiments/quality_report.py: held-out MLM of the pretrained models scored by one scorer on the
#      same examples, the GLUE table, the curves (PNG) and quality.json.
# Usage: bash benchmarks/experiments/quality.sh   (repository root, venv in .venv; MINUTES=15 for a quicker pass)
# Everything goes to $RUNS; steps already done there are not done again (an interrupted pass continues).
set -euo pipefail

ALBERT=${ALBERT:-.venv/bin/albert}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data}
RECIPE=${RECIPE:-cpu-1h}
MINUTES=${MINUTES:-60}
RUNS=${RUNS:-runs/quality}
GLUE_SEEDS=${GLUE_SEEDS:-1,2,3}
GLUE_RATES=${GLUE_RATES:-1e-4,3e-4,1e-3}
GLUE_EPOCHS=${GLUE_EPOCHS:-3}
GLUE_MAX_TRAIN=${GLUE_MAX_TRAIN:-0}    # 0: every training example (SST-2 has 67k)
HF_LR=${HF_LR:-1e-3}                   # AdamW's peak rate for the transformers pipeline
BOOKS=$DATA/pretrain/gutenberg/books
mkdir -p "$RUNS"

# The tokenizer is trained on the 27 `small`-tier books (10 MB); the pretraining data are all 253.
mapfile -t SMALL < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 == "small" {print d "/" $1}' \
    "$DATA/pretrain/gutenberg/MANIFEST.tsv")
mapfile -t ALL < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 != "tier" {print d "/" $1}' \
    "$DATA/pretrain/gutenberg/MANIFEST.tsv")

# 1. Tokenizer and data.
[[ -f $RUNS/tokenizer/spiece.model ]] || "$ALBERT" tokenizer train --recipe "$RECIPE" --input "${SMALL[@]}" \
    --output "$RUNS/tokenizer" --strip-gutenberg --seed 1
[[ -f $RUNS/data/manifest.json ]] || "$ALBERT" data create --recipe "$RECIPE" --input "${ALL[@]}" \
    --tokenizer "$RUNS/tokenizer/spiece.model" --output "$RUNS/data" --strip-gutenberg --seed 1 --no-progress

# 2. Both pipelines at once, one thread each (two threads of one process on two cores mostly wait on
#    each other at this size; one each is also the fair split of the machine).
OURS=$RUNS/albert-lm-${MINUTES}m
THEIRS=$RUNS/transformers-${MINUTES}m
# The recipe's model shape for the transformers side: its preset and model overrides, as KEY=VALUE.
mapfile -t SHAPE < <("$PYTHON" -c "import json, sys; r = json.load(open(sys.argv[1]))['pretrain']
print('--preset'); print(r.get('preset', 'albert-base'))
for k, v in r.get('model_overrides', {}).items(): print('--model-override'); print(f'{k}={json.dumps(v)}')" \
    "albert_lm/recipes/$RECIPE.json")
if [[ ! -f $OURS/model.safetensors ]]; then
    resume=(); [[ -d $OURS ]] && compgen -G "$OURS/checkpoint-*" > /dev/null && resume=(--resume)
    OMP_NUM_THREADS=1 "$ALBERT" pretrain --recipe "$RECIPE" --data "$RUNS/data" --output "$OURS" \
        --time-budget "${MINUTES}m" --eval-every 500 --save-every 1000 --seed 1 --device cpu \
        --no-tensorboard "${resume[@]}" > "$RUNS/albert-lm-${MINUTES}m.log" 2>&1 &
fi
if [[ ! -f $THEIRS/model.safetensors ]]; then
    "$PYTHON" benchmarks/experiments/hf_mlm_pipeline.py --data "$RUNS/data" --text "${ALL[@]}" --output "$THEIRS" \
        --minutes "$MINUTES" --threads 1 "${SHAPE[@]}" --seq 64 \
        --batch-size 32 --lr "$HF_LR" --eval-every-min 2 > "$RUNS/transformers-${MINUTES}m.log" 2>&1 &
fi
wait

# 3. Random initialisation: the albert-lm model's config.json, untrained (seed 1), the same tokenizer.
RANDOM_INIT=$RUNS/random
if [[ ! -f $RANDOM_INIT/model.safetensors ]]; then
    "$PYTHON" benchmarks/experiments/random_init.py "$OURS" "$RANDOM_INIT"
fi

# 4. GLUE for each model (runs already finished are kept).
cap=(); (( GLUE_MAX_TRAIN > 0 )) && cap=(--max-train-examples "$GLUE_MAX_TRAIN")
for arm in "$OURS" "$RANDOM_INIT" "$THEIRS"; do  # (a) first: ours against random
    "$ALBERT" glue --model "$arm" --data "$DATA/glue" --output "$arm-glue" --seeds "$GLUE_SEEDS" \
        --learning-rates "$GLUE_RATES" --epochs "$GLUE_EPOCHS" "${cap[@]}" --workers 2
done

# 5. (d), its own column, never mixed into (a): task-adaptive pretraining (Gururangan et al. 2020), the
#    albert-lm model continued for $TAPT_MINUTES on the five tasks' unlabeled training text, one command.
TAPT_MINUTES=${TAPT_MINUTES:-0}       # 0: left out
tapt=()
if (( TAPT_MINUTES > 0 )); then
    TAPT=$OURS-tapt-${TAPT_MINUTES}m
    [[ -f $RUNS/tasks.txt ]] || "$PYTHON" benchmarks/experiments/task_text.py --glue "$DATA/glue" --output "$RUNS/tasks.txt"
    if [[ ! -f $TAPT/model.safetensors ]]; then
        resume=(); [[ -d $TAPT ]] && compgen -G "$TAPT/checkpoint-*" > /dev/null && resume=(--resume)
        "$ALBERT" pretrain --recipe "$RECIPE" --init-from "$OURS" --text "$RUNS/tasks.txt" --output "$TAPT" \
            --time-budget "${TAPT_MINUTES}m" --seed 1 --device cpu --no-tensorboard "${resume[@]}" \
            > "$TAPT.log" 2>&1
    fi
    "$ALBERT" glue --model "$TAPT" --data "$DATA/glue" --output "$TAPT-glue" --seeds "$GLUE_SEEDS" \
        --learning-rates "$GLUE_RATES" --epochs "$GLUE_EPOCHS" "${cap[@]}" --workers 2
    tapt=(--tapt "$TAPT")
fi

# 6. The report.
"$PYTHON" benchmarks/experiments/quality_report.py --data "$RUNS/data" --ours "$OURS" --theirs "$THEIRS" \
    --random "$RANDOM_INIT" "${tapt[@]}" --output "$RUNS/report-${MINUTES}m"
