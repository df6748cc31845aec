"""The FedAvg family against its definitions (SPEC §3.3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms import star
from fedjax_sim.algorithms.base import weighted_average
from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import make_client_update
from fedjax_sim.models import mlp_model
from tests.conftest import make_cohorts


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=4, sizes=[40, 90, 120, 200]), batch_size=32, num_buckets=2)


CONFIG = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))


def one_round(name, fed, config=CONFIG, key=3):
  algorithm, model = build_method(name, config, fed.num_features)
  hyper = hyper_from_config(config)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  new_state, metrics = jax.jit(algorithm.round)(jax.random.key(key), state, fed, hyper, jnp.int32(1))
  return algorithm, model, state, new_state, metrics


def leaves(tree):
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def test_weighted_average_is_n_weighted_mean():
  stacked = {"w": jnp.array([[1.0, 2.0], [3.0, 6.0]])}
  out = weighted_average(stacked, jnp.array([1, 3]))
  np.testing.assert_allclose(np.asarray(out["w"]), [2.5, 5.0])


def test_fedprox_with_zero_mu_is_fedavg_and_large_mu_stays_close(fed):
  _, _, s0, avg, m = one_round("fedavg", fed)
  zero = ExperimentConfig(learner=CONFIG.learner, fedprox=type(CONFIG.fedprox)(mu=0.0))
  _, _, _, prox0, _ = one_round("fedprox", fed, zero)
  for a, b in zip(leaves(avg.global_params), leaves(prox0.global_params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  big = ExperimentConfig(learner=CONFIG.learner, fedprox=type(CONFIG.fedprox)(mu=100.0))
  _, _, _, prox, _ = one_round("fedprox", fed, big)
  dist = lambda s: float(star.sq_dist(s.global_params, s0.global_params))
  assert dist(prox) < dist(avg)
  # SPEC §3.4: a star round costs 2·|W|·4 bytes per client.
  n_params = sum(a.size for a in leaves(s0.global_params))
  assert float(m.bytes) == fed.num_clients * 2 * n_params * 4


def test_moon_with_zero_mu_is_fedavg(fed):
  _, _, _, avg, _ = one_round("fedavg", fed)
  zero = ExperimentConfig(learner=CONFIG.learner, moon=type(CONFIG.moon)(mu=0.0))
  _, _, _, moon0, _ = one_round("moon", fed, zero)
  for a, b in zip(leaves(avg.global_params), leaves(moon0.global_params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  # MOON keeps each client's latest local model for the next round's negative pair.
  assert leaves(moon0.client)[0].shape[0] == fed.num_clients


def test_feddyn_state_updates_follow_algorithm_1(fed):
  _, _, s0, s1, _ = one_round("feddyn", fed)
  alpha = CONFIG.feddyn.alpha
  # Recover the local models from g_k = 0 − α(θ_k − θ^0).
  theta0 = s0.global_params
  local = jax.tree_util.tree_map(lambda g, t: t[None] - g / alpha, s1.client, theta0)
  w = np.asarray(fed.n_train, np.float64)
  w = w / w.sum()
  mean_delta = jax.tree_util.tree_map(lambda l, t: np.tensordot(w, np.asarray(l) - np.asarray(t)[None], 1), local, theta0)
  # h^1 = −α Σ w_k (θ_k − θ^0); θ^1 = Σ w_k θ_k − h^1/α = θ^0 + 2 Σ w_k (θ_k − θ^0).
  for h, md in zip(leaves(s1.server), jax.tree_util.tree_leaves(mean_delta)):
    np.testing.assert_allclose(h, -alpha * md, rtol=1e-4, atol=1e-7)
  for g, t0, md in zip(leaves(s1.global_params), leaves(theta0), jax.tree_util.tree_leaves(mean_delta)):
    np.testing.assert_allclose(g, t0 + 2 * md, rtol=1e-4, atol=1e-6)


def test_regularizers_match_their_formulas():
  model = mlp_model(3, hidden=(4,), dropout=0.0)
  p = model.init(jax.random.key(0))
  q = jax.tree_util.tree_map(lambda a: a + 0.5, p)
  n = sum(a.size for a in leaves(p))
  hyper = hyper_from_config(ExperimentConfig())
  prox = star.fedprox_regularizer(p, model.apply, None, None, None, q, None, hyper)
  assert float(prox) == pytest.approx(0.5 * 0.01 * 0.25 * n, rel=1e-5)
  g = jax.tree_util.tree_map(jnp.ones_like, p)
  dyn = star.feddyn_regularizer(p, model.apply, None, None, None, q, g, hyper)
  want = -sum(a.sum() for a in leaves(p)) + 0.5 * 0.01 * 0.25 * n
  assert float(dyn) == pytest.approx(want, rel=1e-5)
  # MOON: −log(e^{s_g/τ} / (e^{s_g/τ} + e^{s_p/τ})) with z, z_glob, z_prev computed by hand.
  x = jax.random.normal(jax.random.key(1), (6, 3))
  r = jax.tree_util.tree_map(lambda a: -a, p)
  got = star.moon_regularizer(p, model.apply, x, jnp.ones(6, bool), jax.random.key(2), q, r, hyper)
  z, zg, zp = (np.asarray(model.apply(m, x, False, None)[1], np.float64) for m in (p, q, r))
  cos = lambda a, b: (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-8)
  sg, sp = cos(z, zg) / 0.5, cos(z, zp) / 0.5
  assert float(got) == pytest.approx(float(np.mean(-sg + np.logaddexp(sg, sp))), rel=1e-4)


def test_local_and_centralized_send_nothing(fed):
  _, _, _, _, m = one_round("local", fed)
  assert float(m.bytes) == 0.0 and float(m.rest_fraction) == 1.0
  algorithm, _ = build_method("centralized", CONFIG, fed.num_features)
  assert not algorithm.federated
  pooled = algorithm.prepare(fed)
  assert int(pooled.buckets[0].n[0]) == int(np.asarray(fed.n_train).sum())


def test_personalized_fedavg_reduces_to_fedavg_and_keeps_heads(fed):
  _, model, s0, avg, _ = one_round("fedavg", fed)
  client_update = make_client_update(model.apply, batch_size=32, epochs=1)
  plain = star.personalized_fedavg(model, client_update, head_layers=0, wire_bf16=False,
                                   early_stopping_patience=0, name="p")
  hyper = hyper_from_config(CONFIG)
  state = plain.init(jax.random.key(0), fed, hyper)
  new, _ = jax.jit(plain.round)(jax.random.key(3), state, fed, hyper, jnp.int32(1))
  for a, b in zip(leaves(avg.global_params), leaves(new.global_params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  # FedAvg+P+Q: heads stay on the clients, bodies travel in bf16 (2 bytes), SPEC §3.4.
  pq = star.personalized_fedavg(model, client_update, head_layers=1, wire_bf16=True,
                                early_stopping_patience=0, name="pq")
  state = pq.init(jax.random.key(0), fed, hyper)
  new, m = jax.jit(pq.round)(jax.random.key(3), state, fed, hyper, jnp.int32(1))
  total = sum(a.size for a in leaves(s0.global_params))
  assert pq.sent_params == total - (8 + 1)
  assert float(m.bytes) == fed.num_clients * 2 * pq.sent_params * 2
  params, stacked = pq.deployed(new)
  assert stacked
  heads = np.asarray(params["head"]["kernel"])
  assert not np.allclose(heads[0], heads[1])  # personalized heads differ
  body = np.asarray(params["hidden_0"]["kernel"])
  np.testing.assert_array_equal(body[0], body[1])  # one shared body
  bf = body[0].astype(np.float32)
  np.testing.assert_array_equal(bf, np.asarray(jnp.asarray(bf).astype(jnp.bfloat16).astype(jnp.float32)))


def test_bnn_fl_moment_averaging_kl_and_bytes(fed):
  from fedjax_sim.models.bayes import kl_to_standard_normal, moment_average, sigma
  algorithm, model, s0, s1, m = one_round("bnn_fl", fed)
  mu_leaves = leaves(s0.global_params["mu"])
  assert float(m.bytes) == fed.num_clients * 2 * (2 * sum(a.size for a in mu_leaves)) * 4  # μ and σ: 2× FedAvg
  # Moment averaging: μ = Σ w μ_i, σ² = Σ w σ_i².
  stacked = {"mu": {"w": jnp.array([[0.0], [2.0]])}, "rho": {"w": jnp.array([[0.0], [1.0]])}}
  avg = moment_average(stacked, jnp.array([1.0, 3.0]))
  assert float(avg["mu"]["w"][0]) == pytest.approx(1.5)
  want_var = 0.25 * float(sigma(0.0)) ** 2 + 0.75 * float(sigma(1.0)) ** 2
  assert float(sigma(avg["rho"]["w"][0])) ** 2 == pytest.approx(want_var, rel=1e-5)
  # KL of N(μ, σ²) to N(0, 1) in closed form.
  p = {"mu": {"w": jnp.array([0.5])}, "rho": {"w": jnp.array([0.3])}}
  s = float(sigma(0.3))
  assert float(kl_to_standard_normal(p)) == pytest.approx(np.log(1 / s) + (s ** 2 + 0.25 - 1) / 2, rel=1e-5)
  # Training samples weights; evaluation uses the means.
  x = jnp.ones((3, fed.num_features))
  a = model.apply(s1.global_params, x, True, jax.random.key(1))[0]
  b = model.apply(s1.global_params, x, True, jax.random.key(2))[0]
  assert not np.allclose(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(model.apply(s1.global_params, x, False, None)[0]),
                                np.asarray(model.apply(s1.global_params, x, False, None)[0]))
