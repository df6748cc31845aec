"""Command line: ``python -m fedjax_sim.run EXPERIMENT [--rounds R] [--seeds 11,22] [--out DIR] [--set k=v ...]
[--sweep k=v1,v2 ...] [--devices N] [--checkpoint-every R] [--resume DIR] [--compile-workers N]
[--quiet]``.

Runs the named experiment from ``configs/``, prints a results table and writes
``OUT/summary.json`` plus ``OUT/METHOD/seed_S.json`` (SPEC §6). Bad input gets
one message on stderr, exit status 2, and no partial output; a numerical fault
(a non-finite loss or parameter) exits with status 3.
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

# 2 (issue 9): auroc_std is the sample std (ddof = 1; null with one seed, named by each method's "std"), and
# methods gain centers_scored, median_test_rows and small_test_centers. 1: auroc_std was np.std (ddof = 0).
SCHEMA_VERSION = 2


def parse_args(argv):
  p = argparse.ArgumentParser(
      prog="python -m fedjax_sim.run",
      description="Run a fedjax_sim experiment (one compiled program per method, all seeds and grid points at once).")
  p.add_argument("experiment", nargs="?", default=None,
                 help="experiment name, one of: " + ", ".join(available_experiments()))
  p.add_argument("--rounds", type=str, default=None, help="communication rounds (overrides the config)")
  p.add_argument("--seeds", type=str, default=None, help="comma-separated seeds, e.g. 11,22,33")
  p.add_argument("--out", type=str, default=None, help="output directory (default runs/EXPERIMENT)")
  p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                 help="override a config field, e.g. --set learner.learning_rate=3e-3 (repeatable)")
  p.add_argument("--sweep", dest="sweeps", action="append", default=[], metavar="KEY=V1,V2,...",
                 help="sweep a numeric hyperparameter inside one compiled program, e.g. --sweep kappa=1,2,3 "
                      "(repeatable: the grid is the product)")
  p.add_argument("--devices", type=str, default=None,
                 help="shard over this many of the visible devices (default: all of them)")
  p.add_argument("--checkpoint-every", type=str, default=None, metavar="R",
                 help="save the whole simulation state every R rounds (orbax), running R rounds per call")
  p.add_argument("--checkpoint-dir", type=str, default=None,
                 help="where checkpoints go (default OUT/checkpoints)")
  p.add_argument("--resume", type=str, default=None, metavar="DIR",
                 help="continue a checkpointed run from its checkpoint directory")
  p.add_argument("--distributed", action="store_true",
                 help="call jax.distributed.initialize() first (one process per host; see README)")
  p.add_argument("--compile-workers", type=str, default=None, metavar="N",
                 help="compile up to N methods at once, ahead of the one running (default: half the CPU cores, "
                      "at most 8; 0: compile each method just before it runs)")
  p.add_argument("--quiet", action="store_true", help="print only the results table (no log, no progress bar)")
  return p.parse_args(argv)


def _int_flag(flag: str, value, minimum: int = 1):
  """An integer flag of at least ``minimum``, 1 or 0 (None when not given)."""
  if value is None:
    return None
  try:
    v = int(value, 10)
  except ValueError:
    v = minimum - 1
  if v < minimum:
    kind = "a positive integer" if minimum == 1 else "a non-negative integer"
    raise ConfigError(f"{flag} must be {kind}, got {value!r}")
  return v


def check_writable(path, flag: str) -> None:
  """Refuses an output folder that cannot be created and written, before anything runs (issue 9).

  The results are written at the end of a run (``write_outputs`` stages them in
  ``path``'s parent, creating missing folders), so this checks now, leaving
  nothing behind: ``path`` must be a folder if it exists, the nearest existing
  ancestor of its parent must be a folder (not a file), and a probe file must
  be creatable (then removed) there and in ``path`` itself when it exists.

  Raises:
    ConfigError: naming ``flag``, the path and why.
  """
  path = pathlib.Path(path)
  try:  # Path.exists() itself raises PermissionError below a folder that cannot be searched
    if path.exists() and not path.is_dir():
      raise ConfigError(f"{flag} {path}: exists and is not a folder")
    ancestor = path.parent.absolute()  # where write_outputs stages (``--out .``: the current folder)
    while not ancestor.exists() and ancestor != ancestor.parent:  # what will be created with mkdir(parents=True)
      ancestor = ancestor.parent
    if not ancestor.is_dir():
      raise ConfigError(f"{flag} {path}: cannot create it, {ancestor} is a file, not a folder")
    folders = [ancestor] + ([path] if path.exists() else [])
  except OSError as e:
    raise ConfigError(f"{flag} {path}: cannot look there ({e.strerror or e}: {e.filename or path})") from None
  for folder in folders:
    try:
      fd, probe = tempfile.mkstemp(prefix=WRITE_PROBE, dir=folder)
      os.close(fd)
      os.remove(probe)
    except OSError as e:
      raise ConfigError(f"{flag} {path}: cannot write in {folder} ({e.strerror or e})") from None


WRITE_PROBE = ".fedjax_sim-write-check-"
"""Prefix of :func:`check_writable`'s probe files (removed at once; ignored when a folder is tested for emptiness)."""


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
                       scored, _fmt(e.get("median_test_rows"), "g"), f"{timing['compile_s']:.1f}",
                       f"{timing['run_s']:.1f}"]))
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
        stem = f"seed_{rec['seed']}" + (f"_point_{rec['grid_point']}" if "grid_point" in rec else "")
        (tmp / method / f"{stem}.json").write_text(json.dumps(rec, indent=1, allow_nan=False))
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


