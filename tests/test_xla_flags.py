"""fedjax_sim's XLA:CPU deadlock workarounds (fedjax_sim/_xla_flags.py): the scheduler off process-wide for an
experiment of the recurrent model, a family's declared compile options per program, never overriding the user."""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from fedjax_sim import _xla_flags

EIGEN = {"xla_cpu_multi_thread_eigen": False}


def config(model):
  return types.SimpleNamespace(learner=types.SimpleNamespace(model=model))


def test_the_scheduler_is_switched_off_for_an_experiment_of_the_recurrent_model_only():
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  assert _xla_flags.apply_for(config("char_lstm"), env) == (
      "--xla_force_host_platform_device_count=4 --xla_cpu_enable_concurrency_optimized_scheduler=false")
  assert _xla_flags.apply_for(config("char_lstm"), env) == env["XLA_FLAGS"]  # idempotent
  other = {}
  assert _xla_flags.apply_for(config("lenet"), other) == "" and "XLA_FLAGS" not in other
  mine = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
  assert _xla_flags.apply_for(config("char_lstm"), mine) == "--xla_cpu_enable_concurrency_optimized_scheduler=true"


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
