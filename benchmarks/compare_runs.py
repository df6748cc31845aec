"""Compares the per-seed JSON of two run folders: identical numbers, or the first difference (issue 10).

    python benchmarks/compare_runs.py BEFORE_DIR AFTER_DIR [--ignore timing]

Every ``METHOD/seed_*.json`` of BEFORE must exist in AFTER with equal content (parsed JSON, floats compared
exactly); ``summary.json``'s method entries are compared too, except their ``timing``. Exit 0 when everything
matches, 1 otherwise (each difference printed). Used to show that the platform redesign changed no ABPS number.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys


def _diff(a, b, path=""):
  """Yields ``(path, a, b)`` for every leaf where the parsed JSON ``a`` and ``b`` differ."""
  if isinstance(a, dict) and isinstance(b, dict):
    for k in sorted(set(a) | set(b)):
      if k not in a or k not in b:
        yield f"{path}/{k}", a.get(k, "<missing>"), b.get(k, "<missing>")
      else:
        yield from _diff(a[k], b[k], f"{path}/{k}")
  elif isinstance(a, list) and isinstance(b, list):
    if len(a) != len(b):
      yield f"{path} (length)", len(a), len(b)
    for i, (x, y) in enumerate(zip(a, b)):
      yield from _diff(x, y, f"{path}[{i}]")
  elif a != b:
    yield path, a, b


def compare(before: pathlib.Path, after: pathlib.Path, ignore=("timing",)) -> list:
  """Every difference between the two run folders, as printable lines (empty: identical)."""
  out = []
  files = sorted(before.glob("*/seed_*.json"))
  if not files:
    return [f"{before}: no per-seed JSON found"]
  for f in files:
    g = after / f.relative_to(before)
    if not g.exists():
      out.append(f"{g}: missing")
      continue
    out += [f"{f.relative_to(before)}{p}: {x!r} != {y!r}" for p, x, y in _diff(json.loads(f.read_text()),
                                                                                 json.loads(g.read_text()))]
  sa, sb = before / "summary.json", after / "summary.json"
  if sa.exists() and sb.exists():
    ma, mb = json.loads(sa.read_text())["methods"], json.loads(sb.read_text())["methods"]
    for name in ma:
      ea = {k: v for k, v in ma[name].items() if k not in ignore}
      eb = {k: v for k, v in mb.get(name, {}).items() if k not in ignore}
      out += [f"summary.json/{name}{p}: {x!r} != {y!r}" for p, x, y in _diff(ea, eb)]
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("before", type=pathlib.Path)
  p.add_argument("after", type=pathlib.Path)
  p.add_argument("--ignore", action="append", default=["timing"], help="summary keys not compared")
  args = p.parse_args(argv)
  diffs = compare(args.before, args.after, tuple(args.ignore))
  files = len(list(args.before.glob("*/seed_*.json")))
  for line in diffs[:50]:
    print(line)
  print(f"{files} per-seed files compared: " + ("identical" if not diffs else f"{len(diffs)} differences"))
  return 0 if not diffs else 1


if __name__ == "__main__":
  sys.exit(main())
