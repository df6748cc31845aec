"""--sweep: exactly the traced settings are sweepable; grids, short names, static maxima."""
import jax
import numpy as np
import pytest

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.registry import hyper_from_config
from fedjax_sim.config import ExperimentConfig, apply_overrides, valid_keys
from fedjax_sim.errors import ConfigError
from fedjax_sim.sweep import parse_sweep, point_configs, resolve_key, structural_config, sweepable


def _leaves(config):
  """Every traced number of every method family under ``config`` (one method per family: its hyper is the
  family's)."""
  hypers = [hyper_from_config(config, next(iter(spec.methods))) for spec in registry.SPECS]
  return [np.asarray(x) for x in jax.tree_util.tree_leaves(hypers)]


def _changed(key, value):
  base = ExperimentConfig()
  return any(not np.array_equal(a, b) for a, b in zip(_leaves(base), _leaves(apply_overrides(base, {key: value}))))


def _other_value(key):
  section, field = key.split(".")
  v = getattr(getattr(ExperimentConfig(), section), field)
  if isinstance(v, bool) or not isinstance(v, (int, float)):
    return None
  return v + 1 if isinstance(v, int) else (v * 0.5 if v else 0.25)


def test_every_sweepable_key_is_read_by_the_traced_hyperparameters():
  assert "abps.kappa" in sweepable() and "learner.learning_rate" in sweepable()  # the guard sees keys
  for key in sweepable():
    assert _changed(key, _other_value(key)), f"{key} is listed as sweepable but hyper_from_config ignores it"


def test_no_other_numeric_key_reaches_the_traced_hyperparameters():
  """A numeric key outside sweepable() must not change Hyper (else it would be sweepable and unlisted)."""
  for key in valid_keys():
    if "." not in key or key in sweepable():
      continue
    value = _other_value(key)
    if value is None:
      continue
    try:
      changed = _changed(key, value)
    except ConfigError:
      continue  # out of range for this key; nothing to learn
    assert not changed, f"{key} changes the traced hyperparameters but is not sweepable"


def test_grid_is_the_product_in_order_and_values_are_validated():
  config = apply_overrides(ExperimentConfig(), {"methods": "abps"})
  sweep = parse_sweep(["kappa=1,2,3", "epsilon=0.05,0.1"], config)
  assert sweep.keys == ("abps.kappa", "abps.epsilon")
  assert sweep.points[:3] == [{"abps.kappa": 1, "abps.epsilon": 0.05}, {"abps.kappa": 1, "abps.epsilon": 0.1},
                              {"abps.kappa": 2, "abps.epsilon": 0.05}]
  configs = point_configs(config, sweep)
  assert [(c.abps.kappa, c.abps.epsilon) for c in configs] == [(k, e) for k in (1, 2, 3) for e in (0.05, 0.1)]
  assert structural_config(config, sweep).abps.kappa == 3  # slots for the largest κ
  with pytest.raises(ConfigError, match="abps.epsilon must be in"):
    parse_sweep(["epsilon=0.5,2"], config)
  with pytest.raises(ConfigError, match="given twice"):
    parse_sweep(["kappa=1", "abps.kappa=2"], config)


def test_short_names_resolve_by_the_methods_run():
  assert resolve_key("mu", ["fedprox"]) == "fedprox.mu"
  assert resolve_key("mu", ["moon"]) == "moon.mu"
  with pytest.raises(ConfigError, match="ambiguous"):
    resolve_key("mu", ["fedavg"])
  with pytest.raises(ConfigError, match="--seeds"):
    resolve_key("seeds", ["fedavg"])


def test_a_key_no_method_of_the_run_reads_is_refused_before_anything_runs():
  """A grid over a key that changes none of the run's traced numbers would repeat one run len(values) times:
  refused, naming the keys the methods do read; a key any one method reads is accepted (FedProx's μ beside
  FedAvg), and so is a one-value axis. Presets count: fbsfl_q0's preset q is the starting point a q grid
  replaces, so the grid is accepted and its points carry the swept q."""
  config = apply_overrides(ExperimentConfig(), {"methods": "fedavg"})
  with pytest.raises(ConfigError, match=r"--sweep abps.kappa: none of this run's methods \(fedavg\) reads it"):
    parse_sweep(["abps.kappa=1,2"], config)
  assert parse_sweep(["abps.kappa=2"], config).keys == ("abps.kappa",)
  both = apply_overrides(ExperimentConfig(), {"methods": "fedavg,fedprox"})
  assert parse_sweep(["fedprox.mu=0.1,0.2"], both).values == ((0.1, 0.2),)
  assert parse_sweep(["learning_rate=0.1,0.2"], config).keys == ("learner.learning_rate",)
  fbsfl = apply_overrides(ExperimentConfig(), {"methods": "fbsfl_q0"})
  assert point_configs(fbsfl, parse_sweep(["fbsfl.q=1,3"], fbsfl))[1].fbsfl.q == 3.0
  with pytest.raises(ConfigError, match="fbsfl.exp3_eta"):
    parse_sweep(["ipfl.lam=0.1,1"], fbsfl)
