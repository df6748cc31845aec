"""Shapley credit of each partner (paper 000 eq. 4; SPEC §3.2 step 7).

Utilities are given for every subset of a center's κ partner *slots*; empty
slots are null players (adding them leaves the aggregate unchanged), and adding
null players does not change the Shapley values of the others, so a fixed
number of slots serves every |P_i| ≤ κ.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def subset_masks(k: int) -> np.ndarray:
  """``[2^k, k]`` bool: row s is the subset with bit j set iff player j is in it."""
  s = np.arange(2 ** k)[:, None]
  return ((s >> np.arange(k)[None, :]) & 1).astype(bool)


def shapley_matrix(k: int) -> np.ndarray:
  """``[2^k, k]`` M with φ = U @ M for utilities U over :func:`subset_masks` order.

  φ_j = Σ_{S ⊆ N∖{j}} |S|!(k−|S|−1)!/k! · (U(S ∪ {j}) − U(S)): a subset s containing
  j gets +w(|s| − 1), one without j gets −w(|s|), with w(m) = m!(k−m−1)!/k!.
  """
  masks = subset_masks(k)
  sizes = masks.sum(1)
  w = lambda m: math.factorial(m) * math.factorial(k - m - 1) / math.factorial(k)
  mat = np.zeros((2 ** k, k))
  for s in range(2 ** k):
    for j in range(k):
      mat[s, j] = w(sizes[s] - 1) if masks[s, j] else -w(sizes[s])
  return mat


def exact_shapley(utilities: jax.Array) -> jax.Array:
  """Exact Shapley values from ``[..., 2^k]`` subset utilities → ``[..., k]`` (eq. 4)."""
  k = int(round(math.log2(utilities.shape[-1])))
  return utilities @ jnp.asarray(shapley_matrix(k), utilities.dtype)


def tmc_permutation_prefixes(key: jax.Array, k: int, num_permutations: int) -> tuple:
  """Random permutations for truncated Monte Carlo Shapley (Ghorbani & Zou 2019).

  Returns:
    ``(perms [B, k], prefix_masks [B, k + 1, k])``: prefix ``m`` of permutation b
    holds its first m players; utilities of these prefixes give the marginals.
  """
  perms = jax.vmap(lambda kk: jax.random.permutation(kk, k))(jax.random.split(key, num_permutations))
  pos = jnp.argsort(perms, axis=1)  # position of each player in each permutation
  prefix = pos[:, None, :] < jnp.arange(k + 1)[None, :, None]
  return perms, prefix


def tmc_shapley(perms: jax.Array, prefix_utilities: jax.Array, tolerance: float = 0.0) -> jax.Array:
  """Shapley estimate from permutation prefixes (truncated Monte Carlo; Ghorbani & Zou 2019, Alg. 1).

  Args:
    perms: ``[B, k]`` permutations.
    prefix_utilities: ``[B, k + 1]`` utility of each permutation's first m players.
    tolerance: truncation: once |U(all) − U(prefix)| ≤ tolerance, later marginals count 0.

  Returns:
    ``[k]`` mean marginal contribution of each player.
  """
  marg = prefix_utilities[:, 1:] - prefix_utilities[:, :-1]  # [B, k], marginal of perms[b, m]
  done = jnp.abs(prefix_utilities[:, -1:] - prefix_utilities[:, :-1]) <= tolerance
  marg = jnp.where(done, 0.0, marg)
  k = perms.shape[1]
  per_player = jnp.zeros((perms.shape[0], k)).at[jnp.arange(perms.shape[0])[:, None], perms].set(marg)
  return per_player.mean(0)
