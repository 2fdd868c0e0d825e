"""Sample splitting: a second-order escape for the KKT attack (after Shen, Wang, Qian, Lei 2026).

The KKT residual is ``r = ref - grad_theta W`` with ``W = (1/m) sum_i lam_i g(x_i)``
(``g`` the margin).  Replace one candidate ``x_i`` by two copies ``x_i +- eps v`` with
half its multiplier each.  Their first-order effects on ``r`` cancel, so the sum
moves only at second order,

.. math::
  \\Delta \\nabla_\\theta W = \\frac{\\lambda_i \\epsilon^2}{2m} \\,
  \\nabla_\\theta \\, v^\\top \\nabla_x^2 g(x_i) \\, v + O(\\epsilon^4),
  \\qquad
  \\Delta \\|r\\|^2 \\approx -\\frac{\\lambda_i \\epsilon^2}{m} \\, v^\\top S_i v,

with the *splitting matrix* ``S_i = grad_x^2 <r, grad_theta g(x_i)>`` (the Hessian in x
of the margin's derivative along the residual).  Moving ``x_i`` alone changes
``||r||^2`` at second order by the same term plus a Gauss-Newton term that is never
negative; splitting drops that term.  So where plain descent has stalled (the
gradient in x vanishes and the Hessian is positive), a split along the top
eigenvector of ``lam_i S_i`` still lowers the objective whenever that eigenvalue is
positive.

The attack keeps ``m`` candidates: a split reuses the slot of the candidate with the
smallest multiplier (one the KKT sum hardly uses), and only when that multiplier is
below a quarter of the split candidate's, so a split never removes a candidate the
sum relies on.  :func:`split_scores` finds each candidate's top eigenpair by a Krylov
(Lanczos) subspace of Hessian-vector products (no d x d matrix); :func:`split` moves the
candidates; :func:`split_step` keeps the move where the objective fell.
:func:`recon_jax.attacks.kkt.kkt_attack` applies it every :attr:`Splitting.every` steps.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from recon_jax.attacks import equations
from recon_jax.core.losses import margins, tree_dot
from recon_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Splitting:
  """When and how far :func:`recon_jax.attacks.kkt.kkt_attack` splits a candidate in two
  (binary or multiclass victims, free multipliers)."""

  every: int
  """Split every this many steps (>= 1): the candidate whose split lowers the objective most,
  in the slot of the smallest multiplier of its label.  The split is a ``lax.cond`` on the
  step count: free on the steps between splits under ``lax.map`` (the CPU default), but
  evaluated on every step when restarts are vmapped (a batched predicate runs both
  branches)."""
  eps: float = 0.05
  """The distance of the two copies from the split candidate (input units, > 0)."""

  def __post_init__(self):
    if not (isinstance(self.every, int) and self.every >= 1):
      raise ConfigError(
        f"Splitting.every must be an integer >= 1 (no splitting: splitting=None), got "
        f"{self.every!r}.",
        "every",
      )
    if not self.eps > 0:
      raise ConfigError(f"Splitting.eps must be > 0, got {self.eps!r}.", "eps")


# A split takes the slot of the smallest multiplier only when it is below this fraction of
# the split candidate's multiplier.
FREE_SLOT_FRACTION = 0.25


def _directional_margin(apply_fn, problem, params, residual, x, label, act):
  """``<residual, grad_theta g(theta; x)>`` for one candidate ``x``: a scalar."""

  def g(p):
    return margins(problem, apply_fn(p, x[None], act), label[None])[0]

  return tree_dot(jax.grad(g)(params), residual)  # reverse mode: the surrogate has a VJP only


def split_scores(
  apply_fn, problem, params, residual, x, lam, labels, act, *, iters=16, project=None
):
  """Each candidate's top eigenpair of ``lam_i S_i`` (the splitting matrix, module doc).

  Rayleigh-Ritz on a Krylov subspace of ``iters`` Hessian-vector products per
  candidate (Lanczos with full re-orthogonalisation): the extreme eigenvalues
  converge first, and the pair is exact once ``iters`` reaches the dimension.

  Args:
    residual: the KKT residual ``r`` (a pytree like ``params``), held fixed.
    x: [m, *input_shape] candidates; lam: [m] multipliers; labels: [m].
    iters: Krylov dimension (Hessian-vector products per candidate).
    project: optional function projecting candidates ([m, ...]) onto the subspace the
      attack keeps them in; the directions then stay in it.

  Returns:
    ``(mu [m], v [m, *input_shape])``: the top eigenvalue of ``lam_i S_i`` (a split
    along ``v_i`` lowers ``||r||^2`` by about ``eps^2 mu_i / m`` when ``mu_i > 0``) and
    its unit eigenvector.
  """
  proj = project if project is not None else (lambda z: z)
  m, shape = x.shape[0], x.shape[1:]
  d = math.prod(shape)
  k = max(1, min(int(iters), d))

  def hvp(xi, yi, li, vi):
    grad = jax.grad(_directional_margin, argnums=4)

    def along(z):  # <grad_x f(z), v>: its gradient is the Hessian-vector product
      return jnp.vdot(grad(apply_fn, problem, params, residual, z, yi, act), vi)

    return li * jax.grad(along)(xi)

  def matvec(q):  # [m, d] -> [m, d]
    out = jax.vmap(hvp)(x, labels, lam, q.reshape(x.shape))
    return proj(out).reshape(m, d)

  def unit(q):
    n = jnp.linalg.norm(q, axis=1, keepdims=True)
    return q / jnp.maximum(n, jnp.finfo(q.dtype).tiny)

  q0 = unit(proj(jax.random.normal(jax.random.PRNGKey(0), x.shape, x.dtype)).reshape(m, d))
  basis = jnp.zeros((k, m, d), x.dtype).at[0].set(q0)
  images = jnp.zeros((k, m, d), x.dtype)

  def body(j, carry):
    basis, images = carry
    w = matvec(basis[j])
    images = images.at[j].set(w)
    # Orthogonalise against every vector so far (twice: full re-orthogonalisation).
    for _ in range(2):
      live = (jnp.arange(k) <= j)[:, None, None]
      coef = jnp.sum(jnp.where(live, basis, 0) * w[None], axis=2, keepdims=True)
      w = w - jnp.sum(jnp.where(live, basis, 0) * coef, axis=0)
    nxt = jnp.where(j + 1 < k, j + 1, j)
    fresh = jnp.where(j + 1 < k, unit(w), basis[nxt])
    return basis.at[nxt].set(fresh), images

  basis, images = jax.lax.fori_loop(0, k, body, (basis, images))
  # The projected matrix T = Q S Q^T per candidate, symmetrised; its top Ritz pair.
  t = jnp.einsum("imd,jmd->mij", basis, images)
  t = (t + jnp.swapaxes(t, 1, 2)) / 2
  evals, evecs = jnp.linalg.eigh(t)
  mu = evals[:, -1]
  v = unit(jnp.einsum("imd,mi->md", basis, evecs[:, :, -1]))
  return mu, v.reshape(x.shape)


def split(x, lam, labels, mu, v, eps):
  """One split: the candidate with the largest positive ``mu`` into two at ``+- eps v``.

  The copy at ``- eps v`` takes the slot whose multiplier is smallest in magnitude among
  the slots with the same label (a slot's label is fixed), each copy gets half the
  multiplier.  Nothing changes when no ``mu`` is positive or no slot is free (that
  multiplier is not below FREE_SLOT_FRACTION of the split one's).

  Returns:
    ``(x, lam, moved [m] bool)``: the candidates, the multipliers and which slots moved.
  """
  m = x.shape[0]
  if m < 2:
    raise ConfigError(f"splitting needs at least 2 candidates, got m={m}.")
  gain = jnp.where(lam > 0, mu, -jnp.inf)
  i = jnp.argmax(gain)
  others = jnp.where((jnp.arange(m) == i) | (labels != labels[i]), jnp.inf, jnp.abs(lam))
  j = jnp.argmin(others)
  ok = (gain[i] > 0) & (others[j] < FREE_SLOT_FRACTION * lam[i])
  half = lam[i] / 2
  new_x = x.at[i].set(x[i] + eps * v[i]).at[j].set(x[i] - eps * v[i])
  new_lam = lam.at[i].set(half).at[j].set(half)
  moved = (jnp.arange(m) == i) | (jnp.arange(m) == j)
  return (
    jnp.where(ok, new_x, x),
    jnp.where(ok, new_lam, lam),
    moved & ok,
  )


def reset_rows(opt_state, moved, shapes):
  """``opt_state`` with the rows of ``moved`` slots zeroed in every leaf shaped like one of
  ``shapes`` (the optimiser's moments of the candidates and multipliers; counts untouched)."""

  def reset(leaf):
    if hasattr(leaf, "shape") and tuple(leaf.shape) in shapes:
      mask = moved.reshape((-1,) + (1,) * (leaf.ndim - 1))
      return jnp.where(mask, jnp.zeros_like(leaf), leaf)
    return leaf

  return jax.tree_util.tree_map(reset, opt_state)


def split_step(state, eps, objective, apply_fn, problem, target, act, normalize):
  """The split of ``state`` (a KKT attack's state: ``x``, ``lam``, ``opt_state``) at its
  candidates, kept only where ``objective((x, lam))`` fell.

  Returns:
    ``(state, whether a candidate was split)``; the moved slots' optimiser rows are zeroed.
  """
  grads = equations.kkt_sum(
    apply_fn, problem, target.params, state.x, state.lam, target.labels, act, normalize
  )
  residual = jax.tree_util.tree_map(jnp.subtract, target.fit, grads)
  mu, v = split_scores(
    apply_fn, problem, target.params, residual, state.x, state.lam, target.labels, act
  )
  x, lam, moved = split(state.x, state.lam, target.labels, mu, v, eps)
  # The freed slot's own term leaves the sum at first order: keep the split only where
  # the whole objective fell.
  better = objective((x, lam)) < objective((state.x, state.lam))
  moved = moved & better
  x, lam = jnp.where(better, x, state.x), jnp.where(better, lam, state.lam)
  opt_state = reset_rows(state.opt_state, moved, {x.shape, lam.shape})
  return state._replace(x=x, lam=lam, opt_state=opt_state), jnp.any(moved)
