"""Scoring point-cloud reconstructions against the training points (Haim et al. 2022 §4).

The KKT attack returns, for each of R restarts, m candidates ``x_j`` with
multipliers ``lambda_j``.  Haim et al. score the 2-D toy (Fig. 2) in three steps:

1. the lambda filter: a candidate with ``lambda_j ~ 0`` does not enter the
   stationarity equations, so its position carries no information; keep the
   candidates with ``lambda_j >= frac * max_j lambda_j`` of their restart;
2. de-duplication: visit the survivors in random order and drop each one that
   lies within ``radius`` of one already kept;
3. recovery: a training point counts as recovered when a kept candidate lies
   within ``tol`` of it.

Which restart to report is the attacker's choice, made without the truth: the
one with the lowest final loss.  The best restart (most points recovered) and
all restarts' kept candidates pooled are reported next to it, for reference.

Every function takes host arrays and returns numpy arrays or JSON-able dicts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.eval import similarity
from recon_jax.eval.similarity import Array, KeyOrSeed

__all__ = [
  "greedy_dedup",
  "kept_masks",
  "lambda_filter",
  "points_recovered",
  "recovery",
  "score_point_clouds",
]


def _check_settings(lam_filter_frac: float, dedup_radius: float) -> None:
  if not lam_filter_frac >= 0:
    raise ConfigError(f"lam_filter_frac must be >= 0, got {lam_filter_frac}.")
  if not dedup_radius >= 0:
    raise ConfigError(f"dedup_radius must be >= 0, got {dedup_radius}.")


def _as_batch(candidates, lambdas, diverged) -> tuple:
  x = np.asarray(candidates, np.float64)
  if x.ndim != 3:
    raise ConfigError(f"candidates must be [R, m, d], got shape {x.shape}.")
  lam = np.asarray(lambdas, np.float64)
  if lam.shape != x.shape[:2]:
    raise ConfigError(f"lambdas must be [R, m] = {list(x.shape[:2])}, got {list(lam.shape)}.")
  bad = np.zeros(x.shape[0], bool) if diverged is None else np.asarray(diverged, bool).reshape(-1)
  if bad.shape != (x.shape[0],):
    raise ConfigError(f"diverged must be [R] = [{x.shape[0]}], got {list(bad.shape)}.")
  return x, lam, bad


def kept_masks(
  candidates,
  lambdas,
  diverged=None,
  *,
  lam_filter_frac: float = 0.1,
  dedup_radius: float = 0.03,
  seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
  """Which candidates survive the lambda filter, and which also survive de-duplication.

  Args:
    candidates: [R, m, d] candidates of R restarts.
    lambdas: [R, m] their multipliers.
    diverged: [R] bool, restarts whose candidates are all dropped (None: none).
    lam_filter_frac: keep ``lambda >= lam_filter_frac * max lambda`` of the restart.
    dedup_radius: drop a candidate closer than this to one already kept.
    seed: restart r visits its candidates in the random order of ``seed + r``.

  Returns:
    ``(after_filter, kept)``: [R, m] boolean masks; ``kept`` implies ``after_filter``.
  """
  _check_settings(lam_filter_frac, dedup_radius)
  x, lam, bad = _as_batch(candidates, lambdas, diverged)
  after_filter = np.zeros(lam.shape, bool)
  kept = np.zeros(lam.shape, bool)
  for r in range(x.shape[0]):
    finite = np.isfinite(lam[r])
    if bad[r] or not finite.any():
      continue
    top = float(np.max(lam[r][finite]))
    after_filter[r] = lambda_filter(lam[r], lam_filter_frac * top) & finite
    idx = np.flatnonzero(after_filter[r])
    if len(idx):
      kept[r, idx[greedy_dedup(x[r, idx], dedup_radius, seed + r)]] = True
  return after_filter, kept


def recovery(points, x_train, tol: float = 0.05) -> dict:
  """How many training points have one of ``points`` within ``tol``, and how close.

  Returns:
    ``{'recovered': int, 'median_distance': float or None}``: the median over
    training points of the distance to the nearest point (None when there are
    no points).
  """
  x_train = np.asarray(x_train, np.float64)
  points = np.asarray(points, np.float64).reshape(-1, x_train.shape[-1])
  count, dists = points_recovered(points, x_train, tol)
  med = float(np.median(dists)) if len(points) and len(dists) else None
  return {"recovered": int(count), "median_distance": med}


def score_point_clouds(
  candidates,
  lambdas,
  final_loss,
  diverged,
  x_train,
  *,
  lam_filter_frac: float = 0.1,
  dedup_radius: float = 0.03,
  tol: float = 0.05,
  seed: int = 0,
  masks: tuple | None = None,
) -> dict:
  """The toy's report: lambda filter, de-duplication and recovery of every restart.

  Args:
    candidates: [R, m, d] candidates.
    lambdas: [R, m] multipliers.
    final_loss: [R] final attack loss (the attacker picks the lowest).
    diverged: [R] bool.
    x_train: [n, d] the training points.
    lam_filter_frac, dedup_radius, seed: see :func:`kept_masks`.
    tol: recovery radius.
    masks: ``(after_filter, kept)`` from :func:`kept_masks` with the same
      settings, when the caller has them already (None: computed here).

  Returns:
    A JSON-able dict: ``recovered`` and ``median_distance`` of the restart the
    attacker selects (``selected_restart``, lowest final loss among those that
    did not diverge; 0 and None when all diverged), ``recovered_best_restart``
    (``best_restart``), ``recovered_pooled`` (kept candidates of every restart
    together), ``n_diverged`` and ``per_restart`` rows (``restart``,
    ``diverged``, ``final_loss``, ``n_candidates``, ``n_after_filter``,
    ``n_kept``, ``recovered``, ``recovered_unfiltered``, ``median_distance``).
  """
  if not tol > 0:
    raise ConfigError(f"tol must be > 0, got {tol}.")
  x, lam, bad = _as_batch(candidates, lambdas, diverged)
  loss = np.asarray(final_loss, np.float64).reshape(-1)
  if loss.shape != (x.shape[0],):
    raise ConfigError(f"final_loss must be [R] = [{x.shape[0]}], got {list(loss.shape)}.")
  x_train = np.asarray(x_train, np.float64)
  if x_train.ndim != 2 or x_train.shape[1] != x.shape[2]:
    raise ConfigError(f"x_train must be [n, {x.shape[2]}], got shape {x_train.shape}.")
  bad = bad | ~np.isfinite(loss)
  if masks is None:
    masks = kept_masks(
      x, lam, bad, lam_filter_frac=lam_filter_frac, dedup_radius=dedup_radius, seed=seed
    )
  after_filter, kept = (np.asarray(a, bool) for a in masks)
  if after_filter.shape != lam.shape or kept.shape != lam.shape:
    raise ConfigError(f"masks must be two [R, m] = {list(lam.shape)} arrays.")
  after_filter, kept = after_filter & ~bad[:, None], kept & ~bad[:, None]
  rows = []
  for r in range(x.shape[0]):
    row = {"restart": r, "diverged": bool(bad[r]), "n_candidates": int(x.shape[1])}
    if bad[r]:
      row.update(
        final_loss=None,
        n_after_filter=0,
        n_kept=0,
        recovered=0,
        recovered_unfiltered=None,
        median_distance=None,
      )
    else:
      row.update(
        final_loss=float(loss[r]),
        n_after_filter=int(after_filter[r].sum()),
        n_kept=int(kept[r].sum()),
        **recovery(x[r, kept[r]], x_train, tol),
        recovered_unfiltered=recovery(x[r], x_train, tol)["recovered"],
      )
    rows.append(row)
  good = [row for row in rows if not row["diverged"]]
  selected: dict | None = min(good, key=lambda row: row["final_loss"]) if good else None
  best: dict | None = max(good, key=lambda row: row["recovered"]) if good else None
  pooled = recovery(x[kept], x_train, tol)
  return {
    "recovered": selected["recovered"] if selected else 0,
    "median_distance": selected["median_distance"] if selected else None,
    "selected_restart": selected["restart"] if selected else None,
    "recovered_best_restart": best["recovered"] if best else 0,
    "best_restart": best["restart"] if best else None,
    "recovered_pooled": pooled["recovered"],
    "n_diverged": int(bad.sum()),
    "n_train": len(x_train),
    "tol": float(tol),
    "per_restart": rows,
  }


def lambda_filter(lam: Array, thresh: float) -> np.ndarray:
  """Keeps candidates whose KKT multiplier is large (Haim §4, Fig. 2e).

  Points with lambda ~ 0 do not enter the KKT stationarity condition, so
  their x can be anything; they carry no information.

  Args:
    lam: Multipliers [m].
    thresh: Minimum multiplier to keep (the paper uses 5 in 2-D).

  Returns:
    Boolean numpy mask [m], True where lam >= thresh.
  """
  return np.asarray(lam).reshape(-1) >= thresh


@jax.jit
def _greedy_dedup(points: jax.Array, perm: jax.Array, radius: jax.Array) -> jax.Array:
  shuffled = points[perm]
  m = shuffled.shape[0]

  def body(i, kept):
    diff = shuffled - shuffled[i][None, :]
    dist = jnp.sqrt(jnp.sum(diff * diff, axis=1))
    # Only points already processed can be in `kept`, so this is the
    # sequential greedy rule without materialising an [m, m] matrix.
    clash = jnp.any(kept & (dist < radius))
    return kept.at[i].set(~clash)

  kept = jax.lax.fori_loop(0, m, body, jnp.zeros((m,), dtype=jnp.bool_))
  return jnp.zeros((m,), dtype=jnp.bool_).at[perm].set(kept)


def greedy_dedup(points: Array, radius: float, key_or_seed: KeyOrSeed) -> np.ndarray:
  """Removes near-duplicate points greedily in random order (Haim §4).

  Points are visited in a random order; a point is dropped when it lies at
  Euclidean distance < `radius` from a point already kept.

  Args:
    points: Points [m, D] (or [m, ...], flattened).
    radius: Duplicate radius (the paper uses 0.03 in 2-D).
    key_or_seed: JAX PRNG key or int seed for the visiting order.

  Returns:
    Boolean numpy mask [m] of kept points.
  """
  pts = similarity.as_float(points)
  m = int(pts.shape[0])
  if m == 0:
    return np.zeros((0,), dtype=bool)
  pts = pts.reshape((m, -1))
  perm = jax.random.permutation(similarity.as_key(key_or_seed), m)
  return np.asarray(_greedy_dedup(pts, perm, jnp.asarray(radius, dtype=pts.dtype)))


@jax.jit
def _min_dists(x_train: jax.Array, pts: jax.Array) -> jax.Array:
  diff = x_train[:, None, :] - pts[None, :, :]
  return jnp.min(jnp.sqrt(jnp.sum(diff * diff, axis=2)), axis=1)


def points_recovered(
  points_kept: Array, x_train: Array, tol: float = 0.05
) -> tuple[int, np.ndarray]:
  """Counts training points that have a kept point within `tol`.

  Args:
    points_kept: Kept reconstructions [k, D] (after filtering/dedup).
    x_train: Training points [n, D].
    tol: Euclidean distance below which a training point is recovered.

  Returns:
    (count of training points with min distance < tol, per-train minimum
    distance [n] as numpy; inf when no points are kept).
  """
  x_train = similarity.as_float(x_train)
  n = int(x_train.shape[0])
  x_train = x_train.reshape((n, -1))
  pts = similarity.as_float(points_kept)
  k = int(pts.shape[0])
  if k == 0 or n == 0:
    dists = np.full(n, np.inf)
  else:
    pts = pts.reshape((k, -1))
    dtype = jnp.result_type(x_train.dtype, pts.dtype)
    dists = np.asarray(_min_dists(x_train.astype(dtype), pts.astype(dtype)), dtype=np.float64)
  return int(np.sum(dists < tol)), dists
