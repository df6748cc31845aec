"""Paper 002's tables and figures from a run's outputs (issue 12 items 6–7): Tables 2–6 beside the paper's
numbers, and Figures 1–3 as PNG.

Two reports, declared by this package's :class:`~fedjax_sim.algorithms.spec.MethodSpec` (``report = "..."`` in an
experiment config, or ``python -m fedjax_sim.report OUT --report NAME`` on a finished run):

* ``fbsfl_table2``: Table 2 (the seven rows), Table 4 (the inclusion-size diagnostics of every FBS-FL row in the
  run), the claims of issue 12's acceptance checked row by row, Figure 1 (accuracy curves) and Figure 2 (Lorenz
  curves of cumulative participation);
* ``fbsfl_ablations``: Table 3 (followers), Table 4 (independent vs dependent rounding), Table 5 (one component at
  a time), Table 6 (every row at the common accepted-update count A*) and Figure 3 (β trade-off, q vs worst
  client, the followers' MAE_μ and ε_BR).

A report reads what the run wrote (``summary.json``'s entries and the per-seed records with their curves) and
nothing else; a row the run does not hold is left out. Decisions where the paper is silent or our data differ:

* **Percent.** Accuracies print in percent with one decimal, as the paper's tables; Jain, KL and MAE_μ with two.
* **±** is the sample std over seeds (ddof = 1, SPEC §3.1), "—" with one seed.
* **C_tot** is normalized with ``fbsfl_fedavg`` = 100 (Table 2's convention), seed by seed (paired seeds: FedAvg
  is 100 on each); the baselines' entries are the flat fee's imputed charges (paper 002 §4.2), FBS-FL's its
  endogenous payments. Table 5's payment index is C_tot over the full FBS-FL row's, paired the same way.
* **Figure 1 and Table 6 read the validation curve.** The platform scores the test split once, after the last
  round; the per-round curve is the mean validation accuracy of the deployed model (and, where the run recorded
  them, the per-client validation accuracies give Table 6's worst client and σ at the checkpoint).
* **The paper's figures** beside ours are those of the run's dataset where the paper has them (:func:`paper_dataset`:
  Table 2's Shakespeare and FEMNIST blocks and Table 4's Independent Bernoulli rows for Shakespeare and LEAF
  sources), else its CIFAR-10 rows: Fashion-MNIST is the offline stand-in for CIFAR-10 (SPEC §2.2), and the
  columns compare orderings and gaps, not levels. Tables 3, 5 and 6 exist for CIFAR-10 only; the small Shakespeare
  preset (``fbsfl_shakespeare_small``) is not the paper's Shakespeare size, so its levels are not comparable either.
"""
from __future__ import annotations

import math
import pathlib

import numpy as np

from fedjax_sim.report import pyplot as _plt, save_figure as _save  # the reports' shared figure helpers

# (method, label, paper 002 Table 2 CIFAR-10: mean, min, σ (percent), Jain, KL, C_tot)
TABLE2_ROWS = (
    ("fbsfl_fedavg", "FedAvg", (71.2, 42.5, 13.1, 0.83, 0.19, 100.0)),
    ("fbsfl_fedprox", "FedProx", (72.4, 44.8, 12.5, 0.83, 0.19, 100.0)),
    ("fbsfl_qffl", "q-FFL (q = 2)", (70.8, 50.2, 10.8, 0.82, 0.20, 100.0)),
    ("fbsfl_ditto", "Ditto", (72.1, 52.1, 10.1, 0.83, 0.19, 100.0)),
    ("fbsfl_oort", "Oort", (73.5, 45.3, 12.0, 0.74, 0.31, 102.4)),
    ("fbsfl_poc", "Power-of-Choice", (72.9, 46.0, 11.8, 0.79, 0.24, 101.1)),
    ("fbsfl", "FBS-FL–EXP3", (73.7, 53.4, 9.8, 0.92, 0.08, 96.3)),
)
BASELINES = tuple(name for name, _, _ in TABLE2_ROWS if name != "fbsfl")

