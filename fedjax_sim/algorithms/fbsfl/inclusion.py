"""Sampling the included set I_t from the marginals π_t (paper 002 §3.1, eq. 4; Alg. 1 line 6; SPEC §4.2 step 4)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

FIXED_POINT_BITS = 24
"""Dependent rounding works on π in units of 2^-24 (exact integer cumulative sums; see :func:`dependent_rounding`)."""


def independent_inclusion(key: jax.Array, pi: jax.Array) -> jax.Array:
  """z_i ~ Bernoulli(π_i) independently (paper 002 §3.1, below eq. 3; Alg. 1 line 6).

  E|I_t| = Σπ ≤ K, but |I_t| > K happens (paper 002 Table 4: 38% of CIFAR-10 rounds).

  Args:
    key: PRNG key.
    pi: ``[N]`` inclusion marginals in [0, 1].

  Returns:
    ``[N]`` bool z, True for included clients.
  """
  return jax.random.uniform(key, jnp.shape(pi)) < pi


def dependent_rounding(key: jax.Array, pi: jax.Array) -> jax.Array:
  """Inclusion with the marginals π and |I_t| ∈ {⌊Σπ⌋, ⌈Σπ⌉} (paper 002 eq. 4, the strict-cap variant [49]).

  Systematic sampling over a random permutation (SPEC §4.2 step 4): permute the clients, lay their π end to end
  on [0, Σπ] (cumulative sums C_0 = 0, C_j = Σ_{l ≤ j} π_l), draw one offset u ~ U[0, 1), and include the j-th
  permuted client iff its interval (C_{j−1}, C_j] holds a point of u + ℤ, i.e. ⌊C_j − u⌋ > ⌊C_{j−1} − u⌋.
  As π_j ≤ 1 the interval holds at most one such point, and it holds one with probability exactly π_j; the
  count telescopes to ⌊Σπ − u⌋ − ⌊−u⌋ ∈ {⌊Σπ⌋, ⌈Σπ⌉}. The permutation only randomizes which clients are
  included together; the marginals do not depend on it.

  Decision (exactness in float32): π is rounded down to a multiple of 2^-24 and the cumulative sums are exact
  integers in units of 2^-24 (two int32 cumulative sums of 12-bit halves, exact for N < 2^18), and u is a uniform
  integer in [0, 2^24). So the marginals are exactly ⌊2^24 π_i⌋ / 2^24 ∈ (π_i − 2^-24, π_i], the count lies in
  {⌊S⌋, ⌈S⌉} for S = Σ_i ⌊2^24 π_i⌋ / 2^24 ≤ Σπ, and Σπ ≤ K therefore gives |I_t| ≤ K in every round (no
  float32 cumulative-sum rounding can push it over K). The permutation is an argsort of random 32-bit keys (one
  sort; ties, of probability < N²/2^33, only bias which clients are paired, never the marginals).

  Args:
    key: PRNG key.
    pi: ``[N]`` inclusion marginals in [0, 1] (values outside are clipped).

  Returns:
    ``[N]`` bool z, True for included clients.
  """
  k_perm, k_u = jax.random.split(key)
  n = jnp.shape(pi)[0]
  half = FIXED_POINT_BITS // 2
  low = (1 << half) - 1
  perm = jnp.argsort(jax.random.bits(k_perm, (n,), jnp.uint32), stable=True)
  q = jnp.floor(jnp.clip(pi[perm].astype(jnp.float32), 0.0, 1.0) * (1 << FIXED_POINT_BITS)).astype(jnp.int32)
  # C_j = Σ_{l ≤ j} q_l = H_j 2^12 + L_j with H, L the cumulative sums of q's high and low 12 bits (each < 2^31);
  # carrying L's high bits into H gives C_j = G_j 2^12 + (L_j mod 2^12): whole part G >> 12, fraction below.
  h = jnp.cumsum(q >> half)
  lo = jnp.cumsum(q & low)
  g = h + (lo >> half)
  c_whole = g >> half
  c_frac = ((g & low) << half) + (lo & low)  # in [0, 2^24)
  u = (jax.random.bits(k_u, (), jnp.uint32) >> (32 - FIXED_POINT_BITS)).astype(jnp.int32)  # U{0, …, 2^24 − 1}
  marks = c_whole - (c_frac < u).astype(jnp.int32)  # ⌊C_j − u⌋ in units of one client
  prev = jnp.concatenate([jnp.full((1,), -1, jnp.int32) + (u == 0), marks[:-1]])  # ⌊C_0 − u⌋ = ⌊−u⌋
  chosen = marks > prev
  return jnp.zeros((n,), bool).at[perm].set(chosen)
