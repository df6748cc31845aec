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
  num_clients: int = 0  # clients for iid / dirichlet partitions, ≥ 0 (0 = keep the number of sites)
  dirichlet_alpha: float = 0.5  # Dirichlet(α) label-skew concentration (partition = dirichlet), finite > 0
  data_seed: int = 0  # seed of the generator and of the train/val/test split (fixed across experiment seeds),
  # in [0, 2³²)
  num_centers: int = 230  # synthetic: centers kept (care unit × 2-year window cells, smallest dropped), ≥ 1
  total_stays: int = 71000  # synthetic: approximate number of ICU stays over the kept centers, ≥ 1
  min_site_rows: int = 20  # sites with fewer rows are dropped with a warning naming them; ≥ 3 (a row per split)
  impute: str = "none"  # CSV: missing cells: "none" (an error naming the column) or "median" (numeric: the
  # column's median; categorical: its most frequent value)
  drop_columns: tuple = ()  # CSV: columns left out (an index column, an ID, a column leaking the label);
  # each must exist in the file (else an error lists the columns), not the site or label column
  feature_columns: tuple = ()  # CSV: the feature columns to keep, in order; () = every column but the site,
  # label and dropped ones; each must exist in the file


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """Local learner and protocol (SPEC §3.1, paper 000 §6.3)."""

  hidden: tuple = (128, 64)  # MLP hidden widths, each ≥ 1 (at least one layer)
  dropout: float = 0.2  # dropout rate after each hidden ReLU, in [0, 1)
  learning_rate: float = 1e-3  # Adam step size, in (0, 10]
  weight_decay: float = 1e-5  # Adam (coupled) weight decay, in [0, 1)
  batch_size: int = 128  # local minibatch size, ≥ 1
  local_epochs: int = 2  # local epochs per round, ≥ 1
  local_steps: int = 0  # if > 0, every client takes exactly this many steps per round instead of epochs; ≥ 0
  num_buckets: int = 6  # size buckets for ragged clients (SPEC §1), ≥ 1; more = less padding, more compile time


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
  """FedAvg's star-compatible extensions (SPEC §3.3: FedAvg+P+Q and FedAvg-X presets set these)."""

  head_layers: int = 0  # personalized head layers kept on each client: 0, 1 or 2 (≤ len(learner.hidden))
  wire: str = "fp32"  # wire format: fp32 or bf16
  server_momentum: float = 0.0  # β of the server momentum on the aggregation delta, in [0, 1)
  early_stopping_patience: int = 0  # rounds without a better mean val AUROC before stopping, ≥ 0 (0 = off)


@dataclasses.dataclass(frozen=True)
class GraphConfig:
  """Fixed peer graph of the decentralized baselines DeceFL and DeFTA (SPEC §3.3)."""

  degree: int = 3  # the random regular graph's degree d, ≥ 1; the federation needs C > d centers, C·d even
  graph_seed: int = 0  # seed of the graph (fixed across experiment seeds), in [0, 2³²)
  defta_decay: float = 0.5  # DeFTA trust EMA factor ρ: τ ← ρτ + (1 − ρ)·exp(−val loss), in [0, 1)


@dataclasses.dataclass(frozen=True)
class WPFedConfig:
  """WPFed baseline (SPEC §3.3): LSH filtering, then loss-ranked neighbor averaging."""

  bits: int = 64  # LSH signature length (random projections of θ_i − θ_0, the change from the initial model), in [1, 4096]
  candidates: int = 5  # candidates per center, nearest by Hamming distance (downloaded and scored), ≥ 1;
  # the federation needs more centers than candidates
  k: int = 3  # neighbors averaged in, the lowest validation loss among the candidates; in [1, candidates]


@dataclasses.dataclass(frozen=True)
class FedProxConfig:
  mu: float = 0.01  # proximal coefficient μ (SPEC §3.3), finite ≥ 0


@dataclasses.dataclass(frozen=True)
class FedDynConfig:
  alpha: float = 0.01  # dynamic-regularizer coefficient α (SPEC §3.3), finite > 0 (it divides the server update)


@dataclasses.dataclass(frozen=True)
class MoonConfig:
  mu: float = 1.0  # weight of the model-contrastive loss (SPEC §3.3), finite ≥ 0
  temperature: float = 0.5  # contrastive temperature τ (SPEC §3.3), finite > 0


