"""iPFL's personalized-FL baselines (pFedGraph, FedAMP, CFL, FedFomo; paper 003, SPEC §5) against their definitions.

The JAX functions run in float32; the references are plain Python / numpy loops in float64. Every jitted function
is built once here and called at a few fixed sizes, so each compiles once per size.
"""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from fedjax_sim.algorithms.ipfl import baselines
from tests.conftest import load_benchmark

SOME = settings(max_examples=50, deadline=None)
SEEDS = st.integers(0, 2**31 - 1)

project = jax.jit(baselines.simplex_projection)
graph = jax.jit(baselines.pfedgraph_graph)
aggregate = jax.jit(baselines.pfedgraph_aggregate)
penalty = jax.jit(baselines.pfedgraph_penalty)
amp_weights = jax.jit(baselines.fedamp_weights)
amp_centers = jax.jit(baselines.fedamp_centers)
bipartition = jax.jit(baselines.complete_linkage_bipartition)
split = jax.jit(baselines.cfl_split)
cfl_aggregate = jax.jit(baselines.cfl_aggregate)
sample = jax.jit(baselines.fedfomo_sample, static_argnames=("m",))
fomo_weights = jax.jit(baselines.fedfomo_weights)
fomo_update = jax.jit(baselines.fedfomo_update)


def f64(x):
  return np.asarray(x, np.float64)


def random_active(rng, c, at_least=1):
  active = rng.random(c) < 0.7
  active[rng.choice(c, size=at_least, replace=False)] = True
  return active


# --- float64 references -------------------------------------------------------------------------------------------

def project64(y, mask):
  """Projection of one row onto the simplex over ``mask``: bisection on τ for Σ max(y − τ, 0) = 1, float64."""
  y, mask = f64(y), np.asarray(mask, bool)
  x = np.zeros_like(y)
  if not mask.any():
    return x
  v = y[mask]
  lo, hi = v.min() - 1.0, v.max()  # Σ max(v − lo, 0) ≥ 1 ≥ Σ max(v − hi, 0) = 0
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if np.maximum(v - mid, 0).sum() > 1.0 else (lo, mid)
  x[mask] = np.maximum(v - 0.5 * (lo + hi), 0)
  return x


def cosine64(x):
  x = f64(x)
  c = len(x)
  out = np.zeros((c, c))
  for i in range(c):
    for j in range(c):
      ni, nj = np.linalg.norm(x[i]), np.linalg.norm(x[j])
      out[i, j] = x[i] @ x[j] / (ni * nj) if ni > 0 and nj > 0 else 0.0
  return out


def pfedgraph_qp_inputs(flat, flat0, n, active, alpha):
  """(d, p) of pFedGraph's row QP, by the definition, in float64."""
  d = -cosine64(f64(flat) - f64(flat0))
  d[d < -0.9] = -1.0
  p = np.where(active, f64(n), 0.0)
  return d, p / p.sum()


def pfedgraph_loop(flat, flat0, n, active, alpha):
  c = len(active)
  d, p = pfedgraph_qp_inputs(flat, flat0, n, active, alpha)
  m = active.sum()
  a = np.eye(c)
  for i in range(c):
    if not active[i]:
      continue
    x = project64(p - d[i] / (2 * alpha), active)
    x[x < 1 / (m * 1e5)] = 0.0
    a[i] = x / x.sum()
  return a


def fedamp_loop(flat, active, self_weight, sigma, drop):
  c = len(active)
  cos = cosine64(flat)
  m = active.sum()
  xi = np.eye(c)
  for i in range(c):
    others = [j for j in range(c) if j != i and active[j]]
    if not active[i] or not others:
      continue
    top = max(sigma * cos[i, j] for j in others)
    e = {j: np.exp(sigma * cos[i, j] - top) for j in others}
    total = sum(e.values())
    w = {j: v / total for j, v in e.items()}
    w = {j: v for j, v in w.items() if v >= 1 / (m * drop)}
    total = sum(w.values())
    xi[i] = 0.0
    xi[i, i] = self_weight
    for j, v in w.items():
      xi[i, j] = (1 - self_weight) * v / total
  return xi


