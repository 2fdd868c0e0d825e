"""KKT / margin reconstruction (Haim et al. 2022) and its DecoReco extension.

Gradient descent on a homogeneous ReLU network converges in direction to a KKT
point of margin maximisation, so the trained parameters satisfy

.. math::
  \\theta^* \\approx \\sum_i \\lambda_i \\nabla_\\theta g_i(\\theta^*; x_i),
  \\qquad \\lambda_i \\ge 0 .

The attack searches candidates ``x_1..x_m`` and multipliers ``lambda`` that
satisfy it, minimising

.. math::
  w_{stat} \\| \\theta^* - \\tfrac{1}{m} \\sum_i \\lambda_i \\nabla_\\theta g_i \\|^2
  + w_\\lambda \\sum_i \\max(\\lambda_{min} - \\lambda_i, 0)^2
  + w_{prior} L_{box}(x)

with the network's ReLU replaced by ``surrogate_relu`` (forward ReLU, every
derivative sigmoid(alpha x)).  The margins ``g_i``:

* ``binary``: ``y_i Phi(x_i)``, ``y_i = +-1`` (Haim et al. eq. 6);
* ``multiclass``: ``Phi_{y_i}(x_i) - max_{j != y_i} Phi_j(x_i)`` (Buzaglo et al.);
* ``general`` (regression or weight-decay-trained victims, Buzaglo et al.):
  ``sum_c lambda_ic Phi_c(x_i)`` with free real ``lambda`` (no hinge): with
  weight decay the stationarity of ``E + wd/2 ||theta||^2`` reads
  ``theta = -(1/wd) sum_i dl/dPhi_i grad Phi_i``, the same residual with lambda
  standing for the loss derivatives.

Normalisation: the sum is scaled by ``1/m`` (``Objective.normalize='mean'``, default),
as the public PyTorch implementation of Haim et al. does, so that its
published learning-rate and lambda_min ranges transfer; the multipliers then
absorb a factor m (``lambda = m * lambda_KKT``).  ``normalize='sum'`` gives the
paper's eq. (6) literally.

The factory takes its options in small frozen groups, each with its defaults and checks
(:mod:`recon_jax.attacks.kkt_parts`), all importable from here: :class:`Objective`,
:class:`Multipliers`, :class:`Steps`, :class:`Subspace` and :class:`Splitting`; the main
job's flat settings of the same meanings (:class:`KKTOptions`, ``--config.kkt.*``) are
mapped onto them by the spec's build.

References:
  Haim, Vardi, Yehudai, Shamir, Irani. Reconstructing Training Data from
  Trained Neural Networks. NeurIPS 2022.
  Buzaglo et al. Deconstructing Data Reconstruction: Multiclass, Weight Decay
  and General Losses. NeurIPS 2023.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

from absl import logging
import jax
import jax.numpy as jnp
import optax

from recon_jax import optim, priors
from recon_jax.attacks import equations, gauss_newton, span
from recon_jax.attacks.kkt_parts import LAM_INITS, Multipliers, Objective, Subspace
from recon_jax.attacks.spec import (
  AttackSpec,
  Example,
  Setup,
  check_rules,
  option,
  register,
  require,
)
from recon_jax.attacks.splitting import Splitting, split_step
from recon_jax.core import arguments
from recon_jax.core.activations import (
  DERIVATIVES,
  get_activation,
  resolve_derivative,
  surrogate_relu,
)
from recon_jax.core.losses import PROBLEMS
from recon_jax.core.rules import INT32_MAX, Rule
from recon_jax.data.dataset import INPUT_SHAPES
from recon_jax.errors import ConfigError
from recon_jax.optim import Steps
from recon_jax.types import Attack, HParams, Target


class KKTState(NamedTuple):
  x: jax.Array  # [m, *input_shape] candidates
  lam: jax.Array  # [m] multipliers ([m, C] for 'general')
  opt_state: optax.OptState


class SplitKKTState(NamedTuple):
  """:class:`KKTState` and a step count, for an attack that splits candidates."""

  x: jax.Array
  lam: jax.Array
  opt_state: optax.OptState
  count: jax.Array  # steps taken; a split every ``Splitting.every`` of them


def _refuse(apply_fn, problem, objective, multipliers, steps, subspace, split):
  """``(objective, multipliers, steps)`` of :func:`kkt_attack`'s arguments (None: the
  defaults), or a ConfigError naming the first it cannot run with or combine."""
  objective = arguments.group("objective", objective, Objective)
  multipliers = arguments.group("multipliers", multipliers, Multipliers)
  steps = arguments.group("steps", steps, Steps)
  for value, cls, name in ((subspace, Subspace, "subspace"), (split, Splitting, "splitting")):
    if value is not None:
      arguments.group(name, value, cls)
  if problem not in PROBLEMS:
    raise ConfigError(f"problem must be one of {PROBLEMS}, got {problem!r}.")
  kind = multipliers.kind
  if kind == "tied" and problem != "binary":
    raise ConfigError(
      f"multipliers kind='tied' is defined for binary (logistic) victims, not problem={problem!r}.",
      "multipliers",
    )
  if split is not None and (kind != "free" or problem == "general"):
    raise ConfigError(
      "splitting needs free multipliers on a binary or multiclass victim.", "splitting"
    )
  fits = multipliers.init == "fit" or multipliers.refit_every
  if fits and not (
    isinstance(apply_fn, equations.OneHidden) and problem == "binary" and kind == "free"
  ):
    raise ConfigError(
      "Multipliers init='fit' and refit_every fit the multipliers in closed form: they need "
      "a binary network of one dense hidden layer (equations.one_hidden) and free "
      "multipliers.",
      "multipliers",
    )
  return objective, multipliers, steps


def _activation_of(derivative: str):
  """``hparams -> act``: None (the network's own) or the surrogate ReLU at the restart's
  ``alpha``."""

  def activation(hp):
    if derivative == "exact":
      return None
    return functools.partial(surrogate_relu, alpha=hp["alpha"])

  return activation


def _loss_fn(apply_fn, problem, obj: Objective, tied: bool, subspace: Optional[Subspace]):
  """The objective of eq. (8), ``loss((x, lam), hparams, target) -> (loss, aux)``; with
  ``tied`` multipliers ``aux['lam']`` holds their value at ``x``."""
  activation = _activation_of(obj.derivative)

  def loss_fn(xl, hp: HParams, target: Target):
    x, lam = xl  # x: the network's inputs (coefficients where the attack has a span)
    act, norm = activation(hp), obj.normalize
    if tied:
      stat, lam = equations.tied_stationarity(apply_fn, target, x, act, norm)
      lam_pen = jnp.zeros((), stat.dtype)
    else:
      stat = equations.stationarity(
        apply_fn, problem, target.params, x, lam, target.labels, act, norm, target.reference
      )
      lam_pen = (
        priors.lambda_prior(lam, hp["lam_min"])
        if problem != "general"
        else jnp.zeros((), stat.dtype)
      )
    # the candidates as inputs: decoded from coefficients where the attack has a span
    pixels = x if target.span is None else span.decode(x, target.span.basis, subspace.input_shape)
    prior = priors.box_prior(pixels, target.box_lo, target.box_hi)
    loss = obj.w_stat * stat + obj.w_lam * lam_pen + obj.w_prior * prior
    aux = {"stat": stat, "lam_pen": lam_pen, "prior": prior, "lam": lam}
    if obj.w_tv:
      aux["tv"] = priors.tv_prior(pixels)
      loss = loss + obj.w_tv * aux["tv"]
    return loss, aux

  return loss_fn


def kkt_attack(
  apply_fn,
  problem: str = "binary",
  *,
  objective: Optional[Objective] = None,
  multipliers: Optional[Multipliers] = None,
  steps: Optional[Steps] = None,
  subspace: Optional[Subspace] = None,
  splitting: Optional[Splitting] = None,
) -> Attack:
  """The KKT (binary/multiclass) and DecoReco (general) attack.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]``, the victim network with a
      pluggable activation (see :func:`recon_jax.victims.models.make_apply_fn`).
    problem: 'binary', 'multiclass' or 'general'.
    objective: the terms minimised and their weights (:class:`Objective`; None: its
      defaults, as for each group).
    multipliers: free or tied, their start and refits
      (:class:`~recon_jax.attacks.equations.Multipliers`).
    steps: the optimiser (:class:`recon_jax.optim.Steps`: momentum SGD by default).
    subspace: search each candidate's k coefficients in a span (:class:`Subspace`;
      None: its inputs).
    splitting: split candidates in two every so many steps (:class:`Splitting`, after
      Shen et al. 2026; None: never).

  Per-restart hyperparameters (``hparams``): ``lr_x``, ``lr_lam``, ``alpha``
  (surrogate sharpness), ``lam_min``; the x-initialisation may read ``sigma_x``.

  Returns:
    An :class:`Attack`; metrics per step: ``loss``, ``stat`` (stationarity),
    ``stat_rel`` (stationarity / ||theta*||^2), ``lam_pen``, ``prior`` (and ``tv``,
    ``split`` where those are on).
  """
  obj, lams, steps = _refuse(apply_fn, problem, objective, multipliers, steps, subspace, splitting)
  base = steps.base()
  tied, refit = lams.kind == "tied", lams.refit_every
  counted = bool(splitting or refit)  # the state keeps a step count

  activation = _activation_of(obj.derivative)
  loss_fn = _loss_fn(apply_fn, problem, obj, tied, subspace)

  def fitted(x, hp, target):
    """The multipliers that fit the reference best with the candidates ``x`` held."""
    lam = equations.fitted_multipliers(
      apply_fn, target.params, target.fit, x, target.labels, activation(hp), obj.normalize
    )
    return lam.astype(x.dtype)

  def init(key, hp, target, x0):
    m = target.labels.shape[0]
    if target.span is not None:
      x0 = span.encode(x0, target.span.encoder())
    if problem == "general":
      lam = jax.random.uniform(key, (m, lams.outputs), x0.dtype, -1.0, 1.0)
    elif lams.init == "fit":
      lam = fitted(x0, hp, target)
    else:
      lam = jax.random.uniform(key, (m,), x0.dtype)
    if counted:
      return SplitKKTState(x0, lam, base.init((x0, lam)), jnp.zeros((), jnp.int32))
    return KKTState(x0, lam, base.init((x0, lam)))

  def step(state: KKTState, hp, target):
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)((state.x, state.lam), hp, target)
    updates, opt_state = base.update(grads, state.opt_state, (state.x, state.lam))
    # The base optimiser runs at rate 1; the per-restart rates scale its updates
    # (exact for SGD-momentum and Adam), so rates vmap as ordinary arrays.
    ux, ul = updates
    x = optim.scaled(state.x, ux, hp["lr_x"])
    # Tied multipliers are a function of the candidates: the state keeps their value at
    # this step's candidates (one step behind the updated x; no second evaluation).
    tied_lam = aux.pop("lam")
    lam = tied_lam if tied else optim.scaled(state.lam, ul, hp["lr_lam"])
    metrics = {"loss": loss, "stat_rel": equations.relative(aux["stat"], target), **aux}
    new = state._replace(x=x, lam=lam, opt_state=opt_state)
    if counted:
      new = new._replace(count=state.count + 1)
    if refit:
      refitted = jax.lax.cond(
        new.count % refit == 0, lambda s: fitted(s.x, hp, target), lambda s: s.lam, new
      )
      new = new._replace(lam=refitted)
    if splitting:
      new, did = jax.lax.cond(
        new.count % splitting.every == 0,
        lambda s: splitting_step(s, hp, target),
        lambda s: (s, jnp.zeros((), bool)),
        new,
      )
      metrics["split"] = did.astype(loss.dtype)
    return new, metrics

  def splitting_step(state, hp, target):
    objective_at = lambda xl: loss_fn(xl, hp, target)[0]  # noqa: E731
    return split_step(
      state, splitting.eps, objective_at, apply_fn, problem, target, activation(hp), obj.normalize
    )

  def candidates(state: KKTState):
    w = state.lam if state.lam.ndim == 1 else jnp.linalg.norm(state.lam, axis=-1)
    if subspace is None:
      return state.x, w
    return span.decode(state.x, subspace.basis, subspace.input_shape), w

  prepare, name = None, f"kkt[{problem}]"
  if subspace is not None:
    prepare = functools.partial(span.reduce_target, basis=subspace.basis, dual=subspace.dual)
    name = f"kkt[{problem}, span {subspace.basis.shape[1]}]"
  # Free multipliers meet only in the sum; tied ones share their scale, and a split moves
  # two slots at once: those re-run the whole state.
  alone = (
    None if tied or splitting else equations.alone(apply_fn, problem, obj.normalize, activation)
  )
  return Attack(init, step, candidates, name=name, prepare=prepare, alone=alone)


# ----------------------------------------------------------------------------- the main job

SOLVERS = ("first_order", "lm")
# Arrays of candidate size a restart keeps: x, its gradient, the optimiser's slots.
STATE_ARRAYS = {"sgd": 3, "adam": 4}


def _activation(setup: Setup) -> str:
  return "relu" if setup.foreign else setup.victim.activation


def _own_activation(setup: Setup):
  """The victim's activation as a function (None where it needs settings it lacks)."""
  try:
    return get_activation(_activation(setup))
  except ConfigError:
    return None


