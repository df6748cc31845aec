#!/usr/bin/env bash
# The H200 benchmark run (issue 4 item 6; issue 11 items 4 and 5), as one prepared script for the device tool:
#
#   run(command="bash benchmarks/device_check.sh", timeout_s=460)     # then give_back
#
# Device time is ~15 minutes per session, machine start-up included, and one command may run 600 s, so the
# script keeps to one overall deadline: BUDGET seconds (default 400) from its start. Every step runs under
# `timeout` with a box of min(its own limit STEP_<NAME>, the time left before the deadline less RESERVE_S for
# the summary); a step whose box would be under MIN_STEP_S (default 15 s) is skipped, and says so. The default
# limits add up to the budget for the default steps:
#   STEP_ENV 45 + STEP_SEEDS 110 + STEP_ENGINE 95 + STEP_CENTERS 135 + RESERVE_S 15 = 400 = BUDGET
# and for the second session's steps (below):
#   STEP_ENV 45 + STEP_TABLE1 250 + STEP_IMAGES 90 + RESERVE_S 15 = 400 = BUDGET
# A step that finishes early leaves its time to the next ones (their boxes are still capped by their limits).
#
# Steps (each writes $OUT/<step>.json, rewritten after every sub-step, and $OUT/<step>.log; a step cut by its
# box keeps what it finished, a skipped one gets a stub JSON saying why; $OUT/steps.json lists every step's
# box, elapsed seconds, exit code and status: ok, cut, failed, killed or skipped):
#   env     : always first, a gate. One python imports jax, flax, optax, chex, distrax, orbax.checkpoint and
#             fedjax_sim, reports torch's presence and version and whether torch sees CUDA, prints
#             jax.default_backend() and the devices, and writes it all to $OUT/env.json. JAX_PLATFORMS is
#             exported as "cuda" unless set, so JAX cannot fall back to the CPU silently. The script STOPS
#             with exit code 3 and one line saying why when jax or fedjax_sim does not import, when JAX has no
#             backend, or when the backend is not "gpu" (unless DEVICE_CHECK_ALLOW_CPU=1: the CPU rehearsal).
#   seeds   : FedAvg, 230 centers × ROUNDS (100) rounds, SEEDS_LIST (1, 100, 5, 20 seeds: the acceptance pair
#             first), each seed count one compiled call (acceptance: the 100-seed call costs ≤ 10× the 1-seed
#             call), then a second call of ROUNDS2 rounds (default ROUNDS/2) per seed count for the cost per
#             extra round, (run s(R2) − run s(R1)) / (R2 − R1), without the fixed set-up costs.
#   engine  : FedAvg and ABPS-X (ENGINE_METHODS) engine s/round (ROUNDS rounds, 230 centers) against their
#             per-client JAX loops and, for FedAvg, a PyTorch per-client loop of the same MLP (on cuda when torch
#             sees the GPU, else one CPU thread; recorded as skipped without torch), LOOP_ROUNDS timed rounds after
#             a warm-up round. Speed-up: the loop's s/round over the engine's.
#   centers : FedAvg and ABPS κ = 1 + goal filter (CENTERS_METHODS) at CENTERS (230, 100000, 1000, 10000: the
#             acceptance sizes first), CENTERS_ROUNDS rounds, one child process per size (exact peak device
#             memory per size) under min(CHILD_TIMEOUT, the box's time left). Each child writes
#             $OUT/centers_<C>.json itself after the build and after each method; the parent merges them into
#             centers.json, and so does the summary for a child killed with its step (acceptance: ABPS at
#             100,000 centers runs).
#   table1  : the whole five-seed Table 1 experiment (20 rows, compiles included, as the CLI runs it); a row
#             that fails (a missing dependency) is recorded and the others still run. TABLE1_METHODS,
#             TABLE1_SEEDS, TABLE1_ROUNDS, COMPILE_WORKERS narrow it.
#   images  : FedAvg on Fashion-MNIST (K of N, engine vs JAX loop), IMAGES_ROUNDS rounds, only when the files
#             are in $FMNIST_PATH (if set) or /usr/share/datasets/fashion-mnist; otherwise a recorded skip.
#   fbsfl   : FBS-FL on Fashion-MNIST (a round of the game vs a FedAvg round at the same K, vs its per-client
#             loop), FBSFL_ROUNDS rounds (16: one PPO update), only when the Fashion-MNIST files are there.
#   ipfl    : iPFL's 1,000-client market in one call vs the per-pair loop, and (with Fashion-MNIST) an iPFL round
#             vs a FedAvg round, IPFL_ROUNDS rounds of 200 local iterations (benchmarks/ipfl_bench.py).
# Acceptance sizes run first so that a step cut by its box loses the extra sizes, not the acceptance figures;
# the tables print sorted. In the seeds step peak memory is the process's peak so far.
#
# Three sessions: table1 does not fit in one session's device time beside the others, and the papers' steps take
# a budget of their own (each line's limits add up to BUDGET = 400):
#   session 1:  run(command="bash benchmarks/device_check.sh", timeout_s=460)                # env seeds engine centers
#   session 2:  run(command="STEPS='table1 images' bash benchmarks/device_check.sh", timeout_s=460)   # 45+250+90+15
#   session 3:  run(command="STEPS='fbsfl ipfl' STEP_FBSFL=170 STEP_IPFL=170 bash benchmarks/device_check.sh",
#                   timeout_s=460)                                                              # 45+170+170+15
# Recording, back home (files_at: where the tool put $OUT's files):
#   python benchmarks/bench.py --record-from <files_at>/seeds.json,<files_at>/engine.json,<files_at>/centers.json
#   python benchmarks/bench.py --record-from <files_at>/table1.json,<files_at>/images.json,<files_at>/fbsfl.json,<files_at>/ipfl.json
# (--print-from the same files prints the tables; for centers.json both merge the centers_<C>.json beside it.)
#
# Environment (defaults in brackets): OUT (required: output folder), PYTHON [python3: the image's, with JAX],
# STEPS ["seeds engine centers"; any of seeds engine centers table1 images fbsfl ipfl, run in the order given; env is
# always run first], BUDGET [400], RESERVE_S [15], MIN_STEP_S [15], STEP_ENV [45], STEP_SEEDS [110],
# STEP_ENGINE [95], STEP_CENTERS [135], STEP_TABLE1 [250], STEP_IMAGES [90], STEP_FBSFL [90], STEP_IPFL [90] (seconds),
# JAX_PLATFORMS [cuda],
# DEVICE_CHECK_ALLOW_CPU [unset; 1: run on a non-GPU backend], ROUNDS [100], ROUNDS2 [ROUNDS/2],
# LOOP_ROUNDS [2], SEEDS_LIST [1,100,5,20], ENGINE_METHODS [fedavg,abps_x], CENTERS [230,100000,1000,10000],
# CENTERS_ROUNDS [5], CENTERS_METHODS [fedavg,abps_pq_k1_hom], CHILD_TIMEOUT [120], TABLE1_METHODS [all],
# TABLE1_SEEDS [11,22,33,44,55], TABLE1_ROUNDS [the config's], COMPILE_WORKERS [bench.py's], IMAGES_ROUNDS [2],
# FBSFL_ROUNDS [16], IPFL_ROUNDS [3],
# FMNIST_PATH, BENCH_COMPILE_CACHE [unset: cold compiles; a folder: JAX's persistent cache, rehearsals only],
# BENCH_SET [unset; "key=value;..." config overrides of every engine config, e.g. a rehearsal's tiny federation].
# CPU rehearsal (what tests/test_device_check.py runs, tiny sizes):
#   JAX_PLATFORMS=cpu DEVICE_CHECK_ALLOW_CPU=1 OUT=/tmp/dc BUDGET=240 ROUNDS=1 SEEDS_LIST=1,2 ... bash benchmarks/device_check.sh
set -u
: "${OUT:?set OUT to the output folder}"
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export JAX_PLATFORMS=${JAX_PLATFORMS:-cuda}
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
BUDGET=${BUDGET:-400}
RESERVE_S=${RESERVE_S:-15}
MIN_STEP_S=${MIN_STEP_S:-15}
STEP_ENV=${STEP_ENV:-45}
STEP_SEEDS=${STEP_SEEDS:-110}
STEP_ENGINE=${STEP_ENGINE:-95}
STEP_CENTERS=${STEP_CENTERS:-135}
STEP_TABLE1=${STEP_TABLE1:-250}
STEP_IMAGES=${STEP_IMAGES:-90}
STEP_FBSFL=${STEP_FBSFL:-90}
FBSFL_ROUNDS=${FBSFL_ROUNDS:-16}
STEP_IPFL=${STEP_IPFL:-90}
IPFL_ROUNDS=${IPFL_ROUNDS:-3}
STEPS=${STEPS:-seeds engine centers}
ROUNDS=${ROUNDS:-100}
ROUNDS2=${ROUNDS2:-}
LOOP_ROUNDS=${LOOP_ROUNDS:-2}
SEEDS_LIST=${SEEDS_LIST:-1,100,5,20}
ENGINE_METHODS=${ENGINE_METHODS:-fedavg,abps_x}
CENTERS=${CENTERS:-230,100000,1000,10000}
CENTERS_ROUNDS=${CENTERS_ROUNDS:-5}
CENTERS_METHODS=${CENTERS_METHODS:-fedavg,abps_pq_k1_hom}
CHILD_TIMEOUT=${CHILD_TIMEOUT:-120}
TABLE1_SEEDS=${TABLE1_SEEDS:-11,22,33,44,55}
IMAGES_ROUNDS=${IMAGES_ROUNDS:-2}
FM=${FMNIST_PATH:-/usr/share/datasets/fashion-mnist}
for s in $STEPS; do
  case $s in env|seeds|engine|centers|table1|images|fbsfl|ipfl) ;;
    *) echo "device_check: unknown step '$s' in STEPS; choose from seeds, engine, centers, table1, images, fbsfl, ipfl"
       exit 2;;
  esac
