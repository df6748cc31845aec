"""Server-based ("star") baselines of paper 000 Table 1 (SPEC §3.3): FedAvg, FedProx, FedDyn, MOON.

Every round all centers start from the global model, train locally (2 epochs,
SPEC §3.1) with the method's regularizer, and the server aggregates with the
n-weighted mean (McMahan et al. 2017). Bytes: 2·|W|·4 per client per round
(upload + download, SPEC §3.4).
"""
from __future__ import annotations

from typing import Any

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.algorithms.base import (Algorithm, RoundMetrics, broadcast_clients, tree_sub,
                                        nonfinite_client, require_federation, tree_vdot, weighted_average)
from fedjax_sim.engine.local import LocalTerm, local_train
from fedjax_sim.metrics import mean_defined, participation_fairness, star_round_bytes
from fedjax_sim.models import Model, model_size, param_template
from fedjax_sim.settings import at_least, one_of, positive, setting, within


@struct.dataclass
class StarState:
  global_params: Any  # the server model θ^t
  client: Any  # [C, ...] per-client algorithm state (FedDyn: ∇L_k term; MOON: previous local model) or None
  server: Any  # server-side extra state (FedDyn: h) or None


# --- regularizers: reg(term: LocalTerm) -> scalar (fedjax_sim.engine.local) -----------------------


def sq_dist(a, b) -> jax.Array:
  """‖a − b‖² over all leaves."""
  d = tree_sub(a, b)
  return tree_vdot(d, d)


def fedprox_regularizer(term: LocalTerm) -> jax.Array:
  """FedProx proximal term μ/2 ‖θ − θ_global‖² (Li et al. 2020, eq. 2; SPEC §3.3: μ = 0.01)."""
  return 0.5 * term.hyper.method.mu * sq_dist(term.params, term.shared)


def feddyn_regularizer(term: LocalTerm) -> jax.Array:
  """FedDyn local objective terms −⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖² (Acar et al. 2021, Alg. 1)."""
  return -tree_vdot(term.own, term.params) + 0.5 * term.hyper.method.alpha * sq_dist(term.params, term.shared)


def _cosine(a, b):
  na = jnp.linalg.norm(a, axis=-1)
  nb = jnp.linalg.norm(b, axis=-1)
  return jnp.sum(a * b, axis=-1) / jnp.maximum(na * nb, 1e-8)


def moon_regularizer(term: LocalTerm) -> jax.Array:
  """MOON model-contrastive loss μ·ℓ_con (Li, He & Song 2021, eq. 3) on the 64-d representation.

  ℓ_con = −log( e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} + e^{sim(z, z_prev)/τ}) ), sim = cosine,
  z from the model being trained in the same forward pass as the supervised loss
  (``rng`` is that pass's dropout key, so the mask is the same and XLA can share the
  pass; Li et al. compute logits and z in one pass), z_glob from the round's global
  model, z_prev from this client's previous local model; the two fixed models run
  without dropout (decision: SPEC is silent). SPEC §3.3: μ = 1, τ = 0.5.
  """
  apply_fn, x, mask = term.apply, term.x, term.mask
  _, z = apply_fn(term.params, x, True, term.rng)
  _, z_glob = apply_fn(term.shared, x, False, None)
  _, z_prev = apply_fn(term.own, x, False, None)
  z_glob = jax.lax.stop_gradient(z_glob)
  z_prev = jax.lax.stop_gradient(z_prev)
  tau = term.hyper.method.temperature
  pos = _cosine(z, z_glob) / tau
  neg = _cosine(z, z_prev) / tau
  l_con = -pos + jnp.logaddexp(pos, neg)
  return term.hyper.method.mu * jnp.sum(jnp.where(mask, l_con, 0.0)) / jnp.maximum(jnp.sum(mask), 1.0)


# --- the family ----------------------------------------------------------------------------------

def _star(name: str, model: Model, client_update, init_client, post) -> Algorithm:
  """Shared skeleton: local training from θ^{t−1}, then ``post`` aggregates."""
  num_params_sent = model_size(model)

  def init(key, federation, hyper):
    params = model.init(key)
    client, server = init_client(params, federation)
    return StarState(global_params=params, client=client, server=server)

  def round_fn(key, state, federation, hyper, t):
    res = local_train(client_update, key, state.global_params, federation, shared=state.global_params,
                      own=state.client, hyper=hyper, t=t, params_stacked=False)
    new_state = post(state, res.params, federation, hyper)
    c = federation.num_clients
    metrics = RoundMetrics(
        bytes=jnp.asarray(star_round_bytes(c, num_params_sent), jnp.float32),
        train_loss=jnp.mean(res.loss), rest_fraction=jnp.asarray(0.0), mean_partners=jnp.asarray(1.0),
        active=jnp.asarray(1.0), nonfinite_client=nonfinite_client(res.loss, res.params))
    return new_state, metrics

  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.global_params, False),
                   sent_params=num_params_sent)


