"""The FBS-FL round (fedjax_sim/algorithms/fbsfl/algorithm.py; paper 002 Algorithm 1; SPEC §4.2; issue 12 item 3).

The compiled round, run for 18 rounds on a tiny 8-client, 3-class federation with K = 2 and S = 2 training slots
(so fillers and drops both occur), must equal a plain Python loop over rounds and clients built from the same
pieces and keys: each participant trained alone with the same ``client_update`` and key, its reported loss, the
q-fair weights and the aggregation recomputed in float64 numpy, the state s_t and the proxy loss recomputed by
hand. The same run shows that a second call does not retrace and that the PPO parameters change exactly at round
16. A second build (dependent rounding, logit followers) runs as one scanned program: |I_t| ≤ K every round.
Compiled programs are shared through module-level fixtures.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim import run
from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.fbsfl import algorithm as A
from fedjax_sim.algorithms.fbsfl import beliefs, economics, followers, inclusion, ppo, strategic
from fedjax_sim.algorithms.fbsfl.projection import capped_simplex_projection
from fedjax_sim.config import ExperimentConfig, LearnerConfig, ParticipationConfig, apply_overrides
from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.labeled import from_partition
from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
from fedjax_sim.engine.simulate import make_simulation
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import task_for
from tests.conftest import bucket_rows

SIZES = (20, 5, 40, 9, 33, 12, 27, 14)  # train rows ≈ 80%: some above REPORT (drawn rows), some at or below (all)
CLASSES, BATCH, EPOCHS, K, SLOTS, REPORT, ROUNDS = 3, 4, 2, 2, 2, 8, 18

CONFIG = apply_overrides(ExperimentConfig(
    rounds=ROUNDS,
    learner=LearnerConfig(hidden=(8,), dropout=0.2, optimizer="sgd", schedule="cosine", learning_rate=0.05,
                          final_learning_rate=0.005, momentum=0.9, weight_decay=5e-4, batch_size=BATCH,
                          local_epochs=EPOCHS, num_buckets=2),
    participation=ParticipationConfig(clients_per_round=K)),
    {"methods": "fbsfl", "fbsfl.slots": SLOTS, "fbsfl.report_rows": REPORT, "fbsfl.ppo_hidden": 16})


def tiny_federation():
  rng = np.random.default_rng(0)
  n = sum(SIZES)
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = rng.integers(0, CLASSES, n).astype(np.int32)
  x[np.arange(n), y] += 1.5  # a learnable signal
  parts = np.split(rng.permutation(n), np.cumsum(SIZES)[:-1])
  data = LabeledData(x=x, y=y, num_classes=CLASSES, description="fabricated").validate()
  return from_partition(data, parts, [f"c{i}" for i in range(len(SIZES))], seed=5, split=(0.8, 0.1, 0.1),
                        batch_size=BATCH, num_buckets=2)


def leaves64(tree):
  return [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(tree)]


def numpy_ce(logits, labels) -> np.ndarray:
  z = np.asarray(logits, np.float64)
  z = z - z.max(axis=1, keepdims=True)
  return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(labels)), np.asarray(labels)]


# --- the compiled round, 18 rounds --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def main_run():
  """The registry's fbsfl on the tiny federation: the round jitted under a trace guard, run for 18 rounds."""
  host = tiny_federation()
  algorithm, model = registry.build_method("fbsfl", CONFIG, host)
  fed = algorithm.prepare(host)
  hyper = registry.hyper_from_config(CONFIG, "fbsfl")
  init_key = jax.random.key(0)
  state = jax.jit(algorithm.init)(init_key, fed, hyper)  # one compile (op by op, init compiles every primitive)
  round_jit = jax.jit(chex.assert_max_traces(algorithm.round, n=1))
  keys = jax.random.split(jax.random.key(5), ROUNDS)  # a key whose rounds see drops (|y| > S) and fillers
  states, metrics = [state], []
  for t in range(1, ROUNDS + 1):
    state, m = round_jit(keys[t - 1], state, fed, hyper, jnp.asarray(t, jnp.int32))
    states.append(state)
    metrics.append(jax.device_get(m))
  return dict(algorithm=algorithm, host=host, fed=fed, model=model, hyper=hyper, init_key=init_key, keys=keys,
              states=states, metrics=metrics, round_jit=round_jit)


# --- the plain Python reference -------------------------------------------------------------------------------


