"""FBS-FL's benchmark (issue 12): a round of the whole game against a FedAvg round at the same K, and against the
per-client loop a user without ``vmap`` writes, in the same run.

``python benchmarks/bench.py --suite fbsfl`` (or ``python benchmarks/fbsfl_suite.py``) runs, on the ``fbsfl``
federation (Fashion-MNIST, Dirichlet(0.1) over N = 100 clients, K = 10, LeNet, SGD, batch 32, E = 2), one seed:

* the engine's ``fbsfl`` (the PPO leader, projection, offers, Bernoulli inclusion, EXP3 followers, participants-only
  training in S = 27 slots, q-fair aggregation, beliefs, reward, the PPO update every 16 rounds): one compiled
  call of R rounds, compile and seconds per round;
* the engine's ``fedavg`` with K = 10 clients per round (``participation.clients_per_round``) on the same
  federation and learner: the issue's reference, FBS-FL / FedAvg ≤ 1.5× (the leader is tiny next to training);
  and ``fbsfl_fedavg`` (FedAvg behind the same strategic layer, so ~half the included clients decline);
* the per-client loop: the same round built from the package's pieces (each piece jitted once: the leader's act,
  the projection, offers, inclusion and responses as one jitted function, the participants trained one after
  another with one jitted client update, the q-fair aggregation, beliefs and reward as another, the PPO update
  every 16 rounds), its Python loop over participants being what the engine replaces. Each participant's rows are
  padded to the next power of two (a few compiled sizes, all paid in a warm-up before the timed rounds).

Per-round figures are run seconds / R, so R should be at least 16 for the engine's figure to include a PPO update
(R = 16 by default); they are dominated by local training and vary with how many clients accept.

Needs the Fashion-MNIST files (Debian's dataset-fashion-mnist, or ``--fmnist-path``).
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def _config(experiment: str, rounds: int, path: str, extra=None):
  from fedjax_sim.config import apply_overrides, load_experiment
  config = load_experiment(experiment, {"rounds": rounds, "seeds": "42"})
  return apply_overrides(config, {"data.path": path, **(extra or {})})


def time_engine(method: str, config, fed) -> dict:
  """Compile and run seconds of ``method`` under ``config`` through the project's API (one compiled call)."""
  from fedjax_sim.experiment import RunOptions, run_method
  run = run_method(method, config, fed, RunOptions())
  out = {"compile_s": run.compile_s, "run_s": run.run_s, "s_per_round": run.run_s / config.rounds,
         "accuracy": run.summary.get("accuracy_mean")}
  if "accepted_updates" in run.summary:
    out["accepted_per_round"] = run.summary["accepted_updates"] / config.rounds
  return out


