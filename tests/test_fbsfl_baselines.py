"""Paper 002 Table 2's baselines behind the strategic layer (fedjax_sim/algorithms/fbsfl/{baselines,selection}.py).

Each rule against its definition on tiny inputs (numpy references): uniform inclusion (expected K; exactly K with
dependent rounding), FedAvg's n-weighted mean, q-FFL's surrogate step (Li et al.'s formula), Power-of-Choice's
proportional candidates and top-K, Oort's scores, exploration split, utility and pacer, Ditto's term; the
declaration (the [fbsfl] follower numbers traced, the settings reaching every baseline). Then one short scanned
run of every baseline on the tiny 8-client federation of tests/test_fbsfl_round.py (built once, module-level): the
strategic layer's invariants (participants ⊆ included, C_tot = r̄ Σ y, exactly K included by PoC and Oort), and one
FedAvg and one q-FFL round against a plain loop.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.fbsfl import baselines as BL
from fedjax_sim.algorithms.fbsfl import economics as E
from fedjax_sim.algorithms.fbsfl import selection as S
from fedjax_sim.algorithms.fbsfl import strategic as ST
from fedjax_sim.algorithms.spec import Hyper
from fedjax_sim.config import ExperimentConfig, LearnerConfig, ParticipationConfig, apply_overrides, load_experiment
from fedjax_sim.data.federation import eval_plan
from fedjax_sim.engine.local import ClientContext, ClientData, LocalTerm, make_client_update
from fedjax_sim.engine.simulate import make_simulation
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import task_for
from tests.conftest import bucket_rows
from tests.test_fbsfl_round import BATCH, EPOCHS, SIZES, tiny_federation

K, ROUNDS = 2, 6
NAMES = ("fbsfl_fedavg", "fbsfl_fedprox", "fbsfl_qffl", "fbsfl_poc", "fbsfl_oort", "fbsfl_ditto")
CONFIG = apply_overrides(ExperimentConfig(
    rounds=ROUNDS,
    learner=LearnerConfig(hidden=(8,), dropout=0.0, optimizer="sgd", schedule="cosine", learning_rate=0.05,
                          final_learning_rate=0.005, momentum=0.9, weight_decay=5e-4, batch_size=BATCH,
                          local_epochs=EPOCHS, num_buckets=2),
    participation=ParticipationConfig(clients_per_round=K)),
    {"methods": ",".join(NAMES), "fbsfl.report_rows": 8, "fbsfl_baselines.poc_candidates": 4,
     "fbsfl_baselines.oort_pacer": 2, "fbsfl_baselines.mu": 0.5})


# --- aggregation rules -----------------------------------------------------------------------------------------


def test_flat_fee_is_the_prior_mean_threshold():
  assert BL.FLAT_FEE == pytest.approx(0.52)


def test_fedavg_weights_give_the_n_weighted_mean_of_the_participants():
  rng = np.random.default_rng(0)
  n = np.array([5.0, 20.0, 7.0, 3.0])
  trained = np.array([True, False, True, True])
  w = {"a": rng.normal(size=(3,)).astype(np.float32)}
  thetas = rng.normal(size=(4, 3)).astype(np.float32)
  alpha = BL.fedavg_weights(jnp.asarray(n), jnp.asarray(trained))
  got = E.aggregate(w, {"a": jnp.asarray(thetas - w["a"])}, alpha)["a"]
  want = (n[trained, None] * thetas[trained]).sum(0) / n[trained].sum()
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)
  np.testing.assert_allclose(np.asarray(BL.mean_weights(jnp.asarray(trained))), trained / trained.sum(), atol=1e-7)
  none = jnp.zeros(4, bool)
  assert float(jnp.sum(BL.fedavg_weights(jnp.asarray(n), none))) == 0.0
  np.testing.assert_array_equal(np.asarray(E.aggregate(w, {"a": jnp.asarray(thetas)}, BL.fedavg_weights(
      jnp.asarray(n), none))["a"]), w["a"])  # no participant: w unchanged


def test_qffl_step_is_li_et_al_update():
  """w ← w − Σ_k F_k^q Δw_k / Σ_k h_k, Δw_k = L(w − w̄_k), h_k = q F_k^{q−1}‖Δw_k‖² + L F_k^q (Li et al. 2020)."""
  rng = np.random.default_rng(1)
  for q, lr in ((2.0, 0.05), (1.0, 0.01), (0.0, 0.1)):
    w = rng.normal(size=(6,))
    thetas = w + 0.1 * rng.normal(size=(5, 6))
    losses = rng.uniform(0.2, 2.0, size=5)
    trained = np.array([True, True, False, True, True])
    lip = 1.0 / lr
    dw = lip * (w - thetas[trained])
    f = losses[trained] + 1e-10
    h = q * f ** (q - 1) * (dw ** 2).sum(1) + lip * f ** q
    want = w - (f[:, None] ** q * dw).sum(0) / h.sum()
    alpha = BL.qffl_weights(jnp.asarray(losses, jnp.float32), jnp.asarray(((thetas - w) ** 2).sum(1), jnp.float32),
                            jnp.asarray(trained), q, lr)
    got = E.aggregate({"w": jnp.asarray(w, jnp.float32)}, {"w": jnp.asarray(thetas - w, jnp.float32)}, alpha)["w"]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    assert float(alpha[2]) == 0.0
    assert float(jnp.sum(alpha)) < 1.0 if q > 0 else float(jnp.sum(alpha)) == pytest.approx(1.0)  # q = 0: the mean
  assert float(jnp.sum(BL.qffl_weights(jnp.ones(3), jnp.ones(3), jnp.zeros(3, bool), 2.0, 0.05))) == 0.0


def test_ditto_term_is_half_lambda_squared_distance_and_off_without_a_global_model():
  hyper = Hyper(learner=None, method=BL.BaselineHyper(*[jnp.float32(0.0)] * 8, ditto_lambda=jnp.float32(0.1)))
  v, w = {"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([0.0, 4.0])}
  term = LocalTerm(params=v, apply=None, x=None, mask=None, rng=None, shared=w, own=None, hyper=hyper)
  assert float(BL.ditto_regularizer(term)) == pytest.approx(0.5 * 0.1 * 5.0)
  assert float(BL.ditto_regularizer(term._replace(shared=None))) == 0.0


def test_uniform_inclusion_has_expected_k_and_dependent_rounding_exactly_k():
  keys = jax.random.split(jax.random.key(2), 4000)
  ind = jax.jit(jax.vmap(lambda k: S.uniform_inclusion(k, 8, 2, "independent")[0]))(keys)
  dep, pi = jax.jit(jax.vmap(lambda k: S.uniform_inclusion(k, 8, 2, "dependent")))(keys)
  np.testing.assert_allclose(np.asarray(pi[0]), np.full(8, 0.25))
  assert abs(float(ind.sum(1).mean()) - 2.0) < 0.1 and int(ind.sum(1).max()) > 2  # Binomial(8, 1/4)
  assert np.all(np.asarray(dep.sum(1)) == 2)
  np.testing.assert_allclose(np.asarray(dep.mean(0)), np.full(8, 0.25), atol=0.03)  # marginals K/N


# --- Power-of-Choice ------------------------------------------------------------------------------------------


def test_proportional_candidates_are_successive_sampling_and_d_equal_k_reduces_to_it():
  weights = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
  d, draws = 2, 20000
  sample = jax.jit(jax.vmap(lambda k: S.proportional_sample(k, jnp.asarray(weights, jnp.float32), d)))
  picks = np.asarray(sample(jax.random.split(jax.random.key(0), draws)))
  assert all(len(set(row)) == d for row in picks[:200]) and not (picks == 4).any()  # distinct; weight 0 never
  exact = np.zeros(5)  # P(i in the sample) under successive sampling ∝ w without replacement
  total = weights.sum()
  for i, j in itertools.permutations(range(5), 2):
    p = weights[i] / total * weights[j] / (total - weights[i])
    exact[i] += p
    exact[j] += p
  freq = np.bincount(picks.ravel(), minlength=5) / draws
  np.testing.assert_allclose(freq, exact, atol=0.015)
  # d = K: every candidate is included, whatever the losses
  cand = jnp.asarray(picks[0])
  z = S.poc_include(cand, jnp.array([0.1, 5.0]), d, 5)
  assert set(np.flatnonzero(np.asarray(z))) == set(picks[0].tolist())


def test_poc_includes_the_k_highest_loss_candidates():
  cand = jnp.array([6, 1, 4, 0, 3], jnp.int32)
  losses = jnp.array([0.5, 2.0, 0.1, 1.5, 0.7])
  z = np.asarray(S.poc_include(cand, losses, 2, 8))
  assert np.flatnonzero(z).tolist() == [0, 1]  # candidates 1 (2.0) and 0 (1.5)


# --- Oort -------------------------------------------------------------------------------------------------------


def oort_state(utility, last, threshold=100.0):
  return S.OortState(utility=jnp.asarray(utility, jnp.float32), last=jnp.asarray(last, jnp.int32),
                     threshold=jnp.float32(threshold), window=jnp.float32(0.0), previous=jnp.float32(0.0))


def test_oort_scores_are_normalized_utility_plus_staleness_times_the_system_factor():
  u, last = np.array([4.0, 1.0, 2.0, 0.0, 3.0]), np.array([3, 1, 5, 0, 2])
  dur = np.array([2.0, 8.0, 4.0, 6.0, 10.0])
  t = 6
  for threshold in (100.0, 40.0):
    got = np.asarray(S.oort_scores(oort_state(u, last, threshold), t, jnp.asarray(dur)))
    ex = last > 0
    norm = (u - u[ex].min()) / (u[ex].max() - u[ex].min())
    want = norm + np.sqrt(0.1 * np.log(t) / np.maximum(last, 1))
    pref = np.inf if threshold >= 100 else np.sort(dur)[int(5 * threshold / 100)]  # 40 % of 5: element 2 = 6.0
    want = np.where(dur > pref, want * (pref / dur) ** 2, want)
    np.testing.assert_allclose(got[ex], want[ex], rtol=1e-5)
    assert got[3] == -np.inf


def test_oort_exploits_the_top_scores_and_explores_unexplored_clients():
  dur = jnp.ones(6)
  # nothing explored: all K places go to exploration
  z, exploited = S.oort_include(jax.random.key(0), S.oort_init(6), 1, 3, 0.1, dur)
  assert int(z.sum()) == 3 and not bool(exploited.any())
  # explored {0, 1, 2, 4}: ⌊0.9·3⌋ = 2 exploited by score (clients 4 and 2), 1 unexplored (3 or 5)
  state = oort_state([1.0, 0.5, 3.0, 0.0, 4.0, 0.0], [1, 1, 1, 0, 1, 0])
  for seed in range(5):
    z, exploited = S.oort_include(jax.random.key(seed), state, 2, 3, 0.1, dur)
    assert np.flatnonzero(np.asarray(exploited)).tolist() == [2, 4]
    assert int(z.sum()) == 3 and len(set(np.flatnonzero(np.asarray(z))) & {3, 5}) == 1
  # no unexplored left: exploitation takes every place
  z, exploited = S.oort_include(jax.random.key(0), oort_state([1, 2, 3, 4], [1, 1, 1, 1]), 2, 3, 0.1, jnp.ones(4))
  assert np.flatnonzero(np.asarray(z)).tolist() == [1, 2, 3] and bool(jnp.all(z == exploited))


def test_oort_observe_records_utilities_and_the_pacer_relaxes_on_a_plateau():
  assert float(S.statistical_utility(4, 0.5)) == 2.0  # |B| sqrt(mean loss²) with RMS 0.5 over 4 rows
  arrived = jnp.array([True, False, True])
  util = jnp.array([2.0, 9.0, 1.0])
  state = S.oort_observe(S.oort_init(3), 1, arrived, util, jnp.array([True, True, False]), interval=2)
  np.testing.assert_allclose(np.asarray(state.utility), [2.0, 0.0, 1.0])
  assert np.asarray(state.last).tolist() == [1, 0, 1] and float(state.window) == 2.0  # exploited arrivals only
  everyone = jnp.ones(3, bool)
  for t in range(2, 5):  # window sums 2 + 3 = 5 (t = 2), then 3 + 3 = 6 (t = 4): a 20 % change, no plateau
    state = S.oort_observe(state, t, everyone, jnp.array([1.0, 1.0, 1.0]), everyone, interval=2)
  assert float(state.threshold) == S.OORT_THRESHOLD and float(state.previous) == 6.0
  for t in range(5, 7):  # 6 again: a plateau at t = 6, the percentile rises by 5
    state = S.oort_observe(state, t, everyone, jnp.array([1.0, 1.0, 1.0]), everyone, interval=2)
  assert float(state.threshold) == S.OORT_THRESHOLD + S.OORT_PACER_STEP


# --- declaration --------------------------------------------------------------------------------------------------


def test_the_baselines_are_registered_and_read_the_fbsfl_follower_numbers():
  assert set(NAMES) <= set(registry.METHODS)
  config = apply_overrides(CONFIG, {"fbsfl.exp3_eta": 0.7, "fbsfl_baselines.ditto_lambda": 0.3})
  for name in NAMES:
    h = registry.hyper_from_config(config, name).method
    assert float(h.exp3_eta) == pytest.approx(0.7) and float(h.ditto_lambda) == pytest.approx(0.3)
    assert float(h.mu) == pytest.approx(0.5) and float(h.qffl_q) == 2.0
  from fedjax_sim.sweep import sweepable
  assert {"fbsfl.exp3_eta", "fbsfl_baselines.mu", "fbsfl_baselines.qffl_q"} <= set(sweepable())
  table = load_experiment("fbsfl_table2")
  assert tuple(table.methods) == ("fbsfl",) + NAMES and table.fbsfl_baselines.poc_candidates == 10


def test_power_of_choice_needs_at_least_k_candidates():
  registry.check_federation("fbsfl_poc", CONFIG, 8)
  with pytest.raises(ConfigError, match="fbsfl_baselines.poc_candidates = 1 candidates; raise it to at least 2"):
    registry.check_federation("fbsfl_poc", apply_overrides(CONFIG, {"fbsfl_baselines.poc_candidates": 1}), 8)


def test_the_fbsfl_follower_and_rounding_settings_reach_the_baselines():
  """BR / logit followers and dependent rounding trace in the baselines (shapes only: nothing compiles)."""
  host = tiny_federation()
  for name, follower, rounding in (("fbsfl_fedavg", "br", "dependent"), ("fbsfl_ditto", "logit", "independent")):
    config = apply_overrides(CONFIG, {"fbsfl.follower": follower, "fbsfl.rounding": rounding})
    algorithm, _ = registry.build_method(name, config, host)
    fed = algorithm.prepare(host)
    hyper = registry.hyper_from_config(config, name)
    state = jax.eval_shape(algorithm.init, jax.random.key(0), fed, hyper)
    _, m = jax.eval_shape(algorithm.round, jax.random.key(1), state, fed, hyper, jnp.int32(1))
    assert m.extra["participation"].shape == (len(SIZES),)


# --- short runs on the tiny federation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs():
  host = tiny_federation()
  out = {}
  for name in NAMES:
    algorithm, model = registry.build_method(name, CONFIG, host)
    fed = algorithm.prepare(host)
    hyper = registry.hyper_from_config(CONFIG, name)
    simulate = jax.jit(make_simulation(algorithm, model, ROUNDS, task_for(CONFIG, host).score,
                                       client_curves=registry.spec_of(name).client_curves,
                                       eval_plans=(eval_plan(host.m_val, min_rows=0),  # grouped, as at scale
                                                   eval_plan(host.m_test, min_rows=0))))
    init = jax.jit(algorithm.init)(jax.random.split(jax.random.key(3))[0], fed, hyper)  # the simulation's init key
    out[name] = dict(algorithm=algorithm, model=model, fed=fed, hyper=hyper, init=init,
                     result=jax.device_get(simulate(jax.random.key(3), fed, hyper)))
  return out


@pytest.mark.parametrize("name", ("fbsfl_fedavg", "fbsfl_fedprox", "fbsfl_qffl", "fbsfl_ditto"))
def test_uniform_baselines_participation_is_the_strategic_layer_alone(runs, name):
  """Uniform inclusion and the flat fee read no model: the training-free layer (strategic.py) gives each uniform
  baseline's y and z bit for bit — the same for all four, as paper 002 notes."""
  r = runs[name]
  e = r["result"].history.metrics.extra
  layer = jax.device_get(ST.simulate_seed(jax.random.key(3), ROUNDS, r["hyper"].method, num_clients=len(SIZES), k=K,
                                          pricing="flat"))
  np.testing.assert_array_equal(layer.kappa, r["result"].state.kappa)
  np.testing.assert_array_equal(layer.z.astype(np.float32), e["included"])
  np.testing.assert_array_equal(layer.y.astype(np.float32), e["participation"])
  assert layer.y.sum() >= 2 and not np.any(layer.bonus)
  np.testing.assert_allclose((layer.r * layer.y).sum(1), e["expenditure"], rtol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_every_baseline_runs_behind_the_strategic_layer(runs, name):
  r = runs[name]
  out = r["result"]
  e = out.history.metrics.extra
  y, z = np.asarray(e["participation"]), np.asarray(e["included"])
  assert y.shape == (ROUNDS, len(SIZES)) and np.all(y <= z)  # participants ⊆ included
  np.testing.assert_allclose(np.asarray(e["expenditure"]), BL.FLAT_FEE * y.sum(1), rtol=1e-6)  # the flat fee
  assert not np.any(np.asarray(e["bonus_expenditure"]))  # and no equity bonus
  np.testing.assert_allclose(np.asarray(out.state.counts), y.sum(0))
  assert int(out.fault.round) == 0  # no non-finite loss or parameter
  clients = np.asarray(out.history.val_clients)  # [R, C] per-client validation accuracy (the family's client_curves)
  assert clients.shape == (ROUNDS, len(SIZES))
  np.testing.assert_allclose(np.nanmean(clients, axis=1), np.asarray(out.history.val_auroc), rtol=1e-6)
  assert np.all(np.isfinite(np.asarray(out.test_auroc)[~np.isnan(np.asarray(out.test_auroc))]))
  if name in ("fbsfl_poc", "fbsfl_oort"):
    assert np.all(z.sum(1) == K) and np.all(np.asarray(e["dropped"]) == 0)  # exactly K, S = K: no drops
  assert y.sum() >= 2  # guard: someone trained
  moved = max(np.abs(a - b).max() for a, b in zip(jax.tree_util.tree_leaves(out.state.global_params),
                                                    jax.tree_util.tree_leaves(r["init"].global_params)))
  assert moved > 1e-3
  summary = registry.spec_of(name).metrics(e, np.ones(ROUNDS))
  assert summary["c_tot"] == pytest.approx(BL.FLAT_FEE * y.sum(), rel=1e-5)
  if name == "fbsfl_oort":
    trained_ever = np.asarray(out.state.counts) > 0
    np.testing.assert_array_equal(np.asarray(out.state.selector.last) > 0, trained_ever)
  if name == "fbsfl_ditto":
    params, stacked = r["algorithm"].deployed(out.state)
    assert stacked and jax.tree_util.tree_leaves(params)[0].shape[0] == len(SIZES)
    never = np.asarray(out.state.counts) == 0
    for v, w0 in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(r["init"].global_params)):
      v = np.asarray(v)
      np.testing.assert_array_equal(v[never], np.broadcast_to(np.asarray(w0), v[never].shape))  # v_i^0 = w^0
      assert np.abs(v[~never] - np.asarray(w0)).max() > 1e-4  # participants' personal models moved


