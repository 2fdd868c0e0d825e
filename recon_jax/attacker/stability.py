"""The stability score: does a candidate come back after a perturbation and T attack steps?

``1 - ||x_i(T) - x_i|| / ||x_i(0) - x_i||`` with ``x_i(0) = x_i + eps``: a real training
sample is a point the attack's dynamics return to.  An attacker-side score (no ground
truth), beside the others of :mod:`recon_jax.attacker.selection`.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from recon_jax.core import stepping
from recon_jax.core.losses import batched_map
from recon_jax.errors import ConfigError
from recon_jax.types import Attack, HParams, Target, prepared

# Which parts of the attack's state the re-run may move (see stability_score).
STABILITY_FREE = ("x", "x_lam", "all")


def _check_state(state) -> None:
  if not (hasattr(state, "_replace") and hasattr(state, "x")):
    raise ConfigError(
      f"state must be a NamedTuple with a field x of candidates [m, ...] "
      f"(e.g. KKTState), got {type(state).__name__}."
    )


def _check_stability_args(state, steps, noise_scale, free) -> None:
  _check_state(state)
  if int(steps) != steps or int(steps) <= 0:
    raise ConfigError(f"steps must be a positive integer, got {steps}.")
  if not float(noise_scale) > 0.0:
    raise ConfigError(f"noise_scale must be > 0, got {noise_scale}.")
  if free not in STABILITY_FREE:
    raise ConfigError(f"free must be one of {STABILITY_FREE}, got {free!r}.")


_STABILITY_STATIC = ("attack", "steps", "noise_scale", "free", "reset_optimizer")


def _kick(state, key, noise_scale):
  """The kick of every candidate of ``state`` drawn from ``key`` (only one row is used)."""
  x0 = state.x
  return noise_scale * jax.random.normal(key, x0.shape, x0.dtype)


def _zeroed(start, state, reset_optimizer):
  if reset_optimizer and hasattr(state, "opt_state"):
    # Zeroed optax sgd/adam buffers (trace, mu, nu, count) are their init state.
    start = start._replace(opt_state=jax.tree_util.tree_map(jnp.zeros_like, state.opt_state))
  return start


def _score(run, d0, moved):
  """``1 - ||x_i(T) - x_i|| / ||eps||``, NaN where the re-run diverged."""
  d1 = jnp.linalg.norm(moved.reshape(-1))
  return jnp.where(run.diverged, jnp.nan, 1.0 - d1 / d0)


def _whole(attack, state, hparams, target, index, key, steps, noise_scale, free, reset_optimizer):
  """The re-run of the whole state (``target`` prepared): every candidate steps, those not
  ``free`` are put back after each step."""
  x0 = state.x
  m = x0.shape[0]
  sel = jnp.arange(m) == index
  selx = sel.reshape((m,) + (1,) * (x0.ndim - 1))
  noise = jnp.where(selx, _kick(state, key, noise_scale), jnp.zeros_like(x0))
  x_pert = x0 + noise
  start = _zeroed(state._replace(x=x_pert), state, reset_optimizer)
  lam0 = getattr(state, "lam", None)

  def held(s, hp, t):
    new, metrics = attack.step(s, hp, t)
    if free != "all":
      new = new._replace(x=jnp.where(selx, new.x, x_pert))
      if lam0 is not None:
        sell = sel.reshape((m,) + (1,) * (lam0.ndim - 1))
        keep = sell if free == "x_lam" else jnp.zeros_like(sell)
        new = new._replace(lam=jnp.where(keep, new.lam, lam0))
    return new, metrics

  # the engine's step: a re-run that turns non-finite stops there, flagged, and scores NaN
  run, _ = stepping.scan_one(
    attack._replace(step=held), stepping.start(start), hparams, target, steps
  )
  d0 = jnp.linalg.norm(jnp.sum(noise, axis=0).reshape(-1))
  return _score(run, d0, jnp.sum(jnp.where(selx, run.inner.x - x0, 0.0), axis=0))


def _alone(attack, state, hparams, target, total, index, key, steps, noise_scale, reset_optimizer):
  """The same re-run for ``free='x'`` with the kicked candidate alone (``attack.alone``):
  the others are held, so their part of the sum is a constant (``total``: the attack's
  ``alone.shared`` of ``state``); the kick is the whole re-run's row ``index``."""
  one_state, one_target = attack.alone.one(state, hparams, target, total, index)
  x0 = one_state.x
  noise = jax.lax.dynamic_slice_in_dim(_kick(state, key, noise_scale), index, 1, axis=0)
  start = _zeroed(one_state._replace(x=x0 + noise), one_state, reset_optimizer)
  lam0 = getattr(one_state, "lam", None)

  def held(s, hp, t):
    new, metrics = attack.step(s, hp, t)
    return (new if lam0 is None else new._replace(lam=lam0)), metrics

  run, _ = stepping.scan_one(
    attack._replace(step=held), stepping.start(start), hparams, one_target, steps
  )
  return _score(run, jnp.linalg.norm(noise.reshape(-1)), run.inner.x - x0)


def alone_applies(attack: Attack, free: str) -> bool:
  """Whether the re-run of ``free`` steps the kicked candidate alone (``attack.alone``)."""
  return free == "x" and getattr(attack, "alone", None) is not None


def shared(attack: Attack, state, hparams, target, free: str):
  """What the candidates' re-runs of ``state`` share (``target`` prepared): the attack's
  ``alone.shared`` where the kicked candidate steps alone, else None."""
  return attack.alone.shared(state, hparams, target) if alone_applies(attack, free) else None


