"""The FBS-FL round as a declared method (paper 002 Algorithm 1; SPEC §4.2 steps 1–9; issue 12 item 3).

One round, everything inside the compiled program (no host calls), built from the tested pieces of this package
(steps 3–5 and 7 are :mod:`.layer`'s, shared with the baselines' rounds and the layer without training):

1. the state s_t (:func:`observation`): t / T, the proxy-validation loss L(w_{t−1}), the previous progress
   signal Δ_{t−1}, N·p_{t−1} and the posterior-mean thresholds E_{μ_{t−1}}[κ] (paper 002 §4.6);
2. the actor (:func:`~.ppo.act`): Gaussian logits, π̂ = sigmoid, π = the capped-simplex projection (eq. 3);
3. the offers r_t (eq. 10, :func:`~.economics.offers`);
4. inclusion z_t: independent Bernoulli(π) or dependent rounding (eq. 4; the static ``rounding`` setting);
5. the included clients' responses a_t (EXP3 by default; BR or logit: the static ``follower`` setting), y = z·a,
   and EXP3's weight update (Alg. 2; it reads only this round's answers and offers, so it runs here rather than
   after training as SPEC §4.2 step 7 lists it, with the same result);
6. only the participants train (E local epochs of the experiment's learner, round index t for its schedule),
   then q-fair aggregation w_t = w_{t−1} + Σ α_i Δw_i (eqs. 6, 13);
7. p_t (eq. 7), the cumulative counts, the beliefs (eq. 18; included clients only), ĉ;
8. the leader's reward U_t (eq. 11, standardized components; :func:`~.economics.leader_reward`);
9. the transition into the rollout buffer and, every ``ppo_rollout`` rounds, the PPO update (``lax.cond``).

Every random draw has its own key stream (:func:`round_keys`): actor, inclusion, responses, reported losses,
local training and the PPO minibatch shuffles.

Decisions (SPEC §4 leaves them open; stated again where they act):

* **Slots.** |y_t| varies per round but shapes are static: S training slots (``fbsfl.slots``; 0 = auto,
  S = min(N, K + ⌈4√K⌉ + 4), four standard deviations of |I_t| above K, since Var|I_t| ≤ Σπ ≤ K, plus 4). The S
  slots hold S *distinct* clients (``train_selected`` needs distinct indices): the participants first, in
  client-index order (a stable top-S over the mask y), then non-participants as fillers. Fillers are trained with
  zero rows (no optimizer step, their ``n`` is 0 in the federation handed to ``train_selected``, so they cost
  no steps) and get aggregation weight 0. Participants beyond the S-th are *dropped for slots*: not trained and
  not aggregated, but still participants of the game (they accepted, so they are paid, counted in p_t and the
  fairness metrics, and their followers and the beliefs see their response: only the server discards their
  update). Each round reports how many were dropped (``dropped``); with the auto S it is 0 with overwhelming
  probability. The slots' static row bounds are cut into up to S groups (``selection_plan(n, S, batch, S)``: one
  per distinct step count of the bounds, not ``learner.num_buckets``): ``train_selected`` trains each group's slots
  in one vmapped loop that runs to the group's longest slot, so a wide group holding a participant and fillers
  computes the fillers' lanes for nothing. On the Fashion-MNIST federation (N = 100, K = 10, S = 27: 17 groups)
  a round of 3 participants costs 109 lane-steps on average instead of 290 with 4 groups, and one of 10
  participants 346 — FedAvg's 10 clients in its 4 groups cost 368 (host count over random draws; issue 12's
  ≤ 1.5× target). That grouping is the accelerators'; on the CPU every slot has a loop of its own
  (``participation.lanes``, auto: :func:`~fedjax_sim.engine.local.slot_lanes`), so fillers cost nothing and a
  round costs its participants' own steps (docs/PLATFORM.md finding 8).
* **Proxy-validation loss** (paper 002 §3.2, "a small server-side proxy validation set"): the mean task loss of
  the global model on a fixed subset of at most ``fbsfl.proxy_rows`` (512) rows of the pooled validation splits,
  every ⌊V/P⌋-th valid row in client order (so each client is represented in proportion to its validation
  split), chosen once at build time on the host. One forward pass of P rows per round.
* **Reported losses F_i(w_{t−1})** of eq. 13 (reported by participants at the start of the round): the mean loss
  of w_{t−1} on ``fbsfl.report_rows`` (64) of the participant's train rows, all of them when it has at most that
  many, else drawn uniformly with replacement (key ``split(k_report, N)[i]``): an unbiased estimate at S × 64
  forward rows per round instead of a pass over every participant's data.
* **State scaling:** the participation vector enters s_t as N·p_{t−1} (1 = the fair share) rather than p_{t−1},
  whose entries are ≈ 1/N: the actor's tanh layers see inputs of order 1 (SPEC §4.2 step 1 names p_{t−1}).
* **ĉ** (SPEC §4.2 step 3): round t's offers use the running average of the posterior-mean thresholds
  m_0, …, m_{t−1} (m_0 = the prior mean E_{μ_0}[κ] = 0.52); ê = 0 (no energy split configured).
* **K** is ``participation.clients_per_round``; its "0 = every client" reads as K = N (Π the whole box), so the
  platform's defaults run (:func:`inclusion_limit`).
* ``selection = "uniform"`` (the ablation "uniform selection in place of PPO") sets π_i = K/N and leaves the
  leader untouched (no action, no buffer, no update); ``freeze_beliefs`` keeps μ = μ_0 (and so ĉ = 0.52).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics, nonfinite_rows, require_federation
from fedjax_sim.algorithms.fbsfl import beliefs as B
from fedjax_sim.algorithms.fbsfl import economics as E
from fedjax_sim.algorithms.fbsfl import followers as F
from fedjax_sim.algorithms.fbsfl import layer as L
from fedjax_sim.algorithms.fbsfl import ppo
from fedjax_sim.algorithms.fbsfl.projection import capped_simplex_projection
from fedjax_sim.algorithms.fbsfl.report import REPORTS
from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.metrics import participation_fairness, star_round_bytes
from fedjax_sim.models import Model, model_size
from fedjax_sim.settings import at_least, one_of, positive, setting, within

KAPPA_MAX = L.KAPPA_MAX  # κ^(M) = 1.0 (:data:`.layer.KAPPA_MAX`)


# --- state --------------------------------------------------------------------------------------------------


@struct.dataclass
class FBSFLState:
  """Everything FBS-FL carries from round to round (paper 002 Algorithm 1 line 1; SPEC §4.1)."""

  global_params: Any  # w_{t−1}, the global model
  leader: Any  # ppo's TrainState: actor–critic parameters φ, ψ and their Adam state
  buffer: ppo.RolloutBuffer  # [R, D] states, [R, N] logits, [R] log-probs, values, rewards, dones
  followers: F.Exp3State  # [N, 2] EXP3 log-weights over {reject, accept} (unused by the BR and logit followers)
  beliefs: B.Beliefs  # [N, M] log μ_i(m) over Θ
  kappa: jax.Array  # [N] private thresholds κ_i ∈ Θ, drawn at init, static (read only by the followers)
  p: jax.Array  # [N] participation EMA p_{t−1} (eq. 7; p_0 = 1/N)
  counts: jax.Array  # [N] cumulative participations Σ_{s<t} y_{s,i}
  cost_proxy: jax.Array  # [N] ĉ: running average of the posterior-mean thresholds
  cost_rounds: jax.Array  # [] int32 how many posterior means ĉ averages
  moments: E.RunningMoments  # [3] running statistics of (Δ, Σ y r, B) for the reward's standardization
  proxy_loss: jax.Array  # [] L(w_{t−1}) on the proxy-validation set
  progress: jax.Array  # [] Δ_{t−1} (0 before round 1)


class RoundKeys(NamedTuple):
  """The round's independent key streams (STYLE §4), from ``split(key, 6)`` in this order."""

  actor: jax.Array  # the Gaussian action
  inclusion: jax.Array  # z_t
  response: jax.Array  # the followers' actions (EXP3, logit)
  report: jax.Array  # the rows on which participants report F_i(w_{t−1})
  train: jax.Array  # local training (client i: split(train, N)[i], as in train_selected)
  ppo: jax.Array  # PPO's minibatch shuffles


