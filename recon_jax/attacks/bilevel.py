"""Bilevel reconstruction (Runkel et al. 2024): find inputs whose training optimum is theta*.

.. math::
  \\min_x \\; \\|\\theta^* - \\theta(x)\\|^2 + w_{prior} L_{box}(x)
  \\quad \\text{s.t.} \\quad
  \\theta(x) = \\arg\\min_\\theta E(x, y; \\theta),\\qquad
  E = \\tfrac{1}{m} \\sum_i \\ell(\\Phi(x_i; \\theta), y_i) + \\tfrac{wd}{2} \\|\\theta\\|^2 .

Each outer step solves the inner problem with jaxopt (L-BFGS by default),
warm-started from the previous step's theta (the paper's update, eq. 7), and
differentiates through it implicitly (:mod:`recon_jax.implicit`): CG on the
Hessian, or the paper's quasi-Newton reuse of the L-BFGS memory.

Caveats (see the issue and ``experiments/init_study.py``):

* ``wd > 0`` is required for 'logistic'/'ce': with separable data and no
  regulariser the inner problem has no minimiser (Runkel et al. footnote 1), the
  inner solve drifts and the Hessian is singular.
* The implicit function theorem needs ``E`` to be C^2; eq. (9) uses ReLU, for
  which the inner solve stalls and the implicit gradient is unreliable.  Pass a
  smooth ``act`` (softplus, gelu, tanh) for a sound attack; ReLU still runs.
* Where the first inner solve starts matters (several basins): ``theta0='target'``
  (theta*, known to the attacker) is the default; 'uniform' (U(0,1), the paper)
  and 'gaussian' (N(0, 1/fan_in) kernels, zero biases, times ``theta0_scale``).

References:
  Runkel, Gandikota, Geiping, Schönlieb, Moeller. Training Data Reconstruction:
  Privacy due to Uncertainty? 2024.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import optax

from recon_jax import implicit, optim, priors
from recon_jax.attacks.spec import (
  AttackSpec,
  Example,
  Setup,
  check_rules,
  option,
  register,
  require,
)
from recon_jax.core import arguments, losses
from recon_jax.core.activations import get_activation
from recon_jax.core.rules import MAX_INNER_ITERATIONS, Rule
from recon_jax.errors import ConfigError
from recon_jax.optim import Steps
from recon_jax.types import Attack, HParams, Target
from recon_jax.victims.recipe import final_weight_decay

THETA0 = ("target", "uniform", "gaussian")


class BilevelState(NamedTuple):
  x: jax.Array  # [m, *input_shape] candidates
  theta: Any  # warm start: theta(x) of the last inner solve
  theta0: Any  # where a non-warm-started inner solve begins
  opt_state: optax.OptState
  inner_grad_norm: jax.Array  # ||grad_theta E|| after the last inner solve
  inner_iters: jax.Array  # iterations of the last inner solve


def _theta0(kind: str, key, params, scale: float):
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(key, len(leaves))
  out = []
  for k, a in zip(keys, leaves):
    if kind == "uniform":
      out.append(jax.random.uniform(k, a.shape, a.dtype))
    elif a.ndim >= 2:  # gaussian: N(0, scale^2 / fan_in) kernels
      out.append(scale * jax.random.normal(k, a.shape, a.dtype) / jnp.sqrt(a.shape[0]))
    else:
      out.append(jnp.zeros_like(a))
  return jax.tree_util.tree_unflatten(treedef, out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InnerStart:
  """Where each inner solve of :func:`bilevel_attack` starts."""

  theta0: str = "target"
  """Where the first inner solve starts: 'target' (theta*, known to the attacker),
  'uniform' (U(0, 1), the paper) or 'gaussian' (N(0, 1/fan_in) kernels, zero biases)."""
  theta0_scale: float = 1.0
  """The multiplier of the 'gaussian' theta0."""
  warm_start: bool = True
  """Start each inner solve from the previous step's theta(x) (the paper's eq. 7);
  otherwise from theta0 every step."""
  restart_from_target_each_step: bool = False
  """Start every inner solve from theta* (over ``warm_start``)."""

  def __post_init__(self):
    if self.theta0 not in THETA0:
      raise ConfigError(f"theta0 must be one of {THETA0}, got {self.theta0!r}.", "theta0")


def _refuse(loss: str, wd: float, allow_zero_wd: bool) -> None:
  """ConfigError where :func:`bilevel_attack`'s training problem has no minimiser."""
  losses.check_loss(loss)
  if wd < 0 or (wd == 0 and loss != "mse" and not allow_zero_wd):
    raise ConfigError(
      f"wd must be > 0 for loss {loss!r}, got {wd}: with separable data and no weight "
      "decay the training problem has no minimiser (Runkel et al. 2024, footnote 1) and "
      "its Hessian degenerates, so theta(x) and its implicit gradient are undefined. "
      "Use wd > 0 (the victim's own weight decay), e.g. wd=1e-3."
    )


