"""Evaluation of reconstruction attacks: matching, SSIM, strict recovery, baselines.

Implements the post-processing of Haim et al. 2022 (Appendix B.3: stretch,
NCC nearest neighbours, voting, SSIM sorting); the similarity measures
themselves (stretch, NCC, SSIM) are in :mod:`recon_jax.eval.similarity`.

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
import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.eval import similarity
from recon_jax.eval.similarity import Array, KeyOrSeed

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


# --------------------------------------------------------------------------
# Matching and voting (Haim B.3 steps 2-3)
# --------------------------------------------------------------------------


@jax.jit
def _match_and_vote(x_train: jax.Array, cands: jax.Array, valid: jax.Array, vote_frac: jax.Array):
  ncc = similarity.ncc_raw(x_train, cands)
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
  recon = similarity.stretch_raw(recon.reshape((x_train.shape[0],) + cands.shape[1:]))
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
  x_train, cands = similarity.as_float(x_train), similarity.as_float(cands)
  if x_train.shape[1:] != cands.shape[1:]:
    raise ConfigError(f"sample shapes differ: {x_train.shape[1:]} vs {cands.shape[1:]}")
  if cands.shape[0] == 0:
    raise ConfigError("match_and_vote needs at least one candidate")
  dtype = jnp.result_type(x_train.dtype, cands.dtype)
  n, m = x_train.shape[0], cands.shape[0]
  m_pad = similarity.bucket(m)
  valid = jnp.arange(m_pad) < m
  recon, best_idx, n_votes = _match_and_vote(
    similarity.pad_rows(x_train.astype(dtype), similarity.bucket(n)),
    similarity.pad_rows(cands.astype(dtype), m_pad),
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
  # Per training image, which of several evaluations its reconstruction came from
  # (:func:`combine`: 0 the first, e.g. the pool; None for a single evaluation).
  source: Optional[np.ndarray] = None

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
    if self.source is not None:
      out["source"] = [int(v) for v in self.source]  # 0: the pool, k: the k-th evaluation
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
  cands, x_train = similarity.as_float(cands), similarity.as_float(x_train)
  similarity.check_images(cands, "cands")
  similarity.check_images(x_train, "x_train")
  if cands.shape[1:] != x_train.shape[1:]:
    raise ConfigError(f"image shapes differ: {cands.shape[1:]} vs {x_train.shape[1:]}")
  height, width = x_train.shape[1], x_train.shape[2]
  fs = similarity.resolve_filter_size(filter_size, height, width)
  n = int(x_train.shape[0])

  train_s = similarity.stretch(x_train)
  recon, best_idx, n_votes = match_and_vote(train_s, similarity.stretch(cands), vote_frac=vote_frac)
  ssim_train = np.asarray(similarity.ssim(recon, train_s, filter_size=fs), dtype=np.float64)

  excluded = np.unique(
    np.asarray([] if heldout_exclude is None else heldout_exclude, dtype=np.int64).reshape(-1)
  )
  if x_heldout is not None:
    x_heldout = similarity.as_float(x_heldout)
    similarity.check_images(x_heldout, "x_heldout")
    if x_heldout.shape[1:] != x_train.shape[1:]:
      raise ConfigError(f"held-out shape {x_heldout.shape[1:]} differs from {x_train.shape[1:]}")
    n_heldout = int(x_heldout.shape[0])
  else:
    n_heldout = 0
  if excluded.size and (excluded.min() < 0 or excluded.max() >= n_heldout):
    raise ConfigError("heldout_exclude contains indices outside the held-out set")
  keep = np.setdiff1d(np.arange(n_heldout), excluded)

  if keep.size:
    ref = similarity.stretch(x_heldout[keep])
    # Only a reconstruction at the threshold with no correlated held-out image at least as
    # similar can still pass: its every held-out SSIM is needed, the others' decision is made.
    ssim_heldout_max, arg = similarity.best_ssim(
      recon, ref, fs, need=lambda top: (ssim_train >= ssim_threshold) & (ssim_train > top)
    )
    nearest_heldout_idx = keep[arg]
  else:
    # No reference: strict recovery degenerates to the threshold alone.
    ssim_heldout_max = np.full(n, -np.inf)
    nearest_heldout_idx = np.full(n, -1, dtype=np.int64)

  strict = (ssim_train >= ssim_threshold) & (ssim_train > ssim_heldout_max)
  return EvalResult(
    ssim=ssim_train,
    recon=np.asarray(recon),
    best_idx=np.asarray(best_idx, dtype=np.int64),
    n_votes=np.asarray(n_votes, dtype=np.int64),
    nearest_heldout_idx=np.asarray(nearest_heldout_idx, dtype=np.int64),
    ssim_heldout_max=np.asarray(ssim_heldout_max, dtype=np.float64),
    recovered_strict_mask=strict,
    n_train=n,
    n_candidates=int(cands.shape[0]),
    n_heldout_ref=int(keep.size),
    ssim_threshold=float(ssim_threshold),
    filter_size=int(fs),
    vote_frac=float(vote_frac),
    heldout_excluded=excluded,
    **_counts(ssim_train, strict),
  )


def _counts(ssim: np.ndarray, strict: np.ndarray) -> dict:
  """The counts and order an :class:`EvalResult` derives from its per-image SSIM and mask."""
  return dict(
    order=np.argsort(-ssim, kind="stable"),
    recovered_strict=int(strict.sum()),
    n_ssim_gt_04=int((ssim > 0.4).sum()),
    n_ssim_gt_05=int((ssim > 0.5).sum()),
    n_ssim_gt_06=int((ssim > 0.6).sum()),
    mean_ssim_top10=_mean_top_k(ssim, 10),
    mean_ssim_top45=_mean_top_k(ssim, 45),
  )


def combine(results: Sequence[EvalResult]) -> EvalResult:
  """Several evaluations of one training set (the pooled candidates, each restart's own)
  as one: per training image, the reconstruction that passes the strict rule with the
  highest SSIM, else the one of highest SSIM.

  So a training image counts as recovered when any of the evaluations recovers it, and
  the combined count is at least each one's: a pool of restarts cannot recover fewer
  images than one of its restarts does on its own (the voting of Haim et al. averages
  the candidates of every restart that resemble an image, and can blur one that a single
  restart holds sharp).  Score a baseline the same way (:func:`heldout_baseline`'s
  ``group``): more evaluations give it more chances too.  ``best_idx`` and ``n_votes``
  refer to the candidates of the evaluation each image came from (``source``).
  """
  if not results:
    raise ConfigError("combine needs at least one evaluation")
  first = results[0]
  if any(r.ssim.shape != first.ssim.shape for r in results):
    raise ConfigError("combine needs evaluations of the same training set")
  ssim = np.stack([r.ssim for r in results])
  strict = np.stack([r.recovered_strict_mask for r in results])
  pick = np.argmax(np.where(strict, ssim + 3.0, ssim), axis=0)  # SSIM <= 1: passing first
  cols = np.arange(ssim.shape[1])

  def take(name):
    return np.stack([getattr(r, name) for r in results])[pick, cols]

  ssim_c, strict_c = ssim[pick, cols], strict[pick, cols]
  return dataclasses.replace(
    first,
    ssim=ssim_c,
    recon=take("recon"),
    best_idx=take("best_idx"),
    n_votes=take("n_votes"),
    nearest_heldout_idx=take("nearest_heldout_idx"),
    ssim_heldout_max=take("ssim_heldout_max"),
    recovered_strict_mask=strict_c,
    source=pick.astype(np.int64),
    **_counts(ssim_c, strict_c),
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
  mean_image = similarity.as_float(mean_image)
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
  group: Optional[int] = None,
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
    group: scored as an attack's restarts are (:func:`combine`): the drawn images
      pooled, and in groups of this many (a restart's candidates) each evaluated
      on its own; None: pooled only.

  Returns:
    An `EvalResult`; its `heldout_excluded` lists the drawn indices.
  """
  x_heldout = similarity.as_float(x_heldout)
  h = int(x_heldout.shape[0])
  if h == 0:
    raise ConfigError("heldout_baseline needs at least one held-out image")
  num = int(min(max(int(num), 1), h))
  perm = np.asarray(jax.random.permutation(similarity.as_key(key_or_seed), h))
  drawn = np.sort(perm[:num])
  kw = dict(
    ssim_threshold=ssim_threshold,
    filter_size=filter_size,
    vote_frac=vote_frac,
    heldout_exclude=drawn,
  )
  pooled = evaluate(x_heldout[drawn], x_train, x_heldout, **kw)
  if group is None or int(group) >= num:
    return pooled
  size = max(int(group), 1)
  parts = [
    evaluate(x_heldout[drawn[i : i + size]], x_train, x_heldout, **kw) for i in range(0, num, size)
  ]
  return combine([pooled, *parts])
