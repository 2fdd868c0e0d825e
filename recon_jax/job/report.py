"""report.md: one reconstruction run for a reader without the papers at hand: the verdict and
why, the numbers beside their baselines, what each means, and the figures."""

from __future__ import annotations

import os
from typing import Mapping

# The figures a run may write, and what each shows.
FIGURES = (
  (
    "reconstructions.png",
    "reconstructions sorted by SSIM (top), the training images they match (middle) and their "
    "nearest held-out images (bottom): a leak looks like the middle row, not the bottom one",
  ),
  ("trusted.png", "the ten candidates the attacker trusts most by its own scores, no ground truth"),
  ("candidates.png", "a blind attack's candidates, by the attacker's own trust (lambda)"),
  ("ssim_vs_margin.png", "per training image, its margin against how well it was reconstructed"),
  (
    "identifiability.png",
    "images far from the training set that fit the equations exactly as well",
  ),
)


def _num(v, fmt: str = ".3g") -> str:
  return "–" if v is None else format(v, fmt)


def report(m: Mapping, folder: str = "") -> str:
  """The markdown of a reconstruction's metrics (metrics.json's dict); ``folder``: where the
  figures are (only those that exist are shown)."""
  n, k = m.get("n_train"), m.get("recovered_strict")
  ident = m.get("identifiability") or {}
  sel = m.get("selection") or {}
  regime = m.get("regime") or {}
  span = regime.get("span") or {}
  t = m.get("timing") or {}
  lines = [
    f"# Does this model leak its training images? **{m.get('verdict', '?').replace('_', ' ')}**",
    "",
    *[f"- {r}" for r in m.get("reasons", [])],
    "",
  ]
  if m.get("warnings"):
    lines += ["## Warnings", "", *[f"- {w}" for w in m["warnings"]], ""]
  lines += [
    "## The numbers",
    "",
    "| number | value | what it means |",
    "|---|---|---|",
    f"| training images recovered strictly | {k} of {n} | a reconstruction more similar to its "
    f"training image than to every held-out image, SSIM >= "
    f"{_num((m.get('evaluation') or {}).get('ssim_threshold'), '.2g')}; pooled over "
    f"{m.get('num_restarts')} restarts |",
    f"| held-out baseline | {m.get('baseline_heldout_recovered_strict')} | unseen images "
    "scored as if they were reconstructions: what the data distribution gives for free |",
    f"| mean-image baseline | {m.get('baseline_mean_image_recovered_strict')} | the training "
    "mean scored as a reconstruction |",
    f"| attacker's own pick | {sel.get('best_by_loss_recovered_strict')} of {n} | the restart "
    "with the lowest loss, chosen without the training set |",
    f"| truth residual | {_num(ident.get('truth_residual'))} | how much of the fitted "
    "parameters the training set leaves unexplained by the attack's equations |",
    f"| identifiability ratio | {_num(ident.get('ratio'), '.4g')} (equal within "
    f"{_num(ident.get('tolerance'), '.2g')}) | the attack's best fit over the training set's: "
    "above 1 the training set fits best, below it other images do |",
  ]
  miss = ident.get("missed")
  if miss and miss["images"]:
    ranks = ", ".join(str(r) for r in sorted(miss["weakness_rank"]))
    lines.append(
      f"| where the missed images rank | {ranks} of {n} | per image missed, its rank by how "
      "little the truth's residual rises without it (1: the weakest): low ranks are images the "
      "equations barely see |"
    )
  if span:
    what = "change (theta* - theta_0)" if regime.get("known_init") else "weights"
    lines.append(
      f"| first layer's span | {span.get('dim')} of {span.get('input_dim')} directions for "
      f"{regime.get('n_train')} images | the directions of the first layer's {what}: about n "
      "means it holds the training images' coordinates |"
    )
  lines.append(f"| time | {_num(t.get('total_s'), '.0f')} s | victim, attack, scoring |")
  lines += ["", "## Figures", ""]
  for name, what in FIGURES:
    if not folder or os.path.isfile(os.path.join(folder, name)):
      lines += [f"![{name}]({name})", "", f"*{what}.*", ""]
  lines += [
    "## What the verdict means",
    "",
    "*leaks*: training images were reconstructed, more than unseen images match by chance, "
    "and the model's parameters single out the training set. *no evidence*: nothing beyond "
    "the baseline; the reasons say whether this attack can test this model at all. *cannot "
    "tell*: the parameters do not single out the training set (or no training images were "
    "given), so a reconstruction is not evidence of membership either way.",
    "",
  ]
  return "\n".join(lines)
