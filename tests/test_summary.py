"""summarize() and the printed results table (issue 9): centers scored and their test-split sizes, the
small-test-split warning, the sample std over seeds, bandwidth null only when not federated, valid Markdown.

No program is compiled: ``out`` is fabricated with numpy in the shape summarize reads (SPEC §6).
"""
import collections
import json
import math
import re
import statistics
import types

import numpy as np
import pytest

from fedjax_sim import run
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.experiment import SMALL_TEST_ROWS, summarize
from fedjax_sim.metrics import fedavg_reference_bytes

ROUNDS = 4


class FakeFederation:
  """What summarize reads from a federation: its size, feature shape, task and test masks."""

  task = "binary"  # the clinical task (the reference model is the MLP with one logit)
  num_classes = 2

  def __init__(self, test_rows, num_features=3):
    self.names = tuple(f"c{i}" for i in range(len(test_rows)))
    t = max(test_rows)
    self.m_test = np.arange(t)[None, :] < np.asarray(test_rows)[:, None]  # [C, T]
    self.feature_names = tuple(f"f{j}" for j in range(num_features))

  @property
  def num_clients(self):
    return len(self.names)

  @property
  def num_features(self):
    return len(self.feature_names)

  @property
  def feature_shape(self):
    return (self.num_features,)


def fake_out(test_auroc, bytes_per_round=0.0, active=1.0):
  """A host ``out`` tree: ``test_auroc [S, C]`` and per-round metrics ``[S, R]``."""
  test = np.asarray(test_auroc, np.float64)
  s = test.shape[0]
  per_round = lambda v: np.full((s, ROUNDS), v, np.float64)  # noqa: E731
  metrics = types.SimpleNamespace(bytes=per_round(bytes_per_round), active=per_round(active),
                                  rest_fraction=per_round(0.0), mean_partners=per_round(1.0),
                                  extra=None)  # RoundMetrics.extra: no family-declared metrics
  return types.SimpleNamespace(test_auroc=test,
                               history=types.SimpleNamespace(metrics=metrics, val_auroc=per_round(0.5)))


def config(seeds):
  return ExperimentConfig(seeds=tuple(seeds), rounds=ROUNDS, learner=LearnerConfig(hidden=(8,)))


FEDERATED = types.SimpleNamespace(federated=True)
NOT_FEDERATED = types.SimpleNamespace(federated=False)


def summarize_fake(test_rows, test_auroc, seeds=(11, 22, 33), algorithm=FEDERATED, bytes_per_round=0.0,
                   warn=None, federation=None):
  federation = federation or FakeFederation(test_rows)
  lines = []
  entry, per_seed = summarize("m", config(seeds), federation, None, algorithm,
                              fake_out(test_auroc, bytes_per_round), warn=warn or lines.append)
  return entry, per_seed, lines


def test_centers_scored_and_median_test_rows_against_a_loop():
  rows = [3, 4, 12, 20, 2, 7]
  auroc = np.full((3, 6), 0.7)
  auroc[:, 4] = np.nan  # one-class test split: never scored
  auroc[1, 5] = np.nan  # undefined in one seed: not scored in every seed
  entry, per_seed, lines = summarize_fake(rows, auroc)
  scored = [c for c in range(6) if all(not math.isnan(auroc[s, c]) for s in range(3))]
  assert scored == [0, 1, 2, 3]
  assert entry["centers_scored"] == len(scored)
  assert entry["median_test_rows"] == statistics.median(rows[c] for c in scored) == 8.0
  assert entry["small_test_centers"] == sum(rows[c] < SMALL_TEST_ROWS for c in scored) == 2
  assert lines == []  # 2 of 4 small is not "most": no warning
  assert [r["excluded_centers"] for r in per_seed] == [1, 2, 1]


