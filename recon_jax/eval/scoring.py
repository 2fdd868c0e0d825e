"""A run's candidates scored against the truth in one go: the identifiability of the training
set and of the restarts, the evaluation and its baselines, and the attacker's own scores.

:func:`score_run` is what a reconstruction job calls once its search (or the attack that
reads its candidates off theta*) is done; each piece stays callable on its own
(:func:`recon_jax.eval.identifiability.identifiability`,
:func:`recon_jax.eval.evaluation.evaluate_candidates`,
:func:`recon_jax.eval.trusted.identification_report`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Optional, Tuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data
from recon_jax.core import progress
from recon_jax.eval import (
  diagnostics,
  evaluation,
  identifiability,
  membership,
  trusted,
  weight_tests,
)
from recon_jax.types import Target


def identifiability_report(
  apply_fn: Callable,
  num_outputs: int,
  problem: str,
  target: Target,
  ds: data.Dataset,
  cands,
  weights,
  diverged,
  labels=None,
) -> dict:
  """:func:`recon_jax.eval.identifiability.identifiability` of a run, or why it was skipped.

  Scored against ``target.fit`` (theta*, or theta* - theta_0 with a known
  initialisation), with the victim's own activation derivative (``apply_fn``, whose
  output layer is ``num_outputs`` wide); ``labels``: the candidates' own (default: the
  target's).
  """
  n = len(ds.x_train)
  need = identifiability.matrix_bytes(target.params, n, num_outputs if problem == "general" else 1)
  if need > identifiability.MAX_BYTES:
    return {
      "skipped": f"the gradient matrix of {n} samples needs {need / 2**30:.1f} GiB "
      f"(more than {identifiability.MAX_BYTES / 2**30:.0f} GiB)",
      "truth_residual": None,
      "ratio": None,
      "verdict": identifiability.NOTHING_TO_SCORE,
    }
  dtype = jax.tree_util.tree_leaves(target.params)[0].dtype
  logging.info(
    "identifiability: the training set and %d restarts scored through the equations, then "
    "the flat family (its linear program stops after %.0f s)",
    len(cands),
    identifiability.LP_TIME_LIMIT_S,
  )
  labels = np.asarray(target.labels if labels is None else labels)
  if np.shape(cands)[1] == 0:  # an attack that found no candidate: none of their labels
    labels = labels[:0]
  return identifiability.identifiability(
    apply_fn,
    problem,
    target.params,
    jnp.asarray(ds.x_train, dtype),
    jnp.asarray(ds.y_train),
    cands,
    weights,
    labels,
    reference=target.fit,
    diverged=diverged,
    box=(np.asarray(target.box_lo), np.asarray(target.box_hi)),
  )


def membership_report(cands, final_loss, ds: data.Dataset, seed: int = 0) -> dict:
  """Every training image and every held-out image scored by one rule from the candidates
  ``cands`` [R, m, ...] of the restarts that finished (``final_loss`` [R] finite), and how
  well that score tells the two sets apart (:mod:`recon_jax.eval.membership`: ROC AUC, the
  true-positive rate at low false-positive rates, a permutation test).  At most
  :data:`~recon_jax.eval.membership.MAX_HELDOUT` held-out images, drawn with ``seed``.

  Returns :func:`recon_jax.eval.membership.separation`'s dict with ``scores_train`` and
  ``scores_heldout`` (the per-image scores), or ``{"skipped": why}``.
  """
  cands = np.asarray(cands)
  ok = np.isfinite(np.asarray(final_loss, np.float64))
  if not len(ds.x_test):
    return {"skipped": "no held-out images to compare the training images with"}
  if not ok.any():
    return {"skipped": "no restart finished"}
  held = np.asarray(ds.x_test)
  if len(held) > membership.MAX_HELDOUT:
    pick = np.random.default_rng(seed).choice(len(held), membership.MAX_HELDOUT, replace=False)
    held = held[np.sort(pick)]
  mean = np.asarray(ds.mean, np.float32)
  shape = cands.shape[2:]
  own = [np.asarray(c, np.float32) + mean for c in cands[ok]]
  sets = [np.concatenate(own).reshape(-1, *shape), *own] if len(own) > 1 else own
  given = np.concatenate([np.asarray(ds.x_train), held]).astype(np.float32) + mean
  logging.info(
    "membership: %d training and %d held-out images scored by one rule, then a permutation "
    "test of the AUC (%d relabellings)",
    len(ds.x_train),
    len(held),
    membership.PERMUTATIONS,
  )
  # the training mean is the attacker's without any attack: a reconstruction must beat it
  refs = mean[None] if np.any(mean != 0) else None
  scored = membership.image_scores(sets, given, refs)
  is_member = np.arange(len(given)) < len(ds.x_train)
  out = membership.separation(scored["score"], is_member, seed=seed)
  finite = lambda v: [float(x) if np.isfinite(x) else None for x in v]
  out.update(
    scores_train=finite(scored["score"][is_member]),
    scores_heldout=finite(scored["score"][~is_member]),
  )
  return out


TEST_FPRS = (0.01, 0.001, 0.0001)  # the rates each membership test's TPR is reported at
MAX_HELDOUT_WEIGHTS = 4000  # held-out images the weight tests score at most (drawn with the seed)


def _resolved(tpr_at_fpr, n_held: int) -> Tuple[dict, list]:
  """``tpr_at_fpr`` at :data:`TEST_FPRS` with None at each rate ``n_held`` held-out images
  cannot resolve (fewer than 1 / rate of them), and those rates."""
  short = [f"{f:g}" for f in TEST_FPRS if n_held * f < 1]
  rates = {f"{f:g}": None if f"{f:g}" in short else tpr_at_fpr.get(f"{f:g}") for f in TEST_FPRS}
  return rates, short


def _test_entry(kind: str, scores_, is_member, seed: int, seconds: float) -> dict:
  """One of ``membership.tests``: :func:`recon_jax.eval.membership.separation` of ``scores_``
  at :data:`TEST_FPRS`, a rate the held-out set is too small for (fewer than 1 / rate
  images) reported as None and named in ``too_few_heldout_for``."""
  is_member = np.asarray(is_member, bool)
  sep = membership.separation(scores_, is_member, seed=seed, fprs=TEST_FPRS)
  tprs, short = _resolved(sep["tpr_at_fpr"], int((~is_member).sum()))
  finite = lambda v: [float(x) if np.isfinite(x) else None for x in v]
  s = np.asarray(scores_, np.float64)
  out = {
    "kind": kind,
    "auc": sep["auc"],
    "tpr_at_fpr": tprs,
    "p_value": sep["p_value"],
    "significant": sep["significant"],
  }
  if short:
    out["too_few_heldout_for"] = short
  out.update(
    cost_s=float(seconds), scores_train=finite(s[is_member]), scores_heldout=finite(s[~is_member])
  )
  return out


def weight_membership(
  apply_fn, theta, target: Target, ds: data.Dataset, seed: int = 0, init=None
) -> dict:
  """The membership tests that need no reconstruction, each scoring every training image and
  up to :data:`MAX_HELDOUT_WEIGHTS` held-out ones by one rule
  (:mod:`recon_jax.eval.weight_tests`): the loss and confidence of the model ``apply_fn`` at
  ``theta`` (theta*), and the fit of ``target.fit`` (theta*, or theta* - theta_0 with a known
  start ``init``) by every given image's margin gradient (``kkt_fit`` on theta* alone, at
  theta*; ``change_fit`` on a change, averaged along the path from ``init`` to theta*), the
  images the fit leaves at 0 ranked by their loss
  (:func:`recon_jax.eval.weight_tests.kkt_fit_scores`).  Returns ``{"tests": {name: entry}, "tests_skipped":
  {name: why}}`` (:func:`_test_entry`), or ``{}`` without held-out images."""
  if not len(ds.x_test) or not len(ds.x_train):
    return {}
  held, yh = np.asarray(ds.x_test), np.asarray(ds.y_test)
  if len(held) > MAX_HELDOUT_WEIGHTS:
    pick = np.sort(
      np.random.default_rng(seed).choice(len(held), MAX_HELDOUT_WEIGHTS, replace=False)
    )
    held, yh = held[pick], yh[pick]
  x = np.concatenate([np.asarray(ds.x_train), held]).astype(np.float32)
  y = np.concatenate([np.asarray(ds.y_train), yh])
  is_member = np.arange(len(x)) < len(ds.x_train)
  known = target.reference is not None
  fit_name = "change_fit" if known else "kkt_fit"
  tests, skipped = {}, {}
  t0 = time.time()
  loss = weight_tests.loss_scores(apply_fn, theta, x, y)
  tests["loss"] = _test_entry("baseline", loss, is_member, seed, time.time() - t0)
  t0 = time.time()
  conf = weight_tests.confidence_scores(apply_fn, theta, x)
  tests["confidence"] = _test_entry("baseline", conf, is_member, seed, time.time() - t0)
  if weight_tests.dense_stack(target.params) is None:
    skipped[fit_name] = "the network is not a stack of dense layers (a convolution?)"
  else:
    logging.info(
      "membership from the weights: %s of %d training and %d held-out images",
      "theta* - theta_0" if known else "theta*",
      int(is_member.sum()),
      len(held),
    )
    t0 = time.time()
    fit = weight_tests.kkt_fit_scores(
      theta, x, y, init=init if known else None, reference=target.fit, tie=loss
    )
    tests[fit_name] = _test_entry("weights", fit, is_member, seed, time.time() - t0)
  return {"tests": tests, "tests_skipped": skipped} if skipped else {"tests": tests}


class Scores(NamedTuple):
  """A run's candidates scored (:func:`score_run`)."""

  identifiability: dict  # identifiability_report's dict
  evaluation: dict  # evaluate_candidates' dict, its EvalResult taken out (``result``)
  result: Any  # the EvalResult of the pooled candidates (or None)
  identification: Optional[dict]  # the attacker's own scores (None: not asked, or no search)
  timing: dict  # seconds of each part: identifiability_s, evaluation_s (identification_s)
  convergence: Optional[dict] = None  # a search's final_stat_rel and precision_warning
  membership: Optional[dict] = None  # membership_report's dict

  def entries(self) -> dict:
    """The scores as a reconstruction's metrics.json states them: the strict count and its
    baselines first, then each report whole (``identification`` when it ran)."""
    ev, ident = self.evaluation, self.identifiability
    mean, held = ev["baselines"]["mean_image"], ev["baselines"].get("heldout", {})
    out = {
      "recovered_strict": ev["attack"]["recovered_strict"],
      "n_ssim_gt_0.4": ev["attack"]["n_ssim_gt_0.4"],
      "baseline_mean_image_n_ssim_gt_0.4": mean["n_ssim_gt_0.4"],
      "baseline_mean_image_recovered_strict": mean["recovered_strict"],
      "baseline_heldout_recovered_strict": held.get("recovered_strict"),
      "baseline_heldout_n_ssim_gt_0.4": held.get("n_ssim_gt_0.4"),
      "oracle_residual_rel": ident.get("truth_residual"),
      "identifiability": ident,
      "evaluation": ev["attack"],
      "baselines": ev["baselines"],
      "selection": ev["selection"],
      "per_restart": ev["per_restart"],
    }
    if self.identification is not None:
      out["identification"] = self.identification
    if self.membership is not None:
      out["membership"] = self.membership
    out.update(self.convergence or {})
    return out