def complete_linkage_loop(dist, members):
  """Plain complete linkage down to 2 clusters: merge the closest pair (largest pairwise distance, upper triangle
  read), ties to the lowest (min member, min member) pair; return the cluster of the lowest member."""
  d = lambda p, q: float(dist[min(p, q), max(p, q)])
  clusters = [[i] for i in range(len(members)) if members[i]]
  while len(clusters) > 2:
    best = None
    for a, b in itertools.combinations(range(len(clusters)), 2):
      key = (max(d(p, q) for p in clusters[a] for q in clusters[b]), min(clusters[a]), min(clusters[b]))
      if best is None or key < best[0]:
        best = (key, a, b)
    _, a, b = best
    clusters[a] = clusters[a] + clusters[b]
    del clusters[b]
  out = np.zeros(len(members), bool)
  if clusters:
    out[min(clusters, key=min)] = True
  return out


def cfl_split_loop(updates, cluster, active, eps1, eps2, min_size):
  """CFL's splitting, literally: one cluster at a time, on the starting assignment; the split-off side gets the
  lowest unused id (the lowest index of the side, for a canonical input)."""
  u = f64(updates)
  c = len(cluster)
  new = np.array(cluster)
  dist = -cosine64(u)
  for k in range(c):
    idc = [i for i in range(c) if cluster[i] == k and active[i]]
    if len(idc) < min_size:
      continue
    mean_norm = np.linalg.norm(u[idc].mean(0))
    max_norm = max(np.linalg.norm(u[i]) for i in idc)
    if mean_norm < eps1 and max_norm > eps2:
      mask = np.zeros(c, bool)
      mask[idc] = True
      keep = complete_linkage_loop(dist, mask)
      side = [i for i in idc if not keep[i]]
      used = set(new.tolist())
      fresh = side[0] if side[0] not in used else min(set(range(c)) - used)
      new[side] = fresh
  return new


def canonical(cluster):
  """Every used id is the lowest index of the clients carrying it."""
  return all(min(np.flatnonzero(cluster == k)) == k for k in set(cluster.tolist()))


# --- simplex projection ------------------------------------------------------------------------------------------

