"""Summarizing an experiment: per-seed records and the summary entry of each method (SPEC §6).

Generic over tasks: the task's metric (``auroc`` or ``accuracy``) names the keys, accuracy tasks add the worst
client and the std across clients, and each method family's declared reduction of its own per-round metrics
(:attr:`fedjax_sim.algorithms.spec.MethodSpec.metrics`) adds its entries. The third stage of
:mod:`fedjax_sim.experiment`.
"""
from __future__ import annotations

import sys
import weakref
from typing import Callable, Optional

import jax
import numpy as np

from fedjax_sim.algorithms.registry import build_model
from fedjax_sim.config import ExperimentConfig
from fedjax_sim.metrics import fedavg_reference_bytes
from fedjax_sim.models import num_params
from fedjax_sim.sweep import Sweep


def reference_rounds(config: ExperimentConfig, name: str) -> int:
  """R_ref of the bandwidth ratio (SPEC §3.4): the run's rounds, unless ``reference_rounds`` names
  another (the early-stopping rows ABPS-X and FedAvg-X use 50 while running up to 100)."""
  return config.reference_rounds or config.rounds


def summarize_grid(name, points, sweep: Sweep, federation, model, algorithm, out,
                   warn: Optional[Callable[[str], None]] = None, metric: str = "auroc"):
  """Summary entry of a method: as :func:`summarize` without a sweep; with one, a ``grid`` list of
  :func:`summarize` entries, each with its ``point`` (run ``g * S + s`` is point g, seed s)."""
  if not sweep:
    return summarize(name, points[0], federation, model, algorithm, out, warn, metric)
  s = len(points[0].seeds)
  grid, records = [], []
  for g, (point, cfg) in enumerate(zip(sweep.points, points)):
    part = jax.tree_util.tree_map(lambda a: a[g * s:(g + 1) * s], out)
    entry, per_seed = summarize(name, cfg, federation, model, algorithm, part, warn, metric)
    grid.append({"point": point, **entry})
    records += [{"grid_point": g, "point": point, **r} for r in per_seed]
  return {"sweep": {"keys": list(sweep.keys), "values": [list(v) for v in sweep.values],
                    "points": len(grid)}, "grid": grid}, records


# A scored center with fewer test rows than this gets a coarse AUROC; when most scored centers are
# that small, :func:`summarize` warns (issue 9).
SMALL_TEST_ROWS = 10
# How the across-seed spread is computed; written into every method entry of summary.json.
STD_KIND = "sample (ddof=1) across seeds; null with one seed"
_WARNED = weakref.WeakValueDictionary()  # (id(federation), message) -> federation, for warn-once


def _warn_once(federation, line: str) -> None:
  """Prints ``line`` on stderr once per federation (every method of a run shares one federation)."""
  try:
    key = (id(federation), line)
    if _WARNED.get(key) is federation:
      return
    _WARNED[key] = federation
  except TypeError:  # an object without weak references: print every time
    pass
  print(line, file=sys.stderr, flush=True)


def sample_std(values) -> float:
  """Sample standard deviation (ddof = 1) of ``values``; NaN (null in summary.json) for fewer than two.

  Decision (issue 9): papers' "mean ± std over seeds" is the sample std (paper 000 Table 1
  reports ± over 5 seeds, SPEC §3.1), so ddof = 1. One seed has no spread to estimate: NaN,
  written as null, rather than 0.0, which would read as "no variation".
  """
  values = np.asarray(values, np.float64)
  return float(np.std(values, ddof=1)) if values.size > 1 else float("nan")


def scored_centers_report(federation, test_auroc) -> dict:
  """How many centers were scored and how big their test splits are (issue 9).

  Args:
    federation: the host federation (``m_test [C, T]`` marks each center's test rows).
    test_auroc: ``[S, C]`` per-center test AUROC, NaN where undefined (a one-class test split).

  Returns:
    ``{"centers_scored", "median_test_rows", "small_test_centers"}``: centers with a defined
    AUROC in every seed, the median test-split size over them (None if none), and how many of
    them have fewer than :data:`SMALL_TEST_ROWS` test rows.
  """
  test_auroc = np.asarray(test_auroc, np.float64)
  scored = ~np.isnan(test_auroc).any(axis=0)  # [C]
  rows = np.asarray(federation.m_test).sum(axis=1)[scored]
  return {"centers_scored": int(scored.sum()),
          "median_test_rows": float(np.median(rows)) if rows.size else None,
          "small_test_centers": int((rows < SMALL_TEST_ROWS).sum())}


