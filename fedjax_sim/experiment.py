"""Running an experiment: data → federation → one compiled program per method → summary (SPEC §6)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import sys
import time
import warnings
import weakref
from typing import Any, Callable, Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sim.algorithms.base import Algorithm
from fedjax_sim.algorithms.registry import (build_method, build_model, check_federation, hyper_from_config,
                                            preset)
from fedjax_sim.config import ExperimentConfig, config_for_method
from fedjax_sim.data.cohorts import Cohorts
from fedjax_sim.data.federation import Federation, from_cohorts, scorable_centers
from fedjax_sim.checkpoint import RunCheckpoints
from fedjax_sim.engine.placement import make_placement
from fedjax_sim.engine.simulate import Program, simulation_parts
from fedjax_sim.errors import ConfigError, DataError, NumericalFault
from fedjax_sim.metrics import fedavg_reference_bytes
from fedjax_sim.models import Model, num_params
from fedjax_sim.progress import Progress
from fedjax_sim.tasks import task_for
from fedjax_sim.sweep import Sweep, point_configs, point_label, structural_config


def load_cohorts(data) -> Cohorts:
  """The cohorts named by a :class:`~fedjax_sim.config.DataConfig` (nothing is downloaded).

  A CSV source passes ``data.categorical_columns``, ``data.feature_columns`` (empty: all),
  ``data.drop_columns`` and ``data.impute`` (``"none"``: no imputation) to
  :func:`~fedjax_sim.data.csv_sites.load_csv_sites`, which checks the columns against the file.
  """
  if data.source == "synthetic":
    from fedjax_sim.data.clinical import synthetic_clinical
    cohorts = synthetic_clinical(seed=data.data_seed, num_centers=data.num_centers, total_stays=data.total_stays)
  elif data.source == "mimic":
    from fedjax_sim.data.mimic import load_mimic_iv
    cohorts = load_mimic_iv(data.path)
  elif data.source == "csv":
    from fedjax_sim.data.csv_sites import load_csv_sites
    cohorts = load_csv_sites(data.path, data.site_column, data.label_column,
                             categorical_columns=tuple(data.categorical_columns),
                             feature_columns=tuple(data.feature_columns) or None,
                             drop_columns=tuple(data.drop_columns),
                             impute=None if data.impute == "none" else data.impute)
  else:  # validated earlier; kept for direct API use
    raise ConfigError(f"data.source must be synthetic, mimic or csv; got {data.source!r}")
  if data.partition != "natural":
    cohorts = repartition(cohorts, data)
  return cohorts


def repartition(cohorts: Cohorts, data) -> Cohorts:
  """Pools every site's rows and re-splits them IID or by Dirichlet(α) label skew (SPEC §2.2)."""
  from fedjax_sim.data import partition
  x = np.concatenate([s.x for s in cohorts.sites])
  y = np.concatenate([s.y for s in cohorts.sites])
  k = data.num_clients or len(cohorts.sites)
  if data.partition == "iid":
    return partition.iid_partition(data.data_seed, x, y, k, cohorts.feature_names, cohorts.continuous)
  return partition.dirichlet_partition(data.data_seed, x, y, k, data.dirichlet_alpha, cohorts.feature_names,
                                       cohorts.continuous)


def build_federation(config: ExperimentConfig, warn: Callable[[str], None] = print) -> Federation:
  """Loads the data and stacks the federation; warnings (e.g. dropped sites) go to ``warn``.

  Raises:
    DataError: besides the loaders' errors, data no center can be scored on (issue 9): a label
      with one value in every row, or no center with both classes in its test split (SPEC §3.1:
      such a center's AUROC is undefined), so every AUROC would be undefined.
  """
  from fedjax_sim.data.labeled import IMAGE_TEXT_SOURCES, labeled_federation
  if config.data.source in IMAGE_TEXT_SOURCES:
    return labeled_federation(config)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cohorts = load_cohorts(config.data)
    fed = from_cohorts(cohorts, seed=config.data.data_seed, batch_size=config.learner.batch_size,
                       num_buckets=config.learner.num_buckets, min_rows=config.data.min_site_rows)
  for w in caught:
    warn(f"warning: {w.message}")
  labels = np.concatenate([np.asarray(s.y, np.float64) for s in cohorts.sites])  # binary (validated)
  if labels.min() == labels.max():
    column = f" (data.label_column = {config.data.label_column!r})" if config.data.source == "csv" else ""
    raise DataError(f"the label{column} is {labels[0]:g} in every one of the {len(labels)} rows: AUROC needs "
                    f"both classes, so no center could be scored")
  if not scorable_centers(fed).any():
    raise DataError(f"no center can be scored: none of the {fed.num_clients} centers has both classes in its test "
                    f"split ({int(np.asarray(fed.m_test).sum())} test rows in all), so every AUROC would be undefined; "
                    f"merge small sites or raise data.min_site_rows")
  return fed


