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

Normalisation: the sum is scaled by ``1/m`` (``normalize='mean'``, default),
as the public PyTorch implementation of Haim et al. does, so that its
published learning-rate and lambda_min ranges transfer; the multipliers then
absorb a factor m (``lambda = m * lambda_KKT``).  ``normalize='sum'`` gives the
paper's eq. (6) literally.

References:
  Haim, Vardi, Yehudai, Shamir, Irani. Reconstructing Training Data from
  Trained Neural Networks. NeurIPS 2022.
  Buzaglo et al. Deconstructing Data Reconstruction: Multiclass, Weight Decay
  and General Losses. NeurIPS 2023.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import optax

from recon_jax import optim, priors
from recon_jax.attacks import equations, gauss_newton, span, splitting
from recon_jax.attacks.spec import (
  AttackSpec,
  Example,
  Setup,
  check_rules,
  option,
  register,
  require,
)
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
from recon_jax.types import Alone, Attack, HParams, Target

LAM_INITS = ("uniform", "fit")  # how a restart's multipliers start (kkt_attack's lam_init)


class KKTState(NamedTuple):
  x: jax.Array  # [m, *input_shape] candidates
  lam: jax.Array  # [m] multipliers ([m, C] for 'general')
  opt_state: optax.OptState


class SplitKKTState(NamedTuple):
  """:class:`KKTState` and a step count, for an attack that splits candidates."""

  x: jax.Array
  lam: jax.Array
  opt_state: optax.OptState
  count: jax.Array  # steps taken; a split every ``split_every`` of them


