"""MIMIC-IV v3.1 in-hospital mortality cohorts, one center per care unit × intime window (SPEC §2.2).

Reads a local MIMIC-IV directory (Johnson et al. 2023, "MIMIC-IV, a freely
accessible electronic health record dataset", Sci Data 10:1; v3.1 on
PhysioNet) with the layout of the official release and of the public demo::

  DIRECTORY/hosp/patients.csv.gz       DIRECTORY/hosp/diagnoses_icd.csv.gz
  DIRECTORY/hosp/admissions.csv.gz     DIRECTORY/icu/icustays.csv.gz
  DIRECTORY/icu/chartevents.csv.gz

(each table may also be an uncompressed ``.csv``; when both exist the
``.csv.gz`` is read). One row per ICU stay; label = the admission's
``hospital_expire_flag``.

Features, in this order (``continuous`` in brackets):

* ``age`` [yes]: ``anchor_age + year(intime) - anchor_year``; stays outside
  ``[min_age, max_age]`` are dropped.
* ``gender_male`` [no]: 1 for ``M``.
* ``race=WHITE|BLACK|HISPANIC|ASIAN|OTHER`` [no]: ``admissions.race`` grouped
  by prefix; anything else (including empty) is OTHER.
* ``admission_type=…``, ``admission_location=…``, ``insurance=…`` [no]:
  one-hot over the sorted values seen among the kept stays; an empty cell is
  the value ``UNKNOWN``.
* ``charlson_<category>`` [no]: the 12 Charlson categories of
  :data:`~fedjax_sim.data.cohorts.CHARLSON_CATEGORIES` from the admission's
  ICD-9 / ICD-10 codes (:data:`QUAN_2005_CHARLSON_PREFIXES`).
* ``<vital>_mean|min|max`` [yes] for hr, sbp, dbp, mbp, rr, spo2, temp_c:
  chartevents with ``intime <= charttime <= intime + 24 h`` (°F temperatures
  converted to °C; empty ``valuenum`` skipped; no outlier filtering). A stay
  with no measurement of a vital gets, for that vital's three columns, the
  median of the column over all stays that have one; no missingness indicator
  is added.

Stays whose admission or patient is absent from admissions / patients are
skipped (they have no label or age). chartevents is streamed row by row and
never held in memory.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import math
import os
from typing import Iterator, Sequence

import numpy as np

from fedjax_sim.data.cohorts import CHARLSON_CATEGORIES, Cohorts, SiteCohort, validate_cohorts
from fedjax_sim.data.csv_sites import column_indices, open_text
from fedjax_sim.errors import DataError

# Table -> (subdirectory, columns read). Column names of MIMIC-IV v3.1.
TABLE_COLUMNS = {
    "patients": ("hosp", ("subject_id", "gender", "anchor_age", "anchor_year")),
    "admissions": ("hosp", ("subject_id", "hadm_id", "admission_type", "admission_location", "insurance",
                            "race", "hospital_expire_flag")),
    "icustays": ("icu", ("subject_id", "hadm_id", "stay_id", "first_careunit", "intime")),
    "diagnoses_icd": ("hosp", ("hadm_id", "icd_code", "icd_version")),
    "chartevents": ("icu", ("stay_id", "charttime", "itemid", "valuenum")),
}

# Vital -> chartevents itemids (MIMIC-IV d_items), in feature order.
VITAL_ITEMIDS = {
    "hr": (220045,),             # Heart Rate
    "sbp": (220179, 220050),     # Non Invasive / Arterial Blood Pressure systolic
    "dbp": (220180, 220051),     # Non Invasive / Arterial Blood Pressure diastolic
    "mbp": (220181, 220052),     # Non Invasive / Arterial Blood Pressure mean
    "rr": (220210,),             # Respiratory Rate
    "spo2": (220277,),           # O2 saturation pulseoxymetry
    "temp_c": (223761, 223762),  # Temperature Fahrenheit / Celsius
}
FAHRENHEIT_ITEMIDS = frozenset({223761})
VITAL_STATS = ("mean", "min", "max")
FIRST_DAY = datetime.timedelta(hours=24)

RACE_GROUPS = ("WHITE", "BLACK", "HISPANIC", "ASIAN", "OTHER")
UNKNOWN = "UNKNOWN"

# Charlson comorbidity categories -> ICD code prefixes (dots removed, as MIMIC
# stores codes; "A-B" is every prefix from A to B of the same length).
# Source: Quan H, Sundararajan V, Halfon P, et al. Coding algorithms for
# defining comorbidities in ICD-9-CM and ICD-10 administrative data. Med Care
# 2005;43(11):1130-9, Table 1 (enhanced ICD-9-CM and ICD-10 Charlson codes).
# The 17 Charlson conditions are folded into the 12 categories of
# CHARLSON_CATEGORIES: mild + moderate/severe liver disease -> liver_disease;
# diabetes with + without complications -> diabetes; any malignancy +
# metastatic solid tumour -> malignancy; hemiplegia/paraplegia and AIDS/HIV
# are not used.
QUAN_2005_CHARLSON_PREFIXES = {
    "myocardial_infarction": {
        "icd9": ("410", "412"),
        "icd10": ("I21", "I22", "I252"),
    },
    "congestive_heart_failure": {
        "icd9": ("39891", "40201", "40211", "40291", "40401", "40403", "40411", "40413", "40491", "40493",
                 "4254-4259", "428"),
        "icd10": ("I099", "I110", "I130", "I132", "I255", "I420", "I425-I429", "I43", "I50", "P290"),
    },
    "peripheral_vascular_disease": {
        "icd9": ("0930", "4373", "440", "441", "4431-4439", "4471", "5571", "5579", "V434"),
        "icd10": ("I70", "I71", "I731", "I738", "I739", "I771", "I790", "I792", "K551", "K558", "K559", "Z958",
                  "Z959"),
    },
    "cerebrovascular_disease": {
        "icd9": ("36234", "430-438"),
        "icd10": ("G45", "G46", "H340", "I60-I69"),
    },
    "dementia": {
        "icd9": ("290", "2941", "3312"),
        "icd10": ("F00-F03", "F051", "G30", "G311"),
    },
    "chronic_pulmonary_disease": {
        "icd9": ("4168", "4169", "490-505", "5064", "5081", "5088"),
        "icd10": ("I278", "I279", "J40-J47", "J60-J67", "J684", "J701", "J703"),
    },
    "rheumatic_disease": {
        "icd9": ("4465", "7100-7104", "7140-7142", "7148", "725"),
        "icd10": ("M05", "M06", "M315", "M32-M34", "M351", "M353", "M360"),
    },
    "peptic_ulcer_disease": {
        "icd9": ("531-534",),
        "icd10": ("K25-K28",),
    },
    "liver_disease": {  # mild + moderate/severe
        "icd9": ("07022", "07023", "07032", "07033", "07044", "07054", "0706", "0709", "570", "571", "5733",
                 "5734", "5738", "5739", "V427", "4560-4562", "5722-5728"),
        "icd10": ("B18", "K700-K704", "K709", "K711", "K713-K715", "K717", "K721", "K729", "K73", "K74", "K760",
                  "K762-K769", "Z944", "I850", "I859", "I864", "I982"),
    },
    "diabetes": {  # with + without chronic complications
        "icd9": ("250",),
        "icd10": ("E10-E14",),
    },
    "renal_disease": {
        "icd9": ("40301", "40311", "40391", "40402", "40403", "40412", "40413", "40492", "40493", "582",
                 "5830-5837", "585", "586", "5880", "V420", "V451", "V56"),
        "icd10": ("I120", "I131", "N032-N037", "N052-N057", "N18", "N19", "N250", "Z490-Z492", "Z940", "Z992"),
    },
    "malignancy": {  # any malignancy incl. lymphoma and leukaemia + metastatic solid tumour
        "icd9": ("140-172", "174-195", "196-199", "200-208", "2386"),
        "icd10": ("C00-C26", "C30-C34", "C37-C41", "C43", "C45-C58", "C60-C76", "C77-C80", "C81-C85", "C88",
                  "C90-C97"),
    },
}


def expand_prefix_spec(spec: str) -> list:
  """Expands ``"I60-I69"`` to ``["I60", …, "I69"]``; a single prefix is returned as is.

  Args:
    spec: a prefix, or two prefixes of equal length with the same letters and
      a numeric tail, joined by ``-``.

  Returns:
    The prefixes covered, in order.
  """
  if "-" not in spec:
    return [spec]
  first, last = spec.split("-")
  head = len(first.rstrip("0123456789"))
  width = len(first) - head
  return [first[:head] + str(k).zfill(width) for k in range(int(first[head:]), int(last[head:]) + 1)]


def _prefix_lookup(version: str) -> dict:
  """Prefix -> tuple of category indices, for ``version`` ``"icd9"`` or ``"icd10"``."""
  lookup = {}
  for k, category in enumerate(CHARLSON_CATEGORIES):
    for spec in QUAN_2005_CHARLSON_PREFIXES[category][version]:
      for prefix in expand_prefix_spec(spec):
        lookup[prefix] = lookup.get(prefix, ()) + (k,)
  return lookup


_CHARLSON_LOOKUP = {"9": _prefix_lookup("icd9"), "10": _prefix_lookup("icd10")}


def charlson_categories(icd_code: str, icd_version: str) -> tuple:
  """Indices into ``CHARLSON_CATEGORIES`` of the categories an ICD code falls in (Quan et al. 2005).

  Args:
    icd_code: the code as MIMIC stores it (no dot, e.g. ``"41071"``, ``"I509"``);
      dots and surrounding spaces are tolerated.
    icd_version: ``"9"`` or ``"10"``.

  Returns:
    A sorted tuple of category indices (empty when the code is in none).
  """
  lookup = _CHARLSON_LOOKUP[icd_version]
  code = icd_code.strip().upper().replace(".", "")
  found = set()
  for length in range(3, min(len(code), 5) + 1):
    found.update(lookup.get(code[:length], ()))
  return tuple(sorted(found))


def race_group(race: str) -> str:
  """Groups a MIMIC-IV ``race`` value by prefix into one of ``RACE_GROUPS``."""
  race = race.strip().upper()
  for group in RACE_GROUPS[:-1]:
    if race.startswith(group):
      return group
  return "OTHER"


def find_table(directory: str, table: str) -> str:
  """Path of a MIMIC-IV table: ``<sub>/<table>.csv.gz`` if it exists, else ``<sub>/<table>.csv``.

  Raises:
    DataError: neither exists; the message lists both paths tried.
  """
  sub = TABLE_COLUMNS[table][0]
  tried = [os.path.join(directory, sub, f"{table}.csv.gz"), os.path.join(directory, sub, f"{table}.csv")]
  for path in tried:
    if os.path.isfile(path):
      return path
  raise DataError(f"MIMIC-IV table {sub}/{table} not found; tried {tried[0]} and {tried[1]}")


@contextlib.contextmanager
def open_table(path: str, columns: Sequence[str]) -> Iterator[tuple]:
  """Opens a CSV table for streaming and locates the named columns.

  Args:
    path: a ``.csv`` or ``.csv.gz`` file with a header.
    columns: the columns wanted.

  Yields:
    ``(reader, where, width)``: a :func:`csv.reader` positioned after the
    header, the index of each wanted column, and the header's length.

  Raises:
    DataError: a missing column (listing the available ones) or an
      unreadable file.
  """
  try:
    with open_text(path) as f:
      reader = csv.reader(f)
      header = [h.strip() for h in next(reader, [])]
      where = column_indices(header, columns, path, hint="This loader expects MIMIC-IV v3.1 column names")
      yield reader, where, len(header)
  except (OSError, UnicodeDecodeError, csv.Error, EOFError) as e:
    raise DataError(f"could not read {path} as a CSV table: {e}") from e


def _short_row(path: str, line: int, got: int, width: int) -> DataError:
  return DataError(f"{path}: line {line} has {got} fields, expected {width}")


def iter_table(path: str, columns: Sequence[str]) -> Iterator[tuple]:
  """Streams a CSV table row by row, yielding only the named columns.

  Args:
    path: a ``.csv`` or ``.csv.gz`` file with a header.
    columns: the columns wanted.

  Yields:
    ``(line, values)``: the file line number and the stripped cells of
    ``columns``, in that order.

  Raises:
    DataError: a missing column (listing the available ones), a short row or
      an unreadable file.
  """
  with open_table(path, columns) as (reader, where, width):
    needed = max(where) + 1
    for row in reader:
      if not row:
        continue
      if len(row) < needed:
        raise _short_row(path, reader.line_num, len(row), width)
      yield reader.line_num, [row[j].strip() for j in where]


def _parse_int(value: str, column: str, path: str, line: int) -> int:
  try:
    return int(float(value)) if "." in value else int(value)
  except ValueError:
    raise DataError(f"{path}: column {column!r} has the non-integer value {value!r} on line {line}") from None


def _parse_time(value: str, column: str, path: str, line: int) -> datetime.datetime:
  try:
    return datetime.datetime.fromisoformat(value)
  except ValueError:
    raise DataError(f"{path}: column {column!r} has the unreadable time {value!r} on line {line} "
                    "(expected YYYY-MM-DD HH:MM:SS)") from None


def _canonical_time(t: datetime.datetime) -> str:
  """``YYYY-MM-DD HH:MM:SS``, MIMIC's format, in which string order is time order."""
  return t.strftime("%Y-%m-%d %H:%M:%S")


