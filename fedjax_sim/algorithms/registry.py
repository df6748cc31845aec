"""Method names → algorithms, and the traced hyperparameter pytree built from a config."""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms import decentralized, reference, star
from fedjax_sim.algorithms.wpfed import wpfed
from fedjax_sim.algorithms import wpfed as wpfed_module
from fedjax_sim.algorithms.abps import algorithm as abps_module
from fedjax_sim.algorithms.abps.algorithm import ABPSStatic, abps
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
  abps_kappa: jnp.ndarray  # ABPS κ (int32; ≤ the static slot count)
  abps_epsilon: jnp.ndarray  # ε-greedy swap probability
  abps_gamma: jnp.ndarray  # UCB exploration weight γ
  abps_tau_acc: jnp.ndarray  # acceptance threshold τ_acc
  abps_alpha0: jnp.ndarray  # Beta prior α0
  abps_beta0: jnp.ndarray  # Beta prior β0
  abps_phi_min: jnp.ndarray  # Shapley clip lower end
  abps_phi_max: jnp.ndarray  # Shapley clip upper end
  abps_momentum: jnp.ndarray  # momentum β on the aggregation delta
  server_momentum: jnp.ndarray  # FedAvg-X server momentum β
  defta_decay: jnp.ndarray  # DeFTA trust EMA factor ρ


def hyper_from_config(config) -> Hyper:
  f = lambda v: jnp.asarray(v, jnp.float32)
  return Hyper(
      learner=LearnerHyper(learning_rate=f(config.learner.learning_rate),
                           weight_decay=f(config.learner.weight_decay)),
      prox_mu=f(config.fedprox.mu), dyn_alpha=f(config.feddyn.alpha),
      moon_mu=f(config.moon.mu), moon_temperature=f(config.moon.temperature),
      abps_kappa=jnp.asarray(config.abps.kappa, jnp.int32), abps_epsilon=f(config.abps.epsilon),
      abps_gamma=f(config.abps.gamma), abps_tau_acc=f(config.abps.tau_acc), abps_alpha0=f(config.abps.alpha0),
      abps_beta0=f(config.abps.beta0), abps_phi_min=f(config.abps.phi_min), abps_phi_max=f(config.abps.phi_max),
      abps_momentum=f(config.abps.momentum), server_momentum=f(config.fedavg.server_momentum),
      defta_decay=f(config.graph.defta_decay))


_REGULARIZERS = {
    "fedprox": star.fedprox_regularizer,
    "feddyn": star.feddyn_regularizer,
    "moon": star.moon_regularizer,
    "bnn_fl": star.bnn_regularizer,
}

_FACTORIES = {
    "local": reference.local_only,
    "centralized": reference.centralized,
    "fedavg": star.fedavg,
    "fedprox": star.fedprox,
    "feddyn": star.feddyn,
    "moon": star.moon,
    "bnn_fl": star.bnn_fl,
    "wpfed": lambda model, cu, config: wpfed(model, cu, bits=config.wpfed.bits,
                                             candidates=config.wpfed.candidates, k=config.wpfed.k),
}

# ABPS rows of paper 000 Table 1 (SPEC §3.3) as presets over the config's ``abps`` section.
_PQ = {"abps.head_layers": 1, "abps.wire": "bf16"}
_PQK1 = {**_PQ, "abps.kappa": 1}
ABPS_PRESETS = {
    "abps": {},
    "abps_p": {"abps.head_layers": 1},
    "abps_q": {"abps.wire": "bf16"},
    "abps_pq_k1": _PQK1,
    "abps_pq_k1_hom": {**_PQK1, "abps.goal": "homogeneity", "abps.metadata": "goal"},
    "abps_pq_k1_div": {**_PQK1, "abps.goal": "diversity", "abps.metadata": "goal"},
    "abps_pq_k1_ali": {**_PQK1, "abps.goal": "alignment", "abps.metadata": "goal"},
    "abps_x": {"rounds": 100, "reference_rounds": 50, "abps.kappa": 1, "abps.wire": "bf16", "abps.head_layers": 2, "abps.goal": "homogeneity",
               "abps.metadata": "goal", "abps.momentum": 0.5, "abps.early_stopping_patience": 10},
}

