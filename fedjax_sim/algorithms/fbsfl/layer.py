"""The strategic layer's steps, shared by every round that runs paper 002's game (SPEC §4.2 steps 3–5 and 7).

FBS-FL's round (:mod:`.algorithm`), the baselines' rounds behind the flat fee (:mod:`.baselines`) and the layer
without training (:mod:`.strategic`) call these same functions, so the three cannot drift apart: what they share
is written once here, and the bit-for-bit tests of :mod:`.strategic` against the engine check the key streams.

* :func:`draw_inclusion` — z_t: independent Bernoulli(π) or dependent rounding (eq. 4; SPEC §4.2 step 4);
* :func:`eq10_offers` — the offers r_t and their equity-bonus part (eq. 10; SPEC §4.2 step 3);
* :func:`answer` — the included clients' responses, y = z·a (eq. 5), and EXP3's weight update (Alg. 2);
* :func:`learn` — p_t (eq. 7), the beliefs μ_t (eq. 18; included clients only) and the cost proxy ĉ (SPEC §4.2
  step 7).

Each reads its numbers from the ``[fbsfl]`` traced hyperparameters ``h``
(:class:`~fedjax_sim.algorithms.fbsfl.algorithm.FBSFLHyper`, or the baselines' copy of the same fields).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from fedjax_sim.algorithms.fbsfl import beliefs as B
from fedjax_sim.algorithms.fbsfl import economics as E
from fedjax_sim.algorithms.fbsfl import followers as F
from fedjax_sim.algorithms.fbsfl import inclusion as I

KAPPA_MAX = max(B.TYPE_GRID)
"""κ^(M), the largest type (1.0): the top of the cost proxy's range and EXP3's utility rescaling (Alg. 2 line 12)."""

FLAT_FEE = float(np.mean(B.TYPE_GRID))
"""r̄ = E_{μ0}[κ] = 0.52, the baselines' flat fee (issue 12 item 4: the prior mean of the types)."""


def draw_inclusion(rounding: str, key: jax.Array, pi: jax.Array) -> jax.Array:
  """z_t [N] bool from the marginals π: ``independent`` Bernoulli(π_i) draws or ``dependent`` rounding (paper 002
  §3.1, eq. 4; :mod:`.inclusion`)."""
  include = I.dependent_rounding if rounding == "dependent" else I.independent_inclusion
  return include(key, pi)


class Offer(NamedTuple):
  """Round t's offers: ``r [N]``, their equity-bonus part ``bonus [N]`` (eq. 10's last term) and p̃_{t−1} [N]."""

  r: jax.Array
  bonus: jax.Array
  p_tilde: jax.Array


def eq10_offers(pi: jax.Array, p: jax.Array, cost_proxy: jax.Array, h) -> Offer:
  """r_i = ĉ_i (1 + δ π_i) + b_0 min(1/(N p̃_i), B_max) with p̃ the smoothed EMA p_{t−1} (paper 002 eq. 10, its
  bonus on N·p̃ as SPEC §4.2 step 3 decides, :func:`~.economics.offers`; ê = 0: no energy split is configured).
  Reads h.eps, h.delta, h.b0, h.b_max."""
  p_tilde = E.smoothed_participation(p, h.eps)
  r = E.offers(pi, cost_proxy, p_tilde, delta=h.delta, b0=h.b0, b_max=h.b_max)
  return Offer(r=r, bonus=E.equity_bonus(p_tilde, h.b0, h.b_max), p_tilde=p_tilde)


class Answers(NamedTuple):
  """The followers' side of round t: ``accept [N]`` (every client's drawn answer; only the included ones' count),
  ``y = z & accept [N]`` (eq. 5) and the followers' state after EXP3's update (unchanged for BR and logit)."""

  accept: jax.Array
  y: jax.Array
  followers: F.Exp3State


def answer(follower: str, key: jax.Array, r: jax.Array, z: jax.Array, kappa: jax.Array, followers: F.Exp3State,
           h) -> Answers:
  """Step 5: every client answers its offer (best response, logit with λ_obs, or EXP3 with γ: paper 002 eqs. 15,
  17, Alg. 2), y = z·a (eq. 5), and EXP3 learns from the included clients' rewards rescaled to [0, 1] by
  r^p_max = the offer cap at κ^(M) (Alg. 2 lines 10–14; :func:`~.followers.exp3_reward`). EXP3's update reads
  only this round's answer and offer, so it may run before local training (the algorithm's step 7 in SPEC §4.2):
  the results are the same. Reads h.lam_obs, h.exp3_gamma, h.exp3_eta, h.delta, h.b0, h.b_max."""
  accept, prob = F.respond(follower, key, r, kappa, followers, h.lam_obs, h.exp3_gamma)
  if follower == "exp3":
    r_max = E.offer_cap(KAPPA_MAX, delta=h.delta, b0=h.b0, b_max=h.b_max)
    u = F.exp3_reward(accept, r, kappa, r_max, KAPPA_MAX)
    followers = F.exp3_update(followers, accept, prob, u, z, h.exp3_eta)
  return Answers(accept=accept, y=z & accept, followers=followers)


class Learned(NamedTuple):
  """What the leader knows after round t (step 7): ``p [N]`` (p_t), ``beliefs`` (μ_t), ``posterior [N]``
  (E_{μ_t}[κ]), ``cost_proxy [N]`` (ĉ for round t+1) and ``cost_rounds []`` (how many posterior means it
  averages)."""

  p: jax.Array
  beliefs: B.Beliefs
  posterior: jax.Array
  cost_proxy: jax.Array
  cost_rounds: jax.Array


def learn(p: jax.Array, beliefs: B.Beliefs, cost_proxy: jax.Array, cost_rounds: jax.Array, *, r: jax.Array,
          z: jax.Array, accept: jax.Array, y: jax.Array, h, freeze_beliefs: bool = False) -> Learned:
  """Step 7: p_t = (1 − ρ) p_{t−1} + ρ y_t (eq. 7), Bayes' rule on the included clients' answers
  with the logistic likelihood (eq. 18; μ stays μ_0 when ``freeze_beliefs``, the Table 5 ablation), and ĉ the
  running average of the posterior-mean thresholds m_0, …, m_t (SPEC §4.2 step 3, the decision stated in
  :mod:`.algorithm`). Reads h.rho and h.lam_obs."""
  p = E.participation_update(p, y, h.rho)
  if not freeze_beliefs:
    beliefs = B.belief_update(beliefs, r, accept, z, h.lam_obs)
  posterior = B.posterior_mean_threshold(beliefs)
  return Learned(p=p, beliefs=beliefs, posterior=posterior,
                 cost_proxy=E.update_cost_proxy(cost_proxy, cost_rounds, posterior), cost_rounds=cost_rounds + 1)
