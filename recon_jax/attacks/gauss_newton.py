"""A second-order search for the tied KKT equations: Levenberg-Marquardt in the data subspace.

On a victim at a stationary point of a weight-decay-regularised logistic loss
the training set solves

.. math::
  \\theta^* = c \\sum_i \\sigma(-y_i \\Phi(x_i)) \\, y_i \\nabla_\\theta \\Phi(x_i)

exactly (the residual :func:`recon_jax.attacks.kkt.tied_residual`), and its first layer lies in
the span of the training inputs (:func:`recon_jax.attacks.kkt.first_layer_basis`).
With the candidates written in that span, ``x_i = B z_i``, the unknowns are the
``m x k`` coordinates ``z`` (about n x n), and the equations a nonlinear
least-squares problem with as many residuals as parameters.  One step of this
attack is one Levenberg-Marquardt iteration of jaxopt (the normal equations
solved matrix-free by conjugate gradients on ``J^T J + mu I``), so it runs in
the same batched loop as every other attack and stops, resumes and diverges the
same way.  The pixel box enters as extra residuals, ``sqrt(w_prior / pixels)``
times the distance outside it (:func:`recon_jax.priors.box_prior`'s value).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import jaxopt
from jaxopt import linear_solve
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.losses import tree_sq_norm
from recon_jax.types import Attack, HParams, Target
from recon_jax.victims.models import surrogate_relu


class LMState(NamedTuple):
  x: jax.Array  # [m, *input_shape] the candidates, z in pixel space
  lam: jax.Array  # [m] the tied multipliers at x
  z: jax.Array  # [m * k] coordinates of the candidates in the basis
  solver: Any  # jaxopt's LevenbergMarquardtState


DERIVATIVES = ("surrogate", "exact")


def lm_attack(
  apply_fn,
  basis,
  input_shape,
  *,
  residual_fn,
  derivative: str = "exact",
  w_prior: float = 1.0,
  normalize: str = "mean",
  cg_maxiter: int = 20,
  damping: float = 1e-6,
) -> Attack:
  """Levenberg-Marquardt on the tied KKT residual, candidates in the span of ``basis``.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, 1]``, a binary (logistic) victim.
    basis: [d, k] orthonormal columns (e.g. :func:`recon_jax.attacks.kkt.first_layer_basis`);
      the candidates are ``z @ basis.T``.
    input_shape: the shape of one candidate (d entries).
    residual_fn: ``residual_fn(apply_fn, target, x, act, normalize) -> (residual pytree,
      lam [m])``, the equations to solve (:func:`recon_jax.attacks.kkt.tied_residual`).
    derivative: 'exact' (the network's own activation) or 'surrogate'
      (ReLU with derivative sigmoid(alpha x), alpha from the restart's hyperparameters).
    w_prior: weight of the pixel-box residuals.
    normalize: as :func:`recon_jax.attacks.kkt.kkt_attack`.
    cg_maxiter: conjugate-gradient iterations per step.
    damping: jaxopt's initial damping parameter (times the largest diagonal of J^T J).

  Per-restart hyperparameters: ``alpha`` (surrogate only); the x-initialisation
  may read ``sigma_x``.  The learning rates are not used: the step is the
  damped Gauss-Newton step.

  Returns:
    An :class:`Attack` with the metrics of :func:`recon_jax.attacks.kkt.kkt_attack`
    (``loss``, ``stat``, ``stat_rel``, ``prior``).
  """
  if basis is None:
    raise ConfigError(
      "the Levenberg-Marquardt search runs in the data subspace: it needs a basis (subspace)."
    )
  if derivative not in DERIVATIVES:
    raise ConfigError(f"derivative must be one of {DERIVATIVES}, got {derivative!r}.")
  if not (isinstance(cg_maxiter, int) and cg_maxiter >= 1):
    raise ConfigError(f"cg_maxiter must be an integer >= 1, got {cg_maxiter!r}.")
  b = jnp.asarray(basis)
  k = b.shape[1]
  shape = tuple(input_shape)
  if b.ndim != 2 or b.shape[0] != int(np.prod(shape)):
    raise ConfigError(f"basis must be [d, k] with d = {int(np.prod(shape))}, got {b.shape}.")

  def to_x(z):
    flat = z.reshape(-1, k) @ b.T.astype(z.dtype)
    return flat.reshape((flat.shape[0], *shape))

  def act(hp):
    if derivative == "exact":
      return None
    return functools.partial(surrogate_relu, alpha=hp["alpha"])

  def residual(z, hp: HParams, target: Target):
    x = to_x(z)
    r, lam = residual_fn(apply_fn, target, x, act(hp), normalize)
    flat = jax.flatten_util.ravel_pytree(r)[0]
    over = jax.nn.relu(x - target.box_hi) + jax.nn.relu(target.box_lo - x)
    box = jnp.sqrt(w_prior / over[0].size) * over.reshape(-1)
    return jnp.concatenate([flat, box.astype(flat.dtype)]), lam

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
    del key
    z0 = (x0.reshape(x0.shape[0], -1) @ b.astype(x0.dtype)).reshape(-1)
    st = solver.init_state(z0, hp, target)
    st = st._replace(increase_factor=jnp.asarray(2.0, z0.dtype), iter_num=jnp.asarray(0))
    return LMState(to_x(z0), st.aux, z0, st)

  def step(state: LMState, hp, target):
    z, st = solver.update(state.z, state.solver, hp, target)
    st = _typed(st, state.solver)
    n_stat = sum(a.size for a in jax.tree_util.tree_leaves(target.fit))  # static
    stat = jnp.sum(jnp.square(st.residual[:n_stat]))
    prior = jnp.sum(jnp.square(st.residual[n_stat:]))
    metrics = {
      "loss": stat + prior,
      "stat": stat,
      "stat_rel": stat / tree_sq_norm(target.fit),
      "prior": prior,
      "damping": st.damping_factor,
    }
    return LMState(to_x(z), st.aux, z, st), metrics

  def candidates(state: LMState):
    return state.x, state.lam

  return Attack(init, step, candidates, name="kkt_lm[binary, tied]")
