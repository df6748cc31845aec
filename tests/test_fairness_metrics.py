"""Accuracy and the fairness measures across clients, each against its textbook definition (issue 10, item 4)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from fedjax_sim import metrics

shares = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1000.0)), min_size=1, max_size=40)  # float32-representable

jain = jax.jit(metrics.jain_index)
kl = jax.jit(metrics.kl_to_uniform)
gini = jax.jit(metrics.gini)
lorenz = jax.jit(metrics.lorenz_curve)


def gini_pairwise(x):
  """G = Σ_i Σ_j |x_i − x_j| / (2 N² x̄), in float64."""
  x = np.asarray(x, np.float64)
  return 0.0 if x.sum() == 0 else np.abs(x[:, None] - x[None, :]).sum() / (2 * len(x) ** 2 * x.mean())


@settings(max_examples=200, deadline=None)
@given(x=shares)
def test_jain_kl_gini_against_their_definitions(x):
  a = np.asarray(x, np.float64)
  n = len(a)
  if a.sum() == 0:
    assert float(jain(jnp.asarray(a))) == 1.0 and float(kl(jnp.asarray(a))) == 0.0
    assert float(gini(jnp.asarray(a))) == 0.0
    return
  want_jain = a.sum() ** 2 / (n * (a ** 2).sum())
  p = a / a.sum()
  want_kl = sum(pi * math.log(n * pi) for pi in p if pi > 0)
  got = [float(f(jnp.asarray(a, jnp.float32))) for f in (jain, kl, gini)]
  np.testing.assert_allclose(got, [want_jain, want_kl, gini_pairwise(a)], rtol=2e-4, atol=2e-5)
  assert 1 / n - 1e-6 <= got[0] <= 1 + 1e-6
  assert -1e-6 <= got[1] <= math.log(n) + 1e-4
  assert -1e-6 <= got[2] <= 1 - 1 / n + 1e-5


def test_extremes_and_invariances():
  n = 10
  equal, one = jnp.ones(n), jnp.zeros(n).at[3].set(5.0)
  assert float(jain(equal)) == 1.0 and abs(float(jain(one)) - 1 / n) < 1e-7
  assert abs(float(kl(equal))) < 1e-6 and abs(float(kl(one)) - math.log(n)) < 1e-5
  assert abs(float(gini(equal))) < 1e-6 and abs(float(gini(one)) - (1 - 1 / n)) < 1e-6
  for m in range(1, 41):  # all zeros is exactly 0 at every size (13 zeros once read 6e-8 through the Lorenz sum)
    assert float(gini(jnp.zeros(m))) == 0.0 and float(lorenz(jnp.zeros(m))[-1]) == 1.0
  x = jnp.asarray(np.random.default_rng(0).exponential(size=n), jnp.float32)
  for f in (jain, kl, gini):  # scale- and order-free
    np.testing.assert_allclose(float(f(3.0 * x)), float(f(x)), rtol=1e-5)
    np.testing.assert_allclose(float(f(x[::-1])), float(f(x)), rtol=1e-5)
  # Pigou–Dalton, a positive control: moving a share from the poorest to the richest raises G and KL, lowers J.
  i, j = int(jnp.argmin(x)), int(jnp.argmax(x))
  d = float(x[i]) / 2
  y = x.at[i].add(-d).at[j].add(d)
  assert float(gini(y)) > float(gini(x)) and float(kl(y)) > float(kl(x)) and float(jain(y)) < float(jain(x))


@settings(max_examples=100, deadline=None)
@given(x=shares)
def test_lorenz_curve(x):
  a = np.asarray(x, np.float64)
  curve = np.asarray(lorenz(jnp.asarray(a, jnp.float32)), np.float64)
  assert curve.shape == (len(a) + 1,) and curve[0] == 0.0 and abs(curve[-1] - 1.0) < 1e-5
  assert (np.diff(curve) >= -1e-7).all()  # non-decreasing
  k = np.arange(len(a) + 1) / len(a)
  assert (curve <= k + 1e-5).all()  # never above the line of equality
  if a.sum() > 0:
    np.testing.assert_allclose(curve, np.concatenate([[0.0], np.cumsum(np.sort(a))]) / a.sum(), atol=1e-5)


def test_accuracy_and_across_clients():
  logits = jnp.asarray([[[2.0, 0.0, 1.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [5.0, 0.0, 0.0]],
                        [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
  labels = jnp.asarray([[0, 1, 0, 0], [1, 1, 0, 0]])
  mask = jnp.asarray([[True, True, True, False], [False, False, False, False]])
  acc = np.asarray(metrics.batched_accuracy(logits, labels, mask))
  assert acc[0] == 2 / 3 and np.isnan(acc[1])  # the masked-out 4th row would have been a hit; no rows: NaN
  stats = metrics.across_clients(jnp.asarray([0.9, float("nan"), 0.6, 0.75]))
  np.testing.assert_allclose([float(stats[k]) for k in ("mean", "worst", "std")],
                             [0.75, 0.6, np.std([0.9, 0.6, 0.75])], rtol=1e-6)
  none = metrics.across_clients(jnp.asarray([float("nan")] * 3))
  assert all(np.isnan(float(v)) for v in none.values())
