"""The iPFL round (fedjax_sim/algorithms/ipfl/algorithm.py; paper 003; SPEC §5; issue 13).

The compiled round, run for 4 rounds on a tiny 5-client, 3-class federation (an MLP, 3 local steps of batch 4),
must equal a plain Python loop over rounds and clients built from the same pieces and keys: each client trained
alone with the same ``client_update`` and key (round 1 without the penalty, then with its own prox center), its
accuracy, the distance, the Box 2 greedy loop, the remittances, payments, utilities and prox centers recomputed
client by client in float64 numpy (the thresholds from :func:`market.thresholds`, the tested piece). The run has a
liar (client 4 reports int(N·0.1) rows and twice its cost) and IR-strict drop-out: the liar's utility is negative
in round 1, so it leaves and never trains, buys or sells again. Compiled programs are shared through a module-level
fixture.
"""
from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.ipfl import algorithm as A
from fedjax_sim.algorithms.ipfl import market as M
from fedjax_sim.config import (ExperimentConfig, LearnerConfig, apply_overrides, config_for_method, load_experiment,
                               validate)
from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.labeled import from_partition
from fedjax_sim.engine.local import ClientContext, ClientData
from fedjax_sim.engine.simulate import make_simulation
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import task_for
from tests.conftest import with_method

SIZES = (14, 9, 22, 11, 30)  # train rows 10, 7, 16, 7, 22 (70/15/15)
CLASSES, BATCH, STEPS, ROUNDS, LIAR = 3, 4, 3, 4, 4
LAM, ETA, K, COST = 0.5, 0.5, 1000.0, 1.0

CONFIG = apply_overrides(ExperimentConfig(
    rounds=ROUNDS,
    learner=LearnerConfig(hidden=(8,), dropout=0.2, optimizer="sgd", learning_rate=0.05, momentum=0.9,
                          weight_decay=1e-5, batch_size=BATCH, local_steps=STEPS, num_buckets=2)),
    {"methods": "ipfl", "ipfl.lam": LAM, "ipfl.eta": ETA, "ipfl.gain_scale": K, "ipfl.cost": COST,
     "ipfl.liar": LIAR, "ipfl.liar_size_ratio": 0.1, "ipfl.liar_cost_ratio": 2.0, "ipfl.dropout": "strict"})


def labeled():
  rng = np.random.default_rng(0)
  n = sum(SIZES)
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = rng.integers(0, CLASSES, n).astype(np.int32)
  x[np.arange(n), y] += 1.5  # a learnable signal
  parts = np.split(rng.permutation(n), np.cumsum(SIZES)[:-1])
  return LabeledData(x=x, y=y, num_classes=CLASSES, description="fabricated").validate(), parts


def tiny_federation(shared_test=None):
  data, parts = labeled()
  return from_partition(data, parts, [f"c{i}" for i in range(len(SIZES))], seed=5, split=(0.7, 0.15, 0.15),
                        batch_size=BATCH, num_buckets=2, shared_test=shared_test)


def leaves64(tree):
  return [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(tree)]


def flat64(tree) -> np.ndarray:
  return np.concatenate([a.ravel() for a in leaves64(tree)])


def client_rows(fed) -> dict:
  """Client index → its bucket's padded train rows ``(x, y, n)`` (exactly what the compiled round trains on)."""
  out = {}
  for b in fed.buckets:
    for pos, i in enumerate(np.asarray(b.client_idx).tolist()):
      out[i] = (b.x[pos], b.y[pos], b.n[pos])
  return out


# --- the compiled round, 4 rounds -----------------------------------------------------------------------------


def test_only_the_market_rule_advises_on_its_prox_step_when_it_faults():
  host = tiny_federation()
  market, _ = registry.build_method("ipfl", CONFIG, host)
  assert "ipfl.eta" in market.fault_hint and "N_j / N_i" in market.fault_hint
  config = config_for_method(apply_overrides(CONFIG, {"methods": "ipfl_fedavg"}), registry.preset("ipfl_fedavg"))
  assert registry.build_method("ipfl_fedavg", config, host)[0].fault_hint == ""


