"""Reports from a summary: paper 000's Table 1 as Markdown and its Figure 3 (ranking, Pareto frontier)."""
from __future__ import annotations

import math
import pathlib

import numpy as np

# Paper 000 Table 1 row labels, in the paper's order (SPEC §3.3), and the paper's figures (SPEC §3.5).
TABLE1_ROWS = (
    ("local", "Local-only", 0.587, 0.00),
    ("fedavg", "FedAvg", 0.755, 1.00),
    ("fedprox", "FedProx", 0.753, 1.00),
    ("feddyn", "FedDyn", 0.758, 1.00),
    ("moon", "MOON", 0.750, 1.00),
    ("decefl", "DeceFL", 0.696, 1.00),  # SPEC §3.4 gives 1.50× (note below)
    ("defta", "DeFTA", 0.725, 1.00),  # 1.50× by SPEC §3.4
    ("wpfed", "WPFed", 0.694, 1.00),  # 2.50× by SPEC §3.4
    ("bnn_fl", "BNN+FL", 0.749, 2.00),
    ("abps", "ABPS (κ=3)", 0.753, 1.50),
    ("abps_p", "ABPS+P", 0.757, 1.49),
    ("abps_q", "ABPS+Q", 0.753, 0.75),
    ("abps_pq_k1", "ABPS+P+Q+κ=1", 0.748, 0.25),
    ("abps_pq_k1_hom", "ABPS+P+Q+κ=1 (hom.)", 0.742, 0.25),
    ("abps_pq_k1_div", "ABPS+P+Q+κ=1 (div.)", 0.694, 0.16),
    ("abps_pq_k1_ali", "ABPS+P+Q+κ=1 (align.)", 0.739, 0.25),
    ("abps_x", "ABPS-X", 0.758, 0.09),
    ("fedavg_pq", "FedAvg+P+Q", 0.758, 0.50),
    ("fedavg_x", "FedAvg-X", 0.691, 0.31),
    ("centralized", "Centralized", 0.827, None),
)
LABELS = {name: label for name, label, _, _ in TABLE1_ROWS}


def format_ratio(v) -> str:
  """A bandwidth ratio for a table: ``"—"`` for None/NaN (not federated), ``"0×"`` for 0, two decimals
  from 0.1 up (``"1.50×"``), three significant digits below (``"0.0022×"``, not ``"0.00×"``; issue 9)."""
  if v is None or math.isnan(v):
    return "—"
  if v == 0:
    return "0×"
  if abs(v) >= 0.1:
    return f"{v:.2f}×"
  return np.format_float_positional(v, precision=3, unique=True, fractional=False, trim="-") + "×"


def format_mean_std(mean, std, digits: int = 3) -> str:
  """``"0.760 ± 0.010"``; the std is ``"—"`` when undefined (one seed: null in summary.json)."""
  if mean is None or (isinstance(mean, float) and math.isnan(mean)):
    return "—"
  spread = "—" if std is None or (isinstance(std, float) and math.isnan(std)) else f"{std:.{digits}f}"
  return f"{mean:.{digits}f} ± {spread}"


def markdown_cell(text) -> str:
  """A Markdown table cell: ``|`` escaped (``E\\|P_i\\|``), so every row keeps the header's columns."""
  return str(text).replace("|", "\\|")


def _defined(v) -> float:
  """``v``, or 0.0 when it is None or NaN (an error bar of one seed)."""
  return 0.0 if v is None or math.isnan(v) else float(v)


def scored_note(summary: dict) -> str:
  """One sentence: how many centers were scored and the median test-split size (issue 9); "" if unknown."""
  methods = [m for m in summary.get("methods", {}).values() if "centers_scored" in m]
  if not methods:
    return ""
  scored = sorted({m["centers_scored"] for m in methods})
  rows = sorted({m["median_test_rows"] for m in methods if m.get("median_test_rows") is not None})
  clients = summary.get("federation", {}).get("clients")
  of = f" of {clients}" if clients is not None else ""
  span = lambda v: f"{v[0]:g}" if len(v) == 1 else f"{v[0]:g}–{v[-1]:g}"  # noqa: E731
  median = f"; median test split of the scored centers {span(rows)} rows" if rows else ""
  return f"Centers scored: {span(scored)}{of} (a one-class test split has no AUROC){median}."


