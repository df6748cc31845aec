"""The synthetic clinical federation against the statistics SPEC §2.1 fixes."""
import hashlib
import warnings

import numpy as np
import pytest

from fedjax_sim.data import clinical
from fedjax_sim.data.cohorts import CHARLSON_CATEGORIES, validate_cohorts
from fedjax_sim.data.federation import from_cohorts


@pytest.fixture(scope="module")
def cohorts():
  return clinical.synthetic_clinical(seed=0)


def test_schema_and_size(cohorts):
  validate_cohorts(cohorts)
  assert len(cohorts.sites) == 230
  total = sum(len(s.y) for s in cohorts.sites)
  assert abs(total - 71000) < 100
  names = cohorts.feature_names
  assert 50 <= len(names) <= 60
  assert sum(n.startswith("charlson_") for n in names) == 12
  assert sum(n.endswith(("_mean", "_min", "_max")) for n in names) == 21
  # Continuous: age and the vitals; the one-hot and binary columns are not standardized.
  assert cohorts.continuous.sum() == 22
  sizes = np.array([len(s.y) for s in cohorts.sites])
  assert 150 < np.median(sizes) < 350 and sizes.max() > 1000 and (sizes < 150).sum() > 20  # many small centers
  for s in cohorts.sites:
    assert s.charlson.shape == (len(s.y), len(CHARLSON_CATEGORIES))
    assert 2110 <= s.year.min() and s.year.max() <= 2192
    age = s.x[:, 0]
    assert age.min() >= 18 and age.max() <= 95


def test_unit_mortality_and_heterogeneity(cohorts):
  """Each unit's mortality is its SPEC §2.1 rate p within 3.5 binomial sd.

  The unit's n stays are Bernoulli draws whose mean is p up to the error of the intercept, solved on a
  reference sample of 40,000 stays (clinical._unit_intercepts), so the sd of the observed rate is
  sqrt(p(1 − p)(1/n + 1/40,000)). For CVICU (p = 0.033, n ≈ 14,750) 3.5 sd is 0.006, 18% of p
  (the former ±0.015 was 45% of it).
  """
  report = clinical.heterogeneity_report(cohorts)
  targets = {u[0].split("(")[-1].rstrip(")"): u[1] for u in clinical.CARE_UNITS}
  assert sorted(report["unit_mortality"]) == sorted(targets)
  for unit, rate in report["unit_mortality"].items():
    p = targets[unit]
    n = sum(len(s.y) for s in cohorts.sites if s.name.startswith(unit + "|"))
    sd = np.sqrt(p * (1 - p) * (1 / n + 1 / 40_000))
    assert abs(rate - p) < 3.5 * sd, (unit, rate, p, sd)
  # Across-unit divergence clearly exceeds within-unit divergence (paper: 0.0066 vs 0.0009 nats).
  assert report["js_across_units"] > 3 * report["js_within_unit"]
  assert 0.003 < report["js_across_units"] < 0.015


def test_deterministic_in_seed():
  a = clinical.synthetic_clinical(seed=5, num_centers=12, total_stays=2000)
  b = clinical.synthetic_clinical(seed=5, num_centers=12, total_stays=2000)
  c = clinical.synthetic_clinical(seed=6, num_centers=12, total_stays=2000)
  assert [s.name for s in a.sites] == [s.name for s in b.sites]
  np.testing.assert_array_equal(a.sites[3].x, b.sites[3].x)
  assert not np.array_equal(a.sites[3].x[:5], c.sites[3].x[:5])


def test_js_bernoulli_definition():
  assert clinical.js_bernoulli(np.array(0.3), np.array(0.3)) == pytest.approx(0.0, abs=1e-12)
  p, q = 0.154, 0.033
  m = (p + q) / 2
  kl = lambda a, b: a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))
  assert clinical.js_bernoulli(np.array(p), np.array(q)) == pytest.approx(0.5 * kl(p, m) + 0.5 * kl(q, m))


def test_default_federation_fingerprint(cohorts):
  """The calibrated default federation must not drift (exact counts; float sums to a platform tolerance)."""
  names = "\n".join(s.name for s in cohorts.sites)
  sizes = ",".join(str(len(s.y)) for s in cohorts.sites)
  assert hashlib.sha256(names.encode()).hexdigest()[:16] == "1b46d7bcbac17442"
  assert hashlib.sha256(sizes.encode()).hexdigest()[:16] == "6968f3d538b1f852"
  assert sum(int(s.y.sum()) for s in cohorts.sites) == 7957
  assert sum(float(s.charlson.sum()) for s in cohorts.sites) == 120638.0
  x = np.concatenate([s.x for s in cohorts.sites]).astype(np.float64)
  assert x[:, 0].sum() == pytest.approx(4502227.736362457, rel=1e-6)
  assert x[:, 30:].sum() == pytest.approx(105306229.48380867, rel=1e-6)


