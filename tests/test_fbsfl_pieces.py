"""FBS-FL pieces against their definitions (paper 002; SPEC §4; issue 12 item 1)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_sim.algorithms.fbsfl import beliefs, economics, followers, inclusion, projection

FEW = settings(max_examples=25, deadline=None)

project = jax.jit(projection.capped_simplex_projection)


def floats32(lo, hi):
  return st.floats(lo, hi, allow_nan=False, allow_subnormal=False, width=32)


# --- capped-simplex projection (eq. 3) ------------------------------------------------------------------------

def top_k_linear_max(g, k):
  """max_{x ∈ Π} ⟨g, x⟩ for integer K: Π's vertices are the 0/1 vectors with at most K ones."""
  return float(np.sort(np.maximum(g, 0.0))[::-1][:k].sum())


@FEW
@given(n=st.sampled_from([1, 2, 5, 8]), k=st.integers(0, 9), data=st.data())
def test_projection_is_feasible_idempotent_and_optimal(n, k, data):
  y = np.array(data.draw(st.lists(floats32(-2.0, 3.0), min_size=n, max_size=n)), np.float32)
  pi = np.asarray(project(jnp.asarray(y), k), np.float64)
  y64 = y.astype(np.float64)
  # Feasible.
  assert pi.min() >= 0.0 and pi.max() <= 1.0 and pi.sum() <= k + 1e-5
  # KKT: π = clip(y − τ, 0, 1) with τ ≥ 0 and τ (Σπ − K) = 0.
  box = np.clip(y64, 0.0, 1.0)
  if box.sum() <= k:
    np.testing.assert_array_equal(pi, box)
  else:
    assert pi.sum() == pytest.approx(k, abs=1e-5)
    free = (pi > 1e-6) & (pi < 1 - 1e-6)
    tau = float(np.median(y64[free] - pi[free])) if free.any() else None
    if tau is not None:
      assert tau >= -1e-6
      np.testing.assert_allclose(pi, np.clip(y64 - tau, 0.0, 1.0), atol=2e-5)
  # Optimal: the variational inequality ⟨y − π, x − π⟩ ≤ 0 for every x ∈ Π, checked at all vertices at once
  # (a linear function's maximum over a polytope is at a vertex) ...
  g = y64 - pi
  assert top_k_linear_max(g, k) <= g @ pi + 1e-4
  # ... and no random feasible point (box points scaled into Π, and points near π) is closer to y.
  rng = np.random.default_rng(n * 31 + k)
  x = rng.random((2000, n))
  x = np.concatenate([x, np.clip(pi + 0.05 * rng.normal(size=(2000, n)), 0, 1)])
  sums = x.sum(1, keepdims=True)
  x = np.where(sums > k, x * k / np.maximum(sums, 1e-12), x)
  assert ((pi - y64) ** 2).sum() <= ((x - y64) ** 2).sum(1).min() + 1e-5
  # Idempotent.
  np.testing.assert_allclose(np.asarray(project(jnp.asarray(pi, jnp.float32), k)), pi, atol=2e-6)


def test_projection_with_room_returns_the_box_clip_and_vmaps():
  y = jnp.asarray([-0.5, 0.2, 1.7, 0.9, 0.0], jnp.float32)
  for k in (5, 7.5):  # K ≥ N: the box alone
    np.testing.assert_array_equal(np.asarray(project(y, k)), np.clip(np.asarray(y), 0, 1))
  ys = jax.random.normal(jax.random.key(0), (16, 5)) + 0.5
  batch = jax.jit(jax.vmap(projection.capped_simplex_projection, in_axes=(0, None)))(ys, 2)
  rows = np.stack([np.asarray(project(row, 2)) for row in ys])
  np.testing.assert_allclose(np.asarray(batch), rows, atol=1e-7)
  assert np.all(np.asarray(batch).sum(1) <= 2 + 1e-5)


