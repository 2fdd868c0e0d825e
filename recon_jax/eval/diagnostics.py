"""Diagnostics of a victim and of an attack run, computed by the library, read by people.

* :func:`oracle_residual`: how well the TRUE training set satisfies the KKT
  stationarity equations of a victim (Haim et al. eq. 6, solved for the best
  multipliers): a go/no-go check of whether the attack can single out the data.
* :func:`kink_fraction`: how many first-layer ReLUs put their kink on a
  training point (where the ReLU derivative, and so the oracle, is undefined).
* :func:`float32_floor_warning`: did float32 run out of precision before the
  attack converged?  The stationarity loss ``||theta* - sum_i lam_i grad
  phi(x_i)||^2`` is a difference of two vectors of size ``||theta*||``; in
  float32 it cannot get much below ``eps32^2 * #params`` relative to
  ``||theta*||^2``.  A heuristic, and it says so: a restart can also sit
  exactly at a stationary point; re-running in float64 tells them apart.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from recon_jax.core import numerics
from recon_jax.core.losses import margin_jacobian
from recon_jax.core.numerics import one_blas_thread


def gradient_matrix(apply_fn, problem: str, params):
  """A jitted ``cols(x [k, ...], labels [k]) -> [k * C, P]``: per-candidate margin gradients.

  Row ``i`` (``i*C + c`` for 'general') is ``grad_theta g_i(theta; x_i)`` at
  ``theta = params`` with the network's OWN activation (ReLU's true
  derivative, a smooth victim's exact one), flattened like
  ``ravel_pytree(params)``.  Built once, it serves every set of candidates of
  the same shape without recompiling.
  """
  p = jax.flatten_util.ravel_pytree(params)[0].shape[0]

  def cols(x, labels):
    return margin_jacobian(apply_fn, problem, params, x, labels, None).reshape(-1, p)

  return jax.jit(cols)


def _triangle(v, theta):
  """``(R, Q^T theta)`` with ``V = Q R``: the k x k problem with the same least-squares solution
  as ``V`` [P, k] (``||theta - V lam||^2 = ||Q^T theta - R lam||^2 + const``), at a fraction
  of the cost of fitting V.  R from the Cholesky factor of ``V^T V``, which is ~30x faster
  than a QR of a tall V here; a QR where the columns are (nearly) dependent."""
  try:
    r = scipy.linalg.cholesky(v.T @ v)
    return r, scipy.linalg.solve_triangular(r, v.T @ theta, trans="T")
  except np.linalg.LinAlgError:
    q, r = np.linalg.qr(v)
    return r, q.T @ theta


@one_blas_thread
def stationarity_fit(
  cols, problem: str, reference, x, labels, rows=None, leave_one_out: bool = False
) -> dict:
  """Best fit of the stationarity equations by the candidates ``x``.

  Solves ``min_lambda ||reference - sum_i lambda_i grad g_i(x_i)||^2`` over
  ``lambda >= 0`` (non-negative least squares; free real multipliers for
  'general') in float64 on the k x k triangle of the gradient matrix, and measures
  the residual directly on the whole matrix, so a residual near machine precision
  stays measurable.

  Args:
    cols: :func:`gradient_matrix` of the victim.
    problem: 'binary', 'multiclass' or 'general'.
    reference: what the sum must reproduce (theta*, or theta* - theta_0).
    x, labels: [k, ...] candidates and their labels.
    rows: ``cols(x, labels)`` when the caller has it already (not computed again).
    leave_one_out: also fit without each candidate in turn (k more fits of the k x k
      triangle, cheap beside the gradients).

  Returns:
    dict with ``residual_rel`` (residual / ||reference||^2), ``lam`` [k] (or
    [k, C]) in the paper's eq. (6) normalisation (no 1/m), ``n_active``; with
    ``leave_one_out``, ``leave_one_out_gain`` [k]: how much ``residual_rel`` rises when
    candidate i is left out and the others refitted (0 for one the fit does not need).
  """
  theta = np.asarray(jax.flatten_util.ravel_pytree(reference)[0], np.float64)
  k = len(x)
  if rows is None:
    rows = cols(jnp.asarray(x), jnp.asarray(labels)) if k else np.zeros((0, theta.size))
  v = np.asarray(rows, np.float64).reshape(-1, theta.size).T  # [P, k*C]
  if not (np.all(np.isfinite(v)) and np.all(np.isfinite(theta))):
    # a candidate the network cannot take (NaN pixels): no fit, reported as not scored
    v = np.full_like(v, np.nan)
    r, rhs = np.full((v.shape[1], v.shape[1]), np.nan), np.full(v.shape[1], np.nan)
  else:
    r, rhs = _triangle(v, theta)

  def solve(cols_kept):  # no candidate (an attack that found none) explains nothing: 0
    if problem == "general":
      return numerics.lstsq(r[:, cols_kept], rhs)
    return numerics.nnls(r[:, cols_kept], rhs, maxiter=50 * v.shape[1])[0]

  every = np.arange(v.shape[1])
  sol = solve(every)
  scale = float(np.sum(theta**2))
  resid = float(np.sum((theta - v @ sol) ** 2) / scale) if scale > 0 else 0.0
  lam = sol.reshape(k, -1) if problem == "general" else sol
  out = {"residual_rel": resid, "lam": lam, "n_active": int(np.sum(np.abs(sol) > 0))}
  if leave_one_out:
    # On the triangle the residual differs from the whole matrix's by a constant, which
    # cancels in the difference.
    sample = every // (v.shape[1] // k if k else 1)  # the candidate of each column
    base = np.sum((rhs - r @ sol) ** 2)
    gain = []
    for i in range(k):
      kept = every[sample != i]
      fit = r[:, kept] @ solve(kept) if kept.size else 0.0
      gain.append(max(0.0, float(np.sum((rhs - fit) ** 2) - base)))
    out["leave_one_out_gain"] = np.asarray(gain) / max(scale, 1e-300)
  return out


def oracle_residual(apply_fn, problem: str, params, x_train, labels, reference=None) -> dict:
  """Best fit of the stationarity equations by the TRUE training set.

  :func:`stationarity_fit` of the training set with the network's true
  derivative, against ``reference`` (default theta*).  If other inputs fit the
  equations better than the truth, the attack cannot single out the training
  data: a cheap go/no-go diagnostic for a victim (see
  :mod:`recon_jax.eval.identifiability` for the comparison with an attack).
  """
  cols = gradient_matrix(apply_fn, problem, params)
  ref = params if reference is None else reference
  return stationarity_fit(cols, problem, ref, x_train, labels)


def kink_fraction(params, x_train, rel_tol: float = 1e-3) -> float:
  """Fraction of first-layer ReLUs whose kink passes through a training point.

  A unit counts when ``|w.x_i + b| <= rel_tol * max_i |w.x_i + b|`` for some
  training point.  At PyTorch's init it is about 2% (n = 20); when training
  puts kinks on the data (72% for the default 2-D toy victim), the ReLU
  derivative at those points is not defined, and the oracle residual (which
  uses ``1{z > 0}``) overstates how far the victim is from a (Clarke) KKT point.
  """
  return float(np.mean(np.any(_on_kink(params, x_train, rel_tol), axis=0)))


def images_on_kink(params, x_train, rel_tol: float = 1e-3) -> float:
  """Fraction of training points that sit on the kink of some first-layer ReLU.

  A point counts when ``|w.x_i + b| <= rel_tol * max_j |w.x_j + b|`` for at
  least one unit.  There the ReLU derivative is set-valued: gradient descent
  and L-BFGS stall, and the stationarity residual scored with ``1{z > 0}``
  stays above 0 even at a (Clarke) stationary point.  Meaningless (and
  harmless) for a smooth activation.
  """
  return float(np.mean(np.any(_on_kink(params, x_train, rel_tol), axis=1)))


def _on_kink(params, x_train, rel_tol: float) -> np.ndarray:
  """[n, h]: training point i within ``rel_tol`` (relative to the unit's largest |w.x + b|
  over the training set) of first-layer unit j's kink."""
  layer = params["params"]["layer_0"]
  x = np.asarray(x_train, np.float64).reshape(len(x_train), -1)
  z = x @ np.asarray(layer["kernel"], np.float64)
  if "bias" in layer:
    z = z + np.asarray(layer["bias"], np.float64)
  a = np.abs(z)
  return a <= rel_tol * (a.max(axis=0, keepdims=True) + 1e-300)


