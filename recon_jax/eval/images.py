"""Evaluation of reconstruction attacks: matching, SSIM, strict recovery, baselines.

Implements the post-processing of Haim et al. 2022 (Appendix B.3: stretch,
NCC nearest neighbours, voting, SSIM sorting) and the point-cloud helpers of
their Section 4 (lambda filter, greedy de-duplication).

On top of the paper's protocol this module reports *strict recovery*: a
training image only counts as recovered when its reconstruction is both
above a (by-eye calibrated) SSIM threshold and closer in SSIM to that training
image than to every held-out image. The reason is that on tiny images a bare
"SSIM > 0.4" says nothing: the stretched training-mean image already clears it
for most 8x8 digits, and an unseen digit of the same class scores 0.8-0.95.
The baselines (`mean_image_baseline`, `heldout_baseline`) run through the very
same `evaluate` so that attack numbers can be read against them.

Conventions: images are float arrays [N, H, W, C]; non-image data are [N, D].
Core array maths is in jitted JAX; results handed to users are numpy.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional, Sequence, Union
import warnings

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError

Array = Any
KeyOrSeed = Union[int, jax.Array]

# Strict-recovery SSIM thresholds keyed by image height. These were calibrated
# by eye (the SSIM at which a reconstruction clearly shows the individual
# training image rather than a class-typical one); they are not derived from
# any statistic, so callers should pass their own where they know better.
DEFAULT_STRICT_THRESHOLD = {8: 0.8, 25: 0.7}
_FALLBACK_STRICT_THRESHOLD = 0.7

# Candidates whose NCC is at least this fraction of the best NCC are averaged
# ("voting", Haim B.3 step 3).
DEFAULT_VOTE_FRAC = 0.9


def strict_threshold_for(height: int) -> float:
  """Returns the by-eye calibrated strict SSIM threshold for an image height.

  Args:
    height: Image height H in pixels.

  Returns:
    `DEFAULT_STRICT_THRESHOLD[height]` if present, else 0.7.
  """
  return float(DEFAULT_STRICT_THRESHOLD.get(int(height), _FALLBACK_STRICT_THRESHOLD))


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


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def _as_float(x: Array) -> jax.Array:
  """Converts to a JAX floating array (dm_pix.ssim rejects integer input)."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  return x


def _as_key(key_or_seed: KeyOrSeed) -> jax.Array:
  """Accepts either an int seed or a JAX PRNG key (raw or typed)."""
  if isinstance(key_or_seed, (int, np.integer)):
    return jax.random.PRNGKey(int(key_or_seed))
  return key_or_seed


def _check_images(x: Array, name: str) -> None:
  if x.ndim != 4:
    raise ConfigError(f"{name} must be [N, H, W, C], got shape {tuple(x.shape)}")