def round_keys(key: jax.Array) -> RoundKeys:
  return RoundKeys(*jax.random.split(key, 6))


def auto_slots(num_clients: int, k: int) -> int:
  """S = min(N, K + ⌈4√K⌉ + 4): the default number of training slots (module docstring, "Slots")."""
  return min(num_clients, k + math.ceil(4.0 * math.sqrt(k)) + 4)


def observation(state: FBSFLState, t, rounds: int) -> jax.Array:
  """s_t = (t/T, L(w_{t−1}), Δ_{t−1}, N·p_{t−1}, E_{μ_{t−1}}[κ]) ∈ R^{3 + 2N} (paper 002 §4.6; SPEC §4.2 step 1;
  N·p rather than p: module docstring)."""
  n = state.p.shape[0]
  head = jnp.stack([jnp.asarray(t, jnp.float32) / rounds, state.proxy_loss, state.progress])
  return jnp.concatenate([head, n * state.p, B.posterior_mean_threshold(state.beliefs)]).astype(jnp.float32)


def participant_slots(y: jax.Array, slots: int) -> tuple:
  """The S distinct clients trained this round: participants first (client order), then fillers.

  Returns:
    ``(selected [S] int32, trained [S] bool)``: a stable top-S over the mask ``y [N]`` and whether each slot holds
    a participant (the participants past the S-th are dropped for slots; module docstring).
  """
  order = jnp.argsort(~y, stable=True).astype(jnp.int32)
  selected = order[:slots]
  return selected, y[selected]


def proxy_indices(m_val, rows: int) -> tuple:
  """Host: ``(client [P], row [P])`` of the proxy-validation set, every ⌊V/P⌋-th valid validation row in client
  order, at most ``rows`` of them (module docstring)."""
  c, j = np.nonzero(np.asarray(m_val))  # row-major: client after client
  if len(c) == 0:
    raise ValueError("FBS-FL's proxy-validation set needs validation rows; the federation has none")
  take = np.floor(np.arange(min(rows, len(c))) * (len(c) / min(rows, len(c)))).astype(np.int64)
  return c[take].astype(np.int32), j[take].astype(np.int32)


