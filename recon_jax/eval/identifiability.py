"""Identifiability: does the attack's objective prefer the training set to what the attack found?

Minimising the stationarity residual can only lead to the training set if the
training set fits the equations at least as well as anything else.  On victims
trained without weight decay it often does not: wrong images satisfy
``theta* = sum_i lambda_i grad g_i(x_i)`` better than the truth does (Refael et
al. 2025, "No Prior, No Leakage"), and then a reconstruction that looks
plausible is no evidence of membership.  On a victim at a stationary point of a
weight-decay-regularised loss the training set is an exact zero of the
equations, and a failed attack is a failure of the search.

This module scores the truth and the attack's candidates the same way
(:func:`recon_jax.eval.diagnostics.stationarity_fit`: the network's own derivative,
the best non-negative multipliers, the residual as a fraction of
``||reference||^2``) and compares them with the same number of candidates: the
truth has n samples, so each restart is represented by its n highest-weight
candidates.  It uses the training set, so it is evaluation, never attack.
"""

from __future__ import annotations

import time
from typing import Optional

from absl import logging
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import scipy.sparse

from recon_jax.core import arguments, losses, numerics
from recon_jax.errors import ConfigError
from recon_jax.eval import diagnostics

PREFERS_OTHER = (
  "what the attack found fits the equations better than the training set (the verdict says "
  "whether that is the training set refined or other images)"
)
NOT_UNIQUE = (
  "other images fit exactly as well as the training set (the equations cannot single it "
  "out; reconstructions are not evidence of membership)"
)
TRUTH_FITS_BEST = "the training set fits the equations better than anything the attack found"
EQUAL_FIT = (
  "the training set fits as well as what the attack found (equal within the residuals' precision)"
)
NOTHING_TO_SCORE = "no restart finished: nothing to compare"
COMPARISON = "each restart's n highest-weight candidates against the n training samples"
# The gradient matrix [P, n] is built in float64; larger victims are skipped, with a reason.
MAX_BYTES = 4 * 2**30
# The witness's linear program stops after this long (no witness then: the family is not
# confirmed, and the report says the program ran out of time).
LP_TIME_LIMIT_S = 60.0
PROGRESS_S = 30.0  # the longest the scoring of the restarts goes without a log line


def matrix_bytes(params, n: int, num_outputs: int = 1) -> int:
  """Bytes of the float64 gradient matrix of ``n`` candidates (what the score costs in memory)."""
  p = sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(params))
  return 8 * p * n * num_outputs


def top_n(weights, n: int) -> np.ndarray:
  """Indices of the ``n`` largest weights (|lambda| summed over outputs for [m, C] weights)."""
  w = np.asarray(weights, np.float64)
  w = np.abs(w).sum(axis=-1) if w.ndim > 1 else w
  w = np.where(np.isfinite(w), w, -np.inf)
  return np.sort(np.argsort(-w, kind="stable")[:n])


# Below this relative difference two residuals are equal: the truth's and the attack's are
# computed in float64 from float32 parameters and candidates, and one Adam step at the end
# of a run moves a candidate by about 1e-3 of its norm (the rates' lower end): a difference
# of one part in a thousand is decided by rounding and by where the run stopped.
RESIDUAL_PRECISION = 1e-3
# The widest band of equal fits: a search whose restarts scatter more than 10% says nothing
# finer, but a wider band would call fits that differ by a third (ratio 0.62) "equal".
MAX_TOLERANCE = 0.1


def tolerance(per_restart_residual) -> float:
  """The band of the ratio within which the truth and the attack fit equally well: the
  residuals' precision (:data:`RESIDUAL_PRECISION`), or the spread of the attack's own best
  restarts, whichever is larger: the relative gap between the best and the fourth-best
  restart's residual (how far the best would move in another run of the same search; one
  restart in four reaches within it), capped at :data:`MAX_TOLERANCE`."""
  rs = np.asarray([r for r in (per_restart_residual or []) if r is not None and r > 0], float)
  rs = np.sort(rs[np.isfinite(rs)])
  spread = float(min((rs[3] - rs[0]) / rs[0], MAX_TOLERANCE)) if rs.size >= 4 else 0.0
  return max(RESIDUAL_PRECISION, spread)


