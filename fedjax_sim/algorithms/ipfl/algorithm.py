"""The iPFL model market as a declared method ``ipfl`` (paper 003 Box 1–2, eqs. 3–13; SPEC §5; issue 13).

One round t (1-based), every client at once inside the compiled program (no Python loop over clients or rounds;
the platform scans the rounds and vmaps the seeds), built from the tested pieces of :mod:`.market`:

1. **Local training** of every client still in the market from its own θ_i with the experiment's learner
   (``learner.local_steps`` minibatch iterations, paper: 200; SGD momentum 0.9 whose state ``client_update``
   rebuilds every round, as the authors' per-round optimizer). From round 2 on the local objective adds
   λ/(2η)‖θ − θ̄_i‖² (eq. 9, :func:`~.market.prox_penalty`), θ̄_i the client's prox center of the previous round:
   the spec's ``regularizer`` reads it from ``own`` and λ, η from ``hyper.method`` (traced).
2. **Evaluation** right after local training, before graph and prox (issue 13): each client's accuracy of its own
   model, on the federation's shared test set reweighted by the client's train label distribution
   (:func:`~fedjax_sim.tasks.reweighted_accuracy`, SPEC §5) when it has one, else on the client's own test split
   (the task's score). Recorded per round; the best over rounds is kept in the state.
3. **Distance** d = 1 − cos(θ_i − θ_0, θ_j − θ_0) over the whole flattened model (:func:`~.market.cosine_distance`;
   θ_0 the common initial model, kept in the state and never updated).
4. **Market** on the reported (K, N, c): the Box 2 graph (:func:`~.market.thresholds` then
   :func:`~.market.greedy_graph`), payments (eq. 13) with reported values, utilities (eq. 3) with the real N and c.
5. **Prox centers** θ̄_i (eq. 8, :func:`~.market.prox_center`): one step of size η from θ_i with the graph's
   weights a_ij = N_j / N_i. The local model is not replaced by its center.
6. **Drop-out** (``ipfl.dropout``): after the round a client with U_i < 0 leaves for good (``strict``, IR-strict)
   or with probability 1/2 (``prob``, IR-prob, its own key stream); ``none`` keeps everyone.

Decisions (SPEC §5 and issue 13 leave them open; stated again where they act):

* **Everyone starts from θ_0** (one init key; issue 13: "every client starting from the same θ_0").
* **Whole model state = trainable parameters** here: the platform's models (MLP, LeNet, GroupNorm ResNets, the
  LSTM) carry no buffers, so the distance (whole state) and the prox step and penalty (trainable parameters only,
  issue 13) flatten the same pytree (``jax.flatten_util.ravel_pytree``).
* **Departed clients** neither buy nor sell: their thresholds are set to −∞ in both directions (Box 2's "never
  buy", sorted last) before the greedy loop, so nobody buys from them and they buy nothing (U = 0, p = 0). They do
  not train: θ_i, its center and its best accuracy stay as they were (the update is masked; every client's lane is
  computed, as partial participation would not save work at iPFL's 9–20 clients).
* **A lied size** is int(N·ratio) (issue 13), computed on the host at build time in float64 so that it is exactly
  Python's ``int(N * ratio)``; decision: at least 1 (the gain sqrt(K/N) needs N > 0; the paper's clients have
  thousands of rows, where int(N·0.1) ≥ 1 anyway). A lied cost is c·ratio.
* **Per-client K_i and c_i** are ``gain_scale`` and ``cost`` for every client (SPEC §5 training line: K = 5e5,
  C = 1); the market playground's roles (traders, buyers, sellers, attacker) and the attacks are not implemented.
* **Bytes**: each client in the market uploads its model once and each buyer downloads every model it bought:
  (in-market clients + purchases) · |θ| · 4 bytes per round. ``mean_partners`` is the mean number of sellers a
  client in the market buys from; ``rest_fraction`` the fraction of clients that neither bought nor sold.
* On the binary clinical task the per-round "accuracy" is that task's score (AUROC); iPFL's experiments are
  image and text tasks, scored by accuracy.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics, broadcast_clients, nonfinite_rows, require_federation
from fedjax_sim.algorithms.ipfl import market as M
from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.engine.local import LocalTerm, local_train
from fedjax_sim.models import Model, model_size
from fedjax_sim.settings import at_least, one_of, positive, setting


# --- declaration: config section, traced hyperparameters -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class IPFLConfig:
  """The ``[ipfl]`` section (paper 003; SPEC §5; issue 13). Numbers are traced (:class:`IPFLHyper`, sweepable);
  the liar's index and size ratio, the drop-out rule, the bisection length and ``unaffordable_last`` are static."""

  lam: float = setting(0.001, at_least(0.0))  # λ, the price of model difference in the thresholds, payments and
  # the prox penalty λ/(2η)‖θ − θ̄‖² (eqs. 9–12; SPEC §5: Fashion-MNIST 0.001, CIFAR 2, PACS 1e-5, Shakespeare 2,
  # FEMNIST 1), ≥ 0
  eta: float = setting(5.0, positive())  # η, the prox step size of eq. 8 (SPEC §5: 5; Shakespeare 5000), > 0
  gain_scale: float = setting(5e5, at_least(0.0))  # K_i of every client, the gain scale of eq. 4 (SPEC §5
  # training line: 5e5; issue 13's market playground: 5e7), ≥ 0 (0: every client a pure seller)
  cost: float = setting(1.0, at_least(0.0))  # c_i of every client, the real cost of one sale (eq. 3; SPEC §5:
  # C = 1), ≥ 0
  liar: int = setting(-1, at_least(-1))  # the one client that misreports N or c (SPEC §5 "liars"; Table 2), a
  # client index < C, or −1 = none
  liar_size_ratio: float = setting(1.0, positive())  # the liar reports int(N·ratio) train rows (issue 13; SPEC §5:
  # 0.1, 0.5, 10), > 0 (1 = honest; at least 1 row is reported)
  liar_cost_ratio: float = setting(1.0, positive())  # the liar reports c·ratio (SPEC §5: 2, 5, 10), > 0 (1 = honest)
  dropout: str = setting("none", one_of("none", "strict", "prob"))  # leave the market after a round with U_i < 0:
  # never (none), for good (strict, IR-strict) or with probability 0.5 (prob, IR-prob; SPEC §5, issue 13)
  threshold_iters: int = setting(32, at_least(1))  # bisection steps of the Box 2 threshold solve (SPEC §5: a fixed
  # count; 32 reach f32 resolution, market.thresholds), ≥ 1
  unaffordable_last: bool = setting(True, one_of(True, False))  # a seller not worth its price alone sorts last
  # (Box 2's "no solution → N^Th = 0"; market.thresholds), or keeps SPEC's root (False)


