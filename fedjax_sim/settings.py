"""Declared settings: a config field's default, its valid range and its meaning in one place (issue 10).

A config section is a frozen dataclass whose fields are declared with
:func:`setting`::

    @dataclasses.dataclass(frozen=True)
    class FedProxConfig:
      mu: float = setting(0.01, at_least(0.0))  # proximal coefficient μ (SPEC §3.3)

The range travels with the field (``dataclasses.field`` metadata), so one
generic check (:func:`check_section`) validates every section of every
method, and the error names the key and the range the comment states.
Checks that involve two fields (``wpfed.k ≤ wpfed.candidates``) are a
section's own ``validate`` hook (:class:`fedjax_sim.algorithms.spec.MethodSpec`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional


class Check(NamedTuple):
  """A predicate on one setting and how its valid values are described in messages (``"in [0, 1)"``)."""

  test: Callable[[Any], bool]
  text: str


def _num(v) -> str:
  return f"{v:g}" if isinstance(v, float) else str(v)


def at_least(lo) -> Check:
  """``v ≥ lo``."""
  return Check(lambda v: v >= lo, f"≥ {_num(lo)}")


def positive() -> Check:
  """``v > 0``."""
  return Check(lambda v: v > 0, "positive")


def within(lo, hi, *, open_lo: bool = False, open_hi: bool = False) -> Check:
  """``lo ≤ v ≤ hi``, either end open."""
  left, right = "(" if open_lo else "[", ")" if open_hi else "]"
  return Check(lambda v: (v > lo if open_lo else v >= lo) and (v < hi if open_hi else v <= hi),
               f"in {left}{_num(lo)}, {_num(hi)}{right}")


def one_of(*choices) -> Check:
  """``v`` is one of ``choices`` (the message lists them)."""
  return Check(lambda v: v in choices, "one of " + ", ".join(map(str, choices)))


def each(check: Check) -> Check:
  """Every element of a tuple setting passes ``check``."""
  return Check(lambda v: all(check.test(x) for x in v), f"a list whose every entry is {check.text}")


def nonempty_each(check: Check) -> Check:
  """A non-empty tuple whose every element passes ``check``."""
  return Check(lambda v: len(v) > 0 and all(check.test(x) for x in v),
               f"a non-empty list whose every entry is {check.text}")


def described(check: Check, text: str) -> Check:
  """``check`` with its own wording in messages (``"a positive integer"``)."""
  return Check(check.test, text)


def setting(default, check: Optional[Check] = None, *, note: str = "", elem: Any = ""):
  """A config field with its default and valid range (``note`` is appended to the range in messages). ``elem`` is
  a sample element of a tuple field whose default is empty (``0``: a list of integers; default: names)."""
  return dataclasses.field(default=default, metadata={"check": check, "note": note, "elem": elem})


def field_check(section_cls, name: str) -> Optional[Check]:
  """The :class:`Check` declared for field ``name`` of ``section_cls`` (None if undeclared)."""
  for f in dataclasses.fields(section_cls):
    if f.name == name:
      return f.metadata.get("check")
  return None


def check_section(prefix: str, section, fields=None) -> None:
  """Raises :class:`~fedjax_sim.errors.ConfigError` for the first field of ``section`` outside its declared range.

  The message is ``{prefix}.{field} must be {range} ({note}), got {value!r}`` (no prefix: ``{field} ...``).
  ``fields`` defaults to the dataclass fields of ``section``.
  """
  from fedjax_sim.errors import ConfigError
  for f in dataclasses.fields(section) if fields is None else fields:
    check = f.metadata.get("check")
    if check is None:
      continue
    value = getattr(section, f.name)
    if not check.test(value):
      note = f.metadata.get("note", "")
      key = f"{prefix}.{f.name}" if prefix else f.name
      raise ConfigError(f"{key} must be {check.text}{f' ({note})' if note else ''}, got {value!r}")
