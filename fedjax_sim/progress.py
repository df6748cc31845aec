"""A progress display fed from inside the compiled program (issue 4 "Long runs").

The round body calls :meth:`Progress.on_round` through ``jax.debug.callback``
with the round index and the runs' mean validation AUROC; the bar (tqdm, on
stderr) shows rounds done, elapsed time, ETA and the current mean validation
AUROC. It appears only after a couple of seconds (short runs stay quiet), and
not at all with ``--quiet`` or when stderr is not a terminal: then no callback
is compiled into the program.
"""
from __future__ import annotations

import sys
import threading

import numpy as np


def wanted(quiet: bool, stream=None) -> bool:
  """Whether to show progress: not ``--quiet`` and the stream is a terminal."""
  stream = stream or sys.stderr
  return not quiet and hasattr(stream, "isatty") and stream.isatty()


class Progress:
  """Rounds of one method's runs (all seeds and grid points move together)."""

  def __init__(self, label: str, rounds: int, runs: int, stream=None, delay: float = 2.0):
    self.label = label
    self.rounds = rounds
    self.runs = runs
    self._stream = stream
    self._delay = delay
    self._lock = threading.Lock()
    self._bar = None

  def open(self) -> None:
    """Starts the clock (the bar is made here, not when the program is built: compiling
    ahead of the run must not count as elapsed time)."""
    from tqdm import tqdm
    with self._lock:
      if self._bar is None:
        self._bar = tqdm(total=self.rounds, desc=self.label, unit="round", file=self._stream or sys.stderr,
                         delay=self._delay, dynamic_ncols=True, leave=False)

  def on_round(self, t, vals) -> None:
    """Host callback: round ``t`` finished with per-run mean validation AUROC ``vals``."""
    t = int(np.asarray(t))
    vals = np.asarray(vals, np.float64)
    self.open()
    with self._lock:
      if t > self._bar.n:
        self._bar.update(t - self._bar.n)
      ok = vals[np.isfinite(vals)]
      if ok.size:
        self._bar.set_postfix_str(f"val AUROC {ok.mean():.4f}", refresh=True)

  def start_at(self, rounds_done: int) -> None:
    """A resumed run starts with ``rounds_done`` rounds already done."""
    self.open()
    with self._lock:
      self._bar.update(rounds_done - self._bar.n)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