done
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=$(( T0 + BUDGET ))
stamp() { echo "== $(( $(date +%s) - T0 )) s: $*"; }

note_step() {  # note_step NAME STATUS BOX ELAPSED RC DETAIL: steps.json, and the step's JSON annotated (or a stub)
  BUDGET=$BUDGET T0=$T0 DEADLINE=$DEADLINE RESERVE_S=$RESERVE_S MIN_STEP_S=$MIN_STEP_S STEPS="$STEPS" \
  "$PY" - "$OUT" "$@" <<'EOF' || echo "   (could not write $OUT/steps.json)"
import json, os, pathlib, sys
out = pathlib.Path(sys.argv[1])
name, status, box, elapsed, rc, detail = sys.argv[2:8]
entry = {"status": status, "box_s": int(box), "elapsed_s": int(elapsed), "exit_code": int(rc), "detail": detail}

def load(path):
  try:
    value = json.loads(path.read_text())
    return value if isinstance(value, dict) else None
  except (OSError, ValueError):
    return None

def save(path, value):
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(value, indent=1, default=str))
  tmp.replace(path)

steps = load(out / "steps.json") or {
    "budget_s": int(os.environ["BUDGET"]), "started_epoch_s": int(os.environ["T0"]),
    "deadline_epoch_s": int(os.environ["DEADLINE"]), "reserve_s": int(os.environ["RESERVE_S"]),
    "min_step_s": int(os.environ["MIN_STEP_S"]), "steps_asked": os.environ["STEPS"].split(), "steps": {}}
