"""ABPS pieces against their definitions (paper 000; SPEC §3.2)."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_sim.algorithms.abps import goal_filter, posterior, shapley, topology


# --- Shapley -------------------------------------------------------------------------------------

def brute_force_shapley(u, k):
  """Definition: average marginal contribution over all k! orders."""
  masks = shapley.subset_masks(k)
  index = {tuple(m): s for s, m in enumerate(masks)}
  phi = np.zeros(k)
  for perm in itertools.permutations(range(k)):
    cur = [False] * k
    for j in perm:
      before = u[index[tuple(cur)]]
      cur[j] = True
      phi[j] += u[index[tuple(cur)]] - before
  return phi / math.factorial(k)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.data())
def test_exact_shapley_matches_enumeration_and_is_efficient(k, data):
  u = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=2 ** k, max_size=2 ** k)))
  phi = np.asarray(shapley.exact_shapley(jnp.asarray(u, jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)))
  np.testing.assert_allclose(phi, brute_force_shapley(u, k), atol=1e-5)
  assert phi.sum() == pytest.approx(u[-1] - u[0], abs=1e-5)  # efficiency: Σφ = U(P) − U(∅)


def test_shapley_symmetry_and_null_player():
  k = 3
  masks = shapley.subset_masks(k)
  # Players 0 and 1 symmetric (utility depends on how many of them are in), player 2 null.
  u = np.array([0.1 * (m[0] + m[1]) ** 2 for m in masks], np.float32)
  phi = np.asarray(shapley.exact_shapley(jnp.asarray(u)))
  assert phi[0] == pytest.approx(phi[1]) and phi[2] == pytest.approx(0.0, abs=1e-7)


def test_tmc_is_close_to_exact_on_small_coalitions():
  k = 4
  rng = np.random.default_rng(0)
  u = rng.normal(size=2 ** k).astype(np.float32)
  exact = brute_force_shapley(u, k)
  masks = shapley.subset_masks(k)
  index = {tuple(m): s for s, m in enumerate(masks)}
  perms, prefix = shapley.tmc_permutation_prefixes(jax.random.key(0), k, 4000)
  pu = np.array([[u[index[tuple(p)]] for p in row] for row in np.asarray(prefix)], np.float32)
  est = np.asarray(shapley.tmc_shapley(perms, jnp.asarray(pu)))
  np.testing.assert_allclose(est, exact, atol=0.06)
  # Each permutation's marginals sum to U(all) − U(∅), so the estimate is efficient too.
  assert est.sum() == pytest.approx(u[-1] - u[0], abs=1e-4)


# --- posterior -----------------------------------------------------------------------------------

def test_ucb_and_beta_update_hand_values():
  alpha, beta, n = jnp.array([[1.0, 3.0]]), jnp.array([[1.0, 1.0]]), jnp.array([[0.0, 3.0]])
  ucb = posterior.ucb_scores(alpha, beta, n, 4, math.sqrt(2))
  np.testing.assert_allclose(np.asarray(ucb), [[0.5 + math.sqrt(2) * math.sqrt(2 * math.log(4) / 1),
                                                0.75 + math.sqrt(2) * math.sqrt(2 * math.log(4) / 4)]], rtol=1e-6)
  # Round 1: log 1 = 0, the bonus vanishes.
  np.testing.assert_allclose(np.asarray(posterior.ucb_scores(alpha, beta, n, 1, 1.4)), [[0.5, 0.75]])
  phi_bar = posterior.clip_utility(jnp.array([[0.05, -0.3]]))
  np.testing.assert_allclose(np.asarray(phi_bar), [[0.75, 0.0]])
  a, b, m = posterior.beta_update(alpha, beta, n, phi_bar, jnp.array([[True, False]]))
  np.testing.assert_allclose(np.asarray(a), [[1.75, 3.0]])
  np.testing.assert_allclose(np.asarray(b), [[1.25, 1.0]])
  np.testing.assert_allclose(np.asarray(m), [[1.0, 3.0]])


def test_posterior_mean_matches_closed_form():
  """After K observations the posterior mean is (α0 + Σφ̄)/(α0 + β0 + K) (Theorem 1's µ̂_K)."""
  rng = np.random.default_rng(1)
  obs = rng.uniform(size=25).astype(np.float32)
  a, b, n = jnp.ones((1, 1)), jnp.ones((1, 1)), jnp.zeros((1, 1))
  for o in obs:
    a, b, n = posterior.beta_update(a, b, n, jnp.full((1, 1), o), jnp.ones((1, 1), bool))
  assert float((a / (a + b))[0, 0]) == pytest.approx((1 + obs.sum()) / (2 + 25), rel=1e-5)


# --- goal filter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("goal", ["homogeneity", "diversity", "alignment"])
def test_goal_filter_keeps_a_quarter_of_ordered_pairs(goal):
  meta = jax.random.normal(jax.random.key(0), (60, 15))
  mask = np.asarray(goal_filter.candidate_mask(meta, goal, 0.25))
  assert not mask.diagonal().any()
  assert abs(mask.sum() / (60 * 59) - 0.25) < 0.01


def test_goal_scores_definitions():
  v = jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
  np.testing.assert_allclose(np.asarray(goal_filter.goal_scores(v, "homogeneity"))[0], [1, 1, 0], atol=1e-6)
  np.testing.assert_allclose(np.asarray(goal_filter.goal_scores(v, "diversity"))[0], [-1, -1, 0], atol=1e-6)
  np.testing.assert_allclose(np.asarray(goal_filter.goal_scores(v, "alignment"))[0], [0, -1, -1], atol=1e-6)
  assert np.asarray(goal_filter.candidate_mask(v, "none")).sum() == 6


# --- propose–reject ------------------------------------------------------------------------------

_propose_reject = jax.jit(topology.propose_reject)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 5, 12]), st.integers(1, 4), st.floats(0.0, 1.0), st.integers(0, 2 ** 30))
def test_propose_reject_invariants(c, kappa, tau, seed):
  rng = np.random.default_rng(seed)
  ucb = jnp.asarray(rng.uniform(size=(c, c)), jnp.float32)
  cand = jnp.asarray((rng.uniform(size=(c, c)) < 0.6) & ~np.eye(c, dtype=bool))
  adj = np.asarray(_propose_reject(jax.random.key(seed), ucb, cand, jnp.int32(kappa), jnp.float32(tau),
                                   jnp.float32(0.1)))
  u, cn = np.asarray(ucb), np.asarray(cand)
  assert (adj == adj.T).all() and not adj.diagonal().any()  # symmetric, no self-partner
  assert (adj.sum(1) <= kappa).all()  # |P_i| ≤ κ
  for i, j in zip(*np.nonzero(adj)):
    # Each edge was proposed by one side to a candidate and accepted by the other (UCB ≥ τ_acc).
    assert (cn[i, j] and u[j, i] >= tau) or (cn[j, i] and u[i, j] >= tau)


