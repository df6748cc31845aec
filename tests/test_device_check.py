"""The device benchmark script, rehearsed on the CPU (issue 11 item 5): ``benchmarks/device_check.sh`` runs once on
a lent GPU with no second chance, so its time boxes, its gate and what it leaves in ``$OUT`` are checked here at
tiny sizes."""
from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import time
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"
# Everything the script reads, so that nothing from the caller's environment leaks into a rehearsal.
SCRIPT_VARS = ("OUT", "PYTHON", "STEPS", "BUDGET", "RESERVE_S", "MIN_STEP_S", "ROUNDS", "ROUNDS2", "LOOP_ROUNDS",
               "SEEDS_LIST", "ENGINE_METHODS", "CENTERS", "CENTERS_ROUNDS", "CENTERS_METHODS", "CHILD_TIMEOUT",
               "TABLE1_METHODS", "TABLE1_SEEDS", "TABLE1_ROUNDS", "COMPILE_WORKERS", "IMAGES_ROUNDS", "FMNIST_PATH",
               "DEVICE_CHECK_ALLOW_CPU", "BENCH_COMPILE_CACHE", "BENCH_SET", "JAX_PLATFORMS")


def _env(out: pathlib.Path, **settings) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS and not k.startswith("STEP_")}
  env.update(OUT=str(out), PYTHON=sys.executable, JAX_PLATFORMS="cpu")
  env.update({k: str(v) for k, v in settings.items()})
  return env


def _load(path: pathlib.Path) -> dict:
  assert path.is_file(), f"{path.name} is missing"
  return json.loads(path.read_text())


