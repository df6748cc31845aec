"""The local learner of paper 000 §6.3 / SPEC §3.1: MLP input → 128 → 64 → 1, ReLU, dropout 0.2."""
from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

# Layer names, from the input: the last ``k`` of them form a k-layer "head"
# for head personalization (SPEC §3.2 step 6; issue-level extension).
LAYER_NAMES = ("hidden_0", "hidden_1", "head")


class MLP(nn.Module):
  """Binary classifier returning ``(logit, representation)``.

  Attributes:
    hidden: widths of the hidden layers (SPEC §3.1: (128, 64)).
    dropout: dropout rate after each hidden ReLU (SPEC §3.1: 0.2).
  """

  hidden: Sequence[int] = (128, 64)
  dropout: float = 0.2

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[..., d]``; train: apply dropout (needs the ``'dropout'`` rng).

    Returns:
      ``(logit [...], representation [..., hidden[-1]])``; the representation is
      the last hidden layer's ReLU output before dropout (MOON's ``z``).
    """
    h = x
    for i, width in enumerate(self.hidden):
      h = nn.relu(nn.Dense(width, name=f"hidden_{i}")(h))
      rep = h
      h = nn.Dropout(self.dropout, deterministic=not train)(h)
    logit = nn.Dense(1, name="head")(h)[..., 0]
    return logit, rep


def num_params(params) -> int:
  """Number of scalars in a parameter pytree."""
  return int(sum(math.prod(p.shape) for p in jax.tree_util.tree_leaves(params)))
