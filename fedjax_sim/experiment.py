"""Running an experiment: data → federation → one compiled program per method → summary (SPEC §6)."""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sim.algorithms.registry import build_method, build_model, hyper_from_config, preset
from fedjax_sim.config import ExperimentConfig, config_for_method
from fedjax_sim.data.cohorts import Cohorts
from fedjax_sim.data.federation import Federation, from_cohorts
from fedjax_sim.engine.simulate import compile_seeds, make_simulation
from fedjax_sim.errors import ConfigError
from fedjax_sim.metrics import fedavg_reference_bytes
from fedjax_sim.models import num_params


def load_cohorts(data) -> Cohorts:
  """The cohorts named by a :class:`~fedjax_sim.config.DataConfig` (nothing is downloaded)."""
  if data.source == "synthetic":
    from fedjax_sim.data.clinical import synthetic_clinical
    cohorts = synthetic_clinical(seed=data.data_seed, num_centers=data.num_centers, total_stays=data.total_stays)
  elif data.source == "mimic":
    from fedjax_sim.data.mimic import load_mimic_iv
    cohorts = load_mimic_iv(data.path)
  elif data.source == "csv":
    from fedjax_sim.data.csv_sites import load_csv_sites
    cohorts = load_csv_sites(data.path, data.site_column, data.label_column,
                             categorical_columns=tuple(data.categorical_columns))
  else:  # validated earlier; kept for direct API use
    raise ConfigError(f"data.source must be synthetic, mimic or csv; got {data.source!r}")
  if data.partition != "natural":
    cohorts = repartition(cohorts, data)
  return cohorts


def repartition(cohorts: Cohorts, data) -> Cohorts:
  """Pools every site's rows and re-splits them IID or by Dirichlet(α) label skew (SPEC §2.2)."""
  from fedjax_sim.data import partition
  x = np.concatenate([s.x for s in cohorts.sites])
  y = np.concatenate([s.y for s in cohorts.sites])
  k = data.num_clients or len(cohorts.sites)
  if data.partition == "iid":
    return partition.iid_partition(data.data_seed, x, y, k, cohorts.feature_names, cohorts.continuous)
  return partition.dirichlet_partition(data.data_seed, x, y, k, data.dirichlet_alpha, cohorts.feature_names,
                                       cohorts.continuous)


def build_federation(config: ExperimentConfig, warn: Callable[[str], None] = print) -> Federation:
  """Loads the data and stacks the federation; warnings (e.g. dropped sites) go to ``warn``."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cohorts = load_cohorts(config.data)
    fed = from_cohorts(cohorts, seed=config.data.data_seed, batch_size=config.learner.batch_size,
                       num_buckets=config.learner.num_buckets, min_rows=config.data.min_site_rows)
  for w in caught:
    warn(f"warning: {w.message}")
  return fed


def seed_keys(seeds) -> jax.Array:
  return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))


@dataclasses.dataclass
class MethodRun:
  """Host-side results of one method over all seeds."""

  name: str
  summary: dict  # the summary.json entry
  per_seed: list  # full per-seed records (per-center AUROC, curves)
  compile_s: float
  run_s: float
  traces: int


def run_method(name: str, config: ExperimentConfig, federation: Federation) -> MethodRun:
  """Compiles one program for all seeds of ``name``, runs it, and summarizes (SPEC §6 schema)."""
  config = config_for_method(config, preset(name))
  algorithm, model = build_method(name, config, federation.num_features, federation.num_clients)
  fed = algorithm.prepare(federation)
  traces = {"n": 0}
  simulate = make_simulation(algorithm, model, config.rounds)

  def counted(key, fed_, hyper):
    traces["n"] += 1  # runs only while tracing: counts compilations
    return simulate(key, fed_, hyper)

  keys = seed_keys(config.seeds)
  hyper = hyper_from_config(config)
  t0 = time.perf_counter()
  compiled, _ = compile_seeds(counted, keys, fed, hyper)
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  out = jax.block_until_ready(compiled(keys, fed, hyper))
  run_s = time.perf_counter() - t0
  summary, per_seed = summarize(name, config, federation, model, algorithm, out)
  summary["timing"] = {"compile_s": compile_s, "run_s": run_s}
  summary["preset"] = {k: v for k, v in preset(name).items()}
  return MethodRun(name, summary, per_seed, compile_s, run_s, traces["n"])


def reference_rounds(config: ExperimentConfig, name: str) -> int:
  """R_ref of the bandwidth ratio (SPEC §3.4): the run's rounds, unless ``reference_rounds`` names
  another (the early-stopping rows ABPS-X and FedAvg-X use 50 while running up to 100)."""
  return config.reference_rounds or config.rounds


def summarize(name, config, federation, model, algorithm, out):
  """Turns device outputs ``[S, ...]`` into the summary entry and per-seed records."""
  test = np.asarray(out.test_auroc, np.float64)  # [S, C]
  m = out.history.metrics
  bytes_ = np.asarray(m.bytes, np.float64).sum(axis=1)  # [S]
  active = np.asarray(m.active, np.float64)  # [S, R]
  rest = np.asarray(m.rest_fraction, np.float64)
  partners = np.asarray(m.mean_partners, np.float64)
  val_curve = np.asarray(out.history.val_auroc, np.float64)
  r_ref = reference_rounds(config, name)
  # The reference is fp32 FedAvg of the deterministic MLP, whatever this method's model is (BNN+FL: 2×).
  reference_model = build_model(config, federation.num_features)
  p = num_params(jax.eval_shape(reference_model.init, jax.random.key(0)))
  ref = fedavg_reference_bytes(federation.num_clients, p, r_ref)
  per_seed = []
  for s, seed in enumerate(config.seeds):
    ok = ~np.isnan(test[s])
    act = active[s] > 0
    per_seed.append({
        "seed": int(seed),
        "auroc": float(test[s][ok].mean()) if ok.any() else float("nan"),
        "excluded_centers": int((~ok).sum()),
        "bytes": float(bytes_[s]) if algorithm.federated else None,
        "bandwidth_ratio": float(bytes_[s] / ref) if algorithm.federated else None,
        "rest_fraction": float(rest[s][act].mean()) if act.any() else 0.0,
        "mean_partners": float(partners[s][act].mean()) if act.any() else 0.0,
        "rounds_run": int(act.sum()),
        "val_auroc_curve": [float(v) for v in val_curve[s]],
        "test_auroc_per_center": [None if np.isnan(v) else float(v) for v in test[s]],
    })
  aurocs = np.array([r["auroc"] for r in per_seed])
  summary = {
      "seeds": [int(s) for s in config.seeds],
      "auroc_mean": float(np.mean(aurocs)),
      "auroc_std": float(np.std(aurocs)),
      "bandwidth_ratio": float(np.mean([r["bandwidth_ratio"] for r in per_seed])) if algorithm.federated else None,
      "bytes": float(np.mean(bytes_)) if algorithm.federated else None,
      "rest_fraction": float(np.mean([r["rest_fraction"] for r in per_seed])),
      "mean_partners": float(np.mean([r["mean_partners"] for r in per_seed])),
      "rounds_run": int(np.max([r["rounds_run"] for r in per_seed])),
      "excluded_centers": int(max(r["excluded_centers"] for r in per_seed)),
      "bandwidth_reference": {"rounds": r_ref, "bytes": ref, "params": p},
      "per_seed": [{k: v for k, v in r.items() if k not in ("val_auroc_curve", "test_auroc_per_center")}
                   for r in per_seed],
  }
  return summary, per_seed
