"""Paper 003's tables and figures from a finished run (issue 13 item 6): ``report = "ipfl_compare"``,
``"ipfl_attacks"``, ``"ipfl_liars"``, ``"ipfl_market"`` (an experiment's ``report`` key, or
``python -m fedjax_sim.report OUT --report NAME``).

Every figure is read from the per-seed records that :func:`~fedjax_sim.algorithms.ipfl.algorithm.ipfl_metrics`
writes: ``best_accuracy`` (each benign client's best accuracy over rounds, mean over clients), ``utility_sum``
(each benign client's utility summed over rounds, mean over clients), ``min_round_utility``, ``attacker_utility``,
``liar_utility``, ``utility_clients``, ``purchases`` and ``payment_clients``. The paper's numbers beside ours are
the ones issue 13 and SPEC §5 quote (Table 2's liar utilities; the comparison's "+1.75 points over FedAMP, +217 %
utility"); the paper ran other data sizes and its own seeds, so compare orderings and signs, not levels.
"""
from __future__ import annotations

import math
import pathlib

import numpy as np

from fedjax_sim.algorithms.fbsfl.report import cell, effective_setting, mean_std, seed_values
from fedjax_sim.report import pyplot as _plt, save_figure as _save

COMPARE_ROWS = (("ipfl", "iPFL"), ("ipfl_local", "Local"), ("ipfl_fedavg", "FedAvg"), ("ipfl_fedprox", "FedProx"),
                ("ipfl_ditto", "Ditto"), ("ipfl_fedamp", "FedAMP"), ("ipfl_cfl", "CFL"),
                ("ipfl_fedfomo", "FedFomo"), ("ipfl_pfedgraph", "pFedGraph"))
LABELS = dict(COMPARE_ROWS)
ATTACK_LABELS = (("shuffle", "shuffle"), ("sign_flip", "sign flip"), ("same_value", "same value"),
                 ("gauss", "Gaussian"))
# (method, label, paper 003 Table 2: the liar's utility)
LIAR_ROWS = (("ipfl", "honest", 617.3), ("ipfl_liar_n01", "N × 0.1", -513.4), ("ipfl_liar_n05", "N × 0.5", -10.0),
             ("ipfl_liar_n10", "N × 10", 0.0), ("ipfl_liar_c2", "c × 2", 0.0), ("ipfl_liar_c5", "c × 5", 0.0),
             ("ipfl_liar_c10", "c × 10", 0.0))


def _note(summary: dict) -> str:
  cfg = summary.get("config", {})
  seeds = cfg.get("seeds", [])
  data = cfg.get("data", {})
  lc = cfg.get("learner", {})
  return (f"Seeds {', '.join(map(str, seeds))} ({len(seeds)}); ± is the sample std over seeds (— with one seed); "
          f"{cfg.get('rounds', '?')} rounds of {lc.get('local_steps', '?')} local iterations, "
          f"{summary.get('federation', {}).get('clients', '?')} clients, data.source = {data.get('source', '?')} "
          f"(partition {data.get('partition', '?')}, shared test set: {data.get('shared_test', False)}).")


def _mean(summary, name, key) -> float:
  return mean_std(seed_values(summary, name, key))[0]


# --- ipfl_compare (Fig. 2, 3) ----------------------------------------------------------------------------------


def compare_markdown(summary: dict) -> str:
  """Fig. 2's numbers as a table: the best accuracy over rounds (the paper's figure), the deployed models' final
  accuracy and worst client (the platform's per-client test metric after the last round), the utility, the
  smallest round utility, the purchases and the welfare."""
  rows = [(n, lab) for n, lab in COMPARE_ROWS if n in summary["methods"]]
  lines = ["| method | best accuracy (%) | final accuracy (%) | worst client, final (%) | utility Σ_t U (mean over "
           "clients) | min round utility | purchases per client-round | welfare Σ_t SW |",
           "|---|---|---|---|---|---|---|---|"]
  for name, label in rows:
    lines.append(f"| {label} | {cell(seed_values(summary, name, 'best_accuracy'), 100.0, digits=2)} | "
                 f"{cell(seed_values(summary, name, 'accuracy'), 100.0, digits=2)} | "
                 f"{cell(seed_values(summary, name, 'accuracy_worst'), 100.0)} | "
                 f"{cell(seed_values(summary, name, 'utility_sum'), digits=2)} | "
                 f"{cell(seed_values(summary, name, 'min_round_utility'), digits=3)} | "
                 f"{cell(seed_values(summary, name, 'mean_degree'), digits=2)} | "
                 f"{cell(seed_values(summary, name, 'welfare_sum'))} |")
  return "\n".join(lines)


