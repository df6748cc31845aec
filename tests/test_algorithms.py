"""The FedAvg family against its definitions (SPEC §3.3)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms import star
from fedjax_sim.algorithms.base import weighted_average
from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import ClientContext, ClientData, LocalTerm, local_train, make_client_update
from fedjax_sim.engine.simulate import client_scores
from fedjax_sim.models import Model, mlp_model
from fedjax_sim.tasks import binary_task
from tests.conftest import make_cohorts


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=4, sizes=[40, 90, 120, 200]), batch_size=32, num_buckets=2)


CONFIG = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))


def one_round(name, fed, config=CONFIG, key=3):
  algorithm, model = build_method(name, config, fed)
  hyper = hyper_from_config(config, name)
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


# --- FedDyn and MOON against their papers, computed independently -------------------------------

TRAIN = LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1, learning_rate=1e-2)  # lr 1e-2: terms matter


def f64(tree):
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


def f32(tree):
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), tree)


def n_weighted(fed, stacked):
  """Σ_k w_k a_k with w_k = n_k / Σ n, in float64."""
  w = np.asarray(fed.n_train, np.float64)
  w = w / w.sum()
  return jax.tree_util.tree_map(lambda a: np.tensordot(w, a, 1), stacked)


def assert_trees_close(got, want, rtol=1e-4, atol=1e-5):
  for a, b in zip(leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def max_diff(a, b):
  return max(float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max())
             for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def reference_local_models(fed, config, term):
  """``run(key, start, own, hyper) -> [C, ...]``: every client's local model after the engine's plain
  local training (same optimizer, minibatch order and dropout as the method's round for the same key)
  of mean BCE + ``term``, a method's local term written in this file from its paper."""
  model = mlp_model(fed.num_features, hidden=config.learner.hidden, dropout=config.learner.dropout)
  update = make_client_update(binary_task(model), batch_size=config.learner.batch_size,
                              epochs=config.learner.local_epochs, regularizer=term)

  def run(key, start, own, hyper):
    return local_train(update, key, start, fed, shared=start, own=own, hyper=hyper, params_stacked=False).params

  return jax.jit(run)


def feddyn_local_term(term: LocalTerm):
  """Acar et al. 2021, Alg. 1: −⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖², leaf by leaf (own = ∇L_k term)."""
  params, shared, own, hyper = term.params, term.shared, term.own, term.hyper
  lin = sum(jnp.sum(g * p) for g, p in zip(jax.tree_util.tree_leaves(own), jax.tree_util.tree_leaves(params)))
  prox = sum(jnp.sum((p - c) ** 2) for p, c in zip(jax.tree_util.tree_leaves(params),
                                                    jax.tree_util.tree_leaves(shared)))
  return -lin + 0.5 * hyper.method.alpha * prox


def two_round_setup(name, config, fed, local_term):
  """The jitted round of ``name``, its initial state and hyperparameters, the reference local trainer on
  BCE + ``local_term``, and the initial global model in float64."""
  algorithm, _ = build_method(name, config, fed)
  hyper = hyper_from_config(config, name)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  return (jax.jit(algorithm.round), state, hyper, reference_local_models(fed, config, local_term),
          f64(state.global_params))


def test_feddyn_two_rounds_follow_algorithm_1(fed):
  """Two FedDyn rounds against Acar et al. 2021, Algorithm 1 (full participation), computed here:

  client k: θ_k^t = local training on L_k(θ) − ⟨g_k^{t−1}, θ⟩ + α/2‖θ − θ^{t−1}‖² (:func:`feddyn_local_term`);
  g_k^t = g_k^{t−1} − α(θ_k^t − θ^{t−1}); h^t = h^{t−1} − α Σ_k w_k(θ_k^t − θ^{t−1});
  θ^t = Σ_k w_k θ_k^t − h^t/α, with g^0 = h^0 = 0 and w_k = n_k/Σn (the code's stated decision).
  Round 2 is the one where g_k ≠ 0 enters the local objective; α = 0.5 so that it matters.
  """
  alpha = 0.5
  config = ExperimentConfig(learner=TRAIN, feddyn=type(CONFIG.feddyn)(alpha=alpha))
  step, state, hyper, reference, theta = two_round_setup("feddyn", config, fed, feddyn_local_term)
  g = jax.tree_util.tree_map(lambda a: np.zeros((fed.num_clients,) + a.shape), theta)
  h = jax.tree_util.tree_map(np.zeros_like, theta)
  for t in (1, 2):
    key = jax.random.key(10 + t)
    state, _ = step(key, state, fed, hyper, jnp.int32(t))
    local = f64(reference(key, f32(theta), f32(g), hyper))
    if t == 2:  # guard: the linear term moves round 2's local models (by far more than the tolerance)
      assert max_diff(local, reference(key, f32(theta), f32(jax.tree_util.tree_map(np.zeros_like, g)), hyper)) > 1e-3
    delta = jax.tree_util.tree_map(lambda l, c: l - c[None], local, theta)
    g = jax.tree_util.tree_map(lambda a, d: a - alpha * d, g, delta)
    h = jax.tree_util.tree_map(lambda a, d: a - alpha * d, h, n_weighted(fed, delta))
    theta = jax.tree_util.tree_map(lambda m, a: m - a / alpha, n_weighted(fed, local), h)
    assert_trees_close(state.client, g)
    assert_trees_close(state.server, h)
    assert_trees_close(state.global_params, theta)


def moon_local_term(term: LocalTerm):
  """Li, He & Song 2021, eq. 3: μ·mean over rows of −log(e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} +
  e^{sim(z, z_prev)/τ})), sim(a, b) = a·b / max(‖a‖‖b‖, 1e-8) (torch's CosineSimilarity, as the authors'
  code), z from the model being trained, z_glob from the round's global model (``shared``), z_prev from
  the client's previous local model (``own``). For a model without dropout."""
  apply_fn, x, mask, hyper = term.apply, term.x, term.mask, term.hyper
  z, z_glob, z_prev = (apply_fn(m, x, False, None)[1] for m in (term.params, term.shared, term.own))

  def sim(a, b):  # the norms apart: a fixed model's all-zero (dead ReLU) row must not give NaN gradients
    return jnp.sum(a * b, -1) / jnp.maximum(jnp.sqrt(jnp.sum(a * a, -1)) * jnp.sqrt(jnp.sum(b * b, -1)), 1e-8)

  e_glob = jnp.exp(sim(z, z_glob) / hyper.method.temperature)
  e_prev = jnp.exp(sim(z, z_prev) / hyper.method.temperature)
  loss = -jnp.log(e_glob / (e_glob + e_prev))
  return hyper.method.mu * jnp.sum(jnp.where(mask, loss, 0.0)) / jnp.maximum(jnp.sum(mask), 1.0)


def test_moon_two_rounds_follow_the_model_contrastive_objective(fed):
  """Two MOON rounds (Li, He & Song 2021, Alg. 1; SPEC §3.3: μ = 1, τ = 0.5) against local training on
  BCE + :func:`moon_local_term` and FedAvg's n-weighted mean, computed here. Each client's previous model
  starts as the global initialization, so round 1's contrastive term is the constant log 2; round 2 is
  the one where z_prev ≠ z_glob. The MLP has no dropout here: the reference runs every model once."""
  config = ExperimentConfig(learner=dataclasses.replace(TRAIN, dropout=0.0))
  step, state, hyper, reference, theta = two_round_setup("moon", config, fed, moon_local_term)
  prev = jax.tree_util.tree_map(lambda a: np.broadcast_to(a, (fed.num_clients,) + a.shape), theta)
  for t in (1, 2):
    key = jax.random.key(20 + t)
    state, _ = step(key, state, fed, hyper, jnp.int32(t))
    local = f64(reference(key, f32(theta), f32(prev), hyper))
    if t == 2:  # guard: the contrastive term moves round 2's local models (by far more than the tolerance)
      no_term = hyper.replace(method=hyper.method.replace(mu=jnp.float32(0.0)))
      assert max_diff(local, reference(key, f32(theta), f32(prev), no_term)) > 1e-3
    theta, prev = n_weighted(fed, local), local
    assert_trees_close(state.global_params, theta)
    assert_trees_close(state.client, prev)


def numpy_mlp(params, x):
  """The SPEC §3.1 MLP without dropout, in float64: ``(logit, representation)`` (last hidden ReLU)."""
  p = f64(params)
  h = np.asarray(x, np.float64)
  for i in range(sum(k.startswith("hidden_") for k in p)):
    h = np.maximum(h @ p[f"hidden_{i}"]["kernel"] + p[f"hidden_{i}"]["bias"], 0.0)
  return (h @ p["head"]["kernel"] + p["head"]["bias"])[..., 0], h


def test_feddyn_regularizer_value_and_gradient_in_closed_form():
  """−⟨g, θ⟩ + α/2‖θ − θ^{t−1}‖² and its gradient −g + α(θ − θ^{t−1}), with random g (Acar et al. 2021)."""
  model = mlp_model(3, hidden=(5, 4), dropout=0.0)
  p, c = model.init(jax.random.key(0)), model.init(jax.random.key(1))
  g = jax.tree_util.tree_map(lambda a: jax.random.normal(jax.random.key(2), a.shape), p)
  hyper = hyper_from_config(ExperimentConfig(), "feddyn")
  hyper = hyper.replace(method=hyper.method.replace(alpha=jnp.float32(0.7)))
  value, grad = jax.value_and_grad(lambda p: star.feddyn_regularizer(
      LocalTerm(params=p, apply=model.apply, x=None, mask=None, rng=None, shared=c, own=g, hyper=hyper)))(p)
  p64, c64, g64 = f64(p), f64(c), f64(g)
  want = sum(float(-(gg * pp).sum() + 0.35 * ((pp - cc) ** 2).sum())
             for pp, cc, gg in zip(*(jax.tree_util.tree_leaves(t) for t in (p64, c64, g64))))
  assert float(value) == pytest.approx(want, rel=1e-5)
  assert_trees_close(grad, jax.tree_util.tree_map(lambda pp, cc, gg: -gg + 0.7 * (pp - cc), p64, c64, g64),
                     rtol=1e-5, atol=1e-6)


def test_moon_regularizer_value_and_gradient_against_numpy():
  """MOON's μ·ℓ_con (Li, He & Song 2021, eq. 3) against a float64 numpy forward pass, and its gradient in
  the trained model's parameters against central finite differences of that numpy loss (z_glob and
  z_prev are fixed: they come from other models). Padded rows (mask False) do not count."""
  model = mlp_model(3, hidden=(5, 4), dropout=0.0)
  lift = lambda t: jax.tree_util.tree_map(lambda a: a + 0.2, t)  # biases up: no dead representation rows
  p, q, r = (lift(model.init(jax.random.key(k))) for k in range(3))
  x = jax.random.normal(jax.random.key(3), (7, 3))
  mask = np.array([True, True, False, True, True, False, True])
  mu, tau = 1.5, 0.3
  hyper = hyper_from_config(ExperimentConfig(), "moon")
  hyper = hyper.replace(method=hyper.method.replace(mu=jnp.float32(mu), temperature=jnp.float32(tau)))
  value, grad = jax.value_and_grad(lambda p: star.moon_regularizer(
      LocalTerm(params=p, apply=model.apply, x=x, mask=jnp.asarray(mask), rng=jax.random.key(4), shared=q, own=r,
                hyper=hyper)))(p)
  zg, zp = numpy_mlp(q, x)[1], numpy_mlp(r, x)[1]
  cos = lambda a, b: (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

  def loss(params):
    z = numpy_mlp(params, x)[1]
    assert (np.linalg.norm(z, axis=1) > 1e-3).all()
    eg, ep = np.exp(cos(z, zg) / tau), np.exp(cos(z, zp) / tau)
    return mu * np.mean(-np.log(eg / (eg + ep))[mask])

  p64 = f64(p)
  assert float(value) == pytest.approx(loss(p64), rel=1e-5)
  flat, treedef = jax.tree_util.tree_flatten(p64)
  numeric = []
  for a in flat:
    d = np.zeros_like(a)
    for i in np.ndindex(a.shape):
      e = np.zeros_like(a)
      e[i] = 1e-6
      up = jax.tree_util.tree_unflatten(treedef, [b + e if b is a else b for b in flat])
      down = jax.tree_util.tree_unflatten(treedef, [b - e if b is a else b for b in flat])
      d[i] = (loss(up) - loss(down)) / 2e-6
    numeric.append(d)
  numeric = jax.tree_util.tree_unflatten(treedef, numeric)
  assert max(float(np.abs(a).max()) for a in jax.tree_util.tree_leaves(numeric)) > 1e-2  # guard: a real gradient
  assert_trees_close(grad, numeric, rtol=1e-3, atol=1e-5)


def test_regularizers_match_their_formulas():
  model = mlp_model(3, hidden=(4,), dropout=0.0)
  p = model.init(jax.random.key(0))
  q = jax.tree_util.tree_map(lambda a: a + 0.5, p)
  n = sum(a.size for a in leaves(p))
  term = lambda name, **kw: LocalTerm(**{"params": p, "apply": model.apply, "x": None, "mask": None,  # noqa: E731
                                          "rng": None, "own": None, "hyper": hyper_from_config(ExperimentConfig(),
                                                                                                name), **kw})
  prox = star.fedprox_regularizer(term("fedprox", shared=q))
  assert float(prox) == pytest.approx(0.5 * 0.01 * 0.25 * n, rel=1e-5)
  g = jax.tree_util.tree_map(jnp.ones_like, p)
  dyn = star.feddyn_regularizer(term("feddyn", shared=q, own=g))
  want = -sum(a.sum() for a in leaves(p)) + 0.5 * 0.01 * 0.25 * n
  assert float(dyn) == pytest.approx(want, rel=1e-5)
  # MOON: −log(e^{s_g/τ} / (e^{s_g/τ} + e^{s_p/τ})) with z, z_glob, z_prev computed by hand.
  x = jax.random.normal(jax.random.key(1), (6, 3))
  r = jax.tree_util.tree_map(lambda a: -a, p)
  got = star.moon_regularizer(term("moon", x=x, mask=jnp.ones(6, bool), rng=jax.random.key(2), shared=q, own=r))
  z, zg, zp = (np.asarray(model.apply(m, x, False, None)[1], np.float64) for m in (p, q, r))
  cos = lambda a, b: (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-8)
  sg, sp = cos(z, zg) / 0.5, cos(z, zp) / 0.5
  assert float(got) == pytest.approx(float(np.mean(-sg + np.logaddexp(sg, sp))), rel=1e-4)


def test_local_and_centralized_send_nothing(fed):
  _, _, _, _, m = one_round("local", fed)
  assert float(m.bytes) == 0.0 and float(m.rest_fraction) == 1.0
  algorithm, _ = build_method("centralized", CONFIG, fed)
  assert not algorithm.federated
  pooled = algorithm.prepare(fed)
  assert int(pooled.buckets[0].n[0]) == int(np.asarray(fed.n_train).sum())


def test_personalized_fedavg_reduces_to_fedavg_and_keeps_heads(fed):
  _, model, s0, avg, _ = one_round("fedavg", fed)
  client_update = make_client_update(binary_task(model), batch_size=32, epochs=1)
  plain = star.personalized_fedavg(model, client_update, head_layers=0, wire_bf16=False,
                                   early_stopping_patience=0, name="p")
  hyper = hyper_from_config(CONFIG, "fedavg")
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
  # Training samples weights; the deployed, evaluated model is the mean network (Blundell et al. 2015 §3):
  # the engine's scores (client_scores, what evaluate ranks) of algorithm.deployed equal the plain MLP
  # (fedjax_sim.models.mlp) and a numpy forward pass applied to the means μ, whatever σ is.
  x = jnp.ones((3, fed.num_features))
  a = model.apply(s1.global_params, x, True, jax.random.key(1))[0]
  b = model.apply(s1.global_params, x, True, jax.random.key(2))[0]
  assert not np.allclose(np.asarray(a), np.asarray(b))
  params, stacked = algorithm.deployed(s1)
  assert not stacked
  assert max_diff(params["mu"], s0.global_params["mu"]) > 1e-4  # guard: the means were trained
  score = jax.jit(lambda p: client_scores(model, p, stacked, fed.x_test))
  scores = np.asarray(score(params))  # [C, n]
  plain = mlp_model(fed.num_features, hidden=CONFIG.learner.hidden, dropout=CONFIG.learner.dropout)
  np.testing.assert_allclose(scores, np.asarray(jax.jit(plain.apply, static_argnums=2)(
      params["mu"], fed.x_test, False, None)[0]), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(scores, numpy_mlp(params["mu"], fed.x_test)[0], rtol=1e-4, atol=1e-5)
  # σ does not enter evaluation: widen it to softplus(0) ≈ 0.69; a sampled network then moves far away.
  wide = {"mu": params["mu"], "rho": jax.tree_util.tree_map(jnp.zeros_like, params["rho"])}
  np.testing.assert_array_equal(np.asarray(score(wide)), scores)
  sampled = np.asarray(jax.jit(model.apply, static_argnums=2)(wide, fed.x_test[0], True, jax.random.key(3))[0])
  assert np.abs(sampled - scores[0]).max() > 0.1


def test_moon_representation_comes_from_the_supervised_forward_pass():
  """MOON's z must be the representation of the same training forward pass (same dropout mask) as the
  supervised loss, as in Li et al. 2021 (issue 9: the regularizer used to draw a dropout key of its own).
  The train-mode calls of one local step are recorded eagerly: the supervised pass and MOON's z pass
  must use one key (a regularizer-free learner makes one call, the control)."""
  model = mlp_model(3, hidden=(4,), dropout=0.5)
  keys = []

  def apply_fn(params, x, train, rng):
    if train:
      keys.append(np.asarray(jax.random.key_data(rng)))
    return model.apply(params, x, train, rng)

  hyper = hyper_from_config(CONFIG, "moon")
  params = model.init(jax.random.key(0))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)), jnp.float32)
  y = jnp.asarray([0, 1, 0, 1], jnp.int32)
  for regularizer, calls in ((star.moon_regularizer, 2), (None, 1)):
    keys.clear()
    update = make_client_update(binary_task(Model(init=model.init, apply=apply_fn)), batch_size=4, epochs=1,
                                regularizer=regularizer)
    with jax.disable_jit():
      update(jax.random.key(1), params, ClientData(x, y, jnp.int32(4)),
             ClientContext(shared=params, own=params, hyper=hyper))
    assert len(keys) == calls
    assert all(np.array_equal(k, keys[0]) for k in keys)
