"""fedjax_sim's XLA:CPU deadlock workarounds (fedjax_sim/_xla_flags.py): the scheduler off process-wide for every
fedjax_sim process, a family's declared compile options per program, never overriding the user."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sim import _xla_flags

EIGEN = {"xla_cpu_multi_thread_eigen": False}


def test_the_scheduler_is_switched_off_for_every_process_unless_the_user_names_it():
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  assert _xla_flags.apply(env) == (
      "--xla_force_host_platform_device_count=4 --xla_cpu_enable_concurrency_optimized_scheduler=false")
  assert _xla_flags.apply(env) == env["XLA_FLAGS"]  # idempotent
  empty = {}
  assert _xla_flags.apply(empty) == "--xla_cpu_enable_concurrency_optimized_scheduler=false" == empty["XLA_FLAGS"]
  mine = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
  assert _xla_flags.apply(mine) == "--xla_cpu_enable_concurrency_optimized_scheduler=true"


def test_importing_fedjax_sim_sets_the_scheduler_before_jax_starts(tmp_path):
  import os
  import subprocess
  import sys
  code = ("import os, fedjax_sim, jax; jax.numpy.ones(1).block_until_ready(); "
          "print(os.environ['XLA_FLAGS'])")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  out = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                       check=True).stdout
  assert out.strip() == "--xla_cpu_enable_concurrency_optimized_scheduler=false"
  late = ("import warnings, jax; jax.numpy.ones(1).block_until_ready()\n"
          "with warnings.catch_warnings(record=True) as w:\n"
          "  warnings.simplefilter('always'); import fedjax_sim\n"
          "print(sum('cannot take effect' in str(x.message) for x in w))")
  out = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True, text=True, check=True).stdout
  assert out.strip().splitlines()[-1] == "1"


def test_a_family_s_declared_options_reach_its_programs_on_the_cpu_only():
  from fedjax_sim.algorithms.registry import spec_of
  assert spec_of("fbsfl").cpu_options == EIGEN and spec_of("fbsfl_oort").cpu_options == EIGEN
  assert spec_of("fedavg").cpu_options == {}
  assert _xla_flags.program_options(EIGEN, "cpu", {}) == EIGEN
  assert _xla_flags.program_options(EIGEN, "gpu", {}) == {}
  assert _xla_flags.program_options(EIGEN, "cpu", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true"}) == {}


def test_the_option_is_a_valid_compile_option():
  f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
  out = f.lower(jnp.ones((3, 3))).compile(_xla_flags.program_options(EIGEN, "cpu", {}))
  assert float(out(jnp.ones((3, 3)))[0, 0]) > 0