def sampled_fedavg(name: str, model: Model, client_update, *, clients_per_round: int, plan: tuple,
                   lanes: int = 0) -> Algorithm:
  """FedAvg (or FedProx, by its ``client_update``) with K of the C clients per round (issue 10 item 3).

  Each round K distinct clients are drawn uniformly (McMahan et al. 2017, Algorithm 1: a random fraction of the
  clients; SPEC §4.3: FedAvg's uniform inclusion with expected K), only they train
  (:func:`fedjax_sim.engine.local.train_selected`: the cost grows with K, not C), and the server takes their
  n-weighted mean. Bytes: 2·|W|·4 per participant. The federation gets its flat train rows in ``prepare``.
  ``plan`` and ``lanes`` shape the training loops (:func:`fedjax_sim.engine.local.train_selected`).
  """
  from fedjax_sim.data.federation import with_train_rows
  from fedjax_sim.engine.local import train_selected
  num_params_sent = model_size(model)
  k = int(clients_per_round)

  def init(key, federation, hyper):
    return StarState(global_params=model.init(key), client=None, server=None)

  def round_fn(key, state, federation, hyper, t):
    k_select, k_train = jax.random.split(key)
    c = federation.num_clients
    selected = jax.random.choice(k_select, c, (k,), replace=False)
    res = train_selected(client_update, k_train, state.global_params, federation, selected, plan,
                         shared=state.global_params, hyper=hyper, t=t, params_stacked=False, lanes=lanes)
    glob = weighted_average(res.params, federation.n_train[selected])
    metrics = RoundMetrics(
        bytes=jnp.asarray(star_round_bytes(k, num_params_sent), jnp.float32),
        train_loss=jnp.mean(res.loss), rest_fraction=jnp.asarray(1.0 - k / c, jnp.float32),
        mean_partners=jnp.asarray(k / c, jnp.float32), active=jnp.asarray(1.0),
        nonfinite_client=nonfinite_client(res.loss, res.params),
        extra={"participation": jnp.zeros((c,), jnp.float32).at[selected].set(1.0)})  # [C] z_t
    return state.replace(global_params=glob), metrics

  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.global_params, False),
                   prepare=with_train_rows, sent_params=num_params_sent)


def _sampled(ctx) -> int:
  """K when the experiment trains K < C clients per round, else 0 (every client trains)."""
  k = ctx.config.participation.clients_per_round
  return k if 0 < k < ctx.num_clients else 0


def _sampled_fedavg(name: str, ctx) -> Algorithm:
  """FedAvg / FedProx with the experiment's K of C clients per round: its slot plan and lanes."""
  from fedjax_sim.engine.local import selection_plan, slot_lanes
  lc = ctx.config.learner
  plan = selection_plan(ctx.federation.n_train, _sampled(ctx), lc.batch_size, lc.num_buckets)
  return sampled_fedavg(name, ctx.model, ctx.client_update, clients_per_round=_sampled(ctx), plan=plan,
                        lanes=slot_lanes(ctx.config.participation.lanes))


def _no_client_state(params, federation):
  return None, None


def _fedavg_post(state, client_params, federation, hyper):
  return state.replace(global_params=weighted_average(client_params, federation.n_train))


def fedavg(model: Model, client_update) -> Algorithm:
  """FedAvg (McMahan et al. 2017): θ^t = Σ_k n_k θ_k^t / Σ_k n_k over all centers every round."""
  return _star("fedavg", model, client_update, _no_client_state, _fedavg_post)


def fedprox(model: Model, client_update) -> Algorithm:
  """FedProx (Li et al. 2020): FedAvg whose local loss adds μ/2‖θ − θ^{t−1}‖²; pass a
  ``client_update`` built with :func:`fedprox_regularizer`."""
  return _star("fedprox", model, client_update, _no_client_state, _fedavg_post)


