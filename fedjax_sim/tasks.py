"""Tasks: the model, the loss, the optimizer and its schedule, and the evaluation, as one value (issue 10 item 2).

A :class:`Task` is passed to the engine (STYLE.md §10), not branched on inside it:

* ``binary`` — paper 000's clinical task: BCE on one logit, Adam with coupled
  weight decay, per-client AUROC (SPEC §3.1). Unchanged arithmetic.
* ``multiclass`` — cross-entropy over ``num_classes`` logits, per-client accuracy
  (FBS-FL, SPEC §4.4; iPFL, SPEC §5).
* ``next_char`` — cross-entropy at every position of a character window (the loss
  of a window is the mean over its positions), accuracy over positions (LEAF
  Shakespeare; SPEC §4.5).

The optimizer is Adam or SGD with momentum, both with coupled weight decay (added
to the gradient, as ``torch.optim``'s ``weight_decay``), and a learning rate that
is constant or follows a cosine over rounds; the round index reaches local
training (:class:`fedjax_sim.engine.local.ClientContext`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_sim.metrics import auroc_by_rows, batched_auroc
from fedjax_sim.models import Model


def bce_with_logits(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Elementwise binary cross-entropy of sigmoid(logits), numerically stable."""
  return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example softmax cross-entropy ``[B]`` of ``logits [B, K]`` against int ``labels [B]``; for sequences
  (``logits [B, L, K]``, ``labels [B, L]``) the mean over the L positions of each example."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels.astype(jnp.int32))
  return ce.reshape(ce.shape[0], -1).mean(axis=1) if ce.ndim > 1 else ce


