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

The two-loop recursion is this module's own (:func:`two_loop`), over the memory that
jaxopt's public ``LBFGS`` state holds.  jaxopt is unmaintained; two modules import it,
this one and :mod:`recon_jax.attacks.gauss_newton` (Levenberg-Marquardt), so a swap to
optimistix or a hand-written solver touches those two.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import jaxopt
from jaxopt import linear_solve
import numpy as np

from recon_jax.core import arguments, losses
from recon_jax.errors import ConfigError

INNER_SOLVERS = ("lbfgs", "gd")
HESSIAN_SOLVES = ("cg", "lbfgs")


@dataclasses.dataclass(frozen=True, kw_only=True)
class InnerSolve:
  """How ``theta(x) = argmin E`` is solved and differentiated (:func:`make_inner_solve`)."""

  solver: str = "lbfgs"
  """'lbfgs' (jaxopt.LBFGS) or 'gd' (jaxopt.GradientDescent)."""
  maxiter: int = 100
  """Iterations of each inner solve, at most (>= 1)."""
  tol: float = 1e-7
  """The inner solve stops once ``||grad_theta E||`` is below this."""
  history_size: int = 10
  """L-BFGS memory: the pairs the quasi-Newton step (and ``hessian_solve='lbfgs'``) uses."""
  stepsize: float = 0.0
  """Gradient descent's step size; <= 0: jaxopt's backtracking line search."""
  hessian_solve: str = "cg"
  """'cg' (implicit differentiation, conjugate gradients on the Hessian: exact up to the
  tolerances) or 'lbfgs' (the two-loop recursion over the final inner L-BFGS memory, the
  paper's quasi-Newton option: no Hessian-vector products, an approximation; needs
  ``solver='lbfgs'``)."""
  cg_tol: float = 1e-10
  """Conjugate gradients' relative tolerance."""
  cg_maxiter: int = 500
  """Conjugate gradients' iterations, at most."""

  def __post_init__(self):
    if self.solver not in INNER_SOLVERS:
      raise ConfigError(
        f"inner solver must be one of {INNER_SOLVERS}, got {self.solver!r}.", "solver"
      )
    if self.hessian_solve not in HESSIAN_SOLVES:
      raise ConfigError(
        f"hessian_solve must be one of {HESSIAN_SOLVES}, got {self.hessian_solve!r}."
      )
    if self.hessian_solve == "lbfgs" and self.solver != "lbfgs":
      raise ConfigError(
        "hessian_solve='lbfgs' reuses the inner L-BFGS memory; it needs solver='lbfgs'.",
        "hessian_solve",
      )
    if self.maxiter < 1:
      raise ConfigError(f"inner maxiter must be >= 1, got {self.maxiter}.", "maxiter")


def two_loop(v, s_history, y_history, rho_history, gamma, start):
  """``H v`` for the L-BFGS approximation ``H`` of an inverse Hessian (Nocedal & Wright,
  Algorithm 7.4).

  ``H`` starts at ``gamma I`` and takes one BFGS update per stored pair, oldest first:
  ``H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T`` with ``rho = 1 / <s, y>``.

  Args:
    v: a pytree.
    s_history, y_history: pytrees like ``v`` whose leaves have a leading memory axis
      (``[h, ...]``): the steps ``s`` and the gradient changes ``y`` of the pairs.
    rho_history: [h], ``1 / <s, y>`` per pair; 0 for a slot not yet written (it then
      changes nothing).
    gamma: the scale of the initial ``H``.
    start: the slot of the oldest pair (the memory is a circular buffer).
  """
  h = rho_history.shape[0]
  leaves = jax.tree_util.tree_leaves

  def pair(j):  # the j-th oldest pair (s, y)
    i = (start + j) % h
    take = lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False)  # noqa: E731
    return (
      jax.tree_util.tree_map(take, s_history),
      jax.tree_util.tree_map(take, y_history),
      rho_history[i],
    )

  def dot(a, b):
    return sum(jnp.vdot(p, q).real for p, q in zip(leaves(a), leaves(b)))

  def plus(c, a, b):  # b + c a
    return jax.tree_util.tree_map(lambda p, q: q + c * p, a, b)

  q, alphas = v, [None] * h
  for j in reversed(range(h)):  # newest to oldest
    s, y, rho = pair(j)
    alphas[j] = rho * dot(s, q)
    q = plus(-alphas[j], y, q)
  r = jax.tree_util.tree_map(lambda a: gamma * a, q)
  for j in range(h):  # oldest to newest
    s, y, rho = pair(j)
    r = plus(alphas[j] - rho * dot(y, r), s, r)
  return r


class InnerInfo(NamedTuple):
  grad_norm: jax.Array  # ||grad_theta E|| at the returned theta
  iters: jax.Array  # inner iterations run (float, so it vmaps/differentiates freely)


def _zero_cotangent(a):
  a = jnp.asarray(a)
  if jnp.issubdtype(a.dtype, jnp.inexact):
    return jnp.zeros_like(a)
  return np.zeros(a.shape, dtype=jax.dtypes.float0)


def _make_solver(energy, o: InnerSolve, implicit_diff, solve):
  if o.solver == "lbfgs":
    return jaxopt.LBFGS(
      fun=energy,
      maxiter=o.maxiter,
      tol=o.tol,
      history_size=o.history_size,
      implicit_diff=implicit_diff,
      implicit_diff_solve=solve,
      jit=True,
    )
  if o.solver == "gd":
    return jaxopt.GradientDescent(
      fun=energy,
      maxiter=o.maxiter,
      tol=o.tol,
      stepsize=o.stepsize,
      acceleration=False,
      implicit_diff=implicit_diff,
      implicit_diff_solve=solve,
      jit=True,
    )
  raise ConfigError(f"inner solver must be one of {INNER_SOLVERS}, got {o.solver!r}.")


def make_inner_solve(energy: Callable, inner: Optional[InnerSolve] = None):
  """Differentiable ``inner_solve(theta_init, x, y) -> (theta, InnerInfo)``.

  Args:
    energy: ``E(theta, x, y)``, a scalar; twice differentiable in theta.
    inner: the solver, its tolerances and the Hessian solve (:class:`InnerSolve`; None:
      its defaults).

  Returns:
    ``inner_solve``; ``theta`` carries the implicit derivative in ``x`` (none in
    ``theta_init``, as at an exact minimiser; none in ``y``).
  """
  o = arguments.group("inner", inner, InnerSolve)

  def info_of(state):
    return InnerInfo(
      jnp.asarray(state.error), jnp.asarray(state.iter_num).astype(jnp.asarray(state.error).dtype)
    )

  if o.hessian_solve == "cg":
    solve = functools.partial(linear_solve.solve_cg, tol=o.cg_tol, maxiter=o.cg_maxiter)
    solver = _make_solver(energy, o, True, solve)

    def inner_solve(theta_init, x, y):
      theta, state = solver.run(theta_init, x, y)
      return theta, jax.lax.stop_gradient(info_of(state))

    return inner_solve

  solver = _make_solver(energy, o, False, None)
  history_size = o.history_size

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
    p = two_loop(v, s_h, y_h, rho_h, gamma, start)
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
