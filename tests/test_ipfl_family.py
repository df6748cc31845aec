"""iPFL's baselines, attacks and roles as rules of one family (fedjax_sim/algorithms/ipfl/algorithm.py; issue 13
items 4–5), on the tiny 5-client federation of tests/test_ipfl_round.py.

Every rule runs two compiled rounds; its utilities must equal eq. 3 recomputed in float64 from the graph the round
reports (the baselines pay nothing; Local's utility is 0), and its aggregation must be the rule's definition:
FedAvg's round is checked against a plain loop (each client trained alone from θ_0 with the same key, then the
n-weighted mean), the others against the tested pieces of fedjax_sim/algorithms/ipfl/baselines.py.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.ipfl import algorithm as A
from fedjax_sim.config import apply_overrides, load_experiment, validate
from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
from fedjax_sim.errors import ConfigError
from fedjax_sim.tasks import task_for
from tests.test_ipfl_round import BATCH, CONFIG, COST, K, SIZES, STEPS, client_rows, tiny_federation

BASE = apply_overrides(CONFIG, {"ipfl.dropout": "none", "ipfl.liar": -1})
C = len(SIZES)


def run(method: str, overrides=None, rounds: int = 2):
  config = apply_overrides(BASE, dict({"methods": method}, **registry.preset(method), **(overrides or {})))
  host = tiny_federation()
  chex.clear_trace_counter()
  algorithm, model = registry.build_method(method, config, host)
  fed = algorithm.prepare(host)
  hyper = registry.hyper_from_config(config, method)
  state = jax.jit(algorithm.init)(jax.random.key(0), fed, hyper)
  round_jit = jax.jit(chex.assert_max_traces(algorithm.round, n=1))
  states, metrics = [state], []
  for t in range(1, rounds + 1):
    state, m = round_jit(jax.random.fold_in(jax.random.key(5), t), state, fed, hyper, jnp.int32(t))
    states.append(state)
    metrics.append(jax.device_get(m))
  return dict(states=states, metrics=metrics, host=host, model=model, hyper=hyper, config=config)


def eq3(graph, n, k=K, c=COST):
  """U_i = sqrt(K/N_i) − sqrt(K/(N_i + Σ_{j bought} N_j)) − c·(buyers of i), float64, no payments."""
  a = np.asarray(graph) > 0
  n = np.asarray(n, np.float64)
  x = (a * n[None, :]).sum(1)
  return np.sqrt(k / n) - np.sqrt(k / (n + x)) - c * a.sum(0)


@pytest.mark.parametrize("rule", [r for r in A.RULES if r != "market"])
def test_every_baseline_runs_and_its_utility_is_eq3_of_its_own_graph(rule):
  out = run(f"ipfl_{rule}")
  n = np.asarray(out["host"].n_train, np.float64)
  for t, m in enumerate(out["metrics"], start=1):
    e = m.extra
    g = e["graph"]
    assert np.all(np.diag(g) == 0)
    np.testing.assert_allclose(e["utility"], eq3(g, n), rtol=1e-4, atol=1e-4, err_msg=f"{rule} round {t}")
    np.testing.assert_array_equal(e["payments"], 0.0)
    assert np.all(np.isfinite(e["accuracy"]))
  last = out["states"][-1]
  flat = np.stack([np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda x: x[i], last.params))[0])
                   for i in range(C)])
  graphs = [m.extra["graph"] for m in out["metrics"]]
  if rule == "local":
    assert all(np.all(g == 0) for g in graphs)
    assert all(np.all(m.extra["utility"] == 0) for m in out["metrics"])
  elif rule in ("fedavg", "fedprox", "ditto"):
    assert all(np.all(g == 1 - np.eye(C)) for g in graphs)  # everyone buys from everyone
    if rule != "ditto":
      np.testing.assert_allclose(flat, np.broadcast_to(flat[0], flat.shape), atol=1e-6)  # one global model
    else:  # personal models differ; the global one is the mean of the trained global copies
      assert np.abs(flat - flat[0]).max() > 1e-3
  elif rule == "cfl":
    cl = np.asarray(last.cluster)
    same = (cl[:, None] == cl[None, :]) & ~np.eye(C, dtype=bool)
    np.testing.assert_array_equal(graphs[-1] > 0, same)
  elif rule == "fedfomo":
    w_sum = sum(graphs)
    off = ~np.eye(C, dtype=bool)
    assert np.all((np.asarray(last.affinity)[off] > 1.0) == (w_sum[off] > 0))
    assert np.all((graphs[0] > 0).sum(1) <= min(BASE.ipfl.fomo_m, C - 1))
    assert np.all(np.asarray(last.affinity) >= 1.0)
  elif rule == "fedamp":
    assert all(np.all(g[~np.eye(C, dtype=bool)] > 0) for g in graphs)  # attention: everyone weighs everyone
  elif rule == "pfedgraph":
    assert np.abs(np.asarray(last.cluster_vec)).max() > 0


def test_fedavg_round_equals_a_plain_loop():
  """One ipfl_fedavg round: each client trained alone from θ_0 (same key stream as the compiled round), the
  n-weighted mean of the trained models becomes every client's model."""
  out = run("ipfl_fedavg", rounds=1)
  host, model, hyper = out["host"], out["model"], out["hyper"]
  rows = client_rows(host)
  task = task_for(out["config"], host)
  update = jax.jit(make_client_update(task, batch_size=BATCH, epochs=1, local_steps=STEPS,
                                      regularizer=A.local_regularizer))
  theta0 = jax.jit(model.init)(jax.random.split(jax.random.key(0))[0])
  k_train = jax.random.split(jax.random.fold_in(jax.random.key(5), 1), 6)[0]
  keys = jax.random.split(k_train, C)
  trained = []
  for i in range(C):
    x, y, n = rows[i]
    res = update(keys[i], theta0, ClientData(x, y, n),
                 ClientContext(own={"center": theta0, "quad": jnp.float32(0.0)}, hyper=hyper, t=jnp.int32(1)))
    trained.append(np.asarray(ravel_pytree(res.params)[0], np.float64))
  n = np.asarray(host.n_train, np.float64)
  want = (n[:, None] * np.stack(trained)).sum(0) / n.sum()
  got = np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda x: x[2], out["states"][-1].params))[0])
  np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize("method", ["ipfl", "ipfl_fedavg"])
