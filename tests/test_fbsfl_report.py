"""Paper 002's tables and figures (fedjax_sim/algorithms/fbsfl/report.py) from hand-made run outputs: each number
against its definition (C_tot with FedAvg = 100, the claims' comparisons, A* and the matched round of Table 6,
the payment index), the PNGs written, and ``python -m fedjax_sim.report`` re-rendering a finished run's folder with
one ``error:`` line on bad input. No simulation runs here: the records are built by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_sim import report as core_report
from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.fbsfl import report as R
from fedjax_sim.config import apply_overrides, load_experiment
from fedjax_sim.errors import ConfigError
from fedjax_sim.outputs import write_outputs
from tests.conftest import load_benchmark

ROUNDS, N = 6, 4


def record(seed, acc, worst, jain, kl, c_tot, accepted, **extra):
  """One seed's record: the scalar entries and the curves the report reads (accepted: A(t) per round)."""
  accepted = np.asarray(accepted, np.float64)
  return {"seed": seed, "accuracy": acc, "accuracy_worst": worst, "accuracy_client_std": 0.1,
          "participation_jain": jain, "participation_kl_uniform": kl, "participation_gini": 1 - jain,
          "participation_lorenz": [0.0, 0.1, 0.3, 0.6, 1.0], "c_tot": c_tot,
          "included_mean": 9.5 + seed, "included_over_k": 0.4, "included_p95": 14.0, "included_max": 16.0 + seed,
          "br_disagreement": 0.1, "belief_mae": 0.2, "eps_br": 0.05,
          "accepted_curve": list(accepted), "jain_curve": list(np.linspace(0.5, jain, ROUNDS)),
          "kl_curve": list(np.linspace(1.0, kl, ROUNDS)), "c_tot_curve": list(np.linspace(0, c_tot, ROUNDS)),
          "val_accuracy_curve": list(np.linspace(0.1, acc, ROUNDS)),
          "val_accuracy_clients": [[0.1 * (t + 1) + 0.01 * i for i in range(N)] for t in range(ROUNDS)], **extra}


def run_outputs():
  """Two seeds of fbsfl, fbsfl_fedavg, fbsfl_oort, fbsfl_qffl, fbsfl_ditto and fbsfl_dependent (per-seed records
  with curves, the summary's entries without the validation curves, as summarize writes them)."""
  rows = {  # name: (acc, worst, jain, kl, c_tot, A(t) of seed 0)
      "fbsfl": (0.70, 0.40, 0.93, 0.07, 96.0, [2, 5, 9, 14, 18, 22]),
      "fbsfl_fedavg": (0.71, 0.35, 0.83, 0.19, 50.0, [1, 3, 6, 9, 12, 15]),
      "fbsfl_oort": (0.72, 0.36, 0.74, 0.31, 51.0, [2, 4, 7, 10, 13, 16]),
      "fbsfl_qffl": (0.69, 0.38, 0.82, 0.20, 50.0, [1, 3, 6, 9, 12, 15]),
      "fbsfl_ditto": (0.75, 0.30, 0.88, 0.15, 50.0, [1, 3, 6, 9, 12, 15]),
      "fbsfl_dependent": (0.70, 0.41, 0.92, 0.08, 90.0, [3, 6, 10, 14, 18, 20]),
  }
  per_seed, methods = {}, {}
  for name, (acc, worst, jain, kl, c_tot, accepted) in rows.items():
    recs = [record(0, acc, worst, jain, kl, c_tot, accepted),
            record(1, acc + 0.02, worst, jain, kl, c_tot * 1.5, np.asarray(accepted) + 1)]
    per_seed[name] = recs
    methods[name] = {"accuracy_mean": acc + 0.01, "accuracy_std": 0.014, "per_seed": [
        {k: v for k, v in r.items() if k not in ("val_accuracy_curve", "val_accuracy_clients")} for r in recs]}
  config = {"seeds": [0, 1], "rounds": ROUNDS, "data": {"source": "fashion_mnist", "partition": "dirichlet"},
            "participation": {"clients_per_round": 2}, "fbsfl": {"rounding": "independent"}, "overrides": [],
            "report": "fbsfl_table2"}
  summary = {"metric": "accuracy", "config": config, "federation": {"clients": N}, "methods": methods}
  return summary, per_seed


