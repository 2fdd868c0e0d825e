"""report.md: one reconstruction run for a reader without the papers at hand: the verdict and
why, the numbers beside their baselines, what each means, and the figures."""

from __future__ import annotations

import os
import statistics
from typing import Mapping, Union

from recon_jax.eval.metrics_json import Metrics
from recon_jax.eval.verdict import strongest_line

# The figures a run may write, and what each shows.
FIGURES = (
  (
    "reconstructions.png",
    "reconstructions sorted by SSIM (top), the training images they match (middle) and their "
    "nearest held-out images (bottom): a leak looks like the middle row, not the bottom one",
  ),
  (
    "roc.png",
    "every membership test's ROC curve on log axes (training images are the positives): "
    "the reconstruction's score (each given image's best reconstruction against its nearest "
    "other image), the tests read off the weights, and the loss and confidence baselines",
  ),
  ("trusted.png", "the ten candidates the attacker trusts most by its own scores, no ground truth"),
  (
    "candidates.png",
    "candidates by the attacker's own trust (lambda): a blind attack's, or those of the restart "
    "that fits the model best where the images given as its training set fit far worse",
  ),
  ("ssim_vs_margin.png", "per training image, its margin against how well it was reconstructed"),
  (
    "identifiability.png",
    "images far from the training set that fit the equations exactly as well",
  ),
)


# What each membership test scores, for report.md's table.
TEST_MEANINGS = {
  "reconstruction": "the reconstruction's score above, as one test among these",
  "kkt_fit": "the multiplier the image carries when theta* is fitted by a nonnegative sum of "
  "every given image's margin gradient (no reconstruction)",
  "change_fit": "the multiplier the image carries when the change theta* - theta_0 is fitted "
  "by a nonnegative sum of every given image's margin gradient (no reconstruction)",
  "loss": "minus the model's loss on the image (baseline: Yeom et al. 2018)",
  "confidence": "the model's top-class probability, without the label (baseline)",
}


def _membership_rows(mem) -> list:
  """report.md's rows of ``membership.tests``: each test's AUC, TPR at 1%, 0.1% and 0.01%
  FPR and p-value, then the strongest test beside the loss baseline."""
  if not mem.tests:
    return []
  rows = []
  for name, t in mem.tests.items():
    r = t.tpr_at_fpr
    rows.append(
      f"| membership test `{name}` | AUC {_num(t.auc, '.3f')}, TPR {_pct(r.one_pct)} / "
      f"{_pct(r.tenth_pct)} / {_pct(r.hundredth_pct)} at 1% / 0.1% / 0.01% FPR, p "
      f"{_num(t.p_value, '.2g')} | {TEST_MEANINGS.get(name, t.kind or '')} |"
    )
  for name, why in (mem.tests_skipped or {}).items():
    rows.append(f"| membership test `{name}` | not run | {why} |")
  rows.append(
    f"| membership, in one line | {strongest_line(mem)} | – means the held-out set "
    "is too small to resolve that rate |"
  )
  return rows


def _num(v, fmt: str = ".3g") -> str:
  return "–" if v is None else format(v, fmt)


def _pct(v) -> str:
  return "–" if v is None else f"{v:.0%}"


def _scored_rows(m: Metrics, pooled: str) -> list:
  """report.md's rows of a run whose candidates were scored: the strict count beside its
  baselines, the membership test, the truth residual and the identifiability ratio."""
  n, k, sel, ident = m.n_train, m.recovered_strict, m.selection, m.identifiability
  tol, mem = ident.tolerance, m.membership
  lines = [
    f"| training images recovered strictly | {k} of {n} | a reconstruction more similar to "
    f"its training image than to every held-out image, SSIM >= "
    f"{_num(m.evaluation.ssim_threshold, '.2g')}; {pooled} |",
    f"| held-out baseline | {m.baseline_heldout_recovered_strict} | unseen images "
    "scored as if they were reconstructions, by the same strict rule: what the data "
    "distribution gives for free |",
    f"| mean-image baseline | {m.baseline_mean_image_recovered_strict} | the training "
    "mean scored as a reconstruction, by the same strict rule |",
    f"| attacker's own pick | {sel.best_by_loss_recovered_strict} of {n} | the "
    "restart with the lowest loss, chosen without the training set |",
  ]
  if mem.auc is not None:
    tpr = mem.tpr_at_fpr
    lines += [
      f"| membership ROC AUC | {mem.auc:.3f} | every given image ({mem.n_members} "
      f"training, {mem.n_others} held-out) scored by one rule: its best "
      "reconstruction's SSIM less its SSIM with the nearest other given image (or the "
      "training mean); 0.5 is chance, 1 every training image above every held-out one |",
      f"| TPR at 1% / 0.1% FPR | {_pct(tpr.one_pct)} / {_pct(tpr.tenth_pct)} | the "
      "training images called members where at most that fraction of the held-out images "
      f"is (the held-out set resolves false-positive rates down to 1/{mem.n_others}) |",
      f"| membership p-value | {_num(mem.p_value, '.2g')} (level "
      f"{_num(mem.level, 'g')}) | a permutation test of the AUC over which given "
      f"images are called training images; the smallest p it can give here is "
      f"{_num(mem.smallest_p, '.2g')}; `leaks` needs p at or below the level |",
    ]
  elif mem.skipped:
    lines.append(f"| membership test | not run | {mem.skipped} |")
  lines += _membership_rows(mem)
  lines += [
    f"| truth residual | {_num(ident.truth_residual)} | how much of the fitted "
    "parameters the training set leaves unexplained by the attack's equations |",
    f"| identifiability ratio | {_num(ident.ratio, '.4g')} (equal within "
    f"±{_num(tol, '.2g')}) | the attack's best fit over the training set's: above "
    f"1 + {_num(tol, '.2g')} the training set fits best, below 1 - {_num(tol, '.2g')} what "
    "the attack found fits better (the training set refined, where that restart recovers "
    "training images), and below 0.5 the images given are probably not the training set. "
    "The band: the larger of the residuals' precision (0.001) and the relative spread of "
    "the attack's four best restarts (how far another run of the search would move its "
    "best), at most 0.1 |",
  ]
  return lines


