"""The model zoo of papers 002 (FBS-FL) and 003 (iPFL): image CNNs, CIFAR ResNets and a character LSTM.

Every factory returns a :class:`fedjax_sim.models.Model`: ``init(key) -> params`` (a plain flax ``params``
dict) and ``apply(params, x, train, rng) -> (logits, representation)``, where ``rng`` is the dropout key
(None when ``train`` is False, and ignored by models without dropout). The representation is the
penultimate feature vector (MOON's ``z``). The last dense layer of every model is named ``head``.

Images ``x`` are ``[B, H, W, C]``: ``uint8`` pixels are scaled to [0, 1] inside the model, any other dtype
is cast to ``float32`` unchanged (see :func:`image_to_float`). Text ``x`` is ``[B, L]`` integer tokens.

Decision: the simulation engine keeps only ``params`` (no mutable collections), so models that
normalize use GroupNorm, never batch norm (SPEC §4.5 "ResNet-8 with group norm").
"""
from __future__ import annotations

import numbers
import operator
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sim.errors import ConfigError, DataError
from fedjax_sim.models import Model
from fedjax_sim.models.mlp import HashDropout


# --------------------------------------------------------------------------------------------- helpers


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
  """flax/TF 'SAME' padding of one spatial axis: output ceil(size / stride), the odd pixel at the end."""
  total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
  return total // 2, total - total // 2


def slice_conv(x: jax.Array, kernel: jax.Array, strides=(1, 1), padding: str = "VALID") -> jax.Array:
  """2-D cross-correlation ``[B, H, W, C] * [kh, kw, C, F] -> [B, H', W', F]`` as one matmul over shifted slices.

  The same function as ``lax.conv_general_dilated`` with NHWC/HWIO/NHWC (what ``flax.linen.Conv`` computes):
  the kh·kw shifted, strided views of ``x`` are stacked on the channel axis in (i, j, c) order, which is the row
  order of ``kernel.reshape(kh·kw·C, F)``, so each output pixel is Σ_{i,j,c} x[s·h+i, s·w+j, c] K[i, j, c, f].
  Decision (issue 10 finding, docs/PLATFORM.md): XLA:CPU runs a convolution whose kernel is vmapped over
  clients as a grouped convolution, 3× slower than this form under ``vmap`` (LeNet's step, 10 clients ×
  batch 32: 28.8 ms → 9.2 ms per client-step) and 3.3× slower under ``lax.map``; slices, a concatenation
  and a batched matmul vectorize over clients like any dense layer. Memory: the stacked slices are kh·kw
  times the input (LeNet on 28×28: 25 × 784 floats per image).
  """
  kh, kw, c, f = kernel.shape
  sh, sw = strides
  if padding == "SAME":
    x = jnp.pad(x, ((0, 0), _same_padding(x.shape[1], kh, sh), _same_padding(x.shape[2], kw, sw), (0, 0)))
  elif padding != "VALID":
    raise ValueError(f"slice_conv: padding must be 'VALID' or 'SAME', got {padding!r}")
  h_out = (x.shape[1] - kh) // sh + 1
  w_out = (x.shape[2] - kw) // sw + 1
  views = [x[:, i:i + sh * (h_out - 1) + 1:sh, j:j + sw * (w_out - 1) + 1:sw, :] for i in range(kh) for j in range(kw)]
  stacked = views[0] if len(views) == 1 else jnp.concatenate(views, axis=-1)
  return stacked @ kernel.reshape(kh * kw * c, f)


class Conv(nn.Module):
  """``flax.linen.Conv``'s parameters (``kernel [kh, kw, C, F]``, ``bias [F]``) and function, computed by
  :func:`slice_conv` (see there why). Checkpoints and initializers are interchangeable with ``nn.Conv``'s.

  Attributes:
    features: output channels F.
    kernel_size: (kh, kw).
    strides: (sh, sw).
    padding: 'VALID' or 'SAME'.
    use_bias: add a learned bias.
    kernel_init, bias_init: as ``nn.Conv``'s (defaults: LeCun normal, zeros).
  """

  features: int
  kernel_size: Sequence[int]
  strides: Sequence[int] = (1, 1)
  padding: str = "SAME"
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kh, kw = self.kernel_size
    kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features), jnp.float32)
    y = slice_conv(x, kernel, tuple(self.strides), self.padding)
    if self.use_bias:
      y = y + self.param("bias", self.bias_init, (self.features,), jnp.float32)
    return y


