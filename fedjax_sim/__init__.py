"""fedjax_sim: a high-throughput federated-learning simulator in JAX.

Every client is stacked on a leading array axis, trained with ``vmap`` under
``jit``, and every algorithm's round is a pure state transition scanned with
``lax.scan``: a whole multi-round, multi-seed simulation is one XLA program.
See ``shared/SPEC.md`` (section numbers are cited as SPEC §N in docstrings).
"""

__version__ = "0.1.0"

from fedjax_sim import _threefry  # noqa: E402,F401  (threefry unrolled on CPU: compiles faster, same bits)