def majority_rate(federation: Federation) -> Optional[float]:
  """The accuracy of always predicting the most frequent training label (character), on the test rows of every
  client pooled: the floor an accuracy must rise above (issue 10: Shakespeare's most-frequent-character rate).
  None for the binary clinical task (scored by AUROC)."""
  if federation.task == "binary":
    return None
  counts = np.zeros(federation.num_classes, np.int64)
  for b in federation.buckets:
    valid = np.arange(b.y.shape[1]) < np.asarray(b.n)[:, None]
    counts += np.bincount(np.asarray(b.y)[valid].ravel(), minlength=federation.num_classes)
  top = int(np.argmax(counts))
  y, m = np.asarray(federation.y_test), np.asarray(federation.m_test)
  m = np.broadcast_to(m.reshape(m.shape + (1,) * (y.ndim - m.ndim)), y.shape)
  return float((y[m] == top).mean()) if m.any() else None


def check_runnable(config: ExperimentConfig, federation: Federation, sweep: Sweep = Sweep()) -> None:
  """Refuses, before anything compiles, a method or grid point that cannot run on ``federation``.

  Each method states the smallest federation it needs
  (:func:`fedjax_sim.algorithms.registry.check_federation`; issue 9): every
  method of ``config``, under its preset, at every grid point of ``sweep``.

  Raises:
    ConfigError: naming the method, what it needs and, with a sweep, the grid point.
  """
  for name in config.methods:
    points = point_configs(config_for_method(config, preset(name)), sweep)
    for point, cfg in zip(sweep.points if sweep else [None], points):
      try:
        check_federation(name, cfg, federation.num_clients)
      except ConfigError as e:
        if point is None:
          raise
        raise ConfigError(f"{e} (--sweep grid point {point_label(point)})") from None


def seed_keys(seeds) -> jax.Array:
  return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How a method's runs are executed (command-line options, not config)."""

  sweep: Sweep = Sweep()  # hyperparameter grid, run with the seeds as one program
  devices: Optional[int] = None  # devices to shard over (None: every visible device)
  checkpoint_every: int = 0  # save the state every this many rounds (0: one program, no checkpoints)
  checkpoints: Optional[RunCheckpoints] = None  # where (required when checkpoint_every > 0)
  progress: bool = False  # show a progress bar (host callback inside the program)


@dataclasses.dataclass
class MethodRun:
  """Host-side results of one method over all seeds (and grid points)."""

  name: str
  summary: dict  # the summary.json entry
  per_seed: list  # full per-seed records (per-center AUROC, curves)
  compile_s: float
  run_s: float
  traces: int
  metric: str = "auroc"  # the task's per-client metric


def _stack(trees):
  return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


def _pad_runs(tree, runs: int):
  """Pads the leading run axis to ``runs`` with copies of the last run (dropped afterwards)."""
  def pad(a):
    extra = runs - a.shape[0]
    return a if extra == 0 else jnp.concatenate([a, jnp.repeat(a[-1:], extra, axis=0)])
  return jax.tree_util.tree_map(pad, tree)


def _timed(fn, *args):
  t0 = time.perf_counter()
  out = fn(*args)
  return out, time.perf_counter() - t0


