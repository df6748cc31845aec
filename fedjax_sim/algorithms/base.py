"""The algorithm contract (STYLE.md §"What that means here", 1): a factory returning pure functions.

``init(key, federation, hyper) -> state`` and
``round(key, state, federation, hyper, t) -> (state, RoundMetrics)``, plus
``deployed(state) -> (params, stacked)`` naming the model(s) evaluated on the
clients' validation and test splits. States are frozen ``flax.struct`` classes.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct



@struct.dataclass
class RoundMetrics:
  """What every round reports (one entry per round in the history; issue 10 item 4: a pytree).

  The first six fields are every method's; ``extra`` holds what a method family adds, any pytree of arrays,
  per-client ones included (participation ``[C]``, utilities ``[C]``). The history buffers are shaped from the
  round itself (``jax.eval_shape``), and the family's declared reductions
  (:attr:`fedjax_sim.algorithms.spec.MethodSpec.metrics`) turn a run's ``[R, ...]`` history into summary numbers.
  """

  bytes: jax.Array  # [] bytes exchanged this round (SPEC §3.4)
  train_loss: jax.Array  # [] mean local training loss over clients that trained
  rest_fraction: jax.Array  # [] fraction of clients that exchanged nothing this round
  mean_partners: jax.Array  # [] E|P_i|: mean number of partners (star: 1 for a participant)
  active: jax.Array  # [] 1.0 if the round did work (0 after early stopping)
  nonfinite_client: jax.Array = 0  # [] int32: 1 + the first client whose local loss or update is non-finite; 0 if none
  extra: Any = None  # the family's own per-round metrics (a dict of arrays), or None


class Algorithm(NamedTuple):
  """A federated algorithm as pure functions.

  Attributes:
    name: registry name.
    init: ``(key, federation, hyper) -> state``.
    round: ``(key, state, federation, hyper, t) -> (state, RoundMetrics)``; ``t`` is
      the 1-based round index (a traced int32).
    deployed: ``state -> (params, stacked)``: the evaluated model; ``stacked`` (a
      Python bool) says whether params carry a leading client axis.
    prepare: ``federation -> federation`` applied once, outside the compiled
      program (Centralized pools the train splits); identity for most methods.
    sent_params: parameters one client sends per exchange (for byte accounting).
    federated: False for reference rows that exchange no models (Centralized).
    fault_hint: what else to try when the method goes non-finite, added to the fault's error line after the
      generic advice (a learning rate, the data): the method's own step sizes.
  """

  name: str
  init: Callable
  round: Callable
  deployed: Callable
  prepare: Callable = lambda federation: federation
  sent_params: int = 0
  federated: bool = True
  fault_hint: str = ""


def nonfinite_rows(tree, num_clients: int) -> tuple:
  """``(any_bad [], bad [C])``: whether any float leaf of ``tree`` holds a non-finite value, and which
  clients' slices of its per-client leaves (leading axis C) do."""
  any_bad = jnp.asarray(False)
  bad = jnp.zeros((num_clients,), bool)
  for leaf in jax.tree_util.tree_leaves(tree):
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
      continue
    finite = jnp.isfinite(leaf)
    if leaf.ndim >= 1 and leaf.shape[0] == num_clients:
      bad = bad | ~jnp.all(finite.reshape(num_clients, -1), axis=1)
    else:
      any_bad = any_bad | ~jnp.all(finite)
  return any_bad | jnp.any(bad), bad


def nonfinite_client(loss: jax.Array, params=None) -> jax.Array:
  """1 + the index of the first client whose loss ``[C]`` (or stacked ``params [C, ...]``) is
  non-finite, else 0: what :class:`RoundMetrics` reports for the run's fault message."""
  _, bad = nonfinite_rows((loss, params), loss.shape[0])
  return jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, 0).astype(jnp.int32)


def require_federation(name: str, num_clients: int) -> None:
  """Refuses a federation of fewer than 2 centers for method ``name`` (issue 9).

  Decision: a federation of one center is not a federation; a row run on it would
  report one center's AUROC, from a handful of test rows, as the mean over centers
  (a star's average of one model is Local-only under another name).

  Raises:
    ConfigError: ``num_clients`` < 2.
  """
  if num_clients < 2:
    from fedjax_sim.errors import ConfigError
    raise ConfigError(f"{name} needs a federation of at least 2 centers, but this one has {num_clients} "
                      f"(a federation of one center is not a federation)")


def weighted_average(stacked, weights: jax.Array):
  """Σ_i w_i θ_i / Σ_i w_i over the leading client axis (FedAvg's n-weighted mean, McMahan et al. 2017)."""
  w = weights.astype(jnp.float32)
  w = w / jnp.sum(w)
  return jax.tree_util.tree_map(lambda a: jnp.tensordot(w, a, axes=1), stacked)


def broadcast_clients(tree, num_clients: int):
  """Stacks one pytree ``num_clients`` times on a new leading axis."""
  return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_clients,) + a.shape), tree)


def tree_sub(a, b):
  return jax.tree_util.tree_map(jnp.subtract, a, b)


def tree_add(a, b):
  return jax.tree_util.tree_map(jnp.add, a, b)


def tree_scale(a, s):
  return jax.tree_util.tree_map(lambda x: x * s, a)


def tree_vdot(a, b) -> jax.Array:
  """Σ over leaves of elementwise products (inner product of flattened pytrees)."""
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