@pytest.fixture(scope="module")
def main_run():
  """The registry's ipfl on the tiny federation: the round jitted under a trace guard, run for 4 rounds."""
  host = tiny_federation()
  algorithm, model = registry.build_method("ipfl", CONFIG, host)
  fed = algorithm.prepare(host)
  hyper = registry.hyper_from_config(CONFIG, "ipfl")
  init_key = jax.random.key(0)
  state = jax.jit(algorithm.init)(init_key, fed, hyper)
  round_jit = jax.jit(chex.assert_max_traces(algorithm.round, n=1))
  keys = jax.random.split(jax.random.key(5), ROUNDS)
  states, metrics = [state], []
  for t in range(1, ROUNDS + 1):
    state, m = round_jit(keys[t - 1], state, fed, hyper, jnp.asarray(t, jnp.int32))
    states.append(state)
    metrics.append(jax.device_get(m))
  return dict(algorithm=algorithm, host=host, fed=fed, model=model, hyper=hyper, init_key=init_key, keys=keys,
              states=states, metrics=metrics, round_jit=round_jit)


# --- the plain Python reference -------------------------------------------------------------------------------


def greedy_row(t_row: np.ndarray, n: np.ndarray, i: int) -> list:
  """Box 2's greedy loop for buyer i: sellers by decreasing T (ties: lower index), buy j while n + N_j < T_ij."""
  order = sorted((j for j in range(len(n)) if j != i), key=lambda j: (-t_row[j], j))
  total, bought = n[i], []
  for j in order:
    if not total + n[j] < t_row[j]:
      break
    bought.append(j)
    total += n[j]
  return bought


def reference_run(r):
  """Rounds 1..4 as a Python loop over rounds and clients, from the pieces and the same keys (float64 numpy)."""
  host, model, hyper = r["host"], r["model"], r["hyper"]
  c = len(SIZES)
  rows = client_rows(host)
  task = task_for(CONFIG, host)
  from fedjax_sim.engine.local import make_client_update
  client_update = jax.jit(make_client_update(task, batch_size=BATCH, epochs=1, local_steps=STEPS,
                                             regularizer=A.local_regularizer))
  forward = jax.jit(lambda p, x: model.apply(p, x, False, None)[0])
  thresholds = jax.jit(lambda k, n, cc, d: M.thresholds(k, n, cc, d, LAM, iters=32))
  n_real = np.asarray(host.n_train, np.float64)
  n_rep = n_real.copy()
  n_rep[LIAR] = max(1, int(n_real[LIAR] * 0.1))
  c_rep = np.full(c, COST)
  c_rep[LIAR] = 2.0 * COST  # reported c; the real one, COST, is in the utility
  theta0 = jax.jit(model.init)(jax.random.split(r["init_key"])[0])  # init: split → model, traders' draws
  treedef = jax.tree_util.tree_structure(theta0)
  shapes = [a.shape for a in jax.tree_util.tree_leaves(theta0)]
  flat0 = flat64(theta0)

  def unflat(v):
    out, at = [], 0
    for s in shapes:
      size = int(np.prod(s))
      out.append(jnp.asarray(v[at:at + size].reshape(s), jnp.float32))
      at += size
    return jax.tree_util.tree_unflatten(treedef, out)

  params = [theta0] * c
  centers = [theta0] * c
  active = np.ones(c, bool)
  x_test, y_test, m_test = (np.asarray(a) for a in (host.x_test, host.y_test, host.m_test))
  out = []
  for t in range(1, ROUNDS + 1):
    k_train = jax.random.split(r["keys"][t - 1], 6)[0]  # the round's first key stream trains
    train_keys = jax.random.split(k_train, c)
    losses = []
    for i in range(c):  # each client alone; departed clients do not train
      if not active[i]:
        continue
      x_i, y_i, n_i = rows[i]
      own = {"center": centers[i], "quad": jnp.float32((t > 1) * LAM / ETA)}  # λ/(2η)‖θ − θ̄‖² from round 2
      res = client_update(train_keys[i], params[i], ClientData(x_i, y_i, n_i),
                          ClientContext(own=own, hyper=hyper, t=jnp.int32(t)))
      params[i] = res.params
      losses.append(float(res.loss))
    acc = np.array([np.mean(np.argmax(np.asarray(forward(params[i], x_test[i][m_test[i]])), 1)
                            == y_test[i][m_test[i]]) for i in range(c)])
    # distance (eq. 2) over the whole flattened model
    delta = np.stack([flat64(p) for p in params]) - flat0[None]
    norm = np.linalg.norm(delta, axis=1)
    unit = delta / norm[:, None]
    cos = unit @ unit.T
    d = np.clip(1 - cos, 0, 2)
    np.fill_diagonal(d, 0.0)
    # Box 2 on reported N and c; departed clients neither buy nor sell
    kk = np.full(c, K)
    tt = np.asarray(thresholds(jnp.asarray(kk, jnp.float32), jnp.asarray(n_rep, jnp.float32),
                               jnp.asarray(c_rep, jnp.float32), jnp.asarray(d, jnp.float32)), np.float64)
    tt[~active, :] = -np.inf
    tt[:, ~active] = -np.inf
    a = np.zeros((c, c))
    for i in range(c):
      for j in greedy_row(tt[i], n_rep, i):
        a[i, j] = n_rep[j] / n_rep[i]
    # remittances (eq. 12), payments (eq. 13), utilities (eq. 3, real N and c)
    r_ij = np.zeros((c, c))
    for i in range(c):
      total = n_rep[i] + sum(n_rep[j] for j in range(c) if a[i, j] > 0)
      for j in range(c):
        if a[i, j] > 0:
          marginal = np.sqrt(K / (total - n_rep[j])) - np.sqrt(K / total)
          r_ij[i, j] = marginal - LAM * d[i, j] * n_rep[j] / n_rep[i]
    p = r_ij.sum(1) - r_ij.sum(0)
    u = np.zeros(c)
    for i in range(c):
      x = sum(n_real[j] for j in range(c) if a[i, j] > 0)
      sold = sum(1 for j in range(c) if a[j, i] > 0)
      u[i] = np.sqrt(K / n_real[i]) - np.sqrt(K / (n_real[i] + x)) - COST * sold - p[i]
    # prox centers (eq. 8), departed clients keep theirs
    for i in range(c):
      if active[i]:
        pull = sum(a[i, j] * (unit[j] - cos[i, j] * unit[i]) for j in range(c))
        centers[i] = unflat(flat64(params[i]) + ETA * pull / norm[i])
    was = active.copy()
    active = active & ~(u < 0)  # IR-strict
    out.append(dict(params=[leaves64(q) for q in params], centers=[leaves64(q) for q in centers], acc=acc, a=a,
                    d=d, price=c_rep[None, :] + LAM * d * n_rep[None, :] / n_rep[:, None], p=p, u=u, trained=was, active=active.copy(), loss=float(np.mean(losses))))
  return out


