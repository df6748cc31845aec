"""Issue 11: one training body for every size bucket, the persistent compilation cache, progress by chunks."""
from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim import compile_cache, program_cache, run
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.labeled import from_partition
from fedjax_sim.engine import local
from fedjax_sim.engine.local import make_client_update
from fedjax_sim.algorithms import registry
from fedjax_sim.tasks import task_for

SIZES = (3, 17, 1, 41, 9, 26, 5, 12, 33, 2)  # ×2 rows, half for training; 10 clients in 3 groups of 4: 2 dummy slots
BATCH, EPOCHS = 4, 2
CONFIG = ExperimentConfig(learner=LearnerConfig(hidden=(8,), dropout=0.2, optimizer="sgd", schedule="cosine",
                                                learning_rate=0.05, momentum=0.9, weight_decay=5e-4,
                                                batch_size=BATCH, local_epochs=EPOCHS, num_buckets=3))


@pytest.fixture(scope="module")
def fed():
  rng = np.random.default_rng(0)
  n = sum(SIZES) * 2
  data = LabeledData(x=rng.normal(size=(n, 5)).astype(np.float32), y=rng.integers(0, 3, n).astype(np.int32),
                     num_classes=3, description="fabricated").validate()
  parts = np.split(rng.permutation(n)[:sum(s * 2 for s in SIZES)], np.cumsum([s * 2 for s in SIZES])[:-1])
  out = from_partition(data, parts, [f"c{i}" for i in range(len(SIZES))], seed=1, split=(0.5, 0.25, 0.25),
                       batch_size=BATCH, num_buckets=3)
  assert len(out.buckets) == 3 and int(np.min(out.n_train)) <= 2
  return out


@pytest.mark.parametrize("length", [1, 5, 64])
def test_uniform_bits_order_the_uniforms_exactly(length):
  keys = jax.random.split(jax.random.key(7), 4)
  u = jax.vmap(lambda k: jax.random.uniform(k, (length,)))(keys)
  bits = local.uniform_bits_at(jax.random.key_data(keys)[:, None, :], jnp.arange(length)[None, :])
  as_float = jax.lax.bitcast_convert_type(bits | np.uint32(0x3F800000), jnp.float32) - 1.0
  np.testing.assert_array_equal(np.asarray(as_float), np.asarray(u))


def test_flat_store_orders_are_each_clients_bucket_permutation(fed):
  keys = jax.random.split(jax.random.key(3), fed.num_clients)
  blocks = [local.Block(b.client_idx, b.x, b.y, b.n) for b in fed.buckets]
  store, start = jax.jit(lambda k: local._flat_store(blocks, k, EPOCHS))(keys)
  order, start = np.asarray(store.order), np.asarray(start)
  for b in fed.buckets:
    lb = b.x.shape[1]
    for pos, i in enumerate(np.asarray(b.client_idx).tolist()):
      n = int(np.asarray(b.n)[pos])
      for e, ekey in enumerate(jax.random.split(keys[i], EPOCHS)):
        k_perm, _ = jax.random.split(ekey)
        u = jnp.where(jnp.arange(lb) < n, jax.random.uniform(k_perm, (lb,)), 2.0)
        want = np.asarray(jnp.argsort(u)) + start[i]  # what client_update draws on its bucket
        np.testing.assert_array_equal(order[e, start[i]:start[i] + lb], want)
      np.testing.assert_array_equal(np.asarray(store.x[start[i]:start[i] + n]), np.asarray(b.x)[pos, :n])


