"""The benchmarks of fedjax_sim, one entry point (issue 4, item 6; issue 11 items 4 and 5).

Usage:
  python benchmarks/bench.py --suite engine,seeds,centers,table1,images,fbsfl,ipfl [--rounds R] [--rounds2 R2]
                             [--loop-rounds 2] [--seeds-list 1,5,20,100] [--centers 230,1000,10000,100000]
                             [--json OUT.json] [--deadline EPOCH_S] [--record] [--quick]
  python benchmarks/bench.py --record-from A.json,B.json  # append saved runs' rows to RESULTS.md; run nothing
  python benchmarks/bench.py --print-from A.json,B.json   # print saved runs' tables
  bash benchmarks/device_check.sh                         # the H200 run (OUT=folder); see its header
  bash benchmarks/smoke.sh [OUTDIR]                       # smoke check: tiny suites + a CPU rehearsal of device_check.sh

Every engine figure is timed through the project's own API, i.e. what a user runs:
``fedjax_sim.experiment.run_method(name, config, federation, RunOptions())`` compiles one
program for all seeds and runs it as ONE compiled call. Its ``compile_s`` (trace + XLA
compile) is reported apart from ``run_s`` (the call, to the results on the host: the
method's init, the R rounds and the final evaluation); seconds per round = run_s / R. Early
stopping is switched off (``*.early_stopping_patience = 0``, applied after the method's
preset) so that every round does its work. Compiles are cold: JAX's persistent compile cache
is off unless ``BENCH_COMPILE_CACHE=DIR`` is set (rehearsals only: compile figures are then
cache loads for programs seen before; the JSON's ``compile_cache`` names the folder).

Suites
------
engine   FedAvg and ABPS-X (``--engine-methods``) on the default 230-center federation, 1 seed:
         engine seconds per round against per-client loops timed in the same run (one warm-up
         round, which pays the loop's compiles, then ``--loop-rounds`` timed rounds):
         * FedAvg JAX loop (:func:`time_fedavg_loop`): one jitted client update called in a
           Python loop over the 230 clients, then the n-weighted average;
         * FedAvg PyTorch loop (:func:`time_torch_fedavg_loop`, issue 11 item 4): the same MLP
           in PyTorch trained client after client, a fresh ``torch.optim.Adam`` per client per
           round, as FL papers' code does; on ``cuda`` when torch sees a GPU, else the CPU with one
           thread. Optional: without torch the entry says ``{"skipped": "torch not importable"}``;
         * ABPS-X loop (:func:`time_abps_x_loop`): what a user without ``vmap`` writes; see
           its docstring for the work it does per round.
         Speed-up = the loop's s/round over the engine's s/round.
seeds    FedAvg at 230 centers with 1, 5, 20 and 100 seeds (in ``--seeds-list`` order), each seed
         count one compiled call of R rounds (default 100): compile s, run s, s per round, s per
         seed, and the largest call's run time over the 1-seed call's (acceptance on one H200:
         100 seeds cost at most 10× one seed). That ratio includes fixed set-up costs (init, the
         final evaluation, the call's overhead), so each seed count also runs a second call of
         R2 rounds (``--rounds2``, default R/2; 2R when R = 1) and reports
         ``s_per_extra_round = (run_s(R2) − run_s(R1)) / (R2 − R1)``, the marginal cost of one
         round, and its ratio between the largest seed count and 1 seed. A round count is a
         scan length, so each (seeds, rounds) pair is its own program, compiled once; compile s
         is reported apart for both calls.
images   FedAvg on Fashion-MNIST (issue 10; ``benchmarks/image_suite.py``): K = 10 of N = 100 clients per round
         against a full round (Dirichlet(0.1) and IID splits: the K-of-N cost ratio), and the engine against a
         per-client loop over the same K clients, timed in the same run. Needs the Fashion-MNIST files
         (``--fmnist-path``, else ``$FMNIST_PATH``, else Debian's folder); without them the suite records a skip.
fbsfl    FBS-FL (issue 12; ``benchmarks/fbsfl_suite.py``): a round of the whole game (leader, followers, participants-
         only training, q-fair aggregation, beliefs, PPO every 16 rounds) against a FedAvg round at the same K (target
         ≤ 1.5×) and against its per-client loop, one seed, R = 16 rounds (``--rounds``); needs Fashion-MNIST.
ipfl     iPFL (issue 13; ``benchmarks/ipfl_bench.py``): the market (distance, Box 2 thresholds for all C² pairs,
         greedy graph, payments, utilities) for 1,000 clients in one call against the per-pair Python loop of the
         threshold solve, and an iPFL round against a FedAvg round on ``ipfl``'s federation (R = ``--rounds``,
         default 3; 200 local iterations); the rounds need Fashion-MNIST.
centers  FedAvg and ABPS (``abps_pq_k1_hom``: κ = 1, homogeneity goal filter, bf16 wire,
         1-layer head; ``abps.pool_size = 32`` above 1,000 centers) at 230, 1,000, 10,000 and
         100,000 centers (in ``--centers`` order). 230 is the default federation; from 1,000
         centers the cohorts are smaller (``data.total_stays = 30 × centers``,
         ``data.min_site_rows = 5``). Each size runs in its own subprocess (``--child``),
         FedAvg first, then ABPS, so that the peak memory is that size's; reported: federation
         build s, compile s, run s, s per round, peak memory. The child writes
         ``centers_<C>.json`` in ``--child-dir`` (default: the ``--json`` file's folder) after
         the build and after each method, and the parent merges that file, so a child killed by
         its timeout (or with its parent) keeps what it finished; ``--merge-centers`` (the
         device script's summary) merges files a killed parent left. A failure (out of memory,
         a timeout, a crash) is recorded for that size and the suite goes on.

table1   The whole ``table1`` experiment (paper 000 Table 1: 20 rows × 5 seeds, 50 rounds) as the CLI
         runs it, compiling the next rows in ``--compile-workers`` threads while one runs: wall
         clock from the first compile to the last row, each row's compile s and run s. A row that
         fails (a missing dependency, say) is recorded as ``{"error": ...}`` and the remaining rows
         run one at a time (:func:`run_method`), so later rows still get their figures. Not in the
         default suites (it takes long on a CPU); ``--table1-methods`` runs a subset.

Time limits: ``--deadline EPOCH_S`` (``time.time()`` seconds; the device script passes its step's
end) stops a suite from starting a sub-step with fewer than 10 s left (recorded under
``not_run``) and caps each centers child's timeout at the time left.

Peak memory: on an accelerator, the device allocator's ``peak_bytes_in_use``; on CPU the
process's max RSS. Neither can be reset, so a figure is the process's peak *so far*: in the
centers suite ABPS's figure also covers FedAvg's run before it in the same process (and the
federation), and in the seeds suite each seed count's figure covers the counts run before it.
``XLA_PYTHON_CLIENT_PREALLOCATE`` defaults to false here, so that the parent process does not
hold most of the GPU while a centers child runs.

Output: a table per suite on stdout; ``--json`` writes everything (machine, jax version,
date, every figure), rewritten after every step so that a run cut short keeps what it did;
``--record`` appends rows to benchmarks/RESULTS.md under one section per suite, the machine
named in each row. ``--quick``: tiny sizes for a smoke test (centers 230,1000; seeds 1,5;
2 rounds; 1 loop round).
"""
from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before jax is imported; see above

import argparse
import json
import math
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere, the package need not be installed
  sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from fedjax_sim import compile_cache  # noqa: E402

# Cold compiles unless BENCH_COMPILE_CACHE=DIR (rehearsals only, module docstring: compile figures become cache loads).
compile_cache.enable(os.environ.get("BENCH_COMPILE_CACHE") or None)

from fedjax_sim.algorithms.base import weighted_average  # noqa: E402
from fedjax_sim.algorithms.registry import build_method, build_model, hyper_from_config, preset  # noqa: E402
from fedjax_sim.config import config_for_method, load_experiment  # noqa: E402
from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update  # noqa: E402
from fedjax_sim.errors import ConfigError  # noqa: E402
from fedjax_sim.experiment import (  # noqa: E402
    RunOptions,
    build_federation,
    default_compile_workers,
    run_method,
    run_methods,
)
from fedjax_sim.metrics import auroc  # noqa: E402
from fedjax_sim.models.mlp import head_mask  # noqa: E402
from fedjax_sim.tasks import task_for  # noqa: E402

RESULTS = HERE / "RESULTS.md"
ABPS_SCALE = "abps_pq_k1_hom"  # the centers suite's ABPS: κ = 1 + homogeneity goal filter + bf16 + 1-layer head
NO_STOP = {"abps.early_stopping_patience": 0, "fedavg.early_stopping_patience": 0}


# --- machine and memory ------------------------------------------------------------------------------

def machine() -> str:
  """A one-line description of the machine that ran the benchmark (on an accelerator: its device kind)."""
  dev = jax.devices()[0]
  if dev.platform == "cpu":
    model = platform.processor() or "cpu"
    try:
      for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
    except OSError:
      pass
    return f"CPU: {model}, {os.cpu_count()} cores visible"
  return f"{dev.platform.upper()}: {dev.device_kind} ×{jax.device_count()}"


def peak_memory() -> dict:
  """The process's peak memory so far: the device allocator's peak on an accelerator, else max RSS."""
  dev = jax.devices()[0]
  stats = None
  try:
    stats = dev.memory_stats()
  except Exception:  # noqa: BLE001 - some backends do not implement it
    stats = None
  if stats and "peak_bytes_in_use" in stats:
    return {"bytes": int(stats["peak_bytes_in_use"]), "what": f"{dev.device_kind} peak_bytes_in_use (process, so far)",
            "device_limit_bytes": int(stats.get("bytes_limit", 0)) or None}
  # Linux keeps ru_maxrss across fork + exec, so a child would report its parent's peak;
  # VmHWM (the high-water mark of this process's own address space) does not carry over.
  try:
    for line in open("/proc/self/status"):
      if line.startswith("VmHWM:"):
        return {"bytes": int(line.split()[1]) * 1024, "what": "host peak RSS, VmHWM (process, so far)"}
  except OSError:
    pass
  kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
  return {"bytes": int(kib) * 1024, "what": "host max RSS (process, so far)"}


