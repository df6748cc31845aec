"""Where a simulation's arrays live: one device, or sharded over several (SPEC §1 "Beyond one device").

The same program runs on 1 CPU, 1 GPU, several GPUs or several hosts. With D > 1
devices a one-axis :class:`jax.sharding.Mesh` named ``"d"`` is built and one
axis of the computation is split over it (GSPMD partitions the rest):

* ``"runs"`` — the leading seeds × grid-points axis, when it is at least as long
  as the client axis. The run count is padded to a multiple of D with copies of
  the last run, whose results are dropped.
* ``"clients"`` — the client axis of every per-client array (federation splits,
  size buckets, stacked models and beliefs), otherwise. Sharding constraints
  inside the program split it; XLA pads uneven shards (230 clients on 4 devices).

Across several hosts, call ``jax.distributed.initialize()`` first (the CLI's
``--distributed``); every process runs the same program on its own devices and
inputs are assembled with :func:`jax.make_array_from_callback`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from fedjax_sim.errors import ConfigError

AXIS = "d"


@dataclasses.dataclass(frozen=True)
class Placement:
  """How one method's runs are laid out over devices."""

  mesh: Optional[Mesh] = None  # None: one device, no sharding
  axis: str = "none"  # "none", "runs" or "clients"

  @property
  def num_devices(self) -> int:
    return 1 if self.mesh is None else self.mesh.devices.size

  def padded_runs(self, runs: int) -> int:
    """Runs after padding to a multiple of the device count (``"runs"`` placement only)."""
    if self.axis != "runs":
      return runs
    d = self.num_devices
    return -(-runs // d) * d

  def _sharding(self, spec) -> NamedSharding:
    return NamedSharding(self.mesh, spec)

  def put_runs(self, tree):
    """Places inputs with a leading run axis (keys, swept hyperparameters)."""
    if self.mesh is None:
      return tree
    spec = P(AXIS) if self.axis == "runs" else P()
    return jax.tree_util.tree_map(lambda a: _global_array(np.asarray(a) if not is_key(a) else a,
                                                          self._sharding(spec)), tree)

  def put_replicated(self, tree):
    """Places inputs every device needs whole (the federation, shared hyperparameters)."""
    if self.mesh is None:
      return tree
    return jax.tree_util.tree_map(lambda a: _global_array(a, self._sharding(P())), tree)

  def constrain_federation(self, federation):
    """Inside the program: splits every per-client array of the federation over the devices.

    By leading axis, not by field name (issue 10): each bucket's arrays on their client axis, and every other
    array whose leading axis is the federation's C. The flat row stores (train rows, evaluation rows, a shared
    test set) are indexed by row, not by client: they stay replicated.
    """
    if self.axis != "clients":
      return federation
    c = federation.num_clients
    shard0 = lambda a: jax.lax.with_sharding_constraint(a, self._sharding(P(AXIS)))  # noqa: E731
    by_client = lambda a: shard0(a) if a.ndim >= 1 and a.shape[0] == c else a  # noqa: E731
    flat = ("rows", "shared_test", "val_rows", "test_rows")  # row-indexed stores, not client-indexed
    rest = jax.tree_util.tree_map(by_client, federation.replace(buckets=(), **{f: None for f in flat}))
    return rest.replace(buckets=tuple(jax.tree_util.tree_map(shard0, b) for b in federation.buckets),
                        **{f: getattr(federation, f) for f in flat})

  def constrain_carry(self, carry, num_clients: int):
    """Inside the program: the run axis, or the client axis of the state's per-client leaves."""
    if self.axis == "none":
      return carry
    if self.axis == "runs":
      return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, self._sharding(P(AXIS))), carry)
    spec = self._sharding(P(None, AXIS))
    state = jax.tree_util.tree_map(
        lambda a: jax.lax.with_sharding_constraint(a, spec) if a.ndim >= 2 and a.shape[1] == num_clients else a,
        carry.state)
    return carry.replace(state=state)


def is_key(a) -> bool:
  """Whether ``a`` is (or describes) a typed PRNG key array (``jax.random.key``), whose data needs wrapping."""
  return hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)


def _global_array(a, sharding: NamedSharding):
  """A global :class:`jax.Array` with ``sharding`` from a host value every process holds whole."""
  if is_key(a):
    data = np.asarray(jax.random.key_data(a))
    impl = jax.random.key_impl(a)
    arr = jax.make_array_from_callback(data.shape, _data_sharding(sharding, data.ndim - a.ndim), lambda i: data[i])
    return jax.random.wrap_key_data(arr, impl=impl)
  a = np.asarray(a)
  return jax.make_array_from_callback(a.shape, sharding, lambda i: a[i])


def _data_sharding(sharding: NamedSharding, extra_dims: int) -> NamedSharding:
  """The sharding of a key array's raw data (its trailing key-data dims replicated)."""
  spec = tuple(sharding.spec) + (None,) * extra_dims
  return NamedSharding(sharding.mesh, P(*spec))


def choose_axis(runs: int, clients: int) -> str:
  """The longer of the run and client axes (ties: runs, which needs no communication)."""
  return "runs" if runs >= clients else "clients"


def make_placement(runs: int, clients: int, devices: Optional[int] = None) -> Placement:
  """A placement over the first ``devices`` visible devices (all of them when None).

  Raises:
    ConfigError: ``devices`` is not in [1, number of visible devices].
  """
  available = jax.devices()
  n = len(available) if devices is None else devices
  if not 1 <= n <= len(available):
    raise ConfigError(f"--devices must be in [1, {len(available)}] (the visible {available[0].platform} "
                      f"devices), got {devices}")
  if n == 1:
    return Placement()
  mesh = Mesh(np.array(available[:n]), (AXIS,))
  return Placement(mesh=mesh, axis=choose_axis(runs, clients))