# paper 002 Table 2's other blocks, in TABLE2_ROWS' order: mean, min, σ (percent), Jain, KL, C_tot
TABLE2_PAPER = {
    "CIFAR-10": tuple(paper for _, _, paper in TABLE2_ROWS),
    "FEMNIST": ((82.4, 61.2, 8.7, 0.86, 0.16, 100.0), (83.0, 62.5, 8.3, 0.86, 0.16, 100.0),
                (82.1, 65.0, 7.4, 0.85, 0.17, 100.0), (83.2, 67.8, 6.9, 0.86, 0.16, 100.0),
                (83.8, 63.1, 8.0, 0.78, 0.27, 102.1), (83.3, 63.6, 7.9, 0.82, 0.21, 101.0),
                (83.6, 67.5, 7.0, 0.93, 0.07, 97.4)),
    "Shakespeare": ((49.8, 32.4, 9.5, 0.81, 0.22, 100.0), (50.5, 33.7, 9.2, 0.81, 0.22, 100.0),
                    (49.5, 36.1, 8.4, 0.80, 0.23, 100.0), (50.7, 37.5, 8.0, 0.81, 0.22, 100.0),
                    (51.4, 34.2, 9.0, 0.74, 0.32, 102.6), (51.0, 34.8, 8.9, 0.78, 0.26, 101.3),
                    (51.3, 37.0, 8.1, 0.91, 0.09, 96.8)),
}
PAPER_DATASET = {"shakespeare": "Shakespeare", "leaf_shakespeare": "Shakespeare", "leaf_femnist": "FEMNIST",
                 "cifar10": "CIFAR-10"}
"""``data.source`` → the paper's dataset whose figures a report prints; any other source (Fashion-MNIST, the
stand-in) compares with CIFAR-10."""

# (method, label, paper 002 Table 3: disagree %, MAE_μ, ε_BR, mean, worst, Jain, KL)
TABLE3_ROWS = (
    ("fbsfl_br", "FBS-FL–BR", (0.0, 0.03, 0.00, 73.9, 53.8, 0.92, 0.08)),
    ("fbsfl_logit", "FBS-FL–Logit", (8.4, 0.05, 0.03, 73.8, 53.6, 0.92, 0.08)),
    ("fbsfl", "FBS-FL–EXP3", (12.7, 0.14, 0.07, 73.7, 53.4, 0.92, 0.08)),
)

# paper 002 Table 4's Independent Bernoulli rows of its other datasets (the paper's dependent-rounding row is
# CIFAR-10's only): mean |I|, Pr(|I| > K), P95, max, mean acc, Jain
TABLE4_INDEPENDENT = {"FEMNIST": (9.6, 0.36, 14, 17, 83.6, 0.93), "Shakespeare": (9.7, 0.37, 14, 16, 51.3, 0.91)}

# (method, label, paper 002 Table 4 CIFAR-10: mean |I|, Pr(|I| > K), P95, max, mean acc, Jain)
TABLE4_ROWS = (
    ("fbsfl", "Independent Bernoulli", (9.7, 0.38, 14, 17, 73.7, 0.92)),
    ("fbsfl_dependent", "Dependent rounding", (9.7, 0.0, 10, 10, 73.7, 0.92)),
    ("fbsfl_br", "Independent Bernoulli, BR followers", None),
    ("fbsfl_logit", "Independent Bernoulli, logit followers", None),
)

# (method, label, paper 002 Table 5: mean, worst, σ, Jain, KL, payment index)
TABLE5_ROWS = (
    ("fbsfl", "Full (q = 2, β = 1)", (73.7, 53.4, 9.8, 0.92, 0.08, 1.00)),
    ("fbsfl_q0", "q = 0", (73.9, 45.1, 12.3, 0.92, 0.08, 1.00)),
    ("fbsfl_q4", "q = 4", (73.2, 54.6, 9.1, 0.92, 0.08, 1.02)),
    ("fbsfl_beta0", "β = 0", (74.0, 52.0, 10.6, 0.78, 0.27, 0.96)),
    ("fbsfl_beta2", "β = 2", (73.3, 53.7, 9.5, 0.94, 0.06, 1.03)),
    ("fbsfl_nobonus", "b_0 = 0", (73.6, 52.8, 10.0, 0.88, 0.13, 0.97)),
    ("fbsfl_frozen", "Belief fixed at μ_0", (73.1, 52.5, 10.3, 0.86, 0.16, 1.01)),
    ("fbsfl_uniform", "Uniform selection instead of PPO", (72.6, 48.5, 11.5, 0.84, 0.18, 0.95)),
)

# (method, label, paper 002 Table 6: A_j(T)/A*, mean, worst, σ, Jain, KL)
TABLE6_ROWS = (
    ("fbsfl_fedavg", "FedAvg", (1.00, 71.2, 42.5, 13.1, 0.83, 0.19)),
    ("fbsfl_fedprox", "FedProx", (1.00, 72.4, 44.8, 12.5, 0.83, 0.19)),
    ("fbsfl_qffl", "q-FFL", (1.00, 70.8, 50.2, 10.8, 0.82, 0.20)),
    ("fbsfl_ditto", "Ditto", (1.00, 72.1, 52.1, 10.1, 0.83, 0.19)),
    ("fbsfl_oort", "Oort", (1.03, 72.8, 44.5, 12.2, 0.74, 0.31)),
    ("fbsfl_poc", "Power-of-Choice", (1.02, 72.4, 45.2, 12.0, 0.79, 0.24)),
    ("fbsfl_dependent", "FBS-FL–EXP3, strict cap", (1.26, 72.9, 52.1, 10.2, 0.91, 0.09)),
)

