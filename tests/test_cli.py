"""The command line: a tiny end-to-end run with the documented summary.json, and bad input."""
import csv
import json

import numpy as np
import pytest

from fedjax_sim import run

TINY = ["--set", "data.num_centers=8", "--set", "data.total_stays=1600", "--set", "learner.hidden=16,8",
        "--rounds", "2", "--seeds", "1,2", "--quiet"]


def test_end_to_end_summary_schema(tmp_path, capsys):
  out = tmp_path / "out"
  assert run.main(["fedavg", "--out", str(out)] + TINY) == 0
  table = capsys.readouterr().out
  assert "| fedavg |" in table
  summary = json.loads((out / "summary.json").read_text())
  assert summary["experiment"] == "fedavg"
  assert set(summary) >= {"experiment", "config", "timing", "methods"}
  assert set(summary["timing"]) == {"compile_s", "run_s", "wall_s"}
  m = summary["methods"]["fedavg"]
  assert set(m) >= {"seeds", "auroc_mean", "auroc_std", "bandwidth_ratio", "bytes", "rest_fraction",
                    "rounds_run", "per_seed", "bandwidth_reference"}
  assert m["seeds"] == [1, 2] and len(m["per_seed"]) == 2 and m["rounds_run"] == 2
  # Full-participation fp32 FedAvg over R_ref = rounds is the reference: ratio 1.
  assert m["bandwidth_ratio"] == pytest.approx(1.0)
  assert m["bandwidth_reference"]["rounds"] == 2
  assert 0.0 <= m["auroc_mean"] <= 1.0
  seed = json.loads((out / "fedavg" / "seed_2.json").read_text())
  assert len(seed["val_auroc_curve"]) == 2 and len(seed["test_auroc_per_center"]) == summary["federation"]["clients"]


def test_progress_lines_in_a_log(tmp_path, capsys):
  """``--progress`` with stderr not a terminal (pytest's capture): plain log lines, the last at the final round,
  naming the task's metric; the results are those of the run without it (the callback changes no number)."""
  tiny = [a for a in TINY if a != "--quiet"]
  assert run.main(["fedavg", "--out", str(tmp_path / "a"), "--progress"] + tiny) == 0
  lines = [line for line in capsys.readouterr().err.splitlines() if "] fedavg: round " in line]
  assert lines and lines[-1].startswith("[fedjax_sim] fedavg: round 2/2, ") and "val AUROC 0." in lines[-1]
  assert "left" not in lines[-1] and "s/round" in lines[-1]
  assert run.main(["fedavg", "--out", str(tmp_path / "b")] + tiny) == 0
  assert "round 2/2" not in capsys.readouterr().err  # no terminal, no --progress: no display
  for out in ("a", "b"):
    assert (tmp_path / out / "fedavg" / "seed_2.json").exists()
  assert ((tmp_path / "a" / "fedavg" / "seed_2.json").read_text() ==
          (tmp_path / "b" / "fedavg" / "seed_2.json").read_text())


def test_csv_source_runs_local(tmp_path, capsys):
  rng = np.random.default_rng(0)
  path = tmp_path / "sites.csv"
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["hospital", "age", "sex", "lab", "died"])
    for site, n in (("A", 80), ("B", 60), ("C", 10)):
      for _ in range(n):
        age, lab = rng.normal(60, 10), rng.normal()
        w.writerow([site, f"{age:.1f}", rng.choice(["F", "M"]), f"{lab:.3f}", int(lab + rng.normal() > 1)])
  out = tmp_path / "out"
  args = ["local", "--out", str(out), "--set", "data.source=csv", "--set", f"data.path={path}",
          "--set", "data.site_column=hospital", "--set", "data.label_column=died",
          "--set", "data.categorical_columns=sex", "--set", "learner.hidden=8", "--rounds", "1", "--seeds", "3"]
  assert run.main(args) == 0
  summary = json.loads((out / "summary.json").read_text())
  assert summary["federation"]["clients"] == 2  # site C (10 rows) dropped with a warning
  assert summary["methods"]["local"]["bandwidth_ratio"] == 0.0
  # One seed: no sample std to report, in the log line as in summary.json (not "± nan").
  assert summary["methods"]["local"]["auroc_std"] is None
  log = capsys.readouterr().err
  assert "[fedjax_sim] local: AUROC " in log and " (one seed); 1 seeds in one compiled call" in log and "nan" not in log


