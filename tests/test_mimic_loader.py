"""Tests of the MIMIC-IV loader (fedjax_sim.data.mimic) on a tiny MIMIC-IV v3.1-format directory.

The fixture below fabricates 33 ICU stays: 24 regular ones (3 care units x
intime years 2110, 2110, 2111, 2111, 2112, 2112, 2114, 2114) and 9 special
ones whose expected treatment is spelled out next to them.
"""
import csv
import datetime
import gzip
import os

import numpy as np
import pytest

from fedjax_sim.data.cohorts import CHARLSON_CATEGORIES
from fedjax_sim.data.mimic import (charlson_categories, expand_prefix_spec, load_mimic_iv, race_group)
from fedjax_sim.errors import DataError

MICU = "Medical Intensive Care Unit (MICU)"
SICU = "Surgical Intensive Care Unit (SICU)"
CVICU = "Cardiac Vascular Intensive Care Unit (CVICU)"
HOUR = datetime.timedelta(hours=1)
RACES = ("WHITE", "BLACK/AFRICAN AMERICAN", "HISPANIC/LATINO - DOMINICAN", "ASIAN - CHINESE", "UNKNOWN",
         "WHITE - RUSSIAN", "SOUTH AMERICAN", "")
TYPES = ("EW EMER.", "URGENT", "ELECTIVE")
LOCATIONS = ("EMERGENCY ROOM", "TRANSFER FROM HOSPITAL", "PHYSICIAN REFERRAL")
INSURANCE = ("Medicare", "Medicaid", "Private", "Other")

HEADERS = {
    "hosp/patients": ("subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"),
    "hosp/admissions": ("subject_id", "hadm_id", "admittime", "dischtime", "admission_type", "admission_location",
                        "discharge_location", "insurance", "language", "race", "hospital_expire_flag"),
    "icu/icustays": ("subject_id", "hadm_id", "stay_id", "first_careunit", "last_careunit", "intime", "outtime",
                     "los"),
    "hosp/diagnoses_icd": ("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"),
    "icu/chartevents": ("subject_id", "hadm_id", "stay_id", "caregiver_id", "charttime", "storetime", "itemid",
                        "value", "valuenum", "valueuom", "warning"),
}
DEFAULT_GZ = ("hosp/patients", "icu/icustays", "icu/chartevents")
# One routine measurement of each vital at intime + 1 h for regular stays.
ROUTINE = {220045: None, 220179: 110.0, 220180: 70.0, 220181: 85.0, 220210: None, 220277: 97.0, 223762: 37.0}


def ts(t):
  return t.strftime("%Y-%m-%d %H:%M:%S")


def add_stay(tables, subject, hadm, stay, unit, intime, anchor_age, anchor_year, expire=0, gender="F",
             race="WHITE", adm=0, with_admission=True):
  """Appends one patient / admission / ICU stay (a patient may be added twice for two stays)."""
  if not any(row[0] == subject for row in tables["hosp/patients"]):
    tables["hosp/patients"].append([subject, gender, anchor_age, anchor_year, "2017 - 2019", ""])
  if with_admission and not any(row[1] == hadm for row in tables["hosp/admissions"]):
    tables["hosp/admissions"].append([subject, hadm, ts(intime - HOUR), ts(intime + 100 * HOUR),
                                      TYPES[adm % 3], LOCATIONS[adm % 3], "HOME", INSURANCE[adm % 4],
                                      "English", race, expire])
  tables["icu/icustays"].append([subject, hadm, stay, unit, unit, ts(intime), ts(intime + 50 * HOUR), 2.08])


def chart(tables, stay, t, itemid, valuenum, subject=1, hadm=1):
  tables["icu/chartevents"].append([subject, hadm, stay, 7, ts(t), ts(t), itemid, valuenum, valuenum, "", 0])


