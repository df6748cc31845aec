"""The stacked federation: splits, standardization, metadata, bucketing, bad input."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sim.data.cohorts import Cohorts, SiteCohort
from fedjax_sim.data.federation import (
  _pad_stack,
  from_cohorts,
  plan_buckets,
  pooled,
  split_and_standardize,
)
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


def reference_plan_buckets(n_train, batch_size, num_buckets):
  """The dynamic program over clients, O(num_buckets · C²): what the plan over distinct steps must equal."""
  order = np.argsort(np.asarray(n_train), kind="stable")
  steps = np.ceil(np.asarray(n_train)[order] / batch_size).astype(np.int64)
  c = len(steps)
  k_max = max(1, min(num_buckets, c))
  cost = np.full((k_max + 1, c + 1), np.iinfo(np.int64).max // 4, np.int64)
  cut = np.zeros((k_max + 1, c + 1), np.int64)
  cost[0, 0] = 0
  for k in range(1, k_max + 1):
    for j in range(1, c + 1):
      i = np.arange(0, j)
      cand = cost[k - 1, i] + (j - i) * steps[j - 1]
      cut[k, j] = int(np.argmin(cand))
      cost[k, j] = cand[cut[k, j]]
  groups, j = [], c
  for k in range(int(np.argmin(cost[1:, c])) + 1, 0, -1):
    groups.append(order[cut[k, j]:j])
    j = cut[k, j]
  return groups[::-1]


@settings(max_examples=300, deadline=None)
@given(n=st.lists(st.integers(0, 700), min_size=1, max_size=40), batch=st.sampled_from([16, 64, 128, 512]),
       k=st.integers(1, 7))
def test_plan_buckets_equals_the_dp_over_clients(n, batch, k):
  got = plan_buckets(n, batch, k)
  want = reference_plan_buckets(n, batch, k)
  assert [g.tolist() for g in got] == [g.tolist() for g in want]


def test_plan_buckets_at_100000_clients():
  n = np.random.default_rng(0).lognormal(3.0, 0.8, 100_000).astype(int) + 3
  groups = plan_buckets(n, 128, 6)  # the DP over clients would take hours; over distinct step counts, ms
  assert len(groups) <= 6
  assert sorted(np.concatenate(groups).tolist()) == list(range(len(n)))


def reference_split_and_standardize(cohorts, seed, split=(0.7, 0.15, 0.15), min_rows=20):
  """Site by site: what the vectorized split must give bit for bit (names, splits, metadata)."""
  rng = np.random.default_rng(seed)
  cont = np.asarray(cohorts.continuous, bool)
  out = {"names": [], "train": [], "val": [], "test": [], "meta_base": [], "meta_goal": []}
  for site in [s for s in cohorts.sites if len(s.y) >= min_rows]:
    x, y = np.asarray(site.x, np.float32), np.asarray(site.y, np.float32)
    parts = [[] for _ in split]
    for label in (0, 1):
      idx = np.flatnonzero(y == label)
      rng.shuffle(idx)
      for p, chunk in zip(parts, np.split(idx, np.round(np.cumsum(split)[:-1] * len(idx)).astype(int))):
        p.extend(chunk.tolist())
    tr, va, te = [np.sort(np.asarray(p, np.int64)) for p in parts]
    mu, sd = x[tr].mean(axis=0), x[tr].std(axis=0)
    sd = np.where(sd > 1e-6, sd, 1.0)
    xs = x.copy()
    xs[:, cont] = (x[:, cont] - mu[cont]) / sd[cont]
    out["names"].append(site.name)
    for key, rows in (("train", tr), ("val", va), ("test", te)):
      out[key].append((xs[rows], y[rows]))
    year = 2030.0 if site.year is None else float(np.mean(np.asarray(site.year)[tr]))
    base = np.array([y[tr].mean(), np.log(len(tr)), year / 2030.0], np.float32)
    charl = np.zeros(12, np.float32) if site.charlson is None else np.asarray(site.charlson, np.float32)[tr].mean(0)
    out["meta_base"].append(base)
    out["meta_goal"].append(np.concatenate([base, charl]))
  return out


def test_split_and_standardize_equals_site_by_site():
  coh = make_cohorts(sizes=[3, 4, 7, 30, 30, 200, 57, 1, 2, 130, 30, 9000], seed=4)
  sites = list(coh.sites)
  sites[4] = SiteCohort("no_positive", sites[4].x, np.zeros(30, np.int32), year=None, charlson=None)
  sites[10] = SiteCohort("all_positive", sites[10].x, np.ones(30, np.int32), year=sites[10].year)
  coh = Cohorts(tuple(sites), coh.feature_names, coh.continuous)
  with pytest.warns(UserWarning, match="site7"):
    host = split_and_standardize(coh, seed=3, min_rows=2)
  want = reference_split_and_standardize(coh, seed=3, min_rows=2)
  assert list(host.names) == want["names"]
  for key in ("train", "val", "test"):
    for (x, y), (wx, wy) in zip(getattr(host, key), want[key]):
      np.testing.assert_array_equal(x, wx)
      np.testing.assert_array_equal(y, wy)
  np.testing.assert_array_equal(host.meta_base, np.stack(want["meta_base"]))
  np.testing.assert_array_equal(host.meta_goal, np.stack(want["meta_goal"]))


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
  host = split_and_standardize(tiny_cohorts, seed=0)
  for i, ((xv, yv), (xt, _)) in enumerate(zip(host.val, host.test)):
    assert int(np.asarray(fed.m_val[i]).sum()) == len(yv)
    np.testing.assert_array_equal(np.asarray(fed.x_val[i, :len(yv)]), xv)
    np.testing.assert_array_equal(np.asarray(fed.y_val[i, :len(yv)]), yv)
    assert not np.asarray(fed.x_val[i, len(yv):]).any() and not np.asarray(fed.x_test[i, len(xt):]).any()
  assert int(np.asarray(fed.m_val).sum() + np.asarray(fed.m_test).sum() + np.asarray(fed.n_train).sum()) == \
      sum(len(s.y) for s in tiny_cohorts.sites)
  pool = pooled(fed)
  assert len(pool.buckets) == 1 and int(pool.buckets[0].n[0]) == int(np.asarray(fed.n_train).sum())


@pytest.mark.parametrize("device_padding_bytes", [0, 1 << 30])
def test_pad_stack_on_host_and_on_device(device_padding_bytes):
  rng = np.random.default_rng(0)
  arrays = [rng.normal(size=(n, 3)).astype(np.float32) for n in (4, 0, 1, 7)]
  got = np.asarray(_pad_stack(arrays, 9, device_padding_bytes=device_padding_bytes))
  want = np.zeros((4, 9, 3), np.float32)
  for i, a in enumerate(arrays):
    want[i, :len(a)] = a
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, want)
  labels = np.asarray(_pad_stack([a[:, 0] for a in arrays], 7, device_padding_bytes=device_padding_bytes))
  np.testing.assert_array_equal(labels, want[:, :7, 0])


def test_small_sites_dropped_with_named_warning():
  coh = make_cohorts(sizes=[200, 10, 150])
  with pytest.warns(UserWarning, match="site1"):
    fed = from_cohorts(coh, min_rows=20)
  assert fed.names == ("site0", "site2")
  many = make_cohorts(sizes=[50] + [5] * 30)
  with pytest.warns(UserWarning, match=r"dropped 30 site\(s\) .*site1, site2, .*site20, … and 10 more$"):
    from_cohorts(many, min_rows=20)


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
