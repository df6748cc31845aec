"""Which rounds a classifier's global model spent predicting one class (docs/FBSFL.md §2d: q = 4 chases).

Usage:
  python benchmarks/single_class.py RUN_DIR [RUN_DIR ...] [--tolerance 5e-4] [--json FILE]

A model that gives every input the same class c scores, on the platform's validation metric (the mean over
clients with validation rows of each client's accuracy), exactly r_c = mean_i (share of class c in client i's
validation rows). This script rebuilds each run's federation from its ``summary.json`` (no download, no
training: the data files the run read), computes the ten r_c, and reads every method's per-seed validation
curve (``METHOD/seed_S.json``, ``val_accuracy_curve``): a round whose accuracy is within ``--tolerance`` of some
r_c is counted as a single-class round of class argmin_c |acc − r_c|. It prints, per method and seed, the
single-class rounds, the classes visited and the switches between consecutive single-class rounds of different
classes. A mixed prediction can match some r_c by coincidence, so a count is an upper bound that the switch
count makes readable: a model stuck on one class has few switches, a model chasing the worst-fit clients many.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

try:  # the installed package (or PYTHONPATH), else the checkout this script lives in
  import fedjax_sim  # noqa: F401
except ImportError:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from fedjax_sim.build import build_federation  # noqa: E402
from fedjax_sim.config import load_experiment  # noqa: E402


def _as_set(value) -> str:
  return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def single_class_rates(y_val: np.ndarray, m_val: np.ndarray, num_classes: int) -> np.ndarray:
  """``[num_classes]`` r_c: the validation metric of a model that always predicts c (mean over clients with
  validation rows of the share of c among them)."""
  m = np.asarray(m_val).astype(bool)
  has = m.any(axis=1)
  counts = np.stack([((np.asarray(y_val) == c) & m).sum(axis=1) for c in range(num_classes)], axis=1)
  return (counts[has] / m[has].sum(axis=1, keepdims=True)).mean(axis=0)


def single_class_rounds(curve: np.ndarray, rates: np.ndarray, tolerance: float) -> dict:
  """Rounds of ``curve`` within ``tolerance`` of a single-class rate, the classes visited and the switches."""
  curve = np.asarray(curve, np.float64)
  dist = np.abs(curve[:, None] - rates[None, :])
  cls, single = dist.argmin(axis=1), dist.min(axis=1) <= tolerance
  both = single[1:] & single[:-1]
  return {"rounds": int(curve.size), "single_class_rounds": int(single.sum()),
          "classes_visited": sorted(set(cls[single].tolist())),
          "switches": int(np.sum((cls[1:] != cls[:-1]) & both)), "best": float(np.nanmax(curve))}


def federation_of(summary: dict):
  """The run's federation, rebuilt from the data section its ``summary.json`` recorded."""
  config = summary["config"]
  overrides = {f"data.{k}": _as_set(v) for k, v in config["data"].items() if v not in ("", [])}
  overrides["learner.batch_size"] = str(config["learner"]["batch_size"])
  return build_federation(load_experiment(summary["experiment"], overrides), warn=lambda m: None)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("runs", nargs="+", help="run folders (each with summary.json and METHOD/seed_S.json)")
  p.add_argument("--tolerance", type=float, default=5e-4)
  p.add_argument("--json", default="", help="also write the figures here")
  args = p.parse_args(argv)
  out = {}
  for run in map(pathlib.Path, args.runs):
    summary = json.loads((run / "summary.json").read_text())
    fed = federation_of(summary)
    rates = single_class_rates(fed.y_val, fed.m_val, int(fed.num_classes))
    print(f"{run}: single-class rates r_c = {', '.join(f'{r:.3f}' for r in rates)}")
    for method in summary["methods"]:
      for seed in summary["config"]["seeds"]:
        path = run / method / f"seed_{seed}.json"
        curve = json.loads(path.read_text()).get("val_accuracy_curve")
        if curve is None:
          print(f"error: {path} has no val_accuracy_curve (a classifier run is needed)", file=sys.stderr)
          return 2
        row = single_class_rounds(np.asarray(curve), rates, args.tolerance)
        out[f"{run}/{method}/{seed}"] = row
        print(f"  {method} seed {seed}: {row['single_class_rounds']}/{row['rounds']} single-class rounds, "
              f"{len(row['classes_visited'])} classes visited, {row['switches']} switches, "
              f"best accuracy {row['best']:.3f}")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
