"""Tests of the pooled-table partitions (fedjax_sim.data.partition)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sim.data.partition import (client_names, dirichlet_label_split, dirichlet_partition,
                                       fedprox_synthetic, iid_partition)
from fedjax_sim.errors import DataError


def pooled(n, positive_fraction=0.5, seed=0):
  """A table whose first column is the row id, so partitions can be traced back to rows."""
  rng = np.random.default_rng(seed)
  x = np.stack([np.arange(n), rng.normal(size=n)], axis=1).astype(np.float32)
  y = (np.arange(n) < positive_fraction * n).astype(np.int32)
  return x, y, ("row", "z"), np.array([True, True])


def row_ids(cohorts):
  return np.concatenate([s.x[:, 0] for s in cohorts.sites]).astype(int)


def label_entropy(cohorts):
  """Mean over clients of the binary entropy (bits) of the client's label distribution."""
  entropies = []
  for s in cohorts.sites:
    p = np.clip(s.y.mean(), 1e-12, 1 - 1e-12)
    entropies.append(-(p * np.log2(p) + (1 - p) * np.log2(1 - p)))
  return float(np.mean(entropies))


def test_client_names_sort_in_index_order():
  names = client_names(1200)
  assert names[0] == "client_0000" and sorted(names) == names


def test_iid_every_row_once_and_balanced():
  x, y, names, cont = pooled(103)
  cohorts = iid_partition(0, x, y, 10, names, cont)
  assert len(cohorts.sites) == 10
  np.testing.assert_array_equal(np.sort(row_ids(cohorts)), np.arange(103))
  sizes = [len(s.y) for s in cohorts.sites]
  assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 103
  for s in cohorts.sites:  # labels travel with their rows
    np.testing.assert_array_equal(s.y, y[s.x[:, 0].astype(int)])
  assert cohorts.feature_names == names
  again = iid_partition(0, x, y, 10, names, cont)
  np.testing.assert_array_equal(row_ids(again), row_ids(cohorts))
  assert not np.array_equal(row_ids(iid_partition(1, x, y, 10, names, cont)), row_ids(cohorts))


def test_iid_one_client_per_row():
  x, y, names, cont = pooled(7)
  cohorts = iid_partition(3, x, y, 7, names, cont)
  assert [len(s.y) for s in cohorts.sites] == [1] * 7


def test_dirichlet_every_row_once_and_min_size():
  x, y, names, cont = pooled(600, 0.3)
  cohorts = dirichlet_partition(0, x, y, 12, 0.5, names, cont, min_size=20)
  np.testing.assert_array_equal(np.sort(row_ids(cohorts)), np.arange(600))
  assert min(len(s.y) for s in cohorts.sites) >= 20
  for s in cohorts.sites:
    np.testing.assert_array_equal(s.y, y[s.x[:, 0].astype(int)])


def test_small_alpha_skews_labels_more_than_large_alpha():
  x, y, names, cont = pooled(2000)
  for seed in range(3):
    skewed = dirichlet_partition(seed, x, y, 10, 0.1, names, cont, min_size=5)
    mixed = dirichlet_partition(seed, x, y, 10, 100.0, names, cont, min_size=5)
    assert label_entropy(skewed) < label_entropy(mixed) - 0.3
    assert label_entropy(mixed) > 0.9


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 200), num_clients=st.integers(1, 8), alpha=st.floats(0.05, 50.0),
       num_classes=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_dirichlet_split_is_a_partition(n, num_clients, alpha, num_classes, seed):
  y = np.arange(n) % num_classes
  parts = dirichlet_label_split(np.random.default_rng(seed), y, num_clients, alpha, min_size=0)
  assert len(parts) == num_clients
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_dirichlet_gives_up_after_max_tries():
  x, y, names, cont = pooled(100)
  with pytest.raises(DataError, match=r"max_tries=5.*min_size=10.*larger alpha or fewer clients"):
    dirichlet_partition(0, x, y, 10, 0.01, names, cont, min_size=10, max_tries=5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_clients=0), r"num_clients must be an integer >= 1, got 0"),
    (dict(num_clients=2.5), r"num_clients must be an integer >= 1"),
    (dict(num_clients=51), r"num_clients must be between 1 and the number of rows \(50\), got 51"),
    (dict(alpha=0.0), r"alpha must be a finite number > 0, got 0.0"),
    (dict(alpha=-1.0), r"alpha must be a finite number > 0"),
    (dict(min_size=30), r"min_size must be between 0 and rows / num_clients = 10"),
    (dict(max_tries=0), r"max_tries must be >= 1"),
])
def test_dirichlet_bad_arguments(kwargs, message):
  x, y, names, cont = pooled(50)
  args = dict(num_clients=5, alpha=1.0, min_size=1, max_tries=10)
  args.update(kwargs)
  with pytest.raises(DataError, match=message):
    dirichlet_partition(0, x, y, feature_names=names, continuous=cont, **args)


