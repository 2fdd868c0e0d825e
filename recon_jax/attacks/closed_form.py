"""KKT reconstruction with the multipliers eliminated in closed form (Iurada et al. 2026).

The KKT attack (:mod:`recon_jax.attacks.kkt`) searches candidates ``x`` and
multipliers ``lambda`` jointly.  For fixed candidates the best multipliers are
a (non-negative) least-squares problem, so they can be solved for at every
step and only ``x`` is optimised.  With

.. math::
  G(x) = [\\nabla_\\theta g_1(\\theta^*; x_1), \\dots, \\nabla_\\theta g_m(\\theta^*; x_m)]
  \\in R^{P \\times m},

.. math::
  \\lambda^*(x) = \\arg\\min_{\\lambda \\ge 0} \\|\\theta^* - G \\lambda\\|^2
  = \\arg\\min_{\\lambda \\ge 0} \\tfrac12 \\lambda^T K \\lambda - b^T \\lambda,
  \\qquad K = G^T G, \\; b = G^T \\theta^*,

and the objective is the scale-free projection residual

.. math::
  L(x) = \\|\\theta^* - G \\lambda^*\\|^2 / \\|\\theta^*\\|^2
  \\; (= 1 - \\theta^{*T} P_G \\theta^* / \\|\\theta^*\\|^2 \\text{ without the sign constraint}),

plus ``w_prior`` times the box prior.  The margins ``g_i`` are those of
:func:`recon_jax.core.losses.margins`: ``binary`` and ``multiclass`` take
``lambda >= 0`` (dual feasibility of the KKT conditions, solved as an NNLS);
``general`` takes free real ``lambda`` of shape ``[m, C]``, one column per
output (``G`` is then ``P x (m C)``, its columns ``grad Phi_c(x_i)``, solved
by a linear solve).  The multipliers are those of the paper's eq. (6)
(``normalize='sum'`` of the KKT attack, no ``1/m``).

Envelope theorem: ``L(x) = min_lambda F(x, lambda)``, so
``dL/dx = dF/dx (x, lambda*(x))``; on the active set
``(K lambda* - b)_A = 0`` and off it ``lambda*`` is locally constant at 0.
The multipliers are therefore computed under ``stop_gradient`` and the
x-gradient is that of the ordinary stationarity residual
:func:`recon_jax.attacks.equations.stationarity` at ``lambda = lambda*``, with the
network's ReLU replaced by ``surrogate_relu`` (forward ReLU, derivatives
``sigmoid(alpha z)``) as in the KKT attack.  (The ridge below makes the
envelope identity hold up to ``O(ridge)``.)

What ``b`` is: for a network positively homogeneous of degree ``k`` in
``theta`` (a bias-free ReLU MLP with ``k`` layers), Euler's theorem gives
``b_i = <theta*, grad g_i> = k g_i(x_i)`` with the true ReLU derivative.  With
the surrogate derivative ``sigmoid(alpha z)`` in place of the step this holds
only approximately, so ``b = J theta*`` is computed from the materialised
gradients, consistently with ``K``.

Multipliers (:func:`solve_multipliers`): with ``A = K + eps I``,
``eps = ridge * tr(K) / n`` (``n = m``, or ``m C``), ``general`` solves
``A lambda = b``; the sign-constrained case runs ``nnls_iters`` iterations of
accelerated projected gradient (FISTA with O'Donoghue-Candes gradient restart)
on ``0.5 lambda^T A lambda - b^T lambda`` with step ``1 / L_A``,
``L_A = min(||A||_F, ||A||_inf) >= ||A||_2`` (cheap and safe), warm-started
from the previous step's ``lambda*`` (kept in the state), then *polishes*: it
solves the equality-constrained problem on the support found
(``A_SS lambda_S = b_S``) and keeps that when it is non-negative and no worse.
Once the support is right the polished multipliers are exact.

Rescaling (``rescale``, off by default): the reference code of Iurada et al.
(``2layer_experiments.py``: theta = the change of the last layer, G its
Jacobian, an unconstrained solve) sets every candidate back to norm
``sqrt(d)`` (the norm of standardised data) after each optimiser step.  A
bias-free ReLU network is positively homogeneous of degree 1 in ``x``, so
``grad_theta g(c x) = c grad_theta g(x)`` for ``c > 0``: the span of ``G`` and
hence ``L(x)`` do not depend on a candidate's norm.  The norm is not
identifiable, the x-gradient is orthogonal to ``x`` (``<grad_x L, x> = 0``),
and every gradient step grows the norm (``|x - eta g|^2 = |x|^2 + eta^2 |g|^2``),
shrinking the effective step.  Projecting back onto a
sphere keeps the step size meaningful.  ``rescale=True`` keeps each candidate
at its initial norm, a number ``r > 0`` at norm ``r``.  With biases, the
surrogate derivative or a box prior the invariance is only approximate, and
the prior may disagree with the sphere, hence off by default.

Cost per step and restart (``P`` parameters, ``m`` candidates, ``C`` outputs
for ``general``, float32 unless x64):

* ``J`` (``m x P``, the per-candidate gradients by ``vmap(grad)``, flattened
  by ``ravel_pytree``): ``m P`` floats of memory and about one backward pass
  per candidate (``~ 4 m P`` flops, like one batched gradient);
* ``K = J J^T``: ``m^2 P`` multiply-adds (``2 m^2 P`` flops), ``b = J theta*``:
  ``m P``; the NNLS: ``iters m^2`` plus an ``m^3 / 3`` polish, negligible;
* the x-gradient of the stationarity residual (a gradient of a gradient):
  ``~ 10-20 m P`` flops, the cost of one KKT-attack step.

So the Gram matrix costs ``~ m / 5`` KKT steps of arithmetic, and ``J`` is the
memory bill (with ``vmap`` over restarts, ``R`` times it; ``lax.map``, the CPU
default, holds one restart's ``J`` at a time).  ``K`` and ``b`` are computed at
``Precision.HIGHEST`` (TF32 would cap the attainable residual near 1e-3).

======================================  ==========  =====  ==========  ==========
setting                                 P           m      J (f32)     K (flops)
======================================  ==========  =====  ==========  ==========
2-D toy, 2-1000-1000-1, biases          1.005e6     100    0.40 GB     2.0e10
LFW main job, 625-256-256-1             2.26e5      40     36 MB       7.2e8
digits, 64-256-256-1                    8.24e4      100    33 MB       1.6e9
Haim CIFAR, 3072-1000-1000-1            4.07e6      1000   16.3 GB     8.1e12
======================================  ==========  =====  ==========  ==========

Measured on 2 shared CPU cores (float32, one restart, jitted step): LFW
131 ms per step against 4.1 ms for a KKT step (32x; J 81 ms, K 41 ms, NNLS
0.3 ms), digits 185 ms against 1.3 ms (~140x), the 2-D toy 2.3 s against
31 ms (75x).  On a CPU, building ``J`` is memory-bound (writing ``m P``
floats), so the step is dominated by ``J`` and ``K``, not by the NNLS; the
closed form pays only where it needs far fewer steps.  The first three
settings fit in memory easily.  Haim's CIFAR setting does not: ``J`` alone
is 16 GB per restart (and ``8e12`` flops per step is ~0.1 s on an H100).
Two ways around it, not built here:

* factored per-layer Gram for MLPs: ``grad_{W_l} g_i = delta_{l,i} a_{l-1,i}^T``
  (back-propagated signal times layer input), so
  ``<grad_{W_l} g_i, grad_{W_l} g_j> = <delta_{l,i}, delta_{l,j}> <a_{l-1,i}, a_{l-1,j}>``
  and ``K = sum_l (Delta_l Delta_l^T) * (A_{l-1} A_{l-1}^T + [bias_l])``
  (elementwise product; a bias adds the all-ones term).  Memory
  ``m * sum(widths)`` (1000 x ~6000 floats = 24 MB) and
  ``m^2 sum_l (n_l + n_{l-1})`` flops (~7e9, ~600x fewer); ``b`` is one
  batched JVP, ``b_i = d/dt g_i((1 + t) theta)``.  It needs each layer's
  input ``a`` and a zero perturbation of its output (whose gradient is
  ``delta``): for flax models, ``nn.intercept_methods`` around ``apply_fn``
  can capture both for every ``nn.Dense`` (and must check that those layers
  hold all of ``theta``, falling back to ``J`` otherwise); a generic
  ``apply_fn`` hides them.
* matrix-free columns: ``K e_j = J (J^T e_j)`` is one per-sample gradient and
  one JVP of all ``m`` margins, so ``K`` can be built column by column in
  ``O(P + m * activations)`` memory at the same ``m^2 P`` flops.

Dead candidates: a candidate whose multiplier is 0 in the NNLS solution gets
no x-gradient (its column does not enter the residual), so it stays where it
is until a move of the others makes it active again.  Since
``b_i ~ k g_i(x_i)``, candidates misclassified under their assumed labels tend
to start inactive; a restart with every ``b_i <= 0`` starts at ``lambda* = 0``,
``L = 1`` and no gradient at all (metric ``n_active = 0``).  A restart can stall
with few active candidates (seen on small trained victims); the KKT attack's
``lam_min`` penalty has no counterpart here.  A lower bound ``lambda >= lam_min``
(a shifted NNLS) would be the analogue; not built.

Reference:
  Iurada, Bombari, Tommasi, Mondelli. A Law of Data Reconstruction for Random
  Features (and Beyond). ICLR 2026, arXiv 2509.22214.
"""

