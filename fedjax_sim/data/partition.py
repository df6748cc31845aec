"""Synthetic partitions of a pooled table into clients, returned as :class:`Cohorts` (SPEC §2.2, "Partitions").

* :func:`iid_partition`: a uniform random split into near-equal parts.
* :func:`dirichlet_partition`: label skew after Hsu, Qi & Brown 2019,
  "Measuring the effects of non-identical data distribution for federated
  visual classification" (arXiv:1909.06335): each class's rows are spread
  over the clients with Dirichlet(α) proportions.
* :func:`fedprox_synthetic`: the Synthetic(α, β) federation of Li et al.
  2020, "Federated optimization in heterogeneous networks" (FedProx, MLSys),
  §5.1, binarized for this library's binary task.

The index-level splits (:func:`iid_split`, :func:`dirichlet_label_split`) work
for any number of classes; the Cohorts-returning wrappers require binary labels.
All randomness comes from ``numpy.random.default_rng(seed)``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from fedjax_sim.data.cohorts import Cohorts, SiteCohort, validate_cohorts
from fedjax_sim.errors import DataError


def client_names(num_clients: int) -> list:
  """``client_000``, ``client_001``, … (zero-padded so that name order is index order)."""
  width = max(3, len(str(num_clients - 1)))
  return [f"client_{i:0{width}d}" for i in range(num_clients)]


def _check_num_clients(num_clients, num_rows: Optional[int] = None) -> None:
  if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
    raise DataError(f"num_clients must be an integer >= 1, got {num_clients!r}")
  if num_rows is not None and num_clients > num_rows:
    raise DataError(f"num_clients must be between 1 and the number of rows ({num_rows}), got {num_clients}")


def _check_table(x, y, feature_names, continuous) -> tuple:
  """Validates a pooled table; returns ``(x float32 [n, d], y [n])``."""
  x = np.asarray(x, np.float32)
  y = np.asarray(y)
  if x.ndim != 2:
    raise DataError(f"x must be a 2-d array [rows, features], got shape {x.shape}")
  if y.shape != (x.shape[0],):
    raise DataError(f"y must have one label per row of x ({x.shape[0]}), got shape {y.shape}")
  if len(feature_names) != x.shape[1] or np.shape(continuous) != (x.shape[1],):
    raise DataError(f"feature_names and continuous must have one entry per feature ({x.shape[1]}), got "
                    f"{len(feature_names)} and {np.shape(continuous)}")
  return x, y


def _to_cohorts(x, y, parts, feature_names, continuous, description) -> Cohorts:
  """One :class:`SiteCohort` per index array in ``parts``; validated."""
  names = client_names(len(parts))
  sites = tuple(SiteCohort(name=name, x=x[idx], y=y[idx].astype(np.int32)) for name, idx in zip(names, parts))
  cohorts = Cohorts(sites=sites, feature_names=tuple(feature_names), continuous=np.asarray(continuous, bool),
                    description=description)
  validate_cohorts(cohorts)
  return cohorts


def iid_split(rng: np.random.Generator, num_rows: int, num_clients: int) -> list:
  """A uniformly random split of ``range(num_rows)`` into ``num_clients`` parts whose sizes differ by at most 1.

  Args:
    rng: the random generator.
    num_rows: the number of rows.
    num_clients: the number of parts, in 1..num_rows.

  Returns:
    ``num_clients`` sorted int arrays of row indices.
  """
  _check_num_clients(num_clients, num_rows)
  return [np.sort(part) for part in np.array_split(rng.permutation(num_rows), num_clients)]


def iid_partition(seed: int, x: np.ndarray, y: np.ndarray, num_clients: int, feature_names: Sequence[str],
                  continuous: np.ndarray) -> Cohorts:
  """IID partition of a pooled table: a random permutation cut into near-equal parts.

  Args:
    seed: seed of ``numpy.random.default_rng``.
    x: ``[n, d]`` raw features.
    y: ``[n]`` binary labels.
    num_clients: the number of clients, in 1..n.
    feature_names: ``d`` column names.
    continuous: ``[d]`` bool, True for continuous columns.

  Returns:
    :class:`Cohorts` with sites ``client_000``, …; sizes differ by at most 1.
  """
  x, y = _check_table(x, y, feature_names, continuous)
  parts = iid_split(np.random.default_rng(seed), x.shape[0], num_clients)
  return _to_cohorts(x, y, parts, feature_names, continuous, f"IID partition of {x.shape[0]} rows into "
                     f"{num_clients} clients (seed {seed})")


def dirichlet_label_split(rng: np.random.Generator, y: np.ndarray, num_clients: int, alpha: float,
                          min_size: int = 10, max_tries: int = 1000) -> list:
  """Dirichlet(α) label-skew split (Hsu et al. 2019), resampled until every client has ``min_size`` rows.

  For each class, the class's rows are shuffled and cut at the cumulative
  proportions ``p ~ Dirichlet(α · 1_num_clients)``; client i gets the i-th piece
  of every class. Small α concentrates each class on few clients. The whole
  draw is repeated while some client has fewer than ``min_size`` rows (the
  resampling loop of the NIID-Bench code of Li et al. 2022, "Federated learning
  on non-IID data silos: an experimental study").

  Args:
    rng: the random generator.
    y: ``[n]`` labels (any number of classes).
    num_clients: the number of clients, in 1..n.
    alpha: the Dirichlet concentration, > 0.
    min_size: the least number of rows per client, >= 0.
    max_tries: the most draws before giving up, >= 1.

  Returns:
    ``num_clients`` sorted int arrays of row indices, disjoint and covering
    every row.

  Raises:
    DataError: a bad argument, or no draw met ``min_size`` in ``max_tries``.
  """
  y = np.asarray(y)
  n = y.shape[0]
  _check_num_clients(num_clients, n)
  if not np.isscalar(alpha) or not np.isfinite(alpha) or alpha <= 0:
    raise DataError(f"alpha must be a finite number > 0, got {alpha!r}")
  if min_size < 0 or min_size * num_clients > n:
    raise DataError(f"min_size must be between 0 and rows / num_clients = {n // num_clients}, got {min_size}")
  if max_tries < 1:
    raise DataError(f"max_tries must be >= 1, got {max_tries}")
  class_rows = [np.flatnonzero(y == c) for c in np.unique(y)]
  for _ in range(max_tries):
    parts = [[] for _ in range(num_clients)]
    for rows in class_rows:
      rows = rng.permutation(rows)
      proportions = rng.dirichlet(np.full(num_clients, float(alpha)))
      cuts = (np.cumsum(proportions)[:-1] * len(rows)).astype(int)
      for i, piece in enumerate(np.split(rows, cuts)):
        parts[i].append(piece)
    parts = [np.sort(np.concatenate(p)) for p in parts]
    if min(len(p) for p in parts) >= min_size:
      return parts
  raise DataError(
      f"Dirichlet partition: no draw in max_tries={max_tries} gave every one of the {num_clients} clients at "
      f"least min_size={min_size} rows (alpha={alpha}); use a larger alpha or fewer clients")


def dirichlet_partition(seed: int, x: np.ndarray, y: np.ndarray, num_clients: int, alpha: float,
                        feature_names: Sequence[str], continuous: np.ndarray, min_size: int = 10,
                        max_tries: int = 1000) -> Cohorts:
  """Dirichlet(α) label-skew partition of a pooled table (Hsu et al. 2019; SPEC §2.2).

  Args:
    seed: seed of ``numpy.random.default_rng``.
    x: ``[n, d]`` raw features.
    y: ``[n]`` binary labels.
    num_clients: the number of clients, in 1..n.
    alpha: the Dirichlet concentration, > 0 (small = strong label skew).
    feature_names: ``d`` column names.
    continuous: ``[d]`` bool, True for continuous columns.
    min_size: the least number of rows per client.
    max_tries: the most draws of the whole partition.

  Returns:
    :class:`Cohorts` with sites ``client_000``, …

  Raises:
    DataError: a bad argument, or ``max_tries`` draws without meeting ``min_size``.
  """
  x, y = _check_table(x, y, feature_names, continuous)
  parts = dirichlet_label_split(np.random.default_rng(seed), y, num_clients, alpha, min_size, max_tries)
  return _to_cohorts(x, y, parts, feature_names, continuous, f"Dirichlet(alpha={alpha}) label-skew partition "
                     f"of {x.shape[0]} rows into {num_clients} clients (seed {seed})")


def fedprox_synthetic(seed: int, alpha: float, beta: float, num_clients: int, num_features: int = 60,
                      num_classes: int = 2, samples_per_client: Optional[int] = None,
                      iid: bool = False) -> Cohorts:
  """The Synthetic(α, β) federation of FedProx (Li et al. 2020, §5.1 and its ``generate_niid`` script).

  For client k: ``u_k ~ N(0, α²)``, ``B_k ~ N(0, β²)``; ``W_k [d, c] ~ N(u_k, 1)``,
  ``b_k [c] ~ N(u_k, 1)``; ``v_k [d] ~ N(B_k, 1)``; rows ``x ~ N(v_k, Σ)`` with
  ``Σ = diag(j^-1.2)``, j = 1..d; class ``argmax(x W_k + b_k)``. α controls how
  much the clients' models differ, β how much their inputs differ. With
  ``iid=True`` every client shares one ``W, b ~ N(0, 1)`` and ``v_k = B_k · 1``
  (the paper's Synthetic-IID uses α = β = 0). Client sizes follow the
  reference code: ``floor(lognormal(4, 2)) + 50`` unless ``samples_per_client``
  fixes them.

  Binarization (this library trains binary classifiers): the paper uses 10
  classes; here the default is ``num_classes=2``, where the argmax over two
  logits is already a binary label. For ``num_classes > 2`` the label is 1 when
  the argmax class is in the upper half (``class >= num_classes // 2``).

  Args:
    seed: seed of ``numpy.random.default_rng``.
    alpha: model heterogeneity, >= 0 (the standard deviation of u_k).
    beta: input heterogeneity, >= 0 (the standard deviation of B_k).
    num_clients: the number of clients, >= 1 (the paper uses 30).
    num_features: d, >= 1 (the paper uses 60).
    num_classes: classes before binarization, >= 2.
    samples_per_client: rows per client, >= 1, or None for the log-normal sizes.
    iid: the Synthetic-IID variant.

  Returns:
    :class:`Cohorts` with sites ``client_000``, …, features ``x00``, … (all continuous).
  """
  _check_num_clients(num_clients)
  for name, value in (("alpha", alpha), ("beta", beta)):
    if not np.isscalar(value) or not np.isfinite(value) or value < 0:
      raise DataError(f"{name} must be a finite number >= 0, got {value!r}")
  if num_features < 1:
    raise DataError(f"num_features must be >= 1, got {num_features}")
  if num_classes < 2:
    raise DataError(f"num_classes must be >= 2, got {num_classes}")
  if samples_per_client is not None and samples_per_client < 1:
    raise DataError(f"samples_per_client must be >= 1 or None, got {samples_per_client}")
  rng = np.random.default_rng(seed)
  if samples_per_client is None:
    sizes = rng.lognormal(4.0, 2.0, num_clients).astype(int) + 50
  else:
    sizes = np.full(num_clients, samples_per_client)
  u = rng.normal(0.0, alpha, num_clients)
  b_mean = rng.normal(0.0, beta, num_clients)
  scale = np.arange(1, num_features + 1) ** -0.6  # sqrt of Σ_jj = j^-1.2
  if iid:
    w_shared = rng.normal(0.0, 1.0, (num_features, num_classes))
    b_shared = rng.normal(0.0, 1.0, num_classes)
  xs, ys, parts, start = [], [], [], 0
  for k in range(num_clients):
    if iid:
      v, w, b = np.full(num_features, b_mean[k]), w_shared, b_shared
    else:
      v = rng.normal(b_mean[k], 1.0, num_features)
      w = rng.normal(u[k], 1.0, (num_features, num_classes))
      b = rng.normal(u[k], 1.0, num_classes)
    xk = v + scale * rng.standard_normal((sizes[k], num_features))
    classes = np.argmax(xk @ w + b, axis=1)
    xs.append(xk)
    ys.append((classes >= num_classes // 2).astype(np.int32))
    parts.append(np.arange(start, start + sizes[k]))
    start += sizes[k]
  names = [f"x{j:0{len(str(num_features - 1))}d}" for j in range(num_features)]
  return _to_cohorts(np.concatenate(xs).astype(np.float32), np.concatenate(ys), parts, names,
                     np.ones(num_features, bool),
                     f"FedProx Synthetic({alpha}, {beta}){' IID' if iid else ''}: {num_clients} clients, "
                     f"{num_features} features, binarized from {num_classes} classes (seed {seed})")
