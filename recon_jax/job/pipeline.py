"""The pipeline every binary, study and benchmark calls.

data -> victim (trained, cached or imported) -> theta* -> Target ->
x-initialisation -> attack -> the one batched loop -> candidates ->
evaluation -> report dict.

The pieces (:func:`make_target`, :func:`candidate_labels`,
:func:`load_or_train_victim`, :func:`recon_jax.engine.loop.run_attack`) are plain functions of
library objects; :func:`reconstruct` chains them for one job (its typed settings,
:class:`recon_jax.job.settings.JobConfig`) and returns the report without
writing anything but the optional resume file.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, NamedTuple, Optional, Tuple

from absl import logging
import numpy as np

from recon_jax import attacks, data
from recon_jax.attacks import search, span
from recon_jax.attacks.search import Found
from recon_jax.core import diagnostics
from recon_jax.engine import loop, precision
from recon_jax.eval import scoring, verdict
from recon_jax.job import planning
from recon_jax.job.planning import Plan, candidate_labels, num_candidates
from recon_jax.job.settings import JobConfig
from recon_jax.types import Attack, HParams, Target, float_dtype  # noqa: F401 (re-exported)
from recon_jax.victims import loading, victim

ALL_DIVERGED = "every restart diverged"  # how a run that recovered nothing by failing says so


# ----------------------------------------------------------------------------- one job


def _as_float(v) -> Optional[float]:
  try:
    v = float(v)
  except (TypeError, ValueError):
    return None
  return v if np.isfinite(v) else None


def victim_warning(summary: dict, loss: str, num_classes: int) -> Optional[str]:
  """Why a victim's parameters are unlikely to hold its training data (None: no reason).

  A classifier whose final training loss is within 1% of chance (ln 2 for
  logistic, ln C for ce) did not train; one that misclassifies part of its
  training set is not at a KKT point of margin maximisation, the assumption
  of the KKT attack.  Regression (mse) victims are not judged.
  """
  if loss not in ("logistic", "ce"):
    return None
  chance = float(np.log(2 if loss == "logistic" else max(int(num_classes), 2)))
  value, err = _as_float(summary.get("loss")), _as_float(summary.get("train_error"))
  name = "ln 2" if loss == "logistic" else f"ln {int(num_classes)}"
  if value is not None and abs(value - chance) <= 0.01 * chance:
    return (
      f"the victim did not train: its final training loss {value:.4g} is within 1% of "
      f"chance ({name} = {chance:.4g}); train it longer, with a larger lr or another "
      "init, or nothing can be reconstructed"
    )
  if err is not None and err > 0:
    return (
      f"the victim misclassifies {err:.1%} of its training set (train error {err:.3g}): "
      "it is not at the KKT point the attack assumes; train it longer or with a larger lr"
    )
  return None


def run_warnings(metrics: dict, num_classes: int) -> list:
  """What a reader of a reconstruction's metrics must know before trusting them.

  Also sets ``metrics["victim_warning"]`` (:func:`victim_warning`).
  """
  out = []
  loss = (metrics.get("assumed") or {}).get("task_from_loss", "logistic")
  metrics["victim_warning"] = victim_warning(metrics.get("victim") or {}, loss, num_classes)
  if metrics["victim_warning"]:
    out.append(metrics["victim_warning"])
  n_div = (metrics.get("selection") or {}).get("n_diverged")
  spec = attacks.specs().get(metrics.get("attack"))
  searched = spec is None or spec.direct is None
  r = metrics.get("num_restarts") or 0
  if searched and n_div and n_div == r:
    out.append(
      f"{ALL_DIVERGED} ({n_div} of {n_div}): nothing was reconstructed; "
      "lower the learning rates (lr_x, lr_lam) or the alpha range"
    )
  elif searched and n_div and 2 * n_div >= r:
    out.append(
      f"{n_div} of {r} restarts diverged: the search was unstable on this model; lower the "
      "learning rates (lr_x, lr_lam) or the alpha range"
    )
  m, n = metrics.get("m") or 0, metrics.get("n_train") or 0
  if not searched and 2 * m < n:
    out.append(
      f"attack={metrics.get('attack')} read {m} candidates for {n} training images: most of "
      "the training set cannot be among them (attack=cone finds few facets at large n, where "
      "attack=kkt with known_init and subspace reaches more; docs/leakage.md)"
    )
  truth = (metrics.get("identifiability") or {}).get("truth_residual")
  if truth is not None and truth > verdict.FAR_FROM_ASSUMPTION:
    out.append(
      f"the training set leaves {truth:.0%} of the fitted parameters unexplained by the "
      "attack's equations: this model is not of the form the attack assumes (a count of 0 "
      "here says nothing about its privacy)"
    )
  regime = metrics.get("regime") or {}
  if regime.get("span") is None and regime.get("span_why"):
    out.append(
      "the model's first layer is not dense (a convolution?): the attack's equations hold, "
      "but the span and flat-family checks do not apply, and the KKT attack was derived and "
      "measured on dense networks"
    )
  vsum = metrics.get("victim") or {}
  if vsum.get("stationary") is False:
    out.append(
      f"the victim's convergence phase ended before its tolerance: its relative gradient "
      f"norm is {vsum.get('grad_norm_rel', float('nan')):.2g}, above victim.converge_tol; it "
      "is not at a stationary point (raise victim.converge_maxiter, or the tolerance)"
    )
  stat = (metrics.get("victim") or {}).get("grad_norm_rel")
  if metrics.get("assumes_stationary") and stat is not None and stat > 1e-3:
    out.append(
      f"the setting assumes a stationary victim (tied multipliers), but its relative gradient "
      f"norm is {stat:.2g}: it is not at a stationary point of its weight-decayed loss"
    )
  if metrics.get("precision_warning"):
    out.append(metrics["precision_warning"])
  return out


def assumptions(cfg: JobConfig, vcfg: victim.VictimConfig, ds: data.Dataset, foreign: bool) -> dict:
  """What the report took as given about the victim and its data (stated in metrics.json)."""
  out = {
    "dataset": vcfg.dataset,
    "n_per_class": vcfg.n_per_class,
    "data_seed": vcfg.data_seed,
    "task_from_loss": vcfg.loss,
    "input_shape": list(ds.x_train.shape[1:]),
    "pixel_range": [0.0, 1.0],
    "training_mean_subtracted": bool(np.any(ds.mean != 0)),
  }
  if foreign:
    imp = cfg.foreign
    out.update(
      input_layout=imp.input_layout,
      conv_stride=imp.stride,
      conv_padding=imp.padding,
      data_mean_file=imp.data_mean or None,
    )
  return out


def attack_setup(
  cfg: JobConfig,
  apply_fn,
  problem: str,
  num_outputs: int = 1,
  *,
  victim_config: Optional[victim.VictimConfig] = None,
  foreign: bool = False,
  input_shape=(),
  n: int = 0,
  target: Optional[Target] = None,
) -> attacks.Setup:
  """What an attack is built from: the victim and target the run knows and the job's shared
  settings (``cfg``: a JobConfig or a mapping of settings)."""
  return attacks.Setup(
    problem,
    victim_config or victim.VictimConfig(),
    foreign,
    apply_fn,
    num_outputs,
    tuple(input_shape),
    n,
    target,
    attacks.Common.of(JobConfig.of(cfg)),
  )


def make_attack(
  cfg: JobConfig,
  apply_fn,
  problem: str,
  num_outputs: int = 1,
  *,
  spec: Optional[attacks.AttackSpec] = None,
  **known,
) -> Attack:
  """The attack a job names (``cfg.attack``; a JobConfig or a mapping of settings), built by
  its registered spec (:mod:`recon_jax.attacks`) from its options and the
  :func:`attack_setup` of what the run knows (``known``: its keyword arguments; ``spec``:
  the attack's spec when the caller has it)."""
  cfg = JobConfig.of(cfg)
  spec = attacks.get(cfg.attack) if spec is None else spec
  return spec.build(
    spec.options_of(cfg), attack_setup(cfg, apply_fn, problem, num_outputs, **known)
  )


class Reconstruction(NamedTuple):
  """A reconstruction job's outcome: the report and what the figures and arrays need."""

  metrics: dict  # JSON-able report (metrics.json)
  arrays: dict  # name -> array (reconstructions.npz)
  eval_result: Any  # metrics.EvalResult of the pooled candidates (or None)
  dataset: data.Dataset
  victim: victim.Victim


def load_victim(plan: Plan) -> Tuple[data.Dataset, victim.Victim, np.ndarray, float]:
  """The job's data, its victim (trained, cached, loaded or imported from the files the
  plan read), the candidates' labels, and the seconds the victim took.  A bad ``m`` fails
  before any training."""
  cfg, src = plan.config, plan.source
  ds = src.dataset
  labels = candidate_labels(plan.problem, num_candidates(cfg, len(ds.x_train)), ds.num_classes)
  t0 = time.time()
  vic = loading.victim_of(src, use_cache=cfg.use_cache)
  return ds, vic, labels, time.time() - t0


def job_target(plan: Plan, vic: victim.Victim, ds: data.Dataset, labels) -> Target:
  """What the attacker sees: theta* in the run's precision, the labels, the pixel box, and
  with ``known_init`` theta* - theta_0 as the reference, the gradients taken at the
  ``linearize`` point between them (:func:`recon_jax.victims.loading.known_init_target`)."""
  target = loading.make_target(vic.params, labels, ds.mean, dtype=float_dtype())
  if plan.config.known_init:
    target = loading.known_init_target(target, vic.init, plan.config.linearize)
  return target


@contextlib.contextmanager
def progress_shown(verbose: bool = True):
  """The library's progress lines (absl logging at INFO) shown while a job runs, also when
  it is called from Python rather than a binary; the caller's level is restored after."""
  from absl import logging as absl_logging

  before = absl_logging.get_verbosity()
  if verbose and before < absl_logging.INFO:
    absl_logging.set_verbosity(absl_logging.INFO)
  try:
    yield
  finally:
    absl_logging.set_verbosity(before)


def reconstruct(
  job,
  *,
  state_file: Optional[loop.StateFile] = None,
  requested_victim: Optional[dict] = None,
  verbose: bool = True,
) -> Reconstruction:
  """Runs one reconstruction job: :func:`load_victim` -> :func:`job_target` -> the regime
  (:func:`recon_jax.attacks.span.regime`) -> the attack's candidates
  (:func:`recon_jax.attacks.search.find_candidates`) -> identifiability, evaluation and the
  attacker's scores (:func:`recon_jax.eval.scoring.score_run`) -> the report.

  ``job``: the job resolved by :func:`recon_jax.job.planning.prepare` (a
  :class:`~recon_jax.job.planning.Plan`, taken as it is), or its settings (a
  :class:`~recon_jax.job.settings.JobConfig`, or a ConfigDict such as
  :func:`recon_jax.reconstruct_config`), checked and resolved here
  (``requested_victim`` as in :func:`recon_jax.job.planning.victim_config`).  The
  sweep saves to and resumes from ``state_file`` (see :func:`recon_jax.engine.loop.run_attack`).
  ``verbose``: log a line per phase and chunk, with the time left (absl logging, INFO).
  """
  plan = planning.resolve(job, requested_victim)
  with precision.scoped(plan.config.x64, plan.config.matmul_precision):
    return run(plan, state_file, verbose)


def run(plan: Plan, state_file: Optional[loop.StateFile] = None, verbose: bool = True):
  """:func:`reconstruct` of a job resolved already, in the precision its caller set
  (:func:`recon_jax.engine.precision.scoped` of the plan's ``x64`` and ``matmul_precision``)."""
  with progress_shown(verbose):
    return _reconstruct(plan, state_file)


def _blind(plan: Plan, ds, vic, found: Found, seen: dict, timing: dict, t_start: float):
  """The report of a blind attack (no training images): the candidates and the attacker's
  own view of them, nothing scored against a truth; the verdict says it cannot tell."""
  cfg = plan.config
  loss = np.asarray(found.final_loss, np.float64)
  ok = np.isfinite(loss)
  timing["total_s"] = time.time() - t_start
  metrics = {
    "attack": cfg.attack,
    "problem": plan.problem,
    "dataset": ds.name,
    "n_train": 0,
    "blind": True,
    "m": int(found.candidates.shape[1]),
    "num_restarts": int(len(loss)),
    "recovered_strict": None,
    "identifiability": {"skipped": "no training images (a blind attack)", "ratio": None},
    "regime": seen,
    "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
    "victim_source": vic.source,
    "assumed": assumptions(cfg, plan.victim, ds, plan.foreign),
    "selection": {
      "n_restarts": int(len(loss)),
      "n_diverged": int(np.sum(~ok)),
      "best_by_loss_restart": int(np.nanargmin(np.where(ok, loss, np.inf))) if ok.any() else None,
    },
    "per_restart": [
      {"restart": i, "diverged": not ok[i], "final_loss": float(loss[i]) if ok[i] else None}
      for i in range(len(loss))
    ],
    "timing": timing,
  }
  metrics["warnings"] = run_warnings(metrics, ds.num_classes)
  said = verdict.decide(metrics)
  metrics.update(verdict=said["verdict"], reasons=said["reasons"], verdict_line=said["line"])
  arrays = dict(
    candidates=found.candidates,
    weights=found.weights,
    final_loss=found.final_loss,
    mean=ds.mean,
    **{f"hp_{k}": v for k, v in found.hparams.items()},
  )
  logging.info(
    "blind attack: %d candidates of %d restarts; %s", metrics["m"], len(loss), said["line"]
  )
  return Reconstruction(metrics, arrays, None, ds, vic)


def _reconstruct(plan: Plan, state_file) -> Reconstruction:
  """:func:`reconstruct` of a resolved job."""
  cfg, problem, spec = plan.config, plan.problem, plan.spec
  t_start = time.time()
  ds, vic, labels, victim_s = load_victim(plan)
  target = job_target(plan, vic, ds, labels)
  setup = plan.setup._replace(  # what the run knows now: the victim and the target
    apply_fn=vic.apply_fn,
    num_outputs=vic.num_outputs,
    input_shape=tuple(ds.x_train.shape[1:]),
    n=len(ds.x_train),
    target=target,
  )
  seen = span.regime(target, len(ds.x_train), cfg.known_init, cfg.linearize)
  if seen.get("span"):
    logging.info(
      "regime: the first layer's %s spans %d of %d input directions for %d training images",
      "change" if seen["known_init"] else "weights",
      seen["span"]["dim"],
      seen["span"]["input_dim"],
      seen["n_train"],
    )
  found = search.find_candidates(spec, cfg, setup, plan.stages, plan.hparams, ds, state_file)
  cands, weights, run, hp = found.candidates, found.weights, found.run, found.hparams
  timing = {"victim_s": victim_s, **(found.timing or {})}
  n = len(ds.x_train)
  if n == 0:
    return _blind(plan, ds, vic, found, seen, timing, t_start)

  scores = scoring.score_run(
    vic.apply_fn,
    vic.num_outputs,
    problem,
    target,
    ds,
    cands,
    weights,
    found.final_loss,
    run,
    attack=found.attack,
    hparams=plan.stages[-1][1] if plan.stages else None,
    ssim_threshold=cfg.ssim_threshold,
    seed=cfg.seed,
    identify=cfg.identify,
    normalize=cfg.normalize,
    stability_candidates=cfg.identify_stability_candidates
    if spec.rerunnable(spec.options_of(cfg))
    else 0,
    labels=found.labels,
  )
  ident, ev, result = scores.identifiability, scores.evaluation, scores.result
  timing.update(scores.timing)
  # the job's total, as before the attacker's own scores: those are timed apart
  timing["total_s"] = time.time() - t_start - timing.get("identification_s", 0.0)
  metrics = {
    "attack": cfg.attack,
    "problem": problem,
    "dataset": plan.victim.dataset,
    "n_train": n,
    "m": int(cands.shape[1]),
    "num_restarts": cfg.num_restarts if run is not None else 1,
    "recovered_strict": ev["attack"]["recovered_strict"],
    "n_ssim_gt_0.4": ev["attack"]["n_ssim_gt_0.4"],
    "baseline_mean_image_n_ssim_gt_0.4": ev["baselines"]["mean_image"]["n_ssim_gt_0.4"],
    "baseline_mean_image_recovered_strict": ev["baselines"]["mean_image"]["recovered_strict"],
    "baseline_heldout_recovered_strict": ev["baselines"].get("heldout", {}).get("recovered_strict"),
    "baseline_heldout_n_ssim_gt_0.4": ev["baselines"].get("heldout", {}).get("n_ssim_gt_0.4"),
    "oracle_residual_rel": ident.get("truth_residual"),
    "identifiability": ident,
    "regime": seen,
    "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
    "victim_source": vic.source,
    "assumed": assumptions(cfg, plan.victim, ds, plan.foreign),
    "evaluation": ev["attack"],
    "baselines": ev["baselines"],
    "selection": ev["selection"],
    "per_restart": ev["per_restart"],
    "timing": timing,
  }
  if scores.identification is not None:
    metrics["identification"] = scores.identification
  if run is not None:
    last = run.chunks[-1]
    warning = diagnostics.float32_floor_warning(run.chunks, float_dtype())
    metrics["precision_warning"] = warning
    if warning:
      logging.warning("precision: %s", warning)
    metrics["final_stat_rel"] = list(last.get("stat_rel", last["loss"]))
    for row, i in zip(metrics["per_restart"], range(cfg.num_restarts)):
      row.update({k: float(np.asarray(v)[i]) for k, v in hp.items()})
      if "stat_rel" in last:
        row["stat_rel"] = last["stat_rel"][i]
  arrays = dict(
    candidates=cands,
    weights=weights,
    final_loss=found.final_loss,
    train_idx=ds.train_idx,
    mean=ds.mean,
    **{f"hp_{k}": v for k, v in hp.items()},
  )
  if result is not None:
    arrays.update(recon=result.recon, ssim=result.ssim)
  witness = (ident.get("family") or {}).pop("_witness", None)
  if witness is not None:
    arrays["family_witness"] = np.asarray(witness, np.float32)
  metrics["assumes_stationary"] = spec.assumes_stationary(spec.options_of(cfg))
  metrics["warnings"] = run_warnings(metrics, ds.num_classes)
  said = verdict.decide(metrics)
  metrics.update(verdict=said["verdict"], reasons=said["reasons"], verdict_line=said["line"])
  logging.info(
    "recovered strictly %d/%d (SSIM>0.4: %d; mean-image baseline %d, held-out "
    "baseline strict %s); oracle residual %s; total %.1fs",
    metrics["recovered_strict"],
    n,
    metrics["n_ssim_gt_0.4"],
    metrics["baseline_mean_image_n_ssim_gt_0.4"],
    metrics["baseline_heldout_recovered_strict"],
    ident.get("truth_residual"),
    timing["total_s"],
  )
  return Reconstruction(metrics, arrays, result, ds, vic)
