"""The baselines of paper 002 Table 2, all behind the same strategic layer (SPEC §4.3; issue 12 item 4).

Paper 002 §4.1: "the strategic layer applies uniformly to all evaluated methods: whenever any method includes a
client, the client receives the corresponding offer (... the flat fee r̄ of (19) for the baselines) and decides
whether to accept according to the same acceptance model, namely the EXP3 follower of Algorithm 2". One baseline
round is a composition of stages (STYLE §11), each stated where it acts:

1. the baseline's own **selection** gives z_t (:mod:`~fedjax_sim.algorithms.fbsfl.selection`): uniform with
   E|I_t| = K (FedAvg, FedProx, q-FFL, Ditto), Power-of-Choice, Oort;
2. every included client is offered r̄ = E_{μ_0}[κ] = 0.52 (eq. 19) and answers with FBS-FL's follower (the
   ``fbsfl.follower`` setting: EXP3 by default, or BR / logit); y = z·a; EXP3 learns from the answer
   (:func:`~fedjax_sim.algorithms.fbsfl.layer.answer`, the function FBS-FL's round calls);
3. only the participants train, in FBS-FL's S slots (participants first, fillers with no rows, drops beyond S;
   :func:`~fedjax_sim.algorithms.fbsfl.algorithm.participant_slots`), each having reported F_i(w_{t−1}) on
   ``fbsfl.report_rows`` of its train rows as FBS-FL's participants do;
4. the baseline's own **aggregation**: FedAvg's n-weighted mean, q-FFL's surrogate step, Power-of-Choice's plain
   mean; Ditto also trains each participant's personalized model;
5. the selector observes (Oort), and the round reports FBS-FL's metrics, so
   ``fbsfl_metrics`` reduces a baseline's history to the same Table 2 columns (Jain, KL, C_tot, |I_t|, A(T)).

Decisions (SPEC §4.3 leaves them open):

* **Settings.** The strategic settings are FBS-FL's: follower, rounding, slots and report rows are read from
  ``[fbsfl]``, and the follower's numbers (EXP3 γ, η, λ_obs, and δ, b_0, B_max of the offer cap) are traced from
  ``[fbsfl]`` too, so ``--set fbsfl.follower=br`` or ``--sweep fbsfl.exp3_eta=…`` moves every row of the table
  alike. The baselines' own settings are one section, ``[fbsfl_baselines]`` (:class:`BaselineConfig`), shared by
  the three families (one per local regularizer: none, FedProx's, Ditto's). A MethodSpec reads traced numbers
  from one section, so :class:`StrategicSpec` adds the ``[fbsfl]`` follower numbers to them.
* **EXP3's utility scale** is FBS-FL's offer cap r^p_max = κ^(M)(1 + δ) + b_0 B_max (2.2): the same follower,
  whose utility rescaling (Alg. 2 line 12) does not depend on which mechanism makes the offer.
* **Initialization**: ``split(key, 3)`` → model, types, unused, as FBS-FL's init: for a seed, every row of the
  table starts from the same w_0 and the same private types κ.
* **Slots**: Power-of-Choice and Oort include exactly K, so S = K (no drops); the uniform rules use FBS-FL's
  auto S.
* **Beliefs**: the baselines keep none; ``belief_mae`` reports the prior mean's error |0.52 − κ_i|.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedjax_sim.algorithms.base import Algorithm
from fedjax_sim.algorithms.fbsfl import algorithm as A
from fedjax_sim.algorithms.fbsfl import beliefs as B
from fedjax_sim.algorithms.fbsfl import economics as E
from fedjax_sim.algorithms.fbsfl import followers as F
from fedjax_sim.algorithms.fbsfl import layer as L
from fedjax_sim.algorithms.fbsfl import ppo
from fedjax_sim.algorithms.fbsfl import selection as S
from fedjax_sim.algorithms.spec import BuildContext, MethodSpec, as_traced
from fedjax_sim.algorithms.star import fedprox_regularizer, sq_dist
from fedjax_sim.engine.local import LocalTerm
from fedjax_sim.models import Model, model_size
from fedjax_sim.settings import at_least, setting, within

FLAT_FEE = L.FLAT_FEE
"""r̄ = Σ_m μ_0(m) κ^(m) = 0.52, the prior's mean threshold (paper 002 eq. 19), offered by every baseline."""