@dataclasses.dataclass
class PreparedMethod:
  """One method's runs, built and placed on the devices but not compiled yet.

  :func:`prepare_method` makes it, :meth:`compile` compiles its programs (safe to
  call from a worker thread: XLA compiles without holding the GIL, so several
  methods compile at once, or ahead of the method that is running), and
  :meth:`execute` runs and summarizes them. :func:`run_method` does all three.
  """

  name: str
  options: RunOptions
  federation: Federation  # host federation (names, for messages and summaries)
  points: list  # one config per grid point
  seeds: list
  algorithm: Algorithm
  model: Model
  program: Program
  keys: jax.Array  # [padded runs] on the devices
  fed: Federation  # the algorithm's prepared federation, on the devices
  hyper: Any
  bar: Optional[Progress]
  traces: dict
  metric: str = "auroc"  # the task's per-client metric (summary keys: auroc_mean, accuracy_mean, ...)

  @property
  def runs(self) -> int:
    return len(self.points) * len(self.seeds)

  def compile(self) -> "CompiledMethod":
    """Lowers and compiles every program the run needs (``run``, or ``start``/``advance``/``finish``
    for a checkpointed run, whose carry layout comes from the compiled ``start``)."""
    program, keys, fed, hyper = self.program, self.keys, self.fed, self.hyper
    t0 = time.perf_counter()
    if not self.options.checkpoint_every:
      run = program.run.lower(keys, fed, hyper).compile()
      return CompiledMethod(run=run, compile_s=time.perf_counter() - t0)
    start = program.start.lower(keys, fed, hyper).compile()
    shardings = start.output_shardings
    template = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                      jax.eval_shape(program.start, keys, fed, hyper), shardings)
    advance = program.advance.lower(template, fed, hyper, jnp.asarray(1, jnp.int32)).compile()
    finish = program.finish.lower(template, fed).compile()
    return CompiledMethod(start=start, advance=advance, finish=finish, template=template, shardings=shardings,
                          compile_s=time.perf_counter() - t0)

  def execute(self, compiled: "CompiledMethod") -> "MethodRun":
    """Runs the compiled programs and summarizes every seed and grid point (SPEC §6).

    Raises:
      NumericalFault: a run hit a non-finite loss or parameter (the message names
        the round, the method, the seed and the first affected center).
    """
    name, options = self.name, self.options
    if self.bar is not None:
      self.bar.open()
    try:
      if options.checkpoint_every:
        out, run_s = _run_checkpointed(name, self.program, compiled, self.keys, self.fed, self.hyper,
                                       options.checkpoints, self.bar)
      else:
        out, run_s = _timed(lambda: jax.block_until_ready(compiled.run(self.keys, self.fed, self.hyper)))
    finally:
      if self.bar is not None:
        self.bar.close()
    runs = self.runs
    out = jax.tree_util.tree_map(lambda a: a[:runs], _host(out.replace(state=None)))  # the summary needs no models
    check_faults(name, out.fault, self.seeds, options.sweep, self.federation, options.checkpoints,
                 self.algorithm.federated)
    summary, per_seed = summarize_grid(name, self.points, options.sweep, self.federation, self.model,
                                       self.algorithm, out, metric=self.metric)
    placement = self.program.placement
    summary["timing"] = {"compile_s": compiled.compile_s, "run_s": run_s, "devices": placement.num_devices,
                         "sharded_axis": placement.axis, "traces": self.traces["n"]}
    summary["preset"] = dict(preset(name))
    return MethodRun(name, summary, per_seed, compiled.compile_s, run_s, self.traces["n"], self.metric)


@dataclasses.dataclass
class CompiledMethod:
  """The compiled programs of a :class:`PreparedMethod` and how long compiling them took."""

  compile_s: float
  run: Any = None  # the whole run as one program (no checkpoints)
  start: Any = None  # checkpointed runs: start, one chunk of rounds, finish
  advance: Any = None
  finish: Any = None
  template: Any = None  # the carry's shapes, dtypes and shardings (what a checkpoint restores into)
  shardings: Any = None