def table1_markdown(summary: dict) -> str:
  """Paper 000 Table 1's layout: AUROC mean ± sample std over seeds, bandwidth, rest fraction, E|P_i|, and the
  paper's row; a closing note names the seeds, the std, and how many centers were scored on how many test rows."""
  lines = ["| method | AUROC (mean ± std) | bandwidth | rest fraction | E\\|P_i\\| | rounds | paper AUROC | paper bandwidth |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  methods = summary["methods"]
  for name, label, paper_auc, paper_bw in TABLE1_ROWS:
    if name not in methods:
      continue
    m = methods[name]
    lines.append(f"| {markdown_cell(label)} | {format_mean_std(m['auroc_mean'], m['auroc_std'])} "
                 f"| {format_ratio(m['bandwidth_ratio'])} "
                 f"| {m['rest_fraction']:.2f} | {m['mean_partners']:.2f} | {m['rounds_run']} "
                 f"| {paper_auc:.3f} | {format_ratio(paper_bw)} |")
  others = [n for n in methods if n not in LABELS]
  for name in others:
    m = methods[name]
    lines.append(f"| {markdown_cell(name)} | {format_mean_std(m['auroc_mean'], m['auroc_std'])} "
                 f"| {format_ratio(m['bandwidth_ratio'])} "
                 f"| {m['rest_fraction']:.2f} | {m['mean_partners']:.2f} | {m['rounds_run']} | — | — |")
  seeds = next(iter(methods.values()))["seeds"] if methods else []
  lines.append("")
  note = scored_note(summary)
  p2p = [LABELS[n] for n in ("decefl", "defta", "wpfed") if n in methods]
  if p2p:  # issue 9, item 15
    note = (f"The paper prints 1.00× for {', '.join(p2p)}; SPEC §3.4 counts 2·|W| bytes per undirected edge, so a "
            "d-regular graph costs d/2× FedAvg and WPFed, which downloads M candidates' models per center, M/2× "
            "(docs/TABLE1.md). " + note).strip()
  lines.append(f"Seeds {', '.join(map(str, seeds))}; ± is the sample std (ddof = 1) over seeds; bandwidth relative "
               "to full-participation fp32 FedAvg over R_ref rounds (SPEC §3.4). Synthetic federation unless the "
               "config says otherwise." + (f" {note}" if note else ""))
  return "\n".join(lines)


def pareto_front(points):
  """Indices of the non-dominated points of ``(bytes, auroc)`` (fewer bytes and higher AUROC are better)."""
  front = []
  for i, (b, a) in enumerate(points):
    if not any((b2 <= b and a2 >= a) and (b2 < b or a2 > a) for j, (b2, a2) in enumerate(points) if j != i):
      front.append(i)
  return sorted(front, key=lambda i: points[i][0])


def plot_figures(summary: dict, out_dir: pathlib.Path) -> list:
  """Writes ``ranking.png`` (accuracy ranking) and ``pareto.png`` (accuracy–bandwidth frontier, log bytes)."""
  plt = pyplot()
  methods = summary["methods"]
  names = sorted(methods, key=lambda n: methods[n]["auroc_mean"])
  fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
  ax.barh([LABELS.get(n, n) for n in names], [methods[n]["auroc_mean"] for n in names],
          xerr=[_defined(methods[n]["auroc_std"]) for n in names],
          color=["tab:orange" if n.startswith("abps") else "tab:blue" for n in names])
  lo = min(methods[n]["auroc_mean"] for n in names)
  ax.set_xlim(max(0.0, lo - 0.05), 1.0)
  ax.set_xlabel("mean per-center test AUROC")
  ax.set_title("Accuracy ranking (paper 000 Fig. 3a layout)")
  ranking = save_figure(plt, fig, out_dir / "ranking.png")

  fed = [n for n in methods if methods[n]["bandwidth_ratio"]]
  pts = [(methods[n]["bandwidth_ratio"], methods[n]["auroc_mean"]) for n in fed]
  fig, ax = plt.subplots(figsize=(7, 5))
  for n, (b, a) in zip(fed, pts):
    ax.scatter(b, a, color="tab:orange" if n.startswith("abps") else "tab:blue")
    ax.annotate(LABELS.get(n, n), (b, a), fontsize=7, xytext=(3, 3), textcoords="offset points")
  front = pareto_front(pts)
  if front:
    ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "k--", lw=1, label="Pareto frontier")
    ax.legend()
  ax.set_xscale("log")
  ax.set_xlabel("bytes relative to FedAvg (log scale)")
  ax.set_ylabel("mean per-center test AUROC")
  ax.set_title("Accuracy–bandwidth (paper 000 Fig. 3b layout)")
  return [ranking, save_figure(plt, fig, out_dir / "pareto.png")]