def verdict(ratio: Optional[float], family: Optional[dict] = None, tol: float = 0.0) -> str:
  """The one-line reading of ``ratio`` = attack's best residual / truth's residual (equal
  within ``tol``: :func:`tolerance`), and of the flat family of exact solutions through the
  truth (:func:`flat_family`), when it exists."""
  if ratio is not None and np.isfinite(ratio) and ratio < 1.0 - tol:
    return PREFERS_OTHER
  if family and family.get("confirmed"):
    return NOT_UNIQUE
  if ratio is None or not np.isfinite(ratio):
    return NOTHING_TO_SCORE
  if ratio <= 1.0 + tol:
    return EQUAL_FIT
  return TRUTH_FITS_BEST


def _farthest_in_box(flat, k_range, m_null, box, rng):
  """A member ``T = A B`` [n, d] of the family that stays in the pixel box, as far as a linear
  program takes it along a random direction.

  ``A`` = ``m_null`` [n, L] spans the left null space of M; the rows of ``B`` [L, d]
  are orthogonal to ``k_range`` (so ``t_i K = 0``); ``lo <= x_i + t_i <= hi``.
  None if the solver fails.
  """
  n, d = flat.shape
  big_l = m_null.shape[1]
  lo, hi = box  # flattened, [d] each
  a_eq = scipy.sparse.kron(scipy.sparse.eye(big_l), k_range.T).tocsr()  # B k_range = 0
  t_of_b = scipy.sparse.kron(scipy.sparse.csr_matrix(m_null), scipy.sparse.eye(d)).tocsr()
  a_ub = scipy.sparse.vstack([t_of_b, -t_of_b]).tocsr()
  # T = 0 is feasible: the right-hand sides hold 0, also for a sample outside the box.
  b_ub = np.concatenate(
    [np.maximum(hi - flat, 0).reshape(-1), np.maximum(flat - lo, 0).reshape(-1)]
  )
  direction = t_of_b.T @ rng.normal(size=n * d)
  res = numerics.linprog(
    -direction,
    A_ub=a_ub,
    b_ub=b_ub,
    A_eq=a_eq if a_eq.shape[0] else None,
    b_eq=np.zeros(a_eq.shape[0]) if a_eq.shape[0] else None,
    bounds=(None, None),
    method="highs",
    options={"time_limit": LP_TIME_LIMIT_S},
  )
  if not res.success:
    return None
  return (t_of_b @ res.x).reshape(n, d)


def _svd_rank(a, rel_tol: float):
  """``(rank, U)``: the numerical rank of ``a`` and its full left singular vectors."""
  u, sv, _ = numerics.svd(a, full_matrices=True)
  return numerics.rank(sv, rel_tol), u


