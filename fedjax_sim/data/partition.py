"""Synthetic partitions of a pooled table into clients, returned as :class:`Cohorts` (SPEC §2.2, "Partitions").

* :func:`iid_partition`: a uniform random split into near-equal parts.
* :func:`dirichlet_partition`: label skew after Hsu, Qi & Brown 2019,
  "Measuring the effects of non-identical data distribution for federated
  visual classification" (arXiv:1909.06335): each class's rows are spread
  over the clients with Dirichlet(α) proportions.
* :func:`fedprox_synthetic`: the Synthetic(α, β) federation of Li et al.
  2020, "Federated optimization in heterogeneous networks" (FedProx, MLSys),
  §5.1, binarized for this library's binary task.
* Label partitions for image and text data (index-level, any number of
  classes): :func:`niid_dirichlet_split` (NIID-Bench's capped Dirichlet),
  :func:`cluster_dirichlet_split` (iPFL's cluster-C-β_in),
  :func:`skew_split` (iPFL's skew-s), :func:`natural_split` (one client per
  writer or speaking role), :func:`leaf_top_users` (LEAF's top-N users and
  test users), and :func:`class_histogram`.

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


# --- Label partitions for image and text data (issue 10 item 5; SPEC §2.2, §4.5, §5) -------------------------
#
# Index-level splits of a pooled labelled set: each returns ``num_clients`` sorted int64 arrays of row indices.
# All randomness comes from ``numpy.random.default_rng(seed)``.


def _check_int(name: str, value, low: int, high: Optional[int] = None) -> int:
  """``value`` as an int in ``low..high`` (``high`` None: no upper bound); DataError otherwise."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (
      high is not None and value > high):
    bounds = f"between {low} and {high}" if high is not None else f">= {low}"
    raise DataError(f"{name} must be an integer {bounds}, got {value!r}")
  return int(value)


def _check_concentration(name: str, value) -> float:
  """A Dirichlet concentration: a finite number > 0."""
  if isinstance(value, bool) or not np.isscalar(value) or not np.isfinite(value) or value <= 0:
    raise DataError(f"{name} must be a finite number > 0, got {value!r}")
  return float(value)


def _check_labels(y) -> np.ndarray:
  """A non-empty 1-d label array."""
  y = np.asarray(y)
  if y.ndim != 1 or y.shape[0] == 0:
    raise DataError(f"y must be a non-empty 1-d array with one label per row, got shape {y.shape}")
  return y


def _check_int_labels(y) -> np.ndarray:
  """A non-empty 1-d array of integer labels >= 0, as int64."""
  y = _check_labels(y)
  if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
    if not np.issubdtype(y.dtype, np.floating) or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
      raise DataError(f"y must hold integer class labels, got dtype {y.dtype}")
  y = y.astype(np.int64)
  if y.min() < 0:
    raise DataError(f"class labels must be >= 0, got {y.min()}")
  return y


def _check_min_size(min_size, max_tries, num_clients: int, num_rows: int) -> None:
  if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 0 or (
      min_size * num_clients > num_rows):
    raise DataError(f"min_size must be an integer between 0 and rows / num_clients = {num_rows // num_clients}, "
                    f"got {min_size!r}")
  _check_int("max_tries", max_tries, 1)


