"""AUROC in JAX against a brute-force reference (ties count half), and mean-over-defined."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from fedjax_sim.metrics import auroc, batched_auroc, cummax_int, fedavg_reference_bytes, mean_defined, p2p_round_bytes, star_round_bytes


def reference_auroc(scores, labels):
  """Definition: P(s_pos > s_neg) + ½ P(s_pos = s_neg) over all (positive, negative) pairs."""
  pos = [s for s, l in zip(scores, labels) if l == 1]
  neg = [s for s, l in zip(scores, labels) if l == 0]
  if not pos or not neg:
    return float("nan")
  wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
  return wins / (len(pos) * len(neg))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1), st.booleans()), min_size=1, max_size=40))
def test_auroc_matches_pairwise_definition_with_ties_and_mask(rows):
  scores = np.array([r[0] for r in rows], np.float32) / 3.0  # few distinct values: many ties
  labels = np.array([r[1] for r in rows])
  mask = np.array([r[2] for r in rows])
  got = float(auroc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(mask)))
  want = reference_auroc(scores[mask], labels[mask])
  if np.isnan(want):
    assert np.isnan(got)
  else:
    assert abs(got - want) < 1e-6


def test_auroc_random_continuous_scores():
  rng = np.random.default_rng(0)
  for _ in range(5):
    s = rng.normal(size=300).round(1)  # rounding creates ties
    y = (rng.random(300) < 0.2).astype(int)
    got = float(auroc(jnp.asarray(s), jnp.asarray(y), jnp.ones(300, bool)))
    assert abs(got - reference_auroc(s, y)) < 1e-5


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_cummax_int_is_the_running_maximum(n, rows, seed):
  x = np.random.default_rng(seed).integers(0, 1000, (rows, n)).astype(np.int32)
  got = np.asarray(cummax_int(jnp.asarray(x)))
  np.testing.assert_array_equal(got, np.maximum.accumulate(x, axis=-1))
  np.testing.assert_array_equal(got, np.asarray(jax.lax.cummax(jnp.asarray(x), axis=1)))


def test_auroc_bit_for_bit_as_with_laxs_cumulative_ops():
  """The run bounds by pointer jumping (``cummax_int``) give the ranks ``lax.cummax``/``cummin`` gave, so AUROC is
  the same to the bit (issue 11: the ABPS tables must not move)."""
  def lax_auroc(scores, labels, mask):
    n = scores.shape[0]
    s, pos, valid = jax.lax.sort((jnp.where(mask, scores, jnp.inf), mask & (labels > 0.5), mask), num_keys=1,
                                 is_stable=True)
    i = jnp.arange(n, dtype=jnp.int32)
    new_run = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    start = jax.lax.cummax(jnp.where(new_run, i, 0))
    end = jax.lax.cummin(jnp.where(jnp.concatenate([new_run[1:], jnp.ones((1,), bool)]), i + 1, n), reverse=True)
    rank = (start + end + 1).astype(jnp.float32) / 2.0
    n_pos, n_neg = jnp.sum(pos).astype(jnp.float32), jnp.sum(valid & ~pos).astype(jnp.float32)
    u = jnp.sum(jnp.where(pos, rank, 0.0)) - n_pos * (n_pos + 1.0) / 2.0
    return jnp.where((n_pos > 0) & (n_neg > 0), u / jnp.maximum(n_pos * n_neg, 1.0), jnp.nan)

  rng = np.random.default_rng(3)
  for n in (1, 2, 5, 33, 311):
    s = rng.integers(0, 7, (24, n)).astype(np.float32) / 7.0
    y = rng.integers(0, 2, (24, n)).astype(np.float32)
    m = rng.random((24, n)) < 0.8
    np.testing.assert_array_equal(np.asarray(jax.jit(batched_auroc)(s, y, m)),
                                  np.asarray(jax.jit(jax.vmap(lax_auroc))(s, y, m)))


def test_auroc_extremes_and_undefined():
  y = jnp.array([0, 0, 1, 1])
  m = jnp.ones(4, bool)
  assert float(auroc(jnp.array([0.1, 0.2, 0.8, 0.9]), y, m)) == 1.0
  assert float(auroc(jnp.array([0.9, 0.8, 0.2, 0.1]), y, m)) == 0.0
  assert float(auroc(jnp.array([0.5, 0.5, 0.5, 0.5]), y, m)) == 0.5
  assert np.isnan(float(auroc(jnp.array([0.1, 0.2, 0.3, 0.4]), jnp.array([1, 1, 1, 1]), m)))
  # Padding rows are ignored even if they would change the answer.
  assert float(auroc(jnp.array([0.1, 0.9, 5.0, -5.0]), jnp.array([0, 1, 0, 1]), jnp.array([1, 1, 0, 0], bool))) == 1.0


def test_batched_and_mean_defined():
  s = jnp.array([[0.1, 0.9], [0.3, 0.2], [0.5, 0.5]])
  y = jnp.array([[0, 1], [0, 1], [1, 1]])
  per = batched_auroc(s, y, jnp.ones((3, 2), bool))
  np.testing.assert_allclose(np.asarray(per[:2]), [1.0, 0.0])
  mean, excluded = mean_defined(per)
  assert float(mean) == 0.5 and int(excluded) == 1


def test_byte_accounting_formulas():
  # SPEC §3.4: 2·|W|·b per star client or per P2P edge.
  assert star_round_bytes(230, 1000, 4) == 230 * 2 * 1000 * 4
  assert p2p_round_bytes(10, 1000, 2) == 10 * 2 * 1000 * 2
  assert fedavg_reference_bytes(230, 1000, 50) == 230 * 2 * 1000 * 4 * 50
