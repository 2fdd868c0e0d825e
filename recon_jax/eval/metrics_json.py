"""metrics.json read back typed: what the verdict, the efficacy harness and the reproduction
read of a reconstruction's report, one frozen dataclass per section.

The job writes metrics.json as a nested dict (:mod:`recon_jax.job.pipeline`); this module
only reads it.  :meth:`Metrics.from_metrics` takes that dict, or one written by an earlier
version, and gives every number a reader needs as an attribute: a key that is absent reads
as the field's default (None unless stated), never a KeyError, and a section that is absent
reads as an empty one, so ``report.regime.cone.cannot`` is None on a run of another
attack.  Values are kept as the file holds them (a count stays the int, a ratio the float or
None it was), so a reader formats the same number it read before.

Each field says where it sits in the file with :func:`key`: one declaration per key, and
adding a number to a section is one line.  This is not the report the job writes
(:mod:`recon_jax.job.report`: report.md) nor the evaluation that makes its counts
(:mod:`recon_jax.eval.evaluation`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Tuple

_ABSENT = object()


def key(*path: str, default=None, section=None, rows=None, named=None, optional=False):
  """A field read from ``path`` in its section's dict (default: the field's own name).

  ``section``: a dataclass read from the dict found there (an empty one where it is absent;
  with ``optional``, None); ``rows``: a tuple of that dataclass, one per item of the list
  found there; ``named``: ``{name: that dataclass}`` of the dict found there.  ``default``:
  the value where a key of ``path`` is absent (a key that holds None reads as None).
  """
  if section is not None:
    default = None if optional else dataclasses.MISSING
    factory = dataclasses.MISSING if optional else section
  elif rows is not None:
    default, factory = dataclasses.MISSING, tuple
  elif named is not None:
    default, factory = dataclasses.MISSING, dict
  else:
    factory = dataclasses.MISSING
  return dataclasses.field(
    default=default,
    default_factory=factory,
    metadata={"path": path, "section": section, "rows": rows, "named": named},
  )


def _mapping(value) -> Mapping:
  """``value`` where it is a dict, else an empty one (an absent or None section)."""
  return value if isinstance(value, Mapping) else {}


def _at(d: Mapping, path: Sequence[str]):
  """The value at ``path`` in ``d``, or ``_ABSENT`` where a key on the way is missing."""
  for name in path[:-1]:
    d = _mapping(d.get(name))
  return d.get(path[-1], _ABSENT)


def read(cls, d: Optional[Mapping]):
  """An instance of the section ``cls`` (a dataclass of :func:`key` fields) read from ``d``."""
  d, values = _mapping(d), {}
  for f in dataclasses.fields(cls):
    meta = f.metadata
    raw = _at(d, meta.get("path") or (f.name,))
    if meta.get("section") is not None:
      empty = raw is _ABSENT or not raw
      values[f.name] = None if empty and f.default is None else read(meta["section"], raw)
    elif meta.get("rows") is not None:
      rows = raw if isinstance(raw, (list, tuple)) else ()
      values[f.name] = tuple(read(meta["rows"], r) for r in rows)
    elif meta.get("named") is not None:
      values[f.name] = {k: read(meta["named"], v) for k, v in _mapping(raw).items()}
    elif raw is not _ABSENT:
      values[f.name] = raw
  return cls(**values)


@dataclasses.dataclass(frozen=True)
class Victim:
  """``victim``: the victim's training summary."""

  loss: Optional[float] = key()  # the final training loss
  train_error: Optional[float] = key()  # the fraction of its training set it misclassifies
  stationary: Optional[bool] = key()  # False: its convergence phase ended before its tolerance
  grad_norm_rel: Optional[float] = key()  # its relative gradient norm at the end

  @classmethod
  def of(cls, summary: Optional[Mapping]) -> "Victim":
    """A victim's summary (``Victim.summary``, or metrics.json's ``victim``) read typed."""
    return read(cls, summary)


@dataclasses.dataclass(frozen=True)
class Cone:
  """``regime.cone``: what the cone read of the first layer's change (empty for other attacks)."""

  cannot: Optional[str] = key()  # why it cannot test the model (its gate), or None
  span_dim: Optional[int] = key()  # directions of the change above its rounding noise
  under_noise_floor: Optional[int] = key()  # training images with no facet above that noise
  short: Optional[str] = key()  # how it read fewer images than the span holds, or None


@dataclasses.dataclass(frozen=True)
class Regime:
  """``regime``: what the job read of theta* before the attack."""

  known_init: Optional[bool] = key()  # theta_0 known: the attack fits theta* - theta_0
  span_dim: Optional[int] = key("span", "dim")  # None where the span was not computed
  span_why: Optional[str] = key()  # why it was not (a first layer that is not dense)
  handover_skipped: Optional[str] = key()  # why the cone did not hand over to the search
  cone: Cone = key(section=Cone)

  @property
  def not_dense(self) -> bool:
    """The first layer is not dense: the span and the flat-family checks do not apply."""
    return self.span_dim is None and bool(self.span_why)