LABELS = {name: label for rows in (TABLE4_ROWS, TABLE5_ROWS, TABLE6_ROWS, TABLE3_ROWS, TABLE2_ROWS)
          for name, label, _ in rows}
"""A method's label in claims and figure legends: its Table 2 label first, then Table 3's, 6's, 5's, 4's."""


# --- numbers from the outputs -------------------------------------------------------------------------------


def seed_values(summary: dict, method: str, key: str) -> np.ndarray:
  """``[S]`` per-seed values of ``key`` for ``method`` (NaN where a seed lacks it)."""
  recs = summary["methods"][method].get("per_seed", [])
  return np.array([np.nan if r.get(key) is None else float(r[key]) for r in recs], np.float64)


def mean_std(values) -> tuple:
  """(mean, sample std over seeds) of the defined values; std NaN with fewer than two."""
  v = np.asarray(values, np.float64)
  v = v[~np.isnan(v)]
  if v.size == 0:
    return float("nan"), float("nan")
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else float("nan")


def cell(values, scale: float = 1.0, digits: int = 1) -> str:
  """``"73.7 ± 0.8"`` from per-seed values (``"73.7 ± —"`` with one seed, ``"—"`` with none)."""
  m, s = mean_std(np.asarray(values, np.float64) * scale)
  if math.isnan(m):
    return "—"
  return f"{m:.{digits}f} ± " + ("—" if math.isnan(s) else f"{s:.{digits}f}")


def paper_cell(v, digits: int = 1) -> str:
  return "—" if v is None else f"{v:.{digits}f}"


def metric_name(summary: dict) -> str:
  return summary.get("metric", "accuracy")


def effective_setting(summary: dict, method: str, key: str):
  """``key`` (dotted) as method ``method`` ran it: the run's config, its preset, then the user's ``--set``."""
  from fedjax_sim.algorithms.registry import preset
  section, field = key.split(".")
  cfg = summary.get("config", {})
  value = cfg.get(section, {}).get(field)
  value = preset(method).get(key, value) if method in summary["methods"] else value
  return dict(cfg.get("overrides", ())).get(key, value)


def _present(summary: dict, rows) -> list:
  return [(name, label, paper) for name, label, paper in rows if name in summary["methods"]]


def _or_note(lines: list, rows) -> str:
  """The table, or its header and a line naming the methods it needs when the run holds none of them."""
  if len(lines) > 2:
    return "\n".join(lines)
  return "\n".join(lines + ["", f"(none of this table's rows is in the run: {', '.join(n for n, _, _ in rows)})"])


def paired_ratio(summary: dict, name: str, reference: str, key: str = "c_tot"):
  """``[S]`` per-seed ``key`` of ``name`` over the same seed's ``key`` of ``reference`` (paired seeds: the
  reference row is exactly 1 on every seed), or None when the run lacks the reference row."""
  if reference not in summary["methods"]:
    return None
  ref = seed_values(summary, reference, key)
  return seed_values(summary, name, key) / np.where(ref > 0, ref, np.nan)


def paper_dataset(summary: dict) -> str:
  """The paper's dataset whose figures stand beside this run's (:data:`PAPER_DATASET`; CIFAR-10 by default)."""
  return PAPER_DATASET.get(summary.get("config", {}).get("data", {}).get("source"), "CIFAR-10")


def table2_rows(summary: dict) -> tuple:
  """:data:`TABLE2_ROWS` with the paper's figures of :func:`paper_dataset`."""
  block = TABLE2_PAPER[paper_dataset(summary)]
  return tuple((name, label, paper) for (name, label, _), paper in zip(TABLE2_ROWS, block))


def table4_rows(summary: dict) -> tuple:
  """:data:`TABLE4_ROWS` with the paper's figures of :func:`paper_dataset` (None where the paper has no row)."""
  dataset = paper_dataset(summary)
  if dataset == "CIFAR-10":
    return TABLE4_ROWS
  return tuple((name, label, TABLE4_INDEPENDENT[dataset] if name == "fbsfl" else None)
               for name, label, _ in TABLE4_ROWS)


def _seeds_note(summary: dict, tables: str = "") -> str:
  cfg = summary.get("config", {})
  seeds = cfg.get("seeds", [])
  data = cfg.get("data", {})
  return (f"Seeds {', '.join(map(str, seeds))} ({len(seeds)}); ± is the sample std over seeds (— with one seed); "
          f"{cfg.get('rounds', '?')} rounds, N = {summary.get('federation', {}).get('clients', '?')}, "
          f"K = {cfg.get('participation', {}).get('clients_per_round', '?')}, data.source = "
          f"{data.get('source', '?')} (partition {data.get('partition', '?')}). The paper's columns are its "
          f"{paper_dataset(summary)} rows{tables} (module docstring: compare orderings and gaps, not levels).")