def accuracy_per_client(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
  """Per-client accuracy ``[C]``: hits over masked rows (over every position of a masked sequence row).

  Args:
    logits: ``[C, n, K]`` or ``[C, n, L, K]``.
    labels: ``[C, n]`` or ``[C, n, L]`` int labels.
    mask: ``[C, n]`` bool, True on the client's real rows.

  Returns:
    ``[C]``; NaN for a client without rows (undefined, like AUROC on one class).
  """
  hit = jnp.argmax(logits, axis=-1) == labels.astype(jnp.int32)
  m = jnp.broadcast_to(mask.reshape(mask.shape + (1,) * (labels.ndim - mask.ndim)), labels.shape)
  hits = jnp.sum((hit & m).reshape(hit.shape[0], -1), axis=1)
  rows = jnp.sum(m.reshape(m.shape[0], -1), axis=1)
  return jnp.where(rows > 0, hits / jnp.maximum(rows, 1), jnp.nan)


def accuracy_by_rows(logits: jax.Array, labels: jax.Array, client: jax.Array, num_clients: int) -> jax.Array:
  """Per-client accuracy ``[C]`` from flat rows: ``logits [R, (L,) K]``, ``labels [R, (L)]``, ``client [R]`` (C on
  padding rows). Equal to :func:`accuracy_per_client` on the padded splits (tested); NaN for a client without rows."""
  hit = (jnp.argmax(logits, axis=-1) == labels.astype(jnp.int32)).astype(jnp.float32)
  positions = hit.reshape(hit.shape[0], -1).shape[1]
  hits = jax.ops.segment_sum(hit.reshape(hit.shape[0], -1).sum(1), client, num_segments=num_clients + 1)[:-1]
  rows = jax.ops.segment_sum(jnp.ones_like(client, jnp.float32), client, num_segments=num_clients + 1)[:-1]
  return jnp.where(rows > 0, hits / jnp.maximum(rows * positions, 1.0), jnp.nan)


def reweighted_accuracy(logits: jax.Array, labels: jax.Array, class_weights: jax.Array) -> jax.Array:
  """iPFL's accuracy on a shared test set reweighted per class by each client's training label distribution.

  acc_i = Σ_k w_ik · acc_k(θ_i), with acc_k the accuracy on the test rows of class k and w_ik the fraction of
  client i's train rows in class k (SPEC §5 "Evaluation"; issue 13: the authors' code). Classes absent from the
  test set contribute nothing (their weight is dropped and the rest renormalized).

  This equals weighting each test sample of class k by w_ik / q_k (q_k the test set's count of class k), LEAF's
  "reweighted by train/test class frequencies" for held-out users (``data.test_users``). Token windows: every
  position is a sample (labels ``[T, L]``, scores ``[C, T, L, K]``).

  Args:
    logits: ``[C, T, K]`` (or ``[C, T, L, K]``) every client's scores on the shared test set.
    labels: ``[T]`` (or ``[T, L]``) int test labels.
    class_weights: ``[C, K]`` each client's train label distribution (rows sum to 1).

  Returns:
    ``[C]`` reweighted accuracies.
  """
  return reweighted_accuracy_of_predictions(jnp.argmax(logits, axis=-1), labels, class_weights)


def reweighted_accuracy_of_predictions(pred: jax.Array, labels: jax.Array, class_weights: jax.Array) -> jax.Array:
  """:func:`reweighted_accuracy` from ``[C, T]`` (or ``[C, T, L]``) predicted classes (e.g.
  :func:`shared_predictions`). Per-class hits are segment sums (no ``[T, K]`` one-hot: a Shakespeare test set has
  ~10⁶ positions)."""
  k = class_weights.shape[1]
  labels = labels.reshape(-1)
  hit = (pred.reshape(pred.shape[0], -1) == labels[None, :]).astype(jnp.float32)  # [C, T·L]
  count = jax.ops.segment_sum(jnp.ones_like(labels, jnp.float32), labels, num_segments=k)  # [K]
  hits = jax.vmap(lambda h: jax.ops.segment_sum(h, labels, num_segments=k))(hit)  # [C, K]
  per_class = hits / jnp.maximum(count, 1.0)  # [C, K]
  present = (count > 0).astype(jnp.float32)
  w = class_weights * present
  return jnp.sum(per_class * w, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1e-12)


SHARED_TEST_CHUNK = 500
"""Rows of the shared test set scored per step of :func:`shared_predictions`. Finding (issue 13): scoring 10
LeNets on Fashion-MNIST's 10,000 test images in one batch took 14.5 s on 2 CPU cores and ~2 GB of activations;
in chunks of 250–1,000 rows, 7–8 s."""


def shared_predictions(apply, params, x: jax.Array, chunk: int = SHARED_TEST_CHUNK) -> jax.Array:
  """``[C, T]`` the predicted class of every client's model (``params`` stacked ``[C, ...]``) on every row of a
  shared test set ``x [T, ...]``, ``chunk`` rows at a time (``lax.map``; the last chunk zero-padded and dropped)."""
  t = x.shape[0]
  size = max(1, min(chunk, t))
  pad = (-t) % size
  xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
  chunks = xp.reshape((-1, size) + x.shape[1:])
  pred = jax.lax.map(lambda xc: jax.vmap(lambda p: jnp.argmax(apply(p, xc, False, None)[0], axis=-1))(params),
                     chunks)  # [chunks, C, size]
  c = pred.shape[1]
  return jnp.moveaxis(pred, 1, 0).reshape((c, -1) + pred.shape[3:])[:, :t]


def learning_rate_at(schedule: str, base, final, t, rounds: int):
  """The learning rate of round ``t`` (1-based).

  ``constant``: ``base`` in every round. ``cosine``: final + (base − final)(1 + cos(π (t − 1)/(R − 1)))/2,
  so round 1 uses ``base`` and round R ``final`` (SPEC §4.5: "cosine lr 0.05 → 0.005 over T"). Decision: the
  rate changes per round, not per local step (the papers anneal over rounds; every step of a round uses it).
  """
  if schedule == "constant":
    return base
  frac = (jnp.asarray(t, jnp.float32) - 1.0) / max(rounds - 1, 1)
  return final + (base - final) * 0.5 * (1.0 + jnp.cos(math.pi * jnp.clip(frac, 0.0, 1.0)))


def make_optimizer(name: str, learner, lr) -> optax.GradientTransformation:
  """``adam``: ``torch.optim.Adam(lr, weight_decay)`` (paper 000 §6.3); ``sgd``: ``torch.optim.SGD(lr, momentum,
  weight_decay)`` (SPEC §4.5, §5). Both add the decay to the gradient (coupled), as torch does."""
  if name == "adam":
    return optax.chain(optax.add_decayed_weights(learner.weight_decay), optax.adam(lr))
  return optax.chain(optax.add_decayed_weights(learner.weight_decay), optax.sgd(lr, momentum=learner.momentum))


@dataclasses.dataclass(frozen=True)
class Task:
  """What is learned and how it is scored.

  Attributes:
    name: ``binary``, ``multiclass`` or ``next_char``.
    model: the model every client trains (a method may train another: BNN+FL).
    loss: ``(logits, labels) -> [B]`` per-example loss.
    score: ``(logits [C, n, ...], labels, mask [C, n]) -> [C]`` per-client metric (higher is better).
    metric: the metric's name in summaries (``auroc`` or ``accuracy``).
    optimizer: ``adam`` or ``sgd``.
    schedule: ``constant`` or ``cosine`` (over ``rounds``).
    rounds: R, the schedule's length.
  """

  name: str
  model: Model
  loss: Callable
  score: Callable
  metric: str
  optimizer: str = "adam"
  schedule: str = "constant"
  rounds: int = 1
  score_rows: Optional[Callable] = None  # ``(logits [R, ...], labels, client [R], C) -> [C]``: the same metric from
  # flat rows (a shared model's evaluation costs the rows, not C × the longest split); None: padded only

  def with_model(self, model: Model) -> "Task":
    return dataclasses.replace(self, model=model)

  def make_optimizer(self, learner, t) -> optax.GradientTransformation:
    """The optimizer of round ``t`` (a fresh state every round: see ``make_client_update``)."""
    lr = learning_rate_at(self.schedule, learner.learning_rate, learner.final_learning_rate, t, self.rounds)
    return make_optimizer(self.optimizer, learner, lr)


def binary_task(model: Model, *, optimizer: str = "adam", schedule: str = "constant", rounds: int = 1) -> Task:
  """Paper 000's task: one logit, BCE, per-client AUROC (SPEC §3.1)."""
  return Task("binary", model, bce_with_logits, batched_auroc, "auroc", optimizer, schedule, rounds, auroc_by_rows)


def multiclass_task(model: Model, *, optimizer: str = "sgd", schedule: str = "cosine", rounds: int = 1) -> Task:
  """Cross-entropy over classes, per-client accuracy (SPEC §4.4)."""
  return Task("multiclass", model, cross_entropy, accuracy_per_client, "accuracy", optimizer, schedule, rounds,
              accuracy_by_rows)


def next_char_task(model: Model, *, optimizer: str = "sgd", schedule: str = "cosine", rounds: int = 1) -> Task:
  """Next-character prediction at every position of a window: cross-entropy and accuracy over positions."""
  return Task("next_char", model, cross_entropy, accuracy_per_client, "accuracy", optimizer, schedule, rounds,
              accuracy_by_rows)


def task_for(config, federation) -> Task:
  """The task of an experiment: its kind from the federation's labels, its model and optimizer from ``learner``."""
  from fedjax_sim.models import build_model
  kind = getattr(federation, "task", "binary")
  lc = config.learner
  model = build_model(lc, federation)
  make = {"binary": binary_task, "multiclass": multiclass_task, "next_char": next_char_task}[kind]
  return make(model, optimizer=lc.optimizer, schedule=lc.schedule, rounds=config.rounds)
