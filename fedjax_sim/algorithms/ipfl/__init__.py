"""iPFL (paper 003): the incentivized personalized-FL model market, built from small tested pieces.

* :mod:`.market` — the pure market pieces (distance, gain, thresholds, the Box 2 graph, payments, utilities, prox
  center and penalty), vectorized over all clients.
* :mod:`.algorithm` — the declared method ``ipfl`` (``[ipfl]`` section): the whole round (local training with the
  prox penalty, evaluation, market, prox centers, IR drop-out) inside the compiled scan.
"""
