"""The report's parts, each made once by its stage of the job and returned typed.

:mod:`recon_jax.job.pipeline` runs the stages; each part here is a :class:`Metrics` that
states its own keys (:meth:`~recon_jax.eval.sections.Section.stating`): what the report says
of the job before it runs (:func:`head`), of the victim (:func:`victim_part`), the scores
(:func:`scored`: the scoring stage, :func:`recon_jax.eval.scoring.score_run`), a blind
attack's and a membership-only audit's entries, and the seconds of each phase
(:func:`timing`).  The dicts the library's scoring returns are read into their declared
sections once, here, strictly (:func:`typed`: a key not declared raises naming its path);
nothing is edited after it is typed: the pipeline joins the parts in metrics.json's order
(:meth:`~recon_jax.eval.sections.Section.joined`) and the verdict completes the joined report
(:func:`recon_jax.eval.verdict.conclude`).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Optional

import numpy as np

from recon_jax import data
from recon_jax.attacks import span
from recon_jax.eval import evaluation, metrics_json, scoring
from recon_jax.eval.metrics_json import Metrics, Regime, Timing
from recon_jax.io import workdir
from recon_jax.job.planning import Plan
from recon_jax.job.settings import JobConfig
from recon_jax.types import Target
from recon_jax.victims import recipe

# Why a membership-only audit scores no reconstruction (metrics.json, report.md).
NOT_RECONSTRUCTED = "no reconstruction was attempted (attack=none): the membership tests alone"


def typed(cls, values, where: str = ""):
  """``values`` (a dict the library made: numpy scalars, arrays, NaN) as the JSON values
  metrics.json holds (:func:`recon_jax.io.workdir.jsonable`), read into the section ``cls``
  strictly (``where``: its path, for the error naming an undeclared key)."""
  return metrics_json.read(cls, workdir.jsonable(values), strict=True, where=where)


def assumptions(cfg: JobConfig, vcfg: recipe.VictimConfig, ds: data.Dataset, foreign: bool) -> dict:
  """What the report took as given about the victim and its data (stated in metrics.json):
  a user's own images are named as the dataset (``user:FOLDER``), with no draw of their own."""
  user = bool(cfg.threat.train or cfg.threat.heldout)
  out = {
    "dataset": ds.name if user else vcfg.dataset,
    "n_per_class": None if user else vcfg.n_per_class,
    "data_seed": None if user else vcfg.data_seed,
    "task_from_loss": vcfg.loss,
    "input_shape": list(ds.x_train.shape[1:]),
    "pixel_range": [0.0, 1.0],
    "training_mean_subtracted": bool(np.any(ds.mean != 0)),
  }
  if foreign:
    imp = cfg.threat
    out.update(
      input_layout=imp.input_layout,
      conv_stride=imp.stride,
      conv_padding=imp.padding,
      data_mean_file=imp.data_mean or None,
    )
  return out


def head(plan: Plan) -> Metrics:
  """What the report states of the job before it runs: the attack, the problem, what it
  took as given (:func:`assumptions`) and whether the attack assumes a stationary model."""
  cfg = plan.config
  assumed = assumptions(cfg, plan.victim, plan.source.dataset, plan.foreign)
  out = {
    "attack": cfg.attack,
    "problem": plan.problem,
    "assumed": assumed,
    "assumes_stationary": plan.spec.assumes_stationary(plan.options),
    "dataset": assumed["dataset"],
  }
  if plan.source.heldout_removed:
    out["heldout_removed"] = plan.source.heldout_removed
  return typed(Metrics, out)