def fmt_bytes(b) -> str:
  if b is None:
    return "—"
  for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
    if b >= scale:
      return f"{b / scale:.2f} {unit}"
  return f"{b} B"


def ms(s) -> str:
  return "—" if s is None else f"{s * 1e3:.1f}"


def sec(s) -> str:
  return "—" if s is None else f"{s:.1f}"


# --- configs, federations, engine timing ---------------------------------------------------------------

def env_overrides(environ=os.environ) -> dict:
  """``BENCH_SET="key=value;key=value"``: config overrides for every engine config (a rehearsal's tiny federation,
  e.g. ``data.num_centers=12;data.total_stays=1800``); empty when unset. The suite's own per-size overrides win."""
  out = {}
  for item in filter(None, (part.strip() for part in environ.get("BENCH_SET", "").split(";"))):
    key, sep, value = item.partition("=")
    if not sep:
      raise SystemExit(f"error: BENCH_SET expects key=value items separated by ';', got {item!r}")
    out[key.strip()] = value.strip()
  return out


def make_config(rounds: int, seeds, extra=None):
  """The experiment config through the project's loader; overrides are re-applied after every method's preset."""
  overrides = {"rounds": rounds, "seeds": ",".join(str(s) for s in seeds), **NO_STOP, **env_overrides(),
               **(extra or {})}
  return load_experiment("fedavg", overrides)


def data_overrides(centers: int, stays_per_center: int) -> dict:
  """230 centers: the default federation; more: smaller cohorts (``stays_per_center`` stays per center)."""
  if centers == 230:
    return {}
  return {"data.num_centers": centers, "data.total_stays": stays_per_center * centers, "data.min_site_rows": 5}


def timed_federation(config):
  warnings = []
  t0 = time.perf_counter()
  fed = build_federation(config, warn=warnings.append)
  build_s = time.perf_counter() - t0
  if warnings:
    first = warnings[0] if len(warnings[0]) < 300 else warnings[0][:300] + "…"
    print(f"  ({len(warnings)} data warning(s); first: {first})", file=sys.stderr)
  return fed, build_s


def time_engine(method: str, config, fed) -> dict:
  """One ``run_method`` call: compile s, run s, s per round (run_s / R), rounds actually run."""
  run = run_method(method, config, fed, RunOptions())
  rounds = config_for_method(config, preset(method)).rounds
  return {"method": method, "rounds": rounds, "seeds": len(config.seeds), "compile_s": run.compile_s,
          "run_s": run.run_s, "s_per_round": run.run_s / rounds, "rounds_run": run.summary.get("rounds_run"),
          "auroc_mean": run.summary.get("auroc_mean"), "traces": run.traces}


# --- per-client loops ----------------------------------------------------------------------------------

def _clients(fed):
  """Per-client train arrays ``(x, y, n)`` in client order, sliced once out of the size buckets."""
  clients = []
  for b in fed.buckets:
    for pos in range(b.x.shape[0]):
      clients.append((int(b.client_idx[pos]), b.x[pos], b.y[pos], b.n[pos]))
  clients.sort(key=lambda c: c[0])
  return [c[1:] for c in clients]


def time_fedavg_loop(config, fed, rounds: int) -> dict:
  """FedAvg as a per-client loop: one jitted client update in a Python loop over clients (no vmap), then the
  n-weighted average. No per-round validation (the engine's learning curve is not computed), which only
  favours the loop. Returns the warm-up round (compiles, one per bucket shape, + one round) and s per round."""
  _, model = build_method("fedavg", config, fed)
  lc = config.learner
  update = jax.jit(make_client_update(task_for(config, fed).with_model(model), batch_size=lc.batch_size,
                                      epochs=lc.local_epochs))
  hyper = hyper_from_config(config, "fedavg")
  clients = _clients(fed)
  theta = model.init(jax.random.key(0))

  def one_round(theta, key):
    keys = jax.random.split(key, len(clients))
    out = [update(keys[i], theta, ClientData(x, y, n), ClientContext(shared=theta, hyper=hyper)).params
           for i, (x, y, n) in enumerate(clients)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *out)
    return weighted_average(stacked, fed.n_train)

  t0 = time.perf_counter()
  theta = jax.block_until_ready(one_round(theta, jax.random.key(1)))
  warmup_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for r in range(rounds):
    theta = one_round(theta, jax.random.key(2 + r))
  jax.block_until_ready(theta)
  return {"warmup_s": warmup_s, "rounds": rounds, "s_per_round": (time.perf_counter() - t0) / rounds}


def time_torch_fedavg_loop(config, fed, rounds: int, cpu_threads: int = 1) -> dict:
  """FedAvg in PyTorch, the per-client loop of FL papers' code (issue 11 item 4), on the same federation.

  One MLP with the engine's architecture (:class:`fedjax_sim.models.mlp.MLP`: ``learner.hidden`` widths, ReLU,
  dropout ``learner.dropout`` after each hidden ReLU, one logit; PyTorch's default init) trained client after
  client: the global weights loaded, a fresh ``torch.optim.Adam(lr, weight_decay)`` (the decay added to the
  gradient, as ``fedjax_sim.tasks.make_optimizer``'s ``add_decayed_weights`` before Adam), ``local_epochs``
  passes over the client's valid train rows (:func:`_clients`) in shuffled minibatches of ``batch_size`` (last
  one partial), BCE with logits; the server the n-weighted mean of the clients' weights. Data sits on the device
  from the start; ``cuda`` when ``torch.cuda.is_available()``, else the CPU with ``cpu_threads`` intra-op threads
  (default 1: the ops are tiny, more threads only wait on each other, and on a shared 2-core machine a 2-thread
  round took 65 s against 1.4 s; 0: torch's default). No per-round validation (as :func:`time_fedavg_loop`).
  Returns the warm-up round and s per round over ``rounds`` timed rounds, or ``{"skipped": "torch not
  importable"}``."""
  try:
    import torch
  except ImportError:
    return {"skipped": "torch not importable"}
  from fedjax_sim.models.mlp import num_params
  from fedjax_sim.tasks import learning_rate_at
  lc = config.learner
  dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
  if dev.type == "cpu" and cpu_threads:
    torch.set_num_threads(cpu_threads)
  torch.manual_seed(0)
  clients = _clients(fed)
  width, layers = int(clients[0][0].shape[-1]), []
  for h in lc.hidden:
    layers += [torch.nn.Linear(width, h), torch.nn.ReLU(), torch.nn.Dropout(lc.dropout)]
    width = h
  net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(dev)
  data = []
  for x, y, n in clients:
    n = int(n)
    data.append((torch.from_numpy(np.asarray(x)[:n].astype(np.float32)).to(dev),
                 torch.from_numpy(np.asarray(y)[:n].astype(np.float32)).to(dev)))
  n_train = np.array([len(y) for _, y in data], np.float64)
  weights = (n_train / n_train.sum()).tolist()
  glob = {k: v.detach().clone() for k, v in net.state_dict().items()}
  bce = torch.nn.functional.binary_cross_entropy_with_logits
  sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

  def one_round(glob, t):
    lr = float(learning_rate_at(lc.schedule, lc.learning_rate, lc.final_learning_rate, t, config.rounds))
    acc = None
    net.train()
    for (x, y), w in zip(data, weights):  # the per-client loop
      net.load_state_dict(glob)
      opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=lc.weight_decay)
      for _ in range(lc.local_epochs):
        perm = torch.randperm(len(y), device=dev)
        for b in range(0, len(y), lc.batch_size):
          idx = perm[b:b + lc.batch_size]
          opt.zero_grad(set_to_none=True)
          bce(net(x[idx])[:, 0], y[idx]).backward()
          opt.step()
      with torch.no_grad():
        sd = net.state_dict()
        acc = ({k: w * v.detach().clone() for k, v in sd.items()} if acc is None
               else {k: acc[k].add_(v, alpha=w) for k, v in sd.items()})
    return acc

  t0 = time.perf_counter()
  glob = one_round(glob, 1)
  sync()
  warmup_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for r in range(rounds):
    glob = one_round(glob, 2 + r)
  sync()
  s_per_round = (time.perf_counter() - t0) / rounds
  _, model = build_method("fedavg", config, fed)
  return {"warmup_s": warmup_s, "rounds": rounds, "s_per_round": s_per_round, "torch": torch.__version__,
          "device": str(dev) + (f" ({torch.cuda.get_device_name(0)})" if dev.type == "cuda" else ""),
          "threads": torch.get_num_threads(), "params": sum(p.numel() for p in net.parameters()),
          "engine_params": num_params(model.init(jax.random.key(0))),
          "finite": bool(all(torch.isfinite(v).all() for v in glob.values()))}


def goal_candidates(meta: np.ndarray, keep_fraction: float) -> np.ndarray:
  """C_i of the homogeneity goal filter in numpy, ``[C, C]`` bool: z-scored metadata, cosine, τ_sim = the
  (1 − keep_fraction) quantile over ordered pairs i ≠ j (as :mod:`fedjax_sim.algorithms.abps.goal_filter`)."""
  meta = np.asarray(meta, np.float64)
  sd = meta.std(axis=0)
  z = (meta - meta.mean(axis=0)) / np.where(sd > 1e-8, sd, 1.0)
  f = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-8)
  cos = f @ f.T
  off = ~np.eye(len(meta), dtype=bool)
  tau = np.quantile(cos[off], 1.0 - keep_fraction)
  return off & (cos >= tau)