def reference_run(r):
  """Rounds 1..18 as a Python loop over rounds and clients, from the pieces and the same keys.

  Each piece is jitted on its own (op-by-op dispatch would compile every primitive separately); the state s_t,
  the slot rule, the reported losses, the q-fair weights, the aggregation, p_t, ĉ, the proxy loss and the penalty
  are recomputed here in numpy.
  """
  host, model, hyper = r["host"], r["model"], r["hyper"]
  h, s = hyper.method, CONFIG.fbsfl
  n_clients = len(SIZES)
  rows = bucket_rows(host)
  n_train = np.asarray(host.n_train)
  pad = int(n_train.max())  # every client's rows padded to one length: one compile of client_update, and a no-op
  # by its contract (surplus steps masked; the row order does not depend on the padding: tests/test_platform.py)
  task = task_for(CONFIG, host)
  client_update = jax.jit(make_client_update(task, batch_size=BATCH, epochs=EPOCHS))
  forward = jax.jit(lambda p, x: model.apply(p, x, False, None)[0])
  pp = ppo.PPOHyper(clip_eps=h.ppo_clip, value_clip=h.ppo_value_clip, gamma=h.ppo_gamma, gae_lambda=h.ppo_gae_lambda,
                    lr=h.ppo_lr, max_grad_norm=h.ppo_max_grad_norm, vf_coef=h.ppo_vf_coef, ent_coef=h.ppo_ent_coef)
  actor = ppo.ActorCritic(n_clients, hidden=s.ppo_hidden)
  act = jax.jit(lambda p, k, o: ppo.act(actor.apply, p, k, o))
  project = jax.jit(capped_simplex_projection)
  offers_of = jax.jit(lambda pi, c, pt: economics.offers(pi, c, pt, delta=h.delta, b0=h.b0, b_max=h.b_max))
  include = jax.jit(inclusion.independent_inclusion)
  respond = jax.jit(lambda k, e: followers.exp3_respond(k, e, h.exp3_gamma))
  believe = jax.jit(lambda b, r_, a, z: beliefs.belief_update(b, r_, a, z, h.lam_obs))
  r_max = 1.0 * (1 + float(h.delta)) + float(h.b0) * float(h.b_max)  # eq. 10's cap, with ĉ ≤ κ^(M) = 1
  learn = jax.jit(lambda e, a, pr, r_, kap, z: followers.exp3_update(
      e, a, pr, followers.exp3_reward(a, r_, kap, r_max, 1.0), z, h.exp3_eta))
  reward_of = jax.jit(lambda m, t, d, c, b: economics.leader_reward(m, t, d, c, b, h.alpha, h.beta_max, h.t0))
  store = jax.jit(ppo.add)
  update = jax.jit(ppo.maybe_update)
  uniform = jax.jit(lambda k: jax.random.uniform(k, (REPORT,)))
  m_val = np.asarray(host.m_val)
  proxy_x, proxy_y = np.asarray(host.x_val)[m_val], np.asarray(host.y_val)[m_val]  # every val row (P = 512 > V)
  f32 = lambda tree: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), tree)  # noqa: E731

  def proxy_loss(w):
    return float(numpy_ce(forward(f32(w), proxy_x), proxy_y).mean())

  # init: split(key, 3) → model, types, leader
  k_model, k_types, k_leader = jax.random.split(r["init_key"], 3)
  w = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), jax.jit(model.init)(k_model))
  d = 3 + 2 * n_clients
  leader = jax.jit(lambda k: ppo.init_train_state(k, actor, d, pp))(k_leader)
  buffer = ppo.init_buffer(d, n_clients, 16)
  kappa = np.asarray(beliefs.sample_types(k_types, n_clients))
  belief = beliefs.belief_init(n_clients)
  exp3 = followers.exp3_init(n_clients)
  grid = np.asarray(beliefs.TYPE_GRID)
  post = lambda b: np.asarray(jax.nn.softmax(np.asarray(b.log_mu, np.float64), axis=-1)) @ grid  # noqa: E731
  p = np.full(n_clients, 1.0 / n_clients, np.float32)
  counts = np.zeros(n_clients)
  c_hat, c_rounds = post(belief), 1
  moments = economics.moments_init()
  loss_prev, progress_prev = proxy_loss(w), 0.0

  def state_vector(t, loss, progress, p, belief):
    return np.concatenate([[t / ROUNDS, loss, progress], n_clients * p, post(belief)]).astype(np.float32)

  out = []
  for t in range(1, ROUNDS + 1):
    k_actor, k_incl, k_resp, k_report, k_train, k_ppo = jax.random.split(r["keys"][t - 1], 6)
    obs = state_vector(t, loss_prev, progress_prev, p, belief)
    logits, log_prob, value, pi_hat = act(leader.params, k_actor, jnp.asarray(obs))
    pi = project(pi_hat, K)
    p_tilde = (p + 1e-3) / np.sum(p + 1e-3)
    offers = np.asarray(offers_of(pi, jnp.asarray(c_hat, jnp.float32), jnp.asarray(p_tilde, jnp.float32)))
    z = np.asarray(include(k_incl, pi))
    accept, prob = respond(k_resp, exp3)
    y = z & np.asarray(accept)
    trained = np.flatnonzero(y)[:SLOTS]  # the first S participants by index; the rest dropped for slots
    report_keys, train_keys = jax.random.split(k_report, n_clients), jax.random.split(k_train, n_clients)
    w32 = f32(w)
    thetas, reported, losses, max_weight = [], [], [], 0.0
    for i in trained:  # each participant alone
      x_i, y_i = rows[int(i)]
      n_i = len(x_i)
      pos = np.arange(n_i)  # F_i(w_{t−1}) on all its rows, or on REPORT rows drawn with replacement
      if n_i > REPORT:
        pos = np.minimum(np.floor(np.asarray(uniform(report_keys[i])) * n_i), n_i - 1).astype(np.int64)
      reported.append(float(numpy_ce(forward(w32, x_i[pos]), y_i[pos]).mean()))
      x_pad = np.concatenate([x_i, np.zeros((pad - n_i,) + x_i.shape[1:], x_i.dtype)])
      y_pad = np.concatenate([y_i, np.zeros((pad - n_i,), y_i.dtype)])
      res = client_update(train_keys[i], w32, ClientData(jnp.asarray(x_pad), jnp.asarray(y_pad), jnp.int32(n_i)),
                          ClientContext(shared=w32, hyper=hyper, t=jnp.int32(t)))
      thetas.append(leaves64(res.params))
      losses.append(float(res.loss))
    if len(trained):  # q-fair weights (eq. 13) and w_t = w_{t−1} + Σ α_i Δw_i (eq. 6), in float64
      mass = n_train[trained] * (np.asarray(reported) + float(h.delta_q)) ** float(h.q)
      alpha = mass / mass.sum()
      max_weight = float(alpha.max())
      flat = jax.tree_util.tree_leaves(w)
      new = [x + sum(a * (th[j] - x) for a, th in zip(alpha, thetas)) for j, x in enumerate(flat)]
      w = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(w), new)
    p = ((1 - float(h.rho)) * p + float(h.rho) * y).astype(np.float32)
    counts = counts + y
    belief = believe(belief, jnp.asarray(offers), accept, jnp.asarray(z))
    exp3 = learn(exp3, accept, prob, jnp.asarray(offers), jnp.asarray(kappa), jnp.asarray(z))
    m_t = post(belief)
    c_hat = c_hat + (m_t - c_hat) / (c_rounds + 1)
    c_rounds += 1
    loss_now = proxy_loss(w)
    progress = max(0.0, loss_prev - loss_now)
    spent = float(np.sum(offers[y]))
    bonus = float(np.sum(float(h.b0) * np.minimum(1.0 / (n_clients * p_tilde[y]), float(h.b_max))))  # p̃_{t−1}
    p_tilde = (p + 1e-3) / np.sum(p + 1e-3)
    jain = p.sum() ** 2 / (n_clients * np.sum(p.astype(np.float64) ** 2))
    penalty = float(h.gamma1) * (1 - jain) + float(h.gamma2) * np.sum(p_tilde * np.log(n_clients * p_tilde))
    f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    reward, moments, _ = reward_of(moments, jnp.int32(t), f(progress), f(spent), f(penalty))
    buffer = store(buffer, jnp.asarray(obs), logits, log_prob, value, reward)
    next_obs = state_vector(t + 1, loss_now, progress, p, belief)
    leader, info = update(buffer.index, leader, buffer, jnp.asarray(next_obs), k_ppo, pp)
    loss_prev, progress_prev = loss_now, progress
    out.append(dict(w=leaves64(w), y=y, z=z, trained=trained, spent=spent, bonus=bonus, reward=float(reward),
                    loss=loss_now, train_loss=float(np.mean(losses)) if losses else 0.0, updated=float(info.updated),
                    leader=leaves64(leader.params), counts=counts.copy(), kappa=kappa,
                    belief_mae=float(np.mean(np.abs(m_t - kappa))), max_weight=max_weight))
  return out


