"""The PPO leader of FBS-FL: actor–critic, rollout buffer, GAE and the clipped update (paper 002 §3.6–3.7, §4.6).

Paper 002 optimizes the server's inclusion policy with PPO (Schulman et al. 2017, its ref. [46]): Algorithm 1
line 4 samples a raw action from π_φ(·|s_t) and projects it onto the capped simplex; line 10 stores the
transition; line 11 updates actor and critic "using clipped PPO loss". §4.6 fixes the network (two-layer MLP,
hidden 128, tanh, critic sharing the first hidden layer) and the PPO settings (clip 0.2, GAE λ 0.95, γ 0.99,
4 epochs per rollout, rollouts of 16 rounds, Adam 3e-4, global-norm clip 0.5); SPEC §4.2 steps 2 and 9 restate
them and require the whole loop inside the compiled round scan.

The structure follows PureJaxRL's ``ppo_continuous_action.py`` (Lu et al. 2022), written out here as small
pure pieces (STYLE §"The anchors": no 250-line closure): :class:`ActorCritic`, :func:`act`,
:class:`RolloutBuffer` / :func:`add`, :func:`gae`, :func:`clipped_surrogate`, :func:`value_loss`,
:func:`ppo_loss`, :func:`ppo_update` and :func:`maybe_update`. Nothing here knows about federated learning:
the round function forms the state s_t, projects π̂ onto Π (SPEC §4.2 step 2; not part of this module),
computes U_t (paper 002 eq. 11) and calls :func:`add` and :func:`maybe_update` once per round.

Decisions the paper leaves open (this module's brief, stated again where they act):
  * The stored PPO action is the Gaussian logit sample, and log-probabilities are those of the Gaussian over
    logits; the sigmoid and the capped-simplex projection are treated as part of the environment. (Algorithm 1
    stores π_t, the projected action, whose density is not defined on the simplex's boundary.)
  * Advantages are normalized once per rollout (over its 16 samples), not per minibatch as PureJaxRL does:
    with 4-sample minibatches a per-minibatch mean/std would be mostly noise.
  * Minibatches: 4 minibatches of 4 by default (16 Adam steps per rollout). A run of T = 200 rounds has only
    12 complete rollouts; one 16-sample minibatch would give the policy just 48 Adam steps at 3e-4 in a whole
    run, while the clipped ratio still bounds how far each rollout moves it. On a 4-client toy bandit with
    d = 0 and γ = 0.99 (the FBS-FL setting), 24 updates took the mean reward from about −0.65 to −0.2…−0.5
    with 4 × 4 and only to −0.45…−0.68 with 1 × 16 (3 seeds). Configurable (any divisor of the rollout).
  * Value clipping (PureJaxRL's default, with the policy's ε) is off by default (``value_clip = 0``): it bounds
    each update's change of the critic to ±ε around the rollout's predictions, which with 12 updates per run and
    discounted returns keeps the critic near its initialization (on the same toy it slowed learning on all 3
    seeds); Andrychowicz et al. (2021, "What matters in on-policy RL") also found it unhelpful. Set
    ``value_clip = 0.2`` for PureJaxRL's loss.
  * One episode per run: ``done`` is 0 for every round, and the last state's value V(s_{t+1}) — the state the
    next round will act on — bootstraps the rollout's last transition in GAE. The run's end is a time limit,
    not a terminal state; the incomplete last rollout (T mod 16 rounds) is never trained on.
  * Entropy bonus coefficient 0 and value coefficient 0.5 (PureJaxRL's continuous-action defaults; paper 002
    names neither).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import distrax
import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState


# --- hyperparameters -----------------------------------------------------------------------------

@flax.struct.dataclass
class PPOHyper:
  """PPO settings of the FBS-FL leader (paper 002 §4.6; SPEC §4.2 step 9); traced unless marked static.

  ``lr`` and ``max_grad_norm`` are read once, by :func:`init_train_state`, which puts them into the optimizer
  state (``optax.inject_hyperparams``) so they stay traced (sweepable) after the optimizer is built.
  """
  clip_eps: float = 0.2  # ε of the clipped surrogate (paper 002 §4.6 "clip ratio 0.2"; Schulman et al. eq. 7)
  value_clip: float = 0.0  # ε of PureJaxRL's clipped value loss; 0 = unclipped squared error (brief decision)
  gamma: float = 0.99  # discount γ (paper 002 §4.6)
  gae_lambda: float = 0.95  # GAE λ (paper 002 §4.6; Schulman et al. 2016)
  lr: float = 3e-4  # Adam learning rate (paper 002 §4.6)
  max_grad_norm: float = 0.5  # global-norm gradient clip before Adam (paper 002 §4.6)
  vf_coef: float = 0.5  # c_1, weight of the value loss (Schulman et al. eq. 9; PureJaxRL's default, paper silent)
  ent_coef: float = 0.0  # c_2, weight of the entropy bonus (PureJaxRL's continuous default; paper silent)
  rollout: int = flax.struct.field(pytree_node=False, default=16)  # rounds per rollout (paper 002 §4.6)
  epochs: int = flax.struct.field(pytree_node=False, default=4)  # passes over each rollout (paper 002 §4.6)
  num_minibatches: int = flax.struct.field(pytree_node=False, default=4)  # rollout / this = minibatch size (4)


# --- network -------------------------------------------------------------------------------------

class ActorCritic(nn.Module):
  """Actor–critic with a shared first hidden layer (paper 002 §4.6; SPEC §4.2 step 2).

  s → Dense(hidden) + tanh (shared) → actor: Dense(hidden) + tanh → Dense(N), the mean of the logits;
  critic: Dense(hidden) + tanh → Dense(1). A state-independent log-std parameter ``[N]`` (initialized to 0, so
  std 1) completes the diagonal Gaussian over logits. Initialization as PureJaxRL: orthogonal with gain √2 on the
  hidden layers, 0.01 on the actor's output (initial logits ≈ 0, π̂ ≈ sigmoid of unit noise), 1.0 on the critic's
  output; biases 0. The paper's "two-layer MLP" is read as two hidden layers on the actor's path (this brief).

  Attributes:
    num_clients: N, the number of logits.
    hidden: width of every hidden layer (128 in paper 002 §4.6).

  Returns (of ``__call__(obs)`` with ``obs [..., D]``):
    ``(mean [..., N], log_std [N], value [...])``.
  """
  num_clients: int
  hidden: int = 128

  @nn.compact
  def __call__(self, obs: jax.Array):
    dense = lambda features, gain: nn.Dense(features, kernel_init=nn.initializers.orthogonal(gain),
                                            bias_init=nn.initializers.zeros)
    shared = jnp.tanh(dense(self.hidden, np.sqrt(2.0))(obs))
    actor = jnp.tanh(dense(self.hidden, np.sqrt(2.0))(shared))
    mean = dense(self.num_clients, 0.01)(actor)
    log_std = self.param("log_std", nn.initializers.zeros, (self.num_clients,))
    critic = jnp.tanh(dense(self.hidden, np.sqrt(2.0))(shared))
    value = dense(1, 1.0)(critic)[..., 0]
    return mean, log_std, value


def logit_distribution(mean: jax.Array, log_std: jax.Array) -> distrax.MultivariateNormalDiag:
  """π_φ(·|s) as a diagonal Gaussian over the N logits (SPEC §4.2 step 2; distrax), ``log_std`` broadcast."""
  return distrax.MultivariateNormalDiag(mean, jnp.broadcast_to(jnp.exp(log_std), mean.shape))


def act(apply_fn: Callable, params, key: jax.Array, obs: jax.Array):
  """Sample the leader's raw action for one state (paper 002 Algorithm 1 line 4, before the projection).

  Args:
    apply_fn: ``ActorCritic(...).apply`` (a :class:`TrainState` carries it as ``apply_fn``).
    params: the actor–critic parameters.
    key: policy-randomness key (consumed here; split before calling).
    obs: ``[D]`` the state s_t.

  Returns:
    ``(logits [N], log_prob [], value [], pi_hat [N])``: the Gaussian sample, its log density under π_φ (the
    quantity PPO's ratio uses; this brief), V_ψ(s_t), and π̂ = sigmoid(logits) ∈ (0, 1)^N. The caller projects π̂
    onto the capped simplex Π (SPEC §4.2 step 2) and stores ``logits``, not π, in the buffer.
  """
  mean, log_std, value = apply_fn(params, obs)
  dist = logit_distribution(mean, log_std)
  logits = dist.sample(seed=key)
  return logits, dist.log_prob(logits), value, jax.nn.sigmoid(logits)


def _leader_optimizer(learning_rate, max_grad_norm) -> optax.GradientTransformation:
  """Global-norm clip, then Adam (paper 002 §4.6; PureJaxRL's chain, with its Adam ε = 1e-5)."""
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=1e-5))