def time_abps_x_loop(config, fed, rounds: int) -> dict:
  """ABPS-X as a per-client loop: what a user without ``vmap`` writes. Same work per round as the engine's
  ABPS-X round (κ = 1, 2-layer heads kept local, bf16 wire, homogeneity goal filter, momentum 0.5), not
  bit-identical to it (its own random streams):

  1. local training: one jitted client update (params flattened in and out) called in a Python loop over
     the clients;
  2. UCB_{i→j} = α/(α+β) + γ·sqrt(2 log t / (n_ij + 1)) in numpy, ``[C, C]``;
  3. propose–reject in numpy: centers propose in a random order, each down its ε-greedy UCB ranking of its
     goal-filtered candidates (computed once, as the engine does at init); the first candidate with a free
     slot (κ = 1) whose own UCB on the proposer is ≥ τ_acc accepts;
  4. per center, a Python loop: the aggregate with its partner (n-weighted, the partner's parameters through a
     bf16 round trip, heads kept local), the two coalition validation AUROCs U(∅) and U({partner}) with a
     jitted per-client evaluation (a resting center evaluates U(∅) only), exact Shapley for one partner
     φ = U({j}) − U(∅), the clipped Beta update (numpy);
  5. momentum on each center's aggregation delta (numpy), v ← βv + (agg − θ), θ ← θ + v;
  6. every center's validation AUROC of its new model (jitted per-client evaluation), the per-round check
     the engine also makes (early stopping / learning curve).
  Evaluations are dispatched first and read back together (JAX runs them asynchronously).
  """
  cfg = config_for_method(config, preset("abps_x"))
  a = cfg.abps
  model = build_model(cfg, fed, "abps_x")
  lc = cfg.learner
  client_update = make_client_update(task_for(cfg, fed).with_model(model), batch_size=lc.batch_size,
                                     epochs=lc.local_epochs)
  hyper = hyper_from_config(cfg, "abps_x")
  params0 = model.init(jax.random.key(0))
  flat0, unravel = ravel_pytree(params0)
  body, _ = ravel_pytree(jax.tree_util.tree_map(lambda h, p: jnp.full(p.shape, h), head_mask(params0, a.head_layers),
                                                params0))
  body = ~np.asarray(body, bool)  # sent and averaged entries
  # bf16 round trip in numpy (ml_dtypes' bfloat16, round to nearest even as XLA's convert).
  wire = (lambda v: v.astype(jnp.bfloat16).astype(np.float32)) if a.wire == "bf16" else (lambda v: v)

  @jax.jit
  def train_flat(key, flat, x, y, n):
    return ravel_pytree(client_update(key, unravel(flat), ClientData(x, y, n), ClientContext(hyper=hyper)).params)[0]

  @jax.jit
  def val_auroc(flat, x, y, m):
    return auroc(model.apply(unravel(flat), x, False, None)[0], y, m)

  clients = _clients(fed)
  c = len(clients)
  vals = [(fed.x_val[i], fed.y_val[i], fed.m_val[i]) for i in range(c)]
  n = np.asarray(fed.n_train, np.float64)
  cand = goal_candidates(np.asarray(fed.meta_goal if a.metadata == "goal" else fed.meta_base), a.keep_fraction)
  rng = np.random.default_rng(0)
  theta = np.tile(np.asarray(flat0, np.float32), (c, 1))  # [C, P]
  vel = np.zeros_like(theta)
  alpha = np.full((c, c), a.alpha0)
  beta = np.full((c, c), a.beta0)
  pulls = np.zeros((c, c))
  stats = {}

  def one_round(t, key):
    nonlocal theta, vel, alpha, beta, pulls
    keys = jax.random.split(key, c)
    trained = [train_flat(keys[i], jnp.asarray(theta[i]), x, y, nn) for i, (x, y, nn) in enumerate(clients)]
    th = np.stack([np.asarray(p) for p in trained])  # [C, P]
    ucb = alpha / (alpha + beta) + a.gamma * np.sqrt(2.0 * math.log(max(t, 1)) / (pulls + 1.0))
    partner = np.full(c, -1)
    for i in rng.permutation(c):
      if partner[i] >= 0:  # κ = 1: already taken as a receiver
        continue
      cands = np.flatnonzero(cand[i])
      if cands.size == 0:
        continue
      ranked = cands[np.argsort(-ucb[i, cands], kind="stable")]
      if cands.size > 1 and rng.random() < a.epsilon:
        s = rng.integers(cands.size)
        ranked[0], ranked[s] = ranked[s], ranked[0]
      ok = (partner[ranked] < 0) & (ucb[ranked, i] >= a.tau_acc)
      if ok.any():
        j = ranked[np.argmax(ok)]
        partner[i], partner[j] = j, i
    new = th.copy()
    u0, u1 = [], {}
    for i in range(c):
      u0.append(val_auroc(th[i], *vals[i]))
      j = partner[i]
      if j >= 0:
        agg = (n[i] * th[i] + n[j] * wire(th[j])) / (n[i] + n[j])
        new[i] = np.where(body, agg, th[i])
        u1[i] = val_auroc(new[i], *vals[i])
    u0 = np.nan_to_num(np.asarray(jnp.stack(u0)), nan=0.5)
    for i, u in u1.items():
      phi = float(np.nan_to_num(np.asarray(u), nan=0.5)) - u0[i]
      phi_bar = min(max((phi - a.phi_min) / (a.phi_max - a.phi_min), 0.0), 1.0)
      j = partner[i]
      alpha[i, j] += phi_bar
      beta[i, j] += 1.0 - phi_bar
      pulls[i, j] += 1.0
    vel = a.momentum * vel + (new - th)
    theta = (th + vel).astype(np.float32)
    val = np.asarray(jnp.stack([val_auroc(theta[i], *vals[i]) for i in range(c)]))
    stats.update(mean_partners=float(np.mean(partner >= 0)), val_auroc=float(np.nanmean(val)))

  t0 = time.perf_counter()
  one_round(1, jax.random.key(1))
  warmup_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for r in range(rounds):
    one_round(2 + r, jax.random.key(2 + r))
  return {"warmup_s": warmup_s, "rounds": rounds, "s_per_round": (time.perf_counter() - t0) / rounds, **stats}


# --- suites --------------------------------------------------------------------------------------------

class Recorder:
  """The whole result, rewritten to ``--json`` after every step."""

  def __init__(self, path):
    self.path = pathlib.Path(path) if path else None
    self.result = {"machine": machine(), "platform": jax.devices()[0].platform,
                   "device_kind": jax.devices()[0].device_kind, "device_count": jax.device_count(),
                   "jax": jax.__version__, "python": platform.python_version(),
                   "date": time.strftime("%Y-%m-%d"), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                   "argv": sys.argv[1:], "suites": {}}
    self.save()

  def save(self):
    if self.path:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      tmp = self.path.with_suffix(self.path.suffix + ".tmp")
      tmp.write_text(json.dumps(self.result, indent=1, default=str))
      tmp.replace(self.path)


def default_federation(cache: dict):
  if "fed" not in cache:
    config = make_config(1, [1])
    fed, build_s = timed_federation(config)
    cache["fed"], cache["build_s"] = fed, build_s
    print(f"federation: {fed.num_clients} centers, {int(np.asarray(fed.n_train).sum())} train rows, "
          f"padded/useful steps {fed.padded_step_ratio(config.learner.batch_size):.2f}; built in {build_s:.1f} s")
  return cache["fed"]


def time_left(args) -> float:
  """Seconds until ``--deadline`` (inf without one)."""
  return args.deadline - time.time() if getattr(args, "deadline", None) else math.inf


MIN_SUBSTEP_S = 10  # a sub-step is not started with less time than this before --deadline


def suite_engine(args, rec: Recorder, cache: dict):
  """Engine s/round against per-client loops (module docstring); each method's figures saved as they come."""
  fed = default_federation(cache)
  out = {"centers": fed.num_clients, "rounds": args.rounds_engine, "seeds": 1, "loop_rounds": args.loop_rounds,
         "methods": {}}
  rec.result["suites"]["engine"] = out
  config = make_config(args.rounds_engine, [1])
  loops = {"fedavg": time_fedavg_loop, "abps_x": time_abps_x_loop}
  methods = args.engine_methods
  for k, method in enumerate(methods):
    if time_left(args) < MIN_SUBSTEP_S:
      out["not_run"] = {"methods": methods[k:], "why": f"fewer than {MIN_SUBSTEP_S} s left before --deadline"}
      break
    print(f"[engine] {method}: engine, {args.rounds_engine} rounds …", flush=True)
    entry = {}
    out["methods"][method] = entry
    out["in_progress"] = f"{method} engine"
    rec.save()
    try:
      e = time_engine(method, config, fed)
      entry.update(engine=e)
      rec.save()
      for name, loop in (("loop", loops.get(method)), ("torch_loop", time_torch_fedavg_loop if method == "fedavg"
                                                         else None)):
        if loop is None:
          continue
        if time_left(args) < MIN_SUBSTEP_S:
          entry[name] = {"skipped": f"fewer than {MIN_SUBSTEP_S} s left before --deadline"}
          continue
        what = "PyTorch per-client loop" if name == "torch_loop" else "per-client loop"
        out["in_progress"] = f"{method} {what}"
        rec.save()
        print(f"[engine] {method}: {what}, 1 warm-up + {args.loop_rounds} timed round(s) …", flush=True)
        try:
          lp = loop(config, fed, args.loop_rounds)
        except Exception as err:  # noqa: BLE001 - record and go on (the other loop may still run)
          lp = {"error": failure(err)}
          print(f"[engine] {method} {what} failed: {lp['error']}", file=sys.stderr)
        entry[name] = lp
        if "s_per_round" in lp:
          entry["speedup" if name == "loop" else "speedup_over_torch"] = lp["s_per_round"] / e["s_per_round"]
        if "skipped" in lp:
          print(f"[engine] {method} {what}: skipped ({lp['skipped']})", flush=True)
        rec.save()
    except Exception as err:  # noqa: BLE001 - record and go on
      entry["error"] = failure(err)
      print(f"[engine] {method} failed: {entry['error']}", file=sys.stderr)
    rec.save()
  out.pop("in_progress", None)
  out["peak_memory"] = peak_memory()
  rec.save()
  print_engine(out)