@dataclasses.dataclass(frozen=True)
class KKTOptions:
  """The KKT attack's own options (settings of the main job of the same names)."""

  w_lam: float = option(
    1.0, "weight of the lambda >= lam_min penalty (>= 0)", Rule("float", low=0, high=1e6)
  )
  derivative: str = option(
    "auto",
    "auto (victim's own if smooth, else surrogate) | surrogate | exact",
    Rule("str", choices=("auto",) + DERIVATIVES),
  )
  multipliers: str = option(
    "free",
    "free (lambda optimised) | tied (lambda_i = c sigma(-y_i Phi(x_i)))",
    Rule("str", choices=equations.MULTIPLIERS),
  )
  subspace: bool = option(
    False,
    "search candidates as coefficients in the span of the first layer's weights (their "
    "change with known_init)",
    Rule("bool"),
  )
  span_whiten: float = option(
    0.0,
    "in that span, count direction j of the residual by (s_j / s_1)^-power: 1 gives the "
    "weak directions of little-weighted images the strong ones' say (0: off)",
    Rule("float", low=0, high=1, note="0: off", feature="subspace"),
  )
  subspace_tol: float = option(
    0.0,
    "that span: singular values above this x the largest (0: above the noise floor)",
    Rule(
      "float", low=0, high=1, high_open=True, note="0: above the noise floor", feature="subspace"
    ),
  )
  solver: str = option(
    "first_order",
    "first_order (optimizer) | lm (Levenberg-Marquardt in the span; needs subspace)",
    Rule("str", choices=SOLVERS),
  )
  lm_cg_maxiter: int = option(
    20,
    "conjugate-gradient iterations per Levenberg-Marquardt step",
    Rule("int", low=1, high=10_000, feature="lm"),
  )
  split_every: int = option(
    0,
    "split a candidate in two every this many steps (0: off; Shen et al.)",
    Rule("int", low=0, high=INT32_MAX, note="0: off"),
  )
  split_eps: float = option(
    0.05,
    "distance of the two copies from the split candidate",
    Rule("float", low=0, high=1e6, low_open=True, feature="split"),
  )
  w_tv: float = option(
    0.0,
    "kkt: weight of a total-variation prior on image candidates (0: off)",
    Rule("float", low=0, high=1e6, note="0: off"),
  )
  lam_init: str = option(
    "uniform",
    "uniform (multipliers drawn in [0, 1)) | fit (those that fit the reference best with the "
    "starting candidates: one dense hidden layer, binary, free multipliers)",
    Rule("str", choices=LAM_INITS),
  )
  lam_refit_every: int = option(
    0,
    "every this many steps, the multipliers set to that fit at the current candidates (0: off)",
    Rule("int", low=0, high=INT32_MAX, note="0: off"),
  )


