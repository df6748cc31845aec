"""The baselines' own selection rules: who is included (z_t) before paper 002's strategic layer (SPEC §4.3).

Paper 002 §4.1–4.2 puts every Table 2 baseline behind the same strategic layer: the baseline's selection rule
gives z_t, the included clients are offered the flat fee r̄ and answer with the EXP3 follower
(:mod:`~fedjax_sim.algorithms.fbsfl.baselines`). This module holds the rules themselves, pure functions of keys,
arrays and static counts:

* uniform inclusion with expected K (FedAvg, FedProx, q-FFL, Ditto): π_i = K/N, independent Bernoulli(π) or
  dependent rounding (:mod:`~fedjax_sim.algorithms.fbsfl.inclusion`; the ``fbsfl.rounding`` setting);
* Power-of-Choice (Cho, Wang & Joshi 2020): d candidates ∝ n_i without replacement, the K of highest loss;
* Oort (Lai et al., OSDI 2021, Algorithm 1), restated for a simulator without client speeds (:func:`oort_include`).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.fbsfl import layer as L


def uniform_inclusion(key: jax.Array, num_clients: int, k: int, rounding: str = "independent") -> tuple:
  """FedAvg's uniform random inclusion with E|I_t| = K (McMahan et al. 2017; SPEC §4.3): π_i = K/N.

  Args:
    key: PRNG key.
    num_clients: N.
    k: K, the expected number included.
    rounding: ``independent`` (z_i ~ Bernoulli(K/N), |I_t| ~ Binomial(N, K/N)) or ``dependent`` (|I_t| = K
      exactly when K/N·N is an integer; paper 002 eq. 4).

  Returns:
    ``(z [N] bool, π [N])``.
  """
  pi = jnp.full((num_clients,), k / num_clients, jnp.float32)
  return L.draw_inclusion(rounding, key, pi), pi


# --- Power-of-Choice (Cho, Wang & Joshi 2020) ------------------------------------------------------------------


def proportional_sample(key: jax.Array, weights: jax.Array, d: int) -> jax.Array:
  """d distinct indices drawn ∝ ``weights`` without replacement (successive sampling: each draw ∝ the remaining
  weights, as ``numpy.random.choice(N, d, p=w/Σw, replace=False)`` in Cho et al.'s code), by the Gumbel-top-d
  trick: the d largest of log w_i + G_i, G_i i.i.d. Gumbel, are such a sample in draw order.

  Args:
    key: PRNG key.
    weights: ``[N]`` non-negative weights (n_i for Power-of-Choice); clients of weight 0 are drawn last.
    d: how many, static, ≤ N.

  Returns:
    ``[d]`` int32 indices.
  """
  g = jax.random.gumbel(key, weights.shape)
  score = jnp.where(weights > 0, jnp.log(jnp.maximum(weights, 1e-30)) + g, -jnp.inf)
  return jax.lax.top_k(score, d)[1].astype(jnp.int32)


def poc_include(candidates: jax.Array, losses: jax.Array, k: int, num_clients: int) -> jax.Array:
  """z: the K candidates with the highest local loss F_i(w_{t−1}) (Cho et al. 2020, pow-d, Algorithm 1).

  With d = K every candidate is included: the rule reduces to sampling K clients ∝ n_i without replacement.

  Args:
    candidates: ``[d]`` distinct client indices (:func:`proportional_sample`).
    losses: ``[d]`` the candidates' local losses of the current global model.
    k: K ≤ d, static.
    num_clients: N.

  Returns:
    ``[N]`` bool z.
  """
  _, top = jax.lax.top_k(losses, k)
  return jnp.zeros((num_clients,), bool).at[candidates[top]].set(True)


# --- Oort (Lai et al. 2021) ------------------------------------------------------------------------------------

OORT_THRESHOLD = 30.0
"""Oort's initial preferred-duration percentile (its code's ``round_threshold`` default, 30)."""
OORT_PACER_STEP = 5.0
"""How far the pacer moves the percentile (Oort's ``pacer_delta`` default, 5)."""
OORT_PENALTY = 2.0
"""α of the system-utility factor (T / t_i)^α for clients slower than T (Oort's ``round_penalty`` default, 2)."""


@struct.dataclass
class OortState:
  """What Oort's selector remembers (Lai et al. 2021, Algorithm 1: the explored set E, utilities U, last rounds L)."""

  utility: jax.Array  # [N] the last statistical utility U_i observed (0 while unexplored)
  last: jax.Array  # [N] int32 the last round client i's update arrived (0: unexplored)
  threshold: jax.Array  # [] the pacer's preferred-duration percentile (0..100; 100 = no duration limit)
  window: jax.Array  # [] Σ of the exploited clients' utilities in the current pacer window
  previous: jax.Array  # [] the same sum over the previous window


def oort_init(num_clients: int) -> OortState:
  return OortState(utility=jnp.zeros((num_clients,), jnp.float32), last=jnp.zeros((num_clients,), jnp.int32),
                   threshold=jnp.asarray(OORT_THRESHOLD, jnp.float32), window=jnp.zeros((), jnp.float32),
                   previous=jnp.zeros((), jnp.float32))


def statistical_utility(num_rows, rms_loss) -> jax.Array:
  """U_i = |B_i| sqrt(Σ_{k ∈ B_i} Loss(k)² / |B_i|) (Lai et al. 2021, eq. 1 of §4.2)."""
  return jnp.asarray(num_rows, jnp.float32) * rms_loss


def preferred_duration(durations: jax.Array, threshold) -> jax.Array:
  """T: the ``threshold``-th percentile of the clients' round durations, as Oort's code indexes its sorted
  durations (element ⌊N·threshold/100⌋); no limit (∞) at 100."""
  n = durations.shape[0]
  ordered = jnp.sort(durations.astype(jnp.float32))
  at = jnp.minimum(jnp.floor(n * threshold / 100.0).astype(jnp.int32), n - 1)
  return jnp.where(threshold >= 100.0, jnp.inf, ordered[at])


def oort_scores(state: OortState, t, durations: jax.Array) -> jax.Array:
  """Util(i) of every explored client (Lai et al. 2021, Algorithm 1 lines 6–9), −∞ for unexplored ones.

  The statistical utility normalized over the explored clients, (U_i − min U)/(max U − min U) as Oort's code
  does, plus the staleness bonus sqrt(0.1 log t / L_i) (L_i the last round i's update arrived), times the system
  factor (T/t_i)^α for clients slower than the preferred duration T (:func:`preferred_duration`, α = 2).
  """
  explored = state.last > 0
  u = state.utility
  lo = jnp.min(jnp.where(explored, u, jnp.inf))
  hi = jnp.max(jnp.where(explored, u, -jnp.inf))
  span = jnp.where(hi > lo, hi - lo, 1.0)
  norm = jnp.where(explored, (u - jnp.where(jnp.isfinite(lo), lo, 0.0)) / span, 0.0)
  bonus = jnp.sqrt(0.1 * jnp.log(jnp.maximum(jnp.asarray(t, jnp.float32), 1.0)) / jnp.maximum(state.last, 1))
  score = norm + bonus
  pref = preferred_duration(durations, state.threshold)
  dur = durations.astype(jnp.float32)
  score = jnp.where(dur > pref, score * (pref / jnp.maximum(dur, 1e-4)) ** OORT_PENALTY, score)
  return jnp.where(explored, score, -jnp.inf)


def _first(mask: jax.Array, priority: jax.Array, count) -> jax.Array:
  """The ``count`` (traced) entries of ``mask`` with the highest ``priority``, as a ``[N]`` bool mask."""
  order = jnp.argsort(jnp.where(mask, -priority, jnp.inf), stable=True)
  rank = jnp.zeros(mask.shape, jnp.int32).at[order].set(jnp.arange(mask.shape[0], dtype=jnp.int32))
  return mask & (rank < count)


def oort_include(key: jax.Array, state: OortState, t, k: int, exploration: float, durations: jax.Array) -> tuple:
  """Oort's participant selection (Lai et al. 2021, Algorithm 1), with paper 002's fixed exploration fraction.

  Exploitation: the ⌊(1 − ε)K⌋ explored clients of highest Util (:func:`oort_scores`), fewer while fewer are
  explored; exploration: the remaining places go to unexplored clients, drawn uniformly; when the unexplored
  run out, exploitation takes their places, so |I_t| = K every round.

  Simplifications (decisions; paper 002 §4.6 sets only "pacer interval 10, exploration factor 0.1"):
  ε = 0.1 is fixed (Oort decays it from 0.9 to a floor); the exploited clients are the top scores, not a draw
  ∝ score among those above 95 % of the cut-off utility, and the utilities are not clipped at a percentile;
  unexplored clients are drawn uniformly (Oort favours fast ones: this simulator has no client speeds);
  durations are the local step counts E⌈n_i/B⌉ (computation, no network model).

  Args:
    key: PRNG key (the exploration draw).
    state: the selector's memory.
    t: the 1-based round index.
    k: K, static.
    exploration: ε, static.
    durations: ``[N]`` the clients' round durations.

  Returns:
    ``(z [N] bool, exploited [N] bool)``.
  """
  explored = state.last > 0
  n_explored = jnp.sum(explored)
  exploit_target = jnp.minimum(math.floor(k * (1.0 - exploration) + 1e-9), n_explored)
  n_explore = jnp.minimum(jnp.sum(~explored), k - exploit_target)
  exploited = _first(explored, oort_scores(state, t, durations), k - n_explore)
  explore = _first(~explored, jax.random.uniform(key, explored.shape), n_explore)
  return exploited | explore, exploited


def oort_observe(state: OortState, t, arrived: jax.Array, utility: jax.Array, exploited: jax.Array,
                 interval: int) -> OortState:
  """After round t: the arrived clients' utilities and last rounds, and every ``interval`` rounds the pacer.

  The pacer (Oort's code, ``pacer()``): at rounds t = mW, m ≥ 2, compare the exploited utility of the last W
  rounds with the W before; when it changed by at most 10 % (training plateaus) the percentile rises by 5 (slower
  clients admitted); when it changed by 5× or more it falls by 5 (at least 5).

  Args:
    state: the selector's memory.
    t: the 1-based round index.
    arrived: ``[N]`` bool, the clients whose update (and utility) arrived this round.
    utility: ``[N]`` their statistical utilities (:func:`statistical_utility`; others ignored).
    exploited: ``[N]`` bool, the clients included by exploitation this round.
    interval: W, the pacer interval (paper 002 §4.6: 10), static.
  """
  t = jnp.asarray(t, jnp.int32)
  window = state.window + jnp.sum(jnp.where(arrived & exploited, utility, 0.0))
  close = t % interval == 0
  pace = close & (t >= 2 * interval)
  change = jnp.abs(window - state.previous)
  flat = pace & (change <= 0.1 * state.previous)
  sharp = pace & ~flat & (change >= 5.0 * state.previous)
  threshold = jnp.where(flat, jnp.minimum(100.0, state.threshold + OORT_PACER_STEP), state.threshold)
  threshold = jnp.where(sharp, jnp.maximum(OORT_PACER_STEP, threshold - OORT_PACER_STEP), threshold)
  return OortState(utility=jnp.where(arrived, utility, state.utility).astype(jnp.float32),
                   last=jnp.where(arrived, t, state.last), threshold=threshold,
                   window=jnp.where(close, 0.0, window), previous=jnp.where(close, window, state.previous))