def test_rows_store_draws_the_flat_stores_batches(fed):
  """The store over the federation's flat train rows (prepared once, outside the program) gives every client the
  same rows in the same order each epoch as the store copied from the buckets inside the round."""
  keys = jax.random.split(jax.random.key(3), fed.num_clients)
  blocks = [local.Block(b.client_idx, b.x, b.y, b.n) for b in fed.buckets]
  flat, f_start = jax.device_get(jax.jit(lambda k: local._flat_store(blocks, k, EPOCHS))(keys))
  rows = local.with_train_store(fed).rows
  assert rows is not None and int(np.asarray(rows.owner)[-1]) == fed.num_clients
  store, r_start = jax.device_get(jax.jit(lambda k: local._rows_store(rows, k, EPOCHS))(keys))
  assert store.order.shape == (EPOCHS, int(np.sum(fed.n_train)) + 1)  # valid rows only, and the zero row
  for i, n in enumerate(np.asarray(fed.n_train).tolist()):
    for e in range(EPOCHS):
      want = flat.x[flat.order[e, f_start[i]:f_start[i] + n]]
      np.testing.assert_array_equal(store.x[store.order[e, r_start[i]:r_start[i] + n]], want)
      np.testing.assert_array_equal(store.y[store.order[e, r_start[i]:r_start[i] + n]],
                                    flat.y[flat.order[e, f_start[i]:f_start[i] + n]])


def test_train_store_only_where_one_body_trains(fed, monkeypatch):
  one_bucket = fed.replace(buckets=fed.buckets[:1])
  assert local.with_train_store(one_bucket).rows is None  # one bucket: one vmapped body, no second copy
  monkeypatch.setattr(local, "MAX_STORE_POSITIONS", 8)
  assert local.with_train_store(fed).rows is None  # above the threshold the buckets train one body each


