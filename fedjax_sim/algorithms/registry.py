"""Method names → algorithms, and the traced hyperparameter pytree built from a config."""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms import reference, star
from fedjax_sim.algorithms.base import Algorithm
from fedjax_sim.engine.local import LearnerHyper, make_client_update
from fedjax_sim.models import Model, mlp_model


@struct.dataclass
class Hyper:
  """Every numeric hyperparameter a method reads inside the compiled program.

  Traced (not closed over), so one compiled program serves any values and
  they can be swept with ``vmap`` (SPEC §1 "Sweeps").
  """

  learner: LearnerHyper
  prox_mu: jnp.ndarray  # FedProx μ
  dyn_alpha: jnp.ndarray  # FedDyn α
  moon_mu: jnp.ndarray  # MOON μ
  moon_temperature: jnp.ndarray  # MOON τ


def hyper_from_config(config) -> Hyper:
  f = lambda v: jnp.asarray(v, jnp.float32)
  return Hyper(
      learner=LearnerHyper(learning_rate=f(config.learner.learning_rate),
                           weight_decay=f(config.learner.weight_decay)),
      prox_mu=f(config.fedprox.mu), dyn_alpha=f(config.feddyn.alpha),
      moon_mu=f(config.moon.mu), moon_temperature=f(config.moon.temperature))


_REGULARIZERS = {
    "fedprox": star.fedprox_regularizer,
    "feddyn": star.feddyn_regularizer,
    "moon": star.moon_regularizer,
}

_FACTORIES = {
    "local": reference.local_only,
    "centralized": reference.centralized,
    "fedavg": star.fedavg,
    "fedprox": star.fedprox,
    "feddyn": star.feddyn,
    "moon": star.moon,
}

METHODS = tuple(_FACTORIES)
"""Every runnable method name."""


def build_model(config, num_features: int) -> Model:
  return mlp_model(num_features, hidden=config.learner.hidden, dropout=config.learner.dropout)


def build_method(name: str, config, num_features: int):
  """Returns ``(algorithm, model)`` for method ``name`` under ``config``."""
  model = build_model(config, num_features)
  lc = config.learner
  client_update = make_client_update(
      model.apply, batch_size=lc.batch_size, epochs=lc.local_epochs,
      local_steps=lc.local_steps or None, regularizer=_REGULARIZERS.get(name))
  algorithm: Algorithm = _FACTORIES[name](model, client_update)
  return algorithm, model
