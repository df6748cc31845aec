"""WPFed's pieces: SimHash signatures and Hamming distances, and one round's rule (SPEC §3.3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.algorithms.wpfed import hamming, lsh_signatures
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.federation import from_cohorts
from tests.conftest import make_cohorts


def test_signatures_and_hamming():
  proj = jax.random.normal(jax.random.key(0), (256, 20))
  a = jax.random.normal(jax.random.key(1), (20,))
  flat = jnp.stack([a, 1.01 * a + 0.01, -a])
  sig = lsh_signatures(flat, proj)
  d = np.asarray(hamming(sig))
  assert d[0, 0] == 0 and d[0, 2] == 256  # opposite vectors disagree on every projection
  assert d[0, 1] < 40  # near-parallel vectors agree on most
  np.testing.assert_array_equal(d, d.T)


def test_wpfed_round_bytes_and_finite():
  fed = from_cohorts(make_cohorts(num_sites=8, sizes=[40, 60, 80, 90, 100, 120, 150, 200]), batch_size=32,
                     num_buckets=2)
  config = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))
  algorithm, _ = build_method("wpfed", config, fed.num_features, fed.num_clients)
  hyper = hyper_from_config(config)
  state = algorithm.init(jax.random.key(0), fed, hyper)
  new, m = jax.jit(algorithm.round)(jax.random.key(1), state, fed, hyper, jnp.int32(1))
  assert float(m.bytes) == pytest.approx(8 * 5 * algorithm.sent_params * 4)
  assert all(np.isfinite(np.asarray(a)).all() for a in jax.tree_util.tree_leaves(new.params))
