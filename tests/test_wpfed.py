"""WPFed's pieces: SimHash signatures and Hamming distances, and one round's rule (SPEC §3.3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms.registry import build_method, hyper_from_config
from fedjax_sim.algorithms.wpfed import candidate_sets, hamming, lsh_signatures
from fedjax_sim.config import ExperimentConfig, LearnerConfig
from fedjax_sim.data.cohorts import Cohorts, SiteCohort
from fedjax_sim.data.federation import from_cohorts
from fedjax_sim.engine.local import local_train, make_client_update
from fedjax_sim.tasks import binary_task
from tests.conftest import numpy_bce


def test_signatures_and_hamming():
  proj = jax.random.normal(jax.random.key(0), (256, 20))
  a = jax.random.normal(jax.random.key(1), (20,))
  flat = jnp.stack([a, 1.01 * a + 0.01, -a])
  sig = lsh_signatures(flat, proj)
  d = np.asarray(hamming(sig))
  assert d[0, 0] == 0 and d[0, 2] == 256  # opposite vectors disagree on every projection
  assert d[0, 1] < 40  # near-parallel vectors agree on most
  np.testing.assert_array_equal(d, d.T)


# --- one round against a numpy re-implementation; candidates on a federation with two planted groups ------


def planted_cohorts(num_sites=10, num_features=5, seed=0):
  """Two interleaved groups of sites with opposite label rules (y = [±x·w + noise > 0]): even sites one
  sign, odd sites the other, so the two groups' model updates point opposite ways."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=num_features)
  sites = []
  for i in range(num_sites):
    n = int(rng.integers(90, 160))
    x = rng.normal(size=(n, num_features)).astype(np.float32)
    sign = 1.0 if i % 2 == 0 else -1.0
    y = (sign * (x @ w) + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    sites.append(SiteCohort(f"site{i}", x, y, year=np.full(n, 2100.0 + i),
                            charlson=(rng.random((n, 12)) < 0.2).astype(np.float32)))
  return Cohorts(tuple(sites), tuple(f"f{j}" for j in range(num_features)), np.ones(num_features, bool), "planted")


CONFIG = ExperimentConfig(learner=LearnerConfig(hidden=(16, 8), batch_size=32, local_epochs=1))
ROUND_KEY = jax.random.key(1)


@pytest.fixture(scope="module")
def planted():
  """The planted federation, WPFed built on it, its initial state, one compiled round, and the same
  round's local models recomputed with local_train and the round's training key."""
  fed = from_cohorts(planted_cohorts(), batch_size=32, num_buckets=2)
  algorithm, model = build_method("wpfed", CONFIG, fed)
  hyper = hyper_from_config(CONFIG, "wpfed")
  state = algorithm.init(jax.random.key(0), fed, hyper)
  new, metrics = jax.jit(algorithm.round)(ROUND_KEY, state, fed, hyper, jnp.int32(1))
  k_train, k_tie = jax.random.split(ROUND_KEY)
  client_update = make_client_update(binary_task(model), batch_size=32, epochs=1)
  local = jax.jit(lambda key, params: local_train(client_update, key, params, fed, hyper=hyper))(k_train, state.params)
  flat = np.stack([np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: a[i], local.params))[0])
                   for i in range(fed.num_clients)])
  group = np.array([int(name[4:]) % 2 for name in fed.names])
  return dict(fed=fed, algorithm=algorithm, model=model, state=state, new=new, metrics=metrics, k_tie=k_tie,
              flat=flat, group=group)


