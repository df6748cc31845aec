"""Image and text federations: a labelled dataset, a partition into clients, per-client splits (issue 10 item 5).

:func:`load_labeled` reads the source a :class:`~fedjax_sim.config.DataConfig`
names (files the user holds; nothing is downloaded), :func:`partition_rows`
cuts it into clients, and :func:`from_partition` stacks the clients into a
:class:`~fedjax_sim.data.federation.Federation` with size-bucketed training
rows and padded validation/test splits. Features keep their dtype (uint8
images stay uint8 on the device: 4× less memory than float32; the models
scale them).
"""
from __future__ import annotations

from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np

from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.federation import Federation, SharedTest, TrainBucket, _pad_stack, eval_rows, plan_buckets
from fedjax_sim.errors import ConfigError, DataError

IMAGE_TEXT_SOURCES = ("fashion_mnist", "shakespeare", "cifar10", "leaf_femnist", "leaf_shakespeare", "pacs")


def load_labeled(data) -> tuple:
  """``(train, test)`` LabeledData of the source ``data.source`` (test may be None)."""
  from fedjax_sim.data import sources
  if data.source == "fashion_mnist":
    return sources.load_fashion_mnist(data.path)
  if data.source == "cifar10":
    return sources.load_cifar10(data.path)
  if data.source == "leaf_femnist":
    return sources.load_leaf(data.path, "femnist")
  if data.source == "leaf_shakespeare":
    return sources.load_leaf(data.path, "shakespeare")
  if data.source == "pacs":
    return sources.load_pacs(data.path)
  if data.source == "shakespeare":
    roles = sources.shakespeare_roles(data.path)
    if data.partition == "natural" and data.num_clients > 0:
      # LEAF's protocol keeps the largest roles (and the next data.test_users as held-out users): choose them before
      # windowing (all 1,169 roles' windows are 2.7 GB).
      largest = sorted(roles, key=lambda r: (-len(roles[r]), r))[:data.num_clients + data.test_users]
      roles = {r: roles[r] for r in sorted(largest, key=lambda r: (-len(roles[r]), r))}
    return sources.shakespeare_windows(roles, max_windows_per_role=data.max_rows_per_client,
                                       description=f"Shakespeare next-character windows ({len(roles)} roles)"), None
  raise ConfigError(f"data.source {data.source!r} is not an image or text source ({', '.join(IMAGE_TEXT_SOURCES)})")


def partition_rows(train: LabeledData, data) -> tuple:
  """``(parts, names)``: each client's rows of ``train`` under ``data.partition`` (SPEC §2.2 "Partitions").

  ``natural`` keeps the data's own groups (writers, speaking roles, domains); with ``data.num_clients`` > 0 the
  largest ``num_clients`` groups (LEAF's protocol of the top users by size; issue 13). The synthetic partitions
  need ``data.num_clients``.
  """
  from fedjax_sim.data import partition as P
  k = data.num_clients
  if data.partition == "natural":
    if train.groups is None:
      raise ConfigError(f"data.partition = natural needs data with natural clients (writers, roles); "
                        f"{data.source} has none: choose iid, dirichlet, cluster or skew and set data.num_clients")
    if k > 0:
      parts, _ = P.leaf_top_users(train.groups, k, 0)
      sizes = np.bincount(train.groups, minlength=len(train.group_names))
      order = np.argsort(-sizes, kind="stable")[:k]
      return parts, tuple(train.group_names[g] for g in order)
    parts, kept = P.natural_split(train.groups, min_size=1)
    return parts, tuple(train.group_names[g] for g in kept)
  if k < 1:
    raise ConfigError(f"data.partition = {data.partition} needs data.num_clients ≥ 1 (how many clients to cut "
                      f"the {train.num_rows} rows into)")
  y = train.y if train.y.ndim == 1 else train.y[:, -1]
  if data.partition == "iid":
    parts = P.iid_split(np.random.default_rng(data.data_seed), train.num_rows, k)
  elif data.partition == "dirichlet":
    parts = P.niid_dirichlet_split(data.data_seed, y, k, data.dirichlet_alpha, min_size=data.min_client_rows)
  elif data.partition == "cluster":
    parts = P.cluster_dirichlet_split(data.data_seed, y, k, data.clusters, data.dirichlet_alpha,
                                      beta_in=data.beta_in, min_size=data.min_client_rows)
  else:
    parts = P.skew_split(data.data_seed, y, k, data.classes_per_client, num_classes=train.num_classes)
  return parts, tuple(P.client_names(k))


