"""The platform pieces of issue 10 (items 2–5) against their definitions.

Partial participation (``train_selected``, ``selection_plan``, ``gather_rows``) against training each client alone
and against the full round; the task's losses, accuracies, schedule and optimizers against numpy loops and hand
computations; flat evaluation against the padded one; ``from_partition`` against the partition it was given;
K-of-N FedAvg through the registry against an n-weighted mean recomputed by hand; the registry's derived config
keys; and a trace guard on a round. One tiny 8-client federation (x float32 [n, 6], 3 classes) is shared by the
tests, and so are its compiled functions (module-scoped fixtures).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sim import config as config_module
from fedjax_sim import metrics as M
from fedjax_sim import sweep
from fedjax_sim.algorithms import registry
from fedjax_sim.config import ExperimentConfig, LearnerConfig, ParticipationConfig
from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.federation import plan_buckets, with_train_rows
from fedjax_sim.data.labeled import from_partition
from fedjax_sim.engine.local import (SWEEPABLE_LEARNER, ClientContext, ClientData, LearnerHyper, gather_rows,
                                     local_train, make_client_update, selection_plan, slot_lanes,
                                     train_selected)
from fedjax_sim.engine.simulate import evaluate
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import (accuracy_by_rows, accuracy_per_client, cross_entropy, learning_rate_at,
                              make_optimizer, reweighted_accuracy, task_for)
from tests.conftest import bucket_rows

# Clients in index order are not in size order; the 2-row client has no validation or test row (SPEC §4.5's
# 80/10/10 needs 3), so its accuracy is undefined (NaN).
SIZES = (20, 5, 40, 9, 33, 2, 27, 14)
FEATURES, CLASSES, BATCH, EPOCHS, K = 6, 3, 4, 2, 3
ROUND_KEY = 8  # the sampled round's key (it selects clients 5, 7, 2)
ID_SCALE = 100.0  # feature 0 of row r is r / ID_SCALE: every row can be recognized after splitting and padding

CONFIG = ExperimentConfig(
    learner=LearnerConfig(hidden=(8,), dropout=0.2, optimizer="sgd", schedule="constant", learning_rate=0.05,
                          momentum=0.9, weight_decay=5e-4, batch_size=BATCH, local_epochs=EPOCHS, num_buckets=2),
    participation=ParticipationConfig(clients_per_round=K))


def fabricated_data(sizes=SIZES, seed=0):
  """``(LabeledData, parts)``: float32 rows whose feature 0 encodes the row id, labels in 0..2, rows dealt to
  clients of the given sizes in a random order."""
  rng = np.random.default_rng(seed)
  n = sum(sizes)
  x = rng.normal(size=(n, FEATURES)).astype(np.float32)
  x[:, 0] = np.arange(n, dtype=np.float32) / ID_SCALE
  y = rng.integers(0, CLASSES, n).astype(np.int32)
  perm = rng.permutation(n)
  parts = np.split(perm, np.cumsum(sizes)[:-1])
  return LabeledData(x=x, y=y, num_classes=CLASSES, description="fabricated").validate(), parts


def row_ids(x) -> np.ndarray:
  return np.rint(np.asarray(x)[..., 0] * ID_SCALE).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Setup:
  data: LabeledData
  parts: list
  fed: object  # the federation with its flat train rows
  task: object
  hyper: object
  client_update: object  # the raw per-client function
  client_update_jit: object
  rows: dict  # client → unpadded train (x, y)
  init: object  # one model initialization (host-perturbed copies stand in for other draws: no more compiles)


@pytest.fixture(scope="module")
def setup() -> Setup:
  data, parts = fabricated_data()
  fed = with_train_rows(from_partition(data, parts, [f"c{i}" for i in range(len(parts))], seed=5,
                                       split=(0.8, 0.1, 0.1), batch_size=BATCH, num_buckets=2))
  task = task_for(CONFIG, fed)
  hyper = registry.hyper_from_config(CONFIG, "fedavg")
  cu = make_client_update(task, batch_size=BATCH, epochs=EPOCHS)
  return Setup(data=data, parts=parts, fed=fed, task=task, hyper=hyper, client_update=cu,
               client_update_jit=jax.jit(cu), rows=bucket_rows(fed), init=task.model.init(jax.random.key(0)))


def perturbed(params, seed, lead=()):
  """``params`` plus N(0, 0.1²) noise drawn on the host, with extra leading axes ``lead`` (stacked clients)."""
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map(
      lambda a: jnp.asarray(np.asarray(a) + 0.1 * rng.normal(size=lead + a.shape).astype(np.float32)), params)


def host_slice(tree, i):
  """Row ``i`` of every leaf of a stacked host (numpy) pytree."""
  return jax.tree_util.tree_map(lambda a: a[i], tree)


def assert_trees_close(a, b, atol=1e-6):
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(la) == len(lb) > 0
  for u, v in zip(la, lb):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=atol, rtol=0)


# --- 1. partial participation equals training alone (issue 10 item 3) -------------------------------------------------


@pytest.fixture(scope="module")
def trainers(setup):
  """``({lanes: train_selected}, local_train)`` jitted. lanes 0: the plan's 2 groups of 2 lanes, one of them a
  dummy (placed first, beside the smallest slot); lanes 1: 3 loops of one slot each (the CPU default)."""
  plan = selection_plan(setup.fed.n_train, K, BATCH, 2)
  assert plan == ((1, 21), (2, 32))  # two slot groups (the 3rd and 2nd largest, padded to 21 and 32 rows)
  t = jnp.asarray(1, jnp.int32)
  selected_fns = {lanes: jax.jit(lambda key, params, fed, sel, shared, hyper, lanes=lanes: train_selected(
      setup.client_update, key, params, fed, sel, plan, shared=shared, hyper=hyper, t=t, lanes=lanes))
                  for lanes in (0, 1)}
  full_fn = jax.jit(lambda key, params, fed, shared, hyper: local_train(setup.client_update, key, params, fed,
                                                                        shared=shared, hyper=hyper, t=t))
  return selected_fns, full_fn


def test_slot_lanes_auto_is_one_on_cpu_and_explicit_counts_stand():
  assert slot_lanes(0) == (1 if jax.default_backend() == "cpu" else 0)  # 0: the plan's groups on an accelerator
  assert slot_lanes(1) == 1 and slot_lanes(4) == 4


# Out of size order (train rows 32, 2, 12: the largest client and one in a slot far longer than its rows), and the
# same clients in another order. ROUND_KEY's sampled round draws these three too, so the per-client references
# compile once for both tests (only compile time depends on that).
@pytest.mark.parametrize("lanes", [0, 1])
@pytest.mark.parametrize("selected", [(2, 5, 7), (7, 2, 5)])
def test_train_selected_equals_each_client_alone_and_the_full_round(setup, trainers, selected, lanes):
  selected_fns, full_fn = trainers
  selected_fn = selected_fns[lanes]
  c = setup.fed.num_clients
  key = jax.random.key(3)
  params = perturbed(setup.init, 1, (c,))  # every client its own start
  shared = perturbed(setup.init, 2)  # what every client sees (unread without a regularizer)
  sel = jnp.asarray(selected, jnp.int32)
  # Results and starts on the host (numpy): slicing them costs no compile.
  got, full, start = jax.device_get((selected_fn(key, params, setup.fed, sel, shared, setup.hyper),
                                     full_fn(key, params, setup.fed, shared, setup.hyper), params))
  keys = jax.random.split(key, c)
  assert got.loss.shape == (K,)
  for j, i in enumerate(selected):
    x, y = setup.rows[i]
    alone = jax.device_get(setup.client_update_jit(
        keys[i], host_slice(start, i), ClientData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(len(x), jnp.int32)),
        ClientContext(shared=shared, hyper=setup.hyper, t=jnp.asarray(1, jnp.int32))))
    mine = host_slice(got, j)
    assert_trees_close(mine.params, alone.params)
    assert float(mine.loss) == pytest.approx(float(alone.loss), abs=1e-6)
    assert int(mine.steps) == int(alone.steps) == EPOCHS * math.ceil(len(x) / BATCH)
    assert_trees_close(mine, host_slice(full, i))
    # Guard: training moved the parameters.
    moved = max(np.abs(a - b).max() for a, b in zip(jax.tree_util.tree_leaves(mine.params),
                                                    jax.tree_util.tree_leaves(host_slice(start, i))))
    assert moved > 1e-3


# --- 2. selection_plan ------------------------------------------------------------------------------------------------


def slot_bounds(plan) -> list:
  return [rows for slots, rows in plan for _ in range(slots)]


def best_contiguous_cost(bounds, batch, groups) -> int:
  """Least Σ_group |group| · ⌈max/B⌉ over cuts of the sorted ``bounds`` into ≤ ``groups`` runs (brute force)."""
  m = len(bounds)
  best = None
  for r in range(min(groups, m)):
    for cuts in itertools.combinations(range(1, m), r):
      edges = (0,) + cuts + (m,)
      cost = sum((b - a) * math.ceil(bounds[b - 1] / batch) for a, b in zip(edges[:-1], edges[1:]))
      best = cost if best is None else min(best, cost)
  return best


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 120), min_size=1, max_size=12), data=st.data(),
       batch=st.integers(1, 16), buckets=st.integers(1, 4))
def test_selection_plan_bounds_dominate_every_selection(sizes, data, batch, buckets):
  k = data.draw(st.integers(1, len(sizes)), label="K")
  plan = selection_plan(np.asarray(sizes), k, batch, buckets)
  bounds = slot_bounds(plan)
  assert len(bounds) == k and len(plan) <= buckets
  assert bounds == sorted(bounds)
  for _ in range(5):  # random K-subsets: the j-th smallest selected size fits slot j
    chosen = data.draw(st.permutations(range(len(sizes))), label="order")[:k]
    picked = sorted(sizes[i] for i in chosen)
    assert all(p <= b for p, b in zip(picked, bounds))
  largest = sorted(sizes)[len(sizes) - k:]  # the K largest clients are a selection too: the bounds are tight
  assert all(p <= b for p, b in zip(largest, bounds))
  cost = sum(math.ceil(b / batch) for b in bounds)
  largest_cost = sum(math.ceil(s / batch) for s in largest)
  assert cost >= largest_cost
  assert cost == best_contiguous_cost(largest, batch, buckets)
  # With a group for every slot there is no padding at all: the cost is exactly the K largest clients' work.
  unlimited = selection_plan(np.asarray(sizes), k, batch, k)
  assert sum(math.ceil(b / batch) for b in slot_bounds(unlimited)) == largest_cost


@settings(max_examples=30, deadline=None)
@given(c=st.integers(1, 40), n=st.integers(1, 300), batch=st.integers(1, 64), data=st.data())
def test_selection_plan_equal_sizes_costs_k_over_n_of_a_full_round(c, n, batch, data):
  k = data.draw(st.integers(1, c), label="K")
  sizes = np.full(c, n)
  full = sum(len(g) * math.ceil(sizes[g].max() / batch) for g in plan_buckets(sizes, batch, 4))
  cost = sum(slots * math.ceil(rows / batch) for slots, rows in selection_plan(sizes, k, batch, 4))
  assert cost * c == full * k


def test_selection_plan_refuses_k_outside_one_to_c():
  for k in (0, 4):
    with pytest.raises(ValueError, match="clients_per_round"):
      selection_plan(np.array([3, 4, 5]), k, 2, 2)


# --- 3. gather_rows ---------------------------------------------------------------------------------------------------


def test_gather_rows_returns_each_clients_rows_in_order_then_zeros(setup):
  rows = setup.fed.rows
  n = np.asarray(setup.fed.n_train)
  clients = np.array([6, 0, 5, 2, 2])  # any order, a repeat, the 2-row client
  length = int(n.max()) + 3
  gather = jax.jit(gather_rows, static_argnums=2)
  out = jax.device_get(gather(rows, jnp.asarray(clients, jnp.int32), length))
  assert out.x.shape == (len(clients), length, FEATURES) and out.y.shape == (len(clients), length)
  np.testing.assert_array_equal(np.asarray(out.n), n[clients])
  for s, i in enumerate(clients):
    x, y = setup.rows[i]
    np.testing.assert_array_equal(np.asarray(out.x[s, :n[i]]), x)
    np.testing.assert_array_equal(np.asarray(out.y[s, :n[i]]), y)
    assert not np.any(np.asarray(out.x[s, n[i]:])) and not np.any(np.asarray(out.y[s, n[i]:]))
  # Shorter than a client: its first ``length`` rows.
  short = jax.device_get(gather(rows, jnp.asarray([2], jnp.int32), 4))
  np.testing.assert_array_equal(np.asarray(short.x[0]), setup.rows[2][0][:4])


# --- 4. accuracy by rows and padded -----------------------------------------------------------------------------------


def numpy_accuracy(logits, labels, mask) -> np.ndarray:
  """Per-client hits over every position of every masked row, a plain loop; NaN without rows."""
  out = []
  for c in range(labels.shape[0]):
    hits = total = 0
    for r in range(labels.shape[1]):
      if mask[c, r]:
        pred = np.argmax(logits[c, r], axis=-1)
        hits += int(np.sum(pred == labels[c, r]))
        total += int(np.size(labels[c, r]))
    out.append(hits / total if total else np.nan)
  return np.array(out)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), sequence=st.booleans(), density=st.floats(0.0, 1.0))
def test_accuracy_by_rows_equals_padded_and_a_numpy_loop(seed, sequence, density):
  """Fixed shapes (two compiles in all); the examples vary the scores, the labels and which rows are real."""
  rng = np.random.default_rng(seed)
  c, n, k, length, pad = 5, 6, 4, 3, 7
  tail = (length,) if sequence else ()
  logits = rng.normal(size=(c, n) + tail + (k,)).astype(np.float32)
  labels = rng.integers(0, k, (c, n) + tail).astype(np.int32)
  mask = rng.random((c, n)) < density
  mask[0] = False  # a client without rows
  mask[1, 0] = True  # and one with
  want = numpy_accuracy(logits, labels, mask)
  padded = np.asarray(accuracy_per_client(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask)))
  np.testing.assert_allclose(padded, want, atol=1e-6)
  assert np.isnan(padded[0]) and np.isfinite(padded[1])
  # The same rows flat and shuffled; masked-out rows and extra rows of arbitrary scores are padding (client C).
  client = np.where(mask, np.arange(c)[:, None], c).reshape(-1)
  flat_logits = np.concatenate([logits.reshape((c * n,) + tail + (k,)),
                                rng.normal(size=(pad,) + tail + (k,)).astype(np.float32)])
  flat_labels = np.concatenate([labels.reshape((c * n,) + tail), rng.integers(0, k, (pad,) + tail).astype(np.int32)])
  client = np.concatenate([client, np.full(pad, c)]).astype(np.int32)
  order = rng.permutation(len(client))
  flat = np.asarray(accuracy_by_rows(jnp.asarray(flat_logits[order]), jnp.asarray(flat_labels[order]),
                                     jnp.asarray(client[order]), c))
  np.testing.assert_allclose(flat, padded, atol=1e-6)


# --- 5. reweighted accuracy (iPFL, SPEC §5) ---------------------------------------------------------------------------


def test_reweighted_accuracy_against_its_definition():
  rng = np.random.default_rng(2)
  c, t, k = 4, 30, 5
  logits = rng.normal(size=(c, t, k)).astype(np.float32)
  labels = rng.choice([0, 1, 3, 4], size=t).astype(np.int32)  # class 2 is absent from the test set
  labels[:4] = [0, 1, 3, 4]
  weights = rng.dirichlet(np.ones(k), size=c).astype(np.float32)
  got = np.asarray(reweighted_accuracy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(weights)))
  want = []
  for i in range(c):
    pred = np.argmax(logits[i], axis=-1)
    num = den = 0.0
    for cls in range(k):
      rows = labels == cls
      if not rows.any():
        continue  # dropped, the other weights renormalized
      num += weights[i, cls] * np.mean(pred[rows] == cls)
      den += weights[i, cls]
    want.append(num / den)
  np.testing.assert_allclose(got, want, atol=1e-6)
  # Positive control: every class present and weights summing to one: plainly Σ_k w_ik acc_k.
  full_labels = np.arange(t, dtype=np.int32) % k
  got_full = np.asarray(reweighted_accuracy(jnp.asarray(logits), jnp.asarray(full_labels), jnp.asarray(weights)))
  acc_k = np.array([[np.mean(np.argmax(logits[i], -1)[full_labels == cls] == cls) for cls in range(k)]
                    for i in range(c)])
  np.testing.assert_allclose(got_full, (weights * acc_k).sum(1), atol=1e-6)
  # One-hot weights pick that class's accuracy.
  one_hot = np.eye(k, dtype=np.float32)[[3, 0, 4, 1]]
  got_hot = np.asarray(reweighted_accuracy(jnp.asarray(logits), jnp.asarray(full_labels), jnp.asarray(one_hot)))
  np.testing.assert_allclose(got_hot, acc_k[np.arange(c), [3, 0, 4, 1]], atol=1e-6)


def test_reweighted_accuracy_of_token_windows_weights_each_position_by_train_over_test_frequency():
  """Sequences (LEAF Shakespeare held-out roles): every position is a sample weighted w_ik / q_k, q_k the test
  count of its character (train/test class frequencies), normalized over the present classes."""
  rng = np.random.default_rng(5)
  c, t, length, k = 3, 7, 6, 4
  logits = rng.normal(size=(c, t, length, k)).astype(np.float32)
  labels = rng.integers(0, k - 1, size=(t, length)).astype(np.int32)  # class k−1 absent
  weights = rng.dirichlet(np.ones(k), size=c).astype(np.float32)
  got = np.asarray(reweighted_accuracy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(weights)))
  q = np.bincount(labels.ravel(), minlength=k)
  for i in range(c):
    pred = np.argmax(logits[i], -1)
    num = den = 0.0
    for a in range(t):
      for b in range(length):
        w = weights[i, labels[a, b]] / q[labels[a, b]]
        num += w * (pred[a, b] == labels[a, b])
        den += w
    np.testing.assert_allclose(got[i], num / den, rtol=1e-5)


# --- 6. learning-rate schedule (SPEC §4.5) ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(base=st.floats(1e-3, 1.0), ratio=st.floats(0.0, 1.0), half=st.integers(1, 60))
def test_cosine_schedule_endpoints_midpoint_and_monotone(base, ratio, half):
  final = base * ratio
  rounds = 2 * half + 1  # odd R: round half + 1 is the middle
  lr = np.array([float(learning_rate_at("cosine", base, final, t, rounds)) for t in range(1, rounds + 1)])
  assert lr[0] == pytest.approx(base, rel=1e-5)
  assert lr[-1] == pytest.approx(final, rel=1e-5, abs=1e-7)
  assert lr[half] == pytest.approx((base + final) / 2, rel=1e-5)
  assert np.all(np.diff(lr) <= 1e-6 * base)
  for t in (1, half, rounds):
    assert learning_rate_at("constant", base, final, t, rounds) == base


def test_task_optimizer_reads_the_round_index(setup):
  """``Task.make_optimizer(learner, t)`` steps with the schedule's rate of round t (SGD without momentum/decay)."""
  task = dataclasses.replace(setup.task, schedule="cosine", rounds=5)
  learner = LearnerHyper(learning_rate=jnp.float32(0.4), weight_decay=jnp.float32(0.0),
                         momentum=jnp.float32(0.0), final_learning_rate=jnp.float32(0.1))
  params = {"w": jnp.ones(3)}
  grads = {"w": jnp.full(3, 2.0)}
  for t, lr in ((1, 0.4), (3, 0.25), (5, 0.1)):
    opt = task.make_optimizer(learner, jnp.asarray(t, jnp.int32))
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), -lr * 2.0 * np.ones(3), rtol=1e-5)