class _SharedOptimizer(optax.GradientTransformationExtraArgs):
  """An optax transformation that pickles as a reference to :data:`LEADER_OPTIMIZER`.

  optax's ``inject_hyperparams`` builds its ``init``/``update`` as local closures, which ``pickle`` cannot store,
  and a :class:`TrainState` carries its ``tx`` in the carry's tree structure: without this, the program cache
  (:mod:`fedjax_sim.program_cache`, which pickles a program's output structure) could not keep FBS-FL's traced
  program, and every invocation traced it twice (the export attempt, then the usual compile)."""

  def __reduce__(self):
    return (_shared_leader_optimizer, ())


def _shared_leader_optimizer() -> "_SharedOptimizer":
  return LEADER_OPTIMIZER


LEADER_OPTIMIZER = _SharedOptimizer(
    *optax.inject_hyperparams(_leader_optimizer)(learning_rate=3e-4, max_grad_norm=0.5))
"""The leader's optimizer, built once: a :class:`TrainState` holds it as a static field, so one shared object keeps
jit caches valid across train states (and, pickled, stays that object); its two numbers live in the optimizer
state (see :func:`init_train_state`)."""


@dataclasses.dataclass(frozen=True)
class ModuleApply:
  """``module.apply`` as a value: equal (and hashed) by the module's fields, and picklable.

  A bound method compares its ``__self__`` by identity, so a :class:`TrainState` whose static ``apply_fn`` is
  ``model.apply`` has a tree structure that equals no unpickled copy of itself; the program cache stores a
  program's output structure pickled and checks the carry's structure on every call."""
  module: nn.Module

  def __call__(self, *args, **kwargs):
    return self.module.apply(*args, **kwargs)