@SOME
@given(n=st.sampled_from([1, 4, 7]), seed=SEEDS, scale=st.sampled_from([0.01, 1.0, 100.0]))
def test_simplex_projection_is_the_kkt_point(n, seed, scale):
  rng = np.random.default_rng(seed)
  y = (scale * rng.normal(size=(4, n))).astype(np.float32)
  mask = rng.random((4, n)) < 0.6
  mask[0] = True
  mask[1] = False  # an empty mask: all zeros
  y[2, : n // 2] = y[2, -1]  # ties
  for m in (None, mask):
    x = f64(project(y, m) if m is not None else project(y))
    mk = np.ones_like(mask) if m is None else mask
    ref = np.stack([project64(y[r], mk[r]) for r in range(4)])
    np.testing.assert_allclose(x, ref, atol=2e-6 * (1 + scale))
    assert x.min() >= 0.0 and np.all(x[~mk] == 0.0)
    sums = x.sum(1)
    np.testing.assert_allclose(sums[mk.any(1)], 1.0, atol=2e-6 * (1 + scale))
    np.testing.assert_array_equal(sums[~mk.any(1)], 0.0)
    # KKT: x = max(y − τ, 0) on the mask for one τ per row.
    for r in np.flatnonzero(mk.any(1)):
      pos = mk[r] & (x[r] > 0)
      tau = np.mean(f64(y[r, pos]) - x[r, pos])
      np.testing.assert_allclose(x[r, mk[r]], np.maximum(f64(y[r, mk[r]]) - tau, 0), atol=2e-6 * (1 + scale))
    # Idempotent (up to x's own f32 error: entries y − τ with |y| ~ scale carry ulp(scale) each).
    again = f64(project(x.astype(np.float32), m) if m is not None else project(x.astype(np.float32)))
    np.testing.assert_allclose(again, x, atol=2e-6 * (1 + scale))


def test_simplex_projection_vmaps_and_handles_feasible_points():
  y = np.array([[0.2, 0.3, 0.5], [5.0, 5.0, -1.0], [-3.0, -3.0, -3.0]], np.float32)
  x = np.asarray(project(y))
  np.testing.assert_allclose(x, [[0.2, 0.3, 0.5], [0.5, 0.5, 0.0], [1 / 3] * 3], atol=1e-6)
  batched = jax.vmap(baselines.simplex_projection)(jnp.stack([y, y[::-1]]))
  np.testing.assert_allclose(np.asarray(batched), np.stack([x, x[::-1]]), atol=1e-7)


@SOME
@given(n=st.sampled_from([2, 5, 10]), seed=SEEDS, spread=st.sampled_from([0.05, 0.3, 1.0]))
def test_simplex_projection_keeps_every_entry_exactly_when_none_is_a_share_below_the_mean(n, seed, spread):
  """The projection of y has no zero entry iff every y_j − mean(y) > −1/n (then x = y − mean(y) + 1/n).

  This is the density condition docs/IPFL.md §6 states for pFedGraph's rows (a neighbour is dropped only when its
  y_j falls more than 1/m below the row's mean). Rows within 1e-3 of the boundary are skipped (float32).
  """
  y = np.random.default_rng(seed).normal(scale=spread, size=n)
  margin = (y - y.mean()).min() + 1.0 / n
  assume(abs(margin) >= 1e-3)
  x = f64(project(y.astype(np.float32)))
  assert (x > 0).all() == (margin > 0)
  if margin > 0:
    np.testing.assert_allclose(x, y - y.mean() + 1.0 / n, atol=1e-5)


# --- pFedGraph -----------------------------------------------------------------------------------------------------

def pfedgraph_case(rng, c, p):
  flat0 = rng.normal(size=p).astype(np.float32)
  flat = (flat0 + rng.normal(size=(c, p))).astype(np.float32)
  flat[1] = flat0 + 2.0 * (flat[0] - flat0) + 0.05 * rng.normal(size=p)  # cos > 0.9: d snaps to −1
  if c > 4:
    flat[3] = flat0  # a zero update: cos = 0 with everything
  n = rng.integers(1, 500, size=c).astype(np.float32)
  return flat, flat0, n


@SOME
@given(c=st.sampled_from([3, 6]), p=st.sampled_from([5, 8]), seed=SEEDS,
       alpha=st.sampled_from([0.05, 0.8, 5.0]))
def test_pfedgraph_graph_solves_the_row_qp(c, p, seed, alpha):
  rng = np.random.default_rng(seed)
  flat, flat0, n = pfedgraph_case(rng, c, p)
  active = random_active(rng, c)
  a = f64(graph(flat, flat0, n, active, np.float32(alpha)))
  np.testing.assert_allclose(a, pfedgraph_loop(flat, flat0, n, active, alpha), atol=2e-5)
  np.testing.assert_allclose(a.sum(1), 1.0, atol=1e-5)
  assert a.min() >= 0.0
  np.testing.assert_array_equal(a[np.ix_(active, ~active)], 0.0)  # nobody weights an inactive client
  np.testing.assert_array_equal(a[~active], np.eye(c)[~active])  # inactive rows: the identity
  # Before the drop step: the projection satisfies the QP's KKT conditions. With g = ∇(α xᵀx + (d_i − 2αp)ᵀx)
  # = 2αx + d_i − 2αp, there is ν with g_j = ν where x_j > 0 and g_j ≥ ν where x_j = 0 (j active).
  d, pw = pfedgraph_qp_inputs(flat, flat0, n, active, alpha)
  x = f64(project((pw[None, :] - d / (2 * alpha)).astype(np.float32), np.outer(active, active)))
  for i in np.flatnonzero(active):
    g = 2 * alpha * x[i] + d[i] - 2 * alpha * pw
    pos = active & (x[i] > 0)
    nu = g[pos].mean()
    scale = 1.0 + 2 * alpha
    np.testing.assert_allclose(g[pos], nu, atol=1e-5 * scale)
    assert np.all(g[active & ~pos] >= nu - 1e-5 * scale)
    assert abs(x[i, active].sum() - 1.0) < 1e-5


def test_pfedgraph_graph_single_client_and_snap():
  rng = np.random.default_rng(0)
  flat, flat0, n = pfedgraph_case(rng, 4, 6)
  alone = np.array([False, False, True, False])
  np.testing.assert_array_equal(np.asarray(graph(flat, flat0, n, alone, np.float32(0.8))), np.eye(4))
  # Updates e0, 2 e0 + 0.1 e1 (cos ≈ 0.999 > 0.9: d = −1, as with itself), e2, e0 + e3 (cos ≈ 0.71 with e0).
  # With equal sizes, rows 0 and 1 weight 0 and 1 equally, and 3 (d = −0.71) below them.
  eye = np.eye(4, dtype=np.float32)
  dw = np.stack([eye[0], 2 * eye[0] + 0.1 * eye[1], eye[2], eye[0] + eye[3]])
  a = f64(graph(flat0[:4] + dw, flat0[:4], np.ones(4, np.float32), np.ones(4, bool), np.float32(0.8)))
  np.testing.assert_allclose(a, pfedgraph_loop(flat0[:4] + dw, flat0[:4], np.ones(4), np.ones(4, bool), 0.8),
                             atol=1e-6)
  assert a[0, 0] == pytest.approx(a[0, 1], abs=1e-6) and a[1, 0] == pytest.approx(a[1, 1], abs=1e-6)
  assert a[0, 1] > a[0, 3] > a[0, 2]


@SOME
@given(c=st.sampled_from([3, 6]), p=st.sampled_from([5, 8]), seed=SEEDS)
def test_pfedgraph_aggregate_and_penalty_match_loops(c, p, seed):
  rng = np.random.default_rng(seed)
  flat = rng.normal(size=(c, p)).astype(np.float32)
  flat[c - 1] = 0.0  # a zero model: no direction, contributes 0 to the cluster vectors
  a = rng.random((c, c)).astype(np.float32)
  a /= a.sum(1, keepdims=True)
  models, cluster = (f64(x) for x in aggregate(flat, a))
  ref_models = np.array([sum(float(a[i, j]) * f64(flat[j]) for j in range(c)) for i in range(c)])
  ref_cluster = np.array([sum(float(a[i, j]) * f64(flat[j]) / np.linalg.norm(f64(flat[j]))
                              for j in range(c - 1)) for i in range(c)])
  np.testing.assert_allclose(models, ref_models, atol=1e-5)
  np.testing.assert_allclose(cluster, ref_cluster, atol=1e-5)
  theta = rng.normal(size=p).astype(np.float32)
  lam = np.float32(0.01)
  ref = float(lam) * f64(cluster[0]) @ f64(theta) / np.linalg.norm(f64(theta))
  assert float(penalty(theta, cluster[0].astype(np.float32), lam)) == pytest.approx(ref, rel=1e-5, abs=1e-8)
  # vmapped over clients, and 0 with a finite gradient at θ = 0.
  thetas = np.concatenate([flat[:-1], np.zeros((1, p), np.float32)])
  vals = np.asarray(jax.vmap(baselines.pfedgraph_penalty, in_axes=(0, 0, None))(thetas, cluster.astype(np.float32),
                                                                                lam))
  assert vals[-1] == 0.0 and np.all(np.isfinite(vals))
  grad = np.asarray(jax.grad(baselines.pfedgraph_penalty)(jnp.zeros(p), jnp.asarray(cluster[0], jnp.float32), lam))
  np.testing.assert_array_equal(grad, 0.0)


# --- FedAMP --------------------------------------------------------------------------------------------------------

@SOME
@given(c=st.sampled_from([3, 6]), p=st.sampled_from([5, 8]), seed=SEEDS, sigma=st.sampled_from([10.0, 30.0, 100.0]))
def test_fedamp_weights_match_a_loop(c, p, seed, sigma):
  rng = np.random.default_rng(seed)
  flat = rng.normal(size=(c, p)).astype(np.float32)
  flat[0] = -flat[1]  # cos = −1: with σ ≥ 30 its normalised weight drops below 1e-4 / m
  active = random_active(rng, c)
  xi = f64(amp_weights(flat, active, 0.3, np.float32(sigma), 1e4))
  ref = fedamp_loop(flat, active, 0.3, sigma, 1e4)
  np.testing.assert_allclose(xi, ref, atol=1e-5)
  assert np.all(np.isfinite(xi))
  np.testing.assert_allclose(xi.sum(1), 1.0, atol=1e-5)
  has_other = active & (active.sum() > 1)
  np.testing.assert_allclose(np.diag(xi)[has_other], 0.3, atol=1e-7)
  np.testing.assert_array_equal(xi[~has_other], np.eye(c)[~has_other])
  np.testing.assert_array_equal(xi[np.ix_(active, ~active)], 0.0)
  u = f64(amp_centers(flat, xi.astype(np.float32)))
  np.testing.assert_allclose(u, xi @ f64(flat), atol=1e-5)


def test_fedamp_drops_tiny_weights():
  flat = np.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.1], [0.9, 0.2]], np.float32)
  xi = np.asarray(amp_weights(flat, np.ones(4, bool), 0.3, np.float32(30.0), 1e4))
  assert xi[0, 1] == 0.0  # exp(−30 · 2) relative to client 0's other neighbours: dropped
  assert xi[1, 0] > 0.0  # client 1 is far from everyone: relative to its row, nothing is tiny
  np.testing.assert_allclose(xi.sum(1), 1.0, atol=1e-6)
  np.testing.assert_allclose(xi, fedamp_loop(flat, np.ones(4, bool), 0.3, 30.0, 1e4), atol=1e-6)
  sharp = np.asarray(amp_weights(flat, np.ones(4, bool), 0.3, np.float32(1e4), 1e4))  # exp(1e4) would overflow
  assert np.all(np.isfinite(sharp)) and np.allclose(sharp.sum(1), 1.0, atol=1e-6)


