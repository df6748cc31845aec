"""Mean-field Gaussian Bayesian MLP (Bayes by backprop; Blundell et al. 2015) for the BNN+FL row.

Every weight has a Gaussian posterior N(μ, σ²) with σ = softplus(ρ), a standard
normal prior, and is sampled by reparameterization while training (one draw per
minibatch, with distrax). Evaluation uses the posterior means. The MLP shape is
the SPEC §3.1 one; dropout is not used (the weight noise regularizes instead).
"""
from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp

from fedjax_sim.models import Model

RHO_INIT = -5.0  # σ starts at softplus(−5) ≈ 0.0067


def _inverse_softplus(y):
  return y + jnp.log(-jnp.expm1(-y))


def sigma(rho):
  return jax.nn.softplus(rho)


def bayesian_mlp(deterministic: Model) -> Model:
  """Wraps a deterministic :class:`Model` (for its shapes and forward pass) into a Bayesian one.

  Params are ``{"mu": θ-tree, "rho": θ-tree}``.
  """

  def init(key):
    mu = deterministic.init(key)
    return {"mu": mu, "rho": jax.tree_util.tree_map(lambda a: jnp.full_like(a, RHO_INIT), mu)}

  def apply(params, x, train, rng):
    if not train:
      return deterministic.apply(params["mu"], x, False, None)
    leaves, treedef = jax.tree_util.tree_flatten(params["mu"])
    rhos = jax.tree_util.tree_leaves(params["rho"])
    keys = jax.random.split(rng, len(leaves))
    sampled = [distrax.Normal(m, sigma(r)).sample(seed=k) for m, r, k in zip(leaves, rhos, keys)]
    return deterministic.apply(jax.tree_util.tree_unflatten(treedef, sampled), x, False, None)

  return Model(init=init, apply=apply)


def kl_to_standard_normal(params) -> jax.Array:
  """KL(q ‖ N(0, 1)) summed over all weights, with distrax."""
  prior = distrax.Normal(0.0, 1.0)
  kls = jax.tree_util.tree_map(lambda m, r: jnp.sum(distrax.Normal(m, sigma(r)).kl_divergence(prior)),
                               params["mu"], params["rho"])
  return sum(jax.tree_util.tree_leaves(kls))


def moment_average(stacked, weights: jax.Array):
  """FedAvg of posterior moments (BNN+FL, Saile et al. 2024): μ = Σ w_i μ_i, σ² = Σ w_i σ_i²."""
  w = weights.astype(jnp.float32) / jnp.sum(weights)
  mu = jax.tree_util.tree_map(lambda a: jnp.tensordot(w, a, axes=1), stacked["mu"])
  var = jax.tree_util.tree_map(lambda r: jnp.tensordot(w, sigma(r) ** 2, axes=1), stacked["rho"])
  rho = jax.tree_util.tree_map(lambda v: _inverse_softplus(jnp.sqrt(jnp.maximum(v, 1e-20))), var)
  return {"mu": mu, "rho": rho}
