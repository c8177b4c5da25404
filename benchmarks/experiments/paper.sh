#!/usr/bin/env bash
# docs/paper.md, end to end on a CPU: the paper's ablations (`albert reproduce CLAIM`) on the shared books.
#   1. a tokenizer by the recipe ($RECIPE, cpu-1h) on the 27 `small`-tier books (as benchmarks/experiments/quality.sh),
#   2. SOP and NSP examples of the same books ($TIER: small, 10 MB; all, the 253 books) and tokenizer,
#   3. `albert reproduce CLAIM` for each claim in $CLAIMS, $TIME_BUDGET of pretraining per cell (10m; with a
#      unit: 90s, 10m, 1.5h), or exactly $MAX_STEPS steps per cell when set (equal steps, as the paper
#      compares, whatever else the machine runs). Each claim's output goes to $RUNS/CLAIM.log; a claim that
#      fails has the end of its log printed, the other claims still run, and the script exits 1.
# Usage: CLAIMS="sentence layers" MAX_STEPS=1500 bash benchmarks/experiments/paper.sh   (repository root, venv in .venv)
#        CLAIMS=sharing MAX_STEPS=2500 SEEDS=1,2 bash benchmarks/experiments/paper.sh   (each cell at two seeds)
#        CLAIMS= bash benchmarks/experiments/paper.sh   (the tokenizer and the data only, for `albert reproduce` by hand)
# Everything goes to $RUNS; steps and cells already done there are not done again.
set -euo pipefail

ALBERT=${ALBERT:-.venv/bin/albert}
DATA=${DATA:-../shared/data}
RECIPE=${RECIPE:-cpu-1h}
RUNS=${RUNS:-runs/paper}
TIER=${TIER:-small}
CLAIMS=${CLAIMS-sentence layers sharing embedding dropout depth}   # CLAIMS= (empty): only steps 1-2
TIME_BUDGET=${TIME_BUDGET:-${MINUTES:+${MINUTES}m}}   # MINUTES=N: the older spelling of TIME_BUDGET=Nm
TIME_BUDGET=${TIME_BUDGET:-10m}
MAX_STEPS=${MAX_STEPS:-}
SEEDS=${SEEDS:-${SEED:-1}}   # e.g. SEEDS=1,2,3: every cell once per seed, the table with mean and min-max
EVAL_FRACTION=${EVAL_FRACTION:-0.05}   # held out: 5% of 10 MB is about 1900 pairs to score each cell on
BOOKS=$DATA/pretrain/gutenberg/books
mkdir -p "$RUNS"

mapfile -t SMALL < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 == "small" {print d "/" $1}' \
    "$DATA/pretrain/gutenberg/MANIFEST.tsv")
if [[ $TIER == small ]]; then TEXT=("${SMALL[@]}"); else
    mapfile -t TEXT < <(awk -F'\t' -v d="$BOOKS" '!/^#/ && $2 != "tier" {print d "/" $1}' \
        "$DATA/pretrain/gutenberg/MANIFEST.tsv")
fi

[[ -f $RUNS/tokenizer/spiece.model ]] || "$ALBERT" tokenizer train --recipe "$RECIPE" --input "${SMALL[@]}" \
    --output "$RUNS/tokenizer" --strip-gutenberg --seed 1
for objective in sop nsp; do
    [[ -f $RUNS/data-$TIER-$objective/manifest.json ]] || "$ALBERT" data create --recipe "$RECIPE" \
        --input "${TEXT[@]}" --tokenizer "$RUNS/tokenizer/spiece.model" --output "$RUNS/data-$TIER-$objective" \
        --objective "$objective" --eval-fraction "$EVAL_FRACTION" --strip-gutenberg --seed 1 --no-progress
done

steps=(); [[ -n $MAX_STEPS ]] && steps=(--max-steps "$MAX_STEPS")
failed=()
for claim in $CLAIMS; do
    status=0
    "$ALBERT" reproduce "$claim" --data "$RUNS/data-$TIER-sop" --nsp-data "$RUNS/data-$TIER-nsp" \
        --output "$RUNS" --recipe "$RECIPE" --time-budget "$TIME_BUDGET" --seeds "$SEEDS" "${steps[@]}" \
        > "$RUNS/$claim.log" 2>&1 || status=$?
    if (( status != 0 )); then
        echo "$claim: FAILED (exit $status); the end of $RUNS/$claim.log:" >&2
        tail -n 20 "$RUNS/$claim.log" | sed 's/^/    /' >&2
        failed+=("$claim")
        continue
    fi
    echo "$claim: $RUNS/$claim/table.md"
done
if (( ${#failed[@]} )); then
    echo "failed: ${failed[*]} (their logs: $RUNS/CLAIM.log)" >&2
    exit 1
fi