@pytest.fixture(scope="module")
def reference(main_run):
  return reference_run(main_run)


def test_compiled_round_equals_a_python_loop_over_rounds_and_clients(main_run, reference):
  states, metrics = main_run["states"], main_run["metrics"]
  for t, (ref, m, state) in enumerate(zip(reference, metrics, states[1:]), start=1):
    e = m.extra
    np.testing.assert_array_equal(e["bought"], (ref["a"] > 0).sum(1), err_msg=f"round {t}")
    np.testing.assert_array_equal(e["sold"], (ref["a"] > 0).sum(0), err_msg=f"round {t}")
    np.testing.assert_array_equal(e["trained"], ref["trained"].astype(np.float32))
    np.testing.assert_array_equal(e["active"], ref["active"].astype(np.float32))
    np.testing.assert_allclose(e["accuracy"], ref["acc"], atol=1e-6, err_msg=f"round {t}")
    np.testing.assert_allclose(e["distance"], ref["d"], atol=1e-5, err_msg=f"round {t}")  # what the prices read
    np.testing.assert_allclose(e["price"], ref["price"], rtol=1e-5, atol=1e-5, err_msg=f"round {t}")  # Box 2's R_ij
    np.testing.assert_allclose(e["payments"], ref["p"], rtol=1e-4, atol=1e-4, err_msg=f"round {t}")
    np.testing.assert_allclose(e["utility"], ref["u"], rtol=1e-4, atol=1e-4, err_msg=f"round {t}")
    assert float(e["welfare"]) == pytest.approx(ref["u"].sum(), rel=1e-4, abs=1e-4)
    assert float(m.train_loss) == pytest.approx(ref["loss"], abs=1e-5)
    for i in range(len(SIZES)):
      for got, want in zip(leaves64(jax.tree_util.tree_map(lambda x: x[i], state.params)), ref["params"][i]):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=f"round {t} client {i}")
      for got, want in zip(leaves64(jax.tree_util.tree_map(lambda x: x[i], state.center)), ref["centers"][i]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"round {t} client {i} center")
    np.testing.assert_array_equal(np.asarray(state.active), ref["active"])
  best = np.max([ref["acc"] for ref in reference], axis=0)  # the liar keeps its round-1 model, so its later
  np.testing.assert_allclose(np.asarray(states[-1].best), best, atol=1e-6)  # accuracies repeat round 1's
  # θ_0 is kept, never updated, and every client started from it (the reference's θ_0 is init's, jitted alone)
  theta0 = leaves64(states[0].theta0)
  for got, want, ref0 in zip(leaves64(states[-1].theta0), theta0,
                             leaves64(jax.jit(main_run["model"].init)(jax.random.split(main_run["init_key"])[0]))):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(want, ref0, rtol=0, atol=5e-7)  # the whole init jitted fuses differently
  for i in range(len(SIZES)):
    for got, want in zip(leaves64(jax.tree_util.tree_map(lambda x: x[i], states[0].params)), theta0):
      np.testing.assert_array_equal(got, want)
  # Guards: the market traded in every round, someone paid, the models moved, and the prox penalty acted.
  assert all(r["a"].sum() > 0 for r in reference)
  assert all(np.abs(r["p"]).max() > 0.1 for r in reference)
  assert max(np.abs(a - b).max() for a, b in zip(leaves64(states[-1].params), leaves64(states[0].params))) > 1e-2
  for s in states[1:-1]:  # every client in the market enters the next round with a penalty λ/(2η)‖θ − θ̄‖² > 0
    gap = np.sqrt(sum(((a - b) ** 2).reshape(len(SIZES), -1).sum(1)
                      for a, b in zip(leaves64(s.params), leaves64(s.center))))
    assert np.all(gap[np.asarray(s.active)] > 1e-2), gap