def compare_claims(summary: dict) -> list:
  """Issue 13's acceptance for ``ipfl_compare``: iPFL's utility the highest, its accuracy against the best
  baseline, every honest round utility ≥ 0 under iPFL; ``(text, holds | None, numbers)``, none without an ipfl row."""
  have = summary["methods"]
  if "ipfl" not in have:
    return []
  base = [n for n, _ in COMPARE_ROWS if n in have and n != "ipfl"]
  out = []
  u = {n: _mean(summary, n, "utility_sum") for n in ["ipfl"] + base}
  acc = {n: _mean(summary, n, "best_accuracy") for n in ["ipfl"] + base}
  if base:
    best_u = max(base, key=lambda n: u[n])
    out.append(("iPFL's average utility is the highest", u["ipfl"] > u[best_u],
                f"iPFL {u['ipfl']:.2f} vs best baseline {LABELS.get(best_u, best_u)} {u[best_u]:.2f}"))
    best_a = max(base, key=lambda n: -math.inf if math.isnan(acc[n]) else acc[n])
    out.append(("iPFL's accuracy is comparable to the best baseline's (within 2 points)",
                acc["ipfl"] >= acc[best_a] - 0.02,
                f"iPFL {100 * acc['ipfl']:.2f} % vs {LABELS.get(best_a, best_a)} {100 * acc[best_a]:.2f} % "
                f"(paper: +1.75 points over FedAMP)"))
    if "ipfl_fedamp" in have and u["ipfl_fedamp"] != 0:
      out.append(("utility against FedAMP", None,
                  f"iPFL {u['ipfl']:.2f} vs FedAMP {u['ipfl_fedamp']:.2f} "
                  f"({100 * (u['ipfl'] - u['ipfl_fedamp']) / abs(u['ipfl_fedamp']):+.0f} %; paper: +217 %)"))
  m = np.nanmin(seed_values(summary, "ipfl", "min_round_utility"))
  out.append(("every honest client's round utility is ≥ 0 under iPFL (Theorem 1)", bool(m >= -1e-4),
              f"minimum {m:.3g}"))
  return out


def claims_markdown(claims) -> str:
  mark = {True: "holds", False: "does not hold", None: "for the record"}
  return "\n".join(f"- {text}: **{mark[ok]}** ({numbers})" for text, ok, numbers in claims)