def bilevel_attack(
  apply_fn,
  loss: str = "logistic",
  *,
  wd: float,
  act: Union[None, str, Any] = None,
  inner: Optional[implicit.InnerSolve] = None,
  start: Optional[InnerStart] = None,
  steps: Optional[Steps] = None,
  w_prior: float = 1.0,
  project_box: bool = False,
  allow_zero_wd: bool = False,
) -> Attack:
  """The bilevel attack of Runkel et al. (2024).

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]``.
    loss: inner loss: 'logistic' (labels +-1), 'ce' (class ids), 'mse' (targets).
    wd: weight decay of the inner energy; must equal the victim's.
    act: activation for ``apply_fn`` (name or callable); None keeps the model's.
    inner: the inner solve and its implicit derivative (:class:`recon_jax.implicit.InnerSolve`;
      None: its defaults, L-BFGS and conjugate gradients; as for each group).
    start: where the inner solves start (:class:`InnerStart`).
    steps: the optimiser of x (:class:`recon_jax.optim.Steps`), run at rate 1 and scaled
      per restart by ``hparams['lr_x']``.
    w_prior: weight of the box prior.
    project_box: project x onto the box after each step (instead of, or with,
      the prior).
    allow_zero_wd: permit wd = 0 with a classification loss (expert use).

  Returns:
    An :class:`Attack`.  Step metrics: ``loss``, ``param_dist``
    (``||theta* - theta(x)||^2`` before the step), ``prior``,
    ``inner_grad_norm``, ``inner_iters``.

  Raises:
    ValueError: on wd <= 0 with 'logistic'/'ce' (unless ``allow_zero_wd``), or
      an unknown option.
  """
  _refuse(loss, wd, allow_zero_wd)
  inner = arguments.group("inner", inner, implicit.InnerSolve)
  start = arguments.group("start", start, InnerStart)
  base = arguments.group("steps", steps, Steps).base()
  act_fn = get_activation(act) if isinstance(act, str) else act
  solve = implicit.make_inner_solve(losses.energy(apply_fn, loss, wd, act_fn), inner)

  def outer_loss(x, theta_start, target: Target):
    y = target.labels.astype(x.dtype)
    theta, info = solve(theta_start, x, y)
    dist = losses.tree_sq_dist(theta, target.params)
    prior = priors.box_prior(x, target.box_lo, target.box_hi)
    return dist + w_prior * prior, (theta, info, dist, prior)

  def init(key, hp: HParams, target: Target, x0):
    del hp
    if start.theta0 == "target":
      th0 = target.params
    else:
      th0 = _theta0(start.theta0, key, target.params, start.theta0_scale)
    zero = jnp.zeros((), x0.dtype)
    return BilevelState(x0, th0, th0, base.init(x0), zero + jnp.inf, zero)

  def step(state: BilevelState, hp: HParams, target: Target):
    if start.restart_from_target_each_step:
      theta_start = target.params
    elif start.warm_start:
      theta_start = state.theta
    else:
      theta_start = state.theta0
    (val, (theta, info, dist, prior)), gx = jax.value_and_grad(outer_loss, has_aux=True)(
      state.x, theta_start, target
    )
    updates, opt_state = base.update(gx, state.opt_state, state.x)
    x = optim.scaled(state.x, updates, hp["lr_x"])
    if project_box:
      x = priors.project_box(x, target.box_lo, target.box_hi)
    new = BilevelState(x, theta, state.theta0, opt_state, info.grad_norm, info.iters)
    return new, {
      "loss": val,
      "param_dist": dist,
      "prior": prior,
      "inner_grad_norm": info.grad_norm,
      "inner_iters": info.iters,
      "grad_x_norm": jnp.sqrt(jnp.sum(jnp.square(gx))),
    }

  def candidates(state: BilevelState):
    return state.x, jnp.ones(state.x.shape[:1], state.x.dtype)

  return Attack(init, step, candidates, name=f"bilevel[{loss},{inner.hessian_solve}]")