def test_a_second_call_does_not_retrace(main_run):
  r = main_run
  h2 = with_method(r["hyper"], lam=0.1, eta=2.0, gain_scale=50.0)
  r["round_jit"](jax.random.key(9), r["states"][-1], r["fed"], h2, jnp.asarray(ROUNDS + 1, jnp.int32))


def test_strict_dropout_removes_a_negative_utility_client_for_good(main_run):
  states, metrics = main_run["states"], main_run["metrics"]
  u1 = metrics[0].extra["utility"]
  assert u1[LIAR] < 0 and np.all(np.delete(u1, LIAR) >= 0)  # the liar's round-1 utility is negative
  for t, m in enumerate(metrics, start=1):
    e = m.extra
    assert e["active"][LIAR] == 0.0  # out after round 1's rule
    assert e["trained"][LIAR] == float(t == 1)
    if t > 1:  # never trains, buys or sells again; U = p = 0
      assert e["bought"][LIAR] == 0 and e["sold"][LIAR] == 0
      assert e["utility"][LIAR] == 0.0 and e["payments"][LIAR] == 0.0
      assert np.all(np.delete(e["active"], LIAR) == 1.0)
  liar_params = [leaves64(jax.tree_util.tree_map(lambda x: x[LIAR], s.params)) for s in states[1:]]
  for later in liar_params[1:]:
    for a, b in zip(later, liar_params[0]):
      np.testing.assert_array_equal(a, b)
  assert A.ipfl_metrics(jax.tree_util.tree_map(lambda *a: np.stack(a), *[m.extra for m in metrics]),
                        np.ones(ROUNDS))["final_active"] == len(SIZES) - 1