def read_patients(path: str) -> dict:
  """``subject_id -> (gender_male, anchor_age, anchor_year)`` from ``hosp/patients``."""
  patients = {}
  for line, (subject, gender, anchor_age, anchor_year) in iter_table(path, TABLE_COLUMNS["patients"][1]):
    patients[subject] = (float(gender.upper() == "M"), _parse_int(anchor_age, "anchor_age", path, line),
                         _parse_int(anchor_year, "anchor_year", path, line))
  return patients


def read_admissions(path: str) -> dict:
  """``hadm_id -> dict`` of the categorical fields and the label from ``hosp/admissions``."""
  admissions = {}
  for line, values in iter_table(path, TABLE_COLUMNS["admissions"][1]):
    _, hadm, admission_type, location, insurance, race, expire = values
    if expire not in ("0", "1"):
      raise DataError(f"{path}: hospital_expire_flag must be binary (0/1), found {expire!r} on line {line}")
    admissions[hadm] = {
        "admission_type": admission_type or UNKNOWN,
        "admission_location": location or UNKNOWN,
        "insurance": insurance or UNKNOWN,
        "race": race_group(race),
        "label": int(expire),
    }
  return admissions


def read_icu_stays(path: str, patients: dict, admissions: dict, min_age: int, max_age: int) -> list:
  """The ICU stays of ``icu/icustays`` kept by the age filter, sorted by stay_id.

  Args:
    path: the icustays table.
    patients: from :func:`read_patients`.
    admissions: from :func:`read_admissions`.
    min_age, max_age: inclusive age range at ICU admission.

  Returns:
    A list of dicts with ``stay_id`` (str), ``hadm_id``, ``careunit``,
    ``intime`` (datetime), ``age`` and ``gender_male``.
  """
  stays, seen = [], set()
  for line, (subject, hadm, stay, careunit, intime) in iter_table(path, TABLE_COLUMNS["icustays"][1]):
    if stay in seen:
      raise DataError(f"{path}: stay_id {stay} appears more than once (again on line {line})")
    seen.add(stay)
    if subject not in patients or hadm not in admissions:
      continue
    gender_male, anchor_age, anchor_year = patients[subject]
    t = _parse_time(intime, "intime", path, line)
    age = anchor_age + (t.year - anchor_year)
    if min_age <= age <= max_age:
      stays.append({"stay_id": stay, "hadm_id": hadm, "careunit": careunit or UNKNOWN, "intime": t,
                    "age": float(age), "gender_male": gender_male})
  stays.sort(key=lambda s: (len(s["stay_id"]), s["stay_id"]))
  return stays


