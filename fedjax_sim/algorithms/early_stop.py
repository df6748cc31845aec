"""Early stopping on mean validation AUROC inside the compiled program (SPEC §3.3).

Used by the rows with an ``-X`` (ABPS-X, FedAvg-X): the best-validation models are
kept, and once ``patience`` rounds pass without a better mean validation AUROC,
later rounds become no-ops (no training, no bytes) through masks, not Python branches.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class EarlyStop:
  best_params: Any  # the deployed models at the round of best mean validation AUROC (None when off)
  best_val: jax.Array  # [] best mean validation AUROC so far
  stale_rounds: jax.Array  # [] rounds since the best
  stopped: jax.Array  # [] bool, patience ran out


def init(params, patience: int) -> EarlyStop:
  """Starts tracking; with ``patience = 0`` (off) no copy of the models is kept (memory at scale)."""
  return EarlyStop(best_params=params if patience > 0 else None, best_val=jnp.asarray(-jnp.inf, jnp.float32),
                   stale_rounds=jnp.asarray(0, jnp.int32), stopped=jnp.asarray(False))


def update(es: EarlyStop, params, val: jax.Array, patience: int) -> EarlyStop:
  """Keeps ``params`` if ``val`` beats the best; stops after ``patience`` stale rounds (0 = never)."""
  better = val > es.best_val
  best = (None if es.best_params is None else
          jax.tree_util.tree_map(lambda new, old: jnp.where(better, new, old), params, es.best_params))
  stale = jnp.where(better, 0, es.stale_rounds + 1)
  stopped = (stale >= patience) if patience > 0 else jnp.asarray(False)
  return EarlyStop(best_params=best, best_val=jnp.maximum(val, es.best_val), stale_rounds=stale, stopped=stopped)


def freeze_if_stopped(was_stopped: jax.Array, new_state, old_state, metrics):
  """After the stop, a round returns the old state and all-zero metrics (a no-op)."""
  state = jax.tree_util.tree_map(lambda a, b: jnp.where(was_stopped, b, a), new_state, old_state)
  metrics = jax.tree_util.tree_map(lambda m: jnp.where(was_stopped, jnp.zeros_like(m), m), metrics)
  return state, metrics
