"""Figures for reconstruction experiments (PNG files via matplotlib's Agg backend).

Every function writes one PNG to `path` (creating parent folders) and closes
its figure, so long sweeps do not accumulate open figures.
"""

from __future__ import annotations

import math
import os
import textwrap
from typing import Any, Mapping, Optional, Sequence, Union

import matplotlib

# Headless machines have no display; select Agg before pyplot picks a backend.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from recon_jax.errors import ConfigError
from recon_jax.eval.images import EvalResult  # noqa: E402

# Haim et al. show at most 15 images per row (45 = 3 blocks of 15).
DEFAULT_MAX_COLS = 15

# Colours follow Haim Fig. 2: training classes blue/red, reconstructions
# green/magenta, so the two are distinguishable when overlaid.
_TRAIN_COLOURS = ("tab:blue", "tab:red")
_POINT_COLOURS = ("tab:green", "magenta")


def _caption(ax: Any, note: str) -> None:
  """A small wrapped caption under the x label (kept by the tight bounding box)."""
  import textwrap

  ax.annotate(
    textwrap.fill(note, 95),
    xy=(0.0, 0.0),
    xycoords="axes fraction",
    xytext=(-30, -34),
    textcoords="offset points",
    ha="left",
    va="top",
    fontsize=6.5,
  )


def _save(fig: Any, path: Union[str, os.PathLike], dpi: int = 100) -> None:
  """Writes the figure to `path` and closes it."""
  parent = os.path.dirname(os.fspath(path))
  if parent:
    os.makedirs(parent, exist_ok=True)
  try:
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
  finally:
    plt.close(fig)