def test_propose_reject_everyone_rests_when_tau_is_above_every_ucb():
  ucb = jax.random.uniform(jax.random.key(0), (20, 20))
  cand = ~jnp.eye(20, dtype=bool)
  adj = topology.propose_reject(jax.random.key(1), ucb, cand, 3, 1.5, 0.1)
  assert not np.asarray(adj).any()


def test_propose_reject_greedy_order_without_exploration():
  # Centers 0 and 1 rank each other first and accept everyone: with κ = 1 they pair up.
  ucb = jnp.array([[0, 0.9, 0.6, 0.6], [0.9, 0, 0.6, 0.6], [0.6, 0.6, 0, 0.9], [0.6, 0.6, 0.9, 0]])
  adj = np.asarray(topology.propose_reject(jax.random.key(0), ucb, ~jnp.eye(4, dtype=bool), 1, 0.5, 0.0))
  assert adj[0, 1] and adj[2, 3] and adj.sum() == 4


def test_epsilon_swap_frequency():
  ucb_row = jnp.arange(10.0)
  cand = jnp.ones(10, bool)
  tops = jax.vmap(lambda k: topology.ranked_candidates(k, ucb_row, cand, 0.3)[0])(jax.random.split(jax.random.key(0), 4000))
  # Top stays 9 unless swapped with another candidate: P(top ≠ 9) = ε·9/10.
  assert abs(float(jnp.mean(tops != 9)) - 0.3 * 0.9) < 0.03


def test_partner_slots():
  adj = jnp.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]], bool)
  idx, valid = topology.partner_slots(adj, 2)
  np.testing.assert_array_equal(np.asarray(valid), [[1, 1], [1, 0], [1, 0]])
  assert set(np.asarray(idx)[0].tolist()) == {1, 2} and np.asarray(idx)[1, 0] == 0