def suite_seeds(args, rec: Recorder, cache: dict):
  """Seed counts in one compiled call each, plus a second call of ``rounds2`` rounds per seed count for the cost
  per extra round (module docstring). Each (seeds, rounds) pair is compiled once; compile s is reported apart."""
  fed = default_federation(cache)
  r1, r2 = args.rounds_seeds, args.rounds2
  out = {"method": "fedavg", "centers": fed.num_clients, "rounds": r1, "rounds2": r2 or None, "runs": []}
  rec.result["suites"]["seeds"] = out
  for k, s in enumerate(args.seeds_list):
    if time_left(args) < MIN_SUBSTEP_S:
      out["not_run"] = {"seeds": args.seeds_list[k:], "why": f"fewer than {MIN_SUBSTEP_S} s left before --deadline"}
      break
    print(f"[seeds] fedavg, {s} seed(s) × {r1} rounds in one call …", flush=True)
    out["in_progress"] = f"{s} seeds × {r1} rounds"
    entry = {"seeds": s}
    rec.save()
    try:
      e = time_engine("fedavg", make_config(r1, range(1, s + 1)), fed)
      entry.update(compile_s=e["compile_s"], run_s=e["run_s"], s_per_round=e["s_per_round"],
                   s_per_seed=e["run_s"] / s, s_per_seed_round=e["s_per_round"] / s)
    except Exception as err:  # noqa: BLE001
      entry["error"] = failure(err)
      print(f"[seeds] {s} seeds failed: {entry['error']}", file=sys.stderr)
    entry["peak_memory"] = peak_memory()
    out["runs"].append(entry)
    summarize_seeds(out)
    rec.save()
    if not r2 or "run_s" not in entry:
      continue
    if time_left(args) < MIN_SUBSTEP_S:
      entry["second"] = {"rounds": r2, "skipped": f"fewer than {MIN_SUBSTEP_S} s left before --deadline"}
      continue
    print(f"[seeds] fedavg, {s} seed(s) × {r2} rounds (the cost per extra round) …", flush=True)
    out["in_progress"] = f"{s} seeds × {r2} rounds"
    rec.save()
    try:
      e2 = time_engine("fedavg", make_config(r2, range(1, s + 1)), fed)
      entry["second"] = {"rounds": r2, "compile_s": e2["compile_s"], "run_s": e2["run_s"]}
      entry["s_per_extra_round"] = (e2["run_s"] - entry["run_s"]) / (r2 - r1)
    except Exception as err:  # noqa: BLE001
      entry["second"] = {"rounds": r2, "error": failure(err)}
      print(f"[seeds] {s} seeds × {r2} rounds failed: {entry['second']['error']}", file=sys.stderr)
    entry["peak_memory"] = peak_memory()
    summarize_seeds(out)
    rec.save()
  out.pop("in_progress", None)
  rec.save()
  print_seeds(out)


def summarize_seeds(out):
  """``run_vs_1_seed`` per run and ``largest_vs_1_seed``: the largest seed count's run s (and, with a second
  call, its s per extra round) over the 1-seed call's."""
  ok = [r for r in out["runs"] if "run_s" in r]
  one = next((r for r in ok if r["seeds"] == 1), None)
  if not one:
    return
  for r in ok:
    r["run_vs_1_seed"] = r["run_s"] / one["run_s"]
  top = max(ok, key=lambda r: r["seeds"])
  out["largest_vs_1_seed"] = {"seeds": top["seeds"], "ratio": top["run_vs_1_seed"],
                              "target": "≤ 10× for 100 seeds (one H200)"}
  if "s_per_extra_round" in one:
    for r in ok:
      if "s_per_extra_round" in r and one["s_per_extra_round"] > 0:
        r["extra_round_vs_1_seed"] = r["s_per_extra_round"] / one["s_per_extra_round"]
    if "extra_round_vs_1_seed" in top:
      out["largest_vs_1_seed"]["extra_round_ratio"] = top["extra_round_vs_1_seed"]


def fmnist_folder(args) -> str:
  """The Fashion-MNIST folder the images suite reads: ``--fmnist-path``, else ``$FMNIST_PATH``, else Debian's."""
  from fedjax_sim.data.sources import FASHION_MNIST_DIR
  return args.fmnist_path or os.environ.get("FMNIST_PATH") or FASHION_MNIST_DIR


def suite_images(args, rec: Recorder, cache: dict):
  """FedAvg on Fashion-MNIST (issue 10): K = 10 of N = 100 clients against a full round (Dirichlet(0.1) and IID),
  and the engine against a per-client loop over the same K clients; see ``benchmarks/image_suite.py``. Without
  the files: ``{"skipped": ...}``."""
  import image_suite
  folder = fmnist_folder(args)
  if not any((pathlib.Path(folder) / f"train-images-idx3-ubyte{z}").is_file() for z in (".gz", "")):
    rec.result["suites"]["images"] = {"skipped": f"no Fashion-MNIST files in {folder}"}
    print(f"[images] skipped: no Fashion-MNIST files in {folder}", flush=True)
    return
  out = image_suite.suite(rounds=args.rounds or (1 if args.quick else 2), loop_rounds=args.loop_rounds,
                          path=folder)
  rec.result["suites"]["images"] = out
  print_images(out)


def suite_fbsfl(args, rec: Recorder, cache: dict):
  """FBS-FL (issue 12): a round of the whole game against a FedAvg round at the same K and against its per-client
  loop, on the ``fbsfl`` federation; see ``benchmarks/fbsfl_suite.py``. Without the files: ``{"skipped": ...}``."""
  import fbsfl_suite
  folder = fmnist_folder(args)
  if not any((pathlib.Path(folder) / f"train-images-idx3-ubyte{z}").is_file() for z in (".gz", "")):
    rec.result["suites"]["fbsfl"] = {"skipped": f"no Fashion-MNIST files in {folder}"}
    print(f"[fbsfl] skipped: no Fashion-MNIST files in {folder}", flush=True)
    return
  rounds = args.rounds or (2 if args.quick else 16)
  out = fbsfl_suite.suite(rounds=rounds, loop_rounds=args.loop_rounds if args.quick else rounds, path=folder)
  rec.result["suites"]["fbsfl"] = out
  print_fbsfl(out)


def suite_ipfl(args, rec: Recorder, cache: dict):
  """iPFL (issue 13): the 1,000-client market in one call, and an iPFL round against a FedAvg round; see
  ``benchmarks/ipfl_bench.py``. Without the Fashion-MNIST files only the market part runs."""
  import ipfl_bench
  out = {"market": ipfl_bench.bench_market(1000, 4096, 5, 5)}
  rec.result["suites"]["ipfl"] = out
  rec.save()
  folder = fmnist_folder(args)
  if any((pathlib.Path(folder) / f"train-images-idx3-ubyte{z}").is_file() for z in (".gz", "")):
    out["rounds"] = ipfl_bench.bench_rounds(args.rounds or (1 if args.quick else 3), 20 if args.quick else 200,
                                            folder)
  else:
    out["rounds"] = {"skipped": f"no Fashion-MNIST files in {folder}"}
  print_ipfl(out)


def suite_table1(args, rec: Recorder, cache: dict):
  """The ``table1`` experiment as the CLI runs it (``run_methods``: compiling ahead in worker threads),
  timed from the first compile to the last row's results: paper 000 Table 1's 20 rows × 5 seeds,
  50 rounds (ABPS-X and FedAvg-X up to 100 with early stopping). The paper's PyTorch code needed
  3–9 minutes for one ABPS-X run on a V100 (SPEC §3.5).

  Errors are per row: ``run_methods`` raises a row's error from its generator (and stops), so the failing row
  is recorded as ``{"error": ...}`` and the rows after it run one at a time with :func:`run_method` (each its
  own try; no compiling ahead: ``fallback_after`` names the row where that began)."""
  overrides = {"seeds": args.table1_seeds}
  if args.rounds:
    overrides["rounds"] = args.rounds
  if args.table1_methods:
    overrides["methods"] = args.table1_methods
  config = load_experiment("table1", overrides)
  names = list(config.methods)
  workers = args.compile_workers or default_compile_workers(len(names))
  fed, build_s = timed_federation(config)
  out = {"methods": {}, "rows": len(names), "seeds": list(config.seeds), "rounds": config.rounds,
         "compile_workers": workers, "centers": fed.num_clients, "build_s": build_s}
  rec.result["suites"]["table1"] = out
  print(f"[table1] {len(names)} rows × {len(config.seeds)} seeds, {config.rounds} rounds, "
        f"{workers} compile worker(s) …", flush=True)
  out["in_progress"] = "first compiles"
  rec.save()
  t0 = time.perf_counter()

  def done(run):
    out["methods"][run.name] = {"compile_s": run.compile_s, "run_s": run.run_s,
                                "rounds_run": run.summary["rounds_run"], "auroc_mean": run.summary["auroc_mean"],
                                "done_at_s": time.perf_counter() - t0}
    out["in_progress"] = f"after {run.name}"
    out["wall_s"] = time.perf_counter() - t0
    rec.save()
    print(f"[table1] {run.name}: compile {run.compile_s:.1f} s, run {run.run_s:.2f} s, "
          f"AUROC {run.summary['auroc_mean']:.4f} (at {out['wall_s']:.1f} s)", flush=True)

  def failed(name, err):
    out["methods"][name] = {"error": failure(err), "done_at_s": time.perf_counter() - t0}
    rec.save()
    print(f"[table1] {name} failed: {out['methods'][name]['error']}", file=sys.stderr, flush=True)

  try:
    for run in run_methods(names, config, fed, RunOptions(), workers):
      done(run)
  except Exception as err:  # noqa: BLE001 - the row after the last one done failed: record it, run the rest
    k = len(out["methods"])
    if k >= len(names):  # after the last row (not a row's error)
      out["after_rows_error"] = failure(err)
    else:
      failed(names[k], err)
      out["fallback_after"] = names[k]
    for name in names[k + 1:]:
      out["in_progress"] = f"{name} (one at a time)"
      rec.save()
      try:
        done(run_method(name, config, fed, RunOptions()))
      except Exception as err2:  # noqa: BLE001
        failed(name, err2)
  out.pop("in_progress", None)
  ok = [m for m in out["methods"].values() if "error" not in m]
  bad = [n for n, m in out["methods"].items() if "error" in m]
  if bad:
    out["error"] = f"{len(bad)} row(s) failed: {', '.join(bad)}"
  out["wall_s"] = time.perf_counter() - t0
  out["compile_sum_s"] = sum(m["compile_s"] for m in ok)
  out["run_sum_s"] = sum(m["run_s"] for m in ok)
  out["peak_memory"] = peak_memory()
  rec.save()
  print_table1(out)