def table_rows(text: str) -> dict:
  """Markdown table rows keyed by their first cell → the list of cells; a label in several tables keeps its first
  (a report's expenditure table, last, repeats the labels of Tables 2–6)."""
  out = {}
  for line in text.splitlines():
    if line.startswith("| ") and not line.startswith("| ---"):
      cells = [c.strip() for c in line.strip("|").split(" | ")]
      out.setdefault(cells[0], cells)
  return out


def test_table2_normalizes_c_tot_to_fedavg_and_prints_percent_beside_the_paper():
  summary, _ = run_outputs()
  rows = table_rows(R.table2_markdown(summary))
  assert rows["FedAvg"][6] == "100.0 ± 0.0"  # each seed over the same seed's FedAvg C_tot
  assert rows["FBS-FL–EXP3"][6] == "192.0 ± 0.0"  # 96 / 50 and 144 / 75
  assert rows["Oort"][6] == f"{102.0:.1f} ± 0.0"
  assert rows["FBS-FL–EXP3"][1] == f"{71.0:.1f} ± {np.std([70.0, 72.0], ddof=1):.1f}"  # percent, ± over seeds
  assert rows["FBS-FL–EXP3"][4] == "0.93 ± 0.00" and rows["FBS-FL–EXP3"][7:] == [
      "73.7", "53.4", "9.8", "0.92", "0.08", "96.3"]  # the paper's CIFAR-10 row beside
  assert "FedProx" not in rows  # a row the run lacks is left out


def test_expenditure_splits_c_tot_per_accepted_update_into_the_bonus_and_the_rest():
  summary, _ = run_outputs()
  for name, recs in (("fbsfl", ((100.0, 40.0, 80.0), (150.0, 90.0, 100.0))),
                     ("fbsfl_fedavg", ((52.0, 0.0, 100.0), (26.0, 0.0, 50.0)))):
    for rec, (c_tot, bonus, accepted) in zip(summary["methods"][name]["per_seed"], recs):
      rec.update(c_tot=c_tot, c_tot_bonus=bonus, accepted_updates=accepted)
  text = R.expenditure_markdown(summary)
  rows = table_rows(text)
  fbsfl = rows["FBS-FL–EXP3"]
  assert fbsfl[1] == f"125.0 ± {np.std([100, 150], ddof=1):.1f}" and fbsfl[2] == "90 ± 14"
  assert fbsfl[3] == f"1.375 ± {np.std([1.25, 1.5], ddof=1):.3f}"  # C_tot / A(T) per seed: 100/80, 150/100
  assert fbsfl[4] == f"0.700 ± {np.std([0.5, 0.9], ddof=1):.3f}"  # bonus / A(T): 40/80, 90/100
  assert fbsfl[5] == f"50.0 ± {np.std([40.0, 60.0], ddof=1):.1f}"  # bonus share: 40/100, 90/150
  assert rows["FedAvg"][3] == "0.520 ± 0.000" and rows["FedAvg"][5] == "0.0 ± 0.0"  # the flat fee, no bonus
  assert rows["Oort"][1] == f"63.8 ± {np.std([51.0, 76.5], ddof=1):.1f}"  # records without c_tot_bonus or A(T)
  assert rows["Oort"][2:] == ["—", "—", "—", "—"]  # (older outputs) keep their C_tot and leave the rest blank


@pytest.mark.parametrize("source, dataset", [("shakespeare", "Shakespeare"), ("leaf_femnist", "FEMNIST"),
                                             ("fashion_mnist", "CIFAR-10")])