# --- 7. optimizers: torch-style coupled weight decay ------------------------------------------------------------------


def two_steps(opt, theta0, g1, g2):
  state = opt.init(theta0)
  u1, state = opt.update(g1, state, theta0)
  theta1 = optax.apply_updates(theta0, u1)
  u2, state = opt.update(g2, state, theta1)
  return theta1, optax.apply_updates(theta1, u2)


def test_sgd_and_adam_against_hand_computation():
  rng = np.random.default_rng(4)
  theta0, g1, g2 = (rng.normal(size=5).astype(np.float64) for _ in range(3))
  lr, wd, mu = 0.05, 5e-3, 0.9
  learner = LearnerHyper(learning_rate=jnp.float32(lr), weight_decay=jnp.float32(wd), momentum=jnp.float32(mu),
                         final_learning_rate=jnp.float32(0.0))
  as32 = lambda a: {"w": jnp.asarray(a, jnp.float32)}  # noqa: E731
  # SGD (torch.optim.SGD with momentum and weight_decay): v1 = g1 + wd θ0; θ1 = θ0 − lr v1;
  # v2 = μ v1 + (g2 + wd θ1); θ2 = θ1 − lr v2.
  v1 = g1 + wd * theta0
  t1 = theta0 - lr * v1
  v2 = mu * v1 + (g2 + wd * t1)
  t2 = t1 - lr * v2
  got1, got2 = two_steps(make_optimizer("sgd", learner, lr), as32(theta0), as32(g1), as32(g2))
  np.testing.assert_allclose(np.asarray(got1["w"]), t1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(got2["w"]), t2, rtol=1e-5, atol=1e-6)
  # Adam (torch.optim.Adam with weight_decay: the decay is added to the gradient), by hand ...
  b1, b2, eps = 0.9, 0.999, 1e-8
  m = v = np.zeros_like(theta0)
  theta = theta0
  for step, g in enumerate((g1, g2), start=1):
    gd = g + wd * theta
    m, v = b1 * m + (1 - b1) * gd, b2 * v + (1 - b2) * gd ** 2
    theta = theta - lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + eps)
  _, adam2 = two_steps(make_optimizer("adam", learner, lr), as32(theta0), as32(g1), as32(g2))
  np.testing.assert_allclose(np.asarray(adam2["w"]), theta, rtol=1e-5, atol=1e-6)
  # ... and as optax's chain.
  _, chain2 = two_steps(optax.chain(optax.add_decayed_weights(wd), optax.adam(lr)), as32(theta0), as32(g1), as32(g2))
  np.testing.assert_allclose(np.asarray(adam2["w"]), np.asarray(chain2["w"]), atol=1e-7)


