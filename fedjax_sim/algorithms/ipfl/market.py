"""The iPFL model market's pure pieces: distance, gain, thresholds, the greedy graph, payments, utilities, prox
center (paper 003 eqs. 3–13, Box 2; SPEC §5).

Every function is pure, jit-able and vectorized over all m clients at once (no Python loop over clients). Models
are flat vectors: callers flatten (the distance over the whole model state, the prox step over the trainable
parameters only; the authors' code). Reported and real quantities are kept apart by the caller: the graph
(:func:`thresholds`, :func:`greedy_graph`) and :func:`payments` take the reported N and c; :func:`utilities`
takes the real N and c (the authors' code).

Graph weights: a purchase has a_ij = N_j / N_i (reported N; the authors' code), 0 otherwise, zero diagonal; the
weights scale the prox step (eq. 8), while gains, costs and payments only test a_ij > 0 (eqs. 3, 4, 12 are
written for 0/1 entries, eq. 1). The identity is added to the graph after the prox step, by the caller; every
function here ignores the diagonal, so a graph with the identity added gives the same numbers.

Totals: a buyer's "total" counts its own data, n = N_i + Σ_j 1{a_ij > 0} N_j (the authors' code and SPEC). Box 2
counts the neighbours' data only (n = 0 at the start, g_i(x) with x the neighbours' data); the two agree up to
the shift by N_i, thresholds included: T here = N_i + N^Th of Box 2.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _sqrt_gap(k: jax.Array, lo: jax.Array, width: jax.Array) -> jax.Array:
  """sqrt(k / lo) − sqrt(k / (lo + width)) for lo > 0, width ≥ 0, written without the cancellation of the
  difference: sqrt(k / lo) · width / (sqrt(lo + width) (sqrt(lo) + sqrt(lo + width)))."""
  s_lo, s_hi = jnp.sqrt(lo), jnp.sqrt(lo + width)
  return jnp.sqrt(k / lo) * (width / (s_hi * (s_lo + s_hi)))


def _off_diagonal(m: int) -> jax.Array:
  return ~jnp.eye(m, dtype=bool)


# --- model distance (eq. 2; SPEC §5) -------------------------------------------------------------------------

def cosine_distance(theta: jax.Array, theta0: jax.Array) -> jax.Array:
  """d_ij = 1 − cos(θ_i − θ_0, θ_j − θ_0), the model difference of eqs. 2, 10, 12 (SPEC §5: negative cosine
  similarity of the updates from the initial model θ_0, which is never updated).

  Decision (the paper does not say): a zero update θ_i = θ_0 has cos = 0 with everything, so d = 1 off the
  diagonal; the diagonal is d_ii = 0 for every i (d(θ, θ) = 0), and rounding is clipped to [0, 2]. The Gram
  matrix is computed at full f32 precision (accelerators would otherwise use reduced-precision matmuls).

  Args:
    theta: ``[m, P]`` the clients' flattened models (the whole model state).
    theta0: ``[P]`` the initial model.

  Returns:
    ``[m, m]`` symmetric d in [0, 2] with zero diagonal.
  """
  delta = theta - theta0[None, :]
  norm = jnp.linalg.norm(delta, axis=1, keepdims=True)
  unit = jnp.where(norm > 0, delta / jnp.where(norm > 0, norm, 1.0), 0.0)
  cos = jnp.matmul(unit, unit.T, precision=jax.lax.Precision.HIGHEST)
  d = jnp.clip(1.0 - cos, 0.0, 2.0)
  d = 0.5 * (d + d.T)
  return jnp.where(_off_diagonal(theta.shape[0]), d, 0.0)


# --- collaboration gain (eq. 4, Definition 2) ----------------------------------------------------------------

def gain(k: jax.Array, n: jax.Array, x: jax.Array) -> jax.Array:
  """g_i(x) = sqrt(K_i / N_i) − sqrt(K_i / (N_i + x)), elementwise with broadcasting (paper 003 eq. 4).

  Increasing and concave in x ≥ 0 with g_i(0) = 0; K_i = 0 (a pure seller) gives 0 for every x. Evaluated
  without the cancellation of the difference (exact to f32 rounding even when x ≪ N_i).

  Args:
    k: K_i ≥ 0, the gain scale.
    n: N_i > 0, the buyer's own data.
    x: x ≥ 0, the data bought.
  """
  return _sqrt_gap(k, n, x)


def total_gain(k: jax.Array, n: jax.Array, a: jax.Array, n_sellers: jax.Array | None = None) -> jax.Array:
  """G_i(a_i) = g_i(Σ_{j ≠ i} 1{a_ij > 0} N_j) (paper 003 Definition 2, eq. 4; SPEC §5).

  Args:
    k: ``[m]`` K_i.
    n: ``[m]`` N_i of the buyers (real N in the utility, reported N in the payments).
    a: ``[m, m]`` the graph; only a_ij > 0 is read, the diagonal is ignored.
    n_sellers: ``[m]`` the N_j summed, ``n`` when None.

  Returns:
    ``[m]`` G_i.
  """
  n_sellers = n if n_sellers is None else n_sellers
  bought = (a > 0) & _off_diagonal(a.shape[0])
  x = jnp.sum(jnp.where(bought, n_sellers[None, :], 0.0), axis=1)
  return gain(k, n, x)


# --- thresholds (Box 2, first loop) --------------------------------------------------------------------------

def seller_prices(n: jax.Array, c: jax.Array, d: jax.Array, lam) -> jax.Array:
  """``[m, m]`` R_ij = c_j + λ d_ij N_j / N_i, the price buyer i's threshold for seller j solves against (paper 003
  Box 2; reported N and c): the lower R_ij, the higher T_ij and the earlier i takes j."""
  return c[None, :] + lam * d * n[None, :] / n[:, None]


def thresholds(k: jax.Array, n: jax.Array, c: jax.Array, d: jax.Array, lam, iters: int = 32,
               unaffordable_last: bool = True) -> jax.Array:
  """T_ij: the total data of buyer i up to which buying j pays off (paper 003 Box 2; SPEC §5).

  T_ij > N_j solves sqrt(K_i / (T − N_j)) − sqrt(K_i / T) = R_ij with R_ij = c_j + λ d_ij N_j / N_i (reported N
  and c), i.e. g_i(T − N_i) − g_i(T − N_i − N_j) = R_ij of Box 2 in totals that count the buyer's own N_i. The
  left side h(u) = sqrt(K_i / u) − sqrt(K_i / (u + N_j)) of u = T − N_j falls strictly from +∞ to 0, so the root
  is unique; buying j at total n (j included) lowers φ_i of eq. 10 iff n < T_ij. Special values:

  * +∞ where K_i > 0 and R_ij ≤ 0: the marginal gain always exceeds the price, so j is always worth buying (this
    is Box 2's case with no finite root; setting it to 0 there, as Box 2's "no solution" line reads, would
    leave a strictly profitable seller unbought and contradict eq. 11).
  * −∞ ("never buy", Box 2's N^Th = 0, sorted last) where K_i = 0 (a pure seller never buys; eq. 4), on the
    diagonal, and, when ``unaffordable_last``, where T_ij ≤ N_i + N_j: j alone is not worth its price
    (g_i(N_j) ≤ R_ij), Box 2's "no solution" on the range N^Th ≥ N_j of a real total.

  Decision (Box 2 vs SPEC and the authors' code): SPEC and the authors solve on T > N_j and keep a root in
  (N_j, N_i + N_j]. Such a seller can never be bought (n + N_j ≥ N_i + N_j ≥ T), and both versions give it
  the same verdict, but its root may sort above affordable sellers and stop the greedy loop at its first
  failure. The strongest case: a seller reporting a huge N_j with λ d_ij > 0 has R_ij ≈ λ d_ij N_j / N_i and a
  root T ≈ N_j + K_i / R_ij² that sorts first in every row and stops every buyer (Theorem 3 still holds, the
  whole market stops). ``unaffordable_last=True`` (default) follows Box 2's "no solution → N^Th = 0";
  ``False`` keeps SPEC's root.

  Decision (solver): a fixed-iteration bisection in s = log u for all (i, j) at once, not the authors' scalar
  ``fsolve`` from 3 N_j on a function set to 0 below N_j, which can stop on a spurious root there and then
  never choose j: results can differ from theirs for that reason. The bracket is analytic, from
  (u + N_j)^{-3/2} N_j / 2 ≤ h(u) / sqrt(K_i) ≤ min(u^{-1/2}, u^{-3/2} N_j / 2) and h(u) ≥ sqrt(K_i/u) −
  sqrt(K_i/N_j):

    u_hi = min(K_i / R², A),   u_lo = max(K_i / (R + sqrt(K_i / N_j))², A − N_j),   A = (sqrt(K_i) N_j / (2R))^{2/3},

  whose ratio u_hi / u_lo stays below about 3 for every R > 0, so 32 halvings of log(u_hi / u_lo) reach f32
  resolution.

  Args:
    k: ``[m]`` K_i ≥ 0 (reported with G_i in Box 1).
    n: ``[m]`` reported N_i > 0.
    c: ``[m]`` reported c_j.
    d: ``[m, m]`` d_ij (:func:`cosine_distance`).
    lam: λ ≥ 0 (traced).
    iters: bisection steps (static).
    unaffordable_last: report roots T_ij ≤ N_i + N_j as −∞ (static; see the Decision).

  Returns:
    ``[m, m]`` T_ij in totals, with ±∞ as above.
  """
  m = n.shape[0]
  ki, ni, nj = k[:, None], n[:, None], n[None, :]
  rhs = seller_prices(n, c, d, lam)
  r = jnp.where(rhs > 0, rhs, 1.0)
  sk = jnp.sqrt(ki)
  big = (sk * nj / 2.0) ** (2.0 / 3.0) * r ** (-2.0 / 3.0)  # A, without overflowing at tiny R
  tiny = jnp.finfo(jnp.result_type(r)).tiny
  u_hi = jnp.maximum(jnp.minimum(ki / r ** 2, big), tiny)
  u_lo = jnp.maximum(jnp.maximum(ki / (r + sk / jnp.sqrt(nj)) ** 2, big - nj), tiny)
  lo, hi = jnp.log(jnp.minimum(u_lo, u_hi)), jnp.log(u_hi)

  def halve(_, bounds):
    lo, hi = bounds
    mid = 0.5 * (lo + hi)
    right = _sqrt_gap(ki, jnp.exp(mid), nj) > r  # h(u_mid) > R: the root lies above u_mid
    return jnp.where(right, mid, lo), jnp.where(right, hi, mid)

  lo, hi = jax.lax.fori_loop(0, iters, halve, (lo, hi))
  t = nj + jnp.exp(0.5 * (lo + hi))
  t = jnp.where(rhs > 0, t, jnp.inf)
  if unaffordable_last:
    t = jnp.where(t > ni + nj, t, -jnp.inf)
  never = (ki <= 0) | ~_off_diagonal(m)
  return jnp.where(never, -jnp.inf, t)


# --- greedy graph (Box 2, second loop) -----------------------------------------------------------------------

def greedy_graph(t: jax.Array, n: jax.Array) -> jax.Array:
  """Box 2's greedy rule for every buyer at once (paper 003 Box 2; SPEC §5).

  Buyer i takes the sellers in decreasing T_ij (ties: lower index first) and, from the total n = N_i, buys j
  while n + N_j < T_ij (strict, as Box 2 and the authors' code), then n += N_j; it stops at the first failure
  (Box 2's ``break``). Vectorized: a stable sort, a cumulative sum of the sorted N_j (the running totals), and a
  cumulative product of the pass mask (the first failure ends the prefix). The diagonal is never bought.

  Args:
    t: ``[m, m]`` thresholds in totals (:func:`thresholds`), ±∞ allowed.
    n: ``[m]`` reported N.

  Returns:
    ``[m, m]`` a with a_ij = N_j / N_i for purchases (the authors' weights), 0 otherwise; zero diagonal.
  """
  m = n.shape[0]
  t = jnp.where(_off_diagonal(m), t, -jnp.inf)
  order = jnp.argsort(-t, axis=1, stable=True)
  t_sorted = jnp.take_along_axis(t, order, axis=1)
  totals = n[:, None] + jnp.cumsum(n[order], axis=1)  # n + N_k at the k-th candidate, if all before were bought
  taken = jnp.cumprod((totals < t_sorted).astype(jnp.int32), axis=1).astype(bool)
  bought = jnp.take_along_axis(taken, jnp.argsort(order, axis=1), axis=1)
  return jnp.where(bought, n[None, :] / n[:, None], 0.0)


def box2_graph(k: jax.Array, n: jax.Array, c: jax.Array, d: jax.Array, lam, iters: int = 32,
               unaffordable_last: bool = True) -> jax.Array:
  """The graph of Box 2 from reported K, N, c: :func:`greedy_graph` of :func:`thresholds` (``[m, m]``)."""
  return greedy_graph(thresholds(k, n, c, d, lam, iters=iters, unaffordable_last=unaffordable_last), n)


# --- payments (eqs. 12–13) -----------------------------------------------------------------------------------

def remittances(a: jax.Array, k: jax.Array, n: jax.Array, d: jax.Array, lam) -> jax.Array:
  """r_ij = 1{a_ij > 0} [G_i(a_i) − G_i(a_i − e_j) − λ d_ij N_j / N_i], what buyer i pays seller j (paper 003
  eq. 12, reported K and N; the authors' code). G_i(a_i) − G_i(a_i − e_j) is the marginal gain of j given all
  of i's other purchases, sqrt(K_i / (n_i − N_j)) − sqrt(K_i / n_i) at i's final total n_i.

  Args:
    a: ``[m, m]`` the graph (only a_ij > 0 is read; the diagonal is ignored).
    k, n: ``[m]`` K and reported N.
    d: ``[m, m]`` d_ij.
    lam: λ.

  Returns:
    ``[m, m]`` r, zero where a_ij = 0.
  """
  bought = (a > 0) & _off_diagonal(a.shape[0])
  nj = n[None, :]
  total = n + jnp.sum(jnp.where(bought, nj, 0.0), axis=1)  # [m] n_i, the buyer's own data included
  lo = jnp.where(bought, total[:, None] - nj, 1.0)
  marginal = _sqrt_gap(k[:, None], lo, jnp.where(bought, nj, 0.0))
  return jnp.where(bought, marginal - lam * d * nj / n[:, None], 0.0)


def payments(a: jax.Array, k: jax.Array, n: jax.Array, d: jax.Array, lam) -> jax.Array:
  """p_i = Σ_j r_ij − Σ_j r_ji, what client i pays the system this round (paper 003 eq. 13; Definition 4).

  The payments sum to zero over clients (the server is neutral). Decision: no c argument — eq. 12 does not
  involve c (paper 003: "the clients cannot directly affect the payment by manipulating c_i").

  Args:
    a: ``[m, m]`` the graph.
    k, n: ``[m]`` K and reported N.
    d: ``[m, m]`` d_ij.
    lam: λ.

  Returns:
    ``[m]`` p.
  """
  r = remittances(a, k, n, d, lam)
  return jnp.sum(r, axis=1) - jnp.sum(r, axis=0)


# --- utility and welfare (eqs. 3, 5) -------------------------------------------------------------------------

def utilities(a: jax.Array, k_real: jax.Array, n_real: jax.Array, c_real: jax.Array, p: jax.Array) -> jax.Array:
  """U_i = G_i(a_i) − c_i Σ_{j ≠ i} 1{a_ji > 0} − p_i (paper 003 eq. 3, Definitions 1–4).

  Real N (the buyer's and the sellers') in the gain and the real c in the cost (the authors' code); p from
  :func:`payments` with reported values. Decision (SPEC writes c_i Σ_j a_ji): the cost counts sales,
  Definition 3 ("client i will suffer a loss of c_i" per importer) with eq. 1's 0/1 entries, since the graph's
  entries here are the weights N_j / N_i.

  Args:
    a: ``[m, m]`` the graph.
    k_real, n_real, c_real: ``[m]`` K, real N, real c.
    p: ``[m]`` payments.

  Returns:
    ``[m]`` U.
  """
  sold = (a > 0) & _off_diagonal(a.shape[0])
  return total_gain(k_real, n_real, a) - c_real * jnp.sum(sold, axis=0) - p


def social_welfare(u: jax.Array) -> jax.Array:
  """SW = Σ_i U_i (paper 003 Definition 5, eq. 5); the payments cancel."""
  return jnp.sum(u)


# --- prox center and penalty (eqs. 8–9) ----------------------------------------------------------------------

def prox_center(theta: jax.Array, theta0: jax.Array, a: jax.Array, eta) -> jax.Array:
  """θ̄_i = θ_i − η ∇_x [−Σ_j a_ij cos(x − θ_0, θ_j − θ_0)] at x = θ_i, for all i at once (paper 003 eq. 8 with
  d = 1 − cos and a_ij = N_j / N_i, so η / N_i Σ_j a_ij N_j ∇d of eq. 8 is η Σ_j a_ij ∇d here; SPEC §5).

  Closed form: with u_k = (θ_k − θ_0) / ‖θ_k − θ_0‖, ∇_x cos(x − θ_0, θ_j − θ_0) = (u_j − cos_ij u_i) /
  ‖θ_i − θ_0‖. Decision (the paper does not say): a zero update θ_j = θ_0 contributes nothing, and a client with
  θ_i = θ_0 is not moved. The diagonal contributes nothing (u_i − u_i = 0), so a graph with the identity added
  gives the same center.

  Args:
    theta: ``[m, P]`` flattened trainable parameters.
    theta0: ``[P]`` the initial model.
    a: ``[m, m]`` the weighted graph.
    eta: η, the step size.

  Returns:
    ``[m, P]`` the prox centers.
  """
  delta = theta - theta0[None, :]
  norm = jnp.linalg.norm(delta, axis=1, keepdims=True)
  safe = jnp.where(norm > 0, norm, 1.0)
  unit = jnp.where(norm > 0, delta / safe, 0.0)
  hi = jax.lax.Precision.HIGHEST
  cos = jnp.matmul(unit, unit.T, precision=hi)
  pull = jnp.matmul(a, unit, precision=hi) - jnp.sum(a * cos, axis=1, keepdims=True) * unit
  return theta + eta * jnp.where(norm > 0, pull / safe, 0.0)


def prox_penalty(theta: Any, center: Any, lam, eta) -> jax.Array:
  """λ / (2η) ‖θ − θ̄‖², the proximal term of the local objective (paper 003 eq. 9), summed over every leaf of
  one client's parameter pytree (vmap it over clients)."""
  leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x, y: jnp.sum((x - y) ** 2), theta, center))
  return lam / (2.0 * eta) * sum(leaves, jnp.zeros(()))
