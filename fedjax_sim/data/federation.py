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
from typing import Optional, Sequence

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
  x: jax.Array  # [C_b, n_b, ...] train features, valid rows first
  y: jax.Array  # [C_b, n_b, ...] train labels
  n: jax.Array  # [C_b] int32 number of valid train rows per client


@struct.dataclass
class TrainRows:
  """Every client's train rows in one flat store, for gathering any K of them (partial participation) and for
  a full round's one-body training.

  Built on the host by :func:`with_train_rows`; :func:`fedjax_sim.engine.local.gather_rows` and
  ``engine.local._rows_store`` read it.
  """

  x: jax.Array  # [R + 1, ...] train features of client 0, then client 1, ...; the last row is zeros (padding)
  y: jax.Array  # [R + 1, ...] train labels, the same order
  start: jax.Array  # [C] int32 first row of each client
  n: jax.Array  # [C] int32 rows of each client
  owner: jax.Array  # [R + 1] int32 the client of each row; C on the trailing zero row


@struct.dataclass
class EvalRows:
  """A split's rows of every client, flat, padded to whole chunks: a shared model scores them in one pass whose cost
  is the number of rows, not C × the longest split (issue 10; issue 11 item 3)."""

  x: jax.Array  # [R_pad, ...] features, client after client, then zero rows
  y: jax.Array  # [R_pad, ...] labels
  client: jax.Array  # [R_pad] int32 client of each row; C on the padding rows (dropped by the per-client sums)


@struct.dataclass
class SharedTest:
  """A test set every client is scored on (iPFL's reweighted accuracy, LEAF's held-out users; SPEC §5)."""

  x: jax.Array  # [T, ...] features
  y: jax.Array  # [T] labels
  class_weights: jax.Array  # [C, K] each client's train label distribution (rows sum to 1)


@struct.dataclass
class Federation:
  """C clients stacked on axis 0 (SPEC §1). Built by :func:`from_cohorts` (clinical tables) or
  :func:`from_partition` (labelled image and text data).

  Features may have any shape (``[d]`` rows, ``[H, W, C]`` uint8 images, ``[L]`` int32 token windows); labels are
  binary floats (``task = "binary"``), int classes (``multiclass``) or int next tokens ``[L]`` (``next_char``).
  """

  buckets: tuple  # tuple[TrainBucket, ...]; the union of client_idx is 0..C-1
  x_val: jax.Array  # [C, V, ...] validation features (padded)
  y_val: jax.Array  # [C, V, ...] validation labels
  m_val: jax.Array  # [C, V] bool, True on real validation rows
  x_test: jax.Array  # [C, T, ...] test features (padded)
  y_test: jax.Array  # [C, T, ...] test labels
  m_test: jax.Array  # [C, T] bool, True on real test rows
  n_train: jax.Array  # [C] int32 train rows per client (aggregation weights)
  names: tuple = struct.field(pytree_node=False)  # C client names
  feature_names: tuple = struct.field(pytree_node=False)  # d feature names (() for images and text)
  meta_base: Optional[jax.Array] = None  # [C, 3] [pos_rate, log n_train, mean_admission_year / 2030] (SPEC §2.1);
  # None for data without clinical metadata
  meta_goal: Optional[jax.Array] = None  # [C, 15] meta_base + 12 Charlson prevalences (SPEC §2.1), or None
  rows: Optional[TrainRows] = None  # flat train rows (K-of-N rounds, one-body training): :func:`with_train_rows`
  shared_test: Optional[SharedTest] = None  # a test set shared by every client, or None
  val_rows: Optional[EvalRows] = None  # the validation split flat (image/text data): shared-model scoring by rows
  test_rows: Optional[EvalRows] = None  # the test split flat
  task: str = struct.field(pytree_node=False, default="binary")  # binary, multiclass or next_char
  num_classes: int = struct.field(pytree_node=False, default=2)  # classes (vocabulary size for next_char)

  @property
  def num_clients(self) -> int:
    return len(self.names)

  @property
  def num_features(self) -> int:
    return len(self.feature_names) if self.feature_names else int(np.prod(self.feature_shape))

  @property
  def feature_shape(self) -> tuple:
    """The shape of one row's features (``(d,)``, ``(28, 28, 1)``, ``(80,)``)."""
    return tuple(self.x_val.shape[2:])

  def padded_step_ratio(self, batch_size: int) -> float:
    """Padded optimizer steps / useful optimizer steps per epoch (1.0 = no waste)."""
    useful = float(np.sum(np.ceil(np.asarray(self.n_train) / batch_size)))
    padded = float(sum(b.x.shape[0] * math.ceil(b.x.shape[1] / batch_size) for b in self.buckets))
    return padded / max(useful, 1.0)