QFFL_EPS = 1e-10
"""Added to F_k before its powers, as Li et al.'s q-FFL code does (``np.float_power(loss + 1e-10, q)``)."""


# --- aggregation rules -----------------------------------------------------------------------------------------


def fedavg_weights(num_examples: jax.Array, trained: jax.Array) -> jax.Array:
  """α_i = n_i / Σ_{trained} n_j: FedAvg's n-weighted mean of the participants (McMahan et al. 2017, Alg. 1);
  all zeros when none trained (w unchanged, as FBS-FL's eq. 6). The q = 0 case of eq. 13, bit for bit."""
  return E.qfair_weights(num_examples, jnp.zeros(jnp.shape(num_examples), jnp.float32), trained, 0.0)


def mean_weights(trained: jax.Array) -> jax.Array:
  """α_i = 1/|trained|: the plain mean of Power-of-Choice (Cho et al. 2020, the update below Algorithm 1:
  w ← (1/m) Σ_{k ∈ S_t} w_k; sampling ∝ n_i already weights clients by size)."""
  return fedavg_weights(jnp.ones(jnp.shape(trained), jnp.float32), trained)


def qffl_weights(losses: jax.Array, sq_dists: jax.Array, trained: jax.Array, q, lr) -> jax.Array:
  """q-FFL's surrogate step (Li, Sanjabi, Beirami & Smith, ICLR 2020, q-FedAvg, Algorithm 2) as weights α.

  Li et al.'s update, with L = 1/lr: Δw_k = L(w − w̄_k), h_k = q F_k^{q−1}‖Δw_k‖² + L F_k^q and
  w ← w − Σ_k F_k^q Δw_k / Σ_k h_k. Checked against their code (``qffedavg.py``): the numerator is
  Σ_k F_k^q Δw_k (issue 12 writes ΣΔ_k with Δ_k = F_k^q Δw_k), and F_k gets + 1e-10. Since
  −F_k^q Δw_k = L F_k^q (w̄_k − w), the step is w + Σ_k α_k (w̄_k − w) with α_k = L F_k^q / Σ_j h_j (their sum is
  below 1: the surrogate's step is shorter than a mean). Finding, not tuned (issue 12 fixes L = 1/lr): with
  momentum SGD over E = 2 epochs ‖w − w̄_k‖² is large and h is dominated by q F^{q−1}‖Δw_k‖²; in a 3-round smoke
  run of configs/fbsfl_table2.toml the largest α_k was ≈ 0.004 (FedAvg's ≈ 0.4), so q-FFL moves w very slowly.

  Args:
    losses: ``[S]`` F_k(w), the participants' losses of w before training.
    sq_dists: ``[S]`` ‖w − w̄_k‖² (so ‖Δw_k‖² = L² ‖w − w̄_k‖²).
    trained: ``[S]`` bool, whose update is aggregated.
    q: q ≥ 0 (paper 002 §4.6: 2).
    lr: the round's local learning rate (L = 1/lr).

  Returns:
    ``[S]`` α, zeros where not trained, all zeros when none trained.
  """
  lip = 1.0 / lr
  f = jnp.where(trained, losses, 1.0) + QFFL_EPS
  fq = jnp.where(trained, jnp.power(f, q), 0.0)
  h = jnp.where(trained, q * jnp.power(f, q - 1.0) * lip ** 2 * sq_dists + lip * fq, 0.0)
  total = jnp.sum(h)
  return jnp.where(total > 0, lip * fq / jnp.where(total > 0, total, 1.0), 0.0)


