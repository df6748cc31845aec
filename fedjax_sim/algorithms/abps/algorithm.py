"""One ABPS round as a pure state transition (paper 000 Algorithm 1; SPEC §3.2), and its extensions.

Extensions (SPEC §3.3): head personalization (the last ``head_layers`` layers stay
local and are neither averaged nor sent), a bfloat16 wire format (what is sent
passes a bf16 round trip; 2 bytes per parameter are counted), κ, momentum on
each center's aggregation delta, and early stopping on mean validation AUROC
inside the compiled program (later rounds are no-ops; the best-validation
models are deployed). ABPS-X composes all of them (SPEC §3.3).

Beliefs live on candidate pools (:mod:`.pool`; issue 4): ``[C, M]`` with M = C − 1
by default (the paper's table) or a fixed M (``pool_size``) so that memory grows
as C·M at 100,000 centers. With M < C − 1, a center keeps beliefs only about its
pool: credits for partners outside it are not stored, and its UCB on a proposer
outside it is the prior's (:func:`.topology.receiver_acceptance`).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms import early_stop
from fedjax_sim.algorithms.abps import pool as pools
from fedjax_sim.algorithms.abps import posterior, shapley, topology
from fedjax_sim.algorithms.base import (Algorithm, RoundMetrics, broadcast_clients, nonfinite_client,
                                        require_federation)
from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.engine.local import local_train
from fedjax_sim.metrics import auroc, mean_defined, p2p_round_bytes
from fedjax_sim.models import Model, param_template
from fedjax_sim.models.mlp import head_mask, wire_format
from fedjax_sim.report import table1_report
from fedjax_sim.settings import at_least, one_of, positive, setting, within


@dataclasses.dataclass(frozen=True)
class ABPSConfig:
  """The ``[abps]`` section (paper 000 §4, Algorithm 1; SPEC §3.2). Method presets (abps_p, abps_x, ...) set some
  of these first; ``--set abps.FIELD=...`` is applied after the preset."""

  kappa: int = setting(3, at_least(1))  # κ, the most partners per center, ≥ 1; at most C − 1 and, with pools,
  # at most pool_size
  epsilon: float = setting(0.1, within(0, 1))  # ε-greedy swap probability, in [0, 1]
  gamma: float = setting(1.4142135623730951, within(0, 100))  # UCB exploration weight γ = √2 (SPEC §3.2 step 3),
  # in [0, 100] (see check_settings)
  tau_acc: float = setting(0.5, within(0, 1), note="a threshold on the receiver's belief, a probability")
  # acceptance threshold τ_acc on the receiver's UCB, in [0, 1] (see check_settings)
  alpha0: float = setting(1.0, positive())  # Beta prior α0, finite > 0
  beta0: float = setting(1.0, positive())  # Beta prior β0, finite > 0
  phi_min: float = setting(-0.1)  # Shapley clip range lower end (eq. 5), finite, < phi_max
  phi_max: float = setting(0.1)  # Shapley clip range upper end (eq. 5), finite, > phi_min
  goal: str = setting("none", one_of("none", "homogeneity", "diversity", "alignment"))  # goal-aware filter
  metadata: str = setting("base", one_of("base", "goal"))  # metadata vector: base (3-dim) or goal (15-dim)
  keep_fraction: float = setting(0.25, within(0, 1, open_lo=True))  # fraction of ordered pairs the goal filter
  # keeps (τ_sim calibration), in (0, 1]
  pool_size: int = setting(0, at_least(0))  # candidate pool size M per center, ≥ 0 (0 = every other center, the
  # paper's C × C beliefs)
  head_layers: int = setting(0, one_of(0, 1, 2))  # personalized head layers kept local: 0, 1 or 2
  # (≤ len(learner.hidden))
  wire: str = setting("fp32", one_of("fp32", "bf16"))  # wire format of sent parameters: fp32 or bf16
  momentum: float = setting(0.0, within(0, 1, open_hi=True))  # β of the momentum on each center's aggregation
  # delta (ABPS-X: 0.5), in [0, 1)
  early_stopping_patience: int = setting(0, at_least(0))  # rounds without a better mean val AUROC before
  # stopping, ≥ 0 (0 = off)
  exact_shapley_max: int = setting(5, within(0, 10), note="exact Shapley evaluates 2^κ coalitions")
  # exact Shapley (2^|P_i| coalitions) for a center with |P_i| ≤ this, else truncated Monte Carlo, per center
  # (SPEC §3.2 step 7); in [0, 10]
  tmc_permutations: int = setting(8, within(1, 256))  # B, truncated Monte Carlo permutations, in [1, 256]


@struct.dataclass
class ABPSHyper:
  """ABPS's traced numbers (ranges: :class:`ABPSConfig`); one compiled program serves any values."""

  kappa: jax.Array  # [] int32 κ, ≤ the static slot count ``ABPSStatic.kappa_max``
  epsilon: jax.Array  # [] ε-greedy swap probability
  gamma: jax.Array  # [] UCB exploration weight γ
  tau_acc: jax.Array  # [] acceptance threshold τ_acc
  alpha0: jax.Array  # [] Beta prior α0
  beta0: jax.Array  # [] Beta prior β0
  phi_min: jax.Array  # [] Shapley clip lower end
  phi_max: jax.Array  # [] Shapley clip upper end
  momentum: jax.Array  # [] momentum β on the aggregation delta


