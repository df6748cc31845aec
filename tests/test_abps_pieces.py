"""ABPS pieces against their definitions (paper 000; SPEC §3.2)."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from fedjax_sim.algorithms.abps import goal_filter, pool, posterior, shapley, topology


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


@pytest.mark.parametrize("goal", ["homogeneity", "diversity", "alignment"])
def test_sampled_threshold_is_close_to_the_exact_quantile(goal):
  meta_z = goal_filter.zscore_metadata(jax.random.normal(jax.random.key(1), (300, 15)))
  feat = goal_filter.goal_features(meta_z, goal)
  f = np.array(goal_filter.goal_scores(meta_z, goal))
  exact = float(goal_filter.calibrate_threshold(jnp.asarray(f), 0.25))
  sampled = float(goal_filter.sampled_threshold(jax.random.key(2), feat, goal, 0.25, num_samples=1 << 16))
  off = f[~np.eye(300, dtype=bool)]
  # Close in rank: the sampled τ_sim keeps 25% ± 1% of the ordered pairs.
  assert abs(np.mean(off >= sampled) - 0.25) < 0.01 and abs(sampled - exact) < 0.05


# --- candidate pools ------------------------------------------------------------------------------

@pytest.mark.parametrize("goal", ["homogeneity", "diversity", "alignment"])
def test_blockwise_top_pool_equals_the_dense_top_m(goal):
  c, m = 37, 5
  meta_z = goal_filter.zscore_metadata(jax.random.normal(jax.random.key(0), (c, 15)))
  index, f = pool.top_pool(goal_filter.goal_features(meta_z, goal), goal, m, block_rows=8)  # 5 blocks, padded
  dense = np.array(goal_filter.goal_scores(meta_z, goal))
  np.fill_diagonal(dense, -np.inf)
  top = np.sort(np.argsort(-dense, axis=1, kind="stable")[:, :m], axis=1)
  np.testing.assert_array_equal(np.asarray(index), top)
  np.testing.assert_allclose(np.asarray(f), np.take_along_axis(dense, top, 1), atol=1e-6)


def test_random_pool_draws_distinct_other_centers():
  index = np.asarray(pool.random_pool(jax.random.key(3), 40, 6))
  assert index.shape == (40, 6) and (np.diff(index, axis=1) > 0).all()  # distinct, ascending
  assert not (index == np.arange(40)[:, None]).any() and index.min() >= 0 and index.max() < 40


def test_random_pool_picks_every_center_uniformly():
  """Uniform over the other centers: counts of each center over R = 10 independent 400 × 8 pools.

  Under uniformity center j lies in row i's pool (i ≠ j) with probability 8/399, independently over rows
  and pools, so its count is Binomial(10·399, 8/399): mean E = 80, variance 80·391/399 < E. Pearson's
  χ² = Σ_j (count_j − E)²/E then has mean below 399 and is stochastically smaller than χ²(399), so the
  χ²(399) 0.999 quantile (492.0, scipy.stats.chi2.ppf; scipy ships with jax) is a conservative critical
  value. A count of 40 or less has probability ~1e-7 per center (Poisson(80) tail).
  """
  c, m, r = 400, 8, 10
  pools = jax.jit(jax.vmap(lambda k: pool.random_pool(k, c, m)))(jax.random.split(jax.random.key(4), r))
  counts = np.bincount(np.asarray(pools).ravel(), minlength=c)
  assert counts.shape == (c,) and counts.sum() == r * c * m
  assert counts.min() > 40  # every center is picked, about as often as any other
  expected = r * m
  stat = float(((counts - expected) ** 2 / expected).sum())
  assert stat < stats.chi2.ppf(0.999, c - 1), stat


@pytest.mark.parametrize("make", ["full", "random", "top"])
def test_reverse_index_finds_each_center_in_its_peers_pools(make):
  c = 23
  if make == "full":
    index = pool.full_pool(c)
  elif make == "random":
    index = pool.random_pool(jax.random.key(5), c, 4)
  else:
    meta_z = goal_filter.zscore_metadata(jax.random.normal(jax.random.key(6), (c, 15)))
    index, _ = pool.top_pool(goal_filter.goal_features(meta_z, "homogeneity"), "homogeneity", 4)
  index = np.asarray(index)
  rev = np.asarray(pool.reverse_index(jnp.asarray(index)))
  for i in range(c):
    for m, j in enumerate(index[i]):
      row = index[j].tolist()
      assert rev[i, m] == (row.index(i) if i in row else -1)
  if make == "full":
    assert (rev >= 0).all()


@pytest.mark.parametrize("goal", ["none", "homogeneity"])
def test_full_pool_is_the_candidate_mask_without_its_diagonal(goal):
  c = 9
  meta = jax.random.normal(jax.random.key(7), (c, 15))
  mask = np.asarray(goal_filter.candidate_mask(meta, goal, 0.25))
  for size in (0, c - 1, c + 5):
    p = pool.build_pool(jax.random.key(0), meta, goal, 0.25, size)
    index = np.asarray(p.index)
    np.testing.assert_array_equal(index, [[j for j in range(c) if j != i] for i in range(c)])
    np.testing.assert_array_equal(np.asarray(p.valid), mask[np.arange(c)[:, None], index])


def test_pooled_goal_filter_keeps_the_top_m_and_flags_those_above_tau():
  c, m = 30, 4
  meta = jax.random.normal(jax.random.key(8), (c, 15))
  p = pool.build_pool(jax.random.key(0), meta, "homogeneity", 0.25, m)
  f = np.array(goal_filter.goal_scores(goal_filter.zscore_metadata(meta), "homogeneity"))
  tau = float(goal_filter.calibrate_threshold(jnp.asarray(f), 0.25))  # exact at this size
  index, valid = np.asarray(p.index), np.asarray(p.valid)
  assert index.shape == (c, m) and valid.shape == (c, m)
  np.fill_diagonal(f, -np.inf)
  tie = np.abs(f - tau) < 1e-6  # the blockwise f may differ from the dense one in the last bit
  f_pool = np.take_along_axis(f, index, 1)
  clear = ~np.take_along_axis(tie, index, 1)
  np.testing.assert_array_equal(valid[clear], (f_pool >= tau)[clear])
  # The flagged pool members are each center's best candidates: C_i ∩ pool_i = top-M of C_i.
  for i in range(c):
    if not tie[i].any():
      assert valid[i].sum() == min(m, (f[i] >= tau).sum())


# --- propose–reject ------------------------------------------------------------------------------

_random_pool = jax.jit(pool.random_pool, static_argnums=(1, 2))
_reverse_index = jax.jit(pool.reverse_index)
_match = jax.jit(topology.match_proposals, static_argnums=5)
_propose_reject = jax.jit(topology.propose_reject, static_argnums=7)
SHAPES = [(2, 1), (4, 3), (12, 11), (5, 2), (12, 3)]  # (C, M): every other center, or M random ones


def random_pool_case(rng, c, m, p_cand=0.6):
  """A pool (every other center when m = c − 1, else m random ones), random candidate flags and UCBs."""
  key = jax.random.key(int(rng.integers(2 ** 30)))
  index = pool.full_pool(c) if m == c - 1 else _random_pool(key, c, m)
  p = pool.CandidatePool(index=index, valid=jnp.asarray(rng.uniform(size=(c, m)) < p_cand),
                         rev=_reverse_index(index))
  return p, jnp.asarray(rng.uniform(size=(c, m)), jnp.float32)


def reference_match(proposers, ranked, index, valid, accepts, kappa):
  """Plain-Python propose–reject (Alg. 1 lines 13–21): P_i as sets."""
  partners = [set() for _ in range(len(index))]
  for i in proposers:
    for m in ranked[i]:
      if len(partners[i]) >= kappa:
        break
      j = index[i][m]
      if valid[i][m] and accepts[i][m] and len(partners[j]) < kappa and j not in partners[i]:
        partners[i].add(j)
        partners[j].add(i)
  return partners


def check_slots(out, index, c):
  """Slots hold P_i ascending with empty slots after (pointing at the center itself), and each
  partner's position in the center's own pool (−1 outside it)."""
  idx, slot, valid, deg = (np.asarray(a) for a in (out.index, out.pool_slot, out.valid, out.degree))
  np.testing.assert_array_equal(valid, np.arange(idx.shape[1])[None, :] < deg[:, None])
  assert (np.where(valid, 0, idx - np.arange(c)[:, None]) == 0).all() and (slot[~valid] == -1).all()
  sets = []
  for i in range(c):
    mine = idx[i, valid[i]]
    assert (np.diff(mine) > 0).all()
    row = index[i].tolist()
    for j, s in zip(mine, slot[i, valid[i]]):
      assert s == (row.index(j) if j in row else -1)
    sets.append(set(mine.tolist()))
  return sets


def unmatched_pairs(sets, index, valid, accepts, kappa):
  """Pairs that could still form after the walk: maximality of propose–reject (SPEC §3.2 step 5).

  (i, j = pool[i, m]) could still pair iff j ∈ C_i (``valid[i, m]``: i may propose to j), j would accept i
  (``accepts[i, m]``: j's own UCB on i ≥ τ_acc), |P_i| < κ and |P_j| < κ at the end, and j ∉ P_i.
  The protocol leaves none, whatever the proposer order and the ε-swaps: every center walks its list
  once; when i walked, |P_j| was at most its final value (< κ) and j accepted, so i skipped j only if
  it had already filled κ slots, and then |P_i| = κ at the end.
  """
  c, m = index.shape
  return [(i, int(index[i, s])) for i in range(c) for s in range(m)
          if valid[i, s] and accepts[i, s] and len(sets[i]) < kappa and len(sets[index[i, s]]) < kappa
          and index[i, s] not in sets[i]]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SHAPES), st.integers(1, 4), st.integers(0, 2 ** 30))
def test_match_equals_a_plain_python_loop(cm, kappa, seed):
  c, m = cm
  rng = np.random.default_rng(seed)
  p, _ = random_pool_case(rng, c, m)
  accepts = rng.uniform(size=(c, m)) < 0.7
  proposers = rng.permutation(c)
  ranked = np.stack([rng.permutation(m) for _ in range(c)]).astype(np.int32)
  out = _match(jnp.asarray(proposers), jnp.asarray(ranked), p, jnp.asarray(accepts), jnp.int32(kappa), 4)
  index, valid = np.asarray(p.index), np.asarray(p.valid)
  sets = check_slots(out, index, c)
  assert sets == reference_match(proposers, ranked, index.tolist(), valid, accepts, kappa)
  assert not unmatched_pairs(sets, index, valid, accepts, kappa)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SHAPES), st.integers(1, 4), st.floats(0.0, 1.0, allow_subnormal=False),
       st.floats(0.0, 1.0, allow_subnormal=False), st.sampled_from([0.0, 0.1, 1.0]), st.integers(0, 2 ** 30))
def test_propose_reject_invariants(cm, kappa, tau, prior, epsilon, seed):
  """Symmetric, no self-partner, |P_i| ≤ κ, every edge proposed and accepted, and maximal.

  The shapes come from the five of ``SHAPES`` (one compile each); each example draws data, not shapes.
  τ_acc and the prior are normal floats: XLA on CPU flushes subnormals to zero, so a τ_acc of 1e-45
  compares as 0 there and not in numpy.
  """
  c, m = cm
  rng = np.random.default_rng(seed)
  p, ucb = random_pool_case(rng, c, m)
  out = _propose_reject(jax.random.key(seed), ucb, p, jnp.int32(kappa), jnp.float32(tau), jnp.float32(epsilon),
                        jnp.float32(prior), 4)
  index, valid, u = np.asarray(p.index), np.asarray(p.valid), np.asarray(ucb)
  sets = check_slots(out, index, c)

  def ucb_on(j, i):  # j's UCB on i: its belief if i is in j's pool, else the prior's
    row = index[j].tolist()
    return u[j, row.index(i)] if i in row else np.float32(prior)

  def proposable(i, j):  # j ∈ pool_i and j ∈ C_i
    row = index[i].tolist()
    return j in row and valid[i, row.index(j)]

  for i in range(c):
    assert i not in sets[i] and len(sets[i]) <= kappa  # no self-partner, |P_i| ≤ κ
    for j in sets[i]:
      assert i in sets[j]  # symmetric
      # Each edge was proposed by one side to a valid candidate and accepted by the other (UCB ≥ τ_acc).
      assert (proposable(i, j) and ucb_on(j, i) >= np.float32(tau)) or \
             (proposable(j, i) and ucb_on(i, j) >= np.float32(tau))
  # Maximal: no pair that the rules allow is left unformed (j's acceptance of i recomputed here).
  accepts = np.array([[ucb_on(int(index[i, s]), i) >= np.float32(tau) for s in range(m)] for i in range(c)])
  assert not unmatched_pairs(sets, index, valid, accepts, kappa)


def test_maximality_check_catches_matchers_that_stop_short():
  """Positive control for :func:`unmatched_pairs`: on a case where everyone accepts everyone, a matcher
  that pairs no one, and one whose proposers give up after their first-ranked peer, leave formable pairs."""
  c, m, kappa = 12, 11, 2
  p, _ = random_pool_case(np.random.default_rng(0), c, m, p_cand=1.0)
  index, valid = np.asarray(p.index), np.asarray(p.valid)
  accepts = np.ones((c, m), bool)
  proposers = np.random.default_rng(1).permutation(c)
  ranked = np.tile(np.arange(m, dtype=np.int32), (c, 1))
  full = reference_match(proposers, ranked, index.tolist(), valid, accepts, kappa)
  assert not unmatched_pairs(full, index, valid, accepts, kappa)
  assert unmatched_pairs([set() for _ in range(c)], index, valid, accepts, kappa)
  # Everyone ranks the lowest index first: once centers 0 and 1 are full, the others give up at once.
  short = reference_match(proposers, ranked[:, :1], index.tolist(), valid, accepts, kappa)
  assert unmatched_pairs(short, index, valid, accepts, kappa)
  out = _match(jnp.asarray(proposers), jnp.asarray(ranked), p, jnp.asarray(accepts), jnp.int32(kappa), 4)
  assert check_slots(out, index, c) == full


@pytest.mark.parametrize("m", [11, 3])
def test_propose_reject_everyone_rests_when_tau_is_above_every_ucb(m):
  p, ucb = random_pool_case(np.random.default_rng(0), 12, m, p_cand=1.0)
  out = _propose_reject(jax.random.key(1), ucb, p, jnp.int32(3), jnp.float32(1.5), jnp.float32(0.1),
                        jnp.float32(1.2), 4)
  assert not np.asarray(out.valid).any() and not np.asarray(out.degree).any()


def test_propose_reject_greedy_order_without_exploration():
  # Centers 0 and 1 rank each other first and accept everyone: with κ = 1 they pair up.
  full = np.array([[0, 0.9, 0.6, 0.6], [0.9, 0, 0.6, 0.6], [0.6, 0.6, 0, 0.9], [0.6, 0.6, 0.9, 0]])
  index = pool.full_pool(4)
  ucb = jnp.asarray(np.take_along_axis(full, np.asarray(index), 1), jnp.float32)
  p = pool.CandidatePool(index=index, valid=jnp.ones((4, 3), bool), rev=_reverse_index(index))
  out = _propose_reject(jax.random.key(0), ucb, p, jnp.int32(1), jnp.float32(0.5), jnp.float32(0.0),
                        jnp.float32(0.5), 4)
  np.testing.assert_array_equal(np.asarray(out.index)[:, 0], [1, 0, 3, 2])
  np.testing.assert_array_equal(np.asarray(out.degree), [1, 1, 1, 1])


def test_receiver_uses_the_prior_for_proposers_outside_its_pool():
  # Center 0's pool is {1}; center 1's pool is {2}: 1 judges 0 by the prior's UCB.
  index = jnp.array([[1], [2], [0]], jnp.int32)
  p = pool.CandidatePool(index=index, valid=jnp.ones((3, 1), bool), rev=pool.reverse_index(index))
  ucb = jnp.array([[0.9], [0.2], [0.9]])
  np.testing.assert_array_equal(np.asarray(p.rev), [[-1], [-1], [-1]])
  np.testing.assert_array_equal(np.asarray(topology.receiver_acceptance(ucb, p, 0.5, 0.7)), [[True]] * 3)
  np.testing.assert_array_equal(np.asarray(topology.receiver_acceptance(ucb, p, 0.5, 0.3)), [[False]] * 3)


def test_epsilon_swap_frequency():
  """SPEC §3.2 step 4: with probability ε the top swaps with a uniformly random candidate of C_i, the top
  itself included, so P(top ≠ 9) = ε·9/10 = 0.27 and each other candidate tops with ε/10 = 0.03.

  The other reading (a random *other* candidate) gives P = ε = 0.30. With N = 40,000 draws the sd of the
  frequency is sqrt(0.27·0.73/N) = 0.0022: the tolerance 0.01 is 4.5 sd, and the wrong reading lies
  0.03 away (13 sd), so it fails by 9 sd. The distribution of the top is checked by Pearson's χ² against
  (0.03 × 9, 0.73), df 9, at the χ²(9) 0.999 quantile (27.9).
  """
  n, eps = 40_000, 0.3
  ucb_row = jnp.arange(10.0)
  cand = jnp.ones(10, bool)
  tops = np.asarray(jax.jit(jax.vmap(lambda k: topology.ranked_candidates(k, ucb_row, cand, eps)[0]))(
      jax.random.split(jax.random.key(0), n)))
  assert abs(np.mean(tops != 9) - eps * 0.9) < 0.01
  counts = np.bincount(tops, minlength=10)
  expected = n * np.array([eps / 10] * 9 + [1 - eps * 0.9])
  assert ((counts - expected) ** 2 / expected).sum() < stats.chi2.ppf(0.999, 9)


@settings(max_examples=300, deadline=None)
@given(t=st.integers(1, 72), frac=st.floats(0.0, 1.0), mean=st.floats(0.0, 1.0))
def test_no_belief_can_fall_below_tau_acc_before_round_73(t, frac, mean):
  """A consequence of eq. 7 with SPEC's prior Beta(1, 1), γ = √2 and τ_acc = 0.5 (a table1 finding).
  After n ≤ t − 1 observations α ≥ 1 and α + β = n + 2, so UCB ≥ 1/(t + 1) + 2·sqrt(ln t / t), which
  stays ≥ 0.5 up to t = 72 (at t = 1 the prior's UCB is exactly 0.5). No receiver can reject a
  proposer for a low belief in a 50-round run: rests come only from partners that are full (κ)."""
  n = round(frac * (t - 1))
  alpha = 1.0 + mean * n  # Σ φ̄ ∈ [0, n]
  beta = 1.0 + n - mean * n
  ucb = posterior.ucb_scores(jnp.float32(alpha), jnp.float32(beta), jnp.float32(n), jnp.int32(t), math.sqrt(2.0))
  assert float(ucb) >= 0.5 - 1e-6


def test_a_belief_can_fall_below_tau_acc_from_round_73():
  t = 73  # a peer observed in every earlier round with φ̄ = 0: 1/74 + 2·sqrt(ln 73 / 73) = 0.498
  n = jnp.float32(t - 1)
  assert float(posterior.ucb_scores(jnp.float32(1.0), n + 1.0, n, jnp.int32(t), math.sqrt(2.0))) < 0.5
  assert float(posterior.ucb_scores(jnp.float32(1.0), n, n - 1, jnp.int32(t - 1), math.sqrt(2.0))) >= 0.5