def mean_loss(apply_fn, loss_fn, params, x, y, valid=None) -> jax.Array:
  """The mean per-example task loss of ``params`` (no dropout) on ``x [B, ...]`` (over ``valid`` rows)."""
  per = loss_fn(apply_fn(params, x, False, None)[0], y)
  if valid is None:
    return jnp.mean(per)
  return jnp.sum(jnp.where(valid, per, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def report_positions(key: jax.Array, n: jax.Array, m: int) -> tuple:
  """``(positions [m], valid [m])`` inside one client's ``n`` train rows on which it reports F_i(w_{t−1}): all rows
  when n ≤ m, else m draws uniform with replacement (module docstring, "Reported losses")."""
  draw = jnp.minimum(jnp.floor(jax.random.uniform(key, (m,)) * n).astype(jnp.int32), n - 1)
  small = n <= m
  return jnp.where(small, jnp.arange(m, dtype=jnp.int32), draw), jnp.where(small, jnp.arange(m) < n, True)


def reported_losses(apply_fn, loss_fn, params, rows, clients: jax.Array, keys: jax.Array, m: int) -> jax.Array:
  """F_i(w_{t−1}) ``[S]`` of ``clients [S]`` from their flat train rows (:func:`report_positions`; ``keys [S]``)."""
  pos, valid = jax.vmap(report_positions, in_axes=(0, 0, None))(keys, rows.n[clients], m)  # [S, m]
  index = jnp.where(valid, rows.start[clients][:, None] + pos, rows.x.shape[0] - 1)
  s = clients.shape[0]
  x = rows.x[index].reshape((s * m,) + rows.x.shape[1:])
  per = loss_fn(apply_fn(params, x, False, None)[0], rows.y[index].reshape((s * m,) + rows.y.shape[1:]))
  per = per.reshape(s, m)
  return jnp.sum(jnp.where(valid, per, 0.0), axis=1) / jnp.maximum(jnp.sum(valid, axis=1), 1)


# --- the method ---------------------------------------------------------------------------------------------


def ppo_hyper(h, settings) -> ppo.PPOHyper:
  """The leader's :class:`~.ppo.PPOHyper` from the traced ``h`` (:class:`FBSFLHyper`) and the static settings."""
  return ppo.PPOHyper(clip_eps=h.ppo_clip, value_clip=h.ppo_value_clip, gamma=h.ppo_gamma,
                      gae_lambda=h.ppo_gae_lambda, lr=h.ppo_lr, max_grad_norm=h.ppo_max_grad_norm,
                      vf_coef=h.ppo_vf_coef, ent_coef=h.ppo_ent_coef, rollout=settings.ppo_rollout,
                      epochs=settings.ppo_epochs, num_minibatches=settings.ppo_minibatches)


def fbsfl(model: Model, client_update, loss_fn, settings, *, clients_per_round: int, rounds: int, plan: tuple,
          proxy: tuple, name: str = "fbsfl", lanes: int = 0) -> Algorithm:
  """FBS-FL (paper 002 Algorithm 1) as pure ``init`` / ``round`` (SPEC §4.2; the module docstring's decisions).

  Args:
    model: the global model every participant trains.
    client_update: the task's local training (E epochs of the experiment's learner).
    loss_fn: the task's per-example loss (proxy-validation and reported losses).
    settings: the ``[fbsfl]`` section (:class:`FBSFLConfig`; its static fields are read here).
    clients_per_round: K, the expected-inclusion limit of Π (eq. 3).
    rounds: T, for the normalized round index of s_t.
    plan: :func:`~fedjax_sim.engine.local.selection_plan` for the S slots.
    proxy: ``(client [P], row [P])`` of the proxy-validation set (:func:`proxy_indices`).
    name: the reported method name.
    lanes: slots per vmapped training loop (:func:`~fedjax_sim.engine.local.slot_lanes`; 0: the plan's groups).

  Returns:
    An :class:`Algorithm`; the deployed model is the global one. Bytes: 2·|W|·4 per trained participant.
  """
  from fedjax_sim.data.federation import with_train_rows
  from fedjax_sim.engine.local import train_selected

  k = int(clients_per_round)
  slots = sum(s for s, _ in plan)
  sent = model_size(model)
  apply_fn = model.apply
  proxy_c, proxy_j = (jnp.asarray(a) for a in proxy)
  use_ppo = settings.selection == "ppo"

  def proxy_loss(params, federation):
    return mean_loss(apply_fn, loss_fn, params, federation.x_val[proxy_c, proxy_j],
                     federation.y_val[proxy_c, proxy_j])

  def init(key, federation, hyper):
    h = hyper.method
    n = federation.num_clients
    k_model, k_types, k_leader = jax.random.split(key, 3)
    params = model.init(k_model)
    obs_dim = 3 + 2 * n
    actor = ppo.ActorCritic(num_clients=n, hidden=settings.ppo_hidden)  # equal by value (ppo.ModuleApply)
    leader = ppo.init_train_state(k_leader, actor, obs_dim, ppo_hyper(h, settings))
    beliefs = B.belief_init(n)
    return FBSFLState(
        global_params=params, leader=leader, buffer=ppo.init_buffer(obs_dim, n, settings.ppo_rollout),
        followers=F.exp3_init(n), beliefs=beliefs, kappa=B.sample_types(k_types, n),
        p=E.participation_init(n), counts=jnp.zeros((n,), jnp.float32),
        cost_proxy=B.posterior_mean_threshold(beliefs), cost_rounds=jnp.ones((), jnp.int32),
        moments=E.moments_init(), proxy_loss=proxy_loss(params, federation).astype(jnp.float32),
        progress=jnp.zeros((), jnp.float32))

  def train_and_aggregate(keys: RoundKeys, w, federation, hyper, t, y):
    """Step 6: the S slots (participants first, fillers with no rows) train from w_{t−1}, each participant having
    reported F_i(w_{t−1}); w_t = w_{t−1} + Σ α_i Δw_i with the q-fair α (eqs. 6, 13; 0 for fillers and drops).

    Returns:
      ``(w_t, ClientResult [S], selected [S], trained [S], α [S])``.
    """
    h = hyper.method
    selected, trained = participant_slots(y, slots)
    n_train, rows = federation.n_train, federation.rows
    n_slot = jnp.zeros_like(n_train).at[selected].set(jnp.where(trained, n_train[selected], 0))
    busy = federation.replace(n_train=n_slot, rows=rows.replace(n=n_slot.astype(rows.n.dtype)))  # fillers: 0 rows
    reported = reported_losses(apply_fn, loss_fn, w, rows, selected,
                               jax.random.split(keys.report, n_train.shape[0])[selected], settings.report_rows)
    res = train_selected(client_update, keys.train, w, busy, selected, plan, shared=w, hyper=hyper, t=t,
                         params_stacked=False, lanes=lanes)
    deltas = jax.tree_util.tree_map(lambda c, g: c - g[None], res.params, w)
    alpha = E.qfair_weights(n_train[selected], reported, trained, h.q, h.delta_q)
    return E.aggregate(w, deltas, alpha), res, selected, trained, alpha

  def round_fn(key, state, federation, hyper, t):
    """Round t (1-based, traced) of paper 002 Algorithm 1, SPEC §4.2 steps 1–9 in order (module docstring)."""
    h = hyper.method
    n = federation.num_clients
    keys = round_keys(key)
    w = state.global_params
    # 1–2. state, actor, projection onto Π
    obs = observation(state, t, rounds)
    if use_ppo:
      logits, log_prob, value, pi_hat = ppo.act(state.leader.apply_fn, state.leader.params, keys.actor, obs)
      pi = capped_simplex_projection(pi_hat, k)
    else:
      pi = jnp.full((n,), k / n, jnp.float32)
    # 3. offers (eq. 10)
    offer = L.eq10_offers(pi, state.p, state.cost_proxy, h)
    r = offer.r
    # 4. inclusion (eq. 4)
    z = L.draw_inclusion(settings.rounding, keys.inclusion, pi)
    # 5. responses, y = z · a (eq. 5), and EXP3's update (Alg. 2; it reads only this round's answers)
    answers = L.answer(settings.follower, keys.response, r, z, state.kappa, state.followers, h)
    accept, y = answers.accept, answers.y
    # 6. only the participants train; q-fair aggregation (eqs. 6, 13)
    w_new, res, selected, trained, alpha = train_and_aggregate(keys, w, federation, hyper, t, y)
    # 7. participation, beliefs, cost proxy
    learned = L.learn(state.p, state.beliefs, state.cost_proxy, state.cost_rounds, r=r, z=z, accept=accept, y=y, h=h,
                      freeze_beliefs=settings.freeze_beliefs)
    p = learned.p
    # 8. the leader's reward (eq. 11)
    loss_now = proxy_loss(w_new, federation).astype(jnp.float32)
    progress = E.progress_signal(state.proxy_loss, loss_now)
    spent = E.expenditure(y, r)
    penalty = E.participation_penalty(p, E.smoothed_participation(p, h.eps), h.gamma1, h.gamma2)
    reward, moments, _ = E.leader_reward(state.moments, t, progress, spent, penalty, h.alpha, h.beta_max, h.t0)
    new_state = state.replace(
        global_params=w_new, followers=answers.followers, beliefs=learned.beliefs, p=p, counts=state.counts + y,
        cost_proxy=learned.cost_proxy, cost_rounds=learned.cost_rounds, moments=moments, proxy_loss=loss_now,
        progress=progress)
    # 9. rollout buffer and the PPO update when a rollout completes
    info = ppo.LossInfo.zeros()
    if use_ppo:
      buffer = ppo.add(state.buffer, obs, logits, log_prob, value, reward)
      # The round index t, not the buffer's own count (equal: one transition per round): t is the same for every
      # seed, so under the seeds' vmap lax.cond stays a branch and the update runs only every 16th round instead of
      # both branches every round (a batched predicate turns cond into select).
      leader, info = ppo.maybe_update(t, state.leader, buffer, observation(new_state, t + 1, rounds),
                                      keys.ppo, ppo_hyper(h, settings))
      new_state = new_state.replace(leader=leader, buffer=buffer)

    metrics = round_metrics(res, selected, trained, alpha, y=y, z=z, accept=accept, r=r, pi=pi, kappa=state.kappa,
                            posterior=learned.posterior, k=k, sent=sent, progress=progress, reward=reward,
                            proxy_loss=loss_now, info=info, bonus=offer.bonus)
    return new_state, metrics

  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.global_params, False),
                   prepare=with_train_rows, sent_params=sent)