def _pos(v) -> bool:
  return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_refuses_a_cpu_backend_without_the_flag(tmp_path):
  """Stops after the import check, exit 3, one line saying why; env.json names the backend."""
  out = tmp_path / "out"
  proc = subprocess.run(["bash", str(SCRIPT)], env=_env(out), cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  stops = [line for line in proc.stdout.splitlines() if line.startswith("device_check: STOP")]
  assert len(stops) == 1 and "'cpu', not 'gpu'" in stops[0] and "DEVICE_CHECK_ALLOW_CPU=1" in stops[0], proc.stdout
  assert _load(out / "env.json")["backend"] == "cpu"
  assert _load(out / "steps.json")["steps"]["env"]["status"] == "stopped"
  assert not (out / "seeds.json").exists()  # nothing ran


def test_cpu_rehearsal_keeps_every_step_within_the_deadline(tmp_path):
  """The whole script on the CPU at tiny sizes: every step's JSON, a step shrunk to a 1 s box skipped (the others'
  files kept), the overall deadline respected, the new figures present (extra-round cost, the PyTorch loop, the
  centers child's own file)."""
  out, budget = tmp_path / "out", 360
  settings = dict(DEVICE_CHECK_ALLOW_CPU=1, BUDGET=budget, STEPS="seeds engine centers table1 images fbsfl",
                  ROUNDS=1, ROUNDS2=2, SEEDS_LIST="1,2", LOOP_ROUNDS=1, ENGINE_METHODS="fedavg",
                  CENTERS=12, CENTERS_ROUNDS=1, CENTERS_METHODS="fedavg", CHILD_TIMEOUT=100,
                  BENCH_SET="data.num_centers=12;data.total_stays=1800;learner.hidden=8,4",  # a tiny federation
                  STEP_SEEDS=200, STEP_ENGINE=110, STEP_CENTERS=80,  # 45 + 200 + 110 + 80 + 15 > 360: the deadline cuts
                  # (boxes: 2-7x this CPU's 52 / 18 / 11 s on the tiny federation, for a slower CI machine)
                  STEP_TABLE1=1,  # shrunk: under MIN_STEP_S, so skipped
                  FMNIST_PATH=tmp_path / "no-fmnist",  # images and fbsfl: no files, recorded skips
                  BENCH_COMPILE_CACHE=tmp_path / "xla")  # the engine's and the centers' FedAvg load the seeds' program
  t0 = time.monotonic()
  proc = subprocess.run(["bash", str(SCRIPT)], env=_env(out, **settings), cwd=ROOT, capture_output=True, text=True,
                        timeout=budget + 60)
  wall = time.monotonic() - t0
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log
  assert wall <= budget + 20, f"{wall:.0f} s against a {budget} s budget\n{log}"

  env = _load(out / "env.json")
  assert env["backend"] == "cpu" and env["modules"]["jax"] and env["modules"]["fedjax_sim"] and "torch" in env, env
  steps = _load(out / "steps.json")
  assert steps["budget_s"] == budget and list(steps["steps"]) == ["env", "seeds", "engine", "centers", "table1",
                                                                   "images", "fbsfl"], steps
  for name, e in steps["steps"].items():
    assert e["started_s"] + e["box_s"] <= budget - steps["reserve_s"] + 1, (name, e)  # every box ends in time
    if name != "env":
      assert _load(out / f"{name}.json")["device_check"] == e  # each step's JSON parses and carries its status
  status = {k: e["status"] for k, e in steps["steps"].items()}
  assert status == {"env": "ok", "seeds": "ok", "engine": "ok", "centers": "ok", "table1": "skipped",
                    "images": "skipped", "fbsfl": "skipped"}, steps
  assert "MIN_STEP_S" in steps["steps"]["table1"]["detail"] and steps["steps"]["table1"]["box_s"] <= 1
  assert "no Fashion-MNIST files" in steps["steps"]["images"]["detail"]
  assert "no Fashion-MNIST files" in steps["steps"]["fbsfl"]["detail"]

  seeds = _load(out / "seeds.json")["suites"]["seeds"]
  assert [r["seeds"] for r in seeds["runs"]] == [1, 2] and seeds["rounds"] == 1 and seeds["rounds2"] == 2, seeds
  for r in seeds["runs"]:
    assert _pos(r["compile_s"]) and _pos(r["run_s"]) and _pos(r["second"]["run_s"]), r
    assert r["s_per_extra_round"] == pytest.approx(r["second"]["run_s"] - r["run_s"])
  top = seeds["largest_vs_1_seed"]
  # The extra-round ratio is defined when one seed's extra round cost more than nothing (at a rehearsal's tiny
  # sizes timing noise can make the R2-round call the faster one).
  assert top["seeds"] == 2 and _pos(top["ratio"]), top
  assert ("extra_round_ratio" in top) == (seeds["runs"][0]["s_per_extra_round"] > 0), (top, seeds["runs"][0])

  engine = _load(out / "engine.json")["suites"]["engine"]["methods"]
  assert list(engine) == ["fedavg"], engine
  fa = engine["fedavg"]
  assert _pos(fa["engine"]["s_per_round"]) and _pos(fa["loop"]["s_per_round"]) and _pos(fa["speedup"]), fa
  tl = fa["torch_loop"]
  if "skipped" in tl:
    assert tl["skipped"] == "torch not importable" and not env["torch"]["version"], tl
  else:
    assert _pos(tl["s_per_round"]) and tl["params"] == tl["engine_params"] and tl["finite"], tl
    assert tl["device"] == "cpu" and tl["threads"] == 1 and _pos(fa["speedup_over_torch"]), fa

  centers = _load(out / "centers.json")["suites"]["centers"]
  child = _load(out / "centers_12.json")  # the child's own file, written under $OUT
  assert [(r["centers_requested"], r["method"], r["child_status"]) for r in centers["runs"]] == [(12, "fedavg", "ok")]
  assert _pos(centers["runs"][0]["run_s"]) and child["runs"][0]["run_s"] == centers["runs"][0]["run_s"]

  assert f"steps (budget {budget} s):" in proc.stdout and "seeds in one call" in proc.stdout, proc.stdout


def test_summary_merges_a_killed_centers_child(tmp_path):
  """The parent was cut while its 100,000-center child ran: the summary's --merge-centers folds the child's file
  in (FedAvg's figures kept, ABPS marked), and the saved file is rewritten."""
  saved = {"machine": "CPU: test", "date": "2026-01-01", "jax": "0", "started": "t", "suites": {"centers": {
      "methods": ["fedavg", "abps_pq_k1_hom"], "rounds": 5, "seeds": 1, "stays_per_center": 30, "in_progress":
      "100000 centers", "runs": [{"method": "fedavg", "centers_requested": 230, "centers": 230, "run_s": 1.0,
                                  "s_per_round": 0.2, "peak_memory": {"bytes": 1}, "child_status": "ok"}]}}}
  (tmp_path / "centers.json").write_text(json.dumps(saved))
  child = {"centers_requested": 100000, "centers": 99000, "build_s": 9.0, "rounds": 5, "methods": saved["suites"][
      "centers"]["methods"], "runs": [{"method": "fedavg", "run_s": 3.0, "s_per_round": 0.6, "compile_s": 2.0,
                                       "peak_memory": {"bytes": 2}}]}
  (tmp_path / "centers_100000.json").write_text(json.dumps(child))
  proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--merge-centers", "--print-from",
                         str(tmp_path / "centers.json")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                        env=_env(tmp_path))
  assert proc.returncode == 0, proc.stdout + proc.stderr
  runs = json.loads((tmp_path / "centers.json").read_text())["suites"]["centers"]["runs"]
  big = {r["method"]: r for r in runs if r["centers_requested"] == 100000}
  assert big["fedavg"]["run_s"] == 3.0 and big["fedavg"]["centers"] == 99000
  assert "parent was cut" in big["abps_pq_k1_hom"]["error"], big
  assert "100000" in proc.stdout and "merged from the children's files" in proc.stdout, proc.stdout


