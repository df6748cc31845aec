"""Issue 9, items 1–6: bad input is refused before anything compiles or is written, with one message."""
import csv
import math
import pathlib

import numpy as np
import pytest

from fedjax_sim import experiment, run
from fedjax_sim.algorithms import decentralized, registry
from fedjax_sim.config import ExperimentConfig, apply_overrides, valid_keys
from fedjax_sim.data.federation import from_cohorts, scorable_centers
from fedjax_sim.errors import ConfigError

from tests.conftest import make_cohorts

TINY = ["--set", "data.num_centers=8", "--set", "data.total_stays=1600", "--set", "learner.hidden=8",
        "--rounds", "1", "--seeds", "1", "--quiet"]


@pytest.fixture
def no_compile(monkeypatch):
  """Bad input must be refused before any method is prepared or compiled."""
  def forbidden(*args, **kwargs):
    raise AssertionError("a method was prepared or run for bad input")
  monkeypatch.setattr(experiment, "prepare_method", forbidden)
  monkeypatch.setattr(experiment, "run_methods", forbidden)


def refused(args, out, capsys) -> str:
  """Runs the CLI; asserts exit 2, exactly one ``error:`` line and nothing written. Returns the line."""
  code = run.main(args + ["--out", str(out)])
  err = capsys.readouterr().err
  errors = [line for line in err.splitlines() if line.startswith("error: ")]
  assert code == 2 and len(errors) == 1, err
  assert not out.exists()  # no summary.json, no checkpoint manifest, no folder
  return errors[0]


def write_csv(path, sites, label):
  """A CSV with columns site, age, lab, died; ``label(site, row)`` gives each row's label."""
  rng = np.random.default_rng(0)
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["site", "age", "lab", "died"])
    for site, n in sites:
      for r in range(n):
        w.writerow([site, f"{rng.normal(60, 10):.1f}", f"{rng.normal():.3f}", label(site, r)])
  return ["--set", "data.source=csv", "--set", f"data.path={path}", "--set", "data.site_column=site",
          "--set", "data.label_column=died", "--set", "learner.hidden=8", "--rounds", "1", "--seeds", "3",
          "--quiet"]


# --- item 1: no scorable center --------------------------------------------------------------------

def test_one_valued_label_refused_when_loaded(tmp_path, capsys, no_compile):
  args = write_csv(tmp_path / "zero.csv", [("A", 80), ("B", 60)], lambda s, r: 0)
  line = refused(["local"] + args, tmp_path / "out", capsys)
  assert line == ("error: the label (data.label_column = 'died') is 0 in every one of the 140 rows: AUROC needs "
                  "both classes, so no center could be scored")


def test_no_center_with_a_two_class_test_split_refused(tmp_path, capsys, no_compile):
  # One positive per site: a (site, label) group of one row goes to the train split, so every test split
  # is all negative although the label column has both values.
  args = write_csv(tmp_path / "one.csv", [("A", 30), ("B", 40)], lambda s, r: int(r == 0))
  line = refused(["fedavg"] + args, tmp_path / "out", capsys)
  assert line.startswith("error: no center can be scored: none of the 2 centers has both classes in its test "
                         "split (")
  assert "so every AUROC would be undefined" in line


def test_scorable_centers_matches_a_loop_over_clients():
  fed = from_cohorts(make_cohorts(sizes=[40, 25, 60, 30, 200], seed=3), batch_size=16, num_buckets=2)
  y, m = np.asarray(fed.y_test), np.asarray(fed.m_test)
  want = [len(set(y[c][m[c]].tolist())) == 2 for c in range(fed.num_clients)]
  assert scorable_centers(fed).tolist() == want
  assert any(want)  # the guard sees a scorable center
  one_class = fed.replace(y_test=fed.y_test * 0)
  assert not scorable_centers(one_class).any()  # positive control


# --- item 2: too few clients --------------------------------------------------------------------

@pytest.mark.parametrize("method", ["local", "fedavg", "abps"])
def test_one_center_federation_refused(tmp_path, capsys, no_compile, method):
  line = refused([method] + TINY + ["--set", "data.num_centers=1"], tmp_path / "out", capsys)
  assert line == (f"error: {method} needs a federation of at least 2 centers, but this one has 1 "
                  f"(a federation of one center is not a federation)")