# --- 8. cross-entropy -------------------------------------------------------------------------------------------------


def numpy_ce(logits, labels):
  z = logits.astype(np.float64)
  log_softmax = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
  return -np.take_along_axis(log_softmax, labels[..., None].astype(np.int64), axis=-1)[..., 0]


def test_cross_entropy_is_minus_log_softmax_at_the_label():
  rng = np.random.default_rng(5)
  logits = (3 * rng.normal(size=(7, 4))).astype(np.float32)
  labels = rng.integers(0, 4, 7).astype(np.int32)
  got = np.asarray(cross_entropy(jnp.asarray(logits), jnp.asarray(labels)))
  assert got.shape == (7,)
  np.testing.assert_allclose(got, numpy_ce(logits, labels), rtol=1e-5)
  seq_logits = rng.normal(size=(3, 5, 6)).astype(np.float32)
  seq_labels = rng.integers(0, 6, (3, 5)).astype(np.int32)
  got_seq = np.asarray(cross_entropy(jnp.asarray(seq_logits), jnp.asarray(seq_labels)))
  assert got_seq.shape == (3,)
  np.testing.assert_allclose(got_seq, numpy_ce(seq_logits, seq_labels).mean(axis=1), rtol=1e-5)


# --- 9. flat evaluation of a shared model -----------------------------------------------------------------------------


