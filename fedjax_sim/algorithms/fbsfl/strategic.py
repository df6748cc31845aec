"""The strategic layer alone: who participates, and at what price, when the selection does not read the model.

Under uniform selection nothing that decides participation reads the model: the flat-fee baselines FedAvg,
FedProx, q-FFL and Ditto (uniform inclusion with E|I_t| = K, the flat fee r̄ = E_μ0[κ] = 0.52, SPEC §4.3) and
FBS-FL with its leader replaced by π = K/N (``fbsfl_uniform``: eq. 10's offers from the beliefs and the
participation EMA, paper 002 §3.2–3.7). Their y_t — and with it Jain, KL, the Gini coefficient, C_tot and A(T) —
is a function of the seed's types κ, the inclusion draws and the followers alone. This module runs that layer
without training, with the same steps (:mod:`~fedjax_sim.algorithms.fbsfl.layer`) and the same key streams as the
compiled rounds (:mod:`~fedjax_sim.algorithms.fbsfl.algorithm`, :mod:`~fedjax_sim.algorithms.fbsfl.baselines`), so
a seed gives the engine's participation bit for bit (tests/test_fbsfl_baselines.py and tests/test_fbsfl_round.py; the definitions
in tests/test_fbsfl_strategic.py) at a cost of microseconds per round: thousands of seeds show what the five of a
Table 2 run cannot (``benchmarks/fbsfl_participation.py``, docs/FBSFL.md §2c).

With PPO selection (``fbsfl``) or a loss-driven rule (Oort, Power-of-Choice) participation does depend on the
model, through the leader's reward or the losses, and this module does not apply.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.fbsfl import beliefs as B
from fedjax_sim.algorithms.fbsfl import economics as E
from fedjax_sim.algorithms.fbsfl import followers as F
from fedjax_sim.algorithms.fbsfl import layer as L
from fedjax_sim.algorithms.fbsfl.algorithm import round_keys
from fedjax_sim.algorithms.fbsfl.baselines import BaselineKeys
from fedjax_sim.algorithms.fbsfl.layer import FLAT_FEE
from fedjax_sim.algorithms.fbsfl.selection import uniform_inclusion

PRICINGS = ("flat", "fbsfl")
"""``flat``: the baselines' fee r̄ behind uniform inclusion (their ``select`` and ``response`` key streams);
``fbsfl``: eq. 10's offers with π = K/N (``fbsfl_uniform``'s ``inclusion`` and ``response`` streams)."""


@struct.dataclass
class Participation:
  """``[R, N]`` per round and client: inclusion z_t, response a_t (of the included), participation y_t = z_t a_t,
  offer r_t, its equity-bonus part (0 under the flat fee) and the cost proxy ĉ the offer was built on (the flat fee
  r̄ under ``flat``); ``kappa [N]``, the private types."""

  z: jax.Array
  accept: jax.Array
  y: jax.Array
  r: jax.Array
  bonus: jax.Array
  cost_proxy: jax.Array
  kappa: jax.Array


def simulate_layer(init_key: jax.Array, keys: jax.Array, h, *, num_clients: int, k: int, pricing: str = "flat",
                   follower: str = "exp3", rounding: str = "independent",
                   freeze_beliefs: bool = False) -> Participation:
  """R rounds of the strategic layer from the round's own init and round keys.

  Args:
    init_key: the algorithm's init key (κ from ``split(init_key, 3)[1]``, as both families draw it).
    keys: ``[R]`` the rounds' keys (``split`` into :class:`~fedjax_sim.algorithms.fbsfl.algorithm.RoundKeys` or
      :class:`~fedjax_sim.algorithms.fbsfl.baselines.BaselineKeys`, by ``pricing``).
    h: the ``[fbsfl]`` traced numbers (:class:`~fedjax_sim.algorithms.fbsfl.algorithm.FBSFLHyper`; read: ρ, ε,
      b_0, B_max, δ, λ_obs and EXP3's γ, η).
    num_clients: N.
    k: K, the expected number included.
    pricing: one of :data:`PRICINGS`.
    follower: ``exp3``, ``br`` or ``logit``.
    rounding: ``independent`` or ``dependent`` inclusion.
    freeze_beliefs: keep μ at μ_0 (``fbsfl_frozen``; ``fbsfl`` pricing only).

  Returns:
    :class:`Participation` with ``[R, N]`` fields.
  """
  if pricing not in PRICINGS:
    raise ValueError(f"pricing must be one of {', '.join(PRICINGS)}, got {pricing!r}")
  n = num_clients
  kappa = B.sample_types(jax.random.split(init_key, 3)[1], n)
  beliefs = B.belief_init(n)
  carry = (F.exp3_init(n), beliefs, E.participation_init(n), B.posterior_mean_threshold(beliefs),
           jnp.ones((), jnp.int32))

  def round_fn(carry, key):
    followers, beliefs, p, cost_proxy, cost_rounds = carry
    if pricing == "flat":  # baselines.py round_fn, steps 1–2
      keys = BaselineKeys(*jax.random.split(key, 5))
      z, _ = uniform_inclusion(keys.select, n, k, rounding)
      r = jnp.full((n,), FLAT_FEE, jnp.float32)
      bonus = jnp.zeros((n,), jnp.float32)
      priced_on = r
    else:  # algorithm.py round_fn, steps 2–4 with selection = "uniform"
      keys = round_keys(key)
      pi = jnp.full((n,), k / n, jnp.float32)
      r, bonus, _ = L.eq10_offers(pi, p, cost_proxy, h)
      priced_on = cost_proxy  # ĉ_t of this round's offer, before step 7 updates it
      z = L.draw_inclusion(rounding, keys.inclusion, pi)
    accept, y, followers = L.answer(follower, keys.response, r, z, kappa, followers, h)
    if pricing == "fbsfl":  # step 7: p_t, μ_t and ĉ_t (the flat fee reads none of them)
      p, beliefs, _, cost_proxy, cost_rounds = L.learn(p, beliefs, cost_proxy, cost_rounds, r=r, z=z, accept=accept,
                                                       y=y, h=h, freeze_beliefs=freeze_beliefs)
    out = (z, accept & z, y, r, bonus, priced_on)
    return (followers, beliefs, p, cost_proxy, cost_rounds), out

  _, (z, accept, y, r, bonus, cost_proxy) = jax.lax.scan(round_fn, carry, keys)
  return Participation(z=z, accept=accept, y=y, r=r, bonus=bonus, cost_proxy=cost_proxy, kappa=kappa)


def simulate_seed(key: jax.Array, rounds: int, h, **kwargs) -> Participation:
  """:func:`simulate_layer` from a run's seed key, split as the engine splits it (``k_init, k_rounds = split(key)``,
  the rounds' keys ``split(k_rounds, R)``: fedjax_sim/engine/simulate.py ``start``)."""
  k_init, k_rounds = jax.random.split(key)
  return simulate_layer(k_init, jax.random.split(k_rounds, rounds), h, **kwargs)
