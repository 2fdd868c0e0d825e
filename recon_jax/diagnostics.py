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
import scipy.optimize

from recon_jax.attacks.kkt import weighted_output


def oracle_residual(apply_fn, problem: str, params, x_train, labels) -> dict:
  """Best fit of the stationarity equations by the TRUE training set.

  Solves ``min_{lambda >= 0} ||theta* - sum_i lambda_i grad g_i(x_i)||^2`` (a
  non-negative least-squares problem; unconstrained for 'general') with the
  network's true ReLU derivative, and reports the residual as a fraction of
  ``||theta*||^2``.  If other inputs fit the equations better than the truth,
  the attack cannot single out the training data: a cheap go/no-go
  diagnostic for a victim.

  Returns:
    dict with ``residual_rel`` (float), ``lam`` [n] (or [n, C]) in the paper's
    eq. (6) normalisation (no 1/m), ``n_active``.
  """
  flat_params, unravel = jax.flatten_util.ravel_pytree(params)
  x_train = jnp.asarray(x_train)
  labels = jnp.asarray(labels)

  def per_sample_grad(xi, yi, lam_i):
    def f(p):
      return weighted_output(
        apply_fn, problem, unravel(p), xi[None], lam_i[None], yi[None], None, "sum"
      )

    return jax.grad(f)(flat_params)

  n = x_train.shape[0]
  if problem == "general":
    c = apply_fn(params, x_train[:1], None).shape[1]
    cols = []
    for j in range(c):
      lam_j = jnp.zeros((n, c)).at[:, j].set(1.0)
      cols.append(jax.jit(jax.vmap(per_sample_grad))(x_train, labels, lam_j))
    v = np.concatenate([np.asarray(cc) for cc in cols], axis=0).T
    sol, *_ = np.linalg.lstsq(v.astype(np.float64), np.asarray(flat_params, np.float64), rcond=None)
  else:
    v = np.asarray(jax.jit(jax.vmap(per_sample_grad))(x_train, labels, jnp.ones(n))).T
    sol, _ = scipy.optimize.nnls(
      v.astype(np.float64), np.asarray(flat_params, np.float64), maxiter=50 * n
    )
  theta = np.asarray(flat_params, np.float64)
  resid = float(np.sum((theta - v @ sol) ** 2) / np.sum(theta**2))
  lam = sol.reshape(-1, n).T if problem == "general" else sol  # columns were stacked per class
  return {"residual_rel": resid, "lam": lam, "n_active": int(np.sum(np.abs(sol) > 0))}


def kink_fraction(params, x_train, rel_tol: float = 1e-3) -> float:
  """Fraction of first-layer ReLUs whose kink passes through a training point.

  A unit counts when ``|w.x_i + b| <= rel_tol * max_i |w.x_i + b|`` for some
  training point.  At PyTorch's init it is about 2% (n = 20); when training
  puts kinks on the data (72% for the default 2-D toy victim), the ReLU
  derivative at those points is not defined, and the oracle residual (which
  uses ``1{z > 0}``) overstates how far the victim is from a (Clarke) KKT point.
  """
  layer = params["params"]["layer_0"]
  x = np.asarray(x_train).reshape(len(x_train), -1)
  z = x @ np.asarray(layer["kernel"])
  if "bias" in layer:
    z = z + np.asarray(layer["bias"])
  a = np.abs(z)
  return float(np.mean(np.any(a <= rel_tol * (a.max(axis=0, keepdims=True) + 1e-30), axis=0)))


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
