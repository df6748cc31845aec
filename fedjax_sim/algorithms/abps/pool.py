"""Candidate pools: the M peers each center keeps beliefs about (issue 4; SPEC §3.2 steps 2–3).

Paper 000 keeps a Beta belief about every other center, ``[C, C]`` in all. At
100,000 centers that does not fit, so each center i keeps a pool of M peers,
``pool[i, m]``, and its beliefs, UCB scores and candidate flags are ``[C, M]``:

* ``pool_size = 0`` (or ≥ C − 1): M = C − 1, the pool is every other center in
  ascending index order, and ``valid[i, m]`` says whether ``pool[i, m] ∈ C_i``
  (the goal filter of :mod:`.goal_filter`, exact τ_sim). This is the paper's
  ``C × C`` belief table without its diagonal, and the round is the paper's.
* M < C − 1 with a goal: the pool is the goal filter's top M peers by f
  (computed in row blocks, no ``[C, C]`` scores), and ``valid`` says whether f ≥ τ_sim
  (:func:`.goal_filter.sampled_threshold` at scale).
* M < C − 1 without a goal (base ABPS): M distinct other centers drawn at random
  once, in ``init``; all are candidates.

Every pool row is sorted by peer index (ties in UCB rank then break toward the
lower index, as with the full table), which also lets :func:`reverse_index`
find each center in its peers' pools by bisection.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.abps import goal_filter

BLOCK_ROWS = 512  # rows of goal scores computed at once by :func:`top_pool` ([BLOCK_ROWS, C] floats)


@struct.dataclass
class CandidatePool:
  index: jax.Array  # [C, M] int32 pool[i, m]: a peer i keeps beliefs about; rows ascending, never i
  valid: jax.Array  # [C, M] bool pool[i, m] ∈ C_i (passes the goal filter); i proposes only to these
  rev: jax.Array  # [C, M] int32 position of i in pool[pool[i, m]], −1 if i is not in that pool


def resolve_pool_size(num_clients: int, pool_size: int) -> int:
  """M: ``pool_size``, or C − 1 (every other center) when it is 0 or at least C − 1."""
  full = max(num_clients - 1, 0)
  return full if pool_size <= 0 or pool_size >= full else int(pool_size)


def full_pool(num_clients: int) -> jax.Array:
  """``[C, C − 1]`` int32: row i lists every other center in ascending order."""
  m = jnp.arange(num_clients - 1, dtype=jnp.int32)[None, :]
  i = jnp.arange(num_clients, dtype=jnp.int32)[:, None]
  return jnp.where(m < i, m, m + 1)


def _sort_rows(index: jax.Array, *others: jax.Array) -> tuple:
  order = jnp.argsort(index, axis=1)
  return tuple(jnp.take_along_axis(a, order, axis=1) for a in (index,) + others)


def top_pool(feat: jax.Array, goal: str, pool_size: int, block_rows: int | None = None) -> tuple:
  """Each center's top ``pool_size`` peers by the goal score f, blockwise over rows.

  Args:
    feat: ``[C, D]`` :func:`.goal_filter.goal_features`.
    goal: homogeneity, diversity or alignment.
    pool_size: M < C.
    block_rows: rows of f held at once (``[block_rows, C]``; default :data:`BLOCK_ROWS`), so
      no ``[C, C]`` scores once C > block_rows.

  Returns:
    ``(index [C, M] int32, f [C, M])``, each row sorted by peer index. Ties in f go
    to the lower index (``lax.top_k``).
  """
  c = feat.shape[0]
  b = min(block_rows or BLOCK_ROWS, c)
  nb = -(-c // b)
  ids = jnp.arange(nb * b, dtype=jnp.int32).reshape(nb, b)
  rows = jnp.pad(feat, ((0, nb * b - c), (0, 0))).reshape(nb, b, -1)
  cols = jnp.arange(c, dtype=jnp.int32)[None, :]

  def block(args):
    r, own = args
    f = goal_filter.pair_scores(r, feat, goal)  # [b, C]
    f = jnp.where(own[:, None] == cols, -jnp.inf, f)  # never oneself
    return jax.lax.top_k(f, pool_size)

  vals, index = jax.lax.map(block, (rows, ids))  # [nb, b, M]
  vals, index = vals.reshape(-1, pool_size)[:c], index.reshape(-1, pool_size)[:c].astype(jnp.int32)
  index, vals = _sort_rows(index, vals)
  return index, vals


def random_pool(key: jax.Array, num_clients: int, pool_size: int) -> jax.Array:
  """``[C, M]`` int32: M distinct other centers per row drawn uniformly, rows ascending.

  Floyd's algorithm (Bentley & Floyd 1987) for every row at once: M steps of O(M)
  work per row, so O(C·M²) in all and no ``[C, C]`` permutation.
  """
  n = num_clients - 1  # draw from 0..n-1, then skip oneself
  owner = jnp.arange(num_clients, dtype=jnp.int32)

  def step(s, sel):
    top = n - pool_size + s  # Floyd: draw t from 0..top; if taken, take top instead
    t = jax.random.randint(jax.random.fold_in(key, s), (num_clients,), 0, top + 1, jnp.int32)
    dup = jnp.any(sel == t[:, None], axis=1)
    return sel.at[:, s].set(jnp.where(dup, top, t))

  sel = jax.lax.fori_loop(0, pool_size, step, jnp.full((num_clients, pool_size), -1, jnp.int32))
  index = jnp.where(sel < owner[:, None], sel, sel + 1)
  return jnp.sort(index, axis=1)


def reverse_index(index: jax.Array) -> jax.Array:
  """rev[i, m] = position of i in pool[pool[i, m]], or −1: ``[C, M]`` int32.

  Bisection in the (ascending) pool rows: ⌈log2(M + 1)⌉ gathers of ``[C, M]``,
  O(C·M·log M) work, nothing larger than ``[C, M]``.
  """
  c, m = index.shape
  owner = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32)[:, None], (c, m))
  lo = jnp.zeros((c, m), jnp.int32)
  hi = jnp.full((c, m), m, jnp.int32)
  for _ in range(max(int(m).bit_length(), 1)):  # lower bound of `owner` in row index[i, m]
    active = lo < hi
    mid = (lo + hi) // 2
    right = index[index, jnp.minimum(mid, m - 1)] < owner
    lo = jnp.where(active & right, mid + 1, lo)
    hi = jnp.where(active & ~right, mid, hi)
  found = (lo < m) & (index[index, jnp.minimum(lo, m - 1)] == owner)
  return jnp.where(found, lo, -1).astype(jnp.int32)


def build_pool(key: jax.Array, meta: jax.Array, goal: str, keep_fraction: float, pool_size: int) -> CandidatePool:
  """Each center's candidate pool and its goal-filter flags (see the module docstring).

  Args:
    key: randomness for a random pool (goal "none") or the sampled τ_sim; unused when M = C − 1.
    meta: ``[C, D]`` metadata vectors (z-scored here, SPEC §3.2 step 2).
    goal: none, homogeneity, diversity or alignment.
    keep_fraction: fraction of ordered pairs the goal filter keeps.
    pool_size: M (0 = every other center, the paper's ``C × C`` beliefs).
  """
  c = meta.shape[0]
  m = resolve_pool_size(c, pool_size)
  if m == c - 1:
    index = full_pool(c)
    valid = jnp.take_along_axis(goal_filter.candidate_mask(meta, goal, keep_fraction), index, axis=1)
  elif goal == "none":
    index = random_pool(key, c, m)
    valid = jnp.ones((c, m), bool)
  else:
    meta_z = goal_filter.zscore_metadata(meta)
    feat = goal_filter.goal_features(meta_z, goal)
    index, f = top_pool(feat, goal, m)
    if c * (c - 1) <= goal_filter.EXACT_MAX_PAIRS:
      tau = goal_filter.calibrate_threshold(goal_filter.goal_scores(meta_z, goal), keep_fraction)
    else:
      tau = goal_filter.sampled_threshold(key, feat, goal, keep_fraction)
    valid = f >= tau
  return CandidatePool(index=index, valid=valid, rev=reverse_index(index))
