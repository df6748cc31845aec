"""Running an experiment in three stages (SPEC §6; issue 10 item 7), each its own module:

* :mod:`fedjax_sim.build` — data → federation, and the checks made before anything compiles;
* :mod:`fedjax_sim.execute` — one compiled program per method for all seeds × grid points;
* :mod:`fedjax_sim.summarize` — per-seed records and summary entries, generic over tasks and methods.

This module re-exports their public names, so ``from fedjax_sim.experiment import run_methods`` keeps working.
"""
from fedjax_sim.build import (build_federation, check_runnable, load_cohorts, majority_rate,  # noqa: F401
                              repartition, seed_keys)
from fedjax_sim.errors import NumericalFault  # noqa: F401
from fedjax_sim.execute import (CompiledMethod, MethodFault, MethodRun, PreparedMethod, RunOptions,  # noqa: F401
                                check_faults, default_compile_workers, prepare_method, run_method, run_methods)
from fedjax_sim.summarize import (SMALL_TEST_ROWS, STD_KIND, reference_rounds, sample_std,  # noqa: F401
                                  scored_centers_report, small_test_warning, summarize, summarize_grid)
