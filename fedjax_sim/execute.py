"""Executing an experiment: one compiled program per method for all seeds × grid points, compiled ahead in a
thread pool, optionally checkpointed; numerical faults reported with where they happened (SPEC §1, §6).

The second stage of :mod:`fedjax_sim.experiment`.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import os
import threading
import time
from typing import Any, Callable, Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sim import compile_cache, program_cache
from fedjax_sim import _xla_flags
from fedjax_sim.algorithms.base import Algorithm
from fedjax_sim.algorithms.registry import build_method, check_federation, hyper_from_config, preset, spec_of
from fedjax_sim.build import seed_keys
from fedjax_sim.checkpoint import RunCheckpoints
from fedjax_sim.config import ExperimentConfig, config_for_method
from fedjax_sim.data.federation import Federation, eval_plan
from fedjax_sim.engine.local import with_train_store
from fedjax_sim.engine.placement import make_placement
from fedjax_sim.engine.simulate import Program, simulation_parts
from fedjax_sim.errors import NumericalFault
from fedjax_sim.models import Model
from fedjax_sim.progress import Progress
from fedjax_sim.summarize import summarize_grid
from fedjax_sim.sweep import Sweep, point_configs, point_label, structural_config
from fedjax_sim.tasks import task_for


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How a method's runs are executed (command-line options, not config)."""

  sweep: Sweep = Sweep()  # hyperparameter grid, run with the seeds as one program
  devices: Optional[int] = None  # devices to shard over (None: every visible device)
  checkpoint_every: int = 0  # save the state every this many rounds (0: one program, no checkpoints)
  checkpoints: Optional[RunCheckpoints] = None  # where (required when checkpoint_every > 0)
  progress: bool = False  # show a progress bar (host callback inside the program, or between chunks: see below)


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


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused():
  """Python's cyclic garbage collector paused while programs trace, lower and compile (issue 11).

  Tracing a simulation allocates some 10⁵ tracked Python objects (jaxprs, tracers, MLIR handles), so the
  collector runs its generations over and over while the process's own heap (JAX, numpy, the federation) is
  scanned each time: about a fifth of ABPS-X's 2–3 s trace and lowering on 2 CPU cores. Nothing traced is a
  garbage cycle that must go at once; the collector resumes when the last pause ends (compiles ahead run in
  threads, so pauses nest and count) and collects what remains then. The programs are the same.
  """
  global _gc_pauses, _gc_was_enabled
  with _gc_lock:
    if _gc_pauses == 0:
      _gc_was_enabled = gc.isenabled()
      gc.disable()
    _gc_pauses += 1
  try:
    yield
  finally:
    with _gc_lock:
      _gc_pauses -= 1
      if _gc_pauses == 0 and _gc_was_enabled:
        gc.enable()


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
  compile_options: dict = dataclasses.field(default_factory=dict)  # XLA options of every program
  # (fedjax_sim._xla_flags.program_options)

  @property
  def runs(self) -> int:
    return len(self.points) * len(self.seeds)

  def compile(self) -> "CompiledMethod":
    """Lowers and compiles every program the run needs (``run``, or ``start``/``advance``/``finish``
    for a checkpointed run, whose carry layout comes from the compiled ``start``), with the garbage
    collector paused (:func:`gc_paused`)."""
    with gc_paused():
      return self._compile()

  def _compile(self) -> "CompiledMethod":
    program, keys, fed, hyper = self.program, self.keys, self.fed, self.hyper
    t0 = time.perf_counter()
    cached = self._program_cache()
    opts = self.compile_options
    if not self.options.checkpoint_every and program.chunk == program.rounds:
      run = cached("run", program._run, (keys, fed, hyper)) or program.run.lower(keys, fed, hyper).compile(opts)
      return CompiledMethod(run=run, compile_s=time.perf_counter() - t0, program_cache=program_cache.describe(run))
    start = cached("start", program._start, (keys, fed, hyper))
    if start is not None:
      template, shardings = start.out_template, start.output_shardings
    else:
      start = program.start.lower(keys, fed, hyper).compile(opts)
      shardings = start.output_shardings
      template = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                        jax.eval_shape(program.start, keys, fed, hyper), shardings)
    t1 = jnp.asarray(1, jnp.int32)
    advance = (cached("advance", program._advance, (template, fed, hyper, t1))
               or program.advance.lower(template, fed, hyper, t1).compile(opts))
    finish = (cached("finish", program._finish, (template, fed))
              or program.finish.lower(template, fed).compile(opts))
    return CompiledMethod(start=start, advance=advance, finish=finish, template=template, shardings=shardings,
                          compile_s=time.perf_counter() - t0, program_cache=program_cache.describe(advance))

  def _program_cache(self) -> Callable:
    """``cached(label, body, args)``: the program from :mod:`fedjax_sim.program_cache`, or None where that cache is
    off or cannot serve it (several devices, a host callback in the program, no compile cache)."""
    where = program_cache.folder()
    if where is None or self.program.placement.num_devices != 1 or self.program.on_round is not None:
      return lambda label, body, args: None
    # What decides the trace besides the source, the libraries and the arguments' types (program_cache's key).
    parts = (self.name, repr(self.points), repr(self.options.sweep), self.program.rounds, self.program.chunk,
             self.options.checkpoint_every, program_cache.array_digest(self.federation),
             sorted(self.compile_options.items()))
    return lambda label, body, args: program_cache.compile_program(body, args, (label,) + parts, where,
                                                                  self.compile_options)

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
      elif compiled.run is None:  # progress between chunks (the compile cache is on: no callback in the program)
        out, run_s = _run_chunked(self.program, compiled, self.keys, self.fed, self.hyper, self.bar)
      else:
        out, run_s = _timed(lambda: jax.block_until_ready(compiled.run(self.keys, self.fed, self.hyper)))
    finally:
      if self.bar is not None:
        self.bar.close()
    runs = self.runs
    out = jax.tree_util.tree_map(lambda a: a[:runs], _host(out.replace(state=None)))  # the summary needs no models
    check_faults(name, out.fault, self.seeds, options.sweep, self.federation, options.checkpoints,
                 self.algorithm.federated, self.algorithm.fault_hint)
    summary, per_seed = summarize_grid(name, self.points, options.sweep, self.federation, self.model,
                                       self.algorithm, out, metric=self.metric)
    placement = self.program.placement
    summary["timing"] = {"compile_s": compiled.compile_s, "run_s": run_s, "devices": placement.num_devices,
                         "sharded_axis": placement.axis, "traces": self.traces["n"],
                         "program_cache": compiled.program_cache}
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
  program_cache: str = "off"  # traced programs from disk: hit, miss or off (fedjax_sim.program_cache)


