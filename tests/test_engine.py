"""The vectorized engine against a plain Python loop over clients, step counts, and compile counts."""
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
from fedjax_sim.engine.simulate import make_simulation
from fedjax_sim.tasks import binary_task
from tests.conftest import make_cohorts

ROUNDS = 2


@pytest.fixture(scope="module")
def setup():
  cohorts = make_cohorts(num_sites=5, sizes=[40, 75, 130, 210, 260])
  config = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32))
  fed = from_cohorts(cohorts, batch_size=32, num_buckets=3)
  return config, fed


def test_fedavg_engine_equals_python_loop_over_clients(setup):
  config, fed = setup
  algorithm, model = build_method("fedavg", config, fed)
  hyper = hyper_from_config(config, "fedavg")
  key = jax.random.key(7)
  out = jax.jit(make_simulation(algorithm, model, ROUNDS))(key, fed, hyper)

  # The same per-client function, called one client at a time in a Python loop.
  client_update = jax.jit(make_client_update(binary_task(model), batch_size=32, epochs=2),
                          static_argnames=())
  k_init, k_rounds = jax.random.split(key)
  theta = model.init(k_init)
  where = {}
  for b in fed.buckets:
    for pos, i in enumerate(np.asarray(b.client_idx)):
      where[int(i)] = (b, pos)
  n_train = np.asarray(fed.n_train, np.float64)
  for r, k in enumerate(jax.random.split(k_rounds, ROUNDS)):
    keys = jax.random.split(k, fed.num_clients)
    results = []
    for i in range(fed.num_clients):
      b, pos = where[i]
      res = client_update(keys[i], theta, ClientData(b.x[pos], b.y[pos], b.n[pos]),
                          ClientContext(shared=theta, own=None, hyper=hyper))
      results.append(res.params)
      assert int(res.steps) == 2 * math.ceil(int(b.n[pos]) / 32)  # E · ceil(n_i / batch) steps
    w = n_train / n_train.sum()
    theta = jax.tree_util.tree_map(lambda *ps: sum(wi * np.asarray(p, np.float64) for wi, p in zip(w, ps)),
                                   *results)
  for got, want in zip(jax.tree_util.tree_leaves(out.state.global_params), jax.tree_util.tree_leaves(theta)):
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


