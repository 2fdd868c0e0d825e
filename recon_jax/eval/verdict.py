"""The answer to "does this model leak its training images?", in three states, with the reason.

* ``leaks``: the membership test tells the given training images from the held-out ones
  at its level (:mod:`recon_jax.eval.membership`: every given image scored by one rule,
  ROC AUC, a permutation test), k training images are recovered strictly, more than the
  held-out baseline (unseen images scored as if they were reconstructions), and the
  training set fits the attack's equations at least as well as anything the attack found
  (within :func:`tolerance`), or the better fit is the training set itself, refined;
* ``no_evidence``: nothing recovered beyond the baseline; the reasons say whether this
  attack can test this model at all (the training set leaves most of theta* unexplained,
  other images fit exactly as well, half the restarts diverged, the first layer is not
  dense, other images fit better) or the search simply did not reach a training set that
  fits best;
* ``cannot_tell``: the supplied training images fit the equations far worse than the
  attack's own candidates (ratio below :data:`WRONG_DATA_RATIO`: they may not be the
  model's training set); images recovered but the membership test does not separate the
  sets, or the equations do not single out the training set, or the two fits are equal
  within the tolerance; or no training images were given (a blind attack).

The verdict never contradicts the count: ``leaks`` needs k >= 1 above the baseline,
``no_evidence`` k at or below it.  Beside it stand the warnings a reader must know before
trusting the numbers (:func:`run_warnings`); :func:`conclude` puts both in a report.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from recon_jax.eval import identifiability

LEAKS, NO_EVIDENCE, CANNOT_TELL = "leaks", "no_evidence", "cannot_tell"
VERDICTS = (LEAKS, NO_EVIDENCE, CANNOT_TELL)
# The training set leaving more than this fraction of ||reference||^2 unexplained: theta* is
# not of the form the attack assumes (not near a KKT point of its training set).
FAR_FROM_ASSUMPTION = 0.5
# The supplied training set fitting theta* (or theta* - theta_0) more than twice as badly as
# the attack's own candidates: they are probably not the images the model was trained on
# (measured: the real training set of a fine-tuned model 0.97-1.04 with the cone and 0.62 and
# up with the KKT search, which refines it; other images of its classes 0.12-0.23).
WRONG_DATA_RATIO = 0.5
ALL_DIVERGED = "every restart diverged"  # how a run that recovered nothing by failing says so


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


def _cone_reading(metrics: Mapping) -> Mapping:
  """What the cone read of the first layer's change (``regime.cone``; {} for other attacks)."""
  return (metrics.get("regime") or {}).get("cone") or {}


def attack_cannot(metrics: Mapping) -> Optional[str]:
  """Why the attack said, from what it read of theta* before searching, that it cannot test
  the model (the cone's gate: ``regime.cone.cannot``), or None."""
  return _cone_reading(metrics).get("cannot")


def run_warnings(metrics: dict, num_classes: int, searched: bool = True) -> list:
  """What a reader of a reconstruction's metrics must know before trusting them
  (``searched``: the candidates came from a search, whose restarts may diverge, rather than
  read off theta*).

  Also sets ``metrics["victim_warning"]`` (:func:`victim_warning`).
  """
  out = []
  loss = (metrics.get("assumed") or {}).get("task_from_loss", "logistic")
  metrics["victim_warning"] = victim_warning(metrics.get("victim") or {}, loss, num_classes)
  if metrics["victim_warning"]:
    out.append(metrics["victim_warning"])
  n_div = (metrics.get("selection") or {}).get("n_diverged")
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
  cone = _cone_reading(metrics)
  k = cone.get("span_dim")
  gate = attack_cannot(metrics)
  if gate:
    out.append(f"attack={metrics.get('attack')} did not run: {gate}")
  elif not searched and 2 * m < n:
    under = cone.get("under_noise_floor")
    floor = (
      f"; the change keeps {k} directions above its rounding noise, so "
      f"{under} images have no facet to find"
      if under
      else ""
    )
    out.append(
      f"attack={metrics.get('attack')} read {m} candidates for {n} training images: most of "
      f"the training set cannot be among them (attack=cone finds few facets at large n{floor}; "
      "attack=kkt with known_init and subspace, the finetune_kkt preset, reaches more; "
      "docs/leakage.md)"
    )
  elif not searched and cone.get("short"):
    out.append(
      f"attack={metrics.get('attack')} {cone['short']}; the KKT search in that span (the "
      "finetune_kkt preset) may read more, at 50 + 50 faces 74 of 100 against the cone's 20 "
      "(docs/leakage.md)"
    )
  skipped = (metrics.get("regime") or {}).get("handover_skipped")
  if skipped:
    out.append(f"the KKT search in the change's span did not run after the cone: {skipped}")
  handed = metrics.get("handover")
  if handed:
    out.append(
      f"{handed['why']}, so the KKT search in the change's span took over, every restart "
      f"started from the cone's {handed['direct_candidates']} images: the images scored are "
      "the search's restarts and the cone's, each training image by the best of them (the "
      f"cone's alone: {handed['direct_recovered_strict']} strictly"
      + (
        f"; the first layer's facets the search's best restart led to: "
        f"{handed['reread_candidates']} images, {handed.get('reread_recovered_strict')} "
        "strictly"
        if handed.get("reread_candidates")
        else ""
      )
      + ")"
    )
  truth = (metrics.get("identifiability") or {}).get("truth_residual")
  if truth is not None and truth > FAR_FROM_ASSUMPTION:
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