# float32 machine epsilon is 1.19e-7: a relative change below ~8 ulps is noise.
DEFAULT_RTOL = 1e-6


def _best(rec: dict, key: str) -> float:
  v = np.asarray(rec.get(key, np.nan), np.float64).ravel()
  v = v[np.isfinite(v)]
  return float(v.min()) if v.size else np.nan


def float32_floor_warning(
  history: Sequence[dict],
  dtype,
  *,
  window: int = 3,
  rtol: float = DEFAULT_RTOL,
  max_rel: float = 1e-2,
) -> Optional[str]:
  """A one-line warning when the loss stalled at float32 resolution, else None.

  Args:
    history: per-chunk records with ``'loss'`` (and optionally ``'stat_rel'``,
      the loss relative to ``||theta*||^2``) arrays over restarts, oldest first.
    dtype: the dtype the attack ran in; only float32 (or lower) can warn.
    window: number of trailing chunks that must show no progress.
    rtol: relative change of the best (min over restarts) loss between the
      first and the last of those chunks below which the loss counts as stalled.
    max_rel: only a stall with ``stat_rel`` (when recorded) at most this counts:
      a loss stuck far above the floor is a failure of the attack, not of float32.
  """
  if np.dtype(dtype).itemsize >= 8 or not np.issubdtype(np.dtype(dtype), np.floating):
    return None
  if len(history) < max(window, 2):
    return None
  tail = list(history)[-window:]
  first, last = _best(tail[0], "loss"), _best(tail[-1], "loss")
  if not (np.isfinite(first) and np.isfinite(last)) or first <= 0:
    return None
  change = (first - last) / abs(first)
  if change >= rtol:
    return None
  rel = _best(tail[-1], "stat_rel")
  if np.isfinite(rel) and rel > max_rel:
    # Stuck far from stationarity (e.g. all lambda at 0 gives loss/||theta*||^2 = 1):
    # a bad point of the attack, not a precision floor.
    return None
  level = f", loss/||theta*||^2 {rel:.3g}" if np.isfinite(rel) else ""
  return (
    f"the best loss stopped decreasing at float32 resolution (relative change "
    f"{change:.2g} over the last {window} chunks, loss {last:.4g}{level}); float32 may "
    f"be the limit of this attack: re-run in float64 to check."
  )