def kkt_attack(
  apply_fn,
  problem: str = "binary",
  *,
  optimizer: str = "sgd",
  momentum: float = 0.9,
  w_stat: float = 1.0,
  w_lam: float = 1.0,
  w_prior: float = 1.0,
  w_tv: float = 0.0,
  normalize: str = "mean",
  num_outputs: int = 1,
  derivative: str = "surrogate",
  multipliers: str = "free",
  basis=None,
  dual=None,
  input_shape=None,
  split_every: int = 0,
  split_eps: float = 0.05,
  lam_init: str = "uniform",
  lam_refit_every: int = 0,
) -> Attack:
  """The KKT (binary/multiclass) and DecoReco (general) attack.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]``, the victim network with a
      pluggable activation (see :func:`recon_jax.victims.models.make_apply_fn`).
    problem: 'binary', 'multiclass' or 'general'.
    optimizer: 'sgd' (momentum SGD, as the reference) or 'adam'.
    momentum: SGD momentum.
    w_stat, w_lam, w_prior: weights alpha_1..3 of eq. (8).
    w_tv: weight of a total-variation prior on image candidates
      (:func:`recon_jax.priors.tv_prior`; 0: off), a natural-image prior that the
      stationarity equations lack (Refael et al. 2025: without a prior, no leakage).
    normalize: 'mean' (1/m, reference code) or 'sum' (paper eq. 6).
    num_outputs: C, the width of lambda for 'general'.
    derivative: 'surrogate' (ReLU with derivative sigmoid(alpha x), Haim et al.)
      or 'exact' (the network's own activation: for a smooth victim, softplus or
      GELU, whose derivative is already informative; ``alpha`` is then unused).
    multipliers: 'free' (lambda optimised, with the lambda >= lam_min hinge) or
      'tied' (binary only): lambda_i = c sigma(-y_i Phi(x_i)), what stationarity
      of a logistic loss with weight decay gives (c = 1/(n wd) there), with the
      one scale c >= 0 eliminated in closed form at every step, so lambda is a
      function of the candidates, not m free variables.
    basis: optional [d, k] orthonormal columns (:func:`recon_jax.attacks.span.span_basis`):
      the attack searches each candidate's k coefficients in this basis instead of
      its d inputs (:mod:`recon_jax.attacks.span`; the optimiser, Adam included, acts
      on the coefficients, so the candidates never leave the span); needs a dense
      first layer and ``input_shape``.
    dual: optional [d, k], with ``basis``: the matrix that encodes inputs as
      coefficients and that the reference's first layer is read with (see
      :func:`recon_jax.attacks.span.whitened`; None: ``basis``, orthonormal).
    input_shape: the shape of one candidate (needed with ``basis``).
    split_every: every this many steps, split the candidate whose split lowers the
      objective most into two, in the slot of the smallest multiplier, kept only if the
      objective fell (:mod:`recon_jax.attacks.splitting`; binary or multiclass, free
      multipliers; 0: off).  The split is a ``lax.cond`` on the step count: free on the
      steps between splits under ``lax.map`` (the CPU default), but evaluated on every
      step when restarts are vmapped (a batched predicate runs both branches).
    split_eps: the distance of the two copies from the split candidate (input units).
    lam_init: 'uniform' (each multiplier drawn in [0, 1)) or 'fit' (the multipliers that fit
      the reference best with the starting candidates held:
      :func:`recon_jax.attacks.equations.fitted_multipliers`; binary, free multipliers, and
      ``apply_fn`` a :class:`~recon_jax.attacks.equations.OneHidden`).  A start near a
      training image drifts off it under random multipliers, and stays with fitted ones.
    lam_refit_every: every this many steps, set the multipliers to that fit at the current
      candidates (what 'fit' needs; 0: never).

  Per-restart hyperparameters (``hparams``): ``lr_x``, ``lr_lam``, ``alpha``
  (surrogate sharpness), ``lam_min``; the x-initialisation may read ``sigma_x``.

  Returns:
    An :class:`Attack`; metrics per step: ``loss``, ``stat`` (stationarity),
    ``stat_rel`` (stationarity / ||theta*||^2), ``lam_pen``, ``prior``.
  """
  if problem not in PROBLEMS:
    raise ConfigError(f"problem must be one of {PROBLEMS}, got {problem!r}.")
  if normalize not in ("mean", "sum"):
    raise ConfigError(f"normalize must be 'mean' or 'sum', got {normalize!r}.")
  if derivative not in DERIVATIVES:
    raise ConfigError(f"derivative must be one of {DERIVATIVES}, got {derivative!r}.")
  if multipliers not in equations.MULTIPLIERS:
    raise ConfigError(f"multipliers must be one of {equations.MULTIPLIERS}, got {multipliers!r}.")
  if multipliers == "tied" and problem != "binary":
    raise ConfigError(
      f"multipliers='tied' is defined for binary (logistic) victims, not problem={problem!r}."
    )
  if not (isinstance(split_every, int) and split_every >= 0):
    raise ConfigError(f"split_every must be an integer >= 0, got {split_every!r}.")
  if split_every and (multipliers != "free" or problem == "general"):
    raise ConfigError("split_every needs free multipliers on a binary or multiclass victim.")
  if split_every and not split_eps > 0:
    raise ConfigError(f"split_eps must be > 0, got {split_eps!r}.")
  if lam_init not in LAM_INITS:
    raise ConfigError(f"lam_init must be one of {LAM_INITS}, got {lam_init!r}.", "lam_init")
  if not (isinstance(lam_refit_every, int) and lam_refit_every >= 0):
    raise ConfigError(
      f"lam_refit_every must be an integer >= 0, got {lam_refit_every!r}.", "lam_refit_every"
    )
  if (lam_init == "fit" or lam_refit_every) and not (
    isinstance(apply_fn, equations.OneHidden) and problem == "binary" and multipliers == "free"
  ):
    raise ConfigError(
      "lam_init='fit' and lam_refit_every fit the multipliers in closed form: they need a "
      "binary network of one dense hidden layer (equations.one_hidden) and free multipliers.",
      "lam_init" if lam_init == "fit" else "lam_refit_every",
    )
  counted = bool(split_every or lam_refit_every)  # the state keeps a step count
  base = optim.base_optimizer(optimizer, momentum)
  if basis is not None:
    if input_shape is None:
      raise ConfigError("kkt_attack with a basis needs input_shape.", "input_shape")
    basis = span.check_basis(basis, input_shape)
    dual = span.check_basis(dual, input_shape)

  def images(c, target: Target):
    """The candidates as inputs: decoded from coefficients where the attack has a span."""
    return c if target.span is None else span.decode(c, target.span.basis, input_shape)

  def activation(hp):
    if derivative == "exact":
      return None  # the network's own
    return functools.partial(surrogate_relu, alpha=hp["alpha"])

  def loss_fn(xl, hp: HParams, target: Target):
    x, lam = xl  # x: the network's inputs (coefficients where the attack has a span)
    act = activation(hp)
    if multipliers == "tied":
      stat, lam = equations.tied_stationarity(apply_fn, target, x, act, normalize)
      lam_pen = jnp.zeros((), stat.dtype)
    else:
      stat = equations.stationarity(
        apply_fn, problem, target.params, x, lam, target.labels, act, normalize, target.reference
      )
      lam_pen = (
        priors.lambda_prior(lam, hp["lam_min"])
        if problem != "general"
        else jnp.zeros((), stat.dtype)
      )
    pixels = images(x, target)
    prior = priors.box_prior(pixels, target.box_lo, target.box_hi)
    loss = w_stat * stat + w_lam * lam_pen + w_prior * prior
    aux = {"stat": stat, "lam_pen": lam_pen, "prior": prior, "lam": lam}
    if w_tv:
      aux["tv"] = priors.tv_prior(pixels)
      loss = loss + w_tv * aux["tv"]
    return loss, aux

  def init(key, hp, target, x0):
    m = target.labels.shape[0]
    if target.span is not None:
      x0 = span.encode(x0, target.span.encoder())
    if problem == "general":
      lam = jax.random.uniform(key, (m, num_outputs), x0.dtype, -1.0, 1.0)
    elif lam_init == "fit":
      lam = fitted(x0, hp, target)
    else:
      lam = jax.random.uniform(key, (m,), x0.dtype)
    if counted:
      return SplitKKTState(x0, lam, base.init((x0, lam)), jnp.zeros((), jnp.int32))
    return KKTState(x0, lam, base.init((x0, lam)))

  def fitted(x, hp, target):
    """The multipliers that fit the reference best with the candidates ``x`` held."""
    lam = equations.fitted_multipliers(
      apply_fn, target.params, target.fit, x, target.labels, activation(hp), normalize
    )
    return lam.astype(x.dtype)

  def split_step(state, hp, target):
    """The split of :mod:`recon_jax.attacks.splitting` at the current candidates."""
    act = activation(hp)
    grads = equations.kkt_sum(
      apply_fn, problem, target.params, state.x, state.lam, target.labels, act, normalize
    )
    residual = jax.tree_util.tree_map(jnp.subtract, target.fit, grads)
    mu, v = splitting.split_scores(
      apply_fn,
      problem,
      target.params,
      residual,
      state.x,
      state.lam,
      target.labels,
      act,
    )
    x, lam, moved = splitting.split(state.x, state.lam, target.labels, mu, v, split_eps)
    # The freed slot's own term leaves the sum at first order: keep the split only where
    # the whole objective fell.
    better = loss_fn((x, lam), hp, target)[0] < loss_fn((state.x, state.lam), hp, target)[0]
    moved = moved & better
    x, lam = jnp.where(better, x, state.x), jnp.where(better, lam, state.lam)
    opt_state = splitting.reset_rows(state.opt_state, moved, {x.shape, lam.shape})
    return state._replace(x=x, lam=lam, opt_state=opt_state), jnp.any(moved)

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
    lam = tied_lam if multipliers == "tied" else optim.scaled(state.lam, ul, hp["lr_lam"])
    metrics = {"loss": loss, "stat_rel": equations.relative(aux["stat"], target), **aux}
    new = state._replace(x=x, lam=lam, opt_state=opt_state)
    if counted:
      new = new._replace(count=state.count + 1)
    if lam_refit_every:
      new = new._replace(
        lam=jax.lax.cond(
          new.count % lam_refit_every == 0,
          lambda s: fitted(s.x, hp, target),
          lambda s: s.lam,
          new,
        )
      )
    if split_every:
      new, did = jax.lax.cond(
        new.count % split_every == 0,
        lambda s: split_step(s, hp, target),
        lambda s: (s, jnp.zeros((), bool)),
        new,
      )
      metrics["split"] = did.astype(loss.dtype)
    return new, metrics

  def candidates(state: KKTState):
    w = state.lam if state.lam.ndim == 1 else jnp.linalg.norm(state.lam, axis=-1)
    x = state.x if basis is None else span.decode(state.x, basis, input_shape)
    return x, w

  def shared(state, hp, target):
    """The whole KKT sum of ``state``: every candidate's problem subtracts its own term."""
    return equations.kkt_sum(
      apply_fn, problem, target.params, state.x, state.lam, target.labels, activation(hp), normalize
    )

  def one(state, hp, target, total, index):
    """Candidate ``index`` alone: the held candidates' part of the sum, a constant, moves
    into the reference, so the one-candidate residual is the whole state's."""
    m = state.x.shape[0]

    def row(a):
      return jax.lax.dynamic_slice_in_dim(a, index, 1, axis=0)

    # Its multiplier scaled so that the one-candidate sum (1/1 under 'mean') is its term.
    lam = row(state.lam) / m if normalize == "mean" else row(state.lam)
    x, labels = row(state.x), row(target.labels)
    own = equations.kkt_sum(
      apply_fn, problem, target.params, x, lam, labels, activation(hp), normalize
    )
    held = jax.tree_util.tree_map(lambda f, t, o: f - (t - o), target.fit, total, own)
    shapes = {state.x.shape, state.lam.shape}
    opt_state = jax.tree_util.tree_map(
      lambda a: row(a) if hasattr(a, "shape") and tuple(a.shape) in shapes else a,
      state.opt_state,
    )
    return (
      state._replace(x=x, lam=lam, opt_state=opt_state),
      target._replace(labels=labels, reference=held),
    )

  prepare = None
  if basis is not None:
    prepare = functools.partial(span.reduce_target, basis=basis, dual=dual)
  name = f"kkt[{problem}]" if basis is None else f"kkt[{problem}, span {basis.shape[1]}]"
  # Free multipliers meet only in the sum; tied ones share their scale, and a split moves
  # two slots at once: those re-run the whole state.
  alone = None if multipliers == "tied" or split_every else Alone(shared, one)
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
    optimizer=common.optimizer,
    w_lam=o.w_lam,
    w_prior=common.w_prior,
    w_tv=float(o.w_tv),
    normalize=common.normalize,
    num_outputs=setup.num_outputs,
    derivative=derivative,
    multipliers=o.multipliers,
    basis=basis,
    dual=dual,
    input_shape=setup.input_shape,
    split_every=int(o.split_every),
    split_eps=float(o.split_eps),
    lam_init=o.lam_init,
    lam_refit_every=int(o.lam_refit_every),
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
