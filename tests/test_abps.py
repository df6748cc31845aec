"""One ABPS round against SPEC §3.2 and §3.4: accounting, resting, personalization, early stopping."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms.abps.algorithm import stacked_models
from fedjax_sim.algorithms.registry import build_method, hyper_from_config, preset
from fedjax_sim.config import ExperimentConfig, LearnerConfig, config_for_method
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import local_train
from fedjax_sim.engine.simulate import make_simulation, simulation_parts
from fedjax_sim.models import num_params
from fedjax_sim.tasks import binary_task
from tests.conftest import make_cohorts, with_method

BASE = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=8, sizes=[40, 60, 80, 90, 100, 120, 150, 200]),
                      batch_size=32, num_buckets=2)


def setup(name, fed, **abps):
  config = config_for_method(BASE, preset(name))
  config = dataclasses.replace(config, abps=dataclasses.replace(config.abps, **abps))
  algorithm, model = build_method(name, config, fed)
  hyper = hyper_from_config(config, name)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  return algorithm, model, hyper, state


def test_round_accounting_and_resting(fed):
  algorithm, model, hyper, state = setup("abps", fed)
  step = jax.jit(algorithm.round)
  total = num_params(jax.tree_util.tree_map(lambda a: a[0], state.params))
  # τ_acc = 0: every proposal to a peer with room is accepted.
  s1, m1 = step(jax.random.key(1), state, fed, with_method(hyper, tau_acc=0.0), jnp.int32(1))
  deg = float(m1.mean_partners) * fed.num_clients
  assert float(m1.bytes) == pytest.approx(deg / 2 * 2 * total * 4)  # 2·|W|·4 per undirected edge
  assert float(m1.rest_fraction) == 0.0 and float(m1.mean_partners) > 2.0
  assert int(s1.pulls.sum()) == int(deg)  # one Beta observation per (center, partner)
  np.testing.assert_allclose(np.asarray(s1.alpha + s1.beta - 2.0), np.asarray(s1.pulls), atol=1e-6)
  # τ_acc above every UCB: everyone rests, 0 bytes, models are just the local updates.
  s2, m2 = step(jax.random.key(1), state, fed, with_method(hyper, tau_acc=9.0), jnp.int32(1))
  assert float(m2.bytes) == 0.0 and float(m2.rest_fraction) == 1.0 and int(s2.pulls.sum()) == 0
  k_train = jax.random.split(jax.random.key(1), 3)[0]
  local = local_train(algorithm_client_update(model), k_train, stacked_models(model, state.params), fed,
                      hyper=hyper)
  for a, b in zip(jax.tree_util.tree_leaves(stacked_models(model, s2.params)), jax.tree_util.tree_leaves(local.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def algorithm_client_update(model):
  from fedjax_sim.engine.local import make_client_update
  return make_client_update(binary_task(model), batch_size=32, epochs=1)


def test_personalized_heads_stay_local_and_bf16_halves_bytes(fed):
  algorithm, model, hyper, state = setup("abps_pq_k1", fed)
  hyper = with_method(hyper, tau_acc=0.0)
  s1, m1 = jax.jit(algorithm.round)(jax.random.key(2), state, fed, hyper, jnp.int32(1))
  k_train = jax.random.split(jax.random.key(2), 3)[0]
  local = local_train(algorithm_client_update(model), k_train, stacked_models(model, state.params), fed,
                      hyper=hyper)
  s1 = s1.replace(params=stacked_models(model, s1.params))
  # The head (last layer) is each center's own; the body moved (was averaged with the partner).
  np.testing.assert_allclose(np.asarray(s1.params["head"]["kernel"]), np.asarray(local.params["head"]["kernel"]), atol=1e-6)
  assert not np.allclose(np.asarray(s1.params["hidden_0"]["kernel"]), np.asarray(local.params["hidden_0"]["kernel"]))
  assert float(m1.mean_partners) <= 1.0
  sent = algorithm.sent_params
  assert sent == num_params(jax.tree_util.tree_map(lambda a: a[0], state.params)) - (8 + 1)
  edges = float(m1.mean_partners) * fed.num_clients / 2
  assert float(m1.bytes) == pytest.approx(edges * 2 * sent * 2)  # bf16: 2 bytes per sent parameter


def test_early_stopping_makes_later_rounds_noops(fed):
  """ABPS-X with patience 1 and no learning (lr 0: the models only move by averaging, and round 2's mean
  validation AUROC does not beat round 1's), so it stops after round 2 (SPEC §3.3, early_stop.update:
  stale ≥ patience). Rounds 3–5 are no-ops: active 0, no bytes, and the state after 5 rounds is bitwise
  the state after 2 — beliefs, pulls, models, momentum and the best-validation copy — while round 2 itself
  did change the state (a guard: freezing is not vacuous). The one-program run (make_simulation, a scan)
  ends in the same state as the round-by-round run with the same per-round keys."""
  config = config_for_method(BASE, preset("abps_x"))
  config = dataclasses.replace(config, abps=dataclasses.replace(config.abps, early_stopping_patience=1))
  algorithm, model = build_method("abps_x", config, fed)
  hyper = hyper_from_config(config, "abps_x")
  hyper = hyper.replace(learner=hyper.learner.replace(
      learning_rate=jnp.float32(0.0)))  # no learning: validation AUROC cannot improve after round 1
  rounds = 5
  parts = simulation_parts(algorithm, model, rounds)
  step = jax.jit(parts.step)
  carry = jax.jit(parts.start)(jax.random.key(0), fed, hyper)
  states = []
  for t in range(1, rounds + 1):
    carry, _ = step(carry, fed, hyper, jnp.int32(t))
    states.append(carry.state)
  metrics = carry.history.metrics
  np.testing.assert_array_equal(np.asarray(metrics.active), [1, 1, 0, 0, 0])
  bytes_ = np.asarray(metrics.bytes)
  assert (bytes_[:2] > 0).all() and (bytes_[2:] == 0).all()
  assert [bool(s.early.stopped) for s in states] == [False, True, True, True, True]
  # Round 2 ran: new Beta observations.
  assert float(states[1].pulls.sum()) > float(states[0].pulls.sum()) > 0
  assert not np.array_equal(np.asarray(states[1].alpha), np.asarray(states[0].alpha))
  for later in states[2:]:
    for a, b in zip(jax.tree_util.tree_leaves(later), jax.tree_util.tree_leaves(states[1])):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  out = jax.jit(make_simulation(algorithm, model, rounds))(jax.random.key(0), fed, hyper)
  np.testing.assert_array_equal(np.asarray(out.history.metrics.active), [1, 1, 0, 0, 0])
  assert bool(out.state.early.stopped)
  for a, b in zip(jax.tree_util.tree_leaves(out.state), jax.tree_util.tree_leaves(states[1])):
    if np.issubdtype(np.asarray(a).dtype, np.floating):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    else:
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_head_mask_picks_the_last_layers_from_the_input():
  from fedjax_sim.models.mlp import head_mask
  from fedjax_sim.models import mlp_model
  params = mlp_model(4).init(jax.random.key(0))
  one = head_mask(params, 1)
  two = head_mask(params, 2)
  assert one["head"]["kernel"] and not one["hidden_1"]["kernel"] and not one["hidden_0"]["bias"]
  assert two["head"]["bias"] and two["hidden_1"]["kernel"] and not two["hidden_0"]["kernel"]
  assert not any(jax.tree_util.tree_leaves(head_mask(params, 0)))


# --- candidate pools (issue 4: beliefs [C, M]) -------------------------------------------------------

def _outcome(name, fed, rounds, **abps):
  algorithm, model, hyper, _ = setup(name, fed, **abps)
  return jax.jit(make_simulation(algorithm, model, rounds))(jax.random.key(3), fed, hyper)


def test_pool_size_zero_and_every_other_center_give_identical_runs(fed):
  c = fed.num_clients
  a = _outcome("abps_pq_k1_hom", fed, 2, pool_size=0)
  b = _outcome("abps_pq_k1_hom", fed, 2, pool_size=c - 1)
  assert a.state.alpha.shape == (c, c - 1)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def fed12():
  return from_cohorts(make_cohorts(num_sites=12, sizes=[40, 60, 80, 90, 100, 120, 150, 200, 70, 50, 110, 130],
                                   seed=1), batch_size=32, num_buckets=2)


def test_pooled_run_keeps_beliefs_on_the_pool(fed12):
  c, m = fed12.num_clients, 4
  algorithm, _, hyper, state = setup("abps_pq_k1_hom", fed12, pool_size=m)
  index, valid, rev = (np.asarray(a) for a in (state.pool.index, state.pool.valid, state.pool.rev))
  assert index.shape == valid.shape == rev.shape == state.alpha.shape == state.pulls.shape == (c, m)
  assert (np.diff(index, axis=1) > 0).all() and not (index == np.arange(c)[:, None]).any()
  step = jax.jit(algorithm.round)
  hyper = with_method(hyper, tau_acc=0.0)
  for t in (1, 2, 3):
    new, metrics = step(jax.random.key(10 + t), state, fed12, hyper, jnp.int32(t))
    assert new.alpha.shape == (c, m)
    np.testing.assert_array_equal(np.asarray(new.pool.index), index)
    np.testing.assert_allclose(np.asarray(new.alpha + new.beta - 2.0), np.asarray(new.pulls), atol=1e-5)
    seen = np.asarray(new.pulls - state.pulls)
    assert set(np.unique(seen)) <= {0.0, 1.0} and (seen.sum(1) <= 1).all()  # κ = 1: at most one partner observed
    deg = float(metrics.mean_partners) * c
    assert 0 < deg <= c and seen.sum() <= deg
    assert float(metrics.rest_fraction) == pytest.approx(1.0 - float(metrics.mean_partners))
    assert float(metrics.bytes) == pytest.approx(deg / 2 * 2 * algorithm.sent_params * 2)  # bf16
    for i, mm in zip(*np.nonzero(seen)):
      j, r = index[i, mm], rev[i, mm]
      # i proposed to j (a candidate of i), or j proposed to i (i a candidate in j's pool).
      assert valid[i, mm] or (r >= 0 and valid[j, r])
      if r >= 0:  # both hold a belief about the other: both observed the exchange
        assert seen[j, r] == 1.0
    state = new


def test_pooled_program_has_no_c_by_c_array(monkeypatch):
  """Lowers init and one round at C = 211 with M = 8: no intermediate is C × C (or C × (C − 1)) (issue 4)."""
  import re
  from fedjax_sim.algorithms.abps import goal_filter, pool
  monkeypatch.setattr(goal_filter, "EXACT_MAX_PAIRS", 0)  # sampled τ_sim, as at scale
  monkeypatch.setattr(goal_filter, "THRESHOLD_SAMPLES", 4096)
  monkeypatch.setattr(pool, "BLOCK_ROWS", 64)
  c = 211
  tiny = from_cohorts(make_cohorts(num_sites=4, sizes=[60] * 4), batch_size=32, num_buckets=1)
  shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((c,) + a.shape[1:], a.dtype), tiny)
  shapes = shapes.replace(names=tuple(f"c{i}" for i in range(c)))
  found = {}
  for size in (8, 0):  # 0: the paper's C × C beliefs, the positive control
    algorithm, _, hyper, _ = setup("abps_pq_k1_hom", tiny, pool_size=size)
    key = jax.random.key(0)
    state = jax.eval_shape(algorithm.init, key, shapes, hyper)
    text = (jax.jit(algorithm.init).lower(key, shapes, hyper).as_text()
            + jax.jit(algorithm.round).lower(key, state, shapes, hyper, jnp.int32(1)).as_text())
    dims = [tuple(int(d) for d in s.split("x")) for s in re.findall(r"tensor<([0-9x]+)x[a-z0-9]+>", text)]
    found[size] = [d for d in dims if sum(x in (c - 1, c) for x in d) >= 2]
  assert not found[8] and found[0]


def test_bf16_wire_rounds_what_partners_send(fed):
  """ABPS+Q against ABPS in the same round (same key: same partners): the averaged bodies differ by
  n-weighted bf16 rounding errors of the partners' models, at most 2^-8 of the largest weight."""
  base, _, hyper, state = setup("abps", fed)
  wired, _, _, _ = setup("abps_q", fed)
  hyper = with_method(hyper, tau_acc=0.0)
  s32, m32 = jax.jit(base.round)(jax.random.key(5), state, fed, hyper, jnp.int32(1))
  s16, m16 = jax.jit(wired.round)(jax.random.key(5), state, fed, hyper, jnp.int32(1))
  assert float(m16.mean_partners) == float(m32.mean_partners) > 0
  assert float(m16.bytes) == pytest.approx(float(m32.bytes) / 2)
  for a, b in zip(jax.tree_util.tree_leaves(s32.params), jax.tree_util.tree_leaves(s16.params)):
    a, b = np.asarray(a), np.asarray(b)
    diff = np.abs(a - b).max()
    assert 0 < diff <= 2.0 ** -8 * np.abs(a).max() + 1e-7
