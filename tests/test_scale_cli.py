"""Issue 4 through the command line: sweeps, checkpoint/kill/resume, numerical faults, several devices."""
import json
import os
import re
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim import checkpoint, execute, experiment, run

TINY = ["--set", "data.num_centers=6", "--set", "data.total_stays=900", "--set", "learner.hidden=8,4",
        "--set", "learner.num_buckets=1", "--set", "learner.local_epochs=1", "--quiet"]


def _strip_timing(obj):
  """summary.json without wall-clock fields (they differ between any two runs)."""
  if isinstance(obj, dict):
    return {k: _strip_timing(v) for k, v in obj.items() if k != "timing"}
  if isinstance(obj, list):
    return [_strip_timing(v) for v in obj]
  return obj


def test_sweep_kappa_epsilon_is_one_program_with_a_grid_entry_per_point(tmp_path, capsys):
  out = tmp_path / "sweep"
  code = run.main(["abps", "--sweep", "kappa=1,2,3", "--sweep", "epsilon=0.05,0.1", "--seeds", "11,22",
                   "--rounds", "2", "--out", str(out)] + TINY)
  assert code == 0
  summary = json.loads((out / "summary.json").read_text())
  m = summary["methods"]["abps"]
  assert m["timing"]["traces"] == 1  # the whole 6 × 2 grid compiled once
  assert [e["point"] for e in m["grid"]] == [{"abps.kappa": k, "abps.epsilon": e}
                                            for k in (1, 2, 3) for e in (0.05, 0.1)]
  for e in m["grid"]:
    assert e["seeds"] == [11, 22] and len(e["per_seed"]) == 2
    assert e["mean_partners"] <= e["point"]["abps.kappa"] + 1e-9  # κ is honoured per grid point
  assert summary["sweep"]["keys"] == ["abps.kappa", "abps.epsilon"]
  assert len(list((out / "abps").glob("seed_*_point_*.json"))) == 12
  table = capsys.readouterr().out
  assert "abps [kappa=3 epsilon=0.1]" in table


@pytest.mark.parametrize("item, needle", [
    ("abps.head_layers=0,1", "changes array shapes or program structure"),
    ("hidden=8,16", "changes array shapes or program structure"),
    ("rounds=2,3", "changes array shapes or program structure"),
    ("nonsense=1,2", "unknown key"),
    ("fedprox.mus=0.1,0.2", "unknown key 'fedprox.mus'. Did you mean fedprox.mu"),
    ("kappa=0,1", "abps.kappa must be ≥ 1"),
    ("mu=0.1,0.2", "ambiguous"),
    ("abps.kappa=1,2", "none of this run's methods (fedavg) reads it"),
    ("fedprox.mu=0.1,0.2", "the keys they read: learner.*, fedavg.server_momentum"),
    ("kappa", "expects KEY=V1,V2"),
])
def test_bad_sweeps_get_one_message_and_exit_2(tmp_path, capsys, item, needle):
  out = tmp_path / "bad"
  assert run.main(["fedavg", "--sweep", item, "--out", str(out)] + TINY) == 2
  err = capsys.readouterr().err
  assert needle in err and err.count("error:") == 1
  assert not out.exists()


