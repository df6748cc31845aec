"""ε-greedy UCB ranking and the propose–reject protocol with the rest action (paper 000 §4.3, Alg. 1)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def ranked_candidates(key: jax.Array, ucb_row: jax.Array, cand_row: jax.Array, epsilon) -> jax.Array:
  """Center i's proposal order: its candidates by descending UCB, then everyone else.

  With probability ε the top-ranked candidate swaps places with a uniformly
  random candidate of C_i (Alg. 1 line 12; SPEC §3.2 step 4).

  Returns:
    ``[C]`` int32, a permutation of all centers (non-candidates last; the
    proposer never accepts them).
  """
  k_swap, k_pick = jax.random.split(key)
  order = jnp.argsort(jnp.where(cand_row, -ucb_row, jnp.inf)).astype(jnp.int32)
  num_cand = jnp.sum(cand_row)
  pos = jax.random.randint(k_pick, (), 0, jnp.maximum(num_cand, 1))
  swap = (jax.random.uniform(k_swap) < epsilon) & (num_cand > 1)
  top, other = order[0], order[pos]
  swapped = order.at[0].set(other).at[pos].set(top)
  return jnp.where(swap, swapped, order)


def propose_reject(key: jax.Array, ucb: jax.Array, cand: jax.Array, kappa, tau_acc, epsilon) -> jax.Array:
  """One round's partnerships (Alg. 1 lines 9–21; SPEC §3.2 step 5).

  Centers propose in a random order drawn each round. Proposer i walks its
  ranked list and peer j accepts iff j's own UCB on i is ≥ τ_acc and
  |P_j| < κ; an acceptance adds i to P_j and j to P_i. i stops at κ partners
  (counting partners it gained as a receiver) or at the end of its list. A
  center left with no partner rests (P_i = ∅, Lemma 1).

  Within one proposer's walk the acceptance test of each j depends only on
  state that the walk itself does not change for other peers (|P_j| and the
  UCBs), so the walk is one vector step: the first ``κ − |P_i|`` acceptable
  entries of i's list. The proposers still go one after another
  (``lax.fori_loop``), as the protocol is sequential.

  Args:
    key: randomness for the proposer order and the ε-greedy swaps.
    ucb: ``[C, C]``, row i = i's UCB scores of each peer.
    cand: ``[C, C]`` bool candidate sets C_i (no diagonal).
    kappa: the most partners per center (traced; ≤ C − 1).
    tau_acc: acceptance threshold τ_acc.
    epsilon: ε-greedy swap probability.

  Returns:
    ``[C, C]`` bool symmetric adjacency without self-loops.
  """
  c = ucb.shape[0]
  k_order, k_rank = jax.random.split(key)
  ranked = jax.vmap(ranked_candidates, in_axes=(0, 0, 0, None))(
      jax.random.split(k_rank, c), ucb, cand, epsilon)  # [C, C]
  proposers = jax.random.permutation(k_order, c)
  accepts = ucb.T >= tau_acc  # accepts[i, j]: j's UCB on i clears τ_acc

  def propose(p, carry):
    adj, deg = carry
    i = proposers[p]
    order = ranked[i]
    ok = cand[i, order] & accepts[i, order] & (deg[order] < kappa) & ~adj[i, order]
    room = jnp.maximum(kappa - deg[i], 0)
    take = ok & (jnp.cumsum(ok) <= room)
    sel = jnp.zeros((c,), bool).at[order].set(take)
    adj = adj.at[i].set(adj[i] | sel)
    adj = adj.at[:, i].set(adj[:, i] | sel)
    deg = deg + sel.astype(deg.dtype)
    deg = deg.at[i].add(jnp.sum(sel).astype(deg.dtype))
    return adj, deg

  adj, _ = jax.lax.fori_loop(0, c, propose, (jnp.zeros((c, c), bool), jnp.zeros((c,), jnp.int32)))
  return adj


def partner_slots(adj: jax.Array, kappa_max: int) -> tuple:
  """P_i as ``kappa_max`` slots per center: ``(index [C, κ] int32, valid [C, κ] bool)``, partners first."""
  c = adj.shape[0]
  order = jnp.argsort(~adj, axis=1, stable=True)[:, :kappa_max].astype(jnp.int32)
  valid = jnp.take_along_axis(adj, order, axis=1)
  return jnp.where(valid, order, jnp.arange(c, dtype=jnp.int32)[:, None]), valid
