"""iPFL market pieces against their definitions, and the paper's incentive theorems as property tests (paper 003
eqs. 3–13, Box 2, Theorems 1–3, Lemma 1; SPEC §5).

The JAX functions run in float32; the references are plain Python / numpy in float64. Markets are drawn as in the
paper's setting: K_i ≥ 0 with pure sellers (K = 0), integer N_i ≥ 1, c_i ≥ 0 with zeros, d symmetric in [0, 2]
with zero diagonal (zeros allowed off it), λ ≥ 0 with zeros. Non-zero c and d start at 1e-6: float32 resolves
1 − cos to ~6e-8 anyway, and smaller prices can underflow to subnormals, which XLA flushes to 0 (a +∞ threshold
where float64 has a finite one).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_sim.algorithms.ipfl import market
from tests.conftest import load_benchmark

MANY = settings(max_examples=200, deadline=None)
SIZES = (2, 3, 5, 8)  # a few fixed sizes: each jitted function compiles once per size

thresholds = jax.jit(market.thresholds, static_argnames=("iters", "unaffordable_last"))
greedy = jax.jit(market.greedy_graph)
graph = jax.jit(market.box2_graph, static_argnames=("iters", "unaffordable_last"))


@jax.jit
def market_round(k, n_rep, c_rep, d, lam, n_real, c_real):
  """Box 2 graph and payments from reported N, c; utilities with the real N, c."""
  a = market.box2_graph(k, n_rep, c_rep, d, lam)
  r = market.remittances(a, k, n_rep, d, lam)
  p = market.payments(a, k, n_rep, d, lam)
  return a, r, p, market.utilities(a, k, n_real, c_real, p)


def f32(lo, hi):
  """Float32-representable floats in [lo, hi] (the bounds rounded to float32)."""
  return st.floats(float(np.float32(lo)), float(np.float32(hi)), allow_nan=False, allow_subnormal=False, width=32)


@st.composite
def markets(draw, sizes=SIZES, positive_prices=False):
  """(k, n, c, d, lam) as float32 numpy arrays. ``positive_prices``: λ > 0 and d_ij > 0 off the diagonal."""
  m = draw(st.sampled_from(sizes))
  k = draw(st.lists(st.one_of(st.just(0.0), f32(1.0, 1e6)), min_size=m, max_size=m))
  n = draw(st.lists(st.integers(1, 1000), min_size=m, max_size=m))
  c = draw(st.lists(st.one_of(st.just(0.0), f32(1e-6, 10.0)), min_size=m, max_size=m))
  dist = f32(1e-2, 2.0) if positive_prices else st.one_of(st.just(0.0), f32(1e-6, 2.0))
  upper = draw(st.lists(dist, min_size=m * (m - 1) // 2, max_size=m * (m - 1) // 2))
  lam = draw(f32(1e-3, 5.0) if positive_prices else st.one_of(st.just(0.0), f32(1e-5, 5.0)))
  d = np.zeros((m, m), np.float32)
  d[np.triu_indices(m, 1)] = upper
  d = d + d.T
  return (np.array(k, np.float32), np.array(n, np.float32), np.array(c, np.float32), d, np.float32(lam))


# --- float64 references ----------------------------------------------------------------------------------------

def gap64(k, lo, width):
  """sqrt(k / lo) − sqrt(k / (lo + width)), the definition, in float64."""
  return math.sqrt(k / lo) - math.sqrt(k / (lo + width))


def gap64_stable(k, lo, width):
  """gap64 rewritten without the cancellation: sqrt(k) width / (sqrt(lo) sqrt(lo + width) (sqrt(lo) +
  sqrt(lo + width))), algebraically equal. The difference form loses ~eps lo / width relative in float64, 3e-5
  at the thresholds' largest lo / width ~ 1e11, more than the float32 solver's error."""
  a, b = math.sqrt(lo), math.sqrt(lo + width)
  return math.sqrt(k) * width / (a * b * (a + b))


def root_scalar(k, nj, rhs):
  """The u > 0 with sqrt(k/u) − sqrt(k/(u + nj)) = rhs (k, rhs > 0): a plain bracketing bisection in float64."""
  h = lambda u: gap64_stable(k, u, nj)
  lo, hi = 1.0, 1.0
  while h(hi) > rhs:
    hi *= 2.0
  while h(lo) < rhs:
    lo /= 2.0
  for _ in range(200):
    mid = math.sqrt(lo * hi)
    if mid in (lo, hi):
      break
    lo, hi = (mid, hi) if h(mid) > rhs else (lo, mid)
  return math.sqrt(lo * hi)


def greedy_loop(t, n):
  """Box 2's second loop, literally, in float64: pick the unchosen j ≠ i with the largest T_ij (lowest index on
  ties), buy it if n + N_j < T_ij, else stop; n starts at N_i (totals count the buyer's own data)."""
  m = len(n)
  a = np.zeros((m, m))
  for i in range(m):
    total, chosen = float(n[i]), []
    for _ in range(m - 1):
      rest = [j for j in range(m) if j != i and j not in chosen]
      j = max(rest, key=lambda j: (float(t[i, j]), -j))
      if total + float(n[j]) < float(t[i, j]):
        chosen.append(j)
        total += float(n[j])
      else:
        break
    for j in chosen:
      a[i, j] = float(n[j]) / float(n[i])
  return a


def gain_of_set(k, n, i, sellers):
  x = sum(float(n[j]) for j in sellers)
  return 0.0 if k[i] == 0 else gap64(float(k[i]), float(n[i]), x)


def sellers_of(a, i):
  return [j for j in range(a.shape[0]) if j != i and a[i, j] > 0]


def remittances_loop(a, k, n, d, lam):
  """Eq. 12 for every pair, G from its definition (eq. 4), in float64."""
  m = len(n)
  r = np.zeros((m, m))
  for i in range(m):
    s = sellers_of(a, i)
    for j in s:
      marginal = gain_of_set(k, n, i, s) - gain_of_set(k, n, i, [l for l in s if l != j])
      r[i, j] = marginal - float(lam) * float(d[i, j]) * float(n[j]) / float(n[i])
  return r


def utilities_loop(a, k, n, c, p):
  """Eq. 3: U_i = G_i(a_i) − c_i #{j ≠ i : a_ji > 0} − p_i, in float64."""
  m = len(n)
  return np.array([gain_of_set(k, n, i, sellers_of(a, i)) - float(c[i]) * sum(a[j, i] > 0 for j in range(m) if j != i)
                   - float(p[i]) for i in range(m)])


def price(k, n, c, d, lam):
  """R_ij = c_j + λ d_ij N_j / N_i in float64."""
  n64 = n.astype(np.float64)
  return c.astype(np.float64)[None, :] + float(lam) * d.astype(np.float64) * n64[None, :] / n64[:, None]


# --- distance (eq. 2) --------------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([2, 5]), p=st.sampled_from([1, 7]), seed=st.integers(0, 2**31 - 1))
def test_cosine_distance_matches_a_double_loop(m, p, seed):
  rng = np.random.default_rng(seed)
  theta0 = rng.normal(size=p).astype(np.float32)
  theta = (theta0 + rng.normal(size=(m, p))).astype(np.float32)
  theta[0] = theta0  # a zero update: cos = 0 with everything (Decision), so d = 1
  if m > 2:
    theta[2] = theta0 + 3.0 * (theta[1] - theta0)  # parallel updates: d = 0
  d = np.asarray(jax.jit(market.cosine_distance)(theta, theta0), np.float64)
  ref = np.zeros((m, m))
  for i in range(m):
    for j in range(m):
      if i == j:
        continue
      x, y = theta[i].astype(np.float64) - theta0, theta[j].astype(np.float64) - theta0
      nx, ny = np.linalg.norm(x), np.linalg.norm(y)
      ref[i, j] = 1.0 - (x @ y / (nx * ny) if nx > 0 and ny > 0 else 0.0)
  np.testing.assert_allclose(d, ref, atol=1e-5)
  np.testing.assert_array_equal(d, d.T)
  np.testing.assert_array_equal(np.diag(d), 0.0)
  assert d.min() >= 0.0 and d.max() <= 2.0
  np.testing.assert_array_equal(d[0, 1:], 1.0)


# --- gain (eq. 4) ------------------------------------------------------------------------------------------------

def test_gain_matches_its_definition_and_pure_sellers_gain_nothing():
  k = np.array([5e5, 0.0, 1.0, 5e5], np.float32)
  n = np.array([100.0, 50.0, 3.0, 1e6], np.float32)
  x = np.array([30.0, 500.0, 0.0, 1.0], np.float32)
  g = np.asarray(market.gain(k, n, x), np.float64)
  ref = [gap64(float(ki), float(ni), float(xi)) for ki, ni, xi in zip(k, n, x)]
  np.testing.assert_allclose(g, ref, rtol=1e-6)
  assert g[1] == 0.0 and g[2] == 0.0
  # a = the weights N_j / N_i of purchases: G sums the sellers' (real) N; the diagonal is ignored.
  a = np.array([[1.0, 0.5, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 3.0], [0, 0, 0, 0]], np.float32)
  n_real = np.array([100.0, 40.0, 3.0, 7.0], np.float32)
  big_g = np.asarray(market.total_gain(k, n_real, a), np.float64)
  ref = [gain_of_set(k, n_real, i, sellers_of(a, i)) for i in range(4)]
  np.testing.assert_allclose(big_g, ref, rtol=1e-6)


# --- thresholds (Box 2, first loop) ------------------------------------------------------------------------------

@MANY
@given(mk=markets())
def test_thresholds_solve_the_box2_equation(mk):
  k, n, c, d, lam = mk
  m = len(n)
  t = np.asarray(thresholds(k, n, c, d, lam, unaffordable_last=False), np.float64)
  t_box2 = np.asarray(thresholds(k, n, c, d, lam), np.float64)
  rhs = price(k, n, c, d, lam)
  for i in range(m):
    for j in range(m):
      if i == j or k[i] == 0:  # never buys: the diagonal and pure sellers
        assert t[i, j] == -np.inf and t_box2[i, j] == -np.inf
        continue
      if rhs[i, j] <= 0:  # +∞ exactly where the price is ≤ 0: j is always worth buying
        assert t[i, j] == np.inf and t_box2[i, j] == np.inf
        continue
      assert np.isfinite(t[i, j]) and t[i, j] >= n[j]  # > in reals; = when T − N_j is below N_j's float32 ulp
      ki, nj = float(k[i]), float(n[j])
      # Residual ≈ 0, as a bracket: the left side crosses R within a relative 2e-5 of T (float32 T, whose
      # T − N_j loses digits when T ≈ N_j).
      lo, hi = t[i, j] * (1 - 2e-5) - nj, t[i, j] * (1 + 2e-5) - nj
      assert (lo <= 0 or gap64_stable(ki, lo, nj) >= rhs[i, j]) and gap64_stable(ki, hi, nj) <= rhs[i, j]
      # Agreement with a scalar float64 root finder.
      ref = nj + root_scalar(ki, nj, rhs[i, j])
      assert t[i, j] == pytest.approx(ref, rel=2e-5)
      # Box 2's reading: the roots a seller alone cannot reach (T ≤ N_i + N_j) are "never buy".
      if t[i, j] > n[i] + n[j]:
        assert t_box2[i, j] == t[i, j]
      else:
        assert t_box2[i, j] == -np.inf


def test_thresholds_special_values():
  k = np.array([1e5, 1e5, 0.0], np.float32)
  n = np.array([10.0, 20.0, 30.0], np.float32)
  c = np.array([0.0, 1.0, 0.0], np.float32)
  d = np.zeros((3, 3), np.float32)
  t = np.asarray(thresholds(k, n, c, d, np.float32(1.0)))
  assert t[0, 2] == np.inf and t[1, 0] == np.inf and t[1, 2] == np.inf  # free and identical: always buy
  assert np.isfinite(t[0, 1])
  assert np.all(t[2] == -np.inf) and np.all(np.diag(t) == -np.inf)  # a pure seller never buys


# --- greedy graph (Box 2, second loop) ---------------------------------------------------------------------------

threshold_values = st.one_of(f32(0.0, 4000.0), st.integers(1, 4000).map(float), st.sampled_from([np.inf, -np.inf]))


@MANY
@given(m=st.sampled_from(SIZES), data=st.data())
def test_greedy_graph_equals_box2_loop(m, data):
  t = np.array(data.draw(st.lists(threshold_values, min_size=m * m, max_size=m * m)), np.float32).reshape(m, m)
  n = np.array(data.draw(st.lists(st.integers(1, 1000), min_size=m, max_size=m)), np.float32)
  a = np.asarray(greedy(t, n), np.float64)
  ref = greedy_loop(t, n)
  np.testing.assert_array_equal(a > 0, ref > 0)
  np.testing.assert_allclose(a, ref, rtol=1e-6)
  np.testing.assert_array_equal(np.diag(a), 0.0)


def test_greedy_is_strict_and_stops_at_the_first_failure():
  n = np.array([10.0, 5.0, 1.0, 3.0], np.float32)
  t = np.array([[-np.inf, 16.0, 17.0, 18.0]] + [[-np.inf] * 4] * 3, np.float32)
  a = np.asarray(greedy(t, n))
  # Sorted: 3 (18), 2 (17), 1 (16). 10 + 3 = 13 < 18 buy; 13 + 1 = 14 < 17 buy; 14 + 5 = 19 ≥ 16 stop.
  np.testing.assert_allclose(a[0], [0.0, 0.0, 0.1, 0.3], rtol=1e-6)
  t[0, 3] = 13.0  # 10 + 3 = 13 is not < 13: the first candidate now is 2 (17): buy, 11 + 5 = 16 ≥ 16 stop.
  np.testing.assert_allclose(np.asarray(greedy(t, n))[0], [0.0, 0.0, 0.1, 0.0], rtol=1e-6)


# --- payments and utilities (eqs. 3, 5, 12, 13) ------------------------------------------------------------------

@MANY
@given(mk=markets(), data=st.data())
def test_payments_and_utilities_match_their_definitions(mk, data):
  k, n, c, d, lam = mk
  m = len(n)
  n_real = np.array(data.draw(st.lists(st.integers(1, 1000), min_size=m, max_size=m)), np.float32)
  c_real = np.array(data.draw(st.lists(f32(0.0, 10.0), min_size=m, max_size=m)), np.float32)
  a, r, p, u = (np.asarray(x, np.float64) for x in market_round(k, n, c, d, lam, n_real, c_real))
  ref_r = remittances_loop(a, k, n, d, lam)
  scale = 1.0 + np.abs(ref_r).sum() + float(np.sqrt(k / n).max())
  np.testing.assert_allclose(r, ref_r, atol=1e-5 * scale)
  assert abs(p.sum()) <= 1e-5 * scale  # payments sum to zero over clients (a neutral server)
  np.testing.assert_allclose(p, r.sum(1) - r.sum(0), atol=1e-5 * scale)
  np.testing.assert_allclose(u, utilities_loop(a, k, n_real, c_real, p), atol=1e-5 * scale)
  sw = float(market.social_welfare(jnp.asarray(u, jnp.float32)))
  # Definition 5: SW = Σ_i [G_i(a_i) − Σ_j c_j 1{a_ij > 0}] (the payments cancel).
  ref_sw = sum(gain_of_set(k, n_real, i, sellers_of(a, i)) - sum(float(c_real[j]) for j in sellers_of(a, i))
               for i in range(m))
  assert sw == pytest.approx(ref_sw, abs=1e-5 * scale)


# --- prox center (eqs. 8, 9) -------------------------------------------------------------------------------------

def neg_weighted_cosine(x, theta0, others, weights):
  """−Σ_j a_ij cos(x − θ_0, θ_j − θ_0) for one client (θ_j ≠ θ_0)."""
  dx, do = x - theta0, others - theta0
  cos = do @ dx / (jnp.linalg.norm(do, axis=1) * jnp.linalg.norm(dx))
  return -jnp.sum(weights * cos)


@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([2, 5]), p=st.sampled_from([3, 16]), seed=st.integers(0, 2**31 - 1))
def test_prox_center_is_a_gradient_step_that_raises_the_weighted_cosine(m, p, seed):
  rng = np.random.default_rng(seed)
  theta0 = rng.normal(size=p).astype(np.float32)
  theta = (theta0 + rng.normal(size=(m, p))).astype(np.float32)
  a = (rng.random((m, m)) * (rng.random((m, m)) < 0.7)).astype(np.float32)
  np.fill_diagonal(a, 0.0)
  eta = np.float32(1e-3)
  center = np.asarray(jax.jit(market.prox_center)(theta, theta0, a, eta), np.float64)
  grad = jax.vmap(jax.grad(neg_weighted_cosine), in_axes=(0, None, None, 0))(theta, theta0, theta, a)
  np.testing.assert_allclose(center, theta - eta * np.asarray(grad, np.float64), atol=1e-6)
  # The identity added to the graph does not move the center.
  with_self = np.asarray(market.prox_center(theta, theta0, a + np.eye(m, dtype=np.float32), eta), np.float64)
  np.testing.assert_allclose(with_self, center, atol=1e-6)
  # The step raises Σ_j a_ij cos (in float64; η small against ‖θ_i − θ_0‖).
  def weighted_cos(x):
    dx, do = x - theta0, theta.astype(np.float64) - theta0
    return (a * ((dx @ do.T) / np.outer(np.linalg.norm(dx, axis=1), np.linalg.norm(do, axis=1)))).sum(1)
  before, after = weighted_cos(theta.astype(np.float64)), weighted_cos(center)
  moved = a.sum(1) > 0
  assert np.all(after[moved] >= before[moved] - 1e-9)
  # A zero update is not moved.
  theta[0] = theta0
  np.testing.assert_array_equal(np.asarray(market.prox_center(theta, theta0, a, eta))[0], theta0)