def time_loop(config, fed, rounds: int) -> dict:
  """FBS-FL as a per-client loop (module docstring): jitted pieces, a Python loop over the participants."""
  from fedjax_sim.algorithms.fbsfl import algorithm as A
  from fedjax_sim.algorithms.fbsfl import economics as E
  from fedjax_sim.algorithms.fbsfl import layer as L
  from fedjax_sim.algorithms.fbsfl import ppo
  from fedjax_sim.algorithms.fbsfl.projection import capped_simplex_projection
  from fedjax_sim.algorithms.registry import build_method, hyper_from_config
  from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
  from fedjax_sim.tasks import task_for

  algorithm, model = build_method("fbsfl", config, fed)
  fed = algorithm.prepare(fed)
  hyper = hyper_from_config(config, "fbsfl")
  h, s = hyper.method, config.fbsfl
  k = config.participation.clients_per_round
  task = task_for(config, fed)
  lc = config.learner
  update = jax.jit(make_client_update(task.with_model(model), batch_size=lc.batch_size,
                                      epochs=lc.local_epochs).dynamic_steps)
  rows = jax.tree_util.tree_map(np.asarray, fed.rows)
  n = np.asarray(fed.n_train)
  state = jax.jit(algorithm.init)(jax.random.key(0), fed, hyper)
  pp = A.ppo_hyper(h, s)
  proxy_c, proxy_j = A.proxy_indices(fed.m_val, s.proxy_rows)
  x_proxy, y_proxy = fed.x_val[proxy_c, proxy_j], fed.y_val[proxy_c, proxy_j]

  @jax.jit
  def lead(key, state, t):  # steps 1–5: state, actor, projection, offers, inclusion, responses
    keys = A.round_keys(key)
    obs = A.observation(state, t, config.rounds)
    logits, log_prob, value, pi_hat = ppo.act(state.leader.apply_fn, state.leader.params, keys.actor, obs)
    pi = capped_simplex_projection(pi_hat, k)
    r = L.eq10_offers(pi, state.p, state.cost_proxy, h).r
    z = L.draw_inclusion("independent", keys.inclusion, pi)
    answers = L.answer("exp3", keys.response, r, z, state.kappa, state.followers, h)
    return keys, obs, logits, log_prob, value, r, z, answers

  @jax.jit
  def reported(w, x, y):
    return A.mean_loss(model.apply, task.loss, w, x, y)

  @jax.jit
  def settle(state, keys, obs, logits, log_prob, value, r, z, answers, w_new, t):  # steps 7–9
    y = answers.y
    learned = L.learn(state.p, state.beliefs, state.cost_proxy, state.cost_rounds, r=r, z=z, accept=answers.accept,
                      y=y, h=h)
    p = learned.p
    loss_now = A.mean_loss(model.apply, task.loss, w_new, x_proxy, y_proxy).astype(jnp.float32)
    progress = E.progress_signal(state.proxy_loss, loss_now)
    penalty = E.participation_penalty(p, E.smoothed_participation(p, h.eps), h.gamma1, h.gamma2)
    reward, moments, _ = E.leader_reward(state.moments, t, progress, E.expenditure(y, r), penalty, h.alpha,
                                         h.beta_max, h.t0)
    new = state.replace(global_params=w_new, followers=answers.followers, beliefs=learned.beliefs, p=p,
                        counts=state.counts + y, cost_proxy=learned.cost_proxy, cost_rounds=learned.cost_rounds,
                        moments=moments, proxy_loss=loss_now, progress=progress)
    buffer = ppo.add(state.buffer, obs, logits, log_prob, value, reward)
    leader, _ = ppo.maybe_update(t, state.leader, buffer, A.observation(new, t + 1, config.rounds), keys.ppo, pp)
    return new.replace(leader=leader, buffer=buffer)

  @jax.jit
  def aggregate(w, stacked, n_i, f_i):
    alpha = E.qfair_weights(n_i, f_i, jnp.ones(n_i.shape, bool), h.q, h.delta_q)
    deltas = jax.tree_util.tree_map(lambda c, g: c - g[None], stacked, w)
    return E.aggregate(w, deltas, alpha)

  padded = lambda m: 1 << max(int(m) - 1, 0).bit_length()  # noqa: E731

  def client_rows(i):
    a, m = rows.start[i], int(n[i])
    x = np.zeros((padded(m), *rows.x.shape[1:]), rows.x.dtype)
    y = np.zeros((padded(m), *rows.y.shape[1:]), rows.y.dtype)
    x[:m], y[:m] = rows.x[a:a + m], rows.y[a:a + m]
    return ClientData(jnp.asarray(x), jnp.asarray(y), jnp.int32(m)), rows.x[a:a + min(m, s.report_rows)], \
        rows.y[a:a + min(m, s.report_rows)]

  def one_round(state, t, key):
    keys, obs, logits, log_prob, value, r, z, answers = lead(key, state, jnp.int32(t))
    w = state.global_params
    y = np.asarray(answers.y)
    train_keys = jax.random.split(keys.train, fed.num_clients)
    trained, sizes, losses = [], [], []
    for i in np.flatnonzero(y):  # the loop the engine replaces
      data, x_rep, y_rep = client_rows(i)
      losses.append(reported(w, jnp.asarray(x_rep), jnp.asarray(y_rep)))
      trained.append(update(train_keys[i], w, data, ClientContext(shared=w, hyper=hyper, t=jnp.int32(t))).params)
      sizes.append(n[i])
    w_new = w
    if trained:
      stacked = jax.tree_util.tree_map(lambda *p: jnp.stack(p), *trained)
      w_new = aggregate(w, stacked, jnp.asarray(sizes, jnp.float32), jnp.stack(losses))
    return jax.block_until_ready(settle(state, keys, obs, logits, log_prob, value, r, z, answers, w_new,
                                        jnp.int32(t)))

  t0 = time.perf_counter()
  firsts = {}
  for i in range(fed.num_clients):  # warm-up: one client of every padded size pays its compile
    firsts.setdefault(padded(n[i]), i)
  w = state.global_params
  for i in firsts.values():
    data, x_rep, y_rep = client_rows(i)
    jax.block_until_ready(update(jax.random.key(0), w, data, ClientContext(shared=w, hyper=hyper, t=jnp.int32(1))))
  for m in range(1, s.report_rows + 1):  # reported losses of every short client size
    if (n == m).any() or m == s.report_rows:
      jax.block_until_ready(reported(w, jnp.zeros((m, *rows.x.shape[1:]), rows.x.dtype),
                                     jnp.zeros((m, *rows.y.shape[1:]), rows.y.dtype)))
  warm_state = one_round(state, 1, jax.random.key(99))  # lead, settle and aggregate compile here
  del warm_state
  warm = time.perf_counter() - t0
  keys = jax.random.split(jax.random.key(1), rounds)
  accepted = 0
  t0 = time.perf_counter()
  for t in range(1, rounds + 1):
    before = np.asarray(state.counts).sum()
    state = one_round(state, t, keys[t - 1])
    accepted += np.asarray(state.counts).sum() - before
  return {"warmup_s": warm, "compiled_sizes": len(firsts), "s_per_round": (time.perf_counter() - t0) / rounds,
          "accepted_per_round": float(accepted) / rounds}