def test_the_papers_columns_are_the_runs_datasets_block(source, dataset):
  summary, _ = run_outputs()
  summary["config"]["data"]["source"] = source
  t2, t4 = table_rows(R.table2_markdown(summary)), table_rows(R.table4_markdown(summary))
  want = {"Shakespeare": ["51.3", "37.0", "8.1", "0.91", "0.09", "96.8"],  # paper 002 Table 2, FBS-FL–EXP3 rows
          "FEMNIST": ["83.6", "67.5", "7.0", "0.93", "0.07", "97.4"],
          "CIFAR-10": ["73.7", "53.4", "9.8", "0.92", "0.08", "96.3"]}[dataset]
  assert t2["FBS-FL–EXP3"][7:] == want
  assert t2["Oort"][7:][:2] == {"Shakespeare": ["51.4", "34.2"], "FEMNIST": ["83.8", "63.1"],
                                "CIFAR-10": ["73.5", "45.3"]}[dataset]
  assert t4["Independent Bernoulli"][8:10] == {"Shakespeare": ["9.7", "0.37"], "FEMNIST": ["9.6", "0.36"],
                                               "CIFAR-10": ["9.7", "0.38"]}[dataset]
  # the paper's dependent-rounding row is CIFAR-10's only
  assert (t4["Dependent rounding"][8:] == ["9.7", "0.00", "10", "10", "73.7", "0.92"]) == (dataset == "CIFAR-10")
  assert f"The paper's columns are its {dataset} rows" in R._seeds_note(summary)


def test_claims_are_the_issues_targets_compared_on_the_rows():
  summary, _ = run_outputs()
  claims = {text: ok for text, ok, _ in R.table2_claims(summary)}
  assert claims["FBS-FL–EXP3 Jain ≥ 0.90"] is True and claims["FBS-FL–EXP3 KL ≤ 0.10"] is True
  assert claims["the best baseline's Jain ≤ 0.86"] is False  # Ditto's 0.88
  assert claims["FBS-FL–EXP3 mean accuracy within 2 points of FedAvg's"] is True  # 71 vs 72
  assert claims["FBS-FL–EXP3 worst-client accuracy above FedAvg's"] is True  # 40 vs 35
  assert claims["Oort is the least fair row (lowest Jain)"] is True
  assert claims["FBS-FL–EXP3 is the fairest row (highest Jain)"] is True
  assert claims["q-FFL (q = 2) has a better worst client than FedAvg"] is True  # 38 vs 35
  assert claims["Ditto has a better worst client than FedAvg"] is False  # 30 vs 35
  numbers = {text: n for text, _, n in R.table2_claims(summary)}  # the two extremes, each row named once
  assert numbers["Oort is the least fair row (lowest Jain)"] == "lowest: Oort 0.740, then q-FFL (q = 2) 0.820"
  assert numbers["FBS-FL–EXP3 is the fairest row (highest Jain)"] == "highest: FBS-FL–EXP3 0.930, then Ditto 0.880"
  summary["methods"]["fbsfl_fedavg"] = summary["methods"]["fbsfl_ditto"]  # a tie: both rows are named
  numbers = {text: n for text, _, n in R.table2_claims(summary)}
  assert numbers["FBS-FL–EXP3 is the fairest row (highest Jain)"] == (
      "highest: FBS-FL–EXP3 0.930, then FedAvg, Ditto 0.880")
  del summary["methods"]["fbsfl_oort"]
  assert {t: ok for t, ok, _ in R.table2_claims(summary)}["Oort is the least fair row (lowest Jain)"] is None


def test_matched_checkpoint_is_the_first_round_reaching_the_smallest_final_count():
  summary, per_seed = run_outputs()
  names = ["fbsfl_fedavg", "fbsfl_oort", "fbsfl_dependent"]
  match = R.matched_checkpoints(summary, per_seed, names)
  # seed 0: A* = min(15, 16, 20) = 15; FedAvg reaches it at round 6, Oort (13, 16) at 6, dependent (14, 18) at 5
  np.testing.assert_array_equal(match["fbsfl_fedavg"]["round"], [6, 6])
  np.testing.assert_array_equal(match["fbsfl_dependent"]["round"], [5, 5])
  np.testing.assert_allclose(match["fbsfl_dependent"]["ratio"], [20 / 15, 21 / 16])
  t = 4  # round 5, 0-based
  rec = per_seed["fbsfl_dependent"][0]
  assert match["fbsfl_dependent"]["jain"][0] == rec["jain_curve"][t]
  assert match["fbsfl_dependent"]["mean"][0] == rec["val_accuracy_curve"][t]
  clients = np.asarray(rec["val_accuracy_clients"][t])
  assert match["fbsfl_dependent"]["worst"][0] == pytest.approx(clients.min())
  assert match["fbsfl_dependent"]["std"][0] == pytest.approx(clients.std())
  rows = table_rows(R.table6_markdown(summary, per_seed))
  assert rows["FBS-FL–EXP3, strict cap"][2] == "5 ± 0"