def _capped_dirichlet_draw(rng: np.random.Generator, class_rows: Sequence[np.ndarray], num_parts: int, cap,
                           alpha: float) -> Optional[list]:
  """One pass of NIID-Bench's capped Dirichlet split of ``class_rows`` over ``num_parts`` parts.

  Classes are processed in the given order. For each class, its rows are
  shuffled, ``p ~ Dirichlet(α · 1)`` is drawn, ``p_i`` is zeroed for every part
  that already holds ``>= cap_i`` rows, ``p`` is renormalized, and the shuffled
  rows are cut at ``floor(cumsum(p) · len(rows))``.

  Decisions: the cumulative proportion is set to exactly 1 from the last
  positive ``p_i`` on, so that rounding cannot hand rows to a capped part (in
  NIID-Bench's code ``cumsum`` can end at 1 - ε and the last client, even when
  capped, then gets one row). When every uncapped part drew ``p_i = 0`` exactly
  (possible for tiny α, where NIID-Bench's code would divide 0 by 0) the pass
  fails and the caller draws again. An empty class gives empty pieces.

  Args:
    rng: the random generator (one permutation and one Dirichlet draw per class).
    class_rows: row indices of each class, in processing order.
    num_parts: the number of parts.
    cap: scalar or ``[num_parts]``; part i stops receiving rows once it holds ``>= cap_i``.
    alpha: the Dirichlet concentration.

  Returns:
    ``num_parts`` sorted int64 arrays, disjoint and covering every row; None for a failed pass.
  """
  pieces = [[] for _ in range(num_parts)]
  sizes = np.zeros(num_parts, np.int64)
  for rows in class_rows:
    rows = rng.permutation(rows)
    proportions = rng.dirichlet(np.full(num_parts, alpha))
    proportions = np.where(sizes < cap, proportions, 0.0)
    total = proportions.sum()
    if total <= 0:
      if len(rows):
        return None
      continue
    cumulative = np.cumsum(proportions / total)
    cumulative[np.flatnonzero(proportions)[-1]:] = 1.0
    cuts = (cumulative * len(rows)).astype(int)[:-1]
    for i, piece in enumerate(np.split(rows, cuts)):
      pieces[i].append(piece)
      sizes[i] += len(piece)
  return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, np.int64) for p in pieces]


def niid_dirichlet_split(seed: int, y: np.ndarray, num_clients: int, alpha: float, min_size: int = 10,
                         max_tries: int = 1000) -> list:
  """NIID-Bench's Dirichlet label skew with its size cap (``noniid-labeldir``; SPEC §2.2, §4.5, §5).

  Li, Diao, Chen & He 2022, "Federated Learning on Non-IID Data Silos: An
  Experimental Study" (ICDE), ``partition_data(..., 'noniid-labeldir')``; the
  same code is iPFL's "NIID" partition (paper 003, β = 0.1). Classes are taken
  in increasing label order; for each, ``p ~ Dirichlet(α · 1_num_clients)`` is
  zeroed for the clients that already hold ``>= N / num_clients`` rows (the
  cap), renormalized, and the class's shuffled rows are cut at the cumulative
  proportions. The whole draw is repeated until every client has
  ``>= min_size`` rows (issue 13: NIID-Bench resamples until every client has
  >= 10). It differs only by the cap from :func:`dirichlet_label_split` (Hsu
  et al. 2019), which the clinical pipeline keeps unchanged.

  Args:
    seed: seed of ``numpy.random.default_rng``.
    y: ``[N]`` class labels (any values; classes are ``numpy.unique(y)``).
    num_clients: the number of clients, in 1..N.
    alpha: the Dirichlet concentration α, > 0 (small = strong label skew).
    min_size: the least number of rows per client, in 0..N / num_clients.
    max_tries: the most draws before giving up, >= 1.

  Returns:
    ``num_clients`` sorted int64 arrays of row indices, disjoint and covering every row.

  Raises:
    DataError: a bad argument, or no draw met ``min_size`` in ``max_tries``.
  """
  y = _check_labels(y)
  n = y.shape[0]
  _check_num_clients(num_clients, n)
  alpha = _check_concentration("alpha", alpha)
  _check_min_size(min_size, max_tries, num_clients, n)
  rng = np.random.default_rng(seed)
  class_rows = [np.flatnonzero(y == c) for c in np.unique(y)]
  for _ in range(max_tries):
    parts = _capped_dirichlet_draw(rng, class_rows, num_clients, n / num_clients, alpha)
    if parts is not None and min(len(p) for p in parts) >= min_size:
      return parts
  raise DataError(
      f"NIID-Bench Dirichlet partition: no draw in max_tries={max_tries} gave every one of the {num_clients} "
      f"clients at least min_size={min_size} rows (alpha={alpha}); use a larger alpha, fewer clients or a "
      f"smaller min_size")