# FedAvg with the star-compatible extensions (SPEC §3.3).
FEDAVG_PRESETS = {
    "fedavg_pq": {"fedavg.head_layers": 1, "fedavg.wire": "bf16"},
    "fedavg_x": {"rounds": 100, "reference_rounds": 50, "fedavg.head_layers": 2, "fedavg.wire": "bf16", "fedavg.server_momentum": 0.5,
                 "fedavg.early_stopping_patience": 10},
}

GRAPH_METHODS = {"decefl": decentralized.decefl, "defta": decentralized.defta}

METHODS = tuple(_FACTORIES) + tuple(GRAPH_METHODS) + tuple(ABPS_PRESETS) + tuple(FEDAVG_PRESETS)
"""Every runnable method name."""


_REQUIREMENTS = {
    **{name: reference.check_federation for name in ("local", "centralized")},
    **{name: star.check_federation for name in ("fedavg", "fedprox", "feddyn", "moon", "bnn_fl")},
    **{name: star.check_federation for name in FEDAVG_PRESETS},
    **{name: decentralized.check_federation for name in GRAPH_METHODS},
    "wpfed": wpfed_module.check_federation,
    **{name: abps_module.check_federation for name in ABPS_PRESETS},
}
"""Method name → its module's ``check_federation(name, config, num_clients)``: the smallest federation it runs on."""


def check_federation(name: str, config, num_clients: int) -> None:
  """Raises :class:`ConfigError` when method ``name`` under ``config`` (its preset applied) cannot run on a
  federation of ``num_clients`` centers, naming what it needs (issue 9): checked before anything compiles."""
  _REQUIREMENTS[name](name, config, num_clients)


def preset(name: str) -> dict:
  """Config overrides that define method ``name`` (empty for methods without a preset)."""
  return {**ABPS_PRESETS, **FEDAVG_PRESETS}.get(name, {})


def build_model(config, num_features: int, bayesian: bool = False) -> Model:
  if bayesian:
    from fedjax_sim.models.bayes import bayesian_mlp
    return bayesian_mlp(mlp_model(num_features, hidden=config.learner.hidden, dropout=0.0))
  return mlp_model(num_features, hidden=config.learner.hidden, dropout=config.learner.dropout)


def build_method(name: str, config, num_features: int, num_clients: int = 0):
  """Returns ``(algorithm, model)`` for method ``name`` under ``config``."""
  model = build_model(config, num_features, bayesian=name == "bnn_fl")
  lc = config.learner
  client_update = make_client_update(
      model.apply, batch_size=lc.batch_size, epochs=lc.local_epochs,
      local_steps=lc.local_steps or None, regularizer=_REGULARIZERS.get(name))
  if name in ABPS_PRESETS:
    a = config.abps
    static = ABPSStatic(kappa_max=a.kappa, goal=a.goal, metadata=a.metadata, keep_fraction=a.keep_fraction,
                        pool_size=a.pool_size,
                        head_layers=a.head_layers, wire_bf16=a.wire == "bf16",
                        early_stopping_patience=a.early_stopping_patience,
                        exact_shapley_max=a.exact_shapley_max, tmc_permutations=a.tmc_permutations,
                        momentum=a.momentum > 0)
    return abps(model, client_update, static, name=name), model
  if name in GRAPH_METHODS:
    adj = decentralized.random_regular_graph(num_clients, config.graph.degree, config.graph.graph_seed)
    return GRAPH_METHODS[name](model, client_update, adj), model
  if name in FEDAVG_PRESETS:
    f = config.fedavg
    return star.personalized_fedavg(model, client_update, head_layers=f.head_layers, wire_bf16=f.wire == "bf16",
                                    early_stopping_patience=f.early_stopping_patience, name=name), model
  if name == "wpfed":
    return _FACTORIES[name](model, client_update, config), model
  algorithm: Algorithm = _FACTORIES[name](model, client_update)
  return algorithm, model