def plot_scatter(summary: dict, out_dir: pathlib.Path, path: str = "fig2_scatter.png") -> list:
  """Fig. 2's layout: best accuracy against utility, one point per method (mean over seeds)."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6, 4.5))
  drawn = 0
  for name, label in COMPARE_ROWS:
    if name not in summary["methods"]:
      continue
    x, y = _mean(summary, name, "utility_sum"), 100 * _mean(summary, name, "best_accuracy")
    if math.isnan(x) or math.isnan(y):
      continue
    ax.scatter([x], [y], s=60 if name == "ipfl" else 30, marker="*" if name == "ipfl" else "o")
    ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    drawn += 1
  if not drawn:
    plt.close(fig)
    return []
  ax.set_xlabel("utility Σ_t U_i (mean over clients)")
  ax.set_ylabel("best accuracy (%)")
  ax.set_title("Accuracy against utility (paper 003 Fig. 2 layout)")
  ax.grid(alpha=0.3)
  return [_save(plt, fig, out_dir / path)]


def plot_client_utilities(summary: dict, out_dir: pathlib.Path, path: str = "fig3_utility.png") -> list:
  """Fig. 3's layout: each client's utility (summed over rounds, mean over seeds) per method."""
  plt = _plt()
  rows = [(n, lab) for n, lab in COMPARE_ROWS if n in summary["methods"]]
  per = {}
  for name, _ in rows:
    recs = [r.get("utility_clients") for r in summary["methods"][name].get("per_seed", [])]
    recs = [r for r in recs if r]
    if recs:
      per[name] = np.mean(np.array(recs, np.float64), axis=0)
  if not per:
    return []
  fig, ax = plt.subplots(figsize=(7, 4.5))
  names = list(per)
  ax.boxplot([per[n] for n in names], showfliers=True)
  for k, n in enumerate(names, start=1):
    ax.scatter(np.full(per[n].size, k) + np.linspace(-0.15, 0.15, per[n].size), per[n], s=8, alpha=0.6)
  ax.set_xticks(range(1, len(names) + 1), [LABELS.get(n, n) for n in names], rotation=30, fontsize=8)
  ax.axhline(0.0, color="k", lw=0.6)
  ax.set_ylabel("client utility Σ_t U_i")
  ax.set_title("Utility per client (paper 003 Fig. 3 layout)")
  return [_save(plt, fig, out_dir / path)]


def compare_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  del per_seed
  claims = compare_claims(summary)
  text = "\n\n".join(["## Paper 003 comparison (Fig. 2–3)", compare_markdown(summary), _note(summary),
                      "### Issue 13's targets", claims_markdown(claims) if claims else "(no ipfl row in the run)"])
  return text, plot_scatter(summary, out_dir) + plot_client_utilities(summary, out_dir)


# --- ipfl_attacks (Fig. 4) -------------------------------------------------------------------------------------


KEPT_ATTACKS = ("shuffle", "sign_flip")
"""The attacks with an ``ipfl_ATTACK_kept`` preset (``ipfl.attack_in_place = false``: the attacker keeps its
trained model)."""


def _ipfl_attack_rows() -> list:
  """(method, label) of iPFL under each attack, then under each attack whose attacker keeps its model."""
  return ([(f"ipfl_{a}", lab) for a, lab in ATTACK_LABELS]
          + [(f"ipfl_{a}_kept", f"{lab} (attacker keeps its model)") for a, lab in ATTACK_LABELS
             if a in KEPT_ATTACKS])


def attacks_markdown(summary: dict) -> tuple:
  """The benign-accuracy and attacker-utility tables, and iPFL's claims."""
  have = summary["methods"]
  head = "| method | clean | " + " | ".join(lab for _, lab in ATTACK_LABELS) + " |"
  sep = "|---|---|" + "---|" * len(ATTACK_LABELS)
  acc, util = [head, sep], [head, sep]

  def add_rows(label, cols):  # one row of each table: a "—" where a column's method did not run
    acc.append(f"| {label} | " + " | ".join(cell(seed_values(summary, c, "best_accuracy"), 100.0) if c in have
                                            else "—" for c in cols) + " |")
    util.append(f"| {label} | " + " | ".join(cell(seed_values(summary, c, "attacker_utility"), digits=2)
                                             if c in have else "—" for c in cols) + " |")

  for name, label in COMPARE_ROWS:
    cols = [name] + [f"{name}_{a}" for a, _ in ATTACK_LABELS]
    if not any(c in have for c in cols):
      continue
    add_rows(label, cols)
  kept = ["ipfl"] + [f"ipfl_{a}_kept" if a in KEPT_ATTACKS else None for a, _ in ATTACK_LABELS]
  if any(c in have for c in kept[1:] if c):
    add_rows("iPFL, attacker keeps its model", kept)
  claims = []
  if "ipfl" in have:
    clean_u, clean_a = _mean(summary, "ipfl", "attacker_utility"), _mean(summary, "ipfl", "best_accuracy")
    for name, lab in _ipfl_attack_rows():
      if name not in have:
        continue
      u, acc_a = _mean(summary, name, "attacker_utility"), _mean(summary, name, "best_accuracy")
      claims.append((f"iPFL, {lab}: the attacker's utility falls", bool(u < clean_u),
                     f"{clean_u:.2f} → {u:.2f}"))
      claims.append((f"iPFL, {lab}: benign accuracy holds (within 1 point)", bool(acc_a >= clean_a - 0.01),
                     f"{100 * clean_a:.2f} % → {100 * acc_a:.2f} %"))
  return "\n".join(acc), "\n".join(util), claims