# --- Table 2 and the claims ---------------------------------------------------------------------------------


def table2_markdown(summary: dict) -> str:
  """Paper 002 Table 2: mean, worst-client and σ of accuracy (percent), Jain, KL and C_tot (FedAvg = 100), ours
  then the paper's, one line per row the run holds."""
  metric = metric_name(summary)
  lines = ["| Method | Acc ↑ | Acc_min ↑ | σ_Acc ↓ | Jain ↑ | KL ↓ | C_tot† | paper Acc | paper Acc_min | "
           "paper σ | paper Jain | paper KL | paper C_tot |",
           "| --- " * 13 + "|"]
  for name, label, paper in _present(summary, table2_rows(summary)):
    v = lambda k: seed_values(summary, name, k)  # noqa: E731
    ratio = paired_ratio(summary, name, "fbsfl_fedavg")
    c_tot = "—" if ratio is None else cell(ratio * 100.0)
    lines.append(f"| {label} | {cell(v(metric), 100)} | {cell(v(f'{metric}_worst'), 100)} | "
                 f"{cell(v(f'{metric}_client_std'), 100)} | {cell(v('participation_jain'), digits=2)} | "
                 f"{cell(v('participation_kl_uniform'), digits=2)} | {c_tot} | " +
                 " | ".join(paper_cell(p, 2 if i in (3, 4) else 1) for i, p in enumerate(paper)) + " |")
  return _or_note(lines, TABLE2_ROWS)


def table2_claims(summary: dict) -> list:
  """Issue 12's acceptance targets and Table 2's orderings, each as ``(claim, holds: bool | None, numbers)``
  (None: a row it needs is missing)."""
  metric = metric_name(summary)
  have = summary["methods"]
  mean = lambda name, key: float(np.nanmean(seed_values(summary, name, key)))  # noqa: E731
  claims = []

  def add(text, names, test, numbers):
    if all(n in have for n in names):
      claims.append((text, bool(test()), numbers()))
    else:
      claims.append((text, None, "rows missing: " + ", ".join(n for n in names if n not in have)))

  jain = lambda n: mean(n, "participation_jain")  # noqa: E731
  acc = lambda n: mean(n, metric) * 100  # noqa: E731
  worst = lambda n: mean(n, f"{metric}_worst") * 100  # noqa: E731
  base = [n for n in BASELINES if n in have]
  best = lambda: max(base, key=jain)  # noqa: E731
  add("FBS-FL–EXP3 Jain ≥ 0.90", ["fbsfl"], lambda: jain("fbsfl") >= 0.90, lambda: f"{jain('fbsfl'):.3f}")
  add("FBS-FL–EXP3 KL ≤ 0.10", ["fbsfl"], lambda: mean("fbsfl", "participation_kl_uniform") <= 0.10,
      lambda: f"{mean('fbsfl', 'participation_kl_uniform'):.3f}")
  if base:
    add("the best baseline's Jain ≤ 0.86", base, lambda: jain(best()) <= 0.86,
        lambda: f"{LABELS[best()]} {jain(best()):.3f}")
  add("FBS-FL–EXP3 mean accuracy within 2 points of FedAvg's", ["fbsfl", "fbsfl_fedavg"],
      lambda: abs(acc("fbsfl") - acc("fbsfl_fedavg")) <= 2.0,
      lambda: f"{acc('fbsfl'):.1f} vs {acc('fbsfl_fedavg'):.1f}")
  add("FBS-FL–EXP3 worst-client accuracy above FedAvg's", ["fbsfl", "fbsfl_fedavg"],
      lambda: worst("fbsfl") > worst("fbsfl_fedavg"), lambda: f"{worst('fbsfl'):.1f} vs {worst('fbsfl_fedavg'):.1f}")
  rows = [n for n, _, _ in TABLE2_ROWS if n in have]
  by_jain = lambda: sorted(rows, key=jain)  # noqa: E731  (least fair first)

  def extremes(order) -> str:
    """The first row of ``order`` and the next value, with every row that shares it in the table's order (the
    uniform baselines draw the same participation, so their Jain ties)."""
    first, *rest = order
    text = f"{LABELS[first]} {jain(first):.3f}"
    if rest:
      value = f"{jain(rest[0]):.3f}"
      tied = [n for n in rows if n != first and f"{jain(n):.3f}" == value]
      text += f", then {', '.join(LABELS[n] for n in tied)} {value}"
    return text

  if rows:
    add("Oort is the least fair row (lowest Jain)", ["fbsfl_oort"], lambda: by_jain()[0] == "fbsfl_oort",
        lambda: "lowest: " + extremes(by_jain()))
    add("FBS-FL–EXP3 is the fairest row (highest Jain)", ["fbsfl"], lambda: by_jain()[-1] == "fbsfl",
        lambda: "highest: " + extremes(by_jain()[::-1]))
  for name in ("fbsfl_qffl", "fbsfl_ditto"):
    add(f"{LABELS[name]} has a better worst client than FedAvg", [name, "fbsfl_fedavg"],
        lambda name=name: worst(name) > worst("fbsfl_fedavg"),
        lambda name=name: f"{worst(name):.1f} vs {worst('fbsfl_fedavg'):.1f}")
  return claims


