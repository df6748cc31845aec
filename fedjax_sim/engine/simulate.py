"""A whole simulation as one XLA program (SPEC §1 "One XLA program", "Sweeps").

``simulate(key, federation, hyper)`` scans ``algorithm.round`` over the rounds,
evaluates the deployed model on every client's validation split after each
round (the learning curve) and on the test split at the end. Seeds are swept
with ``jax.vmap`` over keys, and the result is jitted once:
``jax.jit(jax.vmap(simulate, in_axes=(0, None, None)))``.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics
from fedjax_sim.data.federation import Federation
from fedjax_sim.metrics import batched_auroc, mean_defined
from fedjax_sim.models import Model


@struct.dataclass
class History:
  """Per-round records, each with a leading ``[R]`` rounds axis."""

  metrics: RoundMetrics  # bytes, train loss, rest fraction, E|P_i|, active
  val_auroc: jax.Array  # [R] mean validation AUROC over clients with both classes


@struct.dataclass
class Outcome:
  """What one simulation returns."""

  state: Any  # the algorithm's final state
  history: History
  test_auroc: jax.Array  # [C] per-client test AUROC of the deployed model (NaN: one-class test split)
  val_auroc: jax.Array  # [C] per-client validation AUROC of the deployed model


def client_scores(model: Model, params, stacked: bool, x: jax.Array) -> jax.Array:
  """Logits of the deployed model(s) on ``x [C, n, d]`` (no dropout) → ``[C, n]``."""
  apply = lambda p, xc: model.apply(p, xc, False, None)[0]
  return jax.vmap(apply, in_axes=(0 if stacked else None, 0))(params, x)


def evaluate(model: Model, params, stacked: bool, x, y, m) -> jax.Array:
  """Per-client AUROC ``[C]`` of the deployed model(s) on a padded split."""
  return batched_auroc(client_scores(model, params, stacked, x), y, m)


def make_simulation(algorithm: Algorithm, model: Model, rounds: int):
  """Returns ``simulate(key, federation, hyper) -> Outcome`` (pure, not yet jitted).

  Args:
    algorithm: the method, from :mod:`fedjax_sim.algorithms`.
    model: the evaluated model family (for validation/test scoring).
    rounds: number of rounds R (static: it fixes the scan length).
  """

  def simulate(key: jax.Array, federation: Federation, hyper) -> Outcome:
    k_init, k_rounds = jax.random.split(key)
    state = algorithm.init(k_init, federation, hyper)

    def one_round(state, xs):
      t, k = xs
      state, metrics = algorithm.round(k, state, federation, hyper, t)
      params, stacked = algorithm.deployed(state)
      val = evaluate(model, params, stacked, federation.x_val, federation.y_val, federation.m_val)
      return state, (metrics, mean_defined(val)[0])

    ts = jnp.arange(1, rounds + 1, dtype=jnp.int32)
    state, (metrics, val_curve) = jax.lax.scan(one_round, state, (ts, jax.random.split(k_rounds, rounds)))
    params, stacked = algorithm.deployed(state)
    test = evaluate(model, params, stacked, federation.x_test, federation.y_test, federation.m_test)
    val = evaluate(model, params, stacked, federation.x_val, federation.y_val, federation.m_val)
    return Outcome(state=state, history=History(metrics=metrics, val_auroc=val_curve), test_auroc=test,
                   val_auroc=val)

  return simulate


def compile_seeds(simulate, keys: jax.Array, federation: Federation, hyper):
  """Jits ``vmap(simulate)`` over seeds and compiles it once, ahead of time.

  Returns:
    ``(compiled, lowered)``: call ``compiled(keys, federation, hyper)``; the
    compile cost is paid here, so the caller can time it apart from the run.
  """
  fn = jax.jit(jax.vmap(simulate, in_axes=(0, None, None)))
  lowered = fn.lower(keys, federation, hyper)
  return lowered.compile(), lowered
