"""Errors that the command line turns into one clear message and a non-zero exit."""


class FedjaxSimError(Exception):
  """Base class: any error a user can cause with bad input or configuration."""


class DataError(FedjaxSimError, ValueError):
  """Bad or missing input data: a missing file or column, a non-binary label, NaN features, ..."""


class ConfigError(FedjaxSimError, ValueError):
  """Bad configuration: an unknown experiment or key, an out-of-range value, ..."""


class NumericalFault(FedjaxSimError, ArithmeticError):
  """A non-finite loss or parameter inside a simulation (exit status 3, not a bad-input 2)."""

  exit_code = 3
