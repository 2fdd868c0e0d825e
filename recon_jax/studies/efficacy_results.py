"""The efficacy harness's own report (its metrics.json), typed: built where the harness makes
it (:func:`recon_jax.studies.runner.run_efficacy`), written from the type
(:meth:`Results.to_dict`), and read back into it once, checked, by :func:`read_results`
(:func:`results_of` for values read already).  The reproduction reads it by attribute.

The file: ``draws``, ``n_train`` (the first variant's), ``n_train_of`` (each variant's),
``variants`` (``{variant: {number: interval}}``), ``paired_vs_FIRST`` (``{variant: {number:
interval with its verdict}}``: the paired differences against the first variant) and, for
a leakage map, ``map`` (its cells, :func:`recon_jax.studies.leakage_map.cells`).  An
interval is ``{mean, ci_low, ci_high, per_draw, n}``; NaN is written as null.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, NamedTuple, Optional, Tuple

from recon_jax.errors import ResultFileError
from recon_jax.eval.metrics_json import fits, shown

PAIRED = "paired_vs_"  # + the first variant: the key of the paired differences


class Interval(NamedTuple):
  """One number over draws (:func:`recon_jax.studies.efficacy.interval`): its mean and
  two-sided t interval (NaN with too few draws), each draw's value (None: a gap) and how
  many draws it is over; a paired difference also has its :func:`verdict
  <recon_jax.studies.efficacy.verdict>`."""

  mean: float
  ci_low: float
  ci_high: float
  per_draw: Tuple[Optional[float], ...]
  n: int
  verdict: Optional[str] = None  # a paired difference's ('better', 'worse', ...)

  @classmethod
  def of(cls, d: Mapping) -> "Interval":
    """The interval of ``d``, :func:`~recon_jax.studies.efficacy.interval`'s dict (or one
    read from a file, checked: None read as NaN)."""
    nan = lambda x: float("nan") if x is None else x  # noqa: E731
    return cls(
      nan(d["mean"]),
      nan(d["ci_low"]),
      nan(d["ci_high"]),
      tuple(d["per_draw"]),
      int(d["n"]),
      d.get("verdict"),
    )

  def to_dict(self) -> dict:
    out = {
      "mean": self.mean,
      "ci_low": self.ci_low,
      "ci_high": self.ci_high,
      "per_draw": list(self.per_draw),
      "n": self.n,
    }
    return out if self.verdict is None else dict(out, verdict=self.verdict)


class Results(NamedTuple):
  """The harness's report: every variant's numbers over the same draws."""

  draws: Tuple[int, ...]
  n_train: int  # the first variant's training images
  variants: Mapping[str, Mapping[str, Interval]]  # {variant: {number: interval}}, run order
  n_train_of: Optional[Mapping[str, int]] = None  # each variant's (None: not in the file)
  paired: Optional[Mapping[str, Mapping[str, Interval]]] = None  # against the first variant
  map: Optional[list] = None  # a leakage map's cells, as written (None: no map)

  @property
  def reference(self) -> str:
    """The first variant: the one the paired differences are taken against."""
    return next(iter(self.variants))

  def to_dict(self) -> dict:
    """metrics.json's object: the keys in the order the harness has always written them."""
    ivs = lambda of: {v: {k: iv.to_dict() for k, iv in a.items()} for v, a in of.items()}  # noqa: E731
    out: dict = {"draws": list(self.draws), "n_train": self.n_train}
    if self.n_train_of is not None:
      out["n_train_of"] = dict(self.n_train_of)
    out["variants"] = ivs(self.variants)
    if self.paired is not None:
      out[PAIRED + self.reference] = ivs(self.paired)
    if self.map is not None:
      out["map"] = self.map
    return out


def read_object(path: str) -> Optional[dict]:
  """The JSON object in file ``path``; None where there is no such file.  Raises
  :class:`~recon_jax.errors.ResultFileError` naming it where it cannot be read, is not JSON
  or holds something else than an object."""
  if not os.path.lexists(path):
    return None
  try:
    with open(path) as f:
      out = json.load(f)
  except (OSError, ValueError) as e:  # (a UnicodeDecodeError and a JSON error are ValueErrors)
    raise ResultFileError(path, f"unreadable ({type(e).__name__}: {e})") from None
  if not isinstance(out, dict):
    raise ResultFileError(path, f"holds {shown(out)}, not a JSON object")
  return out


