"""The federation as stacked, masked device arrays (SPEC §1 "Stacked clients", "Ragged clients").

Layout
------
* Evaluation splits (val, test) are padded to the largest split over clients:
  ``x_val [C, V, d]``, ``y_val [C, V]``, ``m_val [C, V]`` (and the same for test).
  Forward passes are cheap, so padding them costs little.
* Training rows are what every round pays for, so they are **bucketed by
  size**: clients are sorted by ``n_train`` and cut into a few contiguous
  groups (:class:`TrainBucket`), each padded only to its own largest client.
  A bucket runs ``ceil(n_b / batch)`` steps per epoch; a client with fewer rows
  masks its surplus steps into no-ops, so every client takes exactly its
  protocol's ``E * ceil(n_i / batch)`` optimizer steps (SPEC §1), while padded
  work stays close to useful work. The cut points minimize total padded steps
  (dynamic programming over the sorted sizes, :func:`plan_buckets`).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedjax_sim.data.cohorts import Cohorts, validate_cohorts
from fedjax_sim.errors import DataError


@struct.dataclass
class TrainBucket:
  """Training rows of a group of similarly sized clients.

  ``steps_per_epoch`` is ``ceil(x.shape[1] / batch_size)``: read it from the
  (static) shape, never from data.
  """

  client_idx: jax.Array  # [C_b] int32 positions of these clients on the federation's client axis
  x: jax.Array  # [C_b, n_b, d] float32 train features, valid rows first
  y: jax.Array  # [C_b, n_b] float32 train labels
  n: jax.Array  # [C_b] int32 number of valid train rows per client


@struct.dataclass
class Federation:
  """C clients stacked on axis 0 (SPEC §1). Built by :func:`from_cohorts`."""

  buckets: tuple  # tuple[TrainBucket, ...]; the union of client_idx is 0..C-1
  x_val: jax.Array  # [C, V, d] validation features (padded)
  y_val: jax.Array  # [C, V] validation labels
  m_val: jax.Array  # [C, V] bool, True on real validation rows
  x_test: jax.Array  # [C, T, d] test features (padded)
  y_test: jax.Array  # [C, T] test labels
  m_test: jax.Array  # [C, T] bool, True on real test rows
  n_train: jax.Array  # [C] int32 train rows per client (aggregation weights)
  meta_base: jax.Array  # [C, 3] [pos_rate, log n_train, mean_admission_year / 2030] (SPEC §2.1)
  meta_goal: jax.Array  # [C, 15] meta_base + 12 Charlson prevalences (SPEC §2.1)
  names: tuple = struct.field(pytree_node=False)  # C client names
  feature_names: tuple = struct.field(pytree_node=False)  # d feature names

  @property
  def num_clients(self) -> int:
    return len(self.names)

  @property
  def num_features(self) -> int:
    return len(self.feature_names)

  def padded_step_ratio(self, batch_size: int) -> float:
    """Padded optimizer steps / useful optimizer steps per epoch (1.0 = no waste)."""
    useful = float(np.sum(np.ceil(np.asarray(self.n_train) / batch_size)))
    padded = float(sum(b.x.shape[0] * math.ceil(b.x.shape[1] / batch_size) for b in self.buckets))
    return padded / max(useful, 1.0)


def plan_buckets(n_train: Sequence[int], batch_size: int, num_buckets: int) -> list:
  """Cuts clients (sorted by size) into at most ``num_buckets`` groups minimizing padded steps.

  Args:
    n_train: train rows per client.
    batch_size: minibatch size (steps per epoch = ceil(n / batch_size)).
    num_buckets: the largest number of groups (each group is one compiled
      vmap, so more groups cost compile time but save padded work).

  Returns:
    A list of index arrays (into ``n_train``), each group sorted by size.
  """
  order = np.argsort(np.asarray(n_train), kind="stable")
  steps = np.ceil(np.asarray(n_train)[order] / batch_size).astype(np.int64)
  c = len(steps)
  k_max = max(1, min(num_buckets, c))
  inf = np.iinfo(np.int64).max // 4
  # cost[k][j]: least padded steps covering the first j sorted clients with k groups.
  cost = np.full((k_max + 1, c + 1), inf, np.int64)
  cut = np.zeros((k_max + 1, c + 1), np.int64)
  cost[0, 0] = 0
  for k in range(1, k_max + 1):
    for j in range(1, c + 1):
      # group = sorted clients i..j-1, padded to steps[j-1] (the largest).
      i = np.arange(0, j)
      cand = cost[k - 1, i] + (j - i) * steps[j - 1]
      best = int(np.argmin(cand))
      cost[k, j], cut[k, j] = cand[best], best
  k_best = int(np.argmin(cost[1:, c])) + 1
  groups, j = [], c
  for k in range(k_best, 0, -1):
    i = int(cut[k, j])
    groups.append(order[i:j])
    j = i
  return groups[::-1]


def _split_indices(rng: np.random.Generator, y: np.ndarray, fractions: Sequence[float]):
  """Stratified train/val/test split of one site's rows (SPEC §2.1: 70/15/15, stratified where possible)."""
  parts = [[] for _ in fractions]
  for label in (0, 1):
    idx = np.flatnonzero(y == label)
    rng.shuffle(idx)
    cuts = np.round(np.cumsum(fractions)[:-1] * len(idx)).astype(int)
    for p, chunk in zip(parts, np.split(idx, cuts)):
      p.extend(chunk.tolist())
  return [np.sort(np.asarray(p, np.int64)) for p in parts]