@struct.dataclass
class IPFLHyper:
  """The ``[ipfl]`` numbers the compiled program reads as traced values (all sweepable)."""

  lam: jax.Array  # [] λ
  eta: jax.Array  # [] η
  gain_scale: jax.Array  # [] K
  cost: jax.Array  # [] C
  liar_cost_ratio: jax.Array  # [] the liar's cost factor


# --- state ---------------------------------------------------------------------------------------------------


@struct.dataclass
class IPFLState:
  """What iPFL carries from round to round."""

  params: Any  # [C, ...] θ_i, each client's own model (the deployed models)
  theta0: Any  # θ_0, the common initial model (never updated)
  center: Any  # [C, ...] θ̄_i, the prox centers of the previous round (θ_0 before round 1, unused there)
  active: jax.Array  # [C] bool, still in the market
  best: jax.Array  # [C] each client's best accuracy over the rounds so far (NaN before round 1)


def prox_regularizer(term: LocalTerm) -> jax.Array:
  """w · λ/(2η)‖θ − θ̄_i‖² (eq. 9), with ``own = {"center": θ̄_i, "weight": w}``: w = 0 in round 1 (no center
  yet), 1 from round 2 on; λ and η are ``hyper.method``'s (traced)."""
  h = term.hyper.method
  return term.own["weight"] * M.prox_penalty(term.params, term.own["center"], h.lam, h.eta)


def reported_sizes(n_train, liar: int, ratio: float) -> np.ndarray:
  """Host: the reported N of every client, the real one but the liar's int(N·ratio), at least 1 (docstring)."""
  n = np.asarray(n_train, np.int64).copy()
  if liar >= 0:
    n[liar] = max(1, int(float(n[liar]) * float(ratio)))
  return n.astype(np.float32)