def rerun(
  attack, state, hparams, target, total, index, key, steps, noise_scale, free, reset_optimizer
):
  """One candidate's stability (``target`` prepared, ``total`` from :func:`shared`): alone
  where :func:`alone_applies`, else the whole state re-run."""
  if alone_applies(attack, free):
    return _alone(
      attack, state, hparams, target, total, index, key, steps, noise_scale, reset_optimizer
    )
  return _whole(
    attack, state, hparams, target, index, key, steps, noise_scale, free, reset_optimizer
  )


def _stability(
  attack: Attack, state, hparams, target, index, key, steps, noise_scale, free, reset_optimizer
):
  target = prepared(attack, target)
  total = shared(attack, state, hparams, target, free)
  return rerun(
    attack, state, hparams, target, total, index, key, steps, noise_scale, free, reset_optimizer
  )


_stability_jit = jax.jit(_stability, static_argnames=_STABILITY_STATIC)


def stability_score(
  attack: Attack,
  state,
  hparams: HParams,
  target: Target,
  index,
  key,
  *,
  steps: int = 30,
  noise_scale: float = 0.05,
  free: str = "x",
  reset_optimizer: bool = True,
) -> jax.Array:
  """Does candidate ``index`` come back after a kick?  ``1 - ||x_i(T) - x_i|| / ||eps||``.

  ``x_i(0) = x_i + eps``, ``eps ~ N(0, noise_scale^2 I)`` per entry of the attack's
  state ``x`` (an absolute scale: per input, or per coefficient for an attack in the
  first layer's span, i.e. a per-input kick projected onto the span), then T = ``steps`` steps of
  ``attack.step`` through the engine's step (:func:`recon_jax.core.stepping.scan_one`: a
  re-run that turns non-finite stops there, and scores NaN).  What moves (``free``):

  * 'x' (default): only ``x_i``; every other candidate and every multiplier is
    held where the attack left it.  At an isolated KKT point the kick is
    undone (score -> 1).  The multipliers are held because for a homogeneous
    network ``lambda_i x_i`` has a flat scale direction that a free ``lambda_i``
    would let the candidate slide along;
  * 'x_lam': ``x_i`` and ``lambda_i``;
  * 'all': the whole attack (others may absorb the kick).

  With 'x' and an attack that says how (its ``alone``, :class:`recon_jax.types.Alone`: the
  KKT attack with free multipliers and no splitting), the kicked candidate steps alone
  against the held ones' part of the sum, computed once: the same steps (to rounding) at the
  cost of one candidate, not m.

  Score 1: the candidate returns exactly; 0: it stays where it was kicked (a
  flat region); < 0: it drifts away (not a stationary point).  The optimiser
  buffers are re-initialised (zeroed) unless ``reset_optimizer=False``.  The
  attack's own learning rates are used: if a few dozen steps do not move the
  candidates, pass ``hparams`` with a larger ``lr_x``.

  Args:
    attack: the attack whose ``step`` is re-run.
    state: one restart's attack state, a NamedTuple with field ``x`` [m, ...]
      (and ``lam``, ``opt_state`` where present, as :class:`KKTState`).
    hparams: that restart's hyperparameters (scalars).
    target: theta*, labels, box.
    index: the candidate (int, may be traced).
    key: PRNG key of the kick.
    steps: T.
    noise_scale: per-entry standard deviation of the kick.
    free: 'x', 'x_lam' or 'all'.
    reset_optimizer: zero the optimiser state before the re-run.

  Returns:
    scalar score (NaN if the re-run diverged).
  """
  _check_stability_args(state, steps, noise_scale, free)
  return _stability_jit(
    attack,
    state,
    hparams,
    target,
    jnp.asarray(index),
    key,
    int(steps),
    float(noise_scale),
    free,
    bool(reset_optimizer),
  )


@functools.partial(jax.jit, static_argnames=_STABILITY_STATIC + ("batch_size",))
def _stability_batch(
  attack, state, hparams, target, idx, keys, steps, noise_scale, free, reset_optimizer, batch_size
):
  target = prepared(attack, target)
  total = shared(attack, state, hparams, target, free)  # once for every candidate

  def one(i, k):
    return rerun(
      attack, state, hparams, target, total, i, k, steps, noise_scale, free, reset_optimizer
    )

  return batched_map(one, (idx, keys), batch_size)


def stability_scores(
  attack: Attack,
  state,
  hparams: HParams,
  target: Target,
  key,
  *,
  indices=None,
  steps: int = 30,
  noise_scale: float = 0.05,
  free: str = "x",
  reset_optimizer: bool = True,
  batch_size: Optional[int] = None,
) -> jax.Array:
  """:func:`stability_score` of several candidates, vmapped (one kicked copy of the run each,
  or of the kicked candidate alone where :func:`alone_applies`, the held ones' sum shared).

  Candidate ``indices[k]`` (default all m) is kicked with
  ``jax.random.split(key, len(indices))[k]``.  Memory grows with the number of
  copies run at once; ``batch_size`` bounds it (``lax.map`` in batches).

  Returns:
    [len(indices)] scores.
  """
  _check_stability_args(state, steps, noise_scale, free)
  idx = jnp.arange(state.x.shape[0]) if indices is None else jnp.asarray(indices).reshape(-1)
  keys = jax.random.split(key, idx.shape[0])
  if batch_size is not None and int(batch_size) <= 0:
    raise ConfigError(f"batch_size must be > 0 or None, got {batch_size}.")
  return _stability_batch(
    attack,
    state,
    hparams,
    target,
    idx,
    keys,
    int(steps),
    float(noise_scale),
    free,
    bool(reset_optimizer),
    None if batch_size is None else int(batch_size),
  )