@diagnostics.one_blas_thread
def flat_family(
  problem: str,
  params,
  reference,
  x_train,
  y_train,
  lam,
  cols,
  truth_residual: float,
  *,
  rows=None,
  box=None,
  distance: float = 0.5,
  rel_tol: float = 1e-8,
  seed: int = 0,
) -> dict:
  """Exact solutions of the stationarity equations other than the training set, if any.

  For a network whose first layer is dense (``layer_0``'s kernel K, [d, h]),
  moving a sample ``x_i`` along a direction ``t`` with ``t K = 0`` changes no
  activation and no gradient but the first layer's, ``x_i delta_i^T``; so the
  KKT sum is unchanged by ``x_i -> x_i + t_i`` whenever ``sum_i lambda_i t_i
  delta_i^T = 0``.  With ``M = diag(lambda) [delta_i]`` ([n, h]) that leaves a
  linear family of dimension ``(n - rank M) (d - rank K)`` through the training
  set, every member with exactly the truth's residual.  Weight decay makes K
  low-rank (it did to rank 2 on LFW), and samples with lambda_i = 0 (off the
  margin) are free in every direction K sees too; then the training set is not
  the only solution, however good the search.

  ``rows``: ``cols(x_train, y_train)``, the truth's gradients, when the caller has them.
  One member is scored the same way as the truth, as the witness: inside the
  pixel ``box`` (lo, hi), the one a linear program finds farthest along a
  random direction (so the witness is made of valid images); without a box, a
  random member at relative distance ``distance``.

  Returns:
    JSON-able dict: ``dimension``, ``first_layer_rank`` (of ``input_dim``), ``multiplier_rank``,
    ``witness_residual``, ``witness_distance`` (relative to the training set's
    norm), ``confirmed`` (the witness fits as well as the truth), or
    ``skipped`` with the reason.
  """
  try:
    kernel = np.asarray(params["params"]["layer_0"]["kernel"], np.float64)
  except (KeyError, TypeError):
    return {"skipped": "the victim has no dense first layer ('layer_0' with a kernel)"}
  if problem == "general" or np.ndim(lam) != 1:
    return {"skipped": "defined for one multiplier per sample (binary, multiclass)"}
  x = np.asarray(x_train, np.float64)
  n, d = len(x), kernel.shape[0]
  flat = x.reshape(n, -1)
  if flat.shape[1] != d:
    return {"skipped": f"the first layer takes {d} inputs, a sample has {flat.shape[1]}"}

  if rows is None:
    rows = cols(jnp.asarray(x_train), jnp.asarray(y_train))
  unravel = jax.flatten_util.ravel_pytree(params)[1]
  grads = np.stack(
    [np.asarray(unravel(row)["params"]["layer_0"]["kernel"]) for row in np.asarray(rows)]
  )
  # grad_K g_i = x_i delta_i^T, so delta_i = grad_K^T x_i / ||x_i||^2.
  norms = np.maximum(np.sum(flat**2, axis=1), 1e-300)
  delta = np.einsum("idh,id->ih", grads.astype(np.float64), flat) / norms[:, None]
  m = np.asarray(lam, np.float64)[:, None] * delta
  (rank_k, u_k), (rank_m, u_m) = _svd_rank(kernel, rel_tol), _svd_rank(m, rel_tol)
  out = {
    "dimension": int((n - rank_m) * (d - rank_k)),
    "first_layer_rank": rank_k,
    "input_dim": int(d),
    "multiplier_rank": rank_m,
    "witness_residual": None,
    "witness_distance": None,
    "confirmed": False,
  }
  if out["dimension"] == 0:
    return out
  rng = np.random.default_rng(seed)
  if box is None:
    # A random member at relative distance `distance`.
    t = u_m[:, rank_m:] @ rng.normal(size=(n - rank_m, d - rank_k)) @ u_k[:, rank_k:].T
    t *= distance * np.linalg.norm(flat) / max(np.linalg.norm(t), 1e-300)
  else:
    box = tuple(np.broadcast_to(np.asarray(b, np.float64), x.shape[1:]).reshape(-1) for b in box)
    t = _farthest_in_box(flat, u_k[:, :rank_k], u_m[:, rank_m:], box, rng)
    if t is None:
      out["witness_note"] = (
        f"the linear program found no member in the box (or ran out of its {LP_TIME_LIMIT_S:.0f} s)"
      )
      return out
  t = t.reshape(x.shape)
  witness = x + t
  out["_witness"] = witness  # an array: the caller stores it (not JSON)
  fit = diagnostics.stationarity_fit(cols, problem, reference, witness, y_train)
  out["witness_residual"] = fit["residual_rel"]
  out["witness_distance"] = float(np.linalg.norm(t) / max(np.linalg.norm(flat), 1e-300))
  out["confirmed"] = bool(
    out["witness_distance"] > 1e-3 and fit["residual_rel"] <= truth_residual * (1 + 1e-3) + FLOOR
  )
  return out


# Residuals below this (relative to ||reference||^2) are float64 round-off: equal fits.
FLOOR = 1e-14


