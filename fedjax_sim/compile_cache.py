"""The persistent compilation cache (issue 11 item 2): a second run of the same experiment loads its compiled
programs from disk instead of compiling them again.

It is JAX's own cache (``jax_compilation_cache_dir``): an entry is keyed by the lowered program, the compile
options, the backend and the jax/jaxlib versions, so a changed config, shape, method, flag or library version
simply misses, and a hit loads the very executable the first run compiled (results bitwise equal; tested).

Where: ``$FEDJAX_SIM_COMPILE_CACHE`` when it names a folder, else ``$XDG_CACHE_HOME/fedjax_sim/xla`` (by default
``~/.cache/fedjax_sim/xla``). Off: ``python -m fedjax_sim.run ... --no-compile-cache``, or
``FEDJAX_SIM_COMPILE_CACHE=0`` (also ``off``, ``false``, ``no``). The folder grows with every new program; it
is safe to delete at any time.

Only programs whose compile took at least :data:`MIN_COMPILE_SECONDS` are written (a simulation's program takes
seconds; the many tiny helper programs would only add files). A program with a host callback cannot be cached
by this JAX (jaxlib 0.10.2 refuses to write it), so with the cache on the progress bar is driven between chunks
of rounds instead of by a callback inside the scan (:mod:`fedjax_sim.execute`).
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

ENV = "FEDJAX_SIM_COMPILE_CACHE"
OFF = ("0", "off", "false", "no")
MIN_COMPILE_SECONDS = 0.5

_active: Optional[str] = None


def default_dir(environ: Mapping[str, str] = os.environ) -> str:
  """``$XDG_CACHE_HOME/fedjax_sim/xla``, the XDG default ``~/.cache`` when unset."""
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "fedjax_sim", "xla")


def resolve(disabled: bool = False, environ: Mapping[str, str] = os.environ) -> Optional[str]:
  """The cache folder to use, or None when the cache is off (``--no-compile-cache`` or the variable says so)."""
  value = environ.get(ENV, "").strip()
  if disabled or value.lower() in OFF:
    return None
  return os.path.abspath(os.path.expanduser(value)) if value else default_dir(environ)


def enable(path: Optional[str]) -> Optional[str]:
  """Points JAX's persistent cache at ``path`` (None: switches it off); returns the folder in use.

  Raises:
    ConfigError: the folder cannot be created or written (checked before anything compiles).
  """
  global _active
  import jax
  from jax.experimental.compilation_cache import compilation_cache
  if path is None:
    jax.config.update("jax_enable_compilation_cache", False)
    if _active is not None:
      compilation_cache.reset_cache()
    _active = None
    return None
  from fedjax_sim.errors import ConfigError
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise ConfigError(f"the compile cache folder {path} cannot be created ({e.strerror}); set {ENV} to a "
                      f"writable folder or pass --no-compile-cache") from None
  if not os.access(path, os.W_OK):
    raise ConfigError(f"the compile cache folder {path} is not writable; set {ENV} to a writable folder or pass "
                      f"--no-compile-cache")
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  if _active != path:
    compilation_cache.reset_cache()  # JAX decides once whether (and where) it caches; make it decide again
  _active = path
  return path


def active() -> Optional[str]:
  """The folder :func:`enable` set, or None (off, or never enabled: library use without the CLI)."""
  return _active