def _to_display(img: Any) -> tuple[np.ndarray, Optional[str]]:
  """Converts [H, W], [H, W, 1] or [H, W, 3] to an imshow-ready array."""
  arr = np.asarray(img, dtype=np.float64)
  if arr.ndim == 3 and arr.shape[-1] == 1:
    arr = arr[..., 0]
  if arr.ndim not in (2, 3):
    raise ConfigError(f"expected an image [H, W(, C)], got shape {arr.shape}")
  # Non-finite pixels would make imshow complain; show them as black.
  arr = np.clip(np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
  return arr, ("gray" if arr.ndim == 2 else None)


def _label_colours(labels: Any, palette: Sequence[str]) -> list[str]:
  """Maps labels in {-1, +1} or {0, 1} to two colours (positive -> second)."""
  return [palette[1] if float(v) > 0 else palette[0] for v in np.asarray(labels).reshape(-1)]


def image_grid(
  path: Union[str, os.PathLike],
  rows: Sequence[Any],
  row_labels: Optional[Sequence[str]] = None,
  col_titles: Optional[Sequence[Any]] = None,
  title: Optional[str] = None,
  max_cols: int = DEFAULT_MAX_COLS,
) -> None:
  """Draws rows of images, wrapping long rows into stacked blocks.

  With k images per row and more than `max_cols` columns, the rows are cut
  into ceil(k / max_cols) blocks and each block repeats all rows (Haim
  Fig. 3: reconstructions above their nearest neighbours).

  Args:
    path: Output PNG path.
    rows: List of image arrays [k, H, W, C] (C = 1 or 3) or [k, H, W],
      values in [0, 1] (clipped). Rows may differ in k; gaps stay blank.
    row_labels: Optional label per row, shown at the left of each block.
    col_titles: Optional titles: a list of k strings (shown above the
      first row), or a list with one entry per row, each None or a list
      of k strings.
    title: Optional figure title.
    max_cols: Maximum number of columns per block.
  """
  rows = [np.asarray(r) for r in rows]
  n_rows = len(rows)
  if n_rows == 0:
    raise ConfigError("image_grid needs at least one row")
  k_max = max(int(r.shape[0]) for r in rows)
  if k_max == 0:
    raise ConfigError("image_grid needs at least one image")
  n_cols = min(k_max, max_cols)
  n_blocks = math.ceil(k_max / n_cols)

  per_row_titles: list[Optional[Sequence[str]]] = [None] * n_rows
  if col_titles is not None and len(col_titles) > 0:
    if isinstance(col_titles[0], str):
      per_row_titles[0] = col_titles
    else:
      for i, t in enumerate(col_titles[:n_rows]):
        per_row_titles[i] = t

  cell = 1.0
  width = cell * n_cols + 1.0
  # Room above the grid for the title (wrapped to the figure's width) and for the first
  # row's column titles, so neither overlaps the other.
  if title:
    chars = max(int(width * 13), 40)
    title = "\n".join(textwrap.fill(part, chars) for part in str(title).split("\n"))
  title_lines = title.count("\n") + 1 if title else 0
  col_lines = max([str(t).count("\n") + 1 for t in (per_row_titles[0] or []) if t] or [0])
  top_in = 0.2 * title_lines + 0.14 * col_lines + 0.1
  height = cell * n_blocks * n_rows * 1.15 + 0.4 + top_in
  fig, axes = plt.subplots(n_blocks * n_rows, n_cols, figsize=(width, height), squeeze=False)
  for b in range(n_blocks):
    for r in range(n_rows):
      for c in range(n_cols):
        ax = axes[b * n_rows + r, c]
        j = b * n_cols + c
        # Spines and ticks hidden (not axis('off')) so ylabel still shows.
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
          spine.set_visible(False)
        if j < rows[r].shape[0]:
          img, cmap = _to_display(rows[r][j])
          ax.imshow(img, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
          titles = per_row_titles[r]
          if titles is not None and j < len(titles) and titles[j]:
            ax.set_title(str(titles[j]), fontsize=7, pad=2)
        if c == 0 and row_labels is not None and r < len(row_labels):
          ax.set_ylabel(str(row_labels[r]), fontsize=8, rotation=90)
  if title:
    fig.suptitle(title, fontsize=10, y=1 - 0.05 / height, va="top")
  fig.subplots_adjust(wspace=0.05, hspace=0.35, top=1 - top_in / height, bottom=0.2 / height)
  _save(fig, path)


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
    x_train_disp: Training images for display [n, H, W, C] in [0, 1].
    x_heldout_disp: Held-out images for display [h, H, W, C] in [0, 1],
      or None to omit row 3.
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
  n_cols = min(len(order), DEFAULT_MAX_COLS)
  n_blocks = math.ceil(len(order) / n_cols)
  width = max(1.0 * n_cols + 1.0, 6.0)
  chars = int(width * 15)
  head_lines = sum(len(textwrap.wrap(t, int(width * 11))) for t in head)
  caption = "\n".join(textwrap.fill(t, chars) for t in notes)
  grid_h, head_h = 1.2 * n_blocks * len(rows), 0.28 * head_lines + 0.1
  cap_h = 0.16 * (caption.count("\n") + 1) + 0.15
  height = grid_h + head_h + cap_h
  fig, axes = plt.subplots(n_blocks * len(rows), n_cols, figsize=(width, height), squeeze=False)
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
          img, cmap = _to_display(row[j])
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
  _save(fig, path)


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
  fig, ax = plt.subplots(figsize=(5.6, 4.2))
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
  _save(fig, path, dpi=120)


def points_2d_panels(
  path: Union[str, os.PathLike],
  panels: Sequence[Mapping[str, Any]],
  *,
  title: Optional[str] = None,
  ncols: Optional[int] = None,
  axis_labels: tuple[str, str] = ("$x_1$", "$x_2$"),
  legend: bool = True,
) -> None:
  """Panels of 2-D scatter plots for the toy experiment (Haim Fig. 2).

  Training points are drawn as crosses (label -1 blue, +1 red), candidates as
  dots (label -1 green, +1 magenta), a field as filled contours with its zero
  level (the decision boundary) in black.

  Each panel is a dict with optional keys:
    'title': str.
    'train' [n, 2] and 'train_labels' [n]: training points, drawn as 'x'.
    'points' [k, 2] with 'colors' (k colour specs) or 'labels' [k].
    'field': (xs [gx], ys [gy], values [gy, gx]) drawn with contourf,
      plus the zero level as the decision boundary.

  Args:
    path: Output PNG path.
    panels: The panel dicts, drawn left to right, top to bottom.
    title: Figure title (suptitle), e.g. what is shown and the result.
    ncols: Panels per row (default: all in one row).
    axis_labels: (x label, y label) of every panel.
    legend: Add one legend for the figure naming the kinds of points drawn.
  """
  n = len(panels)
  if n == 0:
    raise ConfigError("points_2d_panels needs at least one panel")
  ncols = max(1, min(int(ncols or n), n))
  nrows = -(-n // ncols)
  # Inches: each row of panels, the title above them, the legend below them.
  row_h, title_h, legend_h = 3.0, (0.75 if title else 0.15), (0.7 if legend else 0.35)
  height = row_h * nrows + title_h + legend_h
  fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, height), squeeze=False)
  drawn = {}  # legend label -> handle, in drawing order
  for ax in axes.ravel()[n:]:
    ax.set_visible(False)
  for ax, panel in zip(axes.ravel(), panels):
    field = panel.get("field")
    if field is not None:
      xs, ys, values = (np.asarray(v, dtype=np.float64) for v in field)
      lim = float(np.nanmax(np.abs(values))) if values.size else 1.0
      lim = lim if np.isfinite(lim) and lim > 0 else 1.0
      ax.contourf(xs, ys, values, levels=21, cmap="bwr", vmin=-lim, vmax=lim, alpha=0.6)
      # The zero level only exists if the field changes sign.
      if np.nanmin(values) < 0 < np.nanmax(values):
        ax.contour(xs, ys, values, levels=[0.0], colors="k", linewidths=0.8)
        drawn.setdefault(
          "decision boundary (output 0)", plt.Line2D([], [], color="k", linewidth=0.8)
        )
    pts = panel.get("points")
    if pts is not None and len(pts):
      pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
      if panel.get("colors") is not None:
        colours = list(panel["colors"])
      elif panel.get("labels") is not None:
        colours = _label_colours(panel["labels"], _POINT_COLOURS)
        for c, name in zip(_POINT_COLOURS, ("candidate, label -1", "candidate, label +1")):
          if c in colours:
            drawn.setdefault(
              name, plt.Line2D([], [], linestyle="", marker="o", markersize=4, color=c)
            )
      else:
        colours = ["tab:green"] * len(pts)
      ax.scatter(pts[:, 0], pts[:, 1], s=8, c=colours, zorder=2)
    train = panel.get("train")
    if train is not None and len(train):
      train = np.asarray(train, dtype=np.float64).reshape(-1, 2)
      labels = panel.get("train_labels")
      if labels is not None:
        colours = _label_colours(labels, _TRAIN_COLOURS)
        for c, name in zip(
          _TRAIN_COLOURS, ("training point, label -1", "training point, label +1")
        ):
          if c in colours:
            drawn.setdefault(
              name,
              plt.Line2D(
                [], [], linestyle="", marker="x", markersize=6, markeredgewidth=1.5, color=c
              ),
            )
      else:
        colours = ["k"] * len(train)
        drawn.setdefault(
          "training point", plt.Line2D([], [], linestyle="", marker="x", markersize=6, color="k")
        )
      ax.scatter(train[:, 0], train[:, 1], s=40, marker="x", c=colours, linewidths=1.5, zorder=3)
    ax.set_aspect("equal", adjustable="datalim")
    if panel.get("title"):
      ax.set_title(str(panel["title"]), fontsize=9)
    if axis_labels:
      ax.set_xlabel(axis_labels[0], fontsize=8, labelpad=1)
      ax.set_ylabel(axis_labels[1], fontsize=8, labelpad=1)
    ax.tick_params(labelsize=7)
  # subplots_adjust rather than tight_layout: the latter can warn with
  # equal-aspect axes, and warnings are errors under the test config.
  fig.subplots_adjust(wspace=0.3, hspace=0.4, top=1.0 - title_h / height, bottom=legend_h / height)
  if title:
    fig.suptitle(str(title), fontsize=10, y=1.0 - 0.05 / height, va="top")
  if legend and drawn:
    fig.legend(
      list(drawn.values()),
      list(drawn),
      loc="lower center",
      ncol=min(len(drawn), 5),
      fontsize=8,
      frameon=False,
      bbox_to_anchor=(0.5, 0.0),
    )
  _save(fig, path, dpi=120)


def heatmap(
  path: Union[str, os.PathLike],
  values: Any,
  xticks: Sequence[Any],
  yticks: Sequence[Any],
  xlabel: str,
  ylabel: str,
  title: str,
  annotate: bool = True,
  fmt: str = "{:.2f}",
  cmap: str = "viridis",
  *,
  colorbar_label: Optional[str] = None,
  note: Optional[str] = None,
  origin: str = "upper",
) -> None:
  """Heat map of a 2-D table (rows = y ticks, columns = x ticks).

  Non-finite cells are left blank (and annotated "-"); say what they mean in
  ``note``.

  Args:
    path: Output PNG path.
    values: [a, b] table; values[i, j] belongs to yticks[i], xticks[j].
    xticks: b column labels.
    yticks: a row labels.
    xlabel: x-axis label.
    ylabel: y-axis label.
    title: Axes title.
    annotate: Write each value into its cell.
    fmt: Format for the annotations.
    cmap: Matplotlib colour map.
    colorbar_label: What the colours measure (label of the colour bar).
    note: A line of explanation under the axes (e.g. what blank cells mean).
    origin: 'upper' (row 0 at the top) or 'lower' (row 0 at the bottom, so
      a y axis of increasing values points up).
  """
  values = np.asarray(values, dtype=np.float64)
  if values.ndim != 2:
    raise ConfigError(f"heatmap expects a 2-D table, got shape {values.shape}")
  if origin not in ("upper", "lower"):
    raise ConfigError(f"origin must be 'upper' or 'lower', got {origin!r}")
  a, b = values.shape
  fig, ax = plt.subplots(figsize=(max(4.5, 1.6 + 0.8 * b), 1.6 + 0.55 * a))
  finite = values[np.isfinite(values)]
  vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
  if vmin == vmax:
    vmin, vmax = vmin - 0.5, vmax + 0.5
  im = ax.imshow(
    np.ma.masked_invalid(values), cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax, origin=origin
  )
  ax.set_facecolor("white")  # blank (non-finite) cells
  ax.set_xticks(np.arange(b))
  ax.set_xticklabels([str(t) for t in xticks], fontsize=7)
  ax.set_yticks(np.arange(a))
  ax.set_yticklabels([str(t) for t in yticks], fontsize=7)
  ax.set_xlabel(xlabel, fontsize=8)
  ax.set_ylabel(ylabel, fontsize=8)
  ax.set_title(title, fontsize=9)
  if annotate:
    mid = 0.5 * (vmin + vmax)
    for i in range(a):
      for j in range(b):
        v = values[i, j]
        text = fmt.format(v) if np.isfinite(v) else "-"
        colour = ("k" if v > mid else "w") if np.isfinite(v) else "0.5"
        ax.text(j, i, text, ha="center", va="center", fontsize=6, color=colour)
  bar = fig.colorbar(im, ax=ax)
  if colorbar_label:
    bar.set_label(colorbar_label, fontsize=8)
  if note:
    _caption(ax, note)
  _save(fig, path, dpi=120)


def line_plot(
  path: Union[str, os.PathLike],
  xs: Union[Sequence[float], Mapping[str, Sequence[float]]],
  ys_dict: Mapping[str, Sequence[float]],
  xlabel: str,
  ylabel: str,
  title: str,
  logx: bool = False,
  logy: bool = False,
  *,
  note: Optional[str] = None,
) -> None:
  """One line per entry of `ys_dict` against shared (or per-line) x values.

  Missing values (None, NaN) leave gaps in their line.

  Args:
    path: Output PNG path.
    xs: Shared x values, or a mapping with the same keys as `ys_dict`.
    ys_dict: Mapping label -> y values; the labels make the legend.
    xlabel: x-axis label.
    ylabel: y-axis label.
    title: Axes title.
    logx: Logarithmic x axis.
    logy: Logarithmic y axis.
    note: A line of explanation under the axes.
  """
  fig, ax = plt.subplots(figsize=(5.0, 3.8))
  for label, ys in ys_dict.items():
    x = xs[label] if isinstance(xs, Mapping) else xs
    y = np.array([np.nan if v is None else v for v in ys], dtype=np.float64)
    ax.plot(np.asarray(x, dtype=np.float64), y, marker="o", ms=3, label=str(label))
  if logx:
    ax.set_xscale("log")
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel, fontsize=8)
  ax.set_ylabel(ylabel, fontsize=8)
  ax.set_title(title, fontsize=9)
  if ys_dict:
    ax.legend(fontsize=7, loc="best")
  ax.grid(alpha=0.3)
  if note:
    _caption(ax, note)
  _save(fig, path, dpi=120)


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
  from recon_jax.eval import images as metrics

  os.makedirs(figdir, exist_ok=True)
  x_train_disp = np.asarray(metrics.stretch(x_train))
  x_held_disp = np.asarray(metrics.stretch(x_held)) if x_held is not None else None
  reconstruction_figure(
    os.path.join(figdir, f"{prefix}reconstructions.png"),
    result,
    x_train_disp,
    x_held_disp,
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


def efficacy_figure(
  path: Union[str, os.PathLike], out: Mapping[str, Any], variants: Sequence[str]
) -> None:
  """Per-draw strict counts of each variant next to its baselines, with the mean and interval.

  ``out`` is the efficacy harness's report (:func:`recon_jax.studies.efficacy.aggregate` per variant).
  """
  series = [
    ("strict_pooled", "attack: strict, all restarts pooled", "tab:red", "o"),
    ("strict_selected", "attack: strict, attacker-selected restart", "tab:orange", "s"),
    ("baseline_heldout_strict", "baseline: unseen images scored as candidates", "tab:gray", "^"),
    ("baseline_mean_strict", "baseline: the training-mean image", "k", "x"),
  ]
  n = out["n_train"]
  fig, ax = plt.subplots(figsize=(2.2 + 2.0 * len(variants), 4.2))
  width = 0.8 / len(series)
  for i, v in enumerate(variants):
    agg = out["variants"][v]
    for j, (key, label, colour, marker) in enumerate(series):
      x0 = i + (j - (len(series) - 1) / 2) * width
      vals = np.asarray([np.nan if y is None else y for y in agg[key]["per_draw"]], float)
      jitter = np.linspace(-0.25, 0.25, len(vals)) * width if len(vals) > 1 else np.zeros(1)
      ax.scatter(
        x0 + jitter, vals, s=14, c=colour, marker=marker, alpha=0.6, label=label if i == 0 else None
      )
      iv = agg[key]
      if np.isfinite(iv["ci_low"]):
        ax.errorbar(
          [x0],
          [iv["mean"]],
          yerr=[[iv["mean"] - iv["ci_low"]], [iv["ci_high"] - iv["mean"]]],
          fmt="_",
          c=colour,
          capsize=4,
          lw=1.5,
          ms=14,
        )
  ax.set_xticks(range(len(variants)))
  ax.set_xticklabels(variants)
  ax.set_ylabel(f"training images strictly recovered (of {n})")
  ax.set_ylim(-0.5, n + 0.5)
  ax.set_title(
    f"Strict recoveries per data draw ({len(out['draws'])} draws); bars: mean and 95% t interval",
    fontsize=9,
  )
  ax.legend(fontsize=7, loc="upper right")
  ax.grid(axis="y", alpha=0.3)
  _save(fig, path)


def toy_figure(
  path: Union[str, os.PathLike],
  cfg,
  ds,
  vic,
  metrics: Mapping[str, Any],
  candidates,
  x0,
  labels,
  after_filter,
  kept,
) -> None:
  """toy_2d.png: data, decision regions and the selected restart's candidates, step by step.

  ``cfg``: the toy's config; ``ds``/``vic``: its data set and victim;
  ``metrics``: its metrics.json; the rest: the attack's candidates, starting
  points, candidate labels and the masks of the lambda filter and de-duplication.
  """
  import jax.numpy as jnp

  from recon_jax.studies import pipeline

  n, r = cfg.n_train, metrics["selected_restart"]
  g = np.linspace(-1.6, 1.6, 121)
  gx, gy = np.meshgrid(g, g)
  grid = jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1), pipeline.float_dtype())
  params = pipeline.cast_params(vic.params)
  out = np.asarray(vic.apply_fn(params, grid, None))[:, 0].reshape(gx.shape)
  train = {"train": ds.x_train, "train_labels": ds.y_train}
  panels = [
    {"title": f"(a) the {n} training points", **train},
    {
      "title": "(b) the victim's decision regions\n(red: output > 0, blue: < 0)",
      **train,
      "field": (g, g, np.tanh(out / (np.abs(out).max() + 1e-12))),
    },
  ]
  net = f"a 2-{cfg.width}-{cfg.width}-1 ReLU net"
  if r is None:
    title = (
      f"Haim et al. §4: {n} points on the unit circle, {net}: all "
      f"{cfg.num_restarts} restarts of the attack diverged"
    )
  else:
    f, k = after_filter[r], kept[r]
    row = metrics["per_restart"][r]
    panels += [
      {
        "title": f"(c) start: {cfg.m} candidates ~ N(0, σ²)",
        **train,
        "points": x0[r],
        "labels": labels,
      },
      {
        "title": f"(d) after the attack: all {cfg.m} candidates",
        **train,
        "points": candidates[r],
        "labels": labels,
      },
      {
        "title": f"(e) λ filter: the {int(f.sum())} with\nλ ≥ {cfg.lam_filter_frac:g} × max λ "
        "(λ ≈ 0: no information)",
        **train,
        "points": candidates[r][f],
        "labels": labels[f],
      },
      {
        "title": f"(f) de-duplicated (radius {cfg.dedup_radius:g}):\n{int(k.sum())} kept, "
        f"{row['recovered']}/{n} within {cfg.tol:g} of a training point",
        **train,
        "points": candidates[r][k],
        "labels": labels[k],
      },
    ]
    title = (
      f"Haim et al. §4: reconstructing {n} training points on the unit circle from {net}"
      f"\nrestart {r} of {cfg.num_restarts} (the attacker's pick: lowest final loss): "
      f"{metrics['recovered']}/{n} recovered within {cfg.tol:g}; best restart "
      f"{metrics['recovered_best_restart']}/{n}, all restarts pooled "
      f"{metrics['recovered_pooled']}/{n}"
    )
  points_2d_panels(path, panels, title=title, ncols=3)