def _features(o: KKTOptions) -> dict:
  return {
    "split": ("sample splitting (split_every > 0)", o.split_every > 0),
    "subspace": ("subspace=True", bool(o.subspace)),
    "lm": ("solver=lm", o.solver == "lm"),
  }


def _check(o: KKTOptions, setup: Setup) -> None:
  check_rules(o, KKTOptions)  # what each option may hold on its own
  derivative = o.derivative
  common = setup.common
  if common is not None and (setup.foreign or setup.victim is not None):
    require(
      not common.anneal_alpha or resolve_derivative(derivative, _activation(setup)) == "surrogate",
      "anneal_alpha anneals the surrogate ReLU's sharpness, but this victim's derivative is "
      "exact (derivative=auto with a smooth activation): it would change nothing; set "
      "derivative=surrogate or leave anneal_alpha at 0.",
      "anneal_alpha",
    )
  multipliers = o.multipliers
  require(
    multipliers == "free" or setup.problem == "binary",
    "multipliers=tied needs a binary (logistic) victim.",
    "multipliers",
  )
  if o.subspace:
    require(
      setup.foreign or setup.victim.arch in ("mlp", "one_hidden", "affine"),
      f"subspace needs a dense first layer; arch={getattr(setup.victim, 'arch', '?')} has none.",
      "subspace",
    )
  solver = o.solver
  require(
    solver == "first_order" or (o.subspace and setup.problem == "binary"),
    "solver=lm solves the binary KKT equations in the first layer's span: it needs "
    "subspace=True and a binary victim.",
    "solver",
  )
  require(
    not o.span_whiten or solver == "first_order",
    "span_whiten weights the first-order objective; solver=lm does not take it.",
    "span_whiten",
  )
  if o.w_tv:
    require(
      solver == "first_order",
      "w_tv is a term of the first-order objective; solver=lm does not take it.",
      "w_tv",
    )
    dataset = getattr(setup.victim, "dataset", None)
    require(
      setup.foreign or len(INPUT_SHAPES.get(dataset, (0, 0))) >= 2,
      f"w_tv needs image candidates; dataset {dataset!r} has none.",
      "w_tv",
    )
  require(
    (o.lam_init == "uniform" and not o.lam_refit_every)
    or (setup.problem == "binary" and multipliers == "free" and solver == "first_order"),
    "lam_init=fit and lam_refit_every fit free multipliers of a binary victim for the "
    "first-order search.",
    "lam_init" if o.lam_init == "fit" else "lam_refit_every",
  )
  if o.split_every:
    if common is not None:
      require(
        o.split_every <= common.steps,
        f"split_every={o.split_every} is more than steps={common.steps}: no candidate would "
        "ever be split (0: off).",
        "split_every",
      )
    require(
      multipliers == "free" and setup.problem != "general" and solver == "first_order",
      "split_every needs free multipliers, a binary or multiclass victim and solver=first_order.",
      "split_every",
    )


