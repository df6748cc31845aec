"""Threefry's CPU lowering, unrolled: the same random bits, compiled in far less time (issue 11 item 1).

JAX lowers its ``threefry2x32`` hash (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3": 20
rounds of add-rotate-xor on two 32-bit words, key injections every 4) in two forms: on GPU and TPU unrolled, as
one out-of-line function; on CPU as a *rolled* loop, a ``while`` of 5 iterations of 4 rounds each
(``jax/_src/random/threefry2x32.py``, ``use_rolled_loops=True`` for ``platform='cpu'``). Every random call site
(each layer's initializer, each permutation, each Bernoulli draw) is then a while loop of its own shape, and
XLA:CPU compiles each while loop's condition and body as separate computations around a loop it cannot fuse.

Finding (session 8, CPU AMD EPYC 2 cores, jax 0.10.2, 230 centers, 5 seeds, 10 rounds, default XLA flags, two
alternating pairs with an experiment on the same cores): the unrolled form cuts XLA's compile of FedAvg from
29.3 / 24.7 s to 17.1 s and of ABPS-X from 63.7 / 55.8 s to 37.2 s; FedAvg's while loops 21 → 6, ABPS-X's 21 → 4;
every output of both programs bitwise the same (a digest of all result leaves), and rounds no slower. The hash's
arithmetic is the same in both forms, only its control flow differs, so no random stream and no result changes.
``benchmarks/RESULTS.md`` ("Compile time") has the figures.

So on import fedjax_sim registers JAX's own unrolled rule for CPU too. ``FEDJAX_SIM_THREEFRY=rolled`` keeps
JAX's default (for before/after measurements). The rule is a private JAX name: where a JAX version lacks it,
nothing is registered and JAX's default stays.
"""
from __future__ import annotations

import os

ENV = "FEDJAX_SIM_THREEFRY"
"""Environment variable: ``rolled`` keeps JAX's rolled CPU lowering; anything else (or unset) unrolls it."""


def unroll_on_cpu(environ=os.environ) -> bool:
  """Registers JAX's unrolled ``threefry2x32`` lowering for CPU (module docstring). Returns whether it did.

  Affects programs lowered after the call (a traced and cached program keeps its form)."""
  if environ.get(ENV, "").strip().lower() == "rolled":
    return False
  try:
    from jax._src.random import threefry2x32 as tf
    from jax.interpreters import mlir
  except ImportError:
    return False
  rule, primitive = getattr(tf, "_threefry2x32_lowering_rule", None), getattr(tf, "threefry2x32_p", None)
  if rule is None or primitive is None:
    return False
  mlir.register_lowering(primitive, rule, platform="cpu", inline=False)
  return True


UNROLLED = unroll_on_cpu()
"""Whether this process lowers threefry unrolled on CPU."""