@pytest.fixture(scope="module")
def reference(main_run):
  return reference_run(main_run)


def test_compiled_round_equals_a_python_loop_over_rounds_and_clients(main_run, reference):
  states, metrics = main_run["states"], main_run["metrics"]
  dropped_rounds = filler_rounds = 0
  for t, (ref, m, state) in enumerate(zip(reference, metrics, states[1:]), start=1):
    e = m.extra
    np.testing.assert_array_equal(e["included"], ref["z"].astype(np.float32), err_msg=f"round {t}")
    np.testing.assert_array_equal(e["participation"], ref["y"].astype(np.float32), err_msg=f"round {t}")
    assert float(e["dropped"]) == ref["y"].sum() - len(ref["trained"])
    assert float(e["included_count"]) == ref["z"].sum() and float(e["over_k"]) == float(ref["z"].sum() > K)
    for got, want in zip(leaves64(state.global_params), ref["w"]):
      np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=f"round {t}")
    assert float(e["expenditure"]) == pytest.approx(ref["spent"], rel=1e-5, abs=1e-6)
    assert float(e["bonus_expenditure"]) == pytest.approx(ref["bonus"], rel=1e-5, abs=1e-6)
    assert float(e["proxy_loss"]) == pytest.approx(ref["loss"], rel=1e-5, abs=1e-6)
    assert float(e["reward"]) == pytest.approx(ref["reward"], rel=1e-4, abs=1e-4)
    assert float(m.train_loss) == pytest.approx(ref["train_loss"], abs=1e-5)
    assert float(e["ppo_updated"]) == ref["updated"]
    assert float(e["belief_mae"]) == pytest.approx(ref["belief_mae"], abs=1e-5)
    assert float(e["max_weight"]) == pytest.approx(ref["max_weight"], abs=1e-5)
    np.testing.assert_allclose(np.asarray(state.counts), ref["counts"])
    for got, want in zip(leaves64(state.leader.params), ref["leader"]):
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"round {t}")
    assert float(m.bytes) == len(ref["trained"]) * 2 * main_run["algorithm"].sent_params * 4  # trained only
    dropped_rounds += ref["y"].sum() > SLOTS
    filler_rounds += ref["y"].sum() < SLOTS
  np.testing.assert_array_equal(np.asarray(states[0].kappa), reference[0]["kappa"])
  # Guards: the run exercised the slot logic both ways, trained someone and moved the model.
  assert dropped_rounds >= 1 and filler_rounds >= 1
  assert sum(len(r["trained"]) for r in reference) >= 5
  assert max(np.abs(a - b).max() for a, b in zip(leaves64(states[-1].global_params),
                                                  leaves64(states[0].global_params))) > 1e-2