def prices_markdown(summary: dict) -> str:
  """What iPFL's prices saw, per iPFL row of an attack run (docs/IPFL.md §7): the mean distance from each benign
  client to its nearest honest seller and to the attacker (``ipfl_metrics``' distance summary), the bound
  d_a − c/λ below which a buyer's nearest honest seller is cheaper than an attacker reporting c = 0 at distance
  d_a (Box 2's R_ij = c_j + λ d_ij N_j / N_i at equal sizes), the attacker's sales (buyer-rounds), how often it
  was a buyer's cheapest seller at the recorded prices and how often it was bought then and otherwise
  (``undercut_summary``). Empty when no row recorded distances (federations above ``GRAPH_CLIENTS`` clients)."""
  have = summary["methods"]
  attackers = summary.get("config", {}).get("ipfl", {}).get("attackers", []) or []
  lines = ["| method | nearest honest d | attacker's d_a | d_a − c/λ | attacker's sales (buyer-rounds) | attacker "
           "the cheapest seller (% of buyer-rounds) | bought from it when cheapest / otherwise (%) |",
           "|---|---|---|---|---|---|---|"]
  for name in ["ipfl"] + [row for row, _ in _ipfl_attack_rows()]:
    near = seed_values(summary, name, "nearest_honest_distance") if name in have else np.array([])
    if not np.isfinite(near).any():
      continue
    d_a = seed_values(summary, name, "attacker_distance")
    cost, lam = effective_setting(summary, name, "ipfl.cost"), effective_setting(summary, name, "ipfl.lam")
    bound = d_a - float(cost) / float(lam) if cost is not None and lam else np.full_like(d_a, np.nan)
    sales = np.array([float(np.asarray(r.get("purchases", np.zeros((0, 0))), np.float64)[:, attackers].sum())
                      if attackers and r.get("purchases") is not None else np.nan
                      for r in have[name].get("per_seed", [])])
    when = cell(seed_values(summary, name, "attacker_bought_when_cheapest"), 100.0)
    otherwise = cell(seed_values(summary, name, "attacker_bought_otherwise"), 100.0)
    lines.append(f"| {name} | {cell(near, digits=3)} | {cell(d_a, digits=3)} | {cell(bound, digits=3)} | "
                 f"{cell(sales, digits=1)} | {cell(seed_values(summary, name, 'attacker_cheapest'), 100.0)} | "
                 f"{when} / {otherwise} |")
  return "\n".join(lines) if len(lines) > 2 else ""


def attacks_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  del per_seed, out_dir
  acc, util, claims = attacks_markdown(summary)
  attackers = summary.get("config", {}).get("ipfl", {}).get("attackers", [])
  parts = ["## Paper 003 Fig. 4: benign accuracy (%) before and after each attack", acc,
           f"## The attacker's utility Σ_t U (client(s) {list(attackers)})", util]
  prices = prices_markdown(summary)
  if prices:
    parts += ["## What iPFL's prices saw (mean over rounds and benign clients; an attacker reporting c = 0 "
              "undercuts a buyer's nearest honest seller when that seller's d exceeds d_a − c/λ)", prices]
  parts += [_note(summary), "### Issue 13's targets", claims_markdown(claims) if claims else "(no ipfl row in the run)"]
  return "\n\n".join(parts), []


# --- ipfl_liars (Table 2) --------------------------------------------------------------------------------------


def liars_markdown(summary: dict) -> tuple:
  have = summary["methods"]
  lines = ["| report | liar's utility Σ_t U (ours) | paper 003 Table 2 | benign accuracy (%) |", "|---|---|---|---|"]
  for name, label, paper in LIAR_ROWS:
    if name in have:
      lines.append(f"| {label} | {cell(seed_values(summary, name, 'liar_utility'), digits=1)} | {paper:g} | "
                   f"{cell(seed_values(summary, name, 'best_accuracy'), 100.0)} |")
  claims = []
  if "ipfl" in have:
    honest = _mean(summary, "ipfl", "liar_utility")
    for name, label, _ in LIAR_ROWS[1:]:
      if name in have:
        lie = _mean(summary, name, "liar_utility")
        claims.append((f"honest beats {label}", bool(honest > lie), f"{honest:.1f} vs {lie:.1f}"))
  return "\n".join(lines), claims


def _liars_missing(summary: dict) -> str:
  """Why the target has nothing to compare: the honest row or every lying row is missing from the run."""
  if "ipfl" not in summary["methods"]:
    return "(no honest ipfl row in the run)"
  return "(no lying row in the run: nothing to compare the honest report with)"


def liars_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  del per_seed, out_dir
  table, claims = liars_markdown(summary)
  liar = summary.get("config", {}).get("ipfl", {}).get("liar", "?")
  text = "\n\n".join([f"## Paper 003 Table 2: the liar's utility (client {liar})", table, _note(summary),
                      "### Issue 13's target: the honest report gives the liar the highest utility",
                      claims_markdown(claims) if claims else _liars_missing(summary)])
  return text, []


