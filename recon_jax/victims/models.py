"""Victim networks as flax.linen modules, used only through pure `apply`.

Every module here takes the activation as a call argument (``act=``), so the
attacks can swap ReLU for its surrogate (``surrogate_relu``) or for a smooth
activation without rebuilding parameters.  Parameters are ordinary flax
pytrees; a user's own flax model can be attacked by wrapping its ``apply``
with :func:`make_apply_fn`.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence, Tuple, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax.errors import ConfigError

Activation = Callable[[jax.Array], jax.Array]

BIAS_MODES = ("first", "all", "none")
INIT_SCHEMES = ("kaiming", "normal", "uniform", "torch")


# --------------------------------------------------------------------------
# Surrogate ReLU: forward ReLU, every derivative of the output w.r.t. the
# input is sigmoid(alpha * x).
# --------------------------------------------------------------------------
@jax.custom_jvp
def _surrogate_relu_jvp(x, alpha):
  return jnp.maximum(x, 0)


@_surrogate_relu_jvp.defjvp
def _surrogate_relu_jvp_rule(primals, tangents):
  x, alpha = primals
  tx, _ = tangents
  # The primal output is computed by the function itself, not by jnp.maximum,
  # so that differentiating this rule again (grad of grad) sees the surrogate
  # derivative along the primal path too.
  y = _surrogate_relu_jvp(x, alpha)
  return y, tx * jax.nn.sigmoid(alpha * x)


@jax.custom_vjp
def surrogate_relu(x: jax.Array, alpha) -> jax.Array:
  """ReLU whose derivative is replaced by ``sigmoid(alpha * x)``.

  The KKT attack of Haim et al. (2022, App. B.2) differentiates through a
  gradient of the network, where ReLU's step derivative gives flat, useless
  x-gradients.  The surrogate keeps the forward value of ReLU exactly and uses
  the derivative of ``softplus(alpha x) / alpha`` in every backward pass.

  The surrogate holds at every differentiation level, as with the PyTorch
  reference's autograd Function: the forward residual is produced by a
  ``custom_jvp`` twin, so when an outer gradient differentiates the forward
  activations of an inner gradient it also sees ``sigmoid(alpha x)``, never
  the true step.  (A custom_vjp whose fwd calls ``jnp.maximum`` would leak the
  true step derivative into the outer gradient.)

  Args:
    x: pre-activations.
    alpha: sharpness (> 0); scalar or broadcastable array, may be traced.

  Returns:
    ``max(x, 0)``, exactly.
  """
  return jnp.maximum(x, 0)


def _surrogate_fwd(x, alpha):
  return _surrogate_relu_jvp(x, alpha), (x, alpha)


def _surrogate_bwd(res, g):
  x, alpha = res
  s = jax.nn.sigmoid(alpha * x)
  # alpha is a hyperparameter, never optimised through the surrogate.
  return g * s, jnp.zeros_like(alpha)


surrogate_relu.defvjp(_surrogate_fwd, _surrogate_bwd)


def surrogate_relu_jvp(x: jax.Array, alpha) -> jax.Array:
  """The same surrogate built with custom_jvp (usable in forward mode)."""
  return _surrogate_relu_jvp(x, alpha)


def get_activation(name: str, alpha: Optional[float] = None) -> Activation:
  """Activation by name: relu, surrogate_relu, gelu, softplus, tanh, identity."""
  table = {
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "softplus": jax.nn.softplus,
    "tanh": jnp.tanh,
    "identity": lambda z: z,
  }
  if name == "surrogate_relu":
    if alpha is None or alpha <= 0:
      raise ConfigError(f"surrogate_relu needs alpha > 0, got {alpha}.")
    return functools.partial(surrogate_relu, alpha=alpha)
  if name not in table:
    raise ConfigError(
      f"unknown activation {name!r}; choose from {sorted(table) + ['surrogate_relu']}."
    )
  return table[name]


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
