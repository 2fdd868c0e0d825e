"""Candidates in the span of the first layer: the coordinates a dense first layer gives away.

Every gradient of a network whose first layer is dense, ``z = x K + b``, has the
first-layer part ``x delta^T``.  So whatever gradient-based training added to ``K``
(full-batch or mini-batch gradient descent, with or without momentum, any loss) is a
sum of outer products with the training inputs: the columns of ``K* - K_0`` span
the training images exactly (Loo et al. 2024; Tansley et al. 2026), and so do those of
``K*`` at a stationary point of a weight-decay-regularised loss.  Adam's per-entry
scaling and coupled weight decay (a multiple of ``K_0`` in every step) break it.

An attack that knows the span writes each candidate as ``x = B c`` with ``B`` [d, k]
orthonormal and searches the k coefficients ``c``.  :func:`reduce_target` rewrites the
target in those coordinates once: the first layer's kernel becomes ``B^T K`` [k, h]
(the network run on ``c`` computes the same pre-activations as on ``B c``), and
the reference's first-layer kernel ``B^T (K* - K_0)``.  The squared residual
splits exactly into the part inside the span (what the search moves) and a
constant outside it (:attr:`recon_jax.types.Span.outside`), so a step costs
``k / d`` of a pixel-space step in the first layer (k about n, d the pixels).

The span's directions are not equally loud: a training image that training weighted
little (small multipliers, learnt early) contributes little to the change, and the
squared residual, ruled by the strongest directions (the singular values spread over
three decades on the LFW victims), hardly notices a candidate that misses it.
:func:`whitened` rescales the coordinates so that the residual counts each direction by
``(s_j / s_1)^-power`` (``power`` 1: every direction alike; the total first-layer weight
unchanged): the search's ``basis`` becomes ``B W^-1`` and its ``dual`` (inputs to
coefficients) ``B W``.

:func:`span_basis` finds the span without a tolerance to guess: the span has at
most n directions (n training images), so the singular values beyond the n-th are
rounding noise (float32 training leaves a flat bulk of them); those below
``NOISE_FACTOR`` times that bulk's median are dropped, the rest are the data.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core import numerics
from recon_jax.errors import ConfigError
from recon_jax.types import Span, Target

# A singular value counts as data when it exceeds this many times the median singular
# value, the level of the rounding-noise bulk (measured on LFW victims trained in float32:
# the bulk's largest value is 3-4x its median; the weakest training image 12x or more).
NOISE_FACTOR = 10.0
# Where the median is above this fraction of the largest value, there is no noise bulk
# (the data fill every direction, n >= d): every direction is kept.
NO_BULK = 1e-3
# Singular values below this fraction of the largest are exact zeros, not rounding noise: the
# directions of inputs constant over the training set (MNIST's empty border), along which
# training never moved the weights.  They are neither data nor part of the noise floor.
EXACT_ZERO = 1e-9
FIRST_LAYER = ("params", "layer_0", "kernel")


class SpanInfo(NamedTuple):
  """How a span was found: its dimension and the singular values it was read from."""

  dim: int  # k, the directions kept
  input_dim: int  # d
  singular_values: np.ndarray  # of the kernel (or its change), descending
  noise_floor: float  # the median singular value (0 where none was estimated)
  rule: str  # 'noise' (above NOISE_FACTOR x the median), 'all' (no bulk) or 'rel_tol'

  def summary(self) -> dict:
    sv = self.singular_values
    top = float(sv[0]) if sv.size else 0.0
    return {
      "dim": int(self.dim),
      "input_dim": int(self.input_dim),
      "rule": self.rule,
      "noise_floor_rel": float(self.noise_floor / top) if top > 0 else None,
      "weakest_kept_rel": float(sv[self.dim - 1] / top) if self.dim and top > 0 else None,
      "strongest_dropped_rel": float(sv[self.dim] / top) if self.dim < sv.size and top else None,
    }


def first_layer_kernel(params) -> np.ndarray:
  """The [d, h] kernel of a dense first layer (``params['params']['layer_0']['kernel']``;
  a network with convolutions before its dense layers has none)."""
  inner = params.get("params", {}) if hasattr(params, "get") else {}
  if any(str(name).startswith("conv") for name in inner):
    raise ConfigError(
      "the first-layer span needs a dense first layer; this network starts with a convolution.",
      "subspace",
    )
  try:
    kernel = params["params"]["layer_0"]["kernel"]
  except (KeyError, TypeError, IndexError):
    raise ConfigError(
      "the first-layer span needs a dense first layer ('layer_0' with a kernel).", "subspace"
    ) from None
  kernel = np.asarray(kernel, np.float64)
  if kernel.ndim != 2:
    raise ConfigError(
      f"the first layer's kernel must be [d, h], got shape {kernel.shape}.", "subspace"
    )
  return kernel


@numerics.one_blas_thread
def span_basis(params, rel_tol: float = 0.0, n: Optional[int] = None):
  """Orthonormal [d, k] basis of the span of the first layer's weight vectors, and how.

  Pass the reference the attack fits: theta* (a weight-decay victim's first layer is
  a combination of the training inputs) or theta* - theta_0 (what training added).

  Args:
    params: a flax variable dict with a dense first layer.
    rel_tol: 0 (default): keep the singular values above :data:`NOISE_FACTOR` times
      the noise floor, the median of those that must be noise: beyond the ``n``-th
      when the training-set size ``n`` is given (the span has at most n directions),
      else of all of them (exact zeros, :data:`EXACT_ZERO`, left out: they are neither);
      where that floor is above :data:`NO_BULK` of the largest value there is no noise
      to tell apart and every nonzero direction is kept (the weights are not confined to
      n directions).  In (0, 1): keep those above
      ``rel_tol`` times the largest.
    n: the number of training samples, if known.

  Returns:
    ``(basis [d, k], SpanInfo)``.

  Raises:
    ConfigError: no dense first layer, a zero kernel, or ``rel_tol`` outside [0, 1).
  """
  if isinstance(rel_tol, bool) or not (np.isfinite(rel_tol) and 0 <= rel_tol < 1):
    raise ConfigError(f"rel_tol must be in [0, 1) (0: automatic), got {rel_tol!r}.", "subspace_tol")
  kernel = first_layer_kernel(params)
  u, sv = _left_singular(kernel)
  top = sv[0] if sv.size else 0.0
  if top <= 0:
    raise ConfigError("the first layer's kernel is zero: it spans nothing.", "subspace")
  noise = sv if n is None else sv[int(n) :]
  noise = noise[noise > EXACT_ZERO * top]
  floor = float(np.median(noise)) if noise.size else 0.0
  if rel_tol:
    keep, rule, floor = sv > rel_tol * top, "rel_tol", 0.0
  elif floor > NO_BULK * top:
    keep, rule = sv > EXACT_ZERO * top, "all"
  else:
    keep, rule = sv > max(NOISE_FACTOR * floor, EXACT_ZERO * top), "noise"
  k = int(np.sum(keep))
  return u[:, :k], SpanInfo(k, kernel.shape[0], sv, floor, rule)


def _left_singular(kernel: np.ndarray):
  """``(U, s)``: the left singular vectors and values of ``kernel`` [d, h] (descending).

  The directions are the eigenvectors of the smaller Gram matrix (one eigh instead of an
  SVD of the [d, h] matrix: 4-5x cheaper), and each value is the norm of the kernel along
  its direction, ``||u_i^T K||``, so a small value is measured to float64 rounding of the
  kernel, not of its square (which would put a floor of about 1e-8 under every value).
  """
  d, h = kernel.shape
  if d <= h:
    _, u = np.linalg.eigh(kernel @ kernel.T)
  else:
    _, v = np.linalg.eigh(kernel.T @ kernel)
    u, _ = np.linalg.qr(kernel @ v[:, ::-1])  # the largest first: the rest is orthogonal
  sv = np.linalg.norm(u.T @ kernel, axis=1)
  order = np.argsort(sv)[::-1]
  return u[:, order], sv[order]


def _with_kernel(params, kernel):
  """``params`` with the first layer's kernel replaced (a shallow copy of the path to it)."""
  out = dict(params)
  inner = dict(out["params"])
  inner["layer_0"] = dict(inner["layer_0"], kernel=kernel)
  out["params"] = inner
  return out


