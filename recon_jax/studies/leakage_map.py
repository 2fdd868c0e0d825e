"""The leakage map: how much an attack recovers as one thing a model owner controls or knows
changes at a time (width, n, initialisation scale, training length, weight decay, the
training loss, a pretrained or random theta_0, whether theta_0 is known).

A map is a list of rows ``(axis, ((label, variant), ...))`` over the variants of an
efficacy harness (each variant a victim or attack recipe, run on the same draws).  Each
cell reports strict pooled and attacker-selected recoveries (mean and interval over the
draws) and the identifiability verdict: on how many draws the training set fits the
equations at least as well as what the attack found.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.io import workdir
from recon_jax.job import settings
from recon_jax.studies.efficacy_results import Interval, Results

BASE = "base"  # a map cell that is the base config itself (the variant ``default``)


def _victim(**recipe) -> dict:
  return {"victim": recipe}


# The recipes a model owner uses (the ``leakage_map_cone`` preset), each changed alone from the
# finetune preset (the cone on a 625-2048-1 model fine-tuned 2000 epochs by full-batch GD from a
# published He theta_0, 10 + 10 faces): how it was optimised, weight decay, the loss, a
# pretrained theta_0, n, depth (1024 units a hidden layer) and 250 + 250 MNIST digits (mnist5k:
# Haim et al.'s n = 500, 784 pixels).
RECIPES = (
  ("optimizer", (("GD", BASE), ("SGD, batch 5", _victim(batch_size=5)),
                 ("momentum 0.9", _victim(momentum=0.9)),
                 ("Adam 1e-3", _victim(optimizer="adam", lr=1e-3)))),
  ("weight decay", (("0", BASE), ("1e-3", _victim(weight_decay=1e-3)),
                    ("1e-2", _victim(weight_decay=1e-2)))),
  ("training loss", (("logistic", BASE), ("squared error", _victim(loss="mse")))),
  ("theta_0", (("random (seed)", BASE), ("pretrained", _victim(pretrain_epochs=2000)))),
  ("images per class", (("10", BASE), ("25", _victim(n_per_class=25)),
                        ("50", _victim(n_per_class=50, n_part_per_class=10)))),
  ("hidden layers", (("1 x 2048", BASE), ("2 x 1024", _victim(widths=(1024, 1024))),
                     ("3 x 1024", _victim(widths=(1024, 1024, 1024))))),
  ("data", (("LFW 10 + 10", BASE),
            ("MNIST 250 + 250", _victim(dataset="mnist5k", n_per_class=250)))),
)  # fmt: skip


def _cell_name(axis: str, label: str) -> str:
  keep = lambda t: "".join(ch if ch.isalnum() or ch == "-" else "_" for ch in t.lower())
  return f"{keep(axis)}={keep(label)}".replace("__", "_")


def map_config(rows) -> tuple[dict, tuple]:
  """``(variants, spec)`` of map ``rows`` ``((axis, ((label, overrides or BASE), ...)), ...)``:
  each non-base cell a variant named ``axis=label``, the base cell ``default``."""
  variants, spec = {"default": {}}, []
  for axis, cells in rows:
    row = []
    for label, overrides in cells:
      name = "default" if overrides == BASE else _cell_name(axis, label)
      if name != "default":
        variants[name] = settings.nested(overrides)
      row.append((label, name))
    spec.append((axis, tuple(row)))
  return variants, tuple(spec)


def _rows(spec) -> list:
  """``[(axis, [(label, variant), ...]), ...]`` of a map spec (lists or tuples, as JSON
  leaves them)."""
  return [(str(axis), [(str(lab), str(var)) for lab, var in cells]) for axis, cells in spec]


def variants_of(spec) -> list:
  """The variants a map needs, each once, in the order the map names them."""
  out = []
  for _, cells in _rows(spec):
    for _, var in cells:
      if var not in out:
        out.append(var)
  return out


def _per_draw(agg: Mapping[str, Interval], key: str) -> tuple:
  iv = agg.get(key)
  return () if iv is None else iv.per_draw


def _verdict(agg: Mapping[str, Interval]) -> str:
  """The identifiability reading of a cell over its draws (``agg``: a variant's numbers)."""
  declined = [d for d in _per_draw(agg, "declined") if d]
  if declined:
    return f"attack declined on {len(declined)}/{len(_per_draw(agg, 'declined'))}"
  best = _per_draw(agg, "truth_fits_best")
  flat = _per_draw(agg, "truth_not_unique")
  k = len([b for b in best if b is not None])
  if not k:
    return "not scored"
  fits = int(sum(1 for b in best if b))
  if any(f for f in flat if f is not None):
    return f"flat family on {int(sum(1 for f in flat if f))}/{k}"
  return f"truth fits best {fits}/{k}"


def cells(out: Results, spec) -> list:
  """One record per cell, as metrics.json's ``map`` holds it: axis, label, variant, the
  numbers with intervals (``{mean, ci_low, ci_high, per_draw, n}``), the verdict."""
  rec = []
  for axis, row in _rows(spec):
    for label, var in row:
      agg = out.variants[var]
      written = lambda iv: None if iv is None else iv.to_dict()  # noqa: E731
      rec.append(
        {
          "axis": axis,
          "label": label,
          "variant": var,
          **{k: written(agg[k]) for k in SHOWN},
          **{k: written(agg.get(k)) for k in MEMBERSHIP},
          "verdict": _verdict(agg),
        }
      )
  return rec


SHOWN = ("strict_pooled", "strict_selected", "log10_identifiability_ratio")  # in every cell


def _fmt(iv: Interval, digits: int = 1) -> str:
  if iv.mean != iv.mean:  # NaN
    return "-"
  if iv.n < 2 or iv.ci_low != iv.ci_low:
    return f"{iv.mean:.{digits}f}"
  return f"{iv.mean:.{digits}f} [{iv.ci_low:.{digits}f}, {iv.ci_high:.{digits}f}]"


# The membership columns of a cell (recon_jax.studies.efficacy.NUMBERS): the best test read
# off the weights (AUC, TPR at 0.1% FPR) and the loss baseline's TPR there.
MEMBERSHIP = ("membership_weights_auc", "membership_weights_tpr", "membership_loss_tpr")


def _fmt_or_dash(iv: Optional[Interval], digits: int) -> str:
  return "-" if iv is None else _fmt(iv, digits)


def table(out: Results, spec, n_of: Mapping) -> str:
  """The map as a markdown table (one line per cell; ``n_of``: ``{variant: n_train}``), with
  membership from the weights beside the reconstruction (``-``: not measured in that run)."""
  lines = [
    "| axis | value | n | draws | strict pooled | attacker-selected | log10 identifiability "
    "ratio | membership AUC (weights) | TPR at 0.1% FPR: weights / loss | verdict |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for axis, row in _rows(spec):
    for label, var in row:
      agg = out.variants[var]
      pooled, auc, tpr, loss = (agg.get(k) for k in ("strict_pooled", *MEMBERSHIP))
      lines.append(
        f"| {axis} | {label} | {n_of.get(var, '?')} | {pooled.n} | {_fmt(pooled)} | "
        f"{_fmt(agg['strict_selected'])} | {_fmt(agg['log10_identifiability_ratio'], 2)} | "
        f"{_fmt_or_dash(auc, 3)} | {_fmt_or_dash(tpr, 2)} / {_fmt_or_dash(loss, 2)} | "
        f"{_verdict(agg)} |"
      )
  return "\n".join(lines) + "\n"


def _draws(out: Results) -> str:
  """How many draws the cells' means are over: 'K draws', or 'K-L draws' where cells differ."""
  ks = sorted({int(agg["strict_pooled"].n) for agg in out.variants.values()})
  return f"{ks[0]} draws" if len(ks) == 1 else f"{ks[0]}-{ks[-1]} draws (the verdict counts each)"


def figure(path: Union[str, os.PathLike], out: Results, spec, n_of: Mapping) -> None:
  """``leakage_map.png``: one row per axis, one cell per value, coloured by the strict pooled
  fraction of the training set, with the numbers and the verdict written in the cell.

  ``n_of``: ``{variant: n_train}`` (the fraction's denominator per cell).
  """
  from recon_jax.io import plots  # matplotlib: only here

  rows = _rows(spec)
  width = max(len(c) for _, c in rows)
  fig, ax = plots.plt.subplots(figsize=(2.3 * width + 1.8, 0.95 * len(rows) + 1.2))
  cmap = plots.plt.get_cmap("viridis")
  ax.set_xlim(0, width)
  ax.set_ylim(len(rows), 0)
  for r, (axis, row) in enumerate(rows):
    for j, (label, var) in enumerate(row):
      agg = out.variants[var]
      frac = agg["strict_pooled"].mean / max(n_of.get(var, 1), 1)
      colour = cmap(frac) if frac == frac else (0.85, 0.85, 0.85, 1.0)
      ax.add_patch(plots.plt.Rectangle((j, r), 1, 1, color=colour, ec="white", lw=2))
      light = frac == frac and frac < 0.55
      text = (
        f"{label}\n{agg['strict_pooled'].mean:.1f} / {n_of.get(var, '?')} pooled, "
        f"{agg['strict_selected'].mean:.1f} picked\n{_verdict(agg)}"
      )
      ax.text(
        j + 0.5,
        r + 0.5,
        text,
        ha="center",
        va="center",
        fontsize=6.5,
        color="white" if light else "black",
      )
  ax.set_yticks(np.arange(len(rows)) + 0.5)
  ax.set_yticklabels([a for a, _ in rows], fontsize=8)
  ax.set_xticks([])
  for side in ("top", "right", "bottom", "left"):
    ax.spines[side].set_visible(False)
  sm = plots.plt.cm.ScalarMappable(cmap=cmap, norm=plots.plt.Normalize(0, 1))
  fig.colorbar(sm, ax=ax, fraction=0.03, pad=0.01, label="strict pooled / n")
  ax.set_title(
    f"Leakage map: strict recoveries, mean over {_draws(out)}; each row changes one thing of "
    "the same base model",
    fontsize=9,
  )
  plots.save(fig, path)


def write(path: str, out: Results, spec, n_of: Mapping) -> Results:
  """leakage_map.png and leakage_map.md in workdir ``path``; returns ``out`` with its
  :attr:`~recon_jax.studies.efficacy_results.Results.map` (:func:`cells`)."""
  out = out._replace(map=cells(out, spec))
  text = table(out, spec, n_of)
  figure(workdir.inside(path, "leakage_map.png"), out, spec, n_of)
  workdir.write_text(path, "leakage_map.md", text)
  return out


def check(spec, variants: Sequence[str]) -> None:
  """Refuses a map that names a variant the harness does not run."""
  missing = [v for v in variants_of(spec) if v not in variants]
  if missing:
    raise ConfigError(f"map: cell variant {missing[0]!r} is not among the variants run.", "map")
