"""Measuring an attack over data draws: per-draw numbers, intervals, paired differences.

One data draw is not a result: which training images are drawn moves the
strict count of the same attack from 1 to 7 of 20.  A draw here re-draws the
training images (``victim.data_seed``) and the victim's initialisation
(``victim.seed``) from one integer; the attack's restart sweep (``search.seed``) stays
the same, so two configurations run on the same draws can be compared pair by
pair.

Intervals are two-sided Student-t intervals of the mean over draws (95% by
default), clipped to the range the number can take (a count of training images
lies in [0, n], a paired difference of counts in [-n, n]): with K = 5 draws a
bootstrap of five numbers would understate the uncertainty.  A paired comparison
is the interval of the per-draw differences.
"""

from __future__ import annotations

import copy
import numbers
import os
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import scipy.stats

from recon_jax.errors import ConfigError, ResultFileError
from recon_jax.eval import identifiability
from recon_jax.eval.metrics_json import Metrics, Selection, shown
from recon_jax.io import plots
from recon_jax.studies.efficacy_results import Interval, Results, read_object


class Number(NamedTuple):
  """One number of a draw: its key in results.json, where a reconstruction report has it,
  and how the harness's tables show it.  Adding a number to the harness is one row of
  :data:`NUMBERS` (and, for a number the report does not yet read, one field of
  :class:`recon_jax.eval.metrics_json.Metrics`): the draws, the intervals, results.md and
  RESULTS.md follow from it."""

  key: str
  read: Callable[[Metrics], Any]  # metrics.json read typed -> float, or None where it is absent
  column: str = ""  # its column in results.md ('': aggregated, not shown)
  digits: int = 1
  count: bool = False  # a 0/1 number, shown as 'k of K' draws instead of a mean
  paired: bool = False  # compared draw by draw against the first variant
  summary: bool = False  # also a column of RESULTS.md's table of harness runs
  images: bool = False  # a count of training images: its interval is clipped to [0, n]
  nonnegative: bool = False  # never below 0 (seconds): its interval is clipped there
  rate: bool = False  # a rate in [0, 1] (an AUC, a TPR): its interval is clipped there


def _best_weights_test(m: Metrics):
  """The membership test read off the weights with the highest TPR at 0.1% FPR (its AUC
  where none resolves that rate), or None where none ran."""
  tests = [t for t in m.membership.tests.values() if t.kind == "weights"]
  if not tests:
    return None
  return max(tests, key=lambda t: (t.tpr_at_fpr.tenth_pct or -1.0, t.auc or -1.0))


def _weights_auc(m: Metrics):
  t = _best_weights_test(m)
  return None if t is None else t.auc


def _weights_tpr(m: Metrics):
  t = _best_weights_test(m)
  return None if t is None else t.tpr_at_fpr.tenth_pct


def _loss_tpr(m: Metrics):
  t = m.membership.tests.get("loss")
  return None if t is None else t.tpr_at_fpr.tenth_pct


def _ratio(m: Metrics):
  """The attack's best residual over the truth's (>= 1: the truth fits at least as well);
  None where the attack declined (no candidate to compare)."""
  if m.cannot:
    return None
  ratio = m.identifiability.ratio
  return ratio if ratio is not None and np.isfinite(ratio) and ratio > 0 else None


def _not_unique(m: Metrics):
  """1: images far from the training set (in the pixel box) fit exactly as well as it does."""
  confirmed = m.identifiability.family.confirmed
  return None if confirmed is None else float(confirmed)


def _truth_fits_best(m: Metrics):
  """1: the truth fits at least as well as the attack's best (within the residuals' band of
  equal fits) and no flat family runs through it."""
  ratio = _ratio(m)
  if ratio is None:
    return None
  tol = identifiability.tolerance(m.identifiability.per_restart_residual)
  return float(ratio >= 1 - tol and not _not_unique(m))


