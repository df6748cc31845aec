"""ABPS's per-center Shapley switch (SPEC §3.2 step 7) and ABPS-X's momentum on resting centers (SPEC §3.3)."""
import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms.abps import shapley
from fedjax_sim.algorithms.abps.algorithm import stacked_models
from fedjax_sim.engine.local import local_train, make_client_update
from fedjax_sim.sweep import parse_sweep, structural_config
from fedjax_sim.tasks import binary_task
from tests.conftest import with_method
from tests.test_abps import BASE, fed, setup  # noqa: F401 (fed is a fixture)

# The tiny federation and the method set-up are test_abps.py's (``fed`` is its module-scoped fixture).


# --- item 12: exact Shapley per center on |P_i| ≤ 5, Monte Carlo above -----------------------------------


def set_utility(a, pair, members):
  """A non-additive coalition utility: sqrt of the members' weights, plus a bonus when both of ``pair`` are in."""
  members = set(members)
  return math.sqrt(sum(a[j] for j in members)) + (0.3 if set(pair) <= members else 0.0)


def permutation_shapley(a, pair, players):
  """Shapley by its definition: the mean marginal contribution over every order of ``players``."""
  phi = dict.fromkeys(players, 0.0)
  orders = list(itertools.permutations(players))
  for order in orders:
    for m, j in enumerate(order):
      phi[j] += set_utility(a, pair, order[:m + 1]) - set_utility(a, pair, order[:m])
  return {j: v / len(orders) for j, v in phi.items()}


def test_shapley_credit_is_exact_for_small_partner_sets_when_kappa_exceeds_five():
  """κ_max = 7, B = 8: a center with 3 partners (in scattered slots) or 5 gets the exact Shapley values
  (the permutation definition; efficiency Σφ = U(P) − U(∅)); a center with 6 or 7 gets the truncated
  Monte Carlo estimate over its B permutations; a resting center gets 0. Before issue 9 item 12 the
  switch was on κ_max, so every center here was credited by Monte Carlo."""
  k, e, b = 7, 5, 8
  rng = np.random.default_rng(0)
  slots_of = [[1, 3, 6], list(range(7)), [0, 1, 2, 3, 4], [0, 1, 2, 3, 5, 6], []]
  valid = np.zeros((len(slots_of), k), bool)
  for c, slots in enumerate(slots_of):
    valid[c, slots] = True
  a = rng.uniform(0.1, 1.0, size=(len(slots_of), k))
  pairs = [(1, 6), (2, 5), (0, 4), (3, 5), (0, 1)]
  masks, perms = shapley.credit_coalitions(jax.random.key(3), jnp.asarray(valid), e, b)
  masks, perms = np.asarray(masks), np.asarray(perms)
  assert masks.shape == (5, 2 ** e + b * (k + 1), k) and perms.shape == (5, b, k)
  # What a round evaluates: U_i of the aggregate of i with the coalition's partners (empty slots add nothing).
  u = np.array([[set_utility(a[c], pairs[c], np.nonzero(m & valid[c])[0]) for m in masks[c]]
                for c in range(len(slots_of))])
  full = shapley.full_coalition(k, e)
  assert masks[:, full].all()
  phi = np.asarray(shapley.shapley_credit(jnp.asarray(u, jnp.float32), jnp.asarray(perms), jnp.asarray(valid), e))
  for c, slots in enumerate(slots_of):
    if len(slots) <= e:  # exact: the definition, and efficiency
      want = np.zeros(k)
      for j, v in permutation_shapley(a[c], pairs[c], slots).items():
        want[j] = v
      np.testing.assert_allclose(phi[c], want, atol=2e-6)
      assert phi[c].sum() == pytest.approx(set_utility(a[c], pairs[c], slots) - set_utility(a[c], pairs[c], []),
                                           abs=2e-6)
    else:  # truncated Monte Carlo (tolerance 0): the mean marginal over the B sampled orders of the 7 slots
      want = np.zeros(k)
      for order in perms[c]:
        for m, j in enumerate(order):
          before = [s for s in order[:m] if valid[c, s]]
          after = [s for s in order[:m + 1] if valid[c, s]]
          want[j] += (set_utility(a[c], pairs[c], after) - set_utility(a[c], pairs[c], before)) / b
      np.testing.assert_allclose(phi[c], want, atol=2e-6)
      exact = permutation_shapley(a[c], pairs[c], slots)
      assert not np.allclose(phi[c][slots], [exact[j] for j in slots], atol=1e-3)  # it is an estimate
  # Positive control: Monte Carlo over the 3-partner center's permutations is not its exact value.
  tmc = np.asarray(shapley.tmc_shapley(jnp.asarray(perms[0]), jnp.asarray(
      u[0, 2 ** e:].reshape(b, k + 1), jnp.float32)))
  assert not np.allclose(tmc, phi[0], atol=1e-3)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_kappa_at_most_five_keeps_the_all_exact_program(k):
  """κ_max ≤ exact_shapley_max: the coalitions are the 2^κ subsets of every center's slots, no permutations,
  and the credit is exact_shapley's, bitwise (the Table 1 rows' program is unchanged)."""
  valid = jnp.asarray(np.random.default_rng(k).random((4, k)) < 0.6)
  masks, perms = shapley.credit_coalitions(jax.random.key(0), valid, 5, 8)
  assert perms is None
  np.testing.assert_array_equal(np.asarray(masks), np.broadcast_to(shapley.subset_masks(k), (4, 2 ** k, k)))
  assert shapley.full_coalition(k, 5) == 2 ** k - 1
  u = jax.random.uniform(jax.random.key(1), (4, 2 ** k))
  np.testing.assert_array_equal(np.asarray(shapley.shapley_credit(u, None, valid, 5)),
                                np.asarray(shapley.exact_shapley(u)))


