"""Euclidean projection onto the capped simplex Π = {π ∈ [0,1]^N : Σπ ≤ K} (paper 002 eq. 3; Alg. 1 line 4)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def capped_simplex_projection(y: jax.Array, k, iters: int = 50) -> jax.Array:
  """argmin_{π ∈ Π} ‖π − y‖², Π = {π ∈ [0,1]^N : Σ_i π_i ≤ K} (paper 002 eq. 3; Alg. 1 line 4; SPEC §4.2 step 2).

  By the KKT conditions of this quadratic program the solution is π_i = clip(y_i − τ, 0, 1) for one τ ≥ 0 with
  τ·(Σπ − K) = 0: τ = 0 when Σ clip(y, 0, 1) ≤ K (the box alone is feasible; in particular whenever K ≥ N),
  otherwise the unique τ > 0 with Σ_i clip(y_i − τ, 0, 1) = K, a non-increasing piecewise-linear function of τ.

  Decision (the paper cites a sorting-based method [52] and SPEC §4.2 allows "exact sorting or breakpoint
  method"): a fixed number of bisection steps on τ ∈ [0, max(y)] (static shapes, no sort, vmap-friendly), then
  one exact breakpoint step: with the clients strictly inside the box at the bisected τ (the free set F) and those
  at the upper bound (U), τ = (Σ_F y_i + |U| − K)/|F| solves Σπ = K exactly on that piece. 50 steps shrink the
  bracket below float32 resolution, so F is the optimum's free set up to clients within rounding of a breakpoint,
  whose contribution is within rounding of 0 or 1 either way.

  Args:
    y: ``[N]`` the point to project (the PPO actor's sigmoid output π̂ in Alg. 1).
    k: the expected-inclusion limit K ≥ 0 (paper: 1 ≤ K ≤ N); a scalar, may be traced.
    iters: bisection steps (static).

  Returns:
    ``[N]`` the projection π ∈ Π, in ``y``'s dtype.
  """
  y = jnp.asarray(y)
  dtype = y.dtype if jnp.issubdtype(y.dtype, jnp.floating) else jnp.float32
  y = y.astype(dtype)
  k = jnp.asarray(k, dtype)
  total = lambda tau: jnp.sum(jnp.clip(y - tau, 0.0, 1.0))  # noqa: E731  non-increasing in τ

  def bisect(_, bracket):
    lo, hi = bracket
    mid = 0.5 * (lo + hi)
    over = total(mid) > k  # the root lies above mid
    return jnp.where(over, mid, lo), jnp.where(over, hi, mid)

  hi0 = jnp.maximum(jnp.max(y), 0.0)  # Σ clip(y − max y, 0, 1) = 0 ≤ K
  lo, hi = jax.lax.fori_loop(0, iters, bisect, (jnp.zeros((), dtype), hi0))
  tau_b = 0.5 * (lo + hi)
  free = (y - tau_b > 0.0) & (y - tau_b < 1.0)
  n_free = jnp.sum(free)
  n_upper = jnp.sum(y - tau_b >= 1.0).astype(dtype)
  tau_exact = (jnp.sum(jnp.where(free, y, 0.0)) + n_upper - k) / jnp.maximum(n_free, 1).astype(dtype)
  tau = jnp.where(n_free > 0, jnp.maximum(tau_exact, 0.0), tau_b)
  box = jnp.clip(y, 0.0, 1.0)
  return jnp.where(jnp.sum(box) <= k, box, jnp.clip(y - tau, 0.0, 1.0))
