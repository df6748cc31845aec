"""The model zoo (issue 10 item 6): shapes, parameter counts by hand, dropout, vmap over clients, LSTM causality,
and forward passes against plain numpy references."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_sim.errors import ConfigError, DataError
from fedjax_sim.models import num_params
from fedjax_sim.models import zoo


def conv(k, cin, cout, bias=True):
  """Parameters of a k×k convolution (or dense layer when k = 1 and the input is flat)."""
  return k * k * cin * cout + (cout if bias else 0)


def dense(cin, cout):
  return cin * cout + cout


def gn(c):
  return 2 * c  # GroupNorm scale + bias


def shape_count(model) -> int:
  """Parameter count from shapes alone (no compile, no compute)."""
  return num_params(jax.eval_shape(model.init, jax.random.key(0)))


# ----------------------------------------------------------------------------------- the slice convolution


@pytest.mark.parametrize("h,w,c,f,k,s,padding", [
    (9, 7, 2, 3, 3, 1, "VALID"), (8, 8, 1, 4, 5, 1, "VALID"), (7, 9, 3, 2, 3, 2, "SAME"), (8, 6, 2, 3, 2, 2, "SAME"),
    (5, 5, 3, 4, 1, 2, "SAME"), (6, 7, 1, 2, 3, 2, "VALID")])
def test_slice_conv_is_lax_s_cross_correlation(h, w, c, f, k, s, padding):
  """slice_conv computes what lax.conv_general_dilated (flax's nn.Conv) does: NHWC × HWIO, strides, VALID/SAME,
  odd and even sizes (SAME puts the odd padding pixel at the end), kernels 1–5."""
  rng = np.random.default_rng(h * 1000 + w * 100 + k * 10 + s)
  x, kernel = rng.normal(size=(2, h, w, c)).astype(np.float32), rng.normal(size=(k, k, c, f)).astype(np.float32)
  both = jax.jit(lambda x, kern: (zoo.slice_conv(x, kern, (s, s), padding), jax.lax.conv_general_dilated(
      x, kern, (s, s), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))))
  got, want = both(x, kernel)
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_module_matches_flax_conv_with_the_same_parameters():
  """zoo.Conv has nn.Conv's parameter tree and function (checkpoints are interchangeable)."""
  import flax.linen as nn
  x = jax.random.normal(jax.random.key(1), (3, 8, 8, 2))
  for kw in (dict(padding="VALID"), dict(padding="SAME", strides=(2, 2), use_bias=False)):
    ours, theirs = zoo.Conv(5, (3, 3), **kw), nn.Conv(5, (3, 3), **kw)
    params = jax.jit(theirs.init)(jax.random.key(2), x)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(
        jax.eval_shape(ours.init, jax.random.key(2), x))
    got, want = jax.jit(lambda p, x: (ours.apply(p, x), theirs.apply(p, x)))(params, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- parameter counts


def test_lenet_parameter_count_matches_the_layer_formula():
  want_mnist = conv(5, 1, 6) + conv(5, 6, 16) + dense(256, 120) + dense(120, 84) + dense(84, 10)
  want_cifar = conv(5, 3, 6) + conv(5, 6, 16) + dense(400, 120) + dense(120, 84) + dense(84, 10)
  assert shape_count(zoo.lenet_model((28, 28, 1), 10)) == want_mnist
  assert shape_count(zoo.lenet_model((32, 32, 3), 10)) == want_cifar
  assert zoo.lenet_flat_features((28, 28, 1)) == 256 and zoo.lenet_flat_features((32, 32, 3)) == 400


def test_femnist_cnn_parameter_count_matches_the_layer_formula():
  want = conv(3, 1, 32) + conv(3, 32, 64) + dense(12 * 12 * 64, 128) + dense(128, 62)
  assert shape_count(zoo.femnist_cnn_model((28, 28, 1), 62)) == want
  assert zoo.femnist_cnn_flat_features((28, 28, 1)) == 9216


def test_resnet8_parameter_count_matches_the_layer_formula():
  stem = conv(3, 3, 16, bias=False) + gn(16)
  block0 = 2 * conv(3, 16, 16, bias=False) + 2 * gn(16)  # identity shortcut
  block1 = conv(3, 16, 32, False) + conv(3, 32, 32, False) + 2 * gn(32) + conv(1, 16, 32, False) + gn(32)
  block2 = conv(3, 32, 64, False) + conv(3, 64, 64, False) + 2 * gn(64) + conv(1, 32, 64, False) + gn(64)
  want = stem + block0 + block1 + block2 + dense(64, 10)
  model = zoo.resnet8_model((32, 32, 3), 10)
  assert shape_count(model) == want
  # Input size does not change the count (global average pooling); the widths do.
  assert shape_count(zoo.resnet8_model((8, 8, 3), 10)) == want
  assert shape_count(zoo.resnet8_model((32, 32, 3), 10, widths=(8, 16, 32))) < want
  params = jax.eval_shape(model.init, jax.random.key(0))
  assert "shortcut_conv" not in params["stage0_block0"]
  assert "shortcut_conv" in params["stage1_block0"] and "shortcut_conv" in params["stage2_block0"]


def test_resnet20_parameter_count_is_he_et_al_s_0_27m():
  stem = conv(3, 3, 16, False) + gn(16)
  stage0 = 6 * (conv(3, 16, 16, False) + gn(16))
  stage1 = conv(3, 16, 32, False) + 5 * conv(3, 32, 32, False) + 6 * gn(32)
  stage2 = conv(3, 32, 64, False) + 5 * conv(3, 64, 64, False) + 6 * gn(64)
  want = stem + stage0 + stage1 + stage2 + dense(64, 10)  # option-A shortcuts: no parameters
  assert shape_count(zoo.resnet20_model((32, 32, 3), 10)) == want
  assert round(want / 1e4) == 27  # "ResNet-20 ... 0.27M" (He et al. 2016 Table 6)


def test_char_lstm_parameter_count_matches_the_layer_formula_and_the_ipfl_count():
  lstm = lambda cin, h: 4 * h * (cin + h + 1)  # 4 gates: input kernel, recurrent kernel, one bias
  want = 80 * 8 + lstm(8, 256) + lstm(256, 256) + dense(256, 80)
  assert shape_count(zoo.char_lstm_model()) == want
  # PyTorch's nn.LSTM has two biases per gate: 2 layers × 4 × 256 more, the 819,920 of 19dx/iPFL's docstring.
  assert want + 2 * 4 * 256 == 819_920


@settings(max_examples=8, deadline=None)
@given(vocab=st.integers(2, 30), embed=st.integers(1, 9), hidden=st.integers(1, 9), layers=st.integers(1, 3))
def test_char_lstm_parameter_count_property(vocab, embed, hidden, layers):
  want = vocab * embed + 4 * hidden * (embed + hidden + 1) + (layers - 1) * 4 * hidden * (2 * hidden + 1)
  assert shape_count(zoo.char_lstm_model(vocab, embed, hidden, layers)) == want + dense(hidden, vocab)


# ----------------------------------------------------------------------------------- shapes and inputs

IMAGE_MODELS = {
    # name: (factory, input_shape, num_classes, representation width)
    "lenet": (lambda: zoo.lenet_model((28, 28, 1), 10), (28, 28, 1), 10, 84),
    "femnist_cnn": (lambda: zoo.femnist_cnn_model((28, 28, 1), 62), (28, 28, 1), 62, 128),
    # Same class count for both ResNets: their layers then share shapes, so eager init compiles once.
    "resnet8": (lambda: zoo.resnet8_model((8, 8, 3), 10), (8, 8, 3), 10, 64),
    "resnet20": (lambda: zoo.resnet20_model((8, 8, 3), 10), (8, 8, 3), 10, 64),
}


@pytest.fixture(scope="module")
def built():
  """Each image model with params for two clients (keys 0 and 1) and a jitted eval apply."""
  out = {}
  for name, (factory, shape, classes, rep) in IMAGE_MODELS.items():
    model = factory()
    init = jax.jit(model.init)  # one compiled init per model (eager init dispatches op by op)
    params = [init(jax.random.key(i)) for i in range(2)]
    out[name] = (model, params, shape, classes, rep, jax.jit(lambda p, x, m=model: m.apply(p, x, False, None)))
  return out


def pixels(shape, batch=3, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (batch, *shape), dtype=np.uint8)


@pytest.mark.parametrize("name", list(IMAGE_MODELS))
def test_image_model_shapes_on_uint8_and_float_inputs(built, name):
  model, params, shape, classes, rep_width, fwd = built[name]
  x8 = pixels(shape)
  logits, rep = fwd(params[0], jnp.asarray(x8))
  assert logits.shape == (3, classes) and rep.shape == (3, rep_width)
  assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()
  # uint8 pixels are scaled by 1/255 inside; a float input is taken as is (so 0..255 floats differ).
  xf = x8.astype(np.float32) / 255.0
  logits_f, rep_f = fwd(params[0], jnp.asarray(xf))
  assert logits_f.shape == (3, classes) and rep_f.shape == (3, rep_width)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(logits_f), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(rep), np.asarray(rep_f), rtol=1e-5, atol=1e-5)
  if not name.startswith("resnet"):  # (the ResNets are scale invariant: see the test below)
    assert not np.allclose(np.asarray(fwd(params[0], jnp.asarray(x8.astype(np.float32)))[1]), np.asarray(rep),
                           atol=1e-3)


def test_image_to_float_scales_only_uint8():
  x8 = np.array([[0, 51, 255]], np.uint8)
  np.testing.assert_allclose(np.asarray(zoo.image_to_float(jnp.asarray(x8))), [[0.0, 0.2, 1.0]], rtol=1e-7)
  xf = np.array([[0.0, 51.0, 255.0]], np.float64)
  out = zoo.image_to_float(jnp.asarray(xf))
  assert out.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(out), xf.astype(np.float32))