def test_a_second_call_does_not_retrace(main_run):
  r = main_run
  before = r["states"][-1]
  h2 = r["hyper"].replace(method=r["hyper"].method.replace(q=jnp.float32(0.0), alpha=jnp.float32(2.0)))
  r["round_jit"](jax.random.key(9), before, r["fed"], h2, jnp.asarray(ROUNDS + 1, jnp.int32))  # no AssertionError


def test_ppo_parameters_change_exactly_at_round_16(main_run):
  params = [leaves64(s.leader.params) for s in main_run["states"]]
  same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(a, b))  # noqa: E731
  changed = [t for t in range(1, ROUNDS + 1) if not same(params[t], params[t - 1])]
  assert changed == [16]
  assert [t for t, m in enumerate(main_run["metrics"], start=1) if float(m.extra["ppo_updated"])] == [16]
  assert int(main_run["states"][16].buffer.index) == 16


# --- dependent rounding as one scanned program -----------------------------------------------------------------


def test_dependent_rounding_never_exceeds_k_and_independent_does(main_run):
  config = apply_overrides(CONFIG, {"fbsfl.rounding": "dependent", "fbsfl.follower": "logit"})
  algorithm, model = registry.build_method("fbsfl", config, main_run["host"])
  fed = algorithm.prepare(main_run["host"])
  hyper = registry.hyper_from_config(config, "fbsfl")
  score = task_for(config, main_run["host"]).score
  simulate = jax.jit(chex.assert_max_traces(make_simulation(algorithm, model, ROUNDS, score), n=1))
  for seed in (0, 1):  # the second seed reuses the compiled program
    out = jax.device_get(simulate(jax.random.key(seed), fed, hyper))
    e = out.history.metrics.extra
    sizes, total = np.asarray(e["included_count"]), np.asarray(e["pi_sum"])
    assert sizes.max() <= K and np.all(total <= K + 1e-5)
    assert np.all((sizes == np.floor(total + 1e-6)) | (sizes == np.ceil(total - 1e-6)))  # |I_t| ∈ {⌊Σπ⌋, ⌈Σπ⌉}
    assert np.all(np.asarray(e["over_k"]) == 0)
    assert np.asarray(e["ppo_updated"]).tolist() == [0.0] * 15 + [1.0] + [0.0] * 2
  # Independent Bernoulli inclusion (the main run) exceeded K in some round (P(|I_t| > 2) ≈ 0.3 per round here).
  assert max(float(m.extra["included_count"]) for m in main_run["metrics"]) > K