def prepare_method(name: str, config: ExperimentConfig, federation: Federation,
                   options: RunOptions = RunOptions()) -> PreparedMethod:
  """Builds ``name``'s algorithm and its program for all seeds × grid points, and places the inputs."""
  config = config_for_method(config, preset(name))
  points = point_configs(config, options.sweep)
  for point in points:  # the smallest federation each grid point needs (issue 9)
    check_federation(name, point, federation.num_clients)
  static = structural_config(config, options.sweep)
  algorithm, model = build_method(name, static, federation)
  fed = algorithm.prepare(federation)
  seeds = list(config.seeds)
  runs = len(points) * len(seeds)
  keys = seed_keys([s for _ in points for s in seeds])  # run r = point r // S, seed r % S
  if options.sweep:
    hyper = _stack([hyper_from_config(c, name) for c in points for _ in seeds])
  else:
    hyper = hyper_from_config(config, name)
  placement = make_placement(runs, fed.num_clients, options.devices)
  padded = placement.padded_runs(runs)
  keys = placement.put_runs(_pad_runs(keys, padded))
  hyper = placement.put_runs(_pad_runs(hyper, padded)) if options.sweep else placement.put_replicated(hyper)
  fed = placement.put_replicated(fed)

  traces = {"n": 0}
  bar = Progress(name, static.rounds, runs) if options.progress else None
  task = task_for(static, federation)
  parts = simulation_parts(algorithm, model, static.rounds, task.score, task.score_rows)
  program = Program(parts, hyper_batched=bool(options.sweep), placement=placement,
                    chunk=options.checkpoint_every or None, on_round=bar.on_round if bar else None,
                    on_trace=lambda: traces.__setitem__("n", traces["n"] + 1))
  return PreparedMethod(name=name, options=options, federation=federation, points=points, seeds=seeds,
                        algorithm=algorithm, model=model, program=program, keys=keys, fed=fed, hyper=hyper,
                        bar=bar, traces=traces, metric=task.metric)


def run_method(name: str, config: ExperimentConfig, federation: Federation,
               options: RunOptions = RunOptions()) -> MethodRun:
  """Compiles one program for all seeds × grid points of ``name``, runs it, and summarizes (SPEC §6).

  Raises:
    NumericalFault: a run hit a non-finite loss or parameter (the message names
      the round, the method, the seed and the first affected center).
  """
  prepared = prepare_method(name, config, federation, options)
  return prepared.execute(prepared.compile())