def read_charlson(path: str, hadm_ids: set) -> dict:
  """``hadm_id -> [12]`` Charlson indicators from ``hosp/diagnoses_icd``, for the given admissions.

  Streams the table; admissions without a matching code get no entry.
  """
  flags, cache = {}, {}
  for line, (hadm, code, version) in iter_table(path, TABLE_COLUMNS["diagnoses_icd"][1]):
    if hadm not in hadm_ids:
      continue
    if version not in ("9", "10"):
      raise DataError(f"{path}: icd_version must be 9 or 10, found {version!r} on line {line}")
    key = (code, version)
    if key not in cache:
      cache[key] = charlson_categories(code, version)
    if cache[key]:
      row = flags.setdefault(hadm, np.zeros(len(CHARLSON_CATEGORIES), np.float32))
      row[list(cache[key])] = 1.0
  return flags


def read_first_day_vitals(path: str, windows: dict) -> dict:
  """Streams ``icu/chartevents`` into per-stay first-24 h vital summaries.

  Args:
    path: the chartevents table.
    windows: ``stay_id -> (start, end)`` as ``YYYY-MM-DD HH:MM:SS`` strings;
      a row counts when ``start <= charttime <= end``.

  Returns:
    ``(stay_id, vital index) -> [sum, count, min, max]`` (°C for temperature).
  """
  item_vital = {str(item): k for k, items in enumerate(VITAL_ITEMIDS.values()) for item in items}
  fahrenheit = {str(item) for item in FAHRENHEIT_ITEMIDS}
  acc = {}
  # The hot loop of the loader (chartevents has hundreds of millions of rows): cheap filters first.
  with open_table(path, TABLE_COLUMNS["chartevents"][1]) as (reader, where, width):
    i_stay, i_time, i_item, i_value = where
    needed = max(where) + 1
    for row in reader:
      if len(row) < needed:
        if not row:
          continue
        raise _short_row(path, reader.line_num, len(row), width)
      itemid = row[i_item].strip()
      k = item_vital.get(itemid)
      if k is None:
        continue
      stay = row[i_stay].strip()
      window = windows.get(stay)
      valuenum = row[i_value].strip()
      if window is None or not valuenum:
        continue
      charttime = row[i_time].strip()
      if len(charttime) != 19 or charttime[10] != " ":
        charttime = _canonical_time(_parse_time(charttime, "charttime", path, reader.line_num))
      if not window[0] <= charttime <= window[1]:
        continue
      try:
        value = float(valuenum)
      except ValueError:
        raise DataError(f"{path}: column 'valuenum' has the non-numeric value {valuenum!r} on line "
                        f"{reader.line_num}") from None
      if not math.isfinite(value):
        continue
      if itemid in fahrenheit:
        value = (value - 32.0) * 5.0 / 9.0
      a = acc.get((stay, k))
      if a is None:
        acc[(stay, k)] = [value, 1, value, value]
      else:
        a[0] += value
        a[1] += 1
        if value < a[2]:
          a[2] = value
        elif value > a[3]:
          a[3] = value
  return acc


