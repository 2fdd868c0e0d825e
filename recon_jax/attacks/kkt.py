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

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recon_jax import optim, priors
from recon_jax.errors import ConfigError
from recon_jax.losses import PROBLEMS, margins, tree_sq_norm
from recon_jax.models import surrogate_relu
from recon_jax.types import Attack, HParams, Target


class KKTState(NamedTuple):
  x: jax.Array  # [m, *input_shape] candidates
  lam: jax.Array  # [m] multipliers ([m, C] for 'general')
  opt_state: optax.OptState


def weighted_output(apply_fn, problem: str, params, x, lam, labels, act, normalize="mean"):
  """``(1/m) sum_i lambda_i g_i(params; x_i)``: its gradient in params is the KKT sum."""
  g = margins(problem, apply_fn(params, x, act), labels)
  total = jnp.sum(lam * g)
  return total / x.shape[0] if normalize == "mean" else total


def stationarity(apply_fn, problem, params, x, lam, labels, act, normalize="mean", reference=None):
  """``||reference - grad_theta weighted_output(params)||^2`` summed over parameter leaves.

  ``reference`` defaults to ``params`` (theta*); a known-initialisation attack
  passes ``theta* - theta_0``.
  """
  grads = jax.grad(weighted_output, argnums=2)(
    apply_fn, problem, params, x, lam, labels, act, normalize
  )
  ref = params if reference is None else reference
  residual = jax.tree_util.tree_map(jnp.subtract, ref, grads)
  return tree_sq_norm(residual)


def kkt_attack(
  apply_fn,
  problem: str = "binary",
  *,
  optimizer: str = "sgd",
  momentum: float = 0.9,
  w_stat: float = 1.0,
  w_lam: float = 1.0,
  w_prior: float = 1.0,
  normalize: str = "mean",
  num_outputs: int = 1,
) -> Attack:
  """The KKT (binary/multiclass) and DecoReco (general) attack.

  Args:
    apply_fn: ``apply_fn(params, x, act) -> [m, C]``, the victim network with a
      pluggable activation (see :func:`recon_jax.models.make_apply_fn`).
    problem: 'binary', 'multiclass' or 'general'.
    optimizer: 'sgd' (momentum SGD, as the reference) or 'adam'.
    momentum: SGD momentum.
    w_stat, w_lam, w_prior: weights alpha_1..3 of eq. (8).
    normalize: 'mean' (1/m, reference code) or 'sum' (paper eq. 6).
    num_outputs: C, the width of lambda for 'general'.

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
  base = optim.base_optimizer(optimizer, momentum)

  def loss_fn(xl, hp: HParams, target: Target):
    x, lam = xl
    act = functools.partial(surrogate_relu, alpha=hp["alpha"])
    stat = stationarity(
      apply_fn, problem, target.params, x, lam, target.labels, act, normalize, target.reference
    )
    lam_pen = (
      priors.lambda_prior(lam, hp["lam_min"]) if problem != "general" else jnp.zeros((), stat.dtype)
    )
    prior = priors.box_prior(x, target.box_lo, target.box_hi)
    loss = w_stat * stat + w_lam * lam_pen + w_prior * prior
    return loss, {"stat": stat, "lam_pen": lam_pen, "prior": prior}

  def init(key, hp, target, x0):
    m = target.labels.shape[0]
    if problem == "general":
      lam = jax.random.uniform(key, (m, num_outputs), x0.dtype, -1.0, 1.0)
    else:
      lam = jax.random.uniform(key, (m,), x0.dtype)
    return KKTState(x0, lam, base.init((x0, lam)))

  def step(state: KKTState, hp, target):
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)((state.x, state.lam), hp, target)
    updates, opt_state = base.update(grads, state.opt_state, (state.x, state.lam))
    # The base optimiser runs at rate 1; the per-restart rates scale its updates
    # (exact for SGD-momentum and Adam), so rates vmap as ordinary arrays.
    ux, ul = updates
    x = optim.scaled(state.x, ux, hp["lr_x"])
    lam = optim.scaled(state.lam, ul, hp["lr_lam"])
    norm = tree_sq_norm(target.fit)
    return KKTState(x, lam, opt_state), {"loss": loss, "stat_rel": aux["stat"] / norm, **aux}

  def candidates(state: KKTState):
    w = state.lam if state.lam.ndim == 1 else jnp.linalg.norm(state.lam, axis=-1)
    return state.x, w

  return Attack(init, step, candidates, name=f"kkt[{problem}]")


def check_hparams(hparams: dict) -> None:
  """Raises ValueError naming the first hyperparameter outside its domain."""
  for name in ("lr_x", "lr_lam", "alpha"):
    if name in hparams and np.any(np.asarray(hparams[name]) <= 0):
      raise ConfigError(f"{name} must be > 0, got {float(np.min(hparams[name])):g}.")
  for name in ("lam_min", "sigma_x"):
    if name in hparams and np.any(np.asarray(hparams[name]) < 0):
      raise ConfigError(f"{name} must be >= 0, got {float(np.min(hparams[name])):g}.")
