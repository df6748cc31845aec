"""Metrics in JAX: masked AUROC (ties counted half) and communication accounting (SPEC §3.4)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def auroc(scores: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
  """Area under the ROC curve of one client's scores, by the Mann–Whitney rank statistic.

  AUROC = (Σ_{positives} rank − P(P+1)/2) / (P·N), with average ranks over ties,
  which counts a tied (positive, negative) pair as one half. Rows with
  ``mask == False`` are ignored. O(n log n): one sort and two searchsorted.

  Args:
    scores: ``[n]`` real scores (higher = more likely positive).
    labels: ``[n]`` {0, 1} labels.
    mask: ``[n]`` bool, True on rows to include.

  Returns:
    A scalar; NaN when the masked rows hold only one class (AUROC undefined).
  """
  scores = scores.astype(jnp.float32)
  big = jnp.inf
  valid_sorted = jnp.sort(jnp.where(mask, scores, big))
  left = jnp.searchsorted(valid_sorted, scores, side="left")
  right = jnp.searchsorted(valid_sorted, scores, side="right")
  rank = (left + right + 1).astype(jnp.float32) / 2.0  # average 1-based rank among valid rows
  pos = mask & (labels > 0.5)
  neg = mask & (labels <= 0.5)
  n_pos = jnp.sum(pos).astype(jnp.float32)
  n_neg = jnp.sum(neg).astype(jnp.float32)
  u = jnp.sum(jnp.where(pos, rank, 0.0)) - n_pos * (n_pos + 1.0) / 2.0
  defined = (n_pos > 0) & (n_neg > 0)
  return jnp.where(defined, u / jnp.maximum(n_pos * n_neg, 1.0), jnp.nan)


batched_auroc = jax.vmap(auroc)
"""AUROC per client: ``[C, n]`` scores, labels, mask → ``[C]``."""


def mean_defined(values: jax.Array):
  """Mean over clients with a defined (non-NaN) value, and how many were excluded.

  SPEC §3.1: a center whose test split has one class has undefined AUROC; it is
  excluded from the mean and counted.

  Returns:
    ``(mean, num_excluded)``.
  """
  ok = ~jnp.isnan(values)
  total = jnp.sum(jnp.where(ok, values, 0.0))
  return total / jnp.maximum(jnp.sum(ok), 1), jnp.sum(~ok)


def star_round_bytes(num_participants, sent_params: int, bytes_per_param: int = 4):
  """Bytes of one star round (SPEC §3.4): 2·|W_sent|·b per participating client (upload + download)."""
  return num_participants * 2.0 * sent_params * bytes_per_param


def p2p_round_bytes(num_edges, sent_params: int, bytes_per_param: int = 4):
  """Bytes of one peer-to-peer round (SPEC §3.4): 2·|W_sent|·b per undirected edge (each side sends once)."""
  return num_edges * 2.0 * sent_params * bytes_per_param


def fedavg_reference_bytes(num_clients: int, num_params: int, rounds: int):
  """Denominator of the bandwidth ratio (SPEC §3.4): full-participation fp32 FedAvg over ``rounds``."""
  return float(num_clients) * 2.0 * num_params * 4 * rounds