def test_market_values_of_roles_liars_and_attackers():
  """K, N, c real and reported per role (module docstring, "Roles"): traders' draws, buyers, sellers, attackers
  (K = c = 0), free riders (real c = 0), and a liar's int(N·ratio) ≥ 1 and c·ratio."""
  h = A.IPFLHyper(**{f: jnp.float32(1.0) for f in A.IPFLHyper.__dataclass_fields__})
  h = h.replace(gain_scale=jnp.float32(100.0), cost=jnp.float32(2.0), buyer_cost=jnp.float32(1000.0),
                liar_size_ratio=jnp.float32(0.1), liar_cost_ratio=jnp.float32(5.0))
  n = jnp.asarray([10.0, 7.0, 30.0, 40.0, 50.0, 60.0])
  u = jnp.asarray([[0.5, 0.25]] * 6)
  s = A.IPFLConfig(traders=(0,), buyers=(1,), sellers=(2,), attackers=(3,), attack="shuffle", liar=1)
  v = jax.device_get(A.market_values({k: jnp.asarray(m) for k, m in A.roles(6, s).items()}, u, n, h))
  np.testing.assert_allclose(v["k"], [75.0, 100, 0, 0, 100, 100])
  np.testing.assert_allclose(v["c_real"], [0.625 * 2, 1000, 0, 0, 2, 2])
  np.testing.assert_allclose(v["c_rep"], [0.625 * 2, 5000, 0, 0, 2, 2])
  np.testing.assert_array_equal(v["n_rep"], [10, 1, 30, 40, 50, 60])  # int(0.7) = 0 → 1
  r = A.roles(6, dataclasses.replace(s, attack="gauss", liar=2, liar_size_ratio=10.0))
  assert r["free"][3] and not r["attacker"][3] and not r["benign"][3]
  v = jax.device_get(A.market_values({k: jnp.asarray(m) for k, m in r.items()}, u, n,
                                     h.replace(liar_size_ratio=jnp.float32(10.0))))
  assert v["k"][3] == 100 and v["c_real"][3] == 0 and v["c_rep"][3] == 2  # a free rider reports the usual c
  assert v["n_rep"][2] == 300 and v["c_rep"][2] == 0  # the liar (a seller) reports 10 N
  clean = A.roles(6, dataclasses.replace(s, attack="none"))  # listed but honest: still not "benign"
  assert not clean["attacker"].any() and not clean["benign"][3]


def test_attack_uploads_follow_the_authors_attacks():
  flat = jnp.arange(12.0).reshape(3, 4) + 1.0
  r = {k: jnp.asarray(m) for k, m in A.roles(3, A.IPFLConfig(attackers=(1,), attack="shuffle")).items()}
  out = np.asarray(A.attack_uploads(jax.random.key(0), flat, r, "shuffle"))
  np.testing.assert_array_equal(out[[0, 2]], np.asarray(flat)[[0, 2]])
  assert sorted(out[1]) == sorted(np.asarray(flat)[1])
  np.testing.assert_array_equal(A.attack_uploads(jax.random.key(0), flat, r, "sign_flip")[1], -flat[1])
  r = {k: jnp.asarray(m) for k, m in A.roles(3, A.IPFLConfig(attackers=(2,), attack="same_value")).items()}
  np.testing.assert_array_equal(A.attack_uploads(jax.random.key(0), flat, r, "same_value")[2], np.ones(4))
  g = np.asarray(A.attack_uploads(jax.random.key(0), flat, r, "gauss"))
  assert np.all(g[2] != np.asarray(flat)[2]) and np.all(g[:2] == np.asarray(flat)[:2])


# --- the shared test set, the platform's simulation, the other static branches -----------------------------------


def test_shared_test_set_scores_reweighted_accuracy():
  data, _ = labeled()
  rng = np.random.default_rng(3)
  shared = LabeledData(x=rng.normal(size=(12, 6)).astype(np.float32), y=rng.integers(0, CLASSES, 12).astype(np.int32),
                       num_classes=CLASSES, description="shared").validate()
  host = tiny_federation(shared_test=shared)
  config = apply_overrides(CONFIG, {"ipfl.dropout": "none", "ipfl.liar": -1})
  algorithm, model = registry.build_method("ipfl", config, host)
  hyper = registry.hyper_from_config(config, "ipfl")
  state = jax.jit(algorithm.init)(jax.random.key(0), host, hyper)
  state, m = jax.jit(algorithm.round)(jax.random.key(1), state, host, hyper, jnp.int32(1))
  st = host.shared_test
  w = np.asarray(st.class_weights, np.float64)
  want = []
  for i in range(len(SIZES)):
    pred = np.argmax(np.asarray(model.apply(jax.tree_util.tree_map(lambda x: x[i], state.params), st.x, False,
                                            None)[0]), 1)
    hit = pred == np.asarray(st.y)
    per_class = np.array([hit[np.asarray(st.y) == k].mean() if (np.asarray(st.y) == k).any() else 0.0
                          for k in range(CLASSES)])
    present = np.array([(np.asarray(st.y) == k).any() for k in range(CLASSES)], np.float64)
    want.append((per_class * w[i] * present).sum() / (w[i] * present).sum())
  np.testing.assert_allclose(m.extra["accuracy"], want, atol=1e-6)
  np.testing.assert_array_equal(m.extra["active"], np.ones(len(SIZES)))