def feddyn(model: Model, client_update) -> Algorithm:
  """FedDyn (Acar et al. 2021, Algorithm 1) with full participation.

  Client k minimizes L_k(θ) − ⟨g_k, θ⟩ + α/2‖θ − θ^{t−1}‖² (``client_update`` built
  with :func:`feddyn_regularizer`), then g_k ← g_k − α(θ_k^t − θ^{t−1});
  server h ← h − α Σ_k w_k (θ_k^t − θ^{t−1}); θ^t = Σ_k w_k θ_k^t − h/α.
  Decision (SPEC names only α = 0.01): the averages use the n-weights w_k = n_k/Σn
  of FedAvg, as the authors' reference code weights clients by data size, so
  the rows of Table 1 differ only in their regularizers.
  """

  def init_client(params, federation):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return broadcast_clients(zeros, federation.num_clients), zeros

  def post(state, client_params, federation, hyper):
    alpha = hyper.method.alpha
    delta = jax.tree_util.tree_map(lambda c, g: c - g[None], client_params, state.global_params)
    grads = jax.tree_util.tree_map(lambda g, d: g - alpha * d, state.client, delta)
    mean_delta = weighted_average(delta, federation.n_train)
    h = jax.tree_util.tree_map(lambda h, d: h - alpha * d, state.server, mean_delta)
    avg = weighted_average(client_params, federation.n_train)
    glob = jax.tree_util.tree_map(lambda a, h: a - h / alpha, avg, h)
    return StarState(global_params=glob, client=grads, server=h)

  return _star("feddyn", model, client_update, init_client, post)


def moon(model: Model, client_update) -> Algorithm:
  """MOON (Li, He & Song 2021): FedAvg with the model-contrastive local loss
  (``client_update`` built with :func:`moon_regularizer`); each client keeps its
  previous local model, initially the global initialization."""

  def init_client(params, federation):
    return broadcast_clients(params, federation.num_clients), None

  def post(state, client_params, federation, hyper):
    return StarState(global_params=weighted_average(client_params, federation.n_train),
                     client=client_params, server=None)

  return _star("moon", model, client_update, init_client, post)


# --- FedAvg with ABPS's star-compatible extensions (SPEC §3.3: FedAvg+P+Q, FedAvg-X) --------------


@struct.dataclass
class PersonalStarState:
  global_params: Any  # the server model; its head layers are unused when heads are personalized
  local: Any  # [C, ...] each client's latest model (its head layers are the client's own head)
  velocity: Any  # server momentum buffer on the aggregation delta (zeros when momentum = 0)
  early: Any  # early_stop.EarlyStop over the deployed per-client models


def personalized_fedavg(model: Model, client_update, *, head_layers: int, wire_bf16: bool,
                        early_stopping_patience: int, name: str) -> Algorithm:
  """FedAvg with head personalization, a bfloat16 wire, server momentum and early stopping.

  Each round the server sends its body (the layers below the ``head_layers``
  personalized ones) through the wire format; client i trains body + its own
  head; the server averages the bodies it receives (n-weighted, after the wire
  round trip), applies momentum v ← βv + (avg − θ); θ ← θ + v (β = ``hyper.method.server_momentum``),
  and each client keeps its head. FedAvg+P+Q: 1 head layer, bf16. FedAvg-X: 2 head
  layers, bf16, momentum 0.5, early stopping with patience 10 (SPEC §3.3).
  With no head, fp32 and no momentum this is FedAvg. Bytes: 2·|W_sent|·b per client.

  Momentum is FedAvgM's server momentum (Hsu et al. 2019; paper 000 §2.4, "server
  momentum (FedAvgM)"): avg − θ is the n-weighted mean of the clients' whole round
  deltas (local training and aggregation together), because the server's model
  does not train. Decision (issue 9, item 13): ABPS-X's momentum instead acts on
  each center's aggregation delta agg_i − θ_i after its local training, as SPEC
  §3.3 writes it (see :func:`fedjax_sim.algorithms.abps.algorithm.abps`); for a
  star the two readings coincide. Every client takes part every round, so no
  client rests and the server steps every round (until early stopping freezes it).
  """
  from fedjax_sim.algorithms import early_stop
  from fedjax_sim.engine.simulate import evaluate
  from fedjax_sim.models.mlp import head_mask, sent_parameters, wire_format

  template = param_template(model)
  is_head = head_mask(template, head_layers)
  sent_params = sent_parameters(template, is_head)
  wire, bytes_per_param = wire_format(wire_bf16)

  def compose(body, local):
    """Per-client models: the (received) global body with each client's own head."""
    return jax.tree_util.tree_map(lambda h, b, l: l if h else jnp.broadcast_to(b, l.shape), is_head, body, local)

  def init(key, federation, hyper):
    params = model.init(key)
    local = broadcast_clients(params, federation.num_clients)
    return PersonalStarState(global_params=params, local=local,
                             velocity=jax.tree_util.tree_map(jnp.zeros_like, params),
                             early=early_stop.init(local, early_stopping_patience))

  def round_fn(key, state, federation, hyper, t):
    start = compose(jax.tree_util.tree_map(wire, state.global_params), state.local)
    res = local_train(client_update, key, start, federation, hyper=hyper, t=t)
    avg = weighted_average(jax.tree_util.tree_map(wire, res.params), federation.n_train)
    delta = jax.tree_util.tree_map(jnp.subtract, avg, state.global_params)
    vel = jax.tree_util.tree_map(lambda v, d: hyper.method.server_momentum * v + d, state.velocity, delta)
    glob = jax.tree_util.tree_map(jnp.add, state.global_params, vel)
    deployed = compose(jax.tree_util.tree_map(wire, glob), res.params)
    val, _ = mean_defined(evaluate(model, deployed, True, federation.x_val, federation.y_val, federation.m_val))
    early = early_stop.update(state.early, deployed, val, early_stopping_patience)
    new_state = PersonalStarState(global_params=glob, local=res.params, velocity=vel, early=early)
    metrics = RoundMetrics(
        bytes=jnp.asarray(star_round_bytes(federation.num_clients, sent_params, bytes_per_param), jnp.float32),
        train_loss=jnp.mean(res.loss), rest_fraction=jnp.asarray(0.0), mean_partners=jnp.asarray(1.0),
        active=jnp.asarray(1.0), nonfinite_client=nonfinite_client(res.loss, res.params))
    return early_stop.freeze_if_stopped(state.early.stopped, new_state, state, metrics)

  def deployed_fn(state):
    if early_stopping_patience > 0:
      return state.early.best_params, True
    return compose(jax.tree_util.tree_map(wire, state.global_params), state.local), True

  return Algorithm(name=name, init=init, round=round_fn, deployed=deployed_fn, sent_params=sent_params)