def prox_term(weight: str):
  """The test's own λ/2 ‖θ − θ_shared‖² (FedProx: μ, Li et al. 2020 eq. 2; Ditto: λ, Li et al. 2021 eq. 2), summed
  over every leaf; nothing without a shared model."""
  def term(t: LocalTerm):
    if t.shared is None:
      return jnp.zeros((), jnp.float32)
    sq = sum(jnp.sum((a - b) ** 2) for a, b in zip(jax.tree_util.tree_leaves(t.params),
                                                     jax.tree_util.tree_leaves(t.shared)))
    return 0.5 * getattr(t.hyper.method, weight) * sq
  return term


@pytest.mark.parametrize("name", ["fbsfl_fedavg", "fbsfl_qffl", "fbsfl_fedprox", "fbsfl_ditto"])
def test_a_round_equals_a_plain_loop_over_its_participants(runs, name):
  """One round: the included set, the answers, each participant trained alone, then FedAvg's n-weighted mean or
  q-FFL's step (Li et al.'s formula in float64, F_k on the reported rows, L = 1/lr of round 1). FedProx: each
  participant trains with the test's own μ/2‖w − w_{t−1}‖² term (μ = 0.5 here), then the n-weighted mean. Ditto:
  the global model as FedAvg (no term), and each participant's personalized model v_i (= w_0 at round 1) trained
  with λ/2‖v − w_{t−1}‖² under the round's personal key; the others' v_i unchanged."""
  r = runs[name]
  algorithm, fed, hyper, state = r["algorithm"], r["fed"], r["hyper"], r["init"]
  n_clients = len(SIZES)
  sigma = (1 - 0.1) * 0.5 + 0.05  # EXP3's acceptance probability at h = (1, 1)
  for seed in range(11, 60):  # a round key with at least two participants (the guard: the mean is exercised)
    key = jax.random.key(seed)
    keys = BL.BaselineKeys(*jax.random.split(key, 5))
    z = np.asarray(jax.random.uniform(keys.select, (n_clients,)) < K / n_clients)  # Bernoulli(K/N)
    accept = np.asarray(jax.random.uniform(keys.response, (n_clients,)) < sigma)
    y = z & accept
    if y.sum() >= 2:
      break
  assert y.sum() >= 2
  new, m = jax.jit(algorithm.round)(key, state, fed, hyper, jnp.int32(1))
  np.testing.assert_array_equal(np.asarray(m.extra["included"]), z.astype(np.float32))
  np.testing.assert_array_equal(np.asarray(m.extra["participation"]), y.astype(np.float32))
  host = tiny_federation()
  rows, n_train = bucket_rows(host), np.asarray(host.n_train)
  task = task_for(CONFIG, host)
  term = {"fbsfl_fedprox": prox_term("mu"), "fbsfl_ditto": prox_term("ditto_lambda")}.get(name)
  client_update = jax.jit(make_client_update(task, batch_size=BATCH, epochs=EPOCHS, regularizer=term))
  pad = int(n_train.max())
  train_keys = jax.random.split(keys.train, n_clients)
  w0 = state.global_params
  forward = jax.jit(lambda p, x: r["model"].apply(p, x, False, None)[0])
  report_keys = jax.random.split(keys.report, n_clients)
  base = [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(w0)]
  total = [np.zeros(np.shape(a), np.float64) for a in base]
  lip, q, fq_dw, h = 1.0 / 0.05, 2.0, [np.zeros_like(a) for a in base], 0.0
  for i in np.flatnonzero(y):
    x_i, y_i = rows[int(i)]
    pos = np.arange(len(x_i))  # F_i(w_0) on all its rows, or on 8 drawn with replacement
    if len(x_i) > 8:
      pos = np.minimum(np.floor(np.asarray(jax.random.uniform(report_keys[i], (8,))) * len(x_i)),
                       len(x_i) - 1).astype(np.int64)
    logits = np.asarray(forward(w0, x_i[pos]), np.float64)
    logits = logits - logits.max(1, keepdims=True)
    f = float(np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(len(pos)), y_i[pos]])) + 1e-10
    x_pad = np.concatenate([x_i, np.zeros((pad - len(x_i),) + x_i.shape[1:], x_i.dtype)])
    y_pad = np.concatenate([y_i, np.zeros((pad - len(y_i),), y_i.dtype)])
    data_i = ClientData(jnp.asarray(x_pad), jnp.asarray(y_pad), jnp.int32(len(x_i)))
    res = client_update(train_keys[i], w0, data_i,
                        ClientContext(shared=None if name == "fbsfl_ditto" else w0, hyper=hyper, t=jnp.int32(1)))
    if name == "fbsfl_ditto":  # v_i from v_i^0 = w_0 toward w_0, under split(k_personal, N)[i]
      mine = client_update(jax.random.split(keys.personal, n_clients)[i], w0, data_i,
                           ClientContext(shared=w0, hyper=hyper, t=jnp.int32(1)))
      for got, ref in zip(jax.tree_util.tree_leaves(new.personal), jax.tree_util.tree_leaves(mine.params)):
        np.testing.assert_allclose(np.asarray(got)[i], np.asarray(ref), atol=2e-6)
      assert any(np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-6 for a, b in zip(  # not the global training
          jax.tree_util.tree_leaves(mine.params), jax.tree_util.tree_leaves(res.params)))
    dw = [lip * (b - np.asarray(a, np.float64)) for b, a in zip(base, jax.tree_util.tree_leaves(res.params))]
    h += q * f ** (q - 1) * sum((d ** 2).sum() for d in dw) + lip * f ** q
    for j, a in enumerate(jax.tree_util.tree_leaves(res.params)):
      total[j] += n_train[i] * np.asarray(a, np.float64)
      fq_dw[j] += f ** q * dw[j]
  if name == "fbsfl_qffl":  # w ← w − Σ_k F_k^q Δw_k / Σ_k h_k
    want = [b - a / h for b, a in zip(base, fq_dw)]
  else:
    want = [a / n_train[y].sum() for a in total]
  for got, ref in zip(jax.tree_util.tree_leaves(new.global_params), want):
    np.testing.assert_allclose(np.asarray(got), ref, atol=2e-6)
  if name == "fbsfl_ditto":
    for got, before in zip(jax.tree_util.tree_leaves(new.personal), jax.tree_util.tree_leaves(state.personal)):
      np.testing.assert_array_equal(np.asarray(got)[~y], np.asarray(before)[~y])  # the others' v_i unchanged
      assert np.abs(np.asarray(got)[y] - np.asarray(before)[y]).max() > 1e-4  # the participants' moved