@dataclasses.dataclass(frozen=True)
class BilevelOptions:
  """The bilevel attack's own options (settings of the main job of the same names)."""

  # each step of each restart runs this inner solve in one compiled call: bounded so that a
  # step (and Ctrl-C or SIGTERM after it) comes within seconds
  bilevel_inner_maxiter: int = option(
    100,
    "attack=bilevel: L-BFGS iterations of each inner solve",
    Rule("int", low=1, high=MAX_INNER_ITERATIONS),
  )


def _check(o: BilevelOptions, setup: Setup) -> None:
  check_rules(o, BilevelOptions)
  require(
    not setup.foreign,
    "attack=bilevel needs the victim's training recipe (its loss and weight decay): "
    "a recon_jax victim, not an imported checkpoint.",
    "attack",
  )

  v = setup.victim
  require(
    final_weight_decay(v) > 0 or v.loss == "mse",
    "attack=bilevel fits theta(x) = argmin E, which has no minimiser without weight decay: "
    "train the victim with weight decay (victim.weight_decay, or victim.wd with wd_epochs; "
    "e.g. the lfw_wd preset).",
    "attack",
  )
  common = setup.common
  if common is not None:
    require(
      (common.m == 0 and common.m_per_sample == 1) or common.m > 0,
      "attack=bilevel fits the training energy of its m candidates to theta*: use m = n "
      "(m_per_sample=1).",
      "m_per_sample",
    )


def _build(o: BilevelOptions, setup: Setup) -> Attack:
  require(
    int(setup.target.labels.shape[0]) == setup.n,
    f"attack=bilevel needs m = n = {setup.n} candidates, got m = "
    f"{int(setup.target.labels.shape[0])}.",
    "m",
  )
  return bilevel_attack(
    setup.apply_fn,
    setup.victim.loss,
    wd=final_weight_decay(setup.victim),
    inner=implicit.InnerSolve(maxiter=o.bilevel_inner_maxiter),
    steps=Steps(setup.common.optimizer),
    w_prior=setup.common.w_prior,
  )


SPEC = register(
  AttackSpec(
    name="bilevel",
    build=_build,
    check=_check,
    options=BilevelOptions,
    hparams=("lr_x", "sigma_x"),
    # x, its gradient, the optimiser's slots; theta and its warm start are per restart too,
    # but of parameter size (not counted here).
    state_arrays=lambda o, common: 3,
    doc="min_x ||theta* - theta(x)||^2, theta(x) = argmin E (Runkel et al.), implicit gradients",
    # m = n, and a few inner iterations: each step is an inner solve (slow to compile)
    examples=(
      Example({"search.m_per_sample": 1, "bilevel.bilevel_inner_maxiter": 20}, steps=2, slow=True),
    ),
  )
)