def _selected(m: Metrics):
  """What the attacker's own pick (the lowest-loss restart) recovers strictly; 0 where the
  restarts ran and none finished to be picked; None (a gap) where the report has no
  selection, or a pick without its count."""
  sel = m.selection
  if sel.best_by_loss_recovered_strict is not None:
    return sel.best_by_loss_recovered_strict
  return 0 if sel.n_restarts is not None and sel.best_by_loss_restart is None else None


# ``strict_selected`` is the restart the attacker picks without ground truth (its lowest
# final loss); ``strict_pooled`` pools every restart's candidates.  The identifiability
# ratio spans orders of magnitude, so its log10 is the number to average.
NUMBERS = (
  Number(
    "strict_pooled",
    lambda m: m.recovered_strict,
    "strict pooled",
    paired=True,
    summary=True,
    images=True,
  ),
  Number(
    "strict_selected",
    _selected,
    "strict attacker-selected",
    paired=True,
    summary=True,
    images=True,
  ),
  Number(
    "direct_strict",
    lambda m: None if m.handover is None else m.handover.direct_recovered_strict,
    "the cone alone, where it handed over",
    images=True,
  ),
  Number(
    "span_ceiling",
    lambda m: m.span_ceiling_strict,
    "what the change's span holds (each image projected on it)",
    images=True,
  ),
  Number(
    "ssim_gt_0.4",
    lambda m: m.n_ssim_gt_04,
    "SSIM > 0.4",
    paired=True,
    summary=True,
    images=True,
  ),
  Number(
    "baseline_mean_strict",
    lambda m: m.baseline_mean_image_recovered_strict,
    "mean-image baseline strict",
    summary=True,
    images=True,
  ),
  Number("baseline_mean_ssim_gt_0.4", lambda m: m.baseline_mean_image_n_ssim_gt_04, images=True),
  Number(
    "baseline_heldout_strict",
    lambda m: m.baseline_heldout_recovered_strict,
    "held-out baseline strict",
    summary=True,
    images=True,
  ),
  Number("baseline_heldout_ssim_gt_0.4", lambda m: m.baseline_heldout_n_ssim_gt_04, images=True),
  Number(
    "oracle_residual_rel",
    lambda m: m.oracle_residual_rel,
    "oracle residual",
    digits=3,
    summary=True,
  ),
  Number("identifiability_ratio", _ratio),
  Number(
    "log10_identifiability_ratio",
    lambda m: None if _ratio(m) is None else float(np.log10(_ratio(m))),
    "identifiability ratio (log10)",
    digits=2,
    summary=True,
  ),
  Number("truth_fits_best", _truth_fits_best, "draws where the truth fits best", count=True),
  Number(
    "truth_not_unique",
    _not_unique,
    "draws where other images fit exactly as well",
    count=True,
  ),
  Number(
    "time_s",
    lambda m: m.total_s,
    "time per draw (s)",
    digits=0,
    summary=True,
    nonnegative=True,
  ),
  Number("declined", lambda m: float(bool(m.cannot)), count=True),
  # membership read off the weights, no reconstruction (recon_jax.eval.weight_tests)
  Number("membership_weights_auc", _weights_auc, "weights' membership AUC", digits=3, rate=True),
  Number("membership_weights_tpr", _weights_tpr, "its TPR at 0.1% FPR", digits=2, rate=True),
  Number(
    "membership_loss_tpr", _loss_tpr, "the loss baseline's TPR at 0.1% FPR", digits=2, rate=True
  ),
)
DRAW_KEYS = tuple(n.key for n in NUMBERS)


def draw_config(cfg, draw: int):
  """A copy of a reconstruction config on data draw ``draw`` (images and victim re-drawn)."""
  if int(draw) < 0:
    raise ConfigError(f"draw must be >= 0, got {draw}.")
  out = copy.deepcopy(cfg)
  out.victim.data_seed = int(draw)
  out.victim.seed = int(draw)
  return out


