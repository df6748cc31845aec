"""Experiment configuration: immutable, documented field by field, validated on load (SPEC §6).

An experiment is a TOML file in ``configs/`` whose keys are the fields below
(nested tables for ``data``, ``learner`` and the method sections). The command
line overrides any field with ``--set section.field=value``; unknown keys and
out-of-range values raise :class:`ConfigError` naming the valid choices.
"""
from __future__ import annotations

import dataclasses
import difflib
import pathlib
import tomllib
from typing import Any, Optional

from fedjax_sim.errors import ConfigError

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the federation comes from (SPEC §2)."""

  source: str = "synthetic"  # "synthetic" (SPEC §2.1 generator), "mimic" (local MIMIC-IV dir), "csv" (multi-site CSV)
  path: str = ""  # MIMIC-IV directory or CSV file (source = mimic / csv)
  site_column: str = ""  # CSV: the column naming each row's site
  label_column: str = ""  # CSV: the binary label column
  categorical_columns: tuple = ()  # CSV: columns to one-hot encode
  partition: str = "natural"  # "natural" (sites as given), "iid" or "dirichlet" (re-partition the pooled rows)
  num_clients: int = 0  # clients for iid / dirichlet partitions (0 = keep the number of sites)
  dirichlet_alpha: float = 0.5  # Dirichlet(α) label-skew concentration (partition = dirichlet)
  data_seed: int = 0  # seed of the generator and of the train/val/test split (fixed across experiment seeds)
  num_centers: int = 230  # synthetic: centers kept (care unit × 2-year window cells, smallest dropped)
  total_stays: int = 71000  # synthetic: approximate number of ICU stays over the kept centers
  min_site_rows: int = 20  # sites with fewer rows are dropped with a warning naming them


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """Local learner and protocol (SPEC §3.1, paper 000 §6.3)."""

  hidden: tuple = (128, 64)  # MLP hidden widths
  dropout: float = 0.2  # dropout after each hidden ReLU
  learning_rate: float = 1e-3  # Adam step size
  weight_decay: float = 1e-5  # Adam (coupled) weight decay
  batch_size: int = 128  # local minibatch size
  local_epochs: int = 2  # local epochs per round
  local_steps: int = 0  # if > 0, every client takes exactly this many steps per round instead of epochs
  num_buckets: int = 6  # size buckets for ragged clients (SPEC §1); more = less padding, more compile time


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
  """FedAvg's star-compatible extensions (SPEC §3.3: FedAvg+P+Q and FedAvg-X presets set these)."""

  head_layers: int = 0  # personalized head layers kept on each client: 0, 1 or 2
  wire: str = "fp32"  # wire format: fp32 or bf16
  server_momentum: float = 0.0  # β of the server momentum on the aggregation delta
  early_stopping_patience: int = 0  # rounds without a better mean val AUROC before stopping (0 = off)


@dataclasses.dataclass(frozen=True)
class GraphConfig:
  """Fixed peer graph of the decentralized baselines DeceFL and DeFTA (SPEC §3.3)."""

  degree: int = 3  # the random regular graph's degree
  graph_seed: int = 0  # seed of the graph (fixed across experiment seeds)
  defta_decay: float = 0.5  # DeFTA trust EMA factor ρ: τ ← ρτ + (1 − ρ)·exp(−val loss)


@dataclasses.dataclass(frozen=True)
class WPFedConfig:
  """WPFed baseline (SPEC §3.3): LSH filtering, then loss-ranked neighbor averaging."""

  bits: int = 64  # LSH signature length (random projections of the parameters)
  candidates: int = 5  # candidates per center, nearest by Hamming distance (downloaded and scored)
  k: int = 3  # neighbors averaged in, the lowest validation loss among the candidates


@dataclasses.dataclass(frozen=True)
class FedProxConfig:
  mu: float = 0.01  # proximal coefficient μ (SPEC §3.3)


@dataclasses.dataclass(frozen=True)
class FedDynConfig:
  alpha: float = 0.01  # dynamic-regularizer coefficient α (SPEC §3.3)


@dataclasses.dataclass(frozen=True)
class MoonConfig:
  mu: float = 1.0  # weight of the model-contrastive loss (SPEC §3.3)
  temperature: float = 0.5  # contrastive temperature τ (SPEC §3.3)