# --- inclusion (§3.1, eq. 4) ----------------------------------------------------------------------------------

PI = np.array([0.1, 0.9, 0.5, 0.33, 1.0, 0.0, 0.07], np.float32)  # Σπ = 2.9
DRAWS = 4000
KEYS = jax.random.split(jax.random.key(1), DRAWS)
sample_independent = jax.jit(jax.vmap(inclusion.independent_inclusion, in_axes=(0, None)))
sample_dependent = jax.jit(jax.vmap(inclusion.dependent_rounding, in_axes=(0, None)))


def poisson_binomial_tail(pi, k):
  """Pr(Σ Bernoulli(π_i) > k) by the exact convolution."""
  dist = np.array([1.0])
  for p in pi:
    dist = np.convolve(dist, [1 - p, p])
  return float(dist[k + 1:].sum())


def test_inclusion_marginals_by_monte_carlo():
  keys = KEYS
  tol = 4.5 * np.sqrt(PI * (1 - PI) / DRAWS) + 1e-9
  for sample in (sample_independent, sample_dependent):
    z = np.asarray(sample(keys, jnp.asarray(PI)))
    assert z.dtype == bool
    assert np.all(np.abs(z.mean(0) - PI) <= tol)
    assert not z[:, 5].any() and z[:, 4].all()  # π = 0 never, π = 1 always
  counts_dep = np.asarray(sample_dependent(keys, jnp.asarray(PI))).sum(1)
  assert set(np.unique(counts_dep)) <= {2, 3}
  assert counts_dep.mean() == pytest.approx(PI.sum(), abs=0.03)
  # Pr(|I| > K) with K = 3 = ⌈Σπ⌉: the exact Poisson-binomial tail for independent sampling, 0 for dependent.
  counts_ind = np.asarray(sample_independent(keys, jnp.asarray(PI))).sum(1)
  tail = poisson_binomial_tail(PI.astype(np.float64), 3)
  assert tail > 0.05
  assert np.mean(counts_ind > 3) == pytest.approx(tail, abs=4.5 * math.sqrt(tail * (1 - tail) / DRAWS))
  assert np.all(counts_dep <= 3)


def test_dependent_rounding_pairs_are_not_fixed():
  # The random permutation: two clients of π = 0.5 are sometimes included together (a fixed order never would).
  z = np.asarray(sample_dependent(KEYS, jnp.asarray([0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0])))
  assert set(z.sum(1)) == {2}
  both = (z[:, 0] & z[:, 1]).mean()
  assert 0.1 < both < 0.25  # 1/6 for a uniformly random permutation


@FEW
@given(k=st.integers(1, 4), data=st.data())
def test_dependent_rounding_counts_are_floor_or_ceil(k, data):
  n = len(PI)  # the shapes of the Monte Carlo test: one compiled sampler
  pi = np.array(data.draw(st.lists(st.one_of(st.just(0.0), st.just(1.0), floats32(0.0, 1.0)), min_size=n,
                                   max_size=n)), np.float32)
  pi = np.asarray(project(jnp.asarray(pi), k))  # Σπ ≤ K, as the leader's π
  z = np.asarray(sample_dependent(KEYS, jnp.asarray(pi)))
  s = np.floor(pi.astype(np.float64) * 2 ** 24).sum() / 2 ** 24  # the fixed-point total (exactly ≤ Σπ)
  counts = z.sum(1)
  assert np.all((counts == math.floor(s)) | (counts == math.ceil(s)))
  assert np.all(counts <= k)
  assert not np.any(z[:, pi == 0.0])


# --- offers (eq. 10) ------------------------------------------------------------------------------------------