def image_to_float(x: jax.Array) -> jax.Array:
  """Image batch as ``float32``: ``uint8`` pixels divided by 255, anything else cast unchanged.

  Args:
    x: ``[B, H, W, C]`` images, ``uint8`` in [0, 255] or already floating point.

  Returns:
    ``float32`` array of the same shape.

  Decision: only ``uint8`` is rescaled; float inputs are taken as already normalized by the loader.
  """
  if x.dtype == jnp.uint8:
    return x.astype(jnp.float32) / 255.0
  return x.astype(jnp.float32)


def _check_image_shape(input_shape, what: str) -> tuple[int, int, int]:
  """``input_shape`` as a validated ``(H, W, C)`` tuple of positive ints, or ConfigError."""
  try:
    shape = tuple(operator.index(d) for d in input_shape)
  except (TypeError, ValueError):
    raise ConfigError(f"{what}: input_shape must be (height, width, channels), got {input_shape!r}.") from None
  if len(shape) != 3 or min(shape) < 1:
    raise ConfigError(f"{what}: input_shape must be three positive ints (height, width, channels), "
                      f"got {input_shape!r}.")
  return shape


def _check_positive(name: str, value, what: str) -> int:
  """``value`` as a Python int if it is a positive integer (numpy integers too), else ConfigError."""
  if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
    raise ConfigError(f"{what}: {name} must be a positive int, got {value!r}.")
  return int(value)


def _check_batch(x: jax.Array, input_shape: tuple[int, int, int], what: str) -> None:
  """DataError unless ``x`` is ``[B, *input_shape]`` (shapes are static, so this runs at trace time)."""
  if x.ndim != 4 or tuple(x.shape[1:]) != input_shape:
    raise DataError(f"{what} was built for images [batch, {', '.join(map(str, input_shape))}] but got an "
                    f"array of shape {tuple(x.shape)}; build the model with the data's input_shape.")


def _conv_valid(size: int, kernel: int) -> int:
  """Spatial size after a stride-1 'VALID' convolution."""
  return size - kernel + 1


