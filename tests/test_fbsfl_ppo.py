"""The PPO leader of FBS-FL against its definitions (paper 002 Alg. 1, §4.6; Schulman et al. 2017; SPEC §4.2 step 9).

One jitted 32-round scan (``run_rounds``) serves the no-op / update / no-retrace test and the learning test, so
the file compiles the PPO update once.
"""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sim.algorithms.fbsfl import ppo

N, D = 4, 3  # clients (logits) and state length: small, so the file stays fast on 2 CPU cores
HYPER = ppo.PPOHyper()
MODEL = ppo.ActorCritic(N)
TARGET = jnp.array([0.9, 0.1, 0.8, 0.2])  # toy bandit: reward = −‖sigmoid(logits) − target‖²
OBS = jnp.array([1.0, -0.5, 0.3])  # its one (fixed) context


# --- network and act -----------------------------------------------------------------------------

def test_act_shapes_and_gaussian_log_density():
  state = ppo.init_train_state(jax.random.PRNGKey(0), MODEL, D, HYPER)
  log_std = jnp.array([-0.5, 0.0, 0.3, -1.2])  # a non-trivial std, so the check is not the unit Gaussian's
  params = {"params": {**state.params["params"], "log_std": log_std}}
  obs = jnp.array([0.2, -1.0, 0.7])
  act = jax.jit(lambda p, k, o: ppo.act(state.apply_fn, p, k, o))  # one compile instead of op-by-op dispatch
  logits, log_prob, value, pi_hat = act(params, jax.random.PRNGKey(1), obs)
  chex.assert_shape([logits, pi_hat], (N,))
  chex.assert_shape([log_prob, value], ())
  mean, _, v = MODEL.apply(params, obs)
  x, mu, sigma = (np.asarray(a, np.float64) for a in (logits, mean, jnp.exp(log_std)))
  closed_form = np.sum(-0.5 * ((x - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi))
  assert float(log_prob) == pytest.approx(closed_form, abs=1e-5)
  np.testing.assert_allclose(pi_hat, 1.0 / (1.0 + np.exp(-x)), rtol=1e-6)
  assert float(value) == pytest.approx(float(v))
  # batched states: the critic and the actor broadcast over leading axes; log_std is shared
  m, s, vb = MODEL.apply(params, jnp.zeros((5, D)))
  chex.assert_shape([m, s, vb], [(5, N), (N,), (5,)])


def test_initial_actor_is_near_zero_logits():
  """PureJaxRL's init: actor output gain 0.01, log-std 0 (std 1)."""
  params = ppo.init_train_state(jax.random.PRNGKey(3), MODEL, D, HYPER).params
  mean, log_std, _ = MODEL.apply(params, OBS)
  assert float(jnp.max(jnp.abs(mean))) < 0.1
  np.testing.assert_array_equal(log_std, 0.0)


# --- buffer --------------------------------------------------------------------------------------

def test_add_writes_row_t_mod_rollout():
  buf = ppo.init_buffer(D, N, rollout=16)
  for t in range(18):
    buf = ppo.add(buf, jnp.full(D, t), jnp.full(N, t), t, t, t, 0.0)
  assert int(buf.index) == 18
  np.testing.assert_array_equal(buf.reward, [16, 17] + list(range(2, 16)))
  np.testing.assert_array_equal(buf.obs[:, 0], buf.reward)
  np.testing.assert_array_equal(buf.action[:, -1], buf.reward)


# --- GAE -----------------------------------------------------------------------------------------

def numpy_gae(rewards, values, dones, last_value, gamma, lam):
  """Definition, by a backward Python loop in float64."""
  r, v, d = (np.asarray(a, np.float64) for a in (rewards, values, dones))
  adv = np.zeros_like(r)
  next_adv, next_value = 0.0, float(last_value)
  for t in reversed(range(len(r))):
    delta = r[t] + gamma * (1 - d[t]) * next_value - v[t]
    next_adv = delta + gamma * lam * (1 - d[t]) * next_adv
    adv[t], next_value = next_adv, v[t]
  return adv, adv + v


@pytest.mark.parametrize("seed", range(4))
def test_gae_matches_python_loop(seed):
  rng = np.random.default_rng(seed)
  r, v = rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32)
  d = (rng.random(16) < (0.0 if seed == 0 else 0.3)).astype(np.float32)  # seed 0: one episode, as in FBS-FL
  last = np.float32(rng.normal())
  gamma, lam = (0.99, 0.95) if seed < 2 else (float(rng.uniform(0.5, 1)), float(rng.uniform(0.5, 1)))
  adv, ret = ppo.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(d), jnp.asarray(last), gamma, lam)
  want_adv, want_ret = numpy_gae(r, v, d, last, gamma, lam)
  np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-5)