def market_round(flat, flat0, active, n_real, n_rep, k, c_real, c_rep, lam, eta, *, iters: int,
                 unaffordable_last: bool) -> dict:
  """Steps 3–5 for every client at once: d, the Box 2 graph, payments, utilities, prox centers (flat).

  Args:
    flat: ``[C, P]`` the trained models, flattened; flat0: ``[P]`` θ_0.
    active: ``[C]`` bool, in the market (the others neither buy nor sell).
    n_real, n_rep: ``[C]`` real and reported N; k: ``[C]`` K; c_real, c_rep: ``[C]`` real and reported c.
    lam, eta: λ, η.

  Returns:
    ``{d, a, p, u, center}``: ``[C, C]`` distance and graph, ``[C]`` payments and utilities, ``[C, P]`` centers.
  """
  d = M.cosine_distance(flat, flat0)
  t = M.thresholds(k, n_rep, c_rep, d, lam, iters=iters, unaffordable_last=unaffordable_last)
  t = jnp.where(active[:, None] & active[None, :], t, -jnp.inf)  # departed clients: never bought, never buy
  a = M.greedy_graph(t, n_rep)
  p = M.payments(a, k, n_rep, d, lam)
  u = M.utilities(a, k, n_real, c_real, p)
  center = M.prox_center(flat, flat0, a, eta)
  return dict(d=d, a=a, p=p, u=u, center=center)


def ipfl(model: Model, client_update, score, settings: IPFLConfig, *, reported_n: np.ndarray,
         name: str = "ipfl") -> Algorithm:
  """The iPFL round (module docstring, steps 1–6).

  Args:
    model: the model every client trains.
    client_update: from :func:`~fedjax_sim.engine.local.make_client_update` with :func:`prox_regularizer`.
    score: the task's per-client score ``(logits [C, n, ...], labels, mask) -> [C]`` (no shared test set).
    settings: the ``[ipfl]`` section (its static fields are read here).
    reported_n: ``[C]`` the reported train sizes (:func:`reported_sizes`).
    name: the reported method name.

  Returns:
    An :class:`Algorithm` whose deployed models are the clients' θ_i (stacked).
  """
  sent = model_size(model)
  liar = int(settings.liar)
  n_rep_const = np.asarray(reported_n, np.float32)
  forward = jax.vmap(lambda p, x: model.apply(p, x, False, None)[0])

  def init(key, federation, hyper):
    del hyper
    c = federation.num_clients
    theta0 = model.init(key)
    stacked = broadcast_clients(theta0, c)
    return IPFLState(params=stacked, theta0=theta0, center=stacked, active=jnp.ones((c,), bool),
                     best=jnp.full((c,), jnp.nan, jnp.float32))

  def accuracy(params, federation) -> jax.Array:
    shared = federation.shared_test
    if shared is not None:
      logits = jax.vmap(lambda p: model.apply(p, shared.x, False, None)[0])(params)
      from fedjax_sim.tasks import reweighted_accuracy
      return reweighted_accuracy(logits, shared.y, shared.class_weights)
    return score(forward(params, federation.x_test), federation.y_test, federation.m_test)

  def round_fn(key, state, federation, hyper, t):
    h = hyper.method
    c = federation.num_clients
    k_train, k_leave = jax.random.split(key)
    active = state.active
    keep = lambda new, old: jnp.where(active.reshape((c,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
    # 1. local training (round 1 without the penalty)
    weight = jnp.broadcast_to((jnp.asarray(t) > 1).astype(jnp.float32), (c,))
    res = local_train(client_update, k_train, state.params, federation,
                      own={"center": state.center, "weight": weight}, hyper=hyper, t=t)
    params = jax.tree_util.tree_map(keep, res.params, state.params)  # departed clients do not train
    # 2. evaluation before graph and prox
    acc = accuracy(params, federation).astype(jnp.float32)
    best = jnp.where(active, jnp.fmax(state.best, acc), state.best)
    # 3–5. distance, market, prox centers
    flat = jax.vmap(lambda p: ravel_pytree(p)[0])(params)
    flat0, unravel = ravel_pytree(state.theta0)
    n_real = federation.n_train.astype(jnp.float32)
    n_rep = jnp.asarray(n_rep_const)
    k = jnp.full((c,), h.gain_scale, jnp.float32)
    c_real = jnp.full((c,), h.cost, jnp.float32)
    c_rep = c_real if liar < 0 else c_real.at[liar].multiply(h.liar_cost_ratio)
    out = market_round(flat, flat0, active, n_real, n_rep, k, c_real, c_rep, h.lam, h.eta,
                       iters=settings.threshold_iters, unaffordable_last=settings.unaffordable_last)
    center = jax.tree_util.tree_map(keep, jax.vmap(unravel)(out["center"]), state.center)
    # 6. drop-out on a negative round utility
    u = out["u"]
    if settings.dropout == "strict":
      leave = u < 0
    elif settings.dropout == "prob":
      leave = (u < 0) & jax.random.bernoulli(k_leave, 0.5, (c,))
    else:
      leave = jnp.zeros((c,), bool)
    remaining = active & ~leave
    new_state = state.replace(params=params, center=center, active=remaining, best=best)
    return new_state, round_metrics(res, active, remaining, out, acc, sent)

  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.params, True), sent_params=sent)


def round_metrics(res, active, remaining, out, acc, sent: int) -> RoundMetrics:
  """The platform's fields over the clients in the market and, in ``extra``, the market's ``[C]`` arrays."""
  c = active.shape[0]
  a = out["a"] > 0
  bought = jnp.sum(a, axis=1).astype(jnp.float32)
  sold = jnp.sum(a, axis=0).astype(jnp.float32)
  count = jnp.sum(active)
  _, bad = nonfinite_rows((res.loss, res.params), c)
  bad = bad & active
  f32 = lambda v: jnp.asarray(v).astype(jnp.float32)  # noqa: E731
  return RoundMetrics(
      bytes=f32((count + jnp.sum(bought)) * sent * 4.0),
      train_loss=jnp.sum(jnp.where(active, res.loss, 0.0)) / jnp.maximum(count, 1),
      rest_fraction=f32(jnp.mean((bought + sold) == 0)),
      mean_partners=f32(jnp.sum(bought) / jnp.maximum(count, 1)),
      active=jnp.asarray(1.0),
      nonfinite_client=jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, 0).astype(jnp.int32),
      extra={
          "utility": f32(out["u"]),  # [C] U_i of this round (eq. 3, real N and c)
          "accuracy": f32(acc),  # [C] each client's accuracy right after local training
          "bought": bought,  # [C] sellers each client bought from
          "sold": sold,  # [C] buyers each client sold to
          "payments": f32(out["p"]),  # [C] p_i (eq. 13)
          "trained": f32(active),  # [C] in the market (and trained) this round
          "active": f32(remaining),  # [C] still in the market after this round's drop-out rule
          "welfare": f32(M.social_welfare(out["u"])),  # [] Σ_i U_i (eq. 5)
      })


