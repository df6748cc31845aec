"""Models: stateless ``init``/``apply`` wrappers around flax modules."""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from fedjax_sim.models.mlp import MLP, LAYER_NAMES, num_params


def param_template(model) -> "object":
  """The shapes and dtypes of ``model``'s parameters (``jax.eval_shape`` of its init: nothing is computed)."""
  import jax
  return jax.eval_shape(model.init, jax.random.key(0))


def model_size(model) -> int:
  """Number of scalars in ``model``'s parameters (what one fp32 copy sends, in 4-byte units)."""
  return num_params(param_template(model))


class Model(NamedTuple):
  """A model as two pure functions.

  Attributes:
    init: ``key -> params``.
    apply: ``(params, x, train, rng) -> (logits, representation)``; ``rng`` may be
      None when ``train`` is False.
  """

  init: Callable
  apply: Callable


def mlp_model(num_features: int, hidden=(128, 64), dropout: float = 0.2, outputs: int = 1,
              input_shape=None) -> Model:
  """The SPEC §3.1 MLP as a :class:`Model` (``outputs`` > 1: class logits; ``input_shape``: rows that are not
  flat, e.g. images, flattened inside)."""
  module = MLP(hidden=tuple(hidden), dropout=dropout, outputs=outputs)
  shape = tuple(input_shape) if input_shape is not None else (num_features,)

  def init(key):
    return module.init({"params": key}, jnp.zeros((1,) + shape, jnp.float32), train=False)["params"]

  def apply(params, x, train, rng):
    rngs = {"dropout": rng} if train else {}
    if len(shape) > 1:  # rows that are not flat (images): flattened, leading axes kept
      x = x.reshape(x.shape[:x.ndim - len(shape)] + (-1,))
    return module.apply({"params": params}, x, train=train, rngs=rngs)

  return Model(init=init, apply=apply)


def build_model(learner, federation) -> Model:
  """The model named by ``learner.model`` for ``federation``'s features and classes (issue 10 item 6).

  ``mlp`` on a binary task is SPEC §3.1's network, unchanged; on a multi-class task it ends in K logits.
  """
  from fedjax_sim import errors
  kind = learner.model
  shape = federation.feature_shape
  k = federation.num_classes
  if kind == "mlp":
    outputs = 1 if federation.task == "binary" else k
    return mlp_model(federation.num_features, hidden=learner.hidden, dropout=learner.dropout, outputs=outputs,
                     input_shape=shape)
  if federation.task == "binary":
    raise errors.ConfigError(f"learner.model = {kind} is an image/text model; the binary clinical task uses mlp")
  from fedjax_sim.models import zoo
  if kind == "char_lstm":
    if federation.task != "next_char":
      raise errors.ConfigError("learner.model = char_lstm needs next-character data (data.source = shakespeare "
                               "or leaf_shakespeare)")
    return zoo.char_lstm_model(vocab_size=k, embed=learner.embed, hidden=learner.lstm_hidden)
  if federation.task == "next_char":
    raise errors.ConfigError(f"learner.model = {kind} is an image model; next-character data needs char_lstm")
  factory = {"lenet": zoo.lenet_model, "femnist_cnn": zoo.femnist_cnn_model, "resnet8": zoo.resnet8_model,
             "resnet20": zoo.resnet20_model}[kind]
  return factory(shape, k)


__all__ = ["MLP", "LAYER_NAMES", "Model", "build_model", "mlp_model", "num_params"]
