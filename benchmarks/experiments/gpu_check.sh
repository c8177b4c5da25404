#!/usr/bin/env bash
# albert-lm on one CUDA GPU, each step time-boxed, results under $OUT (docs/gpu.md: how to prepare $GPU
# and what each step measures). The steps, run in the order STEPS gives:
#   env          the GPU, driver, torch and transformers versions, CPU cores
#   glue-random  `albert glue` on the recipe's architecture untrained, in the background until the next
#                timed step (it shares the GPU with the tests only: neither is a timing)
#   tests        tests/test_cuda.py on the GPU (parity in fp32, bf16 forward/backward, multi-tensor LAMB,
#                SIGKILL + resume bit-exact)
#   speed        benchmarks/experiments/gpu_speed.py: the albert-base step's variants (compiled, batch 256,
#                max-autotune, float8), albert-xxlarge bf16 against float8, the profiler's tables, float8's
#                loss against bf16's on the same real batches
#   unpad        benchmarks/timings/bench_unpad.py: useful tokens/s of GLUE text, padded against unpadded
#   pretrain     `albert pretrain --recipe $RECIPE --time-budget $BUDGET $PRETRAIN_ARGS` on $GPU/data, GPU
#                load sampled; the budget shrinks to end before DEADLINE
#   bench        `albert bench --device cuda`: albert-base step and inference against transformers, bf16
#   glue         `albert glue` on the pretrained model ($GLUE_RATES, $GLUE_SEEDS seeds, <= $GLUE_MAX_TRAIN
#                training examples per task), and the untrained arm's runs still missing
#   pack         logs, metrics and scores in $OUT/results.tar.gz, the model in bf16 in parts of 15 MB
# The bench writes $OUT/bench.json row by row, and $OUT/log.txt grows step by step: both survive a kill.
# Runs stay in $RUNS, so a second call on the same machine does what the first left (glue continues).
# Wheels in .whl/ (torchao for --float8) are installed first, into $RUNS/site, without the network.
# Rehearsal on a CPU: DEVICE=cpu BUDGET=30s GLUE_MAX_TRAIN=64 GLUE_MAX_EVAL=64 bash benchmarks/experiments/gpu_check.sh
set -uo pipefail

OUT=${OUT:-out/gpu-check}
GPU=${GPU:-.gpu}                       # tok/, data/ (albert data create), glue/{CoLA,SST-2,MRPC,STS-B,RTE}, site/ (optional)
RUNS=${RUNS:-runs/gpu-check}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-env glue-random tests pretrain pack bench glue pack}
RECIPE=${RECIPE:-gpu-10min}
BUDGET=${BUDGET:-6m}
PRETRAIN_ARGS=${PRETRAIN_ARGS:---torch-compile}
SPEED_ARGS=${SPEED_ARGS:-}             # more gpu_speed.py options (rehearsals: a tiny preset)
GLUE_RATES=${GLUE_RATES:-1e-4,3e-4}
GLUE_SEEDS=${GLUE_SEEDS:-1}
GLUE_MAX_TRAIN=${GLUE_MAX_TRAIN:-10000}
GLUE_WORKERS=${GLUE_WORKERS:-5}
RANDOM_ARM=${RANDOM_ARM:-yes}            # no: the glue step fine-tunes the pretrained model only
GLUE_MAX_EVAL=${GLUE_MAX_EVAL:-}
UNPAD_ARGS=${UNPAD_ARGS:-}       # rehearsals only: a table on part of dev is not GLUE's
LIMIT_TESTS=${LIMIT_TESTS:-100}
LIMIT_BENCH=${LIMIT_BENCH:-120}
LIMIT_SPEED=${LIMIT_SPEED:-200}
LIMIT_UNPAD=${LIMIT_UNPAD:-60}
LIMIT_PRETRAIN_EXTRA=${LIMIT_PRETRAIN_EXTRA:-60}  # start-up, final evaluation and save, past the budget
LIMIT_GLUE=${LIMIT_GLUE:-150}
LIMIT_GLUE_BESIDE=${LIMIT_GLUE_BESIDE:-90}        # the untrained arm beside the tests
DEADLINE=${DEADLINE:-}                 # seconds: no step runs past it (a lease's command limit, less margin)
PY=${PY:-python3}
source "$(dirname "$0")/timebox.sh"  # device_start LOG_NAME; run NAME LIMIT CMD...; carried_site FROM TO
device_start log.txt || exit 1
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RUNS/site" \
        .whl/*.whl >> "$LOG" 2>&1 && export PYTHONPATH=$PYTHONPATH:$(cd "$RUNS/site" && pwd)
fi

seconds() { "$PY" -c "from albert_lm.settings import parse_duration as p; print(int(p('$1')))"; }

carried_site "$GPU/site" "$RUNS/carried" || exit 1  # Bling Fire, where the machine lacks it

glue_cmd() { # glue_cmd NAME MODEL: the `albert glue` command line, in GLUE_CMD
    GLUE_CMD=("${ALBERT[@]}" glue --model "$2" --data "$GPU/glue" --output "$RUNS/$1" --seeds "$GLUE_SEEDS"
        --learning-rates "$GLUE_RATES" --epochs 3 --max-train-examples "$GLUE_MAX_TRAIN"
        --workers "$GLUE_WORKERS" --device "$DEVICE" ${GLUE_MAX_EVAL:+--max-eval-examples "$GLUE_MAX_EVAL"})
}