def small_test_warning(report: dict, num_clients: int) -> Optional[str]:
  """The ``warning: ...`` line when most scored centers have fewer than :data:`SMALL_TEST_ROWS` test rows."""
  scored, small = report["centers_scored"], report["small_test_centers"]
  if scored == 0 or 2 * small <= scored:
    return None
  return (f"warning: {small} of the {scored} scored centers (of {num_clients}) have fewer than {SMALL_TEST_ROWS} "
          f"test rows (median {report['median_test_rows']:g}); a per-center AUROC from so few rows is coarse and "
          "the mean over centers is noisy. Larger sites (raise data.min_site_rows, or merge sites) give "
          "steadier figures")


def _declared(name: str, extra, seed: int, active) -> dict:
  """Seed ``seed``'s summary entries from its method family's declared reduction of ``RoundMetrics.extra``."""
  from fedjax_sim.algorithms.registry import spec_of
  reduce = spec_of(name).metrics if name in _known_methods() else None
  if reduce is None or extra is None:
    return {}
  return reduce(jax.tree_util.tree_map(lambda a: np.asarray(a)[seed], extra), active)


def _known_methods() -> tuple:
  from fedjax_sim.algorithms.registry import METHODS
  return METHODS


def _client_spread(metric: str, values, ok) -> dict:
  """Across-client spread of one seed's per-client metric: worst client and std (SPEC §4.4), for accuracy tasks.

  Decision: the clinical AUROC rows keep paper 000's mean over centers only (their per-seed records are unchanged
  by issue 10); accuracy tasks report the mean, the worst client and the std across clients (ddof = 0: the
  clients are the whole population, not a sample; :func:`fedjax_sim.metrics.across_clients`).
  """
  if metric == "auroc":
    return {}
  v = np.asarray(values, np.float64)[ok]
  if v.size == 0:
    return {f"{metric}_worst": float("nan"), f"{metric}_client_std": float("nan")}
  return {f"{metric}_worst": float(v.min()), f"{metric}_client_std": float(v.std())}


def seed_statistics(per_seed: list, metric: str, declared, federated: bool) -> dict:
  """The across-seed entries of a method's summary, from its per-seed records alone.

  Each declared key's mean (the method family's own reduction, in ``declared``'s order), the task metric's mean
  and sample std (:func:`sample_std`), the means of the across-client spread (accuracy tasks), the bandwidth,
  rest fraction and partners' means, the most rounds run and the most excluded centers. :func:`summarize` builds
  its entry with it and ``python -m fedjax_sim.report --seeds`` re-aggregates a subset of a run's seeds with it,
  so the two agree by construction. A record's None (a NaN written to JSON) counts as NaN.
  """
  values = lambda k: [np.nan if r[k] is None else r[k] for r in per_seed]  # noqa: E731  (NaN is null in JSON)
  mean = lambda k: float(np.mean(values(k)))  # noqa: E731
  spread = [k for k in (f"{metric}_worst", f"{metric}_client_std") if k in per_seed[0]]
  return {
      **{k: mean(k) for k in declared},
      **({"declared": sorted(declared)} if declared else {}),  # the family's own keys (the table shows them)
      f"{metric}_mean": mean(metric),
      f"{metric}_std": sample_std(values(metric)),
      **{f"{k}_mean": mean(k) for k in spread},
      "std": STD_KIND,
      "bandwidth_ratio": mean("bandwidth_ratio") if federated else None,
      "bytes": mean("bytes") if federated else None,
      "rest_fraction": mean("rest_fraction"),
      "mean_partners": mean("mean_partners"),
      "rounds_run": int(max(r["rounds_run"] for r in per_seed)),
      "excluded_centers": int(max(r["excluded_centers"] for r in per_seed)),
  }


