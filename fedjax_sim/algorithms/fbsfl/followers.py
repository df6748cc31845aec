"""Follower responses to an offer r_i: best response, logit response and the EXP3 learner (paper 002 §3.4–3.7).

Every response is computed for all N clients as if each were offered r_i; the caller keeps the included ones,
a_{t,i} = 0 for z_{t,i} = 0 by the convention of paper 002 eq. 5 (y = z · a).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


def best_response(r: jax.Array, kappa: jax.Array) -> jax.Array:
  """a*_i = 1{κ_i ≤ r_i}: accept iff participation has non-negative utility, ties accepted (paper 002 eq. 15).

  Args:
    r: ``[N]`` offers.
    kappa: ``[N]`` private thresholds κ_i.

  Returns:
    ``[N]`` bool, True for accept.
  """
  return kappa <= r


def logit_response(key: jax.Array, r: jax.Array, kappa: jax.Array, lam_obs=5.0) -> jax.Array:
  """Accept with probability σ(λ_obs (r_i − κ_i)), the likelihood-aligned response (paper 002 eq. 17; FBS-FL–Logit).

  Args:
    key: PRNG key.
    r: ``[N]`` offers.
    kappa: ``[N]`` private thresholds κ_i.
    lam_obs: slope λ_obs > 0 (paper 002 §4.1: 5).

  Returns:
    ``[N]`` bool, True for accept.
  """
  return jax.random.uniform(key, jnp.shape(r)) < jax.nn.sigmoid(lam_obs * (r - kappa))


# --- EXP3 (paper 002 Algorithm 2) ----------------------------------------------------------------------------

@struct.dataclass
class Exp3State:
  """EXP3 weights of every follower over its two actions (paper 002 Algorithm 2).

  Decision (brief): the weights are stored as log-weights, shifted after each update so that each client's
  larger one is 0; σ depends only on h_i(1)/h_i(0), so this is the same learner without overflow.
  """

  log_h: jax.Array  # [N, 2] log h_i(a) up to a per-client constant; a = 0 reject, a = 1 accept


def exp3_init(num_clients: int) -> Exp3State:
  """h_i(0) = h_i(1) = 1 (paper 002 Alg. 2 line 1)."""
  return Exp3State(log_h=jnp.zeros((num_clients, 2), jnp.float32))


def exp3_probs(state: Exp3State, gamma=0.1) -> jax.Array:
  """σ_i(a) = (1 − γ) h_i(a)/(h_i(0) + h_i(1)) + γ/2 (paper 002 Alg. 2 line 5; γ = 0.1, §3.7).

  Returns:
    ``[N, 2]`` action probabilities, column 0 reject, column 1 accept; each row sums to 1.
  """
  return (1.0 - gamma) * jax.nn.softmax(state.log_h, axis=-1) + gamma / 2.0


def exp3_respond(key: jax.Array, state: Exp3State, gamma=0.1):
  """Sample a_i ~ σ_i for every client (paper 002 Alg. 2 line 6).

  Returns:
    ``(accept, prob)``: ``[N]`` bool actions, and ``[N]`` σ_i(a_i), the probability of the action taken (the
    importance weight's denominator in :func:`exp3_update`).
  """
  sigma = exp3_probs(state, gamma)
  accept = jax.random.uniform(key, sigma.shape[:1]) < sigma[:, 1]
  return accept, jnp.where(accept, sigma[:, 1], sigma[:, 0])


def respond(kind: str, key: jax.Array, r: jax.Array, kappa: jax.Array, exp3: Exp3State, lam_obs=5.0, gamma=0.1):
  """Every client's action as if offered r_i (the caller keeps the included ones), by the follower model ``kind``
  (static): ``br`` (eq. 15), ``logit`` (eq. 17) or ``exp3`` (Alg. 2; SPEC §4.2 step 5).

  Returns:
    ``(accept [N] bool, prob)``: ``prob`` is EXP3's probability of the action taken (its importance weight), None
    for the other followers.
  """
  if kind == "br":
    return best_response(r, kappa), None
  if kind == "logit":
    return logit_response(key, r, kappa, lam_obs), None
  return exp3_respond(key, exp3, gamma)


def exp3_reward(accept: jax.Array, r: jax.Array, kappa: jax.Array, r_max, kappa_max=1.0) -> jax.Array:
  """u_i = (u_raw + κ^(M)) / (r_max + κ^(M)), u_raw = r_i − κ_i if accepted else 0 (paper 002 eq. 9; Alg. 2
  lines 8–12; SPEC §4.2 step 5).

  Args:
    accept: ``[N]`` bool actions taken.
    r: ``[N]`` offers.
    kappa: ``[N]`` private thresholds.
    r_max: the offer cap r^p_max (:func:`~fedjax_sim.algorithms.fbsfl.economics.offer_cap`).
    kappa_max: κ^(M), the largest type (1.0 on Θ).

  Returns:
    ``[N]`` utilities in [0, 1]. Decision: clipped to [0, 1], which changes nothing when r ≤ r_max and κ ≤ κ_max
    (the paper's a-priori bounds [−κ^(M), r^p_max], §3.7) and keeps the update stable if they are violated.
  """
  raw = jnp.where(accept, r - kappa, 0.0)
  return jnp.clip((raw + kappa_max) / (r_max + kappa_max), 0.0, 1.0)


def exp3_update(state: Exp3State, accept: jax.Array, prob: jax.Array, reward: jax.Array, included: jax.Array,
                eta=0.3) -> Exp3State:
  """h_i(a_i) ← h_i(a_i) exp(η u_i / σ_i(a_i)) for included clients only (paper 002 Alg. 2 lines 3, 13; η = 0.3).

  Only the chosen action's weight moves (the importance-weighted estimate of the other action is 0).

  Args:
    state: the followers' weights.
    accept: ``[N]`` bool actions taken.
    prob: ``[N]`` σ_i(a_i), as returned by :func:`exp3_respond`.
    reward: ``[N]`` rescaled utilities u_i in [0, 1] (:func:`exp3_reward`).
    included: ``[N]`` bool z_i; clients not offered anything keep their weights.
    eta: learning rate η.

  Returns:
    The updated state.
  """
  gain = jnp.where(included, eta * reward / jnp.maximum(prob, 1e-30), 0.0)
  chosen = jax.nn.one_hot(accept.astype(jnp.int32), 2, dtype=state.log_h.dtype)  # [N, 2]
  log_h = state.log_h + chosen * gain[:, None]
  return Exp3State(log_h=log_h - jnp.max(log_h, axis=-1, keepdims=True))
