"""The attacks' optimiser: a base optax transformation at rate 1, scaled per restart.

Per-restart learning rates are ordinary arrays in the restart's hyperparameters,
so a sweep over them vmaps: the base optimiser runs at rate 1 and its updates
are multiplied by the restart's rate, which is exact for SGD-momentum and Adam.
"""

from __future__ import annotations

import dataclasses

import jax
import optax

from recon_jax.errors import ConfigError

OPTIMIZERS = ("sgd", "adam")


def base_optimizer(name: str, momentum: float = 0.9) -> optax.GradientTransformation:
  """SGD with momentum (as the PyTorch reference) or Adam, at rate 1."""
  if name == "sgd":
    return optax.sgd(1.0, momentum=momentum or None)
  if name == "adam":
    return optax.adam(1.0)
  raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}.")


@dataclasses.dataclass(frozen=True)
class Steps:
  """How an attack moves its candidates: the base optimiser at rate 1, whose updates each
  restart scales by its own learning rates (``lr_x``, ``lr_lam``)."""

  optimizer: str = "sgd"
  """'sgd' (momentum SGD, as the PyTorch reference of Haim et al.) or 'adam'."""
  momentum: float = 0.9
  """SGD's momentum (0: plain SGD); Adam ignores it."""

  def __post_init__(self):
    if self.optimizer not in OPTIMIZERS:
      raise ConfigError(
        f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}.", "optimizer"
      )

  def base(self) -> optax.GradientTransformation:
    """The optax transformation at rate 1."""
    return base_optimizer(self.optimizer, self.momentum)


def scaled(x: jax.Array, update: jax.Array, lr) -> jax.Array:
  """``x + lr * update`` in ``update``'s dtype (``lr`` a per-restart scalar)."""
  return x + lr.astype(update.dtype) * update