def tolerance(ident: Mapping) -> float:
  """The identifiability ratio's band of equal fits (:func:`recon_jax.eval.identifiability.tolerance`)."""
  return identifiability.tolerance(ident.get("per_restart_residual"))


def _fits(ident: Mapping) -> Optional[str]:
  """'truth' (the training set fits better), 'other' (what the attack found fits better),
  'equal' (within the tolerance) or None (not scored)."""
  ratio = ident.get("ratio")
  if ratio is None or not np.isfinite(ratio):
    return None
  tol = tolerance(ident)
  if ratio > 1 + tol:
    return "truth"
  if ratio < 1 - tol:
    return "other"
  return "equal"


def conclude(metrics: dict, num_classes: int, searched: bool = True) -> dict:
  """``metrics`` completed with what a reader needs first: its ``warnings``
  (:func:`run_warnings`), ``verdict``, ``reasons`` and ``verdict_line`` (:func:`decide`).
  Returns :func:`decide`'s dict."""
  metrics["warnings"] = run_warnings(metrics, num_classes, searched)
  said = decide(metrics, searched)
  metrics.update(verdict=said["verdict"], reasons=said["reasons"], verdict_line=said["line"])
  metrics["wrong_data"] = said["wrong_data"]
  return said


def membership_text(mem: Mapping) -> str:
  """The membership test in words: ``AUC 0.97, TPR 85% at 1% FPR, p = 0.0001 at level 0.01``."""
  if not mem or mem.get("auc") is None:
    return f"membership not tested ({(mem or {}).get('skipped', 'no held-out images')})"
  tpr = (mem.get("tpr_at_fpr") or {}).get("0.01")
  tpr = "" if tpr is None else f", TPR {tpr:.0%} at 1% FPR"
  p = mem.get("p_value")
  return f"AUC {mem['auc']:.2f}{tpr}, p = {p:.2g} at level {mem.get('level', 0.01):g}"