def draw_numbers(metrics: Mapping) -> dict:
  """The per-draw numbers of one reconstruction report (metrics.json's dict; :data:`NUMBERS`),
  and the attacker's identification scores where the run computed them (AUC and precision@10
  of each).  A value of another type than declared is a gap (:func:`read_draw` says which)."""
  return _numbers(Metrics.from_metrics(metrics, problems=[]))


def _numbers(m: Metrics) -> dict:
  return {
    **{n.key: n.read(m) for n in NUMBERS},
    **{
      f"{stat}_{name}": value
      for name, score in m.scores.items()
      for stat, value in (("auc", score.auc), ("p10", score.precision_at_10))
    },
  }


class Draw(NamedTuple):
  """One draw's report as the harness and the reproduction read it (:func:`read_draw`)."""

  path: str  # its metrics.json
  n_train: int  # the training images it was scored against
  numbers: dict  # its per-draw numbers (:func:`draw_numbers`; None: a gap)
  selection: Selection  # its restarts and the attacker's pick
  problems: Tuple[str, ...]  # the values of another type than declared, read as gaps


def read_draw(folder: str) -> Optional[Draw]:
  """The report of the draw run in ``folder`` (its metrics.json), checked: None where it has
  none.  Raises :class:`~recon_jax.errors.ResultFileError` (``FILE: what is wrong``) where
  the file is not JSON, not a JSON object, or has no count of training images (``n_train``):
  no number of it can be trusted, and the draw must run again.  A value of another type
  than declared (:meth:`Metrics.from_metrics` with ``problems``) is a gap in its number, and
  :attr:`Draw.problems` says which; a key that is absent (an earlier version's report) is a
  gap too, and no problem."""
  path = os.path.join(folder, "metrics.json")
  metrics = read_object(path)
  return None if metrics is None else draw_of(metrics, path)


def draw_of(metrics, path: str) -> Draw:
  """:func:`read_draw` of ``metrics``: the JSON values read from ``path``, or the report the
  job wrote there (typed already)."""
  problems = []
  if isinstance(metrics, Metrics):
    m = metrics
  elif isinstance(metrics, Mapping):
    m = Metrics.from_metrics(metrics, problems=problems)
  else:
    raise ResultFileError(path, f"holds {shown(metrics)}, not a JSON object")
  n = m.n_train
  if n is None or n < 0:
    said = [p for p in problems if p.startswith("n_train ")]
    what = said[0] if said else "no n_train" if n is None else f"n_train holds {n}, below 0"
    raise ResultFileError(path, f"{what}: no count of training images to read it against")
  return Draw(path, int(n), _numbers(m), m.selection, tuple(problems))


def check_confidence(confidence) -> None:
  """Refuses a ``confidence`` of the intervals that is not a number in (0, 1)."""
  real = isinstance(confidence, numbers.Real) and not isinstance(confidence, (bool, np.bool_))
  if not (real and 0 < confidence < 1):
    raise ConfigError(
      f"confidence must be a number in (0, 1) (0.95: 95% intervals), got {confidence!r}.",
      "confidence",
    )


def interval(values: Sequence[float], confidence: float = 0.95, bounds=None) -> dict:
  """Mean and two-sided Student-t interval over draws; NaN bounds with fewer than 2 draws.

  ``bounds``: ``(low, high)``, the range the number can take (a count of n images:
  ``(0, n)``); the interval is clipped to it.
  """
  check_confidence(confidence)
  v = np.asarray([np.nan if x is None else x for x in values], np.float64)
  v = v[np.isfinite(v)]
  n = len(v)
  mean = float(v.mean()) if n else float("nan")
  if n < 2:
    lo = hi = float("nan")
  else:
    half = scipy.stats.t.ppf(0.5 + confidence / 2, n - 1) * v.std(ddof=1) / np.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds is not None:
      lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
  return {
    "mean": mean,
    "ci_low": float(lo),
    "ci_high": float(hi),
    "per_draw": [float(x) if x is not None else None for x in values],
    "n": n,
  }


