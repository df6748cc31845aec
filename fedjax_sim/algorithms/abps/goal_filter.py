"""Goal-aware metadata pre-filter (paper 000 §4.1, eq. 3; SPEC §3.2 step 2)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

GOALS = ("none", "homogeneity", "diversity", "alignment")

# Decision (SPEC §3.2 leaves τ_sim open at scale): τ_sim is the exact quantile over all C·(C − 1)
# ordered pairs while there are at most EXACT_MAX_PAIRS of them (C ≤ 2048: ≤ 16 MiB of scores);
# above that it is estimated from THRESHOLD_SAMPLES ordered pairs drawn uniformly at random (the
# estimate's rank error is about sqrt(q(1 − q) / 2^20) ≈ 0.0004 of the pairs for q = 0.75).
EXACT_MAX_PAIRS = 1 << 22
THRESHOLD_SAMPLES = 1 << 20


def zscore_metadata(meta: jax.Array) -> jax.Array:
  """z-scores each metadata coordinate across centers.

  Decision (SPEC §3.2 step 2): raw ``log n_train`` would dominate every cosine,
  so coordinates are standardized across centers before the goal score.
  """
  mu = jnp.mean(meta, axis=0)
  sd = jnp.std(meta, axis=0)
  return (meta - mu) / jnp.where(sd > 1e-8, sd, 1.0)


def goal_features(meta_z: jax.Array, goal: str) -> jax.Array:
  """Per-center vectors whose pairwise :func:`pair_scores` are f: ``[C, D]``.

  homogeneity / diversity: the unit-normalized z-scored metadata (f is ± their dot
  product, the cosine); alignment: the z-scored positive rate alone (coordinate 0).
  """
  if goal in ("homogeneity", "diversity"):
    return meta_z / jnp.maximum(jnp.linalg.norm(meta_z, axis=1, keepdims=True), 1e-8)
  if goal == "alignment":
    return meta_z[:, :1]
  raise ValueError(f"unknown goal {goal!r}; choose from {', '.join(GOALS)}")


def pair_scores(rows: jax.Array, cols: jax.Array, goal: str) -> jax.Array:
  """f between every row and every column center, from :func:`goal_features`: ``[R, K]`` (eq. 3)."""
  if goal in ("homogeneity", "diversity"):
    cos = rows @ cols.T
    return cos if goal == "homogeneity" else -cos
  if goal == "alignment":
    return -jnp.abs(rows[:, None, 0] - cols[None, :, 0])
  raise ValueError(f"unknown goal {goal!r}; choose from {', '.join(GOALS)}")


def goal_scores(meta_z: jax.Array, goal: str) -> jax.Array:
  """f_i(v_i, v_j) for every ordered pair: ``[C, C]`` (eq. 3).

  homogeneity: cos(v_i, v_j); diversity: −cos(v_i, v_j); alignment: −|v_{i,0} − v_{j,0}|
  (coordinate 0 is the positive rate, the KPI marker).
  """
  feat = goal_features(meta_z, goal)
  return pair_scores(feat, feat, goal)


def calibrate_threshold(scores: jax.Array, keep_fraction: float) -> jax.Array:
  """τ_sim: the (1 − keep_fraction) quantile of f over all ordered pairs i ≠ j (SPEC: 75th percentile)."""
  c = scores.shape[0]
  off = ~jnp.eye(c, dtype=bool)
  vals = jnp.sort(jnp.where(off, scores, jnp.inf).ravel())[: c * (c - 1)]
  return jnp.quantile(vals, 1.0 - keep_fraction)


def sampled_threshold(key: jax.Array, feat: jax.Array, goal: str, keep_fraction: float,
                      num_samples: int | None = None) -> jax.Array:
  """τ_sim estimated from ``num_samples`` uniformly drawn ordered pairs i ≠ j (no ``[C, C]`` scores).

  Args:
    key: randomness for the sampled pairs.
    feat: ``[C, D]`` :func:`goal_features`.
    goal: the goal of ``feat``.
    keep_fraction: the fraction of ordered pairs the filter keeps.
    num_samples: sampled ordered pairs (default :data:`THRESHOLD_SAMPLES`).
  """
  c = feat.shape[0]
  num_samples = num_samples or THRESHOLD_SAMPLES
  k_i, k_off = jax.random.split(key)
  i = jax.random.randint(k_i, (num_samples,), 0, c)
  j = (i + jax.random.randint(k_off, (num_samples,), 1, c)) % c  # uniform over the other centers
  if goal in ("homogeneity", "diversity"):
    cos = jnp.sum(feat[i] * feat[j], axis=1)
    vals = cos if goal == "homogeneity" else -cos
  else:
    vals = -jnp.abs(feat[i, 0] - feat[j, 0])
  return jnp.quantile(vals, 1.0 - keep_fraction)


def candidate_mask(meta: jax.Array, goal: str, keep_fraction: float = 0.25) -> jax.Array:
  """C_i as a ``[C, C]`` bool mask: row i holds the peers i may propose to; never i itself.

  ``goal = "none"`` (base ABPS) admits every other center. Dense: used when the
  candidate pools hold every other center (``pool_size = 0``); see :mod:`.pool`.
  """
  c = meta.shape[0]
  off = ~jnp.eye(c, dtype=bool)
  if goal == "none":
    return off
  f = goal_scores(zscore_metadata(meta), goal)
  return off & (f >= calibrate_threshold(f, keep_fraction))