def _build(o: KKTOptions, setup: Setup) -> Attack:
  common = setup.common
  derivative = resolve_derivative(o.derivative, _activation(setup))
  # The multipliers' fit needs one dense hidden layer's KKT sum in closed form
  # (equations.one_hidden_sum); the search itself keeps autodiff, which costs the same on a
  # CPU (benchmarks/span.py's closed_speedup, about 1) and is every recorded run's path. An
  # attack built without a target (scored on its own) keeps autodiff.
  apply_fn = setup.apply_fn
  if o.lam_init == "fit" or o.lam_refit_every:
    apply_fn = equations.one_hidden(
      setup.apply_fn,
      None if setup.target is None else setup.target.params,
      _own_activation(setup),
      setup.input_shape,
      setup.problem,
    )
  basis = dual = None
  if o.subspace:
    basis, info = span.span_basis(setup.target.fit, o.subspace_tol, setup.n or None)
    basis, dual = span.whitened(basis, info.singular_values, o.span_whiten)
    logging.info(
      "candidates searched in the first layer's span: %d of %d directions (%d training images)",
      info.dim,
      info.input_dim,
      setup.n,
    )
  if o.solver == "lm":
    # LM keeps autodiff: its damped solves amplify the closed form's other rounding (restarts
    # under lax.map and vmap then part at 2e-5 relative in the contract test).
    return gauss_newton.lm_attack(
      setup.apply_fn,
      basis,
      setup.input_shape,
      residual_fn=equations.lm_residual(o.multipliers),
      multipliers=o.multipliers,
      derivative=derivative,
      w_prior=common.w_prior,
      w_lam=o.w_lam,
      normalize=common.normalize,
      cg_maxiter=o.lm_cg_maxiter,
    )
  return kkt_attack(
    apply_fn,
    setup.problem,
    objective=Objective(
      w_lam=o.w_lam,
      w_prior=common.w_prior,
      w_tv=float(o.w_tv),
      normalize=common.normalize,
      derivative=derivative,
    ),
    multipliers=Multipliers(
      kind=o.multipliers,
      init=o.lam_init,
      refit_every=int(o.lam_refit_every),
      outputs=setup.num_outputs,
    ),
    steps=Steps(common.optimizer),
    subspace=None if basis is None else Subspace(basis, setup.input_shape, dual),
    splitting=Splitting(every=int(o.split_every), eps=float(o.split_eps))
    if o.split_every
    else None,
  )