# --- complete linkage and CFL ------------------------------------------------------------------------------------

@SOME
@given(c=st.sampled_from([2, 4, 6]), seed=SEEDS, ties=st.booleans(), symmetric=st.booleans())
def test_complete_linkage_bipartition_matches_a_loop(c, seed, ties, symmetric):
  rng = np.random.default_rng(seed)
  dist = (rng.integers(0, 4, size=(c, c)) if ties else rng.normal(size=(c, c))).astype(np.float32)
  if symmetric:
    dist = np.triu(dist, 1) + np.triu(dist, 1).T
  members = rng.random(c) < 0.7
  side = np.asarray(bipartition(dist, members))
  np.testing.assert_array_equal(side, complete_linkage_loop(dist, members))
  assert np.all(side <= members)
  if members.sum() >= 2:
    assert side[np.argmax(members)] and (members & ~side).any()
  else:
    np.testing.assert_array_equal(side, members)


def two_groups(rng, c=6, p=8, norm=3.0, noise=0.1):
  """Clients 0, 2, 4 update along +v, 1, 3, 5 along −v: mean ≈ 0, every norm ≈ ‖v‖."""
  v = rng.normal(size=p)
  v *= norm / np.linalg.norm(v)
  sign = np.where(np.arange(c) % 2 == 0, 1.0, -1.0)
  return (sign[:, None] * v + noise * rng.normal(size=(c, p))).astype(np.float32)