def _bounds(key: str, n_train: Optional[int], paired: bool = False):
  """The range of number ``key`` with n = ``n_train`` training images (None: unbounded)."""
  number = next((n for n in NUMBERS if n.key == key), None)
  if number is None:
    return None
  if number.images and n_train is not None:
    return (-n_train if paired else 0, n_train)
  if number.nonnegative and not paired:
    return (0.0, np.inf)
  if number.rate:
    return (-1.0, 1.0) if paired else (0.0, 1.0)
  return None


def aggregate(
  per_draw: Sequence[Mapping], confidence: float = 0.95, n_train: Optional[int] = None
) -> dict:
  """``{key: interval}`` over draws for every number of :data:`NUMBERS` (and the AUC keys);
  counts of the ``n_train`` training images clipped to [0, n]."""
  keys = [n.key for n in NUMBERS]
  extra = sorted({k for d in per_draw for k in d} - set(keys))
  return {
    k: interval([d.get(k) for d in per_draw], confidence, _bounds(k, n_train))
    for k in (*keys, *extra)
  }


def paired(
  a: Sequence[Mapping],
  b: Sequence[Mapping],
  keys: Optional[Sequence[str]] = None,
  confidence: float = 0.95,
  n_train: Optional[int] = None,
) -> dict:
  """Per-draw differences ``a - b`` (same draws, same order) and their interval, per key
  (default: the :data:`NUMBERS` compared pair by pair; counts of the ``n_train`` training
  images clipped to [-n, n])."""
  keys = tuple(n.key for n in NUMBERS if n.paired) if keys is None else keys
  if len(a) != len(b):
    raise ConfigError(f"paired comparison needs the same draws: {len(a)} vs {len(b)}.")
  return {
    k: interval(
      [_minus(x.get(k), y.get(k)) for x, y in zip(a, b)], confidence, _bounds(k, n_train, True)
    )
    for k in keys
  }


def _minus(x, y):
  """``x - y``; None (a gap) where either is one."""
  return None if x is None or y is None else x - y


def verdict(diff: Interval) -> str:
  """'better' / 'worse' when the paired interval excludes 0, else 'no difference shown'."""
  if not np.isfinite(diff.ci_low):
    return "not enough draws"
  if diff.ci_low > 0:
    return "better"
  if diff.ci_high < 0:
    return "worse"
  return "no difference shown"


def variant_config(cfg, name: str):
  """The reconstruction config of variant ``name`` of an efficacy config: its base with the
  variant's overrides (``cfg.variants[name]``: dotted setting names, or sections such as
  ``{"victim": {"widths": ...}}`` whose settings are set one by one)."""
  if name not in cfg.variants:
    raise ConfigError(
      f"variants: unknown variant {name!r}; the config has {', '.join(cfg.variants)}.", "variants"
    )
  out = copy.deepcopy(cfg.base)
  for key, value in _flat(cfg.variants[name]).items():
    target, leaf = out, key
    while "." in leaf:
      head, leaf = leaf.split(".", 1)
      target = target[head]
    if leaf not in target:
      raise ConfigError(
        f"variant {name!r} sets {key}, which the job has no setting for.", "variants"
      )
    target[leaf] = value
  return out


def setting_of(cfg, name: str, argument):
  """Where the setting ``argument`` of variant ``name``'s job was written in the efficacy
  config ``cfg``: ``variants.NAME.SETTING`` when the variant sets it, else ``base.SETTING``
  (so an error names what the user wrote); None stays None."""
  if not argument:
    return argument
  if argument.startswith(("base.", "variants.")):
    return argument
  if argument in _flat(cfg.variants[name]):
    return f"variants.{name}.{argument}"
  return f"base.{argument}"


