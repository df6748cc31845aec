"""Participation fairness and payments of paper 002's strategic layer alone, over many seeds (docs/FBSFL.md §2c).

Under uniform selection nothing that decides who participates reads the model (fedjax_sim/algorithms/fbsfl/
strategic.py): the flat-fee baselines (FedAvg, FedProx, q-FFL, Ditto) and FBS-FL with π = K/N (``fbsfl_uniform``)
give the same y_t, Jain, KL, Gini, C_tot and A(T) with or without training, bit for bit (tests). So this script
runs only that layer — types, inclusion, offers, followers, beliefs — vmapped over seeds, for thousands of seeds
in seconds, and reports each variant's fairness and payments with their spread, the participation of each type
κ ∈ Θ, and the seeds of a Table 2 run for comparison with the engine's figures.

Usage:
  python benchmarks/fbsfl_participation.py [--seeds 42,123,456,789,1011] [--num-seeds 1000] [--rounds 200]
                                           [--clients 100] [--k 10] [--every 20] [--variants 0,2]
                                           [--json FILE]

``--seeds`` lists seeds whose per-seed figures are printed (a Table 2 run's); ``--num-seeds`` more seeds
(0, 1, …) give the distribution. The [fbsfl] numbers are the config defaults (paper 002 §4.6).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

try:  # the installed package (or PYTHONPATH), else the checkout this script lives in
  import fedjax_sim  # noqa: F401
except ImportError:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from fedjax_sim.algorithms import registry  # noqa: E402
from fedjax_sim.algorithms.fbsfl import strategic as ST  # noqa: E402
from fedjax_sim.algorithms.fbsfl.beliefs import TYPE_GRID  # noqa: E402
from fedjax_sim.algorithms.fbsfl.report import checkpoint_rounds  # noqa: E402
from fedjax_sim.config import ExperimentConfig, apply_overrides  # noqa: E402
from fedjax_sim.metrics import gini, jain_index, kl_to_uniform  # noqa: E402

VARIANTS = (  # (label, simulate_seed keywords, [fbsfl] overrides)
    ("flat fee r̄ = 0.52, EXP3 (FedAvg, FedProx, q-FFL, Ditto)", {"pricing": "flat"}, {}),
    ("flat fee r̄ = 0.52, best response", {"pricing": "flat", "follower": "br"}, {}),
    ("eq. 10 offers, π = K/N, EXP3 (fbsfl_uniform)", {"pricing": "fbsfl"}, {}),
    ("eq. 10 offers, π = K/N, EXP3, b_0 = 0", {"pricing": "fbsfl"}, {"b0": "0"}),
    ("eq. 10 offers, π = K/N, EXP3, beliefs frozen at μ_0", {"pricing": "fbsfl", "freeze_beliefs": True}, {}),
    ("eq. 10 offers, π = K/N, best response", {"pricing": "fbsfl", "follower": "br"}, {}),
    ("eq. 10 offers, π = K/N, logit", {"pricing": "fbsfl", "follower": "logit"}, {}),
    ("eq. 10 offers, π = K/N, best response, b_0 = 0", {"pricing": "fbsfl", "follower": "br"}, {"b0": "0"}),
)


def hyper(overrides: dict):
  config = apply_overrides(ExperimentConfig(), {"methods": "fbsfl",
                                                **{f"fbsfl.{k}": v for k, v in overrides.items()}})
  return registry.hyper_from_config(config, "fbsfl").method


def per_seed_figures(layer: ST.Participation, marks) -> dict:
  """One seed's figures from its ``[R, N]`` layer (SPEC §4.4 on the cumulative counts Σ_t y_t), and Jain of the
  counts up to each round of ``marks``."""
  y = layer.y.astype(jnp.float32)
  counts = y.sum(0)
  jain_at = jax.vmap(jain_index)(jnp.cumsum(y, axis=0)[jnp.asarray(marks) - 1])
  spent = (layer.r * y).sum()
  grid = jnp.asarray(TYPE_GRID, jnp.float32)
  of_type = layer.kappa[:, None] == grid[None]  # [N, M]
  per_type = (counts[:, None] * of_type).sum(0) / jnp.maximum(of_type.sum(0), 1)  # mean count of a type's clients
  offered = (layer.z.astype(jnp.float32).sum(0)[:, None] * of_type).sum(0)
  accepted = (counts[:, None] * of_type).sum(0)
  c_hat = (layer.cost_proxy[-1][:, None] * of_type).sum(0) / jnp.maximum(of_type.sum(0), 1)  # ĉ_T per type
  return {"jain": jain_index(counts), "kl": kl_to_uniform(counts), "gini": gini(counts), "c_tot": spent,
          "accepted": counts.sum(), "bonus_share": (layer.bonus * y).sum() / jnp.maximum(spent, 1e-12),
          "pay_per_update": spent / jnp.maximum(counts.sum(), 1.0),
          "type_count": per_type, "type_acceptance": accepted / jnp.maximum(offered, 1.0), "jain_at": jain_at,
          "type_cost_proxy": c_hat}


def run_variant(seeds, rounds: int, n: int, k: int, kwargs: dict, overrides: dict, marks) -> dict:
  h = hyper(overrides)
  fn = jax.jit(jax.vmap(lambda key: per_seed_figures(ST.simulate_seed(key, rounds, h, num_clients=n, k=k,
                                                                      **kwargs), marks)))
  keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
  return {name: np.asarray(v, np.float64) for name, v in jax.device_get(fn(keys)).items()}


def summary(figs: dict) -> dict:
  mean_std = lambda v: [float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else float("nan")]  # noqa: E731
  out = {key: mean_std(figs[key]) for key in ("jain", "kl", "gini", "c_tot", "accepted", "bonus_share",
                                               "pay_per_update")}
  out["pr_jain_at_least_0.90"] = float(np.mean(figs["jain"] >= 0.90))
  out["pr_kl_at_most_0.10"] = float(np.mean(figs["kl"] <= 0.10))
  out["type_count"] = [float(v) for v in np.nanmean(figs["type_count"], axis=0)]
  out["type_acceptance"] = [float(v) for v in np.nanmean(figs["type_acceptance"], axis=0)]
  out["jain_at"] = [float(v) for v in np.mean(figs["jain_at"], axis=0)]
  out["type_cost_proxy"] = [float(v) for v in np.nanmean(figs["type_cost_proxy"], axis=0)]
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--seeds", default="42,123,456,789,1011")
  ap.add_argument("--num-seeds", type=int, default=1000)
  ap.add_argument("--rounds", type=int, default=200)
  ap.add_argument("--clients", type=int, default=100)
  ap.add_argument("--k", type=int, default=10)
  ap.add_argument("--every", type=int, default=0, help="Jain of the counts every this many rounds (0: T/10)")
  ap.add_argument("--variants", default="", help="comma-separated indices into VARIANTS (default: all)")
  ap.add_argument("--json", default=None)
  args = ap.parse_args(argv)
  listed = [int(s) for s in args.seeds.split(",") if s.strip()]
  try:
    chosen = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else list(VARIANTS)
  except (ValueError, IndexError):
    chosen = None
  if args.num_seeds < 2 or not 0 < args.k <= args.clients or args.rounds < 1 or args.every < 0 or not chosen:
    print(f"error: need --num-seeds ≥ 2, 0 < --k ≤ --clients, --rounds ≥ 1, --every ≥ 0 and --variants indices in "
          f"0..{len(VARIANTS) - 1}", file=sys.stderr)
    return 2
  marks = checkpoint_rounds(args.rounds, args.every or max(args.rounds // 10, 1))
  print(f"strategic layer alone: N = {args.clients}, K = {args.k}, T = {args.rounds}, {args.num_seeds} seeds "
        f"(0..{args.num_seeds - 1}); types Θ = {list(TYPE_GRID)}; {jax.devices()[0].device_kind}")
  report = {"clients": args.clients, "k": args.k, "rounds": args.rounds, "num_seeds": args.num_seeds,
            "listed_seeds": listed, "variants": {}}
  header = ("| variant | Jain | KL | Gini | Pr(Jain ≥ 0.90) | C_tot | A(T) | C_tot / A(T) | bonus share (%) | "
            "mean count per type κ = " + ", ".join(f"{v:g}" for v in TYPE_GRID) + " |")
  print(header + "\n" + "| --- " * 10 + "|")
  for label, kwargs, overrides in chosen:
    t0 = time.perf_counter()
    both = run_variant(np.concatenate([listed, np.arange(args.num_seeds)]).astype(np.int64), args.rounds,
                       args.clients, args.k, kwargs, overrides, marks)  # one compiled call: listed seeds first
    listed_figs = {key: v[:len(listed)] for key, v in both.items()}
    many = summary({key: v[len(listed):] for key, v in both.items()})
    seconds = time.perf_counter() - t0
    pm = lambda key, d=2, s=1.0: f"{many[key][0] * s:.{d}f} ± {many[key][1] * s:.{d}f}"  # noqa: E731
    print(f"| {label} | {pm('jain')} | {pm('kl')} | {pm('gini')} | {many['pr_jain_at_least_0.90']:.3f} | "
          f"{pm('c_tot', 1)} | {pm('accepted', 0)} | {pm('pay_per_update', 3)} | {pm('bonus_share', 1, 100.0)} | "
          + ", ".join(f"{v:.1f}" for v in many["type_count"]) + " |", flush=True)
    entry = {"label": label, "kwargs": kwargs, "overrides": overrides, "many_seeds": many, "seconds": seconds}
    if listed:
      entry["listed"] = {key: listed_figs[key].tolist() for key in ("jain", "kl", "c_tot", "accepted",
                                                                    "bonus_share")}
    report["variants"][label] = entry
  print("\nJain of the cumulative counts at rounds " + ", ".join(map(str, marks)) + " (mean over seeds)")
  for label, entry in report["variants"].items():
    print(f"  {label}: " + " ".join(f"{v:.3f}" for v in entry["many_seeds"]["jain_at"]))
  report["marks"] = marks
  print("\nper type κ = " + ", ".join(f"{v:g}" for v in TYPE_GRID) + ": acceptance of an offer; the cost proxy ĉ at "
        "round T (mean over seeds)")
  for label, entry in report["variants"].items():
    m = entry["many_seeds"]
    print(f"  {label}: " + ", ".join(f"{v:.3f}" for v in m["type_acceptance"]) + "; ĉ_T "
          + ", ".join(f"{v:.3f}" for v in m["type_cost_proxy"]))
  if listed:
    print(f"\nper listed seed ({', '.join(map(str, listed))}): Jain / KL / C_tot / A(T)")
    for label, entry in report["variants"].items():
      v = entry["listed"]
      print(f"  {label}: " + "; ".join(f"{j:.3f} / {kl:.3f} / {c:.1f} / {a:.0f}"
                                       for j, kl, c, a in zip(v["jain"], v["kl"], v["c_tot"], v["accepted"])))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