from __future__ import annotations

import functools
import numbers
from typing import NamedTuple, Optional

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import optax

from recon_jax import optim, priors
from recon_jax.attacks import equations, kkt
from recon_jax.attacks.spec import AttackSpec, Setup, no_check, register
from recon_jax.core.activations import surrogate_relu
from recon_jax.core.losses import PROBLEMS, margin_jacobian, tree_sq_norm
from recon_jax.errors import ConfigError
from recon_jax.types import Attack, HParams, Target

_HIGHEST = jax.lax.Precision.HIGHEST


class ClosedFormState(NamedTuple):
  x: jax.Array  # [m, *input_shape] candidates
  lam: jax.Array  # [m] ([m, C] for 'general'): lambda* of the last step, next warm start
  opt_state: optax.OptState
  radius: jax.Array  # [m] norms the candidates are rescaled to (unused with rescale off)


# --------------------------------------------------------------------------
# The Gram system.
# --------------------------------------------------------------------------
def gram_system(apply_fn, problem: str, params, x, labels, act):
  """``(K, b) = (J J^T, J theta)``, ``J`` [m * C', P] the rows of
  :func:`recon_jax.core.losses.margin_jacobian`, at highest precision."""
  theta, _ = ravel_pytree(params)
  j = margin_jacobian(apply_fn, problem, params, x, labels, act)
  j = j.reshape(-1, j.shape[-1])
  k = jnp.matmul(j, j.T, precision=_HIGHEST)
  b = jnp.matmul(j, theta.astype(j.dtype), precision=_HIGHEST)
  return k, b