def cluster_members(num_clients: int, num_clusters: int) -> list:
  """The clients of each cluster of :func:`cluster_dirichlet_split`: contiguous blocks.

  Decision (iPFL's code requires num_clients divisible by num_clusters; SPEC
  §5 leaves the rest open): with a remainder, the first
  ``num_clients % num_clusters`` clusters get one client more
  (``numpy.array_split`` order).

  Args:
    num_clients: the number of clients, >= 1.
    num_clusters: the number of clusters, in 1..num_clients.

  Returns:
    ``num_clusters`` int64 arrays of client indices, in order, covering ``range(num_clients)``.
  """
  _check_num_clients(num_clients)
  _check_int("num_clusters", num_clusters, 1, int(num_clients))
  return [m.astype(np.int64) for m in np.array_split(np.arange(num_clients), num_clusters)]


def cluster_dirichlet_split(seed: int, y: np.ndarray, num_clients: int, num_clusters: int, beta: float,
                            beta_in: float = 10.0, min_size: int = 10, max_tries: int = 1000) -> list:
  """iPFL's "cluster-C-β_in": Dirichlet(β) over clusters, then Dirichlet(β_in) inside each (SPEC §2.2, §5).

  Paper 003 ("Cluster stands for 3 or 4 groups with β = 0.1 among clusters
  [...] β = 10 within each cluster") and its code (``partition_data``,
  ``cluster-{C}-{β_in}``): first each class is spread over the C clusters with
  NIID-Bench's capped Dirichlet(β) split (:func:`niid_dirichlet_split`; cluster
  c's cap is its share of the rows, ``N · m_c / num_clients``, = N / C when C
  divides num_clients), then inside each cluster its rows are spread over the
  cluster's ``m_c`` clients by the capped Dirichlet(β_in) split (cap
  ``N_c / m_c``), redrawn until each of them has ``>= min_size`` rows. Clients
  are assigned to clusters contiguously (:func:`cluster_members`).

  Decisions: each inner redraw starts from empty clients (the authors' code
  keeps appending across redraws, so a row can land twice); when a cluster
  gets fewer than ``m_c · min_size`` rows the cluster-level split is drawn
  again (the authors' code would loop forever); ``max_tries`` bounds all
  draws together, cluster-level and within-cluster, so that an impossible
  setting fails fast.

  Args:
    seed: seed of ``numpy.random.default_rng``.
    y: ``[N]`` class labels (classes are ``numpy.unique(y)``).
    num_clients: the number of clients, in 1..N.
    num_clusters: C, in 1..num_clients.
    beta: the concentration across clusters, > 0 (paper: 0.1).
    beta_in: the concentration across the clients of a cluster, > 0 (paper: 10).
    min_size: the least number of rows per client, in 0..N / num_clients.
    max_tries: the most draws in all (both levels) before giving up, >= 1.

  Returns:
    ``num_clients`` sorted int64 arrays of row indices, disjoint and covering every row.

  Raises:
    DataError: a bad argument, or no draw met ``min_size`` in ``max_tries``.
  """
  y = _check_labels(y)
  n = y.shape[0]
  _check_num_clients(num_clients, n)
  members = cluster_members(num_clients, num_clusters)
  beta = _check_concentration("beta", beta)
  beta_in = _check_concentration("beta_in", beta_in)
  _check_min_size(min_size, max_tries, num_clients, n)
  rng = np.random.default_rng(seed)
  classes = np.unique(y)
  class_rows = [np.flatnonzero(y == c) for c in classes]
  counts = np.array([len(m) for m in members])
  cluster_caps = n * counts / num_clients

  draws = 0  # cluster-level and within-cluster draws together

  def split_cluster(rows: np.ndarray, size: int) -> Optional[list]:
    """The inner capped Dirichlet(β_in) split of one cluster's rows, redrawn until min_size holds; None: failed."""
    nonlocal draws
    inner_rows = [rows[y[rows] == c] for c in classes]
    while draws < max_tries:
      draws += 1
      inner = _capped_dirichlet_draw(rng, inner_rows, size, len(rows) / size, beta_in)
      if inner is not None and min(len(p) for p in inner) >= min_size:
        return inner
    return None

  while draws < max_tries:
    draws += 1
    clusters = _capped_dirichlet_draw(rng, class_rows, len(members), cluster_caps, beta)
    if clusters is None or any(len(rows) < min_size * m for rows, m in zip(clusters, counts)):
      continue
    inner = []
    for rows, m in zip(clusters, counts):
      inner.append(split_cluster(rows, int(m)))
      if inner[-1] is None:
        break
    else:
      return [part for cluster in inner for part in cluster]  # clusters hold contiguous clients, in order
  raise DataError(
      f"cluster partition: no draw in max_tries={max_tries} gave every one of the {num_clients} clients in "
      f"{num_clusters} clusters at least min_size={min_size} rows (beta={beta}, beta_in={beta_in}); use larger "
      f"concentrations, fewer clients or a smaller min_size")