@dataclasses.dataclass(frozen=True)
class ABPSStatic:
  """Settings that fix shapes or program structure (closed over, not traced)."""

  kappa_max: int = 3  # partner slots per center; the traced κ may be smaller
  goal: str = "none"  # goal-aware filter: none, homogeneity, diversity, alignment
  metadata: str = "base"  # "base" (3-dim) or "goal" (15-dim) metadata vectors
  keep_fraction: float = 0.25  # fraction of ordered pairs the goal filter keeps
  pool_size: int = 0  # candidate pool size M per center (0 = every other center, the paper's C × C beliefs)
  head_layers: int = 0  # personalization: 0 (none), 1 (last layer), 2 (last two layers)
  wire_bf16: bool = False  # bfloat16 wire format
  early_stopping_patience: int = 0  # 0 = off; else stop after this many rounds without a better mean val AUROC
  exact_shapley_max: int = 5  # exact Shapley for a center with |P_i| ≤ this, else truncated Monte Carlo
  tmc_permutations: int = 8  # B, permutations of truncated Monte Carlo Shapley
  tmc_tolerance: float = 0.0  # TMC truncation tolerance on |U(P) − U(prefix)|
  momentum: bool = True  # the momentum stage is in the program; False only when β = 0 (see ``abps``)


@struct.dataclass
class ABPSState:
  """A round's carry. Models are flat ``[C, P]`` rows in ``ravel_pytree`` order (``unravel`` in :func:`abps`
  gives the pytree): the round aggregates, sends and scores θ flat anyway. Issue 11: with a pytree carry XLA:CPU
  fused the momentum step into the early-stopping and freeze selects once per parameter leaf, each kernel
  repeating the aggregate's arithmetic (18 kernels, 0.85 MB of ABPS-X's 5.3 MB of LLVM IR; flat: 12 kernels,
  0.22 MB); the outputs are bitwise those of the pytree carry. Local training reads the unraveled view."""

  params: jax.Array  # [C, P] each center's flat model θ_i
  velocity: jax.Array  # [C, P] momentum buffer v_i on the aggregation delta (zeros when momentum = 0)
  alpha: jax.Array  # [C, M] Beta α of i's belief about its pool member pool.index[i, m]
  beta: jax.Array  # [C, M] Beta β of i's belief about pool.index[i, m]
  pulls: jax.Array  # [C, M] n_{i→j}: rounds in which i observed pool.index[i, m]'s Shapley credit
  pool: pools.CandidatePool  # [C, M] fixed candidate pools; pool.valid = goal-filtered C_i
  early: early_stop.EarlyStop  # best-validation flat models [C, P] and the stopping state


def _unravel(template):
  """``flat [P] -> params`` for a parameter template, in ``ravel_pytree`` order."""
  return ravel_pytree(jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), template))[1]


def stacked_models(model: Model, flat: jax.Array):
  """The ``[C, ...]`` parameter pytree of flat ``[C, P]`` models (:class:`ABPSState`'s ``params``, ``velocity``
  and best models), in ``ravel_pytree`` order of ``model``'s parameters."""
  return jax.vmap(_unravel(param_template(model)))(flat)