def report(m: Union[Metrics, Mapping], folder: str = "", spell=None) -> str:
  """The markdown of a reconstruction's report (:class:`recon_jax.eval.metrics_json.Metrics`,
  or metrics.json's dict, read typed); ``folder``: where the figures are (only those that
  exist are shown); ``spell``: ``text -> text``, the verdict's reasons and the warnings as
  the reader's program says them (a binary's flags for the settings they name; default: the
  library's names)."""
  m = Metrics.of(m)
  spell = spell or (lambda text: text)
  n, ident, regime, t = m.n_train, m.identifiability, m.regime, m.timing
  span = regime.span
  lines = [
    f"# Does this model leak its training images? **{(m.verdict or '?').replace('_', ' ')}**",
    "",
    *[f"- {spell(r)}" for r in m.reasons or ()],
    "",
  ]
  if m.warnings:
    lines += ["## Warnings", "", *[f"- {spell(w)}" for w in m.warnings], ""]
  restarts = m.num_restarts
  pooled = f"pooled over {restarts} restart{'s' if restarts != 1 else ''}"
  lines += ["## The numbers", "", "| number | value | what it means |", "|---|---|---|"]
  if m.blind:
    lines.append(
      f"| candidates | {m.m} per restart, {restarts} restart"
      f"{'s' if restarts != 1 else ''} | no training images were given: nothing is counted, "
      "and candidates.png shows what the attack found |"
    )
  elif m.membership_only:  # attack=none
    lines.append(
      f"| reconstruction | not attempted | attack=none: the {n} training images and the "
      "held-out ones are scored by the membership tests below alone |"
    )
    lines += _membership_rows(m.membership)
  else:
    lines += _scored_rows(m, pooled)
  miss = ident.missed
  if miss and miss.images:
    ranks = _ranks_text(sorted(miss.weakness_rank), n)
    lines.append(
      f"| where the missed images rank | {ranks} of {n} | per image missed, its rank by how "
      "little the truth's residual rises without it (1: the weakest): low ranks are images the "
      "equations barely see |"
    )
  if span:
    what = "change (theta* - theta_0)" if regime.known_init else "weights"
    lines.append(
      f"| first layer's span | {span.dim} of {span.input_dim} directions for "
      f"{regime.n_train} images | the directions of the first layer's {what}: about n "
      "means it holds the training images' coordinates |"
    )
  ceiling = m.span_ceiling
  if ceiling:
    lines.append(
      f"| images the span holds | {ceiling.recovered_strict} of {n} | each training "
      "image projected on that span, scored by the strict rule: the most any reader of the "
      "first layer's change recovers exactly (the others lie partly under its rounding "
      "noise) |"
    )
  guess = (
    f"; {_num(t.since_estimate_s, '.0f')} s for the attack and the scoring, estimated "
    f"{_num(t.estimate_s, '.0f')} s before the attack started"
    if t.estimate_s is not None
    else ""
  )
  parts = "victim, tests" if m.membership_only else "victim, attack, scoring"
  if t.identification_s is not None:
    parts += ", the attacker's own scores"
  lines.append(f"| time | {_num(t.total_s, '.0f')} s | {parts}{guess} |")
  return "\n".join(lines + ["", *_figures(folder), *MEANING])


def _figures(folder: str) -> list:
  """report.md's figures: those that exist in ``folder`` (all where it is empty)."""
  lines = ["## Figures", ""]
  for name, what in FIGURES:
    if not folder or os.path.isfile(os.path.join(folder, name)):
      lines += [f"![{name}]({name})", "", f"*{what}.*", ""]
  return lines


# report.md's last section: what each verdict means.
MEANING = (
  "## What the verdict means",
  "",
  "*leaks*: the training images are told from held-out ones by the membership test at its "
  "level, training images were reconstructed strictly, more than unseen images match by "
  "chance, and the model's parameters single out the training set; or, on membership "
  "alone, a test read off the weights tells them apart at its level and beats the loss "
  "baseline's TPR at 0.1% FPR (the line then says how many images were reconstructed: a "
  "membership test counts none). *no evidence*: nothing "
  "beyond the baseline; the reasons say whether this attack can test this model at all. "
  "*cannot tell*: the images given as the training set fit the model far worse than what "
  "the attack found (they may not be its training set), the membership test does not "
  "separate the sets, the parameters do not single out the training set, or no training "
  "images were given: a reconstruction is not evidence of membership either way.",
  "",
)


def _ranks_text(ranks: list, n) -> str:
  """The missed images' ranks: listed where few, else summarised (how many fall in the
  lowest tenth of the ranks, their median)."""
  if len(ranks) <= 10 or not n:
    return ", ".join(str(r) for r in ranks)
  low = max(1, -(-int(n) // 10))
  k = sum(1 for r in ranks if r is not None and r <= low)
  median = statistics.median(ranks)
  return f"{len(ranks)} missed: {k} in ranks 1-{low} (the lowest 10%), median rank {median:g}"