def plan_buckets(n_train: Sequence[int], batch_size: int, num_buckets: int) -> list:
  """Cuts clients (sorted by size) into at most ``num_buckets`` groups minimizing padded steps.

  Dynamic programming over the *distinct* steps-per-epoch values: clients
  with equal steps never sit on both sides of a cut of an optimal plan with
  the fewest groups (moving them into the lower group costs nothing, and if
  the upper group held only them the two groups would merge at no cost), so
  ``O(num_buckets · m²)`` for ``m`` distinct values (a handful at 100,000
  clients) gives the same groups as the ``O(num_buckets · C²)`` DP over
  clients, ties included (the earliest cut, then the fewest groups).

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
  values, counts = np.unique(steps, return_counts=True)
  ends = np.concatenate([[0], np.cumsum(counts)])  # ends[r]: sorted clients with fewer steps than values[r]
  m = len(values)
  k_max = max(1, min(num_buckets, m))
  inf = np.iinfo(np.int64).max // 4
  # cost[k][j]: least padded steps covering the clients of the first j step values with k groups.
  cost = np.full((k_max + 1, m + 1), inf, np.int64)
  cut = np.zeros((k_max + 1, m + 1), np.int64)
  cost[0, 0] = 0
  for k in range(1, k_max + 1):
    for j in range(1, m + 1):
      # group = clients of step values i..j-1, padded to values[j-1] (the largest).
      i = np.arange(0, j)
      cand = cost[k - 1, i] + (ends[j] - ends[i]) * values[j - 1]
      best = int(np.argmin(cand))
      cost[k, j], cut[k, j] = cand[best], best
  k_best = int(np.argmin(cost[1:, m])) + 1
  groups, j = [], m
  for k in range(k_best, 0, -1):
    i = int(cut[k, j])
    groups.append(order[ends[i]:ends[j]])
    j = i
  return groups[::-1]


def _split_rows(rng: np.random.Generator, y: np.ndarray, sizes: np.ndarray,
                fractions: Sequence[float]) -> np.ndarray:
  """Stratified train/val/test split of concatenated sites (SPEC §2.1: 70/15/15, stratified where possible).

  Site by site, label 0 then label 1, the rows of that label are shuffled
  and cut at the rounded cumulative fractions. Only the shuffles touch the
  random stream (one call per (site, label) of two or more rows: shorter
  ones draw nothing), so the split is the one a per-site loop gives.

  Args:
    rng: the split's generator.
    y: ``[N]`` 0/1 labels of all sites, site after site.
    sizes: ``[S]`` rows per site.
    fractions: the split fractions.

  Returns:
    ``[N]`` int8 part of each row (0 train, 1 val, 2 test).
  """
  key = 2 * np.repeat(np.arange(len(sizes)), sizes) + (y == 1)
  order = np.argsort(key, kind="stable")  # rows grouped by (site, label), ascending inside a group
  counts = np.bincount(key, minlength=2 * len(sizes))
  starts = np.cumsum(counts) - counts
  for start, count in zip(starts.tolist(), counts.tolist()):
    if count > 1:
      rng.shuffle(order[start:start + count])
  cuts = np.round(np.cumsum(fractions)[:-1] * counts[:, None]).astype(int)  # [2S, parts - 1]
  group = np.repeat(np.arange(len(counts)), counts)
  position = np.arange(len(y)) - starts[group]  # place in the shuffled (site, label) group
  part = np.empty(len(y), np.int8)
  part[order] = (position[:, None] >= cuts[group]).sum(axis=1)
  return part


def _equal_length_groups(lengths: np.ndarray):
  """Yields ``(sites, n)`` for each set of sites with the same number ``n`` of rows.

  Site statistics are computed a group at a time on ``[k, n, ...]`` stacks:
  a reduction over axis 1 of a stack is bit for bit the reduction of each site alone.
  """
  for n in np.unique(lengths).tolist():
    yield np.flatnonzero(lengths == n), n


def _train_statistics(columns: np.ndarray, train_start: np.ndarray, n_train: np.ndarray, stats) -> list:
  """Per-site ``stat(rows of the site's train split, axis=1)`` for each ``stat`` in ``stats``.

  Args:
    columns: ``[N, ...]`` rows of all sites, each site's train rows contiguous from ``train_start``.
    train_start: ``[S]`` first train row of each site.
    n_train: ``[S]`` train rows per site.
    stats: reductions called as ``stat(stack [k, n, ...], axis=1)``.

  Returns:
    One ``[S, ...]`` array per stat.
  """
  out = [None] * len(stats)
  for sites, n in _equal_length_groups(n_train):
    stack = columns[train_start[sites][:, None] + np.arange(n)]
    for j, stat in enumerate(stats):
      value = stat(stack, axis=1)
      if out[j] is None:
        out[j] = np.empty((len(n_train),) + value.shape[1:], value.dtype)
      out[j][sites] = value
  return out


DEVICE_PADDING_BYTES = 1 << 28  # padded arrays larger than this (256 MiB) are padded on the device


@jax.jit
def _gather_rows(rows: jax.Array, index: jax.Array) -> jax.Array:
  return rows[index]


def _pad_stack(arrays: Sequence[np.ndarray], length: int,
               device_padding_bytes: int = DEVICE_PADDING_BYTES) -> jax.Array:
  """Stacks clients' rows into a zero-padded ``[len(arrays), length, ...]`` device array.

  A small array is scattered into zeros on the host and transferred (nothing
  to compile). A large one is padded on the device by a gather, so only the
  real rows are built on the host and transferred: with 100,000 small clients
  most of it is padding (an eval split of ~5 rows padded to the longest,
  ~120), and host padding would hold every array twice (host and device)
  while it is copied. Both give the same array.
  """
  lengths = np.array([len(a) for a in arrays], np.int64)
  first = np.cumsum(lengths) - lengths
  rows = np.concatenate(list(arrays) + [np.zeros((1,) + arrays[0].shape[1:], arrays[0].dtype)])
  shape = (len(arrays), length) + rows.shape[1:]
  if math.prod(shape) * rows.itemsize <= device_padding_bytes:
    out = np.zeros(shape, rows.dtype)
    out[np.repeat(np.arange(len(arrays)), lengths), np.arange(len(rows) - 1) - np.repeat(first, lengths)] = rows[:-1]
    return jax.device_put(out)
  # The last row of ``rows`` is the padding.
  index = np.where(np.arange(length) < lengths[:, None], first[:, None] + np.arange(length), len(rows) - 1)
  return _gather_rows(jax.device_put(rows), jax.device_put(index.astype(np.int32)))


@dataclasses.dataclass(frozen=True)
class HostSplits:
  """Per-site standardized splits on the host (numpy), before stacking."""

  names: tuple
  train: tuple  # of (x, y)
  val: tuple
  test: tuple
  meta_base: np.ndarray  # [C, 3]
  meta_goal: np.ndarray  # [C, 15]


def _named(names: Sequence[str], shown: int = 20) -> str:
  """``"a, b, c"``; beyond ``shown`` names, the first ones and how many more."""
  if len(names) <= shown:
    return ", ".join(names)
  return f"{', '.join(names[:shown])}, … and {len(names) - shown} more"


def dropped_sites_message(cohorts: Cohorts, min_rows: int) -> str:
  """The warning for sites with fewer than ``min_rows`` rows, naming them.

  When they are most of the data (more than half of the sites; issue 9), it says
  so plainly, with how many sites and rows are left. More than half of the rows
  cannot go with half of the sites or fewer: every dropped site is smaller than
  every kept one.
  """
  sizes = np.array([len(s.y) for s in cohorts.sites], np.int64)
  small = sizes < min_rows
  names = [s.name for s, drop in zip(cohorts.sites, small) if drop]
  head = f"dropped {int(small.sum())} site(s) with fewer than {min_rows} rows"
  rows, left = int(sizes.sum()), int(sizes[~small].sum())
  if 2 * small.sum() > len(sizes):
    head += (f"; that is most of the data: only {int((~small).sum())} of {len(sizes)} sites and {left:,} of "
             f"{rows:,} rows are left (lower data.min_site_rows to keep more). Dropped")
  return f"{head}: {_named(names)}"


def split_and_standardize(cohorts: Cohorts, seed: int, split=(0.7, 0.15, 0.15),
                          min_rows: int = 20) -> HostSplits:
  """Validates, drops small sites (with a warning naming them), splits and standardizes.

  Continuous features are standardized per site with that site's train-split
  mean and standard deviation only (SPEC §2.1, paper 000 §6.1). The sites are
  processed together (rows concatenated, statistics over equal-sized sites at
  once), which gives bit for bit the per-site result and scales to 100,000 sites.

  Args:
    cohorts: raw per-site data.
    seed: seed of the split (the federation is fixed across experiment seeds).
    split: train / val / test fractions.
    min_rows: sites with fewer rows are dropped with a warning naming them.

  Returns:
    :class:`HostSplits`; its per-site arrays are views of shared arrays.
  """
  validate_cohorts(cohorts)
  if abs(sum(split) - 1.0) > 1e-6 or min(split) <= 0:
    raise DataError(f"split fractions must be positive and sum to 1, got {tuple(split)}")
  kept = [s for s in cohorts.sites if len(s.y) >= min_rows]
  dropped = [s.name for s in cohorts.sites if len(s.y) < min_rows]
  if dropped:
    warnings.warn(dropped_sites_message(cohorts, min_rows), stacklevel=2)
  if not kept:
    raise DataError(f"no site has at least {min_rows} rows (min_site_rows); lower it or merge sites")
  rng = np.random.default_rng(seed)
  cont = np.asarray(cohorts.continuous, bool)
  sizes = np.array([len(s.y) for s in kept], np.int64)
  y = np.concatenate([np.asarray(s.y, np.float32) for s in kept])
  parts = len(split)
  site = np.repeat(np.arange(len(kept)), sizes)
  key = parts * site + _split_rows(rng, y, sizes, split)
  order = np.argsort(key, kind="stable")  # site by site, part by part, rows in their original order
  counts = np.bincount(key, minlength=parts * len(kept)).reshape(len(kept), parts)
  starts = (np.cumsum(counts.ravel()) - counts.ravel()).reshape(counts.shape)
  x = np.concatenate([np.asarray(s.x, np.float32) for s in kept])[order]
  y = y[order]
  site = site[order]
  n_tr, tr0 = counts[:, 0], starts[:, 0]
  mu, sd = _train_statistics(x, tr0, n_tr, (np.mean, np.std))
  sd = np.where(sd > 1e-6, sd, 1.0)
  x[:, cont] = (x[:, cont] - mu[:, cont][site]) / sd[:, cont][site]
  # Metadata (SPEC §2.1): cohort-level aggregates of the train split only.
  (pos,) = _train_statistics(y, tr0, n_tr, (np.mean,))
  if all(s.year is None for s in kept):
    year = np.full(len(kept), 2030.0)
  else:  # a site without years gets 2030 (mean of 2030s, exactly)
    years = np.concatenate([np.full(len(s.y), 2030.0) if s.year is None else np.asarray(s.year) for s in kept])
    (year,) = _train_statistics(years[order], tr0, n_tr, (np.mean,))
  meta_b = np.stack([pos.astype(np.float64), np.log(n_tr.astype(np.float64)), year / 2030.0], axis=1)
  meta_b = meta_b.astype(np.float32)
  if all(s.charlson is None for s in kept):
    charl = np.zeros((len(kept), 12), np.float32)
  else:  # a site without Charlson flags gets zeros (mean of zeros, exactly)
    flags = np.concatenate([np.zeros((len(s.y), 12), np.float32) if s.charlson is None
                            else np.asarray(s.charlson, np.float32) for s in kept])
    (charl,) = _train_statistics(flags[order], tr0, n_tr, (np.mean,))
  ends = starts + counts
  views = [tuple((x[a:b], y[a:b]) for a, b in zip(starts[:, p].tolist(), ends[:, p].tolist()))
           for p in range(parts)]
  return HostSplits(names=tuple(s.name for s in kept), train=views[0], val=views[1], test=views[2],
                    meta_base=meta_b, meta_goal=np.concatenate([meta_b, charl], axis=1))


def stack_splits(host: HostSplits, feature_names: Sequence[str], batch_size: int,
                 num_buckets: int) -> Federation:
  """Stacks host splits into a :class:`Federation` with size buckets for training."""
  n_train = np.array([len(y) for _, y in host.train], np.int32)
  buckets = []
  for group in plan_buckets(n_train, batch_size, num_buckets):
    n_b = int(n_train[group].max())
    buckets.append(TrainBucket(
        client_idx=jnp.asarray(group, jnp.int32),
        x=_pad_stack([host.train[i][0] for i in group], n_b),
        y=_pad_stack([host.train[i][1] for i in group], n_b),
        n=jnp.asarray(n_train[group])))

  def eval_split(split):
    lengths = np.array([len(y) for _, y in split])
    length = max(1, int(lengths.max()))
    m = np.arange(length) < lengths[:, None]
    return _pad_stack([s[0] for s in split], length), _pad_stack([s[1] for s in split], length), jnp.asarray(m)

  x_val, y_val, m_val = eval_split(host.val)
  x_test, y_test, m_test = eval_split(host.test)
  # The splits flat as well (issue 11 item 3): a shared model scores the real rows only (at 100,000 centers the
  # padded splits hold ~13× more rows than the real ones); personalized models read the padded splits.
  flat = lambda split: eval_rows([s[0] for s in split], [s[1] for s in split])  # noqa: E731
  return Federation(
      buckets=tuple(buckets), x_val=x_val, y_val=y_val, m_val=m_val,
      x_test=x_test, y_test=y_test, m_test=m_test, n_train=jnp.asarray(n_train),
      meta_base=jnp.asarray(host.meta_base), meta_goal=jnp.asarray(host.meta_goal),
      names=tuple(host.names), feature_names=tuple(feature_names), val_rows=flat(host.val),
      test_rows=flat(host.test))


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


def scorable_centers(federation: Federation) -> np.ndarray:
  """``[C]`` bool: the center's test split holds both labels, so its test AUROC is defined (SPEC §3.1)."""
  y, m = np.asarray(federation.y_test), np.asarray(federation.m_test)
  return (m & (y > 0.5)).any(axis=1) & (m & (y < 0.5)).any(axis=1)


def pooled(federation: Federation) -> Federation:
  """The centralized view: every client's train rows in one client; val/test stay per client.

  Used by the Centralized row (SPEC §3.3): one model trained on the pooled
  train splits, evaluated on every center's own test split.
  """
  xs, ys = [], []
  for b in federation.buckets:  # one host copy per bucket, not per client: 100,000 clients pool in seconds
    valid = np.arange(b.x.shape[1]) < np.asarray(b.n)[:, None]  # [C_b, n_b], clients then rows in order
    xs.append(np.asarray(b.x)[valid])
    ys.append(np.asarray(b.y)[valid])
  x = np.concatenate(xs)[None]
  y = np.concatenate(ys)[None]
  bucket = TrainBucket(client_idx=jnp.zeros((1,), jnp.int32), x=jnp.asarray(x), y=jnp.asarray(y),
                       n=jnp.asarray([x.shape[1]], jnp.int32))
  return federation.replace(buckets=(bucket,))


def with_train_rows(federation: Federation) -> Federation:
  """The federation with its flat train-row store (:class:`TrainRows`), built on the host from its buckets.

  Methods that train a subset of clients per round ask for it (through their ``prepare``); a full round's
  one-body training reads it too (:func:`fedjax_sim.engine.local.with_train_store` adds it where that path
  runs), so large federations that train by buckets carry no second copy.
  """
  if federation.rows is not None:
    return federation
  c = federation.num_clients
  n = np.asarray(federation.n_train).astype(np.int64)
  xs, ys = [None] * c, [None] * c
  for b in federation.buckets:
    bx, by, bn = np.asarray(b.x), np.asarray(b.y), np.asarray(b.n)
    for j, i in enumerate(np.asarray(b.client_idx).tolist()):
      xs[i], ys[i] = bx[j, :bn[j]], by[j, :bn[j]]
  x = np.concatenate(xs + [np.zeros((1,) + xs[0].shape[1:], xs[0].dtype)])
  y = np.concatenate(ys + [np.zeros((1,) + ys[0].shape[1:], ys[0].dtype)])
  start = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int32)
  owner = np.repeat(np.arange(c + 1, dtype=np.int32), np.append(n, 1))
  return federation.replace(rows=TrainRows(x=jnp.asarray(x), y=jnp.asarray(y), start=jnp.asarray(start),
                                           n=jnp.asarray(n.astype(np.int32)), owner=jnp.asarray(owner)))