def abps(model: Model, client_update, static: ABPSStatic, name: str = "abps") -> Algorithm:
  """Builds ABPS with the given structural settings; numeric ones come traced in ``hyper``.

  ``hyper.method`` is an :class:`ABPSHyper` (κ, ε, γ, τ_acc, α0, β0, the clip
  range and β, traced: a sweep runs them as one program).

  Momentum (ABPS-X, β = ``abps_momentum``; SPEC §3.3): a center that aggregated
  this round steps v_i ← β v_i + (agg_i − θ_i); θ_i ← θ_i + v_i, where θ_i is its
  model after local training (step 1) and agg_i its aggregate (step 6): the
  momentum acts on the aggregation delta alone, as SPEC §3.3 writes it, not on
  the whole round's change (local training is not accelerated). This differs from
  FedAvg-X's server momentum (:func:`fedjax_sim.algorithms.star.personalized_fedavg`),
  whose delta is the whole round's, because a star server's model does not train:
  its aggregation delta and its round delta are one thing.
  Decision (issue 9, item 13): a resting center (P_i = ∅) skips the momentum
  step: its θ_i is its local update (θ_i + (agg_i − θ_i) with agg_i the n-weighted
  mean of θ_i alone, θ_i up to float rounding) and its v_i is kept unchanged for
  its next aggregation. Algorithm 1 aggregates only centers with P_i ≠ ∅ (line 22)
  and a resting center "exchanges nothing this round" (SPEC §3.2 step 5, Lemma 1;
  paper 000 §4.3: "no parameters are exchanged this round"); applying its
  leftover βv_i would move its model by what earlier partners sent, and decaying
  v_i without applying it is a rule neither paper 000 nor SPEC states.
  ``static.momentum = False`` builds the round without the momentum stage; the
  registry does so when ``abps.momentum`` is 0 (and not swept above 0), and
  ``hyper.method.momentum`` must then be 0. It keeps the arithmetic of the rows run
  before issue 9, θ_i + (0·v_i + (agg_i − θ_i)): the same rule as the stage at
  β = 0, and bitwise the same compiled program (the stage's masks change no value
  at β = 0 but change XLA's fusion, and so the float rounding).

  Shapley credit (step 7): exact for a center with |P_i| ≤ ``exact_shapley_max``,
  truncated Monte Carlo for the others, per center (:func:`.shapley.credit_coalitions`);
  with κ_max ≤ ``exact_shapley_max`` every center is exact.
  """
  template = param_template(model)
  unravel = _unravel(template)
  is_head, _ = ravel_pytree(jax.tree_util.tree_map(
      lambda h, s: jnp.full(s.shape, h), head_mask(template, static.head_layers), template))
  body = ~np.asarray(is_head, bool)  # [P] static: which entries are sent and averaged
  sent_params = int(body.sum())
  k = static.kappa_max
  wire, bytes_per_param = wire_format(static.wire_bf16)

  def init(key, federation, hyper):
    c = federation.num_clients
    params = broadcast_clients(ravel_pytree(model.init(key))[0], c)  # [C, P]
    meta = federation.meta_goal if static.metadata == "goal" else federation.meta_base
    # The pool stream is folded off the init key, so model.init(key) is what it was before pools.
    pool = pools.build_pool(jax.random.fold_in(key, 1), meta, static.goal, static.keep_fraction, static.pool_size)
    zeros = jnp.zeros(pool.index.shape, jnp.float32)  # [C, M]
    return ABPSState(
        params=params, velocity=jnp.zeros_like(params),
        alpha=zeros + hyper.method.alpha0, beta=zeros + hyper.method.beta0, pulls=zeros, pool=pool,
        early=early_stop.init(params, static.early_stopping_patience))

  def val_auroc(flat_params, x, y, m):
    """AUROC of one flat model on one center's validation split."""
    return auroc(model.apply(unravel(flat_params), x, False, None)[0], y, m)

  def round_fn(key, state: ABPSState, federation, hyper, t):
    k_train, k_topo, k_shap = jax.random.split(key, 3)
    c = federation.num_clients
    n = federation.n_train.astype(jnp.float32)

    # 1. Local training of every center's model.
    res = local_train(client_update, k_train, jax.vmap(unravel)(state.params), federation, hyper=hyper, t=t)
    theta = jax.vmap(lambda p: ravel_pytree(p)[0])(res.params)  # [C, P]

    # 2–5. UCB ranking over the goal-filtered candidates of each pool, then propose–reject.
    ucb = posterior.ucb_scores(state.alpha, state.beta, state.pulls, t, hyper.method.gamma)  # [C, M]
    ucb_prior = posterior.ucb_scores(hyper.method.alpha0, hyper.method.beta0, 0.0, t, hyper.method.gamma)
    kappa = jnp.minimum(hyper.method.kappa, k)
    partners = topology.propose_reject(k_topo, ucb, state.pool, kappa, hyper.method.tau_acc, hyper.method.epsilon,
                                       ucb_prior, k)
    idx, valid = partners.index, partners.valid  # [C, k]

    # 6–7. Aggregates of θ_i with every coalition S ⊆ P_i (n-weighted; body only; wire format),
    # and their validation AUROC U_i(S).
    # Exact Shapley for |P_i| ≤ exact_shapley_max, else truncated Monte Carlo, per center (SPEC §3.2 step 7).
    masks, perms = shapley.credit_coalitions(k_shap, valid, static.exact_shapley_max,
                                             static.tmc_permutations)  # [C, S, k]
    w = (masks & valid[:, None, :]).astype(jnp.float32) * n[idx][:, None, :]  # [C, S, k]
    sent = wire(theta[idx])  # [C, k, P] what partners send
    num = n[:, None, None] * theta[:, None, :] + jnp.einsum("csk,ckp->csp", w, sent)
    agg = num / (n[:, None, None] + w.sum(-1, keepdims=True))
    agg = jnp.where(body[None, None, :], agg, theta[:, None, :])  # heads stay local
    utility = jax.vmap(jax.vmap(val_auroc, in_axes=(0, None, None, None)))(
        agg, federation.x_val, federation.y_val, federation.m_val)  # [C, S]
    # Decision: a one-class validation split leaves U undefined; it then credits every partner φ = 0.
    utility = jnp.where(jnp.isnan(utility), 0.5, utility)
    phi = shapley.shapley_credit(utility, perms, valid, static.exact_shapley_max, static.tmc_tolerance)  # [C, k]
    new_flat = agg[:, shapley.full_coalition(k, static.exact_shapley_max), :]  # θ_i with all of P_i

    # 8. Clipped Beta update on the observed partners that are in the observer's pool
    # (a partner outside it leaves no belief to update; see the module docstring).
    phi_bar = posterior.clip_utility(phi, hyper.method.phi_min, hyper.method.phi_max)
    rows = jnp.arange(c)[:, None]
    kept = valid & (partners.pool_slot >= 0)
    at = jnp.where(kept, partners.pool_slot, state.alpha.shape[1])  # out of range: dropped
    observed = jnp.zeros(state.alpha.shape, bool).at[rows, at].set(kept, mode="drop")
    credit = jnp.zeros(state.alpha.shape).at[rows, at].add(jnp.where(kept, phi_bar, 0.0), mode="drop")
    alpha, beta, pulls = posterior.beta_update(state.alpha, state.beta, state.pulls, credit, observed)

    # Momentum on the aggregation delta (ABPS-X): v ← βv + (agg − θ); θ ← θ + v, for a center that
    # aggregated. A resting center keeps v and its local model (see the ``abps`` docstring).
    vel = state.velocity
    step = hyper.method.momentum * vel + (new_flat - theta)
    if static.momentum:
      rest = (partners.degree == 0)[:, None]
      new_flat = theta + jnp.where(rest, new_flat - theta, step)  # resting: agg − θ, agg = θ up to rounding
      vel = jnp.where(rest, vel, step)
    else:  # built without the stage (β = 0): the arithmetic of the rows run before issue 9, bitwise
      new_flat = theta + step
      vel = step
    params, velocity = new_flat, vel

    # Early stopping on mean validation AUROC (SPEC §3.3): track the best models.
    val, _ = mean_defined(jax.vmap(val_auroc)(new_flat, federation.x_val, federation.y_val, federation.m_val))
    early = early_stop.update(state.early, params, val, static.early_stopping_patience)

    deg = partners.degree
    new_state = ABPSState(params=params, velocity=velocity, alpha=alpha, beta=beta, pulls=pulls,
                          pool=state.pool, early=early)
    metrics = RoundMetrics(
        bytes=jnp.asarray(p2p_round_bytes(deg.sum() / 2, sent_params, bytes_per_param), jnp.float32),
        train_loss=jnp.mean(res.loss), rest_fraction=jnp.mean(deg == 0), mean_partners=jnp.mean(deg),
        active=jnp.asarray(1.0), nonfinite_client=nonfinite_client(res.loss, res.params))
    # After early stopping, rounds are no-ops: no training, no bytes (masks, not Python branches).
    return early_stop.freeze_if_stopped(state.early.stopped, new_state, state, metrics)

  def deployed(state):
    flat = state.early.best_params if static.early_stopping_patience > 0 else state.params
    return jax.vmap(unravel)(flat), True

  return Algorithm(name=name, init=init, round=round_fn, deployed=deployed, sent_params=sent_params)


