"""FedAvg written the way FL papers' PyTorch code is: one model trained client after client (optional reference).

Runs an image experiment's protocol (an experiment such as ``fedavg_fmnist``) in plain PyTorch on the very
same clients and splits fedjax_sim builds (its partition and split code, so the data cannot differ), and prints
the mean / worst client test accuracy every ``--every`` rounds. It answers two questions the engine cannot answer
about itself: does the protocol behave the same outside JAX (issue 10's Fashion-MNIST finding), and how long does
the per-client loop users would otherwise write take (issue 11 item 4). Needs ``torch``, which fedjax_sim does not
depend on; without it the script says so and exits 2.

    python benchmarks/torch_fedavg.py fedavg_fmnist --rounds 200 --seed 11
    python benchmarks/torch_fedavg.py fedavg_fmnist --check-client 3   # one client, both frameworks, same batches

``--check-client I`` trains client I for one round (round ``--round``) from the same initial LeNet in fedjax_sim's
``client_update`` and in PyTorch, with the same minibatch order (the engine's own permutations, replayed), and prints
the largest parameter difference: local training itself is then known to agree, and any remaining difference
between the two FedAvg curves is the draw of clients, batches and initial weights.

The model is the authors' SimpleCNN (LeNet-5 style, PyTorch's default init), the optimizer a fresh
``torch.optim.SGD(lr, momentum, weight_decay)`` per client per round with the round's cosine learning rate, local
work E epochs of shuffled minibatches (last one partial), K clients drawn uniformly without replacement, the server
the n-weighted mean of their models.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _client_splits(config):
  """Each client's (train, test) arrays from fedjax_sim's own loaders, partition and split."""
  from fedjax_sim.config import _split_fractions
  from fedjax_sim.data.labeled import load_labeled, partition_rows, split_client_rows
  d = config.data
  train, _ = load_labeled(d)
  parts, _ = partition_rows(train, d)
  rng = np.random.default_rng(d.data_seed)
  out = []
  for p in parts:
    tr, _, te = split_client_rows(rng, p, _split_fractions(d.split))
    out.append((train.x[tr], train.y[tr], train.x[te], train.y[te]))
  return out, train.num_classes


def _lenet(torch, in_channels: int, num_classes: int, side: int):
  nn = torch.nn
  flat = 16 * ((((side - 4) // 2) - 4) // 2) ** 2
  return nn.Sequential(nn.Conv2d(in_channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                       nn.MaxPool2d(2), nn.Flatten(), nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84),
                       nn.ReLU(), nn.Linear(84, num_classes))


def _flax_to_torch(params, net, torch):
  """Copies flax LeNet parameters (HWIO kernels, HWC flatten) into the torch Sequential (OIHW, CHW flatten)."""
  p = {k: {kk: np.asarray(vv) for kk, vv in v.items()} for k, v in params.items()}
  convs = [m for m in net if isinstance(m, torch.nn.Conv2d)]
  denses = [m for m in net if isinstance(m, torch.nn.Linear)]
  with torch.no_grad():
    for m, name in zip(convs, ("conv_0", "conv_1")):
      m.weight.copy_(torch.from_numpy(p[name]["kernel"].transpose(3, 2, 0, 1).copy()))
      m.bias.copy_(torch.from_numpy(p[name]["bias"]))
    k0 = p["fc_0"]["kernel"]  # [(h, w, c), out] -> [out, (c, h, w)]
    side = int(round((k0.shape[0] / 16) ** 0.5))
    denses[0].weight.copy_(torch.from_numpy(
        k0.reshape(side, side, 16, -1).transpose(3, 2, 0, 1).reshape(k0.shape[1], -1).copy()))
    denses[0].bias.copy_(torch.from_numpy(p["fc_0"]["bias"]))
    for m, name in zip(denses[1:], ("fc_1", "head")):
      m.weight.copy_(torch.from_numpy(p[name]["kernel"].T.copy()))
      m.bias.copy_(torch.from_numpy(p[name]["bias"]))


def check_client(torch, config, i: int, t: int, rounds: int, seed: int) -> int:
  """One client's round in both frameworks from the same start and batch order; prints the parameter gap."""
  import jax
  import jax.numpy as jnp
  from fedjax_sim.algorithms.registry import hyper_from_config
  from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
  from fedjax_sim.tasks import learning_rate_at, multiclass_task
  from fedjax_sim.models.zoo import lenet_model
  lc = config.learner
  clients, num_classes = _client_splits(config)
  xtr, ytr, _, _ = clients[i]
  model = lenet_model(xtr.shape[1:], num_classes)
  task = multiclass_task(model, optimizer=lc.optimizer, schedule=lc.schedule, rounds=rounds)
  update = make_client_update(task, batch_size=lc.batch_size, epochs=lc.local_epochs)
  key = jax.random.PRNGKey(seed)
  params = model.init(jax.random.fold_in(key, 1))
  hyper = hyper_from_config(config)
  n = len(ytr)
  res = jax.jit(update)(key, params, ClientData(jnp.asarray(xtr), jnp.asarray(ytr.astype(np.int32)), jnp.asarray(n)),
                        ClientContext(hyper=hyper, t=t))
  # The engine's batch order, replayed: epoch keys split(key, E); each split into (perm, steps); order = argsort(u).
  orders = []
  for ekey in jax.random.split(key, lc.local_epochs):
    k_perm, _ = jax.random.split(ekey)
    orders.append(np.asarray(jnp.argsort(jax.random.uniform(k_perm, (n,)))))
  net = _lenet(torch, xtr.shape[3], num_classes, xtr.shape[1])
  _flax_to_torch(params, net, torch)
  lr = float(learning_rate_at(lc.schedule, lc.learning_rate, lc.final_learning_rate, t, rounds))
  opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=lc.momentum, weight_decay=lc.weight_decay)
  x = torch.from_numpy(np.ascontiguousarray(xtr.transpose(0, 3, 1, 2))).float() / 255.0
  y = torch.from_numpy(ytr.astype(np.int64))
  losses = []
  for order in orders:
    for b in range(0, n, lc.batch_size):
      idx = torch.from_numpy(order[b:b + lc.batch_size].astype(np.int64))
      opt.zero_grad()
      loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
      loss.backward()
      opt.step()
      losses.append(float(loss.detach()))
  ref = _lenet(torch, xtr.shape[3], num_classes, xtr.shape[1])
  _flax_to_torch(jax.tree_util.tree_map(np.asarray, res.params), ref, torch)
  gap = max(float((a - b).abs().max()) for a, b in zip(net.state_dict().values(), ref.state_dict().values()))
  scale = max(float(a.abs().max()) for a in net.state_dict().values())
  print(json.dumps(dict(client=i, rows=n, steps=len(losses), lr=lr, loss_torch=float(np.mean(losses)),
                        loss_engine=float(res.loss), max_param_gap=gap, max_param=scale)))
  return 0


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("experiment", help="an experiment name (configs/NAME.toml)")
  ap.add_argument("--rounds", type=int, default=None, help="rounds (default: the config's)")
  ap.add_argument("--seed", type=int, default=11)
  ap.add_argument("--every", type=int, default=10, help="evaluate every this many rounds")
  ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
  ap.add_argument("--json", default=None, help="write the curve here")
  ap.add_argument("--check-client", type=int, default=None, metavar="I",
                  help="compare one client's local training in fedjax_sim and PyTorch, then exit")
  ap.add_argument("--round", type=int, default=1, help="the round whose learning rate --check-client uses")
  args = ap.parse_args(argv)
  try:
    import torch
  except ImportError:
    print("error: this reference needs PyTorch (pip install torch); fedjax_sim itself does not", file=sys.stderr)
    return 2
  from fedjax_sim.config import load_experiment
  from fedjax_sim.tasks import learning_rate_at
  config = load_experiment(args.experiment)
  lc, rounds = config.learner, args.rounds or config.rounds
  if lc.model != "lenet" or lc.optimizer != "sgd":
    print(f"error: the reference implements the lenet model with sgd; the config has {lc.model} / {lc.optimizer}",
          file=sys.stderr)
    return 2
  if args.threads:
    torch.set_num_threads(args.threads)
  if args.check_client is not None:
    return check_client(torch, config, args.check_client, args.round, rounds, args.seed)
  torch.manual_seed(args.seed)
  rng = np.random.default_rng(args.seed)
  t0 = time.perf_counter()
  clients, num_classes = _client_splits(config)
  to_t = lambda x: torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float() / 255.0  # noqa: E731
  data = [(to_t(xtr), torch.from_numpy(ytr.astype(np.int64)), to_t(xte), torch.from_numpy(yte.astype(np.int64)))
          for xtr, ytr, xte, yte in clients]
  side, chans = clients[0][0].shape[1], clients[0][0].shape[3]
  print(f"# {len(data)} clients, data {time.perf_counter() - t0:.1f} s, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads", flush=True)
  model = _lenet(torch, chans, num_classes, side)
  glob = {k: v.clone() for k, v in model.state_dict().items()}
  k = config.participation.clients_per_round or len(data)
  n = np.array([len(d[1]) for d in data], np.float64)
  loss_fn = torch.nn.CrossEntropyLoss()
  curve, t_train = [], 0.0

  def evaluate():
    model.load_state_dict(glob)
    accs = []
    with torch.no_grad():
      for _, _, xte, yte in data:
        if len(yte):
          accs.append(float((model(xte).argmax(1) == yte).float().mean()))
    return np.array(accs)

  for t in range(1, rounds + 1):
    s = time.perf_counter()
    lr = float(learning_rate_at(lc.schedule, lc.learning_rate, lc.final_learning_rate, t, rounds))
    chosen = rng.choice(len(data), k, replace=False)
    acc_state, losses = None, []
    for i in chosen:  # the per-client loop of FL papers' code
      model.load_state_dict(glob)
      opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=lc.momentum, weight_decay=lc.weight_decay)
      xtr, ytr, _, _ = data[i]
      for _ in range(lc.local_epochs):
        perm = torch.randperm(len(ytr))
        for b in range(0, len(ytr), lc.batch_size):
          idx = perm[b:b + lc.batch_size]
          opt.zero_grad()
          loss = loss_fn(model(xtr[idx]), ytr[idx])
          loss.backward()
          opt.step()
          losses.append(float(loss))
      w = n[i] / n[chosen].sum()
      sd = model.state_dict()
      acc_state = ({kk: w * v.detach().clone() for kk, v in sd.items()} if acc_state is None
                   else {kk: acc_state[kk] + w * sd[kk].detach() for kk in sd})
    glob = acc_state
    t_train += time.perf_counter() - s
    if t % args.every == 0 or t == rounds:
      accs = evaluate()
      row = dict(round=t, lr=lr, train_loss=float(np.mean(losses)), accuracy_mean=float(accs.mean()),
                 accuracy_worst=float(accs.min()), accuracy_std=float(accs.std()),
                 finite=bool(all(torch.isfinite(v).all() for v in glob.values())))
      curve.append(row)
      print(json.dumps(row), flush=True)
  print(f"# train {t_train:.1f} s for {rounds} rounds ({t_train / rounds:.3f} s/round)", flush=True)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(experiment=args.experiment, seed=args.seed, rounds=rounds, curve=curve,
                     seconds_per_round=t_train / rounds), f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
