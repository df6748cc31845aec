"""Goal-aware metadata pre-filter (paper 000 §4.1, eq. 3; SPEC §3.2 step 2)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

GOALS = ("none", "homogeneity", "diversity", "alignment")


def zscore_metadata(meta: jax.Array) -> jax.Array:
  """z-scores each metadata coordinate across centers.

  Decision (SPEC §3.2 step 2): raw ``log n_train`` would dominate every cosine,
  so coordinates are standardized across centers before the goal score.
  """
  mu = jnp.mean(meta, axis=0)
  sd = jnp.std(meta, axis=0)
  return (meta - mu) / jnp.where(sd > 1e-8, sd, 1.0)


def goal_scores(meta_z: jax.Array, goal: str) -> jax.Array:
  """f_i(v_i, v_j) for every ordered pair: ``[C, C]`` (eq. 3).

  homogeneity: cos(v_i, v_j); diversity: −cos(v_i, v_j); alignment: −|v_{i,0} − v_{j,0}|
  (coordinate 0 is the positive rate, the KPI marker).
  """
  if goal in ("homogeneity", "diversity"):
    unit = meta_z / jnp.maximum(jnp.linalg.norm(meta_z, axis=1, keepdims=True), 1e-8)
    cos = unit @ unit.T
    return cos if goal == "homogeneity" else -cos
  if goal == "alignment":
    return -jnp.abs(meta_z[:, None, 0] - meta_z[None, :, 0])
  raise ValueError(f"unknown goal {goal!r}; choose from {', '.join(GOALS)}")


def calibrate_threshold(scores: jax.Array, keep_fraction: float) -> jax.Array:
  """τ_sim: the (1 − keep_fraction) quantile of f over all ordered pairs i ≠ j (SPEC: 75th percentile)."""
  c = scores.shape[0]
  off = ~jnp.eye(c, dtype=bool)
  vals = jnp.sort(jnp.where(off, scores, jnp.inf).ravel())[: c * (c - 1)]
  return jnp.quantile(vals, 1.0 - keep_fraction)


def candidate_mask(meta: jax.Array, goal: str, keep_fraction: float = 0.25) -> jax.Array:
  """C_i as a ``[C, C]`` bool mask: row i holds the peers i may propose to; never i itself.

  ``goal = "none"`` (base ABPS) admits every other center.
  """
  c = meta.shape[0]
  off = ~jnp.eye(c, dtype=bool)
  if goal == "none":
    return off
  f = goal_scores(zscore_metadata(meta), goal)
  return off & (f >= calibrate_threshold(f, keep_fraction))