def original_draws(rng, unit, n, acuity_mean, year_pos):
  """The generator calls of the cell-by-cell generator, one per quantity (``rng.choice`` for categories)."""
  _, _, _, age_mean, _ = clinical.CARE_UNITS[unit]
  out = {"age": rng.normal(age_mean + 2.0 * year_pos, 16.0, n), "gender": rng.random(n)}
  for key, probs in (("race", clinical._RACE), ("admission_type", clinical._ADM_TYPE[unit]),
                     ("admission_location", clinical._ADM_LOC[unit])):
    out[key] = rng.choice(len(probs), size=n, p=probs / probs.sum())
  out["insurance"] = rng.random(n)
  out["charlson"] = rng.random((n, 12))
  out["acuity"] = rng.normal(acuity_mean, 1.0, n)
  out["vital_noise"] = rng.normal(0, 1, (n, 7))
  out["spread"] = rng.gamma(4.0, 0.25, (n, 7))
  out["low_fraction"] = rng.uniform(0.3, 0.7, (n, 7))
  out["label"] = rng.random(n)
  out["year_offset"] = rng.integers(0, clinical.WINDOW_YEARS, n)
  return out


def test_draw_cells_keeps_the_cell_by_cell_stream():
  cells = [(2, 2121.0, 17), (2, 2150.5, 1), (4, 2170.25, 300), (4, 2180.0, 2)]
  drift = {(u, s): 0.01 * i for i, (u, s, _) in enumerate(cells)}
  a, b = np.random.default_rng(7), np.random.default_rng(7)
  draws = clinical.draw_cells(b, cells, drift)
  for i, (u, start, n) in enumerate(cells):
    year_pos = (start - 0.5 * (clinical.FIRST_YEAR + clinical.LAST_YEAR)) / (clinical.LAST_YEAR - clinical.FIRST_YEAR)
    want = original_draws(a, u, n, drift[(u, start)], year_pos)
    got = clinical.stay_draws(draws, [i], n)._asdict()
    rows = slice(draws.first[i], draws.first[i] + n)
    got.update(label=draws.label[rows][None], year_offset=draws.year_offset[rows][None])
    probs = {"race": clinical._RACE, "admission_type": clinical._ADM_TYPE[u],
             "admission_location": clinical._ADM_LOC[u]}
    for key, value in want.items():
      if key in probs:
        np.testing.assert_array_equal(clinical._one_hot(got[key][0], probs[key]).argmax(-1), value, err_msg=key)
      else:
        np.testing.assert_array_equal(got[key][0], value, err_msg=key)
  assert a.random() == b.random()  # both streams end at the same place


def test_stacked_cells_equal_single_cells():
  cells = [(u, 2110.0 + i, n) for u, n in ((0, 1), (3, 9), (5, 140)) for i in range(4)]
  draws = clinical.draw_cells(np.random.default_rng(3), cells, {(u, s): 0.01 * s for u, s, _ in cells})
  for g in range(3):
    (u, _, n), idx = cells[4 * g], list(range(4 * g, 4 * g + 4))
    stacked = clinical._patients(u, clinical.stay_draws(draws, idx, n))
    for k, i in enumerate(idx):
      for got, want in zip(stacked, clinical._patients(u, clinical.stay_draws(draws, [i], n))):
        np.testing.assert_array_equal(got[k], want[0])


def test_site_names_unique_with_fine_windows():
  assert not any("#" in s.name for s in clinical.synthetic_clinical(seed=1, num_centers=40, total_stays=4000).sites)
  cells = [(0, 2150.0, 5), (0, 2150.3, 5), (1, 2150.0, 5), (1, 2151.2, 5)]
  assert clinical.site_names(cells) == ["MICU|2150-2151#0", "MICU|2150-2151#1", "MICU/SICU|2150-2151#0",
                                        "MICU/SICU|2151-2152#1"]


def test_large_federation_builds():
  """5,000 centers of ~30 stays: unique names, sizes summing to the target, every kept row stacked."""
  coh = clinical.synthetic_clinical(seed=0, num_centers=5000, total_stays=150_000)
  sizes = np.array([len(s.y) for s in coh.sites])
  assert len(coh.sites) == 5000 and len({s.name for s in coh.sites}) == 5000
  assert abs(sizes.sum() - 150_000) < 0.01 * 150_000
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    fed = from_cohorts(coh, seed=0, batch_size=128, num_buckets=6, min_rows=5)
  assert fed.num_clients > 0.95 * 5000
  assert int(np.asarray(fed.n_train).sum() + np.asarray(fed.m_val).sum() + np.asarray(fed.m_test).sum()) == \
      sizes[sizes >= 5].sum()
