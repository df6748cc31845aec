"""Paper 000 Table 1 report: Markdown layout, Pareto frontier, figures, and the table1 CLI path."""
import json

from fedjax_sim import run
from fedjax_sim.report import pareto_front, plot_figures, table1_markdown


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
  assert "| FedAvg |" in capsys.readouterr().out
  for name in ("summary.json", "table1.md", "ranking.png", "pareto.png"):
    assert (out / name).is_file()
  assert json.loads((out / "summary.json").read_text())["config"]["report"] == "table1"
