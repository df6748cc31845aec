"""Host-side cohorts: the common form every data source produces before it becomes a federation.

A data source (the synthetic clinical generator, the MIMIC-IV loader, the
multi-site CSV loader, a partition of a pooled table) returns a :class:`Cohorts`:
one :class:`SiteCohort` per site with *raw* (unstandardized) features.
:func:`fedjax_sim.data.federation.from_cohorts` then splits, standardizes per
site, computes metadata and stacks everything onto device arrays.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from fedjax_sim.errors import DataError

# The 12 Charlson comorbidity categories used for the goal-aware metadata
# (SPEC §2.1, paper 000 §6.3; Quan et al. 2005 grouping).
CHARLSON_CATEGORIES = (
    "myocardial_infarction",
    "congestive_heart_failure",
    "peripheral_vascular_disease",
    "cerebrovascular_disease",
    "dementia",
    "chronic_pulmonary_disease",
    "rheumatic_disease",
    "peptic_ulcer_disease",
    "liver_disease",
    "diabetes",
    "renal_disease",
    "malignancy",
)


@dataclasses.dataclass(frozen=True)
class SiteCohort:
  """One site's rows, before splitting and standardization.

  Attributes:
    name: the site's name (e.g. ``"MICU_2130"``).
    x: ``[n, d]`` float32 raw features, finite.
    y: ``[n]`` int labels in {0, 1}.
    year: ``[n]`` float admission year per row (for the base metadata's
      ``mean_admission_year / 2030`` coordinate), or None (then 2030 is used,
      i.e. the coordinate is 1).
    charlson: ``[n, 12]`` {0, 1} Charlson indicators in the order of
      :data:`CHARLSON_CATEGORIES` (for the 15-dim goal-aware metadata), or
      None (then the goal-aware metadata repeats the base metadata padded
      with zeros, and goal-aware filters see no comorbidity signal).
  """

  name: str
  x: np.ndarray
  y: np.ndarray
  year: Optional[np.ndarray] = None
  charlson: Optional[np.ndarray] = None


@dataclasses.dataclass(frozen=True)
class Cohorts:
  """A collection of sites sharing one feature schema.

  Attributes:
    sites: one :class:`SiteCohort` per site.
    feature_names: ``d`` column names.
    continuous: ``[d]`` bool, True for columns standardized per site on that
      site's train split (SPEC §2.1); binary / one-hot columns are left as is.
    description: a one-line human description of the source (for summaries).
  """

  sites: tuple
  feature_names: tuple
  continuous: np.ndarray
  description: str = ""

  @property
  def num_features(self) -> int:
    return len(self.feature_names)


def _all_sites_valid(sites: Sequence[SiteCohort], d: int, chunk: int = 4096) -> bool:
  """The checks of :func:`validate_cohorts` on many sites at once (shapes per site, values over
  the rows of ``chunk`` sites at a time): 100,000 sites take a second, not a minute."""
  for site in sites:
    shape = np.shape(site.x)
    if len(shape) != 2 or shape[1] != d or np.shape(site.y) != shape[:1]:
      return False
    if site.charlson is not None and np.shape(site.charlson) != (shape[0], len(CHARLSON_CATEGORIES)):
      return False
    if site.year is not None and np.shape(site.year) != shape[:1]:
      return False
  for i in range(0, len(sites), chunk):
    part = sites[i:i + chunk]
    y = np.concatenate([np.asarray(s.y).ravel() for s in part])
    if not np.isfinite(np.concatenate([np.asarray(s.x) for s in part])).all() or not np.all((y == 0) | (y == 1)):
      return False
  return True


def validate_cohorts(cohorts: Cohorts) -> None:
  """Checks shapes, labels and finiteness; raises :class:`DataError` naming the first problem."""
  d = cohorts.num_features
  if d == 0:
    raise DataError("the data has no feature columns")
  if np.asarray(cohorts.continuous).shape != (d,):
    raise DataError(f"'continuous' must have one flag per feature ({d}), got shape {np.shape(cohorts.continuous)}")
  if not cohorts.sites:
    raise DataError("the data has no sites")
  if _all_sites_valid(cohorts.sites, d):
    return
  for site in cohorts.sites:  # find and name the first problem
    x, y = np.asarray(site.x), np.asarray(site.y)
    if x.ndim != 2 or x.shape[1] != d:
      raise DataError(f"site {site.name!r}: features have shape {x.shape}, expected [n, {d}]")
    if y.shape != (x.shape[0],):
      raise DataError(f"site {site.name!r}: {y.shape[0] if y.ndim else 0} labels for {x.shape[0]} rows")
    if not np.isfinite(x).all():
      bad = ~np.isfinite(x)
      row, col = np.argwhere(bad)[0]
      raise DataError(
          f"site {site.name!r}: feature {cohorts.feature_names[col]!r} has a non-finite value "
          f"({x[row, col]}) in row {row}; {int(bad.sum())} non-finite values in all. "
          "Impute or drop them before loading.")
    if not np.all((y == 0) | (y == 1)):
      labels = np.unique(y)
      raise DataError(f"site {site.name!r}: the label must be binary (0/1), found values {labels[:10].tolist()}")
    if site.charlson is not None and np.shape(site.charlson) != (x.shape[0], len(CHARLSON_CATEGORIES)):
      raise DataError(f"site {site.name!r}: charlson has shape {np.shape(site.charlson)}, expected [{x.shape[0]}, 12]")
    if site.year is not None and np.shape(site.year) != (x.shape[0],):
      raise DataError(f"site {site.name!r}: year has shape {np.shape(site.year)}, expected [{x.shape[0]}]")


def cohorts_from_arrays(x: np.ndarray, y: np.ndarray, site_ids: Sequence, feature_names: Sequence[str],
                        continuous: np.ndarray, description: str = "") -> Cohorts:
  """Groups a pooled table by site id into :class:`Cohorts` (sites in sorted id order)."""
  x = np.asarray(x, np.float32)
  y = np.asarray(y)
  site_ids = np.asarray(site_ids)
  sites = []
  for sid in sorted(np.unique(site_ids).tolist(), key=str):
    rows = site_ids == sid
    sites.append(SiteCohort(name=str(sid), x=x[rows], y=y[rows].astype(np.int32)))
  return Cohorts(sites=tuple(sites), feature_names=tuple(feature_names),
                 continuous=np.asarray(continuous, bool), description=description)
