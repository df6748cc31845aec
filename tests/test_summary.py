"""summarize() and the printed results table (issue 9): centers scored and their test-split sizes, the
small-test-split warning, the sample std over seeds, bandwidth null only when not federated, valid Markdown.

No program is compiled: ``out`` is fabricated with numpy in the shape summarize reads (SPEC §6).
"""
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