def test_shared_predictions_in_chunks_equal_one_batch():
  from fedjax_sim.tasks import shared_predictions
  host = tiny_federation()
  algorithm, model = registry.build_method("ipfl", CONFIG, host)
  params = jax.vmap(model.init)(jax.random.split(jax.random.key(3), 4))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(12, 6)), jnp.float32)
  whole = jax.vmap(lambda p: jnp.argmax(model.apply(p, x, False, None)[0], -1))(params)
  for chunk in (5, 12, 50):  # a padded last chunk, one exact chunk, one chunk larger than the set
    np.testing.assert_array_equal(shared_predictions(model.apply, params, x, chunk), whole)


@pytest.mark.parametrize("dropout", ["none", "prob"])
def test_the_platform_simulation_traces_with_vmapped_seeds(dropout):
  """The other drop-out rules, and the platform's whole run (scan over rounds, seeds vmapped), trace (shapes
  only: nothing compiles)."""
  host = tiny_federation()
  config = apply_overrides(CONFIG, {"ipfl.dropout": dropout})
  algorithm, model = registry.build_method("ipfl", config, host)
  hyper = registry.hyper_from_config(config, "ipfl")
  simulate = make_simulation(algorithm, model, ROUNDS, task_for(config, host).score)
  keys = jax.random.split(jax.random.key(0), 3)
  out = jax.eval_shape(jax.vmap(simulate, in_axes=(0, None, None)), keys, host, hyper)
  extra = out.history.metrics.extra
  assert extra["utility"].shape == (3, ROUNDS, len(SIZES)) and extra["welfare"].shape == (3, ROUNDS)
  assert out.test_auroc.shape == (3, len(SIZES))  # the deployed models: every client's own θ_i


# --- the summary reducer, the registry and the configuration -------------------------------------------------


def test_metrics_reducer_of_a_hand_made_history():
  extra = {"utility": np.array([[1.0, -2.0, 0.5], [2.0, 0.0, 0.5], [9.0, 9.0, 9.0]]),
           "accuracy": np.array([[0.2, np.nan, 0.5], [0.4, np.nan, 0.3], [1.0, 1.0, 1.0]]),
           "bought": np.array([[1, 0, 2], [1, 0, 1], [5, 5, 5]], np.float32),
           "trained": np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]], np.float32),
           "active": np.array([[1, 0, 1], [1, 0, 1], [1, 1, 1]], np.float32),
           "payments": np.array([[1.0, -1.0, 0.0], [0.5, 0.0, -0.5], [9.0, 9.0, 9.0]]),
           "welfare": np.array([-0.5, 2.5, 27.0])}
  out = A.ipfl_metrics(extra, np.array([1.0, 1.0, 0.0]))  # round 3 did not run
  assert out["utility_sum"] == pytest.approx((3.0 - 2.0 + 1.0) / 3)
  assert out["best_accuracy"] == pytest.approx((0.4 + 0.5) / 2)  # client 1 has no test rows: skipped
  assert out["mean_degree"] == pytest.approx(5 / 5)
  assert out["welfare_sum"] == pytest.approx(2.0) and out["final_active"] == 2.0
  assert out["payment_clients"] == pytest.approx([1.5, -1.0, -0.5])  # Σ_t p_i over the rounds that ran
  assert out["utility_clients"] == pytest.approx([3.0, -2.0, 1.0])
  assert out["min_round_utility"] == pytest.approx(-2.0)  # client 1 in round 1 (round 2: out of the market)
  assert np.isnan(out["attacker_utility"]) and np.isnan(out["liar_utility"])  # no attacker, no liar
  assert A.ipfl_metrics({}, np.ones(3)) == {}


def test_distance_summary_of_a_hand_made_history():
  # 4 clients, client 3 the attacker; round 2: client 1 out of the market
  d = np.array([[[0, .2, .6, 1.], [.2, 0, .4, .9], [.6, .4, 0, 1.1], [1., .9, 1.1, 0]],
                [[0, .1, .7, .8], [.1, 0, .3, .9], [.7, .3, 0, 1.2], [.8, .9, 1.2, 0]]])
  trained = np.array([[1, 1, 1, 1], [1, 0, 1, 1]], bool)
  benign = np.array([True, True, True, False])
  out = A.distance_summary(d, trained, benign)
  # round 1: nearest honest 0.2, 0.2, 0.4; round 2 (client 1 gone): 0.7, 0.7
  assert out["nearest_honest_distance_rounds"] == pytest.approx([0.8 / 3, 0.7])
  assert out["nearest_honest_distance"] == pytest.approx((0.2 + 0.2 + 0.4 + 0.7 + 0.7) / 5)
  assert out["attacker_distance"] == pytest.approx((1.0 + 0.9 + 1.1 + 0.8 + 1.2) / 5)
  assert out["attacker_distance_rounds"] == pytest.approx([1.0, (0.8 + 1.2) / 2])
  assert np.isnan(A.distance_summary(d, trained, np.ones(4, bool))["attacker_distance"])