def _flat(overrides, prefix: str = "") -> dict:
  """``{dotted name: value}`` of overrides given as nested sections."""
  out = {}
  for key, value in overrides.items():
    if hasattr(value, "items"):
      out.update(_flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def efficacy_figure(path: Union[str, os.PathLike], out: Results, variants: Sequence[str]) -> None:
  """Per-draw strict counts of each variant next to its baselines, with the mean and interval.

  ``out`` is the efficacy harness's report.
  """
  series = [
    ("strict_pooled", "attack: strict, all restarts pooled", "tab:red", "o"),
    ("strict_selected", "attack: strict, attacker-selected restart", "tab:orange", "s"),
    ("baseline_heldout_strict", "baseline: unseen images scored as candidates", "tab:gray", "^"),
    ("baseline_mean_strict", "baseline: the training-mean image", "k", "x"),
  ]
  n = out.n_train
  fig, ax = plots.plt.subplots(figsize=(2.2 + 2.0 * len(variants), 4.2))
  width = 0.8 / len(series)
  for i, v in enumerate(variants):
    agg = out.variants[v]
    for j, (key, label, colour, marker) in enumerate(series):
      x0 = i + (j - (len(series) - 1) / 2) * width
      vals = np.asarray([np.nan if y is None else y for y in agg[key].per_draw], float)
      jitter = np.linspace(-0.25, 0.25, len(vals)) * width if len(vals) > 1 else np.zeros(1)
      ax.scatter(
        x0 + jitter, vals, s=14, c=colour, marker=marker, alpha=0.6, label=label if i == 0 else None
      )
      iv = agg[key]
      if np.isfinite(iv.ci_low):
        ax.errorbar(
          [x0],
          [iv.mean],
          yerr=[[iv.mean - iv.ci_low], [iv.ci_high - iv.mean]],
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
    f"Strict recoveries per data draw ({len(out.draws)} draws); bars: mean and 95% t interval",
    fontsize=9,
  )
  ax.legend(fontsize=7, loc="upper right")
  ax.grid(axis="y", alpha=0.3)
  plots.save(fig, path)


# ----------------------------------------------------------------------------- results.md


def fmt(iv: Interval, digits: int = 1) -> str:
  """``mean [low, high]`` of an interval (just the mean for a single value)."""
  lo_hi = f" [{iv.ci_low:.{digits}f}, {iv.ci_high:.{digits}f}]" if iv.n > 1 else ""
  return f"{iv.mean:.{digits}f}{lo_hi}"


def fmt_or_dash(iv: Optional[Interval], digits: int) -> str:
  return "–" if iv is None or not iv.n else fmt(iv, digits)


def _count(iv: Optional[Interval]) -> str:
  """``k of K``: draws whose 0/1 number is 1."""
  v = [x for x in (() if iv is None else iv.per_draw) if x is not None]
  return f"{int(sum(v))} of {len(v)}" if v else "–"


def _cell(number, iv: Optional[Interval]) -> str:
  return _count(iv) if number.count else fmt_or_dash(iv, number.digits)


def efficacy_table(out: Results, variants: Sequence[str]) -> str:
  """results.md of the efficacy harness: means and 95% intervals over draws, attack next to
  its baselines, then the paired differences against the first variant."""
  n = out.n_train
  shown = [x for x in NUMBERS if x.column]
  lines = [
    f"Draws {out.draws[0]}..{out.draws[-1]} ({len(out.draws)}), n = {n}; "
    "mean [95% t interval] over draws.",
    "",
    "| " + " | ".join(["variant"] + [x.column for x in shown]) + " |",
    "|" + "---|" * (len(shown) + 1),
  ]
  for v in variants:
    a = out.variants[v]
    lines.append("| " + " | ".join([v] + [_cell(x, a.get(x.key)) for x in shown]) + " |")
  if out.paired and out.reference == variants[0]:
    both = [x for x in NUMBERS if x.paired]
    lines += [
      "",
      f"Paired differences against `{variants[0]}` (same draws):",
      "",
      "| "
      + " | ".join(["variant"] + [x.column for x in both])
      + f" | verdict ({both[0].column}) |",
      "|" + "---|" * (len(both) + 2),
    ]
    for v, d in out.paired.items():
      cells = [fmt(d[x.key]) if x.key in d else "–" for x in both]
      lines.append("| " + " | ".join([v, *cells, d[both[0].key].verdict]) + " |")
  return "\n".join(lines) + "\n"