@pytest.mark.parametrize("name", list(IMAGE_MODELS))
def test_vmap_over_stacked_client_params_matches_per_client_calls(built, name):
  """Stacked params of 2 clients, vmapped: the same numbers as one call per client (in training mode, with
  per-client dropout keys, where the model has dropout)."""
  model, params, shape, classes, _, fwd = built[name]
  train = name == "femnist_cnn"
  stacked = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), *params)
  xs = jnp.asarray(np.stack([pixels(shape, seed=1), pixels(shape, seed=2)]))  # [clients, B, H, W, C]
  keys = jax.random.split(jax.random.key(7), 2)
  logits, rep = jax.jit(jax.vmap(lambda p, x, k: model.apply(p, x, train, k)))(stacked, xs, keys)
  assert logits.shape == (2, 3, classes)
  for c in range(2):
    want_logits, want_rep = model.apply(params[c], xs[c], True, keys[c]) if train else fwd(params[c], xs[c])
    np.testing.assert_allclose(np.asarray(logits[c]), np.asarray(want_logits), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(rep[c]), np.asarray(want_rep), rtol=1e-5, atol=1e-5)
  # The two clients really are different (different params and data).
  assert not np.allclose(np.asarray(logits[0]), np.asarray(logits[1]))


def test_models_without_dropout_ignore_train_and_rng(built):
  model, params, shape, *_ = built["lenet"]
  x = jnp.asarray(pixels(shape))
  a = model.apply(params[0], x, True, jax.random.key(5))[0]
  b = model.apply(params[0], x, False, None)[0]
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------------- dropout