def test_offers_against_eq10_with_the_n_p_tilde_bonus():
  rng = np.random.default_rng(3)
  n = 6
  pi, c, e = rng.random(n), rng.uniform(0.1, 1.0, n), rng.random(n)
  p_tilde = rng.dirichlet(np.ones(n) * 0.3)
  p_tilde[0] = 1e-4  # the cap binds
  got = economics.offers(*(jnp.asarray(a, jnp.float32) for a in (pi, c, p_tilde)), energy_proxy=jnp.asarray(e),
                         lambda_e=0.5, delta=0.2, b0=0.1, b_max=10.0)
  want = (c + 0.5 * e) * (1 + 0.2 * pi) + 0.1 * np.minimum(1.0 / (n * p_tilde), 10.0)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
  assert float(got[0]) == pytest.approx((c[0] + 0.5 * e[0]) * (1 + 0.2 * pi[0]) + 1.0, rel=1e-6)
  # Equal participation: the bonus is b_0 (not b_0 B_max, as the literal 1/p̃ would give).
  flat = economics.offers(jnp.zeros(n), jnp.zeros(n), jnp.full((n,), 1.0 / n))
  np.testing.assert_allclose(np.asarray(flat), 0.1, rtol=1e-6)
  # The cap r^p_max bounds every offer with ĉ ≤ κ^(M) = 1 and π ≤ 1.
  assert economics.offer_cap() == pytest.approx(2.2)
  top = economics.offers(jnp.ones(n), jnp.ones(n), jnp.full((n,), 1e-9))
  np.testing.assert_allclose(np.asarray(top), economics.offer_cap(), rtol=1e-6)


def test_cost_proxy_is_the_running_average():
  rng = np.random.default_rng(4)
  values = rng.uniform(0.1, 1.0, (9, 3)).astype(np.float32)
  c = jnp.zeros(3)
  for t, m in enumerate(values):
    c = economics.update_cost_proxy(c, t, jnp.asarray(m))
    np.testing.assert_allclose(np.asarray(c), values[:t + 1].mean(0), rtol=1e-5)


# --- followers (eqs. 15, 17; Algorithm 2) ---------------------------------------------------------------------

def test_best_and_logit_response():
  r = jnp.asarray([0.5, 0.3, 0.29, 1.0])
  kappa = jnp.asarray([0.3, 0.3, 0.3, 0.1])
  np.testing.assert_array_equal(np.asarray(followers.best_response(r, kappa)), [True, True, False, True])
  keys = jax.random.split(jax.random.key(5), DRAWS)
  a = np.asarray(jax.jit(jax.vmap(followers.logit_response, in_axes=(0, None, None)))(keys, r, kappa))
  want = 1 / (1 + np.exp(-5.0 * (np.asarray(r) - np.asarray(kappa))))
  assert np.all(np.abs(a.mean(0) - want) <= 4.5 * np.sqrt(want * (1 - want) / DRAWS) + 1e-3)


def test_exp3_against_algorithm_2():
  """Several rounds against a direct transcription of Alg. 2 with the multiplicative weights h."""
  rng = np.random.default_rng(6)
  n, gamma, eta, r_max, kappa_max = 5, 0.1, 0.3, 2.2, 1.0
  kappa = np.array(beliefs.TYPE_GRID, np.float32)
  h = np.ones((n, 2))
  state = followers.exp3_init(n)
  respond = jax.jit(followers.exp3_respond)
  update = jax.jit(followers.exp3_update)
  key = jax.random.key(7)
  for _ in range(6):
    key, sub = jax.random.split(key)
    sigma_ref = (1 - gamma) * h / h.sum(1, keepdims=True) + gamma / 2
    np.testing.assert_allclose(np.asarray(followers.exp3_probs(state, gamma)), sigma_ref, rtol=1e-5)
    accept, prob = respond(sub, state, gamma)
    accept, prob = np.asarray(accept), np.asarray(prob)
    np.testing.assert_allclose(prob, np.where(accept, sigma_ref[:, 1], sigma_ref[:, 0]), rtol=1e-5)
    r = rng.uniform(0.0, r_max, n).astype(np.float32)
    included = rng.random(n) < 0.6
    u = np.asarray(followers.exp3_reward(jnp.asarray(accept), jnp.asarray(r), jnp.asarray(kappa), r_max, kappa_max))
    raw = np.where(accept, r - kappa, 0.0)
    np.testing.assert_allclose(u, (raw + kappa_max) / (r_max + kappa_max), rtol=1e-5)
    assert np.all((0 <= u) & (u <= 1))
    state = update(state, jnp.asarray(accept), jnp.asarray(prob), jnp.asarray(u), jnp.asarray(included), eta)
    for i in range(n):
      if included[i]:
        a = int(accept[i])
        h[i, a] *= math.exp(eta * u[i] / sigma_ref[i, a])
  np.testing.assert_allclose(np.asarray(followers.exp3_probs(state, gamma)),
                             (1 - gamma) * h / h.sum(1, keepdims=True) + gamma / 2, rtol=1e-4)
  log_h = np.asarray(state.log_h)
  np.testing.assert_allclose(log_h[:, 1] - log_h[:, 0], np.log(h[:, 1] / h[:, 0]), atol=1e-4)


