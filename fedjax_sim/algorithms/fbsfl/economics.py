"""Offers, participation frequencies, q-fair aggregation and the leader's reward (paper 002 §3.1–3.3, §3.7).

All hyperparameters are keyword arguments that may be traced (swept without recompiling); defaults are those of
paper 002 §4.6 and SPEC §4.2.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.metrics import jain_index, kl_to_uniform


# --- offers (eq. 10) -----------------------------------------------------------------------------------------

def offers(pi: jax.Array, cost_proxy: jax.Array, p_tilde_prev: jax.Array, energy_proxy=0.0, lambda_e=0.0,
           delta=0.2, b0=0.1, b_max=10.0) -> jax.Array:
  """r_i = (ĉ_i + λ_E ê_i)(1 + δ π_i) + b_0 min(1/(N p̃_{t−1,i}), B_max) (paper 002 eq. 10; SPEC §4.2 step 3).

  Decision (SPEC §4.2 step 3): the equity bonus uses N·p̃ where eq. 10 has p̃. p̃ sums to 1 over N clients, so
  the literal 1/p̃ is ≥ N for about everyone and the cap B_max = 10 would always bind (a constant bonus); N·p̃
  is 1 at equal participation, and the cap binds below a tenth of the fair share. ê_i = 0 unless an energy split
  is configured (SPEC), so the energy term is off by default.

  Args:
    pi: ``[N]`` inclusion marginals π_t.
    cost_proxy: ``[N]`` ĉ_{t,i} (SPEC: the running average of the posterior-mean threshold,
      :func:`update_cost_proxy`).
    p_tilde_prev: ``[N]`` p̃_{t−1} (:func:`smoothed_participation`).
    energy_proxy: ê_{t,i}, ``[N]`` or a scalar.
    lambda_e, delta, b0, b_max: λ_E, δ = 0.2, b_0 = 0.1, B_max = 10.

  Returns:
    ``[N]`` offers r_t.
  """
  return (cost_proxy + lambda_e * energy_proxy) * (1.0 + delta * pi) + equity_bonus(p_tilde_prev, b0, b_max)


def equity_bonus(p_tilde_prev: jax.Array, b0=0.1, b_max=10.0) -> jax.Array:
  """b_0 min(1/(N p̃_{t−1,i}), B_max), the equity bonus of eq. 10 (paper 002; N·p̃ per SPEC §4.2 step 3, see
  :func:`offers`). Reported apart (``bonus_expenditure``) so that C_tot splits into the cost proxy's share and the
  bonus's.

  Args:
    p_tilde_prev: ``[N]`` p̃_{t−1}.
    b0, b_max: b_0 = 0.1, B_max = 10.

  Returns:
    ``[N]`` bonuses in [0, b_0 B_max].
  """
  n = p_tilde_prev.shape[-1]
  return b0 * jnp.minimum(1.0 / (n * p_tilde_prev), b_max)


def offer_cap(cost_max=1.0, energy_max=0.0, lambda_e=0.0, delta=0.2, b0=0.1, b_max=10.0):
  """r^p_max = (c_max + λ_E e_max)(1 + δ) + b_0 B_max, the largest offer of eq. 10 with π ≤ 1 and the proxies at
  their range's top (paper 002 §3.2, below eq. 10), which normalizes EXP3 utilities (Alg. 2 line 12). With
  ĉ a mean of posterior-mean thresholds, c_max = κ^(M) = 1.0; at the defaults r^p_max = 2.2."""
  return (cost_max + lambda_e * energy_max) * (1.0 + delta) + b0 * b_max


def update_cost_proxy(cost_proxy: jax.Array, rounds: jax.Array, posterior_mean: jax.Array) -> jax.Array:
  """ĉ_t = ĉ_{t−1} + (m_t − ĉ_{t−1}) / (rounds + 1): the running average of the posterior-mean thresholds m_t
  (SPEC §4.2 step 3's reading of paper 002's "running-average compute-cost proxy", eq. 10).

  Args:
    cost_proxy: ``[N]`` ĉ, the average of ``rounds`` earlier values.
    rounds: how many values ĉ averages (0 before the first: ĉ becomes m).
    posterior_mean: ``[N]`` m_t (:func:`~fedjax_sim.algorithms.fbsfl.beliefs.posterior_mean_threshold`).

  Returns:
    ``[N]`` the average including m_t. It stays in [κ^(1), κ^(M)], the configured range of eq. 10's clipping.
  """
  return cost_proxy + (posterior_mean - cost_proxy) / (jnp.asarray(rounds, cost_proxy.dtype) + 1.0)


# --- participation frequencies (eqs. 7–8) --------------------------------------------------------------------

def participation_init(num_clients: int) -> jax.Array:
  """p_0 = 1/N for every client (paper 002 eq. 7; SPEC §4.1)."""
  return jnp.full((num_clients,), 1.0 / num_clients, jnp.float32)


def participation_update(p: jax.Array, y: jax.Array, rho=0.1) -> jax.Array:
  """p_t = (1 − ρ) p_{t−1} + ρ y_t, the EMA of effective participation (paper 002 eq. 7; ρ = 0.1).

  Args:
    p: ``[N]`` p_{t−1}.
    y: ``[N]`` y_t = z_t a_t, bool or 0/1.
    rho: ρ ∈ (0, 1].
  """
  return (1.0 - rho) * p + rho * y.astype(p.dtype)


def smoothed_participation(p: jax.Array, eps=1e-3) -> jax.Array:
  """p̃_i = (p_i + ε) / Σ_j (p_j + ε), in the relative interior of the simplex (paper 002 eq. 8; ε = 1e-3, §4.6)."""
  s = p + eps
  return s / jnp.sum(s, axis=-1, keepdims=True)


# --- q-fair aggregation (eqs. 6, 13) -------------------------------------------------------------------------

def qfair_weights(num_examples: jax.Array, losses: jax.Array, participants: jax.Array, q=2.0,
                  delta_q=1e-4) -> jax.Array:
  """α_i = n_i (F_i(w_{t−1}) + δ_q)^q / Σ_{j ∈ S_t} n_j (F_j(w_{t−1}) + δ_q)^q on S_t, 0 elsewhere (paper 002
  eq. 13; q = 2, δ_q = 1e-4; SPEC §4.2 step 6). q = 0 gives the FedAvg weights n_i / Σ_{S_t} n_j of eq. 6.

  The powers are taken of (F_i + δ_q) / max_{S_t}(F_j + δ_q) ≤ 1, the same ratios without overflow at large q;
  at q = 0 every factor is exactly 1, so the weights are FedAvg's bit for bit. Losses of non-participants are
  ignored (they may be NaN: those clients reported nothing).

  Args:
    num_examples: ``[N]`` n_i.
    losses: ``[N]`` F_i(w_{t−1}) ≥ 0 as reported by participants.
    participants: ``[N]`` bool y_t.
    q, delta_q: q ≥ 0, δ_q > 0.

  Returns:
    ``[N]`` weights summing to 1 over S_t; all zeros when S_t = ∅.
  """
  n = jnp.asarray(num_examples, jnp.float32)
  base = jnp.where(participants, losses + delta_q, 1.0)
  scale = jnp.max(jnp.where(participants, base, 0.0))
  factor = jnp.power(base / jnp.where(scale > 0, scale, 1.0), q)
  mass = jnp.where(participants, n * factor, 0.0)
  total = jnp.sum(mass)
  return jnp.where(total > 0, mass / jnp.where(total > 0, total, 1.0), 0.0)


def aggregate(params, deltas, weights: jax.Array):
  """w_t = w_{t−1} + Σ_i α_i Δw_i, and w_t = w_{t−1} when S_t = ∅ (paper 002 eq. 6; SPEC §4.2 step 6).

  Args:
    params: the global model w_{t−1}, a pytree.
    deltas: the same pytree with every leaf stacked ``[N, ...]``: Δw_i (rows with α_i = 0 are ignored, even
      non-finite ones).
    weights: ``[N]`` α (:func:`qfair_weights`).

  Returns:
    w_t, a pytree like ``params``.
  """
  any_weight = jnp.any(weights != 0)

  def leaf(w, d):
    keep = (weights != 0).reshape((-1,) + (1,) * (d.ndim - 1))
    step = jnp.tensordot(weights.astype(d.dtype), jnp.where(keep, d, 0), axes=1)
    return jnp.where(any_weight, w + step.astype(w.dtype), w)

  return jax.tree_util.tree_map(leaf, params, deltas)


# --- leader reward (eqs. 11, 14) -----------------------------------------------------------------------------

@struct.dataclass
class RunningMoments:
  """Welford running mean and variance of the reward components (paper 002 §3.7 and §4.6: "standardized
  component-wise"; SPEC §4.2 step 8)."""

  count: jax.Array  # [] float32 values seen
  mean: jax.Array  # [D] running mean of each component
  m2: jax.Array  # [D] running sum of squared deviations from the mean (Welford's M2)


REWARD_COMPONENTS = ("progress", "expenditure", "fairness")
"""The order of the leader reward's components in :class:`RunningMoments` (Δ_t, Σ y r, B(p̃_t))."""


def moments_init(dim: int = len(REWARD_COMPONENTS)) -> RunningMoments:
  """No values seen."""
  return RunningMoments(count=jnp.zeros((), jnp.float32), mean=jnp.zeros((dim,), jnp.float32),
                        m2=jnp.zeros((dim,), jnp.float32))


def moments_update(moments: RunningMoments, x: jax.Array) -> RunningMoments:
  """Welford's update with one value ``x [D]``: n ← n + 1, μ ← μ + (x − μ)/n, M2 ← M2 + (x − μ_old)(x − μ_new)."""
  count = moments.count + 1.0
  d = x - moments.mean
  mean = moments.mean + d / count
  return RunningMoments(count=count, mean=mean, m2=moments.m2 + d * (x - mean))


def standardize(moments: RunningMoments, x: jax.Array, std_floor=1e-8) -> jax.Array:
  """(x − mean) / max(std, floor) with the population std √(M2/n) (ddof = 0).

  Decision (paper 002 does not say which statistics): ddof = 0, so the first value (n = 1) standardizes to 0
  rather than being undefined, and a floor of 1e-8 on the std, so a component that has not varied yet (its
  deviation is then exactly 0) contributes 0 instead of 0/0.
  """
  std = jnp.sqrt(moments.m2 / jnp.maximum(moments.count, 1.0))
  return (x - moments.mean) / jnp.maximum(std, std_floor)


def progress_signal(loss_prev, loss_now) -> jax.Array:
  """Δ_t = max(0, L(w_{t−1}) − L(w_t)) on the server's proxy validation set (paper 002 §3.2, below eq. 11)."""
  return jnp.maximum(0.0, jnp.asarray(loss_prev, jnp.float32) - loss_now)


def expenditure(y: jax.Array, r: jax.Array) -> jax.Array:
  """Σ_i y_{t,i} r_{t,i}, the round's incentive payments (paper 002 eq. 11; C_tot sums it, SPEC §4.4)."""
  return jnp.sum(jnp.where(y, r, 0.0))


def participation_penalty(p: jax.Array, p_tilde: jax.Array, gamma1=1.0, gamma2=1.0) -> jax.Array:
  """B = γ_1 (1 − Jain(p_t)) + γ_2 KL(p̃_t ‖ u_N) (paper 002 eq. 14; γ_1 = γ_2 = 1, §4.6).

  Jain's index is of the EMA p_t and the KL of its smoothed normalization p̃_t, as in eq. 14.
  """
  return gamma1 * (1.0 - jain_index(p)) + gamma2 * kl_to_uniform(p_tilde)


def fairness_weight(t, beta_max=1.0, t0=20.0) -> jax.Array:
  """β(t) = β_max min(1, t / t_0), the warm-up of the fairness weight (paper 002 §3.7; β_max = 1, t_0 = 20).

  t counts rounds from 1 (Alg. 1). t_0 ≤ 0 means no warm-up (β = β_max).
  """
  t = jnp.asarray(t, jnp.float32)
  t0 = jnp.asarray(t0, jnp.float32)
  return beta_max * jnp.where(t0 > 0, jnp.minimum(1.0, t / jnp.where(t0 > 0, t0, 1.0)), 1.0)


def leader_reward(moments: RunningMoments, t, progress, spent, penalty, alpha=1.0, beta_max=1.0, t0=20.0,
                  std_floor=1e-8):
  """U_t = ẑ(Δ_t) − α ẑ(Σ y r) − β(t) ẑ(B(p̃_t)) with ẑ each component standardized by its running statistics
  (paper 002 eq. 11, §3.7 and §4.6; SPEC §4.2 step 8).

  Decisions: the statistics are updated with this round's components first and then used to standardize them
  (so round 1 gives U = 0); α and β(t) weight the standardized components ("α weights the expenditure component
  of the leader objective after component-wise standardization", paper 002 §4.6), so the warm-up β(t) acts on
  the standardized penalty. See :func:`standardize` for the std and its floor.

  Args:
    moments: running statistics of the three components (:data:`REWARD_COMPONENTS`) before this round.
    t: the round index, from 1.
    progress: Δ_t (:func:`progress_signal`).
    spent: Σ_i y_i r_i (:func:`expenditure`).
    penalty: B(p̃_t) (:func:`participation_penalty`).
    alpha, beta_max, t0: α = 1, β_max = 1, t_0 = 20.
    std_floor: the floor on each component's std.

  Returns:
    ``(reward, moments, standardized)``: U_t, the updated statistics, and ``[3]`` ẑ in
    :data:`REWARD_COMPONENTS` order.
  """
  x = jnp.stack([jnp.asarray(v, jnp.float32) for v in (progress, spent, penalty)])
  moments = moments_update(moments, x)
  z = standardize(moments, x, std_floor)
  reward = z[0] - alpha * z[1] - fairness_weight(t, beta_max, t0) * z[2]
  return reward, moments, z
