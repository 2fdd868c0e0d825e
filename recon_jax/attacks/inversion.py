"""Model inversion baseline (Haim et al. 2022, §5.4): maximise y * Phi(x) from random starts.

Half the candidates maximise the output (label +1), half minimise it (-1),
with the same box prior as the KKT attack.  It finds class representatives,
not training samples; the report shows it beside the attack for that reason.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from recon_jax import optim, priors
from recon_jax.attacks.spec import AttackSpec, Setup, register, require
from recon_jax.engine import sweep
from recon_jax.types import Attack


class InversionState(NamedTuple):
  x: jax.Array  # [m, *input_shape]
  opt_state: optax.OptState


def inversion_attack(apply_fn, *, w_prior: float = 1.0, momentum: float = 0.9) -> Attack:
  """Model inversion as an Attack; hparams: ``lr_x`` (and ``sigma_x`` for the init)."""
  base = optim.base_optimizer("sgd", momentum)

  def loss_fn(x, target):
    out = apply_fn(target.params, x, None)[:, 0]
    margin = target.labels * out
    prior = priors.box_prior(x, target.box_lo, target.box_hi)
    return -jnp.mean(margin) + w_prior * prior, {"margin": jnp.mean(margin), "prior": prior}

  def init(key, hp, target, x0):
    del key, hp, target
    return InversionState(x0, base.init(x0))

  def step(state, hp, target):
    (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(state.x, target)
    upd, opt_state = base.update(g, state.opt_state, state.x)
    x = optim.scaled(state.x, upd, hp["lr_x"])
    return InversionState(x, opt_state), {"loss": loss, **aux}

  def candidates(state):
    return state.x, jnp.ones(state.x.shape[0], state.x.dtype)

  return Attack(init, step, candidates, name="inversion")


def _check(options, setup: Setup) -> None:
  require(
    setup.problem == "binary", "attack=inversion is defined for binary victims only.", "attack"
  )


SPEC = register(
  AttackSpec(
    name="inversion",
    build=lambda options, setup: inversion_attack(setup.apply_fn, w_prior=setup.common.w_prior),
    check=_check,
    hparams=("lr_x", "sigma_x"),
    paper_ranges=sweep.INVERSION_RANGES,  # Haim et al.'s App. B.2 for model inversion
    doc="model inversion baseline (Haim et al. §5.4)",
  )
)
