"""Inner solvers and implicit differentiation for the bilevel attack, through jaxopt.

The bilevel attack (Runkel et al. 2024) needs ``theta(x) = argmin_theta E(theta; x, y)``
and its derivative in ``x``.  At a minimiser ``grad_theta E(theta(x); x) = 0``, so the
implicit function theorem gives, for an outer loss ``l(theta)``,

.. math::
  \\frac{dl}{dx} = -\\partial_x \\langle \\nabla_\\theta E(\\theta(x); x), p \\rangle,
  \\qquad p = [\\nabla^2_\\theta E]^{-1} \\nabla l ,

which needs ``E`` twice continuously differentiable with an invertible Hessian: keep
weight decay above 0 (with separable data and no regulariser the logistic/CE training
problem has no minimiser at all, Runkel et al. footnote 1) and prefer a smooth
activation (with ReLU the Hessian is piecewise constant, L-BFGS stalls and the implicit
gradient is unreliable).

Two ways to apply the inverse Hessian:

* ``'cg'``: jaxopt's ``custom_root`` with ``solve=solve_cg`` (SPD Hessian), tolerance
  and iteration cap configurable; exact up to the CG and inner-solve tolerances.
* ``'lbfgs'``: the paper's quasi-Newton option (its eq. 7, ``H^{k+1}``): a
  ``jax.custom_vjp`` whose backward pass applies the L-BFGS two-loop recursion with the
  ``s``/``y`` memory of the final inner L-BFGS state.  No extra Hessian-vector products,
  but only an approximation of ``H^{-1}`` (a rank-``2 history_size`` update of
  ``gamma I``), and a poor one when a warm-started inner solve took few iterations.

jaxopt is unmaintained; two modules import it, this one and
:mod:`recon_jax.attacks.gauss_newton` (Levenberg-Marquardt), so a swap to optimistix or a
hand-written solver touches those two.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jaxopt
from jaxopt import linear_solve
from jaxopt._src.lbfgs import inv_hessian_product  # the two-loop recursion
import numpy as np

from recon_jax.core import losses
from recon_jax.errors import ConfigError

INNER_SOLVERS = ("lbfgs", "gd")
HESSIAN_SOLVES = ("cg", "lbfgs")


class InnerInfo(NamedTuple):
  grad_norm: jax.Array  # ||grad_theta E|| at the returned theta
  iters: jax.Array  # inner iterations run (float, so it vmaps/differentiates freely)


def _zero_cotangent(a):
  a = jnp.asarray(a)
  if jnp.issubdtype(a.dtype, jnp.inexact):
    return jnp.zeros_like(a)
  return np.zeros(a.shape, dtype=jax.dtypes.float0)


def _make_solver(energy, inner, maxiter, tol, history_size, stepsize, implicit_diff, solve):
  if inner == "lbfgs":
    return jaxopt.LBFGS(
      fun=energy,
      maxiter=maxiter,
      tol=tol,
      history_size=history_size,
      implicit_diff=implicit_diff,
      implicit_diff_solve=solve,
      jit=True,
    )
  if inner == "gd":
    return jaxopt.GradientDescent(
      fun=energy,
      maxiter=maxiter,
      tol=tol,
      stepsize=stepsize,
      acceleration=False,
      implicit_diff=implicit_diff,
      implicit_diff_solve=solve,
      jit=True,
    )
  raise ConfigError(f"inner solver must be one of {INNER_SOLVERS}, got {inner!r}.")


def make_inner_solve(
  energy: Callable,
  *,
  inner: str = "lbfgs",
  hessian_solve: str = "cg",
  maxiter: int = 200,
  tol: float = 1e-7,
  history_size: int = 10,
  stepsize: float = 0.0,
  cg_tol: float = 1e-10,
  cg_maxiter: int = 500,
):
  """Differentiable ``inner_solve(theta_init, x, y) -> (theta, InnerInfo)``.

  Args:
    energy: ``E(theta, x, y)``, a scalar; twice differentiable in theta.
    inner: 'lbfgs' (default) or 'gd' (jaxopt.GradientDescent).
    hessian_solve: 'cg' (custom_root + conjugate gradient) or 'lbfgs' (two-loop
      recursion over the final inner L-BFGS memory; needs ``inner='lbfgs'``).
    maxiter, tol: inner iteration cap and gradient-norm tolerance.
    history_size: L-BFGS memory.
    stepsize: GD step size; <= 0 uses jaxopt's backtracking line search.
    cg_tol, cg_maxiter: CG relative tolerance and iteration cap.

  Returns:
    ``inner_solve``; ``theta`` carries the implicit derivative in ``x`` (none in
    ``theta_init``, as at an exact minimiser; none in ``y``).
  """
  if inner not in INNER_SOLVERS:
    raise ConfigError(f"inner solver must be one of {INNER_SOLVERS}, got {inner!r}.")
  if hessian_solve not in HESSIAN_SOLVES:
    raise ConfigError(f"hessian_solve must be one of {HESSIAN_SOLVES}, got {hessian_solve!r}.")
  if hessian_solve == "lbfgs" and inner != "lbfgs":
    raise ConfigError(
      "hessian_solve='lbfgs' reuses the inner L-BFGS memory; it needs inner='lbfgs'."
    )
  if maxiter < 1:
    raise ConfigError(f"inner maxiter must be >= 1, got {maxiter}.")

  def info_of(state):
    return InnerInfo(
      jnp.asarray(state.error), jnp.asarray(state.iter_num).astype(jnp.asarray(state.error).dtype)
    )

  if hessian_solve == "cg":
    solve = functools.partial(linear_solve.solve_cg, tol=cg_tol, maxiter=cg_maxiter)
    solver = _make_solver(energy, inner, maxiter, tol, history_size, stepsize, True, solve)

    def inner_solve(theta_init, x, y):
      theta, state = solver.run(theta_init, x, y)
      return theta, jax.lax.stop_gradient(info_of(state))

    return inner_solve

  solver = _make_solver(energy, inner, maxiter, tol, history_size, stepsize, False, None)

  @jax.custom_vjp
  def qn_solve(theta_init, x, y):
    theta, state = solver.run(theta_init, x, y)
    return theta, info_of(state)

  def fwd(theta_init, x, y):
    theta, state = solver.run(theta_init, x, y)
    start = state.iter_num % history_size  # oldest slot of the circular buffer
    mem = (state.s_history, state.y_history, state.rho_history, state.gamma, start)
    return (theta, info_of(state)), (theta, x, y, theta_init, mem)

  def bwd(res, cts):
    theta, x, y, theta_init, (s_h, y_h, rho_h, gamma, start) = res
    v, _ = cts
    # p ~= H^{-1} v from the L-BFGS memory (Nocedal & Wright, Alg. 7.4).
    p = inv_hessian_product(v, s_h, y_h, rho_h, gamma, start)
    # dl/dx = -d/dx <grad_theta E(theta; x, y), p>
    gx = jax.grad(lambda xx: losses.tree_dot(jax.grad(energy)(theta, xx, y), p))(x)
    return (
      jax.tree_util.tree_map(jnp.zeros_like, theta_init),
      jax.tree_util.tree_map(jnp.negative, gx),
      jax.tree_util.tree_map(_zero_cotangent, y),
    )

  qn_solve.defvjp(fwd, bwd)

  def inner_solve(theta_init, x, y):
    theta, info = qn_solve(theta_init, x, y)
    return theta, jax.lax.stop_gradient(info)

  return inner_solve


def train_to_convergence(
  apply_fn,
  params,
  x,
  y,
  loss: str,
  wd: float,
  *,
  tol: float = 1e-7,
  maxiter: int = 5000,
  act=None,
  history_size: int = 20,
  return_info: bool = False,
):
  """Trains a victim to a tight minimiser of ``E = mean loss + wd/2 ||theta||^2`` (L-BFGS).

  The bilevel attack assumes ``theta* = argmin E``; a victim trained loosely is not a
  solution of the formulation, so train it with the same ``E`` and ``wd`` here.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [n, C]``.
    params: initial parameters.
    x, y: training inputs and labels (see :func:`recon_jax.core.losses.per_sample_loss`).
    loss: 'logistic', 'ce' or 'mse'.
    wd: weight decay (> 0 for 'logistic'/'ce': otherwise no minimiser exists on
      separable data).
    tol: target gradient norm.
    maxiter: L-BFGS iteration cap.
    act: activation passed to ``apply_fn``.

    return_info: return ``{'grad_norm', 'iters'}`` instead of the bare gradient norm.

  Returns:
    ``(params, grad_norm)``; ``grad_norm`` (a float) is ``||grad E(theta)||`` at the
    returned parameters, recomputed.
  """
  if wd < 0:
    raise ConfigError(f"wd must be >= 0, got {wd}.")
  energy = losses.energy(apply_fn, loss, wd, act)

  solver = jaxopt.LBFGS(fun=energy, maxiter=maxiter, tol=tol, history_size=history_size, jit=True)
  run = jax.jit(solver.run)
  params, state = run(params, jnp.asarray(x), jnp.asarray(y))
  g = jax.grad(energy)(params, jnp.asarray(x), jnp.asarray(y))
  gnorm = float(jnp.sqrt(losses.tree_sq_norm(g)))
  if return_info:
    return params, {"grad_norm": gnorm, "iters": int(state.iter_num)}
  return params, gnorm
