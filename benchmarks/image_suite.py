"""The image task of the benchmarks (issue 10): FedAvg on Fashion-MNIST, engine vs a per-client loop, K-of-N cost.

``python benchmarks/bench.py --suite images`` (or ``python benchmarks/image_suite.py``) runs, on the
``fedavg_fmnist`` federation (Dirichlet(0.1) over 100 clients, LeNet, SGD, batch 32, E = 2):

* the engine with K = 10 clients per round (``participation.clients_per_round``): one compiled call of R rounds,
  seconds per round;
* the engine with every client training (K = N = 100): seconds per round; the K-of-N cost ratio is the first over
  this one (issue 10 item 3: at most 0.2×);
* the same two on an IID split (equal client sizes, so the slot plan pads nothing: the ratio is K/N plus the fixed
  per-round work, evaluation and aggregation);
* the per-client loop a user without ``vmap`` writes: one jitted client update called client after client for K
  clients drawn the same way, then the n-weighted average, timed in the same run. Each client's rows are padded to
  the next power of two and its steps stop at its own count, so a few sizes are compiled, all in a warm-up before
  the timed rounds (the timed rounds never recompile).

Needs the Fashion-MNIST files (Debian's dataset-fashion-mnist, or ``--fmnist-path``).
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def _config(rounds: int, k: int, partition: str, path: str):
  from fedjax_sim.config import apply_overrides, load_experiment
  config = load_experiment("fedavg_fmnist", {"rounds": rounds, "seeds": "11"})
  return apply_overrides(config, {"participation.clients_per_round": k, "data.partition": partition,
                                  "data.path": path})


def time_engine(config, fed) -> dict:
  """Compile and run seconds of ``fedavg`` under ``config`` through the project's API (one compiled call)."""
  from fedjax_sim.experiment import RunOptions, run_method
  run = run_method("fedavg", config, fed, RunOptions())
  return {"compile_s": run.compile_s, "run_s": run.run_s, "s_per_round": run.run_s / config.rounds,
          "accuracy": run.summary["accuracy_mean"]}


def time_loop(config, fed, rounds: int) -> dict:
  """FedAvg with K of N clients as a per-client Python loop: a jitted client update per selected client."""
  from fedjax_sim.algorithms.registry import build_method, hyper_from_config
  from fedjax_sim.algorithms.base import weighted_average
  from fedjax_sim.data.federation import with_train_rows
  from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
  from fedjax_sim.tasks import task_for
  fed = with_train_rows(fed)
  _, model = build_method("fedavg", config, fed)
  lc = config.learner
  update = jax.jit(make_client_update(task_for(config, fed).with_model(model), batch_size=lc.batch_size,
                                      epochs=lc.local_epochs))
  hyper = hyper_from_config(config, "fedavg")
  rows = jax.tree_util.tree_map(np.asarray, fed.rows)
  n = np.asarray(fed.n_train)
  k = config.participation.clients_per_round
  params = model.init(jax.random.key(0))
  rng = np.random.default_rng(0)
  # A client's rows padded to the next power of two, trained with the early-stopping step loop: a handful of
  # compiled sizes, all paid in the warm-up, so the timed rounds measure the loop, not recompiles.
  padded = lambda m: 1 << max(int(m) - 1, 0).bit_length()  # noqa: E731
  step = jax.jit(update.dynamic_steps)

  def train(i, params, t, key):
    a, m = rows.start[i], int(n[i])
    length = padded(m)
    x = np.zeros((length, *rows.x.shape[1:]), rows.x.dtype)
    y = np.zeros((length, *rows.y.shape[1:]), rows.y.dtype)
    x[:m], y[:m] = rows.x[a:a + m], rows.y[a:a + m]
    return step(key, params, ClientData(jnp.asarray(x), jnp.asarray(y), jnp.int32(m)),
                ClientContext(hyper=hyper, t=jnp.int32(t)))

  def one_round(params, t):
    selected = rng.choice(fed.num_clients, k, replace=False)
    keys = jax.random.split(jax.random.key(t), fed.num_clients)
    out = [train(i, params, t, keys[i]).params for i in selected]  # the loop the engine replaces
    stacked = jax.tree_util.tree_map(lambda *p: jnp.stack(p), *out)
    return jax.block_until_ready(weighted_average(stacked, jnp.asarray(n[selected])))

  t0 = time.perf_counter()
  firsts = {}
  for i in range(fed.num_clients):  # warm-up: one client of every padded size pays its compile
    firsts.setdefault(padded(n[i]), i)
  for i in firsts.values():
    jax.block_until_ready(train(i, params, 1, jax.random.key(0)).params)
  warm = time.perf_counter() - t0
  t0 = time.perf_counter()
  for t in range(1, rounds + 1):
    params = one_round(params, t)
  return {"warmup_s": warm, "compiled_sizes": len(firsts), "s_per_round": (time.perf_counter() - t0) / rounds}


def suite(rounds: int = 2, loop_rounds: int = 1, path: str = "", k: int = 10) -> dict:
  """All the figures above, as one dict."""
  from fedjax_sim.data.labeled import labeled_federation
  out = {"task": "fashion_mnist fedavg lenet", "rounds": rounds, "clients_per_round": k}
  for partition in ("dirichlet", "iid"):
    sampled = _config(rounds, k, partition, path)
    fed = labeled_federation(sampled)
    full = _config(rounds, 0, partition, path)
    row = {"clients": fed.num_clients, "train_rows": int(np.asarray(fed.n_train).sum()),
           "engine_k": time_engine(sampled, fed), "engine_full": time_engine(full, fed)}
    row["k_of_n_ratio"] = row["engine_k"]["s_per_round"] / row["engine_full"]["s_per_round"]
    if partition == "dirichlet":
      row["loop_k"] = time_loop(sampled, fed, loop_rounds)
      row["engine_speedup_over_loop"] = row["loop_k"]["s_per_round"] / row["engine_k"]["s_per_round"]
    out[partition] = row
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--loop-rounds", type=int, default=1)
  p.add_argument("--fmnist-path", default="")
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)
  result = suite(args.rounds, args.loop_rounds, args.fmnist_path)
  text = json.dumps(result, indent=1)
  print(text)
  if args.json:
    with open(args.json, "w") as f:
      f.write(text)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
