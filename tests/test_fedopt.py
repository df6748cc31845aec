"""FedAdam / FedYogi / FedAvgM (fedjax_sim/algorithms/fedopt.py) against Reddi et al. 2021, Algorithm 2.

The server updates are checked against a plain float64 numpy implementation of
the formulas (no bias correction, v_{−1} = τ²), on their own and inside real
rounds; FedAvgM with β = 0, η = 1 must be FedAvg; the declaration must reach the
registry, config keys, sweeps and the command line without any other edit.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sim import config as config_mod
from fedjax_sim import run, sweep
from fedjax_sim.algorithms import fedopt, registry
from fedjax_sim.config import ExperimentConfig, LearnerConfig, apply_overrides, config_for_method
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import local_train, make_client_update
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import task_for
from tests.conftest import make_cohorts

KINDS = ("adam", "yogi", "avgm")
NAMES = {"adam": "fedadam", "yogi": "fedyogi", "avgm": "fedavgm"}


def numpy_step(kind, x, d, m, v, eta, beta1, beta2, tau, momentum):
  """One server step of Reddi et al. 2021, Algorithm 2 (float64): returns the new (x, m, v).

  FedAvgM: m = βm + Δ; x += ηm.  FedAdam: m = β1 m + (1−β1)Δ; v = β2 v + (1−β2)Δ²; x += η m/(√v + τ).
  FedYogi: as FedAdam but v = v − (1−β2)Δ² sign(v − Δ²). No bias correction.
  """
  x, d = np.asarray(x, np.float64), np.asarray(d, np.float64)
  if kind == "avgm":
    m = momentum * m + d
    return x + eta * m, m, v
  m = beta1 * m + (1 - beta1) * d
  if kind == "adam":
    v = beta2 * v + (1 - beta2) * d * d
  else:
    v = v - (1 - beta2) * d * d * np.sign(v - d * d)
  return x + eta * m / (np.sqrt(v) + tau), m, v


def numpy_init(kind, x, tau):
  """m_{−1} = 0; v_{−1} = τ² for FedAdam/FedYogi (the module's Decision), unused (0) for FedAvgM."""
  x = np.asarray(x, np.float64)
  return np.zeros_like(x), (np.zeros_like(x) if kind == "avgm" else np.full_like(x, tau ** 2))


def numpy_server_steps(kind, x0, deltas, eta, beta1, beta2, tau, momentum):
  """The (x, m, v) after each of the pseudo-gradients ``deltas``, from x0."""
  x = np.asarray(x0, np.float64)
  m, v = numpy_init(kind, x, tau)
  out = []
  for d in deltas:
    x, m, v = numpy_step(kind, x, d, m, v, eta, beta1, beta2, tau, momentum)
    out.append((x, m, v))
  return out


def hyper(eta=1e-2, beta1=0.9, beta2=0.99, tau=1e-3, momentum=0.9):
  f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
  return fedopt.FedOptHyper(server_learning_rate=f(eta), beta1=f(beta1), beta2=f(beta2), tau=f(tau),
                            momentum=f(momentum))


# --- the server step alone -------------------------------------------------------------------------

_STEP = {}


def jitted_steps(kind):
  """One compiled (init, update) per kind: hypothesis examples differ only in traced numbers."""
  if kind not in _STEP:
    opt = fedopt.server_optimizer(kind)

    def run_steps(x0, deltas, h):
      moments = opt.init(x0, h)

      def body(carry, d):
        x, moments = carry
        step, moments = opt.update(d, moments, h)
        x = jax.tree_util.tree_map(jnp.add, x, step)
        return (x, moments), (x, moments)

      _, (xs, ms) = jax.lax.scan(body, (x0, moments), deltas)
      return xs, ms

    _STEP[kind] = jax.jit(run_steps)
  return _STEP[kind]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), eta=st.floats(1e-3, 1.0), beta1=st.floats(0.0, 0.99),
       beta2=st.floats(0.5, 0.999), tau=st.floats(1e-4, 1e-1), momentum=st.floats(0.0, 0.99))
