"""Priors and penalties: each a tiny pure function of the candidates."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _per_sample(bound, x):
  """``bound`` (scalar or one candidate's shape) as [1, *x.shape[1:]], explicitly."""
  return jnp.broadcast_to(jnp.asarray(bound, x.dtype), x.shape[1:])[None]


def box_prior(x: jax.Array, lo, hi) -> jax.Array:
  """Squared hinge outside the pixel box, averaged over pixels, summed over candidates.

  ``lo``/``hi`` broadcast to one candidate (per-pixel bounds, e.g. ``-mean`` and
  ``1 - mean`` after mean subtraction).
  """
  lo, hi = _per_sample(lo, x), _per_sample(hi, x)
  over = jax.nn.relu(x - hi) + jax.nn.relu(lo - x)
  per_sample = jnp.mean(jnp.square(over).reshape(x.shape[0], -1), axis=1)
  return jnp.sum(per_sample)


def lambda_prior(lam: jax.Array, lam_min) -> jax.Array:
  """Squared hinge keeping every multiplier at or above ``lam_min`` (dual feasibility)."""
  return jnp.sum(jnp.square(jax.nn.relu(lam_min - lam)))


def project_box(x: jax.Array, lo, hi) -> jax.Array:
  """Projection onto the pixel box (an alternative to the soft prior)."""
  return jnp.clip(x, _per_sample(lo, x), _per_sample(hi, x))


def tv_prior(x: jax.Array, eps: float = 1e-3) -> jax.Array:
  """Smoothed isotropic total variation of image candidates, averaged over pixels, summed.

  ``x``: ``[m, H, W]`` or ``[m, H, W, C]``.  Each pixel's forward differences ``dh``
  (down) and ``dw`` (right) enter as ``sqrt(dh^2 + dw^2 + eps^2) - eps`` (0 on a
  constant image, differentiable everywhere); the last row and column have only
  the one difference that exists.  A natural-image prior: noise pays much more
  than a face does (Rudin, Osher, Fatemi 1992; the usual regulariser of gradient
  inversion attacks).
  """
  if x.ndim == 3:
    x = x[..., None]
  if x.ndim != 4:
    raise ValueError(f"tv_prior needs [m, H, W(, C)] candidates, got shape {x.shape}.")
  dh = jnp.pad(jnp.diff(x, axis=1), ((0, 0), (0, 1), (0, 0), (0, 0)))
  dw = jnp.pad(jnp.diff(x, axis=2), ((0, 0), (0, 0), (0, 1), (0, 0)))
  tv = jnp.sqrt(jnp.square(dh) + jnp.square(dw) + eps**2) - eps
  return jnp.sum(jnp.mean(tv.reshape(x.shape[0], -1), axis=1))