def vital_features(stay_ids: Sequence[str], acc: dict) -> np.ndarray:
  """``[n, 21]`` mean/min/max per vital; a stay without a vital gets that column's median over stays with it.

  Raises:
    DataError: no stay has any measurement of some vital.
  """
  vitals = list(VITAL_ITEMIDS)
  x = np.full((len(stay_ids), len(vitals) * len(VITAL_STATS)), np.nan)
  for i, stay in enumerate(stay_ids):
    for k in range(len(vitals)):
      a = acc.get((stay, k))
      if a is not None:
        x[i, 3 * k:3 * k + 3] = (a[0] / a[1], a[2], a[3])
  for k, vital in enumerate(vitals):
    cols = slice(3 * k, 3 * k + 3)
    present = ~np.isnan(x[:, 3 * k])
    if not present.any():
      raise DataError(f"no ICU stay has a first-24h {vital} measurement (chartevents itemids "
                      f"{list(VITAL_ITEMIDS[vital])}); check icu/chartevents")
    x[~present, cols] = np.median(x[present, cols], axis=0)
  return x


def center_names(careunits: Sequence[str], years: Sequence[int], window_years: int) -> list:
  """``"<first_careunit>|<start>-<end>"`` per stay, windows of ``window_years`` from the smallest year.

  The window start is ``min_year + window_years * floor((year - min_year) / window_years)``.
  """
  min_year = min(years)
  names = []
  for unit, year in zip(careunits, years):
    start = min_year + window_years * ((year - min_year) // window_years)
    names.append(f"{unit}|{start}-{start + window_years - 1}")
  return names


def _one_hot(values: Sequence[str], prefix: str, categories: Sequence[str]) -> tuple:
  """``[n, k]`` indicators of ``values`` over ``categories`` and their ``prefix=value`` names."""
  position = {c: j for j, c in enumerate(categories)}
  x = np.zeros((len(values), len(categories)))
  x[np.arange(len(values)), [position[v] for v in values]] = 1.0
  return x, [f"{prefix}={c}" for c in categories]


def _check_arguments(directory, window_years, min_age, max_age) -> None:
  if not os.path.isdir(directory):
    raise DataError(f"MIMIC-IV directory not found: {directory} (expected hosp/ and icu/ inside)")
  if not isinstance(window_years, (int, np.integer)) or window_years < 1:
    raise DataError(f"window_years must be an integer >= 1, got {window_years!r}")
  if min_age > max_age:
    raise DataError(f"min_age ({min_age}) must not exceed max_age ({max_age})")


def load_mimic_iv(directory: str, window_years: int = 2, min_age: int = 18, max_age: int = 95) -> Cohorts:
  """Loads MIMIC-IV v3.1 ICU stays as in-hospital-mortality cohorts per care unit × year window (SPEC §2.2).

  See the module docstring for the features. Centers are
  ``first_careunit × window`` of the (shifted) intime year, with windows of
  ``window_years`` counted from the smallest intime year among the kept stays;
  e.g. ``"Medical Intensive Care Unit (MICU)|2110-2111"``. Sites are in sorted
  name order, rows within a site in stay_id order.

  Args:
    directory: the MIMIC-IV root (containing ``hosp/`` and ``icu/``).
    window_years: the width of a center's intime-year window.
    min_age, max_age: inclusive age range at ICU admission.

  Returns:
    :class:`Cohorts` with raw features, ``year`` (intime year) and
    ``charlson`` per site.

  Raises:
    DataError: a missing directory, table or column, a non-binary
      ``hospital_expire_flag``, unreadable values, or no stay left.
  """
  directory = str(directory)
  _check_arguments(directory, window_years, min_age, max_age)
  paths = {table: find_table(directory, table) for table in TABLE_COLUMNS}
  patients = read_patients(paths["patients"])
  admissions = read_admissions(paths["admissions"])
  stays = read_icu_stays(paths["icustays"], patients, admissions, min_age, max_age)
  if not stays:
    raise DataError(f"{paths['icustays']}: no ICU stay with a known admission and patient aged "
                    f"{min_age}-{max_age}")
  charlson_by_hadm = read_charlson(paths["diagnoses_icd"], {s["hadm_id"] for s in stays})
  windows = {s["stay_id"]: (_canonical_time(s["intime"]), _canonical_time(s["intime"] + FIRST_DAY))
             for s in stays}
  vitals = vital_features([s["stay_id"] for s in stays], read_first_day_vitals(paths["chartevents"], windows))

  adm = [admissions[s["hadm_id"]] for s in stays]
  blocks = [np.array([[s["age"], s["gender_male"]] for s in stays])]
  names = ["age", "gender_male"]
  continuous = [True, False]
  for field, categories in (("race", RACE_GROUPS),
                            ("admission_type", None), ("admission_location", None), ("insurance", None)):
    values = [a[field] for a in adm]
    block, block_names = _one_hot(values, field, categories or sorted(set(values)))
    blocks.append(block)
    names += block_names
    continuous += [False] * len(block_names)
  zeros = np.zeros(len(CHARLSON_CATEGORIES), np.float32)
  charlson = np.stack([charlson_by_hadm.get(s["hadm_id"], zeros) for s in stays]).astype(np.float32)
  blocks += [charlson, vitals]
  names += [f"charlson_{c}" for c in CHARLSON_CATEGORIES]
  names += [f"{v}_{stat}" for v in VITAL_ITEMIDS for stat in VITAL_STATS]
  continuous += [False] * len(CHARLSON_CATEGORIES) + [True] * vitals.shape[1]
  x = np.concatenate(blocks, axis=1).astype(np.float32)
  y = np.array([a["label"] for a in adm], np.int32)
  years = [s["intime"].year for s in stays]
  centers = np.array(center_names([s["careunit"] for s in stays], years, window_years), dtype=object)

  sites = []
  for name in sorted(set(centers.tolist())):
    rows = centers == name
    sites.append(SiteCohort(name=name, x=x[rows], y=y[rows], year=np.asarray(years, np.float32)[rows],
                            charlson=charlson[rows]))
  cohorts = Cohorts(sites=tuple(sites), feature_names=tuple(names), continuous=np.asarray(continuous, bool),
                    description=(f"MIMIC-IV ({directory}): {len(stays)} ICU stays, {len(sites)} centers "
                                 f"(first_careunit x {window_years}-year intime window), label "
                                 "hospital_expire_flag"))
  validate_cohorts(cohorts)
  return cohorts
