"""When does iPFL's market buy from a model-poisoning attacker? Box 2 alone, on a synthetic market (docs/IPFL.md §7).

Paper 003's attacker (issue 13: K = c = 0) trains, then shuffles or sign-flips its upload. The market never looks
at model quality: a buyer i ranks seller j by its price R_ij = c_j + λ d_ij N_j / N_i (Box 2, reported c and N),
with d_ij = 1 − cos(θ_i − θ_0, θ_j − θ_0) (eq. 2). A shuffled update is orthogonal to every honest one, so
d_a ≈ 1 whatever the model's size; only the honest distances move with training. At equal sizes the attacker's
price λ d_a undercuts a buyer's nearest honest seller (price c + λ d) exactly when d > d_a − c / λ, and then
every buyer takes it first (its threshold T_ij is the highest). Where buyers buy one seller each (this market at
λ ≥ 1 unless honest clients are very close), that is also the only way the attacker sells; where they buy
several, it can sell in second place too.

This script builds a market of ``--clients`` equal clients in ``--clusters`` clusters (honest distance x inside a
cluster, y across), the last client the attacker at distance ``--attacker-d``, and runs the package's own
thresholds, greedy graph and remittances (fedjax_sim/algorithms/ipfl/market.py) over a grid of x and y, then over
λ. It prints, per cell, how many buyers buy from the attacker and what it receives in one round. No data, no
training: seconds on a CPU.

Usage:
  python benchmarks/ipfl_undercut.py [--clients 9] [--clusters 3] [--rows 5333] [--gain-scale 5e5] [--cost 1]
                                     [--lam 2] [--attacker-d 1] [--json FILE]

Defaults are ``configs/ipfl_attacks.toml``'s market (9 clients of Fashion-MNIST's 80 % train split, K = 5e5,
c = 1, λ = 2, client 8 the attacker).
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

import jax.numpy as jnp  # noqa: E402

from fedjax_sim.algorithms.ipfl import market as M  # noqa: E402

GRID = (0.05, 0.2, 0.4, 0.45, 0.55, 0.6, 0.8, 1.0)


def market_distances(clients: int, clusters: int, x: float, y: float, attacker_d: float) -> np.ndarray:
  """``[C, C]`` d: x within a cluster (clients by index in ``clusters`` equal blocks), y across, the last client
  at ``attacker_d`` from everyone, zero diagonal."""
  block = np.arange(clients) * clusters // clients
  d = np.where(block[:, None] == block[None, :], x, y).astype(np.float32)
  d[-1, :] = attacker_d
  d[:, -1] = attacker_d
  np.fill_diagonal(d, 0.0)
  return d


def attacker_round(d: np.ndarray, rows: float, gain_scale: float, cost: float, lam: float) -> dict:
  """One round of Box 2 and eq. 12 on equal sizes: the honest clients have K = ``gain_scale`` and c = ``cost``,
  the attacker (last) K = c = 0. Returns the attacker's buyers, its receipts Σ_i r_ia, and the honest clients'
  mean number of purchases."""
  c = d.shape[0]
  n = jnp.full((c,), rows, jnp.float32)
  k = jnp.full((c,), gain_scale, jnp.float32).at[-1].set(0.0)
  cr = jnp.full((c,), cost, jnp.float32).at[-1].set(0.0)
  dj = jnp.asarray(d)
  a = M.box2_graph(k, n, cr, dj, lam)
  r = np.asarray(M.remittances(a, k, n, dj, lam))
  bought = np.asarray(a) > 0
  return {"buyers": int(bought[:, -1].sum()), "receipts": float(r[:, -1].sum()),
          "purchases": float(bought[:-1].sum(axis=1).mean())}


def undercut(x: float, y: float, attacker_d: float, cost: float, lam: float) -> bool:
  """The closed form at equal sizes: the attacker is cheaper than every honest seller iff min(x, y) >
  d_a − c / λ (strictly)."""
  return min(x, y) > attacker_d - cost / lam


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--clients", type=int, default=9)
  p.add_argument("--clusters", type=int, default=3)
  p.add_argument("--rows", type=float, default=5333.0)
  p.add_argument("--gain-scale", type=float, default=5e5)
  p.add_argument("--cost", type=float, default=1.0)
  p.add_argument("--lam", type=float, default=2.0)
  p.add_argument("--attacker-d", type=float, default=1.0)
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)
  if args.clients < 3 or not 1 <= args.clusters < args.clients:
    p.error(f"need --clients ≥ 3 and 1 ≤ --clusters < --clients, got {args.clients} and {args.clusters}")
  bound = args.attacker_d - args.cost / args.lam
  print(f"{args.clients} clients of {args.rows:g} rows in {args.clusters} clusters, K = {args.gain_scale:g}, "
        f"c = {args.cost:g}, λ = {args.lam:g}; the attacker (client {args.clients - 1}) reports K = c = 0 at "
        f"d_a = {args.attacker_d:g}. Closed form: bought iff the nearest honest d > d_a − c/λ = {bound:.3f}.")
  print("cell: buyers of the attacker / its receipts in one round (honest purchases per buyer)")
  print("x \\ y | " + " | ".join(f"{y:g}" for y in GRID))
  cells = []
  for x in GRID:
    row = []
    for y in GRID:
      out = attacker_round(market_distances(args.clients, args.clusters, x, y, args.attacker_d), args.rows,
                           args.gain_scale, args.cost, args.lam)
      cells.append({"x": x, "y": y, **out, "closed_form": undercut(x, y, args.attacker_d, args.cost, args.lam)})
      row.append(f"{out['buyers']} / {out['receipts']:.2f} ({out['purchases']:.1f})")
    print(f"{x:g} | " + " | ".join(row))
  print("λ sweep at x = 0.3, y = 1 (cell as above; closed-form bound d_a − c/λ):")
  lams = []
  for lam in (0.5, 1.0, 1.5, 2.0, 3.0, 5.0):
    out = attacker_round(market_distances(args.clients, args.clusters, 0.3, 1.0, args.attacker_d), args.rows,
                         args.gain_scale, args.cost, lam)
    lams.append({"lam": lam, **out, "bound": args.attacker_d - args.cost / lam})
    print(f"  λ = {lam:g}: {out['buyers']} / {out['receipts']:.2f} ({out['purchases']:.1f}); bound "
          f"{args.attacker_d - args.cost / lam:.3f}")
  agree = sum((c["buyers"] > 0) == c["closed_form"] for c in cells)
  print(f"the closed form predicts whether anyone buys from the attacker in {agree} of {len(cells)} cells")
  result = {"args": vars(args), "cells": cells, "lam_sweep": lams, "closed_form_agrees": agree}
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
  return result


if __name__ == "__main__":
  main()