def test_gae_bootstraps_last_transition_with_last_value():
  adv, _ = ppo.gae(jnp.array([0.0, 1.0]), jnp.array([0.5, 2.0]), jnp.zeros(2), jnp.array(3.0), 0.9, 0.5)
  assert float(adv[1]) == pytest.approx(1.0 + 0.9 * 3.0 - 2.0)
  assert float(adv[0]) == pytest.approx((0.0 + 0.9 * 2.0 - 0.5) + 0.9 * 0.5 * float(adv[1]))


# --- loss ----------------------------------------------------------------------------------------

def test_clipped_surrogate_on_hand_made_ratios():
  ratio = jnp.array([0.5, 1.0, 1.5, 1.1, 0.7])
  adv = jnp.array([1.0, -1.0, 1.0, -2.0, -1.0])
  # min(rA, clip(r, 0.8, 1.2)A): 0.5 (unclipped is lower), −1, 1.2 (clipped), −2.2, −0.8 (clipped)
  want = -np.mean([0.5, -1.0, 1.2, -2.2, -0.8])
  assert float(ppo.clipped_surrogate(ratio, adv, 0.2)) == pytest.approx(want)
  assert float(ppo.clipped_surrogate(ratio, adv, 10.0)) == pytest.approx(-float(jnp.mean(ratio * adv)))


def test_value_loss_plain_and_clipped():
  v, old, target = jnp.array([1.0, 0.0]), jnp.zeros(2), jnp.array([2.0, 1.0])
  assert float(ppo.value_loss(v, old, target, 0.0)) == pytest.approx(0.5 * (1.0 + 1.0) / 2)
  # clipped prediction old + clip(v − old, ±0.2) = [0.2, 0]: losses max(1, 3.24), max(1, 1)
  assert float(ppo.value_loss(v, old, target, 0.2)) == pytest.approx(0.5 * (3.24 + 1.0) / 2)


def test_ppo_loss_at_the_collecting_policy():
  """Ratio 1 everywhere: −L^CLIP = −mean Â, KL 0, nothing clipped, entropy of the diagonal Gaussian."""
  state = ppo.init_train_state(jax.random.PRNGKey(4), MODEL, D, HYPER)
  obs = jax.random.normal(jax.random.PRNGKey(5), (8, D))
  keys = jax.random.split(jax.random.PRNGKey(6), 8)
  logits, log_prob, value, _ = jax.jit(jax.vmap(lambda k, o: ppo.act(state.apply_fn, state.params, k, o)))(keys, obs)
  adv = jnp.linspace(-1.0, 2.0, 8)
  target = value + 1.0
  batch = ppo.PPOBatch(obs=obs, action=logits, log_prob=log_prob, value=value, advantage=adv, target=target)
  hyper = ppo.PPOHyper(ent_coef=0.01)
  total, info = jax.jit(lambda p, b, h: ppo.ppo_loss(state.apply_fn, p, b, h))(state.params, batch, hyper)
  entropy = N * (0.5 * np.log(2 * np.pi * np.e))  # log σ = 0
  assert float(info.actor) == pytest.approx(-float(adv.mean()), abs=1e-5)
  assert float(info.value) == pytest.approx(0.5, abs=1e-5)
  assert float(info.entropy) == pytest.approx(entropy, abs=1e-5)
  assert float(info.approx_kl) == pytest.approx(0.0, abs=1e-6)
  assert float(info.clip_fraction) == 0.0
  assert float(total) == pytest.approx(float(info.actor) + 0.5 * 0.5 - 0.01 * entropy, abs=1e-5)


def test_minibatches_must_divide_the_rollout():
  state = ppo.init_train_state(jax.random.PRNGKey(0), MODEL, D, HYPER)
  with pytest.raises(ValueError, match="divisible"):
    ppo.ppo_update(state, ppo.init_buffer(D, N), OBS, jax.random.PRNGKey(0), ppo.PPOHyper(num_minibatches=3))


# --- the round scan: maybe_update, no retrace, learning ------------------------------------------

@chex.assert_max_traces(n=1)
def bandit_round(carry, key):
  """One round of a toy contextual bandit driven the way the FBS-FL round scan drives the leader."""
  state, buf = carry
  k_act, k_update = jax.random.split(key)
  logits, log_prob, value, pi_hat = ppo.act(state.apply_fn, state.params, k_act, OBS)
  reward = -jnp.sum((pi_hat - TARGET) ** 2)
  buf = ppo.add(buf, OBS, logits, log_prob, value, reward, 1.0)  # a bandit: every round is its own episode
  state, info = ppo.maybe_update(buf.index, state, buf, OBS, k_update, HYPER)
  return (state, buf), (reward, info, state.params, state.step)