@dataclasses.dataclass(frozen=True)
class ABPSConfig:
  """ABPS (paper 000 §4, Algorithm 1; SPEC §3.2). Method presets (abps_p, abps_x, ...) set some
  of these first; ``--set abps.FIELD=...`` is applied after the preset."""

  kappa: int = 3  # κ, the most partners per center
  epsilon: float = 0.1  # ε-greedy swap probability
  gamma: float = 1.4142135623730951  # UCB exploration weight γ = √2 (SPEC §3.2 step 3)
  tau_acc: float = 0.5  # acceptance threshold τ_acc on the receiver's UCB
  alpha0: float = 1.0  # Beta prior α0
  beta0: float = 1.0  # Beta prior β0
  phi_min: float = -0.1  # Shapley clip range lower end (eq. 5)
  phi_max: float = 0.1  # Shapley clip range upper end (eq. 5)
  goal: str = "none"  # goal-aware filter: none, homogeneity, diversity, alignment
  metadata: str = "base"  # metadata vector: base (3-dim) or goal (15-dim)
  keep_fraction: float = 0.25  # fraction of ordered pairs the goal filter keeps (τ_sim calibration)
  pool_size: int = 0  # candidate pool size M per center (0 = every other center, the paper's C × C beliefs)
  head_layers: int = 0  # personalized head layers kept local: 0, 1 or 2
  wire: str = "fp32"  # wire format of sent parameters: fp32 or bf16
  momentum: float = 0.0  # β of the momentum on each center's aggregation delta (ABPS-X: 0.5)
  early_stopping_patience: int = 0  # rounds without a better mean val AUROC before stopping (0 = off)
  exact_shapley_max: int = 5  # exact Shapley when κ ≤ this, else truncated Monte Carlo
  tmc_permutations: int = 8  # B, truncated Monte Carlo permutations


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One experiment: which methods, how long, which seeds, on which data."""

  name: str = ""  # experiment name (the config file's stem)
  methods: tuple = ("fedavg",)  # methods to run, in order (see fedjax_sim.algorithms.registry.METHODS)
  rounds: int = 50  # communication rounds R (SPEC §3.1: 50)
  seeds: tuple = (11, 22, 33, 44, 55)  # experiment seeds, run together in one compiled call (SPEC §3.1)
  data: DataConfig = DataConfig()
  learner: LearnerConfig = LearnerConfig()
  fedavg: FedAvgConfig = FedAvgConfig()
  fedprox: FedProxConfig = FedProxConfig()
  graph: GraphConfig = GraphConfig()
  wpfed: WPFedConfig = WPFedConfig()
  feddyn: FedDynConfig = FedDynConfig()
  moon: MoonConfig = MoonConfig()
  abps: ABPSConfig = ABPSConfig()
  report: str = ""  # extra report: "" (none) or "table1" (paper 000 Table 1 + Figure 3 PNGs)
  reference_rounds: int = 0  # R_ref of the bandwidth ratio (SPEC §3.4); 0 = the run's rounds
  overrides: tuple = ()  # the user's --set pairs, re-applied after each method's preset (set by the CLI)


# --- validation ----------------------------------------------------------------------------------

_SECTIONS = {f.name: f.type for f in dataclasses.fields(ExperimentConfig) if dataclasses.is_dataclass(f.default)}
_CHOICES = {
    ("data", "source"): ("synthetic", "mimic", "csv"),
    ("data", "partition"): ("natural", "iid", "dirichlet"),
    ("abps", "goal"): ("none", "homogeneity", "diversity", "alignment"),
    ("abps", "metadata"): ("base", "goal"),
    ("abps", "wire"): ("fp32", "bf16"),
    ("fedavg", "wire"): ("fp32", "bf16"),
}


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


def _coerce(key: str, value: Any, default: Any) -> Any:
  """Converts ``value`` (from TOML or a ``--set`` string) to the type of ``default``."""
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
      elem = default[0] if default else ""
      return tuple(_coerce(key, v.strip() if isinstance(v, str) else v, elem) for v in items)
    return str(value)
  except (TypeError, ValueError):
    kind = type(default).__name__ if not isinstance(default, tuple) else "comma-separated list"
    raise ConfigError(f"{key}: expected {kind}, got {value!r}") from None


def _unknown(key: str, choices) -> ConfigError:
  close = difflib.get_close_matches(key, choices, n=3)
  hint = f" Did you mean {', '.join(close)}?" if close else ""
  return ConfigError(f"unknown config key {key!r}.{hint} Valid keys: {', '.join(choices)}")


def apply_overrides(config: ExperimentConfig, overrides: dict) -> ExperimentConfig:
  """Returns a new config with dotted-key overrides applied (values coerced and validated)."""
  top, sections = {}, {}
  for key, value in overrides.items():
    if "." in key:
      sec, field = key.split(".", 1)
      if sec not in _SECTIONS or field not in {f.name for f in dataclasses.fields(_section_class(sec))}:
        raise _unknown(key, valid_keys())
      default = getattr(getattr(config, sec), field)
      sections.setdefault(sec, {})[field] = _coerce(key, value, default)
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


def validate(config: ExperimentConfig) -> None:
  """Raises :class:`ConfigError` for out-of-range values, naming the key and the valid range."""
  from fedjax_sim.algorithms.registry import METHODS  # local import: registry imports config

  def need(cond, key, what):
    if not cond:
      raise ConfigError(f"{key} must be {what}, got {_get(config, key)!r}")

  if not config.methods:
    raise ConfigError("methods is empty; choose from: " + ", ".join(METHODS))
  for m in config.methods:
    if m not in METHODS:
      raise ConfigError(f"unknown method {m!r}; choose from: {', '.join(METHODS)}")
  need(config.rounds > 0, "rounds", "a positive integer")
  need(len(config.seeds) > 0, "seeds", "a non-empty list of integers")
  need(len(set(config.seeds)) == len(config.seeds), "seeds", "distinct")
  for (sec, field), choices in _CHOICES.items():
    v = getattr(getattr(config, sec), field)
    if v not in choices:
      raise ConfigError(f"{sec}.{field} must be one of {', '.join(choices)}; got {v!r}")
  lr = config.learner
  need(lr.batch_size > 0, "learner.batch_size", "a positive integer")
  need(lr.local_epochs > 0, "learner.local_epochs", "a positive integer")
  need(lr.local_steps >= 0, "learner.local_steps", "≥ 0 (0 = use local_epochs)")
  need(lr.learning_rate > 0, "learner.learning_rate", "positive")
  need(lr.weight_decay >= 0, "learner.weight_decay", "≥ 0")
  need(0 <= lr.dropout < 1, "learner.dropout", "in [0, 1)")
  need(len(lr.hidden) > 0 and all(h > 0 for h in lr.hidden), "learner.hidden", "positive widths")
  need(lr.num_buckets >= 1, "learner.num_buckets", "≥ 1")
  fa = config.fedavg
  need(fa.head_layers in (0, 1, 2) and fa.head_layers <= len(config.learner.hidden), "fedavg.head_layers",
       "0, 1 or 2 (and at most the number of hidden layers)")
  need(0 <= fa.server_momentum < 1, "fedavg.server_momentum", "in [0, 1)")
  need(fa.early_stopping_patience >= 0, "fedavg.early_stopping_patience", "≥ 0")
  need(config.graph.degree >= 1, "graph.degree", "≥ 1")
  need(0 <= config.graph.defta_decay < 1, "graph.defta_decay", "in [0, 1)")
  need(config.wpfed.bits >= 1, "wpfed.bits", "≥ 1")
  need(1 <= config.wpfed.k <= config.wpfed.candidates, "wpfed.k", "in [1, wpfed.candidates]")
  need(config.fedprox.mu >= 0, "fedprox.mu", "≥ 0")
  need(config.feddyn.alpha > 0, "feddyn.alpha", "positive")
  need(config.moon.mu >= 0, "moon.mu", "≥ 0")
  need(config.moon.temperature > 0, "moon.temperature", "positive")
  a = config.abps
  need(a.kappa >= 1, "abps.kappa", "≥ 1")
  need(0 <= a.epsilon <= 1, "abps.epsilon", "in [0, 1]")
  need(a.gamma >= 0, "abps.gamma", "≥ 0")
  need(a.alpha0 > 0 and a.beta0 > 0, "abps.alpha0", "positive (and so must abps.beta0)")
  need(a.phi_max > a.phi_min, "abps.phi_max", "greater than abps.phi_min")
  need(0 < a.keep_fraction <= 1, "abps.keep_fraction", "in (0, 1]")
  need(a.pool_size >= 0, "abps.pool_size", "≥ 0")
  need(a.head_layers in (0, 1, 2) and a.head_layers <= len(config.learner.hidden), "abps.head_layers",
       "0, 1 or 2 (and at most the number of hidden layers)")
  need(0 <= a.momentum < 1, "abps.momentum", "in [0, 1)")
  need(a.early_stopping_patience >= 0, "abps.early_stopping_patience", "≥ 0")
  need(a.tmc_permutations >= 1, "abps.tmc_permutations", "≥ 1")
  if config.report not in ("", "table1"):
    raise ConfigError(f"report must be '' or 'table1', got {config.report!r}")
  need(config.reference_rounds >= 0, "reference_rounds", "≥ 0 (0 = rounds)")
  d = config.data
  need(d.num_centers > 0, "data.num_centers", "a positive integer")
  need(d.total_stays > 0, "data.total_stays", "a positive integer")
  need(d.min_site_rows >= 3, "data.min_site_rows", "≥ 3 (each split needs a row)")
  need(d.dirichlet_alpha > 0, "data.dirichlet_alpha", "positive")
  need(d.num_clients >= 0, "data.num_clients", "≥ 0")
  if d.source in ("mimic", "csv"):
    need(bool(d.path), "data.path", f"set for data.source = {d.source}")
  if d.source == "csv":
    need(bool(d.site_column), "data.site_column", "set for data.source = csv")
    need(bool(d.label_column), "data.label_column", "set for data.source = csv")


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
    close = difflib.get_close_matches(name, choices, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"unknown experiment {name!r}.{hint} Available: {', '.join(choices)}")
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