def decide(m: Mapping, searched: bool = True) -> dict:
  """The verdict of a reconstruction's metrics (metrics.json's dict): ``{"verdict",
  "reasons", "line", "tolerance", "recovered", "baseline"}`` (``searched``: the candidates
  came from a search, which a longer one might improve, not read off theta*)."""
  n = int(m.get("n_train") or 0)
  ident = m.get("identifiability") or {}
  family = ident.get("family") or {}
  fits, tol = _fits(ident), tolerance(ident)
  reasons = []
  if n == 0:
    return _out(
      CANNOT_TELL,
      [
        "no training images were given: a blind attack's candidates are "
        "not evidence of membership (compare them with your data)"
      ],
      m,
      tol,
    )
  k = int(m.get("recovered_strict") or 0)
  held = m.get("baseline_heldout_recovered_strict")
  base = max(int(held or 0), int(m.get("baseline_mean_image_recovered_strict") or 0))
  ratio = ident.get("ratio")
  rtext = f"{ratio:.4g}" if ratio is not None else "not scored"
  flat = bool(family.get("confirmed"))
  why_flat = (
    f"images far from the training set fit the equations exactly as well (the first layer "
    f"sees {family.get('first_layer_rank')} of {family.get('input_dim')} input directions)"
  )
  mem = m.get("membership") or {}
  tested = mem.get("p_value") is not None
  told_apart = tested and bool(mem.get("significant"))
  mtext = membership_text(mem)
  what = f"{k} of {n} training images recovered strictly (held-out baseline {base})"
  if ratio is not None and np.isfinite(ratio) and ratio < WRONG_DATA_RATIO and not flat:
    known = bool((m.get("regime") or {}).get("known_init"))
    fitted = "theta* - theta_0" if known else "theta*"
    also = "" if known else ", or the equations of theta* alone do not single out the training set"
    return _out(
      CANNOT_TELL,
      [
        f"the supplied training images may not be the model's training set: the attack's own "
        f"candidates fit {fitted} {1 / max(ratio, 1e-12):.1f} times better than they do "
        f"(identifiability ratio {rtext}, below {WRONG_DATA_RATIO:g}){also}; compare the "
        "candidates (candidates.png) with your data",
        what,
        f"membership: {mtext}",
      ],
      m,
      tol,
      wrong_data=True,
    )
  best_restart_real = _best_restart_recovers(m, base)
  if k > base:
    if flat:
      return _out(CANNOT_TELL, [what, why_flat], m, tol)
    if tested and not told_apart:
      why = (
        "the membership score does not tell the training images from the held-out ones"
        if mem.get("testable")
        else f"too few images for the membership test to reach its level (at best p = "
        f"{mem.get('smallest_p', 1):.2g}; give more held-out images)"
      )
      return _out(
        CANNOT_TELL, [what, f"but {why} ({mtext}): the recoveries are no evidence"], m, tol
      )
    if fits in ("truth", "equal", None) or best_restart_real:
      if tested:
        reasons.append(f"the training images are told from held-out ones ({mtext})")
      if fits == "equal":
        reasons.append(
          f"the training set fits the equations as well as what the attack found "
          f"(ratio {rtext}, within {tol:.2g})"
        )
      elif fits == "truth":
        reasons.append(f"the training set fits the equations best (ratio {rtext})")
      elif fits == "other":
        reasons.append(
          f"the better fit (ratio {rtext}) is the training set itself: the "
          "best-fitting restart recovers training images strictly"
        )
      else:
        reasons.append(f"identifiability not scored ({ident.get('skipped', 'no ratio')})")
      return _out(LEAKS, [what, *reasons], m, tol)
    return _out(
      CANNOT_TELL,
      [
        what,
        f"but other images fit the equations better (ratio {rtext}, below 1 - {tol:.2g}) and "
        "the best-fitting restart recovers no training image: the reconstructions are not "
        "evidence of membership",
      ],
      m,
      tol,
    )
  # Nothing beyond the baseline: can this attack test this model at all?
  what = f"no training image recovered strictly beyond the held-out baseline ({k} vs {base})"
  cannot = []
  truth = ident.get("truth_residual")
  if truth is not None and truth > FAR_FROM_ASSUMPTION:
    cannot.append(
      f"the training set leaves {truth:.0%} of the fitted parameters unexplained "
      "(theta* is not of the form the attack assumes)"
    )
  if flat:
    cannot.append(why_flat)
  sel = m.get("selection") or {}
  r, div = int(m.get("num_restarts") or 0), int(sel.get("n_diverged") or 0)
  if r and div * 2 >= r:
    cannot.append(f"{div} of {r} restarts diverged")
  if (m.get("regime") or {}).get("span") is None and (m.get("regime") or {}).get("span_why"):
    cannot.append("the first layer is not dense (the span and flat-family checks do not apply)")
  if attack_cannot(m):
    cannot.append(attack_cannot(m))
  if fits == "other":
    cannot.append(f"other images fit the equations better (ratio {rtext})")
  if cannot:
    return _out(
      NO_EVIDENCE, [what, "this attack cannot test this model: " + "; ".join(cannot)], m, tol
    )
  if told_apart:
    return _out(
      CANNOT_TELL,
      [
        what,
        f"yet the membership score tells the training images from held-out ones ({mtext}): "
        "they are reconstructed better than unseen images, but none well enough to show",
      ],
      m,
      tol,
    )
  if fits == "equal":
    return _out(
      CANNOT_TELL,
      [
        what,
        f"the training set and what the attack found fit the "
        f"equations equally well (ratio {rtext}, within {tol:.2g})",
      ],
      m,
      tol,
    )
  return _out(
    NO_EVIDENCE,
    [
      what,
      "the training set fits the equations best"
      + (f" (ratio {rtext})" if ratio is not None else "")
      + (
        ": a longer search may still reach it"
        if searched
        else f": attack={m.get('attack')} read {m.get('m') or 0} candidates off theta* and "
        "none is a training image (the warnings say why)"
      ),
    ],
    m,
    tol,
  )


def _best_restart_recovers(m: Mapping, base: int) -> bool:
  """Whether the restart that fits the equations best recovers training images strictly
  (more than the baseline): then a better-than-truth fit is the training set, refined."""
  ident = m.get("identifiability") or {}
  best = ident.get("best_restart")
  rows = {r.get("restart"): r for r in (m.get("per_restart") or [])}
  row = rows.get(best)
  return bool(row) and int(row.get("recovered_strict") or 0) > base


def _out(verdict: str, reasons: list, m: Mapping, tol: float, wrong_data=False) -> dict:
  k = m.get("recovered_strict")
  mem = m.get("membership") or {}
  if mem.get("auc") is not None and not any("AUC" in r for r in reasons):
    reasons = [*reasons, f"membership: {membership_text(mem)}"]  # every verdict states it
  return {
    "verdict": verdict,
    "reasons": reasons,
    "line": f"{verdict.replace('_', ' ')}: " + "; ".join(reasons),
    "tolerance": tol,
    "recovered": k,
    "n_train": m.get("n_train"),
    "wrong_data": wrong_data,  # the supplied training set fits far worse than the candidates
  }