def init_train_state(key: jax.Array, model: ActorCritic, obs_dim: int, hyper: PPOHyper = PPOHyper()) -> TrainState:
  """Parameters and optimizer of the leader (paper 002 Algorithm 1 line 1; §4.6).

  The optimizer is ``optax.chain(clip_by_global_norm(max_grad_norm), adam(lr))`` under
  ``optax.inject_hyperparams`` (:data:`LEADER_OPTIMIZER`); ``hyper.lr`` and ``hyper.max_grad_norm`` are written
  into its state, so they are traced (sweepable, vmappable) numbers rather than constants of the program.

  Args:
    key: initialization key.
    model: the :class:`ActorCritic`.
    obs_dim: D, the length of the state vector.
    hyper: :class:`PPOHyper` (reads ``lr`` and ``max_grad_norm``).
  """
  params = model.init(key, jnp.zeros((obs_dim,), jnp.float32))
  state = TrainState.create(apply_fn=ModuleApply(model), params=params, tx=LEADER_OPTIMIZER)
  numbers = {"learning_rate": hyper.lr, "max_grad_norm": hyper.max_grad_norm}
  hyperparams = {k: jnp.asarray(numbers[k], v.dtype) for k, v in state.opt_state.hyperparams.items()}
  # a strong int32 step counter, so scan and cond carries keep one type
  return state.replace(step=jnp.zeros((), jnp.int32), opt_state=state.opt_state._replace(hyperparams=hyperparams))


# --- rollout buffer ------------------------------------------------------------------------------