random_arm() { # random_arm LIMIT: the architecture untrained, fine-tuned in the background (pid in random_pid)
    [[ -f $RUNS/glue-random/glue_results.json ]] && return  # done in an earlier call
    [[ -f $RUNS/random/model.safetensors ]] || "$PY" benchmarks/experiments/random_init.py --recipe "$RECIPE" \
        --tokenizer "$GPU/tok" "$RUNS/random" > "$RUNS/random_init.log" 2>&1
    glue_cmd glue-random "$RUNS/random"
    run glue-random "$1" "${GLUE_CMD[@]}" &
    random_pid=$!
}

wait_random() { # nothing is timed while the untrained arm still shares the GPU
    if [[ -n ${random_pid:-} ]]; then
        wait "$random_pid"
        random_pid=
    fi
}

step_env() {
    run env 60 "$PY" -c 'import os, subprocess, sys, torch, transformers
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "cpus", os.cpu_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(p.name, p.multi_processor_count, "SMs", round(p.total_memory / 2**30), "GiB")
    print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
import albert_lm.cli
try:
    import torchao.float8, torchao
    print("torchao", torchao.__version__)
except ImportError as e:
    print("no torchao:", e)'
}

step_tests() {
    run tests "$LIMIT_TESTS" "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py -rs
}

step_bench() {
    wait_random
    if [[ $DEVICE == cuda ]]; then
        run bench "$LIMIT_BENCH" "${ALBERT[@]}" bench --device cuda --repeats 20 --json "$OUT/bench.json"
    else  # the same suite on the CPU, tiny and short: a rehearsal of the code path, not a measurement
        run bench "$LIMIT_BENCH" "$PY" -c "from albert_lm.bench.cuda import run_cuda_suite as r, format_cuda_table as f
import json; res = r('albert-tiny', 3, (False,), ((4, 64),), device='cpu'); json.dump(res, open('$OUT/bench.json', 'w'))
print(f(res))"
    fi
}

step_speed() {
    wait_random
    mkdir -p "$RUNS/profile"
    run speed "$LIMIT_SPEED" "$PY" benchmarks/experiments/gpu_speed.py --device "$DEVICE" --data "$GPU/data" \
        --profile "$RUNS/profile" --json "$OUT/speed.json" $SPEED_ARGS
}

step_unpad() {
    wait_random
    run unpad "$LIMIT_UNPAD" "$PY" benchmarks/timings/bench_unpad.py --device "$DEVICE" --data "$GPU/glue" \
        --tokenizer "$GPU/tok" --json "$OUT/unpad.json" $UNPAD_ARGS
}

step_pretrain() {
    local limit smi_pid= budget
    wait_random
    budget=$(seconds "$BUDGET")
    if [[ -n $DEADLINE ]] && ((budget > DEADLINE - SECONDS - LIMIT_PRETRAIN_EXTRA - 10)); then
        budget=$((DEADLINE - SECONDS - LIMIT_PRETRAIN_EXTRA - 10))  # a run that ends and saves
        echo "=== pretrain: budget cut to ${budget}s by the deadline" | tee -a "$LOG"
    fi
    limit=$((budget + LIMIT_PRETRAIN_EXTRA))
    if [[ $DEVICE == cuda ]]; then
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -l 5 \
            > "$RUNS/gpu_load.csv" 2>&1 &
        smi_pid=$!
    fi
    run pretrain "$limit" "${ALBERT[@]}" pretrain --recipe "$RECIPE" --data "$GPU/data" \
        --output "$RUNS/pretrain" --overwrite --time-budget "${budget}s" --device "$DEVICE" --seed 1 \
        --save-every 5000 --no-tensorboard $PRETRAIN_ARGS
    [[ -n $smi_pid ]] && kill "$smi_pid"
}

step_glue() {
    if [[ ! -f $RUNS/pretrain/model.safetensors ]]; then
        echo "=== glue: no pretrained model in $RUNS/pretrain" | tee -a "$LOG"
        return
    fi
    [[ $RANDOM_ARM == yes ]] && random_arm "$LIMIT_GLUE"  # unless finished beside the tests
    glue_cmd glue-pretrained "$RUNS/pretrain"
    run glue-pretrained "$LIMIT_GLUE" "${GLUE_CMD[@]}"
    wait_random
}

step_pack() {
    (cd "$RUNS" && tar czf "$OUT/results.tar.gz" --exclude='*.safetensors' --exclude='checkpoint-*' \
        --exclude='*.pt' --exclude='random' --exclude='site' --exclude='carried' --exclude='spiece.model' -- *) 2>> "$LOG"
    if [[ -f $RUNS/pretrain/model.safetensors && ! -f $OUT/model.bf16.safetensors.part-aa ]]; then
        # the model itself, in bf16, in parts of 15 MB (what comes back from a lent machine is limited)
        "$PY" -c "import torch; from safetensors.torch import load_file, save_file
w = load_file('$RUNS/pretrain/model.safetensors'); save_file({k: v.to(torch.bfloat16) for k, v in w.items()}, '$RUNS/model.bf16.safetensors')"
        split -b 15M "$RUNS/model.bf16.safetensors" "$OUT/model.bf16.safetensors.part-"
    fi
}

# The steps in the order STEPS gives; glue-random starts the untrained arm's GLUE in the background
# (until the next timed step, or the end).
for s in $STEPS; do
    case $s in
        env) step_env ;;
        glue-random) random_arm "$LIMIT_GLUE_BESIDE" ;;
        tests) step_tests ;;
        bench) step_bench ;;
        speed) step_speed ;;
        unpad) step_unpad ;;
        pretrain) step_pretrain ;;
        glue) step_glue ;;
        pack) step_pack ;;
        *) echo "unknown step $s (env glue-random tests speed unpad bench pretrain glue pack)" | tee -a "$LOG"; exit 2 ;;
    esac
done
wait_random
echo "=== done $(date -u +%T)" | tee -a "$LOG"
