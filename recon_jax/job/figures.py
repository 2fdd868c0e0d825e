"""The main job's figures: Haim et al.'s Fig. 3 and Fig. 4 layouts, the candidates the
attacker trusts and the identifiability witness (PNG); :func:`reconstruction_figures` draws
those a reconstruction's metrics call for.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from recon_jax.eval.images import EvalResult
from recon_jax.eval.metrics_json import Identifiability, Identification, Membership, Metrics
from recon_jax.eval.verdict import strongest_line
from recon_jax.io import plots


def _or_nan(v: Optional[float]) -> float:
  """``v``, or NaN where the report holds none (a title says ``nan``, as before)."""
  return float("nan") if v is None else v


def reconstruction_figure(
  path: Union[str, os.PathLike],
  result: EvalResult,
  x_train_disp: Any,
  x_heldout_disp: Optional[Any],
  k: int = 45,
  title: Optional[str] = None,
) -> None:
  """Haim Fig. 3 layout from an `EvalResult`, plus the held-out check, readable on its own.

  Row 1: the best reconstruction of each shown training image, best first,
  titled with its SSIM to that image and a '*' when strictly recovered; row 2:
  the training images; row 3: for each reconstruction the held-out image (never
  seen by the victim) it resembles most, titled with that SSIM.  Rows longer
  than 15 images wrap into blocks.  The title says how many images are shown
  and the result; a caption under the grid says what the rows and numbers are.

  Args:
    path: Output PNG path.
    result: Output of `recon_jax.eval.images.evaluate`.
    x_train_disp: Training images [n, H, W, C]; each is shown over its own range.
    x_heldout_disp: Held-out images [h, H, W, C] (likewise), or None to omit row 3.
    k: Number of reconstructions shown (capped at n).
    title: Optional first title line (default: which images are shown).
  """
  import textwrap

  n = int(result.n_train)
  order = np.asarray(result.order)[: max(1, min(int(k), n))]
  rows = [np.asarray(result.recon)[order], np.asarray(x_train_disp)[order]]
  numbers = [
    [f"{result.ssim[i]:.2f}{'*' if result.recovered_strict_mask[i] else ''}" for i in order],
    None,
  ]
  labels = ["best\nreconstruction", "training\nimage"]
  near = np.asarray(result.nearest_heldout_idx)[order]
  held = x_heldout_disp is not None and np.all(near >= 0)
  if held:
    rows.append(np.asarray(x_heldout_disp)[near])
    numbers.append([f"{result.ssim_heldout_max[i]:.2f}" for i in order])
    labels.append("nearest\nheld-out")
  shown = (
    f"all {n} training images"
    if len(order) == n
    else f"the {len(order)} of {n} training images reconstructed best"
  )
  head = [
    title or f"Reconstructions of {shown}, best first",
    f"strictly recovered: {result.recovered_strict}/{n}",
  ]
  notes = [
    f"Row 1: the reconstruction of the training image under it (row 2); the number over "
    f"it is their SSIM (1 = identical); * = strictly recovered: SSIM >= "
    f"{result.ssim_threshold:.2f} and higher than its SSIM with every held-out image."
  ]
  if held:
    notes.append(
      "Row 3: the held-out image (never seen by the victim) most similar to the "
      "reconstruction, with that SSIM over it. A reconstruction no closer to its "
      "training image than to this unseen one shows no memorised data."
    )
  n_cols = min(len(order), plots.DEFAULT_MAX_COLS)
  n_blocks = math.ceil(len(order) / n_cols)
  width = max(1.0 * n_cols + 1.0, 6.0)
  chars = int(width * 15)
  head_lines = sum(len(textwrap.wrap(t, int(width * 11))) for t in head)
  caption = "\n".join(textwrap.fill(t, chars) for t in notes)
  grid_h, head_h = 1.2 * n_blocks * len(rows), 0.28 * head_lines + 0.1
  cap_h = 0.16 * (caption.count("\n") + 1) + 0.15
  height = grid_h + head_h + cap_h
  fig, axes = plots.plt.subplots(
    n_blocks * len(rows), n_cols, figsize=(width, height), squeeze=False
  )
  for b in range(n_blocks):
    for r, row in enumerate(rows):
      for c in range(n_cols):
        ax = axes[b * len(rows) + r, c]
        j = b * n_cols + c
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
          spine.set_visible(False)
        if j < len(row):
          img, cmap = plots.to_display(row[j], stretch=True)
          ax.imshow(img, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
          if numbers[r] is not None:
            ax.set_title(numbers[r][j], fontsize=7, pad=2)
        if c == 0:
          ax.set_ylabel(labels[r], fontsize=7.5)
  left = 0.9 / width
  fig.subplots_adjust(
    left=left,
    right=1 - 0.1 / width,
    top=1 - head_h / height,
    bottom=cap_h / height,
    wspace=0.05,
    hspace=0.35,
  )
  fig.suptitle(
    "\n".join(textwrap.fill(t, int(width * 11)) for t in head),
    fontsize=10,
    y=1 - 0.05 / height,
    va="top",
  )
  fig.text(0.1 / width, 0.05 / height, caption, fontsize=7, ha="left", va="bottom")
  plots.save(fig, path)


def ssim_vs_margin(
  path: Union[str, os.PathLike],
  margins: Any,
  ssim: Any,
  threshold_lines: Sequence[float] = (0.4,),
  strict_mask: Optional[Any] = None,
  title: Optional[str] = None,
) -> None:
  """Scatter of per-sample SSIM against the margin y * Phi(x) (Haim Fig. 4), readable alone.

  Args:
    path: Output PNG path.
    margins: [n] margins y_i * Phi(theta; x_i).
    ssim: [n] best SSIM per training sample.
    threshold_lines: SSIM values drawn as labelled horizontal lines: 0.4 is
      Haim et al.'s "recovered" level, any other the strict threshold.
    strict_mask: Optional [n] bool; strictly recovered samples highlighted.
    title: Optional title (default: what the plot shows).
  """
  margins = np.asarray(margins, dtype=np.float64).reshape(-1)
  ssim = np.asarray(ssim, dtype=np.float64).reshape(-1)
  fig, ax = plots.plt.subplots(figsize=(5.6, 4.2))
  if strict_mask is None:
    ax.scatter(margins, ssim, s=14, c="tab:blue", label="training image")
  else:
    strict_mask = np.asarray(strict_mask, dtype=bool).reshape(-1)
    ax.scatter(
      margins[~strict_mask],
      ssim[~strict_mask],
      s=14,
      c="tab:gray",
      label=f"not strictly recovered ({int((~strict_mask).sum())})",
    )
    ax.scatter(
      margins[strict_mask],
      ssim[strict_mask],
      s=18,
      c="tab:red",
      label=f"strictly recovered ({int(strict_mask.sum())})",
    )
  styles = iter([("--", "k"), (":", "tab:red"), ("-.", "tab:purple")])
  for t in sorted({float(v) for v in threshold_lines}):
    ls, colour = next(styles, ("--", "k"))
    name = "SSIM 0.4 (Haim et al.)" if np.isclose(t, 0.4) else f"strict threshold {t:.2f}"
    if np.isclose(t, 0.4) and len(set(threshold_lines)) == 1 and strict_mask is not None:
      name = "SSIM 0.4 (Haim et al.; also the strict threshold)"
    ax.axhline(t, ls=ls, lw=1.0, c=colour, label=name)
  ax.set_xlabel(r"margin $y\,\Phi(\theta; x)$ of the training image (small: on the margin)")
  ax.set_ylabel("SSIM of its best reconstruction")
  finite = ssim[np.isfinite(ssim)]
  ax.set_ylim(min(-0.05, float(finite.min()) - 0.05) if finite.size else -0.05, 1.05)
  ax.set_title(
    title
    or f"Reconstruction quality vs margin, {ssim.size} training images\n"
    "(Haim et al. Fig. 4: samples on the margin are reconstructed best)",
    fontsize=9,
  )
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="best", framealpha=0.9)
  plots.save(fig, path, dpi=120)


def reconstruction_report(
  figdir: Union[str, os.PathLike],
  result: Any,
  x_train: np.ndarray,
  x_held: Optional[np.ndarray],
  train_margins: Optional[Any],
  ssim_threshold: float,
  prefix: str = "",
) -> None:
  """The two figures of a reconstruction run (pixel-space images in, PNGs out).

  ``reconstructions.png``: each training image under its best reconstruction
  (and the nearest held-out image); ``ssim_vs_margin.png`` (when the training
  margins are known): SSIM of each training image's reconstruction against its
  margin, Haim et al. Fig. 4.
  """

  os.makedirs(figdir, exist_ok=True)
  reconstruction_figure(
    os.path.join(figdir, f"{prefix}reconstructions.png"),
    result,
    x_train,
    x_held,
    k=min(45, len(x_train)),
  )
  if train_margins is not None:
    ssim_vs_margin(
      os.path.join(figdir, f"{prefix}ssim_vs_margin.png"),
      np.asarray(train_margins),
      result.ssim,
      threshold_lines=(0.4, ssim_threshold),
      strict_mask=result.recovered_strict_mask,
    )


def trusted_figure(
  path: Union[str, os.PathLike],
  identification: Union[Identification, Mapping[str, Any]],
  candidates: np.ndarray,
  x_train: np.ndarray,
) -> None:
  """The candidates an attacker would trust most (by its pre-registered score), over the truth.

  ``identification`` is the report of :func:`recon_jax.eval.trusted.identification_report`
  (metrics.json's ``identification``, read typed); ``candidates`` [R, m, H, W, C] and
  ``x_train`` in pixel space.  Each column: a trusted candidate (its score, and whether it is
  a strict recovery), under it the training image it resembles most.
  """
  identification = Identification.of(identification)
  top = identification.top
  if not top:
    return
  cands = np.stack([candidates[t.restart, t.index] for t in top])
  nearest = np.stack([x_train[t.train_idx] for t in top])
  labels = [f"score {t.score:.2f}\n{'REAL' if t.recovered_strict else 'not real'}" for t in top]
  real = sum(bool(t.recovered_strict) for t in top)
  plots.image_grid(
    path,
    [cands, nearest],
    row_labels=["trusted\ncandidate", "most similar\ntraining image"],
    stretch=True,
    col_titles=[labels, None],
    title=(
      f"The {len(top)} candidates the attacker trusts most by '{identification.trusted_score}'"
      f" (no ground truth used): {real} of {len(top)} are real (strict recoveries)"
    ),
  )


def witness_figure(
  path: Union[str, os.PathLike],
  identifiability: Union[Identifiability, Mapping[str, Any]],
  witness: np.ndarray,
  x_train: np.ndarray,
  max_images: int = 10,
) -> None:
  """The training images over other images that fit the stationarity equations as well.

  ``witness`` and ``x_train`` [n, H, W, C] in pixel space; ``identifiability`` the report
  of :func:`recon_jax.eval.identifiability.identifiability` (metrics.json's, read typed),
  whose ``family`` made the witness.
  """
  identifiability = Identifiability.of(identifiability)
  fam = identifiability.family
  k = min(max_images, len(x_train))
  moved = np.sqrt(np.sum((witness - x_train).reshape(len(x_train), -1) ** 2, axis=1))
  order = np.argsort(-moved)[:k]  # the images the family moves most
  plots.image_grid(
    path,
    [np.clip(x_train[order], 0, 1), np.clip(witness[order], 0, 1)],
    row_labels=["training\nimage", "other image,\nsame fit"],
    col_titles=[[f"#{i}" for i in order], None],
    title=(
      f"Top: training images. Bottom: the same samples moved along {fam.dimension} flat "
      "directions, inside the pixel box.\nStationarity residual of the whole set: "
      f"{identifiability.truth_residual:.3g} (training set), "
      f"{_or_nan(fam.witness_residual):.3g} (moved): the equations cannot tell "
      "them apart"
    ),
  )


def candidates_figure(
  path: Union[str, os.PathLike], candidates: np.ndarray, weights, title: Optional[str] = None
) -> None:
  """A restart's candidates in pixel space, by descending multiplier (the attacker's own
  trust): a blind attack's (no training images to compare with), or those that fit the
  model far better than the images given as its training set (``title`` says which)."""
  cands = np.asarray(candidates)
  w = np.asarray(weights, np.float64).reshape(-1)
  order = np.argsort(-w, kind="stable")[:20]
  titles = [f"lambda {w[i]:.3g}" for i in order]
  if len(set(titles)) < len(titles):  # multipliers that do not tell them apart: the rank
    titles = [f"#{k + 1}" for k in range(len(order))]
  plots.image_grid(
    path,
    [cands[order]],
    row_labels=["candidate"],
    col_titles=titles,
    title=title
    or "A blind attack's candidates, by the attacker's trust (no training images given)",
    stretch=True,
  )


def _roc_curve(train, held):
  """``(fpr, tpr)`` of scores ``train`` (positives) against ``held``, None entries dropped."""
  from recon_jax.eval import membership as mem

  train = np.asarray([v for v in train or () if v is not None], float)
  held = np.asarray([v for v in held or () if v is not None], float)
  return mem.roc_curve(np.r_[train, held], np.arange(train.size + held.size) < train.size)


def roc_figure(
  path: Union[str, os.PathLike], membership: Union[Membership, Mapping[str, Any]]
) -> None:
  """Every membership test's ROC curve on one pair of log axes (as privacy audits draw them:
  what matters is the true-positive rate where false positives are rare), from the per-image
  scores in metrics.json's ``membership`` (read typed): the reconstruction's score
  (:func:`recon_jax.eval.scoring.membership_report`) and each of ``membership.tests`` (the
  weights' tests and the loss and confidence baselines), with the chance line; the title
  names the strongest test at 0.1% FPR and the loss baseline beside it."""
  membership = Membership.of(membership)
  curves = []  # (label, train scores, held-out scores, style)
  tests = dict(membership.tests or {})
  if membership.scores_train and "reconstruction" not in tests:
    curves.append(("reconstruction", membership.scores_train, membership.scores_heldout, "-"))
  for name, t in tests.items():
    style = "--" if t.kind == "baseline" else "-"
    curves.append((name, t.scores_train, t.scores_heldout, style))
  n_held = max((len(c[2] or ()) for c in curves), default=1)
  n_train = max((len(c[1] or ()) for c in curves), default=0)
  floor = 0.5 / max(n_held, 1)  # below the smallest false-positive rate the data resolve
  low = 0.5 / max(n_train, 1)  # ... and the smallest true-positive rate
  fig, ax = plots.plt.subplots(figsize=(5.2, 4.6))
  for label, train, held, style in curves:
    fpr, tpr = _roc_curve(train, held)
    auc = membership.auc if label == "reconstruction" else tests[label].auc
    ax.step(
      np.maximum(fpr, floor),
      np.maximum(tpr, low),
      where="post",
      ls=style,
      lw=1.5,
      label=f"{label} (AUC {_or_nan(auc):.2f})",
    )
  grid = np.logspace(np.log10(floor), 0, 50)
  ax.plot(grid, grid, ls=":", c="k", lw=0.8, label="chance")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(floor, 1.02)
  ax.set_ylim(low, 1.02)
  ax.set_xlabel(f"false-positive rate ({n_held} held-out images)")
  ax.set_ylabel(f"true-positive rate ({n_train} training images)")
  ax.set_title(f"Membership: each test's ROC\n{strongest_line(membership)}", fontsize=8)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7, loc="lower right")
  plots.save(fig, path, dpi=120)


def reconstruction_figures(
  figdir: Union[str, os.PathLike],
  metrics: Union[Metrics, Mapping[str, Any]],
  arrays: Mapping[str, np.ndarray],
  ds: Any,
  result: Any,
  train_margins: Optional[Any],
) -> None:
  """Every figure a reconstruction's ``metrics`` (its report typed,
  :class:`recon_jax.eval.metrics_json.Metrics`, or metrics.json's dict) call for, into
  ``figdir``: a blind attack's candidates (candidates.png), the reconstructions of the
  EvalResult ``result`` (:func:`reconstruction_report`), the identifiability witness
  (identifiability.png) and the trusted candidates (trusted.png).  ``arrays``:
  reconstructions.npz's; ``ds``: the dataset, whose ``mean`` puts the images back in pixel
  space."""
  metrics = Metrics.of(metrics)
  best = metrics.selection.best_by_loss_restart
  fits = metrics.identifiability.best_restart
  if metrics.wrong_data and fits is not None:  # what the model was trained on, more likely
    best = fits
  if (metrics.blind or metrics.wrong_data) and best is not None:
    candidates_figure(
      os.path.join(figdir, "candidates.png"),
      arrays["candidates"][best] + ds.mean,
      arrays["weights"][best],
      None
      if metrics.blind
      else "The candidates of the restart that fits the equations best, by the attacker's "
      "trust:\nthey fit the model far better than the images given as its training set",
    )
  if result is not None:
    reconstruction_report(
      figdir,
      result,
      ds.x_train + ds.mean,
      ds.x_test + ds.mean if len(ds.x_test) else None,
      train_margins,
      metrics.evaluation.ssim_threshold,
    )
  if metrics.identifiability.family.confirmed and "family_witness" in arrays:
    witness_figure(
      os.path.join(figdir, "identifiability.png"),
      metrics.identifiability,
      arrays["family_witness"] + ds.mean,
      ds.x_train + ds.mean,
    )
  if metrics.membership.auc is not None or metrics.membership.tests:
    roc_figure(os.path.join(figdir, "roc.png"), metrics.membership)
  if metrics.identification is not None:
    trusted_figure(
      os.path.join(figdir, "trusted.png"),
      metrics.identification,
      arrays["candidates"] + ds.mean,
      ds.x_train + ds.mean,
    )