@flax.struct.dataclass
class RolloutBuffer:
  """The last ``R`` transitions (s_t, action, U_t) of paper 002 Algorithm 1 line 10; R = 16 (§4.6).

  A fixed-size ring: :func:`add` writes row ``index mod R``. Rows are never cleared: after an update at
  ``index = kR`` the next R rounds overwrite them all before the next update reads them.
  """
  obs: jax.Array  # [R, D] states s_t
  action: jax.Array  # [R, N] sampled Gaussian logits (not the projected π_t; see the module docstring)
  log_prob: jax.Array  # [R] log π_φold(action | s_t) at collection time
  value: jax.Array  # [R] V_ψold(s_t) at collection time
  reward: jax.Array  # [R] U_t (paper 002 eq. 11, standardized by the caller)
  done: jax.Array  # [R] 1.0 if s_{t+1} starts a new episode; all 0 in FBS-FL (one episode per run)
  index: jax.Array  # [] int32, transitions written so far


def init_buffer(obs_dim: int, num_clients: int, rollout: int = 16) -> RolloutBuffer:
  """An empty :class:`RolloutBuffer` of ``rollout`` rows (paper 002 §4.6: 16)."""
  zeros = lambda *shape: jnp.zeros(shape, jnp.float32)
  return RolloutBuffer(obs=zeros(rollout, obs_dim), action=zeros(rollout, num_clients), log_prob=zeros(rollout),
                       value=zeros(rollout), reward=zeros(rollout), done=zeros(rollout),
                       index=jnp.zeros((), jnp.int32))


def add(buffer: RolloutBuffer, obs, action, log_prob, value, reward, done=0.0) -> RolloutBuffer:
  """Write one transition at row ``index mod R`` and advance ``index`` (paper 002 Algorithm 1 line 10)."""
  row = buffer.index % buffer.reward.shape[0]
  put = lambda column, x: column.at[row].set(jnp.asarray(x, column.dtype))
  return buffer.replace(obs=put(buffer.obs, obs), action=put(buffer.action, action),
                        log_prob=put(buffer.log_prob, log_prob), value=put(buffer.value, value),
                        reward=put(buffer.reward, reward), done=put(buffer.done, done), index=buffer.index + 1)


# --- advantages ----------------------------------------------------------------------------------

def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma=0.99, lam=0.95):
  """Generalized advantage estimation over one rollout (Schulman et al. 2017 eqs. 11–12; paper 002 §4.6 λ, γ).

  δ_t = r_t + γ (1 − d_t) V(s_{t+1}) − V(s_t),  Â_t = δ_t + γλ (1 − d_t) Â_{t+1},  with V(s_{R}) = ``last_value``,
  computed by a reverse ``lax.scan`` (PureJaxRL's ``_calculate_gae``). ``d_t = 1`` means s_{t+1} starts a new
  episode, so neither its value nor later advantages leak back. FBS-FL passes d = 0 and bootstraps with
  V(s_{t+1}) of the state after the rollout's last round (one episode per run; the module docstring).

  Args:
    rewards, values, dones: ``[R]``.
    last_value: ``[]`` V of the state that follows the last transition.
    gamma, lam: discount and GAE λ.

  Returns:
    ``(advantages [R], returns [R])`` with returns = advantages + values, the critic's regression targets.
  """
  def backward(carry, step):
    next_advantage, next_value = carry
    reward, value, done = step
    not_done = 1.0 - done
    delta = reward + gamma * not_done * next_value - value
    advantage = delta + gamma * lam * not_done * next_advantage
    return (advantage, value), advantage

  init = (jnp.zeros_like(last_value), last_value)
  _, advantages = jax.lax.scan(backward, init, (rewards, values, dones), reverse=True)
  return advantages, advantages + values


# --- loss ----------------------------------------------------------------------------------------

@flax.struct.dataclass
class PPOBatch:
  """One minibatch of a rollout, with its advantages and value targets (PureJaxRL's ``(traj, adv, targets)``)."""
  obs: jax.Array  # [B, D]
  action: jax.Array  # [B, N] Gaussian logits
  log_prob: jax.Array  # [B] log-density under the collecting policy
  value: jax.Array  # [B] critic's prediction at collection time
  advantage: jax.Array  # [B] GAE, normalized over the whole rollout (not per minibatch; module docstring)
  target: jax.Array  # [B] GAE returns


