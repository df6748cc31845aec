"""Checkpoints of long runs with orbax, and resuming them (issue 4 "Long runs").

A checkpointed run executes its rounds in chunks of ``checkpoint_every`` rounds
with one compiled chunk program, and after every chunk saves the complete
simulation state of the method in progress (:class:`~fedjax_sim.engine.simulate.Carry`:
models, optimizer and server states, beliefs, the per-round RNG keys, the
history so far, the fault record) for all its runs. Layout of the directory::

    DIR/run.json          the invocation (experiment, --set, --sweep, seeds, out, ...)
    DIR/done/METHOD.json  results of the methods already finished
    DIR/METHOD/STEP/      orbax checkpoint of METHOD after STEP rounds (the latest is kept)

``--resume DIR`` re-reads ``run.json``, skips the finished methods, restores the
latest step of the method in progress and runs the remaining chunks with the
same compiled programs, so its results are bitwise identical to a run that was
never interrupted. A chunk whose rounds hit a non-finite value is not saved: the
last checkpoint stays the last good state.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from fedjax_sim.engine.placement import is_key as _is_key
from fedjax_sim.errors import ConfigError

SCHEMA = 2
"""Checkpoint layout version; ``--resume`` refuses others. 2 (issue 9): WPFed's state gained θ_0,
DeFTA/ABPS-X/MOON changed rules, and finished methods' records carry summary.json schema 2."""

AFTER_SAVE_HOOK: Optional[Callable[[str, int], None]] = None
"""Test hook: called as ``hook(method, rounds_done)`` after every save (tests raise from it to kill a run)."""


class SimulatedKill(BaseException):
  """Raised by test hooks to stop a run as a kill would (not an error the CLI catches)."""


def _ocp():
  import orbax.checkpoint as ocp  # imported lazily: it is slow to import and only checkpointed runs need it
  return ocp


def _key_impl(a):
  """The PRNG implementation of a key array or of its abstract shape (the default one if unreadable)."""
  impl = getattr(a.dtype, "_impl", None)
  return impl if impl is not None else jax.random.key_impl(jax.random.key(0))


def _stored(a) -> jax.ShapeDtypeStruct:
  """The shape and dtype a leaf is saved with: a typed PRNG key's raw ``uint32`` data, else its own."""
  return jax.eval_shape(jax.random.key_data, a) if _is_key(a) else jax.ShapeDtypeStruct(a.shape, a.dtype)


def _is_empty(a) -> bool:
  """A leaf with no elements (e.g. iPFL's ``[C, 0]`` pFedGraph vectors under the other rules). Orbax refuses to
  save these, and they hold nothing: they are left out and rebuilt from the template's shape on restore."""
  return 0 in _stored(a).shape


def _to_saveable(carry) -> dict:
  """Leaves of ``carry`` by position (empty ones left out), typed PRNG keys as their raw ``uint32`` data."""
  leaves = jax.tree_util.tree_leaves(carry)
  return {f"{i:04d}": jax.random.key_data(a) if _is_key(a) else a for i, a in enumerate(leaves) if not _is_empty(a)}


def _abstract(template) -> dict:
  """Orbax restore targets for the non-empty leaves of ``template`` (a carry's shapes), on the default device."""
  sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  out = {}
  for i, a in enumerate(jax.tree_util.tree_leaves(template)):
    if not _is_empty(a):
      stored = _stored(a)
      out[f"{i:04d}"] = jax.ShapeDtypeStruct(stored.shape, stored.dtype, sharding=sharding)
  return out


class RunCheckpoints:
  """One run's checkpoint directory (see the module docstring)."""

  def __init__(self, directory: os.PathLike):
    self.dir = pathlib.Path(directory)

  # -- the invocation -------------------------------------------------------------------------------

  def write_manifest(self, invocation: dict) -> None:
    self.dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(self.dir / "run.json", json.dumps({"schema": SCHEMA, **invocation}, indent=1))

  def read_manifest(self) -> dict:
    path = self.dir / "run.json"
    if not path.is_file():
      raise ConfigError(f"--resume {self.dir}: no run.json there; it is not a checkpoint directory "
                        f"(one is written by a run with --checkpoint-every R)")
    try:
      manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
      raise ConfigError(f"--resume {self.dir}: run.json is not valid JSON ({e})") from None
    if manifest.get("schema") != SCHEMA:
      raise ConfigError(f"--resume {self.dir}: checkpoint schema {manifest.get('schema')!r}, expected {SCHEMA}")
    return manifest

  # -- finished methods -----------------------------------------------------------------------------

  def done(self, method: str) -> Optional[dict]:
    path = self.dir / "done" / f"{method}.json"
    return json.loads(path.read_text()) if path.is_file() else None

  def mark_done(self, method: str, record: dict) -> None:
    (self.dir / "done").mkdir(parents=True, exist_ok=True)
    _atomic_write(self.dir / "done" / f"{method}.json", json.dumps(record))

  # -- the method in progress -----------------------------------------------------------------------

  def _manager(self, method: str):
    ocp = _ocp()
    options = ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=False, create=True)
    return ocp.CheckpointManager((self.dir / method).resolve(), options=options)

  def latest_step(self, method: str) -> int:
    """Rounds completed in the latest checkpoint of ``method`` (0 if none)."""
    if not (self.dir / method).is_dir():
      return 0
    step = self._manager(method).latest_step()
    return 0 if step is None else int(step)

  def save(self, method: str, rounds_done: int, carry) -> None:
    """Saves ``carry`` after ``rounds_done`` rounds (synchronously: it is on disk when this returns)."""
    ocp = _ocp()
    manager = self._manager(method)
    manager.save(rounds_done, args=ocp.args.StandardSave(_to_saveable(carry)))
    manager.wait_until_finished()
    if AFTER_SAVE_HOOK is not None:
      AFTER_SAVE_HOOK(method, rounds_done)

  def restore(self, method: str, rounds_done: int, template):
    """The carry saved after ``rounds_done`` rounds, with the tree structure of ``template``."""
    ocp = _ocp()
    saved = self._manager(method).restore(rounds_done, args=ocp.args.StandardRestore(_abstract(template)))
    leaves, treedef = jax.tree_util.tree_flatten(template)
    out = []
    for i, a in enumerate(leaves):
      value = jnp.zeros(_stored(a).shape, _stored(a).dtype) if _is_empty(a) else saved[f"{i:04d}"]
      out.append(jax.random.wrap_key_data(value, impl=_key_impl(a)) if _is_key(a) else value)
    return jax.tree_util.tree_unflatten(treedef, out)


def _atomic_write(path: pathlib.Path, text: str) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  os.replace(tmp, path)