def score_run(
  apply_fn: Callable,
  num_outputs: int,
  problem: str,
  target: Target,
  ds: data.Dataset,
  cands,
  weights,
  final_loss,
  run=None,
  *,
  attack=None,
  hparams=None,
  ssim_threshold: Optional[float] = None,
  seed: int = 0,
  identify: bool = False,
  normalize: Optional[str] = None,
  stability_candidates: int = 0,
  labels=None,
  also=(),
  theta=None,
  init=None,
) -> Scores:
  """The candidates ``cands`` [R, m, ...] (``weights`` [R, m], ``final_loss`` [R]) of a run on
  the victim ``apply_fn`` scored against the truth ``ds``: identifiability
  (:func:`identifiability_report`; a run without a search, ``run`` None, is scored as one
  restart with its candidates' own ``labels``, and without them only the truth and its
  family are), the evaluation
  (:func:`recon_jax.eval.evaluation.evaluate_candidates`, ``ssim_threshold`` and ``seed``) and,
  with ``identify`` and a search, how well the attacker's own scores pick out the real
  candidates (:func:`recon_jax.eval.trusted.identification_report` of the ``attack``
  that ran, its last stage's ``hparams``, ``normalize``, and ``stability_candidates``
  re-run; 0: no stability score).  ``also``: more images the attacker read (the cone's, and
  what it read again from the search's candidates), scored beside the restarts (the
  evaluation's ``also``).  The arrays are a job's own, made to fit together, so the pieces
  run without their argument checks (call them on their own to check yours).  ``theta``: the
  victim's theta*, for the membership tests from the weights
  (:func:`weight_membership`; None: not run), and ``init`` its theta_0 where known."""
  timing = {}
  t0 = time.time()
  restarts, restart_weights, diverged = cands, weights, None if run is None else run.diverged
  if run is None and labels is None:  # first-layer images carry no labels: the truth only
    restarts, restart_weights = cands[:0], weights[:0]
  progress.phase("scoring identifiability")
  ident = identifiability_report(
    apply_fn, num_outputs, problem, target, ds, restarts, restart_weights, diverged, labels
  )
  timing["identifiability_s"] = time.time() - t0
  logging.info("%s", identifiability.line(ident))
  logging.info(
    "evaluating %d candidates against %d training and %d held-out images and the baselines",
    int(np.prod(cands.shape[:2])),
    len(ds.x_train),
    len(ds.x_test),
  )
  t0 = time.time()
  progress.phase("evaluating the candidates")
  ev = evaluation.evaluate_candidates(
    cands, weights, final_loss, ds, ssim_threshold=ssim_threshold, seed=seed, also=also
  )
  timing["evaluation_s"] = time.time() - t0
  result = ev.pop("_result")
  t0 = time.time()
  progress.phase("the membership test")
  member = membership_report(cands, final_loss, ds, seed)
  if theta is not None and problem != "general":
    weights_ = weight_membership(apply_fn, theta, target, ds, seed, init)
    if weights_ and member.get("auc") is not None:  # today's score is one test among them
      rec = {k: member[k] for k in ("auc", "p_value", "significant")}
      rec["tpr_at_fpr"], short = _resolved(member["tpr_at_fpr"], len(member["scores_heldout"]))
      if short:
        rec["too_few_heldout_for"] = short
      rec.update(scores_train=member["scores_train"], scores_heldout=member["scores_heldout"])
      weights_["tests"] = {"reconstruction": {"kind": "reconstruction", **rec}, **weights_["tests"]}
    member.update(weights_)
  timing["membership_s"] = time.time() - t0
  convergence = None if run is None else _convergence(run, ev["per_restart"], target)
  # where the images the attack missed rank in the truth's fit (none evaluated: every
  # restart diverged, so there is no search to tell from the identifiability floor)
  if "truth_leave_one_out" in ident and result is not None:
    ident["missed"] = identifiability.missed(ident, result.recovered_strict_mask)
  ident_report = None
  if run is not None and identify:
    # The attacker's view: which candidates would it trust, and how often rightly.
    logging.info(
      "the attacker's own scores of %d candidates (no ground truth: lambda, agreement, "
      "leave-one-out, margin; stability re-runs of up to %d)",
      int(np.prod(cands.shape[:2])),
      stability_candidates,
    )
    t0 = time.time()
    progress.phase("the attacker's own scores")
    ident_report = trusted.identification_report(
      trusted.AttackerRun(attack, run, hparams, target, apply_fn, problem),
      ds,
      trusted.IdentifyOptions(
        ssim_threshold=ssim_threshold,
        normalize=normalize,
        key=seed,
        # The stability score perturbs the candidates and re-runs steps of the attack.
        stability_candidates=stability_candidates,
      ),
      candidates=cands,  # told real as the evaluation tells them (clipped to the box)
    )
    timing["identification_s"] = time.time() - t0
  return Scores(ident, ev, result, ident_report, timing, convergence, member)


def _convergence(run, rows: list, target: Target) -> dict:
  """Where a search ended: each restart's relative stationarity residual (its ``rows`` gain
  ``stat_rel`` where the attack reports one, else the loss stands in), and whether float32
  ran out of digits first (:func:`recon_jax.eval.diagnostics.float32_floor_warning`)."""
  last = run.chunks[-1]
  if "stat_rel" in last:
    for row, stat in zip(rows, last["stat_rel"]):
      row["stat_rel"] = stat
  dtype = jax.tree_util.tree_leaves(target.params)[0].dtype
  warning = diagnostics.float32_floor_warning(run.chunks, dtype)
  if warning:
    logging.warning("precision: %s", warning)
  return {
    "final_stat_rel": list(last.get("stat_rel", last["loss"])),
    "precision_warning": warning,
  }