def check_federation(name: str, config, num_clients: int) -> None:
  """Refuses a federation ABPS cannot run on as configured (paper 000 Alg. 1; SPEC §3.2 step 5).

  Each center takes up to κ partners among the other C − 1 centers, or among
  its M = ``abps.pool_size`` pool members when pools are on, so C ≥ κ + 1 and
  κ ≤ M. Decision (issue 9): the propose–reject walk would otherwise cap κ at
  the pool silently, a bandwidth the user did not ask for, and slot arrays sized
  by an absurd κ would not fit in memory; both are refused before compiling.

  Raises:
    ConfigError: fewer than 2 centers, κ ≥ C, or κ > ``abps.pool_size`` > 0.
  """
  from fedjax_sim.errors import ConfigError
  a, c = config.abps, num_clients
  require_federation(name, c)
  if a.kappa > c - 1:
    raise ConfigError(f"{name}: abps.kappa = {a.kappa} partners per center needs at least κ + 1 = {a.kappa + 1} "
                      f"centers, but the federation has {c}, so a center has at most {c - 1} possible partners; "
                      f"set abps.kappa to at most {c - 1}")
  if 0 < a.pool_size < a.kappa:
    raise ConfigError(f"{name}: abps.kappa = {a.kappa} exceeds abps.pool_size = {a.pool_size}: a center takes "
                      f"partners only from its pool; lower abps.kappa or raise abps.pool_size")


