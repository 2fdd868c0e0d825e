"""A restart's steps under the freeze-on-divergence rule, the one step of every run.

:func:`scan_one` runs ``attack.step`` in ``lax.scan`` on a :class:`RestartState`: a step
whose loss or state turns non-finite leaves the state at its last finite value and flags the
restart ``diverged`` (the step it happened at is kept), so a diverging restart never spoils
the numbers it had.  The engine's loop (:mod:`recon_jax.engine.loop`) batches it over
restarts and chunks; the stability score (:mod:`recon_jax.attacker.stability`) re-runs an
attack's candidates through it.  It lives here, below both, so that each uses the same step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from recon_jax.types import Attack, HParams, Target, float_dtype


class RestartState(NamedTuple):
  inner: Any  # the attack's own state
  loss: jax.Array  # last finite loss, scalar
  diverged: jax.Array  # bool scalar: frozen after a non-finite step
  diverged_at: jax.Array  # int32 step of divergence, -1 if none
  step: jax.Array  # int32 loop steps run (frozen restarts count too)


def all_finite(tree) -> jax.Array:
  """Whether every inexact leaf of ``tree`` is finite (a scalar bool; True for no leaf)."""
  leaves = [
    jnp.all(jnp.isfinite(a))
    for a in jax.tree_util.tree_leaves(tree)
    if jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact)
  ]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def tree_where(cond, a, b):
  """``a`` where ``cond``, else ``b``, leaf by leaf."""
  return jax.tree_util.tree_map(lambda u, v: jnp.where(cond, u, v), a, b)


def start(inner) -> RestartState:
  """A :class:`RestartState` that has run no step, around the attack's state ``inner``."""
  return RestartState(
    inner,
    jnp.asarray(jnp.inf, float_dtype()),
    jnp.asarray(False),
    jnp.asarray(-1, jnp.int32),
    jnp.asarray(0, jnp.int32),
  )


def scan_one(attack: Attack, state: RestartState, hparams: HParams, target: Target, num_steps: int):
  """``num_steps`` steps of one restart in ``lax.scan``; returns (state, last metrics)."""

  def body(s: RestartState, _):
    inner, metrics = attack.step(s.inner, hparams, target)
    loss = metrics["loss"]
    ok = jnp.isfinite(loss) & all_finite(inner)
    frozen = s.diverged | ~ok
    new = RestartState(
      inner=tree_where(frozen, s.inner, inner),
      loss=jnp.where(frozen, s.loss, loss.astype(s.loss.dtype)),
      diverged=frozen,
      diverged_at=jnp.where(s.diverged, s.diverged_at, jnp.where(ok, -1, s.step)).astype(jnp.int32),
      step=s.step + 1,
    )
    return new, metrics

  state, metrics = jax.lax.scan(body, state, None, length=num_steps)
  last = jax.tree_util.tree_map(lambda a: a[-1], metrics)
  return state, last