def round_metrics(res, selected, trained, alpha, *, y, z, accept, r, pi, kappa, posterior, k: int, sent: int, progress,
                  reward, proxy_loss, info, bonus=None) -> RoundMetrics:
  """What one FBS-FL round reports: the platform's fields over the *trained* participants (bytes 2·|W|·4 each),
  and in ``extra`` the game's per-client ``[N]`` arrays (y_t as ``participation``, z_t) and per-round numbers (SPEC
  §4.4: |I_t|, Σ y r, MAE_μ, the best-response disagreements and gap of eq. 22, the PPO loss). ``bonus`` is the
  ``[N]`` equity-bonus part of r (eq. 10's last term; None: the flat fee has none): Σ y · bonus is reported apart,
  so that C_tot splits into the cost proxy's share and the bonus's."""
  n = y.shape[0]
  count = jnp.sum(trained)
  _, bad = nonfinite_rows((res.loss, res.params), trained.shape[0])
  bad = bad & trained
  gain = jnp.maximum(r - kappa, 0.0)  # the best response's utility max{0, r − κ} (eq. 22)
  f32 = lambda v: jnp.asarray(v).astype(jnp.float32)  # noqa: E731
  return RoundMetrics(
      bytes=f32(star_round_bytes(count, sent)),
      train_loss=jnp.sum(jnp.where(trained, res.loss, 0.0)) / jnp.maximum(count, 1),
      rest_fraction=1.0 - count / n, mean_partners=jnp.asarray(1.0), active=jnp.asarray(1.0),
      nonfinite_client=jnp.where(jnp.any(bad), selected[jnp.argmax(bad)] + 1, 0).astype(jnp.int32),
      extra={
          "participation": f32(y),  # [N] y_t (participation_fairness sums it)
          "included": f32(z),  # [N] z_t
          "included_count": f32(jnp.sum(z)),  # [] |I_t|
          "over_k": f32(jnp.sum(z) > k),  # [] 1{|I_t| > K}
          "participants": f32(jnp.sum(y)),  # [] |S_t|, the round's accepted updates
          "dropped": f32(jnp.sum(y) - count),  # [] participants dropped for slots
          "expenditure": f32(E.expenditure(y, r)),  # [] Σ_i y_i r_i
          "bonus_expenditure": f32(0.0 if bonus is None else E.expenditure(y, bonus)),  # [] Σ_i y_i b_0 min(·)
          "pi_sum": f32(jnp.sum(pi)),  # [] Σ π_t ≤ K
          "max_weight": f32(jnp.max(alpha)),  # [] the largest q-fair weight α_i (1: one update is the whole step)
          "belief_mae": f32(jnp.mean(jnp.abs(posterior - kappa))),  # [] eq. 21 at this round
          "br_disagree": f32(jnp.sum(z & (accept != F.best_response(r, kappa)))),  # [] included, a ≠ BR
          "br_gap": f32(jnp.sum(jnp.where(z, gain - jnp.where(accept, r - kappa, 0.0), 0.0))),  # [] eq. 22's sum
          "progress": f32(progress), "reward": f32(reward), "proxy_loss": f32(proxy_loss),  # [] Δ_t, U_t, L(w_t)
          "ppo_loss": info.total, "ppo_approx_kl": info.approx_kl, "ppo_updated": info.updated,  # []
      })