def test_an_attacker_uploads_noise_and_is_reported_apart(method):
  out = run(f"{method}_gauss", {"ipfl.attackers": (4,)}, rounds=1)
  e = out["metrics"][0].extra
  np.testing.assert_array_equal(e["benign"], [1, 1, 1, 1, 0])
  assert int(out["metrics"][0].nonfinite_client) == 0  # a free rider's discarded training lane is not a fault
  flat = np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda x: x[4], out["states"][-1].params))[0])
  if method == "ipfl":  # the market keeps the upload as the attacker's model: N(0, 1) draws
    assert 0.7 < flat.std() < 1.3
  summary = A.ipfl_metrics(jax.tree_util.tree_map(lambda *a: np.stack(a), *[m.extra for m in out["metrics"]]),
                           np.ones(1))
  assert summary["attacker_utility"] == pytest.approx(float(e["utility"][4]), rel=1e-5, abs=1e-5)
  assert summary["utility_sum"] == pytest.approx(float(np.mean(e["utility"][:4])), rel=1e-5, abs=1e-5)


def test_playground_roles_and_configs_validate():
  config = load_experiment("ipfl_market")
  validate(config)
  assert config.data.num_clients == 12 and config.data.dirichlet_alpha == 1.0
  assert registry.preset("ipfl_playground")["ipfl.gain_scale"] == 5e7
  r = A.roles(12, A.IPFLConfig(**{k.split(".")[1]: v for k, v in A.PLAYGROUND.items()}))
  assert list(np.flatnonzero(r["trader"])) == [3, 4, 6] and list(np.flatnonzero(r["buyer"])) == [1, 2, 8, 9]
  assert list(np.flatnonzero(r["seller"])) == [0, 5, 7, 10] and list(np.flatnonzero(r["attacker"])) == [11]
  for name in ("ipfl_compare", "ipfl_attacks", "ipfl_liars", "ipfl_cluster", "ipfl_skew", "ipfl_shakespeare",
               "ipfl_shakespeare_small"):
    validate(load_experiment(name))
  with pytest.raises(ConfigError, match="client 3 is in both ipfl.traders and ipfl.buyers"):
    apply_overrides(BASE, {"ipfl.traders": (3,), "ipfl.buyers": (3,)})
  r = A.roles(5, apply_overrides(BASE, {"ipfl.attack": "shuffle"}).ipfl)  # no attackers listed: the last client
  assert list(np.flatnonzero(r["attacker"])) == [4] and list(np.flatnonzero(~r["benign"])) == [4]
  assert apply_overrides(BASE, {"ipfl.attackers": "3,4"}).ipfl.attackers == (3, 4)  # integers from --set
  with pytest.raises(ConfigError, match="ipfl.traders: expected a comma-separated list of integers, got 'a'"):
    apply_overrides(BASE, {"ipfl.traders": "a"})
  with pytest.raises(ConfigError, match=r"ipfl.attackers = \[7\] names client\(s\) \[7\] outside"):
    registry.check_federation("ipfl", apply_overrides(BASE, {"ipfl.attackers": (7,), "ipfl.attack": "gauss"}), 5)
  with pytest.raises(ConfigError, match="ipfl.rule must be one of market"):
    apply_overrides(BASE, {"ipfl.rule": "fedbest"})
