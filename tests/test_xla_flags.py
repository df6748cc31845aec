"""fedjax_sim's XLA:CPU workaround (fedjax_sim/_xla_flags.py): applied on import, never overriding the user."""
from __future__ import annotations

import os

from fedjax_sim import _xla_flags


def test_import_turned_the_concurrency_scheduler_off():
  assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in os.environ["XLA_FLAGS"]


def test_apply_appends_to_the_user_s_flags():
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  assert _xla_flags.apply(env) == ("--xla_force_host_platform_device_count=4 "
                                   "--xla_cpu_enable_concurrency_optimized_scheduler=false")
  assert _xla_flags.apply({}) == "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def test_apply_keeps_the_user_s_own_setting_and_is_idempotent():
  env = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
  assert _xla_flags.apply(env) == "--xla_cpu_enable_concurrency_optimized_scheduler=true"
  once = _xla_flags.apply({})
  assert _xla_flags.apply({"XLA_FLAGS": once}) == once