def victim_part(
  vic, regime: Optional[Regime] = None, clipped: Optional[float] = None, oracle=None
) -> Metrics:
  """What the report states of the victim (its training summary, less its margins and
  outputs, and where it came from); with the attack's ``regime`` (what it read of theta*
  first), also that and the fraction of pixels clipped to the box (``clipped``), and the
  init whose training images started the search (``oracle``: an oracle's, where one did)."""
  summary = {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")}
  out = typed(Metrics, {"victim": summary, "victim_source": vic.source})
  if regime is None:
    return out
  parts = [Metrics.stating(clipped_to_box=clipped, regime=regime), out]
  if oracle is not None:  # the search started from training images: an oracle's
    parts.append(Metrics.stating(oracle_starts=oracle))
  return Metrics.joined(*parts)


def handed_over(why: str, then: Plan, groups: list, direct_s: float, reread_s: float) -> dict:
  """What the report says of a hand-over: why, to which search, and what the evaluation
  made of the direct attack's own candidates alone (every restart of the search started
  from them) and of what it read again from the search's (``groups``: the evaluation's
  ``also`` of those two), and the seconds of each."""
  direct, again = groups
  out = {
    "why": why,
    "to": then.config.attack,
    "direct_candidates": direct["n_candidates"],
    "direct_recovered_strict": direct["recovered_strict"],
    "direct_n_ssim_gt_0.4": direct["n_ssim_gt_0.4"],
    "reread_candidates": again["n_candidates"],
  }
  if again["n_candidates"]:
    out["reread_recovered_strict"] = again["recovered_strict"]
  return dict(out, direct_s=direct_s, reread_s=reread_s)


def span_ceiling(regime: Regime, target: Target, ds, ssim_threshold) -> Optional[dict]:
  """With a known theta_0 and a change confined to a span narrower than the input: how
  many training images that span holds (:func:`recon_jax.eval.evaluation.span_ceiling`), the
  most a reader of the first layer's change recovers; None elsewhere."""
  info = regime.span
  if not regime.known_init or info is None or info.rule == "all":
    return None
  if not info.dim or info.dim >= (info.input_dim or 0):
    return None
  basis, _ = span.span_basis(target.fit, 0.0, len(ds.x_train))
  return evaluation.span_ceiling(basis, ds, ssim_threshold)


class Scored(NamedTuple):
  """The scoring stage's outcome (:func:`scored`)."""

  entries: Metrics  # the counts, the scores, each restart (before the timing in metrics.json)
  after: Metrics  # the hand-over and the span's ceiling (after the timing)
  timing: dict  # seconds of each scoring phase
  result: Any  # the pooled evaluation (images.EvalResult; None where nothing was scored)
  arrays: dict  # what it adds to reconstructions.npz


def scored(plan: Plan, att, vic, ds: data.Dataset) -> Scored:
  """The scoring stage (:func:`recon_jax.eval.scoring.score_run`) of the attack's candidates
  (``att``: :class:`recon_jax.job.pipeline.Attacked`), with the hand-over's and the span
  ceiling's entries, and each restart's hyperparameters beside its scores."""
  cfg, found, ran = plan.config, att.found, att.ran
  rerun = ran.spec.rerunnable(ran.options)
  scores = scoring.score_run(
    vic.apply_fn,
    vic.num_outputs,
    plan.problem,
    att.target,
    ds,
    found.candidates,
    found.weights,
    found.final_loss,
    found.run,
    attack=found.attack,
    hparams=ran.stages[-1][1] if ran.stages else None,
    ssim_threshold=cfg.evaluation.ssim_threshold,
    seed=cfg.search.seed,
    identify=cfg.evaluation.identify,
    normalize=cfg.normalize,
    stability_candidates=cfg.evaluation.identify_stability_candidates if rerun else 0,
    labels=found.labels,
    # after a hand-over the direct attack's images are the attacker's too
    also=() if att.direct is None else (att.direct.candidates[0], att.reread),
    theta=vic.params,
    init=vic.init,
  )
  made = scores.entries()
  hp = {k: np.asarray(v) for k, v in found.hparams.items()}
  rows = [
    {**row, **{k: float(v[i]) for k, v in hp.items()}} for i, row in enumerate(made["per_restart"])
  ]
  ident = made["identifiability"]
  family = ident.get("family") or {}
  witness = family.get("_witness")
  if "_witness" in family:  # the witness goes to reconstructions.npz, not metrics.json
    ident = {**ident, "family": {k: v for k, v in family.items() if k != "_witness"}}
  entries = {
    "n_train": len(ds.x_train),
    "m": int(found.candidates.shape[1]),
    "num_restarts": ran.config.search.num_restarts if found.run is not None else 1,
    **made,
    "identifiability": ident,
    "per_restart": rows,
  }
  arrays = {"train_idx": ds.train_idx}
  after = {}
  if att.direct is not None:
    groups = scores.evaluation["also"]
    after["handover"] = handed_over(att.why, ran, groups, att.direct_s, att.reread_s)
    # the images the direct attack read, and read again from the search's, scored beside
    # the restarts: the reconstructions a user looks at after a hand-over
    arrays.update(direct_images=att.direct.candidates[0], reread_images=att.reread)
  t0 = time.time()
  ceiling = span_ceiling(att.regime, att.target, ds, cfg.evaluation.ssim_threshold)
  timing = dict(scores.timing)
  if ceiling is not None:
    after["span_ceiling"] = ceiling
    timing["span_ceiling_s"] = time.time() - t0
  if scores.result is not None:
    arrays.update(recon=scores.result.recon, ssim=scores.result.ssim)
  if witness is not None:
    arrays["family_witness"] = np.asarray(witness, np.float32)
  return Scored(typed(Metrics, entries), typed(Metrics, after), timing, scores.result, arrays)


def blind(ds: data.Dataset, found) -> Metrics:
  """A blind attack's entries (no training images): the candidates and the attacker's own
  view of them; nothing is counted."""
  return typed(
    Metrics,
    {
      "dataset": ds.name,
      "n_train": 0,
      "blind": True,
      "m": int(found.candidates.shape[1]),
      "num_restarts": int(len(found.final_loss)),
      "recovered_strict": None,
      "identifiability": {"skipped": "no training images (a blind attack)", "ratio": None},
      **evaluation.unscored(found.final_loss),
    },
  )


def membership_only(ds: data.Dataset, membership: Optional[dict]) -> Metrics:
  """A membership-only audit's entries (``attack=none``): every given image scored by the
  tests read off the weights (``membership``: :func:`recon_jax.eval.scoring.weight_membership`);
  nothing is counted as recovered (``recovered_strict`` None)."""
  return typed(
    Metrics,
    {
      "n_train": len(ds.x_train),
      "membership_only": True,
      "m": 0,
      "num_restarts": 0,
      "recovered_strict": None,
      "identifiability": {"skipped": NOT_RECONSTRUCTED, "ratio": None},
      **evaluation.unscored(np.zeros(0)),
      "membership": membership
      or {"skipped": "no held-out images to compare the training images with"},
    },
  )


def timing(*parts: dict) -> Timing:
  """The report's ``timing``: the seconds of each phase, ``parts`` in order (a later part's
  value of a phase in the earlier one's place)."""
  out = {}
  for part in parts:
    out.update(part)
  return typed(Timing, out, "timing")