def fairness_curves(extra: dict, active) -> dict:
  """Round-by-round curves of one seed (paper 002 §4.3: "fairness and expenditure metrics are aggregated every 10
  rounds and at the final round"; §4.5's matched comparison reads them at the round A(t) reaches A*).

  With n_t = Σ_{s ≤ t} y_s the cumulative participation counts: Jain(n_t) and KL(ñ_t ‖ u) (the same statistics
  as :func:`~fedjax_sim.metrics.jain_index` and :func:`~fedjax_sim.metrics.kl_to_uniform`, which equal them at
  the last round), the cumulative expenditure C(t) = Σ_{s ≤ t} Σ_i y_{s,i} r_{s,i} and the cumulative accepted
  updates A(t) = Σ_{s ≤ t} |S_s|. Rounds that did not run (early stop) repeat the last value.

  Returns:
    ``{jain_curve, kl_curve, c_tot_curve, accepted_curve}``, each a list of R floats.
  """
  act = (np.asarray(active, np.float64) > 0).astype(np.float64)
  y = np.asarray(extra["participation"], np.float64) * act[:, None]
  counts = np.cumsum(y, axis=0)  # [R, N]
  n = counts.shape[1]
  total = counts.sum(axis=1)
  sq = (counts * counts).sum(axis=1)
  jain = np.where(sq > 0, total ** 2 / (n * np.where(sq > 0, sq, 1.0)), 1.0)
  share = counts / np.where(total > 0, total, 1.0)[:, None]
  with np.errstate(divide="ignore", invalid="ignore"):
    terms = np.where(share > 0, share * np.log(np.where(share > 0, share, 1.0) * n), 0.0)
  kl = np.where(total > 0, np.maximum(terms.sum(axis=1), 0.0), 0.0)
  spend = np.cumsum(np.asarray(extra["expenditure"], np.float64) * act)
  accepted = np.cumsum(np.asarray(extra["participants"], np.float64) * act)
  as_list = lambda v: [float(x) for x in v]  # noqa: E731
  return {"jain_curve": as_list(jain), "kl_curve": as_list(kl), "c_tot_curve": as_list(spend),
          "accepted_curve": as_list(accepted)}