def default_compile_workers(methods: int) -> int:
  """Methods compiled at once by :func:`run_methods`: half the host's cores (the other half runs the
  method in progress on a CPU backend), at least one, at most the methods still to compile."""
  return max(1, min(methods, (os.cpu_count() or 2) // 2, 8))


def run_methods(names, config: ExperimentConfig, federation: Federation, options: RunOptions = RunOptions(),
                workers: Optional[int] = None) -> Iterator[MethodRun]:
  """Runs several methods in order, compiling ahead: while one method runs, up to ``workers``
  worker threads prepare and compile the next ones (XLA compiles without the GIL). Yields each
  :class:`MethodRun` as it finishes. ``workers = 0``: no compiling ahead, each method is
  prepared and compiled just before it runs (:func:`run_method` one by one).

  The programs are the same either way. On CPU the results are bitwise those of
  :func:`run_method` (tested); on a GPU, XLA's autotuning of the next method's kernels shares
  the device with the method running, so it may pick other kernels (numbers equal up to float
  rounding) — ``workers = 0`` avoids that.

  At most ``workers`` methods are prepared ahead of the one running, so their inputs on the
  devices stay bounded, and a finished method's inputs and executables are dropped before the
  next one runs. Each method's ``compile_s`` is its own compile time (longer when compiles share
  the cores); the wall-clock time saved shows in the experiment's total. If a method fails, the
  error propagates at once; compiles already running finish in their threads before the process
  can exit (at most ``workers`` of them), those not started are dropped.
  """
  names = list(names)
  if not names:
    return
  workers = default_compile_workers(len(names)) if workers is None else max(0, int(workers))
  if workers == 0:
    for name in names:
      yield run_method(name, config, federation, options)
    return

  def prepare_and_compile(name):
    prepared = prepare_method(name, config, federation, options)
    return prepared, prepared.compile()

  pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fedjax_sim-compile")
  futures = {}

  def submit(i):
    if i < len(names):
      futures[i] = pool.submit(prepare_and_compile, names[i])

  try:
    for i in range(workers):
      submit(i)
    for i in range(len(names)):
      prepared, compiled = futures.pop(i).result()
      submit(i + workers)  # keep ``workers`` methods compiling or compiled ahead of this one
      run = prepared.execute(compiled)
      del prepared, compiled  # its inputs and executables can go before the next method runs
      yield run
  finally:  # on an error (or the caller stopping early) compiles not started are dropped
    for f in futures.values():
      f.cancel()
    pool.shutdown(wait=False, cancel_futures=True)


def _run_checkpointed(name, program: Program, compiled: CompiledMethod, keys, fed, hyper, ckpt: RunCheckpoints,
                      bar):
  """Runs ``program`` chunk by chunk, saving after each chunk and resuming from the latest save.

  The carry's layout over devices is fixed by the compiled ``start`` program: the chunk
  program is compiled for it, and a restored (or chunk-output) carry is put back on it before
  every chunk, so resuming on several devices meets the shardings the program expects.
  """
  shardings = compiled.shardings
  t_run = time.perf_counter()
  done = ckpt.latest_step(name)
  if done:
    carry = ckpt.restore(name, done, compiled.template)
    if bar is not None:
      bar.start_at(done)
  else:
    carry = compiled.start(keys, fed, hyper)
  while done < program.rounds:
    carry = jax.device_put(carry, shardings)  # a no-op unless restored or laid out otherwise
    carry = jax.block_until_ready(compiled.advance(carry, fed, hyper, jnp.asarray(done + 1, jnp.int32)))
    done = min(done + program.chunk, program.rounds)
    fault = np.asarray(_host(carry.fault.round))
    if np.any(fault > 0):  # keep the last good checkpoint; the fault is reported from ``out``
      break
    ckpt.save(name, done, carry)
  out = jax.block_until_ready(compiled.finish(jax.device_put(carry, shardings), fed))
  return out, time.perf_counter() - t_run


def _host(tree):
  """Host copies of (possibly multi-host sharded) arrays."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    tree = multihost_utils.process_allgather(tree, tiled=True)
  return jax.tree_util.tree_map(np.asarray, tree)


def check_faults(name, fault, seeds, sweep: Sweep, federation: Federation, ckpt: Optional[RunCheckpoints],
                 federated: bool = True):
  """Raises :class:`NumericalFault` for the first run (in run order) that hit a non-finite value."""
  rounds = np.asarray(fault.round)
  bad = np.flatnonzero(rounds > 0)
  if bad.size == 0:
    return
  r = int(bad[np.argmin(rounds[bad])])  # the earliest faulting round over runs
  seed = seeds[r % len(seeds)]
  where = f"seed {seed}"
  if sweep:
    where += f", grid point {point_label(sweep.points[r // len(seeds)])}"
  client = int(np.asarray(fault.client)[r])
  if not federated:
    center = "the pooled (centralized) model"
  elif client >= 0 and client < federation.num_clients:
    center = f"first affected center: {client} ({federation.names[client]!r})"
  else:
    center = "first affected center: not attributable to one center (a shared model went non-finite)"
  last = ""
  if ckpt is not None:
    step = ckpt.latest_step(name)
    last = (f" The last checkpoint ({step} rounds) in {ckpt.dir} stays loadable." if step else
            " No checkpoint was saved before the fault.")
  raise NumericalFault(
      f"non-finite loss or parameter in round {int(rounds[r])} of method {name} ({where}); {center}. "
      f"{int(bad.size)} of {rounds.size} runs were affected. Lower learner.learning_rate or check the data "
      f"for non-finite values.{last}")


def reference_rounds(config: ExperimentConfig, name: str) -> int:
  """R_ref of the bandwidth ratio (SPEC §3.4): the run's rounds, unless ``reference_rounds`` names
  another (the early-stopping rows ABPS-X and FedAvg-X use 50 while running up to 100)."""
  return config.reference_rounds or config.rounds


def summarize_grid(name, points, sweep: Sweep, federation, model, algorithm, out,
                   warn: Optional[Callable[[str], None]] = None, metric: str = "auroc"):
  """Summary entry of a method: as :func:`summarize` without a sweep; with one, a ``grid`` list of
  :func:`summarize` entries, each with its ``point`` (run ``g * S + s`` is point g, seed s)."""
  if not sweep:
    return summarize(name, points[0], federation, model, algorithm, out, warn, metric)
  s = len(points[0].seeds)
  grid, records = [], []
  for g, (point, cfg) in enumerate(zip(sweep.points, points)):
    part = jax.tree_util.tree_map(lambda a: a[g * s:(g + 1) * s], out)
    entry, per_seed = summarize(name, cfg, federation, model, algorithm, part, warn, metric)
    grid.append({"point": point, **entry})
    records += [{"grid_point": g, "point": point, **r} for r in per_seed]
  return {"sweep": {"keys": list(sweep.keys), "values": [list(v) for v in sweep.values],
                    "points": len(grid)}, "grid": grid}, records


# A scored center with fewer test rows than this gets a coarse AUROC; when most scored centers are
# that small, :func:`summarize` warns (issue 9).
SMALL_TEST_ROWS = 10
# How the across-seed spread is computed; written into every method entry of summary.json.
STD_KIND = "sample (ddof=1) across seeds; null with one seed"
_WARNED = weakref.WeakValueDictionary()  # (id(federation), message) -> federation, for warn-once


def _warn_once(federation, line: str) -> None:
  """Prints ``line`` on stderr once per federation (every method of a run shares one federation)."""
  try:
    key = (id(federation), line)
    if _WARNED.get(key) is federation:
      return
    _WARNED[key] = federation
  except TypeError:  # an object without weak references: print every time
    pass
  print(line, file=sys.stderr, flush=True)


def sample_std(values) -> float:
  """Sample standard deviation (ddof = 1) of ``values``; NaN (null in summary.json) for fewer than two.

  Decision (issue 9): papers' "mean ± std over seeds" is the sample std (paper 000 Table 1
  reports ± over 5 seeds, SPEC §3.1), so ddof = 1. One seed has no spread to estimate: NaN,
  written as null, rather than 0.0, which would read as "no variation".
  """
  values = np.asarray(values, np.float64)
  return float(np.std(values, ddof=1)) if values.size > 1 else float("nan")


def scored_centers_report(federation, test_auroc) -> dict:
  """How many centers were scored and how big their test splits are (issue 9).

  Args:
    federation: the host federation (``m_test [C, T]`` marks each center's test rows).
    test_auroc: ``[S, C]`` per-center test AUROC, NaN where undefined (a one-class test split).

  Returns:
    ``{"centers_scored", "median_test_rows", "small_test_centers"}``: centers with a defined
    AUROC in every seed, the median test-split size over them (None if none), and how many of
    them have fewer than :data:`SMALL_TEST_ROWS` test rows.
  """
  test_auroc = np.asarray(test_auroc, np.float64)
  scored = ~np.isnan(test_auroc).any(axis=0)  # [C]
  rows = np.asarray(federation.m_test).sum(axis=1)[scored]
  return {"centers_scored": int(scored.sum()),
          "median_test_rows": float(np.median(rows)) if rows.size else None,
          "small_test_centers": int((rows < SMALL_TEST_ROWS).sum())}


def small_test_warning(report: dict, num_clients: int) -> Optional[str]:
  """The ``warning: ...`` line when most scored centers have fewer than :data:`SMALL_TEST_ROWS` test rows."""
  scored, small = report["centers_scored"], report["small_test_centers"]
  if scored == 0 or 2 * small <= scored:
    return None
  return (f"warning: {small} of the {scored} scored centers (of {num_clients}) have fewer than {SMALL_TEST_ROWS} "
          f"test rows (median {report['median_test_rows']:g}); a per-center AUROC from so few rows is coarse and "
          "the mean over centers is noisy. Larger sites (raise data.min_site_rows, or merge sites) give "
          "steadier figures")


def _declared(name: str, extra, seed: int, active) -> dict:
  """Seed ``seed``'s summary entries from its method family's declared reduction of ``RoundMetrics.extra``."""
  from fedjax_sim.algorithms.registry import spec_of
  reduce = spec_of(name).metrics if name in _known_methods() else None
  if reduce is None or extra is None:
    return {}
  return reduce(jax.tree_util.tree_map(lambda a: np.asarray(a)[seed], extra), active)


def _known_methods() -> tuple:
  from fedjax_sim.algorithms.registry import METHODS
  return METHODS


def _client_spread(metric: str, values, ok) -> dict:
  """Across-client spread of one seed's per-client metric: worst client and std (SPEC §4.4), for accuracy tasks.

  Decision: the clinical AUROC rows keep paper 000's mean over centers only (their per-seed records are unchanged
  by issue 10); accuracy tasks report the mean, the worst client and the std across clients (ddof = 0: the
  clients are the whole population, not a sample; :func:`fedjax_sim.metrics.across_clients`).
  """
  if metric == "auroc":
    return {}
  v = np.asarray(values, np.float64)[ok]
  if v.size == 0:
    return {f"{metric}_worst": float("nan"), f"{metric}_client_std": float("nan")}
  return {f"{metric}_worst": float(v.min()), f"{metric}_client_std": float(v.std())}


def summarize(name, config, federation, model, algorithm, out, warn: Optional[Callable[[str], None]] = None,
              metric: str = "auroc"):
  """Turns device outputs ``[S, ...]`` into the summary entry and per-seed records.

  The entry holds the mean and the sample std (ddof = 1, :func:`sample_std`) over seeds,
  the bandwidth ratio (SPEC §3.4; null only for a method that is not federated, i.e.
  Centralized; Local-only exchanges nothing: 0 bytes, ratio 0.0), and how many centers were
  scored with how many test rows (:func:`scored_centers_report`). When most scored centers have
  fewer than :data:`SMALL_TEST_ROWS` test rows, ``warn`` gets one ``warning: ...`` line
  (default: stderr, once per federation).
  """
  test = np.asarray(out.test_auroc, np.float64)  # [S, C] the task's metric per client (AUROC or accuracy)
  m = out.history.metrics
  bytes_ = np.asarray(m.bytes, np.float64).sum(axis=1)  # [S]
  active = np.asarray(m.active, np.float64)  # [S, R]
  rest = np.asarray(m.rest_fraction, np.float64)
  partners = np.asarray(m.mean_partners, np.float64)
  val_curve = np.asarray(out.history.val_auroc, np.float64)
  r_ref = reference_rounds(config, name)
  # The reference is fp32 FedAvg of the deterministic MLP, whatever this method's model is (BNN+FL: 2×).
  reference_model = build_model(config, federation)
  p = num_params(jax.eval_shape(reference_model.init, jax.random.key(0)))
  ref = fedavg_reference_bytes(federation.num_clients, p, r_ref)
  per_seed = []
  for s, seed in enumerate(config.seeds):
    ok = ~np.isnan(test[s])
    act = active[s] > 0
    per_seed.append({
        "seed": int(seed),
        metric: float(test[s][ok].mean()) if ok.any() else float("nan"),
        **_client_spread(metric, test[s], ok),
        **_declared(name, m.extra, s, active[s]),
        "excluded_centers": int((~ok).sum()),
        "bytes": float(bytes_[s]) if algorithm.federated else None,
        "bandwidth_ratio": float(bytes_[s] / ref) if algorithm.federated else None,
        "rest_fraction": float(rest[s][act].mean()) if act.any() else 0.0,
        "mean_partners": float(partners[s][act].mean()) if act.any() else 0.0,
        "rounds_run": int(act.sum()),
        f"val_{metric}_curve": [float(v) for v in val_curve[s]],
        f"test_{metric}_per_center": [None if np.isnan(v) else float(v) for v in test[s]],
    })
  scores = np.array([r[metric] for r in per_seed])
  split = scored_centers_report(federation, test)
  line = small_test_warning(split, federation.num_clients)
  if line is not None:
    (warn or (lambda m: _warn_once(federation, m)))(line)
  declared = {k: float(np.mean([r[k] for r in per_seed])) for k in _declared(name, m.extra, 0, active[0])
              if isinstance(per_seed[0][k], float)}
  summary = {
      "seeds": [int(s) for s in config.seeds],
      **declared,
      f"{metric}_mean": float(np.mean(scores)),
      f"{metric}_std": sample_std(scores),
      **{f"{k}_mean": float(np.mean([r[k] for r in per_seed])) for k in _client_spread(metric, test[0], ~np.isnan(test[0]))},
      "std": STD_KIND,
      "bandwidth_ratio": float(np.mean([r["bandwidth_ratio"] for r in per_seed])) if algorithm.federated else None,
      "bytes": float(np.mean(bytes_)) if algorithm.federated else None,
      "rest_fraction": float(np.mean([r["rest_fraction"] for r in per_seed])),
      "mean_partners": float(np.mean([r["mean_partners"] for r in per_seed])),
      "rounds_run": int(np.max([r["rounds_run"] for r in per_seed])),
      "excluded_centers": int(max(r["excluded_centers"] for r in per_seed)),
      **split,
      "bandwidth_reference": {"rounds": r_ref, "bytes": ref, "params": p},
      "per_seed": [{k: v for k, v in r.items() if k not in (f"val_{metric}_curve", f"test_{metric}_per_center")}
                   for r in per_seed],
  }
  return summary, per_seed
