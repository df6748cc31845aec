"""Method names → their declarations (:class:`~fedjax_sim.algorithms.spec.MethodSpec`), discovered, not listed.

Every module under :mod:`fedjax_sim.algorithms` that defines ``SPECS`` contributes
its methods (issue 10 item 1: adding a method edits no other module). Config
sections, ``--set`` keys, sweepable keys, presets, federation checks and the
traced hyperparameters are all read off these declarations.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Optional

from fedjax_sim.algorithms.base import Algorithm
from fedjax_sim.algorithms.spec import BuildContext, Hyper, MethodSpec


def _discover() -> tuple:
  """Every ``SPECS`` entry of the modules under :mod:`fedjax_sim.algorithms`, in module-name order."""
  import fedjax_sim.algorithms as package
  specs = []
  for info in sorted(pkgutil.walk_packages(package.__path__, package.__name__ + "."), key=lambda i: i.name):
    if info.ispkg or info.name.endswith((".registry", ".spec")):
      continue
    specs.extend(getattr(importlib.import_module(info.name), "SPECS", ()))
  names, sections = {}, {}
  for spec in specs:
    for name in spec.methods:
      if name in names:
        raise TypeError(f"method {name!r} is declared twice")
      names[name] = spec
    if spec.section:
      if spec.section in sections and sections[spec.section] is not spec.settings:
        raise TypeError(f"config section [{spec.section}] is declared by two method families")
      sections[spec.section] = spec.settings
  return tuple(specs)


SPECS: tuple = _discover()
"""Every method family's declaration."""

_BY_NAME = {name: spec for spec in SPECS for name in spec.methods}

METHODS = tuple(_BY_NAME)
"""Every runnable method name."""


def spec_of(name: str) -> MethodSpec:
  """The declaration of method ``name`` (a KeyError for an unknown name: validated configs never have one)."""
  return _BY_NAME[name]


def sections() -> dict:
  """Config section name → its settings class, for every method family that declares one."""
  return {spec.section: spec.settings for spec in SPECS if spec.section}


def section_validators() -> dict:
  """Config section name → its two-field range check ``(settings, config) -> None``, where declared."""
  return {spec.section: spec.validate for spec in SPECS if spec.section and spec.validate is not None}


def reports() -> dict:
  """Report name → ``(summary, per_seed, out_dir) -> (markdown, [files])``, from every family's ``reports``."""
  out = {}
  for spec in SPECS:
    for name, fn in spec.reports.items():
      if out.get(name, fn) is not fn:
        raise TypeError(f"report {name!r} is declared twice")
      out[name] = fn
  return out


def sweepable_keys() -> tuple:
  """Every ``--sweep``-able key: the traced hyperparameters of every family (after the learner's)."""
  from fedjax_sim.engine.local import SWEEPABLE_LEARNER
  keys = list(SWEEPABLE_LEARNER)
  for spec in SPECS:
    keys += [k for k in spec.sweepable if k not in keys]
  return tuple(keys)


def static_max_keys() -> tuple:
  """Traced keys that also size the program: a sweep builds it for their largest value."""
  return tuple(f"{spec.section}.{f}" for spec in SPECS for f in spec.static_max)


def sections_of_methods(methods) -> set:
  """The config sections the given methods read (to resolve short sweep names such as ``mu``)."""
  return {spec_of(m).section for m in methods if m in _BY_NAME} | {"learner"}


def preset(name: str) -> dict:
  """Config overrides that define method ``name`` (empty for methods without a preset)."""
  return dict(spec_of(name).methods[name])


def check_federation(name: str, config, num_clients: int) -> None:
  """Raises :class:`ConfigError` when method ``name`` under ``config`` (its preset applied) cannot run on a
  federation of ``num_clients`` clients, naming what it needs (issue 9): checked before anything compiles."""
  from fedjax_sim.errors import ConfigError
  spec = spec_of(name)
  spec.check_federation(name, config, num_clients)
  from fedjax_sim.data.labeled import IMAGE_TEXT_SOURCES
  if spec.needs_binary(name) and config.data.source in IMAGE_TEXT_SOURCES:
    raise ConfigError(f"{name} scores models with the binary clinical task's AUROC or BCE inside its rounds, so it "
                      f"runs on binary tabular data (data.source = synthetic, mimic or csv), not on "
                      f"data.source = {config.data.source}")
  k = config.participation.clients_per_round
  if k > 0 and not spec.samples_clients(name):
    able = [m for s in SPECS for m in s.methods if s.samples_clients(m)]
    raise ConfigError(f"{name} trains every client every round; participation.clients_per_round = {k} needs a "
                      f"method that samples clients ({', '.join(able)}), or set it to 0")
  if k > num_clients:
    raise ConfigError(f"participation.clients_per_round = {k} exceeds the federation's {num_clients} clients; "
                      f"set it to at most {num_clients}")


def hyper_from_config(config, name: Optional[str] = None) -> Hyper:
  """The traced numbers of one run of method ``name`` under ``config`` (learner only when ``name`` is None)."""
  from fedjax_sim.engine.local import learner_hyper
  return Hyper(learner=learner_hyper(config.learner),
               method=None if name is None else spec_of(name).traced(config))


def build_model(config, federation, name: Optional[str] = None):
  """The model method ``name`` trains: the task's, or its declaration's override (BNN+FL)."""
  spec = spec_of(name) if name is not None else None
  if spec is not None and spec.model is not None:
    return spec.model(config, federation)
  from fedjax_sim.tasks import task_for
  return task_for(config, federation).model


def build_method(name: str, config, federation) -> tuple:
  """Returns ``(algorithm, model)`` for method ``name`` under ``config`` on ``federation`` (host)."""
  from fedjax_sim.engine.local import make_client_update
  from fedjax_sim.tasks import task_for
  spec = spec_of(name)
  task = task_for(config, federation)
  model = build_model(config, federation, name)
  lc = config.learner
  client_update = make_client_update(task.with_model(model), batch_size=lc.batch_size, epochs=lc.local_epochs,
                                     local_steps=lc.local_steps or None, regularizer=spec.regularizer)
  ctx = BuildContext(name=name, config=config, settings=getattr(config, spec.section) if spec.section else None,
                     model=model, client_update=client_update, num_clients=federation.num_clients,
                     federation=federation)
  algorithm: Algorithm = spec.build(ctx)
  return algorithm, model
