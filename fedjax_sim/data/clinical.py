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
# Mortality log-odds weight of each risk term in ``_draw_patients`` (before the unit multipliers).
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


def _one_hot(rng, probs, n):
  k = rng.choice(len(probs), size=n, p=probs / probs.sum())
  return np.eye(len(probs), dtype=np.float32)[k]


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def _zc(values: np.ndarray) -> np.ndarray:
  """z-score within the cell (center) being drawn: the scale a model sees after the
  per-center standardization of SPEC §2.1, so a product of two has no marginal signal."""
  return (values - values.mean()) / max(float(values.std()), 1e-6)


def _draw_patients(rng: np.random.Generator, unit: int, n: int, acuity_mean: float, year_pos: float):
  """Draws ``n`` stays of one cell. Returns ``(x [n, 51], charlson [n, 12], signal [n])``.

  ``signal`` is the mortality log-odds without the unit intercept.
  """
  _, _, _, age_mean, male = CARE_UNITS[unit]
  age = np.clip(rng.normal(age_mean + 2.0 * year_pos, 16.0, n), 18, 95)
  gender = (rng.random(n) < male).astype(np.float32)
  race = _one_hot(rng, _RACE, n)
  adm_type = _one_hot(rng, _ADM_TYPE[unit], n)
  adm_loc = _one_hot(rng, _ADM_LOC[unit], n)
  p_medicare = _sigmoid((age - 65.0) / 3.0) * 0.85 + 0.05
  ins_u = rng.random(n)
  insurance = np.stack([ins_u < p_medicare, (ins_u >= p_medicare) & (ins_u < p_medicare + 0.12),
                        ins_u >= p_medicare + 0.12], axis=1).astype(np.float32)
  prev = np.clip(_CHARLSON_PREV * _CHARLSON_UNIT[unit], 1e-3, 0.9)
  logit_prev = np.log(prev / (1 - prev))[None, :] + 0.03 * (age[:, None] - 65.0)
  charlson = (rng.random((n, 12)) < _sigmoid(logit_prev)).astype(np.float32)

  acuity = rng.normal(acuity_mean, 1.0, n) + 0.15 * charlson @ _CHARLSON_WEIGHT / 3.0
  mean = (_VITAL_BASE + _VITAL_UNIT[unit] * _VITAL_SD)[None, :] + VITAL_ACUITY_SCALE * _VITAL_ACUITY[None, :] * acuity[:, None]
  mean = mean + rng.normal(0, 1, (n, 7)) * _VITAL_SD[None, :]
  spread = _VITAL_SPREAD[None, :] * (1.0 + 0.25 * np.abs(acuity)[:, None]) * rng.gamma(4.0, 0.25, (n, 7))
  lo = mean - spread * rng.uniform(0.3, 0.7, (n, 7))
  hi = lo + spread
  spo2_cap = 100.0
  mean[:, 5], hi[:, 5] = np.minimum(mean[:, 5], spo2_cap), np.minimum(hi[:, 5], spo2_cap)
  lo[:, 5] = np.minimum(lo[:, 5], mean[:, 5])
  vit = np.stack([mean, lo, hi], axis=2).reshape(n, 21)

  # Mortality log-odds without the unit intercept (non-linear in the vitals).
  hr, sbp_min, rr, spo2_min, temp = mean[:, 0], lo[:, 1], mean[:, 4], lo[:, 5], mean[:, 6]
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
      charlson[:, 8] * charlson[:, 10],
      adm_type[:, 0] - adm_type[:, 2],
      # Pairwise interactions of within-center standardized vitals and age: no
      # marginal signal in either factor, so they take many samples to learn
      # (what separates a pooled model from small local ones).
      _zc(hr) * _zc(temp),
      -_zc(sbp_min) * _zc(age),
      -_zc(rr) * _zc(spo2_min),
      _zc(hr) * _zc(age),
  ], axis=1)
  # Concept shift between units (SPEC §2.1 heterogeneity): each unit weighs the
  # same risk factors differently (e.g. hypotension matters more in the CVICU).
  signal = terms @ (_TERM_WEIGHT * _unit_term_multipliers()[unit])
  x = np.concatenate([age[:, None], gender[:, None], race, adm_type, adm_loc, insurance, charlson, vit],
                     axis=1).astype(np.float32)
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


def synthetic_clinical(seed: int = 0, num_centers: int = 230, total_stays: int = 71000) -> Cohorts:
  """Generates the synthetic clinical federation (SPEC §2.1).

  Args:
    seed: generator seed (the default federation uses 0).
    num_centers: centers kept (the smallest cells are dropped; 230 as in paper 000).
    total_stays: approximate total ICU stays over the kept centers.

  Returns:
    :class:`Cohorts` with one site per (care unit, 2-year window), named like
    ``"MICU|2150-2151"``, raw features, labels, admission years and Charlson flags.
  """
  if num_centers < 1 or total_stays < num_centers:
    raise DataError(f"need num_centers ≥ 1 and total_stays ≥ num_centers, got {num_centers}, {total_stays}")
  rng = np.random.default_rng(seed)
  # Unit intercepts: solved once on a large reference sample of each unit's case mix.
  intercepts = []
  for u, (_, rate, _, _, _) in enumerate(CARE_UNITS):
    _, _, sig = _draw_patients(np.random.default_rng(10_000 + u), u, 40_000, 0.0, 0.0)
    intercepts.append(_unit_intercept(sig, rate))
  cells = cell_sizes(rng, num_centers, total_stays)
  # Slow within-unit drift of mean acuity: a random walk over each unit's windows.
  drift = {}
  for u in range(len(CARE_UNITS)):
    starts = sorted({s for uu, s, _ in cells if uu == u})
    walk = np.cumsum(rng.normal(0.0, DRIFT_SD, len(starts)))
    drift.update({(u, s): w - walk.mean() for s, w in zip(starts, walk)})
  sites = []
  for u, start, size in sorted(cells, key=lambda c: (c[0], c[1])):
    year_pos = (start - 0.5 * (FIRST_YEAR + LAST_YEAR)) / (LAST_YEAR - FIRST_YEAR)
    x, charlson, sig = _draw_patients(rng, u, size, drift[(u, start)], year_pos)
    y = (rng.random(size) < _sigmoid(intercepts[u] + sig)).astype(np.int32)
    year = start + rng.integers(0, WINDOW_YEARS, size).astype(np.float64)
    short = CARE_UNITS[u][0].split("(")[-1].rstrip(")")
    s0 = int(round(start))
    sites.append(SiteCohort(name=f"{short}|{s0}-{s0 + WINDOW_YEARS - 1}", x=x, y=y, year=year,
                            charlson=charlson))
  names = feature_names()
  return Cohorts(sites=tuple(sites), feature_names=names, continuous=_continuous_mask(names),
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
