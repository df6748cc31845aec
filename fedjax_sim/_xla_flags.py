"""XLA:CPU settings fedjax_sim needs: per compiled program, never process-wide, never overriding the user.

**Two deadlocks of XLA:CPU's schedulers, in opposite directions (jaxlib 0.10.2, CPU).** Both show the same way:
the compiled program stops making progress, 0 % CPU, every Eigen and XLA worker parked in ``WaitForWork``, the
main thread in ``block_until_ready`` (gdb).

* With XLA's default ``xla_cpu_enable_concurrency_optimized_scheduler = true``, the character LSTM's FedAvg with
  two or more seeds vmapped (``shakespeare_small --seeds 11,22``) never finished; turning that scheduler off alone
  fixed it (``--xla_cpu_multi_thread_eigen=false``, ``--xla_cpu_use_xnnpack=false`` and
  ``--xla_cpu_use_thunk_runtime=false`` each still hung), at no measurable cost (docs/PLATFORM.md, finding 5).
* With that scheduler *off*, FBS-FL with five seeds vmapped (``fbsfl --rounds 3`` on a 20-center synthetic
  federation, an MLP) hung in 6 of 8 runs (3 and 4 seeds passed), and with it *on* in 1 of 5; with it on and
  Eigen's intra-op threads off (``xla_cpu_multi_thread_eigen = false``, the workaround PyAutoFit found for XLA:CPU
  vmap graphs, their issue #1528) it passed 4 of 4 (docs/FBSFL.md §4). Turning the scheduler off for every program,
  as session 3 did through ``XLA_FLAGS`` on import, traded one hang for the other.

* Session 14 (the code of issue 11, whose programs differ from session 6's): with the scheduler *on* and Eigen's
  intra-op threads off per program, as FBS-FL then declared, ``python -m fedjax_sim.run fbsfl --rounds 2`` (five
  seeds, Fashion-MNIST, LeNet) hung in 7 of 7 runs and the 20-center reproducer above in 5 of 5, and the five-seed
  ``fbsfl_table2`` hung in its first program. With the scheduler *off* through ``XLA_FLAGS``: 6 of 6 Fashion-MNIST
  runs and 4 of 4 small ones finished, with Eigen's threads off or on. Passed to ``Compiled`` as a per-program
  option, the scheduler setting does not take effect (the same runs hung 5 of 5), as with the LSTM before.

So the scheduler is switched off process-wide, through ``XLA_FLAGS`` before JAX's backend starts, for every
fedjax_sim process (:func:`apply`, called on ``import fedjax_sim`` and again by the CLI): every hang seen so far
had it on. It changes the order XLA:CPU runs a program's instructions in, not what they compute: ABPS-X's
5-seed × 10-round per-seed JSON is identical with it on and off, and its run took 31.7–33.2 s on and
29.8–32.3 s off (2 alternating pairs, CPU AMD EPYC, 2 cores). A method family's own compile options
(``MethodSpec.cpu_options``: FBS-FL's single-threaded Eigen, kept as the second guard of its five-seed
programs) go to that family's programs (:func:`program_options`). A user's own ``XLA_FLAGS`` setting of an
option wins everywhere. Not reduced to a standalone reproducer for an upstream report.
"""
from __future__ import annotations

import os
from typing import Optional

SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"
"""The XLA:CPU debug option both deadlocks turn on (module docstring)."""


def apply(environ=os.environ) -> str:
  """Appends ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to ``XLA_FLAGS`` unless the user's flags
  name the scheduler (module docstring). Effective only before JAX's backend starts; if it has already started
  on the CPU without the setting, warns once that multi-seed programs may hang. Returns the new ``XLA_FLAGS``."""
  flags = environ.get("XLA_FLAGS", "")
  if SCHEDULER in flags:
    return flags
  flags = f"{flags} --{SCHEDULER}=false".strip()
  environ["XLA_FLAGS"] = flags
  if environ is os.environ and _cpu_backend_started():
    import warnings
    warnings.warn(f"fedjax_sim was imported after JAX started its CPU backend, so --{SCHEDULER}=false cannot take "
                  "effect and multi-seed programs may hang (fedjax_sim/_xla_flags.py); import fedjax_sim first or "
                  "set it in XLA_FLAGS", RuntimeWarning, stacklevel=3)
  return flags


def _cpu_backend_started() -> bool:
  import sys
  if "jax" not in sys.modules:
    return False
  from jax._src import xla_bridge
  return bool(xla_bridge.backends_are_initialized()) and xla_bridge.default_backend() == "cpu"


def program_options(declared=None, backend: Optional[str] = None, environ=os.environ) -> dict:
  """The XLA compile options of one method family's programs on the CPU backend: its ``declared`` options
  (``MethodSpec.cpu_options``) except those the user's ``XLA_FLAGS`` names; ``{}`` on other backends."""
  if backend is None:
    import jax
    backend = jax.default_backend()
  if backend != "cpu":
    return {}
  user = environ.get("XLA_FLAGS", "")
  return {k: v for k, v in dict(declared or {}).items() if k not in user}
