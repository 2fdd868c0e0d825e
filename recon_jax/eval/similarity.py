"""Image similarity for the evaluation: stretch to [0, 1], normalised cross-correlation, SSIM.

Haim et al. 2022, App. B.3: each reconstruction is stretched, matched to training
images by NCC and scored by SSIM (dm-pix's formula, computed here).  Batch sizes are padded to a few
buckets so that varying counts share compiled code.  Images are float arrays
[N, H, W, C]; NCC also takes [N, D].
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core.losses import unit_centred  # noqa: F401 (similarity.unit_centred)
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
  """Converts to a JAX floating array (SSIM takes floating images only)."""
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


# dm-pix's SSIM (Wang et al. 2004 with a Gaussian window of sigma 1.5, "valid" borders,
# k1 = 0.01, k2 = 0.03, the variances clipped as dm-pix clips them), computed here so that a
# matrix of pairs shares each image's own local statistics: only the blurred product of the
# two images is per pair.  tests/test_evaluation_scale.py holds it to dm_pix.ssim.
SSIM_SIGMA, SSIM_K1, SSIM_K2 = 1.5, 0.01, 0.03


def _taps(filter_size: int) -> np.ndarray:
  """dm-pix's 1-D Gaussian window (float64; symmetric, so convolving is correlating)."""
  hw = filter_size // 2
  shift = (2 * hw - filter_size + 1) / 2
  taps = np.exp(-0.5 * ((np.arange(filter_size) - hw + shift) / SSIM_SIGMA) ** 2)
  return taps / taps.sum()


def _blur(x: jax.Array, filter_size: int) -> jax.Array:
  """The separable Gaussian blur of images [..., C, H, W] (channels first: a trailing
  channel axis of 1 keeps XLA's CPU loops from vectorising), "valid": [..., C, H', W'], as
  shifted sums (XLA fuses them into one loop; a convolution op is far slower on a CPU)."""
  taps = _taps(filter_size).astype(np.dtype(x.dtype))
  for axis in (x.ndim - 1, x.ndim - 2):
    size = x.shape[axis] - filter_size + 1
    x = sum(t * jax.lax.slice_in_dim(x, k, k + size, axis=axis) for k, t in enumerate(taps))
  return x


def _moments(x: jax.Array, filter_size: int):
  """Each image's local mean and local mean of squares, [N, C, H', W'] each."""
  return _blur(x, filter_size), _blur(x * x, filter_size)


def _ssim_from(mu0, sq0, mu1, sq1, cross) -> jax.Array:
  """SSIM from the local moments of two images and their blurred product (dm-pix's formula,
  max_val 1), averaged over the map's last three axes."""
  mu00, mu11, mu01 = mu0 * mu0, mu1 * mu1, mu0 * mu1
  eps = jnp.finfo(jnp.float32).eps ** 2
  s00 = jnp.maximum(eps, sq0 - mu00)
  s11 = jnp.maximum(eps, sq1 - mu11)
  s01 = cross - mu01
  s01 = jnp.sign(s01) * jnp.minimum(jnp.sqrt(s00 * s11), jnp.abs(s01))
  c1, c2 = SSIM_K1**2, SSIM_K2**2
  ssim_map = ((2 * mu01 + c1) * (2 * s01 + c2)) / ((mu00 + mu11 + c1) * (s00 + s11 + c2))
  return jnp.mean(ssim_map, axis=(-3, -2, -1))


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _moments_of(x: jax.Array, filter_size: int):
  return _moments(jnp.moveaxis(x, -1, -3), filter_size)


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _ssim_with(mu0, sq0, mu1, sq1, a: jax.Array, b: jax.Array, filter_size: int) -> jax.Array:
  return _ssim_from(mu0, sq0, mu1, sq1, _blur(jnp.moveaxis(a * b, -1, -3), filter_size))


def _ssim_pairs(a: jax.Array, b: jax.Array, filter_size: int) -> jax.Array:
  # Three programs: fused into one, XLA recomputes the blurred maps inside the formula's
  # loop, several times slower on a CPU.
  return _ssim_with(*_moments_of(a, filter_size), *_moments_of(b, filter_size), a, b, filter_size)