def test_cfl_split_separates_two_groups_and_respects_the_criteria():
  rng = np.random.default_rng(1)
  u = two_groups(rng)
  zeros, on = np.zeros(6, np.int32), np.ones(6, bool)
  np.testing.assert_array_equal(np.asarray(split(u, zeros, on)), [0, 1, 0, 1, 0, 1])
  # Mean norm ≥ ε1 (all along +v): no split.
  np.testing.assert_array_equal(np.asarray(split(np.abs(u) + 1.0, zeros, on)), zeros)
  same = np.tile(u[0], (6, 1)) + 0.1 * rng.normal(size=(6, 8)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(split(same, zeros, on)), zeros)
  # Max norm ≤ ε2 (small updates): no split.
  np.testing.assert_array_equal(np.asarray(split(0.5 * u / 3.0, zeros, on)), zeros)
  # A 2-member cluster is not split (nor one whose third member is inactive); the 4-member one is.
  cluster = np.array([0, 0, 2, 2, 2, 2], np.int32)
  u2 = u[[0, 1, 0, 1, 2, 3]]
  np.testing.assert_array_equal(np.asarray(split(u2, cluster, on)), [0, 0, 2, 3, 2, 3])
  inactive = np.array([True, True, True, True, False, False])
  np.testing.assert_array_equal(np.asarray(split(u2, cluster, inactive)), cluster)
  # An inactive client keeps its id; the active members are split without it.
  some = np.array([True, True, True, True, True, False])
  np.testing.assert_array_equal(np.asarray(split(u, zeros, some)), [0, 1, 0, 1, 0, 0])


