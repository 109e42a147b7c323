#!/bin/bash
# The checks a GPU machine is for, in one command (about 6 minutes on one H200):
#   1. the CUDA path: tests/test_cuda.py (skipped without a GPU) beside the model and launch tests;
#   2. speed: the RL step and time to accuracy on the GPU (python -m bench --device cuda);
#   3. the documents' scale: config/full.yaml's problems and addition warm-up, then the system
#      study's addition runs from the band, three algorithms x five seeds, five at a time on
#      the GPU through its slots (mathrl launch --runs-per-gpu 5).
# Usage: scripts/gpu_checks.sh OUT_DIR   (the project installed: pip install -e .)
set -u
OUT=${1:?usage: scripts/gpu_checks.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi dmon -s um -d 1 -o T > "$OUT/dmon.txt" 2>&1 &   # GPU utilisation beside the timings
DMON=$!
trap 'kill $DMON' EXIT

echo "== tests $(date +%T)"
python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_model.py tests/test_launch.py > "$OUT/tests.log" 2>&1
echo "tests rc $?"; tail -5 "$OUT/tests.log"

echo "== bench $(date +%T)"
python3 -m bench --only rl --only tta --device cuda --presets small,adder --batches 64,512 --steps 20 \
  --tta-tasks add --tta-budget 150 --out "$OUT/bench" 2> "$OUT/bench.err" | tail -30

echo "== full.yaml system study, addition $(date +%T)"
F="--config config/full.yaml --set results=$OUT/full"
python3 -m mathrl problems $F --task add && python3 -m mathrl sft $F --task add > "$OUT/sft.log" 2>&1 || exit 1
T0=$(date +%s)
for a in grpo ppo reinforce; do for s in 0 1 2 3 4; do echo "system__add_algorithm-${a}__s${s}"; done; done |
  xargs -P 5 -I{} sh -c "python3 -m mathrl launch --gpus 1 --runs-per-gpu 5 --lock-dir '$OUT/locks' -- $F --run {} \
    > '$OUT/full/{}.log' 2>&1; echo {} rc \$?"
echo "wall $(( $(date +%s) - T0 )) s for 15 runs, five at a time"
grep -h "^run " "$OUT"/full/*.log
