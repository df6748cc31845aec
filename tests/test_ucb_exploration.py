"""Eq. 7's exploration term dominates its posterior mean in the Table 1 setting (issue 9, finding 16).

With SPEC §3.2's prior Beta(1, 1) and γ = √2, a never-observed peer's UCB,
0.5 + √2·sqrt(2 ln t), exceeds that of any peer observed n ≥ 1 times, whatever
credits it earned, (1 + Σφ̄)/(n + 2) + √2·sqrt(2 ln t / (n + 1)) ≤ (n + 1)/(n + 2) +
√2·sqrt(ln t), in every round t ≥ 2 (n ≤ t − 1). So a proposer ranks all its
unobserved candidates first (ties by pool slot: the lower index), and, since no
receiver can reject before round 73 (tests/test_abps_pieces.py), the Shapley
credit changes no partner choice while a center still has an unobserved
candidate: in a 50-round run with κ ≤ 3 a center observes at most 150 partners,
fewer than its 229 candidates (or its ~57 goal-filtered ones at κ = 1).
docs/TABLE1.md measures it in real runs (``benchmarks/findings.py partners``).
"""
import math

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from fedjax_sim.algorithms.abps import posterior

GAMMA = math.sqrt(2.0)


def _ucb(alpha, beta, n, t, gamma=GAMMA):
  return float(posterior.ucb_scores(jnp.float32(alpha), jnp.float32(beta), jnp.float32(n), jnp.int32(t), gamma))


@settings(max_examples=400, deadline=None)
@given(t=st.integers(2, 100_000), frac=st.floats(0.0, 1.0), credit=st.floats(0.0, 1.0))
def test_an_unobserved_peer_outranks_every_observed_one_from_round_2(t, frac, credit):
  n = 1 + round(frac * (t - 2))  # 1 ≤ n ≤ t − 1 observations before round t
  s = credit * n  # Σ φ̄ ∈ [0, n]
  assert _ucb(1.0, 1.0, 0.0, t) > _ucb(1.0 + s, 1.0 + n - s, n, t)


def test_the_margin_in_closed_form():
  """The gap against the best observed peer (n = 1, φ̄ = 1) is (2 − √2)·sqrt(ln t) − 1/6 > 0 for t ≥ 2,
  checked against eq. 7 itself on every round up to 10,000."""
  t = np.arange(2, 10_001, dtype=np.float64)
  unobserved = 0.5 + GAMMA * np.sqrt(2 * np.log(t))
  best_observed = np.max([(1 + n) / (n + 2) + GAMMA * np.sqrt(2 * np.log(t) / (n + 1)) for n in range(1, 200)],
                         axis=0)
  assert (unobserved - best_observed > 0).all()
  np.testing.assert_allclose(unobserved - (2 / 3 + GAMMA * np.sqrt(np.log(t))),
                             (2 - GAMMA) * np.sqrt(np.log(t)) - 1 / 6, atol=1e-12)
  assert (2 - GAMMA) * math.sqrt(math.log(2)) - 1 / 6 > 0.3


def test_with_little_exploration_the_credit_does_rank_peers():
  """Positive control: the property is γ's, not the test's. With γ = 0.05 a peer observed 10 times with
  full credit outranks an unobserved one by round 20, and a badly credited one ranks below it."""
  good = _ucb(1.0 + 10, 1.0, 10.0, 20, gamma=0.05)
  bad = _ucb(1.0, 1.0 + 10, 10.0, 20, gamma=0.05)
  unobserved = _ucb(1.0, 1.0, 0.0, 20, gamma=0.05)
  assert good > unobserved > bad
  assert _ucb(1.0 + 10, 1.0, 10.0, 20) < _ucb(1.0, 1.0, 0.0, 20)  # the same peers under γ = √2