def _invocation(args) -> dict:
  """What ``--resume`` needs to repeat this command (stored in the checkpoint directory's run.json)."""
  return {"experiment": args.experiment, "sets": list(args.sets), "sweeps": list(args.sweeps),
          "rounds": args.rounds, "seeds": args.seeds, "out": args.out, "devices": args.devices,
          "checkpoint_every": args.checkpoint_every, "checkpoint_dir": args.checkpoint_dir}


def _barrier(name: str) -> None:
  """Waits for every process of a multi-host run (a no-op with one process)."""
  import jax
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def _resumed_args(args):
  """``args`` with the invocation stored in ``--resume DIR`` (the flags given now must agree with it)."""
  from fedjax_sim.checkpoint import RunCheckpoints
  if args.checkpoint_dir is not None:
    raise ConfigError("--resume DIR continues the run in DIR; drop --checkpoint-dir")
  stored = RunCheckpoints(args.resume).read_manifest()
  needed = ("experiment", "sets", "sweeps", "rounds", "seeds", "out", "devices", "checkpoint_every")
  missing = [k for k in needed if k not in stored]
  if missing:
    raise ConfigError(f"--resume {args.resume}: run.json lacks {', '.join(missing)}; it was not written by this "
                      f"version of fedjax_sim")
  for key in ("experiment", "rounds", "seeds", "out", "devices", "checkpoint_every"):
    given = getattr(args, key)
    if given is not None and given != stored[key]:
      raise ConfigError(f"--resume {args.resume}: the run was started with {key} = {stored[key]!r}, "
                        f"not {given!r}; drop the flag to continue it as it was started")
  for key in ("sets", "sweeps"):
    if getattr(args, key) and getattr(args, key) != stored[key]:
      raise ConfigError(f"--resume {args.resume}: the run was started with --{key[:-1]} {stored[key]}; "
                        f"a resumed run cannot change them")
  for key in ("experiment", "sets", "sweeps", "rounds", "seeds", "out", "devices", "checkpoint_every"):
    setattr(args, key, stored[key])
  args.checkpoint_dir = args.resume
  args.remove_checkpoints = stored.get("checkpoint_dir") is None  # it was the default, inside OUT
  return args