def _check_arguments(
  apply_fn, problem, params, x_train, y_train, candidates, weights, labels, diverged
):
  """ConfigError naming the first argument of :func:`identifiability` it cannot run with."""
  if problem not in losses.PROBLEMS:
    raise ConfigError(f"problem must be one of {losses.PROBLEMS}, got {problem!r}.", "problem")
  arguments.finite_tree("params", params)
  x = arguments.array("x_train", x_train, min_ndim=2)
  arguments.array("y_train", y_train, ndim=1, shape=(len(x),))
  shape = x.shape[1:]
  c = arguments.array(  # no restarts at all (an attack without a search) is allowed
    "candidates",
    candidates,
    ndim=2 + len(shape),
    shape=(None, None, *shape),
    finite=False,
    nonempty=False,
  )
  r, m = c.shape[:2]
  arguments.array("weights", weights, shape=(r, m), min_ndim=2, finite=False, nonempty=False)
  lab = arguments.array("labels", labels, ndim=1, shape=(m,) if r else None, nonempty=bool(m))
  if diverged is not None:
    arguments.array("diverged", diverged, ndim=1, shape=(r,))
  try:
    outputs = int(np.shape(apply_fn(params, x[:1], None))[-1])
  except Exception as e:  # noqa: BLE001 (a flax shape error, named as the argument it is)
    raise ConfigError(
      f"x_train of shape {x.shape[1:]} does not fit the network's input ({type(e).__name__}).",
      "x_train",
    ) from None
  if problem == "multiclass":
    classes = np.concatenate([lab, np.asarray(y_train)])
    if outputs < 2 or not np.all(
      (classes >= 0) & (classes < outputs) & (classes == np.round(classes))
    ):
      raise ConfigError(
        f"problem=multiclass needs class indices in [0, {outputs}) for this network's "
        f"{outputs} output(s); the labels hold {sorted(set(classes.tolist()))[:5]}.",
        "problem",
      )
  elif problem == "binary" and outputs != 1:
    raise ConfigError(
      f"problem=binary needs a one-output network; this one has {outputs} outputs.", "problem"
    )


def identifiability(
  apply_fn,
  problem: str,
  params,
  x_train,
  y_train,
  candidates,
  weights,
  labels,
  *,
  reference=None,
  diverged=None,
  box=None,
) -> dict:
  """The truth's stationarity residual against each restart's, and the verdict.

  Args:
    apply_fn: the victim, ``apply_fn(params, x, act=None)``.
    problem: 'binary', 'multiclass' or 'general'.
    params: theta*, where the gradients are taken.
    x_train, y_train: the training set (attack input space, e.g. mean-subtracted).
    candidates: [R, m, ...] the attack's final candidates.
    weights: [R, m] (or [R, m, C]) their multipliers; the n largest are scored.
    labels: [m] the labels the attack assumed for its candidates.
    reference: what the sum must reproduce (theta* - theta_0 with a known
      initialisation); default ``params``.
    diverged: [R] bool, restarts left out.
    box: (lo, hi) pixel bounds of the attack's space, for :func:`flat_family`'s witness.

  Returns:
    JSON-able dict: ``truth_residual``, ``attack_best_residual``,
    ``attack_median_residual``, ``ratio`` (best / truth: >= 1 means the truth fits
    at least as well as anything the attack found), ``verdict``, ``comparison``,
    ``per_restart_residual``, ``best_restart``, ``attack_best_residual_all_m``
    (the best restart with all m candidates, for reference), ``truth_lam``,
    ``truth_leave_one_out`` (per training image, how much ``truth_residual`` rises when
    the image is left out and the rest refitted: an image that barely raises it is one the
    objective cannot tell from its absence), ``family`` (:func:`flat_family`) and ``cost_s``.
  """
  args = (apply_fn, problem, params, x_train, y_train, candidates, weights, labels)
  _check_arguments(*args, diverged)
  t0 = time.time()
  reference = params if reference is None else reference
  cands = np.asarray(candidates)
  r, m = cands.shape[:2]
  n = len(x_train)
  diverged = np.zeros(r, bool) if diverged is None else np.asarray(diverged, bool)
  cols = diagnostics.gradient_matrix(apply_fn, problem, params)
  truth_rows = cols(jnp.asarray(x_train), jnp.asarray(y_train))
  truth = diagnostics.stationarity_fit(
    cols, problem, reference, x_train, y_train, rows=truth_rows, leave_one_out=True
  )
  labels = np.asarray(labels)
  k = min(n, m)
  per_restart = []
  shown = time.time()
  for i in range(r):
    if diverged[i]:
      per_restart.append(None)
      continue
    idx = top_n(weights[i], k)
    fit = diagnostics.stationarity_fit(cols, problem, reference, cands[i, idx], labels[idx])
    # not scored (None) where the candidates gave no finite fit
    per_restart.append(fit["residual_rel"] if np.isfinite(fit["residual_rel"]) else None)
    if time.time() - shown > PROGRESS_S:  # a line at least every PROGRESS_S seconds
      shown = time.time()
      left = (shown - t0) / (i + 1) * (r - i - 1)
      logging.info("identifiability: %d of %d restarts scored (about %.0fs left)", i + 1, r, left)
  logging.info(
    "identifiability: the training set and %d restarts scored in %.0fs; the flat family next",
    r,
    time.time() - t0,
  )
  done = [v for v in per_restart if v is not None]
  out = {
    "truth_residual": truth["residual_rel"],
    "attack_best_residual": None,
    "attack_median_residual": None,
    "ratio": None,
    "comparison": COMPARISON,
    "per_restart_residual": per_restart,
    "best_restart": None,
    "attack_best_residual_all_m": None,
    "truth_lam": np.asarray(truth["lam"]).tolist(),
    "truth_leave_one_out": np.asarray(truth["leave_one_out_gain"]).tolist(),
  }
  if done:
    best = int(np.nanargmin([np.inf if v is None else v for v in per_restart]))
    out["attack_best_residual"] = per_restart[best]
    out["attack_median_residual"] = float(np.median(done))
    out["ratio"] = float(per_restart[best] / max(truth["residual_rel"], 1e-300))
    out["best_restart"] = best
    if m > k:
      all_m = diagnostics.stationarity_fit(cols, problem, reference, cands[best], labels)
      out["attack_best_residual_all_m"] = all_m["residual_rel"]
    else:
      out["attack_best_residual_all_m"] = per_restart[best]
  out["family"] = flat_family(
    problem,
    params,
    reference,
    x_train,
    y_train,
    truth["lam"],
    cols,
    truth["residual_rel"],
    rows=truth_rows,
    box=box,
  )
  out["tolerance"] = tolerance(per_restart)
  out["verdict"] = verdict(out["ratio"], out["family"], out["tolerance"])
  out["cost_s"] = time.time() - t0
  return out