# The contract test's runs: once per solver (an LM or splitting program is slow to
# compile; LM's damping starts small, so the first steps of a restart may be rejected).
_LM = {"kkt.subspace": True, "kkt.subspace_tol": 1e-8, "kkt.solver": "lm", "kkt.lm_cg_maxiter": 5}
EXAMPLES = (
  Example(),
  Example({"kkt.multipliers": "tied", "search.m_per_sample": 1}),
  Example(
    {
      "kkt.multipliers": "tied",
      "search.m_per_sample": 1,
      "kkt.subspace": True,
      "kkt.subspace_tol": 1e-8,
    }
  ),
  Example({"kkt.multipliers": "tied", "search.m_per_sample": 1, **_LM}, steps=2, slow=True),
  Example(_LM, steps=10, slow=True),
  Example(
    {
      "kkt.subspace": True,
      "kkt.span_whiten": 0.5,
      "search.optimizer": "adam",
      "search.lr_x": "0.01",
    }
  ),
  Example({"kkt.split_every": 2, "kkt.split_eps": 0.1}, slow=True),
)

SPEC = register(
  AttackSpec(
    name="kkt",
    build=_build,
    check=_check,
    options=KKTOptions,
    hparams=("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min"),
    state_arrays=lambda o, common: STATE_ARRAYS.get(common.optimizer, 3),
    # LM's step moves subspace coordinates and a solver state that perturbed candidates
    # would leave stale: no re-run from them.
    rerunnable=lambda o: o.solver != "lm",
    first_order=lambda o: o.solver == "first_order",
    # tied multipliers are the loss derivatives at an exact stationary point
    assumes_stationary=lambda o: o.multipliers == "tied",
    features=_features,
    fits_equations=True,
    doc="the KKT / margin attack (Haim et al.), DecoReco for multiclass and general",
    examples=EXAMPLES,
  )
)