def test_one_training_body_equals_one_body_per_bucket(fed):
  """The grouped path (one traced body) gives every client what its bucket's vmap gives: stacked starts, a
  regularizer reading the client's own pytree and the shared one, the round's cosine rate; and it traces the
  local objective once where the bucket path traces it once per bucket."""
  traces = {"n": 0}
  task = task_for(CONFIG, fed)
  loss = task.loss

  def counted(logits, y):
    traces["n"] += 1
    return loss(logits, y)

  task = dataclasses.replace(task, loss=counted)
  reg = lambda term: 0.05 * sum(jnp.sum((p - o) ** 2) for p, o in zip(  # noqa: E731
      jax.tree_util.tree_leaves(term.params), jax.tree_util.tree_leaves(term.own))) + 0.01 * sum(
      jnp.sum(p * s) for p, s in zip(jax.tree_util.tree_leaves(term.params), jax.tree_util.tree_leaves(term.shared)))
  cu = make_client_update(task, batch_size=BATCH, epochs=EPOCHS, regularizer=reg)
  c = fed.num_clients
  init = task.model.init(jax.random.key(0))
  rng = np.random.default_rng(4)
  stacked = jax.tree_util.tree_map(lambda a: jnp.asarray(a + 0.1 * rng.normal(size=(c,) + a.shape), jnp.float32),
                                   init)
  own = jax.tree_util.tree_map(lambda a: a * 0.5, stacked)
  hyper = registry.hyper_from_config(CONFIG, "fedavg")
  keys = jax.random.split(jax.random.key(11), c)
  kw = dict(shared=init, own=own, hyper=hyper, t=jnp.asarray(3, jnp.int32), params_stacked=True)
  counts = {}
  results = {}
  stored = local.with_train_store(fed)
  for name, fn, f in (("groups", local._train_by_groups, fed), ("rows", local._train_by_groups, stored),
                      ("buckets", local._train_by_buckets, fed)):
    traces["n"] = 0
    results[name] = jax.device_get(jax.jit(lambda k, p: fn(cu, k, p, f, **kw))(keys, stacked))
    counts[name] = traces["n"]
  assert counts == {"groups": 1, "rows": 1, "buckets": 3}
  g, b = results["groups"], results["buckets"]
  for u, v in zip(jax.tree_util.tree_leaves(results["rows"]), jax.tree_util.tree_leaves(g)):
    np.testing.assert_array_equal(u, v)  # the same steps on the same rows
  for u, v in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(u, v, atol=2e-6, rtol=0)
  np.testing.assert_array_equal(g.steps, EPOCHS * -(-np.asarray(fed.n_train) // BATCH))
  moved = [max(np.abs(np.asarray(u)[i] - np.asarray(v)[i]).max() for u, v in zip(
      jax.tree_util.tree_leaves(g.params), jax.tree_util.tree_leaves(jax.device_get(stacked)))) for i in range(c)]
  assert min(moved) > 1e-4  # every client trained (the smallest too)


# --- the persistent compilation cache -----------------------------------------------------------------------------

TINY = ["--set", "data.num_centers=6", "--set", "data.total_stays=900", "--set", "learner.hidden=8,4",
        "--set", "learner.local_epochs=1", "--rounds", "2", "--seeds", "1,2", "--quiet"]


@pytest.fixture
def cache_events():
  hits = []
  listener = lambda event, **kw: hits.append(event)  # noqa: E731
  jax.monitoring.register_event_listener(listener)
  yield hits
  jax.monitoring.unregister_event_listener(listener)


def test_second_invocation_loads_the_program_and_gives_the_same_numbers(tmp_path, monkeypatch, capsys,
                                                                         cache_events):
  """The second run loads XLA's executables and the traced programs (no trace at all); the numbers are the same
  as the first run's and as a run with both caches off."""
  cache = tmp_path / "cache"
  monkeypatch.setenv(compile_cache.ENV, str(cache))
  monkeypatch.setenv(program_cache.ENV, "1")
  try:
    assert run.main(["fedavg", "--out", str(tmp_path / "a")] + TINY) == 0
    assert any(cache.iterdir()), "the first run wrote no cache entry"
    assert len(list((cache / "programs").iterdir())) == 1  # --quiet: the whole run is one program
    cache_events.clear()
    assert run.main(["fedavg", "--out", str(tmp_path / "b")] + TINY) == 0
    assert "/jax/compilation_cache/cache_hits" in cache_events
    monkeypatch.setenv(compile_cache.ENV, "0")
    assert run.main(["fedavg", "--out", str(tmp_path / "c"), "--no-compile-cache"] + TINY) == 0
  finally:
    compile_cache.enable(os.environ.get("FEDJAX_SIM_TEST_CACHE"))  # the suite's own setting (conftest)
  seeds = [json.loads((tmp_path / d / "fedavg" / "seed_1.json").read_text()) for d in "abc"]
  assert seeds[0] == seeds[1] == seeds[2]  # parsed JSON: every float equal
  timing = [json.loads((tmp_path / d / "summary.json").read_text())["methods"]["fedavg"]["timing"] for d in "abc"]
  assert [t["program_cache"] for t in timing] == ["miss", "hit", "off"]
  assert [t["traces"] for t in timing] == [1, 0, 1]


def test_program_cache_key_and_damaged_files(tmp_path):
  """A program is loaded only under the same key (arguments' types, key parts); another shape, another key part
  or a damaged file traces afresh; a program with a host callback is not cached (None: compile it the usual way)."""
  calls = []

  def body(x, scale):
    calls.append(1)
    return {"y": x * scale + 1.0, "n": jnp.sum(x)}

  where = str(tmp_path / "programs")
  x, s = jnp.arange(4.0), jnp.asarray(2.0)
  first = program_cache.compile_program(body, (x, s), ("m", "cfg"), where)
  again = program_cache.compile_program(body, (x, s), ("m", "cfg"), where)
  assert (first.hit, again.hit, len(calls)) == (False, True, 1)
  np.testing.assert_array_equal(again(x, s)["y"], [1.0, 3.0, 5.0, 7.0])
  assert again.out_template["n"].shape == () and program_cache.describe(again) == "hit"
  assert not program_cache.compile_program(body, (x, s), ("m", "other"), where).hit
  assert not program_cache.compile_program(body, (jnp.arange(5.0), s), ("m", "cfg"), where).hit
  assert len(calls) == 3
  for f in (tmp_path / "programs").iterdir():
    f.write_bytes(b"damaged")
  assert not program_cache.compile_program(body, (x, s), ("m", "cfg"), where).hit and len(calls) == 4
  assert program_cache.compile_program(body, (x, s), ("m", "cfg"), where).hit
  with pytest.raises(TypeError, match="structure"):
    again(x, (s, s))
  assert program_cache.compile_program(body, (x, s), ("m", "cfg"), None) is None  # the cache is off

  def with_callback(x):
    jax.debug.callback(lambda v: None, x)
    return x + 1
  assert program_cache.compile_program(with_callback, (x,), ("cb",), where) is None


def test_cache_switches_and_folder(tmp_path, monkeypatch):
  env = {"XDG_CACHE_HOME": str(tmp_path)}
  assert compile_cache.resolve(False, env) == str(tmp_path / "fedjax_sim" / "xla")
  assert compile_cache.resolve(True, env) is None
  for off in ("0", "off", "False", "no"):
    assert compile_cache.resolve(False, {compile_cache.ENV: off}) is None
  assert compile_cache.resolve(False, {compile_cache.ENV: str(tmp_path / "x")}) == str(tmp_path / "x")


def test_unwritable_cache_folder_is_one_error_line(tmp_path, monkeypatch, capsys):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  monkeypatch.setenv(compile_cache.ENV, str(blocker / "cache"))
  try:
    assert run.main(["fedavg", "--out", str(tmp_path / "out")] + TINY) == 2
  finally:
    compile_cache.enable(os.environ.get("FEDJAX_SIM_TEST_CACHE"))
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("error: the compile cache folder") and "--no-compile-cache" in err[-1]
  assert not (tmp_path / "out").exists()


def test_progress_by_chunks_gives_the_one_call_numbers(tmp_path, monkeypatch):
  """With the cache on, the progress bar moves between chunks of rounds (no callback in the program, so the
  program can be cached): the same numbers as the one-call program."""
  from fedjax_sim.build import build_federation
  from fedjax_sim.config import load_experiment
  from fedjax_sim.execute import RunOptions, prepare_method
  config = load_experiment("fedavg", {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": (8, 4),
                                      "learner.local_epochs": 1, "rounds": 5, "seeds": [1, 2]})
  federation = build_federation(config, warn=lambda m: None)
  outs, served = [], []
  monkeypatch.setenv(program_cache.ENV, "1")  # the chunks' three programs through the program cache: miss, hit
  try:
    for path, progress in ((None, False), (str(tmp_path / "cache"), True), (str(tmp_path / "cache"), True)):
      compile_cache.enable(path)
      prepared = prepare_method("fedavg", config, federation, RunOptions(progress=progress))
      assert (prepared.program.chunk < 5) == progress and prepared.program.on_round is None
      compiled = prepared.compile()
      served.append(compiled.program_cache)
      outs.append(prepared.execute(compiled).per_seed)
  finally:
    compile_cache.enable(os.environ.get("FEDJAX_SIM_TEST_CACHE"))
  assert served == ["off", "miss", "hit"]
  assert outs[0] == outs[1] == outs[2]


# --- evaluation by rows for the clinical task (AUROC) ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fedjax_sim.data.federation import eval_rows  # noqa: E402
from fedjax_sim.metrics import auroc_by_rows, batched_auroc  # noqa: E402

_auroc_rows = jax.jit(auroc_by_rows, static_argnums=3)
_auroc_padded = jax.jit(batched_auroc)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6), seed=st.integers(0, 2 ** 16),
       levels=st.sampled_from([3, 1000]))