def test_warns_when_most_scored_centers_have_few_test_rows():
  rows = [3, 4, 5, 20, 2]
  auroc = np.full((2, 5), 0.6)
  auroc[:, 4] = np.nan
  entry, _, lines = summarize_fake(rows, auroc, seeds=(1, 2))
  assert (entry["centers_scored"], entry["small_test_centers"], entry["median_test_rows"]) == (4, 3, 4.5)
  assert len(lines) == 1 and lines[0].startswith("warning: 3 of the 4 scored centers (of 5) have fewer than 10")
  assert "median 4.5" in lines[0]
  # Positive control: the same federation with larger test splits does not warn.
  _, _, quiet = summarize_fake([30, 40, 50, 20, 2], auroc, seeds=(1, 2))
  assert quiet == []


def test_warning_goes_to_stderr_once_per_federation(capsys):
  auroc = np.full((1, 3), 0.6)
  fed = FakeFederation([2, 3, 40])
  for _ in range(3):  # three methods of one run share the federation
    summarize("m", config([1]), fed, None, FEDERATED, fake_out(auroc))
  err = capsys.readouterr().err.splitlines()
  assert len([line for line in err if line.startswith("warning: 2 of the 3 scored centers")]) == 1, err
  summarize("m", config([1]), FakeFederation([2, 3, 40]), None, FEDERATED, fake_out(auroc))
  assert capsys.readouterr().err.startswith("warning: 2 of the 3 scored centers")  # a new federation warns


def test_auroc_std_is_the_sample_std_across_seeds():
  rng = np.random.default_rng(0)
  auroc = rng.uniform(0.5, 0.9, size=(5, 4))
  entry, per_seed, _ = summarize_fake([30] * 4, auroc, seeds=(11, 22, 33, 44, 55))
  per_seed_means = [float(np.mean(auroc[s])) for s in range(5)]
  assert [r["auroc"] for r in per_seed] == pytest.approx(per_seed_means)
  assert entry["auroc_mean"] == pytest.approx(statistics.mean(per_seed_means))
  assert entry["auroc_std"] == pytest.approx(statistics.stdev(per_seed_means), rel=1e-12)
  assert entry["auroc_std"] != pytest.approx(statistics.pstdev(per_seed_means), rel=1e-6)  # not ddof = 0
  assert "ddof=1" in entry["std"]


def test_one_seed_has_no_std_and_writes_null():
  entry, _, _ = summarize_fake([30, 30], [[0.7, 0.8]], seeds=(11,))
  assert math.isnan(entry["auroc_std"])
  written = json.loads(json.dumps(run._json_safe(entry), allow_nan=False))
  assert written["auroc_std"] is None and written["auroc_mean"] == pytest.approx(0.75)


def test_bandwidth_ratio_zero_for_local_null_for_centralized():
  auroc = np.full((2, 3), 0.7)
  local, _, _ = summarize_fake([30] * 3, auroc, seeds=(1, 2), bytes_per_round=0.0)
  assert local["bandwidth_ratio"] == 0.0 and local["bytes"] == 0.0
  assert [r["bandwidth_ratio"] for r in local["per_seed"]] == [0.0, 0.0]
  central, _, _ = summarize_fake([30] * 3, auroc, seeds=(1, 2), algorithm=NOT_FEDERATED)
  assert central["bandwidth_ratio"] is None and central["bytes"] is None
  # A federated method's ratio is bytes over the fp32 FedAvg reference (SPEC §3.4), by hand.
  p = 3 * 8 + 8 + 8 + 1
  ref = fedavg_reference_bytes(3, p, ROUNDS)
  assert ref == 3 * 2 * p * 4 * ROUNDS
  some, _, _ = summarize_fake([30] * 3, auroc, seeds=(1, 2), bytes_per_round=ref / ROUNDS * 0.0022)
  assert some["bandwidth_ratio"] == pytest.approx(0.0022)


def unescaped_pipes(line):
  return len(re.findall(r"(?<!\\)\|", line))