@pytest.mark.parametrize("method", ["fedavg", "ipfl"])  # iPFL's carry holds empty [C, 0] leaves (orbax refuses them)
def test_killed_checkpointed_run_resumes_to_identical_results(tmp_path, monkeypatch, method):
  args = ["fedavg", "--rounds", "3", "--seeds", "1,2", "--checkpoint-every", "1", "--set", f"methods={method}"] + TINY
  full = tmp_path / "full"
  assert run.main(args + ["--out", str(full)]) == 0
  assert not (full / "checkpoints").exists()  # removed once the run is done

  def kill_after_two(_method, rounds_done):
    if rounds_done == 2:
      raise checkpoint.SimulatedKill()

  monkeypatch.setattr(checkpoint, "AFTER_SAVE_HOOK", kill_after_two)
  part = tmp_path / "part"
  with pytest.raises(checkpoint.SimulatedKill):
    run.main(args + ["--out", str(part)])
  assert not (part / "summary.json").exists()  # no half-written results
  ckdir = part / "checkpoints"
  assert checkpoint.RunCheckpoints(ckdir).latest_step(method) == 2
  monkeypatch.setattr(checkpoint, "AFTER_SAVE_HOOK", None)
  assert run.main(["--resume", str(ckdir), "--quiet"]) == 0
  a = json.loads((full / "summary.json").read_text())
  b = json.loads((part / "summary.json").read_text())
  assert _strip_timing(a) == _strip_timing(b)
  for seed in (1, 2):
    assert (json.loads((full / method / f"seed_{seed}.json").read_text())
            == json.loads((part / method / f"seed_{seed}.json").read_text()))
  # The chunked program gives the one-program numbers.
  one = tmp_path / "one"
  assert run.main(["fedavg", "--rounds", "3", "--seeds", "1,2", "--set", f"methods={method}", "--out", str(one)]
                  + TINY) == 0
  c = json.loads((one / "summary.json").read_text())
  assert c["methods"][method]["auroc_mean"] == pytest.approx(a["methods"][method]["auroc_mean"], abs=1e-6)


def test_resume_rejects_a_directory_without_a_run_and_changed_flags(tmp_path, capsys):
  assert run.main(["--resume", str(tmp_path), "--quiet"]) == 2
  assert "not a checkpoint directory" in capsys.readouterr().err
  checkpoint.RunCheckpoints(tmp_path).write_manifest(
      {"experiment": "fedavg", "sets": [], "sweeps": [], "rounds": "3", "seeds": "1", "out": None,
       "devices": None, "checkpoint_every": "1", "checkpoint_dir": str(tmp_path)})
  assert run.main(["--resume", str(tmp_path), "--rounds", "5", "--quiet"]) == 2
  assert "started with rounds = '3'" in capsys.readouterr().err


def test_nonfinite_parameters_stop_the_run_naming_round_method_and_center(tmp_path, monkeypatch, capsys):
  real_build = execute.build_method

  def poisoned(name, config, federation):
    algorithm, model = real_build(name, config, federation)

    def round_fn(key, state, fed, hyper, t):
      state, metrics = algorithm.round(key, state, fed, hyper, t)
      bad = jax.tree_util.tree_map(lambda a: jnp.where(t == 3, jnp.nan, a), state.global_params)
      return state.replace(global_params=bad), metrics

    return algorithm._replace(round=round_fn), model

  monkeypatch.setattr(execute, "build_method", poisoned)  # execute builds the methods
  out = tmp_path / "nan"
  code = run.main(["fedavg", "--rounds", "4", "--seeds", "1", "--checkpoint-every", "1", "--out", str(out)] + TINY)
  err = capsys.readouterr().err
  assert code == 3
  assert "non-finite loss or parameter in round 3 of method fedavg (seed 1)" in err
  assert "The last checkpoint (2 rounds)" in err
  assert not (out / "summary.json").exists()
  ck = checkpoint.RunCheckpoints(out / "checkpoints")
  assert ck.latest_step("fedavg") == 2  # the faulty chunk was not saved; the last good one loads
  assert (out / "checkpoints" / "fedavg" / "2").is_dir()


def test_nonfinite_local_loss_names_the_first_center(tmp_path, capsys, monkeypatch):
  # learner.learning_rate is refused above 10 (issue 9), so the traced step size is raised past validation.
  real = execute.hyper_from_config
  monkeypatch.setattr(execute, "hyper_from_config", lambda c, name=None: real(c, name).replace(
      learner=real(c, name).learner.replace(learning_rate=jnp.float32(1e38))))
  out = tmp_path / "lr"
  code = run.main(["local", "--rounds", "2", "--seeds", "1", "--out", str(out)] + TINY)
  err = capsys.readouterr().err
  assert code == 3 and "in round 1 of method local (seed 1)" in err
  assert re.search(r"first affected center: \d+ \('[^']+'\)", err)
  assert err.count("error:") == 1 and not out.exists()