def exp3_long_run(key, r, kappa, steps, gamma=0.1, eta=0.3, r_max=2.2):
  """EXP3 followers, always included, against a fixed offer for ``steps`` rounds: their final σ(accept)."""
  def step(state, k):
    accept, prob = followers.exp3_respond(k, state, gamma)
    u = followers.exp3_reward(accept, r, kappa, r_max)
    return followers.exp3_update(state, accept, prob, u, jnp.ones_like(accept), eta), None
  state, _ = jax.lax.scan(step, followers.exp3_init(r.shape[0]), jax.random.split(key, steps))
  return followers.exp3_probs(state, gamma)[:, 1]


def test_exp3_learns_to_accept_above_and_reject_below_the_threshold():
  """Issue 12: against a fixed offer above κ_i, σ(accept) → 1 − γ/2; below κ_i, → γ/2."""
  n = 32
  r = jnp.concatenate([jnp.full((n,), 1.2), jnp.full((n,), 0.3)])
  kappa = jnp.concatenate([jnp.full((n,), 0.1), jnp.full((n,), 1.0)])
  accept = np.asarray(jax.jit(exp3_long_run, static_argnums=3)(jax.random.key(8), r, kappa, 400))
  above, below = accept[:n], accept[n:]
  assert np.mean(above) == pytest.approx(1 - 0.1 / 2, abs=0.01) and np.all(above > 0.85)
  assert np.mean(below) == pytest.approx(0.1 / 2, abs=0.01) and np.all(below < 0.15)
  assert np.all(above <= 1 - 0.1 / 2 + 1e-6) and np.all(below >= 0.1 / 2 - 1e-6)  # the exploration floor


# --- beliefs (eqs. 17–18) -------------------------------------------------------------------------------------

def bayes_reference(mu, offers, accepted, included, lam):
  """Eq. 18 client by client and type by type, in float64."""
  out = np.array(mu, np.float64)
  for i in range(len(offers)):
    if not included[i]:
      continue
    post = []
    for m, kappa_m in enumerate(beliefs.TYPE_GRID):
      like = 1 / (1 + math.exp(-lam * (offers[i] - kappa_m)))
      post.append(mu[i, m] * (like if accepted[i] else 1 - like))
    out[i] = np.array(post) / sum(post)
  return out


@FEW
@given(data=st.data())
def test_belief_update_is_bayes_rule(data):
  n = 6
  rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 20)))
  lam = data.draw(st.sampled_from([1.0, 5.0, 20.0]))
  state = beliefs.belief_init(n)
  mu = np.full((n, 5), 0.2)
  update = jax.jit(beliefs.belief_update)
  for _ in range(3):
    offers = rng.uniform(0.0, 1.5, n).astype(np.float32)
    accepted, included = rng.random(n) < 0.5, rng.random(n) < 0.7
    state = update(state, jnp.asarray(offers), jnp.asarray(accepted), jnp.asarray(included), lam)
    mu = bayes_reference(mu, offers.astype(np.float64), accepted, included, lam)
    np.testing.assert_allclose(np.asarray(state.mu), mu, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.asarray(beliefs.posterior_mean_threshold(state)), mu @ np.array(beliefs.TYPE_GRID),
                             rtol=1e-4, atol=1e-6)