def _quad(a, b, lam):
  return 0.5 * jnp.vdot(lam, jnp.matmul(a, lam, precision=_HIGHEST)) - jnp.vdot(b, lam)


def solve_multipliers(
  k: jax.Array,
  b: jax.Array,
  nonneg: bool,
  iters: int = 200,
  ridge: float = 1e-6,
  lam0: Optional[jax.Array] = None,
  *,
  polish: bool = True,
) -> jax.Array:
  """``argmin_{lambda (>= 0)} 0.5 lambda^T (K + eps I) lambda - b^T lambda``, pure and jittable.

  ``eps = ridge * tr(K) / n``.  Unconstrained (``nonneg=False``): one linear
  solve.  Non-negative: ``iters`` FISTA steps of projected gradient with
  gradient-based restart, step ``1 / min(||A||_F, ||A||_inf)``, from ``lam0``
  (clipped at 0; zeros when None), then (``polish``) a solve on the support
  ``S = {lambda_i > 0}`` accepted when non-negative and not worse.  With
  ``ridge = 0`` this is the NNLS ``argmin_{lambda >= 0} ||theta - G lambda||^2``.

  Args:
    k: [n, n] symmetric PSD Gram matrix ``G^T G``.
    b: [n] ``G^T theta``.
    nonneg: constrain ``lambda >= 0``.
    iters: projected-gradient iterations (static).
    ridge: relative ridge ``eps / (tr(K) / n)``.
    lam0: [n] warm start.
    polish: refine on the support found.

  Returns:
    [n] multipliers.
  """
  n = b.shape[0]
  eye = jnp.eye(n, dtype=k.dtype)
  a = k + (ridge * jnp.trace(k) / n) * eye
  if not nonneg:
    return jnp.linalg.solve(a, b)
  lam = jnp.zeros_like(b) if lam0 is None else jnp.maximum(lam0.astype(b.dtype), 0)
  bound = jnp.minimum(jnp.sqrt(jnp.sum(a * a)), jnp.max(jnp.sum(jnp.abs(a), axis=1)))
  step = 1.0 / jnp.maximum(bound, jnp.finfo(a.dtype).tiny)

  def body(_, carry):
    lam, y, t = carry
    new = jnp.maximum(y - step * (jnp.matmul(a, y, precision=_HIGHEST) - b), 0)
    t_new = 0.5 * (1 + jnp.sqrt(1 + 4 * t * t))
    restart = jnp.vdot(y - new, new - lam) > 0
    y_new = jnp.where(restart, new, new + ((t - 1) / t_new) * (new - lam))
    return new, y_new, jnp.where(restart, jnp.ones_like(t), t_new)

  if iters > 0:
    lam, _, _ = jax.lax.fori_loop(0, iters, body, (lam, lam, jnp.ones((), b.dtype)))
  if polish:
    on = lam > 0
    mask = on.astype(a.dtype)
    a_s = a * mask[:, None] * mask[None, :] + jnp.diag(1 - mask)
    cand = jnp.where(on, jnp.linalg.solve(a_s, mask * b), 0)
    ok = jnp.all(jnp.isfinite(cand)) & jnp.all(cand >= 0) & (_quad(a, b, cand) <= _quad(a, b, lam))
    lam = jnp.where(ok, cand, lam)
  return lam