def test_prox_penalty():
  theta = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
  center = {"w": jnp.zeros((2, 3)), "b": jnp.full(3, 2.0)}
  assert float(market.prox_penalty(theta, center, 2.0, 5.0)) == pytest.approx(2.0 / 10.0 * (6 + 12))


# --- the theorems (paper 003 Theorems 1–3, Lemma 1) --------------------------------------------------------------

def tolerance(k, n, r):
  """Float32 slack for utility comparisons: relative 1e-5 of the round's gains and remittances. The f32
  thresholds put T within a few ulps of the root, and a purchase at a total within those ulps of T_ij has a
  marginal gain below the price by up to ~(T/u)·ulp relative (Theorem 1's proof has ≥ 0 exactly); none was
  seen below −0 in 3000 random 8-client markets."""
  return 1e-5 * (1.0 + float(np.sqrt(k / n).max()) + float(np.abs(r).sum()))


@MANY
@given(mk=markets())
def test_theorem1_individual_rationality(mk):
  """Every honest client's round utility is ≥ 0 under the Box 2 graph and its payments (reported = real)."""
  k, n, c, d, lam = mk
  a, r, p, u = (np.asarray(x, np.float64) for x in market_round(k, n, c, d, lam, n, c))
  assert u.min() >= -tolerance(k, n, r), (u, a)


