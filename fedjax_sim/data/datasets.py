"""Labelled datasets on the host, before they are partitioned into clients (issue 10 item 5, SPEC §2.2).

Every image or text source (:mod:`fedjax_sim.data.sources`: Fashion-MNIST,
CIFAR-10, LEAF JSON, PACS, the Gutenberg Shakespeare) returns
:class:`LabeledData`: features of any shape, integer labels with their number
of classes, and optionally each row's natural client (a writer, a speaking
role, a domain). Partitions then cut it into clients.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from fedjax_sim.errors import DataError


@dataclasses.dataclass(frozen=True)
class LabeledData:
  """A labelled dataset on the host, before partitioning into clients."""
  x: np.ndarray  # [n, ...] features: uint8 images [n, H, W, C], float32 rows/images, or int32 token windows [n, L]
  y: np.ndarray  # [n] int32 class labels in [0, num_classes), or [n, L] int32 next tokens (sequence tasks)
  num_classes: int  # classes (or vocabulary size for next-character data)
  groups: Optional[np.ndarray] = None  # [n] int32 natural client of each row (writer, speaking role), or None
  group_names: tuple = ()  # name of each group id (len = number of groups), () when groups is None
  class_names: tuple = ()  # optional names of the classes
  description: str = ""  # one line: what was loaded, from where

  @property
  def num_rows(self) -> int:
    """The number of rows ``n``."""
    return int(np.shape(self.x)[0])

  def validate(self) -> "LabeledData":
    """Checks that the fields agree with each other.

    Checked: ``x`` has a leading row axis; ``y`` has one integer label per row
    (``[n]``), or one per position of a token window (``[n, L]`` with ``x``
    ``[n, L]``); labels lie in ``[0, num_classes)``; ``groups`` (when given) is
    ``[n]`` integers in ``[0, len(group_names))`` and ``group_names`` is ``()``
    exactly when ``groups`` is None; ``class_names`` is ``()`` or has
    ``num_classes`` entries.

    Returns:
      ``self``, so that ``LabeledData(...).validate()`` can be returned.

    Raises:
      DataError: naming the first field that disagrees.
    """
    what = self.description or "dataset"
    x, y = np.asarray(self.x), np.asarray(self.y)
    if x.ndim < 1:
      raise DataError(f"{what}: x must have a leading row axis, got a scalar")
    n = x.shape[0]
    if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, (int, np.integer)) \
        or self.num_classes < 1:
      raise DataError(f"{what}: num_classes must be an integer >= 1, got {self.num_classes!r}")
    if not np.issubdtype(y.dtype, np.integer):
      raise DataError(f"{what}: labels y must be integers, got dtype {y.dtype}")
    if y.ndim == 1:
      if y.shape[0] != n:
        raise DataError(f"{what}: y has {y.shape[0]} labels for {n} rows of x")
    elif y.ndim == 2:
      if y.shape != x.shape[:2] or x.ndim != 2:
        raise DataError(f"{what}: sequence labels y {y.shape} must have the shape of the token windows x {x.shape}")
    else:
      raise DataError(f"{what}: y must be [n] labels or [n, L] next tokens, got shape {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= self.num_classes):
      raise DataError(f"{what}: labels must lie in [0, {self.num_classes}), got values in "
                      f"[{y.min()}, {y.max()}]")
    if self.class_names and len(self.class_names) != self.num_classes:
      raise DataError(f"{what}: class_names has {len(self.class_names)} names for {self.num_classes} classes")
    if self.groups is None:
      if self.group_names:
        raise DataError(f"{what}: group_names is given but groups is None")
    else:
      g = np.asarray(self.groups)
      if g.shape != (n,) or not np.issubdtype(g.dtype, np.integer):
        raise DataError(f"{what}: groups must be [{n}] integers, got shape {g.shape} and dtype {g.dtype}")
      if g.size and (g.min() < 0 or g.max() >= len(self.group_names)):
        raise DataError(f"{what}: group ids must lie in [0, {len(self.group_names)}) (one name each), got "
                        f"values in [{g.min()}, {g.max()}]")
    return self

  def subset(self, idx) -> "LabeledData":
    """The rows ``idx`` of this dataset.

    Args:
      idx: row indices (an int array, any order, repeats allowed) or a boolean
        mask of length ``n``.

    Returns:
      A :class:`LabeledData` with those rows of ``x``, ``y`` and ``groups``;
      ``num_classes``, ``group_names`` (all of them, so group ids keep their
      meaning), ``class_names`` and ``description`` are kept.
    """
    idx = np.asarray(idx)
    groups = None if self.groups is None else np.asarray(self.groups)[idx]
    return dataclasses.replace(self, x=np.asarray(self.x)[idx], y=np.asarray(self.y)[idx], groups=groups)
