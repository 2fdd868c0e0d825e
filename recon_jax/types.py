"""Types shared by every attack: what the attacker sees and what an attack is.

An attack sees only a :class:`Target` (the trained parameters, the labels it
assumes for its candidates, and the pixel box); only the evaluation touches
the training set.  An attack is a pair of pure functions over its own
NamedTuple state (the optax ``GradientTransformation`` pattern), driven by the
one shared loop in :mod:`recon_jax.engine.loop`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import jax

Params = Any  # a flax variable dict {'params': ...}
PRNGKey = jax.Array
HParams = Mapping[str, jax.Array]  # per-restart hyperparameters, scalars (vmapped to [R])

# A restart's scores in metrics.json's ``per_restart`` rows, beside its hyperparameters (so an
# attack may not name a hyperparameter so): the keys :class:`recon_jax.eval.metrics_json.Restart`
# declares, which a test holds equal to these.
RESTART_SCORES = (
  "restart",
  "diverged",
  "final_loss",
  "mean_ssim",
  "recovered_strict",
  "n_ssim_gt_0.4",
  "stat_rel",
)


def float_dtype():
  """float64 when x64 is enabled, else float32: the dtype every array of a run uses."""
  import jax.numpy as jnp

  return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


class Span(NamedTuple):
  """The coordinates of a coefficient-space attack (:mod:`recon_jax.attacks.span`)."""

  basis: jax.Array  # [d, k]: a candidate is x = basis @ c
  outside: jax.Array  # scalar: the reference's squared norm outside the span (a constant)
  dual: Any = None  # [d, k]: c = dual^T x for x in the span (None: basis, orthonormal)

  def encoder(self) -> jax.Array:
    """The [d, k] matrix that takes inputs to coefficients (``c = x @ encoder``)."""
    return self.basis if self.dual is None else self.dual


class Target(NamedTuple):
  """What the attacker observes and assumes.

  Attributes:
    params: trained parameters theta* (flax variable dict).
    labels: [m] labels assumed for the m candidates: +-1 floats (binary),
      integer classes (multiclass) or zeros (general/regression, unused).
    box_lo: lower pixel bound, broadcastable to one candidate ``[*input_shape]``
      (e.g. ``0 - mean`` after mean subtraction).
    box_hi: upper pixel bound, likewise.
    reference: what the KKT sum must reproduce; None means ``params``.  With a
      known initialisation theta_0 (Loo et al. 2024) it is ``theta* - theta_0``,
      while the gradients are taken at ``params`` (theta*, or a point between
      theta_0 and theta*: see :func:`recon_jax.victims.targets.known_init_target`).
    span: None, or the :class:`Span` of an attack that searches coefficients
      (``params`` and ``reference`` are then in its coordinates; only such an
      attack's ``prepare`` makes one).
    decay: the multiple of theta_0 training kept under coupled weight decay: the
      reference is then ``theta* - decay theta_0`` (1: no weight decay, or no theta_0).
  """

  params: Params
  labels: jax.Array
  box_lo: jax.Array
  box_hi: jax.Array
  reference: Any = None
  span: Any = None
  decay: float = 1.0

  @property
  def fit(self) -> Params:
    """The parameters the attack's stationarity residual is measured against."""
    return self.params if self.reference is None else self.reference


# init(key, hparams, target, x0) -> state ; x0: [m, *input_shape] from an x-initialisation.
InitFn = Callable[[PRNGKey, HParams, Target, jax.Array], Any]
# step(state, hparams, target) -> (state, metrics); metrics: dict of scalars, with 'loss'.
StepFn = Callable[[Any, HParams, Target], tuple[Any, dict]]
# candidates(state) -> (x [m, *input_shape], weights [m]) ; weights: lambda for KKT, ones otherwise.
CandidatesFn = Callable[[Any], tuple[jax.Array, jax.Array]]


class Alone(NamedTuple):
  """One candidate's problem with every other candidate and every multiplier held: what
  :func:`recon_jax.attacker.stability.stability_score` re-runs (default ``free='x'``) at the
  cost of one candidate instead of the whole state's m.

  ``shared(state, hparams, target) -> total``: what the candidates of ``state`` share (the
  KKT attack's whole sum), computed once per state.  ``one(state, hparams, target, total,
  index) -> (state1, target1)``: a state of the one candidate ``index`` (its multipliers
  and optimiser slots with it) and a target with the held candidates' part folded in, such
  that ``step`` on them moves that candidate as ``step`` on the whole state does while
  every other candidate and every multiplier is held (exact up to rounding).
  """

  shared: Callable
  one: Callable


class Attack(NamedTuple):
  """An attack: pure ``init`` and ``step`` plus a reader for its candidates.

  ``prepare`` (optional): ``target -> target`` computed once, before any step (outside
  the compiled loop), e.g. the target in the attack's own coordinates; ``init`` and
  ``step`` then see its result.  :func:`prepared` applies it.

  ``alone`` (optional): an :class:`Alone`, where the candidates interact only through a
  sum that a held candidate's part of is a constant (None: the stability score re-runs
  the whole state).

  The state is a NamedTuple.  An attack whose candidates can be kicked and re-run (the
  stability score, :mod:`recon_jax.attacker.stability`; its spec says so with ``rerunnable``)
  keeps them in its field ``x`` ([m, *input_shape], what ``candidates`` reads), its
  per-candidate multipliers, where it has them, in ``lam`` ([m] or [m, ...]), and its
  optimiser's state, where it has one, in ``opt_state`` (an optax state: zeros are its
  start).  Nothing else of the state is read outside the attack.
  """

  init: InitFn
  step: StepFn
  candidates: CandidatesFn
  name: str = "attack"
  prepare: Any = None
  alone: Any = None


def prepared(attack: Attack, target: Target) -> Target:
  """What ``attack``'s ``init`` and ``step`` take: ``attack.prepare(target)``, or ``target``."""
  return target if attack.prepare is None else attack.prepare(target)