def overreport(data, c, i, k, n, d, lam):
  """ĉ_i = f c_i + δ with f ∈ [1, 100] and δ ≥ 1% of i's largest price c_i + λ max_j d_ji N_i / N_j (+1): the
  f32 thresholds resolve prices to ~1e-6 relative, so a smaller lie could only reorder sellers by rounding."""
  f = data.draw(f32(1.0, 100.0))
  top = float(c[i]) + float(lam) * float((d[:, i] * n[i] / n).max()) + 1.0
  delta = data.draw(f32(0.01, 10.0)) * top
  c_hat = c.copy()
  c_hat[i] = np.float32(f * float(c[i]) + delta)
  assert c_hat[i] > c[i]
  return c_hat


@MANY
@given(mk=markets(), data=st.data())
def test_lemma1_overreporting_cost_never_adds_a_buyer(mk, data):
  k, n, c, d, lam = mk
  i = data.draw(st.integers(0, len(n) - 1))
  c_hat = overreport(data, c, i, k, n, d, lam)
  for last in (True, False):
    buyers = set(np.flatnonzero(np.asarray(graph(k, n, c, d, lam, unaffordable_last=last))[:, i] > 0))
    buyers_hat = set(np.flatnonzero(np.asarray(graph(k, n, c_hat, d, lam, unaffordable_last=last))[:, i] > 0))
    assert buyers_hat <= buyers


