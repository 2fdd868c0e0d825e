"""What the claims and the report read of one finished process, typed: an efficacy run
(:class:`Harness`), a toy's seed (:class:`Toy`) or an init study's seed (:class:`InitStudy`).
Each is read from its metrics.json once, checked, here (:func:`harness_of`, :func:`toy_of`,
:func:`init_study_of`); a file that does not hold what they read raises
:class:`~recon_jax.errors.ResultFileError` naming the file and the first key at fault.
results.json keeps each as :meth:`to_dict` writes it.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

from recon_jax.eval.metrics_json import Selection, fits
from recon_jax.studies.efficacy_results import ABSENT, Results, refuse


class Harness(NamedTuple):
  """An efficacy run: its report, its data set, and per draw whose restarts were scored
  whether the attacker's pick was the truly best restart."""

  results: Results
  dataset: str
  pick_same: Tuple[bool, ...] = ()

  def to_dict(self) -> dict:
    return dict(self.results.to_dict(), dataset=self.dataset, pick_same=list(self.pick_same))


def harness_of(results: Results, dataset: str, selections: Sequence[Selection] = ()) -> Harness:
  """The efficacy run of report ``results`` on ``dataset``; ``selections``: each draw's
  report's :attr:`Metrics.selection <recon_jax.eval.metrics_json.Metrics.selection>` (a
  draw whose restarts were not scored adds nothing to :attr:`Harness.pick_same`)."""
  picks = (s.picked_best for s in selections)
  return Harness(results, dataset, tuple(p for p in picks if p is not None))


class Toy(NamedTuple):
  """One seed of the 2-D toy."""

  n_train: int
  recovered: int  # by the attacker-selected restart
  recovered_best_restart: int
  recovered_pooled: int
  at_init: int  # recovered by the starting points themselves
  oracle_residual_rel: float
  kink_fraction: float
  written: Mapping[str, Any]  # its metrics.json without the rows per restart and the victim

  def to_dict(self) -> dict:
    return dict(self.written)


class Finding(NamedTuple):
  """One finding of an init study's sub-run: whether it held (None: not run)."""

  reproduced: Optional[bool]
  evidence: str


class InitStudy(NamedTuple):
  """One seed of the initialisation study."""

  dataset: str
  n_train: int
  wall_s: float
  findings: Mapping[str, Mapping[str, Finding]]  # {sub-run: {finding: Finding}}
  written: Mapping[str, Any]  # its metrics.json with only the findings of each sub-run

  def to_dict(self) -> dict:
    return dict(self.written)


def _need(path: str):
  def need(ok: bool, where: str, value, what: str) -> None:
    if not ok:
      refuse(path, where, value, what)

  return need


def _count(v) -> bool:
  return v is not None and fits(int, v) and v >= 0


def _top(m: Mapping, path: str, counts: Sequence[str], numbers: Sequence[str]) -> None:
  need = _need(path)
  for k in counts:
    need(_count(m.get(k, ABSENT)), k, m.get(k, ABSENT), "a count")
  for k in numbers:
    value = m.get(k, ABSENT)
    need(value is not None and fits(float, value), k, value, "a number")


def toy_of(m: Mapping, path: str) -> Toy:
  """The toy's seed whose metrics.json (read from ``path``) is ``m``."""
  counts = ("n_train", "recovered", "recovered_best_restart", "recovered_pooled")
  _top(m, path, counts, ("oracle_residual_rel", "kink_fraction"))
  at = m.get("at_init")
  ok = at is None or (isinstance(at, dict) and _count(at.get("recovered", 0)))
  _need(path)(ok, "at_init", at, "an object with a count recovered")
  return Toy(
    *(m[k] for k in counts),
    (at or {}).get("recovered", 0),
    m["oracle_residual_rel"],
    m["kink_fraction"],
    {k: v for k, v in m.items() if k not in ("per_restart", "victim")},
  )


def init_study_of(m: Mapping, path: str) -> InitStudy:
  """The init study's seed whose metrics.json (read from ``path``) is ``m``."""
  need = _need(path)
  _top(m, path, ("n_train",), ("wall_s",))
  need(isinstance(m.get("dataset"), str), "dataset", m.get("dataset", ABSENT), "a string")
  runs = m.get("sub_runs", ABSENT)
  need(isinstance(runs, dict) and bool(runs), "sub_runs", runs, "an object of sub-runs")
  findings = {}
  for name, r in runs.items():
    found = r.get("findings", ABSENT) if isinstance(r, dict) else r
    need(isinstance(found, dict), f"sub_runs.{name}.findings", found, "an object")
    findings[name] = {}
    for k, f in found.items():
      at = f"sub_runs.{name}.findings.{k}"
      need(isinstance(f, dict), at, f, "an object")
      held = f.get("reproduced", ABSENT)
      need(held is None or isinstance(held, bool), f"{at}.reproduced", held, "true or false")
      evidence = f.get("evidence", "")
      need(isinstance(evidence, str), f"{at}.evidence", f.get("evidence"), "a string")
      findings[name][k] = Finding(held, evidence)
  written = dict(m, sub_runs={k: {"findings": x["findings"]} for k, x in runs.items()})
  return InitStudy(m["dataset"], m["n_train"], m["wall_s"], findings, written)