def test_flat_evaluation_equals_the_padded_path(setup):
  fed, model = setup.fed, setup.task.model
  params = perturbed(setup.init, 9)

  def padded_path_forbidden(*args):
    raise AssertionError("the flat path should not call the padded score")

  for x, y, m, rows in ((fed.x_val, fed.y_val, fed.m_val, fed.val_rows),
                        (fed.x_test, fed.y_test, fed.m_test, fed.test_rows)):
    padded = np.asarray(evaluate(model, params, False, x, y, m, accuracy_per_client))
    flat = np.asarray(evaluate(model, params, False, x, y, m, padded_path_forbidden, rows, accuracy_by_rows))
    np.testing.assert_allclose(flat, padded, atol=1e-6)
    assert np.isnan(flat[SIZES.index(2)]) and np.isfinite(np.delete(flat, SIZES.index(2))).all()


# --- 10. from_partition -----------------------------------------------------------------------------------------------


def test_from_partition_places_every_row_once_in_its_clients_splits(setup):
  fed, data = setup.fed, setup.data
  assert fed.task == "multiclass" and fed.num_classes == CLASSES and fed.num_clients == len(SIZES)
  assert sorted(np.concatenate([np.asarray(b.client_idx) for b in fed.buckets]).tolist()) == list(range(len(SIZES)))
  m_val, m_test = np.asarray(fed.m_val), np.asarray(fed.m_test)
  for i, part in enumerate(setup.parts):
    x_train, y_train = setup.rows[i]
    train = row_ids(x_train)
    val = row_ids(np.asarray(fed.x_val[i])[m_val[i]])
    test = row_ids(np.asarray(fed.x_test[i])[m_test[i]])
    assert sorted(np.concatenate([train, val, test]).tolist()) == sorted(part.tolist())  # each row exactly once
    n = len(part)
    n_val = max(1, round(0.1 * n)) if n >= 3 else 0  # SPEC §4.5: 80/10/10, a row in each part from 3 rows
    assert (len(val), len(test), int(fed.n_train[i])) == (n_val, n_val, n - 2 * n_val) and len(train) == n - 2 * n_val
    np.testing.assert_array_equal(x_train, data.x[train])  # features and labels travel with their rows
    np.testing.assert_array_equal(y_train, data.y[train])
    np.testing.assert_array_equal(np.asarray(fed.y_val[i])[m_val[i]], data.y[val])
    np.testing.assert_array_equal(np.asarray(fed.y_test[i])[m_test[i]], data.y[test])
    assert not np.any(np.asarray(fed.x_val[i])[~m_val[i]])  # padding is zeros
  # The flat evaluation rows are the same rows, client after client.
  val_client = np.asarray(fed.val_rows.client)
  for i in range(fed.num_clients):
    np.testing.assert_array_equal(row_ids(np.asarray(fed.val_rows.x)[val_client == i]),
                                  row_ids(np.asarray(fed.x_val[i])[m_val[i]]))
  assert (val_client == fed.num_clients).sum() == len(val_client) - m_val.sum()