def test_cfl_split_new_clusters_are_not_split_again_in_the_same_call():
  rng = np.random.default_rng(2)
  p = 8
  v, w = rng.normal(size=p), rng.normal(size=p)
  w -= (w @ v) / (v @ v) * v
  v, w = 2.6 * v / np.linalg.norm(v), 2.6 * w / np.linalg.norm(w)
  # Four groups ±v, ±w (v ⟂ w, norms 2.6 > ε2): one call makes two clusters of two directions each, whose mean
  # norms 2.6 √2 / 2 ≈ 1.84 < ε1 qualify them for a split, made only by the next call.
  u = np.stack([v, -v, w, -w, v, -v, w, -w]).astype(np.float32) + 0.01 * rng.normal(size=(8, p)).astype(np.float32)
  first = np.asarray(split(u, np.zeros(8, np.int32), np.ones(8, bool)))
  assert len(set(first.tolist())) == 2 and canonical(first)
  second = np.asarray(split(u, first, np.ones(8, bool)))
  assert len(set(second.tolist())) == 4 and canonical(second)
  np.testing.assert_array_equal(second, cfl_split_loop(u, first, np.ones(8, bool), 2.0, 2.5, 3))


@SOME
@given(seed=SEEDS, start=st.sampled_from(["zeros", "arange", "random"]))
def test_cfl_split_matches_a_loop_over_rounds(seed, start):
  rng = np.random.default_rng(seed)
  c, p = 6, 8
  protos = rng.normal(size=(3, p))
  cluster = {"zeros": np.zeros(c, np.int32), "arange": np.arange(c, dtype=np.int32),
             "random": rng.integers(0, c, size=c).astype(np.int32)}[start]
  for _ in range(3):
    active = random_active(rng, c)
    scale = rng.uniform(0.5, 4.0, size=(c, 1))
    sign = rng.choice([-1.0, 1.0], size=(c, 1))
    u = (sign * scale * protos[rng.integers(0, 3, size=c)] / np.sqrt(p) * 2 + 0.3 * rng.normal(size=(c, p)))
    u = u.astype(np.float32)
    eps1, eps2 = np.float32(rng.uniform(1.0, 3.0)), np.float32(rng.uniform(1.0, 3.0))
    new = np.asarray(split(u, cluster, active, eps1, eps2, 3))
    np.testing.assert_array_equal(new, cfl_split_loop(u, cluster, active, float(eps1), float(eps2), 3))
    np.testing.assert_array_equal(new[~active], cluster[~active])
    assert new.min() >= 0 and new.max() < c
    for k in set(new.tolist()):  # a refinement: every new cluster lies in one old cluster
      assert len(set(cluster[new == k].tolist())) == 1
    if start != "random":
      assert canonical(new)
    cluster = new


@SOME
@given(seed=SEEDS)
def test_cfl_aggregate_matches_a_loop(seed):
  rng = np.random.default_rng(seed)
  c, p = 6, 5
  start = rng.normal(size=(c, p)).astype(np.float32)
  u = rng.normal(size=(c, p)).astype(np.float32)
  cluster = rng.integers(0, 3, size=c).astype(np.int32)
  active = random_active(rng, c)
  n = rng.integers(1, 100, size=c).astype(np.float32)
  out = f64(cfl_aggregate(start, u, cluster, active, n))
  for i in range(c):
    if not active[i]:
      np.testing.assert_array_equal(out[i], start[i] + u[i])
      continue
    peers = [j for j in range(c) if active[j] and cluster[j] == cluster[i]]
    mean = sum(float(n[j]) * f64(u[j]) for j in peers) / sum(float(n[j]) for j in peers)
    np.testing.assert_allclose(out[i], f64(start[i]) + mean, atol=1e-5)


# --- FedFomo -------------------------------------------------------------------------------------------------------

@SOME
@given(m=st.sampled_from([1, 3, 10]), seed=SEEDS)
def test_fedfomo_sample_picks_distinct_valid_clients(m, seed):
  rng = np.random.default_rng(seed)
  c = 6
  affinity = (rng.random((c, c)) * (rng.random((c, c)) < 0.7)).astype(np.float32)
  active = random_active(rng, c)
  chosen = np.asarray(sample(jax.random.PRNGKey(seed % 1000), affinity, m, active))
  valid = np.outer(active, active) & ~np.eye(c, dtype=bool) & (affinity > 0)
  assert np.all(chosen <= valid)  # never self, inactive or zero affinity
  np.testing.assert_array_equal(chosen.sum(1), np.minimum(m, valid.sum(1)))
  assert not chosen[~active].any()