entry["started_s"] = int(os.environ.get("STEP_START", os.environ["T0"])) - int(os.environ["T0"])
steps["steps"][name] = entry
save(out / "steps.json", steps)
result = load(out / f"{name}.json")
if result is None:  # skipped, or cut before it wrote anything
  result = {"step": name, "suites": {}}
result["device_check"] = entry
save(out / f"{name}.json", result)
EOF
}

run_step() {  # run_step NAME LIMIT CMD...: CMD (a bench.py call gets --json and --deadline) under its box
  local name=$1 limit=$2; shift 2
  local start left box
  start=$(date +%s)
  left=$(( DEADLINE - RESERVE_S - start ))
  box=$(( limit < left ? limit : left ))
  if [ "$box" -lt "$MIN_STEP_S" ]; then
    local why="box ${box} s = min(limit ${limit} s, ${left} s left before the deadline) < MIN_STEP_S ${MIN_STEP_S} s"
    stamp "$name: skipped ($why)"
    STEP_START=$start note_step "$name" skipped "$(( box > 0 ? box : 0 ))" 0 0 "$why"
    return 0
  fi
  stamp "$name (box ${box} s: limit ${limit} s, ${left} s left before the deadline)"
  if [ "$1" = bench ]; then
    shift
    set -- "$PY" benchmarks/bench.py "$@" --json "$OUT/$name.json" --deadline "$(( start + box - 3 ))"
  fi
  timeout --kill-after=5 "$box" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? elapsed status=ok detail=""
  elapsed=$(( $(date +%s) - start ))
  if [ $rc -eq 124 ] || { [ $rc -eq 137 ] && [ "$elapsed" -ge "$box" ]; }; then
    status=cut; detail="cut at its ${box} s box after ${elapsed} s (partial results kept)"
  elif [ $rc -eq 137 ]; then
    status=killed; detail="killed (SIGKILL, out of memory?) after ${elapsed} s"
  elif [ $rc -ne 0 ]; then
    status=failed; detail="exit code $rc"
  fi
  if [ $status = ok ]; then
    echo "   $name: ok in ${elapsed} s"
  else
    echo "   $name: $detail; last lines of $name.log:"
    tail -5 "$OUT/$name.log" | sed 's/^/     /'
  fi
  STEP_START=$start note_step "$name" "$status" "$box" "$elapsed" "$rc" "$detail"
  return 0
}

