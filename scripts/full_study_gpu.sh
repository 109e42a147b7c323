#!/bin/bash
# One experiment of config/full.yaml (the documents' scale) on one GPU: the problem sets and warm-ups its runs start
# from (with the further starts and their supervised controls where a run starts from one: `mathrl sft --starts`),
# then its runs K at a time on the GPU (mathrl launch --runs-per-gpu K). What its tables read comes back under
# OUT_DIR/results (each run's metrics, evaluations and summary, the warm-ups' summaries; no checkpoints), so that any
# machine can judge its claims:
#   mathrl aggregate --config config/full.yaml --set results=OUT_DIR/results
# (the config file and the GPUs a run takes can be changed: CONFIG=FILE, GPUS=N; WORK_DIR keeps the checkpoints;
# REUSE_WARMUPS=1 keeps a warm-up WORK_DIR already holds, so that a second experiment starts from the same checkpoint)
# Usage, from the repository root, with the project and its dependencies installed (pip install -e .; where pip
# cannot reach an index, PYTHONPATH=. and its dependencies, jsonschema among them, installed from carried wheels):
#   scripts/full_study_gpu.sh OUT_DIR EXPERIMENT [K [VARIANT ...]]   (no variants: every run of the experiment)
set -u
usage="usage: scripts/full_study_gpu.sh OUT_DIR EXPERIMENT [K [VARIANT ...]]"
OUT=${1:?$usage}
EXP=${2:?$usage}
K=${3:-5}
shift $(($# < 3 ? $# : 3))
WORK=${WORK_DIR:-/tmp/mathrl-full}   # checkpoints stay here
CONFIG=${CONFIG:-config/full.yaml}    # another layer over config/config.yaml (a smoke test's tiny one, say)
GPUS=${GPUS:-1}                       # 0: one CPU worker per run (a smoke test without a GPU)
F=(--config "$CONFIG" --set "results=$WORK")
mkdir -p "$OUT/logs" "$OUT/results"
export PYTHONUNBUFFERED=1

# the runs asked for, seed by seed, with the task each one's warm-up is of ("-" for a run from a random policy) and
# whether it starts from one of the warm-up's further starts (sft.TASK.starts: `init: start_PCT`)
python3 - "$CONFIG" "$EXP" "$@" > "$OUT/plan.txt" <<'EOF' || exit 1
import sys
from mathrl.pipeline.config import DEFAULT_CONFIG, load_config_and_runs
from mathrl.pipeline.layout import is_start
_, runs = load_config_and_runs((DEFAULT_CONFIG, sys.argv[1]))
experiment, variants = sys.argv[2], set(sys.argv[3:])
chosen = [s for s in runs.values() if s.experiment == experiment and (not variants or s.variant in variants)]
for spec in sorted(chosen, key=lambda s: s.seed):  # seed by seed: a time limit leaves the arms balanced
    init = spec.settings.init
    print(spec.run_id, "-" if init == "random" else spec.settings.task, "starts" if is_start(init) else "-")
EOF
echo "$(wc -l < "$OUT/plan.txt") runs of $EXP; warm-ups: $(awk '$2 != "-" {print $2}' "$OUT/plan.txt" | sort -u | xargs)"

for task in $(awk '$2 != "-" {print $2}' "$OUT/plan.txt" | sort -u); do
  T0=$(date +%s)
  if [ "${REUSE_WARMUPS:-0}" = 1 ] && [ -f "$WORK/sft/$task/model.pt" ] && [ -f "$WORK/sft/$task/summary.json" ]; then
    echo "warm-up $task: kept, $WORK/sft/$task"
  else
    python3 -m mathrl problems "${F[@]}" --task "$task" > "$OUT/logs/problems_$task.log" 2>&1 &&
      python3 -m mathrl sft "${F[@]}" --task "$task" > "$OUT/logs/sft_$task.log" 2>&1 || { tail "$OUT/logs/sft_$task.log"; exit 1; }
    echo "warm-up $task: $(($(date +%s) - T0)) s; $(tail -1 "$OUT/logs/sft_$task.log")"
  fi
  if awk -v t="$task" '$2 == t && $3 == "starts" {found = 1} END {exit !found}' "$OUT/plan.txt"; then
    T0=$(date +%s)  # the further starts and, from each, the supervised control
    python3 -m mathrl sft "${F[@]}" --task "$task" --starts > "$OUT/logs/sft_starts_$task.log" 2>&1 ||
      { tail "$OUT/logs/sft_starts_$task.log"; exit 1; }
    echo "starts $task: $(($(date +%s) - T0)) s"; grep "^sft $task" "$OUT/logs/sft_starts_$task.log"
  fi
done
(cd "$WORK" && find sft -type f ! -name '*.pt' -exec cp --parents {} "$OUT/results/" \;)  # the warm-ups' evaluations

# each run as it ends: its light files to OUT_DIR, so that a run cut short by a time limit loses only the runs
# still going
export OUT WORK K GPUS FLAGS="${F[*]}"
T0=$(date +%s)
awk '{print $1}' "$OUT/plan.txt" | xargs -P "$K" -n 1 sh -c '
  python3 -m mathrl launch --gpus "$GPUS" --runs-per-gpu "$K" --lock-dir "$WORK/locks" -- $FLAGS --run "$1" \
    > "$OUT/logs/$1.log" 2>&1
  rc=$?
  mkdir -p "$OUT/results/runs/$1"
  for f in "$WORK/runs/$1"/*; do case "$f" in *.pt | *.pt.*) ;; *) cp "$f" "$OUT/results/runs/$1/" ;; esac; done
  echo "$1 rc $rc"' _
echo "wall $(($(date +%s) - T0)) s for $(wc -l < "$OUT/plan.txt") runs, $K at a time"