def skew_split(seed: int, y: np.ndarray, num_clients: int, s: int, num_classes: Optional[int] = None) -> list:
  """iPFL's deterministic "skew-s" partition: disjoint equal shards of s classes per client (SPEC §2.2, §5).

  Paper 003 ("each client equally possesses data shards with 5 classes") and
  its code (``partition_data``, ``noniid-skew-s``): the C classes form C/s
  groups of s consecutive labels; client i belongs to group ``g = i mod (C/s)``
  and gets classes ``s·g + j`` for j < s. The ``m = num_clients / (C/s)``
  clients of a group split each of its classes' rows, in row order, into m
  disjoint shards of ``floor(n_class / m)`` rows; client i takes shard
  ``i // (C/s)``. The ``n_class mod m`` rows left over are used by no client
  (as in the authors' code).

  Args:
    seed: unused: the split is deterministic (the authors' code uses its seed only to shuffle each client's
      rows, and the returned arrays are sorted); kept so that every split takes the same leading argument.
    y: ``[N]`` integer labels in ``0..C-1``.
    num_clients: the number of clients, a multiple of C/s.
    s: classes per client, a divisor of C.
    num_classes: C; None for ``max(y) + 1``.

  Returns:
    ``num_clients`` sorted int64 arrays of row indices, disjoint (a subset of the rows).

  Raises:
    DataError: C not divisible by s, num_clients not a multiple of C/s, or a class with fewer rows than m.
  """
  del seed
  y = _check_int_labels(y)
  c = int(y.max()) + 1 if num_classes is None else _check_int("num_classes", num_classes, int(y.max()) + 1)
  s = _check_int("s", s, 1, c)
  _check_num_clients(num_clients)
  if c % s:
    raise DataError(f"skew-s needs the number of classes ({c}) to be divisible by s, got s={s}")
  num_groups = c // s
  if num_clients % num_groups:
    raise DataError(f"skew-s needs num_clients to be a multiple of C/s = {num_groups}, got {num_clients}")
  per_group = num_clients // num_groups
  class_rows = [np.flatnonzero(y == k) for k in range(c)]
  short = [k for k in range(c) if len(class_rows[k]) < per_group]
  if short:
    raise DataError(f"skew-s: class {short[0]} has {len(class_rows[short[0]])} rows, fewer than the {per_group} "
                    f"clients that share it; use fewer clients")
  parts = []
  for i in range(num_clients):
    group, shard = i % num_groups, i // num_groups
    pieces = []
    for j in range(s):
      rows = class_rows[s * group + j]
      size = len(rows) // per_group
      pieces.append(rows[size * shard:size * (shard + 1)])
    parts.append(np.sort(np.concatenate(pieces)).astype(np.int64))
  return parts


def _group_rows(groups) -> tuple:
  """``(ids [G] sorted, counts [G], rows: G int64 arrays)`` of a 1-d group-id array."""
  groups = np.asarray(groups)
  if groups.ndim != 1 or groups.shape[0] == 0:
    raise DataError(f"groups must be a non-empty 1-d array with one group id per row, got shape {groups.shape}")
  ids, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
  order = np.argsort(inverse.reshape(-1), kind="stable")
  rows = [r.astype(np.int64) for r in np.split(order, np.cumsum(counts)[:-1])]
  return ids, counts, rows