def test_wpfed_round_matches_a_numpy_reimplementation(planted):
  """SimHash of θ_i − θ_0, Hamming + the round's U(0,1) tie jitter, the M nearest, then self and the k
  lowest-loss candidates averaged with ω ∝ n_j·exp(−ℓ_ij) — recomputed in numpy from the local models."""
  fed, state, new, model = planted["fed"], planted["state"], planted["new"], planted["model"]
  c, m, k = fed.num_clients, CONFIG.wpfed.candidates, CONFIG.wpfed.k
  flat = planted["flat"]
  _, unravel = ravel_pytree(jax.tree_util.tree_map(lambda a: a[0], state.params))
  # θ_0 from the init key, independently of the state's copy.
  theta0 = np.asarray(ravel_pytree(model.init(jax.random.split(jax.random.key(0))[0]))[0])
  np.testing.assert_array_equal(np.asarray(state.initial), theta0)
  sig = (flat - theta0) @ np.asarray(state.projections, np.float64).T > 0
  ham = (sig[:, None, :] != sig[None, :, :]).sum(-1).astype(np.float64)
  dist = ham + np.asarray(jax.random.uniform(planted["k_tie"], (c, c)))
  np.fill_diagonal(dist, np.inf)
  cand = np.argsort(dist, axis=1)[:, :m]
  np.testing.assert_array_equal(
      np.asarray(candidate_sets(planted["k_tie"], jnp.asarray(flat, jnp.float32), state.initial,
                                state.projections, m)), cand)
  n = np.asarray(fed.n_train, np.float64)
  got = np.stack([np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: a[i], new.params))[0])
                  for i in range(c)])
  for i in range(c):
    loss = {j: numpy_bce(model.apply(unravel(jnp.asarray(flat[j], jnp.float32)), fed.x_val[i], False, None)[0],
                         fed.y_val[i], fed.m_val[i]) for j in [i, *cand[i]]}
    kept = [i] + sorted(cand[i], key=lambda j: loss[j])[:k]
    w = np.array([n[j] * np.exp(-loss[j]) for j in kept])
    want = (w[:, None] * flat[kept]).sum(0) / w.sum()
    np.testing.assert_allclose(got[i], want, atol=1e-5)
  assert float(planted["metrics"].bytes) == pytest.approx(c * m * planted["algorithm"].sent_params * 4)


def test_candidates_come_from_the_own_group(planted):
  """Hashing θ_i − θ_0 separates the two planted groups: every candidate of every center is from its own
  group (4 others in a group of 5, M = 3). Positive control: the raw parameters' signatures are nearly all
  equal (every weight moved little from the shared θ_0), so hashing θ_i itself mixes the groups."""
  state, flat, group = planted["state"], jnp.asarray(planted["flat"], jnp.float32), planted["group"]
  assert (np.bincount(group) == 5).all()
  cand = np.asarray(candidate_sets(planted["k_tie"], flat, state.initial, state.projections, 3))
  assert (group[cand] == group[:, None]).all()
  raw = np.asarray(hamming(lsh_signatures(flat, state.projections)))
  assert np.median(raw[~np.eye(len(group), dtype=bool)]) <= 2  # raw signatures barely differ
  raw_cand = np.asarray(candidate_sets(planted["k_tie"], flat, jnp.zeros_like(state.initial), state.projections, 3))
  assert (group[raw_cand] != group[:, None]).any()


def test_hamming_ties_break_at_random_not_toward_low_indices():
  """Equal signatures: candidates follow the round key's jitter, not the index order (issue 9 item 10),
  and change from round to round; a strictly nearer center is still taken first whatever the jitter."""
  proj = jax.random.normal(jax.random.key(0), (16, 4))
  flat0 = jnp.zeros(4)
  a = jnp.array([1.0, -2.0, 3.0, 0.5])
  same = jnp.tile(a, (12, 1))  # twelve equal models: every Hamming distance is 0
  lowest = np.array([[j for j in range(12) if j != i][:3] for i in range(12)])  # what top_k's ties give
  picks = [np.asarray(candidate_sets(jax.random.key(r), same, flat0, proj, 3)) for r in range(4)]
  for p in picks:
    assert not (p == np.arange(12)[:, None]).any()
    assert not np.array_equal(p, lowest)
  assert any(not np.array_equal(picks[0], p) for p in picks[1:])
  opposite = jnp.tile(-a, (12, 1)).at[0].set(a).at[5].set(a)  # only center 5 shares center 0's signature
  assert int(hamming(lsh_signatures(opposite, proj))[0, 1]) == 16
  for r in range(4):
    assert int(candidate_sets(jax.random.key(r), opposite, flat0, proj, 1)[0, 0]) == 5