def whitened(basis, singular_values, power: float):
  """``(basis W^-1, basis W)``: the coordinates in which the residual's first-layer part
  counts the span's direction j by ``w_j = (s_j / s_1)^-power`` (:func:`span_basis`'s
  ``basis`` and its ``SpanInfo.singular_values``), scaled so that the reference's
  first-layer energy, ``sum_j (w_j s_j)^2``, is what it was.  ``power`` 0: ``(basis, None)``.
  """
  power = float(power)
  if not (np.isfinite(power) and 0 <= power <= 1):
    raise ConfigError(f"power must be in [0, 1], got {power!r}.", "span_whiten")
  b = np.asarray(basis, np.float64)
  if power == 0:
    return b, None
  s = np.asarray(singular_values, np.float64)[: b.shape[1]]
  if s.shape[0] != b.shape[1] or not np.all(s > 0):
    raise ConfigError(
      f"whitening needs a positive singular value per direction: {b.shape[1]} directions, "
      f"{s.shape[0]} values.",
      "span_whiten",
    )
  w = (s / s[0]) ** -power
  w *= np.sqrt(np.sum(s**2) / np.sum((w * s) ** 2))
  return b / w, b * w


def reduce_target(target: Target, basis, dual=None) -> Target:
  """``target`` in the coordinates of ``basis``: what a coefficient-space attack sees.

  The first layer's kernel of ``params`` becomes ``B^T K`` and the reference's ``D^T K``
  (``dual`` D, the matrix that encodes inputs: ``basis`` itself, orthonormal, when None;
  see :func:`whitened`); the box stays in input space (the attack decodes ``x = c B^T`` to
  apply it).  The reference's energy outside the span, which no candidate in the span can
  touch, is kept as :attr:`~recon_jax.types.Span.outside`.  A target already in a span's
  coordinates is returned as it is.
  """
  if target.span is not None:
    return target
  b = jnp.asarray(basis)
  params = target.params
  k_star = params["params"]["layer_0"]["kernel"]
  if b.ndim != 2 or b.shape[0] != k_star.shape[0]:
    raise ConfigError(
      f"basis must be [d, k] with d = {k_star.shape[0]} (the first layer's inputs), "
      f"got shape {tuple(b.shape)}.",
      "basis",
    )
  b = b.astype(k_star.dtype)
  enc = b if dual is None else jnp.asarray(dual).astype(k_star.dtype)
  if enc.shape != b.shape:
    raise ConfigError(f"dual must have basis's shape {tuple(b.shape)}, got {tuple(enc.shape)}.")
  fit_kernel = target.fit["params"]["layer_0"]["kernel"]
  inside = enc.T @ fit_kernel
  reduced, reference = _with_kernel(params, b.T @ k_star), None
  if target.reference is not None:
    reference = _with_kernel(target.reference, inside)
  elif dual is not None:  # theta* itself is the reference: the forward reads B, the fit D
    reference = _with_kernel(params, inside)
  outside = jnp.sum(jnp.square(fit_kernel - b @ inside))
  return target._replace(
    params=reduced, reference=reference, span=Span(b, outside, None if dual is None else enc)
  )