def test_every_method_states_its_smallest_federation():
  config = ExperimentConfig()
  # Every method declares its smallest federation (its MethodSpec's check), the paper 000 rows among them.
  table1 = {"local", "centralized", "fedavg", "fedprox", "feddyn", "moon", "bnn_fl", "wpfed", "decefl", "defta",
            "fedavg_pq", "fedavg_x", "abps", "abps_p", "abps_q", "abps_pq_k1", "abps_pq_k1_hom", "abps_pq_k1_div",
            "abps_pq_k1_ali", "abps_x"}
  assert table1 <= set(registry.METHODS)
  assert all(callable(registry.spec_of(name).check_federation) for name in registry.METHODS)
  for name in registry.METHODS:
    method = apply_overrides(config, registry.preset(name))
    with pytest.raises(ConfigError, match=f"^{name} needs a federation of at least 2 centers"):
      registry.check_federation(name, method, 1)
    # positive control: the defaults fit 8 centers (the iPFL playground's roles name clients up to 11)
    registry.check_federation(name, method, 12 if name == "ipfl_playground" else 8)
  with pytest.raises(ConfigError, match=r"ipfl.buyers = \[1, 2, 8, 9\] names client\(s\) \[8, 9\] outside"):
    registry.check_federation("ipfl_playground", apply_overrides(config, registry.preset("ipfl_playground")), 8)


def test_graph_methods_need_a_regular_graph_exactly_when_one_exists():
  for c in range(2, 9):
    for d in range(1, 4):
      config = apply_overrides(ExperimentConfig(), {"graph.degree": d})
      exists = d < c and c * d % 2 == 0  # a simple d-regular graph on c nodes exists iff d < c and c·d is even
      if exists:
        registry.check_federation("decefl", config, c)
        adj = decentralized.random_regular_graph(c, d, seed=0)  # the graph the method will draw
        assert (adj.sum(1) == d).all()
      else:
        with pytest.raises(ConfigError, match=f"decefl runs on a random {d}-regular peer graph .* needs at least "
                                              f"{d + 1} centers"):
          registry.check_federation("decefl", config, c)
        with pytest.raises(ConfigError):
          decentralized.random_regular_graph(c, d, seed=0)


def test_wpfed_needs_more_centers_than_candidates():
  config = ExperimentConfig()  # wpfed.candidates = 5
  registry.check_federation("wpfed", config, 6)
  with pytest.raises(ConfigError, match=r"wpfed downloads wpfed.candidates = 5 .* needs at least 6 centers; "
                                        r"the federation has 5. Lower wpfed.candidates to at most 4$"):
    registry.check_federation("wpfed", config, 5)


def test_most_sites_dropped_says_so_with_what_is_left():
  with pytest.warns(UserWarning) as caught:
    from_cohorts(make_cohorts(sizes=[200, 10, 10, 10]), min_rows=20)
  assert [str(w.message) for w in caught] == [
      "dropped 3 site(s) with fewer than 20 rows; that is most of the data: only 1 of 4 sites and 200 of 230 rows "
      "are left (lower data.min_site_rows to keep more). Dropped: site1, site2, site3"]
  with pytest.warns(UserWarning) as caught:  # a minority dropped: the plain message
    from_cohorts(make_cohorts(sizes=[200, 10, 150]), min_rows=20)
  assert [str(w.message) for w in caught] == ["dropped 1 site(s) with fewer than 20 rows: site1"]


def test_most_sites_dropped_warning_then_too_small_federation_refused(tmp_path, capsys, no_compile):
  args = write_csv(tmp_path / "s.csv", [("A", 80), ("B", 10), ("C", 12)], lambda s, r: int(r % 3 == 0))
  code = run.main(["abps"] + args + ["--out", str(tmp_path / "out")])
  err = capsys.readouterr().err
  assert code == 2 and not (tmp_path / "out").exists()
  assert ("warning: dropped 2 site(s) with fewer than 20 rows; that is most of the data: only 1 of 3 sites and "
          "80 of 102 rows are left (lower data.min_site_rows to keep more). Dropped: B, C") in err.splitlines()
  assert [line for line in err.splitlines() if line.startswith("error: ")] == [
      "error: abps needs a federation of at least 2 centers, but this one has 1 "
      "(a federation of one center is not a federation)"]