def _pad_stack(arrays, length, fill=0.0):
  out_shape = (len(arrays), length) + arrays[0].shape[1:]
  out = np.full(out_shape, fill, dtype=arrays[0].dtype)
  for i, a in enumerate(arrays):
    out[i, :len(a)] = a
  return out


@dataclasses.dataclass(frozen=True)
class HostSplits:
  """Per-site standardized splits on the host (numpy), before stacking."""

  names: tuple
  train: tuple  # of (x, y)
  val: tuple
  test: tuple
  meta_base: np.ndarray  # [C, 3]
  meta_goal: np.ndarray  # [C, 15]


def split_and_standardize(cohorts: Cohorts, seed: int, split=(0.7, 0.15, 0.15),
                          min_rows: int = 20) -> HostSplits:
  """Validates, drops small sites (with a warning naming them), splits and standardizes.

  Continuous features are standardized per site with that site's train-split
  mean and standard deviation only (SPEC §2.1, paper 000 §6.1).

  Args:
    cohorts: raw per-site data.
    seed: seed of the split (the federation is fixed across experiment seeds).
    split: train / val / test fractions.
    min_rows: sites with fewer rows are dropped with a warning naming them.

  Returns:
    :class:`HostSplits`.
  """
  validate_cohorts(cohorts)
  if abs(sum(split) - 1.0) > 1e-6 or min(split) <= 0:
    raise DataError(f"split fractions must be positive and sum to 1, got {tuple(split)}")
  kept = [s for s in cohorts.sites if len(s.y) >= min_rows]
  dropped = [s.name for s in cohorts.sites if len(s.y) < min_rows]
  if dropped:
    warnings.warn(f"dropped {len(dropped)} site(s) with fewer than {min_rows} rows: {', '.join(dropped)}",
                  stacklevel=2)
  if not kept:
    raise DataError(f"no site has at least {min_rows} rows (min_site_rows); lower it or merge sites")
  rng = np.random.default_rng(seed)
  cont = np.asarray(cohorts.continuous, bool)
  names, train, val, test, meta_b, meta_g = [], [], [], [], [], []
  for site in kept:
    x = np.asarray(site.x, np.float32)
    y = np.asarray(site.y, np.float32)
    tr, va, te = _split_indices(rng, y, split)
    mu = x[tr].mean(axis=0)
    sd = x[tr].std(axis=0)
    sd = np.where(sd > 1e-6, sd, 1.0)
    xs = x.copy()
    xs[:, cont] = (x[:, cont] - mu[cont]) / sd[cont]
    names.append(site.name)
    train.append((xs[tr], y[tr]))
    val.append((xs[va], y[va]))
    test.append((xs[te], y[te]))
    # Metadata (SPEC §2.1): cohort-level aggregates of the train split only.
    year = 2030.0 if site.year is None else float(np.mean(np.asarray(site.year)[tr]))
    base = np.array([y[tr].mean(), np.log(len(tr)), year / 2030.0], np.float32)
    if site.charlson is None:
      charl = np.zeros(12, np.float32)
    else:
      charl = np.asarray(site.charlson, np.float32)[tr].mean(axis=0)
    meta_b.append(base)
    meta_g.append(np.concatenate([base, charl]))
  return HostSplits(names=tuple(names), train=tuple(train), val=tuple(val), test=tuple(test),
                    meta_base=np.stack(meta_b), meta_goal=np.stack(meta_g))


