"""The MLP of SPEC §3.1 and its counter-hash dropout."""
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sim.models import mlp_model, num_params
from fedjax_sim.models.mlp import HashDropout, hash_uniform_bits


def test_mlp_shapes_and_layer_names():
  model = mlp_model(51)
  params = model.init(jax.random.key(0))
  assert set(params) == {"hidden_0", "hidden_1", "head"}
  assert num_params(params) == 51 * 128 + 128 + 128 * 64 + 64 + 64 + 1
  logits, rep = model.apply(params, jnp.ones((7, 51)), False, None)
  assert logits.shape == (7,) and rep.shape == (7, 64)
  # Evaluation is deterministic; training with dropout depends on the rng.
  a = model.apply(params, jnp.ones((7, 51)), True, jax.random.key(1))[0]
  b = model.apply(params, jnp.ones((7, 51)), True, jax.random.key(2))[0]
  assert not np.allclose(np.asarray(a), np.asarray(b))


def test_hash_dropout_keeps_the_right_fraction_and_rescales():
  x = jnp.ones((400, 250))
  layer = HashDropout(0.2)
  y = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(3)})
  kept = np.asarray(y) != 0
  assert abs(kept.mean() - 0.8) < 0.005
  np.testing.assert_allclose(np.asarray(y)[kept], 1 / 0.8, rtol=1e-6)
  # Rows and columns are not correlated (no stripes), and the mask changes with the key.
  assert np.abs(kept.mean(0) - 0.8).max() < 0.1 and np.abs(kept.mean(1) - 0.8).max() < 0.1
  y2 = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(4)})
  assert (np.asarray(y2) != 0).mean() != kept.mean() or not np.array_equal(np.asarray(y2) != 0, kept)
  np.testing.assert_array_equal(np.asarray(layer.apply({}, x, deterministic=True)), np.asarray(x))


def test_hash_bits_are_uniform():
  bits = np.asarray(hash_uniform_bits(jnp.uint32(12345), (100_000,)), np.float64) / 2**32
  counts, _ = np.histogram(bits, bins=10, range=(0, 1))
  chi2 = ((counts - 10_000) ** 2 / 10_000).sum()
  assert chi2 < 30  # 9 degrees of freedom: p ≈ 0.0004 for 30
  assert abs(np.corrcoef(bits[:-1], bits[1:])[0, 1]) < 0.02


def test_bf16_wire_is_bitwise_the_bfloat16_cast_inside_and_outside_jit():
  """The wire's rounding (round to nearest, ties to even) equals ml_dtypes' fp32 → bf16 → fp32 on
  normal, subnormal, overflowing, tie and special values; under jit too, and inside a scan, where
  XLA may drop a plain f32 → bf16 → f32 convert pair as excess precision."""
  import ml_dtypes

  from fedjax_sim.models.mlp import bf16_round_trip
  rng = np.random.default_rng(0)
  x = (rng.standard_normal(100_000) * 10.0 ** rng.integers(-45, 38, 100_000)).astype(np.float32)
  one = np.float32(1.0)
  specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.1754942e-38, 9.2e-41,
                       3.4028235e38, -3.4028235e38, 3.3961775e38,  # rounds up past bf16's largest: inf
                       one + 2.0 ** -8, one + 3 * 2.0 ** -8, -(one + 2.0 ** -8), 1.0078125, 0.1, 1 / 3],
                      np.float32)  # 1 + 2^-8 is a tie: to even (1.0); 1 + 3·2^-8 to 1 + 2^-6
  x = np.concatenate([x, specials])
  want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
  scanned = jax.jit(lambda v: jax.lax.scan(lambda c, _: (bf16_round_trip(c * 1.0), None), v, None, length=3)[0])
  for fn in (bf16_round_trip, jax.jit(bf16_round_trip), scanned):
    got = np.asarray(fn(jnp.asarray(x)))
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
  assert np.count_nonzero(want != x) > 90_000  # the rounding is not a no-op