def test_undercut_summary_of_a_hand_made_history():
  # 4 clients, client 3 the attacker; prices R_ij (buyer i, seller j); round 2: client 1 out of the market
  inf = 9.0  # the diagonal is never read
  price = np.array([[[inf, 2.0, 3.0, 1.5], [2.0, inf, 2.5, 3.0], [1.0, 2.0, inf, 1.2], [5, 5, 5, inf]],
                    [[inf, 0.5, 3.0, 1.5], [2.0, inf, 2.5, 1.0], [1.0, 2.0, inf, 0.9], [5, 5, 5, inf]]])
  bought = np.zeros((2, 4, 4), bool)
  bought[0, 0, 3] = True  # round 1: client 0 buys the attacker (cheapest: 1.5 < 2.0)
  bought[0, 2, 0] = True  # client 2 buys client 0 (1.0 < 1.2: the attacker not the cheapest)
  bought[1, 2, 3] = True  # round 2: client 2 buys the attacker (0.9 < 1.0)
  bought[1, 1, 3] = True  # client 1 is out of the market in round 2: not counted
  trained = np.array([[1, 1, 1, 1], [1, 0, 1, 1]], bool)
  benign = np.array([True, True, True, False])
  out = A.undercut_summary(price, bought, trained, benign)
  # pairs: round 1 buyers 0, 1, 2 (cheapest: yes, no, no); round 2 buyers 0, 2 (honest sellers: 2 for buyer 0
  # at 3.0 vs the attacker's 1.5 → yes; 0 for buyer 2 at 1.0 vs 0.9 → yes)
  assert out["attacker_cheapest"] == pytest.approx(3 / 5)
  assert out["attacker_bought"] == pytest.approx(2 / 5)
  assert out["attacker_bought_when_cheapest"] == pytest.approx(2 / 3)
  assert out["attacker_bought_otherwise"] == pytest.approx(0.0)
  # a benign client with K = 0 (a pure seller) never buys and is not counted as a buyer
  sellers_out = A.undercut_summary(price, bought, trained, benign, np.array([True, True, False, True]))
  assert sellers_out["attacker_cheapest"] == pytest.approx(2 / 3)  # round 1: 0 yes, 1 no; round 2: 0 yes
  assert sellers_out["attacker_bought_when_cheapest"] == pytest.approx(1 / 2)


def test_registry_knows_ipfl_its_section_and_sweepable_keys():
  assert "ipfl" in registry.METHODS
  assert registry.sections()["ipfl"] is A.IPFLConfig
  keys = registry.sweepable_keys()
  assert {"ipfl.lam", "ipfl.eta", "ipfl.gain_scale", "ipfl.cost", "ipfl.liar_cost_ratio"} <= set(keys)
  assert "ipfl.dropout" not in keys and "ipfl.liar" not in keys  # static
  assert registry.spec_of("ipfl").regularizer is A.local_regularizer


def test_config_checks():
  with pytest.raises(ConfigError, match="ipfl.dropout must be one of none, strict, prob, got 'maybe'"):
    apply_overrides(CONFIG, {"ipfl.dropout": "maybe"})
  with pytest.raises(ConfigError, match="ipfl.eta must be positive"):
    apply_overrides(CONFIG, {"ipfl.eta": 0.0})
  with pytest.raises(ConfigError, match="ipfl.liar must be ≥ -1"):
    apply_overrides(CONFIG, {"ipfl.liar": -2})
  with pytest.raises(ConfigError, match="ipfl.liar = 5 is not a client of this federation of 5"):
    registry.check_federation("ipfl", apply_overrides(CONFIG, {"ipfl.liar": 5}), 5)
  with pytest.raises(ConfigError, match="participation.clients_per_round"):
    registry.check_federation("ipfl", apply_overrides(CONFIG, {"participation.clients_per_round": 2}), 5)
  registry.check_federation("ipfl", CONFIG, 5)  # positive control


