"""XLA:CPU settings fedjax_sim needs, applied when the package is imported (before JAX's backend starts).

**The concurrency-optimized scheduler hangs some programs (jaxlib 0.10.2, CPU).** With XLA:CPU's default
``--xla_cpu_enable_concurrency_optimized_scheduler=true``, the character LSTM's FedAvg with two or more seeds
vmapped (``shakespeare_small --seeds 11,22``) never finished: 0 % CPU, every Eigen and XLA worker parked waiting
for work, the main thread in ``block_until_ready`` (gdb). ``--xla_cpu_multi_thread_eigen=false`` and
``--xla_cpu_use_xnnpack=false`` and ``--xla_cpu_use_thunk_runtime=false`` each still hung; turning this scheduler
off alone fixed it, and costs nothing measurable (LeNet's local step: 12.9 ms with it, 13.2 ms without, one
client on 2 cores). So fedjax_sim turns it off unless the user's ``XLA_FLAGS`` already sets it (docs/PLATFORM.md,
finding 5). It only affects the CPU backend.
"""
from __future__ import annotations

import os

CPU_FLAGS = ("--xla_cpu_enable_concurrency_optimized_scheduler=false",)


def apply(environ=os.environ) -> str:
  """Appends each of :data:`CPU_FLAGS` whose name ``XLA_FLAGS`` does not mention yet; returns the new value."""
  flags = environ.get("XLA_FLAGS", "")
  for flag in CPU_FLAGS:
    name = flag.split("=", 1)[0]
    if name not in flags:
      flags = f"{flags} {flag}".strip()
  environ["XLA_FLAGS"] = flags
  return flags
