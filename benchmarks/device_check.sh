#!/usr/bin/env bash
# The H200 benchmark run of issue 4 (item 6), as one prepared script for the device tool:
#
#   run(command="bash benchmarks/device_check.sh", timeout_s=600)
#
# In order, each step under its own `timeout` so that one slow step cannot eat the budget
# (device time is ~15 minutes per session, one command at most 10; the step limits add up to
# STEP_SEEDS + STEP_ENGINE + STEP_CENTERS + ~20 s, 560 s by default):
#   1. seeds   : FedAvg, 230 centers × 100 rounds, 1, 5, 20 and 100 seeds, each one compiled call
#                (acceptance: the 100-seed call costs ≤ 10× the 1-seed call);
#   2. engine  : FedAvg and ABPS-X engine s/round (100 rounds) against per-client Python loops;
#   3. centers : FedAvg and ABPS κ = 1 + goal filter at 230, 1,000, 10,000 and 100,000 centers,
#                one subprocess per size (acceptance: ABPS at 100,000 centers runs).
# The acceptance sizes run early (seeds 1, 100, 5, 20; centers 230, 100000, 1000, 10000) so that a
# step cut by its limit loses the extra sizes, not the acceptance figures. The tables print sorted.
# Peak memory in the seeds step is the process's peak so far, so with this order the 5- and
# 20-seed rows show the 100-seed peak; centers sizes each run in a fresh process (exact per size).
# Each step writes $OUT/<step>.json (rewritten after every sub-step, so a step cut short by its
# timeout keeps what it finished) and $OUT/<step>.log; the end prints a summary of all three.
# Back home, append the rows to benchmarks/RESULTS.md with
#   python benchmarks/bench.py --record-from <files_at>/seeds.json,<files_at>/engine.json,<files_at>/centers.json
#
# Issue 3's figure, the whole 5-seed table1 experiment, is a step of its own that does not fit in
# the same session's device time as the three above; run it alone in another session:
#   run(command="STEPS=table1 OUT=$OUT bash benchmarks/device_check.sh", timeout_s=600)
# and record it with  python benchmarks/bench.py --record-from <files_at>/table1.json
#
# Environment: OUT (required: output folder), PYTHON (default python3: the image's, with JAX),
# STEPS (default "seeds engine centers"; "table1" for issue 3's step, limit STEP_TABLE1, default 460),
# STEP_SEEDS / STEP_ENGINE / STEP_CENTERS (seconds per step), CHILD_TIMEOUT (seconds per centers size),
# CENTERS (default 230,1000,10000,100000), SEEDS_LIST (default 1,5,20,100), ROUNDS (default 100; centers: CENTERS_ROUNDS, default 5).
set -u
: "${OUT:?set OUT to the output folder}"
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
STEP_SEEDS=${STEP_SEEDS:-170}
STEP_ENGINE=${STEP_ENGINE:-150}
STEP_CENTERS=${STEP_CENTERS:-220}
STEP_TABLE1=${STEP_TABLE1:-460}
STEPS=${STEPS:-seeds engine centers}
for s in $STEPS; do
  case $s in seeds|engine|centers|table1) ;; *) echo "unknown step '$s' in STEPS; choose from seeds, engine, centers, table1"; exit 2;; esac
done
CHILD_TIMEOUT=${CHILD_TIMEOUT:-150}
CENTERS=${CENTERS:-230,100000,1000,10000}
SEEDS_LIST=${SEEDS_LIST:-1,100,5,20}
ROUNDS=${ROUNDS:-100}
CENTERS_ROUNDS=${CENTERS_ROUNDS:-5}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - T0 )) s: $*"; }

stamp "environment"
(nvidia-smi -L || echo "no nvidia-smi") 2>/dev/null | head -2
timeout 60 "$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tail -1

step() {  # step NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  stamp "$name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$PY" benchmarks/bench.py "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "   $name: cut at its ${limit} s limit (partial results kept)"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && { echo "   $name: exit code $rc; last lines:"; tail -5 "$OUT/$name.log"; }
  return 0
}

wants() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }
wants seeds && step seeds "$STEP_SEEDS" --suite seeds --seeds-list "$SEEDS_LIST" --rounds "$ROUNDS"
wants engine && step engine "$STEP_ENGINE" --suite engine --rounds "$ROUNDS" --loop-rounds 2
wants centers && step centers "$STEP_CENTERS" --suite centers --centers "$CENTERS" --rounds "$CENTERS_ROUNDS" \
  --child-timeout "$CHILD_TIMEOUT"
wants table1 && step table1 "$STEP_TABLE1" --suite table1

stamp "summary"
files=""
for f in seeds engine centers table1; do [ -s "$OUT/$f.json" ] && files="$files${files:+,}$OUT/$f.json"; done
[ -n "$files" ] && timeout 60 "$PY" benchmarks/bench.py --print-from "$files"
stamp "done"