def init_study_figures(
  workdir: Union[str, os.PathLike],
  metrics: Mapping[str, Any],
  arrays: Mapping[str, np.ndarray],
  x_train: np.ndarray,
  x_part: np.ndarray,
) -> None:
  """The init study's figures, from the rows of its metrics.json and the reconstructions.

  Per sub-run: <name>_settings.png (the three settings' reconstructions) and,
  with the grid, <name>_heatmap_{train,partition,noise}.png,
  <name>_partition_to_gt.png and <name>_noise_to_gt.png.  ``arrays``:
  ``{<name>_x: [R, m, ...]}``.
  """
  from recon_jax.studies import init_study

  k = min(10, len(x_train))
  for name, r in metrics["sub_runs"].items():
    x = arrays[f"{name}_x"]
    points = r["points"]
    at = {(p["l1"], p["l2"]): j for j, p in enumerate(points)}
    order = [(s, at[r["settings"][s]["l1"], r["settings"][s]["l2"]]) for s in init_study.SETTINGS]
    rows = [x_train[:k], x_part[:k]] + [np.clip(x[j][:k], 0, 1) for _, j in order]
    labels = ["train", "partition"] + [f"from {s.replace('_', ' ')}" for s, _ in order]
    image_grid(
      os.path.join(workdir, f"{name}_settings.png"),
      rows,
      row_labels=labels,
      title=f"{name}: reconstructions from the three starts\n(first {k} "
      f"of {x.shape[1]}; top rows: the training images, the partition)",
    )
    if not r["grid"]:
      continue
    vals = list(init_study.GRID_VALUES)
    note = (
      "Blank cells: grid points not run. At lambda2 = 0 the start is pure noise "
      "whatever lambda1 is, so only lambda1 = 0 is run there."
    )
    for ref, what in (
      ("train", "training image"),
      ("partition", "partition image"),
      ("noise", "U(0, 1) noise image"),
    ):
      heatmap(
        os.path.join(workdir, f"{name}_heatmap_{ref}.png"),
        init_study.grid_table(points, f"l2_{ref}", vals),
        vals,
        vals,
        "lambda1 (0: partition, 1: ground truth)",
        "lambda2 (0: noise, 1: no noise)",
        f"{name}: distance of the reconstructions to the nearest {what}",
        colorbar_label=f"mean L2 to the nearest {what}",
        note=note,
        origin="lower",
      )
    p = sorted([g for g in points if abs(g["l2"] - 1) < 1e-9], key=lambda g: g["l1"])
    line_plot(
      os.path.join(workdir, f"{name}_partition_to_gt.png"),
      [g["l1"] for g in p],
      {
        "to the nearest training image": [g["l2_train"] for g in p],
        "to the nearest partition image": [g["l2_partition"] for g in p],
      },
      "lambda1 at lambda2 = 1 (0: partition start, 1: ground-truth start)",
      "mean L2 distance",
      f"{name}: from partition to ground-truth starts (Fig. 11)",
    )
    g = sorted(
      [g for g in points if abs(g["l1"] - 1) < 1e-9 or g["l2"] == 0], key=lambda g: g["l2"]
    )
    line_plot(
      os.path.join(workdir, f"{name}_noise_to_gt.png"),
      [v["l2"] for v in g],
      {
        "to the nearest training image": [v["l2_train"] for v in g],
        "to the nearest noise image": [v["l2_noise"] for v in g],
      },
      "lambda2 at lambda1 = 1 (0: noise start, 1: ground-truth start)",
      "mean L2 distance",
      f"{name}: from noise to ground-truth starts (Fig. 12)",
    )


