"""Victim networks as flax.linen modules, used only through pure `apply`.

Every module here takes the activation as a call argument (``act=``), so the
attacks can swap ReLU for its surrogate (``surrogate_relu``) or for a smooth
activation without rebuilding parameters.  Parameters are ordinary flax
pytrees; a user's own flax model can be attacked by wrapping its ``apply``
with :func:`make_apply_fn`.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax.core.activations import Activation, get_activation
from recon_jax.errors import ConfigError

BIAS_MODES = ("first", "all", "none")
INIT_SCHEMES = ("kaiming", "normal", "uniform", "torch")


# --------------------------------------------------------------------------
# Initialisers.
# --------------------------------------------------------------------------
def weight_init(scheme: str, std: Optional[float] = None, gain: float = 1.0):
  """Kernel initialiser.

  Args:
    scheme: 'kaiming' (He normal, std sqrt(2/fan_in), as PyTorch's
      kaiming_normal_), 'normal' (N(0, std^2)) or 'uniform' (U(0, 1), Runkel et
      al. 2024) or 'torch' (PyTorch's nn.Linear default, U(+-1/sqrt(fan_in))).
    std: standard deviation for 'normal'; for 'kaiming' it overrides He's std.
    gain: multiplies He's std or torch's bound (a small gain puts training in
      the rich regime, where theta* is dominated by what training added, not by
      the init).
  """
  if scheme == "kaiming":
    if std is not None:
      return nn.initializers.normal(std)
    return nn.initializers.variance_scaling(2.0 * gain**2, "fan_in", "normal")
  if scheme == "normal":
    if std is None or std <= 0:
      raise ConfigError(f"init 'normal' needs std > 0, got {std}.")
    return nn.initializers.normal(std)
  if scheme == "uniform":
    return nn.initializers.uniform(1.0)
  if scheme == "torch":  # U(-b, b), b = gain / sqrt(fan_in): variance b^2 / 3
    return nn.initializers.variance_scaling(gain**2 / 3.0, "fan_in", "uniform")
  raise ConfigError(f"unknown init scheme {scheme!r}; choose from {INIT_SCHEMES}.")


def bias_init(scheme: str, fan_in: int, gain: float = 1.0):
  """Bias initialiser matching :func:`weight_init` (zeros unless 'uniform' or 'torch')."""
  if scheme == "uniform":
    return nn.initializers.uniform(1.0)
  if scheme == "torch":
    bound = gain / fan_in**0.5

    def init(key, shape, dtype=jnp.float32):
      return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init
  return nn.initializers.zeros


def _flatten(x):
  return x.reshape((x.shape[0], -1))


class MLP(nn.Module):
  """Fully connected ReLU network ``d-h1-...-hk-out``.

  Attributes:
    widths: hidden widths.
    out_dim: 1 for binary/regression, C for multiclass.
    bias: 'first' (first layer only: homogeneous in the remaining weights, as
      Haim et al. train), 'all', 'none' (fully homogeneous), or one flag per
      layer (an imported network's own layout).
    init_scheme: weight scheme for all layers (see :func:`weight_init`).
    init_std: std for init='normal' (or override of He's std).
    first_layer_std: separate std for the first layer (Haim et al.: 1e-4).
    init_gain: multiplies He's std for init='kaiming'.
    activation: default activation; attacks pass ``act=`` instead.
  """

  widths: Sequence[int] = (256, 256)
  out_dim: int = 1
  bias: Union[str, Tuple[bool, ...]] = "first"
  init_scheme: str = "kaiming"
  init_std: Optional[float] = None
  first_layer_std: Optional[float] = None
  init_gain: float = 1.0
  activation: Activation = jax.nn.relu

  @nn.compact
  def __call__(self, x, act: Optional[Activation] = None):
    act = act or self.activation
    h = _flatten(x)
    n_layers = len(self.widths) + 1
    for i, width in enumerate(list(self.widths) + [self.out_dim]):
      if i == 0 and self.first_layer_std is not None:
        kinit = nn.initializers.normal(self.first_layer_std)
      else:
        kinit = weight_init(self.init_scheme, self.init_std, self.init_gain)
      if isinstance(self.bias, str):
        use_bias = self.bias == "all" or (self.bias == "first" and i == 0)
      else:
        use_bias = bool(self.bias[i])
      binit = bias_init(self.init_scheme, h.shape[-1], self.init_gain)
      h = nn.Dense(width, use_bias=use_bias, kernel_init=kinit, bias_init=binit, name=f"layer_{i}")(
        h
      )
      if i < n_layers - 1:
        h = act(h)
    return h


class Affine(nn.Module):
  """Affine classifier ``x theta_w^T + theta_b`` (Runkel et al. 2024, eq. 8)."""

  out_dim: int = 1
  init_scheme: str = "uniform"
  init_std: Optional[float] = None
  activation: Activation = jax.nn.relu  # unused; keeps the call signature

  @nn.compact
  def __call__(self, x, act: Optional[Activation] = None):
    del act
    binit = nn.initializers.uniform(1.0) if self.init_scheme == "uniform" else nn.initializers.zeros
    return nn.Dense(
      self.out_dim,
      kernel_init=weight_init(self.init_scheme, self.init_std),
      bias_init=binit,
      name="layer_0",
    )(_flatten(x))


class OneHidden(nn.Module):
  """One hidden layer with biases, ``W2 act(W1 x + b1) + b2`` (Runkel eq. 9)."""

  width: int = 256
  out_dim: int = 1
  init_scheme: str = "uniform"
  init_std: Optional[float] = None
  activation: Activation = jax.nn.relu

  @nn.compact
  def __call__(self, x, act: Optional[Activation] = None):
    act = act or self.activation
    binit = nn.initializers.uniform(1.0) if self.init_scheme == "uniform" else nn.initializers.zeros
    kinit = weight_init(self.init_scheme, self.init_std)
    h = nn.Dense(self.width, kernel_init=kinit, bias_init=binit, name="layer_0")(_flatten(x))
    return nn.Dense(self.out_dim, kernel_init=kinit, bias_init=binit, name="layer_1")(act(h))


class SmallCNN(nn.Module):
  """Two 3x3 conv layers and a linear read-out, for trying the attack on CNNs."""

  channels: Sequence[int] = (8, 8)
  out_dim: int = 1
  bias: str = "first"
  activation: Activation = jax.nn.relu

  @nn.compact
  def __call__(self, x, act: Optional[Activation] = None):
    act = act or self.activation
    h = x
    for i, c in enumerate(self.channels):
      use_bias = self.bias == "all" or (self.bias == "first" and i == 0)
      h = act(nn.Conv(c, (3, 3), use_bias=use_bias, name=f"conv_{i}")(h))
    return nn.Dense(self.out_dim, use_bias=self.bias == "all", name="readout")(_flatten(h))


ApplyFn = Callable[..., jax.Array]


def make_apply_fn(module: nn.Module) -> ApplyFn:
  """Pure ``apply_fn(params, x, act=None) -> [m, out_dim]`` for a module.

  ``params`` is the flax variable dict ``{'params': ...}``.  For a user's own
  module whose ``__call__`` takes no ``act`` argument, wrap it yourself:
  ``lambda p, x, act=None: model.apply(p, x)`` (the surrogate then cannot be
  inserted, so the KKT attack sees ReLU's true derivative).
  """

  def apply_fn(params, x, act=None):
    return module.apply(params, x, act=act)

  return apply_fn


def build_model(
  arch: str,
  *,
  out_dim: int = 1,
  widths: Sequence[int] = (256, 256),
  bias: str = "first",
  init: str = "kaiming",
  init_std=None,
  first_layer_std=None,
  activation: str = "relu",
  init_gain: float = 1.0,
) -> nn.Module:
  """Builds a model from plain config values (what the binaries and checkpoints store)."""
  act = get_activation(activation) if activation != "surrogate_relu" else jax.nn.relu
  if bias not in BIAS_MODES:
    raise ConfigError(f"bias must be one of {BIAS_MODES}, got {bias!r}.")
  if arch == "mlp":
    if any(int(w) <= 0 for w in widths):
      raise ConfigError(f"widths must be positive, got {list(widths)}.")
    return MLP(
      widths=tuple(int(w) for w in widths),
      out_dim=out_dim,
      bias=bias,
      init_scheme=init,
      init_std=init_std,
      first_layer_std=first_layer_std,
      activation=act,
      init_gain=init_gain,
    )
  if arch == "affine":
    return Affine(out_dim=out_dim, init_scheme=init, init_std=init_std)
  if arch == "one_hidden":
    width = int(widths[0]) if widths else 256
    return OneHidden(
      width=width, out_dim=out_dim, init_scheme=init, init_std=init_std, activation=act
    )
  if arch == "cnn":
    return SmallCNN(
      channels=tuple(int(w) for w in widths), out_dim=out_dim, bias=bias, activation=act
    )
  raise ConfigError(f"unknown architecture {arch!r}; choose from mlp, affine, one_hidden, cnn.")


def init_params(module: nn.Module, key, input_shape, dtype=jnp.float32):
  """Initial ``{'params': ...}`` for inputs of shape ``input_shape`` (no batch dim)."""
  params = module.init(key, jnp.zeros((1, *input_shape), dtype))
  return jax.tree_util.tree_map(lambda a: a.astype(dtype), params)


class ImportedCNN(nn.Module):
  """Conv2d layers, then Linear layers, with ReLU (or ``act``) between them.

  Inputs are NHWC.  The feature map is flattened in NHWC order before the
  first Linear layer (the importer permutes that layer's columns to match).

  Attributes:
    convs: per conv layer ``(features, (kh, kw), (sh, sw), ((top, bottom),
      (left, right)), use_bias)``.
    dense: per Linear layer ``(features, use_bias)``; the last gives the output.
    activation: default activation; attacks pass ``act=``.
  """

  convs: Sequence[tuple]
  dense: Sequence[tuple]
  activation: Activation = jax.nn.relu

  @nn.compact
  def __call__(self, x, act: Optional[Activation] = None):
    act = act or self.activation
    h = x
    for i, (features, kernel, strides, padding, bias) in enumerate(self.convs):
      h = act(
        nn.Conv(
          features,
          tuple(kernel),
          strides=tuple(strides),
          padding=tuple(tuple(p) for p in padding),
          use_bias=bias,
          name=f"conv_{i}",
        )(h)
      )
    h = h.reshape((h.shape[0], -1))
    for j, (features, bias) in enumerate(self.dense):
      h = nn.Dense(features, use_bias=bias, name=f"layer_{j}")(h)
      if j < len(self.dense) - 1:
        h = act(h)
    return h
