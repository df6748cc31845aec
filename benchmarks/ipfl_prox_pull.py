"""Why Ditto's personal models go non-finite beside an all-ones free rider (docs/IPFL.md §7): one client's local
training of round 2, step by step.

Ditto (Li et al. 2021, issue 13: λ = 1) trains each client's personal model v_i on CE(v) + λ/2 ‖v − w‖², where w
is the global model, FedAvg's n-weighted mean of the uploads. An all-ones upload (paper 003's same-value free rider)
puts about 1/9 of a vector of ones into w, and the LeNet's logits at w reach about 6e5. FedAvg's clients start
*at* w: their first SGD step is huge, the ReLUs die and the model sits, finite, at one class. Ditto's personal
model starts at its healthy round-1 model and is *pulled* toward w by the quadratic term; each time the pull brings
it back into the region where CE's gradient is large, the gradient throws it further out.

This script runs round 1 of ``--method`` through the package's compiled round (``configs/ipfl_attacks.toml``,
Fashion-MNIST: it needs the real files), then replays round 2's local training of client ``--client`` twice with
the task's own optimizer (SGD, momentum 0.9, lr 0.01, weight decay 1e-5, fresh every round): from its personal
model with the pull λ = ``--lam`` toward the round-1 global model, and from the global model itself without a
pull (FedAvg's start, and Ditto's global copy). It prints the loss, CE, the largest |logit|, the gradient norm,
‖θ‖ and ‖θ − w‖ along the steps, until the first non-finite value. The minibatches are drawn here (uniform
rows), not in the engine's order: this is a diagnostic of the dynamics, not a replay of a run.

Usage:
  python benchmarks/ipfl_prox_pull.py [--method ipfl_ditto_same_value] [--lam 1] [--client 0] [--steps 200]
                                      [--seed 42] [--every 10]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

try:  # the installed package (or PYTHONPATH), else the checkout this script lives in
  import fedjax_sim  # noqa: F401
except ImportError:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from fedjax_sim.algorithms.ipfl import market as M  # noqa: E402


def trace_steps(loss, optimizer, params, center, batches_x, batches_y, lam):
  """Local training on ``loss(params, x, y) -> (mean CE, logits)`` plus ``lam/2 ‖θ − center‖²``, one step per
  minibatch in ``batches_x [S, B, ...]``, ``batches_y [S, B]``, under ``lax.scan`` from a fresh ``optimizer``.

  Returns a dict of ``[S]`` arrays, each read before its step's update: ``loss`` (the objective), ``ce``,
  ``logit`` (max |logit|), ``grad`` (global gradient norm), and after it ``norm`` (‖θ‖) and ``dist``
  (‖θ − center‖).
  """
  flat_center = ravel_pytree(center)[0]

  def objective(p, x, y):
    ce, logits = loss(p, x, y)
    # Ditto's local term as the compiled round computes it (ipfl.algorithm.local_regularizer: κ/2 ‖θ − center‖²)
    return ce + M.prox_penalty(p, center, lam, 1.0), (ce, jnp.max(jnp.abs(logits)))

  def step(carry, batch):
    p, s = carry
    (value, (ce, logit)), g = jax.value_and_grad(objective, has_aux=True)(p, *batch)
    u, s = optimizer.update(g, s, p)
    p = optax.apply_updates(p, u)
    flat = ravel_pytree(p)[0]
    out = dict(loss=value, ce=ce, logit=logit, grad=optax.global_norm(g), norm=jnp.linalg.norm(flat),
               dist=jnp.linalg.norm(flat - flat_center))
    return (p, s), out

  _, trace = jax.lax.scan(step, (params, optimizer.init(params)), (batches_x, batches_y))
  return trace


def first_nonfinite(trace) -> int:
  """The 1-based step of the first non-finite value in ``trace``, 0 when all are finite."""
  bad = np.zeros_like(np.asarray(trace["loss"]), bool)
  for v in trace.values():
    bad |= ~np.isfinite(np.asarray(v))
  return int(np.argmax(bad)) + 1 if bad.any() else 0


def print_trace(title: str, trace, every: int) -> None:
  stop = first_nonfinite(trace)
  print(f"--- {title}: " + (f"first non-finite value at step {stop}" if stop else "finite at every step"))
  n = len(np.asarray(trace["loss"]))
  for k in range(n):
    if k < 5 or (k + 1) % every == 0 or k + 1 == stop:
      print(f"step {k + 1:4d}  loss {float(trace['loss'][k]):10.3e}  ce {float(trace['ce'][k]):10.3e}  "
            f"max|logit| {float(trace['logit'][k]):10.3e}  |grad| {float(trace['grad'][k]):10.3e}  "
            f"|theta| {float(trace['norm'][k]):10.3e}  |theta - w| {float(trace['dist'][k]):10.3e}")
    if stop and k + 1 >= stop:
      break


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--method", default="ipfl_ditto_same_value")
  parser.add_argument("--lam", type=float, default=1.0, help="the pull toward the global model (Ditto's λ)")
  parser.add_argument("--client", type=int, default=0)
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--seed", type=int, default=42)
  parser.add_argument("--every", type=int, default=10, help="print every this many steps")
  args = parser.parse_args(argv)
  if not args.method.startswith("ipfl_ditto"):
    print(f"error: --method must be one of ipfl_attacks' Ditto methods (ipfl_ditto, ipfl_ditto_shuffle, "
          f"ipfl_ditto_sign_flip, ipfl_ditto_same_value, ipfl_ditto_gauss), not {args.method!r}", file=sys.stderr)
    return 2
  if args.lam < 0 or args.steps < 1 or args.every < 1:
    print("error: --lam must be >= 0, --steps and --every >= 1", file=sys.stderr)
    return 2

  from fedjax_sim import experiment
  from fedjax_sim.algorithms import registry
  from fedjax_sim.config import apply_overrides, config_for_method, load_experiment
  from fedjax_sim.errors import ConfigError, DataError
  from fedjax_sim.tasks import task_for

  try:
    config = apply_overrides(load_experiment("ipfl_attacks"), {"methods": args.method})
    config = config_for_method(config, registry.preset(args.method))
    host = experiment.build_federation(config, warn=lambda m: print(m, file=sys.stderr))
  except (ConfigError, DataError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if not 0 <= args.client < host.num_clients:
    print(f"error: --client must be in 0..{host.num_clients - 1}", file=sys.stderr)
    return 2
  algorithm, model = registry.build_method(args.method, config, host)
  fed = algorithm.prepare(host)
  hyper = registry.hyper_from_config(config, args.method)
  state = jax.jit(algorithm.init)(jax.random.key(args.seed), fed, hyper)
  state, _ = jax.jit(algorithm.round)(jax.random.fold_in(jax.random.key(args.seed), 1), state, fed, hyper,
                                      jnp.asarray(1, jnp.int32))
  personal = jax.tree_util.tree_map(lambda a: a[args.client], state.params)
  glob = state.glob
  norm = lambda tree: float(jnp.linalg.norm(ravel_pytree(tree)[0]))  # noqa: E731
  print(f"after round 1: |personal model of client {args.client}| {norm(personal):.1f}, |global model w| "
        f"{norm(glob):.1f}, |theta_0| {norm(state.theta0):.1f}")

  for b in host.buckets:  # the client's train rows
    idx = np.asarray(b.client_idx).tolist()
    if args.client in idx:
      pos = idx.index(args.client)
      x, y, n = np.asarray(b.x[pos]), np.asarray(b.y[pos]), int(b.n[pos])
      break
  rows = np.random.default_rng(args.seed).integers(0, n, (args.steps, config.learner.batch_size))
  bx, by = jnp.asarray(x[rows]), jnp.asarray(y[rows])
  task = task_for(config, host)
  optimizer = task.make_optimizer(config.learner, 2)

  def loss(p, xb, yb):
    logits = model.apply(p, xb, False, None)[0]
    return jnp.mean(task.loss(logits, yb)), logits

  run = jax.jit(lambda p, c, bx, by, lam: trace_steps(loss, optimizer, p, c, bx, by, lam))
  print_trace(f"personal model, pull λ = {args.lam:g} toward w (Ditto)",
              jax.device_get(run(personal, glob, bx, by, args.lam)), args.every)
  print_trace("global model w, no pull (FedAvg's start; Ditto's global copy)",
              jax.device_get(run(glob, glob, bx, by, 0.0)), args.every)
  return 0


if __name__ == "__main__":
  sys.exit(main())
