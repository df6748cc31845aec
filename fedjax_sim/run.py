"""Command line: ``python -m fedjax_sim.run EXPERIMENT [--rounds R] [--seeds 11,22] [--out DIR] [--set k=v ...]``.

Runs the named experiment from ``configs/``, prints a results table and writes
``OUT/summary.json`` plus ``OUT/METHOD/seed_S.json`` (SPEC §6). Bad input gets
one message on stderr, exit status 2, and no partial output.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time

from fedjax_sim.config import ConfigError, available_experiments, load_experiment, valid_keys
from fedjax_sim.errors import FedjaxSimError

SCHEMA_VERSION = 1


def parse_args(argv):
  p = argparse.ArgumentParser(
      prog="python -m fedjax_sim.run",
      description="Run a fedjax_sim experiment (one compiled program per method, all seeds at once).")
  p.add_argument("experiment", help="experiment name, one of: " + ", ".join(available_experiments()))
  p.add_argument("--rounds", type=str, default=None, help="communication rounds (overrides the config)")
  p.add_argument("--seeds", type=str, default=None, help="comma-separated seeds, e.g. 11,22,33")
  p.add_argument("--out", type=str, default=None, help="output directory (default runs/EXPERIMENT)")
  p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                 help="override a config field, e.g. --set learner.learning_rate=3e-3 (repeatable)")
  p.add_argument("--quiet", action="store_true", help="print only the results table")
  return p.parse_args(argv)


def overrides_from_args(args) -> dict:
  out = {}
  for item in args.sets:
    if "=" not in item:
      raise ConfigError(f"--set expects KEY=VALUE, got {item!r}. Valid keys: {', '.join(valid_keys())}")
    k, v = item.split("=", 1)
    out[k.strip()] = v.strip()
  if args.rounds is not None:
    out["rounds"] = args.rounds
  if args.seeds is not None:
    out["seeds"] = args.seeds
  return out


def _fmt(v, spec):
  return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def results_table(summary: dict) -> str:
  """A Markdown table of the methods in ``summary``."""
  rows = ["| method | AUROC (mean ± std) | bandwidth ratio | rest fraction | E|P_i| | excluded | compile s | run s |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for name, m in summary["methods"].items():
    rows.append(
        f"| {name} | {m['auroc_mean']:.3f} ± {m['auroc_std']:.3f} | {_fmt(m['bandwidth_ratio'], '.2f')}× "
        f"| {m['rest_fraction']:.2f} | {m['mean_partners']:.2f} | {m['excluded_centers']} "
        f"| {m['timing']['compile_s']:.1f} | {m['timing']['run_s']:.1f} |")
  return "\n".join(rows)


def write_outputs(out_dir: pathlib.Path, summary: dict, per_seed: dict, report: str = "") -> None:
  """Writes everything to a temporary directory first, then moves it into place (no partial results).

  With ``report = "table1"`` it also writes ``table1.md``, ``ranking.png`` and ``pareto.png``.
  """
  out_dir.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
  try:
    for method, records in per_seed.items():
      (tmp / method).mkdir()
      for rec in records:
        (tmp / method / f"seed_{rec['seed']}.json").write_text(json.dumps(rec, indent=1, allow_nan=False))
    (tmp / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False))
    extra = []
    if report == "table1":
      from fedjax_sim.report import plot_figures, table1_markdown
      (tmp / "table1.md").write_text(table1_markdown(summary) + "\n")
      extra = ["table1.md"] + [p.name for p in plot_figures(summary, tmp)]
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


def _json_safe(obj):
  if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
    return None
  if isinstance(obj, dict):
    return {k: _json_safe(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_json_safe(v) for v in obj]
  return obj


def main(argv=None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
  try:
    config = load_experiment(args.experiment, overrides_from_args(args))
    out_dir = pathlib.Path(args.out or f"runs/{config.name}")
    import dataclasses

    import jax

    from fedjax_sim.experiment import build_federation, run_method
    log(f"[fedjax_sim] {config.name}: methods {', '.join(config.methods)}; {config.rounds} rounds; "
        f"seeds {', '.join(map(str, config.seeds))}; backend {jax.default_backend()} ({jax.devices()[0].device_kind})")
    t0 = time.perf_counter()
    federation = build_federation(config, warn=lambda m: print(m, file=sys.stderr))
    log(f"[fedjax_sim] federation: {federation.num_clients} clients, {federation.num_features} features, "
        f"{int(federation.n_train.sum())} train rows, {len(federation.buckets)} size buckets "
        f"(padded/useful steps {federation.padded_step_ratio(config.learner.batch_size):.2f}); "
        f"built in {time.perf_counter() - t0:.1f} s")
    methods, per_seed = {}, {}
    for name in config.methods:
      run = run_method(name, config, federation)
      log(f"[fedjax_sim] {name}: AUROC {run.summary['auroc_mean']:.4f} ± {run.summary['auroc_std']:.4f}; "
          f"{len(config.seeds)} seeds in one compiled call ({run.traces} trace); "
          f"compile {run.compile_s:.1f} s, run {run.run_s:.2f} s "
          f"({run.run_s / config.rounds:.3f} s per round for all seeds)")
      methods[name] = run.summary
      per_seed[name] = run.per_seed
    summary = _json_safe({
        "schema_version": SCHEMA_VERSION,
        "experiment": config.name,
        "config": dataclasses.asdict(config),
        "federation": {"clients": federation.num_clients, "features": federation.num_features,
                       "train_rows": int(federation.n_train.sum()), "names": list(federation.names)},
        "backend": {"platform": jax.default_backend(), "device": jax.devices()[0].device_kind,
                    "device_count": jax.device_count()},
        "timing": {"compile_s": sum(m["timing"]["compile_s"] for m in methods.values()),
                   "run_s": sum(m["timing"]["run_s"] for m in methods.values())},
        "methods": methods,
    })
    write_outputs(out_dir, summary, {k: _json_safe(v) for k, v in per_seed.items()}, config.report)
  except FedjaxSimError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if config.report == "table1":
    from fedjax_sim.report import table1_markdown
    print(table1_markdown(summary))
  else:
    print(results_table(summary))
  log(f"[fedjax_sim] wrote {out_dir / 'summary.json'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
