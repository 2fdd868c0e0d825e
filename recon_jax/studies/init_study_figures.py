"""The initialisation study's figures (Runkel et al. Figs 10-12): each sub-run's settings,
heatmaps over the initialisation mix and the distance plots.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Union

import numpy as np

from recon_jax.io import plots
from recon_jax.studies import init_study


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

  k = min(10, len(x_train))
  for name, r in metrics["sub_runs"].items():
    x = arrays[f"{name}_x"]
    points = r["points"]
    at = {(p["l1"], p["l2"]): j for j, p in enumerate(points)}
    order = [(s, at[r["settings"][s]["l1"], r["settings"][s]["l2"]]) for s in init_study.SETTINGS]
    rows = [x_train[:k], x_part[:k]] + [np.clip(x[j][:k], 0, 1) for _, j in order]
    labels = ["train", "partition"] + [f"from {s.replace('_', ' ')}" for s, _ in order]
    plots.image_grid(
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
      plots.heatmap(
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
    plots.line_plot(
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
    plots.line_plot(
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