def main(argv=None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
  try:
    if args.resume is not None:
      args = _resumed_args(args)
    if args.experiment is None:
      raise ConfigError("name an experiment (one of: " + ", ".join(available_experiments()) +
                        ") or give --resume DIR")
    config = load_experiment(args.experiment, overrides_from_args(args))
    from fedjax_sim.sweep import parse_sweep
    sweep = parse_sweep(args.sweeps, config)
    devices = _int_flag("--devices", args.devices)
    every = _int_flag("--checkpoint-every", args.checkpoint_every)
    workers = _int_flag("--compile-workers", args.compile_workers, minimum=0)
    if args.checkpoint_dir is not None and not every:
      raise ConfigError("--checkpoint-dir needs --checkpoint-every R")
    out_dir = pathlib.Path(args.out or f"runs/{config.name}")
    import dataclasses

    import jax
    if args.distributed:
      jax.distributed.initialize()

    from fedjax_sim.checkpoint import RunCheckpoints
    from fedjax_sim.experiment import RunOptions, build_federation, check_runnable, run_methods
    from fedjax_sim.progress import wanted
    from fedjax_sim.algorithms.registry import preset
    from fedjax_sim.config import config_for_method
    from fedjax_sim.engine.placement import make_placement
    from fedjax_sim.sweep import point_configs
    for name in config.methods:  # every grid point of every method is valid before anything is written
      point_configs(config_for_method(config, preset(name)), sweep)
    make_placement(1, 1, devices)  # the device count is available
    writer = jax.process_index() == 0  # only process 0 writes outputs and checkpoints
    if writer:
      check_writable(out_dir, "--out")  # before anything is built, compiled or written (issue 9)
    ckpt = None
    if every:
      ckpt = RunCheckpoints(args.checkpoint_dir or out_dir / "checkpoints")
      if writer:
        check_writable(ckpt.dir, "--resume" if args.resume is not None else "--checkpoint-dir")
      if args.resume is None:
        if (ckpt.dir / "run.json").exists():
          raise ConfigError(f"{ckpt.dir} already holds a checkpointed run; continue it with --resume {ckpt.dir} "
                            f"or choose another --checkpoint-dir / --out")
        if ckpt.dir.exists() and any(not f.name.startswith(WRITE_PROBE) for f in ckpt.dir.iterdir()):
          raise ConfigError(f"{ckpt.dir} exists and is not empty; checkpoints need a directory of their own "
                            f"(choose another --checkpoint-dir / --out)")
    options = RunOptions(sweep=sweep, devices=devices, checkpoint_every=every or 0, checkpoints=ckpt,
                         progress=wanted(args.quiet))
    grid = f"; sweep {len(sweep.points)} grid points ({' × '.join(sweep.keys)})" if sweep else ""
    log(f"[fedjax_sim] {config.name}: methods {', '.join(config.methods)}; {config.rounds} rounds; "
        f"seeds {', '.join(map(str, config.seeds))}{grid}; backend {jax.default_backend()} "
        f"({jax.device_count()} × {jax.devices()[0].device_kind})")
    t0 = time.perf_counter()
    federation = build_federation(config, warn=lambda m: print(m, file=sys.stderr))  # refuses unscorable data
    check_runnable(config, federation, sweep)  # each method's (and grid point's) smallest federation, κ
    log(f"[fedjax_sim] federation: {federation.num_clients} clients, {federation.num_features} features, "
        f"{int(federation.n_train.sum())} train rows, {len(federation.buckets)} size buckets "
        f"(padded/useful steps {federation.padded_step_ratio(config.learner.batch_size):.2f}); "
        f"built in {time.perf_counter() - t0:.1f} s")
    if ckpt is not None and args.resume is None:  # the first thing written: every input has been checked
      _barrier("fedjax_sim checkpoint dir checked")
      if jax.process_index() == 0:
        args.devices = str(devices or jax.device_count())  # a resumed run must lay out the same runs
        args.out = str(out_dir.resolve())  # a resumed run writes where this one would have
        ckpt.write_manifest(_invocation(args))
    if ckpt is not None:
      log(f"[fedjax_sim] checkpoints every {every} rounds in {ckpt.dir} (continue with --resume {ckpt.dir})")
    methods, per_seed = {}, {}
    runs = len(config.seeds) * max(1, len(sweep.points))
    pending, runs_metric = [], None
    for name in config.methods:
      record = ckpt.done(name) if ckpt is not None else None
      if record is not None:
        log(f"[fedjax_sim] {name}: finished before the interruption (results from {ckpt.dir})")
        methods[name], per_seed[name] = record["summary"], record["per_seed"]
      else:
        pending.append(name)
    for run in run_methods(pending, config, federation, options, workers):
      name = run.name
      runs_metric = run.metric
      what = f"{len(config.seeds)} seeds" + (f" × {len(sweep.points)} grid points" if sweep else "")
      head = ""
      if not sweep:  # a sweep's entry is a grid; its table shows every point
        std = run.summary[f"{run.metric}_std"]  # NaN with one seed (sample std)
        spread = f" ± {std:.4f}" if std == std else " (one seed)"
        worst = run.summary.get(f"{run.metric}_worst_mean")
        head = (f"{METRIC_LABELS.get(run.metric, run.metric)} {run.summary[f'{run.metric}_mean']:.4f}{spread}"
                + (f", worst client {worst:.4f}" if worst is not None else "") + "; ")
      log(f"[fedjax_sim] {name}: {head}{what} in one compiled "
          f"{'chunk program' if every else 'call'} ({run.traces} trace); "
          f"compile {run.compile_s:.1f} s, run {run.run_s:.2f} s "
          f"({run.run_s / config.rounds:.3f} s per round for all {runs} runs)")
      methods[name] = _json_safe(run.summary)
      per_seed[name] = _json_safe(run.per_seed)
      if ckpt is not None and jax.process_index() == 0:
        ckpt.mark_done(name, {"summary": methods[name], "per_seed": per_seed[name]})
    methods = {name: methods[name] for name in config.methods}  # the config's order
    metric = runs_metric or _metric_of(methods)
    from fedjax_sim.experiment import majority_rate
    floor = majority_rate(federation)
    wall_s = time.perf_counter() - t0
    summary = _json_safe({
        "schema_version": SCHEMA_VERSION,
        "experiment": config.name,
        "metric": metric,
        "config": dataclasses.asdict(config),
        "sweep": {"keys": list(sweep.keys), "values": [list(v) for v in sweep.values]} if sweep else None,
        "federation": {"clients": federation.num_clients, "features": federation.num_features,
                       "train_rows": int(federation.n_train.sum()), "names": list(federation.names),
                       **({"majority_rate": floor} if floor is not None else {})},
        "backend": {"platform": jax.default_backend(), "device": jax.devices()[0].device_kind,
                    "device_count": jax.device_count()},
        "timing": {"compile_s": sum(m["timing"]["compile_s"] for m in methods.values()),
                   "run_s": sum(m["timing"]["run_s"] for m in methods.values()),
                   "wall_s": wall_s},
        "methods": methods,
    })
    if jax.process_index() == 0:
      write_outputs(out_dir, summary, per_seed, config.report if not sweep else "")
    if (ckpt is not None and jax.process_index() == 0
        and getattr(args, "remove_checkpoints", args.checkpoint_dir is None)):
      shutil.rmtree(ckpt.dir, ignore_errors=True)  # the default location lives inside OUT; the run is done
  except FedjaxSimError as e:
    print(f"error: {e}", file=sys.stderr)
    return getattr(e, "exit_code", 2)
  if config.report == "table1" and not sweep:
    from fedjax_sim.report import table1_markdown
    print(table1_markdown(summary))
  else:
    print(results_table(summary))
    floor = summary["federation"].get("majority_rate")
    if floor is not None:
      print(f"\nMost-frequent-label rate on the test rows (the floor to beat): {floor:.3f}")
  timing = summary["timing"]
  summed = (f"compile {timing['compile_s']:.1f} s and run {timing['run_s']:.1f} s summed over methods; "
            "compiles overlap runs" if len(summary["methods"]) > 1 else
            f"compile {timing['compile_s']:.1f} s, run {timing['run_s']:.1f} s")
  log(f"[fedjax_sim] wrote {out_dir / 'summary.json'}; wall clock {timing['wall_s']:.1f} s ({summed})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