# --- item 3: κ beyond the pool ------------------------------------------------------------------------

def test_kappa_beyond_the_federation_refused(tmp_path, capsys, no_compile):
  line = refused(["abps"] + TINY + ["--set", "abps.kappa=100000"], tmp_path / "out", capsys)
  assert line == ("error: abps: abps.kappa = 100000 partners per center needs at least κ + 1 = 100001 centers, but "
                  "the federation has 8, so a center has at most 7 possible partners; set abps.kappa to at most 7")


def test_kappa_sweep_checks_every_grid_point(tmp_path, capsys, no_compile):
  line = refused(["abps"] + TINY + ["--sweep", "kappa=1,8"], tmp_path / "out", capsys)
  assert line == ("error: abps: abps.kappa = 8 partners per center needs at least κ + 1 = 9 centers, but the "
                  "federation has 8, so a center has at most 7 possible partners; set abps.kappa to at most 7 "
                  "(--sweep grid point kappa=8)")


def test_kappa_against_pool_size_and_centers():
  def cfg(**abps):
    return apply_overrides(ExperimentConfig(), {f"abps.{k}": v for k, v in abps.items()})
  registry.check_federation("abps", cfg(kappa=7), 8)  # κ = C − 1: every other center
  with pytest.raises(ConfigError, match="abps.kappa = 8 partners per center needs at least κ"):
    registry.check_federation("abps", cfg(kappa=8), 8)
  registry.check_federation("abps", cfg(kappa=3, pool_size=3), 20)
  with pytest.raises(ConfigError, match=r"^abps: abps.kappa = 4 exceeds abps.pool_size = 3: a center takes "
                                        r"partners only from its pool"):
    registry.check_federation("abps", cfg(kappa=4, pool_size=3), 20)
  with pytest.raises(ConfigError, match="abps_pq_k1 needs a federation of at least 2"):  # the preset's κ = 1
    registry.check_federation("abps_pq_k1", apply_overrides(ExperimentConfig(), registry.preset("abps_pq_k1")), 1)


def test_federation_checks_come_before_the_checkpoint_manifest(tmp_path, capsys, no_compile):
  ckpt = tmp_path / "ckpt"
  line = refused(["abps"] + TINY + ["--set", "abps.kappa=9", "--checkpoint-every", "1",
                                    "--checkpoint-dir", str(ckpt)], tmp_path / "out", capsys)
  assert "abps.kappa = 9" in line
  assert not ckpt.exists()  # no run.json to --resume from


# --- item 4: unwritable --out ----------------------------------------------------------------------

@pytest.fixture
def no_federation(monkeypatch):
  """--out is checked before the federation is built."""
  def forbidden(*args, **kwargs):
    raise AssertionError("the federation was built before --out was checked")
  monkeypatch.setattr(experiment, "build_federation", forbidden)


def test_out_under_a_regular_file_refused(tmp_path, capsys, no_federation):
  (tmp_path / "file").write_text("x")
  line = refused(["fedavg"] + TINY, tmp_path / "file" / "out", capsys)
  file = tmp_path / "file"
  assert line == f"error: --out {file / 'out'}: cannot create it, {file} is a file, not a folder"


def test_out_that_is_a_file_refused(tmp_path, capsys, no_federation):
  out = tmp_path / "out"
  out.write_text("x")
  code = run.main(["fedavg"] + TINY + ["--out", str(out)])
  err = capsys.readouterr().err
  assert code == 2 and [line for line in err.splitlines() if line.startswith("error: ")] == [
      f"error: --out {out}: exists and is not a folder"]
  assert out.read_text() == "x"


def test_unwritable_out_refused(tmp_path, capsys, no_federation, monkeypatch):
  # Tests run as root, whom chmod does not stop: a folder refusing new files is simulated.
  readonly = tmp_path / "ro"
  readonly.mkdir()
  real = run.tempfile.mkstemp

  def mkstemp(*args, dir=None, **kwargs):
    if dir is not None and readonly == dir:
      raise PermissionError(13, "Permission denied")
    return real(*args, dir=dir, **kwargs)
  monkeypatch.setattr(run.tempfile, "mkstemp", mkstemp)
  line = refused(["fedavg"] + TINY, readonly / "a" / "b", capsys)
  assert line == f"error: --out {readonly / 'a' / 'b'}: cannot write in {readonly} (Permission denied)"
  assert list(readonly.iterdir()) == []


