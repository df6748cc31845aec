"""FBS-FL (paper 002): fair Bayesian Stackelberg federated learning, built from small tested pieces (issue 12).

* :mod:`.projection` — Euclidean projection onto the capped simplex Π (eq. 3; Alg. 1 line 4; SPEC §4.2 step 2)
* :mod:`.inclusion` — independent Bernoulli inclusion and dependent rounding (§3.1, eq. 4; SPEC §4.2 step 4)
* :mod:`.followers` — best response, logit response and the EXP3 follower (eqs. 15, 17; Alg. 2; SPEC §4.2 step 5)
* :mod:`.beliefs` — categorical beliefs over the type grid Θ and their Bayes update (eqs. 17–18; SPEC §4.2 step 7)
* :mod:`.economics` — offers, participation EMA, q-fair weights and the leader reward (eqs. 7, 8, 10, 11, 13, 14)
* :mod:`.ppo` — the PPO leader (Alg. 1; SPEC §4.2 steps 2 and 9)
* :mod:`.layer` — the strategic layer's steps every round shares: inclusion, eq. 10's offers, the followers'
  answers and EXP3's update, the EMA, beliefs and cost proxy (SPEC §4.2 steps 3–5, 7)
* :mod:`.algorithm` — the round (SPEC §4.2 steps 1–9), the ablation presets and the ``fbsfl`` method's declaration
  (``SPECS``)
* :mod:`.selection` — the baselines' selection rules: uniform, Power-of-Choice, Oort (SPEC §4.3)
* :mod:`.baselines` — FedAvg, FedProx, q-FFL, Power-of-Choice, Oort and Ditto behind the same strategic layer
  (flat fee r̄ = 0.52, the same followers; issue 12 item 4)
* :mod:`.strategic` — the layer without training under uniform selection: the engine's participation bit for bit,
  thousands of seeds in seconds (docs/FBSFL.md §2c)
* :mod:`.report` — Tables 2–6 and Figures 1–3 of paper 002 from a run's records (issue 12 items 6–7)
"""