def ditto_regularizer(term: LocalTerm) -> jax.Array:
  """Ditto's personalized objective term λ/2 ‖v_k − w^t‖² (Li, Hu, Beirami & Smith, ICML 2021, eq. 2 and
  Algorithm 1; paper 002 §4.6: λ = 0.1), toward ``term.shared``, the round's global model. With ``shared`` None
  (the global model's own local training, plain FedAvg) it adds nothing."""
  if term.shared is None:
    return jnp.zeros((), jnp.float32)
  return 0.5 * term.hyper.method.ditto_lambda * sq_dist(term.params, term.shared)


# --- state and the round ---------------------------------------------------------------------------------------


@struct.dataclass
class BaselineState:
  """What a baseline carries between rounds."""

  global_params: Any  # w_{t−1}
  followers: F.Exp3State  # [N, 2] EXP3 log-weights (unused by the BR and logit followers)
  kappa: jax.Array  # [N] private thresholds κ_i (read only by the followers)
  counts: jax.Array  # [N] cumulative participations Σ_{s<t} y_s
  proxy_loss: jax.Array  # [] L(w_{t−1}) on FBS-FL's proxy-validation set (for Δ_t and Figure 1)
  selector: Any = None  # the selection rule's memory (Oort's :class:`~.selection.OortState`), or None
  personal: Any = None  # Ditto: [N, ...] personalized models v_i, or None


class BaselineKeys(NamedTuple):
  """The round's independent key streams (STYLE §4), from ``split(key, 5)`` in this order."""

  select: jax.Array  # the selection rule's draws (and Power-of-Choice's loss queries)
  response: jax.Array  # the followers' actions
  report: jax.Array  # the rows on which participants report F_i(w_{t−1})
  train: jax.Array  # the global model's local training
  personal: jax.Array  # Ditto's personalized training


class Selection(NamedTuple):
  """A selection stage: ``init(N) -> memory``; ``include(key, memory, w, federation, t) -> (z [N], π [N],
  exploited [N])``; ``observe(memory, t, arrived [N], utility [N], exploited [N]) -> memory``; ``queries``: how many
  clients download w only to report a loss (bytes)."""

  init: Callable
  include: Callable
  observe: Callable
  queries: int = 0


def report_stats(apply_fn, loss_fn, params, rows, clients: jax.Array, keys: jax.Array, m: int) -> tuple:
  """``(mean [S], rms [S])`` of the per-example losses of ``params`` on the rows each client reports on: the rows
  and keys of :func:`~fedjax_sim.algorithms.fbsfl.algorithm.reported_losses` (its mean, and Oort's root mean
  square)."""
  pos, valid = jax.vmap(A.report_positions, in_axes=(0, 0, None))(keys, rows.n[clients], m)  # [S, m]
  index = jnp.where(valid, rows.start[clients][:, None] + pos, rows.x.shape[0] - 1)
  s = clients.shape[0]
  x = rows.x[index].reshape((s * m,) + rows.x.shape[1:])
  per = loss_fn(apply_fn(params, x, False, None)[0], rows.y[index].reshape((s * m,) + rows.y.shape[1:]))
  per = jnp.where(valid, per.reshape(s, m), 0.0)
  count = jnp.maximum(jnp.sum(valid, axis=1), 1)
  return jnp.sum(per, axis=1) / count, jnp.sqrt(jnp.sum(per * per, axis=1) / count)