def brief_record(record: dict, metric: str) -> dict:
  """A per-seed record as the summary entry keeps it: without the curves and per-client lists that its
  ``seed_*.json`` file holds."""
  heavy = (f"val_{metric}_curve", f"test_{metric}_per_center", f"val_{metric}_clients")
  return {k: v for k, v in record.items() if k not in heavy}


def summarize(name, config, federation, model, algorithm, out, warn: Optional[Callable[[str], None]] = None,
              metric: str = "auroc"):
  """Turns device outputs ``[S, ...]`` into the summary entry and per-seed records.

  The entry holds the mean and the sample std (ddof = 1, :func:`sample_std`) over seeds,
  the bandwidth ratio (SPEC §3.4; null only for a method that is not federated, i.e.
  Centralized; Local-only exchanges nothing: 0 bytes, ratio 0.0), and how many centers were
  scored with how many test rows (:func:`scored_centers_report`). When most scored centers have
  fewer than :data:`SMALL_TEST_ROWS` test rows, ``warn`` gets one ``warning: ...`` line
  (default: stderr, once per federation).
  """
  test = np.asarray(out.test_auroc, np.float64)  # [S, C] the task's metric per client (AUROC or accuracy)
  m = out.history.metrics
  bytes_ = np.asarray(m.bytes, np.float64).sum(axis=1)  # [S]
  active = np.asarray(m.active, np.float64)  # [S, R]
  rest = np.asarray(m.rest_fraction, np.float64)
  partners = np.asarray(m.mean_partners, np.float64)
  val_curve = np.asarray(out.history.val_auroc, np.float64)
  val_clients = (None if getattr(out.history, "val_clients", None) is None else
                 np.asarray(out.history.val_clients, np.float64))  # [S, R, C] (a method's client_curves)
  r_ref = reference_rounds(config, name)
  # The reference is fp32 FedAvg of the deterministic MLP, whatever this method's model is (BNN+FL: 2×).
  reference_model = build_model(config, federation)
  p = num_params(jax.eval_shape(reference_model.init, jax.random.key(0)))
  ref = fedavg_reference_bytes(federation.num_clients, p, r_ref)
  per_seed = []
  for s, seed in enumerate(config.seeds):
    ok = ~np.isnan(test[s])
    act = active[s] > 0
    per_seed.append({
        "seed": int(seed),
        metric: float(test[s][ok].mean()) if ok.any() else float("nan"),
        **_client_spread(metric, test[s], ok),
        **_declared(name, m.extra, s, active[s]),
        "excluded_centers": int((~ok).sum()),
        "bytes": float(bytes_[s]) if algorithm.federated else None,
        "bandwidth_ratio": float(bytes_[s] / ref) if algorithm.federated else None,
        "rest_fraction": float(rest[s][act].mean()) if act.any() else 0.0,
        "mean_partners": float(partners[s][act].mean()) if act.any() else 0.0,
        "rounds_run": int(act.sum()),
        f"val_{metric}_curve": [float(v) for v in val_curve[s]],
        f"test_{metric}_per_center": [None if np.isnan(v) else float(v) for v in test[s]],
        **({} if val_clients is None else
           {f"val_{metric}_clients": [[None if np.isnan(v) else float(v) for v in row] for row in val_clients[s]]}),
    })
  split = scored_centers_report(federation, test)
  line = small_test_warning(split, federation.num_clients)
  if line is not None:
    (warn or (lambda m: _warn_once(federation, m)))(line)
  declared = [k for k in _declared(name, m.extra, 0, active[0]) if isinstance(per_seed[0][k], float)]
  summary = {
      "seeds": [int(s) for s in config.seeds],
      **seed_statistics(per_seed, metric, declared, algorithm.federated),
      **split,
      "bandwidth_reference": {"rounds": r_ref, "bytes": ref, "params": p},
      "per_seed": [brief_record(r, metric) for r in per_seed],
  }
  return summary, per_seed