def test_out_below_a_folder_that_cannot_be_searched_refused(tmp_path, capsys, no_federation, monkeypatch):
  # As a non-root user, Path.exists() raises PermissionError below a folder without search permission.
  locked = tmp_path / "locked"
  real = run.pathlib.Path.exists

  def exists(self, *args, **kwargs):
    if locked in self.parents:
      raise PermissionError(13, "Permission denied", str(self))
    return real(self, *args, **kwargs)
  monkeypatch.setattr(run.pathlib.Path, "exists", exists)
  out = locked / "inner" / "out"
  code = run.main(["fedavg"] + TINY + ["--out", str(out)])
  monkeypatch.undo()
  errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
  assert code == 2 and errors == [f"error: --out {out}: cannot look there (Permission denied: {out})"]
  assert not locked.exists()


def test_out_dot_probes_the_folder_written_not_its_parent(tmp_path, monkeypatch):
  """``--out .`` stages its results in the current folder; the check must probe that one (a read-only parent
  such as /home must not refuse it)."""
  sub = tmp_path / "sub"
  sub.mkdir()
  monkeypatch.chdir(sub)
  probed = []
  real = run.tempfile.mkstemp

  def mkstemp(*args, dir=None, **kwargs):
    probed.append(pathlib.Path(dir).absolute())
    return real(*args, dir=dir, **kwargs)
  monkeypatch.setattr(run.tempfile, "mkstemp", mkstemp)
  run.check_writable(pathlib.Path("."), "--out")
  assert probed and set(probed) == {sub}
  assert list(sub.iterdir()) == []


def test_checkpoint_dir_checked_too(tmp_path, capsys, no_federation):
  (tmp_path / "file").write_text("x")
  line = refused(["fedavg"] + TINY + ["--checkpoint-every", "1", "--checkpoint-dir", str(tmp_path / "file" / "c")],
                 tmp_path / "out", capsys)
  assert line.startswith(f"error: --checkpoint-dir {tmp_path / 'file' / 'c'}: cannot create it")


def test_the_write_check_leaves_nothing_behind(tmp_path, capsys, no_compile):
  parent = tmp_path / "runs"
  parent.mkdir()
  refused(["fedavg"] + TINY + ["--set", "data.num_centers=1"], parent / "out", capsys)  # refused after the check
  assert list(parent.iterdir()) == []


# --- item 5: seeds ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seeds, message", [
    ("-1", "error: seeds must be integers in [0, 2^32) = [0, 4294967295], got -1"),
    ("1,4294967296", "error: seeds must be integers in [0, 2^32) = [0, 4294967295], got 4294967296"),
    ("a,b", "error: seeds: expected a comma-separated list of integers, got 'a,b'"),
    ("1.5", "error: seeds: expected a comma-separated list of integers, got '1.5'"),
])
def test_bad_seeds_one_clear_error(tmp_path, capsys, no_federation, seeds, message):
  assert refused(["fedavg", "--seeds", seeds, "--quiet"], tmp_path / "out", capsys) == message


def test_seed_range_ends_accepted():
  config = apply_overrides(ExperimentConfig(), {"seeds": f"0,{2 ** 32 - 1}"})
  assert config.seeds == (0, 2 ** 32 - 1)
  for key in ("data.data_seed", "graph.graph_seed"):
    with pytest.raises(ConfigError, match=rf"^{key} must be in \[0, 2\^32\), got -1$"):
      apply_overrides(ExperimentConfig(), {key: -1})


# --- item 6: floats without ranges --------------------------------------------------------------

def _value(config, key):
  for part in key.split("."):
    config = getattr(config, part)
  return config


FLOAT_KEYS = [k for k in valid_keys() if isinstance(_value(ExperimentConfig(), k), float)]
"""Every float setting of every section (and any top-level one), read off the config's fields."""


