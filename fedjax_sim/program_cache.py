"""Traced programs on disk (issue 11 item 2): a second run of the same experiment skips Python's tracing too.

XLA's persistent cache (:mod:`fedjax_sim.compile_cache`) saves the compile, but a hit still costs the trace and
lowering of the whole simulation (2–3 s for ABPS-X on 2 CPU cores, the larger part of a warm start). This cache
saves that as well: a program is exported once (``jax.export``: its StableHLO, input and output types) and
stored; a later run with the same key deserializes it and lowers only a call of it, which XLA's cache then
serves. Both runs compile the very same exported module, so the numbers are bitwise the same with or without
this cache (tested).

The key is everything the trace can depend on: the bytes of every ``fedjax_sim`` source file, the versions of
jax, jaxlib, flax, optax, chex, distrax and numpy, the JAX settings and ``XLA_FLAGS`` that change a program,
the backend and its devices, the method's name, config, sweep and chunking, the host federation's every array
(its client sizes decide the training plans), and the arguments' tree structure, shapes, dtypes and shardings.
Decision: code changed while the process runs (a monkeypatch) is not in the key, so the suite switches this cache
off (``FEDJAX_SIM_PROGRAM_CACHE=0``) except where it tests it, and so should library users who patch the package.

Used only for programs that can be exported: one device (a sharded run traces as before) and no host callback
(with the compile cache on, progress moves between chunks and the program holds none). Anything that cannot be
exported, pickled or read back compiles the usual way: this cache can only make a start faster, never fail it.
Files live in ``programs/`` under the compile cache folder; delete it at any time.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import tempfile
from typing import Any, Callable, Optional

import jax
import numpy as np

ENV = "FEDJAX_SIM_PROGRAM_CACHE"
FORMAT = 1  # bump when the stored layout changes

_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "chex", "distrax", "numpy")
_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_threefry_partitionable", "jax_default_prng_impl",
             "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion", "jax_platforms")


def folder() -> Optional[str]:
  """Where programs are stored: ``programs/`` under the active compile cache, or None (the compile cache is off,
  or ``FEDJAX_SIM_PROGRAM_CACHE`` is 0/off/false/no)."""
  from fedjax_sim import compile_cache
  root = compile_cache.active()
  if root is None or os.environ.get(ENV, "").strip().lower() in compile_cache.OFF:
    return None
  return os.path.join(root, "programs")


@functools.lru_cache(maxsize=1)
def _environment_digest() -> bytes:
  """The source files, library versions, JAX settings, XLA flags and devices: what every key shares."""
  import importlib.metadata
  h = hashlib.sha256(f"format {FORMAT}\n".encode())
  root = os.path.dirname(os.path.abspath(__file__))
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in sorted(filenames):
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        h.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as f:
          h.update(hashlib.sha256(f.read()).digest())
  for lib in _LIBRARIES:
    try:
      version = importlib.metadata.version(lib)
    except importlib.metadata.PackageNotFoundError:
      version = "-"
    h.update(f"{lib} {version}\n".encode())
  for name in _SETTINGS:
    h.update(f"{name}={getattr(jax.config, name, None)!r}\n".encode())
  h.update(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}\npython {sys.version_info[:2]}\n".encode())
  from fedjax_sim import _threefry
  h.update(f"threefry unrolled on cpu: {_threefry.UNROLLED}\n".encode())  # the traced program's form
  h.update(repr([(d.platform, d.device_kind, d.id) for d in jax.devices()]).encode())
  return h.digest()


def array_digest(tree) -> str:
  """A digest of every array in ``tree`` (shapes, dtypes and bytes) and of its structure."""
  h = hashlib.sha256()
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  h.update(repr(treedef).encode())
  for leaf in leaves:
    a = np.ascontiguousarray(np.asarray(leaf))
    h.update(f"{a.shape} {a.dtype}\n".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def _leaf_type(leaf) -> str:
  sharding = getattr(leaf, "sharding", None)
  return f"{np.shape(leaf)} {getattr(leaf, 'dtype', type(leaf))} {sharding!r}"


class CachedProgram:
  """A compiled exported program, called like the jitted function it replaces (pytrees in, pytrees out)."""

  def __init__(self, compiled, in_tree, out_tree, out_avals, hit: bool):
    self._compiled = compiled
    self._in_tree = in_tree
    self._out_tree = out_tree
    self.hit = hit  # loaded from disk (True) or traced by this process (False)
    shardings = jax.tree_util.tree_unflatten(out_tree, list(compiled.output_shardings))
    avals = jax.tree_util.tree_unflatten(out_tree, list(out_avals))
    self.output_shardings = shardings
    # The outputs' shapes, dtypes and shardings (a checkpointed or chunked run's carry template).
    self.out_template = jax.tree_util.tree_map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), avals, shardings)

  def __call__(self, *args):
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    if in_tree != self._in_tree:
      raise TypeError(f"a cached program was called with arguments of another structure: {in_tree} "
                      f"instead of {self._in_tree}")
    return jax.tree_util.tree_unflatten(self._out_tree, self._compiled(*leaves))


def compile_program(body: Callable, args: tuple, key_parts: tuple, where: Optional[str],
                    compile_options: Optional[dict] = None) -> Optional[CachedProgram]:
  """``body(*args)`` compiled through the program cache in ``where``, or None when it cannot be (the caller then
  compiles ``jax.jit(body)`` itself).

  Args:
    body: the traced Python function (not jitted), e.g. a :class:`~fedjax_sim.engine.simulate.Program`'s
      ``_run``; it is traced only on a miss.
    args: its arguments (device arrays: their shardings are part of the key).
    key_parts: strings naming what else decides the trace (the method, its config, the federation's digest).
    where: the cache folder (:func:`folder`), or None (off: returns None).
    compile_options: XLA compile options of the program (:func:`fedjax_sim._xla_flags.program_options`); the
      caller puts them in ``key_parts`` too.
  """
  if where is None:
    return None
  from jax import export
  leaves, in_tree = jax.tree_util.tree_flatten(args)
  try:
    in_tree_bytes = pickle.dumps(in_tree)
  except Exception:  # a static field that cannot be pickled: no key
    return None
  h = hashlib.sha256(_environment_digest())
  for part in key_parts:
    h.update(b"\0" + str(part).encode())
  h.update(in_tree_bytes)
  h.update(repr([_leaf_type(leaf) for leaf in leaves]).encode())
  path = os.path.join(where, h.hexdigest() + ".program")
  stored = _load(path)
  hit = stored is not None
  if stored is None:
    out_tree = []

    def flat(*flat_args):
      out = body(*jax.tree_util.tree_unflatten(in_tree, flat_args))
      out_leaves, treedef = jax.tree_util.tree_flatten(out)
      out_tree.append(treedef)
      return out_leaves

    try:
      exported = export.export(jax.jit(flat))(*leaves)
      stored = (bytes(exported.serialize()), out_tree[0])
      _store(path, stored)
    except Exception:  # not exportable (a callback, several devices) or not writable: compile the usual way
      return None
  blob, out_tree = stored
  try:
    exported = export.deserialize(bytearray(blob))
    compiled = jax.jit(exported.call).lower(*leaves).compile(compile_options or None)
  except Exception:
    if not hit:
      return None
    _discard(path)  # unreadable or stale: trace afresh
    return compile_program(body, args, key_parts, where)
  return CachedProgram(compiled, in_tree, out_tree, exported.out_avals, hit)


def _load(path: str) -> Optional[tuple]:
  try:
    with open(path, "rb") as f:
      blob, out_tree = pickle.load(f)
    return blob, out_tree
  except FileNotFoundError:
    return None
  except Exception:  # a truncated or foreign file
    _discard(path)
    return None


def _store(path: str, stored: tuple) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      pickle.dump(stored, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
  except BaseException:
    _discard(tmp)
    raise


def _discard(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass


def describe(program: Any) -> str:
  """``hit``, ``miss`` or ``off`` for a compiled program (summary.json's ``timing.program_cache``)."""
  if isinstance(program, CachedProgram):
    return "hit" if program.hit else "miss"
  return "off"