def test_from_partition_keeps_uint8_images_and_tells_the_task_by_label_shape():
  rng = np.random.default_rng(6)
  images = LabeledData(x=rng.integers(0, 256, (24, 4, 4, 1)).astype(np.uint8),
                       y=rng.integers(0, 3, 24).astype(np.int32), num_classes=3).validate()
  parts = np.split(rng.permutation(24), [10, 17])
  fed = from_partition(images, parts, ["a", "b", "c"], seed=0, batch_size=4)
  assert fed.task == "multiclass" and fed.feature_shape == (4, 4, 1)
  assert {b.x.dtype for b in fed.buckets} == {np.dtype(np.uint8)}
  assert fed.x_val.dtype == fed.x_test.dtype == fed.val_rows.x.dtype == np.dtype(np.uint8)
  text = LabeledData(x=rng.integers(0, 7, (24, 5)).astype(np.int32), y=rng.integers(0, 7, (24, 5)).astype(np.int32),
                     num_classes=7).validate()
  fed_text = from_partition(text, parts, ["a", "b", "c"], seed=0, batch_size=4)
  assert fed_text.task == "next_char" and fed_text.num_classes == 7
  assert fed_text.y_val.shape[2:] == (5,) and fed_text.buckets[0].y.shape[2:] == (5,)