ABSENT = object()  # a key a file lacks (:func:`refuse`)


def refuse(path: str, where: str, value, what: str):
  """Raises :class:`~recon_jax.errors.ResultFileError`: the file ``path``'s key ``where``
  holds ``value`` (:data:`ABSENT`: nothing), not ``what``."""
  held = "nothing" if value is ABSENT else shown(value)
  raise ResultFileError(path, f"{where} holds {held}, not {what}")


def read_results(path: str, has: Optional[str] = None) -> Optional[Results]:
  """The harness's report in file ``path`` (:func:`results_of`); None where there is none."""
  out = read_object(path)
  return None if out is None else results_of(out, path, has)


def _count(v) -> bool:
  return v is not None and fits(int, v) and v >= 0


def results_of(out: Any, path: str, has: Optional[str] = None) -> Results:
  """``out``, the harness's metrics.json read from ``path``, as :class:`Results`, where it
  holds its draws, n, at least one variant (``has``: that one among them; the reproduction
  reads ``default``) and each variant's intervals (each number's ``{mean, ci_low, ci_high,
  per_draw, n}``, the mean a number over at least one draw, the bounds over two); else
  raises :class:`~recon_jax.errors.ResultFileError` naming the file and the first key at
  fault.  A number a variant lacks is no fault (a claim that reads it says so); the paired
  differences and the variants' n, where the file has them, are checked alike."""
  if not isinstance(out, Mapping):
    raise ResultFileError(path, f"holds {shown(out)}, not a JSON object")

  def need(ok: bool, where: str, value, what: str) -> None:
    if not ok:
      refuse(path, where, value, what)

  draws, n, variants = (out.get(k, ABSENT) for k in ("draws", "n_train", "variants"))
  need(isinstance(draws, list) and all(map(_count, draws)), "draws", draws, "a list of draws")
  need(_count(n), "n_train", n, "a count of training images")
  ok = isinstance(variants, Mapping) and bool(variants)
  ok = ok and (has is None or isinstance(variants.get(has), Mapping))
  what = "an object of variants" if has is None else f"an object with the variant {has}"
  need(ok, "variants", variants, what)
  n_of = out.get("n_train_of")
  ok = n_of is None or (isinstance(n_of, Mapping) and all(map(_count, n_of.values())))
  need(ok, "n_train_of", n_of, "an object of counts")
  first = next(iter(variants))
  paired = out.get(PAIRED + first)
  need(paired is None or isinstance(paired, Mapping), PAIRED + first, paired, "an object")
  spot = out.get("map")
  need(spot is None or isinstance(spot, list), "map", spot, "a list of cells")
  return Results(
    tuple(int(d) for d in draws),
    int(n),
    _variants(variants, "variants", need),
    None if n_of is None else {v: int(k) for v, k in n_of.items()},
    None if paired is None else _variants(paired, PAIRED + first, need),
    spot,
  )


def _variants(block: Mapping, at: str, need) -> dict:
  """``{variant: {number: Interval}}`` of ``block`` (the file's key ``at``), each checked."""
  out = {}
  for v, of_v in block.items():
    need(isinstance(of_v, Mapping), f"{at}.{v}", of_v, "an object")
    out[v] = {k: _interval(iv, f"{at}.{v}.{k}", need) for k, iv in of_v.items()}
  return out


def _interval(iv, at: str, need) -> Interval:
  need(isinstance(iv, Mapping), at, iv, "an interval")
  per, k_draws = iv.get("per_draw", ABSENT), iv.get("n", ABSENT)
  ok = isinstance(per, list) and all(fits(float, x) for x in per)
  need(ok, f"{at}.per_draw", per, "a list of numbers")
  need(_count(k_draws), f"{at}.n", k_draws, "a count of draws")
  for part, least in (("mean", 1), ("ci_low", 2), ("ci_high", 2)):
    value = iv.get(part, ABSENT)
    ok = value is not ABSENT and fits(float, value) and (value is not None or k_draws < least)
    need(ok, f"{at}.{part}", value, "a number")
  verdict = iv.get("verdict")
  need(verdict is None or isinstance(verdict, str), f"{at}.verdict", verdict, "a string")
  return Interval.of(iv)