def table_summary():
  timing = {"compile_s": 1.0, "run_s": 2.0}
  row = lambda ratio, std=0.01, **kw: {"auroc_mean": 0.7, "auroc_std": std, "bandwidth_ratio": ratio,  # noqa: E731
                                       "rest_fraction": 0.1, "mean_partners": 0.9, "excluded_centers": 1,
                                       "centers_scored": 29, "median_test_rows": 6.0, "timing": timing, **kw}
  grid = {"timing": timing, "grid": [{"point": {"abps.kappa": 1}, **row(0.25)},
                                     {"point": {"abps.kappa": 2}, **row(0.5)}]}
  return {"federation": {"clients": 30},
          "methods": {"abps_x": row(0.0022), "local": row(0.0), "centralized": row(None, std=None),
                      "fedavg": row(1.0), "odd|name": row(0.09), "abps": grid}}


def test_results_table_is_valid_markdown():
  lines = run.results_table(table_summary()).splitlines()
  assert len(lines) == 2 + 7
  header = unescaped_pipes(lines[0])
  assert header == len(run.RESULTS_COLUMNS) + 1
  assert all(unescaped_pipes(line) == header for line in lines), lines
  assert r"E\|P_i\|" in lines[0] and r"odd\|name" in run.results_table(table_summary())


def test_results_table_figures():
  cells = {line.split(" | ")[0].lstrip("| "): [c.strip() for c in line.strip("|").split(" | ")]
           for line in run.results_table(table_summary()).splitlines()[2:]}
  assert cells["abps_x"][2] == "0.0022×"  # three significant digits below 0.1, not 0.00×
  assert cells["local"][2] == "0×" and cells["fedavg"][2] == "1.00×" and cells["centralized"][2] == "—"
  assert cells["centralized"][1] == "0.700 ± —"  # one seed: no std
  assert cells["abps_x"][5:7] == ["29/30", "6"]  # centers scored, median test rows
  assert cells["abps [kappa=1]"][2] == "0.25×"


# --- python -m fedjax_sim.report --seeds: a subset of a run's seeds, re-aggregated ----------------------------


def written(entries, seeds):
  """``(summary, per_seed)`` as ``load_outputs`` reads them back from a run of ``entries`` (name → summarize's
  ``(entry, records)``): NaN written as null."""
  from fedjax_sim.outputs import _json_safe
  summary = {"metric": "auroc", "config": {"seeds": list(seeds), "data": {"source": "synthetic"}},
             "federation": {"clients": 6, "train_rows": 600},
             "methods": {n: e for n, (e, _) in entries.items()}}
  return _json_safe(summary), {n: _json_safe(r) for n, (_, r) in entries.items()}


def subset_auroc():
  rng = np.random.default_rng(3)
  auroc = rng.uniform(0.5, 0.9, size=(3, 6))
  auroc[:, 4] = np.nan  # never scored
  auroc[1, 5] = np.nan  # seed 22 alone leaves center 5 unscored
  return [3, 4, 12, 20, 2, 7], auroc


def test_a_seed_subset_is_the_summary_of_those_seeds_alone():
  from fedjax_sim.outputs import _json_safe
  from fedjax_sim.report import select_seeds
  rows, auroc = subset_auroc()
  full, records, _ = summarize_fake(rows, auroc, bytes_per_round=10.0)
  summary, per_seed = written({"m": (full, records)}, (11, 22, 33))
  got, got_records = select_seeds(summary, per_seed, [33, 11])
  want, want_records, _ = summarize_fake(rows, auroc[[2, 0]], seeds=(33, 11), bytes_per_round=10.0)
  want = _json_safe(want)
  entry = got["methods"]["m"]
  assert got["config"]["seeds"] == [33, 11] and summary["config"]["seeds"] == [11, 22, 33]  # no mutation
  assert entry["centers_scored"] == want["centers_scored"] == 5 != full["centers_scored"]
  # the subset scores another set of centers, whose test-split sizes need the federation: unknown, not stale
  assert entry["median_test_rows"] is None and entry["small_test_centers"] is None
  for key in set(want) - {"median_test_rows", "small_test_centers"}:
    assert entry[key] == want[key], key
  assert got_records["m"] == _json_safe(want_records)  # the full records, curves included, in the given order
  # every seed, in the run's order, gives back the run's own entry
  again, _ = select_seeds(summary, per_seed, [11, 22, 33])
  assert again["methods"]["m"] == summary["methods"]["m"]


