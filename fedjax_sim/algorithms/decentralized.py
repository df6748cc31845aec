"""Decentralized baselines on a fixed peer graph (SPEC §3.3): DeceFL and DeFTA.

Both run on a fixed random 3-regular graph over the centers, drawn once from
``graph_seed`` on the host (the graph is part of the federation's setup, the
same for every experiment seed). Every edge carries one model each way per
round: 2·|W|·4 bytes per undirected edge (SPEC §3.4), so a 3-regular graph
costs 1.5× FedAvg.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.algorithms.base import (Algorithm, RoundMetrics, broadcast_clients, nonfinite_client,
                                        require_federation)
from fedjax_sim.engine.local import bce_with_logits, local_train
from fedjax_sim.errors import ConfigError
from fedjax_sim.metrics import p2p_round_bytes
from fedjax_sim.models import Model, model_size
from fedjax_sim.settings import at_least, described, setting, within


def random_regular_graph(num_nodes: int, degree: int, seed: int, max_tries: int = 1000) -> np.ndarray:
  """A uniformly drawn simple ``degree``-regular graph as a ``[C, C]`` bool adjacency (pairing model).

  Raises:
    ConfigError: when no such graph exists (C·d odd, or d ≥ C).
  """
  if degree >= num_nodes or (num_nodes * degree) % 2:
    raise ConfigError(f"no {degree}-regular graph on {num_nodes} centers (need degree < centers and an even "
                      "centers × degree)")
  rng = np.random.default_rng(seed)
  for _ in range(max_tries):
    stubs = rng.permutation(np.repeat(np.arange(num_nodes), degree)).reshape(-1, 2)
    a, b = stubs[:, 0], stubs[:, 1]
    if (a == b).any():
      continue
    adj = np.zeros((num_nodes, num_nodes), bool)
    if len({(min(x, y), max(x, y)) for x, y in zip(a, b)}) < len(a):
      continue
    adj[a, b] = adj[b, a] = True
    return adj
  raise ConfigError(f"could not draw a simple {degree}-regular graph on {num_nodes} centers")


def metropolis_weights(adj: np.ndarray) -> np.ndarray:
  """Metropolis–Hastings mixing matrix: W_ij = 1/(1 + max(d_i, d_j)) on edges, W_ii = 1 − Σ_j W_ij.

  Symmetric and doubly stochastic, the consensus matrix of DeceFL (Yuan et al. 2023).
  """
  deg = adj.sum(1)
  w = np.where(adj, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
  w[np.diag_indices_from(w)] = 1.0 - w.sum(1)
  return w.astype(np.float32)


def mix(weights: jax.Array, stacked):
  """θ_i ← Σ_j W_ij θ_j for every leaf of a stacked pytree."""
  return jax.tree_util.tree_map(lambda a: jnp.tensordot(weights, a, axes=1), stacked)


@struct.dataclass
class GraphState:
  params: Any  # [C, ...] each center's model
  trust: jax.Array  # [C, C] DeFTA trust τ_ij of i in neighbor j, τ_ii in itself; 0 off the graph (unused by DeceFL)


def _graph_algorithm(name, model, client_update, adj, post, trust0=None) -> Algorithm:
  """Local training, then ``post``; ``trust0`` is the initial ``[C, C]`` trust (default: the adjacency)."""
  adj = jnp.asarray(adj)
  edges = float(np.asarray(adj).sum() / 2)
  sent = model_size(model)

  def init(key, federation, hyper):
    if adj.shape[0] != federation.num_clients:
      raise ConfigError(f"graph has {adj.shape[0]} nodes but the federation {federation.num_clients} centers")
    c = federation.num_clients
    return GraphState(params=broadcast_clients(model.init(key), c),
                      trust=jnp.asarray(adj if trust0 is None else trust0, jnp.float32))

  def round_fn(key, state, federation, hyper, t):
    res = local_train(client_update, key, state.params, federation, hyper=hyper, t=t)
    new_state = post(state, res.params, federation, hyper)
    deg = adj.sum(1)
    metrics = RoundMetrics(bytes=jnp.asarray(p2p_round_bytes(edges, sent), jnp.float32),
                           train_loss=jnp.mean(res.loss), rest_fraction=jnp.mean(deg == 0),
                           mean_partners=jnp.mean(deg.astype(jnp.float32)), active=jnp.asarray(1.0),
                           nonfinite_client=nonfinite_client(res.loss, res.params))
    return new_state, metrics

  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.params, True), sent_params=sent)


def decefl(model: Model, client_update, adj: np.ndarray) -> Algorithm:
  """DeceFL (Yuan et al. 2023): local steps, then one consensus step θ_i ← Σ_j W_ij θ_j with
  Metropolis weights on the fixed graph."""
  w = jnp.asarray(metropolis_weights(adj))

  def post(state, local, federation, hyper):
    return state.replace(params=mix(w, local))

  return _graph_algorithm("decefl", model, client_update, adj, post)


def defta(model: Model, client_update, adj: np.ndarray) -> Algorithm:
  """DeFTA (Zhou et al. 2024): decentralized FedAvg on the fixed graph with trust-weighted neighbors.

  Decision (SPEC §3.3 gives the rule, not the constants): after local training,
  receiver i scores each neighbor j's model by its mean BCE ℓ_ij on i's
  validation split; trust τ_ij ← ρ τ_ij + (1 − ρ) exp(−ℓ_ij) with ρ = ``hyper.method.defta_decay``
  (initial trust 1), and θ_i ← Σ_{j ∈ {i} ∪ N(i)} ω_ij θ_j with ω_ij ∝ n_j τ_ij.
  Self-trust τ_ii is updated the same way from ℓ_ii, i's own model's loss, and is
  carried across rounds like every other trust (decision, issue 9 item 11: SPEC
  names one trust rule for the weights, so the self-weight is an EMA too; it used
  to restart from 1 every round, which weighted a center's own model by
  ρ + (1 − ρ)·exp(−ℓ_ii) whatever its history).
  """
  a = jnp.asarray(adj)
  eye = jnp.eye(adj.shape[0], dtype=bool)
  # Each center's neighbors plus itself as fixed slots: [C, d + 1] indices (self first).
  d = int(np.asarray(adj).sum(1).max())
  order = np.argsort(~np.asarray(adj), axis=1, kind="stable")[:, :d]
  slots = jnp.asarray(np.concatenate([np.arange(adj.shape[0])[:, None], order], axis=1), jnp.int32)
  slot_ok = jnp.asarray(np.concatenate([np.ones((adj.shape[0], 1), bool),
                                        np.take_along_axis(np.asarray(adj), order, axis=1)], axis=1))

  def val_losses(stacked, federation):
    """ℓ[i, s]: mean BCE of the model in slot s of center i, on center i's validation split."""
    def loss_of(params, x, y, m):
      l = jnp.where(m, bce_with_logits(model.apply(params, x, False, None)[0], y), 0.0)
      return l.sum() / jnp.maximum(m.sum(), 1)
    gathered = jax.tree_util.tree_map(lambda p: p[slots], stacked)  # [C, d + 1, ...]
    return jax.vmap(jax.vmap(loss_of, in_axes=(0, None, None, None)))(
        gathered, federation.x_val, federation.y_val, federation.m_val)

  def post(state, local, federation, hyper):
    rows = jnp.arange(adj.shape[0])[:, None]
    loss = jnp.zeros(a.shape).at[rows, slots].set(jnp.where(slot_ok, val_losses(local, federation), 0.0))
    rho = hyper.method.defta_decay
    trust = jnp.where(a | eye, rho * state.trust + (1 - rho) * jnp.exp(-loss), 0.0)
    w = trust * federation.n_train[None, :].astype(jnp.float32)
    w = w / jnp.sum(w, axis=1, keepdims=True)
    return state.replace(params=mix(w, local), trust=trust)

  trust0 = np.asarray(adj) | np.eye(adj.shape[0], dtype=bool)  # initial trust 1 in every neighbor and in oneself
  return _graph_algorithm("defta", model, client_update, adj, post, trust0=trust0)