def claims_markdown(claims) -> str:
  mark = {True: "holds", False: "does not hold", None: "not measured"}
  return "\n".join(f"- {text}: **{mark[ok]}** ({numbers})" for text, ok, numbers in claims)


# --- every 10 rounds -----------------------------------------------------------------------------------------


def checkpoint_rounds(rounds: int, every: int) -> list:
  """Rounds every, 2·every, … and the last (paper 002 §4.3's cadence for fairness and expenditure)."""
  return sorted(set(range(every, rounds + 1, every)) | {rounds})


def checkpoints_markdown(summary: dict, every: int = 10) -> str:
  """Paper 002 §4.3's cadence: Jain and KL of the cumulative participation and the cumulative expenditure C(t) at
  rounds every, 2·every, … and the last round (mean over seeds), one block of rows per Table 2 row."""
  rows = [(n, label) for n, label, _ in TABLE2_ROWS if n in summary["methods"]]
  recs = {n: summary["methods"][n]["per_seed"] for n, _ in rows}
  if not rows or any("jain_curve" not in r[0] for r in recs.values()):
    return "(no round-by-round curves in this run)"
  rounds = len(recs[rows[0][0]][0]["jain_curve"])
  marks = checkpoint_rounds(rounds, every)
  avg = lambda n, key, t: float(np.mean([r[key][t - 1] for r in recs[n]]))  # noqa: E731
  lines = ["| Method | quantity | " + " | ".join(f"t = {t}" for t in marks) + " |", "| --- " * (len(marks) + 2) + "|"]
  for n, label in rows:
    for key, name, digits in (("jain_curve", "Jain", 2), ("kl_curve", "KL", 2), ("c_tot_curve", "C(t)", 1)):
      lines.append(f"| {label} | {name} | " + " | ".join(f"{avg(n, key, t):.{digits}f}" for t in marks) + " |")
  return "\n".join(lines)


def expenditure_markdown(summary: dict) -> str:
  """Where C_tot goes (not a table of the paper): per method, C_tot = Σ_t Σ_i y r, the accepted updates A(T), the
  mean payment per accepted update C_tot / A(T) and the equity bonus's share of C_tot (eq. 10's last term,
  ``c_tot_bonus``; 0 for the baselines' flat fee r̄ = E_μ0[κ] = 0.52). FBS-FL's offers (eq. 10) are the cost
  proxy ĉ (1 + δπ) plus the bonus, so the per-update payment minus the bonus's part is what the cost proxy and the
  inclusion multiplier ask for. One row per method of the run, in the order of the run's ``methods``."""
  lines = ["| Method | C_tot | A(T) | C_tot / A(T) | bonus / A(T) | bonus share of C_tot (%) |", "| --- " * 6 + "|"]
  for name in summary["methods"]:
    c_tot, accepted = seed_values(summary, name, "c_tot"), seed_values(summary, name, "accepted_updates")
    bonus = seed_values(summary, name, "c_tot_bonus")
    if np.all(np.isnan(c_tot)):
      continue
    per = lambda v: v / np.where(accepted > 0, accepted, np.nan)  # noqa: E731
    share = bonus / np.where(c_tot > 0, c_tot, np.nan)
    lines.append(f"| {LABELS.get(name, name)} | {cell(c_tot)} | {cell(accepted, digits=0)} | "
                 f"{cell(per(c_tot), digits=3)} | {cell(per(bonus), digits=3)} | {cell(share, 100)} |")
  if len(lines) == 2:
    return "(no expenditure in this run)"
  return "\n".join(lines)


# --- Table 4: inclusion sizes -------------------------------------------------------------------------------


