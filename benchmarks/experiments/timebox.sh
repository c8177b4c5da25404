# Sourced by the device scripts (gpu_check.sh, gpu_students.sh, gpu_glue_precision.sh, distill_glue_task.sh): their
# common start, one time-boxed step, and the Python modules a script carries. `run` needs RUNS and LOG;
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

# carried_site FROM TO: Python modules the machine lacks, carried in FROM (each file may be xz-compressed),
# unpacked into TO and put on PYTHONPATH. Bling Fire is one: albert_lm.cli imports it, and the lent GPU
# machine's image has no copy (round 3 carried its module and library, site/blingfire).
carried_site() {
    [[ -d $1 ]] || return 0
    mkdir -p "$2" && cp -r "$1/." "$2/" || return 1
    "${PY:-python3}" -c "import lzma, pathlib, shutil, sys
for xz in pathlib.Path(sys.argv[1]).rglob('*.xz'):
    with lzma.open(xz) as f, open(xz.with_suffix(''), 'wb') as g:
        shutil.copyfileobj(f, g)
    xz.unlink()" "$2" || return 1
    PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(cd "$2" && pwd)
    export PYTHONPATH
}

# device_start LOG_NAME: the device scripts' common start: albert-lm from the checkout, on PYTHONPATH; the
# command line in ALBERT; $OUT (made absolute) and $RUNS made; LOG=$OUT/LOG_NAME.
device_start() {
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    ALBERT=("${PY:-python3}" -m albert_lm.cli)
    mkdir -p "$OUT" "$RUNS" || return 1
    OUT=$(cd "$OUT" && pwd)
    LOG=$OUT/$1
}
