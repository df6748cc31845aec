"""The multi-run program (issue 4): chunked = one-shot, the progress callback, numerical faults,
sweeps of traced hyperparameters, and the checkpoint round trip — on a toy algorithm that compiles
in a second, so these invariants cost little."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics, nonfinite_client
from fedjax_sim.algorithms.registry import hyper_from_config
from fedjax_sim.checkpoint import RunCheckpoints
from fedjax_sim.config import ExperimentConfig, apply_overrides
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.placement import Placement
from fedjax_sim.engine.simulate import Program, make_simulation, simulation_parts
from fedjax_sim.models import Model
from tests.conftest import make_cohorts

ROUNDS = 5


@struct.dataclass
class ToyState:
  w: jax.Array  # [C, d] one linear model per client


def toy(poison_round: int = 0, poison_client: int = 0):
  """Each round every client's weights take a random step of size lr (and optionally one goes NaN)."""
  model = Model(init=lambda key: jnp.zeros((5,)), apply=lambda w, x, train, rng: (x @ w, x))

  def init(key, fed, hyper):
    return ToyState(w=0.1 * jax.random.normal(key, (fed.num_clients, fed.num_features)))

  def round_fn(key, state, fed, hyper, t):
    w = state.w + hyper.learner.learning_rate * jax.random.normal(key, state.w.shape)
    poison = (t == poison_round) & (jnp.arange(fed.num_clients) == poison_client)
    w = jnp.where(poison[:, None], jnp.nan, w)
    loss = jnp.mean(w ** 2, axis=1)
    return ToyState(w=w), RoundMetrics(bytes=jnp.asarray(1.0), train_loss=jnp.mean(loss),
                                       rest_fraction=jnp.asarray(0.0), mean_partners=jnp.asarray(1.0),
                                       active=jnp.asarray(1.0), nonfinite_client=nonfinite_client(loss, w))

  return Algorithm(name="toy", init=init, round=round_fn, deployed=lambda s: (s.w, True)), model


@pytest.fixture(scope="module")
def fed():
  return from_cohorts(make_cohorts(num_sites=4, sizes=[40, 60, 80, 100]), batch_size=32, num_buckets=2)


def _hyper(lr=1.0):
  return hyper_from_config(apply_overrides(ExperimentConfig(), {"learner.learning_rate": lr}))


def _keys(seeds):
  return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))


def _equal(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    x, y = np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x), \
        np.asarray(jax.random.key_data(y) if jax.dtypes.issubdtype(y.dtype, jax.dtypes.prng_key) else y)
    np.testing.assert_array_equal(x, y)


def test_program_equals_single_run_simulation_per_seed(fed):
  algorithm, model = toy()
  program = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=False, placement=Placement())
  keys = _keys([3, 4])
  out = program.run(keys, fed, _hyper())
  single = jax.jit(make_simulation(algorithm, model, ROUNDS))
  for s in range(2):
    one = single(keys[s], fed, _hyper())
    np.testing.assert_allclose(np.asarray(out.state.w[s]), np.asarray(one.state.w), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.history.val_auroc[s]), np.asarray(one.history.val_auroc), rtol=1e-6)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_chunked_rounds_equal_one_program_and_skip_past_the_end(fed, chunk):
  algorithm, model = toy()
  parts = simulation_parts(algorithm, model, ROUNDS)
  keys, hyper = _keys([3, 4]), _hyper()
  whole = Program(parts, hyper_batched=False, placement=Placement()).run(keys, fed, hyper)
  program = Program(parts, hyper_batched=False, placement=Placement(), chunk=chunk)
  carry = program.start(keys, fed, hyper)
  t = 1
  while t <= ROUNDS:  # with chunk 2 or 3 the last call runs past R: those rounds must be skipped
    carry = program.advance(carry, fed, hyper, jnp.asarray(t, jnp.int32))
    t += chunk
  out = program.finish(carry, fed)
  np.testing.assert_allclose(np.asarray(out.state.w), np.asarray(whole.state.w), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(out.history.val_auroc), np.asarray(whole.history.val_auroc), rtol=1e-6)
  assert np.asarray(out.history.metrics.active).sum() == 2 * ROUNDS