def strategic_baseline(name: str, model: Model, client_update, loss_fn, strategic, *, selection: Selection,
                       aggregation: Callable, clients_per_round: int, plan: tuple, proxy: tuple,
                       personalized: bool = False, lanes: int = 0) -> Algorithm:
  """A Table 2 baseline behind paper 002's strategic layer (module docstring, steps 1–5).

  Args:
    name: the reported method name.
    model: the global model.
    client_update: local training (E epochs of the learner, the family's regularizer).
    loss_fn: the task's per-example loss.
    strategic: the ``[fbsfl]`` section (follower, report_rows).
    selection: the baseline's :class:`Selection`.
    aggregation: ``(hyper, t, n [S], F [S], sq_dists [S], trained [S]) -> α [S]``; w_t = w_{t−1} + Σ α_i Δw_i.
    clients_per_round: K.
    plan: :func:`~fedjax_sim.engine.local.selection_plan` for the S slots.
    proxy: ``(client [P], row [P])`` of the proxy-validation set (:func:`~.algorithm.proxy_indices`).
    personalized: Ditto: also train each participant's personalized model (prox term toward w_{t−1}), which is
      what is deployed.
    lanes: slots per vmapped training loop (:func:`~fedjax_sim.engine.local.slot_lanes`; 0: the plan's groups).

  Returns:
    An :class:`Algorithm`. Bytes: 2·|W|·4 per trained participant, plus |W|·4 per loss query.
  """
  from fedjax_sim.data.federation import with_train_rows
  from fedjax_sim.engine.local import train_selected

  k = int(clients_per_round)
  slots = sum(s for s, _ in plan)
  sent = model_size(model)
  apply_fn = model.apply
  proxy_c, proxy_j = (jnp.asarray(a) for a in proxy)

  def proxy_loss(params, federation):
    return A.mean_loss(apply_fn, loss_fn, params, federation.x_val[proxy_c, proxy_j],
                       federation.y_val[proxy_c, proxy_j]).astype(jnp.float32)

  def init(key, federation, hyper):
    n = federation.num_clients
    k_model, k_types, _ = jax.random.split(key, 3)  # FBS-FL's streams: the same w_0 and κ for a seed
    params = model.init(k_model)
    personal = None
    if personalized:  # v_i^0 = w^0 (Ditto's code copies the initial global model)
      personal = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), params)
    return BaselineState(global_params=params, followers=F.exp3_init(n), kappa=B.sample_types(k_types, n),
                         counts=jnp.zeros((n,), jnp.float32), proxy_loss=proxy_loss(params, federation),
                         selector=selection.init(n), personal=personal)

  def round_fn(key, state, federation, hyper, t):
    h = hyper.method
    n = federation.num_clients
    keys = BaselineKeys(*jax.random.split(key, 5))
    w = state.global_params
    # 1. the baseline's selection
    z, pi, exploited = selection.include(keys.select, state.selector, w, federation, t)
    # 2. the flat fee and the followers' answers; y = z · a
    r = jnp.full((n,), FLAT_FEE, jnp.float32)
    answers = L.answer(strategic.follower, keys.response, r, z, state.kappa, state.followers, h)
    accept, y = answers.accept, answers.y
    # 3. only the participants train (FBS-FL's slots), having reported F_i(w_{t−1})
    selected, trained = A.participant_slots(y, slots)
    n_train, rows = federation.n_train, federation.rows
    n_slot = jnp.zeros_like(n_train).at[selected].set(jnp.where(trained, n_train[selected], 0))
    busy = federation.replace(n_train=n_slot, rows=rows.replace(n=n_slot.astype(rows.n.dtype)))
    reported, rms = report_stats(apply_fn, loss_fn, w, rows, selected,
                                 jax.random.split(keys.report, n)[selected], strategic.report_rows)
    res = train_selected(client_update, keys.train, w, busy, selected, plan, shared=None if personalized else w,
                         hyper=hyper, t=t, params_stacked=False, lanes=lanes)
    # 4. the baseline's aggregation
    deltas = jax.tree_util.tree_map(lambda c, g: c - g[None], res.params, w)
    sq = sum(jnp.sum(jnp.square(d).reshape(d.shape[0], -1), axis=1) for d in jax.tree_util.tree_leaves(deltas))
    alpha = aggregation(hyper, t, n_train[selected], reported, sq, trained)
    w_new = E.aggregate(w, deltas, alpha)
    personal = state.personal
    if personalized:  # v_k ← E epochs on F_k(v) + λ/2‖v − w_{t−1}‖² from v_k (Ditto, Algorithm 1)
      mine = train_selected(client_update, keys.personal, personal, busy, selected, plan, shared=w, hyper=hyper,
                            t=t, params_stacked=True, lanes=lanes)

      def put(p, v):
        keep = trained.reshape((-1,) + (1,) * (v.ndim - 1))
        return p.at[selected].set(jnp.where(keep, v, p[selected]))

      personal = jax.tree_util.tree_map(put, personal, mine.params)
    # 5. selector, metrics (the followers learned in step 2)
    arrived = jnp.zeros((n,), bool).at[selected].set(trained)
    utility = jnp.zeros((n,), jnp.float32).at[selected].set(S.statistical_utility(n_train[selected], rms))
    selector = selection.observe(state.selector, t, arrived, utility, exploited)
    loss_now = proxy_loss(w_new, federation)
    progress = E.progress_signal(state.proxy_loss, loss_now)
    new_state = state.replace(global_params=w_new, followers=answers.followers, counts=state.counts + y,
                              proxy_loss=loss_now, selector=selector, personal=personal)
    prior = jnp.full((n,), FLAT_FEE, jnp.float32)
    metrics = A.round_metrics(res, selected, trained, alpha, y=y, z=z, accept=accept, r=r, pi=pi, kappa=state.kappa,
                              posterior=prior, k=k, sent=sent, progress=progress, reward=jnp.zeros((), jnp.float32),
                              proxy_loss=loss_now, info=ppo.LossInfo.zeros())
    if selection.queries:
      metrics = metrics.replace(bytes=metrics.bytes + jnp.float32(selection.queries * sent * 4))
    return new_state, metrics

  deployed = (lambda s: (s.personal, True)) if personalized else (lambda s: (s.global_params, False))
  return Algorithm(name=name, init=init, round=round_fn, deployed=deployed, prepare=with_train_rows,
                   sent_params=sent)