def split_client_rows(rng: np.random.Generator, rows: np.ndarray, fractions: Sequence[float]) -> tuple:
  """One client's rows shuffled and cut into train/val/test at the rounded cumulative fractions; each part gets at
  least one row when the client has three or more (SPEC §4.5: 80/10/10 per client)."""
  rows = np.asarray(rows)[rng.permutation(len(rows))]
  n = len(rows)
  n_val = max(1, int(round(fractions[1] * n))) if n >= 3 else 0
  n_test = max(1, int(round(fractions[2] * n))) if n >= 3 else 0
  n_train = n - n_val - n_test
  return rows[:n_train], rows[n_train:n_train + n_val], rows[n_train + n_val:]


def from_partition(data: LabeledData, parts: Sequence[np.ndarray], names: Sequence[str], *, seed: int,
                   split=(0.8, 0.1, 0.1), batch_size: int = 32, num_buckets: int = 4,
                   shared_test: Optional[LabeledData] = None) -> Federation:
  """Stacks the clients ``parts`` (row indices of ``data``) into a :class:`Federation`.

  Each client's rows are split train/val/test by ``split`` (drawn from ``seed``, the same for every experiment
  seed); training rows are size-bucketed (:func:`plan_buckets`), evaluation splits padded. ``shared_test``, when
  given, is a test set every client is also scored on, with each client's train label distribution as its class
  weights (iPFL's reweighted accuracy, SPEC §5).

  Raises:
    DataError: a client without a train row.
  """
  rng = np.random.default_rng(seed)
  splits = [split_client_rows(rng, p, split) for p in parts]
  n_train = np.array([len(s[0]) for s in splits], np.int32)
  if (n_train == 0).any():
    bad = [names[i] for i in np.flatnonzero(n_train == 0)[:5]]
    raise DataError(f"{int((n_train == 0).sum())} client(s) have no train row ({', '.join(bad)}); raise "
                    f"data.min_client_rows or use fewer clients")
  task = "multiclass" if data.y.ndim == 1 else "next_char"
  buckets = []
  for group in plan_buckets(n_train, batch_size, num_buckets):
    n_b = int(n_train[group].max())
    buckets.append(TrainBucket(
        client_idx=jnp.asarray(group, jnp.int32),
        x=_pad_stack([data.x[splits[i][0]] for i in group], n_b),
        y=_pad_stack([data.y[splits[i][0]].astype(np.int32) for i in group], n_b),
        n=jnp.asarray(n_train[group])))

  def eval_split(part):
    lengths = np.array([len(s[part]) for s in splits])
    length = max(1, int(lengths.max()))
    x = _pad_stack([data.x[s[part]] if len(s[part]) else data.x[:0] for s in splits], length)
    y = _pad_stack([data.y[s[part]].astype(np.int32) for s in splits], length)
    return x, y, jnp.asarray(np.arange(length) < lengths[:, None])

  x_val, y_val, m_val = eval_split(1)
  x_test, y_test, m_test = eval_split(2)
  shared = None
  if shared_test is not None:
    from fedjax_sim.data.partition import class_histogram
    # Token windows: every position is a scored sample (the next-character task's accuracy), so the weights count
    # every position's label of the client's train windows.
    width = int(np.prod(data.y.shape[1:], dtype=np.int64))  # 1 for class labels, L for token windows
    positions = [(np.asarray(s[0])[:, None] * width + np.arange(width)).ravel() for s in splits]
    hist = class_histogram(data.y.reshape(-1), positions, data.num_classes).astype(np.float32)
    shared = SharedTest(x=jnp.asarray(shared_test.x), y=jnp.asarray(shared_test.y.astype(np.int32)),
                        class_weights=jnp.asarray(hist / np.maximum(hist.sum(1, keepdims=True), 1.0)))
  return Federation(buckets=tuple(buckets), x_val=x_val, y_val=y_val, m_val=m_val, x_test=x_test, y_test=y_test,
                    m_test=m_test, n_train=jnp.asarray(n_train), names=tuple(names), feature_names=(),
                    shared_test=shared, task=task, num_classes=int(data.num_classes),
                    val_rows=eval_rows([data.x[s[1]] for s in splits], [data.y[s[1]].astype(np.int32) for s in splits]),
                    test_rows=eval_rows([data.x[s[2]] for s in splits],
                                        [data.y[s[2]].astype(np.int32) for s in splits]))


