"""The statistics the claims read: intervals over draws, per-draw numbers of an efficacy run,
paired differences, and the two ways an interval passes (above 0, or within a band)."""

from __future__ import annotations

from typing import Sequence

from recon_jax.studies import efficacy
from recon_jax.studies.efficacy_results import Interval
from reproduction.run_results import Harness

# The leak criteria: (the count they read, the share of n its mean must reach (0: none)).
LEAKS = {
  "leak": ("strict_pooled", 0.0),
  "leak_quarter": ("strict_pooled", 0.25),
  "leak_most": ("strict_pooled", 0.9),
  "selected_leak": ("strict_selected", 0.0),
  "selected_most": ("strict_selected", 0.75),
}


def interval(values: Sequence[float], conf: float = 0.95, bounds=None) -> Interval:
  """:func:`recon_jax.studies.efficacy.interval` of ``values`` (clipped to ``bounds``)."""
  return Interval.of(efficacy.interval(values, conf, bounds))


def yes(*above) -> str:
  """'yes' if every interval lies above 0 (or every check passed), 'too few draws' for n < 2."""
  oks = [a if isinstance(a, bool) else (None if a.n < 2 else a.ci_low > 0) for a in above]
  return "too few draws" if None in oks else ("yes" if all(oks) else "no")


def within(d: Interval, bound: float) -> str:
  """'yes' if the interval ``d`` lies within [-bound, bound], 'too few draws' for n < 2."""
  if d.n < 2:
    return "too few draws"
  return "yes" if -bound <= d.ci_low and d.ci_high <= bound else "no"


def per_draw(m: Harness, key: str, per_n: bool = False) -> list:
  """The default variant's per-draw ``key`` (None as NaN), divided by n with ``per_n``."""
  v = [float("nan") if x is None else x for x in m.results.variants["default"][key].per_draw]
  return [x / m.results.n_train for x in v] if per_n else v


def best_baseline(m: Harness, what: str = "strict") -> list:
  """Per draw, the stronger baseline: held-out images or the mean image (as reconstructions)."""
  return [
    b if h != h else max(h, b)
    for h, b in zip(per_draw(m, f"baseline_heldout_{what}"), per_draw(m, f"baseline_mean_{what}"))
  ]


def paired(a: Sequence[float], b: Sequence[float], conf: float, n=None) -> Interval:
  """The interval of the per-draw differences ``a - b`` (the lists paired draw by draw);
  with ``n``, differences of counts of n images, clipped to [-n, n]."""
  return interval([x - y for x, y in zip(a, b)], conf, None if n is None else (-n, n))