def test_float_keys_found():
  assert {"abps.tau_acc", "abps.gamma", "abps.phi_min", "learner.learning_rate", "learner.dropout",
          "data.dirichlet_alpha", "moon.temperature"} <= set(FLOAT_KEYS)
  assert len(FLOAT_KEYS) >= 19


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e39"])
def test_every_float_setting_must_be_finite(key, value):
  with pytest.raises(ConfigError, match=rf"^{key} must be a finite number \(within float32 range\), got "):
    apply_overrides(ExperimentConfig(), {key: value})


RANGES = [  # key, refused values, accepted values (the ends of the documented range)
    ("abps.tau_acc", [-1, -1e-9, 1.0001], [0.0, 1.0]),
    ("abps.gamma", [-0.1, 100.5], [0.0, 100.0]),
    ("abps.epsilon", [-0.1, 1.1], [0.0, 1.0]),
    ("abps.alpha0", [0.0, -1.0], [1e-6, 50.0]),
    ("abps.beta0", [0.0], [1e-6]),
    ("abps.keep_fraction", [0.0, 1.5], [1e-3, 1.0]),
    ("abps.momentum", [-0.1, 1.0], [0.0, 0.99]),
    ("learner.learning_rate", [0.0, 10.5], [1e-8, 10.0]),
    ("learner.weight_decay", [-1e-6, 1.0], [0.0, 0.5]),
    ("learner.dropout", [-0.1, 1.0], [0.0, 0.9]),
    ("fedprox.mu", [-0.01], [0.0, 10.0]),
    ("feddyn.alpha", [0.0], [1e-4]),
    ("moon.mu", [-1.0], [0.0]),
    ("moon.temperature", [0.0, -0.5], [1e-3]),
    ("fedavg.server_momentum", [-0.1, 1.0], [0.0, 0.9]),
    ("graph.defta_decay", [-0.1, 1.0], [0.0, 0.9]),
    ("data.dirichlet_alpha", [0.0], [1e-3, 100.0]),
    ("graph.degree", [0], [1, 10]),
    ("wpfed.bits", [0, 4097], [1, 4096]),
    ("abps.tmc_permutations", [0, 257], [1, 256]),
    ("abps.exact_shapley_max", [-1, 11], [0, 10]),
]


@pytest.mark.parametrize("key, bad, good", RANGES, ids=[r[0] for r in RANGES])
def test_documented_ranges(key, bad, good):
  for v in bad:
    with pytest.raises(ConfigError, match=rf"^{key} must be "):
      apply_overrides(ExperimentConfig(), {key: v})
  for v in good:
    section, field = key.split(".")
    assert getattr(getattr(apply_overrides(ExperimentConfig(), {key: v}), section), field) == v


def test_phi_range_must_be_ordered():
  with pytest.raises(ConfigError, match=r"^abps.phi_max must be greater than abps.phi_min = 0.2, got 0.1$"):
    apply_overrides(ExperimentConfig(), {"abps.phi_min": 0.2})
  assert apply_overrides(ExperimentConfig(), {"abps.phi_min": -1.0, "abps.phi_max": 1.0}).abps.phi_max == 1.0


@pytest.mark.parametrize("args, message", [
    (["--set", "abps.tau_acc=nan"], "error: abps.tau_acc must be a finite number (within float32 range), got nan"),
    (["--set", "abps.tau_acc=-1"],
     "error: abps.tau_acc must be in [0, 1] (a threshold on the receiver's belief, a probability), got -1.0"),
    (["--set", "abps.gamma=1000"], "error: abps.gamma must be in [0, 100], got 1000.0"),
    (["--set", "learner.learning_rate=inf"],
     "error: learner.learning_rate must be a finite number (within float32 range), got inf"),
    (["--sweep", "tau_acc=0.5,nan"], "error: abps.tau_acc must be a finite number (within float32 range), got nan"),
    (["--sweep", "gamma=1,1000"], "error: abps.gamma must be in [0, 100], got 1000.0"),
])
def test_float_settings_refused_on_the_command_line(tmp_path, capsys, no_federation, args, message):
  assert refused(["abps"] + TINY + args, tmp_path / "out", capsys) == message


def test_float32_range_bound_is_float32_max():
  assert math.isclose(float(np.finfo(np.float32).max), 3.4028234663852886e38, rel_tol=0, abs_tol=0)
  assert apply_overrides(ExperimentConfig(), {"fedprox.mu": float(np.finfo(np.float32).max)}).fedprox.mu > 0