def table4_markdown(summary: dict) -> str:
  """Paper 002 Table 4 for every FBS-FL row of the run: mean |I_t|, Pr(|I_t| > K), P95 and max (over rounds, then
  seeds: P95 averaged, max the largest), mean accuracy and Jain."""
  metric = metric_name(summary)
  lines = ["| Row | Sampling | Mean \\|I_t\\| | Pr(\\|I_t\\| > K) | P95 | Max | Mean Acc. | Jain | paper Mean \\|I_t\\| | "
           "paper Pr | paper P95 | paper Max | paper Acc. | paper Jain |", "| --- " * 14 + "|"]
  for name, label, paper in _present(summary, table4_rows(summary)):
    v = lambda k: seed_values(summary, name, k)  # noqa: E731
    sampling = effective_setting(summary, name, "fbsfl.rounding")
    p = paper or (None,) * 6
    lines.append(f"| {label} | {sampling} | {cell(v('included_mean'))} | "
                 f"{cell(v('included_over_k'), digits=2)} | {np.nanmean(v('included_p95')):.1f} | "
                 f"{np.nanmax(v('included_max')):.0f} | {cell(v(metric), 100)} | "
                 f"{cell(v('participation_jain'), digits=2)} | {paper_cell(p[0])} | {paper_cell(p[1], 2)} | "
                 f"{paper_cell(p[2], 0)} | {paper_cell(p[3], 0)} | {paper_cell(p[4])} | {paper_cell(p[5], 2)} |")
  return _or_note(lines, TABLE4_ROWS)


# --- Tables 3, 5, 6 -----------------------------------------------------------------------------------------


def table3_markdown(summary: dict) -> str:
  """Paper 002 Table 3 (follower diagnostics): disagreement with the best response (%), MAE_μ (eq. 21), ε_BR
  (eq. 22), accuracy and participation fairness."""
  metric = metric_name(summary)
  lines = ["| Response | Disagree (%) | MAE_μ | ε_BR | Mean Acc. | Worst Acc. | Jain | KL | paper Disagree | "
           "paper MAE_μ | paper ε_BR | paper Mean | paper Worst | paper Jain | paper KL |", "| --- " * 15 + "|"]
  for name, label, paper in _present(summary, TABLE3_ROWS):
    v = lambda k: seed_values(summary, name, k)  # noqa: E731
    lines.append(f"| {label} | {cell(v('br_disagreement'), 100)} | {cell(v('belief_mae'), digits=2)} | "
                 f"{cell(v('eps_br'), digits=2)} | {cell(v(metric), 100)} | {cell(v(f'{metric}_worst'), 100)} | "
                 f"{cell(v('participation_jain'), digits=2)} | {cell(v('participation_kl_uniform'), digits=2)} | "
                 + " | ".join(paper_cell(p, 1 if i in (0, 3, 4) else 2) for i, p in enumerate(paper)) + " |")
  return _or_note(lines, TABLE3_ROWS)


def table5_markdown(summary: dict) -> str:
  """Paper 002 Table 5 (one component at a time): accuracy, fairness and the payment index C_tot / C_tot(full)."""
  metric = metric_name(summary)
  lines = ["| Variant | Mean Acc. | Worst Acc. | σ_Acc | Jain | KL | Payment index | paper Mean | paper Worst | "
           "paper σ | paper Jain | paper KL | paper Payment |", "| --- " * 13 + "|"]
  for name, label, paper in _present(summary, TABLE5_ROWS):
    v = lambda k: seed_values(summary, name, k)  # noqa: E731
    ratio = paired_ratio(summary, name, "fbsfl")
    index = "—" if ratio is None else cell(ratio, digits=2)
    lines.append(f"| {label} | {cell(v(metric), 100)} | {cell(v(f'{metric}_worst'), 100)} | "
                 f"{cell(v(f'{metric}_client_std'), 100)} | {cell(v('participation_jain'), digits=2)} | "
                 f"{cell(v('participation_kl_uniform'), digits=2)} | {index} | "
                 + " | ".join(paper_cell(p, 2 if i >= 3 else 1) for i, p in enumerate(paper)) + " |")
  return _or_note(lines, TABLE5_ROWS)


def matched_checkpoints(summary: dict, per_seed: dict, names) -> dict:
  """Paper 002 §4.5 / Table 6: per seed, A* = min_j A_j(T) over ``names``; each method is read at the first round
  t with A_j(t) ≥ A*.

  Returns:
    ``{method: {"ratio", "round", "mean", "worst", "std", "jain", "kl"}}``, each a ``[S]`` array (NaN where a record
    lacks the curve; worst and std need the per-client validation curve).
  """
  metric = metric_name(summary)
  curves = {n: [r["accepted_curve"] for r in summary["methods"][n]["per_seed"]] for n in names}
  seeds = min(len(c) for c in curves.values())
  out = {n: {k: np.full(seeds, np.nan) for k in ("ratio", "round", "mean", "worst", "std", "jain", "kl")}
         for n in names}
  for s in range(seeds):
    a_star = min(curves[n][s][-1] for n in names)
    for n in names:
      a = np.asarray(curves[n][s], np.float64)
      rec = summary["methods"][n]["per_seed"][s]
      full = per_seed.get(n, [{}] * (s + 1))[s] if per_seed else {}
      t = int(np.argmax(a >= a_star))  # the first round reaching A* (a_star ≤ a[-1], so one exists)
      o = out[n]
      o["ratio"][s] = a[-1] / a_star if a_star > 0 else np.nan
      o["round"][s] = t + 1
      o["jain"][s], o["kl"][s] = rec["jain_curve"][t], rec["kl_curve"][t]
      val = full.get(f"val_{metric}_curve")
      if val is not None and val[t] is not None:
        o["mean"][s] = val[t]
      clients = full.get(f"val_{metric}_clients")
      if clients is not None:
        c = np.array([np.nan if x is None else x for x in clients[t]], np.float64)
        c = c[~np.isnan(c)]
        if c.size:
          o["worst"][s], o["std"][s] = c.min(), c.std()
  return out