def test_femnist_cnn_dropout_depends_on_the_key_and_only_acts_in_training(built):
  model, params, shape, *_ = built["femnist_cnn"]
  x = jnp.asarray(pixels(shape))
  out = lambda m, train, key: np.asarray(m.apply(params[0], x, train, key)[0])
  eval_a, eval_b = out(model, False, None), out(model, False, jax.random.key(9))
  np.testing.assert_array_equal(eval_a, eval_b)  # evaluation is deterministic, rng or not
  k1, k2 = out(model, True, jax.random.key(1)), out(model, True, jax.random.key(2))
  assert not np.allclose(k1, k2) and not np.allclose(k1, eval_a)
  np.testing.assert_array_equal(k1, out(model, True, jax.random.key(1)))  # same key, same mask
  # Positive control: with both rates 0, training equals evaluation; each dropout layer acts on its own.
  same = lambda rates: zoo.femnist_cnn_model(shape, 62, dropout=rates)
  np.testing.assert_allclose(out(same((0.0, 0.0)), True, jax.random.key(1)), eval_a, rtol=1e-6, atol=1e-6)
  assert not np.allclose(out(same((0.25, 0.0)), True, jax.random.key(1)), eval_a)
  assert not np.allclose(out(same((0.0, 0.5)), True, jax.random.key(1)), eval_a)


# ----------------------------------------------------------------------------------- numpy references


def np_conv_valid(x, kernel, bias):
  """Plain 'VALID' stride-1 convolution: x [B, H, W, Cin], kernel [k, k, Cin, Cout]."""
  k = kernel.shape[0]
  win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))  # [B, H', W', Cin, k, k]
  return np.einsum("bhwcij,ijco->bhwo", win, kernel) + bias