def pool_supported() -> bool:
  try:
    load_experiment("fedavg", {"abps.pool_size": 32})
    return True
  except ConfigError:
    return False


def child_file(child_dir, centers: int) -> pathlib.Path:
  """Where the child of one centers size writes its results (rewritten after the build and after each method)."""
  return pathlib.Path(child_dir) / f"centers_{centers}.json"


def merge_child(out: dict, c: int, child: dict, status: str, wall):
  """Appends one centers size's runs (from its child's file) to the suite ``out``; a method the child did not
  finish gets ``{"error": status}`` (or ``not run`` when the child ended normally)."""
  runs = list(child.get("runs", []))
  done = {r["method"] for r in runs}
  for m in out["methods"]:
    if m not in done:  # the child died before it got to (or through) this method
      runs.append({"method": m, "error": status if status != "ok" else "not run"})
  for r in runs:
    r.update(centers_requested=c, centers=child.get("centers"), build_s=child.get("build_s"),
             train_rows=child.get("train_rows"), child_wall_s=wall, child_status=status)
    out["runs"].append(r)


def suite_centers(args, rec: Recorder, cache: dict):
  pools = pool_supported()
  out = {"methods": list(args.centers_methods), "rounds": args.rounds_centers, "seeds": 1,
         "stays_per_center": args.stays_per_center, "pool_size_above_1000": 32 if pools else None, "runs": [],
         "child_dir": str(args.child_dir)}
  if not pools:
    out["note"] = "abps.pool_size is not a config key in this checkout: ABPS runs with the full C × C beliefs"
    print(f"[centers] note: {out['note']}", flush=True)
  rec.result["suites"]["centers"] = out
  for c in args.centers:  # no stale file of an earlier run in this folder can be merged for a size not reached
    child_file(args.child_dir, c).unlink(missing_ok=True)
  for k, c in enumerate(args.centers):
    left = time_left(args)
    if left < MIN_SUBSTEP_S + 5:
      out["not_run"] = {"centers": args.centers[k:], "why": f"fewer than {MIN_SUBSTEP_S + 5} s left before --deadline"}
      print(f"[centers] not run: {args.centers[k:]} ({out['not_run']['why']})", flush=True)
      break
    limit = int(min(args.child_timeout, left - 5))  # the child ends (and is merged) before the deadline
    print(f"[centers] {c} centers: child process ({', '.join(out['methods'])}), {args.rounds_centers} rounds, "
          f"limit {limit} s …", flush=True)
    child_out = child_file(args.child_dir, c)
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child-centers", str(c), "--child-out",
           str(child_out), "--rounds", str(args.rounds_centers), "--stays-per-center", str(args.stays_per_center),
           "--centers-methods", ",".join(out["methods"])]
    if not pools:
      cmd.append("--no-pool")
    out["in_progress"] = f"{c} centers"  # left in the JSON if this run is cut short during this size
    rec.save()
    t0 = time.perf_counter()
    status = "ok"
    try:
      proc = subprocess.run(cmd, timeout=limit)
      if proc.returncode != 0:
        status = f"child exited with code {proc.returncode} (killed for memory?)"
    except subprocess.TimeoutExpired:
      status = f"child timed out after {limit} s"
    wall = time.perf_counter() - t0
    try:
      child = json.loads(child_out.read_text()) if child_out.is_file() else {}
    except ValueError:  # killed mid-write (the child writes through a temporary file, so this is unlikely)
      child = {}
    merge_child(out, c, child, status, wall)
    del out["in_progress"]
    rec.save()
  print_centers(out)


def merge_centers_files(path, write: bool = False) -> dict:
  """The saved result at ``path`` (a centers suite's ``--json``) with every ``centers_<C>.json`` of its folder
  merged whose size the suite lacks: what children finished when their parent was killed (the device script's
  step time box). Such runs get ``child_status`` "merged from centers_<C>.json: the parent was cut". A result
  with no centers suite (the parent was cut before it began) gets one built from the children's files.
  ``write``: rewrite ``path`` when anything was merged."""
  path = pathlib.Path(path)
  try:
    result = json.loads(path.read_text())
  except (OSError, ValueError):
    result = {}
  files = []
  for f in path.parent.glob("centers_*.json"):
    try:
      files.append((int(f.stem.split("_", 1)[1]), f))
    except ValueError:
      continue
  if not files:
    return result
  children = []
  for c, f in sorted(files, key=lambda cf: cf[0]):
    try:
      children.append((c, f, json.loads(f.read_text())))
    except (OSError, ValueError):
      continue
  suites = result.setdefault("suites", {})
  out = suites.get("centers")
  if out is None:
    first = children[0][2] if children else {}
    out = suites["centers"] = {"methods": first.get("methods", ["fedavg", ABPS_SCALE]), "rounds": first.get("rounds"),
                               "seeds": 1, "stays_per_center": first.get("stays_per_center"), "runs": []}
    for k, v in (("machine", first.get("machine")), ("date", time.strftime("%Y-%m-%d"))):
      result.setdefault(k, v)
  have = {r["centers_requested"] for r in out.get("runs", [])}
  merged = []
  for c, f, child in children:
    if c in have:
      continue
    merge_child(out, c, child, f"merged from {f.name}: the parent was cut", None)
    merged.append(c)
  if merged:
    out["merged_from_children"] = sorted(set(out.get("merged_from_children", [])) | set(merged))
    if write:
      tmp = path.with_suffix(path.suffix + ".tmp")
      tmp.write_text(json.dumps(result, indent=1, default=str))
      tmp.replace(path)
  return result


def run_child(args):
  """One centers size in this (fresh) process: build, then each method; results to ``--child-out`` after the build
  and after each method (through a temporary file, so a kill never leaves half a file)."""
  c = args.child_centers
  methods = list(args.centers_methods)
  res = {"centers_requested": c, "methods": methods, "rounds": args.rounds, "stays_per_center": args.stays_per_center,
         "runs": []}
  path = pathlib.Path(args.child_out)

  def save():
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(res, default=str))
    tmp.replace(path)

  extra = data_overrides(c, args.stays_per_center)
  if c > 1000 and not args.no_pool:
    extra["abps.pool_size"] = 32
  config = make_config(args.rounds, [1], extra)
  save()
  print(f"  building the {c}-center federation …", file=sys.stderr, flush=True)
  fed, build_s = timed_federation(config)
  res.update(centers=fed.num_clients, build_s=build_s, train_rows=int(np.asarray(fed.n_train).sum()),
             peak_after_build=peak_memory(), machine=machine())
  print(f"  built: {fed.num_clients} centers, {res['train_rows']} train rows in {build_s:.1f} s", file=sys.stderr,
        flush=True)
  save()
  for method in methods:
    entry = {"method": method, "pool_size": config.abps.pool_size if method != "fedavg" else None}
    try:
      entry.update(time_engine(method, config, fed))
    except Exception as err:  # noqa: BLE001 - e.g. RESOURCE_EXHAUSTED: record it for this size
      entry["error"] = failure(err)
      print(f"  {method} failed: {entry['error']}", file=sys.stderr, flush=True)
    entry["peak_memory"] = peak_memory()
    res["runs"].append(entry)
    save()


def failure(err: BaseException) -> str:
  msg = f"{type(err).__name__}: {err}"
  if len(msg) > 600:
    msg = msg[:600] + "…"
  if os.environ.get("BENCH_TRACEBACK"):
    traceback.print_exc()
  return msg


# --- printing ------------------------------------------------------------------------------------------

def by_size(runs):
  """Centers runs by size, FedAvg before ABPS (whatever order they ran in)."""
  return sorted(runs, key=lambda r: (r["centers_requested"], r["method"] != "fedavg"))


def not_run(out):
  if "not_run" in out:
    what = {k: v for k, v in out["not_run"].items() if k != "why"}
    print(f"not run: {what} ({out['not_run']['why']})\n")


def cut_short(out):
  if "in_progress" in out:
    print(f"cut short while running: {out['in_progress']}\n")


def print_table(header, rows):
  widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
  line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths))
  print(line(header))
  print("  ".join("-" * w for w in widths))
  for r in rows:
    print(line(r))
  print()


