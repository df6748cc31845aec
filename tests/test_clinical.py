"""The synthetic clinical federation against the statistics SPEC §2.1 fixes."""
import numpy as np
import pytest

from fedjax_sim.data import clinical
from fedjax_sim.data.cohorts import CHARLSON_CATEGORIES, validate_cohorts


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
  report = clinical.heterogeneity_report(cohorts)
  targets = {u[0].split("(")[-1].rstrip(")"): u[1] for u in clinical.CARE_UNITS}
  for unit, rate in report["unit_mortality"].items():
    assert abs(rate - targets[unit]) < 0.015, (unit, rate)
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