def projection_residual(
  apply_fn,
  problem: str,
  params,
  x,
  labels,
  act,
  *,
  iters: int = 200,
  ridge: float = 1e-6,
  lam0=None,
  num_outputs: int = 1,
):
  """``(L(x), lambda*(x))``: the closed-form objective with the multipliers re-solved.

  ``L = ||theta - G lambda*||^2 / ||theta||^2``, evaluated as the stationarity
  residual (no ``1 - cos^2`` cancellation).  ``lambda*`` is ``[m]``, or
  ``[m, num_outputs]`` for 'general'.  Differentiable in ``x`` (envelope
  theorem: ``lambda*`` is held fixed).
  """
  nonneg = problem != "general"
  k, b = gram_system(apply_fn, problem, params, jax.lax.stop_gradient(x), labels, act)
  lam = solve_multipliers(k, b, nonneg, iters, ridge, None if lam0 is None else lam0.reshape(-1))
  lam = jax.lax.stop_gradient(
    lam.reshape((x.shape[0], num_outputs) if not nonneg else (x.shape[0],))
  )
  stat = equations.stationarity(apply_fn, problem, params, x, lam, labels, act, "sum")
  return stat / tree_sq_norm(params), lam


# --------------------------------------------------------------------------
# The attack.
# --------------------------------------------------------------------------
def _check(problem, nnls_iters, ridge, rescale, num_outputs, w_prior):
  if problem not in PROBLEMS:
    raise ConfigError(f"problem must be one of {PROBLEMS}, got {problem!r}.")
  if not isinstance(nnls_iters, numbers.Integral) or nnls_iters < 0:
    raise ConfigError(f"nnls_iters must be an integer >= 0, got {nnls_iters!r}.")
  if not ridge >= 0:
    raise ConfigError(f"ridge must be >= 0, got {ridge!r}.")
  if not isinstance(rescale, (bool, numbers.Real)) or (
    not isinstance(rescale, bool) and not rescale > 0
  ):
    raise ConfigError(f"rescale must be False, True or a norm > 0, got {rescale!r}.")
  if not isinstance(num_outputs, numbers.Integral) or num_outputs < 1:
    raise ConfigError(f"num_outputs must be an integer >= 1, got {num_outputs!r}.")
  if not w_prior >= 0:
    raise ConfigError(f"w_prior must be >= 0, got {w_prior!r}.")


def _norms(x):
  return jnp.sqrt(jnp.sum(jnp.square(x.reshape(x.shape[0], -1)), axis=1))


