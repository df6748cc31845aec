"""Measurements behind the Table 1 findings in docs/TABLE1.md (issue 9, items 16–18).

Usage:
  python benchmarks/findings.py curve    [--methods fedavg,feddyn] [--seeds 11] [--rounds 200] [--every 10]
  python benchmarks/findings.py partners [--methods abps,abps_pq_k1] [--seeds 11,22,33,44,55] [--rounds 50]
  python benchmarks/findings.py sigma    [--seeds 11,22,33,44,55] [--rounds 50]
  (every subcommand takes --set key=value ... and --json FILE)

* ``curve``: one trajectory of each method for ``--rounds`` rounds, with the *test* AUROC of the
  deployed model (mean over centers with a two-class test split) every ``--every`` rounds. It runs
  the checkpointed chunk program (``Program.advance``) and evaluates between chunks, so the rounds
  are those of one ``--rounds``-round run (the per-round keys are ``split(k, R)``: a 50-round run
  uses other keys than the first 50 rounds of a 200-round run).
* ``partners``: ABPS's partner choices in a real run, read off the final state's observation
  counts n_{i→j} (``pulls``): distinct partners per center, and the fraction of observations
  that repeat an earlier one. Under eq. 7 with SPEC's prior and γ an unobserved candidate
  always outranks an observed one (tests/test_ucb_exploration.py), so a pair forms again only
  when the proposer's unobserved candidates are all full this round (or an ε-swap picks an
  observed one): the repeats bound the choices the Shapley credit can have made. The same
  runs with the credit made uninformative (φ_min, φ_max = ∓10⁶, so every φ̄ ≈ 0.5) show what
  the credit changed in the outcome.
* ``sigma``: BNN+FL's posterior standard deviations σ = softplus(ρ) of the final global model
  against their initial value softplus(−5) ≈ 0.0067.
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

from fedjax_sim.algorithms.registry import preset  # noqa: E402
from fedjax_sim.config import config_for_method, load_experiment  # noqa: E402
from fedjax_sim.experiment import RunOptions, build_federation, prepare_method  # noqa: E402


def _mean_defined(a: np.ndarray) -> np.ndarray:
  """Mean over the last axis of the defined (non-NaN) entries."""
  return np.nanmean(np.asarray(a, np.float64), axis=-1)


def _config(method: str, seeds: str, rounds: int, sets):
  overrides = {"seeds": seeds, "rounds": str(rounds), **dict(s.split("=", 1) for s in sets)}
  return load_experiment(method, overrides)  # every method has its configs/METHOD.toml


def curve(args) -> dict:
  """Test AUROC every ``--every`` rounds along one run of each method."""
  out = {}
  for method in args.methods.split(","):
    config = _config(method, args.seeds, args.rounds, args.sets)
    fed = build_federation(config, warn=lambda m: None)
    prepared = prepare_method(method, config, fed, RunOptions(checkpoint_every=args.every))
    t0 = time.perf_counter()
    compiled = prepared.compile()
    compile_s = time.perf_counter() - t0
    carry = compiled.start(prepared.keys, prepared.fed, prepared.hyper)
    points = []
    t0 = time.perf_counter()
    for start in range(1, args.rounds + 1, args.every):
      carry = compiled.advance(carry, prepared.fed, prepared.hyper, jnp.asarray(start, jnp.int32))
      res = jax.block_until_ready(compiled.finish(carry, prepared.fed))
      test = _mean_defined(res.test_auroc)[: prepared.runs]
      points.append({"round": min(start + args.every - 1, args.rounds), "test_auroc": test.tolist()})
      print(f"{method} round {points[-1]['round']:4d}: test AUROC "
            + " ".join(f"{v:.4f}" for v in test), flush=True)
    val = np.asarray(res.history.val_auroc)[: prepared.runs]
    out[method] = {"seeds": list(config.seeds), "points": points, "val_auroc_curve": val.tolist(),
                   "compile_s": compile_s, "run_s": time.perf_counter() - t0}
  return out


def _run_state(method, config, fed):
  prepared = prepare_method(method, config, fed, RunOptions())
  compiled = prepared.compile()
  res = jax.block_until_ready(compiled.run(prepared.keys, prepared.fed, prepared.hyper))
  runs = prepared.runs
  return jax.tree_util.tree_map(lambda a: np.asarray(a)[:runs], res)


def partners(args) -> dict:
  """Distinct partners and repeat observations of ABPS runs; the same runs with uninformative credit."""
  out = {}
  for method in args.methods.split(","):
    config = _config(method, args.seeds, args.rounds, args.sets)
    fed = build_federation(config, warn=lambda m: None)
    flat = _config(method, args.seeds, args.rounds,
                   list(args.sets) + ["abps.phi_min=-1000000", "abps.phi_max=1000000"])
    res, res_flat = _run_state(method, config, fed), _run_state(method, flat, fed)
    pulls = np.asarray(res.state.pulls)  # [S, C, M]
    cand = np.asarray(res.state.pool.valid)  # [S, C, M] goal-filtered candidates
    distinct = (pulls > 0).sum(-1)  # [S, C]
    observations = pulls.sum(-1)  # [S, C] partner-rounds of each center
    repeats = np.maximum(pulls - 1, 0).sum(-1)
    test = _mean_defined(res.test_auroc)
    test_flat = _mean_defined(res_flat.test_auroc)
    same_graph = bool(np.array_equal(pulls, np.asarray(res_flat.state.pulls)))
    same_models = all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(res.state.params),
                                                          jax.tree_util.tree_leaves(res_flat.state.params)))
    entry = {
        "seeds": list(config.seeds), "rounds": args.rounds,
        "kappa": config_for_method(config, preset(method)).abps.kappa,
        "candidates_median": float(np.median(cand.sum(-1))),
        "partner_rounds_mean": float(observations.mean()),
        "distinct_partners_mean": float(distinct.mean()),
        "distinct_partners_min_median_max": [int(distinct.min()), float(np.median(distinct)), int(distinct.max())],
        "repeat_fraction": float(repeats.sum() / max(observations.sum(), 1)),
        "max_observations_of_one_peer": int(pulls.max()),
        "test_auroc": test.tolist(), "test_auroc_uninformative_credit": test_flat.tolist(),
        "same_partner_counts_with_uninformative_credit": same_graph,
        "bitwise_same_models_with_uninformative_credit": same_models,
    }
    out[method] = entry
    print(f"{method}: {json.dumps(entry)}", flush=True)
  return out


def sigma(args) -> dict:
  """BNN+FL's σ = softplus(ρ) after the run, against its initial value."""
  from fedjax_sim.models.bayes import RHO_INIT, sigma as softplus_sigma
  config = _config("bnn_fl", args.seeds, args.rounds, args.sets)
  fed = build_federation(config, warn=lambda m: None)
  res = _run_state("bnn_fl", config, fed)
  rho = np.concatenate([np.asarray(r).reshape(r.shape[0], -1)
                        for r in jax.tree_util.tree_leaves(res.state.global_params["rho"])], axis=1)
  mu = np.concatenate([np.asarray(m).reshape(m.shape[0], -1)
                       for m in jax.tree_util.tree_leaves(res.state.global_params["mu"])], axis=1)
  sig = np.asarray(softplus_sigma(jnp.asarray(rho)))
  init = float(softplus_sigma(jnp.float32(RHO_INIT)))
  q = np.quantile(sig, [0.01, 0.5, 0.99])
  entry = {"seeds": list(config.seeds), "rounds": args.rounds, "sigma_init": init,
           "sigma_q01_median_q99": q.tolist(), "sigma_mean": float(sig.mean()),
           "median_abs_mu": float(np.median(np.abs(mu))),
           "median_sigma_over_abs_mu": float(np.median(sig / np.maximum(np.abs(mu), 1e-12))),
           "test_auroc": _mean_defined(res.test_auroc).tolist()}
  print(f"bnn_fl: {json.dumps(entry)}", flush=True)
  return {"bnn_fl": entry}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("what", choices=("curve", "partners", "sigma"))
  p.add_argument("--methods", default=None)
  p.add_argument("--seeds", default=None)
  p.add_argument("--rounds", type=int, default=None)
  p.add_argument("--every", type=int, default=10)
  p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
  p.add_argument("--json", default=None, help="write the figures to this file")
  args = p.parse_args(argv)
  defaults = {"curve": ("fedavg,feddyn", "11", 200), "partners": ("abps,abps_pq_k1", "11,22,33,44,55", 50),
              "sigma": ("bnn_fl", "11,22,33,44,55", 50)}[args.what]
  args.methods = args.methods or defaults[0]
  args.seeds = args.seeds or defaults[1]
  args.rounds = args.rounds or defaults[2]
  result = {"curve": curve, "partners": partners, "sigma": sigma}[args.what](args)
  result = {"what": args.what, "backend": jax.default_backend(), "date": time.strftime("%Y-%m-%d"),
            "results": result}
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