def stack_splits(host: HostSplits, feature_names: Sequence[str], batch_size: int,
                 num_buckets: int) -> Federation:
  """Stacks host splits into a :class:`Federation` with size buckets for training."""
  n_train = np.array([len(y) for _, y in host.train], np.int32)
  buckets = []
  for group in plan_buckets(n_train, batch_size, num_buckets):
    n_b = int(n_train[group].max())
    buckets.append(TrainBucket(
        client_idx=jnp.asarray(group, jnp.int32),
        x=jnp.asarray(_pad_stack([host.train[i][0] for i in group], n_b)),
        y=jnp.asarray(_pad_stack([host.train[i][1] for i in group], n_b)),
        n=jnp.asarray(n_train[group])))

  def eval_split(split):
    length = max(1, max(len(y) for _, y in split))
    x = _pad_stack([s[0] for s in split], length)
    y = _pad_stack([s[1] for s in split], length)
    m = _pad_stack([np.ones(len(s[1]), bool) for s in split], length, fill=False)
    return jnp.asarray(x), jnp.asarray(y), jnp.asarray(m)

  x_val, y_val, m_val = eval_split(host.val)
  x_test, y_test, m_test = eval_split(host.test)
  return Federation(
      buckets=tuple(buckets), x_val=x_val, y_val=y_val, m_val=m_val,
      x_test=x_test, y_test=y_test, m_test=m_test, n_train=jnp.asarray(n_train),
      meta_base=jnp.asarray(host.meta_base), meta_goal=jnp.asarray(host.meta_goal),
      names=tuple(host.names), feature_names=tuple(feature_names))


def from_cohorts(cohorts: Cohorts, *, seed: int = 0, batch_size: int = 128, num_buckets: int = 4,
                 split=(0.7, 0.15, 0.15), min_rows: int = 20) -> Federation:
  """Builds the stacked federation from per-site cohorts (see module docstring).

  Args:
    cohorts: raw per-site data from any source.
    seed: the split seed.
    batch_size: local minibatch size (sets the bucket plan).
    num_buckets: most size buckets for training rows.
    split: train / val / test fractions (SPEC §2.1: 70/15/15).
    min_rows: smallest site kept; smaller ones are dropped with a warning.

  Returns:
    A :class:`Federation`.
  """
  host = split_and_standardize(cohorts, seed, split, min_rows)
  return stack_splits(host, cohorts.feature_names, batch_size, num_buckets)


def pooled(federation: Federation) -> Federation:
  """The centralized view: every client's train rows in one client; val/test stay per client.

  Used by the Centralized row (SPEC §3.3): one model trained on the pooled
  train splits, evaluated on every center's own test split.
  """
  xs, ys = [], []
  for b in federation.buckets:
    n = np.asarray(b.n)
    for k in range(len(n)):
      xs.append(np.asarray(b.x[k, :n[k]]))
      ys.append(np.asarray(b.y[k, :n[k]]))
  x = np.concatenate(xs)[None]
  y = np.concatenate(ys)[None]
  bucket = TrainBucket(client_idx=jnp.zeros((1,), jnp.int32), x=jnp.asarray(x), y=jnp.asarray(y),
                       n=jnp.asarray([x.shape[1]], jnp.int32))
  return federation.replace(buckets=(bucket,))
