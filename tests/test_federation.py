"""The stacked federation: splits, standardization, metadata, bucketing, bad input."""
import itertools
import math

import numpy as np
import pytest

from fedjax_sim.data.cohorts import Cohorts, SiteCohort
from fedjax_sim.data.federation import from_cohorts, plan_buckets, pooled, split_and_standardize
from fedjax_sim.errors import DataError
from tests.conftest import make_cohorts


def padded_steps(groups, n, b):
  return sum(len(g) * max(math.ceil(n[i] / b) for i in g) for g in groups)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_plan_buckets_is_optimal_and_a_partition(k):
  rng = np.random.default_rng(k)
  n = rng.integers(1, 700, 9)
  groups = plan_buckets(n, 64, k)
  assert sorted(np.concatenate(groups).tolist()) == list(range(9))
  assert len(groups) <= k
  # Brute force over contiguous cuts of the sorted order.
  order = np.argsort(n, kind="stable")
  best = min(padded_steps([order[a:b] for a, b in zip((0,) + cuts, cuts + (9,))], n, 64)
             for r in range(k) for cuts in itertools.combinations(range(1, 9), r))
  assert padded_steps(groups, n, 64) == best


def test_splits_standardization_and_metadata(tiny_cohorts):
  host = split_and_standardize(tiny_cohorts, seed=0)
  for site, (xtr, ytr), (xva, yva), (xte, yte) in zip(tiny_cohorts.sites, host.train, host.val, host.test):
    n = len(site.y)
    assert len(ytr) + len(yva) + len(yte) == n
    assert abs(len(ytr) / n - 0.7) < 0.05
    # Continuous columns: zero mean, unit sd on the train split only; the binary column untouched.
    np.testing.assert_allclose(xtr[:, :-1].mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(xtr[:, :-1].std(0), 1, atol=1e-3)
    assert set(np.unique(np.concatenate([xtr[:, -1], xte[:, -1]]))) <= {0.0, 1.0}
    # Stratified: positives split in proportion (within rounding).
    assert abs(ytr.sum() - 0.7 * site.y.sum()) <= 1.0
  i = 2
  site = tiny_cohorts.sites[i]
  base = host.meta_base[i]
  assert base[0] == pytest.approx(host.train[i][1].mean())
  assert base[1] == pytest.approx(np.log(len(host.train[i][1])))
  assert base[2] == pytest.approx((2100.0 + i) / 2030.0)
  assert host.meta_goal.shape == (len(tiny_cohorts.sites), 15)


def test_federation_layout_and_buckets(tiny_cohorts):
  fed = from_cohorts(tiny_cohorts, batch_size=32, num_buckets=3)
  c = len(tiny_cohorts.sites)
  assert fed.num_clients == c and fed.x_val.shape[0] == c and fed.meta_base.shape == (c, 3)
  idx = np.concatenate([np.asarray(b.client_idx) for b in fed.buckets])
  assert sorted(idx.tolist()) == list(range(c))
  for b in fed.buckets:
    np.testing.assert_array_equal(np.asarray(b.n), np.asarray(fed.n_train)[np.asarray(b.client_idx)])
    assert b.x.shape[1] == int(np.max(np.asarray(b.n)))
  assert 1.0 <= fed.padded_step_ratio(32) < 1.6
  assert int(np.asarray(fed.m_val).sum() + np.asarray(fed.m_test).sum() + np.asarray(fed.n_train).sum()) == \
      sum(len(s.y) for s in tiny_cohorts.sites)
  pool = pooled(fed)
  assert len(pool.buckets) == 1 and int(pool.buckets[0].n[0]) == int(np.asarray(fed.n_train).sum())


def test_small_sites_dropped_with_named_warning():
  coh = make_cohorts(sizes=[200, 10, 150])
  with pytest.warns(UserWarning, match="site1"):
    fed = from_cohorts(coh, min_rows=20)
  assert fed.names == ("site0", "site2")


def test_bad_data_messages():
  coh = make_cohorts(sizes=[50, 60])
  x = coh.sites[0].x.copy()
  x[3, 1] = np.nan
  bad = Cohorts((SiteCohort("a", x, coh.sites[0].y),), coh.feature_names, coh.continuous)
  with pytest.raises(DataError, match="'f1' has a non-finite"):
    from_cohorts(bad)
  bad_y = Cohorts((SiteCohort("a", coh.sites[0].x, coh.sites[0].y * 2),), coh.feature_names, coh.continuous)
  with pytest.raises(DataError, match="binary"):
    from_cohorts(bad_y)
  with pytest.raises(DataError, match="min_site_rows"), pytest.warns(UserWarning, match="site0, site1"):
    from_cohorts(coh, min_rows=1000)
