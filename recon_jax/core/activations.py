"""Activations every network and attack shares: the surrogate ReLU of Haim et al. and the
named activations of the victims (below the victims and the attacks, which both use them)."""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from recon_jax.errors import ConfigError

Activation = Callable[[jax.Array], jax.Array]


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


# How an attack differentiates the victim's activation: its own derivative, or the
# surrogate's sigmoid(alpha x) (ReLU has none worth following).
DERIVATIVES = ("surrogate", "exact")
SMOOTH = ("gelu", "softplus", "tanh", "identity")  # activations whose own derivative is used


def resolve_derivative(derivative: str, activation: str) -> str:
  """'auto': the victim's own derivative when its activation is smooth, else the surrogate."""
  if derivative != "auto":
    return derivative
  return "exact" if activation in SMOOTH else "surrogate"
