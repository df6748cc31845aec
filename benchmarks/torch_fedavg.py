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


def _client_splits(config, with_val: bool = False):
  """Each client's (train, test) arrays from fedjax_sim's own loaders, partition and split (and val, asked)."""
  from fedjax_sim.config import _split_fractions
  from fedjax_sim.data.labeled import load_labeled, partition_rows, split_client_rows
  d = config.data
  train, _ = load_labeled(d)
  parts, _ = partition_rows(train, d)
  rng = np.random.default_rng(d.data_seed)
  out = []
  for p in parts:
    tr, va, te = split_client_rows(rng, p, _split_fractions(d.split))
    out.append((train.x[tr], train.y[tr], train.x[te], train.y[te]) + ((train.x[va], train.y[va]) if with_val else ()))
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
      m.bias.copy_(torch.from_numpy(p[name]["bias"].copy()))
    k0 = p["fc_0"]["kernel"]  # [(h, w, c), out] -> [out, (c, h, w)]
    side = int(round((k0.shape[0] / 16) ** 0.5))
    denses[0].weight.copy_(torch.from_numpy(
        k0.reshape(side, side, 16, -1).transpose(3, 2, 0, 1).reshape(k0.shape[1], -1).copy()))
    denses[0].bias.copy_(torch.from_numpy(p["fc_0"]["bias"].copy()))
    for m, name in zip(denses[1:], ("fc_1", "head")):
      m.weight.copy_(torch.from_numpy(p[name]["kernel"].T.copy()))
      m.bias.copy_(torch.from_numpy(p[name]["bias"].copy()))


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


def replay(torch, config, seed: int, run_rounds: int, engine_json, jax_loop: bool = True) -> int:
  """FedAvg in PyTorch on the engine's own draws for ``seed``: its initial LeNet, its K clients each round and each
  client's batch order (the keys of :mod:`fedjax_sim.engine.simulate`, ``sampled_fedavg`` and
  ``make_client_update``, recomputed here). Prints the validation accuracy every round (the engine's
  ``val_accuracy_curve``, the mean over clients with validation rows) beside the engine's, read from
  ``engine_json`` (a ``seed_S.json`` of a run's output) when given.

  Same draws, same arithmetic up to float rounding: if PyTorch follows the engine's curve (a collapse included),
  the curve is a property of the protocol and those draws, not of the engine. The keys and the learning rate are
  those of the config's R rounds (``split(k_rounds, R)``); ``run_rounds`` only stops the replay early.
  """
  import jax
  import jax.numpy as jnp
  from fedjax_sim.algorithms.base import weighted_average
  from fedjax_sim.algorithms.registry import hyper_from_config
  from fedjax_sim.engine.local import ClientContext, ClientData, make_client_update
  from fedjax_sim.models.zoo import lenet_model
  from fedjax_sim.tasks import learning_rate_at, multiclass_task
  lc, rounds = config.learner, config.rounds
  clients, num_classes = _client_splits(config, with_val=True)
  c, k = len(clients), config.participation.clients_per_round or len(clients)
  n = np.array([len(cl[1]) for cl in clients], np.int64)
  xtr0 = clients[0][0]
  model = lenet_model(xtr0.shape[1:], num_classes)
  k_init, k_rounds = jax.random.split(jax.random.key(seed))  # simulate.start
  params = model.init(k_init)  # sampled_fedavg.init
  round_keys = jax.random.split(k_rounds, rounds)
  side, chans = xtr0.shape[1], xtr0.shape[3]
  to_t = lambda x: torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float() / 255.0  # noqa: E731
  data = [(to_t(cl[0]), torch.from_numpy(cl[1].astype(np.int64)), to_t(cl[4]), torch.from_numpy(cl[5].astype(np.int64)))
          for cl in clients]
  net = _lenet(torch, chans, num_classes, side)
  _flax_to_torch(params, net, torch)
  glob = {kk: v.clone() for kk, v in net.state_dict().items()}
  engine_curve = None
  if engine_json:
    with open(engine_json) as f:
      engine_curve = json.load(f)["val_accuracy_curve"]
  draws = jax.jit(lambda rk: _round_draws(rk, c, k, lc.local_epochs))
  # The engine's own local update, one client at a time (rows padded to a power of two: padding changes nothing),
  # beside PyTorch from the same start: their parameter gap each round says where the two part.
  task = multiclass_task(model, optimizer=lc.optimizer, schedule=lc.schedule, rounds=rounds)
  update = jax.jit(make_client_update(task, batch_size=lc.batch_size, epochs=lc.local_epochs))
  hyper = hyper_from_config(config)
  jglob = params
  xs = [cl[0] for cl in clients]
  ys = [cl[1].astype(np.int32) for cl in clients]

  def padded(i):
    m = 1 << max(0, int(n[i] - 1).bit_length())
    x = np.zeros((m,) + xs[i].shape[1:], xs[i].dtype)
    x[:n[i]] = xs[i]
    y = np.zeros((m,), np.int32)
    y[:n[i]] = ys[i]
    return ClientData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(int(n[i]), jnp.int32))

  for t in range(1, run_rounds + 1):
    selected, client_keys = draws(round_keys[t - 1])
    selected = np.asarray(selected)
    k_train = jax.random.split(round_keys[t - 1])[1]
    ckeys = jax.random.split(k_train, c)
    if jax_loop:
      ctx = ClientContext(hyper=hyper, t=jnp.asarray(t, jnp.int32))
      outs = [update(ckeys[i], jglob, padded(i), ctx).params for i in selected]
      jglob = weighted_average(jax.tree_util.tree_map(lambda *a: jnp.stack(a), *outs), jnp.asarray(n[selected]))
    lr = float(learning_rate_at(lc.schedule, lc.learning_rate, lc.final_learning_rate, t, rounds))
    acc_state, losses = None, []
    for i in selected:
      net.load_state_dict(glob)
      opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=lc.momentum, weight_decay=lc.weight_decay)
      xtr, ytr = data[i][0], data[i][1]
      for ekey in client_keys[i]:  # [E] epoch keys: the order is argsort of uniform(k_perm) over the valid rows
        order = torch.from_numpy(np.asarray(jnp.argsort(jax.random.uniform(ekey, (int(n[i]),)))).astype(np.int64))
        for b in range(0, int(n[i]), lc.batch_size):
          idx = order[b:b + lc.batch_size]
          opt.zero_grad()
          loss = torch.nn.functional.cross_entropy(net(xtr[idx]), ytr[idx])
          loss.backward()
          opt.step()
          losses.append(float(loss.detach()))
      w = n[i] / n[selected].sum()
      sd = net.state_dict()
      acc_state = ({kk: w * v.detach().clone() for kk, v in sd.items()} if acc_state is None
                   else {kk: acc_state[kk] + w * sd[kk].detach() for kk in sd})
    glob = acc_state
    row = {}
    if jax_loop:
      ref = _lenet(torch, chans, num_classes, side)
      _flax_to_torch(jax.tree_util.tree_map(np.asarray, jglob), ref, torch)
      with torch.no_grad():
        jaccs = [float((ref(xv).argmax(1) == yv).float().mean()) for _, _, xv, yv in data if len(yv)]
      row = dict(val_accuracy_jax_loop=float(np.mean(jaccs)),
                 max_param_gap=max(float((a - b).abs().max()) for a, b in zip(glob.values(), ref.state_dict().values())))
    net.load_state_dict(glob)
    with torch.no_grad():
      accs = [float((net(xv).argmax(1) == yv).float().mean()) for _, _, xv, yv in data if len(yv)]
    row = dict(round=t, lr=lr, train_loss=float(np.mean(losses)) if losses else 0.0,
               val_accuracy_torch=float(np.mean(accs)), **row, clients=[int(i) for i in selected])
    if engine_curve is not None and t <= len(engine_curve):
      row["val_accuracy_engine"] = float(engine_curve[t - 1])
    print(json.dumps(row), flush=True)
  return 0