# --- the selection stages ----------------------------------------------------------------------------------------


def _no_memory(num_clients):
  return None


def _no_observe(memory, t, arrived, utility, exploited):
  return memory


def uniform_selection(k: int, rounding: str) -> Selection:
  """π_i = K/N (:func:`~.selection.uniform_inclusion`; ``fbsfl.rounding``): FedAvg, FedProx, q-FFL, Ditto."""

  def include(key, memory, w, federation, t):
    z, pi = S.uniform_inclusion(key, federation.num_clients, k, rounding)
    return z, pi, z

  return Selection(_no_memory, include, _no_observe)


def poc_selection(k: int, d: int, apply_fn, loss_fn, report_rows: int) -> Selection:
  """Power-of-Choice (Cho, Wang & Joshi 2020, pow-d): d candidates ∝ n_i without replacement
  (:func:`~.selection.proportional_sample`) report F_i(w_{t−1}); the K of highest loss are included
  (:func:`~.selection.poc_include`). With d = K this is sampling K clients ∝ n_i without replacement.

  Decision: a candidate's loss is the mean over ``fbsfl.report_rows`` of its train rows, as FBS-FL's reported
  losses (Cho et al.'s cpow-d likewise estimates it on a mini-batch); each query downloads w (bytes |W|·4).
  """

  def include(key, memory, w, federation, t):
    n = federation.num_clients
    k_cand, k_rows = jax.random.split(key)
    candidates = S.proportional_sample(k_cand, federation.n_train.astype(jnp.float32), d)
    losses, _ = report_stats(apply_fn, loss_fn, w, federation.rows, candidates,
                             jax.random.split(k_rows, n)[candidates], report_rows)
    z = S.poc_include(candidates, losses, k, n)
    return z, z.astype(jnp.float32), z

  return Selection(_no_memory, include, _no_observe, queries=d)


def oort_selection(k: int, exploration: float, pacer: int, durations) -> Selection:
  """Oort (Lai et al. 2021) as restated in :func:`~.selection.oort_include` (paper 002 §4.6: exploration 0.1,
  pacer interval 10). The statistical utility of an arrived participant is U_i = n_i · RMS of its reported
  per-example losses of w_{t−1} (decision: Oort sums the losses of the samples a client trained on in the round;
  here the E epochs see all n_i rows and the RMS is estimated on the ``fbsfl.report_rows`` FBS-FL's participants
  report on). Clients included but declining stay unexplored or stale: their utility is not observed."""
  durations = jnp.asarray(durations, jnp.float32)

  def include(key, memory, w, federation, t):
    z, exploited = S.oort_include(key, memory, t, k, exploration, durations)
    return z, z.astype(jnp.float32), exploited

  def observe(memory, t, arrived, utility, exploited):
    return S.oort_observe(memory, t, arrived, utility, exploited, pacer)

  return Selection(S.oort_init, include, observe)


