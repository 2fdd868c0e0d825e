"""Attacker-side identification scores: which reconstructions look like real training samples?

Runkel et al. (2024) argue that an adversary cannot tell whether a
reconstructed image was part of the training set.  This module measures how
well an attacker does *without* the ground truth: every score below is a pure
function of what the attacker has, namely theta* (a :class:`Target`), the
candidates and the attack's own state, and is higher for candidates judged
"more likely a real training sample".

==================  =============================================================
score               formula (per candidate i)
==================  =============================================================
lambda_score        ``lambda_i`` (binary/multiclass), ``||lambda_i||_2`` ([m, C])
agreement_score     ``#{restarts s != r : max_j NCC(x_ri, x_sj) > tau}`` (or / (R-1))
leave_one_out_score ``(||theta* - sum_{j!=i} v_j||^2 - ||theta* - sum_j v_j||^2)
                    / ||theta*||^2``, ``v_j = s lambda_j grad_theta g_j``, s = 1/m or 1
stability_score     ``1 - ||x_i(T) - x_i|| / ||x_i(0) - x_i||`` after a perturbation
                    ``x_i(0) = x_i + eps`` and T attack steps
margin_score        ``-|g_i - gamma| / gamma``, ``gamma`` the median of the smallest
                    positive margins
==================  =============================================================

The stability score, which re-runs the attack, is in :mod:`recon_jax.attacker.stability`;
how well a score ranks the real candidates first (ROC AUC, precision@k, with the
ground truth) is measured in :mod:`recon_jax.eval.ranking`.  Nothing here reads the
training set.

All scores are jitted jnp functions
whose array arguments may be traced (their settings: thresholds, step counts,
noise scales, are Python values checked up front); the loops over candidates
are ``vmap`` (or ``lax.map`` in batches, to bound memory) and the re-runs of
the attack are ``lax.scan``.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from recon_jax.core.losses import (
  PROBLEMS,
  batched_map,
  margin_jacobian,
  margins,
  tree_dot,
  tree_sq_norm,
  unit_centred,
)
from recon_jax.errors import ConfigError
from recon_jax.types import Target

# Default NCC above which two candidates count as the same image (see agreement_score).
DEFAULT_NCC_THRESHOLD = 0.9
AGREEMENT_METRICS = ("ncc", "l2")


def _check_problem(problem: str) -> None:
  if problem not in PROBLEMS:
    raise ConfigError(f"problem must be one of {PROBLEMS}, got {problem!r}.")


# --------------------------------------------------------------------------
# lambda
# --------------------------------------------------------------------------
def lambda_score(lam, *, signed: bool = True) -> jax.Array:
  """The KKT multiplier of each candidate.

  ``score_i = lambda_i`` for ``lam`` [m] (binary/multiclass; ``|lambda_i|`` when
  ``signed=False``) and ``score_i = ||lambda_i||_2 = sqrt(sum_c lambda_ic^2)`` for
  ``lam`` [m, C] (the free real multipliers of the 'general' problem).

  A candidate with lambda ~ 0 does not enter the stationarity sum, so its x is
  unconstrained (Haim et al. 2022, Sec. 4 filter on lambda).  Signed by
  default: a negative multiplier violates dual feasibility and ranks lowest.
  For a batch of restarts [R, m] use ``jax.vmap(lambda_score)``.
  """
  lam = jnp.asarray(lam)
  if lam.ndim == 1:
    return lam if signed else jnp.abs(lam)
  if lam.ndim == 2:
    return jnp.linalg.norm(lam, axis=-1)
  raise ConfigError(f"lam must be [m] or [m, C], got shape {tuple(lam.shape)}.")


# --------------------------------------------------------------------------
# agreement across restarts
# --------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("metric", "fraction", "batch_size"))
def _agreement(
  flat: jax.Array, threshold, valid, metric: str, fraction: bool, batch_size: Optional[int]
):
  """[R, m] scores from the flattened candidates [R, m, D]."""
  num_restarts = flat.shape[0]
  if metric == "ncc":
    flat = unit_centred(flat)  # NCC = dot product of these features

    def one_restart(fr):  # [m, D] -> [m, R]
      sim = jnp.einsum("id,sjd->isj", fr, flat, precision=jax.lax.Precision.HIGHEST)
      return jnp.max(sim, axis=-1) > threshold
  else:
    sq = jnp.sum(jnp.square(flat), axis=-1)  # [R, m]

    def one_restart(fr):
      cross = jnp.einsum("id,sjd->isj", fr, flat, precision=jax.lax.Precision.HIGHEST)
      d2 = jnp.sum(jnp.square(fr), -1)[:, None, None] + sq[None] - 2.0 * cross
      return jnp.min(jnp.maximum(d2, 0.0), axis=-1) <= threshold**2

  # lax.map over the restart axis: [m, R*m] similarities at a time, never [R*m, R*m].
  # matches[r, i, s]: candidate (r, i) has a match in restart s.
  matches = jax.lax.map(one_restart, flat, batch_size=batch_size)
  other = valid[None, :] & ~jnp.eye(num_restarts, dtype=bool)  # [r, s]
  count = jnp.sum(matches & other[:, None, :], axis=-1).astype(flat.dtype)  # [R, m]
  if not fraction:
    return count
  voters = jnp.sum(other, axis=-1).astype(flat.dtype)[:, None]  # [R, 1]
  return jnp.where(voters > 0, count / jnp.where(voters > 0, voters, 1.0), jnp.nan)


def agreement_score(
  candidates,
  threshold: float = DEFAULT_NCC_THRESHOLD,
  *,
  fraction: bool = True,
  metric: str = "ncc",
  valid=None,
  batch_size: Optional[int] = None,
) -> jax.Array:
  """How many other restarts found the same candidate: clustering without the training set.

  For candidate ``i`` of restart ``r``::

    count_ri = sum_{s != r, valid_s} 1[ max_j NCC(x_ri, x_sj) > tau ]
    score_ri = count_ri / #{s != r : valid_s}     (fraction=True; NaN if no other valid s)

  A training sample that the attack can recover is a fixed point that many
  independent restarts converge to, so it is found again and again; a spurious
  stationary point depends on the initialisation and is found once.  Oz et al.
  (2024) select reconstructions by clustering in this spirit.  Matches inside
  the candidate's own restart never count (a restart often puts several of
  its m candidates on one point).

  Threshold: ``tau = 0.9`` by default.  Under the null of two unrelated images
  with D roughly independent pixels the NCC is about N(0, 1/D), so 0.9 is many
  standard deviations from chance for any image size (about 25 sigma for
  28x28, 50 sigma for 32x32x3).  Natural images are not independent pixels:
  distinct images with a smooth background or the same layout can correlate
  strongly, which is why tau sits well above the middle of the range; two
  reconstructions of the same image differ only by the attack's residual noise
  (NCC is invariant to their contrast and brightness), so they clear 0.9 once
  the attack has converged.  This is a choice, not a calibration: a
  lower tau merges distinct images (and the class-typical "mean" image that
  many restarts find would score high); raise it for very noisy
  reconstructions only with care.  NCC is meaningless for low-dimensional
  points (a centred 2-vector has NCC +-1), so for point clouds use
  ``metric='l2'``, where ``tau`` is a radius: a match is ``||x_ri - x_sj|| <= tau``.

  Args:
    candidates: [R, m, ...] candidates of R >= 2 restarts (in any one space:
      the attack's or pixels with the mean added back).
    threshold: tau (NCC in (-1, 1) for 'ncc', a radius >= 0 for 'l2').
    fraction: divide the count by the number of other valid restarts.
    metric: 'ncc' or 'l2'.
    valid: optional [R] bool, False for restarts (e.g. diverged) that do not
      vote; their own candidates are still scored.
    batch_size: restarts compared at once inside ``lax.map`` (None: one).

  Returns:
    [R, m] scores (counts as floats when ``fraction=False``).
  """
  c = jnp.asarray(candidates)
  if c.ndim < 3:
    raise ConfigError(
      f"candidates must be [R, m, ...] with a restart axis, got shape {tuple(c.shape)}."
    )
  num_restarts, m = c.shape[:2]
  if num_restarts < 2:
    raise ConfigError(f"candidates needs at least 2 restarts to agree, got {num_restarts}.")
  if metric not in AGREEMENT_METRICS:
    raise ConfigError(f"metric must be one of {AGREEMENT_METRICS}, got {metric!r}.")
  if metric == "ncc" and not -1.0 < float(threshold) < 1.0:
    raise ConfigError(f"threshold must lie in (-1, 1) for NCC, got {threshold}.")
  if metric == "l2" and not float(threshold) >= 0.0:
    raise ConfigError(f"threshold must be a radius >= 0 for metric 'l2', got {threshold}.")
  if valid is None:
    valid = jnp.ones((num_restarts,), bool)
  valid = jnp.asarray(valid, bool)
  if valid.shape != (num_restarts,):
    raise ConfigError(f"valid must be [R] = [{num_restarts}], got shape {tuple(valid.shape)}.")
  if not jnp.issubdtype(c.dtype, jnp.inexact):
    c = c.astype(jnp.float32)
  if batch_size is not None and int(batch_size) <= 0:
    raise ConfigError(f"batch_size must be > 0 or None, got {batch_size}.")
  flat = c.reshape(num_restarts, m, -1)
  return _agreement(
    flat,
    jnp.asarray(threshold, flat.dtype),
    valid,
    metric,
    bool(fraction),
    None if batch_size is None else int(batch_size),
  )


# --------------------------------------------------------------------------
# leave one out
# --------------------------------------------------------------------------
def _scale(normalize: str, m: int) -> float:
  if normalize not in ("mean", "sum"):
    raise ConfigError(f"normalize must be 'mean' or 'sum', got {normalize!r}.")
  return 1.0 / m if normalize == "mean" else 1.0


def _check_candidate_shapes(x, lam, labels) -> None:
  if x.ndim < 2:
    raise ConfigError(f"x must be [m, ...], got shape {tuple(x.shape)}.")
  m = x.shape[0]
  if lam.ndim not in (1, 2) or lam.shape[0] != m:
    raise ConfigError(f"lam must be [m] or [m, C] with m = {m}, got shape {tuple(lam.shape)}.")
  if labels.shape[:1] != (m,):
    raise ConfigError(f"labels must be [m] with m = {m}, got shape {tuple(labels.shape)}.")


def per_candidate_terms(
  apply_fn,
  problem: str,
  params,
  x,
  lam,
  labels,
  act=None,
  normalize: str = "mean",
  batch_size: Optional[int] = None,
):
  """The stationarity sum's terms ``v_i = s grad_theta sum_c lambda_ic g_ic(theta; x_i)``.

  ``s = 1/m`` ('mean') or 1 ('sum'), so that ``sum_i v_i`` is the gradient of
  :func:`recon_jax.attacks.equations.weighted_output`.  Returns a pytree shaped like
  ``params`` with a leading [m] axis (per-sample gradients, vmapped).
  """
  s = _scale(normalize, x.shape[0])

  def one(xi, li, yi):
    def f(p):
      g = margins(problem, apply_fn(p, xi[None], act), yi[None])  # [1] or [1, C]
      return s * jnp.sum(li[None] * g)

    return jax.grad(f)(params)

  return batched_map(one, (x, lam, labels), batch_size)


def leave_one_out_score(
  apply_fn,
  problem: str,
  target: Target,
  x,
  lam,
  act=None,
  *,
  labels=None,
  normalize: str = "mean",
  refit: bool = False,
  ridge: float = 1e-8,
  batch_size: Optional[int] = None,
) -> jax.Array:
  """Rise of the relative stationarity residual when candidate i is removed.

  Without refit (default) the other multipliers stay as the attack found them
  and ``lambda_i`` is set to 0.  With ``v_j`` the terms of
  :func:`per_candidate_terms` and ``r = theta* - sum_j v_j``::

    score_i = (||r + v_i||^2 - ||r||^2) / ||theta*||^2
            = (2 <r, v_i> + ||v_i||^2) / ||theta*||^2

  exactly the difference of :func:`recon_jax.attacks.equations.stationarity` with
  ``lambda_i = 0`` and with all lambda (the sum is linear in lambda), from one
  per-sample gradient per candidate (vmap over i) instead of m full ones.  A
  candidate the KKT sum needs scores > 0; one with lambda_i = 0 scores 0; one
  whose term points away from theta* scores < 0.  With a known initialisation
  (``target.reference = theta* - theta_0``) the reference replaces theta* in
  ``r`` and in the normalisation, as in the attack; the gradients are still
  taken at theta*.

  With ``refit=True`` the attack's lambda is ignored: the multipliers are
  re-fitted by ridge least squares (unconstrained in sign; no NNLS) with and
  without candidate i.  With ``A`` the [m C', P] margin Jacobian (C' = C for
  'general', else 1), ``K = A A^T``, ``M = K + eps I``, ``eps = ridge tr(K)/(m C')``,
  ``beta = M^-1 A theta*`` and ``B_i`` candidate i's rows::

    score_i = beta_Bi^T [(M^-1)_{Bi Bi}]^-1 beta_Bi / ||theta*||^2

  the exact rise of ``min_beta ||theta* - A^T beta||^2 + eps ||beta||^2`` when
  ``beta_Bi = 0`` (block elimination).  It needs the m x P Jacobian, so it is
  for small models; a candidate duplicated in the set scores ~0 with refit (its
  copy takes over), not without.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]``.
    problem: 'binary', 'multiclass' or 'general' (as the attack).
    target: theta* and, unless ``labels`` is given, the candidates' labels.
    x: [m, ...] candidates; lam: [m] or [m, C] multipliers.
    act: activation passed to ``apply_fn`` (None: the model's own; the attack's
      surrogate ``functools.partial(surrogate_relu, alpha=...)`` to match it).
    labels: [m] labels (default ``target.labels``).
    normalize: the attack's 'mean' (1/m) or 'sum' normalisation.
    refit: re-fit the other multipliers by ridge least squares.
    ridge: relative ridge of the refit.
    batch_size: candidates per vmapped batch (None: all at once).

  Returns:
    [m] scores.
  """
  _check_problem(problem)
  x, lam = jnp.asarray(x), jnp.asarray(lam)
  labels = jnp.asarray(target.labels if labels is None else labels)
  _check_candidate_shapes(x, lam, labels)
  _scale(normalize, x.shape[0])
  if refit and not float(ridge) >= 0.0:
    raise ConfigError(f"ridge must be >= 0, got {ridge}.")
  if batch_size is not None and int(batch_size) <= 0:
    raise ConfigError(f"batch_size must be > 0 or None, got {batch_size}.")
  reference = getattr(target, "reference", None)
  fit = target.params if reference is None else reference
  return _leave_one_out(
    apply_fn,
    problem,
    target.params,
    fit,
    x,
    lam,
    labels,
    act,
    normalize,
    bool(refit),
    ridge,
    batch_size,
  )


@functools.partial(
  jax.jit, static_argnames=("apply_fn", "problem", "act", "normalize", "refit", "batch_size")
)
def _leave_one_out(
  apply_fn, problem, theta, fit, x, lam, labels, act, normalize, refit, ridge, batch_size
):
  norm = tree_sq_norm(fit)
  if not refit:
    # sum_j v_j is the gradient of the weighted sum (one backward pass); each v_i is then
    # reduced to its two numbers where it is made, so the [m, P] terms are never held.
    s = _scale(normalize, x.shape[0])

    def weighted(p, xb, lb, yb):
      return s * jnp.sum(lb * margins(problem, apply_fn(p, xb, act), yb))

    total = jax.grad(weighted)(theta, x, lam, labels)
    r = jax.tree_util.tree_map(jnp.subtract, fit, total)

    def rise(xi, li, yi):
      vi = jax.grad(weighted)(theta, xi[None], li[None], yi[None])
      return 2.0 * tree_dot(r, vi) + tree_sq_norm(vi)

    return batched_map(rise, (x, lam, labels), batch_size) / norm
  jac = margin_jacobian(
    apply_fn, problem, theta, x, labels, act, batch_size=batch_size
  )  # [m, c, P]
  m, c = jac.shape[:2]
  a = jac.reshape(m * c, -1)
  flat_fit = jnp.concatenate([t.reshape(-1) for t in jax.tree_util.tree_leaves(fit)])
  k = jnp.matmul(a, a.T, precision=jax.lax.Precision.HIGHEST)
  eps = ridge * jnp.trace(k) / (m * c)
  minv = jnp.linalg.inv(k + eps * jnp.eye(m * c, dtype=k.dtype))
  beta = (minv @ jnp.matmul(a, flat_fit, precision=jax.lax.Precision.HIGHEST)).reshape(m, c)
  idx = jnp.arange(m)
  blocks = minv.reshape(m, c, m, c)[idx, :, idx, :]  # [m, c, c]
  rise = jax.vmap(lambda bk, bi: bi @ jnp.linalg.solve(bk, bi))(blocks, beta)
  return rise / norm


# --------------------------------------------------------------------------
# margin
# --------------------------------------------------------------------------
def margin_reference(g, quantile: float = 0.25) -> jax.Array:
  """``gamma``: the median of the smallest ``ceil(quantile n+)`` positive margins in ``g``.

  ``n+ = #{g_i > 0}``; NaN when no margin is positive.
  """
  g = jnp.asarray(g).reshape(-1)
  pos = g > 0
  n_pos = jnp.sum(pos)
  srt = jnp.sort(jnp.where(pos, g, jnp.inf))
  k = jnp.maximum(jnp.ceil(quantile * n_pos).astype(jnp.int32), 1)
  med = 0.5 * (srt[(k - 1) // 2] + srt[k // 2])
  return jnp.where(n_pos > 0, med, jnp.nan)


def margin_score(
  apply_fn,
  problem: str,
  target: Target,
  x,
  labels=None,
  act=None,
  *,
  reference: Optional[float] = None,
  quantile: float = 0.25,
) -> jax.Array:
  """Closeness of the candidate's margin to the network's margin: ``-|g_i - gamma| / gamma``.

  ``g_i = y_i Phi(theta*; x_i)`` (binary) or ``Phi_y - max_{j != y} Phi_j``
  (multiclass), see :func:`recon_jax.core.losses.margins`.  At a KKT point of margin
  maximisation the samples with ``lambda_i > 0`` lie exactly on the margin,
  ``g_i = gamma``, and those are the training samples Haim et al. (2022)
  reconstruct.  theta* is only proportional to the KKT point, so gamma is not
  known to the attacker; by default it is estimated from the candidates as
  :func:`margin_reference` (the median of the lowest ``quantile`` of the
  positive margins: training samples on the margin are the smallest positive
  margins, and candidates that reproduce them sit there too).  Pass
  ``reference`` to use a known gamma instead.  The score is 0 on the margin,
  falls linearly either side (relative to gamma), and is below -1 for a
  candidate its assumed label misclassifies (g_i < 0).

  Pass all candidates of a run at once (restarts flattened into the first axis)
  for one common gamma.

  Args:
    apply_fn, problem, target, act: as :func:`leave_one_out_score`
      ('general' has no margin and is refused).
    x: [N, ...] candidates.
    labels: [N] labels (default ``target.labels``).
    reference: gamma > 0, or None to estimate it.
    quantile: fraction in (0, 1] of the positive margins gamma is the median of.

  Returns:
    [N] scores (NaN when gamma cannot be estimated: no positive margin).
  """
  _check_problem(problem)
  if problem == "general":
    raise ConfigError(
      "problem 'general' has no margin; margin_score needs 'binary' or 'multiclass'."
    )
  if reference is not None and not float(reference) > 0:
    raise ConfigError(f"reference must be a margin > 0, got {reference}.")
  if not 0.0 < float(quantile) <= 1.0:
    raise ConfigError(f"quantile must lie in (0, 1], got {quantile}.")
  x = jnp.asarray(x)
  labels = jnp.asarray(target.labels if labels is None else labels)
  if x.ndim < 2 or labels.shape != x.shape[:1]:
    raise ConfigError(
      f"labels must be [N] for x [N, ...]: got {tuple(labels.shape)} and {tuple(x.shape)}."
    )
  return _margin_score(apply_fn, problem, target.params, x, labels, act, reference, quantile)


@functools.partial(jax.jit, static_argnames=("apply_fn", "problem", "act"))
def _margin_score(apply_fn, problem, params, x, labels, act, reference, quantile):
  g = margins(problem, apply_fn(params, x, act), labels)
  gamma = margin_reference(g, quantile) if reference is None else jnp.asarray(reference, g.dtype)
  return -jnp.abs(g - gamma) / gamma