def test_the_shipped_experiment_loads_and_validates():
  config = load_experiment("ipfl")
  validate(config)
  assert config.methods == ("ipfl",) and config.rounds == 50 and config.seeds == (42, 123, 456)
  assert (config.data.source, config.data.partition, config.data.dirichlet_alpha, config.data.num_clients) == (
      "fashion_mnist", "dirichlet", 0.1, 10)
  lc = config.learner
  assert (lc.model, lc.optimizer, lc.learning_rate, lc.momentum, lc.weight_decay, lc.batch_size, lc.local_steps) == (
      "lenet", "sgd", 0.01, 0.9, 1e-5, 64, 200)
  assert (config.ipfl.lam, config.ipfl.eta, config.ipfl.gain_scale, config.ipfl.cost) == (0.001, 5.0, 5e5, 1.0)


def test_a_free_riders_diverged_discarded_lane_is_not_a_fault():
  """A free rider skips training: its lane is computed and discarded, and may diverge (it starts from its own
  N(0, 1) upload). Neither the round's mean loss nor the fault column may see it (it stopped the Fig. 4 run);
  a kept lane that diverges is still reported, by client."""
  c = 3
  res = type("Res", (), {})()
  res.loss = jnp.asarray([0.5, 0.7, jnp.nan])
  res.params = {"w": jnp.asarray([[1.0], [2.0], [jnp.inf]])}
  active = jnp.ones((c,), bool)
  zeros = jnp.zeros((c,))
  roles = {"benign": jnp.asarray([True, True, False]), "liar": jnp.zeros((c,), bool)}
  trains = jnp.asarray([True, True, False])
  m = A.round_metrics(res, active, active, jnp.zeros((c, c)), zeros, zeros, zeros, roles, 1, trained_mask=trains)
  np.testing.assert_allclose(float(m.train_loss), 0.6, rtol=1e-6)
  assert int(m.nonfinite_client) == 0
  m = A.round_metrics(res, active, active, jnp.zeros((c, c)), zeros, zeros, zeros, roles, 1)
  assert int(m.nonfinite_client) == 3  # a kept lane: client 2, reported 1-based


def test_an_attacker_that_keeps_its_model_sends_the_same_upload():
  """``ipfl.attack_in_place = false`` (``ipfl_sign_flip_kept``): round 1's upload, graph, payments and utilities
  are the in-place attack's, but the attacker's next start model and center are its trained model, not −θ; the
  other clients' are unchanged. With another rule the setting is refused."""
  host = tiny_federation()
  one = jax.random.split(jax.random.key(5), 1)[0]
  out = {}
  for name in ("ipfl_sign_flip", "ipfl_sign_flip_kept"):
    config = config_for_method(apply_overrides(CONFIG, {"methods": name, "ipfl.attackers": (2,),
                                                        "ipfl.dropout": "none"}), registry.preset(name))
    algorithm, _ = registry.build_method(name, config, host)
    fed = algorithm.prepare(host)
    hyper = registry.hyper_from_config(config, name)
    state = jax.jit(algorithm.init)(jax.random.key(0), fed, hyper)
    new, m = jax.jit(algorithm.round)(one, state, fed, hyper, jnp.asarray(1, jnp.int32))
    out[name] = (jax.vmap(lambda p: ravel_pytree(p)[0])(new.params), jax.vmap(lambda p: ravel_pytree(p)[0])(
        new.center), jax.device_get(m))
  (p_in, c_in, m_in), (p_kept, c_kept, m_kept) = out["ipfl_sign_flip"], out["ipfl_sign_flip_kept"]
  for key in ("graph", "payments", "utility", "distance", "price"):
    np.testing.assert_array_equal(m_in.extra[key], m_kept.extra[key])
  np.testing.assert_array_equal(p_kept[2], -p_in[2])  # the trained model, not its flip
  np.testing.assert_array_equal(c_kept[2], p_kept[2])  # it buys nothing (K = 0): its center is its model
  np.testing.assert_array_equal(c_in[2], p_in[2])
  others = np.arange(len(SIZES)) != 2
  np.testing.assert_array_equal(p_kept[others], p_in[others])
  np.testing.assert_array_equal(c_kept[others], c_in[others])
  assert np.abs(np.asarray(p_kept[2])).sum() > 0
  with pytest.raises(ConfigError, match="ipfl.attack_in_place = false is defined for ipfl.rule = market only"):
    apply_overrides(CONFIG, {"ipfl.rule": "fedavg", "ipfl.attack_in_place": False})
