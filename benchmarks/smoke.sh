#!/usr/bin/env bash
# Smoke check of the benchmarks (no pytest): a CPU rehearsal of benchmarks/device_check.sh at tiny sizes (env gate,
# seeds with the second call, engine with FedAvg's JAX and PyTorch loops and ABPS-X's loop, centers 230 with both
# methods, table1 with two rows, images skipped), then a sanity check of every JSON it left. Several minutes on
# 2 busy CPU cores (mostly XLA compiles). tests/test_device_check.py runs a smaller rehearsal under pytest.
#
#   bash benchmarks/smoke.sh [OUTDIR]          # SMOKE_SKIP_RUN=1: only check OUTDIR's JSON
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$ROOT/../venv/bin/python
[ -x "$PY" ] || PY=python3
OUTDIR=${1:-$(mktemp -d)}
mkdir -p "$OUTDIR"
cd "$ROOT"
if [ -z "${SMOKE_SKIP_RUN:-}" ]; then
  # Limits: 45 + 150 + 150 + 120 + 120 + 15 = 600 = BUDGET; FMNIST_PATH names no folder, so images is a recorded skip.
  JAX_PLATFORMS=cpu DEVICE_CHECK_ALLOW_CPU=1 OUT="$OUTDIR" PYTHON="$PY" BUDGET=600 \
    STEPS="seeds engine centers table1 images" STEP_SEEDS=150 STEP_ENGINE=150 STEP_CENTERS=120 STEP_TABLE1=120 \
    ROUNDS=1 ROUNDS2=2 SEEDS_LIST=1,5 LOOP_ROUNDS=1 ENGINE_METHODS=fedavg,abps_x \
    CENTERS=230 CENTERS_ROUNDS=1 CHILD_TIMEOUT=110 \
    TABLE1_METHODS=local,fedavg TABLE1_SEEDS=1 TABLE1_ROUNDS=1 COMPILE_WORKERS=2 FMNIST_PATH="$OUTDIR/no-fmnist" \
    bash benchmarks/device_check.sh
fi
"$PY" - "$OUTDIR" <<'EOF'
import json, math, pathlib, sys
out = pathlib.Path(sys.argv[1])
pos = lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > 0
load = lambda name: json.loads((out / name).read_text())
env = load("env.json")
assert env["backend"] == "cpu" and env["modules"]["fedjax_sim"] and not env["fatal"], env
steps = load("steps.json")
status = {k: e["status"] for k, e in steps["steps"].items()}
assert status == {"env": "ok", "seeds": "ok", "engine": "ok", "centers": "ok", "table1": "ok", "images": "skipped"}, steps
for name, e in steps["steps"].items():
  assert e["started_s"] + e["box_s"] <= steps["budget_s"] - steps["reserve_s"] + 1, (name, e)
print("env, steps: ok")
for name in ("seeds", "engine", "centers"):
  r = load(f"{name}.json")
  for k in ("machine", "jax", "date", "finished", "suites", "device_check"):
    assert r.get(k), f"{name}: missing {k}"
s = load("seeds.json")["suites"]["seeds"]
assert [x["seeds"] for x in s["runs"]] == [1, 5] and s["rounds"] == 1 and s["rounds2"] == 2, s["runs"]
for x in s["runs"]:
  assert "error" not in x, x
  for k in ("compile_s", "run_s", "s_per_round"):
    assert pos(x[k]), f"seeds: {k} = {x.get(k)!r}"
  assert abs(x["s_per_seed"] * x["seeds"] - x["run_s"]) < 1e-9
  assert abs(x["s_per_round"] * s["rounds"] - x["run_s"]) < 1e-9
  assert pos(x["second"]["compile_s"]) and pos(x["second"]["run_s"]), x
  assert abs(x["s_per_extra_round"] - (x["second"]["run_s"] - x["run_s"]) / (2 - 1)) < 1e-9
  assert pos(x["peak_memory"]["bytes"]), "seeds: peak memory"
t = s["largest_vs_1_seed"]
assert t["seeds"] == 5 and pos(t["ratio"]) and "extra_round_ratio" in t, t
print("seeds: ok")
e = load("engine.json")["suites"]["engine"]["methods"]
assert list(e) == ["fedavg", "abps_x"], e
for m, x in e.items():
  assert "error" not in x and pos(x["engine"]["s_per_round"]) and pos(x["loop"]["s_per_round"]) and pos(x["speedup"]), x
tl = e["fedavg"]["torch_loop"]
assert tl.get("skipped") == "torch not importable" if "skipped" in tl else (
    pos(tl["s_per_round"]) and tl["params"] == tl["engine_params"] and pos(e["fedavg"]["speedup_over_torch"])), tl
print(f"engine: ok (PyTorch loop: {tl.get('skipped') or tl['device']})")
c = load("centers.json")["suites"]["centers"]
assert {x["method"] for x in c["runs"]} == {"fedavg", "abps_pq_k1_hom"}, c["runs"]
child = load("centers_230.json")  # the child's own file under OUT
for x in c["runs"]:
  assert x["centers_requested"] == 230 and x["centers"] == 230 and pos(x["build_s"]), x
  assert x["child_status"] == "ok" and x["rounds_run"] == c["rounds"], x
  for k in ("compile_s", "run_s", "s_per_round"):
    assert pos(x[k]), f"centers: {k} = {x.get(k)!r}"
assert [x["method"] for x in child["runs"]] == ["fedavg", "abps_pq_k1_hom"], child
print("centers: ok")
t = load("table1.json")["suites"]["table1"]
assert "error" not in t and "in_progress" not in t, t
assert list(t["methods"]) == ["local", "fedavg"] and t["compile_workers"] == 2 and t["rows"] == 2, t
for m in t["methods"].values():
  assert pos(m["compile_s"]) and pos(m["run_s"]) and m["rounds_run"] == 1 and 0 < m["auroc_mean"] < 1, m
assert pos(t["wall_s"]) and t["wall_s"] <= t["compile_sum_s"] + t["run_sum_s"] + 5, t
print("table1: ok")
assert "no Fashion-MNIST files" in load("images.json")["device_check"]["detail"]
print("images: skipped, as asked")
EOF
echo "smoke ok ($OUTDIR)"