# --- 11. K-of-N FedAvg through the registry ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sampled(setup):
  """FedAvg with K = 3 of 8 clients per round, built by the registry; its round jitted under a trace guard."""
  algorithm, model = registry.build_method("fedavg", CONFIG, setup.fed)
  fed = algorithm.prepare(setup.fed)
  state = algorithm.init(jax.random.key(0), fed, setup.hyper)
  round_jit = jax.jit(chex.assert_max_traces(algorithm.round, n=1))
  return algorithm, model, fed, state, round_jit


def test_sampled_fedavg_round_is_the_n_weighted_mean_of_the_selected_clients(setup, sampled):
  algorithm, model, fed, state, round_jit = sampled
  c = fed.num_clients
  key = jax.random.key(ROUND_KEY)
  new_state, metrics = round_jit(key, state, fed, setup.hyper, jnp.asarray(1, jnp.int32))
  # The round's selection, recomputed as sampled_fedavg draws it: split(key) → (k_select, k_train).
  k_select, k_train = jax.random.split(key)
  selected = np.asarray(jax.random.choice(k_select, c, (K,), replace=False))
  assert len(set(selected.tolist())) == K
  keys = jax.random.split(k_train, c)
  glob = state.global_params
  results, losses = [], []
  for i in selected:
    x, y = setup.rows[int(i)]
    res = jax.device_get(setup.client_update_jit(
        keys[i], glob, ClientData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(len(x), jnp.int32)),
        ClientContext(shared=glob, hyper=setup.hyper, t=jnp.asarray(1, jnp.int32))))
    results.append(res.params)
    losses.append(float(res.loss))
  n = np.asarray(fed.n_train, np.float64)[selected]
  want = jax.tree_util.tree_map(lambda *ps: sum(w * np.asarray(p, np.float64) for w, p in zip(n / n.sum(), ps)),
                                *results)
  assert_trees_close(new_state.global_params, want, atol=1e-5)
  z = np.asarray(metrics.extra["participation"])
  np.testing.assert_array_equal(z, np.isin(np.arange(c), selected).astype(np.float32))
  assert float(metrics.train_loss) == pytest.approx(np.mean(losses), abs=1e-5)
  assert float(metrics.bytes) == K * 2 * algorithm.sent_params * 4
  assert float(metrics.rest_fraction) == pytest.approx(1 - K / c)
  # Guard: the global model moved.
  assert not np.allclose(np.asarray(jax.tree_util.tree_leaves(new_state.global_params)[0]),
                         np.asarray(jax.tree_util.tree_leaves(glob)[0]))


