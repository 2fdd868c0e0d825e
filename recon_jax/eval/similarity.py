"""Image similarity for the evaluation: stretch to [0, 1], normalised cross-correlation, SSIM.

Haim et al. 2022, App. B.3: each reconstruction is stretched, matched to training
images by NCC and scored by SSIM (dm-pix).  Batch sizes are padded to a few
buckets so that varying counts share compiled code.  Images are float arrays
[N, H, W, C]; NCC also takes [N, D].
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError

Array = Any
KeyOrSeed = Union[int, jax.Array]


def default_filter_size(height: int, width: Optional[int] = None) -> int:
  """Returns the SSIM Gaussian window size used when none is given.

  The standard 11-pixel window is larger than an 8x8 digit, and even on
  16-25 pixel images it would average away most structure, hence smaller
  windows for small images.

  Args:
    height: Image height H.
    width: Image width W (defaults to `height`).

  Returns:
    11 for H >= 32, 7 for H >= 16, else 3; never larger than min(H, W).
  """
  width = height if width is None else width
  if height >= 32:
    size = 11
  elif height >= 16:
    size = 7
  else:
    size = 3
  return int(max(1, min(size, height, width)))


def as_float(x: Array) -> jax.Array:
  """Converts to a JAX floating array (dm_pix.ssim rejects integer input)."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  return x


def as_key(key_or_seed: KeyOrSeed) -> jax.Array:
  """Accepts either an int seed or a JAX PRNG key (raw or typed)."""
  if isinstance(key_or_seed, (int, np.integer)):
    return jax.random.PRNGKey(int(key_or_seed))
  return key_or_seed


def check_images(x: Array, name: str) -> None:
  if x.ndim != 4:
    raise ConfigError(f"{name} must be [N, H, W, C], got shape {tuple(x.shape)}")