def ssim(a: Array, b: Array, *, filter_size: Optional[int] = None) -> jax.Array:
  """Per-pair SSIM of images assumed to lie in [0, 1] (dm-pix's formula, max_val=1).

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
  # Zero padding is harmless: the variances are clipped, so no NaN appears,
  # and the padded rows are sliced away.
  size = bucket(n)
  out = _ssim_pairs(pad_rows(a.astype(dtype), size), pad_rows(b.astype(dtype), size), fs)
  return out[:n]


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _ssim_matrix(a: jax.Array, b: jax.Array, filter_size: int) -> jax.Array:
  a, b = jnp.moveaxis(a, -1, -3), jnp.moveaxis(b, -1, -3)
  mu1, sq1 = _moments(b, filter_size)

  def one_row(ai: jax.Array) -> jax.Array:  # one image of a against every image of b
    mu0, sq0 = _moments(ai[None], filter_size)
    return _ssim_from(mu0, sq0, mu1, sq1, _blur(ai[None] * b, filter_size))

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


# The best match of each image in a reference set (the strict rule's held-out reference):
# every pair up to EXACT_PAIRS pairs; beyond, first among each image's PREFILTER_K most
# correlated references (NCC, one matrix product), then over every reference for the rows
# whose exact maximum the caller still needs (``need``).
EXACT_PAIRS = 100_000
PREFILTER_K = 16


def most_correlated(a: Array, b: Array, k: int, exclude_self: bool = False) -> np.ndarray:
  """[Na, min(k, Nb)] indices of the k images of ``b`` most correlated (NCC) with each image
  of ``a``, ascending within a row; ``exclude_self``: ``a`` is ``b`` and an image is not its
  own neighbour."""
  na, nb = len(a), len(b)
  fa = np.asarray(unit_centred(jnp.asarray(a, jnp.float32).reshape(na, -1)))
  fb = fa if exclude_self else np.asarray(unit_centred(jnp.asarray(b, jnp.float32).reshape(nb, -1)))
  c = fa @ fb.T
  if exclude_self:
    np.fill_diagonal(c, -np.inf)
  k = min(k, nb - int(exclude_self))
  return np.sort(np.argpartition(-c, k - 1, axis=1)[:, :k], axis=1)


def best_ssim(a: Array, b: Array, filter_size: int, need=None, exact_pairs: Optional[int] = None):
  """(highest SSIM [Na], index of that image of ``b`` [Na]) for each image of ``a``; ties go
  to the lowest index.

  Up to ``exact_pairs`` pairs (default :data:`EXACT_PAIRS`) every SSIM is computed.  Beyond, the SSIM of each image of
  ``a`` with its :data:`PREFILTER_K` most correlated images of ``b`` gives a first maximum
  (a lower bound of the true one), and ``need`` (a function of those maxima [Na] -> bool
  [Na], None: none) names the rows whose exact maximum matters: those are compared with
  every image of ``b``.  The other rows keep the maximum among their correlated references.
  """
  na, nb = len(a), len(b)
  exact_pairs = EXACT_PAIRS if exact_pairs is None else exact_pairs
  if na * nb <= exact_pairs or nb <= PREFILTER_K:
    s = np.asarray(ssim_matrix(a, b, filter_size), np.float64)
    idx = np.argmax(s, axis=1)
    return s[np.arange(na), idx], idx
  top = most_correlated(a, b, PREFILTER_K)
  k = top.shape[1]
  pairs = np.asarray(
    ssim(
      jnp.repeat(jnp.asarray(a), k, axis=0),
      jnp.asarray(b)[top.reshape(-1)],
      filter_size=filter_size,
    ),
    np.float64,
  ).reshape(na, k)
  col = np.argmax(pairs, axis=1)
  best, idx = pairs[np.arange(na), col], top[np.arange(na), col]
  rows = np.flatnonzero(need(best)) if need is not None else np.zeros(0, np.int64)
  if rows.size:
    full = np.asarray(ssim_matrix(jnp.asarray(a)[rows], b, filter_size), np.float64)
    idx_full = np.argmax(full, axis=1)
    best[rows], idx[rows] = full[np.arange(rows.size), idx_full], idx_full
  return best, idx