def ipfl_metrics(extra: dict, active) -> dict:
  """Per-seed summary entries of an iPFL run from its ``[R, ...]`` history (SPEC §5 "Evaluation").

  ``utility_sum``: each client's utility summed over rounds, averaged over clients; ``best_accuracy``: each
  client's best accuracy over rounds, averaged over clients (every client is benign here; NaN-only clients are
  skipped); ``mean_degree``: purchases per client-round in the market; ``welfare_sum``: Σ_t SW_t;
  ``final_active``: clients still in the market after the last round that ran.
  """
  if not extra or "utility" not in extra:
    return {}
  act = np.asarray(active, np.float64) > 0
  get = lambda key: np.asarray(extra[key], np.float64)[act]  # noqa: E731
  if not act.any():
    return {}
  acc = get("accuracy")
  with np.errstate(all="ignore"):
    best = np.nanmax(np.where(np.isnan(acc), -np.inf, acc), axis=0)
  best = best[np.isfinite(best)]
  return {
      "utility_sum": float(get("utility").sum(axis=0).mean()),
      "best_accuracy": float(best.mean()) if best.size else float("nan"),
      "mean_degree": float(get("bought").sum() / max(get("trained").sum(), 1.0)),
      "welfare_sum": float(get("welfare").sum()),
      "final_active": float(get("active")[-1].sum()),
  }


def check_federation(name: str, config, num_clients: int) -> None:
  """iPFL needs ≥ 2 clients and ``ipfl.liar`` < C.

  Raises:
    ConfigError: naming the setting to change.
  """
  from fedjax_sim.errors import ConfigError
  require_federation(name, num_clients)
  if config.ipfl.liar >= num_clients:
    raise ConfigError(f"ipfl.liar = {config.ipfl.liar} is not a client of this federation of {num_clients}; set it "
                      f"to a client index below {num_clients}, or −1 for none")


def _build(ctx: BuildContext) -> Algorithm:
  from fedjax_sim.tasks import task_for
  s = ctx.settings
  score = task_for(ctx.config, ctx.federation).score
  return ipfl(ctx.model, ctx.client_update, score, s,
              reported_n=reported_sizes(ctx.federation.n_train, s.liar, s.liar_size_ratio), name=ctx.name)


SPECS = (
    MethodSpec(methods={"ipfl": {}}, build=_build, section="ipfl", settings=IPFLConfig, hyper=IPFLHyper,
               regularizer=prox_regularizer, metrics=ipfl_metrics, check_federation=check_federation),
)
