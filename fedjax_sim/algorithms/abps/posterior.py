"""Beta–Bernoulli beliefs over peers' Shapley utility and their UCB scores (paper 000 §4.2–4.3)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def ucb_scores(alpha: jax.Array, beta: jax.Array, pulls: jax.Array, t: jax.Array, gamma) -> jax.Array:
  """UCB_{j→i}(t) = α/(α+β) + γ·sqrt(2 log t / (n_{i→j} + 1))  (paper 000 eq. 7; SPEC §3.2 step 3).

  Args:
    alpha, beta: ``[C, M]`` Beta parameters of i's belief about its pool member j (row i;
      any shape works, e.g. scalars for the prior).
    pulls: ``[C, M]`` n_{i→j}, how often i has observed j.
    t: the round index, from 1.
    gamma: exploration weight (SPEC: √2; the paper text's "γ = 2" lost its root sign).
  """
  t = jnp.maximum(jnp.asarray(t, jnp.float32), 1.0)
  return alpha / (alpha + beta) + gamma * jnp.sqrt(2.0 * jnp.log(t) / (pulls + 1.0))


def clip_utility(phi: jax.Array, phi_min=-0.1, phi_max=0.1) -> jax.Array:
  """φ̄ = clip((φ − φ_min)/(φ_max − φ_min), 0, 1)  (paper 000 eq. 5)."""
  return jnp.clip((phi - phi_min) / (phi_max - phi_min), 0.0, 1.0)


def beta_update(alpha, beta, pulls, phi_bar, observed):
  """α += φ̄, β += 1 − φ̄, n += 1 where ``observed`` (Alg. 1 lines 26–28; SPEC §3.2 step 8).

  Returns:
    ``(alpha, beta, pulls)``.
  """
  obs = observed.astype(alpha.dtype)
  return alpha + obs * phi_bar, beta + obs * (1.0 - phi_bar), pulls + obs
