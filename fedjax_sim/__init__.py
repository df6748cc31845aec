"""fedjax_sim: a high-throughput federated-learning simulator in JAX.

Every client is stacked on a leading array axis, trained with ``vmap`` under
``jit``, and every algorithm's round is a pure state transition scanned with
``lax.scan``: a whole multi-round, multi-seed simulation is one XLA program.
See ``shared/SPEC.md`` (section numbers are cited as SPEC §N in docstrings).
"""

__version__ = "0.1.0"

from fedjax_sim import _xla_flags  # noqa: E402
_xla_flags.apply()  # XLA:CPU's concurrency-optimized scheduler off, before JAX's backend starts (multi-seed hangs)
from fedjax_sim import _threefry  # noqa: E402,F401  (threefry unrolled on CPU: compiles faster, same bits)