@jax.jit
def run_rounds(carry, key):
  """32 rounds (two rollouts) under one ``lax.scan``."""
  return jax.lax.scan(bandit_round, carry, jax.random.split(key, 32))


def initial_carry(seed):
  state = ppo.init_train_state(jax.random.PRNGKey(seed), MODEL, D, HYPER)
  return state, ppo.init_buffer(D, N, HYPER.rollout)


def test_maybe_update_is_a_bitwise_noop_between_rollouts_and_no_retrace():
  carry = initial_carry(0)
  init_params = carry[0].params
  carry, (_, info, params, steps) = run_rounds(carry, jax.random.PRNGKey(10))
  carry, _ = run_rounds(carry, jax.random.PRNGKey(11))  # a second call: bandit_round must not be traced again
  due = np.arange(1, 33) % 16 == 0
  np.testing.assert_array_equal(info.updated, due.astype(np.float32))
  np.testing.assert_array_equal(steps, np.where(np.arange(1, 33) < 16, 0, np.where(np.arange(1, 33) < 32, 16, 32)))
  leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(params)]  # each [32, ...]: params after round t
  before = [np.asarray(x) for x in jax.tree_util.tree_leaves(init_params)]
  for t in range(32):  # rounds t + 1 = 1 … 32
    prev = before if t == 0 else [x[t - 1] for x in leaves]
    same = all(np.array_equal(x[t], p) for x, p in zip(leaves, prev))
    assert same != due[t], f"round {t + 1}: params {'unchanged' if same else 'changed'}"
  assert float(info.total[15]) != 0.0 and float(info.approx_kl[15]) >= 0.0
  assert int(carry[1].index) == 64 and int(carry[0].step) == 64


def test_ppo_learns_a_contextual_bandit():
  """Rewards −‖sigmoid(logits) − target‖² start near −0.65 (logits ≈ N(0, 1)); 24 updates at the paper's settings
  must bring the last two rollouts' mean reward clearly up (it reaches about −0.05 on the seeds tried)."""
  carry = initial_carry(1)
  rewards = []
  for i in range(12):  # 12 × 32 rounds = 24 rollouts
    carry, (r, _, _, _) = run_rounds(carry, jax.random.PRNGKey(100 + i))
    rewards.append(np.asarray(r))
  per_rollout = np.concatenate(rewards).reshape(24, 16).mean(axis=1)
  first, last = per_rollout[0], per_rollout[-2:].mean()
  assert first < -0.4
  assert last > first + 0.3 and last > -0.2, per_rollout


def test_learning_rate_is_traced_optimizer_state():
  """``PPOHyper.lr`` lives in the optimizer state: lr = 0 reuses the compiled scan (no retrace) and freezes params."""
  carry = initial_carry(2)
  frozen = ppo.init_train_state(jax.random.PRNGKey(2), MODEL, D, ppo.PPOHyper(lr=0.0))
  carry, (_, info, _, _) = run_rounds((frozen, carry[1]), jax.random.PRNGKey(12))
  assert float(info.updated.sum()) == 2.0 and int(carry[0].step) == 32
  chex.assert_trees_all_equal(carry[0].params, frozen.params)


def test_train_state_pickles_to_an_equal_structure_and_goes_through_the_program_cache(tmp_path):
  """The leader's TrainState (static ``apply_fn`` and optimizer) pickles to a tree structure equal to its own, so
  the program cache can store a program whose carry holds it and call the loaded program on its own outputs
  (before ``ppo.ModuleApply`` and the shared optimizer's ``__reduce__``, FBS-FL's program was never cached)."""
  import pickle

  from fedjax_sim import program_cache
  state = ppo.init_train_state(jax.random.PRNGKey(0), MODEL, D)
  structure = jax.tree_util.tree_structure(state)
  assert pickle.loads(pickle.dumps(structure)) == structure
  assert pickle.loads(pickle.dumps(ppo.LEADER_OPTIMIZER)) is ppo.LEADER_OPTIMIZER

  def body(s):
    return s.apply_gradients(grads=jax.tree_util.tree_map(jnp.ones_like, s.params))

  first = program_cache.compile_program(body, (state,), ("ppo-test",), str(tmp_path))
  again = program_cache.compile_program(body, (state,), ("ppo-test",), str(tmp_path))
  assert first is not None and not first.hit and again.hit
  out = again(again(state))  # the loaded program takes its own output: the structures agree
  chex.assert_trees_all_equal(out.params, first(first(state)).params)  # the same program, stored and loaded
  chex.assert_trees_all_close(out.params, body(body(state)).params, rtol=1e-5)  # and eager's numbers
  assert int(out.step) == 2
