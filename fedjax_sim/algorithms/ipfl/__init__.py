"""iPFL (paper 003): the incentivized personalized-FL model market, built from small tested pieces."""