def test_iid_bad_arguments():
  x, y, names, cont = pooled(50)
  with pytest.raises(DataError, match="num_clients must be an integer >= 1"):
    iid_partition(0, x, y, 0, names, cont)
  with pytest.raises(DataError, match=r"between 1 and the number of rows \(50\)"):
    iid_partition(0, x, y, 60, names, cont)
  with pytest.raises(DataError, match="one label per row"):
    iid_partition(0, x, y[:-1], 5, names, cont)
  with pytest.raises(DataError, match="one entry per feature"):
    iid_partition(0, x, y, 5, ("row",), cont)
  with pytest.raises(DataError, match="binary"):
    iid_partition(0, x, y + 1, 5, names, cont)


def test_fedprox_synthetic_shapes_and_labels():
  cohorts = fedprox_synthetic(0, 1.0, 1.0, 5, samples_per_client=40)
  assert len(cohorts.sites) == 5 and cohorts.num_features == 60
  assert cohorts.feature_names[:2] == ("x00", "x01") and cohorts.continuous.all()
  for s in cohorts.sites:
    assert s.x.shape == (40, 60) and s.x.dtype == np.float32
    assert set(np.unique(s.y)) <= {0, 1}
  again = fedprox_synthetic(0, 1.0, 1.0, 5, samples_per_client=40)
  np.testing.assert_array_equal(again.sites[3].x, cohorts.sites[3].x)


def test_fedprox_synthetic_default_sizes_and_multiclass():
  cohorts = fedprox_synthetic(1, 0.5, 0.5, 4, num_features=8, num_classes=10)
  assert all(len(s.y) >= 50 for s in cohorts.sites)
  labels = np.concatenate([s.y for s in cohorts.sites])
  assert set(np.unique(labels)) <= {0, 1}
  iid = fedprox_synthetic(1, 0.0, 0.0, 4, num_features=8, samples_per_client=30, iid=True)
  assert len(iid.sites) == 4


def test_fedprox_beta_spreads_client_inputs():
  def spread(beta):
    cohorts = fedprox_synthetic(2, 0.0, beta, 20, num_features=10, samples_per_client=50)
    return np.std([s.x.mean() for s in cohorts.sites])
  assert spread(5.0) > 3 * spread(0.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_clients=0), "num_clients must be an integer >= 1"),
    (dict(alpha=-0.5), "alpha must be a finite number >= 0"),
    (dict(beta=float("nan")), "beta must be a finite number >= 0"),
    (dict(num_features=0), "num_features must be >= 1"),
    (dict(num_classes=1), "num_classes must be >= 2"),
    (dict(samples_per_client=0), "samples_per_client must be >= 1"),
])
def test_fedprox_bad_arguments(kwargs, message):
  args = dict(alpha=1.0, beta=1.0, num_clients=3, samples_per_client=10)
  args.update(kwargs)
  with pytest.raises(DataError, match=message):
    fedprox_synthetic(0, **args)
