"""WPFed baseline (Ye et al. 2024; SPEC §3.3): LSH candidate filtering, then loss-ranked neighbor averaging.

Each round, after local training:
1. every center publishes a locality-sensitive hash of its model: the signs of
   ``bits`` fixed random projections of its flattened parameters (SimHash; drawn
   once at init, shared by all centers);
2. center i takes the ``candidates`` centers nearest in Hamming distance as its
   candidate set, downloads their models and scores each by its mean BCE
   ℓ_ij on i's own validation split;
3. θ_i ← Σ_{j ∈ {i} ∪ top-k} ω_ij θ_j over its ``k`` lowest-loss candidates, with
   ω_ij ∝ n_j·exp(−ℓ_ij) (decision: SPEC gives the rule, not the weights; the same
   form as DeFTA's trust weights). No Bayesian update, no memory across rounds.
Bytes: each downloaded candidate model costs |W|·4 (one direction, half an edge
of SPEC §3.4); the hashes (``bits``/8 bytes per center) are metadata, reported apart.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics, broadcast_clients, nonfinite_client
from fedjax_sim.engine.local import bce_with_logits, local_train
from fedjax_sim.errors import ConfigError
from fedjax_sim.models import Model


@struct.dataclass
class WPFedState:
  params: Any  # [C, ...] each center's model
  projections: jax.Array  # [bits, P] the shared random LSH projections


def lsh_signatures(flat: jax.Array, projections: jax.Array) -> jax.Array:
  """SimHash signatures ``[C, bits]`` bool: sign of each random projection of each model."""
  return (flat @ projections.T) > 0


def hamming(sig: jax.Array) -> jax.Array:
  """Pairwise Hamming distances ``[C, C]`` between bool signatures."""
  s = sig.astype(jnp.float32)
  return s @ (1 - s).T + (1 - s) @ s.T


def wpfed(model: Model, client_update, *, bits: int = 64, candidates: int = 5, k: int = 3) -> Algorithm:
  if not 1 <= k <= candidates:
    raise ConfigError(f"wpfed.k must be in [1, wpfed.candidates = {candidates}], got {k}")
  template = jax.eval_shape(model.init, jax.random.key(0))
  _, unravel = ravel_pytree(jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), template))
  num_params = sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(template))

  def init(key, federation, hyper):
    if candidates >= federation.num_clients:
      raise ConfigError(f"wpfed.candidates ({candidates}) must be below the number of centers "
                        f"({federation.num_clients})")
    k_model, k_proj = jax.random.split(key)
    return WPFedState(params=broadcast_clients(model.init(k_model), federation.num_clients),
                      projections=jax.random.normal(k_proj, (bits, num_params)))

  def loss_on(flat, x, y, m):
    logits = model.apply(unravel(flat), x, False, None)[0]
    return jnp.sum(jnp.where(m, bce_with_logits(logits, y), 0.0)) / jnp.maximum(jnp.sum(m), 1)

  def round_fn(key, state, federation, hyper, t):
    c = federation.num_clients
    res = local_train(client_update, key, state.params, federation, hyper=hyper, learner=hyper.learner)
    flat = jax.vmap(lambda p: ravel_pytree(p)[0])(res.params)  # [C, P]
    dist = hamming(lsh_signatures(flat, state.projections)) + jnp.eye(c) * 1e9  # never oneself
    _, cand = jax.lax.top_k(-dist, candidates)  # [C, M] nearest signatures
    slots = jnp.concatenate([jnp.arange(c)[:, None], cand], axis=1)  # self first
    loss = jax.vmap(jax.vmap(loss_on, in_axes=(0, None, None, None)))(
        flat[slots], federation.x_val, federation.y_val, federation.m_val)  # [C, M + 1]
    # Keep self and the k lowest-loss candidates.
    rank = jnp.argsort(jnp.argsort(loss[:, 1:], axis=1), axis=1)
    keep = jnp.concatenate([jnp.ones((c, 1), bool), rank < k], axis=1)
    w = jnp.where(keep, federation.n_train[slots].astype(jnp.float32) * jnp.exp(-loss), 0.0)
    w = w / jnp.sum(w, axis=1, keepdims=True)
    new = jnp.einsum("cs,csp->cp", w, flat[slots])
    metrics = RoundMetrics(bytes=jnp.asarray(c * candidates * num_params * 4.0, jnp.float32),
                           train_loss=jnp.mean(res.loss), rest_fraction=jnp.asarray(0.0),
                           mean_partners=jnp.asarray(float(k)), active=jnp.asarray(1.0),
                           nonfinite_client=nonfinite_client(res.loss, res.params))
    return state.replace(params=jax.vmap(unravel)(new)), metrics

  return Algorithm(name="wpfed", init=init, round=round_fn, deployed=lambda s: (s.params, True),
                   sent_params=num_params)