@flax.struct.dataclass
class LossInfo:
  """Diagnostics of a PPO update, each the mean over its epochs × minibatches (zeros when no update ran)."""
  total: jax.Array  # [] the minimized objective
  actor: jax.Array  # [] −L^CLIP
  value: jax.Array  # [] value loss (before vf_coef)
  entropy: jax.Array  # [] mean entropy of π_φ(·|s)
  approx_kl: jax.Array  # [] mean of (ratio − 1) − log ratio (Schulman's k3 estimator of KL(old ‖ new))
  clip_fraction: jax.Array  # [] fraction of samples with |ratio − 1| > ε
  updated: jax.Array  # [] 1.0 if an update ran this round (see maybe_update)

  @classmethod
  def zeros(cls) -> "LossInfo":
    z = jnp.zeros((), jnp.float32)
    return cls(total=z, actor=z, value=z, entropy=z, approx_kl=z, clip_fraction=z, updated=z)


def clipped_surrogate(ratio: jax.Array, advantage: jax.Array, clip_eps) -> jax.Array:
  """−L^CLIP = −mean(min(r Â, clip(r, 1 − ε, 1 + ε) Â))  (Schulman et al. 2017 eq. 7; paper 002 Alg. 1 line 11)."""
  clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
  return -jnp.mean(jnp.minimum(ratio * advantage, clipped * advantage))


def value_loss(value: jax.Array, old_value: jax.Array, target: jax.Array, value_clip) -> jax.Array:
  """½ mean (V − V^targ)², or PureJaxRL's pessimistic clipped form when ``value_clip > 0``.

  Clipped: ½ mean max((V − V^targ)², (V_old + clip(V − V_old, −ε_v, ε_v) − V^targ)²). Off by default (this
  brief; the module docstring says why); Schulman et al. 2017 eq. 9 uses the plain squared error.
  """
  unclipped = jnp.square(value - target)
  eps = jnp.maximum(value_clip, 0.0)
  clipped = jnp.square(old_value + jnp.clip(value - old_value, -eps, eps) - target)
  return 0.5 * jnp.mean(jnp.where(value_clip > 0, jnp.maximum(unclipped, clipped), unclipped))


def ppo_loss(apply_fn: Callable, params, batch: PPOBatch, hyper: PPOHyper = PPOHyper()):
  """The minimized objective −L^CLIP + c_1 L^VF − c_2 S  (Schulman et al. 2017 eq. 9; paper 002 Alg. 1 line 11).

  The ratio r = exp(log π_φ(a|s) − log π_φold(a|s)) is over the Gaussian logits (this brief). Advantages are
  used as given: :func:`ppo_update` has already normalized them over the rollout.

  Args:
    apply_fn: ``ActorCritic(...).apply``.
    params: parameters being optimized.
    batch: a :class:`PPOBatch` of B samples.
    hyper: reads ``clip_eps``, ``value_clip``, ``vf_coef`` and ``ent_coef``.

  Returns:
    ``(total, LossInfo)`` (``LossInfo.updated`` is 1).
  """
  mean, log_std, value = apply_fn(params, batch.obs)
  dist = logit_distribution(mean, log_std)
  log_ratio = dist.log_prob(batch.action) - batch.log_prob
  ratio = jnp.exp(log_ratio)
  actor = clipped_surrogate(ratio, batch.advantage, hyper.clip_eps)
  critic = value_loss(value, batch.value, batch.target, hyper.value_clip)
  entropy = jnp.mean(dist.entropy())
  total = actor + hyper.vf_coef * critic - hyper.ent_coef * entropy
  info = LossInfo(total=total, actor=actor, value=critic, entropy=entropy,
                  approx_kl=jnp.mean(ratio - 1.0 - log_ratio),
                  clip_fraction=jnp.mean((jnp.abs(ratio - 1.0) > hyper.clip_eps).astype(jnp.float32)),
                  updated=jnp.ones((), jnp.float32))
  return total, info


# --- update --------------------------------------------------------------------------------------