def missed(report: dict, recovered) -> Optional[dict]:
  """Where the training images the attack missed sit among the truth's weakest: per missed
  image, its rank by ``truth_leave_one_out`` (1: the image whose absence the equations notice
  least) and its gain over the truth's residual.  Misses at ranks 1, 2, ... with gains far
  below 1 are images the objective barely sees, not images a search overlooked.  None
  without the leave-one-out gains."""
  gain = report.get("truth_leave_one_out")
  if gain is None:
    return None
  gain, recovered = np.asarray(gain, float), np.asarray(recovered, bool)
  if gain.shape != recovered.shape:
    raise ConfigError(
      f"recovered must have one entry per training image ({len(gain)}), got {recovered.shape}.",
      "recovered",
    )
  rank = np.empty(len(gain), int)
  rank[np.argsort(gain, kind="stable")] = np.arange(1, len(gain) + 1)
  idx = np.flatnonzero(~recovered)
  floor = max(report.get("truth_residual") or 0.0, 1e-300)
  return {
    "images": idx.tolist(),
    "weakness_rank": rank[idx].tolist(),
    "gain_over_residual": (gain[idx] / floor).tolist(),
  }


def why(family: Optional[dict]) -> str:
  """Where a flat family is confirmed, the reason in words ('' otherwise): the network sees
  its inputs only through the first layer's range, so the rest of every image is free."""
  if not (family and family.get("confirmed") and "input_dim" in family):
    return ""
  return (
    f"; the first layer has rank {family['first_layer_rank']} on {family['input_dim']} "
    "inputs, so the network sees each input through that many directions only"
  )


def line(report: dict) -> str:
  """One line for a log or a table: the residuals, the ratio and the verdict (and, where a
  flat family runs through the truth, why)."""
  if report.get("skipped"):
    return f"identifiability not scored: {report['skipped']}"
  reason = why(report.get("family"))
  if report.get("ratio") is None:
    return (
      f"identifiability: truth residual {report['truth_residual']:.3g}; {report['verdict']}{reason}"
    )
  return (
    f"identifiability: truth residual {report['truth_residual']:.3g}, attack best "
    f"{report['attack_best_residual']:.3g} (median {report['attack_median_residual']:.3g}), "
    f"ratio {report['ratio']:.3g}: {report['verdict']}{reason}"
  )
