"""fedjax_sim's XLA:CPU workaround (fedjax_sim/_xla_flags.py): a per-program compile option for the recurrent model
on the CPU, nothing process-wide, never overriding the user."""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from fedjax_sim import _xla_flags


def config(model):
  return types.SimpleNamespace(learner=types.SimpleNamespace(model=model))


def test_nothing_is_set_process_wide():
  import fedjax_sim  # noqa: F401
  import os
  assert _xla_flags.SCHEDULER not in os.environ.get("XLA_FLAGS", "")  # (the suite's conftest sets other flags)


def test_the_scheduler_is_off_only_for_the_recurrent_model_on_the_cpu():
  assert _xla_flags.program_options(config("char_lstm"), None, "cpu", {}) == {_xla_flags.SCHEDULER: False}
  assert _xla_flags.program_options(config("lenet"), None, "cpu", {}) == {}
  assert _xla_flags.program_options(config("mlp"), None, "cpu", {}) == {}
  assert _xla_flags.program_options(config("char_lstm"), None, "gpu", {}) == {}


def test_a_family_s_declared_options_join_and_the_user_s_own_setting_wins():
  from fedjax_sim.algorithms.registry import spec_of
  eigen = {"xla_cpu_multi_thread_eigen": False}
  assert spec_of("fbsfl").cpu_options == eigen and spec_of("fbsfl_oort").cpu_options == eigen
  assert spec_of("fedavg").cpu_options == {}
  assert _xla_flags.program_options(config("char_lstm"), eigen, "cpu", {}) == {**eigen, _xla_flags.SCHEDULER: False}
  env = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true --xla_cpu_multi_thread_eigen=true"}
  assert _xla_flags.program_options(config("char_lstm"), eigen, "cpu", env) == {}


def test_the_option_is_a_valid_compile_option():
  f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
  options = _xla_flags.program_options(config("char_lstm"), {"xla_cpu_multi_thread_eigen": False}, "cpu", {})
  out = f.lower(jnp.ones((3, 3))).compile(options)
  assert float(out(jnp.ones((3, 3)))[0, 0]) > 0