def test_uniform_selection_participation_is_the_strategic_layer_alone(main_run):
  """fbsfl_uniform (π = K/N, EXP3 followers, eq. 10's offers): y, z, C_tot and the bonus come from the seed, the
  types and the followers only, so the training-free layer (strategic.py) gives them bit for bit."""
  config = apply_overrides(CONFIG, {"fbsfl.selection": "uniform", "fbsfl.slots": 0})
  algorithm, model = registry.build_method("fbsfl", config, main_run["host"])
  fed = algorithm.prepare(main_run["host"])
  hyper = registry.hyper_from_config(config, "fbsfl")
  rounds = 8
  simulate = jax.jit(make_simulation(algorithm, model, rounds, task_for(config, main_run["host"]).score))
  out = jax.device_get(simulate(jax.random.key(7), fed, hyper))
  e = out.history.metrics.extra
  layer = jax.device_get(strategic.simulate_seed(jax.random.key(7), rounds, hyper.method, num_clients=len(SIZES),
                                                 k=K, pricing="fbsfl"))
  np.testing.assert_array_equal(layer.kappa, out.state.kappa)
  np.testing.assert_array_equal(layer.z.astype(np.float32), e["included"])
  np.testing.assert_array_equal(layer.y.astype(np.float32), e["participation"])
  assert 0 < layer.y.sum() < layer.z.sum()  # guard: some included clients accepted, some rejected
  np.testing.assert_allclose((layer.r * layer.y).sum(1), e["expenditure"], rtol=1e-6)
  np.testing.assert_allclose((layer.bonus * layer.y).sum(1), e["bonus_expenditure"], rtol=1e-6)
  assert np.all(layer.bonus[0] == pytest.approx(0.1))  # round 1: p̃_0 uniform, N p̃ = 1, bonus b_0


def test_uniform_selection_br_followers_and_frozen_beliefs_trace():
  """The static branches not compiled above (uniform π = K/N, best-response followers, μ frozen) trace."""
  host = tiny_federation()
  config = apply_overrides(CONFIG, {"fbsfl.selection": "uniform", "fbsfl.follower": "br",
                                    "fbsfl.freeze_beliefs": "true", "fbsfl.slots": 0})
  algorithm, _ = registry.build_method("fbsfl", config, host)
  fed = algorithm.prepare(host)
  hyper = registry.hyper_from_config(config, "fbsfl")
  state = jax.eval_shape(algorithm.init, jax.random.key(0), fed, hyper)  # shapes only: nothing compiles
  _, m = jax.eval_shape(algorithm.round, jax.random.key(1), state, fed, hyper, jnp.int32(1))
  assert m.extra["participation"].shape == (len(SIZES),)
  assert A.auto_slots(len(SIZES), K) == len(SIZES) and A.auto_slots(100, 10) == 27


# --- the summary reducer and the configuration ---------------------------------------------------------------


