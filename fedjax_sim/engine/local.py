"""Local training of one client, written once and lifted over clients with ``vmap`` (SPEC §1).

:func:`make_client_update` returns the per-client function; :func:`local_train`
runs it over every size bucket of a federation (a ``vmap`` per bucket, a
handful of buckets in all) and scatters the results back onto the client axis.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fedjax_sim.data.federation import Federation

# A regularizer adds an algorithm's term to the local loss:
#   reg(params, apply_fn, x, mask, rng, shared, own, hyper) -> scalar
# ``rng`` is the dropout key of this batch's training forward pass (the same
# mask the supervised loss saw).
# ``shared`` is the same for every client (e.g. the global model), ``own`` is
# this client's slice of a stacked per-client pytree (e.g. FedDyn's gradient
# correction, MOON's previous local model).
Regularizer = Callable[..., jax.Array]


@struct.dataclass
class LearnerHyper:
  """Traced learner hyperparameters (sweepable without recompiling)."""

  learning_rate: jax.Array  # Adam step size (SPEC §3.1: 1e-3)
  weight_decay: jax.Array  # L2 coefficient added to the gradient, as torch.optim.Adam(weight_decay=...) (1e-5)


@struct.dataclass
class ClientResult:
  params: Any  # the client's parameters after local training
  loss: jax.Array  # [] mean training loss over the steps taken
  steps: jax.Array  # [] optimizer steps taken (E * ceil(n / batch), or local_steps)


def bce_with_logits(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Elementwise binary cross-entropy of sigmoid(logits), numerically stable."""
  return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def make_optimizer(hyper: LearnerHyper) -> optax.GradientTransformation:
  """Adam with coupled weight decay, as ``torch.optim.Adam(lr, weight_decay)`` (paper 000 §6.3)."""
  return optax.chain(optax.add_decayed_weights(hyper.weight_decay), optax.adam(hyper.learning_rate))


def make_client_update(apply_fn: Callable, *, batch_size: int, epochs: int,
                       local_steps: Optional[int] = None,
                       regularizer: Optional[Regularizer] = None) -> Callable:
  """Builds ``client_update(key, params, x, y, n, shared, own, hyper, learner) -> ClientResult``.

  Protocol (SPEC §3.1): ``epochs`` passes over the client's ``n`` valid train
  rows in a fresh random order each epoch, minibatches of ``batch_size`` (the
  last one partial), i.e. ``epochs * ceil(n / batch_size)`` Adam steps. The
  client's rows are padded to ``x.shape[0]`` (its bucket's largest client): the
  scan runs the bucket's step count and this client's surplus steps are masked
  into exact no-ops (parameters and optimizer state unchanged).

  With ``local_steps`` set, every client instead takes exactly that many steps,
  each on a minibatch drawn without replacement from its own valid rows.

  The optimizer state starts fresh every round (decision: SPEC is silent; this
  is what a per-round ``torch.optim.Adam(model.parameters())`` does, and it keeps
  no per-client optimizer state between rounds).

  Args:
    apply_fn: ``apply_fn(params, x, train, rng) -> (logits, representation)``.
    batch_size: minibatch size (SPEC §3.1: 128).
    epochs: local epochs per round (SPEC §3.1: 2).
    local_steps: optional fixed number of steps instead of epochs.
    regularizer: optional algorithm term added to the mean BCE (see ``Regularizer``).
  """

  def objective(params, xb, yb, mb, rng, shared, own, hyper):
    k_drop, _ = jax.random.split(rng)
    logits, _ = apply_fn(params, xb, True, k_drop)
    denom = jnp.maximum(jnp.sum(mb), 1.0)
    loss = jnp.sum(jnp.where(mb, bce_with_logits(logits, yb), 0.0)) / denom
    if regularizer is not None:
      # The regularizer gets this batch's dropout key: a term that re-runs the model in training
      # mode (MOON's representation) sees the same dropout mask as the supervised loss, i.e. the
      # same forward pass, as in Li et al.'s code (issue 9: it used to get a key of its own).
      loss = loss + regularizer(params, apply_fn, xb, mb, k_drop, shared, own, hyper)
    return loss

  grad_fn = jax.value_and_grad(objective)

  def client_update(key, params, x, y, n, shared, own, hyper, learner: LearnerHyper) -> ClientResult:
    n_pad = x.shape[0]
    opt = make_optimizer(learner)
    opt_state = opt.init(params)
    rows = jnp.arange(n_pad)

    def sgd_step(carry, batch_idx, batch_mask, rng, active):
      params, opt_state, loss_sum = carry
      loss, grads = grad_fn(params, x[batch_idx], y[batch_idx], batch_mask, rng, shared, own, hyper)
      updates, new_opt_state = opt.update(grads, opt_state, params)
      new_params = optax.apply_updates(params, updates)
      keep = lambda new, old: jnp.where(active, new, old)
      params = jax.tree_util.tree_map(keep, new_params, params)
      opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
      return params, opt_state, loss_sum + jnp.where(active, loss, 0.0)

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
        return sgd_step(carry, idx, jnp.arange(take) < n, k_step, jnp.asarray(True)), None

      (params, _, loss_sum), _ = jax.lax.scan(step, (params, opt_state, 0.0), jax.random.split(key, local_steps))
      steps = jnp.asarray(local_steps)
    return ClientResult(params=params, loss=loss_sum / jnp.maximum(steps, 1), steps=steps)

  return client_update


def take_clients(tree, idx):
  """Rows ``idx`` of every leaf of a stacked pytree."""
  return jax.tree_util.tree_map(lambda a: a[idx], tree)


def local_train(client_update: Callable, key: jax.Array, params, federation: Federation, *,
                shared=None, own=None, hyper=None, learner: LearnerHyper,
                params_stacked: bool = True) -> ClientResult:
  """Runs ``client_update`` on every client, vmapped within each size bucket.

  Args:
    client_update: from :func:`make_client_update`.
    key: one key; client ``i`` gets ``jax.random.split(key, C)[i]`` whatever its bucket.
    params: ``[C, ...]`` stacked per-client parameters, or one shared model when
      ``params_stacked`` is False (every client starts from it, as in FedAvg).
    federation: the stacked federation.
    shared: a pytree every client sees (not vmapped).
    own: a ``[C, ...]`` stacked per-client pytree (vmapped), or None.
    hyper: the algorithm's traced hyperparameters (passed to the regularizer).
    learner: traced learner hyperparameters.

  Returns:
    A :class:`ClientResult` with a leading ``[C]`` axis on every field.
  """
  num_clients = sum(b.client_idx.shape[0] for b in federation.buckets)
  keys = jax.random.split(key, num_clients)
  p_axis = 0 if params_stacked else None
  o_axis = None if own is None else 0
  vmapped = jax.vmap(client_update, in_axes=(0, p_axis, 0, 0, 0, None, o_axis, None, None))
  out = None
  for bucket in federation.buckets:  # a few static size groups, not a loop over clients
    idx = bucket.client_idx
    res = vmapped(keys[idx], take_clients(params, idx) if params_stacked else params,
                  bucket.x, bucket.y, bucket.n, shared, None if own is None else take_clients(own, idx),
                  hyper, learner)
    if out is None:
      out = jax.tree_util.tree_map(
          lambda r: jnp.zeros((num_clients,) + r.shape[1:], r.dtype), res)
    out = jax.tree_util.tree_map(lambda o, r: o.at[idx].set(r), out, res)
  return out
