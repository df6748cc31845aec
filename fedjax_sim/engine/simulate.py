"""A whole simulation as one XLA program (SPEC §1 "One XLA program", "Sweeps", "Beyond one device").

A simulation of one run (one seed, one hyperparameter point) is three pure pieces:

* ``start(key, federation, hyper) -> Carry``: the algorithm's initial state, the
  per-round keys and empty history buffers;
* ``step(carry, federation, hyper, t) -> (Carry, val)``: round ``t`` of the
  algorithm, the validation AUROC of the deployed model (the learning curve),
  the history write and the non-finite check;
* ``finish(carry, federation) -> Outcome``: test and validation AUROC at the end.

:func:`make_simulation` composes them into ``simulate(key, federation, hyper)``
with a ``lax.scan`` over rounds. :class:`Program` runs N runs at once (seeds ×
grid points on one leading axis) as ``scan(vmap(step))``, either as one
compiled call for the whole run or, for checkpointed runs, as one compiled
chunk of rounds reused from chunk to chunk. Both compute the same rounds with the
same per-round keys (``split(k_rounds, R)`` whatever the chunking), so they agree
up to float rounding (XLA may fuse the two programs differently); a resumed
chunked run is bitwise the uninterrupted chunked run.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.base import Algorithm, RoundMetrics, nonfinite_rows
from fedjax_sim.data.federation import Federation
from fedjax_sim.engine.placement import Placement
from fedjax_sim.metrics import batched_auroc, mean_defined
from fedjax_sim.models import Model


@struct.dataclass
class History:
  """Per-round records, each with a leading ``[R]`` rounds axis (zeros for rounds not run yet)."""

  metrics: RoundMetrics  # bytes, train loss, rest fraction, E|P_i|, active, non-finite client
  val_auroc: jax.Array  # [R] mean validation AUROC over clients with both classes
  val_clients: Any = None  # [R, C] each client's validation metric per round, when the method declares
  # ``client_curves`` (paper 002 Table 6 reads worst client and σ at a matched round); None otherwise


@struct.dataclass
class Fault:
  """The first numerical fault of a run (SPEC §1: detected inside the program)."""

  round: jax.Array  # [] int32: first round with a non-finite loss or parameter (0 = none)
  client: jax.Array  # [] int32: first affected client in that round (−1: not attributable to one client)


@struct.dataclass
class Carry:
  """Everything a run needs to continue: what a checkpoint saves."""

  state: Any  # the algorithm's state
  round_keys: jax.Array  # [R] the key of each round, split(k_rounds, R)
  history: History  # [R] records of the rounds run so far
  fault: Fault


@struct.dataclass
class Outcome:
  """What one simulation returns."""

  state: Any  # the algorithm's final state
  history: History
  test_auroc: jax.Array  # [C] per-client test AUROC of the deployed model (NaN: one-class test split)
  val_auroc: jax.Array  # [C] per-client validation AUROC of the deployed model
  fault: Fault


EVAL_PIECE_ELEMENTS = 1 << 22
"""Padded input elements (clients × rows × features) above which per-client models without a size plan are
run in pieces of whole clients (:func:`evaluate`), one piece after another under ``lax.map``, and scored whole.