@MANY
@given(mk=markets(), data=st.data())
def test_theorem2_overreporting_cost_never_raises_utility(mk, data):
  """Û_i (graph and payments with ĉ_i, cost with the real c_i) ≤ U_i (everyone honest)."""
  k, n, c, d, lam = mk
  i = data.draw(st.integers(0, len(n) - 1))
  c_hat = overreport(data, c, i, k, n, d, lam)
  _, r, _, u = (np.asarray(x, np.float64) for x in market_round(k, n, c, d, lam, n, c))
  _, r_hat, _, u_hat = (np.asarray(x, np.float64) for x in market_round(k, n, c_hat, d, lam, n, c))
  assert u_hat[i] <= u[i] + tolerance(k, n, np.abs(r) + np.abs(r_hat))


@MANY
@given(mk=markets(positive_prices=True), data=st.data())
def test_theorem3_a_huge_data_claim_is_isolated(mk, data):
  """N_i → ∞ (reported N_i = 1e12 × the others' largest) ⇒ a_ji = 0 for every j: nobody buys from i.

  Condition: λ > 0 and d_ji > 0 for j ≠ i (drawn here; distinct trained models have d > 0). Without it the
  theorem fails: see :func:`test_theorem3_needs_a_positive_distance_price`. The paper claims nothing about
  i's own purchases (i may still buy, e.g. from a free seller at distance 0). With Box 2's "never buy" for
  unaffordable roots, the rest of the market is exactly the market without i.
  """
  k, n, c, d, lam = mk
  m = len(n)
  i = data.draw(st.integers(0, m - 1))
  n_hat = n.copy()
  n_hat[i] = np.float32(1e12 * n.max())
  for last in (False, True):
    a = np.asarray(graph(k, n_hat, c, d, lam, unaffordable_last=last))
    np.testing.assert_array_equal(a[:, i], 0.0)
  rest = [j for j in range(m) if j != i]
  if len(rest) >= 2:  # (a is the default, unaffordable_last=True, graph)
    a_rest = np.asarray(graph(k[rest], n[rest], c[rest], d[np.ix_(rest, rest)], lam))
    np.testing.assert_array_equal(a[np.ix_(rest, rest)], a_rest)


