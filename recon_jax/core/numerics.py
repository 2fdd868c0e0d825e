"""The host's linear algebra, safe on empty and degenerate inputs.

Every least-squares fit, SVD and linear program the library runs on the host goes through
here (``tests/test_degenerate.py`` holds the library to it).  scipy's and numpy's own
functions are not safe at the edges a run reaches in practice: scipy's NNLS on a matrix of
no columns aborts the process ("double free", exit 134: an attack that found no candidate
took the whole run down) and on one of no rows returns uninitialised memory; ``linprog``
of no variables raises; an SVD or a fit of a matrix with a NaN raises ``LinAlgError``.

Here an empty problem has its exact answer (no columns: nothing explained, the residual is
``||b||``; no rows: every coefficient 0), and a non-finite one returns NaN (a fit), no
singular values (an SVD) or an unsuccessful result (a linear program), for the caller to
report as not scored; nothing here raises on the values it is given, and nothing aborts.
:func:`one_blas_thread` runs such a computation on one BLAS thread, beside XLA's.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import scipy.optimize
from threadpoolctl import threadpool_limits


def one_blas_thread(fn):
  """``fn`` run with one BLAS thread.  The host's linear algebra here (Gram matrices of a
  few dozen gradient rows, their factorisations, SVDs of a first layer) runs beside XLA's
  CPU threads, and the two thread pools spin against each other: a 0.15 s fit took 13-25 s
  on a 2-core machine (measured).  These problems are small enough for one thread."""

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with threadpool_limits(1, user_api="blas"):
      return fn(*args, **kwargs)

  return wrapped


def _finite(*arrays) -> bool:
  return all(np.all(np.isfinite(a)) for a in arrays)


def _matrix(a, b):
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  if a.ndim != 2 or b.ndim != 1 or len(b) != a.shape[0]:
    raise ValueError(f"expected a [M, K] matrix and an [M] vector, got {a.shape} and {b.shape}.")
  return a, b


def nnls(a, b, maxiter: Optional[int] = None) -> tuple[np.ndarray, float]:
  """``argmin_{x >= 0} ||a x - b||`` and that norm (scipy's NNLS, guarded).

  ``a`` [M, K], ``b`` [M].  No columns: ``x`` is empty and the norm ``||b||``; no rows:
  ``x`` is 0; a non-finite entry: ``x`` and the norm are NaN.
  """
  a, b = _matrix(a, b)
  m, k = a.shape
  if not _finite(a, b):
    return np.full(k, np.nan), float("nan")
  if k == 0 or m == 0:
    return np.zeros(k), float(np.linalg.norm(b))
  kw = {} if maxiter is None else {"maxiter": max(int(maxiter), 1)}
  x, rnorm = scipy.optimize.nnls(a, b, **kw)
  return x, float(rnorm)


def lstsq(a, b) -> np.ndarray:
  """The minimum-norm ``argmin_x ||a x - b||`` (numpy's lstsq, guarded): empty for no columns,
  0 for no rows, NaN for a non-finite entry."""
  a, b = _matrix(a, b)
  m, k = a.shape
  if not _finite(a, b):
    return np.full(k, np.nan)
  if k == 0 or m == 0:
    return np.zeros(k)
  return np.linalg.lstsq(a, b, rcond=None)[0]


def svd(a, full_matrices: bool = True):
  """``(U, s, Vt)`` of ``a`` [M, N] (numpy's SVD, guarded).  A matrix with a non-finite entry
  has no singular values: ``s`` is empty, ``U`` and ``Vt`` the identities (``full_matrices``)
  or empty, so its rank reads 0."""
  a = np.asarray(a, np.float64)
  if a.ndim != 2:
    raise ValueError(f"expected a matrix, got shape {a.shape}.")
  m, n = a.shape
  if not _finite(a):
    if full_matrices:
      return np.eye(m), np.zeros(0), np.eye(n)
    return np.zeros((m, 0)), np.zeros(0), np.zeros((0, n))
  try:
    return np.linalg.svd(a, full_matrices=full_matrices)
  except np.linalg.LinAlgError:  # did not converge: no singular value is trusted
    return svd(np.full_like(a, np.nan), full_matrices)


def rank(s, rel_tol: float) -> int:
  """The numerical rank of singular values ``s`` (descending): those above ``rel_tol`` times
  the largest; 0 for none or a zero matrix."""
  s = np.asarray(s, np.float64)
  return int(np.sum(s > rel_tol * s[0])) if s.size and s[0] > 0 else 0


def _failed(n: int, message: str) -> scipy.optimize.OptimizeResult:
  return scipy.optimize.OptimizeResult(
    x=np.full(n, np.nan), fun=float("nan"), success=False, status=4, message=message
  )


def _size(a) -> int:
  return 0 if a is None else int(np.prod(np.shape(a)))


def _values(a):
  """The stored values of a dense array or a scipy sparse matrix."""
  if a is None:
    return np.zeros(0)
  return np.asarray(a.data if hasattr(a, "tocsr") else a, np.float64)


def linprog(c, A_ub=None, b_ub=None, A_eq=None, b_eq=None, bounds=(0, None), **kwargs):  # noqa: N803
  """scipy's ``linprog`` (HiGHS unless ``method`` says otherwise), guarded: a program of no
  variables is solved here (feasible when every right-hand side allows x = []), a
  constraint block of no rows is left out, and a non-finite cost or constraint gives an
  unsuccessful result (``success`` False, ``x`` NaN) instead of an exception.  Callers
  read ``success`` as they do scipy's result."""
  c = np.asarray(c, np.float64).reshape(-1)
  n = c.size
  if not _finite(c, _values(A_ub), _values(b_ub), _values(A_eq), _values(b_eq)):
    return _failed(n, "a cost or constraint is not finite")
  if A_ub is not None and _size(b_ub) == 0:
    A_ub, b_ub = None, None
  if A_eq is not None and _size(b_eq) == 0:
    A_eq, b_eq = None, None
  if n == 0:
    ok = (b_ub is None or np.all(np.asarray(b_ub) >= 0)) and (
      b_eq is None or np.all(np.asarray(b_eq) == 0)
    )
    return scipy.optimize.OptimizeResult(
      x=np.zeros(0),
      fun=0.0,
      success=bool(ok),
      status=0 if ok else 2,
      message="no variables" if ok else "no variables, and the constraints need some",
    )
  kwargs.setdefault("method", "highs")
  return scipy.optimize.linprog(
    c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, **kwargs
  )