def test_fairness_every_10_rounds_reads_the_curves_at_the_checkpoints():
  summary, _ = run_outputs()
  rows = R.checkpoints_markdown(summary, every=4).splitlines()
  assert rows[0] == "| Method | quantity | t = 4 | t = 6 |"  # every 4 rounds and the last (R = 6)
  jain = [r for r in rows if r.startswith("| FBS-FL–EXP3 | Jain |")][0]
  want = np.linspace(0.5, 0.93, ROUNDS)  # both seeds' curve
  assert jain == f"| FBS-FL–EXP3 | Jain | {want[3]:.2f} | {want[5]:.2f} |"


def test_table5_payment_index_and_table4_sampling_follow_the_presets():
  summary, per_seed = run_outputs()
  rows = table_rows(R.table4_markdown(summary))
  assert rows["Independent Bernoulli"][1] == "independent" and rows["Dependent rounding"][1] == "dependent"
  assert rows["Dependent rounding"][5] == "17"  # the largest max over seeds
  summary["methods"]["fbsfl_q0"] = summary["methods"]["fbsfl_ditto"]
  rows = table_rows(R.table5_markdown(summary))
  assert rows["q = 0"][6] == f"{50 / 96:.2f} ± 0.00"  # paired: 50 / 96 and 75 / 144
  assert rows["Full (q = 2, β = 1)"][6] == "1.00 ± 0.00"
  assert R.effective_setting(summary, "fbsfl_dependent", "fbsfl.rounding") == "dependent"
  summary["config"]["overrides"] = [["fbsfl.rounding", "dependent"]]  # a user's --set wins over the preset
  assert R.effective_setting(summary, "fbsfl", "fbsfl.rounding") == "dependent"


def test_reports_are_declared_and_the_config_accepts_only_declared_names():
  assert {"table1", "fbsfl_table2", "fbsfl_ablations"} <= set(registry.reports())
  config = load_experiment("fbsfl_table2")
  assert config.report == "fbsfl_table2" and load_experiment("fbsfl_ablations").report == "fbsfl_ablations"
  with pytest.raises(ConfigError, match="fbsfl_table2"):
    apply_overrides(config, {"report": "table9"})


