"""Shared fixtures: tiny federations so the suite stays fast on 2 CPU cores."""
import os

# The suite's programs are tiny and run once; most of the suite's time is XLA compiling them. XLA's backend
# optimization level 0 halves that (a 6-center FedAvg: 7.0 -> 3.4 s, the same AUROC to the last bit): it lowers
# LLVM's effort, not the arithmetic XLA emits (no fast math either way), and the whole suite passes with it.
# Set before JAX starts its backend (subprocesses inherit it); benchmarks and the CLI keep XLA's default.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=0"
# XLA:CPU's concurrency-optimized scheduler off process-wide before anything imports JAX, as `import fedjax_sim`
# does for every process (fedjax_sim/_xla_flags.py: multi-seed programs hung with it on); subprocesses inherit it.
if "xla_cpu_enable_concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                             "--xla_cpu_enable_concurrency_optimized_scheduler=false").strip()
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SUITE_XLA_FLAGS}".strip()

# JAX's rolled threefry lowering for the suite (FEDJAX_SIM_THREEFRY=rolled, inherited by subprocesses): at level 0
# the unrolled form fedjax_sim registers for the CLI (fedjax_sim/_threefry.py) compiles slower, not faster
# (tests/test_fbsfl_baselines.py, session 9, 2 quiet cores, alternating: rolled 57 / 63 s, unrolled 64 / 74 s),
# and both forms give the same bits (tests/test_compile.py checks them against each other and Random123's known
# answers). Set before fedjax_sim is imported.
os.environ.setdefault("FEDJAX_SIM_THREEFRY", "rolled")

import numpy as np  # noqa: E402
import pytest

from fedjax_sim.data.cohorts import Cohorts, SiteCohort


def load_benchmark(name: str):
  """The module of ``benchmarks/<name>.py`` (scripts, not a package), loaded from this checkout for their tests."""
  import importlib.util
  import pathlib
  path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def make_cohorts(num_sites=6, num_features=5, seed=0, sizes=None):
  """A small random federation with a learnable linear signal and uneven site sizes."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=num_features)
  sizes = sizes or [int(s) for s in rng.integers(30, 260, num_sites)]
  sites = []
  for i, n in enumerate(sizes):
    x = rng.normal(size=(n, num_features)).astype(np.float32)
    x[:, -1] = (x[:, -1] > 0)  # one binary column
    y = (x @ w + rng.normal(size=n) > 0.8).astype(np.int32)
    sites.append(SiteCohort(f"site{i}", x, y, year=np.full(n, 2100.0 + i),
                            charlson=(rng.random((n, 12)) < 0.2).astype(np.float32)))
  cont = np.ones(num_features, bool)
  cont[-1] = False
  return Cohorts(tuple(sites), tuple(f"f{j}" for j in range(num_features)), cont, "test cohorts")


def bucket_rows(fed) -> dict:
  """Client index → its unpadded train ``(x, y)`` read off the federation's buckets (the order the flat rows of
  ``train_selected`` have)."""
  out = {}
  for b in fed.buckets:
    bx, by, bn = np.asarray(b.x), np.asarray(b.y), np.asarray(b.n)
    for pos, i in enumerate(np.asarray(b.client_idx).tolist()):
      out[i] = (bx[pos, :bn[pos]], by[pos, :bn[pos]])
  return out


def numpy_bce(logits, y, m) -> float:
  """Mean binary cross-entropy of sigmoid(logits) over the rows where ``m`` is set, in float64 (an independent
  reference for the engine's ``bce_with_logits``)."""
  z, y, m = (np.asarray(a, np.float64) for a in (logits, y, m))
  loss = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
  return float((loss * m).sum() / max(m.sum(), 1))


def with_method(hyper, **fields):
  """``hyper`` with some of its method's traced numbers replaced (``hyper.method`` is the family's struct)."""
  import jax.numpy as jnp
  cast = {k: jnp.asarray(v, getattr(hyper.method, k).dtype) for k, v in fields.items()}
  return hyper.replace(method=hyper.method.replace(**cast))


@pytest.fixture
def tiny_cohorts():
  return make_cohorts()


# The persistent compilation cache (issue 11) in a fresh folder for this session: the suite runs cold (CI on a
# fresh clone), programs compiled twice (the same shapes in two tests, or in a test's subprocess) load from it, and
# no test writes the user's ~/.cache. tests/test_compile.py restores this setting after switching it.
def _session_cache() -> str:
  import atexit
  import os
  import shutil
  import tempfile
  from fedjax_sim import compile_cache
  path = tempfile.mkdtemp(prefix="fedjax_sim-test-cache-")
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  os.environ["FEDJAX_SIM_TEST_CACHE"] = path
  os.environ[compile_cache.ENV] = path  # the CLI (and subprocesses) use it too
  # Traced programs on disk are keyed by the source files, not by code patched at run time, and tests patch
  # (fault injection, counters): off for the suite, on where tests/test_compile.py tests it.
  os.environ["FEDJAX_SIM_PROGRAM_CACHE"] = "0"
  compile_cache.enable(path)
  return path


SESSION_CACHE = _session_cache()
