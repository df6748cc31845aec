"""Command line: ``python -m fedjax_sim.run EXPERIMENT [--rounds R] [--seeds 11,22] [--out DIR] [--set k=v ...]
[--sweep k=v1,v2 ...] [--devices N] [--checkpoint-every R] [--resume DIR] [--compile-workers N]
[--no-compile-cache] [--quiet | --progress]``.

Runs the named experiment from ``configs/``, prints a results table and writes
``OUT/summary.json`` plus ``OUT/METHOD/seed_S.json`` (SPEC §6). Bad input gets
one message on stderr, exit status 2, and no partial output; a numerical fault
(a non-finite loss or parameter) exits with status 3: the methods that finished are
written (``summary.json`` names the faulted ones under ``faults``), and nothing is
written when none did.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

from fedjax_sim.config import ConfigError, available_experiments, load_experiment, valid_keys
from fedjax_sim.errors import FedjaxSimError, NumericalFault
from fedjax_sim.outputs import (METRIC_LABELS, RESULTS_COLUMNS, _json_safe, _metric_of, results_table,  # noqa: F401
                                write_outputs)  # RESULTS_COLUMNS, results_table: re-exported

# 2 (issue 9): auroc_std is the sample std (ddof = 1; null with one seed, named by each method's "std"), and
# methods gain centers_scored, median_test_rows and small_test_centers. 1: auroc_std was np.std (ddof = 0).
# 3 (issue 10): a top-level "metric" names the task's metric, and the metric keys follow it (auroc_mean for the
# clinical task as before; accuracy_mean, accuracy_worst_mean, accuracy_client_std_mean for images and text);
# "federation" may hold "majority_rate"; a method family's declared keys (participation_jain, ...) and their list
# "declared" appear where the family reports them. Clinical entries are otherwise unchanged.
SCHEMA_VERSION = 3


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
  p.add_argument("--no-compile-cache", action="store_true",
                 help="do not read or write the persistent compilation cache (default: on, in "
                      "$FEDJAX_SIM_COMPILE_CACHE or ~/.cache/fedjax_sim/xla; FEDJAX_SIM_COMPILE_CACHE=0 also turns it off)")
  p.add_argument("--quiet", action="store_true", help="print only the results table (no log, no progress bar)")
  p.add_argument("--progress", action="store_true",
                 help="show progress even when stderr is not a terminal (a log, a batch job): a line at every 5 %% "
                      "of the rounds with the time per round, the time left and the mean validation metric")
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


def _checkpoints(args, out_dir: pathlib.Path, every, writer: bool):
  """The run's :class:`RunCheckpoints` (None without ``--checkpoint-every``), its folder checked for writing and,
  for a new run, for being empty (issue 9: before anything is built)."""
  if not every:
    return None
  from fedjax_sim.checkpoint import RunCheckpoints
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
  return ckpt


def _method_line(run, config, sweep, every, runs: int) -> str:
  """The log line of one finished method: its metric ± std over seeds (and worst client), compile and run time."""
  what = f"{len(config.seeds)} seeds" + (f" × {len(sweep.points)} grid points" if sweep else "")
  head = ""
  if not sweep:  # a sweep's entry is a grid; its table shows every point
    std = run.summary[f"{run.metric}_std"]  # NaN with one seed (sample std)
    spread = f" ± {std:.4f}" if std == std else " (one seed)"
    worst = run.summary.get(f"{run.metric}_worst_mean")
    head = (f"{METRIC_LABELS.get(run.metric, run.metric)} {run.summary[f'{run.metric}_mean']:.4f}{spread}"
            + (f", worst client {worst:.4f}" if worst is not None else "") + "; ")
  return (f"[fedjax_sim] {run.name}: {head}{what} in one compiled {'chunk program' if every else 'call'} "
          f"({run.traces} trace); compile {run.compile_s:.1f} s, run {run.run_s:.2f} s "
          f"({run.run_s / config.rounds:.3f} s per round for all {runs} runs)")


def _summary(config, sweep, federation, methods: dict, metric: str, wall_s: float) -> dict:
  """summary.json (SPEC §6; the schema is :data:`SCHEMA_VERSION`)."""
  import dataclasses

  import jax

  from fedjax_sim.build import majority_rate
  floor = majority_rate(federation)
  return _json_safe({
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


def _print_results(summary: dict, config, sweep, out_dir, log) -> None:
  if config.report and not sweep and (out_dir / f"{config.report}.md").exists():
    print((out_dir / f"{config.report}.md").read_text().rstrip())
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


def main(argv=None) -> int:
  """Checks every input (config, seeds, sweep, devices, output folders, then the federation against each method),
  runs the methods (compiling ahead), writes the outputs atomically and prints the table."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
  try:
    if args.resume is not None:
      args = _resumed_args(args)
    if args.experiment is None:
      raise ConfigError("name an experiment (one of: " + ", ".join(available_experiments()) +
                        ") or give --resume DIR")
    config = load_experiment(args.experiment, overrides_from_args(args))
    from fedjax_sim.sweep import parse_sweep, point_configs
    sweep = parse_sweep(args.sweeps, config)
    devices = _int_flag("--devices", args.devices)
    every = _int_flag("--checkpoint-every", args.checkpoint_every)
    workers = _int_flag("--compile-workers", args.compile_workers, minimum=0)
    if args.checkpoint_dir is not None and not every:
      raise ConfigError("--checkpoint-dir needs --checkpoint-every R")
    if args.quiet and args.progress:
      raise ConfigError("--quiet prints no progress; drop --quiet or --progress")
    out_dir = pathlib.Path(args.out or f"runs/{config.name}")

    from fedjax_sim import _xla_flags
    _xla_flags.apply()  # before JAX's backend starts (fedjax_sim/_xla_flags.py; import fedjax_sim did it too)
    import jax
    if args.distributed:
      jax.distributed.initialize()
    from fedjax_sim import compile_cache
    cache_dir = compile_cache.enable(compile_cache.resolve(args.no_compile_cache))  # before anything compiles
    from fedjax_sim.algorithms.registry import preset
    from fedjax_sim.config import config_for_method
    from fedjax_sim.engine.placement import make_placement
    from fedjax_sim import experiment
    from fedjax_sim.progress import wanted
    for name in config.methods:  # every grid point of every method is valid before anything is written
      point_configs(config_for_method(config, preset(name)), sweep)
    make_placement(1, 1, devices)  # the device count is available
    writer = jax.process_index() == 0  # only process 0 writes outputs and checkpoints
    if writer:
      check_writable(out_dir, "--out")  # before anything is built, compiled or written (issue 9)
    ckpt = _checkpoints(args, out_dir, every, writer)
    options = experiment.RunOptions(sweep=sweep, devices=devices, checkpoint_every=every or 0, checkpoints=ckpt,
                                    progress=wanted(args.quiet, forced=args.progress))
    grid = f"; sweep {len(sweep.points)} grid points ({' × '.join(sweep.keys)})" if sweep else ""
    log(f"[fedjax_sim] {config.name}: methods {', '.join(config.methods)}; {config.rounds} rounds; "
        f"seeds {', '.join(map(str, config.seeds))}{grid}; backend {jax.default_backend()} "
        f"({jax.device_count()} × {jax.devices()[0].device_kind}); compile cache "
        f"{cache_dir or 'off'}")
    t0 = time.perf_counter()
    federation = experiment.build_federation(config, warn=lambda m: print(m, file=sys.stderr))
    experiment.check_runnable(config, federation, sweep)  # each method's (and grid point's) smallest federation
    log(f"[fedjax_sim] federation: {federation.num_clients} clients, {federation.num_features} features, "
        f"{int(federation.n_train.sum())} train rows, {len(federation.buckets)} size buckets "
        f"(padded/useful steps {federation.padded_step_ratio(config.learner.batch_size):.2f}); "
        f"built in {time.perf_counter() - t0:.1f} s")
    if ckpt is not None and args.resume is None:  # the first thing written: every input has been checked
      _barrier("fedjax_sim checkpoint dir checked")
      if writer:
        args.devices = str(devices or jax.device_count())  # a resumed run must lay out the same runs
        args.out = str(out_dir.resolve())  # a resumed run writes where this one would have
        ckpt.write_manifest(_invocation(args))
    if ckpt is not None:
      log(f"[fedjax_sim] checkpoints every {every} rounds in {ckpt.dir} (continue with --resume {ckpt.dir})")
    methods, per_seed, pending, metric = {}, {}, [], None
    for name in config.methods:
      record = ckpt.done(name) if ckpt is not None else None
      if record is not None:
        log(f"[fedjax_sim] {name}: finished before the interruption (results from {ckpt.dir})")
        methods[name], per_seed[name] = record["summary"], record["per_seed"]
      else:
        pending.append(name)
    runs = len(config.seeds) * max(1, len(sweep.points))
    faults = {}  # a method that diverged costs its own row; the others still run and are written
    for run in experiment.run_methods(pending, config, federation, options, workers, keep_going=True):
      if isinstance(run, experiment.MethodFault):
        faults[run.name] = run.error
        log(f"[fedjax_sim] {run.name}: stopped by a numerical fault (the error follows the results); "
            "the other methods go on")
        continue
      metric = run.metric
      log(_method_line(run, config, sweep, every, runs))
      methods[run.name], per_seed[run.name] = _json_safe(run.summary), _json_safe(run.per_seed)
      if ckpt is not None and writer:
        ckpt.mark_done(run.name, {"summary": methods[run.name], "per_seed": per_seed[run.name]})
    if faults and not methods:  # nothing finished: nothing is written
      raise next(iter(faults.values()))
    methods = {name: methods[name] for name in config.methods if name in methods}  # the config's order
    summary = _summary(config, sweep, federation, methods, metric or _metric_of(methods), time.perf_counter() - t0)
    if faults:
      summary["faults"] = {name: str(e) for name, e in faults.items()}
    if writer:
      write_outputs(out_dir, summary, per_seed, config.report if not sweep else "")
      if ckpt is not None and not faults and getattr(args, "remove_checkpoints", args.checkpoint_dir is None):
        shutil.rmtree(ckpt.dir, ignore_errors=True)  # the default location lives inside OUT; the run is done
  except FedjaxSimError as e:
    print(f"error: {e}", file=sys.stderr)
    return getattr(e, "exit_code", 2)
  _print_results(summary, config, sweep, out_dir, log)
  for e in faults.values():  # after the table, so that the run's last lines name what is missing from it
    print(f"error: {e}", file=sys.stderr)
  return NumericalFault.exit_code if faults else 0


if __name__ == "__main__":
  sys.exit(main())