def bnn_regularizer(term: LocalTerm) -> jax.Array:
  """Bayes-by-backprop's complexity cost per example: KL(q ‖ N(0,1)) / n_i (Blundell et al. 2015, eq. 8,
  spread evenly over the ⌈n_i/B⌉ minibatches of an epoch; ``own`` is this client's n_i)."""
  from fedjax_sim.models.bayes import kl_to_standard_normal
  return kl_to_standard_normal(term.params) / jnp.maximum(term.own.astype(jnp.float32), 1.0)


def bnn_fl(model: Model, client_update) -> Algorithm:
  """BNN+FL (Saile et al. 2024; SPEC §3.3): FedAvg of a mean-field Gaussian BNN's means and
  variances; sends 2× the parameters of the deterministic MLP (μ and σ). ``model`` is the
  Bayesian model (:func:`fedjax_sim.models.bayes.bayesian_mlp`), ``client_update`` built with
  :func:`bnn_regularizer`."""
  from fedjax_sim.models.bayes import moment_average

  def init_client(params, federation):
    return federation.n_train, None

  def post(state, client_params, federation, hyper):
    return state.replace(global_params=moment_average(client_params, federation.n_train))

  return _star("bnn_fl", model, client_update, init_client, post)


def check_federation(name: str, config, num_clients: int) -> None:
  """Refuses a federation too small for a star method (FedAvg and its family): at least 2 centers.

  Decision (issue 9): with one center the server's average is that center's own
  model, so the row would be Local-only under another name.

  Raises:
    ConfigError: ``num_clients`` < 2.
  """
  del config  # no setting changes the minimum
  require_federation(name, num_clients)


# --- declarations (issue 10): config sections, traced hyperparameters, presets ------------------------


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
  """The ``[fedavg]`` section: FedAvg's star-compatible extensions (SPEC §3.3: the FedAvg+P+Q and FedAvg-X
  presets set these; plain ``fedavg`` reads none of them, it is McMahan et al.'s algorithm)."""

  head_layers: int = setting(0, one_of(0, 1, 2))  # personalized head layers kept on each client: 0, 1 or 2
  # (≤ len(learner.hidden))
  wire: str = setting("fp32", one_of("fp32", "bf16"))  # wire format: fp32 or bf16
  server_momentum: float = setting(0.0, within(0, 1, open_hi=True))  # β of the server momentum on the
  # aggregation delta, in [0, 1)
  early_stopping_patience: int = setting(0, at_least(0))  # rounds without a better mean val AUROC before
  # stopping, ≥ 0 (0 = off)


@struct.dataclass
class FedAvgHyper:
  server_momentum: jax.Array  # [] β of FedAvg-X's server momentum


