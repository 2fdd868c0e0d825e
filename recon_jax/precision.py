"""JAX's process-wide numerics for a run: float64 or not, and the matmul precision.

Set once by each binary before any array is made; ``config.json`` records what was set
(:func:`recon_jax.workdir.environment`).
"""

from __future__ import annotations

from recon_jax.errors import ConfigError

MATMUL_PRECISIONS = ("default", "high", "highest")


def set_precision(x64: bool, matmul_precision: str = "default") -> None:
  """Enables float64 when ``x64``; sets JAX's default matmul precision unless 'default'."""
  import jax

  if matmul_precision not in MATMUL_PRECISIONS:
    raise ConfigError(
      f"matmul_precision must be default, high or highest, got {matmul_precision!r}."
    )
  jax.config.update("jax_enable_x64", bool(x64))
  if matmul_precision != "default":
    jax.config.update("jax_default_matmul_precision", matmul_precision)
