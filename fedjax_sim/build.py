"""Building an experiment's inputs: data → federation, and the checks made before anything compiles (SPEC §2, §6).

The first of the three stages of :mod:`fedjax_sim.experiment` (build → :mod:`~fedjax_sim.execute` →
:mod:`~fedjax_sim.summarize`).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sim.algorithms.registry import check_federation, preset
from fedjax_sim.config import ExperimentConfig, config_for_method
from fedjax_sim.data.cohorts import Cohorts
from fedjax_sim.data.federation import Federation, from_cohorts, scorable_centers
from fedjax_sim.errors import ConfigError, DataError
from fedjax_sim.sweep import Sweep, point_configs, point_label


def load_cohorts(data) -> Cohorts:
  """The cohorts named by a :class:`~fedjax_sim.config.DataConfig` (nothing is downloaded).

  A CSV source passes ``data.categorical_columns``, ``data.feature_columns`` (empty: all),
  ``data.drop_columns`` and ``data.impute`` (``"none"``: no imputation) to
  :func:`~fedjax_sim.data.csv_sites.load_csv_sites`, which checks the columns against the file.
  """
  if data.source == "synthetic":
    from fedjax_sim.data.clinical import synthetic_clinical
    cohorts = synthetic_clinical(seed=data.data_seed, num_centers=data.num_centers, total_stays=data.total_stays)
  elif data.source == "mimic":
    from fedjax_sim.data.mimic import load_mimic_iv
    cohorts = load_mimic_iv(data.path)
  elif data.source == "csv":
    from fedjax_sim.data.csv_sites import load_csv_sites
    cohorts = load_csv_sites(data.path, data.site_column, data.label_column,
                             categorical_columns=tuple(data.categorical_columns),
                             feature_columns=tuple(data.feature_columns) or None,
                             drop_columns=tuple(data.drop_columns),
                             impute=None if data.impute == "none" else data.impute)
  else:  # validated earlier; kept for direct API use
    raise ConfigError(f"data.source must be synthetic, mimic or csv; got {data.source!r}")
  if data.partition != "natural":
    cohorts = repartition(cohorts, data)
  return cohorts


def repartition(cohorts: Cohorts, data) -> Cohorts:
  """Pools every site's rows and re-splits them IID or by Dirichlet(α) label skew (SPEC §2.2)."""
  from fedjax_sim.data import partition
  x = np.concatenate([s.x for s in cohorts.sites])
  y = np.concatenate([s.y for s in cohorts.sites])
  k = data.num_clients or len(cohorts.sites)
  if data.partition == "iid":
    return partition.iid_partition(data.data_seed, x, y, k, cohorts.feature_names, cohorts.continuous)
  return partition.dirichlet_partition(data.data_seed, x, y, k, data.dirichlet_alpha, cohorts.feature_names,
                                       cohorts.continuous)


def build_federation(config: ExperimentConfig, warn: Callable[[str], None] = print) -> Federation:
  """Loads the data and stacks the federation; warnings (e.g. dropped sites) go to ``warn``.

  Raises:
    DataError: besides the loaders' errors, data no center can be scored on (issue 9): a label
      with one value in every row, or no center with both classes in its test split (SPEC §3.1:
      such a center's AUROC is undefined), so every AUROC would be undefined.
  """
  from fedjax_sim.data.labeled import IMAGE_TEXT_SOURCES, labeled_federation
  if config.data.source in IMAGE_TEXT_SOURCES:
    return labeled_federation(config)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cohorts = load_cohorts(config.data)
    fed = from_cohorts(cohorts, seed=config.data.data_seed, batch_size=config.learner.batch_size,
                       num_buckets=config.learner.num_buckets, min_rows=config.data.min_site_rows)
  for w in caught:
    warn(f"warning: {w.message}")
  labels = np.concatenate([np.asarray(s.y, np.float64) for s in cohorts.sites])  # binary (validated)
  if labels.min() == labels.max():
    column = f" (data.label_column = {config.data.label_column!r})" if config.data.source == "csv" else ""
    raise DataError(f"the label{column} is {labels[0]:g} in every one of the {len(labels)} rows: AUROC needs "
                    f"both classes, so no center could be scored")
  if not scorable_centers(fed).any():
    raise DataError(f"no center can be scored: none of the {fed.num_clients} centers has both classes in its test "
                    f"split ({int(np.asarray(fed.m_test).sum())} test rows in all), so every AUROC would be undefined; "
                    f"merge small sites or raise data.min_site_rows")
  return fed


def majority_rate(federation: Federation) -> Optional[float]:
  """The accuracy of always predicting the most frequent training label (character), on the test rows of every
  client pooled: the floor an accuracy must rise above (issue 10: Shakespeare's most-frequent-character rate).
  None for the binary clinical task (scored by AUROC)."""
  if federation.task == "binary":
    return None
  counts = np.zeros(federation.num_classes, np.int64)
  for b in federation.buckets:
    valid = np.arange(b.y.shape[1]) < np.asarray(b.n)[:, None]
    counts += np.bincount(np.asarray(b.y)[valid].ravel(), minlength=federation.num_classes)
  top = int(np.argmax(counts))
  y, m = np.asarray(federation.y_test), np.asarray(federation.m_test)
  m = np.broadcast_to(m.reshape(m.shape + (1,) * (y.ndim - m.ndim)), y.shape)
  return float((y[m] == top).mean()) if m.any() else None


def check_runnable(config: ExperimentConfig, federation: Federation, sweep: Sweep = Sweep()) -> None:
  """Refuses, before anything compiles, a method or grid point that cannot run on ``federation``.

  Each method states the smallest federation it needs
  (:func:`fedjax_sim.algorithms.registry.check_federation`; issue 9): every
  method of ``config``, under its preset, at every grid point of ``sweep``.

  Raises:
    ConfigError: naming the method, what it needs and, with a sweep, the grid point.
  """
  for name in config.methods:
    points = point_configs(config_for_method(config, preset(name)), sweep)
    for point, cfg in zip(sweep.points if sweep else [None], points):
      try:
        check_federation(name, cfg, federation.num_clients)
      except ConfigError as e:
        if point is None:
          raise
        raise ConfigError(f"{e} (--sweep grid point {point_label(point)})") from None


def seed_keys(seeds) -> jax.Array:
  return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