def test_server_step_matches_numpy_formulas(kind, seed, eta, beta1, beta2, tau, momentum):
  rng = np.random.default_rng(seed)
  x0 = rng.normal(size=(7,)).astype(np.float32)
  deltas = (rng.normal(size=(3, 7)) * rng.choice([1e-3, 1e-1, 1.0], size=(3, 1))).astype(np.float32)
  xs, ms = jitted_steps(kind)(jnp.asarray(x0), jnp.asarray(deltas), hyper(eta, beta1, beta2, tau, momentum))
  h32 = lambda v: float(np.float32(v))  # noqa: E731  (the program reads float32 numbers)
  ref = numpy_server_steps(kind, x0, deltas, h32(eta), h32(beta1), h32(beta2), h32(tau), h32(momentum))
  for t, (x, m, v) in enumerate(ref):
    np.testing.assert_allclose(np.asarray(xs[t]), x, rtol=1e-5, atol=1e-6 * max(1.0, eta))
    np.testing.assert_allclose(np.asarray(ms.m[t]), m, rtol=1e-5, atol=1e-7)
    if kind == "avgm":
      assert ms.v is None
    else:
      np.testing.assert_allclose(np.asarray(ms.v[t]), v, rtol=1e-5, atol=1e-12)


def test_adaptive_init_is_tau_squared_and_first_step_has_no_bias_correction():
  x0 = jnp.zeros((3,))
  d = jnp.array([0.5, -0.2, 1e-4])
  h = hyper(eta=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
  for kind in ("adam", "yogi"):
    opt = fedopt.server_optimizer(kind)
    moments = opt.init(x0, h)
    np.testing.assert_allclose(np.asarray(moments.v), 1e-6, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(moments.m), 0.0)
    step, _ = opt.update(d, moments, h)
    # Hand computation of step 1: m = 0.1Δ; v = 0.99τ² + 0.01Δ² (Adam) or τ² + 0.01Δ² (Yogi: τ² < Δ² here,
    # except the last entry, where Δ² = 1e-8 < τ² and Yogi lowers v).
    dd = np.asarray(d, np.float64)
    v = 0.99e-6 + 0.01 * dd ** 2 if kind == "adam" else 1e-6 - 0.01 * dd ** 2 * np.sign(1e-6 - dd ** 2)
    np.testing.assert_allclose(np.asarray(step), 0.1 * 0.1 * dd / (np.sqrt(v) + 1e-3), rtol=1e-5)
    # Positive control: Adam's bias correction (m̂ = m/(1−β1), v̂ = v/(1−β2), as optax's scale_by_adam) would
    # give a step ~1.8× larger on the small entry, where τ matters; the formulas above must tell them apart.
    corrected = 0.1 * (0.1 * dd / 0.1) / (np.sqrt(v / 0.01) + 1e-3)
    assert abs(float(step[2]) - corrected[2]) > 0.3 * abs(corrected[2])


def test_unknown_server_optimizer_is_refused():
  with pytest.raises(ValueError, match="unknown server optimizer"):
    fedopt.server_optimizer("adagrad")


# --- inside real rounds ----------------------------------------------------------------------------

LEARNER = LearnerConfig(hidden=(8,), batch_size=32, local_epochs=1, learning_rate=1e-2)
CONFIG = ExperimentConfig(learner=LEARNER)


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=4, sizes=[40, 70, 110, 160]), batch_size=32, num_buckets=2)


