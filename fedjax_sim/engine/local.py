"""Local training of one client, written once and lifted over clients with ``vmap`` (SPEC §1).

:func:`make_client_update` returns the per-client function; :func:`local_train`
runs it over every client of a federation and scatters the results back onto the
client axis. With several size buckets it traces ONE training body for all of
them (clients in size-sorted groups, rows read from a flat store; issue 11: a
body per bucket made compile time grow with the bucket count), otherwise a
``vmap`` per bucket. :func:`train_selected` trains only K selected clients.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fedjax_sim.data.federation import Federation
from fedjax_sim.tasks import bce_with_logits  # noqa: F401  (re-exported: DeFTA and WPFed score with it)

# A regularizer adds an algorithm's term to the local loss: ``reg(term: LocalTerm) -> scalar``.
Regularizer = Callable[["LocalTerm"], jax.Array]


class LocalTerm(NamedTuple):
  """What a regularizer sees for one minibatch of one client (issue 10: named, not 8 positional arguments)."""

  params: Any  # the parameters being trained
  apply: Callable  # the model's ``apply(params, x, train, rng) -> (logits, representation)``
  x: jax.Array  # [B, ...] the minibatch's features
  mask: jax.Array  # [B] bool, True on real rows
  rng: jax.Array  # the dropout key of this batch's training forward pass (the mask the supervised loss saw)
  shared: Any  # the same for every client (e.g. the round's global model)
  own: Any  # this client's slice of a stacked per-client pytree (FedDyn's gradient term, MOON's previous model)
  hyper: Any  # the run's traced hyperparameters (:class:`fedjax_sim.algorithms.spec.Hyper`)


@struct.dataclass
class LearnerHyper:
  """Traced learner hyperparameters (sweepable without recompiling); ranges: ``LearnerConfig``."""

  learning_rate: jax.Array  # [] step size (Adam, SPEC §3.1: 1e-3; SGD, SPEC §4.5: 0.05); the cosine's start
  weight_decay: jax.Array  # [] L2 coefficient added to the gradient, as torch.optim's weight_decay
  momentum: jax.Array  # [] SGD momentum (SPEC §4.5: 0.9); unused by Adam
  final_learning_rate: jax.Array  # [] the cosine schedule's last-round rate (SPEC §4.5: 0.005)


SWEEPABLE_LEARNER = ("learner.learning_rate", "learner.weight_decay", "learner.momentum",
                     "learner.final_learning_rate")
"""The learner's sweepable keys: :class:`LearnerHyper`'s fields."""


def learner_hyper(learner_config) -> LearnerHyper:
  f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
  return LearnerHyper(learning_rate=f(learner_config.learning_rate), weight_decay=f(learner_config.weight_decay),
                      momentum=f(learner_config.momentum),
                      final_learning_rate=f(learner_config.final_learning_rate))


class ClientData(NamedTuple):
  """One client's training rows, padded to its bucket's (or slot's) length."""

  x: jax.Array  # [n_pad, ...] features, valid rows first
  y: jax.Array  # [n_pad, ...] labels
  n: jax.Array  # [] int32 valid rows


class ClientContext(NamedTuple):
  """What every client of a round shares (``own`` excepted: that one is per client)."""

  shared: Any = None  # the same for every client (e.g. the global model)
  own: Any = None  # this client's slice of a stacked per-client pytree, or None
  hyper: Any = None  # the run's traced hyperparameters (``hyper.learner`` drives the optimizer)
  t: Any = 1  # [] int32 the 1-based round index (the learning-rate schedule reads it)


@struct.dataclass
class ClientResult:
  params: Any  # the client's parameters after local training
  loss: jax.Array  # [] mean training loss over the steps taken
  steps: jax.Array  # [] optimizer steps taken (E * ceil(n / batch), or local_steps)


def make_client_update(task, *, batch_size: int, epochs: int, local_steps: Optional[int] = None,
                       regularizer: Optional[Regularizer] = None) -> Callable:
  """Builds ``client_update(key, params, data: ClientData, ctx: ClientContext) -> ClientResult``.

  Protocol (SPEC §3.1): ``epochs`` passes over the client's ``n`` valid train
  rows in a fresh random order each epoch, minibatches of ``batch_size`` (the
  last one partial), i.e. ``epochs * ceil(n / batch_size)`` optimizer steps. The
  client's rows are padded to ``x.shape[0]`` (its bucket's largest client): the
  scan runs the bucket's step count and this client's surplus steps are masked
  into exact no-ops (parameters and optimizer state unchanged).

  With ``local_steps`` set, every client instead takes exactly that many steps,
  each on a minibatch drawn without replacement from its own valid rows (iPFL's
  200 minibatch iterations per round, SPEC §5).

  The optimizer state starts fresh every round (decision: SPEC is silent; this
  is what a per-round ``torch.optim.Adam(model.parameters())`` does, and it keeps
  no per-client optimizer state between rounds; iPFL's code rebuilds its SGD
  every round too, issue 13).

  Args:
    task: the :class:`fedjax_sim.tasks.Task` (model, per-example loss, optimizer and schedule).
    batch_size: minibatch size (SPEC §3.1: 128; §4.5: 32).
    epochs: local epochs per round (SPEC §3.1: 2).
    local_steps: optional fixed number of steps instead of epochs.
    regularizer: optional algorithm term added to the mean loss (see :class:`LocalTerm`).
  """
  apply_fn, example_loss = task.model.apply, task.loss

  def objective(params, xb, yb, mb, rng, ctx: ClientContext):
    k_drop, _ = jax.random.split(rng)
    logits, _ = apply_fn(params, xb, True, k_drop)
    denom = jnp.maximum(jnp.sum(mb), 1.0)
    loss = jnp.sum(jnp.where(mb, example_loss(logits, yb), 0.0)) / denom
    if regularizer is not None:
      # The regularizer gets this batch's dropout key: a term that re-runs the model in training
      # mode (MOON's representation) sees the same dropout mask as the supervised loss, i.e. the
      # same forward pass, as in Li et al.'s code (issue 9: it used to get a key of its own).
      loss = loss + regularizer(LocalTerm(params=params, apply=apply_fn, x=xb, mask=mb, rng=k_drop,
                                          shared=ctx.shared, own=ctx.own, hyper=ctx.hyper))
    return loss

  grad_fn = jax.value_and_grad(objective)

  def _sgd_step(opt, ctx, carry, xb, yb, batch_mask, rng, active):
    params, opt_state, loss_sum = carry
    loss, grads = grad_fn(params, xb, yb, batch_mask, rng, ctx)
    updates, new_opt_state = opt.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    keep = lambda new, old: jnp.where(active, new, old)  # noqa: E731
    params = jax.tree_util.tree_map(keep, new_params, params)
    opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
    return params, opt_state, loss_sum + jnp.where(active, loss, 0.0)

  def client_update(key, params, data: ClientData, ctx: ClientContext, dynamic: bool = False) -> ClientResult:
    x, y, n = data
    n_pad = x.shape[0]
    opt = task.make_optimizer(ctx.hyper.learner, ctx.t)
    opt_state = opt.init(params)
    rows = jnp.arange(n_pad)

    def sgd_step(carry, batch_idx, batch_mask, rng, active):
      return _sgd_step(opt, ctx, carry, x[batch_idx], y[batch_idx], batch_mask, rng, active)

    if local_steps is None:
      steps_per_epoch = max(1, math.ceil(n_pad / batch_size))
      my_steps = (n + batch_size - 1) // batch_size

      def epoch(carry, ekey):
        k_perm, k_steps = jax.random.split(ekey)
        u = jnp.where(rows < n, jax.random.uniform(k_perm, (n_pad,)), 2.0)
        order = jnp.argsort(u)  # a random permutation of the valid rows, padding last
        order = jnp.pad(order, (0, steps_per_epoch * batch_size - n_pad))

        def step(carry, s):
          pos = s * batch_size + jnp.arange(batch_size)
          idx = jax.lax.dynamic_slice(order, (s * batch_size,), (batch_size,))
          return sgd_step(carry, idx, pos < n, jax.random.fold_in(k_steps, s), s < my_steps), None

        if dynamic:  # stop at this client's own step count (vmapped: at the longest of the batch)
          _, carry = jax.lax.while_loop(lambda c: c[0] < my_steps,
                                        lambda c: (c[0] + 1, step(c[1], c[0])[0]), (jnp.asarray(0), carry))
          return carry, None
        carry, _ = jax.lax.scan(step, carry, jnp.arange(steps_per_epoch))
        return carry, None

      (params, _, loss_sum), _ = jax.lax.scan(epoch, (params, opt_state, 0.0), jax.random.split(key, epochs))
      steps = epochs * my_steps
    else:
      take = min(batch_size, n_pad)

      def step(carry, skey):
        k_perm, k_step = jax.random.split(skey)
        u = jnp.where(rows < n, jax.random.uniform(k_perm, (n_pad,)), 2.0)
        idx = jnp.argsort(u)[:take]
        return sgd_step(carry, idx, jnp.arange(take) < n, k_step, n > 0), None

      (params, _, loss_sum), _ = jax.lax.scan(step, (params, opt_state, 0.0), jax.random.split(key, local_steps))
      steps = jnp.where(n > 0, local_steps, 0)
    return ClientResult(params=params, loss=loss_sum / jnp.maximum(steps, 1), steps=steps)

  # K-of-N training pads slots to worst-case bounds; with ``dynamic`` the steps of an epoch run in a while loop
  # that stops at the client's own count (under vmap: the longest client of the slot group), so a round costs
  # what its selected clients need, not the bound. The same steps, keys and masks as the scan: same results.
  client_update.dynamic_steps = functools.partial(client_update, dynamic=True)

  def store_update(k_steps, params, store: "TrainStore", start, n, ctx: ClientContext) -> ClientResult:
    """The epochs protocol of ``client_update`` on rows read from a flat store (issue 11: one training body
    for every size bucket). The client's rows are ``store.x[start : start + L]`` and epoch ``e``'s batch
    order is ``store.order[e, start : start + n]`` (row indices into the store, drawn by
    :func:`_flat_store` exactly as ``client_update`` draws them); steps run in a while loop to this
    client's own count, dropout keys ``fold_in(k_steps[e], s)`` as there (``k_steps [E]``: the epochs' step
    keys, a row of ``store.step_keys``). Same steps, rows, masks and keys: the same result as
    ``client_update`` on the client's bucket, up to float rounding of a differently shaped program."""
    opt = task.make_optimizer(ctx.hyper.learner, ctx.t)
    opt_state = opt.init(params)
    spe = (n + batch_size - 1) // batch_size
    last = jnp.maximum(n - 1, 0)

    def body(c):
      s, carry = c
      # Under vmap the loop runs to the group's longest client and every lane computes the body (finished lanes'
      # results are discarded), so s can pass this client's count: keep every index in range (an out-of-range
      # gather is undefined behaviour on XLA:CPU, a segfault here).
      e = jnp.minimum(s // jnp.maximum(spe, 1), epochs - 1)
      j = s - e * spe
      pos = j * batch_size + jnp.arange(batch_size)
      idx = store.order[e, jnp.clip(start + jnp.minimum(pos, last), 0, store.order.shape[1] - 1)]
      carry = _sgd_step(opt, ctx, carry, store.x[idx], store.y[idx], pos < n, jax.random.fold_in(k_steps[e], j),
                        True)
      return s + 1, carry

    _, (params, _, loss_sum) = jax.lax.while_loop(lambda c: c[0] < epochs * spe, body,
                                                  (jnp.asarray(0, spe.dtype), (params, opt_state, 0.0)))
    steps = epochs * spe
    return ClientResult(params=params, loss=loss_sum / jnp.maximum(steps, 1), steps=steps)

  if local_steps is None:
    client_update.store_update = store_update
    client_update.epochs = epochs
    client_update.batch_size = batch_size
  return client_update


class TrainStore(NamedTuple):
  """Every slot's train rows in one flat store, and each epoch's batch order into it (one round).

  Either the federation's flat train rows (:func:`_rows_store`) or, where none were prepared, a copy of the
  buckets' padded rows built inside the round (:func:`_flat_store`)."""

  x: jax.Array  # [P, ...] slot after slot (client after client), valid rows first
  y: jax.Array  # [P, ...]
  order: jax.Array  # [E, P] int32: at a client's positions, its epoch's permutation of its valid rows (store rows)
  step_keys: jax.Array  # [M, E] each slot's epoch keys of the minibatch steps (``split(split(key_i, E)[e])[1]``)


class Block(NamedTuple):
  """Padded train rows of some slots (a size bucket, or a slot group of :func:`train_selected`)."""

  slots: jax.Array  # [C_b] int32 the slots (clients, or selection slots) these rows belong to
  x: jax.Array  # [C_b, L_b, ...] valid rows first
  y: jax.Array  # [C_b, L_b, ...]
  n: jax.Array  # [C_b] int32 valid rows


def _flat_store(blocks, keys: jax.Array, epochs: int) -> tuple:
  """The round's :class:`TrainStore` of ``blocks`` and each slot's first position in it ``[M]`` (``keys [M]``).

  Epoch orders are those ``client_update`` draws on the slot's padded rows (:func:`_epoch_orders`). The store
  copies every block's rows: the price of one body where no flat train rows were prepared (:func:`_rows_store`
  reads the federation's own).
  """
  xs, ys, owner, segment, local, counts = [], [], [], [], [], []
  start = jnp.zeros((keys.shape[0],), jnp.int32)
  offset = seg_id = 0
  for b in blocks:
    cb, lb = b.x.shape[0], b.x.shape[1]
    start = start.at[b.slots].set(offset + jnp.arange(cb, dtype=jnp.int32) * lb)
    # Decision: jnp.repeat, not broadcast_to(...).reshape(-1). With the broadcast, XLA:CPU (jaxlib 0.10.2)
    # compiled the 5-client, 3-bucket simulation of tests/test_engine.py into a program that segfaulted in an
    # unrelated evaluation fusion (deterministic; no thread or scheduler flag changed it). Not understood; an
    # XLA bug, recorded in benchmarks/RESULTS.md (issue 11). The repeat costs a cumsum site of compile.
    owner.append(jnp.repeat(b.slots.astype(jnp.int32), lb, total_repeat_length=cb * lb))
    counts.append(jnp.repeat(b.n.astype(jnp.uint32), lb, total_repeat_length=cb * lb))
    # iotas, not numpy constants: a baked-in constant of every position is slow for XLA to fold (issue 11)
    segment.append((seg_id + jax.lax.broadcasted_iota(jnp.int32, (cb, lb), 0)).reshape(-1))
    local.append(jax.lax.broadcasted_iota(jnp.uint32, (cb, lb), 1).reshape(-1))
    xs.append(b.x.reshape((cb * lb,) + b.x.shape[2:]))
    ys.append(b.y.reshape((cb * lb,) + b.y.shape[2:]))
    offset += cb * lb
    seg_id += cb
  local = jnp.concatenate(local)
  order, k_steps = _epoch_orders(keys, epochs, jnp.concatenate(owner), local, jnp.concatenate(segment),
                                 local < jnp.concatenate(counts))
  return TrainStore(x=jnp.concatenate(xs), y=jnp.concatenate(ys), order=order, step_keys=k_steps), start


def _rows_store(rows, keys: jax.Array, epochs: int) -> tuple:
  """The round's :class:`TrainStore` over the federation's flat train rows (:class:`TrainRows`, built once on
  the host) and each client's first row ``[C]`` (``keys [C]``, client order).

  Issue 11: the store of :func:`_flat_store` copies every bucket's padded rows inside the round, and XLA:CPU
  compiles those concatenations (and the padded positions' hashes and sort) into every round's body although
  they do not depend on the round. Here the rows are an argument of the program and only the epoch orders are
  drawn per round, over the valid rows alone. A client's order is the same permutation of the same rows as
  :func:`_flat_store`'s (its padding rows sorted last there are never read), so training is the same: tested.
  """
  c = keys.shape[0]
  owner = rows.owner  # [R + 1]; C on the trailing zero row
  client = jnp.minimum(owner, c - 1)
  local = (jax.lax.iota(jnp.int32, owner.shape[0]) - rows.start[client]).astype(jnp.uint32)
  order, k_steps = _epoch_orders(keys, epochs, client, local, owner, owner < c)
  return TrainStore(x=rows.x, y=rows.y, order=order, step_keys=k_steps), rows.start


def _epoch_orders(keys: jax.Array, epochs: int, slot: jax.Array, local: jax.Array, segment: jax.Array,
                  valid: jax.Array) -> tuple:
  """``([E, P] int32, [M, E] keys)``: at each slot's positions, its epoch's permutation of its valid positions,
  invalid last; and each slot's epoch keys of the steps, from the same splits (drawn once, not again in the
  training body: every random-op site costs compile).

  ``slot [P]``: whose key draws position p; ``local [P]`` uint32: p's index within its slot's rows; ``segment
  [P]``: the sort's first key (contiguous runs of positions); ``valid [P]``. Epoch orders are those
  ``client_update`` draws: ``k_perm, _ = split(split(key_i, E)[e])``, then the ``argsort`` of ``uniform(k_perm,
  (L,))`` with the padding rows last. They are computed for every slot at once, one random-bits op and one sort
  over the store's positions, because every random-op site costs XLA:CPU about 0.3 s of compile and every block
  had three and a sort (issue 11: six buckets' permutations were 10 of a FedAvg program's 18 s of compile).
  With the partitionable threefry (the default), element ``j`` of ``uniform(k, (L,))`` is a function of ``k``
  and ``j`` alone (:func:`uniform_bits_at`), so one op can draw every slot's elements at its own positions;
  sorting by (segment, bits) with the position as a stable tie-break is that ``argsort``. Tested against it.
  """
  k_both = jax.vmap(lambda k: jax.vmap(jax.random.split)(jax.random.split(k, epochs)))(keys)  # [M, E, 2]
  k_perm = k_both[:, :, 0]
  kd = jax.random.key_data(k_perm)[slot]  # [P, E, 2] each position's slot's epoch keys
  bits = uniform_bits_at(jnp.moveaxis(kd, 1, 0), local[None, :])  # [E, P]
  sort_key = jnp.where(valid[None, :], bits, jnp.uint32(0xFFFFFFFF))  # padding rows last, as u = 2.0 puts them
  seg = jnp.broadcast_to(segment, sort_key.shape)
  pos = jax.lax.broadcasted_iota(jnp.int32, sort_key.shape, 1)
  _, _, order = jax.lax.sort((seg, sort_key, pos), dimension=1, is_stable=True, num_keys=2)
  return order, k_both[:, :, 1]


def uniform_bits_at(key_data: jax.Array, j: jax.Array) -> jax.Array:
  """The 23 mantissa bits behind element ``j`` of ``jax.random.uniform(key, (L,))`` (float32, partitionable
  threefry), for any ``L > j``: the uniform is ``bitcast(bits | 0x3F800000) − 1`` (a float in [1, 2) less one), so
  ordering by these bits is ordering by the uniforms, ties included. ``key_data``: ``[..., 2]`` uint32 (``jax.random.key_data``)."""
  from jax.extend.random import threefry2x32_p
  k1, k2 = key_data[..., 0], key_data[..., 1]
  shape = jnp.broadcast_shapes(k1.shape, j.shape)
  b1, b2 = threefry2x32_p.bind(jnp.broadcast_to(k1, shape), jnp.broadcast_to(k2, shape),
                               jnp.zeros(shape, jnp.uint32), jnp.broadcast_to(j.astype(jnp.uint32), shape))
  return jax.lax.shift_right_logical(b1 ^ b2, jnp.uint32(32 - 23))


def take_clients(tree, idx):
  """Rows ``idx`` of every leaf of a stacked pytree."""
  return jax.tree_util.tree_map(lambda a: a[idx], tree)


def local_train(client_update: Callable, key: jax.Array, params, federation: Federation, *,
                shared=None, own=None, hyper=None, t=1, params_stacked: bool = True) -> ClientResult:
  """Runs ``client_update`` on every client, vmapped within each size bucket.

  Args:
    client_update: from :func:`make_client_update`.
    key: one key; client ``i`` gets ``jax.random.split(key, C)[i]`` whatever its bucket.
    params: ``[C, ...]`` stacked per-client parameters, or one shared model when
      ``params_stacked`` is False (every client starts from it, as in FedAvg).
    federation: the stacked federation.
    shared: a pytree every client sees (not vmapped).
    own: a ``[C, ...]`` stacked per-client pytree (vmapped), or None.
    hyper: the run's traced hyperparameters (``hyper.learner`` drives the optimizer; the regularizer sees all).
    t: the 1-based round index (the learning-rate schedule's).

  Returns:
    A :class:`ClientResult` with a leading ``[C]`` axis on every field.
  """
  num_clients = sum(b.client_idx.shape[0] for b in federation.buckets)
  keys = jax.random.split(key, num_clients)
  positions = sum(b.x.shape[0] * b.x.shape[1] for b in federation.buckets)
  one_body = (len(federation.buckets) > 1 and hasattr(client_update, "store_update")
              and positions <= MAX_STORE_POSITIONS)
  train = _train_by_groups if one_body else _train_by_buckets
  return train(client_update, keys, params, federation, shared=shared, own=own, hyper=hyper, t=t,
               params_stacked=params_stacked)


def with_train_store(federation: Federation) -> Federation:
  """The federation with its flat train rows where a full round trains by one body (several buckets, at most
  :data:`MAX_STORE_POSITIONS` padded positions), so that :func:`local_train` reads them instead of copying the
  buckets into a store every round (issue 11: a loop-invariant copy compiled into the round). Applied once,
  outside the program, by :func:`fedjax_sim.execute.prepare_method`. Decision: the unpadded copy (no larger than
  the buckets' rows) stays on the device for the run; above the threshold the buckets train one body each and
  no copy is made."""
  from fedjax_sim.data.federation import with_train_rows
  positions = sum(b.x.shape[0] * b.x.shape[1] for b in federation.buckets)
  if len(federation.buckets) > 1 and positions <= MAX_STORE_POSITIONS:
    return with_train_rows(federation)
  return federation


MAX_STORE_POSITIONS = 2 ** 18
"""Largest flat store (padded train rows) trained by the one body. Finding (issue 11): XLA constant-folds the
store's position arithmetic at a cost that grows with its size; at 10,000 centers (1.27 M positions) the one-body
program compiled in 52 s against 12 s for the buckets' three bodies (13 s with XLA's constant folding switched
off), and its round was not cheaper. Above this size the buckets keep one body each."""


def _train_by_buckets(client_update: Callable, keys, params, federation: Federation, *, shared, own, hyper, t,
                      params_stacked: bool) -> ClientResult:
  """One vmapped ``client_update`` per size bucket (one bucket; or fixed local steps, whose per-step draws
  depend on the padded length): a body traced and compiled per bucket."""
  num_clients = keys.shape[0]
  vmapped = _vmapped(client_update, params_stacked, own is not None)
  out = None
  for bucket in federation.buckets:  # a few static size groups, not a loop over clients
    idx = bucket.client_idx
    res = vmapped(keys[idx], take_clients(params, idx) if params_stacked else params,
                  ClientData(bucket.x, bucket.y, bucket.n),
                  ClientContext(shared=shared, own=None if own is None else take_clients(own, idx), hyper=hyper, t=t))
    if out is None:
      out = jax.tree_util.tree_map(
          lambda r: jnp.zeros((num_clients,) + r.shape[1:], r.dtype), res)
    out = jax.tree_util.tree_map(lambda o, r: o.at[idx].set(r), out, res)
  return out


def _train_by_groups(client_update: Callable, keys, params, federation: Federation, *, shared, own, hyper, t,
                     params_stacked: bool) -> ClientResult:
  """Every client of a full round trained by ONE traced body (issue 11 item 1): :func:`_train_slots` over the
  size buckets, with as many groups as buckets."""
  if federation.rows is not None:  # prepared once outside the program (:func:`with_train_store`)
    store, start = _rows_store(federation.rows, keys, client_update.epochs)
  else:
    store, start = _flat_store([Block(b.client_idx, b.x, b.y, b.n) for b in federation.buckets], keys,
                               client_update.epochs)
  n = federation.n_train.astype(jnp.int32)
  order = jnp.argsort(n, stable=True).astype(jnp.int32)  # groups of similar sizes
  groups = group_count([(b.x.shape[0], b.x.shape[1]) for b in federation.buckets], client_update.batch_size)
  return _train_slots(client_update, params, n, store, start, order, groups, shared=shared, own=own,
                      hyper=hyper, t=t, params_stacked=params_stacked)


def group_count(buckets, batch_size: int, slack: float = 1.15, most: int = 256) -> int:
  """How many equal groups :func:`_train_slots` cuts the size-sorted clients into (static, from bucket shapes).

  Equal groups waste steps where the buckets are uneven (a group runs to its longest client; at 10,000
  centers 9,835 of them share the smallest bucket): the fewest groups, from the bucket count up, whose
  steps (bounded by each client's bucket length) are within ``slack`` of the buckets' own, at most ``most``.
  More groups cost no compile (one body), only narrower vmaps. ``buckets``: ``(clients, padded rows)`` pairs.
  """
  bk = sorted((length, count) for count, length in buckets)
  bounds = [length for length, count in bk for _ in range(count)]
  c = len(bounds)
  steps = lambda rows: max(1, -(-rows // batch_size))  # noqa: E731
  own = sum(count * steps(length) for length, count in bk)
  g = len(bk)
  while g < min(most, c):
    s = -(-c // g)
    if sum(s * steps(bounds[min(end, c) - 1]) for end in range(s, c + s, s)) <= slack * own:
      break
    g += 1
  return min(g, c)


def _train_slots(client_update: Callable, params, n, store: TrainStore, start, order, groups: int, *, shared,
                 own, hyper, t, params_stacked: bool) -> ClientResult:
  """``M`` slots (clients, or a round's selected clients) trained by ONE traced body.

  The slots, taken in ``order`` (by size), are cut into ``groups`` groups of S = ⌈M / groups⌉; a ``lax.map``
  runs the body, vmapped over a group's slots, once per group, on rows read from a flat ``store`` (slot ``i``'s
  from position ``start[i]``: :func:`_flat_store` or :func:`_rows_store`). A group's while loop runs to its
  longest slot's step count (vmap masks the others' surplus iterations), so a round still costs about what one
  vmap per block costs, while the program holds one training body instead of one per block: compile time no
  longer grows with the number of blocks.
  Dummy slots (when groups · S > M) have no rows, take no step, and are dropped. They go into the first group,
  beside the smallest slots: placed last, they widened the group of the largest slots, whose loop runs longest,
  to S lanes of which one or two were real (a K = 10 Fashion-MNIST round in 4 groups: 3 lanes for the largest
  client; docs/PLATFORM.md finding 8). Each lane computes what it would in any group (a finished lane's surplus
  iterations are exact no-ops), so where the dummies go changes no result. Results are ``[M]``.
  """
  m = start.shape[0]
  g = min(groups, m)
  s = -(-m // g)
  ids = jnp.concatenate([jnp.full((g * s - m,), m, jnp.int32), order.astype(jnp.int32)]).reshape(g, s)
  ctx_axes = ClientContext(shared=None, own=0 if own is not None else None, hyper=None, t=None)
  body = jax.vmap(client_update.store_update,
                  in_axes=(0, 0 if params_stacked else None, None, 0, 0, ctx_axes))

  def group(slot_ids):
    real = slot_ids < m
    i = jnp.minimum(slot_ids, m - 1)
    ctx = ClientContext(shared=shared, own=None if own is None else take_clients(own, i), hyper=hyper, t=t)
    return body(store.step_keys[i], take_clients(params, i) if params_stacked else params, store, start[i],
                jnp.where(real, n[i], 0), ctx)

  res = jax.lax.map(group, ids)  # [G, S, ...]
  flat_ids = ids.reshape(-1)
  return jax.tree_util.tree_map(
      lambda r: jnp.zeros((m,) + r.shape[2:], r.dtype).at[flat_ids].set(r.reshape((g * s,) + r.shape[2:]),
                                                                        mode="drop"), res)


def _vmapped(client_update: Callable, params_stacked: bool, has_own: bool) -> Callable:
  """``client_update`` lifted over a leading client axis of keys, data and (where stacked) params and ``own``."""
  ctx_axes = ClientContext(shared=None, own=0 if has_own else None, hyper=None, t=None)
  return jax.vmap(client_update, in_axes=(0, 0 if params_stacked else None, ClientData(0, 0, 0), ctx_axes))


# --- partial participation (issue 10 item 3) --------------------------------------------------------


def selection_plan(n_train, clients_per_round: int, batch_size: int, num_buckets: int) -> tuple:
  """Static slot groups for training any ``K = clients_per_round`` of the clients (host, at build time).

  The selected clients are sorted by size; the j-th smallest of any K clients has at
  most as many rows as the (C − K + j)-th smallest of all C, so slot j is padded to
  that bound. The slot bounds are cut into at most ``num_buckets`` groups the way
  training buckets are (:func:`fedjax_sim.data.federation.plan_buckets`), so a round
  costs Σ_g slots_g·⌈rows_g / batch⌉ steps whichever K are selected: it grows with K, not
  with C. That is the K largest clients' work when every distinct step count among them
  has its own group, and the best contiguous grouping of their bounds otherwise. Decision:
  shapes are static, so the bound is the worst case over selections; with very uneven
  sizes (Dirichlet label skew) a typical selection has far fewer rows. The steps themselves
  stop at each client's own count (``client_update.dynamic_steps``: a while loop, under
  vmap the longest client of its slot group), so padding costs the per-epoch shuffle and
  memory, not optimizer steps.

  Returns:
    ``((slots, rows), ...)``: each group's slot count and padded length, in slot order.
  """
  import numpy as np

  from fedjax_sim.data.federation import plan_buckets
  sizes = np.sort(np.asarray(n_train))
  k = int(clients_per_round)
  if not 1 <= k <= len(sizes):
    raise ValueError(f"clients_per_round must be in [1, {len(sizes)}], got {k}")
  bounds = sizes[len(sizes) - k:]  # ascending
  groups = plan_buckets(bounds, batch_size, num_buckets)  # contiguous ranges of the sorted bounds
  return tuple((len(g), max(1, int(bounds[g].max()))) for g in sorted(groups, key=lambda g: int(g.min())))


def gather_rows(rows, clients: jax.Array, length: int) -> ClientData:
  """``[S, length, ...]`` train rows of ``clients [S]`` from the flat store (:class:`TrainRows`), valid rows first;
  a client's rows beyond its ``n`` read the store's trailing zero row."""
  n = rows.n[clients]
  pos = jnp.arange(length)[None, :]
  index = jnp.where(pos < n[:, None], rows.start[clients][:, None] + pos, rows.x.shape[0] - 1)
  return ClientData(rows.x[index], rows.y[index], n)


def slot_lanes(lanes: int) -> int:
  """The selected clients one vmapped training loop of :func:`train_selected` runs side by side (static).

  ``lanes`` is ``participation.lanes``: a positive count is taken as given; 0 (auto) is 1 on the CPU backend and 0
  elsewhere, 0 meaning the slot plan's groups (:func:`selection_plan`). Decision (docs/PLATFORM.md finding 8,
  measured): on XLA:CPU a vmapped lane runs no faster than the client alone (LeNet: 4.0 ms per client-step under
  vmap, 3.5 ms alone), while a group's loop runs to its longest slot, so side-by-side lanes only add the shorter
  slots' surplus iterations; one lane per slot (a ``lax.map`` over slots, each loop at its own count) made a
  K = 10 ``fedavg_fmnist`` round 1.9× faster (3.66 → 1.89 s; 3 seeds 15.0 → 6.8 s) and a K = 23 clinical round
  1.3× (0.062 → 0.047 s). On an accelerator the lanes run in parallel, so the plan's wider groups stay (not
  measured here: no device was lent).
  """
  if lanes:
    return int(lanes)
  return 1 if jax.default_backend() == "cpu" else 0


def train_selected(client_update: Callable, key: jax.Array, params, federation: Federation, selected: jax.Array,
                   plan: tuple, *, shared=None, own=None, hyper=None, t=1, params_stacked: bool = True,
                   lanes: int = 0) -> ClientResult:
  """Trains only the clients ``selected [K]`` (distinct indices, traced): gather, train, return ``[K]`` results.

  The cost grows with K (the static ``plan`` of :func:`selection_plan`), not with C. Client ``i`` gets the key
  ``split(key, C)[i]``, as in :func:`local_train`, and padding never changes a client's result (surplus steps are
  no-ops; with partitionable threefry the row order does not depend on the padded length), so a selected client
  ends exactly as it would training alone or in a full round. The federation needs its flat train rows
  (:func:`fedjax_sim.data.federation.with_train_rows`).

  Args:
    client_update: from :func:`make_client_update`.
    key: one key for the round's local training.
    params: ``[C, ...]`` per-client parameters (``params_stacked``) or one model every selected client starts from.
    federation: the federation (with ``rows``).
    selected: ``[K]`` int32 client indices.
    plan: :func:`selection_plan` for this K.
    shared, own, hyper, t: as in :func:`local_train` (``own`` is ``[C, ...]``: the selected rows are taken).
    lanes: slots per vmapped training loop (:func:`slot_lanes`; 0: the plan's groups). Where the client update
      trains epochs from a store, the K slots run in ⌈K / lanes⌉ loops of ``lanes`` slots each; results are the
      same for every ``lanes`` up to float rounding (XLA:CPU's kernels differ with the vmap width).

  Returns:
    A :class:`ClientResult` with a leading ``[K]`` axis, in the order of ``selected``. Scatter it back with
    ``x.at[selected].set(result)``.
  """
  rows = federation.rows
  if rows is None:
    raise ValueError("train_selected needs the federation's flat train rows: prepare it with with_train_rows")
  num_clients = federation.n_train.shape[0]
  keys = jax.random.split(key, num_clients)
  k = selected.shape[0]
  order = jnp.argsort(federation.n_train[selected], stable=True)  # slot j: the j-th smallest selected client
  by_size = selected[order]
  if sum(slots for slots, _ in plan) != k:
    raise ValueError(f"the plan has {sum(slots for slots, _ in plan)} slots but {k} clients are selected")
  if (len(plan) > 1 or lanes) and hasattr(client_update, "store_update"):  # one body for every slot group (issue 11)
    blocks, offset = [], 0
    for slots, length in plan:
      data = gather_rows(rows, by_size[offset:offset + slots], length)
      blocks.append(Block(jnp.arange(offset, offset + slots, dtype=jnp.int32), data.x, data.y, data.n))
      offset += slots
    store, start = _flat_store(blocks, keys[by_size], client_update.epochs)
    sorted_res = _train_slots(client_update, take_clients(params, by_size) if params_stacked else
                              params, federation.n_train[by_size].astype(jnp.int32), store, start,
                              jnp.arange(k, dtype=jnp.int32), -(-k // lanes) if lanes else len(plan), shared=shared,
                              own=None if own is None else take_clients(own, by_size), hyper=hyper, t=t,
                              params_stacked=params_stacked)
  else:
    vmapped = _vmapped(getattr(client_update, "dynamic_steps", client_update), params_stacked, own is not None)
    parts, offset = [], 0
    for slots, length in plan:  # a few static slot groups
      ids = by_size[offset:offset + slots]
      offset += slots
      parts.append(vmapped(keys[ids], take_clients(params, ids) if params_stacked else params,
                           gather_rows(rows, ids, length),
                           ClientContext(shared=shared, own=None if own is None else take_clients(own, ids),
                                         hyper=hyper, t=t)))
    sorted_res = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *parts)
  inverse = jnp.argsort(order)
  return jax.tree_util.tree_map(lambda a: a[inverse], sorted_res)