def test_a_seed_subset_of_a_sweep_reaggregates_each_grid_point():
  from fedjax_sim.outputs import _json_safe
  from fedjax_sim.report import select_seeds
  from fedjax_sim.summarize import summarize_grid
  from fedjax_sim.sweep import Sweep
  rows, auroc = subset_auroc()
  auroc = np.concatenate([auroc[:2], auroc[1:]])  # [G·S = 2·2, C]: point 0 seeds 11, 22; point 1 seeds 11, 22
  federation = FakeFederation(rows)
  sweep = Sweep(keys=("abps.kappa",), values=((1.0, 2.0),))
  ns = fake_out(auroc)  # as a pytree, which summarize_grid slices per grid point
  Metrics = collections.namedtuple("Metrics", "bytes active rest_fraction mean_partners extra")
  History = collections.namedtuple("History", "metrics val_auroc")
  Out = collections.namedtuple("Out", "test_auroc history")
  out = Out(ns.test_auroc, History(Metrics(**vars(ns.history.metrics)), ns.history.val_auroc))
  entry, records = summarize_grid("m", [config((11, 22))] * 2, sweep, federation, None, FEDERATED, out,
                                  warn=lambda line: None)
  summary, per_seed = written({"m": (entry, records)}, (11, 22))
  got, got_records = select_seeds(summary, per_seed, [22])
  assert [r["grid_point"] for r in got_records["m"]] == [0, 1]
  for g in (0, 1):
    want, _, _ = summarize_fake(rows, auroc[[2 * g + 1]], seeds=(22,))
    point = got["methods"]["m"]["grid"][g]
    assert point["point"] == {"abps.kappa": (1.0, 2.0)[g]}
    assert point["auroc_mean"] == want["auroc_mean"] and math.isnan(point["auroc_std"])  # one seed: no std
    assert point["per_seed"] == _json_safe(want["per_seed"])  # no grid keys inside the entry, as summarize writes
  assert got["methods"]["m"]["sweep"] == summary["methods"]["m"]["sweep"]