def prepare_method(name: str, config: ExperimentConfig, federation: Federation,
                   options: RunOptions = RunOptions()) -> PreparedMethod:
  """Builds ``name``'s algorithm and its program for all seeds × grid points, and places the inputs."""
  config = config_for_method(config, preset(name))
  points = point_configs(config, options.sweep)
  for point in points:  # the smallest federation each grid point needs (issue 9)
    check_federation(name, point, federation.num_clients)
  static = structural_config(config, options.sweep)
  algorithm, model = build_method(name, static, federation)
  fed = with_train_store(algorithm.prepare(federation))  # flat train rows for one-body training (issue 11)
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
  task = task_for(static, federation)
  bar = Progress(name, static.rounds, runs, metric=task.metric) if options.progress else None
  # A program with a host callback is never written to the persistent compile cache (jaxlib 0.10.2), so with the
  # cache on the bar moves between chunks of rounds (about 20 host round-trips in a run) instead of by a callback.
  chunk = options.checkpoint_every or None
  by_chunks = bar is not None and not chunk and compile_cache.active() is not None
  if by_chunks:
    chunk = progress_chunk(static.rounds)
  parts = simulation_parts(algorithm, model, static.rounds, task.score, task.score_rows,
                           client_curves=spec_of(name).client_curves,
                           eval_plans=(eval_plan(federation.m_val), eval_plan(federation.m_test)))
  program = Program(parts, hyper_batched=bool(options.sweep), placement=placement,
                    chunk=chunk, on_round=bar.on_round if bar and not by_chunks else None,
                    on_trace=lambda: traces.__setitem__("n", traces["n"] + 1))
  return PreparedMethod(name=name, options=options, federation=federation, points=points, seeds=seeds,
                        algorithm=algorithm, model=model, program=program, keys=keys, fed=fed, hyper=hyper,
                        bar=bar, traces=traces, metric=task.metric,
                        compile_options=_xla_flags.program_options(spec_of(name).cpu_options))


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


@dataclasses.dataclass
class MethodFault:
  """A method whose run hit a non-finite loss or parameter; :func:`run_methods` with ``keep_going`` yields it in
  the method's place (its results are not summarized: a diverged run has no figures to report)."""

  name: str
  error: NumericalFault


def run_methods(names, config: ExperimentConfig, federation: Federation, options: RunOptions = RunOptions(),
                workers: Optional[int] = None, keep_going: bool = False) -> Iterator[MethodRun | MethodFault]:
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
  can exit (at most ``workers`` of them), those not started are dropped. With ``keep_going``, a
  :class:`NumericalFault` (a run that diverged) is yielded as a :class:`MethodFault` and the next
  methods still run: one diverging preset of a seven-row table costs its own row, not the others'.
  """
  names = list(names)
  if not names:
    return
  workers = default_compile_workers(len(names)) if workers is None else max(0, int(workers))

  def guarded(name, run, *args):
    try:
      return run(*args)
    except NumericalFault as e:
      if not keep_going:
        raise
      return MethodFault(name, e)

  if workers == 0:
    for name in names:
      yield guarded(name, run_method, name, config, federation, options)
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
      run = guarded(names[i], prepared.execute, compiled)
      del prepared, compiled  # its inputs and executables can go before the next method runs
      yield run
  finally:  # on an error (or the caller stopping early) compiles not started are dropped
    for f in futures.values():
      f.cancel()
    pool.shutdown(wait=False, cancel_futures=True)


def progress_chunk(rounds: int, updates: int = 20) -> int:
  """Rounds per chunk when the progress bar moves between chunks: about ``updates`` updates in a run."""
  return max(1, -(-rounds // updates))


def _run_chunked(program: Program, compiled: CompiledMethod, keys, fed, hyper, bar):
  """Runs ``program`` chunk by chunk with no checkpoints, moving ``bar`` after each chunk (the same rounds, keys
  and arithmetic as the one-call program: results bitwise equal, tested)."""
  t_run = time.perf_counter()
  carry = compiled.start(keys, fed, hyper)
  done = 0
  while done < program.rounds:
    carry = compiled.advance(carry, fed, hyper, jnp.asarray(done + 1, jnp.int32))
    done = min(done + program.chunk, program.rounds)
    if bar is not None:
      bar.on_round(done, np.asarray(carry.history.val_auroc[:, done - 1]))
  out = jax.block_until_ready(compiled.finish(carry, fed))
  return out, time.perf_counter() - t_run


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
                 federated: bool = True, hint: str = ""):
  """Raises :class:`NumericalFault` for the first run (in run order) that hit a non-finite value; ``hint`` is the
  method's own advice (:attr:`Algorithm.fault_hint`), added after the generic one."""
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
      f"for non-finite values.{' ' + hint if hint else ''}{last}")