def test_fedfomo_sample_frequencies_follow_the_affinity():
  """First pick (m = 1) ∝ affinity; inclusion in a pair (m = 2) follows the Plackett–Luce law
  P(j ∈ top 2) = p_j + Σ_{k ≠ j} p_k p_j / (1 − p_k)."""
  affinity = np.array([[0, 1, 2, 3, 4], [1, 0, 1, 1, 1], [1, 1, 0, 1, 1], [1, 1, 1, 0, 1], [1, 1, 1, 1, 0]],
                      np.float32)
  active = np.ones(5, bool)
  keys = jax.random.split(jax.random.PRNGKey(0), 4000)
  probs = affinity[0, 1:] / affinity[0, 1:].sum()
  pair_probs = np.array([pj + sum(pk * pj / (1 - pk) for k, pk in enumerate(probs) if k != j)
                         for j, pj in enumerate(probs)])
  for m, ref in ((1, probs), (2, pair_probs)):
    draws = np.asarray(jax.jit(jax.vmap(lambda k, m=m: baselines.fedfomo_sample(k, affinity, m, active)))(keys))
    freq = draws[:, 0, 1:].mean(0)
    np.testing.assert_allclose(freq, ref, atol=0.03)


@SOME
@given(seed=SEEDS)
def test_fedfomo_weights_and_update_match_a_loop(seed):
  rng = np.random.default_rng(seed)
  c, p = 6, 5
  flat = rng.normal(size=(c, p)).astype(np.float32)
  flat[5] = flat[4]  # a zero distance: weight 0
  own = rng.uniform(0.5, 2.0, size=c).astype(np.float32)
  cand = rng.uniform(0.0, 2.5, size=(c, c)).astype(np.float32)
  cand[0] = own[0] + 0.5  # client 0: every candidate is worse, so it keeps its model
  chosen = rng.random((c, c)) < 0.6
  np.fill_diagonal(chosen, False)
  chosen[4, 5] = True
  w = f64(fomo_weights(own, cand, flat, chosen))
  ref = np.zeros((c, c))
  for i in range(c):
    for j in range(c):
      dist = np.linalg.norm(f64(flat[j]) - f64(flat[i]))
      if chosen[i, j] and dist > 0:
        ref[i, j] = max(float(own[i]) - float(cand[i, j]), 0.0) / dist
    if ref[i].sum() > 0:
      ref[i] /= ref[i].sum()
  np.testing.assert_allclose(w, ref, atol=1e-6)
  assert w[4, 5] == 0.0
  np.testing.assert_array_equal(w[0], 0.0)
  new = f64(fomo_update(flat, w.astype(np.float32)))
  ref_new = np.array([f64(flat[i]) + sum(ref[i, j] * (f64(flat[j]) - f64(flat[i])) for j in range(c))
                      for i in range(c)])
  np.testing.assert_allclose(new, ref_new, atol=1e-5)
  np.testing.assert_array_equal(new[0], flat[0])  # the revert case: exactly the own model


# --- under the caller's vmap over seeds ----------------------------------------------------------------------------

def test_pieces_vmap_over_seeds():
  rng = np.random.default_rng(3)
  c, p = 6, 8
  flat = np.stack([two_groups(rng, c, p), two_groups(rng, c, p)])
  flat0 = np.zeros((2, p), np.float32)
  n = rng.integers(1, 100, size=(2, c)).astype(np.float32)
  active = np.stack([np.ones(c, bool), random_active(rng, c)])
  cluster = np.zeros((2, c), np.int32)
  keys = jax.random.split(jax.random.PRNGKey(1), 2)

  @jax.jit
  @jax.vmap
  def one_seed(key, flat, flat0, n, active, cluster):
    a = baselines.pfedgraph_graph(flat, flat0, n, active, 0.8)
    xi = baselines.fedamp_weights(flat, active)
    new = baselines.cfl_split(flat, cluster, active)
    chosen = baselines.fedfomo_sample(key, jnp.ones((c, c)), 2, active)
    return a, xi, new, chosen

  out = one_seed(keys, flat, flat0, n, active, cluster)
  for s in range(2):
    np.testing.assert_allclose(np.asarray(out[0][s]), np.asarray(graph(flat[s], flat0[s], n[s], active[s], 0.8)),
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1][s]), np.asarray(amp_weights(flat[s], active[s])), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(out[2][s]), np.asarray(split(flat[s], cluster[s], active[s])))
    np.testing.assert_array_equal(np.asarray(out[3][s]), np.asarray(sample(keys[s], jnp.ones((c, c)), 2, active[s])))