@dataclasses.dataclass(frozen=True)
class FedProxConfig:
  """The ``[fedprox]`` section."""

  mu: float = setting(0.01, at_least(0.0))  # proximal coefficient μ (SPEC §3.3), finite ≥ 0


@struct.dataclass
class FedProxHyper:
  mu: jax.Array  # [] proximal coefficient μ


@dataclasses.dataclass(frozen=True)
class FedDynConfig:
  """The ``[feddyn]`` section."""

  alpha: float = setting(0.01, positive())  # dynamic-regularizer coefficient α (SPEC §3.3), finite > 0 (it
  # divides the server update)


@struct.dataclass
class FedDynHyper:
  alpha: jax.Array  # [] dynamic-regularizer coefficient α


@dataclasses.dataclass(frozen=True)
class MoonConfig:
  """The ``[moon]`` section."""

  mu: float = setting(1.0, at_least(0.0))  # weight of the model-contrastive loss (SPEC §3.3), finite ≥ 0
  temperature: float = setting(0.5, positive())  # contrastive temperature τ (SPEC §3.3), finite > 0


@struct.dataclass
class MoonHyper:
  mu: jax.Array  # [] weight μ of the contrastive term
  temperature: jax.Array  # [] contrastive temperature τ


def _check_head_layers(section, config) -> None:
  from fedjax_sim.errors import ConfigError
  if section.head_layers > len(config.learner.hidden):
    raise ConfigError(f"fedavg.head_layers must be 0, 1 or 2 (and at most the number of hidden layers), "
                      f"got {section.head_layers!r}")


def _build_fedavg(ctx: BuildContext) -> Algorithm:
  """``fedavg`` is McMahan et al.'s FedAvg; its presets (fedavg_pq, fedavg_x) add the extensions of ``[fedavg]``."""
  if ctx.name == "fedavg":
    if _sampled(ctx):
      return _sampled_fedavg("fedavg", ctx)
    return fedavg(ctx.model, ctx.client_update)
  f = ctx.settings
  return personalized_fedavg(ctx.model, ctx.client_update, head_layers=f.head_layers, wire_bf16=f.wire == "bf16",
                             early_stopping_patience=f.early_stopping_patience, name=ctx.name)


def _build_fedprox(ctx: BuildContext) -> Algorithm:
  if _sampled(ctx):
    return _sampled_fedavg("fedprox", ctx)
  return fedprox(ctx.model, ctx.client_update)


def _bayesian_model(config, federation):
  """BNN+FL's mean-field Gaussian version of the task's MLP (no dropout: the weights are the noise)."""
  from fedjax_sim.models import mlp_model
  from fedjax_sim.models.bayes import bayesian_mlp
  return bayesian_mlp(mlp_model(federation.num_features, hidden=config.learner.hidden, dropout=0.0))


SPECS = (
    MethodSpec(methods={"fedavg": {},
                        "fedavg_pq": {"fedavg.head_layers": 1, "fedavg.wire": "bf16"},
                        "fedavg_x": {"rounds": 100, "reference_rounds": 50, "fedavg.head_layers": 2,
                                     "fedavg.wire": "bf16", "fedavg.server_momentum": 0.5,
                                     "fedavg.early_stopping_patience": 10}},
               build=_build_fedavg, section="fedavg", partial_participation=("fedavg",), metrics=participation_fairness,
               binary_only=("fedavg_pq", "fedavg_x"), settings=FedAvgConfig, hyper=FedAvgHyper,
               check_federation=check_federation, validate=_check_head_layers),
    MethodSpec(methods={"fedprox": {}}, build=_build_fedprox, section="fedprox", partial_participation=True,
               metrics=participation_fairness,
               settings=FedProxConfig, hyper=FedProxHyper, regularizer=fedprox_regularizer,
               check_federation=check_federation),
    MethodSpec(methods={"feddyn": {}}, build=lambda ctx: feddyn(ctx.model, ctx.client_update), section="feddyn",
               settings=FedDynConfig, hyper=FedDynHyper, regularizer=feddyn_regularizer,
               check_federation=check_federation),
    MethodSpec(methods={"moon": {}}, build=lambda ctx: moon(ctx.model, ctx.client_update), section="moon",
               settings=MoonConfig, hyper=MoonHyper, regularizer=moon_regularizer, check_federation=check_federation),
    MethodSpec(methods={"bnn_fl": {}}, build=lambda ctx: bnn_fl(ctx.model, ctx.client_update),
               regularizer=bnn_regularizer, model=_bayesian_model, check_federation=check_federation, binary_only=True),
)