def table6_markdown(summary: dict, per_seed: dict) -> str:
  """Paper 002 Table 6: every row at the common cumulative accepted-update count A* (validation accuracy at the
  matched round; module docstring)."""
  rows = _present(summary, TABLE6_ROWS)
  if len(rows) < 2 or any("accepted_curve" not in summary["methods"][n]["per_seed"][0] for n, _, _ in rows):
    return "(Table 6 needs at least two rows with accepted-update curves.)"
  match = matched_checkpoints(summary, per_seed, [n for n, _, _ in rows])
  lines = ["| Method | A_j(T)/A* | matched round | Mean Acc. (val) | Worst Acc. (val) | σ_Acc (val) | Jain | KL | "
           "paper A_j(T)/A* | paper Mean | paper Worst | paper σ | paper Jain | paper KL |", "| --- " * 14 + "|"]
  for name, label, paper in rows:
    m = match[name]
    lines.append(f"| {label} | {cell(m['ratio'], digits=2)} | {cell(m['round'], digits=0)} | "
                 f"{cell(m['mean'], 100)} | {cell(m['worst'], 100)} | {cell(m['std'], 100)} | "
                 f"{cell(m['jain'], digits=2)} | {cell(m['kl'], digits=2)} | "
                 + " | ".join(paper_cell(p, 2 if i in (0, 4, 5) else 1) for i, p in enumerate(paper)) + " |")
  return "\n".join(lines)


# --- figures ------------------------------------------------------------------------------------------------


def plot_accuracy_curves(summary: dict, per_seed: dict, out_dir: pathlib.Path, names, path: str) -> list:
  """Figure 1's layout: mean validation accuracy per round (mean over seeds, band ± one std) for ``names``."""
  metric = metric_name(summary)
  plt = _plt()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  drawn = 0
  for name in names:
    curves = [r.get(f"val_{metric}_curve") for r in per_seed.get(name, [])]
    curves = [c for c in curves if c]
    if not curves:
      continue
    c = np.array([[np.nan if v is None else v for v in cur] for cur in curves], np.float64) * 100
    mean = np.nanmean(c, axis=0)
    t = np.arange(1, mean.size + 1)
    ax.plot(t, mean, lw=1.2, label=LABELS.get(name, name))
    if c.shape[0] > 1:
      std = np.nanstd(c, axis=0, ddof=1)
      ax.fill_between(t, mean - std, mean + std, alpha=0.15)
    drawn += 1
  if not drawn:
    plt.close(fig)
    return []
  ax.set_xlabel("round")
  ax.set_ylabel("mean validation accuracy (%)")
  ax.set_title("Accuracy over rounds (paper 002 Fig. 1 layout; validation split)")
  ax.legend(fontsize=8)
  return [_save(plt, fig, out_dir / path)]


