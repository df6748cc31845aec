"""ε-greedy UCB ranking and the propose–reject protocol with the rest action (paper 000 §4.3, Alg. 1).

Everything here works on candidate pools (:mod:`.pool`): row i of a ``[C, M]``
array is about the peers ``pool[i]``, and partnerships are ``κ_max`` slots per
center. No ``[C, C]`` array is built, so a round costs O(C·M) memory.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.abps.pool import CandidatePool


@struct.dataclass
class Partners:
  """P_i as ``κ_max`` slots per center, partners in ascending index order, empty slots after."""

  index: jax.Array  # [C, κ] int32 partner of each slot; the center itself in empty slots
  pool_slot: jax.Array  # [C, κ] int32 the partner's position in the center's own pool; −1 if outside it or empty
  valid: jax.Array  # [C, κ] bool the slot holds a partner
  degree: jax.Array  # [C] int32 |P_i|


def ranked_candidates(key: jax.Array, ucb_row: jax.Array, cand_row: jax.Array, epsilon) -> jax.Array:
  """Center i's proposal order over its pool: its candidates by descending UCB, then the rest.

  With probability ε the top-ranked candidate swaps places with a uniformly
  random candidate of C_i (Alg. 1 line 12; SPEC §3.2 step 4). UCB ties go to
  the earlier pool slot (the lower peer index: pools are sorted).

  Args:
    key: randomness for the swap.
    ucb_row: ``[M]`` i's UCB on each pool member.
    cand_row: ``[M]`` bool, pool member ∈ C_i.
    epsilon: ε-greedy swap probability.

  Returns:
    ``[M]`` int32, a permutation of the pool slots (non-candidates last; the
    proposer never proposes to them).
  """
  k_swap, k_pick = jax.random.split(key)
  order = jnp.argsort(jnp.where(cand_row, -ucb_row, jnp.inf)).astype(jnp.int32)
  num_cand = jnp.sum(cand_row)
  pos = jax.random.randint(k_pick, (), 0, jnp.maximum(num_cand, 1))
  swap = (jax.random.uniform(k_swap) < epsilon) & (num_cand > 1)
  top, other = order[0], order[pos]
  swapped = order.at[0].set(other).at[pos].set(top)
  return jnp.where(swap, swapped, order)


def receiver_acceptance(ucb: jax.Array, pool: CandidatePool, tau_acc, ucb_prior) -> jax.Array:
  """accepts[i, m]: would peer j = pool[i, m] accept i, i.e. is j's own UCB on i ≥ τ_acc? ``[C, M]``.

  Decision (issue 4, pools of M < C − 1 peers): a center keeps beliefs only
  about its own pool. If i is not in j's pool, j's UCB on i is that of an
  unobserved peer under the prior, ``ucb_prior`` = UCB(α0, β0, n = 0). With
  M = C − 1 every center is in every other's pool and nothing changes.
  """
  rev = pool.rev
  on_i = jnp.where(rev >= 0, ucb[pool.index, jnp.maximum(rev, 0)], ucb_prior)
  return on_i >= tau_acc


def match_proposals(proposers: jax.Array, ranked: jax.Array, pool: CandidatePool, accepts: jax.Array,
                    kappa, kappa_max: int) -> Partners:
  """The sequential propose–reject walk (Alg. 1 lines 13–21; SPEC §3.2 step 5), on pools.

  Proposers go one after another (``lax.fori_loop``), as the protocol is
  sequential. Proposer i walks its ranked pool; peer j accepts iff
  ``accepts[i, slot]`` and |P_j| < κ; an acceptance adds i to P_j and j to P_i.
  i stops at κ partners (counting partners it gained as a receiver) or at the
  end of its list. Within one walk the acceptance of each j depends only on
  state the walk does not change for other peers (|P_j|, the UCBs), so the walk
  is one vector step over the M slots: the first ``κ − |P_i|`` acceptable ones.

  Args:
    proposers: ``[C]`` the proposal order (a permutation of the centers).
    ranked: ``[C, M]`` each center's slot order (:func:`ranked_candidates`).
    pool: the candidate pools; only ``valid`` members are proposed to.
    accepts: ``[C, M]`` :func:`receiver_acceptance`.
    kappa: the most partners per center (traced; ≤ ``kappa_max``).
    kappa_max: partner slots per center (static).

  Returns:
    :class:`Partners`, slots sorted by partner index.
  """
  c, m = pool.index.shape
  k = kappa_max
  slots = jnp.arange(k, dtype=jnp.int32)

  def propose(p, carry):
    partner, slot, deg = carry  # [C, κ] (C = empty), [C, κ], [C]
    i = proposers[p]
    order = ranked[i]  # [M] slot order
    peers = pool.index[i, order]  # [M]
    already = jnp.any(peers[:, None] == partner[i][None, :], axis=1)
    ok = pool.valid[i, order] & accepts[i, order] & (deg[peers] < kappa) & ~already
    room = jnp.maximum(kappa - deg[i], 0)
    rank = jnp.cumsum(ok) - 1
    take = ok & (rank < room)
    # The (at most κ) accepted peers, in walk order: new_peer[s], its slot in i's pool, i's slot in its pool.
    at = jnp.where(take, rank, k)
    new_peer = jnp.full((k,), c, jnp.int32).at[at].set(peers, mode="drop")
    new_slot = jnp.zeros((k,), jnp.int32).at[at].set(order, mode="drop")
    new_rev = jnp.zeros((k,), jnp.int32).at[at].set(pool.rev[i, order], mode="drop")
    n_new = jnp.sum(take).astype(jnp.int32)
    used = slots < n_new
    # Proposer side: slots deg[i] .. deg[i] + n_new − 1.
    col = jnp.where(used, deg[i] + slots, k)
    partner = partner.at[i, col].set(new_peer, mode="drop")
    slot = slot.at[i, col].set(new_slot, mode="drop")
    # Receiver side: each accepted peer j gets i in its next free slot.
    j = jnp.where(used, new_peer, 0)
    col_j = jnp.where(used, deg[j], k)
    partner = partner.at[j, col_j].set(i, mode="drop")
    slot = slot.at[j, col_j].set(new_rev, mode="drop")
    deg = deg.at[j].add(used.astype(jnp.int32)).at[i].add(n_new)
    return partner, slot, deg

  init = (jnp.full((c, k), c, jnp.int32), jnp.full((c, k), -1, jnp.int32), jnp.zeros((c,), jnp.int32))
  partner, slot, deg = jax.lax.fori_loop(0, c, propose, init)
  order = jnp.argsort(partner, axis=1)  # partners ascending, empty slots (= C) after
  partner = jnp.take_along_axis(partner, order, axis=1)
  slot = jnp.take_along_axis(slot, order, axis=1)
  valid = slots[None, :] < deg[:, None]
  own = jnp.arange(c, dtype=jnp.int32)[:, None]
  return Partners(index=jnp.where(valid, partner, own), pool_slot=jnp.where(valid, slot, -1), valid=valid,
                  degree=deg)


def propose_reject(key: jax.Array, ucb: jax.Array, pool: CandidatePool, kappa, tau_acc, epsilon, ucb_prior,
                   kappa_max: int) -> Partners:
  """One round's partnerships (Alg. 1 lines 9–21; SPEC §3.2 steps 4–5).

  Centers propose in a random order drawn each round, each down its ε-greedy
  UCB ranking of its candidates (:func:`ranked_candidates`); the walk is
  :func:`match_proposals`. A center left with no partner rests (P_i = ∅, Lemma 1).

  Args:
    key: randomness for the proposer order and the ε-greedy swaps.
    ucb: ``[C, M]``, row i = i's UCB scores of its pool members.
    pool: the candidate pools (``valid`` = C_i).
    kappa: the most partners per center (traced; ≤ ``kappa_max``).
    tau_acc: acceptance threshold τ_acc.
    epsilon: ε-greedy swap probability.
    ucb_prior: UCB of an unobserved peer (a receiver's score of a proposer outside its pool).
    kappa_max: partner slots per center (static).

  Returns:
    :class:`Partners`: symmetric, no self-partner, |P_i| ≤ κ.
  """
  c = ucb.shape[0]
  k_order, k_rank = jax.random.split(key)
  ranked = jax.vmap(ranked_candidates, in_axes=(0, 0, 0, None))(
      jax.random.split(k_rank, c), ucb, pool.valid, epsilon)  # [C, M]
  proposers = jax.random.permutation(k_order, c)
  accepts = receiver_acceptance(ucb, pool, tau_acc, ucb_prior)
  return match_proposals(proposers, ranked, pool, accepts, kappa, kappa_max)