def _round_draws(round_key, num_clients: int, k: int, epochs: int):
  """The engine's draws of one round: ``selected [K]`` and each client's ``[C, E]`` permutation keys."""
  import jax
  k_select, k_train = jax.random.split(round_key)  # sampled_fedavg.round_fn
  selected = jax.random.choice(k_select, num_clients, (k,), replace=False)
  client_keys = jax.random.split(k_train, num_clients)  # train_selected: client i gets split(key, C)[i]
  epoch_keys = jax.vmap(lambda ck: jax.random.split(ck, epochs))(client_keys)  # make_client_update
  perm_keys = jax.vmap(jax.vmap(lambda ek: jax.random.split(ek)[0]))(epoch_keys)  # (k_perm, k_steps)
  return selected, perm_keys


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("experiment", help="an experiment name (configs/NAME.toml)")
  ap.add_argument("--rounds", type=int, default=None, help="rounds (default: the config's)")
  ap.add_argument("--seed", type=int, default=11)
  ap.add_argument("--every", type=int, default=10, help="evaluate every this many rounds")
  ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
  ap.add_argument("--json", default=None, help="write the curve here")
  ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                  help="override a config field, as the CLI's --set (e.g. participation.clients_per_round=4)")
  ap.add_argument("--check-client", type=int, default=None, metavar="I",
                  help="compare one client's local training in fedjax_sim and PyTorch, then exit")
  ap.add_argument("--round", type=int, default=1, help="the round whose learning rate --check-client uses")
  ap.add_argument("--replay", action="store_true",
                  help="train on the engine's own draws for --seed (init, clients, batch orders), every round printed")
  ap.add_argument("--engine-json", default=None, metavar="SEED_JSON",
                  help="with --replay: an engine run's seed_S.json, whose validation curve is printed alongside")
  ap.add_argument("--no-jax-loop", action="store_true",
                  help="with --replay: PyTorch only (no per-client run of the engine's update beside it)")
  args = ap.parse_args(argv)
  try:
    import torch
  except ImportError:
    print("error: this reference needs PyTorch (pip install torch); fedjax_sim itself does not", file=sys.stderr)
    return 2
  from fedjax_sim.config import load_experiment
  from fedjax_sim.tasks import learning_rate_at
  overrides = dict(kv.split("=", 1) for kv in args.set)
  config = load_experiment(args.experiment, overrides)
  lc, rounds = config.learner, args.rounds or config.rounds
  if lc.model != "lenet" or lc.optimizer != "sgd":
    print(f"error: the reference implements the lenet model with sgd; the config has {lc.model} / {lc.optimizer}",
          file=sys.stderr)
    return 2
  if args.threads:
    torch.set_num_threads(args.threads)
  if args.check_client is not None:
    return check_client(torch, config, args.check_client, args.round, rounds, args.seed)
  if args.replay:
    return replay(torch, config, args.seed, rounds, args.engine_json, jax_loop=not args.no_jax_loop)
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
