# Sourced by the device scripts (gpu_check.sh, gpu_students.sh, gpu_glue_precision.sh, distill_glue_task.sh): one time-boxed step. Needs RUNS and LOG;
# DEADLINE (seconds from the script's start) is optional.

# run NAME LIMIT CMD...: CMD with its output in $RUNS/NAME.log, time-boxed (and ended 10 s before
# $DEADLINE, seconds from the script's start, when set); its tail in $OUT/log.txt.
run() {
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    if [[ -n ${DEADLINE:-} ]] && ((limit > DEADLINE - SECONDS - 10)); then
        limit=$((DEADLINE - SECONDS - 10))
        if ((limit < 5)); then
            echo "=== $name: skipped, no time left before the deadline" | tee -a "$LOG"
            return 124
        fi
    fi
    echo "=== $name (limit ${limit}s) $(date -u +%T)" | tee -a "$LOG"
    timeout --kill-after=10 "$limit" "$@" > "$RUNS/$name.log" 2>&1
    rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$LOG"
    grep -v -E '^\s*$|it/s\]|s/it\]' "$RUNS/$name.log" | tail -n 30 >> "$LOG"
    return $rc
}