def np_maxpool2(x):
  b, h, w, c = x.shape
  x = x[:, : h // 2 * 2, : w // 2 * 2]
  return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def test_lenet_forward_matches_a_numpy_reference(built):
  _, params, shape, *_ = built["lenet"]
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params[1])
  x8 = pixels(shape, batch=2, seed=4)
  h = x8.astype(np.float64) / 255.0
  relu = lambda z: np.maximum(z, 0.0)
  h = np_maxpool2(relu(np_conv_valid(h, p["conv_0"]["kernel"], p["conv_0"]["bias"])))
  h = np_maxpool2(relu(np_conv_valid(h, p["conv_1"]["kernel"], p["conv_1"]["bias"])))
  h = h.reshape(2, -1)
  assert h.shape == (2, 256)
  h = relu(h @ p["fc_0"]["kernel"] + p["fc_0"]["bias"])
  rep = relu(h @ p["fc_1"]["kernel"] + p["fc_1"]["bias"])
  logits = rep @ p["head"]["kernel"] + p["head"]["bias"]
  got_logits, got_rep = built["lenet"][-1](params[1], jnp.asarray(x8))
  np.testing.assert_allclose(np.asarray(got_rep), rep, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(got_logits), logits, rtol=1e-4, atol=1e-5)


def test_option_a_shortcut_subsamples_and_zero_pads_channels(built):
  """With every conv kernel zeroed, a block's residual branch is GN(0) = 0, so it outputs relu(shortcut(x)).

  (``built`` only orders this test after the ResNet inits: the 16/32-channel kernels are then compiled.)"""
  x = np.random.default_rng(0).normal(size=(2, 6, 6, 16)).astype(np.float32)
  for stride, width, shortcut in [(2, 32, "pad"), (1, 16, "projection")]:  # option A; identity
    block = zoo.BasicBlock(width, stride, groups=2, shortcut=shortcut)
    params = block.init(jax.random.key(0), jnp.asarray(x))["params"]
    assert "shortcut_conv" not in params  # option A and identity shortcuts have no parameters
    zeroed = {k: ({"kernel": jnp.zeros_like(v["kernel"])} if "conv" in k else v) for k, v in params.items()}
    sub = x[:, ::stride, ::stride, :]
    extra = width - 16
    want = np.concatenate([np.zeros((*sub.shape[:3], extra // 2)), sub,
                           np.zeros((*sub.shape[:3], extra - extra // 2))], axis=-1)
    got = np.asarray(block.apply({"params": zeroed}, jnp.asarray(x)))
    np.testing.assert_allclose(got, np.maximum(want, 0.0), atol=1e-6)
    # Guard: with the real (nonzero) kernels the residual branch does contribute.
    assert not np.allclose(np.asarray(block.apply({"params": params}, jnp.asarray(x))), np.maximum(want, 0.0),
                           atol=1e-3)


def test_resnet_output_is_invariant_to_input_scale(built):
  """GroupNorm right after a bias-free stem conv: f(c·x) = f(x) for c > 0 (up to GN's ε); LeNet is not."""
  x = np.random.default_rng(3).normal(size=(3, 8, 8, 3)).astype(np.float32)
  for name in ("resnet8", "resnet20"):
    _, params, *_, fwd = built[name]
    np.testing.assert_allclose(np.asarray(fwd(params[0], jnp.asarray(3.0 * x))[0]),
                               np.asarray(fwd(params[0], jnp.asarray(x))[0]), rtol=1e-4, atol=1e-4)
  _, params, shape, *_, fwd = built["lenet"]
  y = np.random.default_rng(3).random((3, *shape)).astype(np.float32)
  assert not np.allclose(np.asarray(fwd(params[0], jnp.asarray(3.0 * y))[0]),
                         np.asarray(fwd(params[0], jnp.asarray(y))[0]), atol=1e-3)


# ----------------------------------------------------------------------------------- character LSTM

VOCAB, HIDDEN, LENGTH = 11, 6, 7


@pytest.fixture(scope="module")
def lstm():
  model = zoo.char_lstm_model(vocab_size=VOCAB, embed=HIDDEN, hidden=HIDDEN, layers=2)  # one kernel shape
  params = [model.init(jax.random.key(i)) for i in range(2)]
  return model, params, jax.jit(lambda p, x: model.apply(p, x, False, None))


def tokens(batch=2, seed=0):
  return np.random.default_rng(seed).integers(0, VOCAB, (batch, LENGTH)).astype(np.int32)


def test_char_lstm_shapes_and_numpy_reference(lstm):
  """Logits [B, L, vocab] and representation [B, L, hidden], equal to a plain loop over time of the LSTM
  equations (i, f, g, o gates; c' = f c + i g; h' = o tanh c') with the same parameters."""
  _, params, fwd = lstm
  x = tokens()
  logits, rep = fwd(params[0], jnp.asarray(x))
  assert logits.shape == (2, LENGTH, VOCAB) and rep.shape == (2, LENGTH, HIDDEN)
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params[0])
  sig = lambda z: 1.0 / (1.0 + np.exp(-z))
  h_seq = p["embed"]["embedding"][x]  # [B, L, embed]
  for layer in ("lstm_0", "lstm_1"):
    q = p[layer]
    h, c, outs = np.zeros((2, HIDDEN)), np.zeros((2, HIDDEN)), []
    for t in range(LENGTH):
      pre = {g: h_seq[:, t] @ q["i" + g]["kernel"] + h @ q["h" + g]["kernel"] + q["h" + g]["bias"] for g in "ifgo"}
      c = sig(pre["f"]) * c + sig(pre["i"]) * np.tanh(pre["g"])
      h = sig(pre["o"]) * np.tanh(c)
      outs.append(h)
    h_seq = np.stack(outs, axis=1)
  np.testing.assert_allclose(np.asarray(rep), h_seq, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(logits), h_seq @ p["head"]["kernel"] + p["head"]["bias"],
                             rtol=1e-4, atol=1e-5)


@settings(max_examples=12, deadline=None)
@given(t=st.integers(0, LENGTH - 1), shift=st.integers(1, VOCAB - 1), seed=st.integers(0, 3))
def test_char_lstm_is_causal(lstm, t, shift, seed):
  """Changing token t changes the logits at positions ≥ t (every one of them) and none before t."""
  _, params, fwd = lstm
  x = tokens(seed=seed)
  y = x.copy()
  y[:, t] = (y[:, t] + shift) % VOCAB
  a, b = np.asarray(fwd(params[0], jnp.asarray(x))[0]), np.asarray(fwd(params[0], jnp.asarray(y))[0])
  np.testing.assert_array_equal(a[:, :t], b[:, :t])
  assert (np.abs(a[:, t:] - b[:, t:]).max(axis=-1) > 1e-7).all()


def test_char_lstm_vmap_over_clients_matches_per_client_calls(lstm):
  model, params, fwd = lstm
  stacked = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), *params)
  xs = jnp.asarray(np.stack([tokens(seed=1), tokens(seed=2)]))
  logits, rep = jax.jit(jax.vmap(lambda p, x: model.apply(p, x, True, None)))(stacked, xs)
  assert logits.shape == (2, 2, LENGTH, VOCAB) and rep.shape == (2, 2, LENGTH, HIDDEN)
  for c in range(2):
    np.testing.assert_allclose(np.asarray(logits[c]), np.asarray(fwd(params[c], xs[c])[0]), rtol=1e-5, atol=1e-6)
  assert not np.allclose(np.asarray(logits[0]), np.asarray(logits[1]))


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("make", [
    lambda: zoo.lenet_model((28, 28), 10),
    lambda: zoo.lenet_model((12, 12, 1), 10),  # too small for two conv + pool stages
    lambda: zoo.lenet_model("28x28", 10),
    lambda: zoo.femnist_cnn_model((28, 28, 1), 0),
    lambda: zoo.femnist_cnn_model((28, 28, 1), 62, dropout=(0.25, 1.0)),
    lambda: zoo.resnet8_model((32, 32, 3), 10, groups=3),  # 3 does not divide 16
    lambda: zoo.resnet20_model((32, 32, 3), 10, groups=0),
    lambda: zoo.resnet8_model((32, 32, 3), 10, widths=(16, 0, 64)),
    lambda: zoo.lenet_model((28.5, 28, 1), 10),  # not an integer size
    lambda: zoo.char_lstm_model(hidden=0),
])
def test_bad_settings_raise_config_error(make):
  with pytest.raises(ConfigError):
    make()


def test_numpy_integer_settings_are_accepted():
  """Config values may arrive as numpy integers (e.g. a class count from ``np.unique``)."""
  assert shape_count(zoo.lenet_model(np.array([28, 28, 1]), np.int64(10))) == shape_count(
      zoo.lenet_model((28, 28, 1), 10))
  assert shape_count(zoo.char_lstm_model(np.int32(80))) == shape_count(zoo.char_lstm_model(80))


def test_bad_inputs_raise_data_error(built, lstm):
  model, params, *_ = built["lenet"]
  with pytest.raises(DataError, match="input_shape"):
    model.apply(params[0], jnp.zeros((2, 32, 32, 3)), False, None)
  lstm_model, lstm_params, _ = lstm
  with pytest.raises(DataError, match="token"):
    lstm_model.apply(lstm_params[0], jnp.zeros((2, LENGTH), jnp.float32), False, None)
  with pytest.raises(DataError, match="token"):
    lstm_model.apply(lstm_params[0], jnp.zeros((LENGTH,), jnp.int32), False, None)
