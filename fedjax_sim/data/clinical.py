"""The synthetic clinical federation (SPEC §2.1): a MIMIC-IV-schema cohort that ships with the code.

MIMIC-IV is credentialed and cannot ship, so the default ABPS federation is
generated. Every number below is either a statistic paper 000 reports (§6.1:
six care units and their in-hospital mortality rates, centers = care unit ×
2-year window of the shifted admission years 2110–2191, n = 230 centers,
~71,000 stays, many small centers) or a generator constant tuned *only* so
that the three reference methods land near the paper's values under the
paper's protocol (SPEC §2.1: centralized ≈ 0.83, FedAvg ≈ 0.75–0.76,
local-only ≈ 0.59 mean per-center test AUROC). The tuned constants are
marked ``# calibrated``; no other method's number was looked at.

Generative story, per ICU stay:
  * center (unit u, window w); cell sizes ∝ unit share × a bell over windows ×
    lognormal noise, the smallest cells dropped to keep ``num_centers``;
  * demographics and admission context drawn from unit-specific categorical
    distributions; age from a unit-specific normal, clipped to 18–95;
  * 12 Charlson comorbidities, Bernoulli with unit-specific prevalences whose
    log-odds rise with age;
  * a latent acuity ``s ~ N(drift_uw, 1)`` (never observed);
  * 7 first-24h vitals, each reported as mean / min / max: the mean moves with
    acuity and unit, the min–max spread widens with acuity;
  * death ~ Bernoulli(sigmoid(b_u + signal)), where the signal combines
    acuity, age, Charlson weights (Charlson et al. 1987) and non-linear vital
    derangements (hypotension, tachycardia, hypoxia, fever/hypothermia), and
    b_u is solved so each unit's mortality matches the paper's rate.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedjax_sim.data.cohorts import CHARLSON_CATEGORIES, Cohorts, SiteCohort
from fedjax_sim.errors import DataError

# (name, in-hospital mortality from paper 000 Fig. 1/§6.1, share of stays, mean age, male fraction)
CARE_UNITS = (
    ("Medical Intensive Care Unit (MICU)", 0.154, 0.24, 64.0, 0.52),
    ("Medical/Surgical Intensive Care Unit (MICU/SICU)", 0.141, 0.18, 63.0, 0.54),
    ("Coronary Care Unit (CCU)", 0.130, 0.12, 69.0, 0.58),
    ("Trauma SICU (TSICU)", 0.108, 0.13, 56.0, 0.63),
    ("Surgical Intensive Care Unit (SICU)", 0.106, 0.14, 62.0, 0.55),
    ("Cardiac Vascular Intensive Care Unit (CVICU)", 0.033, 0.19, 66.0, 0.68),
)
FIRST_YEAR, LAST_YEAR, WINDOW_YEARS = 2110, 2191, 2

RACES = ("white", "black", "hispanic", "asian", "other")
ADMISSION_TYPES = ("emergency", "urgent", "elective", "observation")
ADMISSION_LOCATIONS = ("emergency_room", "transfer_from_hospital", "physician_referral", "other")
INSURANCE = ("medicare", "medicaid", "other")
VITALS = ("heart_rate", "sbp", "dbp", "mbp", "resp_rate", "spo2", "temperature")

# Population baseline of each vital's 24 h mean, its between-patient sd, the
# shift per unit of acuity, and the typical half-range of the min–max spread.
_VITAL_BASE = np.array([86.0, 118.0, 62.0, 78.0, 19.0, 96.5, 36.9])
_VITAL_SD = np.array([13.0, 15.0, 10.0, 10.0, 3.5, 1.8, 0.5])
_VITAL_ACUITY = np.array([7.0, -7.0, -4.0, -5.0, 1.8, -0.9, 0.12])
_VITAL_SPREAD = np.array([18.0, 25.0, 15.0, 16.0, 6.0, 3.0, 0.8])

# Charlson prevalences (overall) and unit multipliers (rows follow CARE_UNITS).
_CHARLSON_PREV = np.array([0.12, 0.22, 0.10, 0.12, 0.04, 0.22, 0.04, 0.03, 0.10, 0.26, 0.20, 0.14])
_CHARLSON_UNIT = np.array([
    # MI   CHF  PVD  CVD  dem  COPD rheu ulc  liv  diab ren  mal
    [0.7, 1.0, 0.7, 0.8, 1.4, 1.5, 1.2, 1.3, 1.8, 1.1, 1.2, 1.5],  # MICU
    [0.8, 1.0, 0.9, 1.0, 1.2, 1.2, 1.1, 1.2, 1.3, 1.0, 1.1, 1.3],  # MICU/SICU
    [2.6, 2.0, 1.2, 0.8, 1.0, 1.1, 0.9, 0.8, 0.7, 1.2, 1.2, 0.7],  # CCU
    [0.4, 0.4, 0.6, 1.6, 0.8, 0.6, 0.7, 0.8, 0.7, 0.7, 0.6, 0.6],  # TSICU
    [0.6, 0.6, 1.1, 1.1, 0.6, 0.8, 0.9, 1.1, 1.0, 0.9, 0.9, 1.4],  # SICU
    [1.8, 1.6, 1.5, 0.9, 0.3, 0.8, 0.8, 0.6, 0.4, 1.2, 0.9, 0.4],  # CVICU
])
# Charlson index weights (Charlson et al. 1987), scaled in the mortality signal.
_CHARLSON_WEIGHT = np.array([1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2, 2], np.float64)
# Unit case-mix offsets of the vital means (in units of each vital's sd).
_VITAL_UNIT = np.array([
    [0.3, -0.2, -0.1, -0.2, 0.4, -0.3, 0.2],
    [0.2, -0.1, 0.0, -0.1, 0.3, -0.2, 0.1],
    [0.0, 0.0, -0.1, -0.1, 0.0, 0.0, -0.1],
    [0.3, 0.3, 0.2, 0.3, 0.0, 0.2, 0.2],
    [0.1, 0.2, 0.1, 0.1, -0.1, 0.1, 0.1],
    [-0.4, -0.3, -0.4, -0.4, -0.3, 0.3, -0.4],
])
# Categorical distributions per unit.
_ADM_TYPE = np.array([
    [0.80, 0.12, 0.02, 0.06], [0.72, 0.14, 0.08, 0.06], [0.75, 0.15, 0.04, 0.06],
    [0.85, 0.10, 0.02, 0.03], [0.50, 0.15, 0.30, 0.05], [0.30, 0.15, 0.52, 0.03],
])
_ADM_LOC = np.array([
    [0.62, 0.20, 0.08, 0.10], [0.55, 0.22, 0.12, 0.11], [0.50, 0.30, 0.10, 0.10],
    [0.70, 0.20, 0.03, 0.07], [0.40, 0.20, 0.28, 0.12], [0.20, 0.25, 0.45, 0.10],
])
_RACE = np.array([0.64, 0.12, 0.04, 0.03, 0.17])

INTERACTION_WEIGHT = 1.25  # calibrated: weight of each pairwise interaction term
UNIVARIATE_WEIGHT = 0.3  # calibrated: scale of the single-factor risk terms
# Mortality log-odds weight of each risk term in ``_patients`` (before the unit multipliers).
_TERM_WEIGHT = np.array([0.6, 0.32, 0.18, 1.8, 1.2, 1.6, 1.4, 0.8, 1.6, 1.2, 0.4]) * UNIVARIATE_WEIGHT
_TERM_WEIGHT = np.concatenate([_TERM_WEIGHT, INTERACTION_WEIGHT * np.ones(4)])
UNIT_SHIFT_SD = 0.8  # calibrated: sd of the per-unit multipliers of the risk-term weights (concept shift)


def _unit_term_multipliers() -> np.ndarray:
  """Fixed ``[units, terms]`` multipliers ~ N(1, UNIT_SHIFT_SD²), the same for every data seed."""
  return np.random.default_rng(20260501).normal(1.0, UNIT_SHIFT_SD, (len(CARE_UNITS), len(_TERM_WEIGHT)))


SIGNAL_SCALE = 1.0  # calibrated: multiplies every non-intercept term of the mortality log-odds
VITAL_ACUITY_SCALE = 0.35  # calibrated: how strongly the vitals reveal the latent acuity
DRIFT_SD = 0.02  # per-window random-walk step of a unit's mean acuity (slow within-unit drift)
CELL_SIZE_SIGMA = 0.7  # lognormal noise of cell sizes (many small centers)
WINDOW_BELL_SD = 20.0  # years: sd of the bell over windows of the shifted admission years


def feature_names() -> tuple:
  """The 51 columns, in order (paper 000 §6.1's feature families)."""
  names = ["age", "gender_male"]
  names += [f"race_{r}" for r in RACES]
  names += [f"admission_type_{a}" for a in ADMISSION_TYPES]
  names += [f"admission_location_{a}" for a in ADMISSION_LOCATIONS]
  names += [f"insurance_{i}" for i in INSURANCE]
  names += [f"charlson_{c}" for c in CHARLSON_CATEGORIES]
  names += [f"{v}_{s}" for v in VITALS for s in ("mean", "min", "max")]
  return tuple(names)


def _continuous_mask(names) -> np.ndarray:
  return np.array([n == "age" or any(n.startswith(v + "_") for v in VITALS) for n in names])


def _one_hot(u: np.ndarray, probs: np.ndarray) -> np.ndarray:
  """One-hot categories from uniforms ``u``: exactly what ``rng.choice(len(probs), p=probs / probs.sum())``
  returns for the uniforms it draws (its normalized-cdf ``searchsorted``), so drawing ``rng.random``
  instead keeps the generator's random stream, and the lookup runs over many cells at once."""
  p = probs / probs.sum()
  cdf = p.cumsum()
  cdf /= cdf[-1]
  return np.eye(len(probs), dtype=np.float32)[cdf.searchsorted(u, side="right")]


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def _zc(values: np.ndarray) -> np.ndarray:
  """z-score within the cell (center) being drawn, along the last axis: the scale a model sees after the
  per-center standardization of SPEC §2.1, so a product of two has no marginal signal."""
  mean = values.mean(axis=-1, keepdims=True)
  return (values - mean) / np.maximum(values.std(axis=-1, keepdims=True), 1e-6)


class StayDraws(NamedTuple):
  """The random numbers behind the stays of ``k`` equal-sized cells of one unit, ``[k, n, ...]``.

  Drawing (sequential, one cell after another: the stream the default
  federation is pinned to, :func:`draw_cells`) is kept apart from the
  arithmetic on the draws (:func:`_patients`), which runs on all equal-sized
  cells of a unit at once.
  """

  age: np.ndarray  # [k, n] age before clipping, N(unit mean + 2·year_pos, 16²)
  gender: np.ndarray  # [k, n] U(0, 1)
  race: np.ndarray  # [k, n] U(0, 1), mapped through the race cdf
  admission_type: np.ndarray  # [k, n] U(0, 1), mapped through the unit's admission-type cdf
  admission_location: np.ndarray  # [k, n] U(0, 1), mapped through the unit's admission-location cdf
  insurance: np.ndarray  # [k, n] U(0, 1)
  charlson: np.ndarray  # [k, n, 12] U(0, 1)
  acuity: np.ndarray  # [k, n] latent acuity before comorbidities, N(drift, 1)
  vital_noise: np.ndarray  # [k, n, 7] N(0, 1) between-patient noise of the vital means
  spread: np.ndarray  # [k, n, 7] Gamma(4, 0.25) multiplier of the min–max spread
  low_fraction: np.ndarray  # [k, n, 7] U(0.3, 0.7) position of the mean inside [min, max]


class CellDraws(NamedTuple):
  """Every cell's random numbers in flat arrays, as :func:`draw_cells` drew them.

  Cell ``c`` owns rows ``first[c] : first[c] + n_c`` of the per-row arrays
  and the blocks ``17·first[c] : 17·(first[c] + n_c)`` of ``uniform`` and
  ``8·first[c] : 8·(first[c] + n_c)`` of ``normal``, laid out in the order drawn.
  """

  first: np.ndarray  # [cells] first row of each cell
  acuity_mean: np.ndarray  # [cells] the cell's drift of mean acuity
  age: np.ndarray  # [N] N(unit mean + 2·year_pos, 16²)
  uniform: np.ndarray  # [17 N] per cell: gender, race, admission type, admission location, insurance [n each], Charlson [n, 12]
  normal: np.ndarray  # [8 N] per cell: acuity noise [n], then vital noise [n, 7]
  spread: np.ndarray  # [N, 7] Gamma(4, 0.25)
  low_fraction: np.ndarray  # [N, 7] U(0.3, 0.7)
  label: np.ndarray  # [N] U(0, 1): death iff below the stay's mortality risk
  year_offset: np.ndarray  # [N] int: the stay's year inside its window, 0 or 1


def draw_cells(rng: np.random.Generator, cells, drift: dict) -> CellDraws:
  """Draws every cell's random numbers, cell after cell in the order of ``cells``.

  Seven generator calls per cell, each writing straight into the flat arrays.
  Consecutive draws of one kind are merged, which leaves the stream of a
  one-call-per-quantity generator unchanged: ``random(a)`` then ``random(b)``
  is ``random(a + b)``, ``normal(m, 1)`` is ``m + standard_normal()``, and
  ``rng.choice(k, p=...)`` consumes exactly ``random(n)`` (see :func:`_one_hot`).

  Args:
    rng: the federation's generator.
    cells: ``(unit, window start, size)`` per cell.
    drift: ``(unit, window start) -> mean acuity``.

  Returns:
    :class:`CellDraws`.
  """
  sizes = np.array([size for _, _, size in cells], np.int64)
  total = int(sizes.sum())
  first = np.cumsum(sizes) - sizes
  age, label, year_offset = np.empty(total), np.empty(total), np.empty(total, np.int64)
  uniform, normal = np.empty(17 * total), np.empty(8 * total)
  spread, low_fraction = np.empty((total, 7)), np.empty((total, 7))
  for (u, start, n), a in zip(cells, first.tolist()):
    b = a + n
    year_pos = (start - 0.5 * (FIRST_YEAR + LAST_YEAR)) / (LAST_YEAR - FIRST_YEAR)
    age[a:b] = rng.normal(CARE_UNITS[u][3] + 2.0 * year_pos, 16.0, n)
    rng.random(out=uniform[17 * a:17 * b])
    rng.standard_normal(out=normal[8 * a:8 * b])
    spread[a:b] = rng.gamma(4.0, 0.25, (n, 7))
    low_fraction[a:b] = rng.uniform(0.3, 0.7, (n, 7))
    rng.random(out=label[a:b])
    year_offset[a:b] = rng.integers(0, WINDOW_YEARS, n)
  acuity_mean = np.array([drift[(u, start)] for u, start, _ in cells], np.float64)
  return CellDraws(first=first, acuity_mean=acuity_mean, age=age, uniform=uniform, normal=normal,
                   spread=spread, low_fraction=low_fraction, label=label, year_offset=year_offset)


def stay_draws(draws: CellDraws, idx, n: int) -> StayDraws:
  """The :class:`StayDraws` ``[k, n, ...]`` of the ``k`` cells ``idx``, each of ``n`` stays."""
  idx = np.asarray(idx)
  k, pos = len(idx), np.arange(n)
  rows = draws.first[idx][:, None] + pos  # [k, n]
  u = 17 * draws.first[idx][:, None]
  z = 8 * draws.first[idx][:, None]
  return StayDraws(
      age=draws.age[rows],
      gender=draws.uniform[u + pos],
      race=draws.uniform[u + n + pos],
      admission_type=draws.uniform[u + 2 * n + pos],
      admission_location=draws.uniform[u + 3 * n + pos],
      insurance=draws.uniform[u + 4 * n + pos],
      charlson=draws.uniform[u + 5 * n + np.arange(12 * n)].reshape(k, n, 12),
      acuity=draws.acuity_mean[idx][:, None] + draws.normal[z + pos],
      vital_noise=draws.normal[z + n + np.arange(7 * n)].reshape(k, n, 7),
      spread=draws.spread[rows],
      low_fraction=draws.low_fraction[rows])


def _patients(unit: int, d: StayDraws):
  """Stays of equal-sized cells of one unit from their draws. Returns ``(x [..., n, 51], charlson [..., n, 12],
  signal [..., n])``; ``signal`` is the mortality log-odds without the unit intercept.

  Every operation is elementwise, a reduction over one cell's stays (last axis) or a per-cell matrix
  product, so a stack of cells gives bit for bit what each cell gives alone.
  """
  _, _, _, _, male = CARE_UNITS[unit]
  age = np.clip(d.age, 18, 95)
  gender = (d.gender < male).astype(np.float32)
  race = _one_hot(d.race, _RACE)
  adm_type = _one_hot(d.admission_type, _ADM_TYPE[unit])
  adm_loc = _one_hot(d.admission_location, _ADM_LOC[unit])
  p_medicare = _sigmoid((age - 65.0) / 3.0) * 0.85 + 0.05
  ins_u = d.insurance
  insurance = np.stack([ins_u < p_medicare, (ins_u >= p_medicare) & (ins_u < p_medicare + 0.12),
                        ins_u >= p_medicare + 0.12], axis=-1).astype(np.float32)
  prev = np.clip(_CHARLSON_PREV * _CHARLSON_UNIT[unit], 1e-3, 0.9)
  logit_prev = np.log(prev / (1 - prev)) + 0.03 * (age[..., None] - 65.0)
  charlson = (d.charlson < _sigmoid(logit_prev)).astype(np.float32)

  acuity = d.acuity + 0.15 * charlson @ _CHARLSON_WEIGHT / 3.0
  mean = (_VITAL_BASE + _VITAL_UNIT[unit] * _VITAL_SD) + VITAL_ACUITY_SCALE * _VITAL_ACUITY * acuity[..., None]
  mean = mean + d.vital_noise * _VITAL_SD
  spread = _VITAL_SPREAD * (1.0 + 0.25 * np.abs(acuity)[..., None]) * d.spread
  lo = mean - spread * d.low_fraction
  hi = lo + spread
  spo2_cap = 100.0
  mean[..., 5], hi[..., 5] = np.minimum(mean[..., 5], spo2_cap), np.minimum(hi[..., 5], spo2_cap)
  lo[..., 5] = np.minimum(lo[..., 5], mean[..., 5])
  vit = np.stack([mean, lo, hi], axis=-1).reshape(acuity.shape + (21,))

  # Mortality log-odds without the unit intercept (non-linear in the vitals).
  hr, sbp_min, rr, spo2_min, temp = mean[..., 0], lo[..., 1], mean[..., 4], lo[..., 5], mean[..., 6]
  z_hr, z_age = _zc(hr), _zc(age)
  terms = np.stack([
      acuity,
      (age - 65.0) / 10.0,
      charlson @ _CHARLSON_WEIGHT,
      _sigmoid((90.0 - sbp_min) / 6.0),
      _sigmoid((hr - 110.0) / 6.0),
      _sigmoid((90.0 - spo2_min) / 2.0),
      np.abs(temp - 36.9) / 0.8,
      _sigmoid((rr - 26.0) / 3.0),
      _sigmoid((age - 75.0) / 4.0) * _sigmoid((100.0 - sbp_min) / 6.0),
      charlson[..., 8] * charlson[..., 10],
      adm_type[..., 0] - adm_type[..., 2],
      # Pairwise interactions of within-center standardized vitals and age: no
      # marginal signal in either factor, so they take many samples to learn
      # (what separates a pooled model from small local ones).
      z_hr * _zc(temp),
      -_zc(sbp_min) * z_age,
      -_zc(rr) * _zc(spo2_min),
      z_hr * z_age,
  ], axis=-1)
  # Concept shift between units (SPEC §2.1 heterogeneity): each unit weighs the
  # same risk factors differently (e.g. hypotension matters more in the CVICU).
  signal = terms @ (_TERM_WEIGHT * _unit_term_multipliers()[unit])
  x = np.concatenate([age[..., None], gender[..., None], race, adm_type, adm_loc, insurance, charlson, vit],
                     axis=-1).astype(np.float32)
  return x, charlson, SIGNAL_SCALE * signal


def _unit_intercept(signal: np.ndarray, rate: float) -> float:
  """Solves E[sigmoid(b + signal)] = rate for b by bisection (mean over a reference sample)."""
  lo, hi = -20.0, 20.0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    if _sigmoid(mid + signal).mean() > rate:
      hi = mid
    else:
      lo = mid
  return 0.5 * (lo + hi)


def _unit_intercepts() -> list:
  """Each unit's intercept, solved once on a reference sample of 40,000 stays of its case mix."""
  mid = 0.5 * (FIRST_YEAR + LAST_YEAR)  # year_pos 0
  intercepts = []
  for u, (_, rate, _, _, _) in enumerate(CARE_UNITS):
    draws = draw_cells(np.random.default_rng(10_000 + u), [(u, mid, 40_000)], {(u, mid): 0.0})
    _, _, signal = _patients(u, stay_draws(draws, [0], 40_000))
    intercepts.append(_unit_intercept(signal[0], rate))
  return intercepts


def cell_sizes(rng: np.random.Generator, num_centers: int, total_stays: int):
  """Sizes of the (unit, window) cells; keeps the ``num_centers`` largest, scaled to ``total_stays``.

  Returns:
    A list of ``(unit, window_start_year, size)``.
  """
  windows = list(range(FIRST_YEAR, LAST_YEAR + 1, WINDOW_YEARS))
  # Enough windows per unit for num_centers cells plus ~7% to drop (230 of 246 at the default).
  per_unit = max(len(windows), math.ceil(num_centers * 1.07 / len(CARE_UNITS)))
  if per_unit > len(windows):  # larger synthetic federations: finer windows over the same years
    starts = np.linspace(FIRST_YEAR, LAST_YEAR, per_unit)
  else:
    starts = np.asarray(windows, float)
  mid = 0.5 * (FIRST_YEAR + LAST_YEAR)
  cells = []
  for u, (_, _, share, _, _) in enumerate(CARE_UNITS):
    bell = np.exp(-0.5 * ((starts - mid) / WINDOW_BELL_SD) ** 2)
    raw = share * bell * rng.lognormal(0.0, CELL_SIZE_SIGMA, len(starts))
    cells += [(u, float(s), r) for s, r in zip(starts, raw)]
  cells.sort(key=lambda c: -c[2])
  cells = cells[:num_centers]
  scale = total_stays / sum(c[2] for c in cells)
  return [(u, s, max(1, int(round(r * scale)))) for u, s, r in cells]


def site_names(cells) -> list:
  """Site names of cells sorted by (unit, window start): ``"MICU|2150-2151"``.

  Large federations cut the same years into finer windows (:func:`cell_sizes`),
  and once windows are shorter than a year two windows of a unit round to the
  same years; then every name gets the window's index among its unit's kept
  windows (``"MICU|2150-2151#731"``) so names stay unique. The default
  federation's windows are ~2 years apart and keep the plain names.
  """
  names, index, previous_unit = [], [], None
  for u, start, _ in cells:
    short = CARE_UNITS[u][0].split("(")[-1].rstrip(")")
    s0 = int(round(start))
    names.append(f"{short}|{s0}-{s0 + WINDOW_YEARS - 1}")
    index.append(index[-1] + 1 if u == previous_unit else 0)
    previous_unit = u
  if len(set(names)) < len(names):
    names = [f"{name}#{i}" for name, i in zip(names, index)]
  return names


def _cell_stays(cells, draws: CellDraws, intercepts) -> list:
  """Turns the cells' draws into ``(x, y, year, charlson)`` per cell.

  All equal-sized cells of a unit are computed at once, bit for bit what one
  cell at a time gives (see :func:`_patients`): this is what makes 100,000
  centers take seconds.
  """
  groups = {}
  for i, (u, _, size) in enumerate(cells):
    groups.setdefault((u, size), []).append(i)
  out = [None] * len(cells)
  for (u, size), idx in groups.items():
    x, charlson, sig = _patients(u, stay_draws(draws, idx, size))
    rows = draws.first[idx][:, None] + np.arange(size)
    y = (draws.label[rows] < _sigmoid(intercepts[u] + sig)).astype(np.int32)
    start = np.array([cells[i][1] for i in idx])[:, None]
    year = start + draws.year_offset[rows].astype(np.float64)
    for j, i in enumerate(idx):
      out[i] = (x[j], y[j], year[j], charlson[j])
  return out


def synthetic_clinical(seed: int = 0, num_centers: int = 230, total_stays: int = 71000) -> Cohorts:
  """Generates the synthetic clinical federation (SPEC §2.1).

  Scales to large synthetic federations (100,000 centers generate in well
  under a minute on 2 CPU cores): the random numbers are drawn cell by cell in
  a fixed order and the arithmetic runs on all equal-sized cells of a unit at
  once, which is bit for bit what a cell-by-cell generator gives, so the
  default federation is unchanged. More centers means finer windows over the
  same years and smaller cohorts: mean ``total_stays / num_centers``, median
  ~0.7× the mean, ~20% of the centers under a third of it, the largest ~25× it
  at 100,000 centers. For 100,000 centers use ``total_stays=3_000_000`` (mean
  30, median 21 stays) with ``min_site_rows=5``, which keeps ~98% of them (the
  default ``min_site_rows=20`` keeps ~52%, and raising ``total_stays`` to
  6,000,000 only to ~79%, with twice the padded evaluation arrays).

  Args:
    seed: generator seed (the default federation uses 0).
    num_centers: centers kept (the smallest cells are dropped; 230 as in paper 000).
    total_stays: approximate total ICU stays over the kept centers.

  Returns:
    :class:`Cohorts` with one site per (care unit, window), named like
    ``"MICU|2150-2151"`` (see :func:`site_names`), raw features, labels,
    admission years and Charlson flags.
  """
  if num_centers < 1 or total_stays < num_centers:
    raise DataError(f"need num_centers ≥ 1 and total_stays ≥ num_centers, got {num_centers}, {total_stays}")
  rng = np.random.default_rng(seed)
  intercepts = _unit_intercepts()
  cells = sorted(cell_sizes(rng, num_centers, total_stays), key=lambda c: (c[0], c[1]))
  # Slow within-unit drift of mean acuity: a random walk over each unit's windows.
  drift = {}
  for u in range(len(CARE_UNITS)):
    starts = sorted({s for uu, s, _ in cells if uu == u})
    walk = np.cumsum(rng.normal(0.0, DRIFT_SD, len(starts)))
    if starts:  # a unit may have no kept cell in a small federation
      drift.update(zip(((u, s) for s in starts), (walk - walk.mean()).tolist()))
  stays = _cell_stays(cells, draw_cells(rng, cells, drift), intercepts)
  sites = tuple(SiteCohort(name=name, x=x, y=y, year=year, charlson=charlson)
                for name, (x, y, year, charlson) in zip(site_names(cells), stays))
  names = feature_names()
  return Cohorts(sites=sites, feature_names=names, continuous=_continuous_mask(names),
                 description=f"synthetic MIMIC-IV-schema clinical federation (seed {seed}, SPEC §2.1)")


def js_bernoulli(p: np.ndarray, q: np.ndarray) -> np.ndarray:
  """Jensen–Shannon divergence (nats) between Bernoulli(p) and Bernoulli(q)."""
  def h(r):
    r = np.clip(r, 1e-12, 1 - 1e-12)
    return -(r * np.log(r) + (1 - r) * np.log(1 - r))
  return h(0.5 * (p + q)) - 0.5 * (h(p) + h(q))


def heterogeneity_report(cohorts: Cohorts) -> dict:
  """The statistics SPEC §2.1 calibrates against: sizes, rates, within/across-unit JS."""
  sizes = np.array([len(s.y) for s in cohorts.sites])
  rates = np.array([s.y.mean() for s in cohorts.sites])
  units = np.array([s.name.split("|")[0] for s in cohorts.sites])
  js = js_bernoulli(rates[:, None], rates[None, :])
  same = units[:, None] == units[None, :]
  off = ~np.eye(len(sizes), dtype=bool)
  return {
      "centers": int(len(sizes)), "stays": int(sizes.sum()), "median_size": float(np.median(sizes)),
      "max_size": int(sizes.max()), "min_size": int(sizes.min()),
      "mortality": float(np.concatenate([s.y for s in cohorts.sites]).mean()),
      "unit_mortality": {u: float(np.concatenate([s.y for s in cohorts.sites if s.name.startswith(u + "|")]).mean())
                         for u in sorted(set(units))},
      "js_within_unit": float(js[same & off].mean()), "js_across_units": float(js[~same].mean()),
  }