@dataclasses.dataclass(frozen=True)
class ABPSConfig:
  """ABPS (paper 000 §4, Algorithm 1; SPEC §3.2). Method presets (abps_p, abps_x, ...) set some
  of these first; ``--set abps.FIELD=...`` is applied after the preset."""

  kappa: int = 3  # κ, the most partners per center, ≥ 1; at most C − 1 and, with pools, at most pool_size
  epsilon: float = 0.1  # ε-greedy swap probability, in [0, 1]
  gamma: float = 1.4142135623730951  # UCB exploration weight γ = √2 (SPEC §3.2 step 3), in [0, 100]
  tau_acc: float = 0.5  # acceptance threshold τ_acc on the receiver's UCB, in [0, 1] (see validate)
  alpha0: float = 1.0  # Beta prior α0, finite > 0
  beta0: float = 1.0  # Beta prior β0, finite > 0
  phi_min: float = -0.1  # Shapley clip range lower end (eq. 5), finite, < phi_max
  phi_max: float = 0.1  # Shapley clip range upper end (eq. 5), finite, > phi_min
  goal: str = "none"  # goal-aware filter: none, homogeneity, diversity, alignment
  metadata: str = "base"  # metadata vector: base (3-dim) or goal (15-dim)
  keep_fraction: float = 0.25  # fraction of ordered pairs the goal filter keeps (τ_sim calibration), in (0, 1]
  pool_size: int = 0  # candidate pool size M per center, ≥ 0 (0 = every other center, the paper's C × C beliefs)
  head_layers: int = 0  # personalized head layers kept local: 0, 1 or 2 (≤ len(learner.hidden))
  wire: str = "fp32"  # wire format of sent parameters: fp32 or bf16
  momentum: float = 0.0  # β of the momentum on each center's aggregation delta (ABPS-X: 0.5), in [0, 1)
  early_stopping_patience: int = 0  # rounds without a better mean val AUROC before stopping, ≥ 0 (0 = off)
  exact_shapley_max: int = 5  # exact Shapley (2^|P_i| coalitions) for a center with |P_i| ≤ this, else truncated
  # Monte Carlo, per center (SPEC §3.2 step 7); in [0, 10]
  tmc_permutations: int = 8  # B, truncated Monte Carlo permutations, in [1, 256]


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One experiment: which methods, how long, which seeds, on which data."""

  name: str = ""  # experiment name (the config file's stem)
  methods: tuple = ("fedavg",)  # methods to run, in order (see fedjax_sim.algorithms.registry.METHODS)
  rounds: int = 50  # communication rounds R (SPEC §3.1: 50), ≥ 1
  seeds: tuple = (11, 22, 33, 44, 55)  # experiment seeds, run together in one compiled call (SPEC §3.1);
  # distinct integers in [0, 2³²)
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
  reference_rounds: int = 0  # R_ref of the bandwidth ratio (SPEC §3.4), ≥ 0; 0 = the run's rounds
  overrides: tuple = ()  # the user's --set pairs, re-applied after each method's preset (set by the CLI)


# --- validation ----------------------------------------------------------------------------------

_SECTIONS = {f.name: f.type for f in dataclasses.fields(ExperimentConfig) if dataclasses.is_dataclass(f.default)}
_CHOICES = {
    ("data", "source"): ("synthetic", "mimic", "csv"),
    ("data", "partition"): ("natural", "iid", "dirichlet"),
    ("data", "impute"): ("none", "median"),
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
  except (TypeError, ValueError, OverflowError):
    raise ConfigError(f"{key}: expected {_kind(default)}, got {value!r}") from None


def _kind(default: Any) -> str:
  """What a value of ``default``'s type is called in messages (``a comma-separated list of integers``)."""
  if isinstance(default, bool):
    return "true or false"
  if isinstance(default, int):
    return "an integer"
  if isinstance(default, float):
    return "a number"
  if isinstance(default, tuple):
    elem = default[0] if default else ""
    plural = {"an integer": "integers", "a number": "numbers"}.get(_kind(elem), "names")
    return f"a comma-separated list of {plural}"
  return "a string"


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


