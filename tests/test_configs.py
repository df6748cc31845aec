"""Every shipped experiment (configs/*.toml) loads and passes the checks a run makes before compiling."""
from __future__ import annotations

import pytest

from fedjax_sim.config import available_experiments, load_experiment, validate


@pytest.mark.parametrize("name", available_experiments())
def test_every_shipped_experiment_loads_and_validates(name):
  config = load_experiment(name)
  validate(config)
  assert config.name == name and config.methods and config.rounds >= 1


def test_the_image_and_text_presets_say_what_the_readme_says():
  fm = load_experiment("fedavg_fmnist")
  assert (fm.data.source, fm.data.partition, fm.data.dirichlet_alpha, fm.data.num_clients) == (
      "fashion_mnist", "dirichlet", 0.1, 100)
  assert (fm.learner.model, fm.learner.optimizer, fm.learner.momentum, fm.learner.batch_size,
          fm.learner.local_epochs, fm.participation.clients_per_round, fm.rounds) == ("lenet", "sgd", 0.9, 32, 2, 10, 200)
  small = load_experiment("shakespeare_small")
  assert (small.data.max_rows_per_client, small.learner.lstm_hidden, small.rounds) == (1000, 64, 20)
