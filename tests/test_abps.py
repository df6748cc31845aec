"""One ABPS round against SPEC §3.2 and §3.4: accounting, resting, personalization, early stopping."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms.registry import build_method, hyper_from_config, preset
from fedjax_sim.config import ExperimentConfig, LearnerConfig, config_for_method
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import local_train
from fedjax_sim.engine.simulate import make_simulation
from fedjax_sim.models import num_params
from tests.conftest import make_cohorts

BASE = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=8, sizes=[40, 60, 80, 90, 100, 120, 150, 200]),
                      batch_size=32, num_buckets=2)


def setup(name, fed, **abps):
  config = config_for_method(BASE, preset(name))
  config = dataclasses.replace(config, abps=dataclasses.replace(config.abps, **abps))
  algorithm, model = build_method(name, config, fed.num_features)
  hyper = hyper_from_config(config)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  return algorithm, model, hyper, state


def test_round_accounting_and_resting(fed):
  algorithm, model, hyper, state = setup("abps", fed)
  step = jax.jit(algorithm.round)
  total = num_params(jax.tree_util.tree_map(lambda a: a[0], state.params))
  # τ_acc = 0: every proposal to a peer with room is accepted.
  s1, m1 = step(jax.random.key(1), state, fed, hyper.replace(abps_tau_acc=jnp.float32(0.0)), jnp.int32(1))
  deg = float(m1.mean_partners) * fed.num_clients
  assert float(m1.bytes) == pytest.approx(deg / 2 * 2 * total * 4)  # 2·|W|·4 per undirected edge
  assert float(m1.rest_fraction) == 0.0 and float(m1.mean_partners) > 2.0
  assert int(s1.pulls.sum()) == int(deg)  # one Beta observation per (center, partner)
  np.testing.assert_allclose(np.asarray(s1.alpha + s1.beta - 2.0), np.asarray(s1.pulls), atol=1e-6)
  # τ_acc above every UCB: everyone rests, 0 bytes, models are just the local updates.
  s2, m2 = step(jax.random.key(1), state, fed, hyper.replace(abps_tau_acc=jnp.float32(9.0)), jnp.int32(1))
  assert float(m2.bytes) == 0.0 and float(m2.rest_fraction) == 1.0 and int(s2.pulls.sum()) == 0
  k_train = jax.random.split(jax.random.key(1), 3)[0]
  local = local_train(algorithm_client_update(model), k_train, state.params, fed, hyper=hyper, learner=hyper.learner)
  for a, b in zip(jax.tree_util.tree_leaves(s2.params), jax.tree_util.tree_leaves(local.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def algorithm_client_update(model):
  from fedjax_sim.engine.local import make_client_update
  return make_client_update(model.apply, batch_size=32, epochs=1)


def test_personalized_heads_stay_local_and_bf16_halves_bytes(fed):
  algorithm, model, hyper, state = setup("abps_pq_k1", fed)
  hyper = hyper.replace(abps_tau_acc=jnp.float32(0.0))
  s1, m1 = jax.jit(algorithm.round)(jax.random.key(2), state, fed, hyper, jnp.int32(1))
  k_train = jax.random.split(jax.random.key(2), 3)[0]
  local = local_train(algorithm_client_update(model), k_train, state.params, fed, hyper=hyper, learner=hyper.learner)
  # The head (last layer) is each center's own; the body moved (was averaged with the partner).
  np.testing.assert_allclose(np.asarray(s1.params["head"]["kernel"]), np.asarray(local.params["head"]["kernel"]), atol=1e-6)
  assert not np.allclose(np.asarray(s1.params["hidden_0"]["kernel"]), np.asarray(local.params["hidden_0"]["kernel"]))
  assert float(m1.mean_partners) <= 1.0
  sent = algorithm.sent_params
  assert sent == num_params(jax.tree_util.tree_map(lambda a: a[0], state.params)) - (8 + 1)
  edges = float(m1.mean_partners) * fed.num_clients / 2
  assert float(m1.bytes) == pytest.approx(edges * 2 * sent * 2)  # bf16: 2 bytes per sent parameter


def test_early_stopping_makes_later_rounds_noops(fed):
  config = config_for_method(BASE, preset("abps_x"))
  config = dataclasses.replace(config, abps=dataclasses.replace(config.abps, early_stopping_patience=1))
  algorithm, model = build_method("abps_x", config, fed.num_features)
  hyper = hyper_from_config(config).replace(learner=hyper_from_config(config).learner.replace(
      learning_rate=jnp.float32(0.0)))  # no learning: validation AUROC cannot improve after round 1
  out = jax.jit(make_simulation(algorithm, model, 5))(jax.random.key(0), fed, hyper)
  active = np.asarray(out.history.metrics.active)
  assert active[0] == 1.0 and (active[2:] == 0).all() and (np.diff(active) <= 0).all()
  assert (np.asarray(out.history.metrics.bytes)[active == 0] == 0).all()
  assert bool(out.state.early.stopped)


def test_head_mask_picks_the_last_layers_from_the_input():
  from fedjax_sim.models.mlp import head_mask
  from fedjax_sim.models import mlp_model
  params = mlp_model(4).init(jax.random.key(0))
  one = head_mask(params, 1)
  two = head_mask(params, 2)
  assert one["head"]["kernel"] and not one["hidden_1"]["kernel"] and not one["hidden_0"]["bias"]
  assert two["head"]["bias"] and two["hidden_1"]["kernel"] and not two["hidden_0"]["kernel"]
  assert not any(jax.tree_util.tree_leaves(head_mask(params, 0)))