def test_report_cli_merges_runs_of_other_seeds_on_the_named_ones(tmp_path, capsys):
  from fedjax_sim import report
  from fedjax_sim.outputs import write_outputs
  rows, auroc = subset_auroc()
  a = written({"m": summarize_fake(rows, auroc)[:2]}, (11, 22, 33))
  b = written({"n": summarize_fake(rows, auroc[[1]] - 0.1, seeds=(22,))[:2]}, (22,))
  write_outputs(tmp_path / "a", *a)
  write_outputs(tmp_path / "b", *b)
  run_a, run_b, into = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "m")
  assert report.main([run_a, run_b, "--report", "table1", "--into", into]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and "pass --seeds 22" in err[0]
  assert report.main([run_a, run_b, "--seeds", "22", "--report", "table1", "--into", into]) == 0
  out = capsys.readouterr().out
  cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in out.splitlines() if "| —" in line}
  assert cells["m"] == f"{np.nanmean(auroc[1][:4]):.3f} ± —"  # seed 22 alone: centers 0–3 (5 is NaN there)
  assert cells["n"] == f"{np.nanmean(auroc[1][:4] - 0.1):.3f} ± —"
  assert "Seeds 22;" in out
  for bad, words in ((["--seeds", "44"], ("a:", "no seed 44", "11, 22, 33")), (["--seeds", "x"], ("integers",)),
                     (["--seeds", ","], ("no seed",)), (["--seeds", "22,11,22"], ("seed 22", "more than once"))):
    assert report.main([run_a, "--report", "table1", "--into", str(tmp_path / "never"), *bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and all(w in err[0] for w in words), err
  assert not (tmp_path / "never").exists()


def test_pooled_seeds_are_the_summary_of_every_seed_at_once(tmp_path, capsys):
  """``--pool-seeds``: runs of one federation holding other seeds (one seed per invocation) give each method the
  entry a single run of all its seeds would have; a method missing a seed is named below the table."""
  from fedjax_sim import report
  from fedjax_sim.outputs import _json_safe, write_outputs
  rows, auroc = subset_auroc()
  full, full_records, _ = summarize_fake(rows, auroc, bytes_per_round=10.0)  # m over 11, 22, 33 in one run
  runs = [written({"m": summarize_fake(rows, auroc[[0, 1]], seeds=(11, 22), bytes_per_round=10.0)[:2]}, (11, 22)),
          written({"m": summarize_fake(rows, auroc[[2]], seeds=(33,), bytes_per_round=10.0)[:2],
                   "n": summarize_fake(rows, auroc[[2]] - 0.1, seeds=(33,), bytes_per_round=10.0)[:2]}, (33,))]
  runs[0][0]["faults"] = {"n": "non-finite loss or parameter in round 2 of method n (seed 11)"}
  summary, per_seed = report.pool_outputs(runs)
  assert summary["config"]["seeds"] == [11, 22, 33]
  want = _json_safe(full)
  entry = summary["methods"]["m"]
  for key in set(want) - {"timing"}:
    assert entry[key] == want[key], key
  assert per_seed["m"] == _json_safe(full_records)
  assert summary["methods"]["n"]["seeds"] == [33] and summary["methods"]["n"]["auroc_mean"] == pytest.approx(
      np.nanmean(auroc[2] - 0.1))  # seed 33 alone scores every center but 4
  assert summary["seed_gaps"] == {"n": {"missing": [11, 22], "fault": runs[0][0]["faults"]["n"]}}
  assert "faults" not in summary  # n is held (seed 33): not lost, but over fewer seeds
  # the first run that holds a method's seed wins
  again, _ = report.pool_outputs([runs[0], written({"m": summarize_fake(rows, auroc[[1]] - 0.2, seeds=(22,))[:2]},
                                                   (22,))])
  assert again["methods"]["m"]["auroc_mean"] == runs[0][0]["methods"]["m"]["auroc_mean"]
  # through the command line: the table over the pooled seeds, the gap below it
  for i, outputs in enumerate(runs):
    write_outputs(tmp_path / f"r{i}", *outputs)
  paths = [str(tmp_path / "r0"), str(tmp_path / "r1")]
  into = tmp_path / "pooled"
  assert report.main([*paths, "--pool-seeds", "--report", "table1", "--into", str(into)]) == 0
  out = capsys.readouterr().out
  assert "Seeds 11, 22, 33;" in out and f"| m | {want['auroc_mean']:.3f} ± {want['auroc_std']:.3f} |" in out
  assert "### Rows over fewer seeds than the others" in out and "- n: no seed 11, 22 (non-finite" in out
  # refused: with --seeds, across federations, and for sweeps; nothing written
  other = written({"m": summarize_fake(rows, auroc[[0]], seeds=(44,))[:2]}, (44,))
  other[0]["federation"]["clients"] = 7
  write_outputs(tmp_path / "other", *other)
  for argv, words in (([*paths, "--pool-seeds", "--seeds", "11"], ("do not combine",)),
                      ([paths[0], str(tmp_path / "other"), "--pool-seeds"], ("run 2", "other data or federation")),
                      ([*paths], ("--pool-seeds",))):
    assert report.main([*argv, "--report", "table1", "--into", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and all(w in err[0] for w in words), err
  assert not (tmp_path / "never").exists()
  swept = ({**runs[1][0], "methods": {"m": {**runs[1][0]["methods"]["m"], "grid": []}}}, runs[1][1])
  with pytest.raises(ValueError, match="sweep"):
    report.pool_outputs([runs[0], swept])