def test_round_with_kappa_max_seven_credits_small_partner_sets_exactly(fed):
  """One round built for κ_max = 7 (TMC slots) but run at κ = 3 gives every center the credit of the
  all-exact κ_max = 3 program: same partners, same Beta updates (φ unclipped: φ range [−1, 1]), same
  models. Before the fix the κ_max = 7 program credited them by Monte Carlo."""
  wide, _, hyper, state7 = setup("abps", fed, kappa=7)
  narrow, _, _, state3 = setup("abps", fed, kappa=3)
  hyper = with_method(hyper, kappa=3, tau_acc=0.0, phi_min=-1.0, phi_max=1.0)
  s7, m7 = jax.jit(wide.round)(jax.random.key(4), state7, fed, hyper, jnp.int32(1))
  s3, m3 = jax.jit(narrow.round)(jax.random.key(4), state3, fed, hyper, jnp.int32(1))
  assert float(m7.mean_partners) == float(m3.mean_partners) > 2.0
  np.testing.assert_array_equal(np.asarray(s7.pulls), np.asarray(s3.pulls))
  credit = np.asarray(s3.alpha - 1.0)[np.asarray(s3.pulls) > 0]
  assert np.ptp(credit) > 1e-3  # the credits are not all alike (the check below has something to compare)
  np.testing.assert_allclose(np.asarray(s7.alpha), np.asarray(s3.alpha), atol=1e-6)
  np.testing.assert_allclose(np.asarray(s7.beta), np.asarray(s3.beta), atol=1e-6)
  for x, y in zip(jax.tree_util.tree_leaves(s7.params), jax.tree_util.tree_leaves(s3.params)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)


def test_kappa_sweep_may_straddle_the_exact_limit():
  """With the switch per center, a κ grid across exact_shapley_max is one program (the κ ≤ 5 points stay
  exact): the sweep no longer refuses it."""
  config = dataclasses.replace(BASE, methods=("abps",))
  sweep = parse_sweep(["kappa=2,6"], config)
  assert sweep.keys == ("abps.kappa",) and sweep.values == ((2, 6),)


# --- item 13: ABPS-X's momentum, and a resting center ------------------------------------------------------


def flat_rows(tree, c):
  if not isinstance(tree, dict):  # ABPS's state holds flat [C, P] models
    return np.asarray(tree)
  return np.stack([np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: a[i], tree))[0]) for i in range(c)])


@pytest.fixture(scope="module")
def abps_x(fed):
  """ABPS-X on the tiny federation, from a state with a non-zero velocity, and its compiled round."""
  algorithm, model, hyper, state = setup("abps_x", fed)
  velocity = jax.tree_util.tree_map(lambda a: 0.01 * jax.random.normal(jax.random.key(9), a.shape), state.velocity)
  return algorithm, model, with_method(hyper, tau_acc=0.0), state.replace(velocity=velocity), \
      jax.jit(algorithm.round)