def test_checkpoint_round_trip_is_bitwise_and_keeps_keys(fed, tmp_path):
  algorithm, model = toy()
  program = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=False, placement=Placement(),
                    chunk=2)
  keys, hyper = _keys([3, 4]), _hyper()
  carry = program.advance(program.start(keys, fed, hyper), fed, hyper, jnp.asarray(1, jnp.int32))
  ckpt = RunCheckpoints(tmp_path / "ck")
  ckpt.save("toy", 2, carry)
  assert ckpt.latest_step("toy") == 2 and ckpt.latest_step("other") == 0
  back = ckpt.restore("toy", 2, jax.eval_shape(program.start, keys, fed, hyper))
  _equal(back, carry)
  a = program.finish(program.advance(carry, fed, hyper, jnp.asarray(3, jnp.int32)), fed)
  b = program.finish(program.advance(back, fed, hyper, jnp.asarray(3, jnp.int32)), fed)
  _equal(a, b)


def test_checkpoint_round_trip_keeps_empty_leaves(tmp_path):
  """Orbax refuses zero-size arrays; a carry holding them (iPFL's ``[C, 0]`` pFedGraph vectors under the other
  rules stopped a full-size ``ipfl --checkpoint-every 10`` run at its first save) round-trips with their shapes,
  dtypes and positions, and the other leaves bit for bit."""
  carry = {"a": jnp.arange(6.0).reshape(2, 3), "empty": jnp.zeros((3, 0), jnp.float32),
           "keys": jax.random.split(jax.random.key(7), 2), "no_keys": jax.random.split(jax.random.key(1), 0),
           "z": jnp.asarray([1, 2], jnp.int32), "flags": jnp.zeros((0,), bool)}
  ckpt = RunCheckpoints(tmp_path / "ck")
  ckpt.save("m", 10, carry)
  back = ckpt.restore("m", 10, jax.eval_shape(lambda: carry))
  assert back["empty"].shape == (3, 0) and back["empty"].dtype == jnp.float32
  assert back["flags"].shape == (0,) and back["flags"].dtype == jnp.bool_
  assert back["no_keys"].shape == (0,) and jax.dtypes.issubdtype(back["no_keys"].dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(jax.random.key_data(back["keys"]), jax.random.key_data(carry["keys"]))
  np.testing.assert_array_equal(back["a"], carry["a"])
  np.testing.assert_array_equal(back["z"], carry["z"])


def test_progress_callback_sees_every_round_and_changes_nothing(fed):
  algorithm, model = toy()
  parts = simulation_parts(algorithm, model, ROUNDS)
  seen = []
  keys, hyper = _keys([3, 4, 5]), _hyper()
  with_cb = Program(parts, hyper_batched=False, placement=Placement(),
                    on_round=lambda t, v: seen.append((int(t), np.asarray(v).shape)))
  a = with_cb.run(keys, fed, hyper)
  jax.effects_barrier()
  b = Program(parts, hyper_batched=False, placement=Placement()).run(keys, fed, hyper)
  assert sorted(seen) == [(t, (3,)) for t in range(1, ROUNDS + 1)]
  _equal(a.state, b.state)


def test_nonfinite_value_is_caught_with_round_and_client(fed):
  algorithm, model = toy(poison_round=3, poison_client=2)
  out = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=False,
                placement=Placement()).run(_keys([3, 4]), fed, _hyper())
  np.testing.assert_array_equal(np.asarray(out.fault.round), [3, 3])
  np.testing.assert_array_equal(np.asarray(out.fault.client), [2, 2])
  clean = Program(simulation_parts(*toy(), ROUNDS), hyper_batched=False, placement=Placement()).run(_keys([3]), fed, _hyper())
  assert int(clean.fault.round[0]) == 0


def test_fault_error_names_the_run_and_adds_the_methods_own_advice(fed):
  from fedjax_sim.errors import NumericalFault
  from fedjax_sim.execute import check_faults
  algorithm, model = toy(poison_round=3, poison_client=2)
  out = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=False,
                placement=Placement()).run(_keys([3, 4]), fed, _hyper())
  with pytest.raises(NumericalFault) as plain:
    check_faults("toy", out.fault, [3, 4], None, fed, None)
  assert str(plain.value).endswith("check the data for non-finite values.")
  assert "round 3 of method toy (seed 3); first affected center: 2" in str(plain.value)
  with pytest.raises(NumericalFault) as hinted:
    check_faults("toy", out.fault, [3, 4], None, fed, None, hint="Shorten the toy's step.")
  assert str(hinted.value) == str(plain.value) + " Shorten the toy's step."