def fbsfl_metrics(extra: dict, active) -> dict:
  """Per-seed summary entries of an FBS-FL run (SPEC §4.4) from its ``[R, ...]`` history.

  Participation fairness of the cumulative y (Jain, KL to uniform, Gini, Lorenz:
  :func:`~fedjax_sim.metrics.participation_fairness`) and its round-by-round curves (:func:`fairness_curves`);
  C_tot = Σ_t Σ_i y r and its equity-bonus part (``c_tot_bonus``, eq. 10's last term); |I_t|'s mean,
  Pr(|I_t| > K), P95 and max; A(T) = Σ_t |S_t|; participants dropped for slots; MAE_μ at the last round (eq. 21);
  the disagreement with the best response and ε_BR (eq. 22), both over included offers; how many PPO updates ran; the mean over
  aggregating rounds of the largest q-fair weight (how close eq. 13 comes to taking one client's update).
  """
  if not extra or "included_count" not in extra:
    return {}
  act = np.asarray(active, np.float64) > 0
  get = lambda key: np.asarray(extra[key], np.float64)[act]  # noqa: E731
  sizes = get("included_count")
  offered = max(float(sizes.sum()), 1.0)
  last = np.flatnonzero(act)
  aggregated = (get("participants") - get("dropped")) > 0  # rounds whose step averaged at least one update
  out = participation_fairness(extra, active)
  out.update(fairness_curves(extra, active))
  out.update({
      "c_tot": float(get("expenditure").sum()),
      "c_tot_bonus": float(get("bonus_expenditure").sum()) if "bonus_expenditure" in extra else float("nan"),
      "included_mean": float(sizes.mean()) if sizes.size else float("nan"),
      "included_over_k": float(get("over_k").mean()) if sizes.size else float("nan"),
      "included_p95": float(np.percentile(sizes, 95)) if sizes.size else float("nan"),
      "included_max": float(sizes.max()) if sizes.size else float("nan"),
      "accepted_updates": float(get("participants").sum()),
      "dropped_for_slots": float(get("dropped").sum()),
      "belief_mae": float(np.asarray(extra["belief_mae"], np.float64)[last[-1]]) if last.size else float("nan"),
      "br_disagreement": float(get("br_disagree").sum() / offered),
      "eps_br": float(get("br_gap").sum() / offered),
      "ppo_updates": float(get("ppo_updated").sum()),
      "max_weight_mean": float(get("max_weight")[aggregated].mean()) if aggregated.any() else float("nan"),
  })
  return out


# --- declaration (issue 10): config section, traced hyperparameters -------------------------------------------