def ppo_update(train_state: TrainState, buffer: RolloutBuffer, last_obs: jax.Array, key: jax.Array,
               hyper: PPOHyper = PPOHyper()):
  """One PPO update on a full rollout (paper 002 Algorithm 1 line 11 at every 16th round, §4.6; SPEC §4.2 step 9).

  1. V(``last_obs``) under the current (collecting) parameters bootstraps GAE (:func:`gae`, the buffer's dones).
  2. Advantages are normalized over the rollout's R samples: (Â − mean) / (std + 1e-8).
  3. ``hyper.epochs`` epochs (4); each draws a permutation of the R samples from its own key and cuts it into
     ``hyper.num_minibatches`` minibatches of R / num_minibatches samples — by default 4 minibatches of 4
     (the module docstring justifies it) — taking one clipped-gradient Adam step per minibatch.
  Epochs and minibatches are two nested ``lax.scan`` s (static lengths), as in PureJaxRL's ``_update_epoch``.

  Args:
    train_state: from :func:`init_train_state`.
    buffer: a :class:`RolloutBuffer` whose R rows were all written by the current parameters.
    last_obs: ``[D]`` s_{t+1}, the state after the rollout's last round.
    key: shuffling key.
    hyper: :class:`PPOHyper`.

  Returns:
    ``(train_state, LossInfo)``, the info averaged over all epochs × minibatches.
  """
  rollout = buffer.reward.shape[0]
  if rollout % hyper.num_minibatches:
    raise ValueError(f"rollout {rollout} is not divisible into {hyper.num_minibatches} minibatches")
  size = rollout // hyper.num_minibatches
  _, _, last_value = train_state.apply_fn(train_state.params, last_obs)
  advantage, target = gae(buffer.reward, buffer.value, buffer.done, last_value, hyper.gamma, hyper.gae_lambda)
  advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
  data = PPOBatch(obs=buffer.obs, action=buffer.action, log_prob=buffer.log_prob, value=buffer.value,
                  advantage=advantage, target=target)

  def minibatch_step(state: TrainState, batch: PPOBatch):
    loss_fn = lambda p: ppo_loss(state.apply_fn, p, batch, hyper)
    (_, info), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return state.apply_gradients(grads=grads), info

  def epoch(state: TrainState, epoch_key: jax.Array):
    order = jax.random.permutation(epoch_key, rollout)
    batches = jax.tree_util.tree_map(lambda x: x[order].reshape((hyper.num_minibatches, size) + x.shape[1:]), data)
    return jax.lax.scan(minibatch_step, state, batches)

  train_state, infos = jax.lax.scan(epoch, train_state, jax.random.split(key, hyper.epochs))
  return train_state, jax.tree_util.tree_map(jnp.mean, infos)


def maybe_update(t: jax.Array, train_state: TrainState, buffer: RolloutBuffer, last_obs: jax.Array, key: jax.Array,
                 hyper: PPOHyper = PPOHyper()):
  """Run :func:`ppo_update` iff a rollout has just completed, i.e. t > 0 and t mod R = 0 (paper 002 §4.6).

  For use inside the compiled round scan (SPEC §4.2 step 9): the choice is a ``lax.cond`` on the traced ``t``,
  never a host decision. ``t`` counts the transitions collected so far (``buffer.index`` after this round's
  :func:`add`), so updates run after rounds 16, 32, … and every rollout is on-policy. When no update is due the
  train state is returned as is (bitwise) with ``LossInfo.zeros()``. Under ``vmap`` (seed sweeps) ``lax.cond``
  becomes a select and both branches are computed; the results are the same.

  Args:
    t: ``[]`` int, transitions collected so far.
    train_state, buffer, last_obs, key, hyper: as :func:`ppo_update`.

  Returns:
    ``(train_state, LossInfo)``.
  """
  if buffer.reward.shape[0] != hyper.rollout:
    raise ValueError(f"buffer has {buffer.reward.shape[0]} rows but hyper.rollout is {hyper.rollout}")
  t = jnp.asarray(t, jnp.int32)
  due = (t > 0) & (t % hyper.rollout == 0)
  return jax.lax.cond(due, lambda s: ppo_update(s, buffer, last_obs, key, hyper), lambda s: (s, LossInfo.zeros()),
                      train_state)