# --- env: the gate ----------------------------------------------------------------------------------------
stamp "env (JAX_PLATFORMS=$JAX_PLATFORMS, budget ${BUDGET} s)"
env_box=$(( STEP_ENV < BUDGET - RESERVE_S ? STEP_ENV : BUDGET - RESERVE_S ))
timeout --kill-after=5 "$env_box" "$PY" - "$OUT/env.json" <<'EOF' 2>&1 | tee "$OUT/env.log"
import importlib, json, os, platform, subprocess, sys
res = {"python": platform.python_version(), "executable": sys.executable,
       "jax_platforms": os.environ.get("JAX_PLATFORMS", ""), "modules": {}, "missing": []}

def version(mod, name):
  v = getattr(mod, "__version__", None)
  if v is None:
    try:
      from importlib import metadata
      v = metadata.version({"orbax.checkpoint": "orbax-checkpoint"}.get(name, name))
    except Exception:  # noqa: BLE001
      v = "?"
  return str(v)

for name in ("numpy", "jax", "jaxlib", "flax", "optax", "chex", "distrax", "orbax.checkpoint", "fedjax_sim"):
  try:
    res["modules"][name] = version(importlib.import_module(name), name)
  except Exception as err:  # noqa: BLE001 - record and go on: only jax and fedjax_sim are fatal
    res["modules"][name] = None
    res["missing"].append(name)
    res.setdefault("import_errors", {})[name] = f"{type(err).__name__}: {err}"[:300]
try:
  import jax
  res["backend"] = jax.default_backend()
  devices = jax.devices()
  res.update(devices=[str(d) for d in devices], device_kind=devices[0].device_kind, device_count=len(devices))
except Exception as err:  # noqa: BLE001 - e.g. JAX_PLATFORMS=cuda without a GPU
  res["backend"] = None
  res["backend_error"] = f"{type(err).__name__}: {err}"[:600]
try:
  import torch
  res["torch"] = {"version": torch.__version__, "cuda_available": bool(torch.cuda.is_available()),
                  "cuda": torch.version.cuda}
  if res["torch"]["cuda_available"]:
    res["torch"]["device"] = torch.cuda.get_device_name(0)
except Exception as err:  # noqa: BLE001 - torch is optional (the engine step's PyTorch loop is skipped)
  res["torch"] = {"version": None, "error": f"{type(err).__name__}: {err}"[:300]}