def test_beliefs_prior_exclusion_and_full_support():
  state = beliefs.belief_init(3)
  np.testing.assert_allclose(np.asarray(state.mu), 0.2)
  assert float(beliefs.posterior_mean_threshold(state)[0]) == pytest.approx(0.52)  # r̄ of eq. 19
  offers = jnp.asarray([0.6, 0.6, 0.6])
  accepted = jnp.asarray([True, False, True])
  included = jnp.asarray([True, True, False])
  once = beliefs.belief_update(state, offers, accepted, included)
  np.testing.assert_array_equal(np.asarray(once.log_mu[2]), np.asarray(state.log_mu[2]))  # not included
  # Acceptance of 0.6 shifts mass to types below it, rejection above it (the BR limit, paper 002 §3.5).
  mean = np.asarray(beliefs.posterior_mean_threshold(once))
  assert mean[0] < 0.52 < mean[1]
  # 300 one-sided observations: float32 probabilities would underflow; the log domain keeps full support.
  many = jax.lax.fori_loop(0, 300, lambda _, b: beliefs.belief_update(b, offers, accepted, jnp.ones(3, bool)),
                           state)
  log_mu = np.asarray(many.log_mu)
  assert np.all(np.isfinite(log_mu)) and np.all(log_mu <= 0) and log_mu.min() < math.log(1e-45)
  np.testing.assert_allclose(np.asarray(many.mu).sum(1), 1.0, rtol=1e-6)
  assert float(beliefs.posterior_mean_threshold(many)[0]) == pytest.approx(0.1, abs=1e-3)


def test_sample_types_are_on_the_grid():
  kappa = np.asarray(beliefs.sample_types(jax.random.key(9), 2000))
  assert set(np.unique(kappa)) == set(np.float32(beliefs.TYPE_GRID))
  assert np.all(np.abs(np.unique(kappa, return_counts=True)[1] / 2000 - 0.2) < 0.04)


# --- participation (eqs. 7–8) ---------------------------------------------------------------------------------

def test_participation_ema_and_smoothing():
  n, rho, eps = 5, 0.1, 1e-3
  rng = np.random.default_rng(10)
  p = economics.participation_init(n)
  ref = np.full(n, 1 / n)
  np.testing.assert_allclose(np.asarray(p), ref)
  for _ in range(12):
    y = rng.random(n) < 0.3
    p = economics.participation_update(p, jnp.asarray(y), rho)
    ref = (1 - rho) * ref + rho * y
  np.testing.assert_allclose(np.asarray(p), ref, rtol=1e-5)
  p_tilde = np.asarray(economics.smoothed_participation(p, eps))
  np.testing.assert_allclose(p_tilde, (ref + eps) / (ref + eps).sum(), rtol=1e-5)
  assert p_tilde.sum() == pytest.approx(1.0, abs=1e-6)
  zeros = np.asarray(economics.smoothed_participation(jnp.zeros(n).at[0].set(1.0), eps))
  assert np.all(zeros > 0) and zeros[1] == pytest.approx(eps / (1 + n * eps))  # the relative interior


# --- q-fair aggregation (eqs. 6, 13) --------------------------------------------------------------------------

qfair = jax.jit(economics.qfair_weights)