@dataclasses.dataclass(frozen=True)
class Selection:
  """``selection``: the restarts and the attacker's own pick among them."""

  n_diverged: Optional[int] = key()
  best_by_loss_restart: Optional[int] = key()  # the attacker's pick: the lowest final loss
  best_by_loss_recovered_strict: Optional[int] = key()  # what that pick recovers strictly
  best_true_restart: Optional[int] = key()  # the one that truly recovers most (None: unscored)

  @property
  def picked_best(self) -> Optional[bool]:
    """Whether the attacker's pick was the truly best restart (None: nothing scored)."""
    if self.best_true_restart is None:
      return None
    return self.best_by_loss_restart == self.best_true_restart


@dataclasses.dataclass(frozen=True)
class Family:
  """``identifiability.family``: the flat family of exact fits through the training set."""

  confirmed: Optional[bool] = key()  # None where it was not looked for
  first_layer_rank: Optional[int] = key()
  input_dim: Optional[int] = key()


@dataclasses.dataclass(frozen=True)
class Identifiability:
  """``identifiability``: how well the training set fits the attack's equations against
  what the attack found."""

  ratio: Optional[float] = key()  # the attack's best residual / the training set's
  truth_residual: Optional[float] = key()  # the training set's, a fraction of ||reference||^2
  per_restart_residual: Optional[Sequence[float]] = key()
  best_restart: Optional[int] = key()  # the restart that fits best
  skipped: Optional[str] = key()  # why it was not scored
  family: Family = key(section=Family)


@dataclasses.dataclass(frozen=True)
class Membership:
  """``membership``: the membership test of the training images against held-out ones."""

  auc: Optional[float] = key()
  tpr_at_1pct: Optional[float] = key("tpr_at_fpr", "0.01")  # true positives at 1% FPR
  p_value: Optional[float] = key()
  level: float = key(default=0.01)
  smallest_p: float = key(default=1)  # the smallest p-value its images could reach
  testable: Optional[bool] = key()  # smallest_p reaches the level
  significant: Optional[bool] = key()
  skipped: Optional[str] = key()  # why it was not tested


@dataclasses.dataclass(frozen=True)
class Handover:
  """``handover``: the cone handed over to the KKT search in the change's span."""

  why: Optional[str] = key()
  direct_candidates: Optional[int] = key()  # the cone's images, each a start of the search
  direct_recovered_strict: Optional[int] = key()  # what the cone's recover alone
  reread_candidates: Optional[int] = key()  # the first layer's facets read again, past one layer
  reread_recovered_strict: Optional[int] = key()


@dataclasses.dataclass(frozen=True)
class Restart:
  """One row of ``per_restart``."""

  restart: Optional[int] = key()
  recovered_strict: Optional[int] = key()


@dataclasses.dataclass(frozen=True)
class Scores:
  """One score of ``identification.scores``: how well it tells the real reconstructions."""

  auc: Optional[float] = key()
  precision_at_10: Optional[float] = key("precision@10")


@dataclasses.dataclass(frozen=True)
class Metrics:
  """A reconstruction's metrics.json, as its readers read it (:meth:`from_metrics`)."""

  attack: Optional[str] = key()
  n_train: Optional[int] = key()  # 0: a blind attack
  m: Optional[int] = key()  # candidates per restart
  num_restarts: Optional[int] = key()
  recovered_strict: Optional[int] = key()  # pooled over restarts (None: blind)
  n_ssim_gt_04: Optional[int] = key("n_ssim_gt_0.4")
  baseline_heldout_recovered_strict: Optional[int] = key()
  baseline_heldout_n_ssim_gt_04: Optional[int] = key("baseline_heldout_n_ssim_gt_0.4")
  baseline_mean_image_recovered_strict: Optional[int] = key()
  baseline_mean_image_n_ssim_gt_04: Optional[int] = key("baseline_mean_image_n_ssim_gt_0.4")
  oracle_residual_rel: Optional[float] = key()
  span_ceiling_strict: Optional[int] = key("span_ceiling", "recovered_strict")  # the span holds
  total_s: Optional[float] = key("timing", "total_s")
  task_from_loss: Optional[str] = key("assumed", "task_from_loss", default="logistic")
  assumes_stationary: Optional[bool] = key()
  precision_warning: Optional[str] = key()
  victim: Victim = key(section=Victim)
  regime: Regime = key(section=Regime)
  selection: Selection = key(section=Selection)
  identifiability: Identifiability = key(section=Identifiability)
  membership: Membership = key(section=Membership)
  handover: Optional[Handover] = key(section=Handover, optional=True)  # None: no hand-over
  per_restart: Tuple[Restart, ...] = key(rows=Restart)
  scores: Mapping[str, Scores] = key("identification", "scores", named=Scores)

  @classmethod
  def from_metrics(cls, metrics: Optional[Mapping[str, Any]]) -> "Metrics":
    """metrics.json's dict read typed (absent keys: the fields' defaults)."""
    return read(cls, metrics)

  @property
  def cannot(self) -> Optional[str]:
    """Why the attack said, from what it read of theta* before searching, that it cannot
    test the model (the cone's gate), or None."""
    return self.regime.cone.cannot
