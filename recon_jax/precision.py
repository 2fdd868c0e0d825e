"""Numerical guard: did float32 run out of precision before the attack converged?

The KKT stationarity loss ``||theta* - sum_i lam_i grad phi(x_i)||^2`` is a
difference of two vectors of size ``||theta*||``; in float32 it cannot get
much below ``eps32^2 * #params`` relative to ``||theta*||^2``, and the steps
that would reduce it further round to nothing.  The symptom is that the best
loss stops changing at float32 resolution (a few ulps) chunk after chunk.

:func:`float32_floor_warning` is a heuristic, and says so: a loss frozen to a
few ulps in float32 is what the floor looks like, but a restart can also sit
exactly at a stationary point.  Re-running with ``--x64`` tells them apart.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

# float32 machine epsilon is 1.19e-7: a relative change below ~8 ulps is noise.
DEFAULT_RTOL = 1e-6


def _best(rec: dict, key: str) -> float:
  v = np.asarray(rec.get(key, np.nan), np.float64).ravel()
  v = v[np.isfinite(v)]
  return float(v.min()) if v.size else np.nan


def float32_floor_warning(history: Sequence[dict], dtype, *, window: int = 3,
                          rtol: float = DEFAULT_RTOL,
                          max_rel: float = 1e-2) -> Optional[str]:
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
  return (f"the best loss stopped decreasing at float32 resolution (relative change "
          f"{change:.2g} over the last {window} chunks, loss {last:.4g}{level}); float32 may "
          f"be the limit of this attack: re-run with --x64 to check.")
