"""The drawing primitives every figure of the library shares (PNG files via matplotlib's Agg backend).

Image grids, heatmaps, line plots and 2-D point panels; each study's own figures sit
beside it (:mod:`recon_jax.job.figures`, :mod:`recon_jax.studies.init_study_figures`, ``toy.toy_figure``,
``efficacy.efficacy_figure``).  Every function writes one PNG to `path` (creating parent folders) and closes
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

# Haim et al. show at most 15 images per row (45 = 3 blocks of 15).
DEFAULT_MAX_COLS = 15

# Colours follow Haim Fig. 2: training classes blue/red, reconstructions
# green/magenta, so the two are distinguishable when overlaid.
_TRAIN_COLOURS = ("tab:blue", "tab:red")
_POINT_COLOURS = ("tab:green", "magenta")


def caption(ax: Any, note: str) -> None:
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


def save(fig: Any, path: Union[str, os.PathLike], dpi: int = 100) -> None:
  """Writes the figure to `path` and closes it."""
  parent = os.path.dirname(os.fspath(path))
  if parent:
    os.makedirs(parent, exist_ok=True)
  try:
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
  finally:
    plt.close(fig)


def to_display(img: Any, stretch: bool = False) -> tuple[np.ndarray, Optional[str]]:
  """Converts [H, W], [H, W, 1] or [H, W, 3] to an imshow-ready array; with ``stretch`` the
  image is shown over its own range (its min..max mapped to [0, 1], a constant image grey),
  as the evaluation compares images."""
  arr = np.asarray(img, dtype=np.float64)
  if arr.ndim == 3 and arr.shape[-1] == 1:
    arr = arr[..., 0]
  if arr.ndim not in (2, 3):
    raise ConfigError(f"expected an image [H, W(, C)], got shape {arr.shape}")
  if stretch:
    finite = arr[np.isfinite(arr)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 0.0)
    arr = (arr - lo) / (hi - lo) if hi > lo else np.full_like(arr, 0.5)
  # Non-finite pixels would make imshow complain; show them as black.
  arr = np.clip(np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
  return arr, ("gray" if arr.ndim == 2 else None)


def label_colours(labels: Any, palette: Sequence[str]) -> list[str]:
  """Maps labels in {-1, +1} or {0, 1} to two colours (positive -> second)."""
  return [palette[1] if float(v) > 0 else palette[0] for v in np.asarray(labels).reshape(-1)]


def image_grid(
  path: Union[str, os.PathLike],
  rows: Sequence[Any],
  row_labels: Optional[Sequence[str]] = None,
  col_titles: Optional[Sequence[Any]] = None,
  title: Optional[str] = None,
  max_cols: int = DEFAULT_MAX_COLS,
  stretch: bool = False,
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
    stretch: show each image over its own range (:func:`to_display`) rather than clipped
      to [0, 1].
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
          img, cmap = to_display(rows[r][j], stretch)
          ax.imshow(img, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
          titles = per_row_titles[r]
          if titles is not None and j < len(titles) and titles[j]:
            ax.set_title(str(titles[j]), fontsize=7, pad=2)
        if c == 0 and row_labels is not None and r < len(row_labels):
          ax.set_ylabel(str(row_labels[r]), fontsize=8, rotation=90)
  if title:
    fig.suptitle(title, fontsize=10, y=1 - 0.05 / height, va="top")
  fig.subplots_adjust(wspace=0.05, hspace=0.35, top=1 - top_in / height, bottom=0.2 / height)
  save(fig, path)


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
        colours = label_colours(panel["labels"], _POINT_COLOURS)
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
        colours = label_colours(labels, _TRAIN_COLOURS)
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
  save(fig, path, dpi=120)


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
    caption(ax, note)
  save(fig, path, dpi=120)


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
    caption(ax, note)
  save(fig, path, dpi=120)
