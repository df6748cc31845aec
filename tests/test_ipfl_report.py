"""Paper 003's tables and figures (fedjax_sim/algorithms/ipfl/report.py) from hand-made run outputs: the claims'
comparisons against their definitions, the tables' rows, the PNGs written, and the reports reachable through the
registry. No simulation runs here: the records are built by hand."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.ipfl import report as R

C = 4


def rec(seed, acc, util, min_u=0.0, attacker=np.nan, liar=np.nan):
  return {"seed": seed, "best_accuracy": acc, "accuracy": acc - 0.1 * seed, "accuracy_worst": acc - 0.3,
          "welfare_sum": C * util, "utility_sum": util, "min_round_utility": min_u,
          "attacker_utility": attacker, "liar_utility": liar, "mean_degree": 1.5,
          "utility_clients": [util + i for i in range(C)], "payment_clients": [1.0, -1.0, 2.0, -2.0],
          "purchases": [[0, 3, 0, 1], [2, 0, 0, 0], [0, 0, 0, 4], [1, 0, 0, 0]]}


def summary(rows: dict, **config) -> dict:
  cfg = {"seeds": [1, 2], "rounds": 5, "data": {"source": "fashion_mnist", "partition": "dirichlet"},
         "learner": {"local_steps": 20}, **config}
  return {"config": cfg, "federation": {"clients": C},
          "methods": {name: {"per_seed": [rec(s, *vals) for s in (0, 1)]} for name, vals in rows.items()}}


def test_compare_claims_follow_their_definitions(tmp_path):
  s = summary({"ipfl": (0.80, 10.0, 0.0), "ipfl_fedamp": (0.79, 3.0), "ipfl_fedavg": (0.81, -5.0),
               "ipfl_local": (0.70, 0.0)})
  claims = {text: ok for text, ok, _ in R.compare_claims(s)}
  assert claims["iPFL's average utility is the highest"] is True
  assert claims["iPFL's accuracy is comparable to the best baseline's (within 2 points)"] is True  # 80 vs 81
  assert claims["every honest client's round utility is ≥ 0 under iPFL (Theorem 1)"] is True
  numbers = {text: n for text, _, n in R.compare_claims(s)}
  assert "+233 %" in numbers["utility against FedAMP"]  # (10 − 3) / 3
  text, files = R.compare_report(s, {}, tmp_path)
  # best, final (seeds 0, 1: 80 and 70 %), worst client, utility, min round, purchases, welfare (C · U)
  assert "| iPFL | 80.00 ± 0.00 | 75.00 ± 7.07 | 50.0 ± 0.0 | 10.00 ± 0.00 | 0.000 ± 0.000 | 1.50 ± 0.00 | " \
         "40.0 ± 0.0 |" in text and "| FedAvg | 81.00" in text
  assert sorted(f.name for f in files) == ["fig2_scatter.png", "fig3_utility.png"]
  assert all(f.stat().st_size > 1000 for f in files)
  worse = summary({"ipfl": (0.70, 1.0, -0.5), "ipfl_fedavg": (0.80, 2.0)})
  claims = {text: ok for text, ok, _ in R.compare_claims(worse)}
  assert not any(claims.values())  # lower utility, 10 points behind, a negative round utility
  baselines_only = summary({"ipfl_local": (0.70, 0.0), "ipfl_fedavg": (0.80, 2.0)})
  assert R.compare_claims(baselines_only) == []
  assert R.compare_report(baselines_only, {}, tmp_path)[0].endswith("### Issue 13's targets\n\n(no ipfl row in the run)")


def test_attacks_table_and_claims():
  s = summary({"ipfl": (0.80, 5.0, 0.0, 4.0), "ipfl_shuffle": (0.795, 5.0, 0.0, 1.0),
               "ipfl_gauss": (0.70, 5.0, 0.0, 6.0), "ipfl_fedavg": (0.81, 0.0, 0.0, -3.0)},
              ipfl={"attackers": [3]})
  acc, util, claims = R.attacks_markdown(s)
  ok = {text: v for text, v, _ in claims}
  assert ok["iPFL, shuffle: the attacker's utility falls"] and ok["iPFL, shuffle: benign accuracy holds (within 1 point)"]
  assert not ok["iPFL, Gaussian: the attacker's utility falls"]
  assert not ok["iPFL, Gaussian: benign accuracy holds (within 1 point)"]
  assert "| iPFL | 80.0 ± 0.0 | 79.5 ± 0.0 | — | — | 70.0 ± 0.0 |" in acc
  assert "| FedAvg | 81.0 ± 0.0 | — | — | — | — |" in acc and "| FedAvg | -3.00 ± 0.00 |" in util
  text, _ = R.attacks_report(s, {}, None)
  assert "client(s) [3]" in text
  assert "prices saw" not in text  # no distances recorded: no table


def test_attacks_table_has_a_row_for_an_attacker_that_keeps_its_model():
  s = summary({"ipfl": (0.80, 5.0, 0.0, 4.0), "ipfl_sign_flip": (0.79, 5.0, 0.0, 6.0),
               "ipfl_sign_flip_kept": (0.795, 5.0, 0.0, 2.0)}, ipfl={"attackers": [3]})
  acc, util, claims = R.attacks_markdown(s)
  assert "| iPFL | 80.0 ± 0.0 | — | 79.0 ± 0.0 | — | — |" in acc
  assert "| iPFL, attacker keeps its model | 80.0 ± 0.0 | — | 79.5 ± 0.0 | — | — |" in acc
  assert "| iPFL, attacker keeps its model | 4.00 ± 0.00 | — | 2.00 ± 0.00 | — | — |" in util
  ok = {text: v for text, v, _ in claims}
  assert not ok["iPFL, sign flip: the attacker's utility falls"]
  assert ok["iPFL, sign flip (attacker keeps its model): the attacker's utility falls"]
  assert ok["iPFL, sign flip (attacker keeps its model): benign accuracy holds (within 1 point)"]


def test_attacks_report_shows_what_the_prices_saw():
  s = summary({"ipfl": (0.80, 5.0, 0.0, 4.0), "ipfl_shuffle": (0.795, 5.0, 0.0, 1.0)},
              ipfl={"attackers": [3], "cost": 1.0, "lam": 2.0})
  for name, near, d_a in (("ipfl", 0.30, 0.40), ("ipfl_shuffle", 0.60, 1.00)):
    for r in s["methods"][name]["per_seed"]:
      r.update(nearest_honest_distance=near, attacker_distance=d_a, attacker_cheapest=0.25,
               attacker_bought_when_cheapest=1.0, attacker_bought_otherwise=0.1)
  table = R.prices_markdown(s)
  # purchases' column 3 (sales of client 3) sums to 1 + 4 = 5; d_a − c/λ = d_a − 0.5
  assert "| ipfl | 0.300 ± 0.000 | 0.400 ± 0.000 | -0.100 ± 0.000 | 5.0 ± 0.0 | 25.0 ± 0.0 | 100.0 ± 0.0 / " \
         "10.0 ± 0.0 |" in table
  assert "| ipfl_shuffle | 0.600 ± 0.000 | 1.000 ± 0.000 | 0.500 ± 0.000 | 5.0 ± 0.0 |" in table
  text, _ = R.attacks_report(s, {}, None)
  assert "prices saw" in text and table in text


def test_liars_table_beside_the_paper():
  s = summary({"ipfl": (0.8, 5.0, 0.0, np.nan, 600.0), "ipfl_liar_n01": (0.8, 5.0, 0.0, np.nan, -500.0),
               "ipfl_liar_c5": (0.8, 5.0, 0.0, np.nan, 650.0)}, ipfl={"liar": 0})
  table, claims = R.liars_markdown(s)
  assert "| honest | 600.0 ± 0.0 | 617.3 |" in table and "| N × 0.1 | -500.0 ± 0.0 | -513.4 |" in table
  assert dict((t, ok) for t, ok, _ in claims) == {"honest beats N × 0.1": True, "honest beats c × 5": False}


def test_liars_report_says_which_side_of_the_comparison_is_missing():
  honest_only = summary({"ipfl": (0.8, 5.0, 0.0, np.nan, 600.0)}, ipfl={"liar": 0})
  assert "(no lying row in the run" in R.liars_report(honest_only, {}, None)[0]
  lie_only = summary({"ipfl_liar_n10": (0.8, 5.0, 0.0, np.nan, 0.0)}, ipfl={"liar": 0})
  assert "(no honest ipfl row in the run)" in R.liars_report(lie_only, {}, None)[0]


def test_market_report_draws_the_transaction_graph(tmp_path):
  s = summary({"ipfl_playground": (0.8, 5.0)})
  text, files = R.market_report(s, {}, tmp_path)
  roles = R.market_roles(s, "ipfl_playground", 12)
  assert roles[3] == "trader" and roles[1] == "buyer" and roles[0] == "seller" and roles[11] == "attacker"
  assert "| ipfl_playground | 3 | trader | 8.0 | 2.0 | 5 | 1 |" in text  # sold: column 3 sums to 5
  assert [f.name for f in files] == ["fig5_market.png"] and files[0].stat().st_size > 1000


def test_reports_are_declared_by_the_family():
  for name in ("ipfl_compare", "ipfl_attacks", "ipfl_liars", "ipfl_market"):
    assert registry.reports()[name] is R.REPORTS[name]
  with pytest.raises(KeyError):
    R.REPORTS["ipfl_table9"]