def print_engine(out):
  print(f"\nengine vs per-client loops ({out['centers']} centers, 1 seed, engine {out['rounds']} rounds, "
        f"loops {out['loop_rounds']} timed round(s) after a warm-up):")
  rows = []
  for m, e in out["methods"].items():
    en, shown = e.get("engine", {}), False
    for name, label, key in (("loop", "JAX", "speedup"), ("torch_loop", "PyTorch", "speedup_over_torch")):
      if name not in e:
        continue
      lp, shown = e[name], True
      why = lp.get("skipped") or lp.get("error") or "—"
      loop_dev = f" ({lp['device']})" if lp.get("device") else ""
      rows.append([m, label + loop_dev, sec(en.get("compile_s")), ms(en.get("s_per_round")), sec(lp.get("warmup_s")),
                   ms(lp.get("s_per_round")), f"{e[key]:.1f}×" if key in e else why[:60]])
    if not shown:  # the engine only (its loop not reached, or the method failed)
      rows.append([m, "—", sec(en.get("compile_s")), ms(en.get("s_per_round")), "—", "—", e.get("error", "—")[:60]])
  print_table(["method", "loop", "compile s", "engine ms/round", "loop warm-up s", "loop ms/round", "speed-up"],
              rows)
  not_run(out)
  cut_short(out)


def print_seeds(out):
  r2 = out.get("rounds2")
  print(f"\nseeds in one call (FedAvg, {out['centers']} centers, {out['rounds']} rounds"
        + (f"; second call {r2} rounds for the cost per extra round" if r2 else "") + "):")
  rows = []
  for r in sorted(out["runs"], key=lambda r: r["seeds"]):
    sc = r.get("second", {})
    rows.append([r["seeds"], sec(r.get("compile_s")), f"{r['run_s']:.2f}" if "run_s" in r else r.get("error", "")[:60],
                 ms(r.get("s_per_round")), f"{r['s_per_seed']:.3f}" if "s_per_seed" in r else "—",
                 f"{r['run_vs_1_seed']:.2f}×" if "run_vs_1_seed" in r else "—",
                 sec(sc.get("compile_s")), f"{sc['run_s']:.2f}" if "run_s" in sc else (sc.get("skipped") or
                                                                                   sc.get("error", "—"))[:40],
                 ms(r.get("s_per_extra_round")),
                 f"{r['extra_round_vs_1_seed']:.2f}×" if "extra_round_vs_1_seed" in r else "—",
                 fmt_bytes(r["peak_memory"]["bytes"])])
  print_table(["seeds", "compile s", "run s", "ms/round", "s/seed", "run vs 1 seed", "R2 compile s", "R2 run s",
               "ms/extra round", "extra round vs 1 seed", "peak so far"], rows)
  if "largest_vs_1_seed" in out:
    t = out["largest_vs_1_seed"]
    print(f"{t['seeds']} seeds cost {t['ratio']:.2f}× one seed (target {t['target']})"
          + (f"; per extra round {t['extra_round_ratio']:.2f}×" if "extra_round_ratio" in t else "") + "\n")
  not_run(out)
  cut_short(out)


def print_centers(out):
  print(f"\ncenters scaling ({out['rounds']} rounds, 1 seed; {', '.join(out['methods'])} in one process per size):")
  rows = []
  for r in by_size(out["runs"]):
    ok = "run_s" in r
    rows.append([r["centers_requested"], r.get("centers") or "—", r["method"], sec(r.get("build_s")),
                 sec(r.get("compile_s")), f"{r['run_s']:.2f}" if ok else "—", ms(r.get("s_per_round")),
                 fmt_bytes((r.get("peak_memory") or {}).get("bytes")), "ok" if ok else r.get("error", "?")[:70]])
  print_table(["centers", "kept", "method", "build s", "compile s", "run s", "ms/round", "peak so far", "status"],
              rows)
  if out.get("merged_from_children"):
    print(f"merged from the children's files after the step was cut: {out['merged_from_children']}\n")
  not_run(out)
  cut_short(out)


def print_table1(out):
  print(f"\ntable1 ({out['rows']} rows × {len(out['seeds'])} seeds, {out['rounds']} rounds, "
        f"{out['compile_workers']} compile worker(s)):")
  rows = [[m, sec(e.get("compile_s")), sec(e.get("run_s")), e.get("rounds_run", "—"),
           f"{e['auroc_mean']:.4f}" if "auroc_mean" in e else e.get("error", "?")[:60], sec(e.get("done_at_s"))]
          for m, e in out["methods"].items()]
  print_table(["row", "compile s", "run s", "rounds run", "AUROC", "done at s"], rows)
  print(f"wall clock {sec(out.get('wall_s'))} s (compile {sec(out.get('compile_sum_s'))} s and run "
        f"{sec(out.get('run_sum_s'))} s summed over rows; compiles overlap runs)"
        + (f"; {out['error']}, rows after {out['fallback_after']} run one at a time" if "fallback_after" in out
           else "") + "\n")
  cut_short(out)


def print_images(out):
  if "skipped" in out:
    print(f"\nimages: skipped ({out['skipped']})\n")
    return
  for part in ("dirichlet", "iid"):
    r = out.get(part)
    if r:
      print(f"images ({part}): K = 10 of {r['clients']}: {r['engine_k']['s_per_round']:.2f} s/round, full round "
            f"{r['engine_full']['s_per_round']:.2f} s/round, ratio {r['k_of_n_ratio']:.3f}"
            + (f"; per-client loop {r['loop_k']['s_per_round']:.2f} s/round "
               f"({r['engine_speedup_over_loop']:.2f}× the engine)" if "loop_k" in r else ""), flush=True)


def print_fbsfl(out):
  if "skipped" in out:
    print(f"\nfbsfl: skipped ({out['skipped']})\n")
    return
  f, fa, ref = out["fbsfl"], out["fbsfl_fedavg"], out["fedavg_k"]
  print(f"fbsfl: {f['s_per_round']:.2f} s/round (compile {f['compile_s']:.1f} s, "
        f"{f.get('accepted_per_round', float('nan')):.1f} accepted per round); FedAvg K = {out['clients_per_round']} "
        f"{ref['s_per_round']:.2f} s/round (ratio {out['fbsfl_vs_fedavg']:.2f}×); FedAvg behind the strategic layer "
        f"{fa['s_per_round']:.2f} s/round"
        + (f"; per-client loop {out['loop']['s_per_round']:.2f} s/round "
           f"({out['engine_speedup_over_loop']:.2f}× the engine)" if "loop" in out else ""), flush=True)


def print_ipfl(out):
  m = out["market"]
  print(f"ipfl market, {m['clients']} clients: {m['run_s']:.3f} s per call (compile {m['compile_s']:.1f} s); the "
        f"per-pair loop of the threshold solve alone {m['loop_thresholds_s_extrapolated']:.1f} s (extrapolated from "
        f"{m['loop_buyers_timed']} buyers)", flush=True)
  r = out.get("rounds", {})
  if "skipped" in r or not r:
    print(f"ipfl rounds: skipped ({r.get('skipped', 'not run')})")
    return
  print(f"ipfl rounds ({r['local_steps']} iterations): iPFL {r['ipfl']['s_per_round']:.2f} s/round, ipfl_fedavg "
        f"{r['ipfl_fedavg']['s_per_round']:.2f}, fedavg {r['fedavg']['s_per_round']:.2f} (iPFL / FedAvg "
        f"{r['ipfl_over_fedavg']:.2f}×)", flush=True)


def print_saved(result: dict, name: str = ""):
  dc = result.get("device_check") or {}
  if "machine" not in result:  # a device-script stub: a step skipped or cut before it wrote anything
    print(f"{name}: {dc.get('status', 'no results')}" + (f" ({dc['detail']})" if dc.get("detail") else ""))
    return
  print(f"{name}: {result.get('machine')}; jax {result.get('jax')}; {result.get('started')} → "
        f"{result.get('finished', 'not finished (cut short?)')}"
        + (f"; device_check: {dc.get('status')}" + (f" ({dc['detail']})" if dc.get("detail") else "") if dc else ""))
  suites = result.get("suites", {})
  for suite, show in (("seeds", print_seeds), ("engine", print_engine), ("centers", print_centers),
                      ("table1", print_table1), ("images", print_images), ("fbsfl", print_fbsfl),
                      ("ipfl", print_ipfl)):
    if suite in suites:
      show(suites[suite])


# --- RESULTS.md ----------------------------------------------------------------------------------------

