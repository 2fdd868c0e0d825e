"""Membership measured as privacy audits measure it: every given image scored by one rule, and
how well that score tells the training images from the held-out ones.

An audit is given training images and held-out images of the same distribution.  Each
given image ``z`` gets the same score, whichever set it is in::

  score(z) = SSIM(best reconstruction of z, z) - max_{z' given, z' != z} SSIM(z, z')

the similarity of its best reconstruction from the attack's candidates (Haim et al.'s
matching with voting, :func:`recon_jax.eval.images.match_and_vote`), less its similarity to
the nearest other given image (or to the training mean, which the attacker is handed and
which resembles every training image of a small set).  A training image the attack reproduced scores near
``1 - (its nearest neighbour's SSIM)`` > 0; an image that merely resembles what the
attack found scores near or below 0, because the look-alike it was matched with is
about as close as its neighbours are.  Whether the score separates the two sets is then
read as a membership inference is read (Carlini et al. 2022, "Membership inference
attacks from first principles"): the ROC AUC, the true-positive rate at a false-positive
rate of 1% and 0.1%, the ROC curve (drawn on log axes), and a permutation test of the
AUC over which of the given images are called training images (:func:`separation`).

Nothing here runs an attack: the functions take the similarities (:func:`scores`), the
images (:func:`image_scores`) or the scores and labels, and return numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import numpy as np

from recon_jax.eval import ranking

LEVEL = 0.01  # the permutation test's level: p <= LEVEL reads "members are told apart"
PERMUTATIONS = 9999  # label permutations of the test (the smallest p it gives: 1e-4)
FPRS = (0.01, 0.001)  # the false-positive rates the true-positive rate is reported at
MAX_HELDOUT = 500  # held-out images scored at most (drawn with the seed)
EXACT_UP_TO = 400  # up to this many given images every pair's SSIM is computed; beyond,
NEIGHBOURS = 16  # each image's nearest other is sought among its 16 most correlated ones


def scores(recon_ssim, neighbour_ssim) -> np.ndarray:
  """The membership score of each given image: its best reconstruction's SSIM less its SSIM
  with the nearest other given image (both [N]); a non-finite input scores -inf (lowest)."""
  s = np.asarray(recon_ssim, np.float64) - np.asarray(neighbour_ssim, np.float64)
  return np.where(np.isfinite(s), s, -np.inf)


def nearest_other(sim) -> np.ndarray:
  """Per row of a square similarity matrix [N, N], the largest entry off the diagonal
  (-inf for a single image)."""
  s = np.array(sim, np.float64)
  np.fill_diagonal(s, -np.inf)
  return s.max(axis=1) if s.shape[1] else np.full(s.shape[0], -np.inf)


def roc_curve(scores_, is_member):
  """The ROC curve of ``scores_`` [N] against ``is_member`` [N] (bool): ``(fpr, tpr)``,
  both from 0 to 1, one point per distinct score (an image is called a member when its
  score is at least the threshold)."""
  s = np.asarray(scores_, np.float64).reshape(-1)
  y = np.asarray(is_member, bool).reshape(-1)
  pos, neg = max(int(y.sum()), 1), max(int((~y).sum()), 1)
  thresholds = np.unique(s)[::-1]
  tp = np.array([np.sum(y & (s >= t)) for t in thresholds], np.float64)
  fp = np.array([np.sum(~y & (s >= t)) for t in thresholds], np.float64)
  return np.r_[0.0, fp / neg], np.r_[0.0, tp / pos]


def tpr_at_fpr(scores_, is_member, fpr: float) -> float:
  """The largest true-positive rate at a threshold whose false-positive rate is at most
  ``fpr`` (a threshold above every score gives 0 and 0).  With h held-out images the
  false-positive rate moves in steps of 1/h: below that, no held-out image may score at or
  above the threshold."""
  f, t = roc_curve(scores_, is_member)
  return float(np.max(t[f <= fpr + 1e-12]))


def smallest_p(n_members: int, n_others: int, permutations: int = PERMUTATIONS) -> float:
  """The smallest p-value :func:`permutation_p` can give: one over the number of ways to
  call ``n_members`` of the images members, or over ``permutations + 1``, whichever is
  larger."""
  ways = math.comb(int(n_members) + int(n_others), int(n_members))  # may exceed any float
  return 1.0 / (int(permutations) + 1) if ways > int(permutations) else 1.0 / ways


# Relabellings kept for reuse, by their total size: a report scores the same given images by
# several tests with one seed, and each test's permutation test draws the same relabellings.
REUSE_UP_TO = 10_000_000  # int32 entries (40 MB) at most


@functools.lru_cache(maxsize=2)
def _relabellings(n: int, n_pos: int, permutations: int, seed: int) -> tuple:
  """The relabellings :func:`permutation_p` draws: ``permutations`` picks of ``n_pos`` of
  ``n`` images, in chunks of 2,000 (bounded memory), drawn from ``seed``."""
  rng = np.random.default_rng(seed)
  out = []
  for start in range(0, int(permutations), 2000):
    k = min(2000, int(permutations) - start)
    out.append(rng.permuted(np.tile(np.arange(n), (k, 1)), axis=1)[:, :n_pos].astype(np.int32))
  return tuple(out)


def permutation_p(scores_, is_member, permutations: int = PERMUTATIONS, seed: int = 0) -> float:
  """The p-value of the AUC under the null hypothesis that the labels are exchangeable (the
  training images are scored like any other given image): ``(1 + #{permuted AUC >= AUC})
  / (1 + permutations)``, over random relabellings that keep the number of members (drawn
  from ``seed``; the same relabellings serve every test of the same images and seed)."""
  s = np.asarray(scores_, np.float64).reshape(-1)
  y = np.asarray(is_member, bool).reshape(-1)
  n_pos, n = int(y.sum()), s.size
  if n_pos == 0 or n_pos == n:
    return float("nan")
  ranks = ranking._average_ranks(s)
  observed = ranks[y].sum()
  if int(permutations) * n_pos <= REUSE_UP_TO:
    chunks = _relabellings(n, n_pos, int(permutations), int(seed))
  else:
    chunks = _relabellings.__wrapped__(n, n_pos, int(permutations), int(seed))
  total = sum(int(np.sum(ranks[picks].sum(axis=1) >= observed - 1e-9)) for picks in chunks)
  return (1.0 + total) / (1.0 + int(permutations))


def separation(
  scores_,
  is_member,
  *,
  level: float = LEVEL,
  permutations: int = PERMUTATIONS,
  seed: int = 0,
  fprs: Sequence[float] = FPRS,
) -> dict:
  """How well ``scores_`` [N] tells the members (``is_member`` [N]) from the others.

  Returns ``{"auc", "tpr_at_fpr": {"0.01": ..., "0.001": ...}, "p_value", "level",
  "smallest_p", "testable" (whether p can reach the level at all with these numbers of
  images), "significant" (p <= level), "n_members", "n_others"}``; the AUC and p are NaN
  (``None`` in the dict) when either set is empty.
  """
  y = np.asarray(is_member, bool).reshape(-1)
  n_pos, n_neg = int(y.sum()), int((~y).sum())
  auc = ranking.auc_mann_whitney(scores_, y)
  p = permutation_p(scores_, y, permutations, seed) if n_pos and n_neg else float("nan")
  small = smallest_p(n_pos, n_neg, permutations) if n_pos and n_neg else 1.0
  finite = lambda v: float(v) if np.isfinite(v) else None
  return {
    "auc": finite(auc),
    "tpr_at_fpr": {
      f"{f:g}": finite(tpr_at_fpr(scores_, y, f)) if n_pos and n_neg else None for f in fprs
    },
    "p_value": finite(p),
    "level": float(level),
    "smallest_p": small,
    "testable": bool(small <= level),
    "significant": bool(np.isfinite(p) and p <= level),
    "n_members": n_pos,
    "n_others": n_neg,
  }


def image_scores(
  candidate_sets: Sequence[np.ndarray],
  given: np.ndarray,
  references: Optional[np.ndarray] = None,
  *,
  filter_size: Optional[int] = None,
) -> dict:
  """The membership score of every ``given`` image [N, H, W, C] (pixel space, training and
  held-out alike) from the attack's candidates: each of ``candidate_sets`` (pixel space,
  e.g. the pooled restarts and each restart's own) is matched to the given images with
  voting, and an image keeps its best reconstruction's SSIM over the sets; its SSIM with
  the nearest other given image, or with one of ``references`` [K, H, W, C] if closer
  (what the attacker has without any attack, e.g. the training mean it was handed), is
  subtracted (:func:`scores`).

  Returns ``{"score", "recon_ssim", "neighbour_ssim"}``, each [N].
  """
  from recon_jax.eval import images, similarity

  given_s = similarity.stretch(given)
  fs = similarity.resolve_filter_size(filter_size, given.shape[1], given.shape[2])
  best = np.full(len(given), -np.inf)
  for cands in candidate_sets:
    if len(cands) == 0:
      continue
    recon, _, _ = images.match_and_vote(given_s, similarity.stretch(cands))
    best = np.maximum(best, np.asarray(similarity.ssim(recon, given_s, filter_size=fs)))
  neighbour = nearest_neighbour_ssim(given_s, fs)
  if references is not None and len(references):
    refs = similarity.stretch(references)
    near_ref = np.asarray(similarity.ssim_matrix(given_s, refs, fs)).max(axis=1)
    neighbour = np.maximum(neighbour, near_ref)
  return {"score": scores(best, neighbour), "recon_ssim": best, "neighbour_ssim": neighbour}


def nearest_neighbour_ssim(images, filter_size: int, exact_up_to: int = EXACT_UP_TO) -> np.ndarray:
  """Per image of ``images`` [N, H, W, C] (stretched), its highest SSIM with another of them:
  every pair up to ``exact_up_to`` images; beyond, the SSIM of its :data:`NEIGHBOURS` most
  correlated others (normalised cross-correlation, one matrix product), the same rule for
  every image, so N^2 SSIMs become N x NEIGHBOURS."""
  from recon_jax.eval import similarity

  n = len(images)
  if n <= exact_up_to:
    return nearest_other(np.asarray(similarity.ssim_matrix(images, images, filter_size)))
  top = similarity.most_correlated(images, images, NEIGHBOURS, exclude_self=True)
  k = top.shape[1]
  a = np.repeat(np.asarray(images), k, axis=0)
  b = np.asarray(images)[top.reshape(-1)]
  return np.asarray(similarity.ssim(a, b, filter_size=filter_size)).reshape(n, k).max(axis=1)


def near_duplicates(a, b, rms: float = 1.0 / 255) -> list:
  """Pairs ``(i, j)`` of images ``a[i]`` and ``b[j]`` (any shape [N, ...], same pixel scale)
  whose root-mean-square pixel difference is at most ``rms`` (default: one grey level of an
  8-bit image): copies, or copies re-encoded.  Computed from inner products, in blocks."""
  if not len(a) or not len(b):
    return []
  a = np.asarray(a, np.float64).reshape(len(a), -1)
  b = np.asarray(b, np.float64).reshape(len(b), -1)
  d = a.shape[1]
  nb = np.sum(b * b, axis=1)
  out = []
  for start in range(0, len(a), 256):
    blk = a[start : start + 256]
    sq = np.sum(blk * blk, axis=1)[:, None] + nb[None, :] - 2.0 * blk @ b.T
    i, j = np.nonzero(np.maximum(sq, 0.0) / d <= rms * rms + 1e-12)
    out += [(int(start + p), int(q)) for p, q in zip(i, j)]
  return out
