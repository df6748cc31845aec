"""Hyperparameter sweeps as one vmapped program (SPEC §1 "Sweeps"; issue 4).

``--sweep key=v1,v2,...`` (repeatable) names a grid: the product of the value
lists, in the order given, the last key varying fastest. Only numeric settings
that the compiled program reads as *traced* values (the learner's and each
method family's declared ``hyper`` fields) can be swept; every grid point ×
seed then becomes one entry of a leading run axis of a single compiled call.
Settings that change array shapes or program structure (model widths, rounds,
κ's slot count beyond the largest swept value, head layers, wire format, goal,
…) are rejected with a message saying so.

κ (``abps.kappa``) is traced but bounded by a static slot count: a sweep over κ
compiles ABPS with ``kappa_max`` = the largest swept κ; smaller κ leave the
extra slots empty (null players in the Shapley credit, so exact Shapley values
are unchanged). A κ grid may straddle ``abps.exact_shapley_max``: exact or
truncated Monte Carlo Shapley is chosen per center on |P_i| (SPEC §3.2 step 7;
:func:`fedjax_sim.algorithms.abps.shapley.credit_coalitions`), so a grid point
with κ ≤ ``abps.exact_shapley_max`` credits every center exactly whatever the
largest swept κ. β (``abps.momentum``) is traced too, but whether ABPS has a
momentum stage at all is static: a grid whose largest β is above 0 builds it
for every point (at β = 0 the stage is the same rule, the arithmetic differs
in rounding only; :func:`fedjax_sim.algorithms.abps.algorithm.abps`).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Sequence

from fedjax_sim.config import ExperimentConfig, apply_overrides, did_you_mean, valid_keys
from fedjax_sim.errors import ConfigError

def sweepable() -> tuple:
  """Every sweepable key: the learner's traced fields and each method family's declared ``hyper`` fields
  (:meth:`fedjax_sim.algorithms.spec.MethodSpec.sweepable`), read off the declarations."""
  from fedjax_sim.algorithms.registry import sweepable_keys
  return sweepable_keys()


def static_max() -> tuple:
  """Keys with a static upper bound: the program is built for the largest swept value (κ's slots; β > 0 builds
  ABPS's momentum stage)."""
  from fedjax_sim.algorithms.registry import static_max_keys
  return static_max_keys()


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A grid of hyperparameter values."""

  keys: tuple = ()  # full dotted keys, in the order given
  values: tuple = ()  # one tuple of values per key, coerced to the field's type

  @property
  def points(self) -> list:
    """Every grid point as ``{key: value}``, the last key varying fastest."""
    return [dict(zip(self.keys, combo)) for combo in itertools.product(*self.values)]

  def __bool__(self) -> bool:
    return bool(self.keys)


def resolve_key(key: str, methods: Sequence[str]) -> str:
  """A dotted sweepable key from ``key`` (dotted, or a short field name such as ``kappa``).

  Raises:
    ConfigError: unknown key, a key that cannot be swept, or an ambiguous short name.
  """
  from fedjax_sim.algorithms.registry import sections_of_methods
  keys = sweepable()
  if key in keys:
    return key
  matches = [k for k in keys if k.split(".", 1)[1] == key]
  if len(matches) > 1:
    sections = sections_of_methods(methods)
    matches = [k for k in matches if k.split(".", 1)[0] in sections] or matches
    own = [k for k in matches if not k.startswith("learner.")]
    if len(own) == 1 and len(matches) == 2:  # a method's own setting wins over the learner's (abps.momentum)
      matches = own
    if len(matches) > 1:
      raise ConfigError(f"--sweep {key}: ambiguous; write one of {', '.join(matches)}")
  if matches:
    return matches[0]
  if key == "seeds":
    raise ConfigError("--sweep seeds: seeds are always run together; list them with --seeds 11,22,33")
  known = [k for k in valid_keys() if k == key or k.split(".")[-1] == key]
  if known:
    raise ConfigError(
        f"--sweep {known[0]}: this setting changes array shapes or program structure, so it cannot be swept "
        f"inside one compiled program; run its values as separate experiments with --set {known[0]}=VALUE. "
        f"Sweepable keys: {', '.join(sweepable())}")
  raise ConfigError(f"--sweep: unknown key {key!r}.{did_you_mean(key, keys)} Sweepable keys: {', '.join(keys)}")


def parse_sweep(items: Sequence[str], config: ExperimentConfig) -> Sweep:
  """Parses ``--sweep`` arguments against ``config`` (values validated as ``--set`` would be).

  Raises:
    ConfigError: malformed item, unsweepable or repeated key, empty or invalid value.
  """
  keys, values = [], []
  for item in items:
    if "=" not in item:
      raise ConfigError(f"--sweep expects KEY=V1,V2,..., got {item!r}. Sweepable keys: {', '.join(sweepable())}")
    raw_key, raw_vals = item.split("=", 1)
    key = resolve_key(raw_key.strip(), config.methods)
    if key in keys:
      raise ConfigError(f"--sweep {key} given twice; list all its values in one --sweep")
    vals = [v.strip() for v in raw_vals.split(",") if v.strip()]
    if not vals:
      raise ConfigError(f"--sweep {key}: no values given (expected {key}=V1,V2,...)")
    coerced = []
    for v in vals:
      checked = apply_overrides(config, {key: v})  # coerces and range-checks like --set
      section, field = key.split(".")
      coerced.append(getattr(getattr(checked, section), field))
    if len(set(coerced)) != len(coerced):
      raise ConfigError(f"--sweep {key}: repeated values {vals}")
    _check_read(key, coerced, config)
    keys.append(key)
    values.append(tuple(coerced))
  return Sweep(keys=tuple(keys), values=tuple(values))


def _check_read(key: str, values: Sequence, config: ExperimentConfig) -> None:
  """Raises :class:`ConfigError` when sweeping ``key`` over ``values`` changes the traced numbers of none of the
  run's methods (their presets applied): a grid of identical runs, say ``--sweep abps.kappa`` over FBS-FL rows,
  would cost len(values) times the run and change nothing. Read off the declarations (each method's traced
  hyperparameters), not a list of keys; the learner's keys reach every method."""
  import jax
  import numpy as np

  from fedjax_sim.algorithms.registry import hyper_from_config, preset, spec_of
  from fedjax_sim.config import config_for_method
  if len(values) < 2:  # a one-value axis repeats nothing
    return
  for name in config.methods:
    method_config = config_for_method(config, preset(name))
    hypers = [jax.tree_util.tree_leaves(hyper_from_config(apply_overrides(method_config, {key: v}), name))
              for v in values]
    if any(not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(hypers[0], other))
           for other in hypers[1:]):
      return
  reads = sorted({k for name in config.methods for k in spec_of(name).sweepable} - {key})
  raise ConfigError(f"--sweep {key}: none of this run's methods ({', '.join(config.methods)}) reads it, so every "
                    f"grid point would be the same run; the keys they read: learner.*"
                    + (f", {', '.join(reads)}" if reads else ""))


def point_configs(config: ExperimentConfig, sweep: Sweep) -> list:
  """The method config of every grid point (one entry, ``config`` itself, without a sweep)."""
  if not sweep:
    return [config]
  return [apply_overrides(config, point) for point in sweep.points]


def structural_config(config: ExperimentConfig, sweep: Sweep) -> ExperimentConfig:
  """The config the program is built from: ``config`` with each static-bounded key at its largest value."""
  over = {k: max(v) for k, v in zip(sweep.keys, sweep.values) if k in static_max()}
  return apply_overrides(config, over) if over else config


def point_label(point: dict) -> str:
  """``abps.kappa=1, abps.epsilon=0.05`` → a short label ``kappa=1 epsilon=0.05``."""
  return " ".join(f"{k.split('.', 1)[1]}={v:g}" if isinstance(v, float) else f"{k.split('.', 1)[1]}={v}"
                  for k, v in point.items())