def closed_form_attack(
  apply_fn,
  problem: str = "binary",
  *,
  optimizer: str = "sgd",
  momentum: float = 0.9,
  w_prior: float = 1.0,
  nnls_iters: int = 200,
  ridge: float = 1e-6,
  rescale=False,
  num_outputs: int = 1,
) -> Attack:
  """KKT reconstruction over candidates only, the multipliers solved at every step.

  Each step builds ``K = J J^T``, ``b = J theta*`` at the current candidates,
  solves ``lambda*`` (:func:`solve_multipliers`, warm-started), and moves
  ``x`` along minus the gradient of
  ``||theta* - sum_i lambda*_i grad g_i(x_i)||^2 / ||theta*||^2 + w_prior L_box(x)``
  at fixed ``lambda*`` (the envelope theorem; see the module docstring).

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]`` with a pluggable activation.
    problem: 'binary', 'multiclass' (``lambda >= 0``) or 'general' (free ``[m, C]``).
    optimizer: 'sgd' (momentum SGD) or 'adam', over x only.
    momentum: SGD momentum.
    w_prior: weight of the box prior.
    nnls_iters: projected-gradient iterations per step (sign-constrained case).
    ridge: relative ridge ``eps = ridge tr(K) / n`` added to ``K``.
    rescale: False; True (keep each candidate at its initial norm after every
      step, as Iurada et al.'s code does at ``sqrt(d)``); or a norm ``r > 0``.
    num_outputs: C, the number of network outputs, for 'general'.

  Per-restart hyperparameters: ``lr_x``, ``alpha`` (surrogate sharpness); any
  others (``lr_lam``, ``lam_min``, ``sigma_x`` for the x-init) are ignored.

  Returns:
    An :class:`Attack`; metrics per step, at the state before the step:
    ``loss`` (``L + w_prior * prior``), ``stat_rel`` (``L``), ``n_active``
    (multipliers ``> 0``; for 'general' non-zero entries), ``prior``.
    ``candidates(state)`` returns ``(x, lambda*)`` (row norms of ``lambda*``
    for 'general'); ``lambda*`` is that of the previous iterate.
  """
  _check(problem, nnls_iters, ridge, rescale, num_outputs, w_prior)
  base = optim.base_optimizer(optimizer, momentum)
  nonneg = problem != "general"
  outputs = num_outputs if problem == "general" else 1
  iters, ridge = int(nnls_iters), float(ridge)

  def lam_shape(m):
    return (m, outputs) if problem == "general" else (m,)

  def init(key, hp: HParams, target: Target, x0):
    del key, hp
    m = x0.shape[0]
    if problem == "general":
      out = jax.eval_shape(lambda p, x: apply_fn(p, x, None), target.params, x0)
      if out.shape[-1] != outputs:
        raise ConfigError(
          f"num_outputs must match the network's {out.shape[-1]} outputs, got {outputs}."
        )
    if rescale is True:
      radius = _norms(x0)
    else:
      radius = jnp.full((m,), 1.0 if rescale is False else float(rescale), x0.dtype)
    return ClosedFormState(
      x0, jnp.zeros(lam_shape(m), x0.dtype), base.init(x0), radius.astype(x0.dtype)
    )

  def step(state: ClosedFormState, hp: HParams, target: Target):
    act = functools.partial(surrogate_relu, alpha=hp["alpha"])
    x = state.x

    def loss_fn(xx):
      rel, lam = projection_residual(
        apply_fn,
        problem,
        target.params,
        xx,
        target.labels,
        act,
        iters=iters,
        ridge=ridge,
        lam0=state.lam,
        num_outputs=outputs,
      )
      prior = priors.box_prior(xx, target.box_lo, target.box_hi)
      return rel + w_prior * prior, (rel, prior, lam)

    (loss, (rel, prior, lam)), gx = jax.value_and_grad(loss_fn, has_aux=True)(x)
    lam = lam.astype(x.dtype)
    updates, opt_state = base.update(gx, state.opt_state, x)
    new_x = optim.scaled(x, updates, hp["lr_x"])
    if rescale is not False:
      scale = state.radius / jnp.maximum(_norms(new_x), jnp.finfo(new_x.dtype).tiny)
      new_x = new_x * scale.reshape((-1,) + (1,) * (new_x.ndim - 1)).astype(new_x.dtype)
    n_active = jnp.sum(lam > 0 if nonneg else lam != 0).astype(loss.dtype)
    metrics = {"loss": loss, "stat_rel": rel, "n_active": n_active, "prior": prior}
    return ClosedFormState(new_x, lam, opt_state, state.radius), metrics

  def candidates(state: ClosedFormState):
    w = state.lam if state.lam.ndim == 1 else jnp.linalg.norm(state.lam, axis=-1)
    return state.x, w

  return Attack(init, step, candidates, name=f"closed_form[{problem}]")


def _build(options, setup: Setup) -> Attack:
  return closed_form_attack(
    setup.apply_fn,
    setup.problem,
    optimizer=setup.common.optimizer,
    w_prior=setup.common.w_prior,
    num_outputs=setup.num_outputs,
  )


SPEC = register(
  AttackSpec(
    name="closed_form",
    build=_build,
    check=no_check,
    hparams=("lr_x", "sigma_x", "alpha"),
    state_arrays=lambda options, common: kkt.STATE_ARRAYS.get(common.optimizer, 3),
    fits_equations=True,
    doc="lambda eliminated in closed form at every step (Iurada et al.)",
  )
)