Scoring C stacked models in one piece materializes every model's activations on every padded row at once. For the
LeNet, whose convolutions are slices and a matmul (docs/PLATFORM.md, finding 4), the second convolution's patches
are 8 × 8 × 150 floats a row, 12 × the image: Ditto behind FBS-FL's strategic layer (100 clients × 320 padded
validation rows × 5 seeds) held 16.7 GB of XLA temporaries against FedAvg's 0.25 GB (``memory_analysis``, session
16) and peaked at 18.7 GB on a 24 GiB machine. 2²² elements is 16 MiB of float32 input a piece: the clinical splits
(230 × 311 × 51 = 3.6 M) stay one piece, exactly as before; a Fashion-MNIST split of 100 × 320 images is cut into
pieces of 16 clients."""


def eval_pieces(num_clients: int, per_client: int, budget: Optional[int] = None) -> int:
  """Static: clients per piece so that a piece's padded input holds at most ``budget`` elements (default
  :data:`EVAL_PIECE_ELEMENTS`; ≥ 1 client); ``num_clients`` (one piece) when the whole split fits."""
  budget = EVAL_PIECE_ELEMENTS if budget is None else budget
  return max(1, min(num_clients, budget // max(per_client, 1)))


def _logits_in_pieces(model: Model, params, x, per_piece: int) -> jax.Array:
  """Logits ``[C, n, ...]`` of stacked ``params`` on ``x [C, n, ...]``, ``per_piece`` clients at a time
  (``lax.map``; the last piece repeats the last client to fill it, and the repeats are dropped). The logits are
  bitwise :func:`client_scores`'s (each client's model sees the same rows in the same program shape per client);
  the caller scores them whole, so the scores are too."""
  c = x.shape[0]
  pieces = -(-c // per_piece)
  index = jnp.minimum(jnp.arange(pieces * per_piece, dtype=jnp.int32), c - 1).reshape(pieces, per_piece)
  logits = jax.lax.map(lambda i: client_scores(model, jax.tree_util.tree_map(lambda a: a[i], params), True, x[i]),
                       index)
  return logits.reshape((pieces * per_piece,) + logits.shape[2:])[:c]


def client_scores(model: Model, params, stacked: bool, x: jax.Array) -> jax.Array:
  """Logits of the deployed model(s) on ``x [C, n, ...]`` (no dropout) → ``[C, n, ...]``."""
  apply = lambda p, xc: model.apply(p, xc, False, None)[0]
  return jax.vmap(apply, in_axes=(0 if stacked else None, 0))(params, x)


def evaluate(model: Model, params, stacked: bool, x, y, m, score: Callable = batched_auroc, rows=None,
             score_rows: Optional[Callable] = None, plan: Optional[tuple] = None) -> jax.Array:
  """Per-client metric ``[C]`` of the deployed model(s) on a padded split (the task's ``score``; default AUROC).

  A shared model (``stacked`` False) with the split's flat ``rows`` (:class:`~fedjax_sim.data.federation.EvalRows`)
  and a task that scores by rows is evaluated chunk by chunk over the real rows only: the same numbers, at a
  cost of the rows rather than C × the longest split. Per-client models (``stacked``) with a ``plan``
  (:func:`~fedjax_sim.data.federation.eval_plan`, static) are scored group by group, each group's clients (and
  their models) gathered and cut to the group's length: the same numbers (masked rows never count), at the cost of
  the groups' padded rows (issue 11 item 3). Per-client models without a plan on a split larger than
  :data:`EVAL_PIECE_ELEMENTS` run a piece of whole clients at a time and are scored whole: the same numbers,
  bit for bit, at a fraction of the memory.
  """
  if stacked and plan:
    out = jnp.zeros((m.shape[0],), jnp.float32)
    for clients, length in plan:
      i = jnp.asarray(clients)
      mine = jax.tree_util.tree_map(lambda a: a[i], params)
      got = score(client_scores(model, mine, True, x[i, :length]), y[i, :length], m[i, :length])
      out = out.at[i].set(got.astype(jnp.float32))
    return out
  if stacked:
    per_piece = eval_pieces(m.shape[0], math.prod(x.shape[1:]))
    if per_piece < m.shape[0]:
      return score(_logits_in_pieces(model, params, x, per_piece), y, m)
  if not stacked and rows is not None and score_rows is not None:
    from fedjax_sim.data.federation import EVAL_CHUNK
    chunks = rows.x.shape[0] // EVAL_CHUNK
    xs = rows.x.reshape((chunks, EVAL_CHUNK) + rows.x.shape[1:])
    logits = jax.lax.map(lambda xc: model.apply(params, xc, False, None)[0], xs)
    logits = logits.reshape((chunks * EVAL_CHUNK,) + logits.shape[2:])
    return score_rows(logits, rows.y, rows.client, m.shape[0])
  return score(client_scores(model, params, stacked, x), y, m)


def empty_history(metrics_shape, rounds: int, num_clients: Optional[int] = None) -> History:
  """Zero buffers ``[R, ...]`` for every leaf of a round's metrics (their shapes from ``jax.eval_shape``), and the
  per-client validation curve ``[R, C]`` when ``num_clients`` is given."""
  buffers = jax.tree_util.tree_map(lambda s: jnp.zeros((rounds,) + tuple(s.shape), s.dtype), metrics_shape)
  clients = None if num_clients is None else jnp.zeros((rounds, num_clients), jnp.float32)
  return History(metrics=buffers, val_auroc=jnp.zeros((rounds,), jnp.float32), val_clients=clients)


def _as_metrics(metrics: RoundMetrics) -> RoundMetrics:
  """``metrics`` with every leaf an array (a Python default such as ``nonfinite_client = 0`` becomes int32)."""
  return jax.tree_util.tree_map(lambda v: v if isinstance(v, jax.Array) else jnp.asarray(v), metrics)


def first_nonfinite_client(state, num_clients: int) -> tuple:
  """``(any_bad, client)``: whether any float leaf of ``state`` is non-finite, and the first client
  whose slice of a per-client leaf (leading axis C) is (−1 if none is)."""
  any_bad, bad = nonfinite_rows(state, num_clients)
  return any_bad, jnp.where(jnp.any(bad), jnp.argmax(bad), -1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class SimParts:
  """The pure pieces of one run (see the module docstring)."""

  start: Callable  # (key, federation, hyper) -> Carry
  step: Callable  # (carry, federation, hyper, t) -> (Carry, val)
  finish: Callable  # (carry, federation) -> Outcome
  rounds: int


def simulation_parts(algorithm: Algorithm, model: Model, rounds: int, score: Callable = batched_auroc,
                     score_rows: Optional[Callable] = None, client_curves: bool = False,
                     eval_plans: tuple = (None, None)) -> SimParts:
  """The pieces of one run of ``algorithm`` for ``rounds`` rounds (static: the history length), scored per client
  by ``score`` (the task's: AUROC for the clinical task, accuracy for images and text); with ``client_curves`` the
  history also keeps every client's validation score of every round (``History.val_clients``). ``eval_plans``:
  the validation and test splits' :func:`~fedjax_sim.data.federation.eval_plan` (host, static), for scoring
  per-client models by size group; None scores them on the padded splits."""
  val_plan, test_plan = eval_plans

  # One jitted round, traced once: ``start`` shapes the history from it (``eval_shape``) and the scan's step calls
  # it with the same abstract arguments, which hits jit's trace cache instead of tracing the round again
  # (issue 11: the second trace was a third of the lowering time).
  round_fn = jax.jit(algorithm.round)

  def start(key, federation: Federation, hyper) -> Carry:
    k_init, k_rounds = jax.random.split(key)
    state = algorithm.init(k_init, federation, hyper)
    round_keys = jax.random.split(k_rounds, rounds)
    metrics_shape = jax.eval_shape(lambda s: _as_metrics(round_fn(round_keys[0], s, federation, hyper,
                                                                  jnp.asarray(1, jnp.int32))[1]), state)
    clients = federation.num_clients if client_curves else None
    return Carry(state=state, round_keys=round_keys, history=empty_history(metrics_shape, rounds, clients),
                 fault=Fault(round=jnp.asarray(0, jnp.int32), client=jnp.asarray(-1, jnp.int32)))

  def step(carry: Carry, federation: Federation, hyper, t):
    state, metrics = round_fn(carry.round_keys[t - 1], carry.state, federation, hyper, t)
    params, stacked = algorithm.deployed(state)
    val_c = evaluate(model, params, stacked, federation.x_val, federation.y_val, federation.m_val, score,
                     federation.val_rows, score_rows, val_plan)
    val = mean_defined(val_c)[0]
    # Non-finite loss or parameter: record the first round and client (SPEC §1, issue "numerical faults").
    bad_state, state_client = first_nonfinite_client(state, federation.num_clients)
    reported = jnp.asarray(metrics.nonfinite_client, jnp.int32)
    bad = bad_state | ~jnp.isfinite(metrics.train_loss) | (reported > 0)
    client = jnp.where(reported > 0, reported - 1, state_client)
    new_fault = (carry.fault.round == 0) & bad
    fault = Fault(round=jnp.where(new_fault, t, carry.fault.round),
                  client=jnp.where(new_fault, client, carry.fault.client))
    i = t - 1
    hist = carry.history
    history = History(
        metrics=jax.tree_util.tree_map(lambda buf, v: buf.at[i].set(jnp.asarray(v, buf.dtype)), hist.metrics,
                                       _as_metrics(metrics)),
        val_auroc=hist.val_auroc.at[i].set(val),
        val_clients=None if hist.val_clients is None else hist.val_clients.at[i].set(val_c.astype(jnp.float32)))
    return Carry(state=state, round_keys=carry.round_keys, history=history, fault=fault), val

  def finish(carry: Carry, federation: Federation) -> Outcome:
    params, stacked = algorithm.deployed(carry.state)
    test = evaluate(model, params, stacked, federation.x_test, federation.y_test, federation.m_test, score,
                    federation.test_rows, score_rows, test_plan)
    val = evaluate(model, params, stacked, federation.x_val, federation.y_val, federation.m_val, score,
                   federation.val_rows, score_rows, val_plan)
    return Outcome(state=carry.state, history=carry.history, test_auroc=test, val_auroc=val, fault=carry.fault)

  return SimParts(start=start, step=step, finish=finish, rounds=rounds)


def make_simulation(algorithm: Algorithm, model: Model, rounds: int, score: Callable = batched_auroc,
                    client_curves: bool = False, eval_plans: tuple = (None, None)):
  """Returns ``simulate(key, federation, hyper) -> Outcome`` for one run (pure, not yet jitted).

  Args:
    algorithm: the method, from :mod:`fedjax_sim.algorithms`.
    model: the evaluated model family (for validation/test scoring).
    rounds: number of rounds R (static: it fixes the scan length).
    client_curves: also keep every client's validation score of every round (``History.val_clients [R, C]``).
    eval_plans: the validation and test splits' size groups for per-client models (:func:`simulation_parts`).
  """
  parts = simulation_parts(algorithm, model, rounds, score, client_curves=client_curves, eval_plans=eval_plans)

  def simulate(key: jax.Array, federation: Federation, hyper) -> Outcome:
    carry = parts.start(key, federation, hyper)
    carry, _ = jax.lax.scan(lambda c, t: parts.step(c, federation, hyper, t), carry,
                            jnp.arange(1, rounds + 1, dtype=jnp.int32))
    return parts.finish(carry, federation)

  return simulate


class Program:
  """N runs (seeds × grid points on one leading axis) of one method as compiled programs.

  ``hyper_batched`` says whether ``hyper`` carries the leading run axis (a
  ``--sweep``) or is shared by every run. ``on_round(t, vals[N])``, when given,
  is a host callback after every round (the progress display); it changes no
  number. ``chunk`` rounds run per call of :meth:`advance` (``chunk = R``: the
  whole run is one call of :meth:`run`).
  """

  def __init__(self, parts: SimParts, *, hyper_batched: bool, placement: Placement,
               chunk: Optional[int] = None, on_round: Optional[Callable] = None,
               on_trace: Optional[Callable] = None):
    self.parts = parts
    self.rounds = parts.rounds
    self.chunk = min(chunk or parts.rounds, parts.rounds)
    self.placement = placement
    self.on_round = on_round
    self.on_trace = on_trace or (lambda: None)
    hax = 0 if hyper_batched else None
    self._v_start = jax.vmap(parts.start, in_axes=(0, None, hax))
    self._v_step = jax.vmap(parts.step, in_axes=(0, None, hax, None))
    self._v_finish = jax.vmap(parts.finish, in_axes=(0, None))
    self.start = jax.jit(self._start)
    self.advance = jax.jit(self._advance)
    self.finish = jax.jit(self._finish)
    self.run = jax.jit(self._run)

  # -- traced bodies ---------------------------------------------------------------------------------

  def _start(self, keys, federation, hyper) -> Carry:
    federation = self.placement.constrain_federation(federation)
    return self.placement.constrain_carry(self._v_start(keys, federation, hyper), federation.num_clients)

  def _rounds(self, carry, federation, hyper, t0, length: int, guard: bool) -> Carry:
    c = federation.num_clients

    def one(carry, t):
      def run_round(carry):
        carry, vals = self._v_step(carry, federation, hyper, t)
        if self.on_round is not None:
          jax.debug.callback(self.on_round, t, vals)
        return self.placement.constrain_carry(carry, c)

      if guard:  # the last chunk may pass R: those rounds are skipped (t is the same for every run)
        return jax.lax.cond(t <= self.rounds, run_round, lambda c_: c_, carry), None
      return run_round(carry), None

    carry, _ = jax.lax.scan(one, carry, t0 + jnp.arange(length, dtype=jnp.int32))
    return carry

  def _advance(self, carry, federation, hyper, t0) -> Carry:
    """Rounds ``t0 … t0 + chunk − 1`` (those past R are skipped)."""
    self.on_trace()
    federation = self.placement.constrain_federation(federation)
    carry = self.placement.constrain_carry(carry, federation.num_clients)
    return self._rounds(carry, federation, hyper, t0, self.chunk, guard=self.rounds % self.chunk != 0)

  def _finish(self, carry, federation) -> Outcome:
    return self._v_finish(carry, self.placement.constrain_federation(federation))

  def _run(self, keys, federation, hyper) -> Outcome:
    """The whole simulation, all runs, as one program."""
    self.on_trace()
    federation = self.placement.constrain_federation(federation)
    carry = self._start(keys, federation, hyper)
    carry = self._rounds(carry, federation, hyper, jnp.asarray(1, jnp.int32), self.rounds, guard=False)
    return self._v_finish(carry, federation)