def trusted_figure(
  path: Union[str, os.PathLike],
  identification: Mapping[str, Any],
  candidates: np.ndarray,
  x_train: np.ndarray,
) -> None:
  """The candidates an attacker would trust most (by its pre-registered score), over the truth.

  ``identification`` is the report of :func:`recon_jax.eval.identification.identification_report`;
  ``candidates`` [R, m, H, W, C] and ``x_train`` in pixel space.  Each column: a trusted
  candidate (its score, and whether it is a strict recovery), under it the training image it
  resembles most.
  """
  from recon_jax.eval import images

  top = list(identification.get("top", []))
  if not top:
    return
  cands = np.stack([candidates[t["restart"], t["index"]] for t in top])
  nearest = np.stack([x_train[t["train_idx"]] for t in top])
  labels = [
    f"score {t['score']:.2f}\n{'REAL' if t['recovered_strict'] else 'not real'}" for t in top
  ]
  real = sum(bool(t["recovered_strict"]) for t in top)
  image_grid(
    path,
    [np.asarray(images.stretch(cands)), np.asarray(images.stretch(nearest))],
    row_labels=["trusted\ncandidate", "most similar\ntraining image"],
    col_titles=[labels, None],
    title=(
      f"The {len(top)} candidates the attacker trusts most by '{identification['trusted_score']}'"
      f" (no ground truth used): {real} of {len(top)} are real (strict recoveries)"
    ),
  )