def test_abps_x_momentum_and_resting_centers(fed, abps_x):
  """ABPS-X (κ = 1, 2-layer head, bf16 wire, β = 0.5) from a state with a non-zero velocity v, one round,
  against a hand computation from the local models θ (local_train, the round's training key):
  - a center with partner j: agg = θ_i on the head, (n_i θ_i + n_j bf16(θ_j)) / (n_i + n_j) on the body;
    v ← 0.5 v + (agg − θ_i); θ_i ← θ_i + v;
  - a resting center (P_i = ∅): θ_i ← its local model, v unchanged (Alg. 1 line 22; Lemma 1). Before
    issue 9 item 13 it moved by 0.5 v, what earlier partners had sent."""
  algorithm, model, hyper, state, step = abps_x
  assert float(hyper.method.momentum) == 0.5
  c = fed.num_clients
  velocity = state.velocity
  key = jax.random.key(2)
  new, metrics = step(key, state, fed, hyper, jnp.int32(1))
  k_train = jax.random.split(key, 3)[0]
  local = jax.jit(lambda kk, p: local_train(make_client_update(binary_task(model), batch_size=32, epochs=1), kk, p,
                                            fed, hyper=hyper))(k_train, stacked_models(model, state.params))
  theta, v0 = flat_rows(local.params, c), flat_rows(velocity, c)
  got, v1 = flat_rows(new.params, c), flat_rows(new.velocity, c)
  template = jax.tree_util.tree_map(lambda a: a[0], stacked_models(model, state.params))
  sent_layer = {name: jax.tree_util.tree_map(lambda a, sent=name == "hidden_0": np.full(a.shape, sent), layer)
                for name, layer in template.items()}
  body = np.asarray(ravel_pytree(sent_layer)[0])
  assert 0 < body.sum() < body.size  # hidden_0 is sent; hidden_1 and head are the 2-layer personal head
  seen = np.asarray(new.pulls - state.pulls)
  partner = np.where(seen.any(1), np.asarray(state.pool.index)[np.arange(c), seen.argmax(1)], -1)
  rest = partner < 0
  assert rest.any() and (~rest).any()  # both cases occur in this round
  assert float(metrics.rest_fraction) == pytest.approx(rest.mean())
  n = np.asarray(fed.n_train, np.float64)
  for i in range(c):
    if rest[i]:
      np.testing.assert_allclose(got[i], theta[i], atol=1e-6)
      np.testing.assert_array_equal(v1[i], v0[i])
      assert np.abs(v0[i]).max() > 1e-3  # so the old rule (θ + 0.5 v) would have moved it visibly
    else:
      j = partner[i]
      assert partner[j] == i  # κ = 1: a pair
      sent = np.asarray(jnp.asarray(theta[j]).astype(jnp.bfloat16).astype(jnp.float32), np.float64)
      agg = np.where(body, (n[i] * theta[i] + n[j] * sent) / (n[i] + n[j]), theta[i])
      v = 0.5 * v0[i] + (agg - theta[i])
      np.testing.assert_allclose(v1[i], v, atol=1e-6)
      np.testing.assert_allclose(got[i], theta[i] + v, atol=1e-6)


def test_momentum_stage_at_zero_is_the_round_without_it(fed, abps_x):
  """β = 0: ABPS-X's round with the momentum stage and the round built without it (registry: abps.momentum = 0)
  give the same models (the stage's masks change rounding only); the stage keeps a resting center's v."""
  _, _, hyper, state, step = abps_x
  without, _, hyper0, _ = setup("abps_x", fed, momentum=0.0)
  hyper = with_method(hyper, momentum=0.0)
  assert float(hyper0.method.momentum) == 0.0
  key = jax.random.key(2)
  a, ma = step(key, state, fed, hyper, jnp.int32(1))
  b, mb = jax.jit(without.round)(key, state, fed, hyper, jnp.int32(1))
  assert 0 < float(ma.rest_fraction) == float(mb.rest_fraction) < 1
  for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)
  rest = np.asarray((a.pulls - state.pulls).sum(1) == 0)
  v_kept = flat_rows(a.velocity, fed.num_clients)[rest]
  np.testing.assert_array_equal(v_kept, flat_rows(state.velocity, fed.num_clients)[rest])
  assert np.abs(flat_rows(b.velocity, fed.num_clients)[rest]).max() < 1e-6  # without the stage: v = agg − θ ≈ 0


def test_a_momentum_sweep_builds_the_stage_for_its_largest_beta():
  config = dataclasses.replace(BASE, methods=("abps",))
  # The full key: since issue 10 the learner has a momentum too (SGD's), so the short name is ambiguous.
  sweep = parse_sweep(["abps.momentum=0,0.5"], config)
  assert structural_config(config, sweep).abps.momentum == 0.5
  assert structural_config(config, parse_sweep(["epsilon=0.05,0.1"], config)).abps.momentum == 0.0
