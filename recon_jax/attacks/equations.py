"""The KKT equations of a trained network, as functions of candidates and multipliers.

A margin-maximising (or weight-decay) stationary point satisfies
``reference = grad_theta (1/m) sum_i lambda_i g_i(theta; x_i)`` (``reference``: theta*,
or theta* - theta_0 when theta_0 is known).  This module holds that equation in the
forms the attacks take: the weighted output whose gradient is the sum, its squared
residual (:func:`stationarity`) for a first-order search, and the residual pytrees
with free or tied multipliers for a least-squares solver
(:func:`recon_jax.attacks.gauss_newton.lm_attack`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from recon_jax.core.losses import margins, tree_dot, tree_sq_norm
from recon_jax.types import Target


def weighted_output(apply_fn, problem: str, params, x, lam, labels, act, normalize="mean"):
  """``(1/m) sum_i lambda_i g_i(params; x_i)``: its gradient in params is the KKT sum."""
  g = margins(problem, apply_fn(params, x, act), labels)
  total = jnp.sum(lam * g)
  return total / x.shape[0] if normalize == "mean" else total


def stationarity(apply_fn, problem, params, x, lam, labels, act, normalize="mean", reference=None):
  """``||reference - grad_theta weighted_output(params)||^2`` summed over parameter leaves.

  ``reference`` defaults to ``params`` (theta*); a known-initialisation attack
  passes ``theta* - theta_0``.
  """
  grads = jax.grad(weighted_output, argnums=2)(
    apply_fn, problem, params, x, lam, labels, act, normalize
  )
  ref = params if reference is None else reference
  residual = jax.tree_util.tree_map(jnp.subtract, ref, grads)
  return tree_sq_norm(residual)


def relative(stat, target: Target):
  """The squared residual ``stat`` as a fraction of ``||reference||^2``; in a span's
  coordinates both include what lies outside the span (a constant no step moves)."""
  if target.span is None:
    return stat / tree_sq_norm(target.fit)
  out = target.span.outside
  return (stat + out) / (tree_sq_norm(target.fit) + out)


MULTIPLIERS = ("free", "tied")


def tied_residual(apply_fn, target: Target, x, act, normalize="mean"):
  """The tied residual ``reference - c sum_i sigma(-g_i) grad g_i`` (a pytree) and ``lam``.

  ``g_i = y_i Phi(x_i)``.  At a stationary point of ``mean_i log(1 + exp(-g_i)) +
  wd/2 ||theta||^2`` the training set makes it 0 with ``c = 1/(n wd)`` (times m
  under ``normalize='mean'``).  The scale is eliminated in closed form,
  ``c = |<ref, u>| / ||u||^2`` with ``u`` the sum: the least-squares scale where
  the cosine of ``ref`` and ``u`` is positive, so the squared residual is
  ``||ref||^2 (1 - cos^2)``; where it is negative the same formula gives
  ``||ref||^2 (1 + 3 cos^2)``, so the squared residual is C^1 and decreases with
  the cosine everywhere (a start pointing away from the reference still has a
  gradient), and ``c >= 0`` always.  The gradient in ``x`` flows through ``c``
  and through the multipliers ``sigma(-g_i)``.

  Returns:
    ``(residual pytree, lam [m] = c sigma(-g))``.
  """
  g = margins("binary", apply_fn(target.params, x, act), target.labels)
  w = jax.nn.sigmoid(-g)
  u = jax.grad(weighted_output, argnums=2)(
    apply_fn, "binary", target.params, x, w, target.labels, act, normalize
  )
  ref = target.fit
  uu = tree_sq_norm(u)
  uu = jnp.maximum(uu, jnp.finfo(uu.dtype).tiny)
  c = jnp.abs(tree_dot(ref, u)) / uu
  return jax.tree_util.tree_map(lambda r, v: r - c * v, ref, u), c * w


def free_residual(apply_fn, target: Target, x, lam, act, normalize="mean"):
  """The binary KKT residual ``reference - grad_theta (1/m) sum_i lam_i y_i Phi(x_i)`` (a
  pytree) and ``lam``: the equations of the first-order attack, for a least-squares solver."""
  grads = jax.grad(weighted_output, argnums=2)(
    apply_fn, "binary", target.params, x, lam, target.labels, act, normalize
  )
  return jax.tree_util.tree_map(jnp.subtract, target.fit, grads), lam


def lm_residual(multipliers: str):
  """The equations of :func:`recon_jax.attacks.gauss_newton.lm_attack` for ``multipliers``:
  ``(apply_fn, target, x, lam, act, normalize) -> (residual pytree, lam)``."""
  if multipliers == "free":
    return free_residual
  return lambda apply_fn, target, x, lam, act, normalize: tied_residual(
    apply_fn, target, x, act, normalize
  )


def tied_stationarity(apply_fn, target: Target, x, act, normalize="mean"):
  """``||tied_residual||^2`` and the multipliers (see :func:`tied_residual`)."""
  r, lam = tied_residual(apply_fn, target, x, act, normalize)
  return tree_sq_norm(r), lam
