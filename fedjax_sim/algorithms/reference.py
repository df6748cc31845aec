"""The reference rows of paper 000 Table 1 (SPEC §3.3): Local-only and Centralized."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.spec import MethodSpec
from fedjax_sim.algorithms.base import (Algorithm, RoundMetrics, broadcast_clients, nonfinite_client,
                                        require_federation)
from fedjax_sim.data.federation import pooled
from fedjax_sim.engine.local import local_train
from fedjax_sim.models import Model


@struct.dataclass
class LocalState:
  params: object  # [C, ...] each center's own model


@struct.dataclass
class CentralState:
  params: object  # one model trained on the pooled train splits


def _metrics(res, bytes_=0.0, rest=1.0, partners=0.0) -> RoundMetrics:
  return RoundMetrics(bytes=jnp.asarray(bytes_, jnp.float32), train_loss=jnp.mean(res.loss),
                      rest_fraction=jnp.asarray(rest, jnp.float32),
                      mean_partners=jnp.asarray(partners, jnp.float32), active=jnp.asarray(1.0),
                      nonfinite_client=nonfinite_client(res.loss, res.params))


def local_only(model: Model, client_update) -> Algorithm:
  """Local-only (SPEC §3.3): each center trains alone from a common initialization; 0 bytes."""

  def init(key, federation, hyper):
    return LocalState(params=broadcast_clients(model.init(key), federation.num_clients))

  def round_fn(key, state, federation, hyper, t):
    res = local_train(client_update, key, state.params, federation, hyper=hyper, t=t)
    return LocalState(params=res.params), _metrics(res)

  return Algorithm(name="local", init=init, round=round_fn, deployed=lambda s: (s.params, True))


def centralized(model: Model, client_update) -> Algorithm:
  """Centralized (SPEC §3.3): one MLP trained on the pooled train splits with the same
  local protocol per round (2 epochs, batch 128), evaluated on every center's test
  split. An upper bound, not a federated method: it sends no models.
  """

  def init(key, federation, hyper):
    return CentralState(params=model.init(key))

  def round_fn(key, state, federation, hyper, t):
    res = local_train(client_update, key, state.params, federation, hyper=hyper, t=t,
                      params_stacked=False)
    params = jax.tree_util.tree_map(lambda a: a[0], res.params)
    return CentralState(params=params), _metrics(res, rest=0.0)

  return Algorithm(name="centralized", init=init, round=round_fn, deployed=lambda s: (s.params, False),
                   prepare=pooled, federated=False)


def check_federation(name: str, config, num_clients: int) -> None:
  """Refuses a federation too small for Local-only or Centralized: they need at least 2 centers.

  Decision (issue 9): a federation of one center is not a federation; its row
  would report one center's AUROC, from a handful of test rows, as the mean over
  centers.

  Raises:
    ConfigError: ``num_clients`` < 2.
  """
  del config  # no setting changes the minimum
  require_federation(name, num_clients)


SPECS = (MethodSpec(methods={"local": {}}, build=lambda ctx: local_only(ctx.model, ctx.client_update),
                    check_federation=check_federation),
         MethodSpec(methods={"centralized": {}}, build=lambda ctx: centralized(ctx.model, ctx.client_update),
                    check_federation=check_federation))
