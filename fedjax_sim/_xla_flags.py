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

So each setting goes where it works. The scheduler is switched off process-wide, through ``XLA_FLAGS`` before
JAX's backend starts, for an experiment that trains the recurrent model (:func:`apply_for`, called by the CLI
after it reads the config; as a per-program compile option the LSTM still hung, 1 of 1). A method family's own
compile options (``MethodSpec.cpu_options``: FBS-FL's single-threaded Eigen, which does work per program, 3 of
3) go to that family's programs (:func:`program_options`). A user's own ``XLA_FLAGS`` setting of an option wins
everywhere. Not reduced to a standalone reproducer for an upstream report.
"""
from __future__ import annotations

import os
from typing import Optional

SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"
"""The XLA:CPU debug option both deadlocks turn on (module docstring)."""

RECURRENT_MODELS = ("char_lstm",)
"""``learner.model`` values whose multi-seed programs deadlock with the concurrency-optimized scheduler on."""


def apply_for(config, environ=os.environ) -> str:
  """Appends ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to ``XLA_FLAGS`` when ``config`` trains a
  recurrent model and the user's flags do not name the scheduler (module docstring); call it before JAX's backend
  starts (it has no effect after). Returns the new ``XLA_FLAGS``."""
  flags = environ.get("XLA_FLAGS", "")
  if getattr(getattr(config, "learner", None), "model", None) in RECURRENT_MODELS and SCHEDULER not in flags:
    flags = f"{flags} --{SCHEDULER}=false".strip()
    environ["XLA_FLAGS"] = flags
  return flags


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