def one_call(rounds: int = 200, seeds: str = "42,123,456,789,1011", centers: int = 20) -> dict:
  """Issue 12's acceptance: ``rounds`` rounds of FBS-FL, every PPO update included, as one compiled call for all
  the seeds, and a second call of the same compiled program that does not retrace. On a small synthetic clinical
  federation (``centers`` centers, the binary task), since the claim is about the program, not the data."""
  from fedjax_sim.build import build_federation
  from fedjax_sim.config import load_experiment
  from fedjax_sim.execute import RunOptions, prepare_method
  config = load_experiment("fbsfl", {"rounds": rounds, "seeds": seeds, "data.source": "synthetic", "data.partition": "natural",
                                     "data.num_centers": centers, "data.total_stays": centers * 60,
                                     "participation.clients_per_round": 4, "learner.model": "mlp",
                                     "learner.hidden": "16", "learner.batch_size": 16})
  fed = build_federation(config, warn=lambda line: None)
  prepared = prepare_method("fbsfl", config, fed, RunOptions())
  compiled = prepared.compile()
  first = prepared.execute(compiled)
  second = prepared.execute(compiled)
  updates = [r["ppo_updates"] for r in first.per_seed]
  same = all(a["auroc"] == b["auroc"] or (a["auroc"] != a["auroc"] and b["auroc"] != b["auroc"])
             for a, b in zip(first.per_seed, second.per_seed))
  return {"rounds": rounds, "seeds": len(first.per_seed), "centers": fed.num_clients,
          "compile_s": compiled.compile_s, "first_run_s": first.run_s, "second_run_s": second.run_s,
          "traces_after_two_calls": prepared.traces["n"], "ppo_updates_per_seed": updates,
          "second_call_same_results": bool(same)}


def suite(rounds: int = 16, loop_rounds: int = 16, path: str = "", k: int = 10) -> dict:
  """All the figures above, as one dict."""
  from fedjax_sim.data.labeled import labeled_federation
  config = _config("fbsfl", rounds, path)
  fed = labeled_federation(config)
  out = {"task": "fashion_mnist lenet dirichlet(0.1)", "rounds": rounds, "clients": fed.num_clients,
         "clients_per_round": k, "seeds": 1}
  out["fbsfl"] = time_engine("fbsfl", config, fed)
  out["fbsfl_fedavg"] = time_engine("fbsfl_fedavg", _config("fbsfl_table2", rounds, path,
                                                            {"methods": "fbsfl_fedavg"}), fed)
  fedavg = _config("fbsfl", rounds, path, {"methods": "fedavg"})
  out["fedavg_k"] = time_engine("fedavg", fedavg, fed)
  out["fbsfl_vs_fedavg"] = out["fbsfl"]["s_per_round"] / out["fedavg_k"]["s_per_round"]
  if loop_rounds:
    out["loop"] = time_loop(config, fed, loop_rounds)
    out["engine_speedup_over_loop"] = out["loop"]["s_per_round"] / out["fbsfl"]["s_per_round"]
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=16)
  p.add_argument("--loop-rounds", type=int, default=16)
  p.add_argument("--fmnist-path", default="")
  p.add_argument("--json", default=None)
  p.add_argument("--one-call", action="store_true", help="only the one-compiled-call check (200 rounds, 5 seeds)")
  args = p.parse_args(argv)
  result = one_call() if args.one_call else suite(args.rounds, args.loop_rounds, args.fmnist_path)
  text = json.dumps(result, indent=1)
  print(text)
  if args.json:
    with open(args.json, "w") as f:
      f.write(text)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