def f64(tree):
  return [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("kind", KINDS)
def test_rounds_match_numpy_reference_on_the_clients_results(kind, fed):
  """Three real rounds; each round's clients are retrained from the algorithm's x_t with the same key, and the
  n-weighted pseudo-gradient and the numpy server step (own m, v carried over rounds) must give its x_{t+1}."""
  name = NAMES[kind]
  config = config_for_method(CONFIG, registry.preset(name))
  task = task_for(config, fed)
  client_update = make_client_update(task, batch_size=32, epochs=1)
  algorithm = fedopt.fedopt(task.model, client_update, kind, name)
  h = registry.hyper_from_config(config, name)
  assert isinstance(h.method, fedopt.FedOptHyper)
  train = jax.jit(lambda k, p, t: local_train(client_update, k, p, fed, shared=p, hyper=h, t=t,
                                              params_stacked=False).params)
  step = jax.jit(algorithm.round)
  state = algorithm.init(jax.random.key(0), fed, h)
  fo = config.fedopt
  w = np.asarray(fed.n_train, np.float64) / float(np.sum(fed.n_train))
  tau = float(np.float32(fo.tau))
  xs = f64(state.global_params)
  moments = [numpy_init(kind, x, tau) for x in xs]
  moved = 0.0
  for t in (1, 2, 3):
    key = jax.random.key(100 + t)
    clients = f64(train(key, state.global_params, jnp.int32(t)))
    new_state, metrics = step(key, state, fed, h, jnp.int32(t))
    for j, (x, c, got) in enumerate(zip(f64(state.global_params), clients, f64(new_state.global_params))):
      delta = np.tensordot(w, c - x[None], axes=1)  # Δ_t = Σ_i w_i (x_i − x_t)
      x_new, m, v = numpy_step(kind, x, delta, *moments[j], fo.server_learning_rate, fo.beta1, fo.beta2, tau,
                               fo.momentum)
      moments[j] = (m, v)
      np.testing.assert_allclose(got, x_new, rtol=1e-4, atol=1e-5)
      moved += float(np.abs(got - x).sum())
    for got_m, (ref_m, _) in zip(f64(new_state.server.m), moments):
      np.testing.assert_allclose(got_m, ref_m, rtol=1e-4, atol=1e-6)
    if kind != "avgm":
      for got_v, (_, ref_v) in zip(f64(new_state.server.v), moments):
        np.testing.assert_allclose(got_v, ref_v, rtol=1e-4, atol=1e-9)
    state = new_state
  assert moved > 1e-3  # the server model did move (a guard against comparing two no-ops)
  n_params = sum(x.size for x in xs)
  assert float(metrics.bytes) == fed.num_clients * 2 * n_params * 4  # as FedAvg (SPEC §3.4)


def two_rounds(name, config, fed):
  config = config_for_method(config, registry.preset(name))
  algorithm, _ = registry.build_method(name, config, fed)
  h = registry.hyper_from_config(config, name)
  step = jax.jit(algorithm.round)
  state = algorithm.init(jax.random.key(0), fed, h)
  states = [state]
  for t in (1, 2):
    state, _ = step(jax.random.key(7 + t), state, fed, h, jnp.int32(t))
    states.append(state)
  return states


def test_fedavgm_with_zero_momentum_and_unit_rate_is_fedavg(fed):
  avg = two_rounds("fedavg", CONFIG, fed)
  zero = two_rounds("fedavgm", apply_overrides(CONFIG, {"fedopt.momentum": 0.0}), fed)
  for a, b in zip(avg[1:], zero[1:]):
    for x, y in zip(f64(a.global_params), f64(b.global_params)):
      np.testing.assert_allclose(y, x, rtol=0, atol=1e-6)
  # Guards: the model moved, and with the default β = 0.9 round 2 differs from FedAvg (round 1 does not:
  # v_0 = Δ_0, so x_1 = x_0 + Δ_0 is FedAvg's average).
  assert max(np.abs(x - y).max() for x, y in zip(f64(avg[2].global_params), f64(avg[0].global_params))) > 1e-3
  mom = two_rounds("fedavgm", CONFIG, fed)
  for x, y in zip(f64(avg[1].global_params), f64(mom[1].global_params)):
    np.testing.assert_allclose(y, x, rtol=0, atol=1e-6)
  assert max(np.abs(x - y).max() for x, y in zip(f64(avg[2].global_params), f64(mom[2].global_params))) > 1e-4


# --- the declaration reaches the platform ----------------------------------------------------------

def test_declaration_reaches_registry_config_and_sweeps():
  for name in ("fedadam", "fedyogi", "fedavgm"):
    assert name in registry.METHODS
    assert registry.spec_of(name).section == "fedopt"
  assert {"fedopt.server_learning_rate", "fedopt.beta1", "fedopt.beta2", "fedopt.tau",
          "fedopt.momentum"} <= set(config_mod.valid_keys())
  traced = {"fedopt.server_learning_rate", "fedopt.beta1", "fedopt.beta2", "fedopt.tau", "fedopt.momentum"}
  assert traced <= set(sweep.sweepable())
  # Defaults and presets: η = 1e-2 for the adaptive methods, 1.0 for FedAvgM; --set goes over the preset.
  base = ExperimentConfig()
  assert config_for_method(base, registry.preset("fedadam")).fedopt.server_learning_rate == 1e-2
  assert config_for_method(base, registry.preset("fedavgm")).fedopt.server_learning_rate == 1.0
  user = config_mod.load_experiment("fedopt", {"fedopt.server_learning_rate": "0.5"})
  assert user.methods == ("fedavg", "fedavgm", "fedadam", "fedyogi")
  assert config_for_method(user, registry.preset("fedavgm")).fedopt.server_learning_rate == 0.5
  # A sweep of η is accepted and reaches the traced numbers of each grid point.
  grid = sweep.parse_sweep(["fedopt.server_learning_rate=0.01,0.1"], user)
  points = sweep.point_configs(config_for_method(user, registry.preset("fedadam")), grid)
  etas = [float(registry.hyper_from_config(c, "fedadam").method.server_learning_rate) for c in points]
  np.testing.assert_allclose(etas, [0.01, 0.1], rtol=1e-6)


@pytest.mark.parametrize("key, value, message", [
    ("fedopt.beta1", "1.5", r"fedopt.beta1 must be in \[0, 1\), got 1.5"),
    ("fedopt.beta2", "1.0", r"fedopt.beta2 must be in \[0, 1\)"),
    ("fedopt.momentum", "-0.1", r"fedopt.momentum must be in \[0, 1\)"),
    ("fedopt.tau", "0", r"fedopt.tau must be positive"),
    ("fedopt.server_learning_rate", "-1", r"fedopt.server_learning_rate must be positive"),
    ("fedopt.optimizer", "adam", r"unknown config key 'fedopt.optimizer'"),
])
def test_out_of_range_settings_are_refused(key, value, message):
  with pytest.raises(ConfigError, match=message):
    apply_overrides(ExperimentConfig(), {key: value})


def test_a_federation_of_one_is_refused():
  with pytest.raises(ConfigError, match="fedadam needs a federation of at least 2 centers"):
    registry.check_federation("fedadam", ExperimentConfig(), 1)


def test_cli_runs_the_fedopt_experiment(tmp_path):
  out = tmp_path / "out"
  # One method through the CLI (each costs a compile; the rounds of all three are checked above): the preset's
  # method, fedavgm, so that the preset and the section reach the summary.
  assert run.main(["fedopt", "--rounds", "2", "--seeds", "1", "--set", "data.num_centers=12", "--set",
                   "data.total_stays=1500", "--set", "learner.hidden=8", "--set", "methods=fedavgm",
                   "--quiet", "--out", str(out)]) == 0
  summary = json.loads((out / "summary.json").read_text())
  methods = summary["methods"]
  assert list(methods) == ["fedavgm"]
  for name in methods:
    row = methods[name]
    assert 0.0 <= row["auroc_mean"] <= 1.0
    assert row["rounds_run"] == 2
    assert row["bandwidth_ratio"] == 1.0  # a star round's bytes, exactly FedAvg's (SPEC §3.4)
    assert row["bytes"] == row["bandwidth_reference"]["bytes"] > 0
    assert (out / name / "seed_1.json").is_file()
  assert methods["fedavgm"]["preset"] == {"fedopt.server_learning_rate": 1.0}
  assert summary["config"]["fedopt"]["beta2"] == 0.99