def regular_stays():
  """``(j, unit, year, stay_id)`` of the 24 regular stays."""
  years = (2110, 2110, 2111, 2111, 2112, 2112, 2114, 2114)
  return [(j, (MICU, SICU, CVICU)[j // 8], years[j % 8], 30000100 + j) for j in range(24)]


def fixture_tables():
  """The tables of the tiny MIMIC-IV directory, as {"sub/table": rows}."""
  tables = {name: [] for name in HEADERS}
  for j, unit, year, stay in regular_stays():
    intime = datetime.datetime(year, 5, 1 + j, 10)
    add_stay(tables, 10000 + j, 20000 + j, stay, unit, intime, anchor_age=50 + j, anchor_year=year,
             expire=int(j % 4 == 0), gender="MF"[j % 2], race=RACES[j % len(RACES)], adm=j)
    tables["hosp/diagnoses_icd"].append([10000 + j, 20000 + j, 1, "4019", 9])  # hypertension: no category
    for itemid, value in ROUTINE.items():
      value = {220045: 70.0 + j, 220210: 12.0 + j % 5}.get(itemid, value)
      if not (itemid == 220210 and j == 5):  # stay 30000105 has no respiratory rate
        chart(tables, stay, intime + HOUR, itemid, value)
    chart(tables, stay, intime + 30 * HOUR, 220045, 999.0)  # after the first 24 h
    chart(tables, stay, intime - HOUR, 220045, 5.0)  # before intime

  # S: MICU 2110, died; vitals checked by hand; ICD-9 MI (41071) and CHF (4280).
  s_in = datetime.datetime(2110, 3, 1, 8)
  add_stay(tables, 11001, 21001, 30000001, MICU, s_in, 33, 2110, expire=1, gender="M",
           race="HISPANIC/LATINO - PUERTO RICAN", adm=1)
  tables["hosp/diagnoses_icd"] += [[11001, 21001, 1, "41071", 9], [11001, 21001, 2, "4280", 9],
                                   [11001, 21001, 3, "V5861", 9]]
  for dt, itemid, value in [(-1 / 3600, 220045, 200.0), (0, 220045, 80.0), (4.5, 220045, 100.0),
                            (24, 220045, 120.0), (24 + 1 / 3600, 220045, 300.0),
                            (1, 223761, 98.6), (2, 223762, 38.0), (48, 223761, 104.0),
                            (1, 220179, 120.0), (1.1, 220050, 140.0), (1, 220180, 60.0), (1, 220181, 80.0),
                            (1, 220210, 20.0), (1, 220277, 95.0), (2, 220277, 99.0), (3, 220277, ""),
                            (1, 220046, 50.0)]:
    chart(tables, 30000001, s_in + dt * HOUR, itemid, value)

  # T: CVICU 2112, survived; ICD-10 CHF (I509) and diabetes (E119); routine vitals, HR and RR 60.
  t_in = datetime.datetime(2112, 8, 1, 23, 30)
  add_stay(tables, 11002, 21002, 30000002, CVICU, t_in, 44, 2112, race="", adm=2)
  tables["hosp/diagnoses_icd"] += [[11002, 21002, 1, "I509", 10], [11002, 21002, 2, "E119", 10],
                                   [11002, 21002, 3, "Z87891", 10]]
  for itemid, value in ROUTINE.items():
    chart(tables, 30000002, t_in + HOUR, itemid, value or 60.0)

  # Ages: 17 in 2109 (dropped; it would also make 2109 the first window year), 94 + 2 years = 96
  # (dropped), 17 + 1 year = 18 (kept), 95 (kept).
  add_stay(tables, 11003, 21003, 30000003, MICU, datetime.datetime(2109, 1, 1, 9), 17, 2109)
  add_stay(tables, 11004, 21004, 30000004, MICU, datetime.datetime(2112, 1, 1, 9), 94, 2110)
  add_stay(tables, 11005, 21005, 30000005, MICU, datetime.datetime(2111, 6, 1, 9), 17, 2110)
  add_stay(tables, 11006, 21006, 30000006, SICU, datetime.datetime(2113, 6, 1, 9), 95, 2113)
  for stay in (30000003, 30000004):
    chart(tables, stay, datetime.datetime(2112, 1, 1, 10), 220045, 1000.0)
  # X: one admission (died) with two ICU stays in 2114, SICU then MICU.
  add_stay(tables, 11007, 21007, 30000007, SICU, datetime.datetime(2114, 2, 1, 9), 40, 2114, expire=1)
  add_stay(tables, 11007, 21007, 30000008, MICU, datetime.datetime(2114, 2, 5, 9), 40, 2114, expire=1)
  # An ICU stay whose admission is missing from admissions: skipped.
  add_stay(tables, 11009, 21009, 30000009, SICU, datetime.datetime(2110, 2, 1, 9), 70, 2110,
           with_admission=False)
  chart(tables, 39999999, datetime.datetime(2110, 2, 1, 10), 220045, 1000.0)  # unknown stay
  return tables


def write_mimic(root, tables=None, gz=DEFAULT_GZ):
  """Writes the tables under ``root`` (the names in ``gz`` as .csv.gz, the rest as .csv)."""
  tables = fixture_tables() if tables is None else tables
  for name, rows in tables.items():
    os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
    path = os.path.join(root, name + (".csv.gz" if name in gz else ".csv"))
    with (gzip.open(path, "wt", newline="") if name in gz else open(path, "w", newline="")) as f:
      writer = csv.writer(f)
      writer.writerow(HEADERS[name])
      writer.writerows(rows)
  return str(root)


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
  return load_mimic_iv(write_mimic(tmp_path_factory.mktemp("mimic")))


def column(cohorts, name):
  return cohorts.feature_names.index(name)


def find_row(cohorts, age):
  """(site, row) of the only stay with this age."""
  hits = [(s, i) for s in cohorts.sites for i in np.flatnonzero(s.x[:, 0] == age)]
  assert len(hits) == 1, hits
  return hits[0]


EXPECTED_COUNTS = {
    f"{CVICU}|2110-2111": 4, f"{CVICU}|2112-2113": 3, f"{CVICU}|2114-2115": 2,
    f"{MICU}|2110-2111": 6, f"{MICU}|2112-2113": 2, f"{MICU}|2114-2115": 3,
    f"{SICU}|2110-2111": 4, f"{SICU}|2112-2113": 3, f"{SICU}|2114-2115": 3,
}


def test_sites_and_counts(cohorts):
  assert {s.name: len(s.y) for s in cohorts.sites} == EXPECTED_COUNTS
  assert [s.name for s in cohorts.sites] == sorted(EXPECTED_COUNTS)
  assert "30 ICU stays, 9 centers" in cohorts.description


def test_age_filter_keeps_18_to_95(cohorts):
  ages = np.concatenate([s.x[:, 0] for s in cohorts.sites])
  assert sorted(ages.tolist()) == sorted([50.0 + j for j in range(24)] + [33, 44, 18, 95, 40, 40])
  site, _ = find_row(cohorts, 18)
  assert site.name == f"{MICU}|2110-2111"
  site, _ = find_row(cohorts, 95)
  assert site.name == f"{SICU}|2112-2113"


def test_labels(cohorts):
  site, i = find_row(cohorts, 33)
  assert site.y[i] == 1
  site, i = find_row(cohorts, 44)
  assert site.y[i] == 0
  # Regular stays with j % 4 == 0 (6), S, and both stays of X died.
  assert sum(int(s.y.sum()) for s in cohorts.sites) == 6 + 1 + 2
  x_sites = [s for s in cohorts.sites if s.name.endswith("2114-2115") and s.name.split("|")[0] in (MICU, SICU)]
  for s in x_sites:
    assert s.y[np.flatnonzero(s.x[:, 0] == 40)].tolist() == [1]


def test_first_day_vitals_by_hand(cohorts):
  site, i = find_row(cohorts, 33)
  value = lambda name: float(site.x[i, column(cohorts, name)])  # noqa: E731
  # HR in [intime, intime + 24 h]: 80, 100, 120 (the 24 h boundary is included); 200 and 300 are outside.
  assert (value("hr_mean"), value("hr_min"), value("hr_max")) == (100.0, 80.0, 120.0)
  # 98.6 °F = 37 °C and 38 °C; the 104 °F at 48 h is outside.
  np.testing.assert_allclose([value("temp_c_mean"), value("temp_c_min"), value("temp_c_max")],
                             [37.5, 37.0, 38.0], atol=1e-5)
  # Non-invasive 120 and arterial 140 systolic pressures are pooled.
  assert (value("sbp_mean"), value("sbp_min"), value("sbp_max")) == (130.0, 120.0, 140.0)
  assert (value("spo2_mean"), value("spo2_min"), value("spo2_max")) == (97.0, 95.0, 99.0)
  assert (value("dbp_mean"), value("mbp_mean"), value("rr_mean")) == (60.0, 80.0, 20.0)


def test_regular_vitals_ignore_rows_outside_the_window(cohorts):
  for j, _, _, _ in regular_stays():
    site, i = find_row(cohorts, 50 + j)
    hr = site.x[i, column(cohorts, "hr_mean"):column(cohorts, "hr_max") + 1]
    assert hr.tolist() == [70.0 + j] * 3


def test_missing_vital_gets_the_median_over_stays(cohorts):
  site, i = find_row(cohorts, 55)  # regular stay j = 5 has no respiratory rate
  # The median is over the stays that have a respiratory rate: regular 12 + j % 5 (j != 5), S 20, T 60;
  # the 4 special stays without chartevents (ages 18, 95, X twice) are imputed too.
  observed = [12.0 + j % 5 for j in range(24) if j != 5] + [20.0, 60.0]
  expected = np.median(observed)
  rr = site.x[i, column(cohorts, "rr_mean"):column(cohorts, "rr_max") + 1]
  np.testing.assert_allclose(rr, [expected] * 3)
  assert expected == 14.0
  site, i = find_row(cohorts, 18)  # no chartevents at all: every vital imputed
  np.testing.assert_allclose(site.x[i, column(cohorts, "rr_mean")], expected)
  hr_means = [70.0 + j for j in range(24)] + [100.0, 60.0]
  np.testing.assert_allclose(site.x[i, column(cohorts, "hr_mean")], np.median(hr_means))


def test_charlson_from_icd9_and_icd10(cohorts):
  names = [f"charlson_{c}" for c in CHARLSON_CATEGORIES]
  first = column(cohorts, names[0])
  site, i = find_row(cohorts, 33)  # ICD-9 41071 (MI), 4280 (CHF)
  flags = dict(zip(CHARLSON_CATEGORIES, site.x[i, first:first + 12]))
  assert {c for c, f in flags.items() if f} == {"myocardial_infarction", "congestive_heart_failure"}
  np.testing.assert_array_equal(site.charlson[i], site.x[i, first:first + 12])
  site, i = find_row(cohorts, 44)  # ICD-10 I509 (CHF), E119 (diabetes)
  flags = dict(zip(CHARLSON_CATEGORIES, site.charlson[i]))
  assert {c for c, f in flags.items() if f} == {"congestive_heart_failure", "diabetes"}
  site, i = find_row(cohorts, 50)  # ICD-9 4019 only
  assert not site.charlson[i].any()
  assert all(s.charlson.shape == (len(s.y), 12) for s in cohorts.sites)


def test_feature_layout(cohorts):
  names = cohorts.feature_names
  assert names[:7] == ("age", "gender_male", "race=WHITE", "race=BLACK", "race=HISPANIC", "race=ASIAN",
                       "race=OTHER")
  assert [n for n in names if n.startswith("admission_type=")] == [f"admission_type={t}" for t in sorted(TYPES)]
  assert [n for n in names if n.startswith("insurance=")] == [f"insurance={v}" for v in sorted(INSURANCE)]
  assert [n for n in names if n.startswith("admission_location=")] == [
      f"admission_location={v}" for v in sorted(LOCATIONS)]
  assert names[-21:-18] == ("hr_mean", "hr_min", "hr_max") and names[-3:] == ("temp_c_mean", "temp_c_min",
                                                                                "temp_c_max")
  assert len(names) == 2 + 5 + 3 + 3 + 4 + 12 + 21
  expected_continuous = [n == "age" or n.endswith(("_mean", "_min", "_max")) for n in names]
  np.testing.assert_array_equal(cohorts.continuous, expected_continuous)
  race = lambda site, i: names[2 + int(np.argmax(site.x[i, 2:7]))]  # noqa: E731
  assert race(*find_row(cohorts, 33)) == "race=HISPANIC"
  assert race(*find_row(cohorts, 44)) == "race=OTHER"  # empty race
  assert race(*find_row(cohorts, 51)) == "race=BLACK"
  assert race(*find_row(cohorts, 56)) == "race=OTHER"  # SOUTH AMERICAN: not a listed prefix
  site, i = find_row(cohorts, 33)
  assert site.x[i, 1] == 1.0 and site.x[i, column(cohorts, "admission_type=URGENT")] == 1.0


def test_year_per_row(cohorts):
  site, i = find_row(cohorts, 33)
  assert site.year[i] == 2110.0
  for s in cohorts.sites:
    start, end = map(int, s.name.split("|")[1].split("-"))
    assert s.year.shape == s.y.shape and (s.year >= start).all() and (s.year <= end).all()


def test_window_width_three(tmp_path):
  cohorts = load_mimic_iv(write_mimic(tmp_path), window_years=3)
  counts = {s.name: len(s.y) for s in cohorts.sites}
  assert counts == {f"{CVICU}|2110-2112": 7, f"{CVICU}|2113-2115": 2, f"{MICU}|2110-2112": 8,
                    f"{MICU}|2113-2115": 3, f"{SICU}|2110-2112": 6, f"{SICU}|2113-2115": 4}


def test_plain_csv_and_gz_preference(tmp_path, cohorts):
  root = write_mimic(tmp_path, gz=())
  plain = load_mimic_iv(root)
  assert [s.name for s in plain.sites] == [s.name for s in cohorts.sites]
  for a, b in zip(plain.sites, cohorts.sites):
    np.testing.assert_array_equal(a.x, b.x)
  write_mimic(tmp_path, gz=("hosp/patients",))  # patients.csv.gz next to patients.csv: the .gz is read
  with open(os.path.join(root, "hosp", "patients.csv"), "w") as f:
    f.write("not,a,patients,table\n")
  assert load_mimic_iv(root).feature_names == cohorts.feature_names


def test_charlson_categories_and_prefix_ranges():
  index = {c: k for k, c in enumerate(CHARLSON_CATEGORIES)}
  assert charlson_categories("41071", "9") == (index["myocardial_infarction"],)
  assert charlson_categories("I252", "10") == (index["myocardial_infarction"],)
  assert charlson_categories("I2510", "10") == ()
  assert charlson_categories("40403", "9") == (index["congestive_heart_failure"], index["renal_disease"])
  assert charlson_categories("25000", "10") == () and charlson_categories("E119", "9") == ()
  assert charlson_categories("C787", "10") == (index["malignancy"],)  # metastatic
  assert charlson_categories("K7030", "10") == (index["liver_disease"],)
  assert charlson_categories("571.5", "9") == (index["liver_disease"],)
  assert expand_prefix_spec("I60-I69") == [f"I6{k}" for k in range(10)]
  assert expand_prefix_spec("N032-N037") == ["N032", "N033", "N034", "N035", "N036", "N037"]
  assert expand_prefix_spec("V434") == ["V434"]
  assert [race_group(r) for r in ("WHITE - BRAZILIAN", "ASIAN", "MULTIPLE RACE/ETHNICITY")] == [
      "WHITE", "ASIAN", "OTHER"]


# ----------------------------------------------------------------------------- bad input


def test_missing_directory(tmp_path):
  with pytest.raises(DataError, match="MIMIC-IV directory not found: .*nowhere"):
    load_mimic_iv(str(tmp_path / "nowhere"))


def test_missing_table_lists_paths_tried(tmp_path):
  root = write_mimic(tmp_path)
  os.remove(os.path.join(root, "icu", "chartevents.csv.gz"))
  with pytest.raises(DataError, match=r"icu/chartevents not found; tried .*chartevents.csv.gz and "
                     r".*chartevents.csv"):
    load_mimic_iv(root)


def test_missing_column_lists_available(tmp_path):
  old = HEADERS["hosp/admissions"]
  try:
    HEADERS["hosp/admissions"] = tuple("ethnicity" if h == "race" else h for h in old)
    root = write_mimic(tmp_path)
  finally:
    HEADERS["hosp/admissions"] = old
  with pytest.raises(DataError, match=r"admissions.csv: column 'race' not found; available columns: .*"
                     r"'ethnicity'.*v3.1"):
    load_mimic_iv(root)


def test_non_binary_label(tmp_path):
  tables = fixture_tables()
  tables["hosp/admissions"][3][-1] = 2
  with pytest.raises(DataError, match=r"hospital_expire_flag must be binary.*'2' on line 5"):
    load_mimic_iv(write_mimic(tmp_path, tables))


def test_bad_values(tmp_path):
  tables = fixture_tables()
  tables["icu/icustays"][0][5] = "yesterday"
  with pytest.raises(DataError, match=r"icustays.csv.gz: column 'intime' has the unreadable time 'yesterday'"):
    load_mimic_iv(write_mimic(tmp_path / "a", tables))
  tables = fixture_tables()
  tables["hosp/patients"][2][2] = "old"
  with pytest.raises(DataError, match=r"column 'anchor_age' has the non-integer value 'old' on line 4"):
    load_mimic_iv(write_mimic(tmp_path / "b", tables))


def test_no_vital_at_all(tmp_path):
  tables = fixture_tables()
  tables["icu/chartevents"] = [row for row in tables["icu/chartevents"] if row[6] != 220277]
  with pytest.raises(DataError, match=r"no ICU stay has a first-24h spo2 measurement.*220277"):
    load_mimic_iv(write_mimic(tmp_path, tables))


def test_bad_arguments(tmp_path):
  root = write_mimic(tmp_path)
  with pytest.raises(DataError, match="no ICU stay .* aged 100-120"):
    load_mimic_iv(root, min_age=100, max_age=120)
  with pytest.raises(DataError, match="window_years must be an integer >= 1, got 0"):
    load_mimic_iv(root, window_years=0)
  with pytest.raises(DataError, match=r"min_age \(90\) must not exceed max_age \(20\)"):
    load_mimic_iv(root, min_age=90, max_age=20)
