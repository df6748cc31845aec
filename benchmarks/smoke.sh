#!/usr/bin/env bash
# Smoke check of benchmarks/bench.py (no pytest): the seeds, centers and table1 suites at tiny sizes, then a
# sanity check of their JSON. A few minutes on 2 busy CPU cores (mostly XLA compiles).
#
#   bash benchmarks/smoke.sh [OUTDIR]          # SMOKE_SKIP_RUN=1: only check OUTDIR's JSON
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/../venv/bin/python}
[ -x "$PY" ] || PY=python3
OUTDIR=${1:-$(mktemp -d)}
mkdir -p "$OUTDIR"
cd "$ROOT"
if [ -z "${SMOKE_SKIP_RUN:-}" ]; then
  "$PY" benchmarks/bench.py --quick --suite seeds --rounds 1 --json "$OUTDIR/seeds.json"
  "$PY" benchmarks/bench.py --quick --suite centers --centers 230 --rounds 1 --json "$OUTDIR/centers.json"
  "$PY" benchmarks/bench.py --suite table1 --table1-methods local,fedavg --table1-seeds 1 --rounds 1 \
    --compile-workers 2 --json "$OUTDIR/table1.json"
fi
"$PY" - "$OUTDIR" <<'EOF'
import json, math, pathlib, sys
out = pathlib.Path(sys.argv[1])
pos = lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > 0
for name in ("seeds", "centers"):
  r = json.loads((out / f"{name}.json").read_text())
  for k in ("machine", "jax", "date", "finished", "suites"):
    assert r.get(k), f"{name}: missing {k}"
  s = r["suites"][name]
  assert s["runs"], f"{name}: no runs"
  for run in s["runs"]:
    assert "error" not in run, f"{name}: {run['error']}"
    for k in ("compile_s", "run_s", "s_per_round"):
      assert pos(run[k]), f"{name}: {k} = {run.get(k)!r}"
    assert pos(run["peak_memory"]["bytes"]), f"{name}: peak memory"
  if name == "seeds":
    assert [x["seeds"] for x in s["runs"]] == [1, 5], s["runs"]
    for x in s["runs"]:
      assert abs(x["s_per_seed"] * x["seeds"] - x["run_s"]) < 1e-9
      assert abs(x["s_per_round"] * s["rounds"] - x["run_s"]) < 1e-9
    assert pos(s["largest_vs_1_seed"]["ratio"]) and s["largest_vs_1_seed"]["seeds"] == 5
  else:
    assert {x["method"] for x in s["runs"]} == {"fedavg", "abps_pq_k1_hom"}
    for x in s["runs"]:
      assert x["centers_requested"] == 230 and x["centers"] == 230 and pos(x["build_s"]), x
      assert x["child_status"] == "ok" and x["rounds_run"] == s["rounds"], x
  print(f"{name}: ok")
t = json.loads((out / "table1.json").read_text())["suites"]["table1"]
assert "error" not in t and "in_progress" not in t, t
assert list(t["methods"]) == ["local", "fedavg"] and t["compile_workers"] == 2 and t["rows"] == 2, t
for m in t["methods"].values():
  assert pos(m["compile_s"]) and pos(m["run_s"]) and m["rounds_run"] == 1 and 0 < m["auroc_mean"] < 1, m
assert pos(t["wall_s"]) and t["wall_s"] <= t["compile_sum_s"] + t["run_sum_s"] + 5, t
print("table1: ok")
EOF
echo "smoke ok ($OUTDIR)"