def test_auroc_by_rows_equals_the_padded_auroc(lengths, seed, levels):
  """Ties (3 score levels), one-class and empty clients (NaN), padding rows: the per-client Mann–Whitney
  statistic from one sort of all rows equals :func:`auroc` on each client's padded split."""
  rng = np.random.default_rng(seed)
  c, v = len(lengths), 16
  scores = np.zeros((c, v), np.float32)
  labels = np.zeros((c, v), np.float32)
  mask = np.arange(v)[None, :] < np.asarray(lengths)[:, None]
  scores[:] = rng.integers(0, levels, (c, v)) / levels
  labels[:] = rng.random((c, v)) < 0.4
  rows = eval_rows([scores[i, :lengths[i], None] for i in range(c)], [labels[i, :lengths[i]] for i in range(c)],
                   chunk=64)  # one row count for every example: few compiles
  got = np.asarray(_auroc_rows(rows.x[:, 0], rows.y, rows.client, c))
  want = np.asarray(_auroc_padded(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(mask)))
  np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
  assert np.isnan(got[np.asarray(lengths) == 0]).all()


def test_group_count_keeps_equal_groups_within_the_slack_of_the_buckets_steps():
  import math
  # Equal buckets: equal groups are the buckets themselves.
  assert local.group_count([(10, 32), (10, 64), (10, 96)], 32) == 3
  # One huge bucket of small clients and a few large ones (10,000 centers): more, narrower groups.
  buckets, batch = [(9835, 128), (36, 249), (1, 264)], 128
  g = local.group_count(buckets, batch)
  bounds = sorted(length for count, length in buckets for _ in range(count))
  s = -(-len(bounds) // g)
  grouped = sum(s * math.ceil(bounds[min(end, len(bounds)) - 1] / batch) for end in range(s, len(bounds) + s, s))
  own = sum(count * math.ceil(length / batch) for count, length in buckets)
  assert 3 < g < len(bounds) and grouped <= 1.15 * own


# --- threefry unrolled on CPU (fedjax_sim/_threefry.py) ----------------------------------------------------------

# Random123's known-answer vectors for threefry2x32 with 20 rounds (Salmon et al. 2011): (key, count, output).
THREEFRY_KNOWN = [((0, 0), (0, 0), (0x6b200159, 0x99ba4efe)),
                  ((0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff), (0x1cb996fc, 0xbb002be7)),
                  ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3), (0xc4923a9c, 0x483df7a0))]

