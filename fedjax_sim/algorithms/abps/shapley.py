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


# --- per-center choice of exact or Monte Carlo Shapley (SPEC §3.2 step 7; issue 9, item 12) ------------


def credit_coalitions(key: jax.Array, valid: jax.Array, exact_max: int, num_permutations: int) -> tuple:
  """The slot coalitions whose utilities a round's Shapley credit needs, for every center.

  SPEC §3.2 step 7 (paper 000 §6.3): φ by the exact formula (eq. 4) when
  |P_i| ≤ ``exact_max`` (5), else truncated Monte Carlo with B permutations.
  With κ_max = ``valid.shape[1]`` slots:

  - κ_max ≤ ``exact_max``: every |P_i| ≤ κ_max, so every center is exact: the
    2^κ_max subsets of its slots (:func:`subset_masks`; S = 2^κ_max).
  - κ_max > ``exact_max`` (= e): the 2^e subsets of each center's first e occupied
    slots (its partners compacted to the front; a center with |P_i| ≤ e has no
    other), then the B·(κ_max + 1) prefixes of B random slot permutations
    (:func:`tmc_permutation_prefixes`): S = 2^e + B·(κ_max + 1) coalitions per
    center, all evaluated, and :func:`shapley_credit` picks per center. Cost: 2^e
    (32) utility evaluations per center more than Monte Carlo alone (at κ = 7,
    B = 8: 96 instead of 64).

  Args:
    key: randomness for the permutations (unused when κ_max ≤ ``exact_max``).
    valid: ``[C, κ_max]`` bool, the slot holds a partner.
    exact_max: the largest |P_i| credited exactly.
    num_permutations: B.

  Returns:
    ``(masks [C, S, κ_max] bool, perms [C, B, κ_max] or None)``.
  """
  c, k = valid.shape
  if k <= exact_max:
    masks = jnp.asarray(subset_masks(k))  # [2^k, k]
    return jnp.broadcast_to(masks, (c,) + masks.shape), None
  perms, prefix = jax.vmap(lambda kk: tmc_permutation_prefixes(kk, k, num_permutations))(
      jax.random.split(key, c))  # [C, B, k], [C, B, k + 1, k]
  front = _front_slots(valid, exact_max)  # [C, e] slot of each of the first e partners
  player = jnp.asarray(subset_masks(exact_max))  # [2^e, e]
  exact = jnp.any(player[None, :, :, None] & (front[:, None, :, None] == jnp.arange(k)[None, None, None, :]),
                  axis=2)  # [C, 2^e, k]
  return jnp.concatenate([exact, prefix.reshape(c, -1, k)], axis=1), perms


def _front_slots(valid: jax.Array, exact_max: int) -> jax.Array:
  """``[C, e]`` the slots of each center's first e partners (occupied slots first, in slot order)."""
  return jnp.argsort(~valid, axis=1, stable=True)[:, :exact_max].astype(jnp.int32)


def full_coalition(kappa_max: int, exact_max: int) -> int:
  """Index, in :func:`credit_coalitions` order, of a coalition holding every slot (the aggregate with all of P_i)."""
  if kappa_max <= exact_max:
    return 2 ** kappa_max - 1
  return 2 ** exact_max + kappa_max  # the first permutation's prefix of all κ_max slots


def shapley_credit(utilities: jax.Array, perms, valid: jax.Array, exact_max: int,
                   tolerance: float = 0.0) -> jax.Array:
  """φ_{j→i} per slot from the utilities of :func:`credit_coalitions`' coalitions, ``[C, κ_max]``.

  Exact Shapley (eq. 4) for every center with |P_i| ≤ ``exact_max``, truncated
  Monte Carlo (:func:`tmc_shapley`) for the others, chosen per center with
  ``jnp.where``. An exact center's credits satisfy efficiency,
  Σ_j φ_{j→i} = U_i(P_i) − U_i(∅); empty slots are null players (φ = 0).

  Args:
    utilities: ``[C, S]`` U_i of each coalition.
    perms: ``[C, B, κ_max]`` from :func:`credit_coalitions` (None when κ_max ≤ ``exact_max``).
    valid: ``[C, κ_max]`` bool, the slot holds a partner.
    exact_max: the largest |P_i| credited exactly.
    tolerance: TMC truncation tolerance.
  """
  c, k = valid.shape
  if k <= exact_max:
    return exact_shapley(utilities)
  n_exact = 2 ** exact_max
  b = perms.shape[1]
  tmc = jax.vmap(lambda p, u: tmc_shapley(p, u, tolerance))(perms, utilities[:, n_exact:].reshape(c, b, k + 1))
  players = exact_shapley(utilities[:, :n_exact])  # [C, e] credit of each center's first e partners
  exact = jnp.zeros((c, k), players.dtype).at[jnp.arange(c)[:, None], _front_slots(valid, exact_max)].set(players)
  small = jnp.sum(valid, axis=1) <= exact_max
  return jnp.where(small[:, None], jnp.where(valid, exact, 0.0), tmc)