def test_participation_fairness_of_a_hand_made_history():
  z = np.array([[1, 1, 0, 0],
                [1, 0, 1, 0],
                [1, 1, 1, 1],  # inactive: not counted
                [0, 1, 0, 0]], np.float32)
  active = np.array([1.0, 1.0, 0.0, 1.0])
  out = M.participation_fairness({"participation": z}, active)
  counts = np.array([2.0, 2.0, 1.0, 0.0])  # column sums of the active rounds
  assert out["participation_jain"] == pytest.approx(float(M.jain_index(jnp.asarray(counts))), abs=1e-6)
  assert out["participation_kl_uniform"] == pytest.approx(float(M.kl_to_uniform(jnp.asarray(counts))), abs=1e-6)
  assert out["participation_gini"] == pytest.approx(float(M.gini(jnp.asarray(counts))), abs=1e-6)
  # The same numbers from their definitions.
  n, p = len(counts), counts / counts.sum()
  assert out["participation_jain"] == pytest.approx(counts.sum() ** 2 / (n * (counts ** 2).sum()), abs=1e-6)  # 25/36
  assert out["participation_kl_uniform"] == pytest.approx(sum(q * np.log(n * q) for q in p if q > 0), abs=1e-6)
  gini = np.abs(counts[:, None] - counts[None, :]).sum() / (2 * n * n * counts.mean())
  assert out["participation_gini"] == pytest.approx(gini, abs=1e-6)  # 0.35
  np.testing.assert_allclose(out["participation_lorenz"], [0, 0, 0.2, 0.6, 1.0], atol=1e-6)
  assert M.participation_fairness({}, active) == {}