def table1_report(summary: dict, per_seed: dict, out_dir: pathlib.Path) -> tuple:
  """``report = "table1"``: paper 000 Table 1 as Markdown and Figure 3's ranking and Pareto PNGs."""
  del per_seed
  return table1_markdown(summary), plot_figures(summary, out_dir)


def pyplot():
  """matplotlib's pyplot on the non-interactive Agg backend (reports write PNGs; no display is needed)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def save_figure(plt, fig, path: pathlib.Path) -> pathlib.Path:
  """Writes ``fig`` to ``path`` (tight layout, 120 dpi), closes it and returns the path (every report's PNGs)."""
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


# --- python -m fedjax_sim.report OUT --report NAME ------------------------------------------------------------


def load_outputs(out_dir: pathlib.Path) -> tuple:
  """``(summary, per_seed)`` of a finished run: ``summary.json`` and every method's ``seed_*.json`` records, in
  the summary's seed order.

  Raises:
    FileNotFoundError: naming what is missing.
  """
  import json
  path = out_dir / "summary.json"
  if not path.is_file():
    raise FileNotFoundError(f"{path} does not exist; pass the --out folder of a finished run")
  summary = json.loads(path.read_text())
  per_seed = {}
  for method, entry in summary.get("methods", {}).items():
    records = []
    for rec in entry.get("per_seed", []):
      stem = f"seed_{rec['seed']}" + (f"_point_{rec['grid_point']}" if "grid_point" in rec else "")
      f = out_dir / method / f"{stem}.json"
      records.append(json.loads(f.read_text()) if f.is_file() else rec)
    per_seed[method] = records
  return summary, per_seed


def _seed_subset(entry: dict, records: list, seeds, metric: str) -> tuple:
  """One summary entry (no sweep, or one grid point) and its full records, restricted to ``seeds``."""
  from fedjax_sim.summarize import brief_record, seed_statistics
  by_seed = {r["seed"]: r for r in records}
  kept = [by_seed[s] for s in seeds]
  declared = [k for k in entry if k in set(entry.get("declared", ()))]  # the entry's own order
  stats = seed_statistics(kept, metric, declared, entry.get("bandwidth_ratio") is not None)
  inside = [{k: v for k, v in r.items() if k not in ("grid_point", "point")} for r in kept]  # as summarize keeps them
  entry = {**entry, "seeds": list(seeds), **stats, "per_seed": [brief_record(r, metric) for r in inside]}
  per_center = [r.get(f"test_{metric}_per_center") for r in kept]
  if all(v is not None for v in per_center) and per_center:
    scored = int(np.all([[x is not None for x in v] for v in per_center], axis=0).sum())
    if scored != entry.get("centers_scored", scored):  # the test-split sizes need the federation: unknown here
      entry.update(centers_scored=scored, median_test_rows=None, small_test_centers=None)
  return entry, kept


def select_seeds(summary: dict, per_seed: dict, seeds) -> tuple:
  """A finished run's ``(summary, per_seed)`` restricted to ``seeds``, in that order: every method's records of
  those seeds, and its summary entry (each grid point's, under a sweep) re-aggregated from them with the same
  :func:`fedjax_sim.summarize.seed_statistics` as the run's own summary. The config's seeds become ``seeds``, so
  a three-seed run can be merged with one-seed runs of the same federation on their common seed. The run's
  ``timing`` is kept: it is the whole run's.

  Raises:
    ValueError: naming a seed the run does not hold, or one named twice.
  """
  seeds = [int(s) for s in seeds]
  twice = sorted({s for s in seeds if seeds.count(s) > 1})
  if twice:  # a seed counted twice would weigh twice in the mean and shrink the std
    raise ValueError(f"seed {', '.join(map(str, twice))} is named more than once")
  have = list(summary.get("config", {}).get("seeds", []))
  missing = [s for s in seeds if s not in have]
  if missing:
    raise ValueError(f"the run has no seed {', '.join(map(str, missing))}; its seeds are "
                     f"{', '.join(map(str, have)) or 'none'}")
  metric = summary.get("metric", "auroc")
  methods, records_out = {}, {}
  for name, entry in summary.get("methods", {}).items():
    records = per_seed.get(name, [])
    if "grid" in entry:
      grid, kept = [], []
      for g, point in enumerate(entry["grid"]):
        sub, recs = _seed_subset(point, [r for r in records if r.get("grid_point") == g], seeds, metric)
        grid.append(sub)
        kept += recs
      methods[name], records_out[name] = {**entry, "grid": grid}, kept
    else:
      methods[name], records_out[name] = _seed_subset(entry, records, seeds, metric)
  config = {**summary.get("config", {}), "seeds": seeds}
  return {**summary, "config": config, "methods": methods}, records_out


def _federation(summary) -> tuple:
  """What makes two runs' rows comparable: the federation's size and the data settings it was built from."""
  return (summary.get("federation", {}).get("clients"), summary.get("federation", {}).get("train_rows"),
          summary.get("config", {}).get("data"))


def merge_outputs(runs) -> tuple:
  """One ``(summary, per_seed)`` from several finished runs of the same federation and seeds (e.g. the ablation
  presets run apart from the Table 2 rows): the first run's summary, with every later run's methods that it does
  not hold added in their order. A method one run lost to a numerical fault (its ``faults``) stays listed as
  faulted only while no run holds its results.

  Raises:
    ValueError: when the runs differ in seeds or federation (their rows would not be comparable).
  """
  summary, per_seed = runs[0]
  summary = dict(summary, methods=dict(summary["methods"]))
  per_seed = dict(per_seed)
  same = lambda s: (s.get("config", {}).get("seeds"), *_federation(s))  # noqa: E731
  for i, (other, records) in enumerate(runs[1:], start=2):
    if same(other) != same(summary):
      common = [s for s in same(summary)[0] or () if s in (same(other)[0] or ())]
      hint = ""
      if same(other)[1:] == same(summary)[1:]:
        hint = (f"; to compare them on their common seeds pass --seeds {','.join(map(str, common))}, "
                "or --pool-seeds" if common else "; pass --pool-seeds") + " to pool every run's seeds"
      raise ValueError(f"run {i} has other seeds, data or federation than run 1 (seeds {same(other)[0]} vs "
                       f"{same(summary)[0]}); a report compares rows of one federation{hint}")
    for name, entry in other["methods"].items():
      if name not in summary["methods"]:
        summary["methods"][name] = entry
        per_seed[name] = records[name]
  faults = {name: message for s, _ in runs for name, message in (s.get("faults") or {}).items()
            if name not in summary["methods"]}  # a row one run lost to a fault and no other run holds
  summary.pop("faults", None)
  if faults:
    summary["faults"] = faults
  return summary, per_seed


def pool_outputs(runs) -> tuple:
  """One ``(summary, per_seed)`` from runs of one federation that hold other seeds (on a CPU a full-size run is
  often one seed per invocation): every method's records of every seed any run holds of it (the first run that
  holds a method's seed wins, as :func:`merge_outputs` keeps the first run's rows), and its entry re-aggregated
  over them with :func:`fedjax_sim.summarize.seed_statistics`, as :func:`select_seeds` does. The seeds are every
  run's, in the order they first appear. A method that lacks some of them is aggregated over the seeds it has
  and named under ``seed_gaps`` (with the fault a run recorded for it, if any), which the report prints below its
  table. The first run's ``timing`` is kept as it is.

  Raises:
    ValueError: when the runs differ in data or federation, or one is a sweep (its grid points are not pooled).
  """
  first = runs[0][0]
  for i, (other, _) in enumerate(runs, start=1):
    if _federation(other) != _federation(first):
      raise ValueError(f"run {i} has other data or federation than run 1; pooling seeds takes runs of one "
                       "federation")
    if any("grid" in entry for entry in other.get("methods", {}).values()):
      raise ValueError(f"run {i} is a sweep, whose grid points --pool-seeds does not pool; pass --seeds to compare "
                       "runs on the seeds they share")
  seeds = []
  for other, _ in runs:
    seeds += [s for s in other.get("config", {}).get("seeds", []) if s not in seeds]
  entries, held = {}, {}
  for other, records in runs:
    for name, entry in other.get("methods", {}).items():
      entries.setdefault(name, entry)
      for r in records.get(name, []):
        held.setdefault(name, {}).setdefault(r["seed"], r)
  metric = first.get("metric", "auroc")
  faults = {name: message for other, _ in runs for name, message in (other.get("faults") or {}).items()}
  methods, per_seed, gaps = {}, {}, {}
  for name, entry in entries.items():
    have = [s for s in seeds if s in held.get(name, {})]
    methods[name], per_seed[name] = _seed_subset(entry, list(held.get(name, {}).values()), have, metric)
    if len(have) < len(seeds):
      gaps[name] = {"missing": [s for s in seeds if s not in have], **({"fault": faults[name]} if name in faults
                                                                         else {})}
  summary = {k: v for k, v in first.items() if k not in ("faults", "seed_gaps")}
  summary.update(config={**first.get("config", {}), "seeds": seeds}, methods=methods)
  lost = {name: message for name, message in faults.items() if name not in methods}
  if lost:
    summary["faults"] = lost
  if gaps:
    summary["seed_gaps"] = gaps
  return summary, per_seed


def _named(path, fn, *args):
  """``fn(*args)``, with a ValueError's message led by the run folder it concerns."""
  try:
    return fn(*args)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None


def main(argv=None) -> int:
  """Re-renders a report of finished runs from their outputs (no simulation): ``REPORT.md`` and its figures are
  written into the (first) run's folder, or ``--into``, and the Markdown printed."""
  import argparse
  import sys

  from fedjax_sim.algorithms.registry import reports
  from fedjax_sim.outputs import write_report
  choices = sorted(reports())
  parser = argparse.ArgumentParser(prog="python -m fedjax_sim.report",
                                   description="Write a paper's tables and figures from a finished run's outputs.")
  parser.add_argument("out", nargs="+", help="the run's output folder (its --out); several runs of one federation "
                      "and seeds are merged, the first one's rows first")
  parser.add_argument("--report", default="", help=f"one of: {', '.join(choices)} (default: the run's config)")
  parser.add_argument("--into", default="", help="where to write (default: the first run's folder)")
  parser.add_argument("--seeds", default="", help="comma-separated seeds: report only these, every method "
                      "re-aggregated over them (merges runs of different seeds on the ones they share)")
  parser.add_argument("--pool-seeds", action="store_true", help="pool runs of one federation that hold other seeds "
                      "(one seed per invocation): every method over every seed any run holds of it")
  args = parser.parse_args(argv)
  out_dir = pathlib.Path(args.into or args.out[0])
  try:
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else None
  except ValueError:
    print(f"error: --seeds takes comma-separated integers, e.g. 42,123 (got {args.seeds!r})", file=sys.stderr)
    return 2
  if seeds is not None and not seeds:
    print("error: --seeds names no seed; pass comma-separated integers, e.g. 42,123", file=sys.stderr)
    return 2
  if seeds is not None and args.pool_seeds:
    print("error: --seeds and --pool-seeds do not combine; pass --seeds to compare runs on seeds they share, or "
          "--pool-seeds to pool every run's seeds", file=sys.stderr)
    return 2
  try:
    runs = [load_outputs(pathlib.Path(p)) for p in args.out]
    if seeds is not None:
      runs = [_named(p, select_seeds, *run, seeds) for p, run in zip(args.out, runs)]
    summary, per_seed = pool_outputs(runs) if args.pool_seeds else merge_outputs(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
  except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  name = args.report or summary.get("config", {}).get("report", "")
  if name not in choices:
    what = f"unknown report {name!r}" if name else "the run's config names no report"
    print(f"error: {what}; pass --report with one of: {', '.join(choices)}", file=sys.stderr)
    return 2
  files = write_report(out_dir, name, summary, per_seed)
  print((out_dir / f"{name}.md").read_text().rstrip())
  print(f"[fedjax_sim] wrote {', '.join(str(out_dir / f) for f in files)}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
