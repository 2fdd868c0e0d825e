"""A second-order search for the KKT equations: Levenberg-Marquardt in the first layer's span.

With the candidates written in the span of the first layer's weights (or of what
training added to them), ``x_i = B c_i`` (:mod:`recon_jax.attacks.span`), the
unknowns are the ``m x k`` coefficients (k about n), and the KKT equations a
nonlinear least-squares problem with far more residuals than unknowns.  One step of
this attack is one Levenberg-Marquardt iteration of jaxopt (the normal equations
solved matrix-free by conjugate gradients on ``J^T J + mu I``), so it runs in the
same batched loop as every other attack and stops, resumes and diverges the same way.

The multipliers are either

* ``'tied'``: ``lambda_i = c sigma(-y_i Phi(x_i))`` with the scale eliminated
  (:func:`recon_jax.attacks.equations.tied_residual`): what a stationary point of a
  weight-decay-regularised logistic loss gives; the unknowns are the coefficients only;
* ``'free'``: m more unknowns, kept at or above the restart's ``lam_min`` by the
  residuals ``sqrt(w_lam) max(lam_min - lambda, 0)`` (the hinge of the first-order
  attack, as residuals).

The pixel box enters as residuals too, ``sqrt(w_prior / pixels)`` times the distance
outside it (:func:`recon_jax.priors.box_prior`'s value).  Jacobian products are taken
in forward mode, so a ReLU victim's surrogate is its forward-mode twin
(:func:`recon_jax.core.activations.surrogate_relu_jvp`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import jaxopt
from jaxopt import linear_solve

from recon_jax.attacks import equations, span
from recon_jax.core.activations import DERIVATIVES, surrogate_relu_jvp
from recon_jax.core.losses import tree_sq_norm
from recon_jax.errors import ConfigError
from recon_jax.types import Attack, HParams, Target


class LMState(NamedTuple):
  x: jax.Array  # [m, k] the candidates' coefficients in the span
  lam: jax.Array  # [m] the multipliers at x
  z: jax.Array  # [m * k (+ m)] the unknowns: coefficients (and free multipliers)
  solver: Any  # jaxopt's LevenbergMarquardtState


def _refuse(basis, derivative: str, multipliers: str, cg_maxiter) -> None:
  """ConfigError naming the first argument :func:`lm_attack` cannot run with."""
  if basis is None:
    raise ConfigError(
      "the Levenberg-Marquardt search runs in the first layer's span: it needs a basis (subspace).",
      "subspace",
    )
  if derivative not in DERIVATIVES:
    raise ConfigError(f"derivative must be one of {DERIVATIVES}, got {derivative!r}.")
  if multipliers not in equations.MULTIPLIERS:
    raise ConfigError(f"multipliers must be one of {equations.MULTIPLIERS}, got {multipliers!r}.")
  if not (isinstance(cg_maxiter, int) and not isinstance(cg_maxiter, bool) and cg_maxiter >= 1):
    raise ConfigError(f"cg_maxiter must be an integer >= 1, got {cg_maxiter!r}.")


def lm_attack(
  apply_fn,
  basis,
  input_shape,
  *,
  residual_fn,
  multipliers: str = "tied",
  derivative: str = "exact",
  w_prior: float = 1.0,
  w_lam: float = 1.0,
  normalize: str = "mean",
  cg_maxiter: int = 20,
  damping: float = 1e-6,
) -> Attack:
  """Levenberg-Marquardt on the KKT residual, candidates in the span of ``basis``.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, 1]``, a binary victim with a dense first layer.
    basis: [d, k] orthonormal columns (:func:`recon_jax.attacks.span.span_basis`).
    input_shape: the shape of one candidate (d entries).
    residual_fn: ``residual_fn(apply_fn, target, x, lam, act, normalize) -> (residual
      pytree, lam [m])``: :func:`recon_jax.attacks.equations.tied_residual` (ignores ``lam``)
      or :func:`recon_jax.attacks.equations.free_residual`.
    multipliers: 'tied' (the unknowns are the coefficients) or 'free' (and one
      multiplier per candidate, with the ``lam_min`` hinge as residuals).
    derivative: 'exact' (the network's own activation) or 'surrogate'
      (ReLU with derivative sigmoid(alpha x), alpha from the restart's hyperparameters).
    w_prior: weight of the pixel-box residuals.
    w_lam: weight of the ``lam_min`` hinge residuals (free multipliers).
    normalize: as :class:`recon_jax.attacks.kkt_parts.Objective`.
    cg_maxiter: conjugate-gradient iterations per step.
    damping: jaxopt's initial damping parameter (times the largest diagonal of J^T J).

  Per-restart hyperparameters: ``alpha`` (surrogate only), ``lam_min`` (free
  multipliers); the x-initialisation may read ``sigma_x``.  The learning rates are not
  used: the step is the damped Gauss-Newton step.

  Returns:
    An :class:`Attack` with the metrics of :func:`recon_jax.attacks.kkt.kkt_attack`
    (``loss``, ``stat``, ``stat_rel``, ``prior``).
  """
  _refuse(basis, derivative, multipliers, cg_maxiter)
  shape = tuple(input_shape)
  b = span.check_basis(basis, shape)
  k = b.shape[1]
  free = multipliers == "free"

  def act(hp):
    if derivative == "exact":
      return None
    return functools.partial(surrogate_relu_jvp, alpha=hp["alpha"])

  def split(z, m):
    return (z[: m * k].reshape(m, k), z[m * k :]) if free else (z.reshape(m, k), None)

  def residual(z, hp: HParams, target: Target):
    m = target.labels.shape[0]
    c, lam = split(z, m)
    r, lam = residual_fn(apply_fn, target, c, lam, act(hp), normalize)
    flat = jax.flatten_util.ravel_pytree(r)[0]
    x = span.decode(c, target.span.basis, shape)
    over = jax.nn.relu(x - target.box_hi) + jax.nn.relu(target.box_lo - x)
    parts = [flat, (jnp.sqrt(w_prior / over[0].size) * over.reshape(-1)).astype(flat.dtype)]
    if free:
      parts.append((jnp.sqrt(w_lam) * jax.nn.relu(hp["lam_min"] - lam)).astype(flat.dtype))
    return jnp.concatenate(parts), lam

  solver = jaxopt.LevenbergMarquardt(
    residual_fun=residual,
    has_aux=True,
    maxiter=1,
    damping_parameter=damping,
    solver=functools.partial(linear_solve.solve_cg, maxiter=cg_maxiter),
    jit=False,
  )

  def _typed(new, old):
    return jax.tree_util.tree_map(lambda a, o: jnp.asarray(a, jnp.asarray(o).dtype), new, old)

  def init(key, hp, target, x0):
    c0 = span.encode(x0, target.span.encoder())
    z0 = c0.reshape(-1)
    if free:
      z0 = jnp.concatenate([z0, jax.random.uniform(key, (x0.shape[0],), x0.dtype)])
    st = solver.init_state(z0, hp, target)
    st = st._replace(increase_factor=jnp.asarray(2.0, z0.dtype), iter_num=jnp.asarray(0))
    return LMState(c0, st.aux, z0, st)

  def step(state: LMState, hp, target):
    z, st = solver.update(state.z, state.solver, hp, target)
    st = _typed(st, state.solver)
    n_stat = sum(a.size for a in jax.tree_util.tree_leaves(target.fit))  # static
    stat = jnp.sum(jnp.square(st.residual[:n_stat]))
    prior = jnp.sum(jnp.square(st.residual[n_stat:]))
    out = target.span.outside
    metrics = {
      "loss": stat + prior,
      "stat": stat,
      "stat_rel": (stat + out) / (tree_sq_norm(target.fit) + out),
      "prior": prior,
      "damping": st.damping_factor,
    }
    return LMState(split(z, state.x.shape[0])[0], st.aux, z, st), metrics

  def candidates(state: LMState):
    return span.decode(state.x, b, shape), state.lam

  return Attack(
    init,
    step,
    candidates,
    name=f"kkt_lm[binary, {multipliers}, span {k}]",
    prepare=functools.partial(span.reduce_target, basis=b),
  )