def _bucket(n: int) -> int:
  """Rounds a batch size up so that varying sizes share compiled code.

  Every new shape costs an XLA compile (~0.5 s here); baselines, sweeps and
  tests call with many different counts. Small sizes go to powers of two
  (>= 8); large ones to multiples of 64, keeping padding overhead small.
  """
  if n <= 64:
    return max(8, 1 << max(0, n - 1).bit_length())
  return -(-n // 64) * 64


def _pad_rows(x: jax.Array, size: int) -> jax.Array:
  """Zero-pads the leading (batch) axis of `x` to `size` rows."""
  extra = size - x.shape[0]
  if extra <= 0:
    return x
  return jnp.concatenate([x, jnp.zeros((extra,) + x.shape[1:], dtype=x.dtype)], axis=0)


def _resolve_filter_size(filter_size: Optional[int], height: int, width: int) -> int:
  if filter_size is None:
    return default_filter_size(height, width)
  filter_size = int(filter_size)
  if filter_size < 1 or filter_size > min(height, width):
    raise ConfigError(f"filter_size={filter_size} must be in [1, min(H, W)={min(height, width)}]")
  return filter_size


# --------------------------------------------------------------------------
# Stretch, NCC, SSIM
# --------------------------------------------------------------------------


@jax.jit
def _stretch(x: jax.Array) -> jax.Array:
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
  x = _as_float(x)
  if x.ndim < 2:
    raise ConfigError(f"stretch expects a batch [N, ...], got shape {tuple(x.shape)}")
  return _stretch(x)


def _normalise_rows(flat: jax.Array) -> jax.Array:
  centred = flat - jnp.mean(flat, axis=1, keepdims=True)
  norm = jnp.linalg.norm(centred, axis=1, keepdims=True)
  # Constant rows have zero norm: leave them as zero vectors so their NCC is 0.
  return jnp.where(norm > 0, centred / jnp.where(norm > 0, norm, jnp.ones_like(norm)), 0.0)


@jax.jit
def _ncc_matrix(a: jax.Array, b: jax.Array) -> jax.Array:
  fa = _normalise_rows(a.reshape((a.shape[0], -1)))
  fb = _normalise_rows(b.reshape((b.shape[0], -1)))
  ncc = jnp.matmul(fa, fb.T, precision=jax.lax.Precision.HIGHEST)
  return jnp.clip(ncc, -1.0, 1.0)


def ncc_matrix(a: Array, b: Array) -> jax.Array:
  """Normalised cross-correlation between every pair of samples.

  Each sample is flattened, centred and scaled to unit norm, so the score is
  invariant to positive affine intensity changes of either image.

  Args:
    a: Array [Na, ...].
    b: Array [Nb, ...] with the same per-sample shape as `a`.

  Returns:
    [Na, Nb] scores in [-1, 1]; pairs involving a constant sample score 0.
  """
  a, b = _as_float(a), _as_float(b)
  if a.shape[1:] != b.shape[1:]:
    raise ConfigError(f"sample shapes differ: {a.shape[1:]} vs {b.shape[1:]}")
  dtype = jnp.result_type(a.dtype, b.dtype)
  return _ncc_matrix(a.astype(dtype), b.astype(dtype))


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
  a, b = _as_float(a), _as_float(b)
  _check_images(a, "a")
  _check_images(b, "b")
  if a.shape != b.shape:
    raise ConfigError(f"shapes differ: {a.shape} vs {b.shape}")
  fs = _resolve_filter_size(filter_size, a.shape[1], a.shape[2])
  dtype = jnp.result_type(a.dtype, b.dtype)
  n = a.shape[0]
  if n == 0:
    return jnp.zeros((0,), dtype=dtype)
  # Zero padding is harmless: dm_pix clips variances, so no NaN appears,
  # and the padded rows are sliced away.
  size = _bucket(n)
  out = _ssim_pairs(_pad_rows(a.astype(dtype), size), _pad_rows(b.astype(dtype), size), fs)
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
  a, b = _as_float(a), _as_float(b)
  _check_images(a, "a")
  _check_images(b, "b")
  if a.shape[1:] != b.shape[1:]:
    raise ConfigError(f"image shapes differ: {a.shape[1:]} vs {b.shape[1:]}")
  dtype = jnp.result_type(a.dtype, b.dtype)
  if a.shape[0] == 0 or b.shape[0] == 0:
    return jnp.zeros((a.shape[0], b.shape[0]), dtype=dtype)
  fs = _resolve_filter_size(filter_size, a.shape[1], a.shape[2])
  na, nb = a.shape[0], b.shape[0]
  out = _ssim_matrix(
    _pad_rows(a.astype(dtype), _bucket(na)), _pad_rows(b.astype(dtype), _bucket(nb)), fs
  )
  return out[:na, :nb]


# --------------------------------------------------------------------------
# Matching and voting (Haim B.3 steps 2-3)
# --------------------------------------------------------------------------


@jax.jit
def _match_and_vote(x_train: jax.Array, cands: jax.Array, valid: jax.Array, vote_frac: jax.Array):
  ncc = _ncc_matrix(x_train, cands)
  # Padded candidates get an NCC below any real one (NCC >= -1), so they
  # can neither be the best match nor vote.
  ncc = jnp.where(valid[None, :], ncc, -2.0)
  best_idx = jnp.argmax(ncc, axis=1)
  best = jnp.max(ncc, axis=1, keepdims=True)
  votes = (ncc >= vote_frac * best) & (ncc > 0)
  # The best match always votes, so a training sample whose best NCC is
  # <= 0 still gets (a poor) reconstruction rather than an empty average.
  votes = votes | jax.nn.one_hot(best_idx, cands.shape[0], dtype=jnp.bool_)
  n_votes = jnp.sum(votes, axis=1)
  weights = votes.astype(cands.dtype) / n_votes[:, None].astype(cands.dtype)
  flat = cands.reshape((cands.shape[0], -1))
  recon = jnp.matmul(weights, flat, precision=jax.lax.Precision.HIGHEST)
  recon = _stretch(recon.reshape((x_train.shape[0],) + cands.shape[1:]))
  return recon, best_idx, n_votes


def match_and_vote(
  x_train: Array, cands: Array, *, vote_frac: float = DEFAULT_VOTE_FRAC
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Pairs each training sample with a (voted) reconstruction (Haim B.3 2-3).

  For training sample i, the NCC against every candidate is computed; all
  candidates with NCC >= vote_frac * best NCC and NCC > 0 are averaged (the
  best candidate always takes part), and the average is stretched to [0, 1].

  Args:
    x_train: Training samples [n, ...], already stretched to [0, 1].
    cands: Candidate reconstructions [m, ...], already mean-added and
      stretched to [0, 1].
    vote_frac: Fraction of the best NCC a candidate needs to vote.

  Returns:
    (recon [n, ...] in [0, 1], best_idx [n] int, n_votes [n] int).
  """
  x_train, cands = _as_float(x_train), _as_float(cands)
  if x_train.shape[1:] != cands.shape[1:]:
    raise ConfigError(f"sample shapes differ: {x_train.shape[1:]} vs {cands.shape[1:]}")
  if cands.shape[0] == 0:
    raise ConfigError("match_and_vote needs at least one candidate")
  dtype = jnp.result_type(x_train.dtype, cands.dtype)
  n, m = x_train.shape[0], cands.shape[0]
  m_pad = _bucket(m)
  valid = jnp.arange(m_pad) < m
  recon, best_idx, n_votes = _match_and_vote(
    _pad_rows(x_train.astype(dtype), _bucket(n)),
    _pad_rows(cands.astype(dtype), m_pad),
    valid,
    jnp.asarray(vote_frac, dtype=dtype),
  )
  return recon[:n], best_idx[:n], n_votes[:n]


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------


def _finite_or_none(v: float) -> Optional[float]:
  """JSON has no inf/NaN; map them to null."""
  v = float(v)
  return v if math.isfinite(v) else None


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """Outcome of `evaluate` (all arrays numpy, indexed by training sample).

  Attributes:
    ssim: [n] SSIM of the voted reconstruction vs its training image.
    order: [n] training indices sorted by descending `ssim`.
    recon: [n, H, W, C] voted reconstructions, stretched to [0, 1].
    best_idx: [n] index of the best-NCC candidate.
    n_votes: [n] number of candidates averaged into `recon`.
    nearest_heldout_idx: [n] held-out index with the highest SSIM to
      `recon` (-1 when there is no held-out reference).
    ssim_heldout_max: [n] that highest held-out SSIM (-inf if none).
    recovered_strict_mask: [n] ssim >= threshold and ssim > held-out max.
    recovered_strict: Count of `recovered_strict_mask`.
    n_ssim_gt_04: Count of ssim > 0.4 (Haim's loose criterion).
    n_ssim_gt_05: Count of ssim > 0.5.
    n_ssim_gt_06: Count of ssim > 0.6.
    mean_ssim_top10: Mean of the min(10, n) best SSIMs.
    mean_ssim_top45: Mean of the min(45, n) best SSIMs.
    n_train: Number of training samples n.
    n_candidates: Number of candidates m.
    n_heldout_ref: Number of held-out images used as references.
    ssim_threshold: Strict SSIM threshold used.
    filter_size: SSIM window size used.
    vote_frac: Voting fraction used.
    heldout_excluded: Held-out indices excluded from the references.
  """

  ssim: np.ndarray
  order: np.ndarray
  recon: np.ndarray
  best_idx: np.ndarray
  n_votes: np.ndarray
  nearest_heldout_idx: np.ndarray
  ssim_heldout_max: np.ndarray
  recovered_strict_mask: np.ndarray
  recovered_strict: int
  n_ssim_gt_04: int
  n_ssim_gt_05: int
  n_ssim_gt_06: int
  mean_ssim_top10: float
  mean_ssim_top45: float
  n_train: int
  n_candidates: int
  n_heldout_ref: int
  ssim_threshold: float
  filter_size: int
  vote_frac: float
  heldout_excluded: np.ndarray

  def summary(self) -> dict[str, Any]:
    """Returns the scalar metrics as JSON-serialisable ints/floats.

    Non-finite floats (only possible for `mean_ssim`/`median_ssim` on an
    empty set) are reported as None.
    """
    return {
      "n_train": int(self.n_train),
      "n_candidates": int(self.n_candidates),
      "n_heldout_ref": int(self.n_heldout_ref),
      "ssim_threshold": float(self.ssim_threshold),
      "filter_size": int(self.filter_size),
      "vote_frac": float(self.vote_frac),
      "recovered_strict": int(self.recovered_strict),
      "recovered_strict_frac": float(self.recovered_strict) / max(1, int(self.n_train)),
      "n_ssim_gt_0.4": int(self.n_ssim_gt_04),
      "n_ssim_gt_0.5": int(self.n_ssim_gt_05),
      "n_ssim_gt_0.6": int(self.n_ssim_gt_06),
      "mean_ssim_top10": _finite_or_none(self.mean_ssim_top10),
      "mean_ssim_top45": _finite_or_none(self.mean_ssim_top45),
      "mean_ssim": _finite_or_none(np.mean(self.ssim)) if self.ssim.size else None,
      "median_ssim": _finite_or_none(np.median(self.ssim)) if self.ssim.size else None,
    }

  def to_dict(self) -> dict[str, Any]:
    """Returns `summary()` plus per-sample lists (no images), JSON-ready."""
    out = self.summary()
    out.update(
      {
        "ssim": [float(v) for v in self.ssim],
        "order": [int(v) for v in self.order],
        "best_idx": [int(v) for v in self.best_idx],
        "n_votes": [int(v) for v in self.n_votes],
        "nearest_heldout_idx": [int(v) for v in self.nearest_heldout_idx],
        "ssim_heldout_max": [_finite_or_none(v) for v in self.ssim_heldout_max],
        "recovered_strict_mask": [bool(v) for v in self.recovered_strict_mask],
        "heldout_excluded": [int(v) for v in self.heldout_excluded],
      }
    )
    return out


def _mean_top_k(values: np.ndarray, k: int) -> float:
  k = min(k, values.size)
  if k == 0:
    return float("nan")
  return float(np.mean(np.sort(values)[::-1][:k]))


def evaluate(
  cands: Array,
  x_train: Array,
  x_heldout: Optional[Array],
  *,
  ssim_threshold: float,
  filter_size: Optional[int] = None,
  vote_frac: float = DEFAULT_VOTE_FRAC,
  heldout_exclude: Optional[Sequence[int]] = None,
) -> EvalResult:
  """Scores candidate reconstructions against the training set, honestly.

  Steps: stretch everything to [0, 1]; `match_and_vote`; SSIM of each voted
  reconstruction vs its training image; the highest SSIM of that same
  reconstruction vs any held-out image; strict recovery requires
  ssim >= ssim_threshold and ssim > that held-out maximum, i.e. the
  reconstruction must look more like *this* training image than like any
  unseen image (otherwise it is a class prototype, not a leak).

  Args:
    cands: Candidates [m, H, W, C] in pixel space (training mean added).
    x_train: Training images [n, H, W, C] in pixel space.
    x_heldout: Held-out images [h, H, W, C] in pixel space, or None.
    ssim_threshold: Strict SSIM threshold (see `strict_threshold_for`).
    filter_size: SSIM window; `default_filter_size(H, W)` if None.
    vote_frac: Voting fraction for `match_and_vote`.
    heldout_exclude: Held-out indices not to use as references (used by
      `heldout_baseline` so a drawn image is never compared to itself).

  Returns:
    An `EvalResult`.
  """
  cands, x_train = _as_float(cands), _as_float(x_train)
  _check_images(cands, "cands")
  _check_images(x_train, "x_train")
  if cands.shape[1:] != x_train.shape[1:]:
    raise ConfigError(f"image shapes differ: {cands.shape[1:]} vs {x_train.shape[1:]}")
  height, width = x_train.shape[1], x_train.shape[2]
  fs = _resolve_filter_size(filter_size, height, width)
  n = int(x_train.shape[0])

  train_s = stretch(x_train)
  recon, best_idx, n_votes = match_and_vote(train_s, stretch(cands), vote_frac=vote_frac)
  ssim_train = np.asarray(ssim(recon, train_s, filter_size=fs), dtype=np.float64)

  excluded = np.unique(
    np.asarray([] if heldout_exclude is None else heldout_exclude, dtype=np.int64).reshape(-1)
  )
  if x_heldout is not None:
    x_heldout = _as_float(x_heldout)
    _check_images(x_heldout, "x_heldout")
    if x_heldout.shape[1:] != x_train.shape[1:]:
      raise ConfigError(f"held-out shape {x_heldout.shape[1:]} differs from {x_train.shape[1:]}")
    n_heldout = int(x_heldout.shape[0])
  else:
    n_heldout = 0
  if excluded.size and (excluded.min() < 0 or excluded.max() >= n_heldout):
    raise ConfigError("heldout_exclude contains indices outside the held-out set")
  keep = np.setdiff1d(np.arange(n_heldout), excluded)

  if keep.size:
    ref = stretch(x_heldout[keep])
    s_ho = np.asarray(ssim_matrix(recon, ref, fs), dtype=np.float64)
    arg = np.argmax(s_ho, axis=1)
    ssim_heldout_max = s_ho[np.arange(n), arg]
    nearest_heldout_idx = keep[arg]
  else:
    # No reference: strict recovery degenerates to the threshold alone.
    ssim_heldout_max = np.full(n, -np.inf)
    nearest_heldout_idx = np.full(n, -1, dtype=np.int64)

  strict = (ssim_train >= ssim_threshold) & (ssim_train > ssim_heldout_max)
  order = np.argsort(-ssim_train, kind="stable")
  return EvalResult(
    ssim=ssim_train,
    order=order,
    recon=np.asarray(recon),
    best_idx=np.asarray(best_idx, dtype=np.int64),
    n_votes=np.asarray(n_votes, dtype=np.int64),
    nearest_heldout_idx=np.asarray(nearest_heldout_idx, dtype=np.int64),
    ssim_heldout_max=np.asarray(ssim_heldout_max, dtype=np.float64),
    recovered_strict_mask=strict,
    recovered_strict=int(strict.sum()),
    n_ssim_gt_04=int((ssim_train > 0.4).sum()),
    n_ssim_gt_05=int((ssim_train > 0.5).sum()),
    n_ssim_gt_06=int((ssim_train > 0.6).sum()),
    mean_ssim_top10=_mean_top_k(ssim_train, 10),
    mean_ssim_top45=_mean_top_k(ssim_train, 45),
    n_train=n,
    n_candidates=int(cands.shape[0]),
    n_heldout_ref=int(keep.size),
    ssim_threshold=float(ssim_threshold),
    filter_size=int(fs),
    vote_frac=float(vote_frac),
    heldout_excluded=excluded,
  )


def mean_image_baseline(
  x_train: Array,
  x_heldout: Optional[Array],
  mean_image: Array,
  *,
  ssim_threshold: float,
  filter_size: Optional[int] = None,
  vote_frac: float = DEFAULT_VOTE_FRAC,
) -> EvalResult:
  """Evaluates the trivial "attack" that outputs the training-mean image.

  Any attack must beat this: the mean needs no access to the model at all.

  Args:
    x_train: Training images [n, H, W, C] in pixel space.
    x_heldout: Held-out images [h, H, W, C] in pixel space, or None.
    mean_image: Pixel-space training mean, [H, W, C] or [1, H, W, C].
    ssim_threshold: Strict SSIM threshold.
    filter_size: SSIM window; default by image height if None.
    vote_frac: Voting fraction (irrelevant with one candidate).

  Returns:
    An `EvalResult` with the single mean image as candidate.
  """
  mean_image = _as_float(mean_image)
  if mean_image.ndim == 3:
    mean_image = mean_image[None]
  return evaluate(
    mean_image,
    x_train,
    x_heldout,
    ssim_threshold=ssim_threshold,
    filter_size=filter_size,
    vote_frac=vote_frac,
  )


def heldout_baseline(
  key_or_seed: KeyOrSeed,
  x_train: Array,
  x_heldout: Array,
  num: int,
  *,
  ssim_threshold: float,
  filter_size: Optional[int] = None,
  vote_frac: float = DEFAULT_VOTE_FRAC,
) -> EvalResult:
  """Evaluates unseen images as if they were reconstructions.

  `num` held-out images (drawn without replacement, capped at the held-out
  size) serve as candidates; they are removed from the held-out reference
  set so none is compared with itself. Whatever this scores is what an
  attack gets for free from the data distribution, without any leak. If all
  held-out images are drawn no reference remains and strict recovery falls
  back to the SSIM threshold alone.

  Args:
    key_or_seed: JAX PRNG key or int seed for the draw.
    x_train: Training images [n, H, W, C] in pixel space.
    x_heldout: Held-out images [h, H, W, C] in pixel space.
    num: Number of held-out images to draw as candidates.
    ssim_threshold: Strict SSIM threshold.
    filter_size: SSIM window; default by image height if None.
    vote_frac: Voting fraction for `match_and_vote`.

  Returns:
    An `EvalResult`; its `heldout_excluded` lists the drawn indices.
  """
  x_heldout = _as_float(x_heldout)
  h = int(x_heldout.shape[0])
  if h == 0:
    raise ConfigError("heldout_baseline needs at least one held-out image")
  num = int(min(max(int(num), 1), h))
  perm = np.asarray(jax.random.permutation(_as_key(key_or_seed), h))
  drawn = np.sort(perm[:num])
  return evaluate(
    x_heldout[drawn],
    x_train,
    x_heldout,
    ssim_threshold=ssim_threshold,
    filter_size=filter_size,
    vote_frac=vote_frac,
    heldout_exclude=drawn,
  )


# --------------------------------------------------------------------------
# Haim Section 4 helpers for generic data [m, D]
# --------------------------------------------------------------------------


def lambda_filter(lam: Array, thresh: float) -> np.ndarray:
  """Keeps candidates whose KKT multiplier is large (Haim §4, Fig. 2e).

  Points with lambda ~ 0 do not enter the KKT stationarity condition, so
  their x can be anything; they carry no information.

  Args:
    lam: Multipliers [m].
    thresh: Minimum multiplier to keep (the paper uses 5 in 2-D).

  Returns:
    Boolean numpy mask [m], True where lam >= thresh.
  """
  return np.asarray(lam).reshape(-1) >= thresh


@jax.jit
def _greedy_dedup(points: jax.Array, perm: jax.Array, radius: jax.Array) -> jax.Array:
  shuffled = points[perm]
  m = shuffled.shape[0]

  def body(i, kept):
    diff = shuffled - shuffled[i][None, :]
    dist = jnp.sqrt(jnp.sum(diff * diff, axis=1))
    # Only points already processed can be in `kept`, so this is the
    # sequential greedy rule without materialising an [m, m] matrix.
    clash = jnp.any(kept & (dist < radius))
    return kept.at[i].set(~clash)

  kept = jax.lax.fori_loop(0, m, body, jnp.zeros((m,), dtype=jnp.bool_))
  return jnp.zeros((m,), dtype=jnp.bool_).at[perm].set(kept)


def greedy_dedup(points: Array, radius: float, key_or_seed: KeyOrSeed) -> np.ndarray:
  """Removes near-duplicate points greedily in random order (Haim §4).

  Points are visited in a random order; a point is dropped when it lies at
  Euclidean distance < `radius` from a point already kept.

  Args:
    points: Points [m, D] (or [m, ...], flattened).
    radius: Duplicate radius (the paper uses 0.03 in 2-D).
    key_or_seed: JAX PRNG key or int seed for the visiting order.

  Returns:
    Boolean numpy mask [m] of kept points.
  """
  pts = _as_float(points)
  m = int(pts.shape[0])
  if m == 0:
    return np.zeros((0,), dtype=bool)
  pts = pts.reshape((m, -1))
  perm = jax.random.permutation(_as_key(key_or_seed), m)
  return np.asarray(_greedy_dedup(pts, perm, jnp.asarray(radius, dtype=pts.dtype)))


@jax.jit
def _min_dists(x_train: jax.Array, pts: jax.Array) -> jax.Array:
  diff = x_train[:, None, :] - pts[None, :, :]
  return jnp.min(jnp.sqrt(jnp.sum(diff * diff, axis=2)), axis=1)


def points_recovered(
  points_kept: Array, x_train: Array, tol: float = 0.05
) -> tuple[int, np.ndarray]:
  """Counts training points that have a kept point within `tol`.

  Args:
    points_kept: Kept reconstructions [k, D] (after filtering/dedup).
    x_train: Training points [n, D].
    tol: Euclidean distance below which a training point is recovered.

  Returns:
    (count of training points with min distance < tol, per-train minimum
    distance [n] as numpy; inf when no points are kept).
  """
  x_train = _as_float(x_train)
  n = int(x_train.shape[0])
  x_train = x_train.reshape((n, -1))
  pts = _as_float(points_kept)
  k = int(pts.shape[0])
  if k == 0 or n == 0:
    dists = np.full(n, np.inf)
  else:
    pts = pts.reshape((k, -1))
    dtype = jnp.result_type(x_train.dtype, pts.dtype)
    dists = np.asarray(_min_dists(x_train.astype(dtype), pts.astype(dtype)), dtype=np.float64)
  return int(np.sum(dists < tol)), dists


# --------------------------------------------------------------------------
# Rank correlation
# --------------------------------------------------------------------------


def spearman(a: Array, b: Array) -> float:
  """Spearman rank correlation, returning NaN instead of warning.

  Pairs where either value is non-finite are dropped first. Fewer than two
  remaining pairs, or a constant input, give NaN (correlation undefined).

  Args:
    a: Values [N].
    b: Values [N].

  Returns:
    The correlation as a Python float (or nan).
  """
  from scipy import stats  # Local import: only needed here.

  a = np.asarray(a, dtype=np.float64).reshape(-1)
  b = np.asarray(b, dtype=np.float64).reshape(-1)
  if a.shape != b.shape:
    raise ConfigError(f"lengths differ: {a.shape} vs {b.shape}")
  ok = np.isfinite(a) & np.isfinite(b)
  a, b = a[ok], b[ok]
  if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
    return float("nan")
  with warnings.catch_warnings():
    # Belt and braces: the constant case is handled above, but scipy
    # versions differ in which inputs they deem degenerate.
    warnings.simplefilter("ignore", getattr(stats, "ConstantInputWarning", RuntimeWarning))
    rho = stats.spearmanr(a, b).statistic
  return float(rho)