SEED_LIMIT = 2 ** 32
"""Seeds (experiment, data and graph) lie in [0, 2³²): they key uint32 PRNG streams (``jax.random.key``)."""

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
  the range its field comment documents. Ranges that need the federation (κ
  against the number of centers, the graph degree, WPFed's candidates) are
  checked once it is built (:func:`fedjax_sim.algorithms.registry.check_federation`).

  Decision (issue 9): ``abps.tau_acc`` ∈ [0, 1]. τ_acc thresholds the receiver's
  belief about a success probability; the UCB is at least the posterior mean,
  which lies in (0, 1), so τ_acc = 0 accepts every proposer. Above 1 the
  threshold could be met only through the exploration bonus (acceptance would
  reward how rarely a peer was seen, not its credit), and with γ = 0 it rests
  every center. ``abps.gamma`` ∈ [0, 100]: at γ = 100 the bonus already outweighs
  any posterior mean for far more rounds than a run has; a larger γ is a typo.
  """
  from fedjax_sim.algorithms.registry import METHODS  # local import: registry imports config

  def need(cond, key, what):
    if not cond:
      raise ConfigError(f"{key} must be {what}, got {_get(config, key)!r}")

  if not config.methods:
    raise ConfigError("methods is empty; choose from: " + ", ".join(METHODS))
  for m in config.methods:
    if m not in METHODS:
      raise ConfigError(f"unknown method {m!r}; choose from: {', '.join(METHODS)}")
  for key, value in _settings(config):  # one finiteness check for every float setting
    for v in value if isinstance(value, tuple) else (value,):
      if isinstance(v, float) and not (math.isfinite(v) and abs(v) <= FLOAT32_MAX):
        raise ConfigError(f"{key} must be a finite number (within float32 range), got {v!r}")
  need(config.rounds > 0, "rounds", "a positive integer")
  need(len(config.seeds) > 0, "seeds", "a non-empty list of integers")
  for s in config.seeds:
    if not 0 <= s < SEED_LIMIT:
      raise ConfigError(f"seeds must be integers in [0, 2^32) = [0, {SEED_LIMIT - 1}], got {s}")
  need(len(set(config.seeds)) == len(config.seeds), "seeds", "distinct")
  for (sec, field), choices in _CHOICES.items():
    v = getattr(getattr(config, sec), field)
    if v not in choices:
      raise ConfigError(f"{sec}.{field} must be one of {', '.join(choices)}; got {v!r}")
  lr = config.learner
  need(lr.batch_size > 0, "learner.batch_size", "a positive integer")
  need(lr.local_epochs > 0, "learner.local_epochs", "a positive integer")
  need(lr.local_steps >= 0, "learner.local_steps", "≥ 0 (0 = use local_epochs)")
  need(0 < lr.learning_rate <= 10, "learner.learning_rate", "positive and at most 10 (in (0, 10])")
  need(0 <= lr.weight_decay < 1, "learner.weight_decay", "in [0, 1)")
  need(0 <= lr.dropout < 1, "learner.dropout", "in [0, 1)")
  need(len(lr.hidden) > 0 and all(h > 0 for h in lr.hidden), "learner.hidden", "positive widths")
  need(lr.num_buckets >= 1, "learner.num_buckets", "≥ 1")
  fa = config.fedavg
  need(fa.head_layers in (0, 1, 2) and fa.head_layers <= len(config.learner.hidden), "fedavg.head_layers",
       "0, 1 or 2 (and at most the number of hidden layers)")
  need(0 <= fa.server_momentum < 1, "fedavg.server_momentum", "in [0, 1)")
  need(fa.early_stopping_patience >= 0, "fedavg.early_stopping_patience", "≥ 0")
  g = config.graph
  need(g.degree >= 1, "graph.degree", "≥ 1")
  need(0 <= g.graph_seed < SEED_LIMIT, "graph.graph_seed", "in [0, 2^32)")
  need(0 <= g.defta_decay < 1, "graph.defta_decay", "in [0, 1)")
  w = config.wpfed
  need(1 <= w.bits <= 4096, "wpfed.bits", "in [1, 4096]")
  need(w.candidates >= 1, "wpfed.candidates", "≥ 1")
  need(1 <= w.k <= w.candidates, "wpfed.k", "in [1, wpfed.candidates]")
  need(config.fedprox.mu >= 0, "fedprox.mu", "≥ 0")
  need(config.feddyn.alpha > 0, "feddyn.alpha", "positive")
  need(config.moon.mu >= 0, "moon.mu", "≥ 0")
  need(config.moon.temperature > 0, "moon.temperature", "positive")
  a = config.abps
  need(a.kappa >= 1, "abps.kappa", "≥ 1")
  need(0 <= a.epsilon <= 1, "abps.epsilon", "in [0, 1]")
  need(0 <= a.gamma <= 100, "abps.gamma", "in [0, 100]")
  need(0 <= a.tau_acc <= 1, "abps.tau_acc", "in [0, 1] (a threshold on the receiver's belief, a probability)")
  need(a.alpha0 > 0, "abps.alpha0", "positive")
  need(a.beta0 > 0, "abps.beta0", "positive")
  need(a.phi_max > a.phi_min, "abps.phi_max", f"greater than abps.phi_min = {a.phi_min!r}")
  need(0 < a.keep_fraction <= 1, "abps.keep_fraction", "in (0, 1]")
  need(a.pool_size >= 0, "abps.pool_size", "≥ 0")
  need(a.head_layers in (0, 1, 2) and a.head_layers <= len(config.learner.hidden), "abps.head_layers",
       "0, 1 or 2 (and at most the number of hidden layers)")
  need(0 <= a.momentum < 1, "abps.momentum", "in [0, 1)")
  need(a.early_stopping_patience >= 0, "abps.early_stopping_patience", "≥ 0")
  need(0 <= a.exact_shapley_max <= 10, "abps.exact_shapley_max", "in [0, 10] (exact Shapley evaluates 2^κ coalitions)")
  need(1 <= a.tmc_permutations <= 256, "abps.tmc_permutations", "in [1, 256]")
  if config.report not in ("", "table1"):
    raise ConfigError(f"report must be '' or 'table1', got {config.report!r}")
  need(config.reference_rounds >= 0, "reference_rounds", "≥ 0 (0 = rounds)")
  d = config.data
  need(d.num_centers > 0, "data.num_centers", "a positive integer")
  need(d.total_stays > 0, "data.total_stays", "a positive integer")
  need(d.min_site_rows >= 3, "data.min_site_rows", "≥ 3 (each split needs a row)")
  need(d.dirichlet_alpha > 0, "data.dirichlet_alpha", "positive")
  need(d.num_clients >= 0, "data.num_clients", "≥ 0")
  need(0 <= d.data_seed < SEED_LIMIT, "data.data_seed", "in [0, 2^32)")
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
