"""The iPFL model market and its baselines as one declared method family (paper 003 Box 1–2, eqs. 3–13; SPEC §5;
issue 13).

One round t (1-based), every client at once inside the compiled program (no Python loop over clients or rounds;
the platform scans the rounds and vmaps the seeds). Every method of the family runs the same six stages; only
stage 4, the **rule** (``ipfl.rule``), differs — iPFL's market or one of the seven baselines of the paper's
comparison — so attacks, liars, roles, drop-out and the utility accounting apply to every row alike (issue 13:
"utility is computed for every method from its own graph"):

1. **Local training** of every client still in the market (free riders excepted: they skip it; their vmapped lane is
   computed and discarded by a mask, not gathered out, since :func:`~fedjax_sim.engine.local.train_selected` needs a
   static slot count and drop-outs change the number of trainers; the round's mean loss and fault check read kept
   lanes only) from its start
   model with the experiment's learner (``learner.local_steps`` minibatch iterations, paper: 200; SGD momentum 0.9
   whose state ``client_update`` rebuilds every round, as the authors' per-round optimizer). The local objective
   adds the rule's term (:func:`local_regularizer`): κ_i/2 ‖θ − center_i‖² (iPFL from round 2: κ = λ/η, eq. 9;
   FedProx μ; FedAMP λ_1; Ditto's personal model λ) and pFedGraph's λ⟨cluster_i, θ⟩/‖θ‖ from round 2.
2. **Evaluation** right after local training, before graph, prox and attacks (issue 13): each client's accuracy of
   its deployed model (Ditto: the personal one) on the federation's shared test set reweighted by its train label
   distribution (``data.shared_test``; :func:`~fedjax_sim.tasks.reweighted_accuracy`, SPEC §5) when it has one,
   else on the client's own test split. The best over rounds is kept in the state.
3. **Attacks** (``ipfl.attackers``, ``ipfl.attack``; the authors' ``attack.py``): an attacker uploads its trained
   model shuffled (a fresh random permutation of the flat vector every round) or sign-flipped (−θ); a free rider
   uploads all ones (``same_value``) or N(0, 1) draws (``gauss``). The upload replaces the attacker's own model,
   as the authors' code modifies the client's network in place (``ipfl.attack_in_place = true``, the default).
   Paper 003 does not say whether its attacker kept the corrupted model; with ``attack_in_place = false`` (market
   rule only) a shuffling or sign-flipping attacker corrupts only what it sends and keeps its trained model and
   center for the next round (docs/IPFL.md §7: the in-place sign flip makes every other upload a usable model).
4. **The rule** turns the uploads into a graph and the next round's start models and centers:
   ``market`` (iPFL: distance, Box 2 thresholds and greedy graph on the reported K, N, c; payments eq. 13; prox
   centers eq. 8; each client keeps its own model), ``local`` (no graph), ``fedavg`` / ``fedprox`` (everyone buys
   from everyone; the n-weighted mean is every start model), ``ditto`` (the global model of FedAvg from the
   trained global copies; every client's personal model is trained first, then its copy of the global one),
   ``fedamp``, ``cfl``, ``fedfomo``, ``pfedgraph`` (:mod:`.baselines`, each stated there).
5. **Utilities** U_i = G_i(a_i) − c_i·(sales) − p_i (eq. 3) with the real K, N, c, from the rule's own graph
   (only a_ij > 0 is read); p from eq. 13 for the market, 0 for the baselines (issue 13: "FedAvg buys from everyone
   and pays nothing; Local's utility is 0").
6. **Drop-out** (``ipfl.dropout``): after the round a client with U_i < 0 leaves for good (``strict``, IR-strict)
   or with probability 1/2 (``prob``, IR-prob, its own key stream); ``none`` keeps everyone.

Roles (``ipfl.traders``, ``ipfl.buyers``, ``ipfl.sellers``; the paper's Fig. 5 playground, issue 13): a client
has K_i = ``gain_scale`` and c_i = ``cost`` unless listed: a trader K_i ~ U(K/2, K) and c_i ~ U(C/2, C) (drawn per
seed at init), a buyer c_i = ``buyer_cost`` (paper: 1000), a seller K_i = c_i = 0; attackers (shuffle, sign-flip)
have K = c = 0 (issue 13); free riders a real cost of 0 (they report the usual c). Liars (``ipfl.liar``) report
int(N·``liar_size_ratio``) rows and c·``liar_cost_ratio``: reported values drive the graph and payments, real ones
the gains and costs.

Decisions (SPEC §5 and issue 13 leave them open; stated again where they act):

* **Everyone starts from θ_0** (one init key; issue 13: "every client starting from the same θ_0").
* **Whole model state = trainable parameters** here: the platform's models (MLP, LeNet, GroupNorm ResNets, the
  LSTM) carry no buffers, so the distance (whole state) and the prox step and penalty (trainable parameters only,
  issue 13) flatten the same pytree (``jax.flatten_util.ravel_pytree``).
* **Departed clients** neither buy nor sell (their rows and columns of every graph are empty: U = 0, p = 0), do not
  train, and keep their model, center and best accuracy (every lane is computed and masked: partial participation
  would not save work at iPFL's 9–20 clients).
* **A lied size** is int(N·ratio) (issue 13), at least 1 (the gain sqrt(K/N) needs N > 0); it is computed in the
  program (float32 product, then floor) so that the ratio is traced and ``--sweep ipfl.liar_size_ratio=…`` runs
  the liars table in one program; for N < 2²⁴ and the paper's ratios it equals Python's ``int(N * ratio)``.
* **Bytes**: each client in the market uploads its model once and each buyer downloads every model it bought
  ((in-market clients + purchases) · |θ| · 4 bytes per round; Ditto's personal models are never sent).
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

from fedjax_sim.algorithms.base import (Algorithm, RoundMetrics, broadcast_clients, nonfinite_rows,
                                        require_federation, weighted_average)
from fedjax_sim.algorithms.ipfl import baselines as BL
from fedjax_sim.algorithms.ipfl import market as M
from fedjax_sim.algorithms.spec import BuildContext, MethodSpec
from fedjax_sim.engine.local import LocalTerm, local_train
from fedjax_sim.models import Model, model_size
from fedjax_sim.settings import at_least, each, one_of, positive, setting, within

RULES = ("market", "local", "fedavg", "fedprox", "ditto", "fedamp", "cfl", "fedfomo", "pfedgraph")
"""``ipfl.rule``: iPFL's market, then the seven baselines of paper 003's comparison (Local is the eighth row)."""

ATTACKS = ("none", "shuffle", "sign_flip", "same_value", "gauss")
"""``ipfl.attack``: attackers train then shuffle or sign-flip; free riders skip training and upload all ones or
N(0, 1) parameters (the authors' ``attack.py`` names)."""

FREE_RIDES = ("same_value", "gauss")


# --- declaration: config section, traced hyperparameters -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class IPFLConfig:
  """The ``[ipfl]`` section (paper 003; SPEC §5; issue 13). Numbers are traced (:class:`IPFLHyper`, sweepable);
  the rule, the roles, the attack, the liar's index, the drop-out rule and the loop lengths are static."""

  rule: str = setting("market", one_of(*RULES))  # stage 4 (module docstring): iPFL's market or a baseline
  lam: float = setting(0.001, at_least(0.0))  # λ, the price of model difference in the thresholds, payments and
  # the prox penalty λ/(2η)‖θ − θ̄‖² (eqs. 9–12; SPEC §5: Fashion-MNIST 0.001, CIFAR 2, PACS 1e-5, Shakespeare 2,
  # FEMNIST 1), ≥ 0
  eta: float = setting(5.0, positive())  # η, the prox step size of eq. 8 (SPEC §5: 5; Shakespeare 5000), > 0
  gain_scale: float = setting(5e5, at_least(0.0))  # K_i, the gain scale of eq. 4 (SPEC §5 training line: 5e5;
  # issue 13's market playground: 5e7), ≥ 0 (0: every client a pure seller)
  cost: float = setting(1.0, at_least(0.0))  # C, the real cost c_i of one sale (eq. 3; SPEC §5: 1), ≥ 0
  traders: tuple = setting((), each(at_least(0)), elem=0)  # clients with K_i ~ U(K/2, K), c_i ~ U(C/2, C) drawn per seed
  # (paper Fig. 5: 3, 4, 6), indices < C
  buyers: tuple = setting((), each(at_least(0)), elem=0)  # clients with c_i = buyer_cost (Fig. 5: 1, 2, 8, 9)
  sellers: tuple = setting((), each(at_least(0)), elem=0)  # pure sellers, K_i = c_i = 0 (Fig. 5: 0, 5, 7, 10, 11)
  buyer_cost: float = setting(1000.0, at_least(0.0))  # a buyer's c_i (issue 13: 1000), ≥ 0
  attackers: tuple = setting((), each(at_least(0)), elem=0)  # clients that run ``attack`` (Fig. 4, 5); indices
  # < C; empty with an attack: the last client (the paper introduces one attacker; Fig. 5's is the last). With
  # attack = none they are honest but still reported apart (excluded from the benign accuracy, their utility as
  # attacker_utility): a clean run's "before" figures
  attack: str = setting("none", one_of(*ATTACKS))  # what the attackers upload (module docstring, stage 3)
  attack_in_place: bool = setting(True, one_of(True, False))  # the corrupted upload replaces a shuffling or
  # sign-flipping attacker's own model (the authors' code), or (False; market rule only) the attacker keeps its
  # trained model and center and corrupts only what it sends (paper 003 does not say; stage 3)
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
  # --- the baselines' own numbers (issue 13 item 5) ---
  fedprox_mu: float = setting(0.01, at_least(0.0))  # FedProx's μ (issue 13: 0.01), ≥ 0
  ditto_lam: float = setting(1.0, at_least(0.0))  # Ditto's λ between personal and global model (issue 13: 1), ≥ 0
  fedamp_self: float = setting(0.3, within(0.0, 1.0))  # FedAMP's self weight ξ_ii (issue 13: 0.3), in [0, 1]
  fedamp_sigma: float = setting(10.0, at_least(0.0))  # FedAMP's attention sharpness: others ∝ exp(σ cos) (10)
  fedamp_lam: float = setting(0.01, at_least(0.0))  # FedAMP's prox λ_1 toward the client's aggregate (0.01), ≥ 0
  cfl_eps1: float = setting(2.0, positive())  # CFL: split when the mean update norm is below ε_1 (issue 13: 2.0)
  cfl_eps2: float = setting(2.5, positive())  # CFL: ... and the largest update norm above ε_2 (issue 13: 2.5)
  fomo_m: int = setting(6, at_least(1))  # FedFomo's neighbours M sampled ∝ P per round (issue 13: 6), ≥ 1
  fomo_rows: int = setting(512, at_least(1))  # FedFomo: train rows (uniform, with replacement when a client has
  # more) on which a client scores its neighbours (decision: issue 13 says "its own training data"; a sample
  # keeps the C × M forward passes cheap), ≥ 1
  pfedgraph_alpha: float = setting(0.8, positive())  # pFedGraph's α of the graph QP (issue 13: 0.8), > 0
  pfedgraph_lam: float = setting(0.01, at_least(0.0))  # pFedGraph's λ of the local cosine term (issue 13: 0.01)


@struct.dataclass
class IPFLHyper:
  """The ``[ipfl]`` numbers the compiled program reads as traced values (all sweepable)."""

  lam: jax.Array  # [] λ
  eta: jax.Array  # [] η
  gain_scale: jax.Array  # [] K
  cost: jax.Array  # [] C
  buyer_cost: jax.Array  # [] a buyer's c
  liar_size_ratio: jax.Array  # [] the liar's size factor
  liar_cost_ratio: jax.Array  # [] the liar's cost factor
  fedprox_mu: jax.Array
  ditto_lam: jax.Array
  fedamp_self: jax.Array
  fedamp_sigma: jax.Array
  fedamp_lam: jax.Array
  cfl_eps1: jax.Array
  cfl_eps2: jax.Array
  pfedgraph_alpha: jax.Array
  pfedgraph_lam: jax.Array


# --- state ---------------------------------------------------------------------------------------------------


@struct.dataclass
class IPFLState:
  """What the family carries from round to round (fields a rule does not use stay at their init value)."""

  params: Any  # [C, ...] each client's model: the next round's start and, but for Ditto, the deployed model
  theta0: Any  # θ_0, the common initial model (never updated)
  center: Any  # [C, ...] each client's center of the quadratic term (iPFL's θ̄_i, FedProx/Ditto's global model,
  # FedAMP's u_i); θ_0 before round 1
  cluster_vec: jax.Array  # [C, P] pFedGraph's cluster model vectors (zeros before round 1; [C, 0] for others)
  glob: Any  # Ditto's global model (θ_0 for the others)
  cluster: jax.Array  # [C] int32 CFL's cluster ids (all 0 at the start)
  affinity: jax.Array  # [C, C] FedFomo's P (ones at the start)
  trader_u: jax.Array  # [C, 2] the traders' uniform draws for K_i and c_i (per seed)
  active: jax.Array  # [C] bool, still in the market
  best: jax.Array  # [C] each client's best accuracy over the rounds so far (NaN before round 1)


def local_regularizer(term: LocalTerm) -> jax.Array:
  """The rule's local term for one client (module docstring, stage 1): ``own["quad"]/2 ‖θ − own["center"]‖²``
  (:func:`~.market.prox_penalty` with λ = κ, η = 1: iPFL's λ/(2η)‖θ − θ̄_i‖² of eq. 9 with κ = λ/η; FedProx's μ;
  FedAMP's λ_1; Ditto's λ), plus pFedGraph's cosine term when ``own`` carries ``cluster`` (:func:`~.baselines.
  pfedgraph_penalty`, weighted by ``own["cos"]``: 0 in round 1, pFedGraph's λ after)."""
  own = term.own
  penalty = M.prox_penalty(term.params, own["center"], own["quad"], 1.0)
  if "cluster" in own:
    penalty = penalty + own["cos"] * BL.pfedgraph_penalty(ravel_pytree(term.params)[0], own["cluster"], 1.0)
  return penalty


def roles(num_clients: int, settings: "IPFLConfig") -> dict:
  """Host: the static ``[C]`` role masks of the roles and attack settings (module docstring)."""
  def mask(indices):
    m = np.zeros((num_clients,), bool)
    m[list(indices)] = True
    return m
  listed = mask(settings.attackers if settings.attackers or settings.attack == "none" else (num_clients - 1,))
  acting = listed if settings.attack != "none" else np.zeros((num_clients,), bool)
  free = acting if settings.attack in FREE_RIDES else np.zeros((num_clients,), bool)
  liar = np.zeros((num_clients,), bool)
  if settings.liar >= 0:
    liar[settings.liar] = True
  # "benign" excludes the listed attackers even with attack = none, so that a clean run and an attacked one
  # average accuracy over the same clients and report the listed clients' utility (Fig. 4's before / after)
  return dict(trader=mask(settings.traders), buyer=mask(settings.buyers), seller=mask(settings.sellers),
              attacker=acting & ~free, free=free, benign=~listed, liar=liar)


def market_values(r: dict, trader_u, n_real, h) -> dict:
  """The ``[C]`` real and reported K, N, c of this round (module docstring, "Roles"): masks ``r`` of
  :func:`roles`, the traders' draws ``trader_u [C, 2]``, real sizes, traced numbers ``h``."""
  k = jnp.where(r["trader"], h.gain_scale * (0.5 + 0.5 * trader_u[:, 0]), h.gain_scale)
  k = jnp.where(r["seller"] | r["attacker"], 0.0, k)
  c = jnp.where(r["trader"], h.cost * (0.5 + 0.5 * trader_u[:, 1]), h.cost)
  c = jnp.where(r["buyer"], h.buyer_cost, c)
  c_rep = jnp.where(r["seller"] | r["attacker"], 0.0, c)
  c_real = jnp.where(r["free"], 0.0, c_rep)
  c_rep = jnp.where(r["liar"], c_rep * h.liar_cost_ratio, c_rep)
  n_rep = jnp.where(r["liar"], jnp.maximum(jnp.floor(n_real * h.liar_size_ratio), 1.0), n_real)
  return dict(k=k.astype(jnp.float32), n_real=n_real, n_rep=n_rep.astype(jnp.float32),
              c_real=c_real.astype(jnp.float32), c_rep=c_rep.astype(jnp.float32))


def market_round(flat, flat0, active, n_real, n_rep, k, c_real, c_rep, lam, eta, *, iters: int,
                 unaffordable_last: bool) -> dict:
  """iPFL's stage 4–5 for every client at once: d, the Box 2 graph, payments, utilities, prox centers (flat).

  Args:
    flat: ``[C, P]`` the uploaded models, flattened; flat0: ``[P]`` θ_0.
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


def attack_uploads(key, flat, r: dict, attack: str) -> jax.Array:
  """Stage 3: the ``[C, P]`` uploads, the attackers' rows replaced (module docstring; the authors' attack.py)."""
  if attack == "none":
    return flat
  c, p = flat.shape
  if attack == "shuffle":
    perm = jax.vmap(lambda k: jax.random.permutation(k, p))(jax.random.split(key, c))
    bad = jnp.take_along_axis(flat, perm, axis=1)
  elif attack == "sign_flip":
    bad = -flat
  elif attack == "same_value":
    bad = jnp.ones_like(flat)
  else:  # gauss
    bad = jax.random.normal(key, flat.shape, flat.dtype)
  hit = r["attacker"] | r["free"]
  return jnp.where(hit[:, None], bad, flat)


def everyone(active) -> jax.Array:
  """The graph of a rule whose clients all buy from all (FedAvg, FedProx, Ditto): 1 between active clients."""
  c = active.shape[0]
  return (active[:, None] & active[None, :] & ~jnp.eye(c, dtype=bool)).astype(jnp.float32)


# --- the round -----------------------------------------------------------------------------------------------


def ipfl(model: Model, client_update, score, loss_fn, settings: IPFLConfig, *, num_clients: int,
         name: str = "ipfl") -> Algorithm:
  """One method of the family (module docstring, stages 1–6; ``settings.rule`` picks stage 4).

  Args:
    model: the model every client trains.
    client_update: from :func:`~fedjax_sim.engine.local.make_client_update` with :func:`local_regularizer`.
    score: the task's per-client score ``(logits [C, n, ...], labels, mask) -> [C]`` (no shared test set).
    loss_fn: the task's per-example loss (FedFomo's neighbour scores).
    settings: the ``[ipfl]`` section (its static fields are read here).
    num_clients: C.
    name: the reported method name.

  Returns:
    An :class:`Algorithm` whose deployed models are the clients' (stacked; Ditto's personal ones).
  """
  rule = settings.rule
  sent = model_size(model)
  r = {k: jnp.asarray(v) for k, v in roles(num_clients, settings).items()}
  forward = jax.vmap(lambda p, x: model.apply(p, x, False, None)[0])
  pfedgraph = rule == "pfedgraph"
  m_rows = int(settings.fomo_rows)

  def init(key, federation, hyper):
    del hyper
    c = federation.num_clients
    k_model, k_roles = jax.random.split(key)
    theta0 = model.init(k_model)
    stacked = broadcast_clients(theta0, c)
    width = ravel_pytree(theta0)[0].shape[0] if pfedgraph else 0
    return IPFLState(params=stacked, theta0=theta0, center=stacked, cluster_vec=jnp.zeros((c, width), jnp.float32),
                     glob=theta0, cluster=jnp.zeros((c,), jnp.int32), affinity=jnp.ones((c, c), jnp.float32),
                     trader_u=jax.random.uniform(k_roles, (c, 2)), active=jnp.ones((c,), bool),
                     best=jnp.full((c,), jnp.nan, jnp.float32))

  def accuracy(params, federation) -> jax.Array:
    shared = federation.shared_test
    if shared is not None:
      from fedjax_sim.tasks import reweighted_accuracy_of_predictions, shared_predictions
      pred = shared_predictions(model.apply, params, shared.x)
      return reweighted_accuracy_of_predictions(pred, shared.y, shared.class_weights)
    return score(forward(params, federation.x_test), federation.y_test, federation.m_test)

  def own_terms(state, h, t, c):
    later = (jnp.asarray(t) > 1).astype(jnp.float32)
    quad = {"market": later * h.lam / h.eta, "fedprox": h.fedprox_mu, "ditto": h.ditto_lam,
            "fedamp": later * h.fedamp_lam}.get(rule, 0.0)
    own = {"center": state.center, "quad": jnp.broadcast_to(jnp.asarray(quad, jnp.float32), (c,))}
    if pfedgraph:
      own["cluster"] = state.cluster_vec
      own["cos"] = jnp.broadcast_to(later * h.pfedgraph_lam, (c,))
    return own

  def fomo_losses(key, flat_models, start, unravel, federation):
    """``(cand [C, C], start_loss [C])``: client i's mean loss of uploaded model j, and of its own start model, on
    the same ``fomo_rows`` of its train rows (drawn from ``key``)."""
    from fedjax_sim.algorithms.fbsfl.algorithm import report_positions
    rows = federation.rows
    c = flat_models.shape[0]
    pos, valid = jax.vmap(report_positions, in_axes=(0, 0, None))(jax.random.split(key, c), rows.n, m_rows)
    index = jnp.where(valid, rows.start[:, None] + pos, rows.x.shape[0] - 1)  # [C, m]

    def mean_loss(flat_j, x, y, ok):
      """Mean loss of one flat model on rows ``x [..., m, ...]`` (``ok [..., m]`` the valid ones)."""
      lead = ok.shape
      per = loss_fn(model.apply(unravel(flat_j), x.reshape((-1,) + x.shape[len(lead):]), False, None)[0],
                    y.reshape((-1,) + y.shape[len(lead):])).reshape(lead)
      return jnp.sum(jnp.where(ok, per, 0.0), axis=-1) / jnp.maximum(jnp.sum(ok, axis=-1), 1)

    x, y = rows.x[index], rows.y[index]  # [C, m, ...]
    cand = jax.lax.map(lambda f: mean_loss(f, x, y, valid), flat_models).T  # [C clients, C models]
    start_loss = jax.vmap(mean_loss)(start, x, y, valid)  # each client's own start model, on its own rows
    return cand, start_loss

  def round_fn(key, state, federation, hyper, t):
    h = hyper.method
    c = federation.num_clients
    k_train, k_global, k_attack, k_fomo, k_rows, k_leave = jax.random.split(key, 6)
    active = state.active
    trains = active & ~r["free"]
    keep = lambda m: lambda new, old: jnp.where(m.reshape((c,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
    own = own_terms(state, h, t, c)
    # 1. local training (Ditto: the personal model first, then its copy of the global one)
    res = local_train(client_update, k_train, state.params, federation, own=own, hyper=hyper, t=t)
    trained = jax.tree_util.tree_map(keep(trains), res.params, state.params)
    if rule == "ditto":
      plain = dict(own, quad=jnp.zeros((c,), jnp.float32))
      res_g = local_train(client_update, k_global, state.glob, federation, own=plain, hyper=hyper, t=t,
                          params_stacked=False)
      glob_b = broadcast_clients(state.glob, c)
      uploaded = jax.tree_util.tree_map(keep(trains), res_g.params, glob_b)
    else:
      uploaded = trained
    # 2. evaluation before graph, prox and attacks
    acc = accuracy(trained, federation).astype(jnp.float32)
    best = jnp.where(active, jnp.fmax(state.best, acc), state.best)
    # 3. attacks on the uploads
    flat0, unravel = ravel_pytree(state.theta0)
    clean = jax.vmap(lambda p: ravel_pytree(p)[0])(uploaded)
    flat = attack_uploads(k_attack, clean, r, settings.attack)
    unstack = jax.vmap(unravel)
    # 4. the rule
    n_real = federation.n_train.astype(jnp.float32)
    v = market_values(r, state.trader_u, n_real, h)
    upd = {}
    pay = jnp.zeros((c,), jnp.float32)
    if rule == "market":
      out = market_round(flat, flat0, active, v["n_real"], v["n_rep"], v["k"], v["c_real"], v["c_rep"], h.lam,
                         h.eta, iters=settings.threshold_iters, unaffordable_last=settings.unaffordable_last)
      a, pay = out["a"], out["p"]
      nxt, upd["center"] = flat, out["center"]
      if not settings.attack_in_place:
        # the attacker keeps its trained model; it buys nothing (K = 0), so its center is its own model too
        kept = r["attacker"][:, None]
        nxt, upd["center"] = jnp.where(kept, clean, nxt), jnp.where(kept, clean, upd["center"])
    elif rule == "local":
      a, nxt = jnp.zeros((c, c), jnp.float32), flat
    elif rule in ("fedavg", "fedprox", "ditto"):
      g = weighted_average(flat, jnp.where(active, v["n_rep"], 0.0))  # FedAvg's n-weighted mean
      a = everyone(active)
      if rule == "ditto":
        nxt = jax.vmap(lambda p: ravel_pytree(p)[0])(trained)
        upd["glob"] = unravel(g)
        upd["center"] = jnp.broadcast_to(g, flat.shape)
      else:
        nxt = jnp.broadcast_to(g, flat.shape)
        upd["center"] = nxt
    elif rule == "fedamp":
      # attention on the updates θ − θ_0 (the iPFL authors' FedAMP), aggregation of the models
      xi = BL.fedamp_weights(flat - flat0[None, :], active, h.fedamp_self, h.fedamp_sigma)
      a, nxt = xi, flat
      upd["center"] = BL.fedamp_centers(flat, xi)
    elif rule == "cfl":
      start = jax.vmap(lambda p: ravel_pytree(p)[0])(state.params)
      delta = flat - start
      cluster = BL.cfl_split(delta, state.cluster, active, h.cfl_eps1, h.cfl_eps2)
      # unweighted mean of the members' updates, as Sattler's reduce_add_average and the iPFL authors' copy of it
      nxt = BL.cfl_aggregate(start, delta, cluster, active, jnp.ones((c,), jnp.float32))
      a = (active[:, None] & active[None, :] & (cluster[:, None] == cluster[None, :])
           & ~jnp.eye(c, dtype=bool)).astype(jnp.float32)
      upd["cluster"] = cluster
    elif rule == "fedfomo":
      chosen = BL.fedfomo_sample(k_fomo, state.affinity, settings.fomo_m, active)
      start = jax.vmap(lambda p: ravel_pytree(p)[0])(state.params)
      cand, start_loss = fomo_losses(k_rows, flat, start, unravel, federation)
      w, nxt = BL.fedfomo_step(start, flat, start_loss, cand, chosen)
      w = jnp.where(active[:, None] & active[None, :], w, 0.0)
      nxt = jnp.where(active[:, None], nxt, flat)
      a = w
      upd["affinity"] = state.affinity + w
    else:  # pfedgraph
      graph = BL.pfedgraph_graph(flat, flat0, v["n_rep"], active, h.pfedgraph_alpha)
      nxt, _ = BL.pfedgraph_aggregate(flat, graph)
      # the iPFL authors' pFedGraph regularizer: λ cos(θ̄_i, θ), i.e. the direction of the aggregate θ̄_i
      upd["cluster_vec"] = nxt / jnp.maximum(jnp.linalg.norm(nxt, axis=1, keepdims=True), 1e-12)
      a = graph
    # 5. utilities from the rule's own graph (real K, N, c; the market's payments, 0 for the baselines)
    a = jnp.where(active[:, None] & active[None, :] & ~jnp.eye(c, dtype=bool), a, 0.0)  # purchases only
    u = jnp.where(active, M.utilities(a, v["k"], v["n_real"], v["c_real"], pay), 0.0)
    # 6. drop-out on a negative round utility
    if settings.dropout == "strict":
      leave = u < 0
    elif settings.dropout == "prob":
      leave = (u < 0) & jax.random.bernoulli(k_leave, 0.5, (c,))
    else:
      leave = jnp.zeros((c,), bool)
    remaining = active & ~leave
    new = dict(params=jax.tree_util.tree_map(keep(active), unstack(nxt), state.params), active=remaining, best=best)
    if "center" in upd:
      new["center"] = jax.tree_util.tree_map(keep(active), unstack(upd["center"]), state.center)
    if "glob" in upd:
      new["glob"] = upd["glob"]
    if "cluster" in upd:
      new["cluster"] = jnp.where(active, upd["cluster"], state.cluster)
    if "affinity" in upd:
      new["affinity"] = upd["affinity"]
    if "cluster_vec" in upd:
      new["cluster_vec"] = jnp.where(active[:, None], upd["cluster_vec"], state.cluster_vec)
    if rule == "ditto":
      new["params"] = jax.tree_util.tree_map(keep(active), trained, state.params)
    box2 = {}  # what the market's Box 2 read: distances, prices, who can buy
    if rule == "market":
      box2 = dict(distance=out["d"], price=M.seller_prices(v["n_rep"], v["c_rep"], out["d"], h.lam),
                  buyer=v["k"] > 0)
    return state.replace(**new), round_metrics(res, active, remaining, a, pay, u, acc, r, sent,
                                               keep_graph=c <= GRAPH_CLIENTS, trained_mask=trains, **box2)

  from fedjax_sim.data.federation import with_train_rows
  prepare = with_train_rows if rule == "fedfomo" else (lambda f: f)  # FedFomo scores neighbours on train rows
  hint = ("iPFL's prox step (eq. 8) grows with ipfl.eta and with the graph's weights N_j / N_i, so an "
          "under-reported N lengthens the liar's; a smaller ipfl.eta shortens it (scale ipfl.lam alike to keep "
          "the penalty λ/(2η); λ also prices the graph): docs/IPFL.md §3." if rule == "market" else "")
  return Algorithm(name=name, init=init, round=round_fn, deployed=lambda s: (s.params, True), sent_params=sent,
                   prepare=prepare, fault_hint=hint)


GRAPH_CLIENTS = 64
"""Federations up to this size record every round's ``[C, C]`` purchases in the history (Fig. 5's graph); larger
ones would hold R·C² numbers."""


def round_metrics(res, active, remaining, a, pay, u, acc, r: dict, sent: int, keep_graph: bool = True,
                  trained_mask=None, distance=None, price=None, buyer=None) -> RoundMetrics:
  """The platform's fields over the clients in the market and, in ``extra``, the market's ``[C]`` arrays; with
  ``keep_graph``, also the ``[C, C]`` purchases and (the market rule) the distances d_ij and prices R_ij that Box 2
  read, with ``buyer`` ``[C]`` (K_i > 0: who can buy at all)."""
  c = active.shape[0]
  a = a > 0
  bought = jnp.sum(a, axis=1).astype(jnp.float32)
  sold = jnp.sum(a, axis=0).astype(jnp.float32)
  count = jnp.sum(active)
  trained_mask = active if trained_mask is None else trained_mask
  _, bad = nonfinite_rows((res.loss, res.params), c)
  bad = bad & trained_mask  # free riders' discarded lanes do not count (their N(0, 1) upload is not trained)
  f32 = lambda x: jnp.asarray(x).astype(jnp.float32)  # noqa: E731
  return RoundMetrics(
      bytes=f32((count + jnp.sum(bought)) * sent * 4.0),
      # over the clients whose training is kept: a free rider's discarded lane may diverge (its start model is
      # its own N(0, 1) upload) and must not turn the round's mean loss into NaN (it stopped the Fig. 4 run)
      train_loss=jnp.sum(jnp.where(trained_mask, res.loss, 0.0)) / jnp.maximum(jnp.sum(trained_mask), 1),
      rest_fraction=f32(jnp.mean((bought + sold) == 0)),
      mean_partners=f32(jnp.sum(bought) / jnp.maximum(count, 1)),
      active=jnp.asarray(1.0),
      nonfinite_client=jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, 0).astype(jnp.int32),
      extra={
          "utility": f32(u),  # [C] U_i of this round (eq. 3, real K, N, c; 0 out of the market)
          "accuracy": f32(acc),  # [C] each client's accuracy right after local training
          "bought": bought,  # [C] sellers each client bought from
          "sold": sold,  # [C] buyers each client sold to
          "payments": f32(pay),  # [C] p_i (eq. 13; 0 for the baselines)
          "trained": f32(active),  # [C] in the market (and trained) this round
          "active": f32(remaining),  # [C] still in the market after this round's drop-out rule
          "welfare": f32(M.social_welfare(u)),  # [] Σ_i U_i (eq. 5)
          "benign": f32(r["benign"]),  # [C] not an attacker or free rider (constant)
          "liar": f32(r["liar"]),  # [C] the liar (constant)
      } | ({"graph": f32(a)} if keep_graph else {})  # [C, C] this round's purchases (a_ij > 0)
      | ({"distance": f32(distance)} if keep_graph and distance is not None else {})  # [C, C] d_ij (eq. 2)
      | ({"price": f32(price), "buyer": f32(jnp.broadcast_to(True if buyer is None else buyer, (c,)))}
         if keep_graph and price is not None else {}))  # [C, C] R_ij (Box 2); [C] K_i > 0


def ipfl_metrics(extra: dict, active) -> dict:
  """Per-seed summary entries of a run of the family from its ``[R, ...]`` history (SPEC §5 "Evaluation"; issue 13).

  ``utility_sum``: each benign client's utility summed over rounds, averaged over benign clients (Local: 0);
  ``best_accuracy``: each benign client's best accuracy over rounds, averaged (NaN-only clients skipped);
  ``min_round_utility``: the smallest round utility of an honest client (benign, not the liar) in the market
  (Theorem 1: ≥ 0 under iPFL); ``attacker_utility`` / ``liar_utility``: the same sum for the attackers (mean) and
  the liar; ``mean_degree``: purchases per client-round in the market; ``welfare_sum``: Σ_t SW_t;
  ``final_active``: clients still in the market after the last round that ran; ``utility_clients`` and
  ``best_accuracy_clients``: the per-client figures (paper Fig. 3); ``payment_clients``: Σ_t p_i; ``purchases``: the ``[C, C]`` count of rounds
  in which i bought from j (Fig. 5's transaction graph); from the market's recorded distances and prices, the
  entries of :func:`distance_summary` and :func:`undercut_summary`.
  """
  if not extra or "utility" not in extra:
    return {}
  act = np.asarray(active, np.float64) > 0
  if not act.any():
    return {}
  get = lambda key: np.asarray(extra[key], np.float64)[act]  # noqa: E731
  u, acc, trained = get("utility"), get("accuracy"), get("trained") > 0
  benign = get("benign")[0] > 0 if "benign" in extra else np.ones(u.shape[1], bool)
  liar = get("liar")[0] > 0 if "liar" in extra else np.zeros(u.shape[1], bool)
  with np.errstate(all="ignore"):
    best = np.nanmax(np.where(np.isnan(acc), -np.inf, acc), axis=0)
  sums = u.sum(axis=0)
  honest = benign & ~liar
  in_market = trained & honest[None, :]
  ok = np.isfinite(best) & benign
  out = {
      "utility_sum": float(sums[benign].mean()) if benign.any() else float("nan"),
      "best_accuracy": float(best[ok].mean()) if ok.any() else float("nan"),
      "min_round_utility": float(u[in_market].min()) if in_market.any() else float("nan"),
      "attacker_utility": float(sums[~benign].mean()) if (~benign).any() else float("nan"),
      "liar_utility": float(sums[liar].mean()) if liar.any() else float("nan"),
      "mean_degree": float(get("bought").sum() / max(trained.sum(), 1.0)),
      "welfare_sum": float(get("welfare").sum()),
      "final_active": float(get("active")[-1].sum()),
      "utility_clients": [float(x) for x in sums],
      "payment_clients": [float(x) for x in get("payments").sum(axis=0)],
      "best_accuracy_clients": [float(x) if np.isfinite(x) else float("nan") for x in best],
  }
  if "graph" in extra:
    out["purchases"] = np.asarray(extra["graph"], np.float64)[act].sum(axis=0).tolist()
  if "distance" in extra:
    out.update(distance_summary(get("distance"), trained, benign))
  if "price" in extra and "graph" in extra and (~benign).any():
    buyer = get("buyer")[0] > 0 if "buyer" in extra else np.ones(u.shape[1], bool)
    out.update(undercut_summary(get("price"), get("graph") > 0, trained, benign, buyer))
  return out


def distance_summary(d: np.ndarray, trained: np.ndarray, benign: np.ndarray) -> dict:
  """What the market's prices saw (docs/IPFL.md §7): from the ``[R, C, C]`` distances d_ij of the rounds that ran,
  ``nearest_honest_distance`` — each benign client's smallest d_ij to another benign client in the market that
  round, averaged over clients and rounds (and per round in ``nearest_honest_distance_rounds``) — and
  ``attacker_distance``, the mean d_ij from benign clients to the attackers (NaN without attackers). A seller j
  with reported cost c_j and distance d_ij costs buyer i c_j + λ d_ij N_j / N_i (Box 2's R_ij), so at equal sizes
  an attacker reporting c = 0 at distance d_a undercuts i's nearest honest seller iff d_ij > d_a − c / λ."""
  pair = trained[:, :, None] & trained[:, None, :] & benign[None, :, None] & benign[None, None, :]
  pair &= ~np.eye(d.shape[1], dtype=bool)[None]
  near = np.min(np.where(pair, d, np.inf), axis=2)  # [R, C]
  ok = np.isfinite(near)
  per_round = [float(row[m].mean()) if m.any() else float("nan") for row, m in zip(near, ok)]
  out = {"nearest_honest_distance": float(near[ok].mean()) if ok.any() else float("nan"),
         "nearest_honest_distance_rounds": per_round}
  to_attacker = trained[:, :, None] & trained[:, None, :] & benign[None, :, None] & ~benign[None, None, :]
  out["attacker_distance"] = float(d[to_attacker].mean()) if to_attacker.any() else float("nan")
  out["attacker_distance_rounds"] = [float(row[m].mean()) if m.any() else float("nan")
                                     for row, m in zip(d, to_attacker)]
  return out


def undercut_summary(price: np.ndarray, bought: np.ndarray, trained: np.ndarray, benign: np.ndarray,
                     buyers: np.ndarray | None = None) -> dict:
  """Whether the attackers sell by being the cheapest (docs/IPFL.md §7), from the ``[R, C, C]`` prices R_ij and
  purchases of the rounds that ran, over (benign buyer in the market, round) pairs with an attacker and an honest
  seller in the market (``buyers`` ``[C]``: the benign clients counted as buyers, K_i > 0; all when None): ``attacker_cheapest``, the fraction where some attacker's price is below every honest
  seller's; ``attacker_bought``, the fraction where the buyer bought from an attacker; ``attacker_bought_when_
  cheapest`` and ``attacker_bought_otherwise``, the latter's rate split by the former (NaN where no pair)."""
  c = price.shape[1]
  other = ~np.eye(c, dtype=bool)[None]
  seller = trained[:, None, :] & other  # [R, buyer, seller]
  honest = np.where(seller & benign[None, None, :], price, np.inf).min(axis=2)  # [R, C]
  attack = np.where(seller & ~benign[None, None, :], price, np.inf).min(axis=2)
  buyers = benign if buyers is None else benign & buyers
  pairs = trained & buyers[None, :] & np.isfinite(honest) & np.isfinite(attack)
  cheapest = attack < honest
  took = np.any(bought & seller & ~benign[None, None, :], axis=2)
  rate = lambda m: float(took[m].mean()) if m.any() else float("nan")  # noqa: E731
  return {"attacker_cheapest": float(cheapest[pairs].mean()) if pairs.any() else float("nan"),
          "attacker_bought": rate(pairs), "attacker_bought_when_cheapest": rate(pairs & cheapest),
          "attacker_bought_otherwise": rate(pairs & ~cheapest)}


def check_federation(name: str, config, num_clients: int) -> None:
  """The family needs ≥ 2 clients and every listed client index (liar, roles, attackers) < C.

  Raises:
    ConfigError: naming the setting to change.
  """
  from fedjax_sim.errors import ConfigError
  require_federation(name, num_clients)
  s = config.ipfl
  if s.liar >= num_clients:
    raise ConfigError(f"ipfl.liar = {s.liar} is not a client of this federation of {num_clients}; set it "
                      f"to a client index below {num_clients}, or −1 for none")
  for key in ("traders", "buyers", "sellers", "attackers"):
    bad = [i for i in getattr(s, key) if i >= num_clients]
    if bad:
      raise ConfigError(f"ipfl.{key} = {list(getattr(s, key))} names client(s) {bad} outside this federation of "
                        f"{num_clients}; use indices below {num_clients}")


def _validate(settings: IPFLConfig, config) -> None:
  """Two-field checks: every client has at most one role; ``attack_in_place = false`` needs the market rule."""
  from fedjax_sim.errors import ConfigError
  if not settings.attack_in_place and settings.rule != "market":
    raise ConfigError(f"ipfl.attack_in_place = false is defined for ipfl.rule = market only (here "
                      f"{settings.rule!r}); set ipfl.attack_in_place = true or ipfl.rule = market")
  seen = {}
  for key in ("traders", "buyers", "sellers"):
    for i in getattr(settings, key):
      if i in seen and seen[i] != key:
        raise ConfigError(f"client {i} is in both ipfl.{seen[i]} and ipfl.{key}; give each client one role")
      seen[i] = key


def _build(ctx: BuildContext) -> Algorithm:
  from fedjax_sim.tasks import task_for
  task = task_for(ctx.config, ctx.federation)
  return ipfl(ctx.model, ctx.client_update, task.score, task.loss, ctx.settings, num_clients=ctx.num_clients,
              name=ctx.name)


PLAYGROUND = {"ipfl.gain_scale": 5e7, "ipfl.lam": 1.0, "ipfl.eta": 5.0, "ipfl.traders": (3, 4, 6),
              "ipfl.buyers": (1, 2, 8, 9), "ipfl.sellers": (0, 5, 7, 10), "ipfl.attackers": (11,),
              "ipfl.attack": "shuffle"}
"""The market playground of paper 003 Fig. 5 (issue 13): K = 5e7, λ = 1, η = 5; roles by index; client 11 the
attacker (a seller with K = c = 0 that shuffles its model). Its experiment (configs/ipfl_market.toml) sets the
12 clients and Dirichlet β = 1."""

PRESETS = {
    "ipfl": {},  # the model market (rule = market)
    "ipfl_local": {"ipfl.rule": "local"},
    "ipfl_fedavg": {"ipfl.rule": "fedavg"},
    "ipfl_fedprox": {"ipfl.rule": "fedprox"},
    "ipfl_ditto": {"ipfl.rule": "ditto"},
    "ipfl_fedamp": {"ipfl.rule": "fedamp"},
    "ipfl_cfl": {"ipfl.rule": "cfl"},
    "ipfl_fedfomo": {"ipfl.rule": "fedfomo"},
    "ipfl_pfedgraph": {"ipfl.rule": "pfedgraph"},
    "ipfl_playground": PLAYGROUND,
}
PRESETS.update({f"{name}_{attack}": dict(preset, **{"ipfl.attack": attack})
                for name, preset in list(PRESETS.items()) if name != "ipfl_playground" for attack in ATTACKS[1:]})
PRESETS.update({f"ipfl_{attack}_kept": {"ipfl.attack": attack, "ipfl.attack_in_place": False}
                for attack in ("shuffle", "sign_flip")})  # the attacker keeps its trained model (stage 3)
PRESETS.update({  # paper 003 Table 2: one liar (ipfl.liar, set by the experiment) misreports N or c
    "ipfl_liar_n01": {"ipfl.liar_size_ratio": 0.1}, "ipfl_liar_n05": {"ipfl.liar_size_ratio": 0.5},
    "ipfl_liar_n10": {"ipfl.liar_size_ratio": 10.0}, "ipfl_liar_c2": {"ipfl.liar_cost_ratio": 2.0},
    "ipfl_liar_c5": {"ipfl.liar_cost_ratio": 5.0}, "ipfl_liar_c10": {"ipfl.liar_cost_ratio": 10.0}})
"""iPFL and its seven baselines (issue 13 item 5) as presets of one family: the same stages with another rule, so
attacks, liars, roles and drop-out (``--set ipfl.attack=…``) act on every row alike. ``NAME_ATTACK`` is ``NAME``
under one of the four attacks (``ipfl_fedavg_shuffle``; Fig. 4), ``ipfl_shuffle_kept`` and
``ipfl_sign_flip_kept`` iPFL under an attacker that keeps its trained model (``ipfl.attack_in_place = false``),
``ipfl_liar_*`` iPFL with a lying client
(Table 2: ``n01``, ``n05``, ``n10`` report N × 0.1, 0.5, 10; ``c2``, ``c5``, ``c10`` c × 2, 5, 10). The liars' ratios are traced: every ``ipfl_liar_*`` preset compiles to the same program."""


def _reports() -> dict:
  from fedjax_sim.algorithms.ipfl.report import REPORTS
  return REPORTS


SPECS = (
    MethodSpec(methods=PRESETS, build=_build, section="ipfl", settings=IPFLConfig, hyper=IPFLHyper,
               regularizer=local_regularizer, metrics=ipfl_metrics, check_federation=check_federation,
               validate=_validate, reports=_reports()),
)