@SOME
@given(seed=SEEDS)
def test_fedfomo_step_matches_a_loop_and_reverts(seed):
  """The iPFL authors' FedFomo round (baselines.fedfomo_step): weights against the start model, the client's own
  trained model among the candidates, a row without a positive weight back at the start."""
  rng = np.random.default_rng(seed)
  c, p = 6, 5
  start = rng.normal(size=(c, p)).astype(np.float32)
  flat = (start + rng.normal(size=(c, p)) * 0.5).astype(np.float32)
  start_loss = rng.uniform(0.5, 2.0, size=c).astype(np.float32)
  cand = rng.uniform(0.3, 2.2, size=(c, c)).astype(np.float32)
  cand[0] = start_loss[0] + 1.0  # client 0: nobody helps → reverts to its start
  chosen = rng.random((c, c)) < 0.5
  np.fill_diagonal(chosen, False)
  w, new = jax.jit(baselines.fedfomo_step)(start, flat, start_loss, cand, chosen)
  w, new = np.asarray(w, np.float64), np.asarray(new, np.float64)
  for i in range(c):
    raw = np.zeros(c)
    for j in range(c):
      if chosen[i, j] or i == j:
        dist = np.linalg.norm(flat[j].astype(np.float64) - start[i])
        raw[j] = max(float(start_loss[i]) - float(cand[i, j]), 0.0) / dist if dist > 0 else 0.0
    want_w = raw / raw.sum() if raw.sum() > 0 else raw
    np.testing.assert_allclose(w[i], want_w, rtol=1e-5, atol=1e-6)
    want = start[i] + (want_w[:, None] * (flat.astype(np.float64) - start[i])).sum(0)
    np.testing.assert_allclose(new[i], want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(w[0], 0.0)
  np.testing.assert_allclose(new[0], start[0], atol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_prox_pull_trace_matches_a_plain_loop(lam):
  # benchmarks/ipfl_prox_pull.py (docs/IPFL.md §7, Ditto beside a free rider): its scanned trace equals a Python
  # loop of value_and_grad + optax steps on CE + λ/2 ‖θ − center‖², read before each update
  import optax
  script = load_benchmark("ipfl_prox_pull")
  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.zeros((3,), jnp.float32)}
  center = {"w": jnp.ones((4, 3), jnp.float32), "b": jnp.ones((3,), jnp.float32)}
  bx = jnp.asarray(rng.normal(size=(6, 5, 4)), jnp.float32)
  by = jnp.asarray(rng.integers(0, 3, (6, 5)), jnp.int32)

  def loss(p, x, y):
    logits = x @ p["w"] + p["b"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y)), logits

  opt = optax.chain(optax.add_decayed_weights(1e-5), optax.sgd(0.05, momentum=0.9))
  trace = jax.device_get(jax.jit(lambda p: script.trace_steps(loss, opt, p, center, bx, by, lam))(params))
  p, s = params, opt.init(params)
  for k in range(6):
    def objective(q):
      ce, logits = loss(q, bx[k], by[k])
      pull = sum(jnp.sum((q[n] - center[n]) ** 2) for n in ("w", "b"))
      return ce + lam / 2 * pull, (ce, jnp.max(jnp.abs(logits)))
    (value, (ce, logit)), g = jax.value_and_grad(objective, has_aux=True)(p)
    u, s = opt.update(g, s, p)
    p = optax.apply_updates(p, u)
    dist = np.sqrt(sum(float(jnp.sum((p[n] - center[n]) ** 2)) for n in ("w", "b")))
    np.testing.assert_allclose(trace["loss"][k], value, rtol=1e-5)
    np.testing.assert_allclose(trace["ce"][k], ce, rtol=1e-5)
    np.testing.assert_allclose(trace["logit"][k], logit, rtol=1e-5)
    np.testing.assert_allclose(trace["grad"][k], optax.global_norm(g), rtol=1e-5)
    np.testing.assert_allclose(trace["dist"][k], dist, rtol=1e-5)
  assert script.first_nonfinite(trace) == 0


def test_prox_pull_first_nonfinite_is_one_based_and_looks_at_every_series():
  script = load_benchmark("ipfl_prox_pull")
  finite = {"loss": np.ones(4), "ce": np.ones(4)}
  assert script.first_nonfinite(finite) == 0
  assert script.first_nonfinite(dict(finite, ce=np.array([1.0, 1.0, np.inf, np.nan]))) == 3
  assert script.first_nonfinite(dict(finite, loss=np.array([np.nan, 1.0, 1.0, 1.0]))) == 1