SECTIONS = {
    "engine": (
        "## Engine vs per-client loop, 230-center clinical federation (`python benchmarks/bench.py --suite engine --record`)",
        "Targets (issue 2): ≤ 0.6 s per round on 2 CPU cores; ≤ 3 ms per round on one H200.\n\n"
        "| date | workload | machine | seeds per call | engine compile s | engine ms / round | loop ms / round | "
        "speed-up per seed-round |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"),
    "seeds": (
        "## Seeds in one call: FedAvg, 230 centers (`python benchmarks/bench.py --suite seeds --record`)",
        "Each seed count is one compiled call of R rounds; compile time is apart. Acceptance (issue 4): on one H200,\n"
        "100 seeds × 100 rounds cost at most 10× one seed. Peak memory is the process's peak so far (seed counts\n"
        "run smallest first).\n\n"
        "| date | machine | centers | rounds | seeds | compile s | run s | ms / round | s / seed | run vs 1 seed | peak memory |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "seeds_rounds": (
        "## Seeds in one call: the cost per extra round, FedAvg, 230 centers (`python benchmarks/bench.py --suite seeds --record`)",
        "The run-vs-1-seed ratio above includes fixed set-up costs (init, the final evaluation, the call's overhead).\n"
        "Each seed count's second call runs R2 rounds: s per extra round = (run s(R2) − run s(R1)) / (R2 − R1), the\n"
        "marginal cost of one round of all seeds; each (seeds, rounds) pair is one program, compiled once, compile apart.\n\n"
        "| date | machine | centers | rounds R1 → R2 | seeds | compile s (R1, R2) | run s (R1) | run s (R2) | ms / extra round | extra round vs 1 seed |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "centers": (
        "## Centers scaling: FedAvg and ABPS κ = 1 + goal filter (`python benchmarks/bench.py --suite centers --record`)",
        f"ABPS is `{ABPS_SCALE}` (κ = 1, homogeneity goal filter, bf16 wire, 1-layer head; `abps.pool_size = 32`\n"
        "above 1,000 centers). 230 centers is the default federation; from 1,000 centers, 30 stays per center and\n"
        "`data.min_site_rows = 5`. One process per size, FedAvg first: ABPS's peak memory covers FedAvg's run too.\n"
        "Run time includes the method's init and the final evaluation, so with few rounds ms / round is an upper bound.\n\n"
        "| date | machine | method | centers (kept) | rounds | build s | compile s | run s | ms / round | peak memory | status |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "table1": (
        "## The `table1` experiment end to end (`python benchmarks/bench.py --suite table1 --record`)",
        "Paper 000 Table 1: 20 rows × 5 seeds, 50 rounds (ABPS-X and FedAvg-X up to 100, early stopping), run as the\n"
        "CLI runs it: one compiled program per row, the next rows compiling in worker threads while one runs. Wall\n"
        "clock from the first compile to the last row's results (the federation build apart). Target (issue 3): a few\n"
        "minutes on one H200; the paper's PyTorch code took 3–9 minutes for one ABPS-X run on a V100.\n\n"
        "| date | machine | rows × seeds | rounds | compile workers | wall clock s | compile s (sum) | run s (sum) | slowest row (run s) | status |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "images": (
        "## Image task: FedAvg on Fashion-MNIST, K of N and engine vs loop (`python benchmarks/bench.py --suite images --record`)",
        "`fedavg_fmnist`'s federation (N = 100, LeNet, SGD, batch 32, E = 2), Dirichlet(0.1) and IID. The K-of-N ratio is\n"
        "a K = 10 round over a full round (target, issue 10: ≤ 0.2×); the loop is one jitted client update called client\n"
        "after client for K = 10 clients (compiles paid in a warm-up), timed in the same run.\n\n"
        "| date | machine | partition | rounds | K = 10 s / round | full round s / round | K-of-N ratio | loop s / round | engine speed-up over loop |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "fbsfl": (
        "## FBS-FL: a round of the game vs a FedAvg round at the same K, and vs its per-client loop (`python benchmarks/bench.py --suite fbsfl --record`)",
        "The `fbsfl` federation (Fashion-MNIST, Dirichlet(0.1), N = 100, K = 10, LeNet, SGD, batch 32, E = 2), one seed,\n"
        "R rounds in one compiled call (R ≥ 16 includes a PPO update). Target (issue 12): FBS-FL ≤ 1.5× a FedAvg round at\n"
        "the same K. `fbsfl_fedavg` is FedAvg behind the same strategic layer (fewer clients accept). The loop is the same\n"
        "round from the package's jitted pieces with a Python loop over participants (`benchmarks/fbsfl_suite.py`).\n\n"
        "| date | machine | rounds | FBS-FL compile s | FBS-FL s / round | accepted / round | FedAvg K s / round | ratio | fbsfl_fedavg s / round | loop s / round | engine speed-up over loop |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
    "ipfl": (
        "## iPFL: the market for 1,000 clients in one call, and an iPFL round vs a FedAvg round (`python benchmarks/bench.py --suite ipfl --record`)",
        "The market call is distance, the Box 2 threshold solve for all C² pairs, the greedy graph, payments and\n"
        "utilities for C = 1,000 random models of 4,096 parameters (`benchmarks/ipfl_bench.py`); the loop is the\n"
        "threshold solve alone as a per-pair Python bisection, timed for 5 buyers and scaled to C. The rounds run\n"
        "`ipfl`'s federation (Fashion-MNIST, Dirichlet 0.1, 10 clients, LeNet), one seed, one compiled call each.\n\n"
        "| date | machine | clients | market compile s | market s / call | loop thresholds s (extrapolated) | local iterations | iPFL s / round | ipfl_fedavg s / round | fedavg s / round | iPFL / FedAvg |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"),
}
# The engine section is the former bench_fedavg.py section: its heading is recognized and renamed.
OLD_ENGINE_HEADING = "## FedAvg on the 230-center clinical federation"
ENGINE_NOTE = ("The first four rows come from the former `benchmarks/bench_fedavg.py` (engine: a warm second call; ABPS\n"
               "rows engine only). Rows whose workload names its rounds come from `bench.py`: the engine timed through\n"
               "`run_method` (one compiled call, compile apart; run time includes init and the final evaluation), ABPS-X\n"
               "against its own per-client loop (see `time_abps_x_loop`).")


def result_rows(result: dict) -> dict:
  """RESULTS.md table rows per suite from a result dict (as written to --json; a device-script stub has none)."""
  if "machine" not in result:
    return {}
  date, mach = result["date"], result["machine"]
  if result.get("compile_cache"):  # a rehearsal: compiles of programs seen before were cache loads
    mach += " (compile cache on)"
  rows = {}
  eng = result["suites"].get("engine")
  if eng:
    rows["engine"] = []
    for m, e in eng["methods"].items():
      en, lp = e.get("engine"), e.get("loop")
      if not en:
        continue
      lp = lp if lp and "s_per_round" in lp else None
      rows["engine"].append(
          f"| {date} | {m}, {eng['centers']} centers, {eng['rounds']} rounds (loop: {eng['loop_rounds']}) | {mach} | 1 | "
          f"{en['compile_s']:.1f} | {ms(en['s_per_round'])} | {ms(lp['s_per_round']) if lp else '—'} | "
          f"{(str(round(e['speedup'], 1)) + '×') if 'speedup' in e else '—'} |")
      tl = e.get("torch_loop")
      if tl and "s_per_round" in tl:
        rows["engine"].append(
            f"| {date} | {m}, {eng['centers']} centers, {eng['rounds']} rounds (loop: PyTorch {tl['torch']} on "
            f"{tl['device']}, {tl['rounds']}) | {mach} | 1 | {en['compile_s']:.1f} | {ms(en['s_per_round'])} | "
            f"{ms(tl['s_per_round'])} | {round(e['speedup_over_torch'], 1)}× |")
  sd = result["suites"].get("seeds")
  if sd:
    rows["seeds"], rows["seeds_rounds"] = [], []
    for r in sorted(sd["runs"], key=lambda r: r["seeds"]):
      if "run_s" not in r:
        rows["seeds"].append(f"| {date} | {mach} | {sd['centers']} | {sd['rounds']} | {r['seeds']} | — | failed: "
                             f"{r.get('error', '?')[:80]} | — | — | — | — |")
        continue
      rows["seeds"].append(
          f"| {date} | {mach} | {sd['centers']} | {sd['rounds']} | {r['seeds']} | {r['compile_s']:.1f} | "
          f"{r['run_s']:.2f} | {ms(r['s_per_round'])} | {r['s_per_seed']:.3f} | "
          f"{(format(r['run_vs_1_seed'], '.2f') + '×') if 'run_vs_1_seed' in r else '—'} | "
          f"{fmt_bytes(r['peak_memory']['bytes'])} |")
      sc = r.get("second")
      if sc and "run_s" in sc:
        rows["seeds_rounds"].append(
            f"| {date} | {mach} | {sd['centers']} | {sd['rounds']} → {sc['rounds']} | {r['seeds']} | "
            f"{r['compile_s']:.1f}, {sc['compile_s']:.1f} | {r['run_s']:.2f} | {sc['run_s']:.2f} | "
            f"{ms(r['s_per_extra_round'])} | "
            f"{(format(r['extra_round_vs_1_seed'], '.2f') + '×') if 'extra_round_vs_1_seed' in r else '—'} |")
  ce = result["suites"].get("centers")
  if ce:
    rows["centers"] = []
    for r in by_size(ce["runs"]):
      ok = "run_s" in r
      kept = f"{r['centers_requested']} ({r['centers']})" if r.get("centers") else str(r["centers_requested"])
      method = r["method"] + (f", pool {r['pool_size']}" if r.get("pool_size") else "")
      status = "ok" if ok else "failed: " + r.get("error", "?").replace("|", "/").replace("\n", " ")[:100]
      rows["centers"].append(
          f"| {date} | {mach} | {method} | {kept} | {ce['rounds']} | {sec(r.get('build_s'))} | "
          f"{sec(r.get('compile_s'))} | {format(r['run_s'], '.2f') if ok else '—'} | {ms(r.get('s_per_round'))} | "
          f"{fmt_bytes((r.get('peak_memory') or {}).get('bytes'))} | {status} |")
  im = result["suites"].get("images")
  if im and "skipped" not in im:
    rows["images"] = []
    for part in ("dirichlet", "iid"):
      r = im.get(part)
      if r:
        lp = r.get("loop_k")
        rows["images"].append(
            f"| {date} | {mach} | {part} | {im['rounds']} | {r['engine_k']['s_per_round']:.2f} | "
            f"{r['engine_full']['s_per_round']:.2f} | {r['k_of_n_ratio']:.3f} | "
            f"{format(lp['s_per_round'], '.2f') if lp else '—'} | "
            f"{(format(r['engine_speedup_over_loop'], '.2f') + '×') if lp else '—'} |")
  fb = result["suites"].get("fbsfl")
  if fb and "skipped" not in fb:
    lp = fb.get("loop")
    rows["fbsfl"] = [
        f"| {date} | {mach} | {fb['rounds']} | {fb['fbsfl']['compile_s']:.1f} | {fb['fbsfl']['s_per_round']:.2f} | "
        f"{fb['fbsfl'].get('accepted_per_round', float('nan')):.1f} | {fb['fedavg_k']['s_per_round']:.2f} | "
        f"{fb['fbsfl_vs_fedavg']:.2f}× | {fb['fbsfl_fedavg']['s_per_round']:.2f} | "
        f"{format(lp['s_per_round'], '.2f') if lp else '—'} | "
        f"{(format(fb['engine_speedup_over_loop'], '.2f') + '×') if lp else '—'} |"]
  ip = result["suites"].get("ipfl")
  if ip:
    m, r = ip["market"], ip.get("rounds", {})
    have = r and "skipped" not in r
    rows["ipfl"] = [
        f"| {date} | {mach} | {m['clients']} | {m['compile_s']:.1f} | {m['run_s']:.3f} | "
        f"{m['loop_thresholds_s_extrapolated']:.1f} | "
        + (f"{r['local_steps']} | {r['ipfl']['s_per_round']:.2f} | {r['ipfl_fedavg']['s_per_round']:.2f} | "
           f"{r['fedavg']['s_per_round']:.2f} | {r['ipfl_over_fedavg']:.2f}× |" if have else "— | — | — | — | — |")]
  t1 = result["suites"].get("table1")
  if t1:
    ok = {m: e for m, e in t1["methods"].items() if "run_s" in e}
    slow = max(ok.items(), key=lambda kv: kv[1]["run_s"], default=None)
    bad = [m for m, e in t1["methods"].items() if "error" in e]
    done = f"{len(ok)} of {t1['rows']} rows"
    if len(ok) == t1["rows"] and "error" not in t1:
      status = "ok"
    elif bad:
      status = f"{done} ok; failed: {', '.join(bad)}"[:120]
    else:
      status = f"cut short: {done}" + (f"; {t1['error'][:80]}" if "error" in t1 else "")
    rows["table1"] = [
        f"| {date} | {mach} | {t1['rows']} × {len(t1['seeds'])} | {t1['rounds']} | {t1['compile_workers']} | "
        f"{sec(t1.get('wall_s'))} | {sec(t1.get('compile_sum_s'))} | {sec(t1.get('run_sum_s'))} | "
        f"{slow[0] + ' ' + sec(slow[1]['run_s']) if slow else '—'} | {status.replace('|', '/')} |"]
  return rows


def append_rows(suite: str, rows: list, path: pathlib.Path = RESULTS):
  """Appends ``rows`` to the table of ``suite``'s section of RESULTS.md (the section, or its table, is
  created at the end if missing); other sections, rows and notes are kept as they are."""
  if not rows:
    return
  heading, intro = SECTIONS[suite]
  table = intro.splitlines()[-2:]  # the table's header and separator lines
  lines = path.read_text().splitlines() if path.is_file() else ["# Benchmark results"]
  if suite == "engine":
    for k, line in enumerate(lines):
      if line.startswith(OLD_ENGINE_HEADING):
        lines[k] = heading
        lines[k + 1:k + 1] = ["", *ENGINE_NOTE.splitlines()]
        break
  if heading not in lines:
    lines += ["", heading, "", *intro.splitlines()]
  start = lines.index(heading)
  end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
  last = max((k for k in range(start + 1, end) if lines[k].startswith("|")), default=None)
  if last is None:  # the section lost its table: a new one at the section's end
    while end > start + 1 and not lines[end - 1].strip():
      end -= 1
    lines[end:end] = ["", *table]
    last = end + len(table)
  lines[last + 1:last + 1] = rows
  path.write_text("\n".join(lines).rstrip("\n") + "\n")


def record(result: dict, path: pathlib.Path = RESULTS):
  for suite, rows in result_rows(result).items():
    append_rows(suite, rows, path)
  print(f"recorded in {path}")


# --- main ----------------------------------------------------------------------------------------------

def parse_list(s: str):
  return [int(v.replace("_", "")) for v in s.split(",") if v.strip()]


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--suite", default="engine,seeds,centers",
                 help="comma-separated: engine, seeds, centers, table1, images, fbsfl")
  p.add_argument("--fmnist-path", default="", help="images suite: the Fashion-MNIST folder (default Debian's)")
  p.add_argument("--rounds", type=int, default=None,
                 help="rounds of every engine call (default: seeds 100, engine 20, centers 5; --quick: 2)")
  p.add_argument("--rounds2", type=int, default=None,
                 help="seeds suite: rounds of each seed count's second call (default R/2, 2R when R = 1; 0: none)")
  p.add_argument("--loop-rounds", type=int, default=None, help="timed per-client loop rounds (default 2; --quick 1)")
  p.add_argument("--engine-methods", default="fedavg,abps_x", help="engine suite: methods (each with its loops)")
  p.add_argument("--deadline", type=float, default=None,
                 help="time.time() seconds after which no sub-step starts (centers children are capped to it)")
  p.add_argument("--seeds-list", default=None, help="seed counts of the seeds suite (default 1,5,20,100)")
  p.add_argument("--centers", default=None, help="center counts of the centers suite (default 230,1000,10000,100000)")
  p.add_argument("--stays-per-center", type=int, default=30, help="centers suite, ≥ 1000 centers: total_stays / centers")
  p.add_argument("--centers-methods", default=f"fedavg,{ABPS_SCALE}", help="centers suite: the methods per size")
  p.add_argument("--child-timeout", type=int, default=3600, help="seconds one centers size may take")
  p.add_argument("--child-dir", default=None,
                 help="centers suite: where each size's child writes centers_<C>.json (default: the --json file's "
                      "folder, else a temporary folder)")
  p.add_argument("--merge-centers", action="store_true",
                 help="with --print-from: rewrite a centers JSON with the centers_<C>.json files its cut run left")
  p.add_argument("--table1-seeds", default="11,22,33,44,55", help="table1 suite: seeds (default the paper's five)")
  p.add_argument("--table1-methods", default=None, help="table1 suite: a subset of rows, comma-separated (default all)")
  p.add_argument("--compile-workers", type=int, default=None,
                 help="table1 suite: methods compiled at once (default: half the CPU cores, at most 8)")
  p.add_argument("--json", default=None, help="write all results here (rewritten after every step)")
  p.add_argument("--record", action="store_true", help="append rows to benchmarks/RESULTS.md")
  p.add_argument("--record-from", default=None, help="append the rows of saved --json files (comma-separated) to RESULTS.md; run nothing")
  p.add_argument("--print-from", default=None, help="print the tables of saved --json files (comma-separated)")
  p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test")
  p.add_argument("--child-centers", type=int, default=None, help=argparse.SUPPRESS)  # internal: one centers size
  p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
  p.add_argument("--no-pool", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)

  args.centers_methods = [m.strip() for m in args.centers_methods.split(",") if m.strip()]
  if args.record_from or args.print_from:
    for f in (args.record_from or args.print_from).split(","):
      saved = json.loads(pathlib.Path(f).read_text())
      if "centers" in saved.get("suites", {}) or pathlib.Path(f).name == "centers.json":
        saved = merge_centers_files(f, write=args.merge_centers)  # what killed children left beside it
      if args.record_from:
        record(saved)
      else:
        print_saved(saved, f)
    return None
  if args.child_centers is not None:
    args.rounds = args.rounds or 5
    run_child(args)
    return None

  suites = [s.strip() for s in args.suite.split(",") if s.strip()]
  bad = [s for s in suites if s not in ("engine", "seeds", "centers", "table1", "images", "fbsfl", "ipfl")]
  if bad:
    p.error(f"unknown suite(s) {', '.join(bad)}; choose from engine, seeds, centers, table1, images, fbsfl, ipfl")
  q = args.quick
  args.rounds_seeds = args.rounds or (2 if q else 100)
  if args.rounds2 is None:
    args.rounds2 = args.rounds_seeds // 2 if args.rounds_seeds >= 2 else 2 * args.rounds_seeds
  if args.rounds2 == args.rounds_seeds:
    p.error("--rounds2 must differ from the seeds suite's rounds (or be 0: no second call)")
  args.engine_methods = [m.strip() for m in args.engine_methods.split(",") if m.strip()]
  args.rounds_engine = args.rounds or (2 if q else 20)
  args.rounds_centers = args.rounds or (2 if q else 5)
  args.loop_rounds = args.loop_rounds or (1 if q else 2)
  args.seeds_list = parse_list(args.seeds_list or ("1,5" if q else "1,5,20,100"))
  args.centers = parse_list(args.centers or ("230,1000" if q else "230,1000,10000,100000"))

  args.child_dir = pathlib.Path(args.child_dir or (pathlib.Path(args.json).resolve().parent if args.json else
                                                     tempfile.mkdtemp(prefix="bench-centers-")))
  args.child_dir.mkdir(parents=True, exist_ok=True)

  rec = Recorder(args.json)
  rec.result["compile_cache"] = os.environ.get("BENCH_COMPILE_CACHE") or None
  if args.deadline:
    rec.result["deadline_s_from_start"] = round(args.deadline - time.time(), 1)
  print(f"machine: {rec.result['machine']}; jax {jax.__version__}; suites: {', '.join(suites)}", flush=True)
  cache = {}
  # Seeds first: on an accelerator it is the acceptance figure; centers last (children, largest last).
  for suite in ("seeds", "engine", "centers", "table1", "images", "fbsfl", "ipfl"):
    if suite in suites:
      t0 = time.perf_counter()
      {"seeds": suite_seeds, "engine": suite_engine, "centers": suite_centers, "table1": suite_table1,
       "images": suite_images, "fbsfl": suite_fbsfl, "ipfl": suite_ipfl}[suite](args, rec, cache)
      rec.result["suites"][suite].setdefault("wall_s", time.perf_counter() - t0)  # table1 times its own
      rec.save()
  if "fed" in cache:
    rec.result["default_federation_build_s"] = cache["build_s"]
  rec.result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
  rec.result["peak_memory_parent"] = peak_memory()
  rec.save()
  if args.record:
    record(rec.result)
  return rec.result


if __name__ == "__main__":
  main()