def test_padding_and_masked_surplus_steps_are_noops():
  """A client padded into a bigger bucket (more scan steps, junk rows) ends exactly as unpadded.

  With partitionable threefry the row order drawn for ``n_pad`` rows starts with
  the order drawn for ``n`` rows, so the only differences are the padded rows and
  the surplus steps, which must change nothing.
  """
  from fedjax_sim.models import mlp_model
  assert jax.config.jax_threefry_partitionable
  cohorts = make_cohorts(num_sites=1, sizes=[90])
  model = mlp_model(5, hidden=(8,))
  cu = jax.jit(make_client_update(binary_task(model), batch_size=16, epochs=2))
  b = from_cohorts(cohorts, batch_size=16, num_buckets=1).buckets[0]
  x, y, n = b.x[0], b.y[0], b.n[0]
  params = model.init(jax.random.key(0))
  hyper = hyper_from_config(ExperimentConfig())
  x_big = jnp.concatenate([x, jnp.full((70, 5), 9.0)])
  y_big = jnp.concatenate([y, jnp.ones(70)])
  small = cu(jax.random.key(1), params, ClientData(x, y, n), ClientContext(hyper=hyper))
  big = cu(jax.random.key(1), params, ClientData(x_big, y_big, n), ClientContext(hyper=hyper))
  assert int(small.steps) == int(big.steps) == 2 * math.ceil(int(n) / 16)
  for a, c in zip(jax.tree_util.tree_leaves(small.params), jax.tree_util.tree_leaves(big.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-6)
  assert float(small.loss) == pytest.approx(float(big.loss), abs=1e-6)


def test_seeds_compile_once_and_second_call_does_not_retrace(setup):
  config, fed = setup
  algorithm, model = build_method("local", config, fed)
  simulate = make_simulation(algorithm, model, 1)
  chex.clear_trace_counter()
  # chex raises on a second trace of the guarded function (issue 10: instead of counting by hand).
  run = jax.jit(jax.vmap(chex.assert_max_traces(simulate, n=1), in_axes=(0, None, None)))
  hyper = hyper_from_config(config, "local")
  keys = jax.vmap(jax.random.key)(jnp.array([11, 22, 33]))
  a = run(keys, fed, hyper)
  b = run(keys, fed, hyper)
  # A new learning rate is a traced value: still no retrace.
  c = run(keys, fed, hyper.replace(learner=hyper.learner.replace(learning_rate=jnp.float32(3e-3))))
  assert a.test_auroc.shape == (3, fed.num_clients)
  np.testing.assert_array_equal(np.asarray(a.test_auroc), np.asarray(b.test_auroc))
  # Seeds differ from each other, and the learning rate changed the result.
  assert not np.allclose(np.asarray(a.history.metrics.train_loss[0]), np.asarray(a.history.metrics.train_loss[1]))
  assert not np.allclose(np.asarray(a.history.metrics.train_loss), np.asarray(c.history.metrics.train_loss))


def test_per_client_models_scored_by_size_group_equal_the_padded_splits():
  """Issue 11 item 3: stacked models scored group by group (eval_plan) give the padded evaluation's numbers, bit for
  bit, for AUROC and accuracy, on ragged splits with a client without rows; each client in exactly one group."""
  from fedjax_sim.data.federation import eval_plan
  from fedjax_sim.engine.simulate import evaluate
  from fedjax_sim.metrics import batched_accuracy, batched_auroc
  from fedjax_sim.models import Model

  rng = np.random.default_rng(3)
  c, v, d, k = 9, 12, 3, 4
  lengths = np.array([0, 1, 2, 12, 3, 7, 5, 12, 4])
  m = np.arange(v)[None, :] < lengths[:, None]
  x = rng.normal(size=(c, v, d)).astype(np.float32)
  assert eval_plan(m, num_buckets=3) == ()  # a small split: scored whole (EVAL_PLAN_MIN_ROWS)
  assert eval_plan(m, num_buckets=3, min_rows=c * v + 1) == () and eval_plan(m, num_buckets=3, min_rows=c * v)
  plan = eval_plan(m, num_buckets=3, min_rows=0)
  assert sorted(np.concatenate([g for g, _ in plan]).tolist()) == list(range(c)) and len(plan) <= 3
  assert all(length == max(1, lengths[g].max()) for g, length in plan)
  for out_dim, score, y in ((1, batched_auroc, rng.integers(0, 2, (c, v)).astype(np.float32)),
                            (k, batched_accuracy, rng.integers(0, k, (c, v)).astype(np.int32))):
    w = jnp.asarray(rng.normal(size=(c, d, out_dim)).astype(np.float32))  # one linear model per client
    model = Model(init=None, apply=lambda p, xb, train, key: ((xb @ p)[..., 0] if p.shape[-1] == 1 else xb @ p,
                                                              None))
    padded = evaluate(model, w, True, jnp.asarray(x), jnp.asarray(y), jnp.asarray(m), score)
    grouped = evaluate(model, w, True, jnp.asarray(x), jnp.asarray(y), jnp.asarray(m), score, plan=plan)
    np.testing.assert_array_equal(np.asarray(grouped), np.asarray(padded))
    assert np.isnan(np.asarray(padded)).any() or score is batched_accuracy  # the empty client's AUROC is NaN


def test_per_client_models_scored_in_pieces_equal_one_piece(monkeypatch):
  """Stacked models on a split above EVAL_PIECE_ELEMENTS run a few whole clients at a time (lax.map; the last
  piece padded by repeating the last client) and are scored whole: bit for bit the one-piece numbers, for AUROC
  and accuracy, also under vmap over runs, with a client without rows, piece sizes that do and do not divide C,
  and the LeNet."""
  from fedjax_sim.engine import simulate
  from fedjax_sim.engine.simulate import eval_pieces, evaluate
  from fedjax_sim.metrics import batched_accuracy, batched_auroc
  from fedjax_sim.models import Model

  assert eval_pieces(230, 311 * 51) == 230  # the clinical split (ABPS-X's head models) stays one piece
  assert eval_pieces(100, 320 * 784) == 16 and eval_pieces(10, 10**7) == 1
  rng = np.random.default_rng(5)
  c, v, d, k = 7, 6, 3, 4
  m = np.arange(v)[None, :] < np.array([0, 1, 6, 3, 2, 6, 4])[:, None]
  x = jnp.asarray(rng.normal(size=(c, v, d)).astype(np.float32))
  model = Model(init=None, apply=lambda p, xb, train, key: (jnp.tanh(xb @ p[0]) @ p[1], None))
  for out_dim, score, y in ((1, batched_auroc, rng.integers(0, 2, (c, v)).astype(np.float32)),
                            (k, batched_accuracy, rng.integers(0, k, (c, v)).astype(np.int32))):
    apply = model.apply if out_dim > 1 else (lambda p, xb, train, key: (model.apply(p, xb, train, key)[0][..., 0],
                                                                        None))
    mdl = Model(init=None, apply=apply)
    w = (jnp.asarray(rng.normal(size=(2, c, d, 5)).astype(np.float32)),
         jnp.asarray(rng.normal(size=(2, c, 5, out_dim)).astype(np.float32)))  # 2 runs × C client models
    run = jax.vmap(lambda p: evaluate(mdl, p, True, x, jnp.asarray(y), jnp.asarray(m), score))
    whole = np.asarray(run(w))
    for per_piece in (1, 2, 3):  # 7 pieces, 4 (one padded), 3 (one padded)
      monkeypatch.setattr(simulate, "EVAL_PIECE_ELEMENTS", per_piece * v * d)
      assert eval_pieces(c, v * d) == per_piece
      np.testing.assert_array_equal(np.asarray(run(w)), whole)
    monkeypatch.undo()
    assert np.isnan(whole).any() or score is batched_accuracy
  # The LeNet (slice convolutions and a matmul): its logits per client do not depend on the piece either.
  from fedjax_sim.models import zoo
  lenet = zoo.lenet_model((28, 28, 1), 10)
  images = jnp.asarray(rng.integers(0, 255, (5, 3, 28, 28, 1)).astype(np.uint8))
  labels = jnp.asarray(rng.integers(0, 10, (5, 3)).astype(np.int32))
  mask = jnp.asarray(np.arange(3)[None, :] < np.array([3, 0, 2, 3, 1])[:, None])
  nets = jax.vmap(lenet.init)(jax.random.split(jax.random.PRNGKey(0), 5))
  whole = np.asarray(evaluate(lenet, nets, True, images, labels, mask, batched_accuracy))
  monkeypatch.setattr(simulate, "EVAL_PIECE_ELEMENTS", 2 * 3 * 28 * 28)
  np.testing.assert_array_equal(np.asarray(evaluate(lenet, nets, True, images, labels, mask, batched_accuracy)),
                                whole)