@FEW
@given(data=st.data(), q=st.sampled_from([0.0, 1.0, 2.0, 4.0]))
def test_qfair_weights_against_eq13(data, q):
  n = 7
  sizes = np.array(data.draw(st.lists(st.integers(1, 500), min_size=n, max_size=n)), np.float32)
  losses = np.array(data.draw(st.lists(floats32(0.0, 30.0), min_size=n, max_size=n)), np.float32)
  y = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
  alpha = np.asarray(qfair(jnp.asarray(sizes), jnp.asarray(np.where(y, losses, np.nan)), jnp.asarray(y), q, 1e-4))
  if not y.any():
    np.testing.assert_array_equal(alpha, 0.0)
    return
  mass = np.where(y, sizes.astype(np.float64) * (losses.astype(np.float64) + 1e-4) ** q, 0.0)
  np.testing.assert_allclose(alpha, mass / mass.sum(), rtol=5e-5, atol=1e-7)
  assert alpha.sum() == pytest.approx(1.0, abs=1e-5) and np.all(alpha[~y] == 0)
  if q == 0.0:  # FedAvg's weights n_i / Σ_S n_j, the same float32 computation
    fedavg = np.asarray(jnp.where(jnp.asarray(y), jnp.asarray(sizes), 0.0) / jnp.sum(jnp.asarray(sizes * y)))
    np.testing.assert_allclose(alpha, fedavg, rtol=1e-7, atol=0)


def test_aggregate_moves_by_the_weighted_deltas_and_stays_put_without_participants():
  params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.asarray([0.5, -1.0])}
  deltas = {"w": jax.random.normal(jax.random.key(11), (4, 2, 3)), "b": jnp.ones((4, 2))}
  deltas["w"] = deltas["w"].at[3].set(jnp.nan)  # a non-participant's garbage is ignored
  alpha = jnp.asarray([0.25, 0.0, 0.75, 0.0])
  got = jax.jit(economics.aggregate)(params, deltas, alpha)
  want_w = np.asarray(params["w"]) + 0.25 * np.asarray(deltas["w"][0]) + 0.75 * np.asarray(deltas["w"][2])
  np.testing.assert_allclose(np.asarray(got["w"]), want_w, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(got["b"]), np.asarray(params["b"]) + 1.0, rtol=1e-6)
  none = economics.qfair_weights(jnp.ones(4), jnp.full((4,), jnp.nan), jnp.zeros(4, bool))
  np.testing.assert_array_equal(np.asarray(none), 0.0)
  same = jax.jit(economics.aggregate)(params, deltas, none)
  for k in params:
    np.testing.assert_array_equal(np.asarray(same[k]), np.asarray(params[k]))


# --- leader reward (eqs. 11, 14) ------------------------------------------------------------------------------

def numpy_jain(x):
  return x.sum() ** 2 / (len(x) * (x ** 2).sum())


def test_participation_penalty_and_warmup():
  p = np.array([0.3, 0.1, 0.05, 0.0, 0.2])
  p_tilde = (p + 1e-3) / (p + 1e-3).sum()
  kl = float(np.sum(p_tilde * np.log(len(p) * p_tilde)))
  got = economics.participation_penalty(jnp.asarray(p, jnp.float32), jnp.asarray(p_tilde, jnp.float32), 0.7, 2.0)
  assert float(got) == pytest.approx(0.7 * (1 - numpy_jain(p)) + 2.0 * kl, rel=1e-5)
  betas = [float(economics.fairness_weight(t, 2.0, 20)) for t in (1, 10, 20, 50)]
  np.testing.assert_allclose(betas, [0.1, 1.0, 2.0, 2.0], rtol=1e-6)
  assert float(economics.fairness_weight(3, 1.5, 0)) == 1.5
  assert float(economics.progress_signal(1.0, 1.5)) == 0.0 and float(economics.progress_signal(1.5, 1.0)) == 0.5
  assert float(economics.expenditure(jnp.asarray([True, False, True]), jnp.asarray([1.0, 5.0, 0.5]))) == 1.5