# --- declaration: the [fbsfl_baselines] section, traced numbers, families ---------------------------------------


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
  """The ``[fbsfl_baselines]`` section: the Table 2 baselines' own settings (paper 002 §4.6). Their strategic
  settings are FBS-FL's ``[fbsfl]`` (module docstring). μ, q and λ are traced; the others shape the program."""

  mu: float = setting(0.01, at_least(0.0))  # FedProx's proximal coefficient μ (paper 002 §4.6: 0.01), ≥ 0
  qffl_q: float = setting(2.0, at_least(0.0))  # q-FFL's q (paper 002 §4.6: 2; 0 = FedAvg-like), ≥ 0
  ditto_lambda: float = setting(0.1, at_least(0.0))  # Ditto's λ (paper 002 §4.6: 0.1), ≥ 0
  poc_candidates: int = setting(10, at_least(1))  # Power-of-Choice's candidate pool d (paper 002 §4.6: 10), ≥ 1;
  # min(d, N) are drawn, and it must be ≥ K
  oort_exploration: float = setting(0.1, within(0, 1))  # Oort's exploration fraction ε (paper 002 §4.6: 0.1,
  # fixed), in [0, 1]
  oort_pacer: int = setting(10, at_least(1))  # Oort's pacer interval W in rounds (paper 002 §4.6: 10), ≥ 1


@struct.dataclass
class BaselineOwnHyper:
  """The ``[fbsfl_baselines]`` numbers read as traced values (``MethodSpec.hyper``)."""

  mu: jax.Array  # [] FedProx μ
  qffl_q: jax.Array  # [] q-FFL q
  ditto_lambda: jax.Array  # [] Ditto λ


FOLLOWER_NUMBERS = ("exp3_gamma", "exp3_eta", "lam_obs", "delta", "b0", "b_max")
"""The ``[fbsfl]`` numbers the strategic layer reads: the followers' (EXP3 γ, η; logit λ_obs) and the offer cap's."""


@struct.dataclass
class BaselineHyper:
  """What a baseline round reads as ``hyper.method``: the follower's ``[fbsfl]`` numbers and the baseline's own."""

  exp3_gamma: jax.Array  # [] EXP3 γ (fbsfl)
  exp3_eta: jax.Array  # [] EXP3 η (fbsfl)
  lam_obs: jax.Array  # [] the logit follower's slope (fbsfl)
  delta: jax.Array  # [] δ of the offer cap (fbsfl)
  b0: jax.Array  # [] b_0 of the offer cap (fbsfl)
  b_max: jax.Array  # [] B_max of the offer cap (fbsfl)
  mu: jax.Array  # [] FedProx μ (fedprox_regularizer reads ``hyper.method.mu``)
  qffl_q: jax.Array  # [] q-FFL q
  ditto_lambda: jax.Array  # [] Ditto λ


class StrategicSpec(MethodSpec):
  """A MethodSpec whose traced numbers also hold the ``[fbsfl]`` follower numbers (:data:`FOLLOWER_NUMBERS`):
  ``hyper`` (its own section's, checked as usual) plus those, so they are traced and sweepable for the baselines
  exactly as for FBS-FL (module docstring, "Settings")."""

  @property
  def sweepable(self) -> tuple:
    return tuple(f"fbsfl.{f}" for f in FOLLOWER_NUMBERS) + super().sweepable

  def traced(self, config):
    own = super().traced(config)
    shared = {f: as_traced(getattr(config.fbsfl, f)) for f in FOLLOWER_NUMBERS}
    return BaselineHyper(**shared, **{f.name: getattr(own, f.name) for f in dataclasses.fields(own)})


def _slots(config, num_clients: int, exact: bool) -> int:
  """S: ``fbsfl.slots``, else K for rules that include exactly K (no drops), else FBS-FL's auto S."""
  k = A.inclusion_limit(config, num_clients)
  return config.fbsfl.slots or (k if exact else A.auto_slots(num_clients, k))


