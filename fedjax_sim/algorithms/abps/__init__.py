"""ABPS (paper 000): adaptive Bayesian partner selection, built from small tested pieces.

* :mod:`.goal_filter` — goal-aware metadata pre-filter (paper 000 §4.1, eq. 3; SPEC §3.2 step 2)
* :mod:`.pool` — candidate pools of M peers per center: beliefs grow as C·M (issue 4)
* :mod:`.posterior` — Beta–Bernoulli beliefs and UCB scores (eqs. 5–7; SPEC §3.2 steps 3, 8)
* :mod:`.topology` — ε-greedy ranking and propose–reject with the rest action (Alg. 1 lines 10–21)
* :mod:`.shapley` — exact and truncated Monte Carlo Shapley credit (eq. 4; SPEC §3.2 step 7)
"""