# --- 12. the registry's derived config --------------------------------------------------------------------------------


def test_config_keys_and_sweepable_keys_derive_from_the_declarations():
  valid = set(config_module.valid_keys())
  sections = registry.sections()
  expected_sweep = list(SWEEPABLE_LEARNER)
  assert tuple(f.name for f in dataclasses.fields(LearnerHyper)) == tuple(k.split(".")[1] for k in SWEEPABLE_LEARNER)
  for spec in registry.SPECS:
    if spec.section:
      assert sections[spec.section] is spec.settings
      assert isinstance(getattr(ExperimentConfig(), spec.section), spec.settings)
      for f in dataclasses.fields(spec.settings):
        assert f"{spec.section}.{f.name}" in valid
    if spec.hyper is not None:
      settings_names = {f.name for f in dataclasses.fields(spec.settings)}
      for f in dataclasses.fields(spec.hyper):
        assert f.name in settings_names
        key = f"{spec.section}.{f.name}"
        assert key in valid
        if key not in expected_sweep:
          expected_sweep.append(key)
  assert sweep.sweepable() == tuple(expected_sweep)
  assert "fedprox.mu" in sweep.sweepable() and "learner.learning_rate" in sweep.sweepable()  # positive control


def test_check_federation_refuses_participation_for_methods_that_do_not_sample():
  sampling = set()
  for spec in registry.SPECS:
    p = spec.partial_participation
    sampling |= set(spec.methods) if p is True else set(p or ())
  assert "fedavg" in sampling and "abps" not in sampling and "fedavg_pq" not in sampling
  full = dataclasses.replace(CONFIG, participation=ParticipationConfig(clients_per_round=0))
  registry.check_federation("abps", full, 8)  # positive controls: no error
  registry.check_federation("fedavg", CONFIG, 8)
  registry.check_federation("fedavg", dataclasses.replace(CONFIG, participation=ParticipationConfig(8)), 8)
  with pytest.raises(ConfigError, match="clients_per_round") as err:
    registry.check_federation("abps", CONFIG, 8)
  named = str(err.value).split("(")[1].split(")")[0]
  assert set(named.split(", ")) == sampling
  with pytest.raises(ConfigError, match="exceeds"):
    registry.check_federation("fedavg", dataclasses.replace(CONFIG, participation=ParticipationConfig(9)), 8)


# --- 13. trace guard --------------------------------------------------------------------------------------------------


def test_new_traced_hyperparameters_do_not_retrace_the_round(setup, sampled):
  algorithm, model, fed, state, round_jit = sampled
  key = jax.random.key(ROUND_KEY)
  a, _ = round_jit(key, state, fed, setup.hyper, jnp.asarray(1, jnp.int32))
  learner = setup.hyper.learner.replace(learning_rate=jnp.float32(0.01), momentum=jnp.float32(0.5))
  b, _ = round_jit(key, state, fed, setup.hyper.replace(learner=learner), jnp.asarray(2, jnp.int32))  # no raise
  assert not np.allclose(np.asarray(jax.tree_util.tree_leaves(a.global_params)[0]),
                         np.asarray(jax.tree_util.tree_leaves(b.global_params)[0]))  # the new values were read

  # Positive control: the same guard catches a retrace (a weakly typed Python float changes the signature).
  def scaled_rate(hyper):
    return 2.0 * hyper.learner.learning_rate

  guarded = jax.jit(chex.assert_max_traces(scaled_rate, n=1))
  guarded(setup.hyper)
  guarded(setup.hyper.replace(learner=learner))
  with pytest.raises(AssertionError, match="traced > 1"):
    guarded(setup.hyper.replace(learner=learner.replace(learning_rate=0.3)))
