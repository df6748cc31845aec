"""Models: stateless ``init``/``apply`` wrappers around flax modules."""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from fedjax_sim.models.mlp import MLP, LAYER_NAMES, num_params


class Model(NamedTuple):
  """A model as two pure functions.

  Attributes:
    init: ``key -> params``.
    apply: ``(params, x, train, rng) -> (logits, representation)``; ``rng`` may be
      None when ``train`` is False.
  """

  init: Callable
  apply: Callable


def mlp_model(num_features: int, hidden=(128, 64), dropout: float = 0.2) -> Model:
  """The SPEC §3.1 MLP as a :class:`Model`."""
  module = MLP(hidden=tuple(hidden), dropout=dropout)

  def init(key):
    return module.init({"params": key}, jnp.zeros((1, num_features), jnp.float32), train=False)["params"]

  def apply(params, x, train, rng):
    rngs = {"dropout": rng} if train else {}
    return module.apply({"params": params}, x, train=train, rngs=rngs)

  return Model(init=init, apply=apply)


__all__ = ["MLP", "LAYER_NAMES", "Model", "mlp_model", "num_params"]