def test_swept_hyperparameters_are_one_program_and_equal_separate_runs(fed):
  algorithm, model = toy()
  traces = []
  program = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=True, placement=Placement(),
                    on_trace=lambda: traces.append(1))
  lrs = [0.5, 1.0, 2.0]
  hyper = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[_hyper(lr) for lr in lrs for _ in range(2)])
  out = program.run(_keys([3, 4] * 3), fed, hyper)
  assert len(traces) == 1
  for g, lr in enumerate(lrs):
    alone = Program(simulation_parts(algorithm, model, ROUNDS), hyper_batched=False,
                    placement=Placement()).run(_keys([3, 4]), fed, _hyper(lr))
    np.testing.assert_allclose(np.asarray(out.state.w[2 * g:2 * g + 2]), np.asarray(alone.state.w), rtol=1e-6)


class _FakeTTY:
  def __init__(self):
    self.text = ""

  def write(self, s):
    self.text += s

  def flush(self):
    pass

  def isatty(self):
    return True


def test_progress_display_shows_rounds_eta_and_val_auroc_only_on_a_terminal():
  from fedjax_sim.progress import Progress, wanted
  tty = _FakeTTY()
  assert wanted(False, tty) and not wanted(True, tty)
  assert not wanted(False, type("Pipe", (), {"isatty": lambda self: False})())
  bar = Progress("fedavg", 10, 2, stream=tty, delay=0.0)
  for t in range(1, 11):
    bar.on_round(np.int32(t), np.array([0.5, 0.7]))
  bar.close()
  assert "fedavg" in tty.text and "10/10" in tty.text and "val AUROC 0.6000" in tty.text and "<" in tty.text
  tty = _FakeTTY()
  bar = Progress("fbsfl", 4, 1, stream=tty, delay=0.0, metric="accuracy")
  bar.on_round(np.int32(1), np.array([np.nan, 0.25]))
  bar.close()
  assert "val accuracy 0.2500" in tty.text and "AUROC" not in tty.text


def test_progress_lines_when_not_a_terminal_every_five_percent_and_the_last():
  """``--progress`` off a terminal: one plain line per 5 % of the rounds (whatever the chunking: a jump over
  several steps gives one line), the last round always, rounds resumed from a checkpoint not counted in the
  rate, nothing written twice for a round already shown."""
  import io
  from fedjax_sim.progress import Progress, wanted
  pipe = io.StringIO()
  assert not wanted(False, pipe) and wanted(False, pipe, forced=True) and not wanted(True, pipe, forced=True)
  bar = Progress("ipfl", 200, 3, stream=pipe, metric="accuracy")
  for t in range(1, 201):
    bar.on_round(np.int32(t), np.array([0.5, 0.7, np.nan]))
  bar.on_round(np.int32(200), np.array([0.5]))
  bar.close()
  lines = pipe.getvalue().splitlines()
  assert [line.split(",")[0] for line in lines] == [f"[fedjax_sim] ipfl: round {t}/200" for t in range(10, 201, 10)]
  assert all("val accuracy 0.6000" in line and "s/round" in line for line in lines)
  assert "left" in lines[0] and "left" not in lines[-1]
  pipe = io.StringIO()
  bar = Progress("fedavg", 7, 1, stream=pipe)
  bar.start_at(3)
  for t in (5, 7):  # chunks of two rounds
    bar.on_round(np.int32(t), np.array([np.nan]))
  lines = pipe.getvalue().splitlines()
  assert [line.split(",")[0] for line in lines] == ["[fedjax_sim] fedavg: round 5/7", "[fedjax_sim] fedavg: round 7/7"]
  assert "val" not in lines[0]  # no finite metric: no figure


def test_gc_paused_nests_across_threads_and_restores_the_collector():
  """``execute.gc_paused``: the collector stays off until the last of nested (or concurrent) pauses ends, and is
  left as it was found (a caller that had it off keeps it off)."""
  import gc
  import threading
  from fedjax_sim.execute import gc_paused
  assert gc.isenabled()
  inner = threading.Event()
  release = threading.Event()

  def other():
    with gc_paused():
      inner.set()
      release.wait(10)

  with gc_paused():
    assert not gc.isenabled()
    t = threading.Thread(target=other)
    t.start()
    inner.wait(10)
  assert not gc.isenabled()  # the thread's pause is still open
  release.set()
  t.join()
  assert gc.isenabled()
  gc.disable()
  try:
    with gc_paused():
      pass
    assert not gc.isenabled()
  finally:
    gc.enable()
