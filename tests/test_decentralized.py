"""DeceFL and DeFTA on a fixed random regular graph (SPEC §3.3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms import decentralized
from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import local_train, make_client_update
from fedjax_sim.errors import ConfigError
from fedjax_sim.models import num_params
from fedjax_sim.tasks import binary_task
from tests.conftest import make_cohorts, numpy_bce

CONFIG = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))


@pytest.mark.parametrize("c, d", [(8, 3), (230, 3), (10, 4)])
def test_random_regular_graph_and_metropolis_weights(c, d):
  adj = decentralized.random_regular_graph(c, d, seed=1)
  assert (adj == adj.T).all() and not adj.diagonal().any() and (adj.sum(1) == d).all()
  w = decentralized.metropolis_weights(adj)
  np.testing.assert_allclose(w.sum(0), 1, atol=1e-6)
  np.testing.assert_allclose(w.sum(1), 1, atol=1e-6)
  assert (w[~adj & ~np.eye(c, dtype=bool)] == 0).all()
  np.testing.assert_allclose(w[adj], 1 / (1 + d))


def test_impossible_graph_is_a_clear_error():
  with pytest.raises(ConfigError, match="no 3-regular graph on 7 centers"):
    decentralized.random_regular_graph(7, 3, seed=0)


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=8, sizes=[40, 60, 80, 90, 100, 120, 150, 200]),
                      batch_size=32, num_buckets=2)


def test_decefl_round_is_local_training_then_consensus(fed):
  algorithm, model = build_method("decefl", CONFIG, fed)
  hyper = hyper_from_config(CONFIG, "decefl")
  state = algorithm.init(jax.random.key(0), fed, hyper)
  new, m = jax.jit(algorithm.round)(jax.random.key(5), state, fed, hyper, jnp.int32(1))
  local = local_train(make_client_update(binary_task(model), batch_size=32, epochs=1), jax.random.key(5),
                      state.params, fed, hyper=hyper)
  w = decentralized.metropolis_weights(decentralized.random_regular_graph(8, 3, 0))
  for got, loc in zip(jax.tree_util.tree_leaves(new.params), jax.tree_util.tree_leaves(local.params)):
    np.testing.assert_allclose(np.asarray(got), np.tensordot(w, np.asarray(loc), 1), atol=1e-5)
  p = num_params(jax.tree_util.tree_map(lambda a: a[0], state.params))
  assert float(m.bytes) == pytest.approx(12 * 2 * p * 4)  # 8·3/2 = 12 edges; 1.5× a FedAvg round
  assert float(m.mean_partners) == 3.0


def test_defta_two_rounds_match_a_numpy_reimplementation(fed):
  """Two DeFTA rounds against the rule recomputed in numpy from the local models: ℓ_ij = mean BCE of j's
  local model on i's validation split, τ_ij ← ρτ_ij + (1 − ρ)·exp(−ℓ_ij) on the graph and the diagonal
  (initial 1), θ_i ← Σ_j n_j τ_ij θ_j / Σ_j n_j τ_ij. The second round needs τ carried from the first,
  self-trust τ_ii included (issue 9 item 11: it used to restart from 1 every round)."""
  algorithm, model = build_method("defta", CONFIG, fed)
  hyper = hyper_from_config(CONFIG, "defta")
  rho = float(hyper.method.defta_decay)
  assert 0 < rho < 1
  c = fed.num_clients
  adj = decentralized.random_regular_graph(c, 3, 0)
  on = adj | np.eye(c, dtype=bool)
  n = np.asarray(fed.n_train, np.float64)
  client_update = make_client_update(binary_task(model), batch_size=32, epochs=1)
  train = jax.jit(lambda key, params: local_train(client_update, key, params, fed, hyper=hyper).params)
  step = jax.jit(algorithm.round)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  trust = on.astype(np.float64)  # initial trust 1 in every neighbor and in oneself
  np.testing.assert_array_equal(np.asarray(state.trust), trust)
  for t, key in ((1, jax.random.key(5)), (2, jax.random.key(6))):
    local = train(key, state.params)
    models = [jax.tree_util.tree_map(lambda a, j=j: a[j], local) for j in range(c)]
    loss = np.zeros((c, c))
    for i, j in zip(*np.nonzero(on)):
      loss[i, j] = numpy_bce(model.apply(models[j], fed.x_val[i], False, None)[0], fed.y_val[i], fed.m_val[i])
    trust = np.where(on, rho * trust + (1 - rho) * np.exp(-loss), 0.0)
    w = trust * n[None, :]
    w /= w.sum(1, keepdims=True)
    state, _ = step(key, state, fed, hyper, jnp.int32(t))
    np.testing.assert_allclose(np.asarray(state.trust), trust, rtol=1e-5, atol=1e-6)
    for got, loc in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(local)):
      np.testing.assert_allclose(np.asarray(got), np.tensordot(w, np.asarray(loc, np.float64), 1), atol=1e-5)
  # The carried self-trust is not a fresh ρ + (1 − ρ)·exp(−ℓ_ii): the two rounds' rule differs from a reset.
  reset = rho + (1 - rho) * np.exp(-np.diag(loss))
  assert np.abs(np.diag(trust) - reset).min() > 1e-3