def check_shared_test(d) -> None:
  """Checks ``data.test_users`` against the settings it needs, before anything is loaded.

  Raises:
    ConfigError: ``test_users`` without ``partition = natural``, ``num_clients`` ≥ 1 and ``shared_test = true``.
  """
  if d.test_users and not (d.partition == "natural" and d.num_clients > 0 and d.shared_test):
    raise ConfigError(f"data.test_users = {d.test_users} holds out the next users after the data.num_clients largest "
                      f"as the shared test set: it needs data.partition = natural (got {d.partition!r}), "
                      f"data.num_clients ≥ 1 (got {d.num_clients}) and data.shared_test = true (got "
                      f"{str(d.shared_test).lower()})")


def held_out_users(train: LabeledData, num_clients: int, test_users: int, rows_per_user: int = 0) -> LabeledData:
  """LEAF's held-out users as paper 003's code evaluates them: the rows of the ``test_users`` groups ranked right
  after the ``num_clients`` largest (:func:`~fedjax_sim.data.partition.leaf_top_users`; issue 13: "train on the
  top-N users by sample count, test on the next users (20 writers / 10 roles)"). ``rows_per_user`` > 0 keeps at
  most that many rows of each held-out user, evenly strided from its first (row ⌊k·n/m⌋ of its n, k < m), as
  :func:`~fedjax_sim.data.sources.shakespeare_windows` caps windows; 0 keeps all.

  Raises:
    ConfigError: the data has no natural groups.
    DataError: fewer than ``num_clients + test_users`` groups.
  """
  from fedjax_sim.data import partition as P
  if train.groups is None:
    raise ConfigError("data.test_users needs data with natural clients (writers, roles): this source has none")
  _, rows = P.leaf_top_users(train.groups, num_clients, test_users)
  if rows_per_user:
    kept = []
    for g in np.unique(train.groups[rows]):
      own = rows[train.groups[rows] == g]
      m = min(rows_per_user, len(own))
      kept.append(own[(np.arange(m) * len(own)) // m])
    rows = np.sort(np.concatenate(kept))
  return train.subset(rows)


def labeled_federation(config) -> Federation:
  """The federation an image/text experiment names: load, partition, split, stack (nothing is downloaded)."""
  from fedjax_sim.config import _split_fractions
  d = config.data
  check_shared_test(d)
  train, test = load_labeled(d)
  if d.test_users:
    test = held_out_users(train, d.num_clients, d.test_users, d.test_rows_per_user)
  elif d.shared_test and test is None:
    raise ConfigError(f"data.shared_test = true needs a source with a test file (fashion_mnist, cifar10) or held-out "
                      f"users (data.test_users ≥ 1 with partition natural); {d.source!r} has no test file: set "
                      f"data.test_users or data.shared_test = false")
  parts, names = partition_rows(train, d)
  return from_partition(train, parts, names, seed=d.data_seed, split=_split_fractions(d.split),
                        batch_size=config.learner.batch_size, num_buckets=config.learner.num_buckets,
                        shared_test=test if d.shared_test else None)