def witness_figure(
  path: Union[str, os.PathLike],
  identifiability: Mapping[str, Any],
  witness: np.ndarray,
  x_train: np.ndarray,
  max_images: int = 10,
) -> None:
  """The training images over other images that fit the stationarity equations as well.

  ``witness`` and ``x_train`` [n, H, W, C] in pixel space; ``identifiability`` the report
  of :func:`recon_jax.eval.identifiability.identifiability`, whose ``family`` made the witness.
  """
  fam = identifiability.get("family") or {}
  k = min(max_images, len(x_train))
  moved = np.sqrt(np.sum((witness - x_train).reshape(len(x_train), -1) ** 2, axis=1))
  order = np.argsort(-moved)[:k]  # the images the family moves most
  image_grid(
    path,
    [np.clip(x_train[order], 0, 1), np.clip(witness[order], 0, 1)],
    row_labels=["training\nimage", "other image,\nsame fit"],
    col_titles=[[f"#{i}" for i in order], None],
    title=(
      f"Top: training images. Bottom: the same samples moved along {fam.get('dimension')} flat "
      "directions, inside the pixel box.\nStationarity residual of the whole set: "
      f"{identifiability['truth_residual']:.3g} (training set), "
      f"{fam.get('witness_residual', float('nan')):.3g} (moved): the equations cannot tell "
      "them apart"
    ),
  )
