"""A method's declaration (STYLE.md §9; issue 10 item 1): everything the platform needs to know about it.

An algorithm module ends with ``SPECS``, a tuple of :class:`MethodSpec`. Each
spec names its config section (a frozen dataclass of fields declared with
:func:`fedjax_sim.settings.setting`, each with a comment and a range), the
``flax.struct`` class of its *traced* hyperparameters (a subset of the
section's fields, by name: gymnax's ``EnvParams``), its method names with
their presets, how to build the algorithm, and the smallest federation it
runs on. The registry (:mod:`fedjax_sim.algorithms.registry`) discovers every
module's ``SPECS``; config validation, ``--set`` keys, ``--sweep``'s sweepable
keys and the traced hyperparameters are derived from them, so adding a
method edits no other module.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_sim.algorithms.base import Algorithm, require_federation
from fedjax_sim.engine.local import LearnerHyper


@struct.dataclass
class Hyper:
  """What one run reads as traced numbers: the learner's and its method's own (sweepable without recompiling)."""

  learner: LearnerHyper  # learning rate, weight decay, ... (the task's optimizer)
  method: Any = None  # the method's ``MethodSpec.hyper`` instance (None for a method without traced numbers)


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What a method's ``build`` gets.

  Attributes:
    name: the method name being built (a preset's name, e.g. ``abps_x``).
    config: the method's effective config (its preset and the user's ``--set`` applied; with a sweep, the
      structural config: static-bounded keys at their largest swept value).
    settings: ``config``'s section of this method (None for a method without one).
    model: the model the method trains (the task's, or the spec's ``model`` override).
    client_update: local training of one client, built from the task and the spec's ``regularizer``.
    num_clients: C, the federation's client count.
    federation: the host federation (for set-up that needs its sizes, e.g. a participation plan).
  """

  name: str
  config: Any
  settings: Any
  model: Any
  client_update: Callable
  num_clients: int
  federation: Any = None


def default_check(name: str, config, num_clients: int) -> None:
  """Every method needs at least 2 clients (issue 9: a federation of one is not a federation)."""
  del config
  require_federation(name, num_clients)


@dataclasses.dataclass(frozen=True)
class MethodSpec:
  """One method family as its module declares it.

  Attributes:
    methods: method name → its preset (config overrides applied before the user's ``--set``).
    build: ``BuildContext -> Algorithm``.
    section: the config section this family owns (``""``: none).
    settings: the section's frozen dataclass (fields declared with ``setting``).
    hyper: ``flax.struct`` class of the traced hyperparameters; every field name is a field of ``settings``
      (ints become int32, floats float32). These, and only these, can be ``--sweep``-ed.
    static_max: hyper fields that also size the program (κ's slots): a sweep builds it for the largest value.
    regularizer: the term this family adds to the local loss (:data:`fedjax_sim.engine.local.Regularizer`).
    model: optional ``(config, federation) -> Model`` override (BNN+FL's Bayesian network).
    check_federation: ``(name, config, num_clients) -> None``; raises ConfigError when C is too small.
    validate: optional ``(settings, config) -> None`` for ranges that involve two fields.
    metrics: how the family's own per-round metrics (``RoundMetrics.extra``) reduce to per-seed summary entries.
    partial_participation: which of the methods can train K < C clients per round.
  """

  methods: Mapping[str, Mapping[str, Any]]
  build: Callable[[BuildContext], Algorithm]
  section: str = ""
  settings: Optional[type] = None
  hyper: Optional[type] = None
  static_max: tuple = ()
  regularizer: Optional[Callable] = None
  model: Optional[Callable] = None
  check_federation: Callable = default_check
  validate: Optional[Callable] = None
  metrics: Optional[Callable] = None  # ``(extra [R, ...] host arrays, active [R]) -> {key: value}``: the family's
  # per-seed summary entries from its ``RoundMetrics.extra`` history (numbers average over seeds in the summary)
  binary_only: Any = False  # True (every method of the family) or a tuple of method names that score with the
  # binary clinical task's AUROC or BCE inside their rounds (ABPS's Shapley utilities, DeFTA's and WPFed's
  # validation losses, early stopping on mean val AUROC): they refuse image and text data
  partial_participation: Any = False  # True (every method of the family) or a tuple of method names that can
  # train K < C clients per round (``participation.clients_per_round``); the others refuse it
  cpu_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # XLA compile options of the family's
  # programs on the CPU backend (fedjax_sim._xla_flags: a deadlock workaround)
  client_curves: bool = False  # keep every client's validation score of every round ([R, C] in the history;
  # per-seed records gain ``val_METRIC_clients``): for tables read at a matched round (paper 002 Table 6)
  reports: Mapping[str, Callable] = dataclasses.field(default_factory=dict)  # report name → ``(summary, per_seed,
  # out_dir) -> (markdown, [files])``: the family's paper tables and figures (an experiment's ``report = "..."``)

  def needs_binary(self, name: str) -> bool:
    """Whether method ``name`` runs only on the binary clinical task."""
    p = self.binary_only
    return bool(p) if isinstance(p, bool) else name in p

  def samples_clients(self, name: str) -> bool:
    """Whether method ``name`` honours ``participation.clients_per_round``."""
    p = self.partial_participation
    return bool(p) if isinstance(p, bool) else name in p

  def __post_init__(self):
    if self.hyper is not None:
      names = {f.name for f in dataclasses.fields(self.settings)}
      missing = [f.name for f in dataclasses.fields(self.hyper) if f.name not in names]
      if missing:
        raise TypeError(f"{self.hyper.__name__}: fields {missing} are not settings of [{self.section}]")

  @property
  def sweepable(self) -> tuple:
    """Dotted keys of the traced hyperparameters (``abps.kappa``, ...)."""
    if self.hyper is None:
      return ()
    return tuple(f"{self.section}.{f.name}" for f in dataclasses.fields(self.hyper))

  def traced(self, config):
    """The method's traced hyperparameters read off ``config``'s section (None without any)."""
    if self.hyper is None:
      return None
    section = getattr(config, self.section)
    return self.hyper(**{f.name: as_traced(getattr(section, f.name)) for f in dataclasses.fields(self.hyper)})


def as_traced(value) -> jax.Array:
  """A setting as the program reads it: int32 for integers, float32 otherwise."""
  if isinstance(value, bool):
    return jnp.asarray(value)
  if isinstance(value, int):
    return jnp.asarray(value, jnp.int32)
  return jnp.asarray(value, jnp.float32)