EVAL_CHUNK = 512
"""Rows scored per pass by the flat evaluation (:class:`EvalRows`): bounds activation memory."""


def eval_rows(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], chunk: int = EVAL_CHUNK) -> EvalRows:
  """Flat :class:`EvalRows` of per-client splits ``xs``/``ys`` (host arrays), padded to a multiple of ``chunk``."""
  c = len(xs)
  lengths = np.array([len(a) for a in xs], np.int64)
  total = int(lengths.sum())
  padded = max(chunk, -(-total // chunk) * chunk)
  x = np.zeros((padded,) + xs[0].shape[1:], xs[0].dtype)
  y = np.zeros((padded,) + ys[0].shape[1:], ys[0].dtype)
  if total:
    x[:total] = np.concatenate(list(xs))
    y[:total] = np.concatenate(list(ys))
  client = np.full(padded, c, np.int32)
  client[:total] = np.repeat(np.arange(c, dtype=np.int32), lengths)
  return EvalRows(x=jnp.asarray(x), y=jnp.asarray(y), client=jnp.asarray(client))


EVAL_BUCKETS = 4
"""Size groups of the bucketed evaluation of per-client models (:func:`eval_plan`)."""

EVAL_PLAN_MIN_ROWS = 1 << 18
"""Padded rows C × V of a split below which per-client models are scored on the padded split in one piece.

Each size group is one more compiled evaluation at every site that scores the split (the round's validation
inside the scan, the final validation and test), and the grouped numbers equal the padded ones bit for bit
(tests/test_engine.py). Measured (session 9, CPU AMD EPYC 2 cores, ABPS-X at 230 centers, 5 seeds): the 4 groups
of a 230 × 311 split were about 20 % of XLA's compile of the program (12,647 → 10,315 lines of StableHLO with one
piece), while the padded evaluation they avoid is 71,530 rows, a few hundredths of a second per round on this
CPU. At 100,000 centers (12 million padded rows against about 500,000 real ones) the groups are what makes the
evaluation affordable; at 2¹⁸ padded rows an evaluation of the clinical MLP is still milliseconds."""


def eval_plan(mask, num_buckets: int = EVAL_BUCKETS, min_rows: int = EVAL_PLAN_MIN_ROWS) -> tuple:
  """Host: static size groups for scoring per-client (stacked) models on a padded split ``mask [C, V]`` (issue 11
  item 3): clients sorted by the end of their last real row and cut like training buckets (:func:`plan_buckets`
  with batch 1: padded rows minimized), each group scored on its first ``length`` rows only. At 100,000 centers
  the splits are padded to 120 rows against a mean of about 5; the groups cost about the real rows. A split of
  fewer than ``min_rows`` padded rows gets no plan (:data:`EVAL_PLAN_MIN_ROWS`: there the groups cost more
  compile time than the padded rows cost run time).

  Returns:
    ``((clients [b] int32, length), ...)``: every client in exactly one group; ``length`` ≥ 1 (a group of
    clients without rows still scores one masked row, as the padded split would: the same NaN or 0). ``()``
    (score the padded split whole) for an empty or small split.
  """
  m = np.asarray(mask, bool)
  if m.ndim != 2 or m.shape[0] == 0 or m.size < min_rows:
    return ()
  ends = np.where(m.any(axis=1), m.shape[1] - np.argmax(m[:, ::-1], axis=1), 0)  # last real row + 1
  groups = plan_buckets(ends, 1, num_buckets)
  return tuple((np.sort(g).astype(np.int32), max(1, int(ends[g].max()))) for g in groups)