def lenet_flat_features(input_shape) -> int:
  """Width of LeNet's flattened conv features: two (5×5 VALID conv, 2×2 max pool) stages, 16 channels.

  Args:
    input_shape: ``(H, W, C)``.

  Returns:
    ``16·h·w`` with ``h = ⌊(⌊(H−4)/2⌋−4)/2⌋`` (28×28 → 256, 32×32 → 400); 0 if the image is too small.
  """
  h, w, _ = input_shape
  h = _conv_valid(_conv_valid(h, 5) // 2, 5) // 2
  w = _conv_valid(_conv_valid(w, 5) // 2, 5) // 2
  return 16 * h * w if h > 0 and w > 0 else 0


def femnist_cnn_flat_features(input_shape) -> int:
  """Width of the FEMNIST CNN's flattened features: two 3×3 VALID convs, one 2×2 max pool, 64 channels.

  Args:
    input_shape: ``(H, W, C)``.

  Returns:
    ``64·⌊(H−4)/2⌋·⌊(W−4)/2⌋`` (28×28 → 9216); 0 if the image is too small.
  """
  h, w, _ = input_shape
  h, w = (h - 4) // 2, (w - 4) // 2
  return 64 * h * w if h > 0 and w > 0 else 0


def _image_model(module: nn.Module, input_shape: tuple[int, int, int], what: str) -> Model:
  """Wrap an image module ``(x, train) -> (logits, rep)`` as a :class:`Model`."""

  def init(key):
    dummy = jnp.zeros((1, *input_shape), jnp.float32)
    return module.init({"params": key}, dummy, train=False)["params"]

  def apply(params, x, train, rng):
    _check_batch(x, input_shape, what)
    rngs = {"dropout": rng} if train and rng is not None else {}
    return module.apply({"params": params}, image_to_float(x), train=train, rngs=rngs)

  return Model(init=init, apply=apply)


# --------------------------------------------------------------------------------------------- LeNet


TORCH_KERNEL_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
"""PyTorch's default weight init for ``nn.Linear`` / ``nn.Conv2d`` (kaiming_uniform with a = √5): U(±1/√fan_in)."""


def torch_bias_init(fan_in: int):
  """PyTorch's default bias init: U(±1/√fan_in)."""
  bound = 1.0 / max(fan_in, 1) ** 0.5
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class LeNet(nn.Module):
  """iPFL's "simplecnn" (authors' code 19dx/iPFL, ``SimpleCNN``): a LeNet-5-style CNN.

  conv 5×5 6 → ReLU → maxpool 2 → conv 5×5 16 → ReLU → maxpool 2 → flatten → fc 120 → ReLU → fc 84 →
  ReLU → fc ``num_classes``; 'VALID' convolutions as in that code.

  Decision (issue 10 finding): weights and biases start from PyTorch's default init, U(±1/√fan_in), as the
  authors' PyTorch model does, not flax's (LeCun normal kernels, √3 larger in std, and zero biases). With flax's
  init and the FBS-FL protocol (SGD lr 0.05, momentum 0.9, E = 2) FedAvg on Fashion-MNIST Dirichlet(0.1) had a
  dead network from round 1: validation accuracy at chance (0.08–0.12) for all 200 rounds; with lr 0.01 or
  without momentum it learned. Only LeNet has no normalization layer, so only LeNet is changed.

  Attributes:
    num_classes: output width.
    hidden: widths of the two fully connected layers (the authors' ``hidden_dims``: (120, 84)).
  """

  num_classes: int
  hidden: Sequence[int] = (120, 84)

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[B, H, W, C]`` float; train: unused (no dropout).

    Returns:
      ``(logits [B, num_classes], representation [B, hidden[-1]])``, the representation being the
      last hidden ReLU output (the 84-d layer).
    """
    del train
    conv = lambda f, name: Conv(f, (5, 5), padding="VALID", name=name, kernel_init=TORCH_KERNEL_INIT,  # noqa: E731
                                   bias_init=torch_bias_init(5 * 5 * x.shape[-1] if name == "conv_0" else 5 * 5 * 6))
    h = nn.max_pool(nn.relu(conv(6, "conv_0")(x)), (2, 2), (2, 2))
    h = nn.max_pool(nn.relu(conv(16, "conv_1")(h)), (2, 2), (2, 2))
    h = h.reshape(h.shape[0], -1)
    for i, width in enumerate(self.hidden):
      h = nn.relu(nn.Dense(width, name=f"fc_{i}", kernel_init=TORCH_KERNEL_INIT, bias_init=torch_bias_init(h.shape[-1]))(h))
    return nn.Dense(self.num_classes, name="head", kernel_init=TORCH_KERNEL_INIT,
                    bias_init=torch_bias_init(h.shape[-1]))(h), h


def lenet_model(input_shape, num_classes: int) -> Model:
  """iPFL's "simplecnn" LeNet (paper 003 experiments; authors' code 19dx/iPFL ``SimpleCNN``).

  Args:
    input_shape: ``(H, W, C)`` of one image, e.g. (28, 28, 1) for Fashion-MNIST (256 flat conv features)
      or (32, 32, 3) for CIFAR-10 (400); at least 16×16.
    num_classes: output width.

  Returns:
    A :class:`Model`; ``apply`` gives ``(logits [B, num_classes], representation [B, 84])``.
  """
  shape = _check_image_shape(input_shape, "lenet_model")
  num_classes = _check_positive("num_classes", num_classes, "lenet_model")
  if lenet_flat_features(shape) <= 0:
    raise ConfigError(f"lenet_model: images of {shape[0]}×{shape[1]} are too small for two 5×5 conv + "
                      "2×2 pool stages; use at least 16×16.")
  return _image_model(LeNet(num_classes=num_classes), shape, "lenet_model")


# --------------------------------------------------------------------------------------------- FEMNIST CNN


class FemnistCNN(nn.Module):
  """The FEMNIST CNN of FL papers (the Keras MNIST example CNN; 19dx/iPFL ``CNN_FEMNIST``).

  conv 3×3 32 → ReLU → conv 3×3 64 → ReLU → maxpool 2 → dropout → flatten → fc 128 → ReLU → dropout →
  fc ``num_classes``; 'VALID' convolutions (28×28 → 12×12×64 = 9216 flat features).

  Attributes:
    num_classes: output width (FEMNIST: 62).
    dropout: the two dropout rates (after the pool, after fc 128): (0.25, 0.5).
  """

  num_classes: int
  dropout: Sequence[float] = (0.25, 0.5)

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[B, H, W, C]`` float; train: apply dropout (needs the ``'dropout'`` rng).

    Returns:
      ``(logits [B, num_classes], representation [B, 128])``; the representation is the fc-128 ReLU
      output before its dropout (as :class:`fedjax_sim.models.mlp.MLP`).
    """
    h = nn.relu(Conv(32, (3, 3), padding="VALID", name="conv_0")(x))
    h = nn.relu(Conv(64, (3, 3), padding="VALID", name="conv_1")(h))
    h = nn.max_pool(h, (2, 2), (2, 2))
    h = HashDropout(self.dropout[0])(h, deterministic=not train)
    h = h.reshape(h.shape[0], -1)
    rep = nn.relu(nn.Dense(128, name="fc_0")(h))
    h = HashDropout(self.dropout[1])(rep, deterministic=not train)
    return nn.Dense(self.num_classes, name="head")(h), rep


def femnist_cnn_model(input_shape, num_classes: int, dropout=(0.25, 0.5)) -> Model:
  """The 2-layer FEMNIST CNN with dropout (SPEC §4.5 "2-layer CNN + dropout 0.5"; paper 003's FEMNIST
  model, 19dx/iPFL ``CNN_FEMNIST``, the Keras MNIST CNN).

  Args:
    input_shape: ``(H, W, C)``, (28, 28, 1) for FEMNIST; at least 6×6.
    num_classes: output width (FEMNIST: 62).
    dropout: rates after the max pool and after fc 128, each in [0, 1).

  Returns:
    A :class:`Model`; ``apply`` gives ``(logits [B, num_classes], representation [B, 128])``; with
    ``train=True`` it needs a dropout ``rng``.
  """
  shape = _check_image_shape(input_shape, "femnist_cnn_model")
  num_classes = _check_positive("num_classes", num_classes, "femnist_cnn_model")
  rates = tuple(float(r) for r in dropout)
  if len(rates) != 2 or not all(0.0 <= r < 1.0 for r in rates):
    raise ConfigError(f"femnist_cnn_model: dropout must be two rates in [0, 1), got {dropout!r}.")
  if femnist_cnn_flat_features(shape) <= 0:
    raise ConfigError(f"femnist_cnn_model: images of {shape[0]}×{shape[1]} are too small for two 3×3 convs "
                      "and a 2×2 pool; use at least 6×6.")
  return _image_model(FemnistCNN(num_classes=num_classes, dropout=rates), shape, "femnist_cnn_model")


# --------------------------------------------------------------------------------------------- ResNets


class BasicBlock(nn.Module):
  """He et al. 2016's basic residual block with GroupNorm in place of batch norm.

  ``relu(GN(conv3×3(relu(GN(conv3×3_stride(x))))) + shortcut(x))``; convolutions without bias (the norm
  that follows has one). When the shape changes, the shortcut is either a projection (1×1 conv with the
  block's stride + GN; He et al.'s option B) or option A: spatial subsampling and zero-padding of the new
  channels, parameter-free (He et al. §4.2 for CIFAR).

  Attributes:
    width: output channels.
    stride: stride of the first convolution (and of the shortcut).
    groups: GroupNorm groups.
    shortcut: "projection" (option B) or "pad" (option A).
  """

  width: int
  stride: int = 1
  groups: int = 2
  shortcut: str = "projection"

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    s = (self.stride, self.stride)
    y = Conv(self.width, (3, 3), strides=s, padding="SAME", use_bias=False, name="conv_0")(x)
    y = nn.relu(nn.GroupNorm(num_groups=self.groups, name="norm_0")(y))
    y = Conv(self.width, (3, 3), padding="SAME", use_bias=False, name="conv_1")(y)
    y = nn.GroupNorm(num_groups=self.groups, name="norm_1")(y)
    if self.stride == 1 and x.shape[-1] == self.width:
      res = x
    elif self.shortcut == "projection":
      res = Conv(self.width, (1, 1), strides=s, padding="SAME", use_bias=False, name="shortcut_conv")(x)
      res = nn.GroupNorm(num_groups=self.groups, name="shortcut_norm")(res)
    else:  # option A: x[::s, ::s], new channels zero, split evenly on both sides as in the CIFAR code
      res = x[:, ::self.stride, ::self.stride, :]
      extra = self.width - x.shape[-1]
      res = jnp.pad(res, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
    return nn.relu(y + res)


class ResNet(nn.Module):
  """CIFAR ResNet (He et al. 2016 §4.2) with GroupNorm: conv 3×3 ``widths[0]`` + GN + ReLU, then one stage
  per width of ``blocks`` basic blocks (first stride 1, then 2), global average pool, dense.

  Attributes:
    num_classes: output width.
    widths: channels per stage, e.g. (16, 32, 64).
    blocks: basic blocks per stage (ResNet-8: 1, ResNet-20: 3).
    groups: GroupNorm groups (must divide every width).
    shortcut: "projection" or "pad" (see :class:`BasicBlock`).
  """

  num_classes: int
  widths: Sequence[int] = (16, 32, 64)
  blocks: int = 1
  groups: int = 2
  shortcut: str = "projection"

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[B, H, W, C]`` float; train: unused (no dropout, no batch statistics).

    Returns:
      ``(logits [B, num_classes], representation [B, widths[-1]])``, the representation being the
      globally average-pooled last-stage features.
    """
    del train
    h = Conv(self.widths[0], (3, 3), padding="SAME", use_bias=False, name="stem_conv")(x)
    h = nn.relu(nn.GroupNorm(num_groups=self.groups, name="stem_norm")(h))
    for stage, width in enumerate(self.widths):
      for b in range(self.blocks):
        stride = 2 if stage > 0 and b == 0 else 1
        h = BasicBlock(width, stride, self.groups, self.shortcut, name=f"stage{stage}_block{b}")(h)
    rep = h.mean(axis=(1, 2))
    return nn.Dense(self.num_classes, name="head")(rep), rep


def _resnet_model(input_shape, num_classes, widths, blocks, groups, shortcut, what) -> Model:
  shape = _check_image_shape(input_shape, what)
  num_classes = _check_positive("num_classes", num_classes, what)
  groups = _check_positive("groups", groups, what)
  widths = tuple(widths)
  if not widths:
    raise ConfigError(f"{what}: widths must be a non-empty list of positive ints, got {widths!r}.")
  widths = tuple(_check_positive("each stage width", w, what) for w in widths)
  if any(w % groups for w in widths):
    raise ConfigError(f"{what}: groups={groups} must divide every stage width {widths} (GroupNorm).")
  if shortcut == "pad" and any(b < a for a, b in zip(widths, widths[1:])):
    raise ConfigError(f"{what}: the zero-padding shortcut needs non-decreasing widths, got {widths}.")
  module = ResNet(num_classes=num_classes, widths=widths, blocks=blocks, groups=groups, shortcut=shortcut)
  return _image_model(module, shape, what)


def resnet8_model(input_shape, num_classes: int, widths=(16, 32, 64), groups: int = 2) -> Model:
  """ResNet-8 with GroupNorm, FBS-FL's CIFAR-10 model (SPEC §4.5; paper 002).

  conv 3×3 16 + GN + ReLU; three stages of one basic block (widths 16/32/64, strides 1/2/2) with a
  projection shortcut (1×1 conv + GN) where the shape changes; global average pool; dense. 8 weighted
  layers: stem, 3 × 2 block convs, head. Decision: GN after the projection conv too (He et al.'s
  option B has a norm there), and GN groups = 2 (the paper does not say; SPEC §4.5 "group norm").

  Args:
    input_shape: ``(H, W, C)``, (32, 32, 3) for CIFAR-10.
    num_classes: output width.
    widths: channels of the three stages.
    groups: GroupNorm groups; must divide every width.

  Returns:
    A :class:`Model`; ``apply`` gives ``(logits [B, num_classes], representation [B, widths[-1]])``.
  """
  return _resnet_model(input_shape, num_classes, widths, 1, groups, "projection", "resnet8_model")


def resnet20_model(input_shape, num_classes: int, groups: int = 2) -> Model:
  """The CIFAR ResNet-20 (He et al. 2016 §4.2: 3 stages × 3 basic blocks, widths 16/32/64) with GroupNorm,
  for PACS (paper 003; 19dx/iPFL ``resnet20_cifar``, which keeps batch norm).

  Shortcuts are He et al.'s option A for CIFAR (and that code's): where the shape changes, subsample by 2
  and zero-pad the new channels, so the model has no shortcut parameters (0.27 M parameters with 10
  classes, the paper's count). Decision: GroupNorm with ``groups`` groups replaces every batch norm.

  Args:
    input_shape: ``(H, W, C)`` of one image (any size; global average pooling).
    num_classes: output width (PACS: 7).
    groups: GroupNorm groups; must divide 16, 32 and 64.

  Returns:
    A :class:`Model`; ``apply`` gives ``(logits [B, num_classes], representation [B, 64])``.
  """
  return _resnet_model(input_shape, num_classes, (16, 32, 64), 3, groups, "pad", "resnet20_model")


# --------------------------------------------------------------------------------------------- char LSTM


class CharLSTM(nn.Module):
  """LEAF's Shakespeare next-character model: embedding → ``layers`` stacked LSTMs → dense over the
  vocabulary at every position.

  Attributes:
    vocab_size: number of tokens (LEAF: 80).
    embed: embedding width (LEAF: 8; FBS-FL, SPEC §4.5: 80).
    hidden: LSTM width (256).
    layers: number of stacked LSTM layers (2).
  """

  vocab_size: int = 80
  embed: int = 8
  hidden: int = 256
  layers: int = 2

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    """Args: x ``[B, L]`` int tokens; train: unused (no dropout).

    Returns:
      ``(logits [B, L, vocab_size], representation [B, L, hidden])``: at position t, the prediction of
      token t + 1 from tokens ≤ t; the representation is the last LSTM layer's output.
    """
    del train
    h = nn.Embed(self.vocab_size, self.embed, name="embed")(x)
    for i in range(self.layers):
      h = nn.RNN(nn.OptimizedLSTMCell(self.hidden, name=f"lstm_{i}"))(h)
    return nn.Dense(self.vocab_size, name="head")(h), h


def char_lstm_model(vocab_size: int = 80, embed: int = 8, hidden: int = 256, layers: int = 2) -> Model:
  """LEAF's Shakespeare model (Caldas et al. 2018; SPEC §4.5 "2-layer LSTM, embedding 80, hidden 256").

  Embedding → ``layers``-layer LSTM (flax ``nn.RNN`` of ``OptimizedLSTMCell``, a scan: runs under jit and
  vmap) → dense ``vocab_size`` at every position. Decision: logits at every position (LEAF / FBS-FL
  next-character training); iPFL's code predicts from the last position only, which is ``logits[:, -1]``.
  Token ids outside [0, vocab_size) are the loader's responsibility (``nn.Embed`` does not check them).

  Args:
    vocab_size: number of tokens.
    embed: embedding width (LEAF 8, FBS-FL 80).
    hidden: LSTM width.
    layers: number of LSTM layers.

  Returns:
    A :class:`Model`; ``apply(params, x [B, L] int, train, rng)`` gives
    ``(logits [B, L, vocab_size], representation [B, L, hidden])``.
  """
  vocab_size, embed, hidden, layers = (_check_positive(name, value, "char_lstm_model") for name, value in (
      ("vocab_size", vocab_size), ("embed", embed), ("hidden", hidden), ("layers", layers)))
  module = CharLSTM(vocab_size=vocab_size, embed=embed, hidden=hidden, layers=layers)

  def init(key):
    return module.init({"params": key}, jnp.zeros((1, 1), jnp.int32), train=False)["params"]

  def apply(params, x, train, rng):
    del rng
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.integer):
      raise DataError(f"char_lstm_model expects integer tokens [batch, length] but got {x.dtype} of shape "
                      f"{tuple(x.shape)}; encode the text as token ids first.")
    return module.apply({"params": params}, x.astype(jnp.int32), train=train)

  return Model(init=init, apply=apply)


__all__ = [
    "BasicBlock", "CharLSTM", "FemnistCNN", "LeNet", "ResNet", "char_lstm_model", "femnist_cnn_flat_features",
    "femnist_cnn_model", "image_to_float", "lenet_flat_features", "lenet_model", "resnet20_model",
    "resnet8_model",
]