def check_federation(name: str, config, num_clients: int) -> None:
  """Refuses a federation without a ``graph.degree``-regular graph (DeceFL, DeFTA; SPEC §3.3).

  A simple d-regular graph on C nodes exists iff d < C and C·d is even, so the
  smallest federation is d + 1 centers, and C must be even when d is odd.

  Raises:
    ConfigError: no such graph, naming the nearest degree that fits.
  """
  d, c = config.graph.degree, num_clients
  require_federation(name, c)
  if d >= c or (c * d) % 2:
    parity = " and an even number of them (the degree is odd)" if d % 2 else ""
    fits = min((x for x in range(1, c) if (c * x) % 2 == 0), key=lambda x: (abs(x - d), x))  # c ≥ 2: never empty
    raise ConfigError(f"{name} runs on a random {d}-regular peer graph (graph.degree = {d}), which needs at least "
                      f"{d + 1} centers{parity}; the federation has {c}. Set graph.degree = {fits} (the nearest "
                      f"degree that fits)")


@dataclasses.dataclass(frozen=True)
class GraphConfig:
  """The ``[graph]`` section: the fixed peer graph of DeceFL and DeFTA (SPEC §3.3)."""

  degree: int = setting(3, at_least(1))  # the random regular graph's degree d, ≥ 1; the federation needs C > d
  # centers, C·d even
  graph_seed: int = setting(0, described(within(0, 2 ** 32, open_hi=True), "in [0, 2^32)"))  # seed of the graph
  # (fixed across experiment seeds), in [0, 2³²)
  defta_decay: float = setting(0.5, within(0, 1, open_hi=True))  # DeFTA trust EMA factor ρ:
  # τ ← ρτ + (1 − ρ)·exp(−val loss), in [0, 1)


@struct.dataclass
class GraphHyper:
  defta_decay: jax.Array  # [] DeFTA's trust EMA factor ρ (DeceFL reads nothing)


def _build(ctx: BuildContext) -> Algorithm:
  g = ctx.settings
  adj = random_regular_graph(ctx.num_clients, g.degree, g.graph_seed)
  return {"decefl": decefl, "defta": defta}[ctx.name](ctx.model, ctx.client_update, adj)


SPECS = (MethodSpec(methods={"decefl": {}, "defta": {}}, build=_build, section="graph", settings=GraphConfig,
                    hyper=GraphHyper, check_federation=check_federation, binary_only=("defta",)),)
