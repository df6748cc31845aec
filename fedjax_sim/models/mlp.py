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


def hash_uniform_bits(seed: jax.Array, shape) -> jax.Array:
  """``uint32`` pseudo-random bits of ``shape`` from one ``uint32`` seed, by a counter hash.

  Element ``i`` is murmur3's 32-bit finalizer (fmix32) applied to
  ``seed + i·0x9E3779B9`` (a Weyl sequence), the construction of SplitMix-style
  counter generators. It costs a handful of integer ops per element, against
  threefry's ~20 rounds: on 2 CPU cores threefry dropout masks were 40 % of a
  FedAvg round. Only dropout masks use it; everything else uses ``jax.random``.
  """
  n = math.prod(shape)
  h = seed.astype(jnp.uint32) + jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9)
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  h = h ^ (h >> 16)
  return h.reshape(shape)


class HashDropout(nn.Module):
  """Inverted dropout (as ``flax.linen.Dropout``: zero with probability ``rate``, scale the
  rest by 1/(1−rate)) whose mask bits come from :func:`hash_uniform_bits`, seeded by one
  ``jax.random.bits`` draw from the ``'dropout'`` rng stream per call."""

  rate: float

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    if deterministic or self.rate == 0.0:
      return x
    seed = jax.random.bits(self.make_rng("dropout"), (), jnp.uint32)
    threshold = jnp.uint32(min(int(round(self.rate * 2.0**32)), 2**32 - 1))
    keep = hash_uniform_bits(seed, x.shape) >= threshold
    return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class MLP(nn.Module):
  """Binary classifier returning ``(logit, representation)``.

  Attributes:
    hidden: widths of the hidden layers (SPEC §3.1: (128, 64)).
    dropout: dropout rate after each hidden ReLU (SPEC §3.1: 0.2).
  """

  hidden: Sequence[int] = (128, 64)
  dropout: float = 0.2
  outputs: int = 1  # 1: one logit (binary, squeezed); K > 1: K class logits

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[..., d]``; train: apply dropout (needs the ``'dropout'`` rng).

    Returns:
      ``(logit [...], representation [..., hidden[-1]])``; the representation is
      the last hidden layer's ReLU output before dropout (MOON's ``z``).
    """
    h = x.astype(jnp.float32) / 255.0 if x.dtype == jnp.uint8 else x
    for i, width in enumerate(self.hidden):
      h = nn.relu(nn.Dense(width, name=f"hidden_{i}")(h))
      rep = h
      h = HashDropout(self.dropout)(h, deterministic=not train)
    logit = nn.Dense(self.outputs, name="head")(h)
    return (logit[..., 0] if self.outputs == 1 else logit), rep


def num_params(params) -> int:
  """Number of scalars in a parameter pytree."""
  return int(sum(math.prod(p.shape) for p in jax.tree_util.tree_leaves(params)))


def head_mask(params, head_layers: int):
  """Pytree of bools: True on leaves of the last ``head_layers`` layers (kept local)."""
  # Layer order from the input (dict keys may come sorted alphabetically): hidden_0, hidden_1, ..., head.
  names = sorted((k for k in params if k.startswith("hidden_")), key=lambda k: int(k.split("_")[1])) + ["head"]
  heads = set(names[len(names) - head_layers:]) if head_layers > 0 else set()
  return {name: jax.tree_util.tree_map(lambda _: name in heads, sub) for name, sub in params.items()}


def wire_format(bf16: bool) -> tuple:
  """``(round_trip, bytes_per_parameter)`` of the wire (SPEC §3.2 step 6, Q): bfloat16 (2 bytes, the values
  :func:`bf16_round_trip` delivers) or fp32 (4 bytes, unchanged)."""
  return (bf16_round_trip, 2) if bf16 else ((lambda x: x), 4)


def sent_parameters(template, is_head) -> int:
  """Scalars a client sends when its ``is_head`` leaves (:func:`head_mask`) stay local (head personalization)."""
  return sum(math.prod(s.shape) for s, h in zip(jax.tree_util.tree_leaves(template), jax.tree_util.tree_leaves(is_head))
             if not h)


def bf16_round_trip(x: jax.Array) -> jax.Array:
  """What a bfloat16 wire delivers: fp32 → bf16 → fp32 (SPEC §3.2 step 6, Q), bitwise.

  Round to nearest, ties to even, on the fp32 bit pattern: keep the top 16 bits after adding
  0x7FFF plus the lowest kept bit; NaN stays NaN. This is exactly ``x.astype(bfloat16)`` back to
  fp32 (tested against ml_dtypes on normal, subnormal, overflowing and special values), written
  with integer ops on purpose: XLA treats a ``convert`` pair f32 → bf16 → f32 as excess precision
  it may drop (``xla_allow_excess_precision``, on by default), and in the full 50-round,
  5-seed ABPS+Q program on CPU it did — the wire then rounded nothing while 2 bytes per
  parameter were counted. Integer arithmetic cannot be elided that way.
  """
  x = jnp.asarray(x, jnp.float32)
  bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  lowest_kept = (bits >> 16) & jnp.uint32(1)
  rounded = (bits + jnp.uint32(0x7FFF) + lowest_kept) & jnp.uint32(0xFFFF0000)
  return jnp.where(jnp.isnan(x), x, jax.lax.bitcast_convert_type(rounded, jnp.float32))