def test_table1_goes_on_after_a_failing_row(monkeypatch):
  """A row whose error surfaces from ``run_methods`` (a missing dependency) is recorded, and the rows after it run
  one at a time."""
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import bench
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))

  def run(name):
    return types.SimpleNamespace(name=name, compile_s=1.0, run_s=2.0,
                                 summary={"rounds_run": 1, "auroc_mean": 0.6})

  def run_methods(names, *a, **k):
    yield run(names[0])
    raise ModuleNotFoundError("No module named 'distrax'")

  def run_method(name, *a, **k):
    if name == "d":
      raise RuntimeError("boom")
    return run(name)

  config = types.SimpleNamespace(methods=("a", "b", "c", "d", "e"), seeds=(1,), rounds=1)
  monkeypatch.setattr(bench, "load_experiment", lambda *a, **k: config)
  monkeypatch.setattr(bench, "timed_federation", lambda c: (types.SimpleNamespace(num_clients=3), 0.0))
  monkeypatch.setattr(bench, "run_methods", run_methods)
  monkeypatch.setattr(bench, "run_method", run_method)
  monkeypatch.setattr(bench, "peak_memory", lambda: {"bytes": 1})
  args = types.SimpleNamespace(table1_seeds="1", rounds=1, table1_methods=None, compile_workers=1)
  rec = bench.Recorder(None)
  bench.suite_table1(args, rec, {})
  t = rec.result["suites"]["table1"]
  assert list(t["methods"]) == ["a", "b", "c", "d", "e"] and t["fallback_after"] == "b", t
  assert "distrax" in t["methods"]["b"]["error"] and "boom" in t["methods"]["d"]["error"]
  assert all(t["methods"][m]["run_s"] == 2.0 for m in "ace") and "in_progress" not in t
  assert t["run_sum_s"] == 6.0 and "2 row(s) failed: b, d" == t["error"]
  (row,) = bench.result_rows(rec.result)["table1"]
  assert "3 of 5 rows ok; failed: b, d" in row


def test_compile_time_reports_medians_of_alternating_sides():
  """``compile_time.py --repeat``: each side's median over the repetitions, their ratio and the pairs' range."""
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import compile_time
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))
  rows = [dict(method=m, rev=rev, total_s=t) for m, rev, t in [
      ("abps_x", "old", 30.0), ("abps_x", "checkout", 10.0), ("abps_x", "old", 24.0), ("abps_x", "checkout", 12.0),
      ("abps_x", "old", 33.0), ("abps_x", "checkout", 9.0), ("fedavg", "old", 20.0)]]
  (s,) = compile_time.speedups(rows, "old")  # fedavg has no after side: no row
  assert s["method"] == "abps_x" and s["repeats"] == 3
  assert s["before_s"] == 30.0 and s["after_s"] == 10.0 and s["speedup"] == 3.0
  assert s["pair_min"] == 2.0 and s["pair_max"] == 33.0 / 9.0
