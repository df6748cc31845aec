"""The strategic layer without training (fedjax_sim/algorithms/fbsfl/strategic.py) against its definitions on
cases with a closed form. Its equality with the compiled rounds is tested where those rounds are already built:
tests/test_fbsfl_baselines.py (the uniform baselines) and tests/test_fbsfl_round.py (``fbsfl_uniform``)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_sim.algorithms import registry
from fedjax_sim.algorithms.fbsfl import strategic as ST
from fedjax_sim.algorithms.fbsfl.baselines import FLAT_FEE
from fedjax_sim.config import ExperimentConfig, apply_overrides
from tests.conftest import load_benchmark

N, K, ROUNDS = 40, 4, 30


def hyper(**overrides):
  config = apply_overrides(ExperimentConfig(), {"methods": "fbsfl", **{f"fbsfl.{k}": v for k, v in overrides.items()}})
  return registry.hyper_from_config(config, "fbsfl").method


def test_best_response_to_the_flat_fee_accepts_exactly_the_types_at_or_below_it():
  out = jax.device_get(ST.simulate_seed(jax.random.key(0), ROUNDS, hyper(), num_clients=N, k=K, follower="br"))
  assert out.y.shape == (ROUNDS, N)
  np.testing.assert_array_equal(out.y, out.z & (out.kappa <= FLAT_FEE)[None])
  assert np.all(out.r == np.float32(FLAT_FEE)) and not np.any(out.bonus)
  assert out.z.sum() > 0 and out.y.sum() < out.z.sum()  # guard: both kinds of type were included


def test_without_bonus_and_with_frozen_beliefs_the_offer_is_the_prior_mean_times_the_multiplier():
  out = jax.device_get(ST.simulate_seed(jax.random.key(1), ROUNDS, hyper(b0=0.0), num_clients=N, k=K,
                                        pricing="fbsfl", freeze_beliefs=True))
  np.testing.assert_allclose(out.r, FLAT_FEE * (1 + 0.2 * K / N), rtol=1e-6)  # ĉ = E_μ0[κ], π = K/N, δ = 0.2
  np.testing.assert_allclose(out.cost_proxy, FLAT_FEE, rtol=1e-6)
  assert not np.any(out.bonus)


def test_the_bonus_is_b0_min_of_the_inverse_relative_participation_and_its_cap():
  h = hyper()
  out = jax.device_get(ST.simulate_seed(jax.random.key(2), ROUNDS, h, num_clients=N, k=K, pricing="fbsfl"))
  p = np.full(N, 1.0 / N)
  for t in range(ROUNDS):  # p̃_{t−1} from y alone (eqs. 7–8), then eq. 10's last term
    p_tilde = (p + 1e-3) / np.sum(p + 1e-3)
    np.testing.assert_allclose(out.bonus[t], 0.1 * np.minimum(1.0 / (N * p_tilde), 10.0), rtol=1e-5)
    p = 0.9 * p + 0.1 * out.y[t]
  assert out.bonus.max() > 0.1 and out.bonus.min() < 0.1  # guard: included clients above and below the fair share
  np.testing.assert_allclose(out.r, out.cost_proxy * (1 + 0.2 * K / N) + out.bonus, rtol=1e-6)  # eq. 10
  np.testing.assert_allclose(out.cost_proxy[0], FLAT_FEE, rtol=1e-6)  # ĉ_1: the prior's mean threshold
  assert np.ptp(out.cost_proxy[-1]) > 0  # the beliefs moved ĉ apart


def test_exp3_followers_of_a_seed_are_reproducible_and_seeds_differ():
  h = hyper()
  a = jax.device_get(ST.simulate_seed(jax.random.key(3), ROUNDS, h, num_clients=N, k=K))
  b = jax.device_get(ST.simulate_seed(jax.random.key(3), ROUNDS, h, num_clients=N, k=K))
  c = jax.device_get(ST.simulate_seed(jax.random.key(4), ROUNDS, h, num_clients=N, k=K))
  np.testing.assert_array_equal(a.y, b.y)
  assert not np.array_equal(a.y, c.y)
  assert np.all(a.y <= a.z)


def test_an_unknown_pricing_is_refused():
  with pytest.raises(ValueError, match="flat, fbsfl"):
    ST.simulate_seed(jax.random.key(0), 2, hyper(), num_clients=N, k=K, pricing="auction")


def test_the_participation_script_reports_each_variant_against_its_definitions(tmp_path, capsys):
  import json
  script = load_benchmark("fbsfl_participation")
  out = tmp_path / "p.json"
  assert script.main(["--seeds", "5,6", "--num-seeds", "3", "--rounds", "12", "--clients", "10", "--k", "2",
                      "--json", str(out)]) == 0
  report = json.loads(out.read_text())
  assert len(report["variants"]) == len(script.VARIANTS) and report["num_seeds"] == 3
  for label, entry in report["variants"].items():
    many, listed = entry["many_seeds"], entry["listed"]
    assert 0 < many["jain"][0] <= 1 and many["kl"][0] >= 0 and len(listed["jain"]) == 2
    if entry["kwargs"]["pricing"] == "flat":  # r̄ per accepted update, no bonus
      np.testing.assert_allclose(listed["c_tot"], FLAT_FEE * np.asarray(listed["accepted"]), rtol=1e-5)
      assert many["bonus_share"][0] == 0
    if entry["overrides"].get("b0") == "0":
      assert many["bonus_share"][0] == 0
  direct = jax.device_get(ST.simulate_seed(jax.random.key(5), 12, hyper(), num_clients=10, k=2, pricing="flat"))
  first = report["variants"][script.VARIANTS[0][0]]["listed"]
  assert first["accepted"][0] == direct.y.sum()  # the listed seed 5 is jax.random.key(5), as the CLI's
  assert "| flat fee" in capsys.readouterr().out
  assert report["marks"] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # T/10 rounds apart, at least 1
  for entry in report["variants"].values():  # Jain at the last mark is Jain of the run
    assert entry["many_seeds"]["jain_at"][-1] == pytest.approx(entry["many_seeds"]["jain"][0], rel=1e-5)
  assert script.main(["--num-seeds", "1"]) == 2 and capsys.readouterr().err.startswith("error:")
  assert script.main(["--variants", "99"]) == 2 and "--variants" in capsys.readouterr().err