@FEW
@given(values=st.lists(st.tuples(floats32(0.0, 2.0), floats32(0.0, 30.0), floats32(0.0, 3.0)), min_size=1,
                       max_size=30),
       alpha=st.sampled_from([0.0, 1.0, 2.5]))
def test_leader_reward_standardizes_with_running_statistics(values, alpha):
  x = np.array(values, np.float64)  # [T, 3] components, round t = 1 … T
  moments = economics.moments_init()
  reward = jax.jit(economics.leader_reward)
  for t in range(1, len(x) + 1):
    u, moments, z = reward(moments, t, *(jnp.asarray(v, jnp.float32) for v in x[t - 1]), alpha, 1.0, 20.0)
    seen = x[:t]
    std = np.maximum(seen.std(0), 1e-8)  # ddof = 0, including this round
    want_z = (x[t - 1] - seen.mean(0)) / std
    stable = seen.std(0) > 1e-3  # float32 Welford vs float64 two-pass: compare where the spread is resolved
    np.testing.assert_allclose(np.asarray(z)[stable], want_z[stable], rtol=2e-3, atol=2e-3)
    assert np.all(np.abs(np.asarray(z)[seen.std(0) == 0]) == 0)
    want_u = float(np.asarray(z)[0] - alpha * np.asarray(z)[1] - min(1.0, t / 20) * np.asarray(z)[2])
    assert float(u) == pytest.approx(want_u, rel=1e-5, abs=1e-5)
  np.testing.assert_allclose(np.asarray(moments.mean), x.mean(0), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(moments.m2) / len(x), x.var(0), rtol=2e-3, atol=1e-4)
  assert float(moments.count) == len(x)


def test_first_round_reward_is_zero():
  u, moments, z = economics.leader_reward(economics.moments_init(), 1, 0.3, 2.0, 0.1)
  assert float(u) == 0.0 and np.all(np.asarray(z) == 0.0) and float(moments.count) == 1.0


# --- batching ---------------------------------------------------------------------------------------------------

def test_round_pieces_vmap_over_seeds():
  """The pieces of one round, vmapped over a leading seed axis, equal the same pieces seed by seed (projection and
  inclusion are vmapped in their own tests)."""
  seeds, n = 3, 5

  def one_round(key, pi, kappa, state, mu, p, moments):
    z = pi > 0.3
    r = economics.offers(pi, beliefs.posterior_mean_threshold(mu), economics.smoothed_participation(p))
    accept, prob = followers.exp3_respond(key, state, 0.1)
    state = followers.exp3_update(state, accept, prob, followers.exp3_reward(accept, r, kappa, 2.2), z)
    y = z & accept
    mu = beliefs.belief_update(mu, r, accept, z)
    alpha = economics.qfair_weights(jnp.arange(1.0, n + 1), jnp.linspace(0.5, 2.0, n), y)
    p = economics.participation_update(p, y)
    penalty = economics.participation_penalty(p, economics.smoothed_participation(p))
    u, moments, _ = economics.leader_reward(moments, 1, 0.1, economics.expenditure(y, r), penalty)
    return state, mu, p, moments, alpha, u

  keys = jax.random.split(jax.random.key(12), seeds)
  pi = jax.random.uniform(jax.random.key(13), (seeds, n))
  kappa = jnp.tile(beliefs.type_grid(), (seeds, 1))
  stack = lambda x: jax.tree_util.tree_map(lambda a: jnp.stack([a] * seeds), x)  # noqa: E731
  init = (stack(followers.exp3_init(n)), stack(beliefs.belief_init(n)), stack(economics.participation_init(n)),
          stack(economics.moments_init()))
  args = (keys, pi, kappa) + init
  # One program: the vmapped round and a sequential map of the unbatched round over the same seeds.
  batched, looped = jax.jit(lambda a: (jax.vmap(one_round)(*a), jax.lax.map(lambda x: one_round(*x), a)))(args)
  for got, want in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(looped)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
  assert np.asarray(batched[0].log_h).shape == (seeds, n, 2)
