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

So the options are per program, through its compile options (:func:`program_options`;
``jax.stages.Lowered.compile(compiler_options)``): the scheduler off for programs that hold the recurrent model,
and whatever a method family declares for itself (``MethodSpec.cpu_options``: FBS-FL's single-threaded Eigen). A
user's own ``XLA_FLAGS`` setting of an option wins everywhere. Not reduced to a standalone reproducer for an
upstream report.
"""
from __future__ import annotations

import os
from typing import Optional

SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"
"""The XLA:CPU debug option both deadlocks turn on (module docstring)."""

RECURRENT_MODELS = ("char_lstm",)
"""``learner.model`` values whose multi-seed programs deadlock with the concurrency-optimized scheduler on."""


def program_options(config, declared=None, backend: Optional[str] = None, environ=os.environ) -> dict:
  """The XLA compile options of one method's programs on the CPU backend (module docstring): the method family's
  ``declared`` options, and ``{SCHEDULER: False}`` for a recurrent model; an option the user's ``XLA_FLAGS``
  names is left to it. ``{}`` on other backends."""
  if backend is None:
    import jax
    backend = jax.default_backend()
  if backend != "cpu":
    return {}
  options = dict(declared or {})
  if getattr(getattr(config, "learner", None), "model", None) in RECURRENT_MODELS:
    options[SCHEDULER] = False
  user = environ.get("XLA_FLAGS", "")
  return {k: v for k, v in options.items() if k not in user}