def check_settings(a: ABPSConfig, config) -> None:
  """Ranges that involve two fields or another section.

  Decision (issue 9): ``abps.tau_acc`` ∈ [0, 1]. τ_acc thresholds the receiver's
  belief about a success probability; the UCB is at least the posterior mean,
  which lies in (0, 1), so τ_acc = 0 accepts every proposer. Above 1 the
  threshold could be met only through the exploration bonus (acceptance would
  reward how rarely a peer was seen, not its credit), and with γ = 0 it rests
  every center. ``abps.gamma`` ∈ [0, 100]: at γ = 100 the bonus already outweighs
  any posterior mean for far more rounds than a run has; a larger γ is a typo.
  """
  from fedjax_sim.errors import ConfigError
  if not a.phi_max > a.phi_min:
    raise ConfigError(f"abps.phi_max must be greater than abps.phi_min = {a.phi_min!r}, got {a.phi_max!r}")
  if a.head_layers > len(config.learner.hidden):
    raise ConfigError(f"abps.head_layers must be 0, 1 or 2 (and at most the number of hidden layers), "
                      f"got {a.head_layers!r}")


def build(ctx: BuildContext) -> Algorithm:
  """ABPS under ``ctx.settings`` (structural fields closed over, numeric ones traced in ``hyper.method``)."""
  a = ctx.settings
  static = ABPSStatic(kappa_max=a.kappa, goal=a.goal, metadata=a.metadata, keep_fraction=a.keep_fraction,
                      pool_size=a.pool_size, head_layers=a.head_layers, wire_bf16=a.wire == "bf16",
                      early_stopping_patience=a.early_stopping_patience, exact_shapley_max=a.exact_shapley_max,
                      tmc_permutations=a.tmc_permutations, momentum=a.momentum > 0)
  return abps(ctx.model, ctx.client_update, static, name=ctx.name)


# ABPS rows of paper 000 Table 1 (SPEC §3.3) as presets over the ``abps`` section.
_PQ = {"abps.head_layers": 1, "abps.wire": "bf16"}
_PQK1 = {**_PQ, "abps.kappa": 1}
PRESETS = {
    "abps": {},
    "abps_p": {"abps.head_layers": 1},
    "abps_q": {"abps.wire": "bf16"},
    "abps_pq_k1": _PQK1,
    "abps_pq_k1_hom": {**_PQK1, "abps.goal": "homogeneity", "abps.metadata": "goal"},
    "abps_pq_k1_div": {**_PQK1, "abps.goal": "diversity", "abps.metadata": "goal"},
    "abps_pq_k1_ali": {**_PQK1, "abps.goal": "alignment", "abps.metadata": "goal"},
    "abps_x": {"rounds": 100, "reference_rounds": 50, "abps.kappa": 1, "abps.wire": "bf16", "abps.head_layers": 2,
               "abps.goal": "homogeneity", "abps.metadata": "goal", "abps.momentum": 0.5,
               "abps.early_stopping_patience": 10},
}

# κ sizes the partner slots and β > 0 builds the momentum stage: a sweep builds the program for the largest value.
SPECS = (MethodSpec(methods=PRESETS, build=build, section="abps", settings=ABPSConfig, hyper=ABPSHyper,
                    static_max=("kappa", "momentum"), check_federation=check_federation, binary_only=True,
                    validate=check_settings, reports={"table1": table1_report}),)  # paper 000 Table 1, Fig. 3
