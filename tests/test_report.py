"""Paper 000 Table 1 report: Markdown layout, Pareto frontier, figures, and the table1 CLI path."""
import json
import re

from fedjax_sim import run
from fedjax_sim.report import format_ratio, pareto_front, plot_figures, table1_markdown


def fake_summary():
  row = lambda a, b: {"auroc_mean": a, "auroc_std": 0.01, "bandwidth_ratio": b, "rest_fraction": 0.1,
                      "mean_partners": 0.9, "rounds_run": 50, "seeds": [11, 22]}
  return {"methods": {"fedavg": row(0.75, 1.0), "abps_x": row(0.76, 0.09), "abps": row(0.74, 1.5),
                      "local": row(0.59, 0.0), "centralized": row(0.83, None)}}


def test_pareto_front():
  pts = [(1.0, 0.75), (0.09, 0.76), (1.5, 0.74), (0.5, 0.70)]
  assert pareto_front(pts) == [1]
  assert pareto_front([(1.0, 0.8), (0.1, 0.7)]) == [1, 0]


def test_table1_markdown_and_figures(tmp_path):
  md = table1_markdown(fake_summary())
  lines = md.splitlines()
  assert lines[2].startswith("| Local-only | 0.590 ± 0.010")
  assert "| ABPS-X | 0.760 ± 0.010 | 0.09× |" in md and "| 0.758 | 0.09× |" in md
  assert md.index("FedAvg") < md.index("ABPS (κ=3)") < md.index("ABPS-X") < md.index("Centralized")
  paths = plot_figures(fake_summary(), tmp_path)
  assert [p.name for p in paths] == ["ranking.png", "pareto.png"]
  assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_table1_cli_writes_report(tmp_path, capsys):
  out = tmp_path / "t1"
  args = ["table1", "--out", str(out), "--set", "methods=local,fedavg", "--set", "data.num_centers=8",
          "--set", "data.total_stays=1600", "--set", "learner.hidden=8", "--rounds", "1", "--seeds", "1", "--quiet"]
  assert run.main(args) == 0
  printed = capsys.readouterr().out
  assert "| FedAvg |" in printed
  for name in ("summary.json", "table1.md", "ranking.png", "pareto.png"):
    assert (out / name).is_file()
  summary = json.loads((out / "summary.json").read_text())
  assert summary["config"]["report"] == "table1" and summary["schema_version"] == 3
  fedavg = summary["methods"]["fedavg"]
  assert fedavg["auroc_std"] is None and "ddof=1" in fedavg["std"]  # one seed: no sample std
  assert f"Centers scored: {fedavg['centers_scored']} of {summary['federation']['clients']}" in printed
  assert "| FedAvg | " in printed and " ± — |" in printed


def test_format_ratio_significant_digits():
  assert [format_ratio(v) for v in (None, float("nan"), 0.0, 0.0022, 0.00223456, 0.09, 0.0912, 0.1, 1.5, 2.0)] == \
      ["—", "—", "0×", "0.0022×", "0.00223×", "0.09×", "0.0912×", "0.10×", "1.50×", "2.00×"]
  assert format_ratio(1.23e-5) == "0.0000123×"  # no exponent


def test_table1_markdown_valid_with_one_seed_and_scored_note(tmp_path):
  summary = fake_summary()
  for m in summary["methods"].values():
    m.update(auroc_std=None, centers_scored=29, median_test_rows=6.0)
  summary["methods"]["abps_x"]["bandwidth_ratio"] = 0.0022
  summary["federation"] = {"clients": 30}
  md = table1_markdown(summary)
  rows = [line for line in md.splitlines() if line.startswith("|")]
  pipes = [len(re.findall(r"(?<!\\)\|", line)) for line in rows]
  assert len(rows) == 2 + 5 and set(pipes) == {9}, rows
  assert "| ABPS-X | 0.760 ± — | 0.0022× |" in md and "| Local-only | 0.590 ± — | 0× |" in md
  assert "sample std (ddof = 1)" in md
  assert "Centers scored: 29 of 30 (a one-class test split has no AUROC); median test split of the scored " \
         "centers 6 rows." in md
  assert [p.name for p in plot_figures(summary, tmp_path)] == ["ranking.png", "pareto.png"]  # null std: no error bar


def test_table1_markdown_shows_the_papers_p2p_bandwidth_and_why_ours_differs():
  """Issue 9, item 15: the paper prints 1.00× for DeceFL, DeFTA and WPFed (and 0.00× for Local-only)."""
  summary = fake_summary()
  entry = dict(next(iter(summary["methods"].values())))
  summary["methods"] = {"local": {**entry, "bandwidth_ratio": 0.0}, "wpfed": {**entry, "bandwidth_ratio": 2.5}}
  md = table1_markdown(summary)
  wpfed = next(line for line in md.splitlines() if line.startswith("| WPFed |"))
  local = next(line for line in md.splitlines() if line.startswith("| Local-only |"))
  assert "| 2.50× |" in wpfed and wpfed.endswith("| 0.694 | 1.00× |"), wpfed
  assert local.endswith("| 0.587 | 0× |"), local
  assert "The paper prints 1.00× for WPFed; SPEC §3.4 counts" in md
  del summary["methods"]["wpfed"]
  assert "The paper prints" not in table1_markdown(summary)  # the note only where such a row is shown


def test_a_faulted_row_is_named_in_the_report_and_dropped_by_a_merge_that_holds_it(tmp_path, monkeypatch):
  """A method lost to a numerical fault is named under the report's table; merging in a run that holds that method
  clears the fault, and one that does not keeps it."""
  from fedjax_sim import outputs, report
  from fedjax_sim.algorithms import registry
  monkeypatch.setattr(registry, "reports", lambda: {"fake": lambda s, p, d: ("| table |", [])})
  base = {"config": {"seeds": [1]}, "federation": {"clients": 3, "train_rows": 9}, "methods": {"a": {"x": 1}}}
  lost = dict(base, faults={"b": "non-finite loss or parameter in round 2 of method b (seed 1)",
                            "c": "non-finite loss or parameter in round 5 of method c (seed 1)"})
  written = outputs.write_report(tmp_path, "fake", lost, {})
  text = (tmp_path / "fake.md").read_text()
  assert written == ["fake.md"] and text.startswith("| table |")
  assert "stopped by a numerical fault" in text and "- b: non-finite loss or parameter in round 2" in text
  held = dict(base, methods={"b": {"x": 2}})
  summary, per_seed = report.merge_outputs([(lost, {"a": []}), (held, {"b": []})])
  assert list(summary["methods"]) == ["a", "b"] and list(summary["faults"]) == ["c"]
  summary, _ = report.merge_outputs([(held, {"b": []}), (dict(base, methods={}, faults={"b": "x"}), {})])
  assert "faults" not in summary and list(summary["methods"]) == ["b"]
  outputs.write_report(tmp_path, "fake", base, {})
  assert "numerical fault" not in (tmp_path / "fake.md").read_text()