def test_theorem3_needs_a_positive_distance_price():
  """Counterexample to Theorem 3 as stated: with λ d_ji = 0 and c_i = 0 the price of i is 0, T_ji = +∞, and
  every buyer buys i whatever N_i it reports."""
  k = np.array([5e5, 5e5, 0.0], np.float32)
  n = np.array([100.0, 100.0, 1e14], np.float32)
  c = np.array([1.0, 1.0, 0.0], np.float32)
  d = np.zeros((3, 3), np.float32)
  a = np.asarray(graph(k, n, c, d, np.float32(1.0)))
  assert a[0, 2] > 0 and a[1, 2] > 0


def test_spec_roots_let_a_huge_data_claim_stop_the_market():
  """Why ``unaffordable_last`` (Box 2's "no solution → N^Th = 0") is the default: with SPEC's root on T > N_j,
  a client claiming a huge N with λ d > 0 has T ≈ N_j + K/R² above every other threshold, is tried first,
  fails, and stops the buyer's loop: honest buyers buy nothing at all."""
  k = np.array([5e5, 5e5, 0.0], np.float32)
  n = np.array([100.0, 100.0, 1e8], np.float32)
  c = np.array([1.0, 1.0, 0.0], np.float32)
  d = np.full((3, 3), 0.5, np.float32) * (1 - np.eye(3, dtype=np.float32))
  lam = np.float32(1.0)
  a_spec = np.asarray(graph(k, n, c, d, lam, unaffordable_last=False))
  a_box2 = np.asarray(graph(k, n, c, d, lam))
  assert a_spec[:2].sum() == 0.0
  assert a_box2[0, 1] > 0 and a_box2[1, 0] > 0 and a_box2[:, 2].sum() == 0.0


@pytest.mark.parametrize("x,y,lam", [(0.3, 1.0, 2.0), (0.6, 0.8, 2.0), (0.6, 0.45, 2.0), (0.3, 1.0, 1.0),
                                     (0.3, 1.0, 3.0), (0.05, 1.0, 2.0)])
def test_undercut_script_matches_its_closed_form(x, y, lam):
  # benchmarks/ipfl_undercut.py (docs/IPFL.md §7): at equal sizes an attacker reporting c = 0 at d_a = 1 is bought
  # by every honest buyer when it is the cheapest seller (nearest honest d > d_a − c/λ), and here by none otherwise
  script = load_benchmark("ipfl_undercut")
  d = script.market_distances(9, 3, x, y, 1.0)
  assert d[0, 1] == np.float32(x) and d[0, 3] == np.float32(y) and d[0, 8] == 1.0 and d[8, 8] == 0.0
  out = script.attacker_round(d, 5333.0, 5e5, 1.0, lam)
  cheapest = script.undercut(x, y, 1.0, 1.0, lam)
  assert out["buyers"] == (8 if cheapest else 0)
  assert (out["receipts"] > 0) == cheapest