@dataclasses.dataclass(frozen=True)
class FBSFLConfig:
  """The ``[fbsfl]`` section (paper 002 §3.7, §4.6; SPEC §4.2 "Defaults"). K is ``participation.clients_per_round``
  (:func:`inclusion_limit`).

  Numbers are traced (sweepable: :class:`FBSFLHyper`); names (follower, rounding, selection), ``freeze_beliefs``,
  the PPO shapes and the slot/row counts are static: they shape the program.
  """

  alpha: float = setting(1.0, at_least(0.0))  # α, weight of the standardized expenditure in U_t (eq. 11; paper
  # §4.6: 1), ≥ 0
  beta_max: float = setting(1.0, at_least(0.0))  # β_max of β(t) = β_max min(1, t/t_0) (§3.7: 1; ablation 0, 1, 2),
  # ≥ 0
  t0: int = setting(20, at_least(0))  # t_0, rounds of the fairness warm-up (§3.7: 20), ≥ 0 (0 = none)
  rho: float = setting(0.1, within(0, 1, open_lo=True))  # ρ of the participation EMA (eq. 7: 0.1), in (0, 1]
  eps: float = setting(1e-3, positive())  # ε of the smoothed normalization p̃ (eq. 8; §4.6: 1e-3), > 0
  q: float = setting(2.0, at_least(0.0))  # q of the q-fair weights (eq. 13: 2; 0 = FedAvg's; ablation 0, 2, 4), ≥ 0
  delta_q: float = setting(1e-4, positive())  # δ_q, the loss floor of eq. 13 (1e-4), > 0
  b0: float = setting(0.1, at_least(0.0))  # b_0, the equity bonus of eq. 10 (0.1; ablation 0), ≥ 0
  b_max: float = setting(10.0, positive())  # B_max, the cap of the inverse-participation factor (eq. 10: 10), > 0
  delta: float = setting(0.2, at_least(0.0))  # δ of the inclusion multiplier 1 + δπ (eq. 10: 0.2), ≥ 0
  gamma1: float = setting(1.0, at_least(0.0))  # γ_1, weight of 1 − Jain(p_t) in B (eq. 14: 1), ≥ 0
  gamma2: float = setting(1.0, at_least(0.0))  # γ_2, weight of KL(p̃_t ‖ u) in B (eq. 14: 1), ≥ 0
  lam_obs: float = setting(5.0, positive())  # λ_obs, slope of the logistic likelihood and logit follower (eq. 17:
  # 5), > 0
  exp3_gamma: float = setting(0.1, within(0, 1, open_lo=True))  # EXP3 exploration γ (Alg. 2: 0.1), in (0, 1]
  exp3_eta: float = setting(0.3, positive())  # EXP3 learning rate η (Alg. 2: 0.3), > 0
  ppo_clip: float = setting(0.2, positive())  # PPO clip ratio ε (§4.6: 0.2), > 0
  ppo_value_clip: float = setting(0.0, at_least(0.0))  # PureJaxRL's value clip (0 = plain squared error; ppo.py's
  # decision), ≥ 0
  ppo_gamma: float = setting(0.99, within(0, 1))  # PPO discount γ (§4.6: 0.99), in [0, 1]
  ppo_gae_lambda: float = setting(0.95, within(0, 1))  # GAE λ (§4.6: 0.95), in [0, 1]
  ppo_lr: float = setting(3e-4, positive())  # the leader's Adam learning rate (§4.6: 3e-4), > 0
  ppo_max_grad_norm: float = setting(0.5, positive())  # global-norm gradient clip (§4.6: 0.5), > 0
  ppo_vf_coef: float = setting(0.5, at_least(0.0))  # value-loss weight c_1 (PureJaxRL: 0.5; paper silent), ≥ 0
  ppo_ent_coef: float = setting(0.0, at_least(0.0))  # entropy-bonus weight c_2 (PureJaxRL: 0; paper silent), ≥ 0
  ppo_rollout: int = setting(16, at_least(1))  # rounds per rollout, i.e. between PPO updates (§4.6: 16), ≥ 1
  ppo_epochs: int = setting(4, at_least(1))  # PPO epochs per rollout (§4.6: 4), ≥ 1
  ppo_minibatches: int = setting(4, at_least(1))  # minibatches per epoch, dividing ppo_rollout (ppo.py: 4 of 4),
  # ≥ 1
  ppo_hidden: int = setting(128, at_least(1))  # hidden width of the actor–critic (§4.6: 128), ≥ 1
  follower: str = setting("exp3", one_of("exp3", "br", "logit"))  # the follower model: exp3 (Alg. 2, the main
  # row), br (eq. 15) or logit (eq. 17)
  rounding: str = setting("independent", one_of("independent", "dependent"))  # inclusion: independent
  # Bernoulli(π) (Alg. 1 line 6) or dependent rounding (eq. 4; |I_t| ≤ K)
  selection: str = setting("ppo", one_of("ppo", "uniform"))  # π from the PPO leader, or uniform π = K/N (ablation)
  freeze_beliefs: bool = setting(False, one_of(True, False))  # keep μ at the uniform prior μ_0 (ablation)
  slots: int = setting(0, at_least(0))  # S, clients trained per round at most, ≥ 0 and ≤ N; 0 = auto,
  # min(N, K + ⌈4√K⌉ + 4) (module docstring "Slots")
  proxy_rows: int = setting(512, at_least(1))  # rows of the proxy-validation set (module docstring), ≥ 1
  report_rows: int = setting(64, at_least(1))  # train rows on which a participant reports F_i(w_{t−1}) for eq. 13,
  # ≥ 1


@struct.dataclass
class FBSFLHyper:
  """The ``[fbsfl]`` numbers the compiled program reads as traced values (all sweepable)."""

  alpha: jax.Array  # [] α
  beta_max: jax.Array  # [] β_max
  t0: jax.Array  # [] int32 t_0
  rho: jax.Array  # [] ρ
  eps: jax.Array  # [] ε of p̃
  q: jax.Array  # [] q
  delta_q: jax.Array  # [] δ_q
  b0: jax.Array  # [] b_0
  b_max: jax.Array  # [] B_max
  delta: jax.Array  # [] δ
  gamma1: jax.Array  # [] γ_1
  gamma2: jax.Array  # [] γ_2
  lam_obs: jax.Array  # [] λ_obs
  exp3_gamma: jax.Array  # [] EXP3 γ
  exp3_eta: jax.Array  # [] EXP3 η
  ppo_clip: jax.Array  # [] PPO ε
  ppo_value_clip: jax.Array  # [] value clip
  ppo_gamma: jax.Array  # [] discount
  ppo_gae_lambda: jax.Array  # [] GAE λ
  ppo_lr: jax.Array  # [] Adam learning rate (read at init into the optimizer state)
  ppo_max_grad_norm: jax.Array  # [] gradient clip (read at init)
  ppo_vf_coef: jax.Array  # [] c_1
  ppo_ent_coef: jax.Array  # [] c_2