def encode(x, basis) -> jax.Array:
  """Coefficients [m, k] of candidates ``x`` [m, *input_shape] (their projection on the span;
  ``basis``: the orthonormal basis, or a :class:`~recon_jax.types.Span`'s encoder)."""
  b = jnp.asarray(basis)
  return x.reshape(x.shape[0], -1) @ b.astype(x.dtype)


def decode(c, basis, input_shape) -> jax.Array:
  """Candidates [m, *input_shape] of coefficients ``c`` [m, k]."""
  b = jnp.asarray(basis)
  return (c @ b.T.astype(c.dtype)).reshape((c.shape[0], *tuple(input_shape)))


def check_basis(basis, input_shape) -> Optional[jax.Array]:
  """``basis`` as an array, refused unless [prod(input_shape), k] with k >= 1 (None: None)."""
  if basis is None:
    return None
  b = jnp.asarray(basis)
  d = int(np.prod(tuple(input_shape)))
  if b.ndim != 2 or b.shape[0] != d or b.shape[1] < 1:
    raise ConfigError(
      f"basis must be [d, k] with d = {d} inputs and k >= 1, got shape {tuple(b.shape)}.",
      "basis",
    )
  return b


def regime(target: Target, n: int, known_init: bool = False, linearize: float = 1.0) -> dict:
  """Which side of the map a victim is on, from what the attack fits (``target.fit``): the
  first layer's span (of theta* - theta_0 with a known theta_0, ``known_init``, else of
  theta*) against its ``n`` training images (:func:`span_basis`).  A span of about n
  directions means the first layer holds the training images' coordinates (a model
  fine-tuned from known weights, or at a weight-decay stationary point); a full span (d
  directions) means it is not confined to them.  A first layer that is not dense has no
  span (``span`` None, and ``span_why``)."""
  out = {"known_init": bool(known_init), "n_train": int(n)}
  if known_init:
    out["linearize"] = float(linearize)
  try:
    _, info = span_basis(target.fit, 0.0, n)
  except ConfigError as e:
    out["span"] = None
    out["span_why"] = str(e)
    return out
  out["span"] = info.summary()
  return out
