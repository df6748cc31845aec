"""iPFL's benchmark (issue 13): the market for 1,000 clients in one compiled call, and an iPFL round against a
FedAvg round on the same federation.

``python benchmarks/ipfl_bench.py`` prints one JSON object:

* ``market``: distance, the Box 2 threshold solve for all C² (buyer, seller) pairs (vectorized bisection in log
  space), the greedy graph, payments and utilities for C = ``--clients`` (1,000) random models of ``--params``
  parameters, as one jitted call: compile seconds, then the median of ``--repeats`` runs (``block_until_ready``).
  Against it, the per-pair loop a user would write (the authors solve each pair with a scalar root finder): the
  same bisection in plain Python/numpy for ``--loop-buyers`` buyers against all C sellers, timed and scaled to C
  buyers (stated as an extrapolation in the output).
* ``rounds``: seconds per round of ``ipfl`` (market), ``ipfl_fedavg`` (the same family's FedAvg rule: the same
  training, evaluation and utility accounting) and the platform's ``fedavg`` on configs/ipfl.toml's federation
  (Fashion-MNIST, Dirichlet 0.1, 10 clients), ``--rounds`` rounds of ``--local-steps`` iterations, one seed; each
  one compiled call through the project's API (compile reported apart).

Needs the Fashion-MNIST files for ``rounds`` (Debian's dataset-fashion-mnist, or ``--fmnist-path``); ``--no-rounds``
skips them.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def market_call(lam: float, iters: int):
  from fedjax_sim.algorithms.ipfl import market as M

  @jax.jit
  def run(flat, flat0, k, n, c):
    d = M.cosine_distance(flat, flat0)
    t = M.thresholds(k, n, c, d, lam, iters=iters)
    a = M.greedy_graph(t, n)
    p = M.payments(a, k, n, d, lam)
    return a, p, M.utilities(a, k, n, c, p)
  return run


def loop_thresholds(k, n, c, d, lam, buyers: int, iters: int) -> float:
  """Seconds for ``buyers`` rows of the threshold solve as a plain Python loop over (i, j) (bisection in log space
  on the same bracket as market.thresholds: T in (N_j, ∞), the residual falling from +∞ to −rhs)."""
  start = time.perf_counter()
  m = len(n)
  for i in range(buyers):
    for j in range(m):
      if i == j:
        continue
      rhs = c[j] + lam * d[i, j] * n[j] / n[i]
      if rhs <= 0 or k[i] == 0:
        continue
      lo, hi = math.log(n[j] * (1 + 1e-7)), math.log(n[j] + 1e12)
      for _ in range(iters):
        mid = 0.5 * (lo + hi)
        t = math.exp(mid)
        f = math.sqrt(k[i] / (t - n[j])) - math.sqrt(k[i] / t) - rhs
        lo, hi = (mid, hi) if f > 0 else (lo, mid)
  return time.perf_counter() - start


def bench_market(clients: int, params: int, repeats: int, loop_buyers: int, iters: int = 32) -> dict:
  rng = np.random.default_rng(0)
  flat0 = jnp.asarray(rng.normal(size=(params,)), jnp.float32)
  flat = flat0[None, :] + jnp.asarray(rng.normal(size=(clients, params)) * 0.1, jnp.float32)
  n = jnp.asarray(rng.integers(100, 6000, clients), jnp.float32)
  k = jnp.full((clients,), 5e5, jnp.float32)
  c = jnp.ones((clients,), jnp.float32)
  run = market_call(0.001, iters)
  t0 = time.perf_counter()
  compiled = run.lower(flat, flat0, k, n, c).compile()
  compile_s = time.perf_counter() - t0
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(flat, flat0, k, n, c))
    times.append(time.perf_counter() - t0)
  a, _, u = compiled(flat, flat0, k, n, c)
  from fedjax_sim.algorithms.ipfl import market as M
  d = np.asarray(jax.jit(M.cosine_distance)(flat, flat0), np.float64)
  loop_s = loop_thresholds(np.asarray(k, np.float64), np.asarray(n, np.float64), np.asarray(c, np.float64), d,
                           0.001, loop_buyers, iters)
  run_s = statistics.median(times)
  loop_full = loop_s * clients / loop_buyers
  return {"clients": clients, "params": params, "compile_s": round(compile_s, 2), "run_s": round(run_s, 4),
          "purchases_per_client": float(np.asarray(a > 0).sum() / clients), "min_utility": float(np.min(u)),
          "loop_buyers_timed": loop_buyers, "loop_thresholds_s_extrapolated": round(loop_full, 1),
          "speedup_vs_loop_thresholds_only": round(loop_full / run_s, 1)}


def bench_rounds(rounds: int, local_steps: int, path: str) -> dict:
  from fedjax_sim.config import apply_overrides, load_experiment
  from fedjax_sim.data.labeled import labeled_federation
  from fedjax_sim.experiment import RunOptions, run_method
  base = load_experiment("ipfl", {"rounds": rounds, "seeds": "42"})
  base = apply_overrides(base, {"learner.local_steps": local_steps, **({"data.path": path} if path else {})})
  fed = labeled_federation(base)
  out = {"rounds": rounds, "local_steps": local_steps, "clients": fed.num_clients}
  for method in ("ipfl", "ipfl_fedavg", "fedavg"):
    run = run_method(method, apply_overrides(base, {"methods": method}), fed, RunOptions())  # applies its preset
    out[method] = {"compile_s": round(run.compile_s, 1), "run_s": round(run.run_s, 2),
                   "s_per_round": round(run.run_s / rounds, 3), "accuracy": run.summary.get("accuracy_mean")}
  out["ipfl_over_fedavg"] = round(out["ipfl"]["s_per_round"] / out["fedavg"]["s_per_round"], 3)
  out["ipfl_over_ipfl_fedavg"] = round(out["ipfl"]["s_per_round"] / out["ipfl_fedavg"]["s_per_round"], 3)
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--clients", type=int, default=1000)
  p.add_argument("--params", type=int, default=4096, help="parameters of the random models of the market call")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--loop-buyers", type=int, default=5)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--local-steps", type=int, default=200)
  p.add_argument("--fmnist-path", default="")
  p.add_argument("--no-rounds", action="store_true")
  args = p.parse_args(argv)
  out = {"backend": jax.default_backend(), "device": str(jax.devices()[0]),
         "market": bench_market(args.clients, args.params, args.repeats, args.loop_buyers)}
  if not args.no_rounds:
    out["rounds"] = bench_rounds(args.rounds, args.local_steps, args.fmnist_path)
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