def test_a_faulting_method_costs_its_own_row_and_the_others_are_written(tmp_path, capsys, monkeypatch):
  """Of several methods, the one that diverges is left out and named (summary.json ``faults``, one ``error:`` line
  after the table, exit 3); the methods before and after it run and are written."""
  real = execute.hyper_from_config

  def poisoned(c, name=None):
    h = real(c, name)
    return h.replace(learner=h.learner.replace(learning_rate=jnp.float32(1e38))) if name == "fedavg" else h

  monkeypatch.setattr(execute, "hyper_from_config", poisoned)
  out = tmp_path / "some"
  code = run.main(["local", "--rounds", "2", "--seeds", "1", "--set", "methods=local,fedavg,fedprox",
                   "--out", str(out)] + TINY)
  err = capsys.readouterr().err
  assert code == 3
  assert err.count("error:") == 1 and err.rstrip().splitlines()[-1].startswith("error: non-finite loss")
  assert "in round 1 of method fedavg (seed 1)" in err
  summary = json.loads((out / "summary.json").read_text())
  assert list(summary["methods"]) == ["local", "fedprox"]
  assert list(summary["faults"]) == ["fedavg"] and "round 1 of method fedavg" in summary["faults"]["fedavg"]
  assert (out / "local" / "seed_1.json").exists() and (out / "fedprox" / "seed_1.json").exists()
  assert not (out / "fedavg").exists()


DEVICES_SCRIPT = r"""
import json, sys
import numpy as np
from fedjax_sim.config import load_experiment
from fedjax_sim.experiment import RunOptions, build_federation, run_method
from fedjax_sim.sweep import parse_sweep
out = {}
for method in ("fedavg", "abps"):
  cfg = load_experiment(method, {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": "8,4",
                                 "learner.num_buckets": 1, "learner.local_epochs": 1, "rounds": 2, "seeds": "1,2"})
  fed = build_federation(cfg, warn=lambda m: None)
  for devices in (1, 4):
    r = run_method(method, cfg, fed, RunOptions(devices=devices))
    out[f"{method}/{devices}"] = {
        "axis": r.summary["timing"]["sharded_axis"],
        "values": [x for rec in r.per_seed for x in rec["test_auroc_per_center"] + rec["val_auroc_curve"]
                   if x is not None] + [r.summary["bytes"]]}
# Checkpointed on 4 devices, killed after round 1 and resumed: the 1-device numbers again.
import tempfile
from fedjax_sim import checkpoint
cfg = load_experiment("fedavg", {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": "8,4",
                                 "learner.num_buckets": 1, "learner.local_epochs": 1, "rounds": 2, "seeds": "1,2"})
fed = build_federation(cfg, warn=lambda m: None)
ck = checkpoint.RunCheckpoints(tempfile.mkdtemp())
def kill(method, rounds_done):
  raise checkpoint.SimulatedKill()
checkpoint.AFTER_SAVE_HOOK = kill
try:
  run_method("fedavg", cfg, fed, RunOptions(devices=4, checkpoint_every=1, checkpoints=ck))
except checkpoint.SimulatedKill:
  pass
checkpoint.AFTER_SAVE_HOOK = None
assert ck.latest_step("fedavg") == 1
r = run_method("fedavg", cfg, fed, RunOptions(devices=4, checkpoint_every=1, checkpoints=ck))
out["resumed/4"] = {"axis": r.summary["timing"]["sharded_axis"],
                    "values": [x for rec in r.per_seed for x in rec["test_auroc_per_center"] + rec["val_auroc_curve"]
                               if x is not None] + [r.summary["bytes"]]}
# Runs axis: 3 grid points x 2 seeds = 6 runs >= 6 centers, padded to 8 runs on 4 devices.
cfg = load_experiment("fedavg", {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": "8,4",
                                 "learner.num_buckets": 1, "learner.local_epochs": 1, "rounds": 2, "seeds": "1,2"})
fed = build_federation(cfg, warn=lambda m: None)
sweep = parse_sweep(["learning_rate=1e-3,2e-3,3e-3"], cfg)
for devices in (1, 4):
  r = run_method("fedavg", cfg, fed, RunOptions(sweep=sweep, devices=devices))
  out[f"sweep/{devices}"] = {
      "axis": r.summary["timing"]["sharded_axis"],
      "values": [x for rec in r.per_seed for x in rec["test_auroc_per_center"] + rec["val_auroc_curve"]
                 if x is not None]}
print(json.dumps(out))
"""


