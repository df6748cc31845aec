"""FedAvg seconds per round on the 230-center clinical federation: compiled engine vs a per-client loop.

Usage:
  python benchmarks/bench_fedavg.py [--rounds 20] [--loop-rounds 2] [--seeds 1] [--also abps_x,...]
                                    [--json OUT.json] [--record]

Both are timed in the same run on the same machine:
* engine: the whole R-round simulation as one jitted program (``jit(vmap(simulate))``);
  compile time is reported apart from run time;
* loop: what a user without ``vmap`` writes: one jitted client update called in a
  Python loop over the 230 clients, then the n-weighted average, round after round
  (its compile time, one per bucket shape, is also excluded).
Targets (issue 2): ≤ 0.6 s per round on 2 CPU cores; ≤ 3 ms per round on one H200.
``--record`` appends the figures, with the machine named, to benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

import jax
import jax.numpy as jnp

from fedjax_sim.algorithms.base import weighted_average
from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.config import ExperimentConfig, apply_overrides
from fedjax_sim.engine.local import make_client_update
from fedjax_sim.engine.simulate import compile_seeds, make_simulation
from fedjax_sim.experiment import build_federation, seed_keys

RESULTS = pathlib.Path(__file__).resolve().parent / "RESULTS.md"


def machine() -> str:
  """A one-line description of the machine that ran the benchmark."""
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


def time_engine(config, fed, rounds, seeds, method="fedavg", after_preset=None):
  """Compile time and seconds per round of ``method``'s whole simulation as one jitted call.

  ``after_preset`` overrides are applied after the method's preset (e.g. to switch off early stopping).
  """
  from fedjax_sim.algorithms.registry import preset
  from fedjax_sim.config import config_for_method
  config = config_for_method(config, {k: v for k, v in preset(method).items()
                                      if k not in ("rounds", "reference_rounds")})
  config = apply_overrides(config, after_preset or {})
  algorithm, model = build_method(method, config, fed.num_features, fed.num_clients)
  simulate = make_simulation(algorithm, model, rounds)
  keys = seed_keys(list(range(1, seeds + 1)))
  hyper = hyper_from_config(config)
  t0 = time.perf_counter()
  compiled, _ = compile_seeds(simulate, keys, fed, hyper)
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(compiled(keys, fed, hyper))  # warm
  t0 = time.perf_counter()
  jax.block_until_ready(compiled(keys, fed, hyper))
  run_s = time.perf_counter() - t0
  return compile_s, run_s / rounds


def time_loop(config, fed, rounds):
  """One jitted client update in a Python loop over clients (no vmap), then n-weighted FedAvg."""
  algorithm, model = build_method("fedavg", config, fed.num_features)
  lc = config.learner
  update = jax.jit(make_client_update(model.apply, batch_size=lc.batch_size, epochs=lc.local_epochs))
  hyper = hyper_from_config(config)
  clients = []
  for b in fed.buckets:
    for pos in range(b.x.shape[0]):
      clients.append((int(b.client_idx[pos]), b.x[pos], b.y[pos], b.n[pos]))
  clients.sort(key=lambda c: c[0])
  theta = model.init(jax.random.key(0))

  def one_round(theta, key):
    keys = jax.random.split(key, len(clients))
    out = [update(keys[i], theta, x, y, n, theta, None, hyper, hyper.learner).params
           for i, (_, x, y, n) in enumerate(clients)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *out)
    return weighted_average(stacked, fed.n_train)

  t0 = time.perf_counter()
  theta = jax.block_until_ready(one_round(theta, jax.random.key(1)))  # compiles once per bucket shape
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for r in range(rounds):
    theta = one_round(theta, jax.random.key(2 + r))
  jax.block_until_ready(theta)
  return compile_s, (time.perf_counter() - t0) / rounds


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rounds", type=int, default=20, help="rounds in the compiled engine's timed run")
  p.add_argument("--loop-rounds", type=int, default=2, help="rounds of the per-client loop to time")
  p.add_argument("--seeds", type=int, default=1, help="seeds in the engine's single call")
  p.add_argument("--also", type=str, default="", help="more methods to time with the engine beside FedAvg, "
                 "e.g. abps_x,abps (early stopping is switched off so every round works)")
  p.add_argument("--json", type=str, default=None, help="also write the results here")
  p.add_argument("--record", action="store_true", help="append a row to benchmarks/RESULTS.md")
  args = p.parse_args(argv)
  config = ExperimentConfig()
  fed = build_federation(config, warn=lambda m: print(m, file=sys.stderr))
  print(f"machine: {machine()}; jax {jax.__version__}; federation: {fed.num_clients} centers, "
        f"{int(fed.n_train.sum())} train rows, padded/useful steps {fed.padded_step_ratio(128):.2f}")
  e_compile, e_round = time_engine(config, fed, args.rounds, args.seeds)
  print(f"engine : compile {e_compile:.1f} s; {e_round * 1e3:.1f} ms per round ({args.seeds} seed(s), {args.rounds} rounds)")
  l_compile, l_round = time_loop(config, fed, args.loop_rounds)
  print(f"loop   : compile {l_compile:.1f} s; {l_round * 1e3:.1f} ms per round (jitted client update in a Python loop)")
  speedup = l_round / (e_round / args.seeds)
  print(f"speed-up per seed-round: {speedup:.1f}×")
  result = {"benchmark": "fedavg_230", "machine": machine(), "jax": jax.__version__, "centers": fed.num_clients,
            "engine_compile_s": e_compile, "engine_s_per_round": e_round, "seeds": args.seeds,
            "rounds": args.rounds, "loop_compile_s": l_compile, "loop_s_per_round": l_round,
            "speedup_per_seed_round": speedup, "date": time.strftime("%Y-%m-%d")}
  others = {}
  for method in [m for m in args.also.split(",") if m]:
    # Early stopping off: a stopped program would time no-op rounds.
    no_stop = {"abps.early_stopping_patience": 0, "fedavg.early_stopping_patience": 0}
    c_s, r_s = time_engine(config, fed, args.rounds, args.seeds, method, after_preset=no_stop)
    others[method] = {"compile_s": c_s, "s_per_round": r_s, "vs_fedavg": r_s / e_round}
    print(f"{method:7s}: compile {c_s:.1f} s; {r_s * 1e3:.1f} ms per round ({r_s / e_round:.2f}× FedAvg's engine round)")
  result["others"] = others
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
  if args.record:
    with open(RESULTS, "a") as f:
      f.write(f"| {result['date']} | fedavg, 230 centers | {result['machine']} | {args.seeds} | "
              f"{e_compile:.1f} | {e_round * 1e3:.1f} | {l_round * 1e3:.1f} | {speedup:.1f}× |\n")
      for method, o in others.items():
        f.write(f"| {result['date']} | {method}, 230 centers (engine only; {o['vs_fedavg']:.2f}× FedAvg's round) "
                f"| {result['machine']} | {args.seeds} | {o['compile_s']:.1f} | {o['s_per_round'] * 1e3:.1f} | — | — |\n")
  return result


if __name__ == "__main__":
  main()