def bucket(n: int) -> int:
  """Rounds a batch size up so that varying sizes share compiled code.

  Every new shape costs an XLA compile (~0.5 s here); baselines, sweeps and
  tests call with many different counts. Small sizes go to powers of two
  (>= 8); large ones to multiples of 64, keeping padding overhead small.
  """
  if n <= 64:
    return max(8, 1 << max(0, n - 1).bit_length())
  return -(-n // 64) * 64


def pad_rows(x: jax.Array, size: int) -> jax.Array:
  """Zero-pads the leading (batch) axis of `x` to `size` rows."""
  extra = size - x.shape[0]
  if extra <= 0:
    return x
  return jnp.concatenate([x, jnp.zeros((extra,) + x.shape[1:], dtype=x.dtype)], axis=0)


def resolve_filter_size(filter_size: Optional[int], height: int, width: int) -> int:
  if filter_size is None:
    return default_filter_size(height, width)
  filter_size = int(filter_size)
  if filter_size < 1 or filter_size > min(height, width):
    raise ConfigError(f"filter_size={filter_size} must be in [1, min(H, W)={min(height, width)}]")
  return filter_size


@jax.jit
def stretch_raw(x: jax.Array) -> jax.Array:
  axes = tuple(range(1, x.ndim))
  lo = jnp.min(x, axis=axes, keepdims=True)
  hi = jnp.max(x, axis=axes, keepdims=True)
  rng = hi - lo
  flat = rng <= 0
  # A safe denominator keeps the untaken branch of `where` NaN-free.
  scaled = (x - lo) / jnp.where(flat, jnp.ones_like(rng), rng)
  # XLA may turn the division into a reciprocal multiply, so the maximum
  # can land one ulp below 1; pin the endpoints and clip the rest.
  scaled = jnp.where(x >= hi, jnp.ones_like(x), jnp.clip(scaled, 0.0, 1.0))
  return jnp.where(flat, jnp.full_like(x, 0.5), scaled)


def stretch(x: Array) -> jax.Array:
  """Maps each sample linearly so its min..max becomes [0, 1] (Haim B.3 step 1).

  Args:
    x: Array [N, ...] (images [N, H, W, C] or vectors [N, D]).

  Returns:
    Array of the same shape; a constant sample becomes 0.5 everywhere.
  """
  x = as_float(x)
  if x.ndim < 2:
    raise ConfigError(f"stretch expects a batch [N, ...], got shape {tuple(x.shape)}")
  return stretch_raw(x)


def unit_centred(flat: jax.Array) -> jax.Array:
  """Rows (the last axis) centred and scaled to unit norm: NCC is their dot product."""
  centred = flat - jnp.mean(flat, axis=-1, keepdims=True)
  norm = jnp.linalg.norm(centred, axis=-1, keepdims=True)
  # Constant rows have zero norm: leave them as zero vectors so their NCC is 0.
  return jnp.where(norm > 0, centred / jnp.where(norm > 0, norm, jnp.ones_like(norm)), 0.0)


@jax.jit
def ncc_raw(a: jax.Array, b: jax.Array) -> jax.Array:
  fa = unit_centred(a.reshape((a.shape[0], -1)))
  fb = unit_centred(b.reshape((b.shape[0], -1)))
  ncc = jnp.matmul(fa, fb.T, precision=jax.lax.Precision.HIGHEST)
  return jnp.clip(ncc, -1.0, 1.0)


def ncc(a: Array, b: Array) -> jax.Array:
  """Normalised cross-correlation between every pair of samples.

  Each sample is flattened, centred and scaled to unit norm, so the score is
  invariant to positive affine intensity changes of either image.

  Args:
    a: Array [Na, ...].
    b: Array [Nb, ...] with the same per-sample shape as `a`.

  Returns:
    [Na, Nb] scores in [-1, 1]; pairs involving a constant sample score 0.
  """
  a, b = as_float(a), as_float(b)
  if a.shape[1:] != b.shape[1:]:
    raise ConfigError(f"sample shapes differ: {a.shape[1:]} vs {b.shape[1:]}")
  dtype = jnp.result_type(a.dtype, b.dtype)
  return ncc_raw(a.astype(dtype), b.astype(dtype))


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _ssim_pairs(a: jax.Array, b: jax.Array, filter_size: int) -> jax.Array:
  return dm_pix.ssim(a, b, max_val=1.0, filter_size=filter_size)


def ssim(a: Array, b: Array, *, filter_size: Optional[int] = None) -> jax.Array:
  """Per-pair SSIM of images assumed to lie in [0, 1] (dm_pix, max_val=1).

  Args:
    a: Images [N, H, W, C].
    b: Images [N, H, W, C].
    filter_size: Gaussian window size; `default_filter_size(H, W)` if None.

  Returns:
    [N] SSIM of a[i] vs b[i].
  """
  a, b = as_float(a), as_float(b)
  check_images(a, "a")
  check_images(b, "b")
  if a.shape != b.shape:
    raise ConfigError(f"shapes differ: {a.shape} vs {b.shape}")
  fs = resolve_filter_size(filter_size, a.shape[1], a.shape[2])
  dtype = jnp.result_type(a.dtype, b.dtype)
  n = a.shape[0]
  if n == 0:
    return jnp.zeros((0,), dtype=dtype)
  # Zero padding is harmless: dm_pix clips variances, so no NaN appears,
  # and the padded rows are sliced away.
  size = bucket(n)
  out = _ssim_pairs(pad_rows(a.astype(dtype), size), pad_rows(b.astype(dtype), size), fs)
  return out[:n]


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _ssim_matrix(a: jax.Array, b: jax.Array, filter_size: int) -> jax.Array:
  def one_row(ai: jax.Array) -> jax.Array:
    # Explicit broadcast: rank promotion is set to 'raise' in tests.
    tiled = jnp.broadcast_to(ai[None], b.shape)
    return dm_pix.ssim(tiled, b, max_val=1.0, filter_size=filter_size)

  # lax.map keeps peak memory at one row (Nb images) instead of Na * Nb.
  return jax.lax.map(one_row, a)


def ssim_matrix(a: Array, b: Array, filter_size: Optional[int] = None) -> jax.Array:
  """SSIM between every pair of images.

  Args:
    a: Images [Na, H, W, C] in [0, 1].
    b: Images [Nb, H, W, C] in [0, 1].
    filter_size: Gaussian window size; `default_filter_size(H, W)` if None.

  Returns:
    [Na, Nb] SSIM matrix.
  """
  a, b = as_float(a), as_float(b)
  check_images(a, "a")
  check_images(b, "b")
  if a.shape[1:] != b.shape[1:]:
    raise ConfigError(f"image shapes differ: {a.shape[1:]} vs {b.shape[1:]}")
  dtype = jnp.result_type(a.dtype, b.dtype)
  if a.shape[0] == 0 or b.shape[0] == 0:
    return jnp.zeros((a.shape[0], b.shape[0]), dtype=dtype)
  fs = resolve_filter_size(filter_size, a.shape[1], a.shape[2])
  na, nb = a.shape[0], b.shape[0]
  out = _ssim_matrix(
    pad_rows(a.astype(dtype), bucket(na)), pad_rows(b.astype(dtype), bucket(nb)), fs
  )
  return out[:na, :nb]
