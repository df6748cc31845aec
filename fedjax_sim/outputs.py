"""What a run writes and prints: the results table (Markdown) and the output folder, written atomically (SPEC §6)."""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import tempfile


def _fmt(v, spec):
  """``format(v, spec)``, or ``"—"`` for None / NaN."""
  return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


RESULTS_COLUMNS = ("method", "AUROC (mean ± std)", "bandwidth ratio", "rest fraction", "E|P_i|",
                   "centers scored", "median test rows", "compile s", "run s")
METRIC_LABELS = {"auroc": "AUROC", "accuracy": "accuracy"}


def _metric_of(methods: dict) -> str:
  """The task metric of summary entries (``auroc`` unless an entry holds ``accuracy_mean``)."""
  for m in methods.values():
    for e in m.get("grid", [m]):
      if "accuracy_mean" in e:
        return "accuracy"
  return "auroc"


def results_table(summary: dict) -> str:
  """A Markdown table of the methods in ``summary`` (one row per grid point of a sweep).

  Every cell is escaped (``E\\|P_i\\|``), so each row has the header's columns; ± is the sample
  std over seeds ("—" with one seed); the bandwidth ratio keeps three significant digits below 0.1
  (:func:`fedjax_sim.report.format_ratio`); "centers scored" is scored / clients, with the median
  test-split size of the scored centers beside it (issue 9).
  """
  from fedjax_sim.report import format_mean_std, format_ratio, markdown_cell
  from fedjax_sim.sweep import point_label
  row = lambda cells: "| " + " | ".join(markdown_cell(c) for c in cells) + " |"  # noqa: E731
  metric = summary.get("metric", "auroc")
  spread = metric != "auroc"  # accuracy tasks: the worst client and the std across clients too (SPEC §4.4)
  columns = list(RESULTS_COLUMNS)
  columns[1] = f"{METRIC_LABELS.get(metric, metric)} (mean ± std)"
  if spread:
    columns[2:2] = ["worst client", "std across clients"]
  declared = []  # the method families' own summary keys (participation Jain, Gini, ...), in first-seen order
  for m in summary["methods"].values():
    for e in m.get("grid", [m]):
      declared += [k for k in e.get("declared", ()) if k not in declared]
  columns[-2:-2] = declared
  rows = [row(columns), row(["---"] * len(columns))]
  clients = summary.get("federation", {}).get("clients")
  for name, m in summary["methods"].items():
    timing = m["timing"]
    entries = [(name, m)] if "grid" not in m else [(f"{name} [{point_label(e['point'])}]", e) for e in m["grid"]]
    for label, e in entries:
      scored = _fmt(e.get("centers_scored"), "d") + (f"/{clients}" if clients is not None else "")
      extra = ([_fmt(e.get(f"{metric}_worst_mean"), ".3f"), _fmt(e.get(f"{metric}_client_std_mean"), ".3f")]
               if spread else [])
      rows.append(row([label, format_mean_std(e[f"{metric}_mean"], e[f"{metric}_std"])] + extra +
                      [format_ratio(e["bandwidth_ratio"]), f"{e['rest_fraction']:.2f}", f"{e['mean_partners']:.2f}",
                       scored, _fmt(e.get("median_test_rows"), "g")] + [_fmt(e.get(k), ".3f") for k in declared] +
                      [f"{timing['compile_s']:.1f}", f"{timing['run_s']:.1f}"]))
  return "\n".join(rows)


def write_outputs(out_dir: pathlib.Path, summary: dict, per_seed: dict, report: str = "") -> None:
  """Writes everything to a temporary directory first, then moves it into place (no partial results).

  With a ``report`` (a name some method family declares, :func:`~fedjax_sim.algorithms.registry.reports`) it
  also writes ``REPORT.md`` and the report's figures (``table1``: ``table1.md``, ``ranking.png``, ``pareto.png``).
  """
  out_dir.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
  try:
    for method, records in per_seed.items():
      (tmp / method).mkdir()
      for rec in records:
        stem = f"seed_{rec['seed']}" + (f"_point_{rec['grid_point']}" if "grid_point" in rec else "")
        (tmp / method / f"{stem}.json").write_text(json.dumps(rec, indent=1, allow_nan=False))
    (tmp / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False))
    extra = []
    if report:
      extra = write_report(tmp, report, summary, per_seed)
    out_dir.mkdir(exist_ok=True)
    for name in extra:
      os.replace(tmp / name, out_dir / name)
    for method in per_seed:
      if (out_dir / method).exists():
        shutil.rmtree(out_dir / method)
      os.replace(tmp / method, out_dir / method)
    os.replace(tmp / "summary.json", out_dir / "summary.json")
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def write_report(out_dir: pathlib.Path, report: str, summary: dict, per_seed: dict) -> list:
  """Writes report ``report``'s ``REPORT.md`` and figures into ``out_dir``; returns their file names."""
  from fedjax_sim.algorithms.registry import reports
  text, files = reports()[report](summary, per_seed, out_dir)
  if summary.get("faults"):  # rows a report would show but that diverged: say so where the table is read
    text += "\n\n### Not in the table: stopped by a numerical fault\n\n" + "\n".join(
        f"- {name}: {message}" for name, message in summary["faults"].items())
  if summary.get("seed_gaps"):  # pooled runs (python -m fedjax_sim.report --pool-seeds): rows over fewer seeds
    text += "\n\n### Rows over fewer seeds than the others\n\n" + "\n".join(
        f"- {name}: no seed {', '.join(map(str, gap['missing']))}" + (f" ({gap['fault']})" if gap.get("fault") else "")
        for name, gap in summary["seed_gaps"].items())
  (out_dir / f"{report}.md").write_text(text + "\n")
  return [f"{report}.md"] + [pathlib.Path(p).name for p in files]


def _json_safe(obj):
  if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
    return None
  if isinstance(obj, dict):
    return {k: _json_safe(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_json_safe(v) for v in obj]
  return obj