def test_four_devices_equal_one_device(tmp_path):
  env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu")
  root = pathlib.Path(__file__).resolve().parent.parent
  proc = subprocess.run([sys.executable, "-c", DEVICES_SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                        timeout=1500)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads(proc.stdout.strip().splitlines()[-1])
  for method in ("fedavg", "abps"):
    assert res[f"{method}/1"]["axis"] == "none" and res[f"{method}/4"]["axis"] == "clients"
    np.testing.assert_allclose(res[f"{method}/4"]["values"], res[f"{method}/1"]["values"], atol=1e-5)
  assert res["resumed/4"]["axis"] == "clients"
  np.testing.assert_allclose(res["resumed/4"]["values"], res["fedavg/1"]["values"], atol=1e-5)
  assert res["sweep/4"]["axis"] == "runs" and len(res["sweep/4"]["values"]) == len(res["sweep/1"]["values"])
  np.testing.assert_allclose(res["sweep/4"]["values"], res["sweep/1"]["values"], atol=1e-5)


def test_checkpoints_never_go_into_a_folder_that_holds_other_files(tmp_path, capsys):
  out = tmp_path / "out"
  (out / "checkpoints").mkdir(parents=True)
  (out / "checkpoints" / "mine.txt").write_text("keep me")
  assert run.main(["fedavg", "--checkpoint-every", "1", "--out", str(out)] + TINY) == 2
  assert "exists and is not empty" in capsys.readouterr().err
  assert (out / "checkpoints" / "mine.txt").read_text() == "keep me"
  assert run.main(["--resume", str(out / "checkpoints"), "--checkpoint-dir", str(tmp_path), "--quiet"]) == 2
  assert "drop --checkpoint-dir" in capsys.readouterr().err


def test_invalid_grid_points_and_device_counts_fail_before_anything_is_written(tmp_path, capsys):
  out = tmp_path / "out"
  args = ["abps", "--checkpoint-every", "1", "--out", str(out)] + TINY
  assert run.main(args + ["--sweep", "phi_min=-0.1,0.2", "--sweep", "phi_max=0.1"]) == 2
  assert "abps.phi_max must be greater than abps.phi_min" in capsys.readouterr().err
  assert run.main(args + ["--devices", "64"]) == 2
  assert "--devices must be in [1," in capsys.readouterr().err
  assert not out.exists()


def test_compiling_ahead_in_worker_threads_gives_the_one_by_one_results(monkeypatch):
  """run_methods (the CLI's path) compiles the next methods in worker threads while one runs; the
  results equal run_method's, method by method, in the requested order."""
  from fedjax_sim.config import load_experiment
  import threading
  cfg = load_experiment("fedavg", {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": "8,4",
                                   "learner.num_buckets": 1, "learner.local_epochs": 1, "rounds": 2,
                                   "seeds": "1,2"})
  fed = experiment.build_federation(cfg, warn=lambda m: None)
  names = ["local", "fedavg"]
  threads = []
  compile_ = experiment.PreparedMethod.compile

  def recording_compile(self):
    threads.append((self.name, threading.current_thread().name))
    return compile_(self)

  monkeypatch.setattr(experiment.PreparedMethod, "compile", recording_compile)
  ahead = list(experiment.run_methods(names, cfg, fed, experiment.RunOptions(), workers=2))
  assert [r.name for r in ahead] == names
  assert sorted(n for n, _ in threads) == sorted(names)
  assert all(t.startswith("fedjax_sim-compile") for _, t in threads)  # none compiled on the main thread
  for r in ahead:
    alone = experiment.run_method(r.name, cfg, fed)
    assert r.per_seed == alone.per_seed
    assert {k: v for k, v in r.summary.items() if k != "timing"} == \
        {k: v for k, v in alone.summary.items() if k != "timing"}
  assert list(experiment.run_methods([], cfg, fed)) == []


class _FakePrepared:
  """Stands in for PreparedMethod: records when it is compiled and run, compiles nothing."""

  def __init__(self, name, log, fail_compile=False, fail_run=False):
    self.name, self.log, self.fail_compile, self.fail_run = name, log, fail_compile, fail_run

  def compile(self):
    self.log.append(("compile", self.name))
    if self.fail_compile:
      raise RuntimeError(f"compile of {self.name} failed")
    return self.name

  def execute(self, compiled):
    assert compiled == self.name
    self.log.append(("run", self.name))
    if self.fail_run:
      raise experiment.NumericalFault(f"fault in {self.name}")
    return experiment.MethodRun(self.name, {}, [], 0.0, 0.0, 1)


@pytest.mark.parametrize("workers", [0, 1, 2, 5])
def test_run_methods_window_order_and_errors(monkeypatch, workers):
  """Order, the compile-ahead window (never more than ``workers`` methods ahead of the one running),
  errors raised in a worker or by a run, and a caller that stops early — without compiling anything."""
  import threading
  log, fail = [], {}
  lock = threading.Lock()

  def fake_prepare(name, config, federation, options):
    with lock:
      log.append(("prepare", name))
    return _FakePrepared(name, log, fail_compile=fail.get(name) == "compile", fail_run=fail.get(name) == "run")

  monkeypatch.setattr(execute, "prepare_method", fake_prepare)
  monkeypatch.setattr(execute, "run_method", lambda n, c, f, o: _run_alone(fake_prepare(n, c, f, o)))
  names = [f"m{i}" for i in range(6)]
  runs = list(experiment.run_methods(names, None, None, workers=workers))
  assert [r.name for r in runs] == names
  ran = [n for what, n in log if what == "run"]
  assert ran == names
  for k, name in enumerate(names):  # when m_k runs, at most m_{k+1..k+workers} were prepared ahead of it
    at = log.index(("run", name))
    prepared = {n for what, n in log[:at] if what == "prepare"}
    assert prepared <= set(names[:k + 1 + workers])
  # A compile that fails in a worker surfaces when its method is due; later methods never run.
  log.clear()
  fail.update({"m2": "compile"})
  with pytest.raises(RuntimeError, match="compile of m2 failed"):
    list(experiment.run_methods(names, None, None, workers=workers))
  assert [n for what, n in log if what == "run"] == ["m0", "m1"]
  # A run that faults stops the sequence with its own error.
  log.clear()
  fail.clear()
  fail.update({"m1": "run"})
  with pytest.raises(experiment.NumericalFault, match="fault in m1"):
    list(experiment.run_methods(names, None, None, workers=workers))
  # keep_going: the fault takes the faulting method's place and the later methods still run.
  log.clear()
  runs = list(experiment.run_methods(names, None, None, workers=workers, keep_going=True))
  assert [type(r).__name__ for r in runs] == ["MethodRun", "MethodFault"] + ["MethodRun"] * 4
  assert runs[1].name == "m1" and "fault in m1" in str(runs[1].error)
  assert [n for what, n in log if what == "run"] == names
  # keep_going is about diverged runs only: any other error still stops the sequence.
  log.clear()
  fail.update({"m3": "compile"})
  with pytest.raises(RuntimeError, match="compile of m3 failed"):
    list(experiment.run_methods(names, None, None, workers=workers, keep_going=True))
  # A caller that stops after the first method: nothing else runs.
  log.clear()
  fail.clear()
  gen = experiment.run_methods(names, None, None, workers=workers)
  assert next(gen).name == "m0"
  gen.close()
  assert [n for what, n in log if what == "run"] == ["m0"]


def _run_alone(prepared):
  return prepared.execute(prepared.compile())
