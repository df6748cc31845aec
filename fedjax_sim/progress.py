"""A progress display fed from inside the compiled program (issue 4 "Long runs").

The round body calls :meth:`Progress.on_round` through ``jax.debug.callback``
with the round index and the runs' mean validation metric (the task's: AUROC
for the clinical task, accuracy for the image and text tasks); on a terminal
the display is a tqdm bar on stderr with rounds done, elapsed time, ETA and
that metric. It appears only after a couple of seconds (short runs stay quiet),
and not at all with ``--quiet``. When stderr is not a terminal (a log file, a
batch job) there is no display and no callback compiled into the program,
unless ``--progress`` asks for one: then it is a plain log line at every 5 % of
the rounds, which a file keeps readable (a bar's carriage returns do not).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Optional

import numpy as np

METRIC_LABELS = {"auroc": "AUROC", "accuracy": "accuracy"}


def wanted(quiet: bool, stream=None, forced: bool = False) -> bool:
  """Whether to show progress: not ``--quiet``, and the stream is a terminal or ``--progress`` (``forced``)."""
  stream = stream or sys.stderr
  return not quiet and (forced or (hasattr(stream, "isatty") and stream.isatty()))


def _minutes(seconds: float) -> str:
  return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class Progress:
  """Rounds of one method's runs (all seeds and grid points move together): a bar on a terminal, log lines
  otherwise (``lines``, by default when the stream is not a terminal)."""

  def __init__(self, label: str, rounds: int, runs: int, stream=None, delay: float = 2.0, metric: str = "auroc",
               lines: Optional[bool] = None, steps: int = 20):
    self.label = label
    self.rounds = rounds
    self.runs = runs
    self._stream = stream
    self._delay = delay
    self._metric = METRIC_LABELS.get(metric, metric)
    self._lines = lines
    self._every = max(1, -(-rounds // steps))  # a line at every ``rounds / steps`` rounds (5 %), and the last
    self._lock = threading.Lock()
    self._bar = None
    self._opened = None  # (time, rounds done) when the clock started: log lines' rate counts from here
    self._done = 0
    self._said = 0

  @property
  def stream(self):
    return self._stream or sys.stderr

  def open(self) -> None:
    """Starts the clock (the bar is made here, not when the program is built: compiling
    ahead of the run must not count as elapsed time)."""
    with self._lock:
      if self._opened is not None:
        return
      self._opened = (time.perf_counter(), 0)
      if self._lines is None:
        self._lines = not (hasattr(self.stream, "isatty") and self.stream.isatty())
      if not self._lines:
        from tqdm import tqdm
        self._bar = tqdm(total=self.rounds, desc=self.label, unit="round", file=self.stream,
                         delay=self._delay, dynamic_ncols=True, leave=False)

  def _postfix(self, vals) -> str:
    vals = np.asarray(vals, np.float64)
    ok = vals[np.isfinite(vals)]
    return f"val {self._metric} {ok.mean():.4f}" if ok.size else ""

  def _line(self, t: int, postfix: str) -> None:
    start, done0 = self._opened
    elapsed = time.perf_counter() - start
    parts = [f"round {t}/{self.rounds}", f"{_minutes(elapsed)} elapsed"]
    if t > done0:
      per_round = elapsed / (t - done0)
      parts.append(f"{per_round:.2f} s/round")
      if t < self.rounds:
        parts.append(f"about {_minutes(per_round * (self.rounds - t))} left")
    if postfix:
      parts.append(postfix)
    print(f"[fedjax_sim] {self.label}: " + ", ".join(parts), file=self.stream, flush=True)

  def on_round(self, t, vals) -> None:
    """Host callback: round ``t`` finished with per-run mean validation metric ``vals``."""
    t = int(np.asarray(t))
    self.open()
    with self._lock:
      if t <= self._done:
        return
      self._done = t
      postfix = self._postfix(vals)
      if self._lines:
        if t == self.rounds or t // self._every > self._said // self._every:
          self._said = t
          self._line(t, postfix)
        return
      self._bar.update(t - self._bar.n)
      if postfix:
        self._bar.set_postfix_str(postfix, refresh=True)

  def start_at(self, rounds_done: int) -> None:
    """A resumed run starts with ``rounds_done`` rounds already done (they do not count in the rate)."""
    self.open()
    with self._lock:
      self._opened = (self._opened[0], rounds_done)
      self._done = self._said = max(self._done, rounds_done)
      if self._bar is not None:
        self._bar.update(rounds_done - self._bar.n)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