# --- ipfl_market (Fig. 5) --------------------------------------------------------------------------------------


def market_roles(summary: dict, method: str, num_clients: int) -> list:
  """Each client's role name from the run's effective ``[ipfl]`` settings."""
  out = ["client"] * num_clients
  for key, role in (("ipfl.traders", "trader"), ("ipfl.buyers", "buyer"), ("ipfl.sellers", "seller"),
                    ("ipfl.attackers", "attacker")):
    for i in effective_setting(summary, method, key) or ():
      if int(i) < num_clients:
        out[int(i)] = role
  return out


ROLE_COLORS = {"trader": "tab:green", "buyer": "tab:blue", "seller": "tab:orange", "attacker": "tab:red",
               "client": "tab:gray"}


def plot_market(summary: dict, method: str, out_dir: pathlib.Path, path: str = "fig5_market.png") -> list:
  """Fig. 5's layout: the transaction graph of seed 0 — nodes on a circle coloured by role, labelled with their
  net payment received (−Σ_t p_i), an arrow j → i when i bought j's model, its width the number of rounds."""
  recs = summary["methods"].get(method, {}).get("per_seed", [])
  if not recs or not recs[0].get("purchases"):
    return []
  plt = _plt()
  count = np.asarray(recs[0]["purchases"], np.float64)
  pay = np.asarray(recs[0].get("payment_clients") or np.zeros(count.shape[0]), np.float64)
  c = count.shape[0]
  roles = market_roles(summary, method, c)
  ang = 2 * np.pi * np.arange(c) / c
  xy = np.stack([np.cos(ang), np.sin(ang)], 1)
  fig, ax = plt.subplots(figsize=(6.5, 6.5))
  top = max(count.max(), 1.0)
  for i in range(c):
    for j in range(c):
      if count[i, j] > 0:
        ax.annotate("", xy=xy[i] * 0.92, xytext=xy[j] * 0.92,
                    arrowprops=dict(arrowstyle="->", lw=0.4 + 2.5 * count[i, j] / top, alpha=0.6,
                                    color=ROLE_COLORS[roles[j]]))
  for i in range(c):
    ax.scatter(*xy[i], s=300, color=ROLE_COLORS[roles[i]], zorder=3)
    ax.annotate(f"{i}\n{-pay[i]:+.0f}", xy[i] * 1.15, ha="center", va="center", fontsize=8)
  for role, color in ROLE_COLORS.items():
    if role in roles:
      ax.scatter([], [], color=color, label=role)
  ax.legend(loc="lower right", fontsize=8)
  ax.set_xlim(-1.4, 1.4)
  ax.set_ylim(-1.4, 1.4)
  ax.set_aspect("equal")
  ax.axis("off")
  ax.set_title("Market transactions (paper 003 Fig. 5 layout): arrow seller → buyer, width = rounds;\n"
               "label: client, net payment received Σ_t (−p_i)", fontsize=9)
  return [_save(plt, fig, out_dir / path)]


def market_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  del per_seed
  have = [n for n in summary["methods"]]
  lines = ["| method | client | role | utility Σ_t U | net payment received | sold (client-rounds) | "
           "bought (client-rounds) |", "|---|---|---|---|---|---|---|"]
  files = []
  for name in have:
    recs = summary["methods"][name].get("per_seed", [])
    if not recs or not recs[0].get("purchases"):
      continue
    count = np.asarray(recs[0]["purchases"], np.float64)
    util = np.asarray(recs[0].get("utility_clients"), np.float64)
    pay = np.asarray(recs[0].get("payment_clients") or np.zeros(count.shape[0]), np.float64)
    roles = market_roles(summary, name, count.shape[0])
    for i in range(count.shape[0]):
      lines.append(f"| {name} | {i} | {roles[i]} | {util[i]:.1f} | {-pay[i]:.1f} | {count[:, i].sum():g} | "
                   f"{count[i].sum():g} |")
    files += plot_market(summary, name, out_dir)
  text = "\n\n".join(["## Paper 003 Fig. 5: the market playground (seed " +
                      str(summary.get("config", {}).get("seeds", ["?"])[0]) + ")", "\n".join(lines), _note(summary)])
  return text, files


REPORTS = {"ipfl_compare": compare_report, "ipfl_attacks": attacks_report, "ipfl_liars": liars_report,
           "ipfl_market": market_report}
"""Report name → ``(summary, per_seed, out_dir) -> (markdown, [png paths])``."""