def test_outputs_and_the_rerender_cli(tmp_path, capsys):
  summary, per_seed = run_outputs()
  out = tmp_path / "run"
  write_outputs(out, summary, per_seed, "fbsfl_table2")
  for name in ("fbsfl_table2.md", "fig1_accuracy.png", "fig2_lorenz.png", "summary.json"):
    assert (out / name).is_file(), name
  assert (out / "fig1_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  # re-render another report from the written folder: the per-seed files supply the validation curves
  assert core_report.main([str(out), "--report", "fbsfl_ablations"]) == 0
  text = capsys.readouterr().out
  assert "Paper 002 Table 6" in text and (out / "fig3_ablations.png").is_file()
  assert "5 ± 0" in table_rows(text)["FBS-FL–EXP3, strict cap"][2]
  assert json.loads((out / "summary.json").read_text())["config"]["report"] == "fbsfl_table2"
  assert core_report.main([str(out)]) == 0  # the run's own report by default
  capsys.readouterr()
  assert core_report.main([str(tmp_path / "missing")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and "summary.json" in err[0]
  assert core_report.main([str(out), "--report", "table9"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error:") and "fbsfl_ablations" in err and "table1" in err


def test_rerender_merges_runs_of_one_federation(tmp_path, capsys):
  summary, per_seed = run_outputs()
  table2 = {n: summary["methods"][n] for n in ("fbsfl", "fbsfl_fedavg", "fbsfl_oort", "fbsfl_qffl", "fbsfl_ditto")}
  first = dict(summary, methods=table2)
  second = dict(summary, methods={"fbsfl_dependent": summary["methods"]["fbsfl_dependent"],
                                  "fbsfl": summary["methods"]["fbsfl_ditto"]})  # fbsfl again: the first run's wins
  write_outputs(tmp_path / "a", first, {n: per_seed[n] for n in table2}, "")
  write_outputs(tmp_path / "b", second, {"fbsfl_dependent": per_seed["fbsfl_dependent"],
                                         "fbsfl": per_seed["fbsfl_ditto"]}, "")
  assert core_report.main([str(tmp_path / "a"), str(tmp_path / "b"), "--report", "fbsfl_ablations",
                           "--into", str(tmp_path / "m")]) == 0
  rows = table_rows(capsys.readouterr().out)
  assert rows["FBS-FL–EXP3, strict cap"][2] == "5 ± 0" and (tmp_path / "m" / "fbsfl_ablations.md").is_file()
  assert rows["FBS-FL–EXP3"][4] == "71.0 ± 1.4"  # Table 3's EXP3 row: the first run's fbsfl (70 %, 72 %), not Ditto's 76
  other = dict(summary, config=dict(summary["config"], seeds=[7, 8]))
  write_outputs(tmp_path / "c", other, per_seed, "")
  assert core_report.main([str(tmp_path / "a"), str(tmp_path / "c"), "--report", "fbsfl_table2"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and "seeds" in err[0]


def test_single_class_script_reads_rounds_where_the_model_predicts_one_class(tmp_path, capsys):
  """benchmarks/single_class.py (docs/FBSFL.md §2d): r_c is the validation metric of the constant-c model (mean
  over clients with validation rows of c's share), checked against a loop; a curve is read round by round, and
  main() rebuilds the federation from a run's summary.json (a fabricated Fashion-MNIST, no real files)."""
  import dataclasses
  from fedjax_sim.build import build_federation
  from fedjax_sim.config import load_experiment
  from tests.test_sources import fake_fashion_mnist
  script = load_benchmark("single_class")

  y = np.array([[0, 1, 1, 2], [2, 2, 0, 0], [1, 1, 1, 1]])
  m = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])  # client 2 has no validation rows
  want = [np.mean([np.mean(y[i][m[i] == 1] == c) for i in (0, 1)]) for c in range(3)]
  np.testing.assert_allclose(script.single_class_rates(y, m, 3), want)
  rates = np.array([0.1, 0.2, 0.3])
  row = script.single_class_rounds(np.array([0.1, 0.3, 0.3, 0.55, 0.2, 0.1003]), rates, 5e-4)
  assert row == {"rounds": 6, "single_class_rounds": 5, "classes_visited": [0, 1, 2], "switches": 2, "best": 0.55}

  (tmp_path / "fm").mkdir()
  fake_fashion_mnist(tmp_path / "fm", n_train=400, n_test=50)
  config = load_experiment("fbsfl", {"data.path": str(tmp_path / "fm"), "data.num_clients": "4",
                                     "data.dirichlet_alpha": "1.0", "methods": "fbsfl", "seeds": "3"})
  fed = build_federation(config, warn=lambda m: None)
  r = script.single_class_rates(fed.y_val, fed.m_val, 10)
  run = tmp_path / "run"
  (run / "fbsfl").mkdir(parents=True)
  (run / "summary.json").write_text(json.dumps({"experiment": "fbsfl", "config": dataclasses.asdict(config),
                                                "methods": {"fbsfl": {}}}))
  (run / "fbsfl" / "seed_3.json").write_text(json.dumps({"val_accuracy_curve": [r[4], r[4], 0.99]}))
  assert script.main([str(run), "--json", str(tmp_path / "o.json")]) == 0
  got = json.loads((tmp_path / "o.json").read_text())[f"{run}/fbsfl/3"]
  assert got["single_class_rounds"] == 2 and 4 in got["classes_visited"] and got["switches"] == 0
  assert "2/3 single-class rounds" in capsys.readouterr().out