@pytest.mark.parametrize("args, message", [
    (["fedavgg"], "unknown experiment 'fedavgg'. Did you mean fedavg"),
    (["fedavg", "--set", "learner.lerning_rate=0.1"], "unknown config key 'learner.lerning_rate'. Did you mean learner.learning_rate"),
    (["fedavg", "--set", "learner.batch_size=0"], "learner.batch_size must be a positive integer"),
    (["fedavg", "--set", "learner.learning_rate=-0.1"], "learner.learning_rate must be positive"),
    (["fedavg", "--rounds", "0"], "rounds must be a positive integer"),
    (["fedavg", "--rounds", "abc"], "rounds: expected an integer, got 'abc'"),
    (["fedavg", "--set", "rounds"], "--set expects KEY=VALUE"),
    (["fedavg", "--compile-workers", "-1"], "--compile-workers must be a non-negative integer, got '-1'"),
    (["fedavg", "--quiet", "--progress"], "--quiet prints no progress; drop --quiet or --progress"),
    (["fedavg", "--set", "methods=fedavg,bogus"], "unknown method 'bogus'. Choose from: abps, abps_p, "),
    (["ipfl_compare", "--set", "methods=ipfl_fedavg_shufle"],
     "unknown method 'ipfl_fedavg_shufle'. Did you mean ipfl_fedavg_shuffle"),
    (["fedavg", "--set", "data.source=parquet"], "data.source must be one of synthetic, mimic, csv"),
    (["fedavg", "--set", "data.source=csv"], "data.path must be set for data.source = csv"),
    (["fedavg", "--set", "data.source=csv", "--set", "data.path=/nonexistent/x.csv",
      "--set", "data.site_column=s", "--set", "data.label_column=y"], "/nonexistent/x.csv"),
    (["fedavg", "--set", "data.source=mimic", "--set", "data.path=/nonexistent/mimic"], "/nonexistent/mimic"),
])
def test_bad_input_one_message_exit_2_no_output(tmp_path, capsys, args, message):
  out = tmp_path / "out"
  assert run.main(args + ["--out", str(out)]) == 2
  err = capsys.readouterr().err
  errors = [line for line in err.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and message in errors[0], err
  assert not (out / "summary.json").exists()


def test_bad_csv_columns_and_labels(tmp_path, capsys):
  path = tmp_path / "t.csv"
  path.write_text("site,x,label\nA,1.0,0\nA,2.0,2\n")
  base = ["fedavg", "--quiet", "--out", str(tmp_path / "o"), "--set", "data.source=csv", "--set", f"data.path={path}",
          "--set", "data.site_column=site"]

  def error_line():
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    return errors[0]

  assert run.main(base + ["--set", "data.label_column=died"]) == 2
  assert error_line().startswith(f"error: {path}: column 'died' not found; available columns: 'site', 'x', 'label'")
  assert run.main(base + ["--set", "data.label_column=label"]) == 2
  line = error_line()
  assert line.startswith(f"error: {path}: the label column 'label' must be binary") and "'2'" in line
  path.write_text("site,x,label\nA,nan,0\nA,2.0,1\n")
  assert run.main(base + ["--set", "data.label_column=label"]) == 2
  line = error_line()  # names the column with the missing value, and where it is
  assert line.startswith(f"error: {path}: column 'x' has 1 missing value") and "row 1 (line 2)" in line, line
  assert not (tmp_path / "o").exists()
