"""The one evaluation every attack's candidates go through (Haim et al. App. B.3).

Candidates from all restarts are pooled, put back into pixel space (training
mean added), stretched, matched to training images by NCC with voting, and
scored by SSIM.  Next to the paper's counts it reports the evidence a privacy
audit needs: strict recovery (closer to the training image than to every
held-out image, above a by-eye threshold), the same pipeline run on two
baselines (the training-mean image; unseen held-out images), and the
attacker-side view: how well the attacker's own loss ranks restarts and its
lambda ranks candidates, measured against the truth (Spearman).
"""

from __future__ import annotations

from typing import Optional
import warnings

import numpy as np

from recon_jax import data
from recon_jax.core import arguments
from recon_jax.errors import ConfigError
from recon_jax.eval import images, similarity
from recon_jax.eval.similarity import Array


def pixel_space(x, ds: data.Dataset) -> np.ndarray:
  return np.asarray(x, np.float32) + np.asarray(ds.mean, np.float32)


_GROUP_COUNTS = ("recovered_strict", "n_ssim_gt_0.4")


def evaluate_candidates(
  cands,
  weights,
  final_loss,
  ds: data.Dataset,
  *,
  ssim_threshold: Optional[float] = None,
  filter_size: Optional[int] = None,
  seed: int = 0,
  also=(),
) -> dict:
  """Scores an attack's candidates against the training set and the baselines.

  Args:
    cands: [R, m, H, W, C] candidates of R restarts (attack input space).
    weights: [R, m] attacker-side confidence per candidate (lambda for KKT).
    final_loss: [R] attacker-side final loss per restart (NaN/inf if diverged).
    ds: the dataset (ground truth; only the evaluation sees it).
    ssim_threshold: strict-recovery SSIM threshold; default by image height.
    filter_size: SSIM filter size; default by image height.
    seed: seed of the held-out baseline draw.
    also: more images the attacker read, a sequence of [k, H, W, C] arrays (the cone's
      before its hand-over to a search, the facets the search's candidates led to): each
      scored as one more group beside the restarts, so a training image any of them holds
      counts; the held-out baseline draws as many images more, and scores them so too.

  Returns:
    JSON-serialisable dict: ``attack`` (the pooled evaluation), ``also`` (each group's own
    ``n_candidates``, ``recovered_strict`` and ``n_ssim_gt_0.4``), ``baselines``,
    ``per_restart`` and ``selection`` entries, plus the EvalResult under
    ``_result`` (not serialisable; pop it before writing JSON).
  """
  cands, also = _checked(cands, weights, final_loss, ds, ssim_threshold, filter_size, seed, also)
  cands = np.asarray(cands)
  r, m = cands.shape[:2]
  img_shape = cands.shape[2:]
  height = img_shape[0]
  thr = ssim_threshold if ssim_threshold is not None else images.strict_threshold_for(height)
  x_train = pixel_space(ds.x_train, ds)
  x_held = pixel_space(ds.x_test, ds) if len(ds.x_test) else None
  final_loss = np.asarray(final_loss, np.float64)
  ok = np.isfinite(final_loss)
  pooled = pixel_space(cands[ok].reshape(-1, *img_shape), ds)
  kw = dict(ssim_threshold=thr, filter_size=filter_size)
  res = None
  if len(pooled) == 0:
    # Every restart diverged, or the attack found no candidate (a cone without a facet):
    # nothing to score, and nothing is recovered.
    out = {"attack": _nothing_scored(len(x_train), thr, ok), "per_sample": {}}
  per, own = _per_restart(cands, final_loss, ds, x_train, x_held, kw)
  # A training image counts as recovered when the pooled reconstruction, any restart's own
  # or a group of ``also`` passes the strict rule (images.combine): the pool is never below
  # a restart.
  parts = [images.evaluate(pooled, x_train, x_held, **kw), *own] if own else []
  groups = [
    images.evaluate(pixel_space(a, ds), x_train, x_held, **kw) if len(a) else None for a in also
  ]
  parts += [g for g in groups if g is not None]
  k = sum(len(a) for a in also)
  if parts:
    res = images.combine(parts)
    out = {"attack": res.summary(), "per_sample": res.to_dict()}
  base_mean = images.mean_image_baseline(
    x_train, x_held, pixel_space(np.zeros(img_shape), ds), **kw
  )
  out["baselines"] = {"mean_image": base_mean.summary()}
  if x_held is not None:
    # Half the held-out split at most, so the rest stays as the strict reference; scored as
    # the attack's candidates are (pooled, and in groups of m like its restarts; the k images
    # of ``also`` are drawn too, and make about as many groups more).
    num = int(min(len(pooled) + k, len(x_held) // 2))
    base_held = images.heldout_baseline(seed, x_train, x_held, num, group=m, **kw)
    out["baselines"]["heldout"] = base_held.summary()
  out["per_restart"] = per
  # each group of ``also`` on its own (what the cone read alone, before its hand-over)
  out["also"] = [
    {"n_candidates": len(a), "recovered_strict": 0, "n_ssim_gt_0.4": 0}
    if g is None
    else {"n_candidates": len(a), **{key: g.summary()[key] for key in _GROUP_COUNTS}}
    for a, g in zip(also, groups)
  ]
  out["selection"] = _selection(per, ok, weights, pooled, x_train, filter_size, res)

  out["_result"] = res
  return out


def _checked(cands, weights, final_loss, ds, ssim_threshold, filter_size, seed, also):
  """:func:`evaluate_candidates`' arguments checked: ``(cands, also)`` as arrays."""
  img = tuple(np.shape(ds.x_train)[1:])
  cands = arguments.array(  # no candidate (an attack that found none) recovers nothing
    "cands", cands, shape=(None, None, *img), ndim=2 + len(img), finite=False, nonempty=False
  )
  r, m = cands.shape[:2]
  if r == 0:
    raise ConfigError(f"cands holds no restart (shape {cands.shape}).", "cands")
  arguments.array("weights", weights, shape=(r, m), min_ndim=2, finite=False, nonempty=False)
  arguments.array("final_loss", final_loss, shape=(r,), ndim=1, finite=False)
  if ssim_threshold is not None:
    arguments.number("ssim_threshold", ssim_threshold, 0, 1)
    if ssim_threshold <= 0:
      raise ConfigError(
        f"ssim_threshold must be in (0, 1], got {ssim_threshold!r}.", "ssim_threshold"
      )
  if filter_size is not None:
    arguments.count("filter_size", filter_size)
  arguments.count("seed", seed, low=0)
  if not isinstance(also, (list, tuple)):
    raise ConfigError("also must be a sequence of image arrays (one per group).", "also")
  also = [
    arguments.array("also", a, shape=(None, *img), ndim=1 + len(img), nonempty=False) for a in also
  ]
  if len(ds.x_train) == 0:
    raise ConfigError("ds has no training images to score the candidates against.", "ds")
  return cands, also


def _nothing_scored(n_train: int, thr: float, ok) -> dict:
  """The pooled evaluation's counts where no candidate is scored."""
  return {
    "n_train": n_train,
    "n_candidates": 0,
    "recovered_strict": 0,
    "n_ssim_gt_0.4": 0,
    "n_ssim_gt_0.5": 0,
    "n_ssim_gt_0.6": 0,
    "mean_ssim_top10": None,
    "mean_ssim_top45": None,
    "ssim_threshold": thr,
    "all_restarts_diverged": not ok.any(),
  }


def _per_restart(cands, final_loss, ds, x_train, x_held, kw) -> tuple:
  """``(per, own)``: each restart's row on its own (the attacker's view, and its count),
  and the evaluations of those that finished with candidates."""
  r, m = cands.shape[:2]
  ok = np.isfinite(final_loss)
  per, own = [], []
  for i in range(r):  # each restart on its own: the attacker's view, and the pooled count
    if not ok[i]:
      per.append({"restart": i, "diverged": True, "final_loss": None})
      continue
    if m == 0:  # a restart without candidates recovers nothing
      per.append(
        {
          "restart": i,
          "diverged": False,
          "final_loss": float(final_loss[i]),
          "mean_ssim": None,
          "recovered_strict": 0,
          "n_ssim_gt_0.4": 0,
        }
      )
      continue
    ri = images.evaluate(pixel_space(cands[i], ds), x_train, x_held, **kw)
    own.append(ri)
    per.append(
      {
        "restart": i,
        "diverged": False,
        "final_loss": float(final_loss[i]),
        "mean_ssim": float(np.mean(ri.ssim)),
        "recovered_strict": int(ri.recovered_strict),
        "n_ssim_gt_0.4": int(ri.n_ssim_gt_04),
      }
    )
  return per, own


def _selection(per, ok, weights, pooled, x_train, filter_size, res) -> dict:
  """The restarts and the attacker's own pick among them, against the truth: does a lower
  loss mean a better restart, a larger lambda a better candidate?"""
  r = len(per)
  good = [p for p in per if not p["diverged"]]
  sel = {
    "n_restarts": r,
    "n_diverged": int(np.sum(~ok)),
    "diverged_restarts": [int(i) for i in np.flatnonzero(~ok)],
  }
  if good and res is not None:
    losses = np.array([p["final_loss"] for p in good])
    quality = np.array([p["mean_ssim"] for p in good])
    picked = good[int(np.argmin(losses))]
    # The truly best restart: the most strict recoveries, ties by mean SSIM.
    best_true = max(good, key=lambda p: (p["recovered_strict"], p["mean_ssim"]))
    sel.update(
      {
        "spearman_neg_loss_vs_mean_ssim": spearman(-losses, quality),
        "best_by_loss_restart": picked["restart"],
        "best_by_loss_mean_ssim": picked["mean_ssim"],
        "best_by_loss_recovered_strict": picked["recovered_strict"],
        "best_true_restart": best_true["restart"],
        "best_true_mean_ssim": best_true["mean_ssim"],
        "best_true_recovered_strict": best_true["recovered_strict"],
      }
    )
    # Candidate level: does a larger lambda mean closer to some training image?
    flat_w = np.asarray(weights)[ok].reshape(-1)
    cs = similarity.ssim_matrix(
      similarity.stretch(pooled), similarity.stretch(x_train), filter_size
    )
    cand_best = np.asarray(cs).max(axis=1)
    sel["spearman_weight_vs_candidate_ssim"] = spearman(flat_w, cand_best)
  return sel


def span_ceiling(basis, ds: data.Dataset, ssim_threshold: Optional[float] = None) -> dict:
  """What a reader of the first layer's change can give back at most: each training image
  projected on the change's span (``basis`` [d, k], orthonormal: the directions above its
  rounding noise, :func:`recon_jax.attacks.span.span_basis`), scored by the strict rule as
  candidates are.  An image whose projection fails it lies (partly) under that noise, and
  no decoder of the change recovers it exactly.

  Returns:
    ``{"span_dim": k, "recovered_strict": how many projections pass, "missing": the
    training indices whose projection does not}``.
  """
  x = np.asarray(ds.x_train, np.float64)
  if len(x) == 0:
    raise ConfigError("ds has no training images to project on the span.", "ds")
  basis = arguments.array("basis", basis, shape=(int(np.prod(x.shape[1:])), None), ndim=2)
  flat = x.reshape(len(x), -1)
  projected = ((flat @ basis) @ basis.T).reshape(x.shape)
  thr = ssim_threshold if ssim_threshold is not None else images.strict_threshold_for(x.shape[1])
  held = pixel_space(ds.x_test, ds) if len(ds.x_test) else None
  res = images.evaluate(
    pixel_space(projected, ds), pixel_space(ds.x_train, ds), held, ssim_threshold=thr
  )
  return {
    "span_dim": int(basis.shape[1]),
    "recovered_strict": int(res.recovered_strict),
    "missing": [int(i) for i in np.flatnonzero(~np.asarray(res.recovered_strict_mask))],
  }


def best_by_loss(final_loss) -> Optional[int]:
  """The restart of the lowest finite final loss, the attacker's own pick (None: every
  restart diverged)."""
  loss = np.asarray(final_loss, np.float64)
  ok = np.isfinite(loss)
  return int(np.nanargmin(np.where(ok, loss, np.inf))) if ok.any() else None


def unscored(final_loss) -> dict:
  """The ``selection`` and ``per_restart`` entries of a run with nothing to score its
  candidates against (a blind attack): each restart's final loss, and the lowest-loss one."""
  loss = np.asarray(final_loss, np.float64)
  ok = np.isfinite(loss)
  best = best_by_loss(loss)
  return {
    "selection": {
      "n_restarts": int(len(loss)),
      "n_diverged": int(np.sum(~ok)),
      "best_by_loss_restart": best,
    },
    "per_restart": [
      {"restart": i, "diverged": not ok[i], "final_loss": float(loss[i]) if ok[i] else None}
      for i in range(len(loss))
    ],
  }


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