THREEFRY_SCRIPT = """
import json, jax, jax.numpy as jnp, numpy as np
import fedjax_sim
from fedjax_sim import _threefry
from fedjax_sim.config import load_experiment
from fedjax_sim.experiment import RunOptions, build_federation, run_method
f = jax.jit(lambda k: (jax.random.bits(k, (37,)), jax.random.uniform(k, (3, 5)), jax.random.permutation(k, 11)))
cfg = load_experiment("fedavg", {"data.num_centers": 6, "data.total_stays": 900, "learner.hidden": "8,4",
                                 "learner.num_buckets": 1, "learner.local_epochs": 1, "rounds": 2, "seeds": "1"})
r = run_method("fedavg", cfg, build_federation(cfg, warn=lambda m: None), RunOptions())
from jax._src.random.threefry2x32 import threefry_2x32
known = [jax.jit(threefry_2x32)(jnp.asarray(k, jnp.uint32), jnp.asarray(c, jnp.uint32)).tolist()
         for k, c in %r]
print(json.dumps({"unrolled": _threefry.UNROLLED, "known": known,
                  "whiles": f.lower(jax.random.key(3)).as_text().count("stablehlo.while"),
                  "draws": [np.asarray(a).ravel().tolist() for a in f(jax.random.key(3))],
                  "fedavg": r.per_seed[0]["val_auroc_curve"] + r.per_seed[0]["test_auroc_per_center"]}))
""" % ([(k, c) for k, c, _ in THREEFRY_KNOWN],)


def test_threefry_unrolled_on_cpu_gives_jax_rolled_bits_and_no_while_loop():
  """The unrolled lowering (fedjax_sim/_threefry.py) changes the program's form, not one bit: the same draws and
  the same FedAvg run as JAX's rolled CPU lowering (FEDJAX_SIM_THREEFRY=rolled), with no while loop per call."""
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = {}
  for mode in ("", "rolled"):
    env = dict(os.environ, FEDJAX_SIM_THREEFRY=mode, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", THREEFRY_SCRIPT], env=env, cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out[mode or "unrolled"] = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["unrolled"]["unrolled"] and not out["rolled"]["unrolled"]
  assert out["unrolled"]["whiles"] == 0 and out["rolled"]["whiles"] >= 1  # the rolled form: a loop per call site
  assert out["unrolled"]["draws"] == out["rolled"]["draws"]
  assert out["unrolled"]["fedavg"] == out["rolled"]["fedavg"]  # bitwise, through a whole simulation
  for mode in out:  # both forms against Random123's known answers
    assert out[mode]["known"] == [list(want) for _, _, want in THREEFRY_KNOWN], mode


