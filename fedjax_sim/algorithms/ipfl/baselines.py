"""The personalized-FL baselines paper 003 (iPFL) compares against, as pure pieces: pFedGraph, FedAMP, CFL, FedFomo
(paper 003 §Results, refs. 29, 31, 32, 46; SPEC §5 "Baselines").

Every function is pure, jit-able and vectorized over all C clients at once (no Python loop over clients; fixed
shapes; ``lax.fori_loop`` where iteration is inherent), and vmaps over seeds. Models are flat float32 vectors
``flat: [C, P]``; ``active: [C]`` bool marks the clients in the federation this round. Inactive clients neither
contribute nor are changed: their rows come out as the identity (graphs) or unchanged (models, cluster ids), and
they get zero weight in everyone else's row.

Sources. Each docstring says what the released code does where it was read: pFedGraph's code
(MediaBrain-SJTU/pFedGraph, ``pytorch/pfedgraph_cosine*``), CFL's (felisat/clustered-federated-learning,
``fl_devices.py``) and the iPFL authors' re-implementations of all four (19dx/iPFL, ``utils/algorithms/*_utils.py``),
restated, not copied. Where the iPFL authors' version differs from the original and a function here follows the
original, the docstring says how the caller gets the iPFL version.

Cosines use a safe normalisation (a zero vector has unit vector 0, so cos = 0 with everything) and full f32
precision matmuls (accelerators would otherwise use reduced-precision ones).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

_HI = jax.lax.Precision.HIGHEST


def _unit_rows(x: jax.Array) -> jax.Array:
  """x_i / ‖x_i‖ row by row, 0 for a zero row."""
  norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
  return jnp.where(norm > 0, x / jnp.where(norm > 0, norm, 1.0), 0.0)


def _cosine(x: jax.Array) -> jax.Array:
  """``[C, C]`` cos(x_i, x_j), symmetric, 0 where either row is zero."""
  unit = _unit_rows(x)
  cos = jnp.matmul(unit, unit.T, precision=_HI)
  return 0.5 * (cos + cos.T)


def _normalize_rows(w: jax.Array) -> jax.Array:
  """w_i / Σ_j w_ij where the sum is > 0, the zero row otherwise."""
  total = jnp.sum(w, axis=-1, keepdims=True)
  return jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)


# --- simplex projection (pFedGraph's per-row QP) -------------------------------------------------------------

def simplex_projection(y: jax.Array, mask: jax.Array | None = None) -> jax.Array:
  """Euclidean projection of each row of y onto the probability simplex {x ≥ 0, Σ x = 1}, by sorting (Held, Wolfe
  and Crowder 1974; Duchi et al., ICML 2008, Fig. 1).

  With u the row sorted in decreasing order and S_k = Σ_{l ≤ k} u_l, ρ = max {k : u_k − (S_k − 1)/k > 0} and
  τ = (S_ρ − 1)/ρ; the projection is x = max(y − τ, 0), the KKT point of min ½‖x − y‖² on the simplex.

  Args:
    y: ``[..., n]`` rows to project.
    mask: ``[..., n]`` bool (broadcast against y), None for all True. The projection is onto the simplex over
      the masked entries only; the others come out 0. A row with an empty mask comes out all 0.

  Returns:
    ``[..., n]`` the projections.
  """
  y = jnp.asarray(y)
  n = y.shape[-1]
  mask = jnp.ones(y.shape, bool) if mask is None else jnp.broadcast_to(mask, y.shape)
  count = jnp.sum(mask, axis=-1, keepdims=True)
  u = -jnp.sort(-jnp.where(mask, y, -jnp.inf), axis=-1)  # decreasing; the unmasked (−∞) sort last
  k = jnp.arange(1, n + 1, dtype=y.dtype)
  in_range = k <= count
  u = jnp.where(in_range, u, 0.0)
  css = jnp.cumsum(u, axis=-1)
  ok = in_range & (k * u > css - 1.0)  # u_k − (S_k − 1)/k > 0, without the division
  rho = jnp.max(jnp.where(ok, jnp.arange(1, n + 1), 0), axis=-1, keepdims=True)  # ≥ 1 when the mask is not empty
  css_rho = jnp.take_along_axis(css, jnp.maximum(rho - 1, 0), axis=-1)
  tau = (css_rho - 1.0) / jnp.maximum(rho, 1).astype(y.dtype)
  return jnp.where(mask, jnp.maximum(y - tau, 0.0), 0.0)


# --- pFedGraph (Ye et al., ICML 2023) ------------------------------------------------------------------------

def pfedgraph_graph(flat: jax.Array, flat0: jax.Array, n: jax.Array, active: jax.Array, alpha) -> jax.Array:
  """pFedGraph's collaboration graph (Ye et al., ICML 2023, the graph-learning step; the released
  ``optimizing_graph_matrix_neighbor``), as the iPFL authors compare it (α = 0.8; SPEC §5).

  Updates dw_i = θ_i − θ_0 from the common initial model; difference d_ij = −cos(dw_i, dw_j), snapped to −1 where
  it is < −0.9, as pFedGraph's ``cal_model_cosine_difference`` does (so the diagonal is −1; a zero update has
  cos = 0 with everything, itself included, so its row of d is 0). Data weights p_j = N_j / Σ_{active} N. Row i
  solves, over the simplex of the active clients (self included),

    min_x  α xᵀx + (d_i − 2α p)ᵀx  =  α ‖x − (p − d_i / (2α))‖² + const

  (complete the square: α‖x − c‖² = α xᵀx − 2α cᵀx + α cᵀc, and −2α cᵀx = (d_i − 2α p)ᵀx for c = p − d_i/(2α)),
  so its solution is the Euclidean projection of p − d_i / (2α) onto that simplex (:func:`simplex_projection`,
  exact; pFedGraph calls cvxpy). Then entries below 1 / (m · 1e5) are set to 0 (m = number of active clients) and
  the row is renormalised to sum 1 (the iPFL authors' ``optimizing_graph_pfedgraph``; the largest entry is
  ≥ 1/m, so something always survives).

  Note (the iPFL authors' version): their difference has no −0.9 snap (``cal_model_difference_pfedgraph``); it
  changes the graph only where two updates have cos > 0.9.

  Decision: inactive rows are the identity e_i (pFedGraph keeps an absent client's old row; the caller keeps
  what it wants).

  Args:
    flat: ``[C, P]`` the clients' flattened models after local training.
    flat0: ``[P]`` the initial model.
    n: ``[C]`` float data sizes N_j (the inactive ones are ignored).
    active: ``[C]`` bool.
    alpha: α > 0 (traced).

  Returns:
    ``[C, C]`` rows on the simplex of the active clients; identity rows for the inactive.
  """
  c = flat.shape[0]
  d = -_cosine(flat - flat0[None, :])
  d = jnp.where(d < -0.9, -1.0, d)
  n_active = jnp.where(active, n, 0.0)
  total = jnp.sum(n_active)
  p = jnp.where(total > 0, n_active / jnp.where(total > 0, total, 1.0), 0.0)
  pair = active[:, None] & active[None, :]
  x = simplex_projection(p[None, :] - d / (2.0 * alpha), mask=pair)
  m = jnp.sum(active)
  x = jnp.where(x < 1.0 / (m * 1e5), 0.0, x)
  x = _normalize_rows(x)
  return jnp.where(active[:, None], x, jnp.eye(c, dtype=x.dtype))


def pfedgraph_aggregate(flat: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
  """pFedGraph's aggregation (the released ``aggregation_by_graph``): the personalized models and the "cluster
  model vectors" of its local regularizer.

  models_i = Σ_j a_ij θ_j, cluster_i = Σ_j a_ij θ_j / ‖θ_j‖ (a zero model contributes 0 to the cluster vector).
  With the identity row of an inactive client, models_i = θ_i.

  Note (the iPFL authors' version): their regularizer is λ cos(models_i, θ) (``local_train_pfedgraph``), i.e.
  :func:`pfedgraph_penalty` with cluster = models_i / ‖models_i‖.

  Args:
    flat: ``[C, P]`` flattened models.
    a: ``[C, C]`` the graph (:func:`pfedgraph_graph`).

  Returns:
    ``(models, cluster)``, both ``[C, P]``.
  """
  models = jnp.matmul(a, flat, precision=_HI)
  cluster = jnp.matmul(a, _unit_rows(flat), precision=_HI)
  return models, cluster


def pfedgraph_penalty(theta_flat: jax.Array, cluster: jax.Array, lam) -> jax.Array:
  """λ ⟨cluster, θ⟩ / ‖θ‖, pFedGraph's local regularizer for ONE client (vmap it; flatten the pytree first).

  This is pFedGraph's released code (``pfedgraph_cosine.py``: ``loss2 = lam * dot(cluster_model, flatten_model) /
  norm(flatten_model)``, added to the cross-entropy and minimized), whose sign penalizes alignment with the
  cluster direction. Decision: kept as released, sign included (λ = 0.01 in the iPFL comparison, SPEC §5; the
  iPFL authors' version has the same sign). 0 at θ = 0, with a finite (zero) gradient there.

  Args:
    theta_flat: ``[P]`` the client's flattened trainable parameters.
    cluster: ``[P]`` its cluster model vector (:func:`pfedgraph_aggregate`).
    lam: λ (traced).

  Returns:
    scalar.
  """
  norm_sq = jnp.sum(theta_flat * theta_flat)
  pos = norm_sq > 0
  dot = jnp.dot(cluster, theta_flat, precision=_HI)
  return jnp.where(pos, lam * dot / jnp.sqrt(jnp.where(pos, norm_sq, 1.0)), 0.0)


# --- FedAMP (Huang et al., AAAI 2021) -------------------------------------------------------------------------

def fedamp_weights(flat: jax.Array, active: jax.Array, self_weight=0.3, sigma=10.0, drop=1e4) -> jax.Array:
  """FedAMP's message-passing weights ξ (Huang et al., AAAI 2021, HeurFedAMP: ξ_ii a hyperparameter, ξ_ij ∝
  exp(σ cos(w_i, w_j)) for j ≠ i), as the iPFL authors configure it (self weight 0.3, σ = 10; SPEC §5).

  ξ_ii = self_weight; for active j ≠ i, e_ij = exp(σ cos(θ_i, θ_j)), normalised over j ≠ i to sum 1; entries
  below 1 / (m · drop) are dropped (m = number of active clients) and the rest renormalised to sum
  (1 − self_weight). A client with no other active client gets e_i (weight 1 on itself); inactive rows are e_i.
  exp is taken after subtracting the row max of σ cos (the normalised weights do not change).

  Notes (the iPFL authors' ``calculate_graph_matrix``): (1) their cosine is of the updates θ_i − θ_0 from the
  initial model, not of the models — pass ``flat − θ_0`` to get it; (2) their drop tests the raw exp(10 cos)
  against 1 / (C · 1e4) (C all clients), which never fires for C ≥ 3 (exp(−10) ≈ 4.5e-5); the normalised test
  here drops only weights below 1e-4 / m.

  Args:
    flat: ``[C, P]`` the vectors whose cosines set the weights (the models; see the Notes).
    active: ``[C]`` bool.
    self_weight: ξ_ii (traced).
    sigma: σ, the attention sharpness (traced).
    drop: the drop factor (traced).

  Returns:
    ``[C, C]`` ξ, rows summing to 1.
  """
  c = flat.shape[0]
  eye = jnp.eye(c, dtype=bool)
  valid = active[:, None] & active[None, :] & ~eye
  logits = jnp.where(valid, sigma * _cosine(flat), -jnp.inf)
  top = jnp.max(logits, axis=1, keepdims=True)
  e = jnp.where(valid, jnp.exp(logits - jnp.where(jnp.isfinite(top), top, 0.0)), 0.0)
  w = _normalize_rows(e)
  m = jnp.sum(active)
  w = _normalize_rows(jnp.where(w < 1.0 / (m * drop), 0.0, w))
  has_other = jnp.sum(w, axis=1) > 0
  eye_f = eye.astype(flat.dtype)
  xi = jnp.where(eye, self_weight, (1.0 - self_weight) * w)
  return jnp.where((active & has_other)[:, None], xi, eye_f)


def fedamp_centers(flat: jax.Array, xi: jax.Array) -> jax.Array:
  """FedAMP's personalized cloud models u_i = Σ_j ξ_ij θ_j (Huang et al., the message-passing step with the
  weights of :func:`fedamp_weights`), ``[C, P]``; the clients' local prox centers (the iPFL authors'
  ``aggregation_fedamp``)."""
  return jnp.matmul(xi, flat, precision=_HI)


# --- CFL (Sattler, Müller and Samek, IEEE TNNLS 2021) --------------------------------------------------------

def complete_linkage_bipartition(dist: jax.Array, members: jax.Array) -> jax.Array:
  """Agglomerative clustering of the ``members`` with complete linkage, merged until 2 clusters remain (CFL's
  ``cluster_clients``: sklearn ``AgglomerativeClustering(linkage="complete")`` on a precomputed distance).

  The distance between two clusters is the largest pairwise distance (Lance–Williams: d(A ∪ B, K) = max(d(A, K),
  d(B, K)), exact). Each of the C − 2 fixed iterations of a ``lax.fori_loop`` merges the closest pair of alive
  clusters while more than 2 remain (a "done" test masks the rest). A cluster is named by its lowest-index member;
  ties go to the lowest (name, name) pair in lexicographic order. Like sklearn, only the upper triangle of
  ``dist`` is read (i < j).

  Args:
    dist: ``[C, C]`` pairwise distances (finite).
    members: ``[C]`` bool, the points to cluster.

  Returns:
    ``[C]`` bool: True for the members of the cluster holding the lowest-index member, False for the other
    cluster and for non-members. Fewer than 2 members: ``members`` unchanged.
  """
  c = dist.shape[0]
  idx = jnp.arange(c)
  upper = idx[:, None] < idx[None, :]
  d0 = jnp.where(upper, dist, dist.T)

  def merge(_, carry):
    d, label, alive = carry
    pair = alive[:, None] & alive[None, :] & upper
    best = jnp.min(jnp.where(pair, d, jnp.inf))
    k = jnp.argmax((pair & (d <= best)).ravel())  # the first closest pair in row-major order: a < b
    a, b = k // c, k % c
    row = jnp.maximum(d[a], d[b])
    go = jnp.sum(alive) > 2
    d = jnp.where(go, d.at[a, :].set(row).at[:, a].set(row), d)
    label = jnp.where(go & (label == b), a, label)
    alive = jnp.where(go, alive.at[b].set(False), alive)
    return d, label, alive

  _, label, _ = jax.lax.fori_loop(0, max(c - 2, 0), merge, (d0, idx, members))
  first = jnp.argmax(members)
  return members & (label == label[first])


def cfl_split(updates: jax.Array, cluster: jax.Array, active: jax.Array, eps1=2.0, eps2=2.5,
              min_size=3) -> jax.Array:
  """One round of CFL's cluster splitting (Sattler et al., IEEE TNNLS 2021, Algorithm 1 and its mean/max
  update-norm criteria; ε1 = 2.0, ε2 = 2.5 in the iPFL comparison, SPEC §5), on the updates Δ_i = θ_i after
  training − θ_i before.

  For every cluster id k in 0..C−1, with members = (cluster == k) & active: split when |members| ≥ min_size
  (CFL's "more than 2 members"), ‖mean_members Δ‖ < ε1 (unweighted mean, as CFL's ``compute_mean_update_norm``)
  and max_members ‖Δ_i‖ > ε2. A split bipartitions the members with :func:`complete_linkage_bipartition` on
  dist_ij = −cos(Δ_i, Δ_j) (CFL clusters −similarity); the side holding the lowest-index member keeps id k, the
  other side gets a fresh id. Splits are evaluated on the assignment at the start of the call (clusters created
  here are not split again in this call); inactive clients keep their id.

  Fresh ids. Call an assignment canonical when every used id k is the lowest index of the clients labelled k
  (e.g. all zeros, CFL's start, or ``arange(C)``). Then the fresh id is the lowest index j of the split-off side,
  and j is unused: were id j in use, client j would carry id j by canonicity, but it carries k ≠ j (j is not
  k's lowest active member, and k is the lowest of all clients labelled k). Distinct splits have disjoint sides,
  hence distinct fresh ids, and the result is canonical again (k keeps its lowest client, or that client is
  inactive and keeps k; j is the lowest of its side). For any other input, a j already in use is replaced by the
  smallest unused id in 0..C−1 (one exists: a splittable cluster has ≥ 2 clients, so ≤ C − 1 ids are used),
  which is why the ids are assigned in a ``lax.fori_loop`` over k.

  Decision (cost): the statistics and the C candidate bipartitions are computed for all k at once (a vmap over
  the C member masks, ``[C, C, C]`` work per merge step) rather than one cluster per loop iteration: under the
  caller's vmap over seeds a per-k ``lax.cond`` would run both branches anyway. Fine for the C ≤ 100s of the
  comparisons.

  Args:
    updates: ``[C, P]`` Δ.
    cluster: ``[C]`` int32 ids in 0..C−1.
    active: ``[C]`` bool.
    eps1, eps2: ε1, ε2 (traced).
    min_size: the smallest splittable cluster (traced).

  Returns:
    ``[C]`` int32 the new ids.
  """
  c = updates.shape[0]
  ids = jnp.arange(c, dtype=cluster.dtype)
  memb = (cluster[None, :] == ids[:, None]) & active[None, :]  # [k, i]
  size = jnp.sum(memb, axis=1)
  mean = jnp.matmul(memb.astype(updates.dtype), updates, precision=_HI) / jnp.maximum(size, 1)[:, None]
  norms = jnp.linalg.norm(updates, axis=1)
  max_norm = jnp.max(jnp.where(memb, norms[None, :], -jnp.inf), axis=1)
  split = (size >= min_size) & (jnp.linalg.norm(mean, axis=1) < eps1) & (max_norm > eps2)
  keep = jax.vmap(complete_linkage_bipartition, in_axes=(None, 0))(-_cosine(updates), memb)
  leave = memb & ~keep & split[:, None]  # [k, i]: the split-off side of cluster k
  used0 = jnp.any(cluster[:, None] == ids[None, :], axis=0)

  def assign(k, carry):
    new, used = carry
    side = leave[k]
    j = jnp.argmax(side).astype(cluster.dtype)
    fresh = jnp.where(used[j], jnp.argmin(used).astype(cluster.dtype), j)
    new = jnp.where(side, fresh, new)
    used = used.at[fresh].set(used[fresh] | jnp.any(side))
    return new, used

  new, _ = jax.lax.fori_loop(0, c, assign, (cluster, used0))
  return new


def cfl_aggregate(start: jax.Array, updates: jax.Array, cluster: jax.Array, active: jax.Array,
                  n: jax.Array) -> jax.Array:
  """CFL's cluster-wise aggregation (Sattler et al., Algorithm 1; ``aggregate_clusterwise``): every active client
  gets θ_i = start_i + the N-weighted mean of the updates of the active members of its cluster.

  Decision: N-weighted, as this module's caller specified. Both released codes weight equally: Sattler's
  ``reduce_add_average`` and the iPFL authors' copy of it take ``torch.mean`` of the members' updates (no data
  sizes). Pass ``n = ones`` to reproduce them. Inactive rows return start_i + updates_i as given (the caller
  masks).

  Args:
    start: ``[C, P]`` the models before local training.
    updates: ``[C, P]`` Δ.
    cluster: ``[C]`` int ids (:func:`cfl_split`).
    active: ``[C]`` bool.
    n: ``[C]`` float data sizes (> 0).

  Returns:
    ``[C, P]`` the new models.
  """
  same = (cluster[:, None] == cluster[None, :]) & active[None, :]
  w = _normalize_rows(jnp.where(same, n[None, :], 0.0))
  mean = jnp.matmul(w, updates, precision=_HI)
  return jnp.where(active[:, None], start + mean, start + updates)


# --- FedFomo (Zhang et al., ICLR 2021) -------------------------------------------------------------------------

def fedfomo_sample(key: jax.Array, affinity: jax.Array, m: int, active: jax.Array) -> jax.Array:
  """FedFomo's download choice (Zhang et al., ICLR 2021, affinity-based sampling, without FedFomo's ε-greedy
  exploration, as the iPFL authors' version): each client i draws min(m, #valid) distinct valid j with
  probability ∝ affinity_ij, without replacement (M = 6 in the iPFL comparison; SPEC §5).

  Gumbel top-k (Plackett–Luce; Kool et al., ICML 2019): the top m of log affinity_ij + Gumbel noise among the
  valid j (j ≠ i, j active, affinity_ij > 0; the others score −∞). This is the law of the iPFL authors' loop,
  which redraws ∝ affinity with replacement until m distinct clients are drawn.

  Note (the iPFL authors' ``update_graph_fedfomo``): their candidates include client i itself (affinity starts
  at ones, self included) and m = min(M, #active, self included); here self is excluded, as the caller
  specified.

  Args:
    key: PRNG key.
    affinity: ``[C, C]`` affinity_ij ≥ 0 (FedFomo's P, accumulated weights).
    m: how many to draw per client (static).
    active: ``[C]`` bool.

  Returns:
    ``[C, C]`` bool chosen; inactive rows all False.
  """
  c = affinity.shape[0]
  k = min(m, c)
  if k <= 0:
    return jnp.zeros((c, c), bool)
  valid = active[:, None] & active[None, :] & ~jnp.eye(c, dtype=bool) & (affinity > 0)
  g = jax.random.gumbel(key, (c, c), dtype=affinity.dtype)
  scores = jnp.where(valid, jnp.log(jnp.where(valid, affinity, 1.0)) + g, -jnp.inf)
  top, order = jax.lax.top_k(scores, k)
  picked = (order[:, :, None] == jnp.arange(c)[None, None, :]) & (top > -jnp.inf)[:, :, None]
  return jnp.any(picked, axis=1)


def fedfomo_weights(own_loss: jax.Array, cand_loss: jax.Array, flat: jax.Array, chosen: jax.Array) -> jax.Array:
  """FedFomo's first-order weights (Zhang et al., ICLR 2021): w_ij = max(L_i(θ_i) − L_i(θ_j), 0) / ‖θ_j − θ_i‖ for
  chosen j, 0 otherwise, then each row normalised by its sum where that is > 0 (rows with no positive weight stay
  all 0: the client keeps its own model).

  A zero distance (θ_j = θ_i) gets w = 0. The distances are exact differences, one row of C at a time
  (``lax.map``; ``[C, P]`` memory), not the Gram expansion, which cancels catastrophically for nearby models.

  Note (the iPFL authors' ``aggregation_fedfomo``): their L_i(θ_i) is the loss of the model at the start of the
  round (before local training), their distance is ‖θ_i − θ_j + 1e-6‖, and a zero row reverts the client to the
  start-of-round model; the caller picks own_loss and what a zero row means.

  Args:
    own_loss: ``[C]`` L_i(θ_i), client i's loss of its reference model on its own training data.
    cand_loss: ``[C, C]`` L_i(θ_j), client i's loss of model j on its own training data.
    flat: ``[C, P]`` flattened models (θ_i the reference of row i).
    chosen: ``[C, C]`` bool (:func:`fedfomo_sample`).

  Returns:
    ``[C, C]`` w, rows summing to 1 or all 0.
  """
  dist = jax.lax.map(lambda x: jnp.linalg.norm(flat - x[None, :], axis=1), flat)  # [i, j] = ‖θ_j − θ_i‖
  ok = chosen & (dist > 0)
  gain = jnp.maximum(own_loss[:, None] - cand_loss, 0.0)
  w = jnp.where(ok, gain / jnp.where(ok, dist, 1.0), 0.0)
  return _normalize_rows(w)


def fedfomo_update(flat: jax.Array, w: jax.Array) -> jax.Array:
  """FedFomo's update θ_i ← θ_i + Σ_j w_ij (θ_j − θ_i) (Zhang et al., ICLR 2021), ``[C, P]``, written as
  (1 − Σ_j w_ij) θ_i + Σ_j w_ij θ_j (exactly θ_i for a zero row, exactly Σ_j w_ij θ_j when the row sums to 1)."""
  total = jnp.sum(w, axis=1, keepdims=True)
  return (1.0 - total) * flat + jnp.matmul(w, flat, precision=_HI)


def fedfomo_step(start: jax.Array, flat: jax.Array, start_loss: jax.Array, cand_loss: jax.Array,
                 chosen: jax.Array) -> tuple[jax.Array, jax.Array]:
  """FedFomo's round as the iPFL authors' comparison runs it (issue 13: "weights (L_start − L_j)⁺ / ‖θ_i − θ_j‖
  on the client's own training data, revert when none helps"): client i scores its chosen neighbours and its own
  trained model j = i against its start-of-round model, w_ij = (L_i(start_i) − L_i(θ_j))⁺ / ‖θ_j − start_i‖,
  normalised per row, and moves to start_i + Σ_j w_ij (θ_j − start_i); a row without a positive weight reverts to
  start_i (Zhang et al., ICLR 2021, eq. 6; the authors' ``aggregation_fedfomo``). Decision: the distance is exact
  (no +1e-6 of their code; a zero distance gets w = 0).

  Args:
    start: ``[C, P]`` the round's start models; flat: ``[C, P]`` the uploaded (trained) models.
    start_loss: ``[C]`` L_i(start_i); cand_loss: ``[C, C]`` L_i(θ_j) on client i's rows.
    chosen: ``[C, C]`` bool, the sampled neighbours (:func:`fedfomo_sample`); the diagonal is added.

  Returns:
    ``(w [C, C], new [C, P])``.
  """
  dist = jax.lax.map(lambda s: jnp.linalg.norm(flat - s[None, :], axis=1), start)  # [i, j] = ‖θ_j − start_i‖
  ok = (chosen | jnp.eye(chosen.shape[0], dtype=bool)) & (dist > 0)
  gain = jnp.maximum(start_loss[:, None] - cand_loss, 0.0)
  w = _normalize_rows(jnp.where(ok, gain / jnp.where(ok, dist, 1.0), 0.0))
  total = jnp.sum(w, axis=1, keepdims=True)
  return w, (1.0 - total) * start + jnp.matmul(w, flat, precision=_HI)