def test_metrics_reducer_of_a_hand_made_history():
  extra = {"participation": np.array([[1, 0, 1], [0, 1, 0], [1, 1, 1], [0, 0, 1]], np.float32),
           "included_count": np.array([3, 1, 3, 2], np.float32), "over_k": np.array([1, 0, 1, 0], np.float32),
           "expenditure": np.array([1.0, 0.5, 9.0, 0.25]), "bonus_expenditure": np.array([0.5, 0.0, 4.0, 0.25]),
           "participants": np.array([2, 1, 3, 0], np.float32),
           "dropped": np.array([0, 0, 1, 0], np.float32), "belief_mae": np.array([0.3, 0.2, 0.1, 0.05]),
           "br_disagree": np.array([1, 0, 0, 1], np.float32), "br_gap": np.array([0.2, 0.0, 0.0, 0.1]),
           "ppo_updated": np.array([0, 1, 0, 0], np.float32), "max_weight": np.array([0.7, 1.0, 0.5, 0.0])}
  active = np.array([1.0, 1.0, 0.0, 1.0])  # round 3 did not run
  out = A.fbsfl_metrics(extra, active)
  assert out["c_tot"] == pytest.approx(1.75) and out["c_tot_bonus"] == pytest.approx(0.75)
  assert out["included_mean"] == pytest.approx(2.0) and out["included_max"] == 3.0
  assert out["included_over_k"] == pytest.approx(1 / 3)
  assert out["included_p95"] == pytest.approx(np.percentile([3, 1, 2], 95))
  assert out["accepted_updates"] == 3.0 and out["dropped_for_slots"] == 0.0
  assert out["belief_mae"] == pytest.approx(0.05)  # the last round that ran
  assert out["br_disagreement"] == pytest.approx(2 / 6) and out["eps_br"] == pytest.approx(0.3 / 6)
  assert out["ppo_updates"] == 1.0
  assert out["max_weight_mean"] == pytest.approx(0.85)  # rounds 1 and 2 aggregated; round 4 had no participant
  assert out["participation_jain"] == pytest.approx(16.0 / (3 * 6))  # counts (1, 1, 2): (Σc)² / (N Σc²)
  # Round-by-round curves: counts (1,0,1), (1,1,1), (1,1,1) [round 3 did not run], (1,1,2).
  assert out["accepted_curve"] == pytest.approx([2, 3, 3, 3]) and out["c_tot_curve"] == pytest.approx(
      [1.0, 1.5, 1.5, 1.75])
  assert out["jain_curve"] == pytest.approx([4 / 6, 1.0, 1.0, 16 / 18])
  assert out["jain_curve"][-1] == pytest.approx(out["participation_jain"], rel=1e-6)
  assert out["kl_curve"][0] == pytest.approx(np.log(3 / 2)) and out["kl_curve"][1] == pytest.approx(0.0, abs=1e-12)
  assert out["kl_curve"][-1] == pytest.approx(out["participation_kl_uniform"], rel=1e-5)
  assert A.fbsfl_metrics({}, active) == {}


def test_bad_follower_name_is_one_error_line(tmp_path, capsys):
  out = tmp_path / "out"
  assert run.main(["fbsfl", "--set", "fbsfl.follower=nash", "--out", str(out)]) == 2
  errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and "fbsfl.follower must be one of exp3, br, logit, got 'nash'" in errors[0], errors
  assert not (out / "summary.json").exists()


def test_config_checks():
  with pytest.raises(ConfigError, match="fbsfl.ppo_minibatches must divide fbsfl.ppo_rollout = 16"):
    apply_overrides(CONFIG, {"fbsfl.ppo_minibatches": 3})
  with pytest.raises(ConfigError, match="fbsfl.rounding must be one of independent, dependent"):
    apply_overrides(CONFIG, {"fbsfl.rounding": "pairwise"})
  every = apply_overrides(CONFIG, {"participation.clients_per_round": 0})
  registry.check_federation("fbsfl", every, 8)  # K = 0, the platform's "every client", reads as K = N
  assert A.inclusion_limit(every, 8) == 8 and A.inclusion_limit(CONFIG, 8) == K
  with pytest.raises(ConfigError, match="fbsfl.slots = 9 exceeds the federation's 8 clients"):
    registry.check_federation("fbsfl", apply_overrides(CONFIG, {"fbsfl.slots": 9}), 8)
  registry.check_federation("fbsfl", CONFIG, 8)  # positive control
