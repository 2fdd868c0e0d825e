"""JAX's process-wide numerics for a run: float64 or not, and the matmul precision.

Set once by each binary before any array is made; ``config.json`` records what was set
(:func:`recon_jax.io.workdir.environment`).
"""

from __future__ import annotations

import contextlib

import numpy as np

from recon_jax.errors import ConfigError

MATMUL_PRECISIONS = ("default", "high", "highest")


def _check(x64, matmul_precision) -> None:
  if x64 is not None and not isinstance(x64, (bool, np.bool_)):
    raise ConfigError(f"x64 must be True or False, got {x64!r}.", "x64")
  if matmul_precision not in MATMUL_PRECISIONS:
    raise ConfigError(
      f"matmul_precision must be default, high or highest, got {matmul_precision!r}.",
      "matmul_precision",
    )


@contextlib.contextmanager
def scoped(x64: bool, matmul_precision: str = "default"):
  """JAX's numerics of one run while it runs (float64 when ``x64``; the matmul precision
  unless 'default'), the caller's restored after: what the library's run functions do, so a
  job's ``x64`` is honoured from Python as from a binary."""
  import jax

  _check(x64, matmul_precision)
  with contextlib.ExitStack() as stack:
    stack.enter_context(jax.enable_x64(bool(x64)))
    if matmul_precision != "default":
      stack.enter_context(jax.default_matmul_precision(matmul_precision))
    yield


def set_precision(x64: bool, matmul_precision: str = "default") -> None:
  """Enables float64 when ``x64``; sets JAX's default matmul precision unless 'default'."""
  import jax

  _check(None, matmul_precision)
  jax.config.update("jax_enable_x64", bool(x64))
  if matmul_precision != "default":
    jax.config.update("jax_default_matmul_precision", matmul_precision)