def check_federation(name: str, config, num_clients: int) -> None:
  """FBS-FL's checks (≥ 2 clients, ``fbsfl.slots`` ≤ N), and for Power-of-Choice min(d, N) ≥ K.

  Raises:
    ConfigError: naming the setting to change.
  """
  from fedjax_sim.errors import ConfigError
  A.check_federation(name, config, num_clients)
  if name == "fbsfl_poc":
    d, k = min(config.fbsfl_baselines.poc_candidates, num_clients), A.inclusion_limit(config, num_clients)
    if d < k:
      raise ConfigError(f"fbsfl_poc includes the K = {k} highest-loss of fbsfl_baselines.poc_candidates = {d} "
                        f"candidates; raise it to at least {k} (or lower participation.clients_per_round)")


def _aggregation(name: str, task) -> Callable:
  from fedjax_sim.tasks import learning_rate_at
  if name == "fbsfl_qffl":
    def qffl(hyper, t, n, losses, sq, trained):
      lr = learning_rate_at(task.schedule, hyper.learner.learning_rate, hyper.learner.final_learning_rate, t,
                            task.rounds)  # the round's local learning rate: L = 1/lr (Li et al.'s code)
      return qffl_weights(losses, sq, trained, hyper.method.qffl_q, lr)
    return qffl
  if name == "fbsfl_poc":
    return lambda hyper, t, n, losses, sq, trained: mean_weights(trained)
  return lambda hyper, t, n, losses, sq, trained: fedavg_weights(n, trained)


def _build(ctx: BuildContext) -> Algorithm:
  from fedjax_sim.engine.local import selection_plan, slot_lanes
  from fedjax_sim.tasks import task_for
  config, own, name = ctx.config, ctx.settings, ctx.name
  strategic, lc, n = config.fbsfl, config.learner, ctx.num_clients
  n_train = np.asarray(ctx.federation.n_train)
  k = A.inclusion_limit(config, n)
  task = task_for(config, ctx.federation)
  if name == "fbsfl_poc":
    selection = poc_selection(k, min(own.poc_candidates, n), ctx.model.apply, task.loss, strategic.report_rows)
  elif name == "fbsfl_oort":
    steps = lc.local_epochs * np.maximum(1, -(-n_train // lc.batch_size))  # E⌈n_i/B⌉: the duration proxy
    selection = oort_selection(k, own.oort_exploration, own.oort_pacer, steps)
  else:
    selection = uniform_selection(k, strategic.rounding)
  slots = _slots(config, n, exact=name in ("fbsfl_poc", "fbsfl_oort"))
  plan = selection_plan(n_train, slots, lc.batch_size, slots)  # up to S slot groups, as FBS-FL's
  return strategic_baseline(name, ctx.model, ctx.client_update, task.loss, strategic, selection=selection,
                            aggregation=_aggregation(name, task), clients_per_round=k, plan=plan,
                            proxy=A.proxy_indices(ctx.federation.m_val, strategic.proxy_rows),
                            personalized=name == "fbsfl_ditto", lanes=slot_lanes(config.participation.lanes))


def _spec(methods, regularizer: Optional[Callable] = None) -> StrategicSpec:
  return StrategicSpec(methods={m: {} for m in methods}, build=_build, section="fbsfl_baselines",
                       settings=BaselineConfig, hyper=BaselineOwnHyper, regularizer=regularizer,
                       partial_participation=True, metrics=A.fbsfl_metrics, check_federation=check_federation,
                       client_curves=True, cpu_options=A.CPU_OPTIONS)


SPECS = (
    _spec(("fbsfl_fedavg", "fbsfl_qffl", "fbsfl_poc", "fbsfl_oort")),  # plain local training
    _spec(("fbsfl_fedprox",), fedprox_regularizer),  # + μ/2‖θ − w_{t−1}‖² (Li et al. 2020)
    _spec(("fbsfl_ditto",), ditto_regularizer),  # the personalized models' λ/2‖v − w_{t−1}‖² (Li et al. 2021)
)
