"""The server's categorical beliefs over each client's acceptance threshold (paper 002 §3.1, §3.5; SPEC §4.1)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

TYPE_GRID = (0.1, 0.3, 0.5, 0.7, 1.0)
"""Θ, the M = 5 threshold classes κ^(m) (paper 002 §3.1 and §4.1; SPEC §4.1)."""


@struct.dataclass
class Beliefs:
  """μ_t^i ∈ Δ(Θ) for every client, factored across clients (paper 002 §3.1).

  Decision: stored as normalized log-probabilities. Each logistic observation multiplies a type's odds by up to
  e^{λ_obs (κ^(M) − κ^(1))} ≈ 90, so a few dozen one-sided observations underflow float32 probabilities to 0,
  and a type at probability 0 could never come back; the log domain keeps the full support that finite λ_obs
  promises (paper 002 §3.5).
  """

  log_mu: jax.Array  # [N, M] log μ_i(m); logsumexp over m is 0

  @property
  def mu(self) -> jax.Array:
    """``[N, M]`` the probabilities μ_i(m)."""
    return jax.nn.softmax(self.log_mu, axis=-1)


def type_grid(dtype=jnp.float32) -> jax.Array:
  """Θ as a ``[M]`` array."""
  return jnp.asarray(TYPE_GRID, dtype)


def belief_init(num_clients: int, num_types: int = len(TYPE_GRID)) -> Beliefs:
  """The uniform prior μ_0^i(m) = 1/M (paper 002 §3.1 and §4.1)."""
  return Beliefs(log_mu=jnp.full((num_clients, num_types), -jnp.log(float(num_types)), jnp.float32))


def sample_types(key: jax.Array, num_clients: int, grid=None) -> jax.Array:
  """Private thresholds κ_i drawn uniformly from Θ at t = 0, static thereafter (paper 002 §4.1; SPEC §4.1).

  Returns:
    ``[N]`` κ_i, values of ``grid`` (default :data:`TYPE_GRID`).
  """
  grid = type_grid() if grid is None else jnp.asarray(grid, jnp.float32)
  return grid[jax.random.randint(key, (num_clients,), 0, grid.shape[0])]


def acceptance_log_likelihood(offers: jax.Array, accepted: jax.Array, lam_obs=5.0, grid=None) -> jax.Array:
  """log Pr(a_i | θ_i = κ^(m), r_i) with Pr(accept | κ) = σ(λ_obs (r − κ)) (paper 002 eq. 17).

  Computed as −softplus(∓λ_obs (r − κ)), finite for every offer.

  Args:
    offers: ``[N]`` r_i.
    accepted: ``[N]`` bool a_i.
    lam_obs: slope λ_obs > 0.
    grid: ``[M]`` Θ (default :data:`TYPE_GRID`).

  Returns:
    ``[N, M]`` log-likelihoods.
  """
  grid = type_grid() if grid is None else jnp.asarray(grid, jnp.float32)
  x = lam_obs * (offers[:, None] - grid[None, :])
  return -jax.nn.softplus(jnp.where(accepted[:, None], -x, x))


def belief_update(beliefs: Beliefs, offers: jax.Array, accepted: jax.Array, included: jax.Array, lam_obs=5.0,
                  grid=None) -> Beliefs:
  """μ_t^i(m) ∝ μ_{t−1}^i(m) Pr(a_{t,i} | θ_i = κ^(m), r_{t,i}) for z_{t,i} = 1; μ_t^i = μ_{t−1}^i otherwise
  (paper 002 eq. 18 with the likelihood of eq. 17; SPEC §4.2 step 7).

  Args:
    beliefs: μ_{t−1}.
    offers: ``[N]`` r_{t,i}.
    accepted: ``[N]`` bool a_{t,i} (read only where included).
    included: ``[N]`` bool z_{t,i}.
    lam_obs: slope λ_obs > 0 (paper 002 §4.1: 5).
    grid: ``[M]`` Θ (default :data:`TYPE_GRID`).

  Returns:
    μ_t.
  """
  ll = acceptance_log_likelihood(offers, accepted, lam_obs, grid)
  post = beliefs.log_mu + ll
  post = post - jax.nn.logsumexp(post, axis=-1, keepdims=True)
  return Beliefs(log_mu=jnp.where(included[:, None], post, beliefs.log_mu))


def posterior_mean_threshold(beliefs: Beliefs, grid=None) -> jax.Array:
  """E_{μ_i}[κ] = Σ_m μ_i(m) κ^(m) (paper 002 eq. 21's estimate; the state's thresholds, SPEC §4.2 step 1).

  Returns:
    ``[N]`` posterior-mean thresholds.
  """
  grid = type_grid() if grid is None else jnp.asarray(grid, jnp.float32)
  return beliefs.mu @ grid