def natural_split(groups: np.ndarray, min_size: int = 1) -> tuple:
  """Natural partition: one client per group (FEMNIST writer, Shakespeare (play, role); SPEC §2.2, §4.5).

  Args:
    groups: ``[N]`` group id of each row (ints or strings).
    min_size: groups with fewer rows are dropped, >= 1.

  Returns:
    ``(parts, kept)``: one sorted int64 array of row indices per kept group,
    in increasing group-id order, and the ``[num_clients]`` kept group ids.

  Raises:
    DataError: bad groups or min_size, or no group with min_size rows.
  """
  ids, counts, rows = _group_rows(groups)
  min_size = _check_int("min_size", min_size, 1)
  keep = np.flatnonzero(counts >= min_size)
  if keep.size == 0:
    raise DataError(f"natural partition: no group has min_size={min_size} rows (the largest has {counts.max()}); "
                    f"use a smaller min_size")
  return [rows[k] for k in keep], ids[keep]


def leaf_top_users(groups: np.ndarray, num_train_users: int, num_test_users: int) -> tuple:
  """LEAF's top-users protocol as iPFL's code uses it (``split_leaf_data`` with ``leaf_sample_top``; SPEC §5).

  Users are ranked by sample count, descending, ties broken by increasing
  user id; the first ``num_train_users`` are the clients, the next
  ``num_test_users`` users' rows form the shared test set (paper 003:
  FEMNIST's 20 largest writers).

  Decision: clients come in rank order (the authors' code shuffles their
  order, which carries no meaning here).

  Args:
    groups: ``[N]`` user id of each row.
    num_train_users: the number of clients, >= 1.
    num_test_users: the number of test users, >= 0.

  Returns:
    ``(parts, test_rows)``: ``num_train_users`` sorted int64 arrays of row
    indices (largest user first) and the sorted int64 test rows.

  Raises:
    DataError: bad arguments, or fewer users than ``num_train_users + num_test_users``.
  """
  ids, counts, rows = _group_rows(groups)
  num_train_users = _check_int("num_train_users", num_train_users, 1)
  num_test_users = _check_int("num_test_users", num_test_users, 0)
  if num_train_users + num_test_users > len(ids):
    raise DataError(f"LEAF protocol: num_train_users + num_test_users = {num_train_users + num_test_users} exceeds "
                    f"the {len(ids)} users in the data; ask for fewer users")
  rank = np.lexsort((np.arange(len(ids)), -counts))
  parts = [rows[u] for u in rank[:num_train_users]]
  test = [rows[u] for u in rank[num_train_users:num_train_users + num_test_users]]
  test_rows = np.sort(np.concatenate(test)).astype(np.int64) if test else np.zeros(0, np.int64)
  return parts, test_rows


def class_histogram(y: np.ndarray, parts: Sequence[np.ndarray], num_classes: int) -> np.ndarray:
  """Per-client class counts (iPFL's reweighted accuracy, partition reports; SPEC §5).

  Args:
    y: ``[N]`` integer labels in ``0..num_classes-1``.
    parts: one int array of row indices per client.
    num_classes: the number of classes, >= 1.

  Returns:
    ``[num_clients, num_classes]`` int64: entry (i, k) counts the rows of client i with label k.

  Raises:
    DataError: a label outside ``0..num_classes-1`` or a row index outside ``0..N-1``.
  """
  y = _check_int_labels(y)
  num_classes = _check_int("num_classes", num_classes, 1)
  hist = np.zeros((len(parts), num_classes), np.int64)
  for i, idx in enumerate(parts):
    idx = np.asarray(idx)
    if idx.size == 0:
      continue
    if not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= y.shape[0]:
      raise DataError(f"client {i}'s row indices must be integers in 0..{y.shape[0] - 1}")
    labels = y[idx]
    if labels.max() >= num_classes:
      raise DataError(f"client {i} holds label {labels.max()}, outside 0..{num_classes - 1}; pass a larger "
                      f"num_classes")
    hist[i] = np.bincount(labels, minlength=num_classes)
  return hist