def inclusion_limit(config, num_clients: int) -> int:
  """K, the expected-inclusion limit of Π (eq. 3): ``participation.clients_per_round``; 0 (the platform's "every
  client") reads as K = N, Π the whole box [0, 1]^N (decision: so that the defaults run; a paper 002 experiment
  sets K, as configs/fbsfl.toml does)."""
  return config.participation.clients_per_round or num_clients


def _slots(settings, config, num_clients: int) -> int:
  return settings.slots or auto_slots(num_clients, inclusion_limit(config, num_clients))


def check_federation(name: str, config, num_clients: int) -> None:
  """FBS-FL needs ≥ 2 clients and S = ``fbsfl.slots`` ≤ N (K ≤ N is the registry's check).

  Raises:
    ConfigError: naming the setting to change.
  """
  from fedjax_sim.errors import ConfigError
  require_federation(name, num_clients)
  if config.fbsfl.slots > num_clients:
    raise ConfigError(f"fbsfl.slots = {config.fbsfl.slots} exceeds the federation's {num_clients} clients; set it "
                      f"to at most {num_clients} (0 = auto)")


def _validate(settings, config) -> None:
  from fedjax_sim.errors import ConfigError
  if settings.ppo_rollout % settings.ppo_minibatches:
    raise ConfigError(f"fbsfl.ppo_minibatches must divide fbsfl.ppo_rollout = {settings.ppo_rollout}, got "
                      f"{settings.ppo_minibatches}")


def _build(ctx: BuildContext) -> Algorithm:
  from fedjax_sim.engine.local import selection_plan, slot_lanes
  from fedjax_sim.tasks import task_for
  config, settings = ctx.config, ctx.settings
  lc = config.learner
  slots = _slots(settings, config, ctx.num_clients)
  plan = selection_plan(ctx.federation.n_train, slots, lc.batch_size, slots)  # up to S slot groups (docstring)
  loss_fn = task_for(config, ctx.federation).loss
  return fbsfl(ctx.model, ctx.client_update, loss_fn, settings,
               clients_per_round=inclusion_limit(config, ctx.num_clients), rounds=config.rounds, plan=plan,
               proxy=proxy_indices(ctx.federation.m_val, settings.proxy_rows), name=ctx.name,
               lanes=slot_lanes(config.participation.lanes))


CPU_OPTIONS = {"xla_cpu_multi_thread_eigen": False}
"""XLA:CPU compile options of every FBS-FL-family program: single-threaded Eigen, since five seeds vmapped hung
(every worker idle) with the scheduler off and Eigen multi-threaded in session 6; the scheduler itself is off
process-wide (``import fedjax_sim``), which is what stopped the session-14 hangs (fedjax_sim/_xla_flags.py)."""

PRESETS = {
    "fbsfl": {},  # FBS-FL–EXP3, the main row of Table 2 (every [fbsfl] number at its paper default)
    # Table 3: the follower models
    "fbsfl_br": {"fbsfl.follower": "br"},  # best response (eq. 15)
    "fbsfl_logit": {"fbsfl.follower": "logit"},  # logit response, λ_obs = 5 (eq. 17)
    # Tables 4 and 6: the strict cap
    "fbsfl_dependent": {"fbsfl.rounding": "dependent"},  # dependent rounding, |I_t| ≤ K (eq. 4)
    # Table 5: one component at a time
    "fbsfl_q0": {"fbsfl.q": 0.0},  # FedAvg weights in place of the q-fair ones (eq. 13 at q = 0)
    "fbsfl_q4": {"fbsfl.q": 4.0},
    "fbsfl_beta0": {"fbsfl.beta_max": 0.0},  # no participation regularizer in U_t (eq. 11)
    "fbsfl_beta2": {"fbsfl.beta_max": 2.0},
    "fbsfl_nobonus": {"fbsfl.b0": 0.0},  # no equity bonus in the offers (eq. 10)
    "fbsfl_frozen": {"fbsfl.freeze_beliefs": True},  # beliefs fixed at μ_0
    "fbsfl_uniform": {"fbsfl.selection": "uniform"},  # π = K/N in place of the PPO leader
}
"""FBS-FL and its ablations and variants (issue 12 item 5) as presets of one method family: the same code path with
other ``[fbsfl]`` values (a user's ``--set`` still applies after the preset). The numeric ones (q, β_max, b_0) are
traced, so ``--sweep fbsfl.q=0,2,4`` runs them in one compiled program instead."""

SPECS = (
    MethodSpec(methods=PRESETS, build=_build, section="fbsfl", settings=FBSFLConfig, hyper=FBSFLHyper,
               partial_participation=True, metrics=fbsfl_metrics, check_federation=check_federation,
               validate=_validate, reports=REPORTS, client_curves=True, cpu_options=CPU_OPTIONS),
)