def plot_lorenz(summary: dict, out_dir: pathlib.Path, names, path: str = "fig2_lorenz.png") -> list:
  """Figure 2's layout: Lorenz curves of cumulative participation (mean over seeds), Gini in the legend."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(5.5, 5))
  drawn = 0
  for name in names:
    recs = summary["methods"].get(name, {}).get("per_seed", [])
    curves = [r["participation_lorenz"] for r in recs if r.get("participation_lorenz")]
    if not curves:
      continue
    lorenz = np.mean(np.array(curves, np.float64), axis=0)
    x = np.linspace(0.0, 1.0, lorenz.size)
    g = np.nanmean(seed_values(summary, name, "participation_gini"))
    ax.plot(x, lorenz, lw=1.2, label=f"{LABELS.get(name, name)} (Gini {g:.2f})")
    drawn += 1
  if not drawn:
    plt.close(fig)
    return []
  ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="equality")
  ax.set_xlabel("share of clients (poorest first)")
  ax.set_ylabel("share of cumulative participation")
  ax.set_title("Participation Lorenz curves (paper 002 Fig. 2 layout)")
  ax.legend(fontsize=7)
  return [_save(plt, fig, out_dir / path)]


def plot_ablations(summary: dict, out_dir: pathlib.Path, path: str = "fig3_ablations.png") -> list:
  """Figure 3's layout: (a) mean accuracy vs Jain as β_max varies, (b) worst-client accuracy vs q, (c) MAE_μ and
  ε_BR per follower model. A panel whose rows the run lacks says so."""
  metric = metric_name(summary)
  have = summary["methods"]
  avg = lambda name, key: float(np.nanmean(seed_values(summary, name, key)))  # noqa: E731
  plt = _plt()
  fig, axes = plt.subplots(1, 3, figsize=(13, 4))
  beta = [(b, n) for b, n in ((0, "fbsfl_beta0"), (1, "fbsfl"), (2, "fbsfl_beta2")) if n in have]
  if beta:
    jain = [avg(n, "participation_jain") for _, n in beta]
    acc = [avg(n, metric) * 100 for _, n in beta]
    axes[0].plot(jain, acc, "o-")
    for (b, _), x, y in zip(beta, jain, acc):
      axes[0].annotate(f"β_max = {b}", (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points")
  axes[0].set_xlabel("Jain")
  axes[0].set_ylabel("mean accuracy (%)")
  axes[0].set_title("(a) β trade-off" + ("" if beta else ": no β rows"))
  q = [(v, n) for v, n in ((0, "fbsfl_q0"), (2, "fbsfl"), (4, "fbsfl_q4")) if n in have]
  if q:
    axes[1].bar([f"q = {v}" for v, _ in q], [avg(n, f"{metric}_worst") * 100 for _, n in q])
  axes[1].set_ylabel("worst-client accuracy (%)")
  axes[1].set_title("(b) q vs worst client" + ("" if q else ": no q rows"))
  fol = [(lab, n) for lab, n in (("BR", "fbsfl_br"), ("logit", "fbsfl_logit"), ("EXP3", "fbsfl")) if n in have]
  if fol:
    x = np.arange(len(fol))
    axes[2].bar(x - 0.2, [avg(n, "belief_mae") for _, n in fol], 0.4, label="MAE_μ")
    axes[2].bar(x + 0.2, [avg(n, "eps_br") for _, n in fol], 0.4, label="ε_BR")
    axes[2].set_xticks(x, [lab for lab, _ in fol])
    axes[2].legend(fontsize=8)
  axes[2].set_title("(c) followers" + ("" if fol else ": no follower rows"))
  return [_save(plt, fig, out_dir / path)]


# --- the two reports ----------------------------------------------------------------------------------------


def table2_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  """``report = "fbsfl_table2"``: Markdown (Tables 2 and 4, the claims) and Figures 1 and 2."""
  text = "\n\n".join([
      "## Paper 002 Table 2", table2_markdown(summary),
      "C_tot† with FedAvg = 100: FBS-FL's endogenous payments, the baselines' flat-fee charges (paper 002 §4.2). "
      + _seeds_note(summary),
      "### Issue 12's targets and Table 2's orderings", claims_markdown(table2_claims(summary)),
      "## Paper 002 Table 4 (inclusion sizes)", table4_markdown(summary),
      "## Participation fairness and expenditure every 10 rounds (paper 002 §4.3; mean over seeds)",
      checkpoints_markdown(summary),
      "## Where the expenditure goes (eq. 10: cost proxy and equity bonus; not a table of the paper)",
      expenditure_markdown(summary)])
  names = [n for n, _, _ in TABLE2_ROWS]
  files = (plot_accuracy_curves(summary, per_seed, out_dir, names, "fig1_accuracy.png")
           + plot_lorenz(summary, out_dir, names))
  return text, files


def ablations_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  """``report = "fbsfl_ablations"``: Markdown (Tables 3–6) and Figure 3."""
  text = "\n\n".join([
      "## Paper 002 Table 3 (followers)", table3_markdown(summary),
      "## Paper 002 Table 4 (expected vs strict cap)", table4_markdown(summary),
      "## Paper 002 Table 5 (one component at a time)", table5_markdown(summary),
      "## Paper 002 Table 6 (matched accepted updates A*)", table6_markdown(summary, per_seed),
      "## Where the expenditure goes (eq. 10: cost proxy and equity bonus; not a table of the paper)",
      expenditure_markdown(summary),
      _seeds_note(summary, " in Table 4 (Tables 3, 5 and 6 are the paper's CIFAR-10 rows)"
                  if paper_dataset(summary) != "CIFAR-10" else "")])
  return text, plot_ablations(summary, out_dir)


REPORTS = {"fbsfl_table2": table2_report, "fbsfl_ablations": ablations_report}
"""Report name → ``(summary, per_seed, out_dir) -> (markdown, [png paths])``."""