try:
  res["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                     timeout=15).stdout.strip().splitlines()
except Exception:  # noqa: BLE001
  res["nvidia_smi"] = None
res["fatal"] = [m for m in ("jax", "fedjax_sim") if m in res["missing"]]
with open(sys.argv[1], "w") as f:
  json.dump(res, f, indent=1)
print("modules: " + ", ".join(f"{k} {v}" for k, v in res["modules"].items() if v)
      + (f"; MISSING: {', '.join(res['missing'])}" if res["missing"] else ""))
for name, err in res.get("import_errors", {}).items():
  print(f"  {name}: {err}")
t = res["torch"]
print(f"torch: {t['version']}, sees CUDA: {t.get('cuda_available')}" + (f" ({t['device']})" if t.get("device") else "")
      if t["version"] else f"torch: not importable ({t['error']})")
print(f"nvidia-smi: {res['nvidia_smi']}")
print(f"jax.default_backend(): {res['backend']}; devices: {res.get('devices')}"
      + (f"; error: {res['backend_error']}" if res.get("backend_error") else ""))
print("fatal=" + ",".join(res["fatal"]))
print(f"backend={res['backend'] or 'none'}")
EOF
env_rc=${PIPESTATUS[0]}
backend=$(sed -n 's/^backend=//p' "$OUT/env.log" | tail -1)
fatal=$(sed -n 's/^fatal=//p' "$OUT/env.log" | tail -1)
stop=""
if [ "$env_rc" -ne 0 ] || [ -z "$backend" ]; then
  stop="the import check failed (exit code $env_rc); see $OUT/env.log"
elif [ -n "$fatal" ]; then
  stop="$fatal did not import; see $OUT/env.json"
elif [ "$backend" = none ]; then
  stop="JAX has no working backend with JAX_PLATFORMS=$JAX_PLATFORMS; see $OUT/env.json"
elif [ "$backend" != gpu ] && [ "${DEVICE_CHECK_ALLOW_CPU:-}" != 1 ]; then
  stop="JAX's backend is '$backend', not 'gpu' (JAX_PLATFORMS=$JAX_PLATFORMS): the figures would not be the GPU's; set DEVICE_CHECK_ALLOW_CPU=1 (and JAX_PLATFORMS=cpu) for a CPU rehearsal"
fi
env_elapsed=$(( $(date +%s) - T0 ))
if [ -n "$stop" ]; then
  STEP_START=$T0 note_step env stopped "$env_box" "$env_elapsed" 3 "$stop"
  echo "device_check: STOP (exit 3): $stop"
  exit 3
fi
STEP_START=$T0 note_step env ok "$env_box" "$env_elapsed" 0 "backend $backend"

# --- the steps, in STEPS order ------------------------------------------------------------------------------
for s in $STEPS; do
  case $s in
    env) ;;  # already run: the gate
    seeds)
      run_step seeds "$STEP_SEEDS" bench --suite seeds --seeds-list "$SEEDS_LIST" --rounds "$ROUNDS" \
        ${ROUNDS2:+--rounds2 "$ROUNDS2"};;
    engine)
      run_step engine "$STEP_ENGINE" bench --suite engine --rounds "$ROUNDS" --loop-rounds "$LOOP_ROUNDS" \
        --engine-methods "$ENGINE_METHODS";;
    centers)
      rm -f "$OUT"/centers_*.json  # only this run's children can be merged
      run_step centers "$STEP_CENTERS" bench --suite centers --centers "$CENTERS" --rounds "$CENTERS_ROUNDS" \
        --centers-methods "$CENTERS_METHODS" --child-timeout "$CHILD_TIMEOUT" --child-dir "$OUT";;
    table1)
      run_step table1 "$STEP_TABLE1" bench --suite table1 --table1-seeds "$TABLE1_SEEDS" \
        ${TABLE1_METHODS:+--table1-methods "$TABLE1_METHODS"} ${TABLE1_ROUNDS:+--rounds "$TABLE1_ROUNDS"} \
        ${COMPILE_WORKERS:+--compile-workers "$COMPILE_WORKERS"};;
    images)
      if [ -f "$FM/train-images-idx3-ubyte.gz" ] || [ -f "$FM/train-images-idx3-ubyte" ]; then
        run_step images "$STEP_IMAGES" bench --suite images --rounds "$IMAGES_ROUNDS" --loop-rounds 1 --fmnist-path "$FM"
      else
        stamp "images: skipped (no Fashion-MNIST files in $FM; set FMNIST_PATH)"
        STEP_START=$(date +%s) note_step images skipped 0 0 0 "no Fashion-MNIST files in $FM"
      fi;;
    fbsfl)
      if [ -f "$FM/train-images-idx3-ubyte.gz" ] || [ -f "$FM/train-images-idx3-ubyte" ]; then
        run_step fbsfl "$STEP_FBSFL" bench --suite fbsfl --rounds "$FBSFL_ROUNDS" --fmnist-path "$FM"
      else
        stamp "fbsfl: skipped (no Fashion-MNIST files in $FM; set FMNIST_PATH)"
        STEP_START=$(date +%s) note_step fbsfl skipped 0 0 0 "no Fashion-MNIST files in $FM"
      fi;;
    ipfl)  # the market part needs no files; the rounds part skips itself without Fashion-MNIST
      run_step ipfl "$STEP_IPFL" bench --suite ipfl --rounds "$IPFL_ROUNDS" --fmnist-path "$FM";;
  esac
done

# --- summary: merge what killed centers children left, print every table --------------------------------------
stamp "summary"
files=""
for f in seeds engine centers table1 images fbsfl ipfl; do
  [ -s "$OUT/$f.json" ] && files="$files${files:+,}$OUT/$f.json"
done
left=$(( DEADLINE - $(date +%s) ))
if [ -n "$files" ]; then
  timeout --kill-after=2 "$(( left > 10 ? left : 10 ))" "$PY" benchmarks/bench.py --merge-centers --print-from "$files" \
    || echo "   (the summary did not finish; the JSON files are complete as they are)"
fi
"$PY" - "$OUT/steps.json" <<'EOF' || true
import json, sys
s = json.load(open(sys.argv[1]))
print(f"steps (budget {s['budget_s']} s):")
for name, e in s["steps"].items():
  print(f"  {name:8s} {e['status']:8s} box {e['box_s']:4d} s, started at {e['started_s']:4d} s, took {e['elapsed_s']:4d} s"
        + (f"  {e['detail']}" if e["detail"] else ""))
EOF
stamp "done (budget ${BUDGET} s)"
exit 0
