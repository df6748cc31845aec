"""Where a simulation's compile time goes (issue 11 item 1), and before/after figures in one run.

For each method (default: FedAvg and ABPS-X on the default 230-center clinical federation, the
experiments' own seeds and rounds) it prepares the program exactly as ``python -m fedjax_sim.run``
does and reports, apart:

* ``trace_s``: tracing and lowering to StableHLO (``program.run.lower(...)``: Python time);
* ``compile_s``: XLA's compile of that module (``lowered.compile()``);
* ``hlo_chars`` / ``hlo_ops``: the size of the lowered module (characters, operations);
* ``while_loops``: ``stablehlo.while`` ops in it (scans and while loops: one per scanned body);
* ``constant_bytes``: bytes of the largest dense constants baked into the module (data passed as
  constants instead of arguments would show here), and the count of constants over 1 KiB.

With ``--run-rounds R`` it also runs the compiled program (R rounds) and reports ``s_per_round`` (the call over
R: init, rounds and the final evaluation), and ``eval_s``: one validation evaluation of the deployed model as the
round's scan does it (the task's per-client metric of the initial state, jitted alone, mean of 5 calls), so that
evaluation's share of a round is reported apart. ``--centers C`` runs on a C-center synthetic federation
(``data.total_stays = 30 C``, ``data.min_site_rows = 5``, as ``bench.py --suite centers`` builds them).

``--rev REV`` measures a git revision as well, in a temporary worktree of this repository and a
child process on the same machine (the "before" of a before/after, e.g. ``--rev a8620e3``):

    python benchmarks/compile_time.py                       # this checkout
    python benchmarks/compile_time.py --rev a8620e3 --json out.json
    python benchmarks/compile_time.py --rev a8620e3 --methods abps_x --repeat 5   # alternating sides, medians
    python benchmarks/compile_time.py --rev a8620e3 --methods fedavg --centers 10000 --seeds 1 --rounds 3 --run-rounds 3

The persistent compilation cache is switched off here (every figure is a cold compile).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(methods, seeds=None, rounds=None, centers=0, run_rounds=0) -> list:
  os.environ["FEDJAX_SIM_COMPILE_CACHE"] = "0"  # cold compiles
  import jax
  try:
    from fedjax_sim import compile_cache
    compile_cache.enable(None)
  except ImportError:  # a revision from before the cache
    jax.config.update("jax_enable_compilation_cache", False)
  from fedjax_sim.build import build_federation
  from fedjax_sim.config import load_experiment
  from fedjax_sim.experiment import RunOptions, prepare_method
  try:  # the CLI traces and compiles with the garbage collector paused (PreparedMethod.compile)
    from fedjax_sim.execute import gc_paused
  except ImportError:  # a revision from before that
    import contextlib
    gc_paused = contextlib.nullcontext
  out = []
  for method in methods:
    overrides = {}
    if seeds:
      overrides["seeds"] = ",".join(str(11 + 11 * i) for i in range(seeds))
    if rounds:
      overrides["rounds"] = rounds
    if centers and centers != 230:
      overrides.update({"data.num_centers": centers, "data.total_stays": 30 * centers, "data.min_site_rows": 5})
    config = load_experiment(method, overrides or None)
    t0 = time.perf_counter()
    fed = build_federation(config, warn=lambda m: None)
    build_s = time.perf_counter() - t0
    prepared = prepare_method(config.methods[0], config, fed, RunOptions())
    p = prepared.program
    with gc_paused():
      t0 = time.perf_counter()
      lowered = p.run.lower(prepared.keys, prepared.fed, prepared.hyper)
      trace_s = time.perf_counter() - t0
      text = lowered.as_text()
      t0 = time.perf_counter()
      compiled = lowered.compile(getattr(prepared, "compile_options", None) or None)
      compile_s = time.perf_counter() - t0
    consts = _constants(text)
    timing = _run_timing(prepared, compiled) if run_rounds else {}
    out.append(dict(method=method, centers=fed.num_clients, seeds=len(config.seeds), rounds=config.rounds, **timing,
                    build_s=round(build_s, 3), trace_s=round(trace_s, 3), compile_s=round(compile_s, 3),
                    total_s=round(trace_s + compile_s, 3), hlo_chars=len(text),
                    hlo_ops=len(re.findall(r"^\s*(?:%\S+ = )?\"?[a-z_]+\.[a-z_]+", text, re.M)),
                    while_loops=text.count("stablehlo.while"),
                    constant_bytes=sum(consts[:20]), constants_over_1k=sum(b > 1024 for b in consts)))
    print(json.dumps(out[-1]), flush=True)
  return out


def _run_timing(prepared, compiled) -> dict:
  """The compiled run's seconds per round, and one validation evaluation's seconds (jitted alone)."""
  import jax
  from fedjax_sim.engine.simulate import evaluate
  from fedjax_sim.tasks import task_for
  jax.block_until_ready(compiled(prepared.keys, prepared.fed, prepared.hyper))  # warm (allocations)
  t0 = time.perf_counter()
  jax.block_until_ready(compiled(prepared.keys, prepared.fed, prepared.hyper))
  run_s = time.perf_counter() - t0
  fed, algorithm, model = prepared.fed, prepared.algorithm, prepared.model
  task = task_for(prepared.points[0], prepared.federation)
  state = jax.jit(algorithm.init)(prepared.keys[0], fed, jax.tree_util.tree_map(lambda a: a, prepared.hyper))
  params, stacked = algorithm.deployed(state)
  score_rows = getattr(task, "score_rows", None)
  ev = jax.jit(lambda p, f: evaluate(model, p, stacked, f.x_val, f.y_val, f.m_val, task.score,
                                     getattr(f, "val_rows", None), score_rows))
  jax.block_until_ready(ev(params, fed))
  t0 = time.perf_counter()
  for _ in range(5):
    jax.block_until_ready(ev(params, fed))
  eval_s = (time.perf_counter() - t0) / 5
  rounds = prepared.program.rounds
  return dict(run_s=round(run_s, 3), s_per_round=round(run_s / rounds, 4), eval_s=round(eval_s, 4),
              eval_share_of_round=round(eval_s / (run_s / rounds), 3))


def _constants(text: str) -> list:
  """Bytes of each dense constant in a StableHLO module (largest first), from its tensor type."""
  sizes = []
  widths = {"f32": 4, "i32": 4, "ui32": 4, "f16": 2, "bf16": 2, "i8": 1, "ui8": 1, "i1": 1, "f64": 8, "i64": 8}
  for m in re.finditer(r"stablehlo\.constant dense<[^>]*> : tensor<([0-9x]+)x([a-z0-9]+)>", text):
    n = 1
    for d in m.group(1).split("x"):
      n *= int(d)
    sizes.append(n * widths.get(m.group(2), 4))
  return sorted(sizes, reverse=True)


def measure_in(tree: str, label: str, args) -> list:
  """The measurement in a child process on the code in ``tree``: its JSON rows, tagged ``label``."""
  cmd = [sys.executable, os.path.join(tree, "benchmarks", "compile_time.py"), "--child", "--methods",
         ",".join(args.methods), "--seeds", str(args.seeds), "--rounds", str(args.rounds), "--centers",
         str(args.centers), "--run-rounds", str(args.run_rounds)]
  env = dict(os.environ, PYTHONPATH=tree)
  res = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
  if res.returncode != 0:
    raise RuntimeError(f"{label} failed:\n{res.stderr[-2000:]}")
  rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
  for r in rows:
    r["rev"] = label
  return rows


@contextlib.contextmanager
def revision_tree(rev: str):
  """A temporary git worktree of revision ``rev`` with this checkout's copy of the script (the revision may
  predate it, or hold an older one): the "before" side of a before/after."""
  with tempfile.TemporaryDirectory(prefix="fedjax_sim-rev-") as tmp:
    tree = os.path.join(tmp, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, rev], check=True, capture_output=True)
    try:
      os.makedirs(os.path.join(tree, "benchmarks"), exist_ok=True)
      with open(os.path.abspath(__file__)) as src, open(os.path.join(tree, "benchmarks", "compile_time.py"), "w") as dst:
        dst.write(src.read())
      yield tree
    finally:
      subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)


def speedups(rows: list, rev: str) -> list:
  """Per method: the median trace + XLA seconds of each side over the repetitions, their ratio, and the
  range of the ratios of the pairs (repetition i's before over its after, timed back to back)."""
  out = []
  for method in dict.fromkeys(r["method"] for r in rows):
    before = [r["total_s"] for r in rows if r["method"] == method and r["rev"] == rev]
    after = [r["total_s"] for r in rows if r["method"] == method and r["rev"] == "checkout"]
    if not before or not after:
      continue
    pairs = [b / a for b, a in zip(before, after)]
    out.append(dict(method=method, repeats=len(pairs), before_s=statistics.median(before),
                    after_s=statistics.median(after), speedup=statistics.median(before) / statistics.median(after),
                    pair_min=min(pairs), pair_max=max(pairs)))
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--methods", default="fedavg,abps_x", help="experiments (configs/NAME.toml), comma-separated")
  ap.add_argument("--seeds", type=int, default=0, help="seed count (default: the experiment's)")
  ap.add_argument("--rounds", type=int, default=0, help="rounds (default: the experiment's)")
  ap.add_argument("--centers", type=int, default=0, help="a synthetic federation of this many centers (default 230)")
  ap.add_argument("--run-rounds", type=int, default=0,
                  help="also run the program and report s/round and evaluation s (the rounds are --rounds)")
  ap.add_argument("--rev", default=None, help="also measure this git revision (before/after in one run)")
  ap.add_argument("--repeat", type=int, default=1,
                  help="with --rev: measure both sides this many times, alternating (before, after, before, ...), "
                       "and report medians: a VM's speed drifts between the sides of a single pair")
  ap.add_argument("--json", default=None, help="write every row here")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  args.methods = [m for m in args.methods.split(",") if m]
  if args.child:
    measure(args.methods, args.seeds, args.rounds, args.centers, args.run_rounds)
    return 0
  if args.repeat < 1:
    print(f"error: --repeat must be at least 1 (got {args.repeat})", file=sys.stderr)
    return 2
  machine = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'; nproc"], capture_output=True,
                           text=True).stdout.split("\n")
  print(f"# machine: {machine[0].strip()}, {machine[1].strip()} cores", flush=True)
  rows = []
  with (revision_tree(args.rev) if args.rev else contextlib.nullcontext()) as tree:
    for i in range(args.repeat if args.rev else 1):
      sides = ([(tree, args.rev)] if args.rev else []) + [(ROOT, "checkout")]
      for where, label in sides:
        print(f"# {'revision ' + label if where != ROOT else 'this checkout'} (repetition {i + 1})", flush=True)
        for r in measure_in(where, label, args):
          r["repetition"] = i + 1
          print(json.dumps(r), flush=True)
          rows.append(r)
  if args.rev:
    print("\nmethod    before s  after s  speed-up   (trace + XLA compile; medians over repetitions, pairs' range)")
    for s in speedups(rows, args.rev):
      spread = f"   pairs {s['pair_min']:.1f}–{s['pair_max']:.1f}× over {s['repeats']}" if s["repeats"] > 1 else ""
      print(f"{s['method']:<9} {s['before_s']:8.1f} {s['after_s']:8.1f} {s['speedup']:8.1f}×{spread}")
    for r in (r for r in rows if r["rev"] == "checkout" and r["repetition"] == 1 and "s_per_round" in r):
      b = next((b for b in rows if b["rev"] == args.rev and b["method"] == r["method"] and b["repetition"] == 1), {})
      if "s_per_round" in b:
        print(f"{r['method']:<9} round {b['s_per_round']:.3f} → {r['s_per_round']:.3f} s; evaluation "
              f"{b['eval_s']:.4f} → {r['eval_s']:.4f} s")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(rows, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
