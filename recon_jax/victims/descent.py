"""Victim training by gradient descent: pure steps in ``lax.scan`` chunks, host logging between.

The energy minimised is :func:`recon_jax.core.losses.energy` (mean per-sample loss
plus ``wd/2 ||theta||^2``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, NamedTuple, Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax

from recon_jax.core import losses
from recon_jax.core.losses import error_rate, per_sample_loss
from recon_jax.errors import ConfigError, Error


class TrainError(Error, RuntimeError):
  """Training failed (e.g. NaN); ``params`` holds the last finite parameters."""

  def __init__(self, msg, params=None, history=None):
    super().__init__(msg)
    self.params = params
    self.history = history


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  loss: str = "logistic"
  lr: float = 0.01
  epochs: int = 10_000
  weight_decay: float = 0.0
  momentum: float = 0.0
  optimizer: str = "sgd"  # sgd (gradient descent, with momentum if set) | adam
  batch_size: Optional[int] = None  # None: full batch GD
  chunk: int = 1000  # steps per compiled scan between host logs
  loss_threshold: float = 0.0  # stop once train loss <= threshold
  # Normalised GD: the step is lr / loss ('loss') or lr / ||grad|| ('grad'), so
  # training escapes a small initialisation quickly and keeps moving once the
  # loss is tiny; the parameters grow far from their initialisation, towards
  # the KKT direction of margin maximisation.
  adaptive: str = "none"  # none | loss (lr / loss) | grad (lr / ||grad||)
  loss_floor: float = 1e-30
  seed: int = 0


class TrainState(NamedTuple):
  params: optax.Params
  opt_state: optax.OptState
  step: jax.Array  # int32 scalar


OPTIMIZERS = ("sgd", "adam")


def held_out_record(loss: str, test_err) -> dict:
  """How the victim does on held-out images, from :func:`recon_jax.core.losses.error_rate`
  there: ``test_accuracy`` for a classifier, ``test_mse`` for squared error."""
  return (
    {"test_mse": float(test_err)} if loss == "mse" else {"test_accuracy": 1.0 - float(test_err)}
  )


def make_optimizer(cfg: TrainConfig):
  """Gradient descent (with momentum when set) or Adam, at rate ``lr``.

  Every gradient step adds outer products with the inputs to a dense first layer,
  so plain and momentum SGD keep the first layer's change in the span of the
  training inputs; Adam's per-entry scaling does not (:mod:`recon_jax.attacks.span`).
  """
  if cfg.optimizer == "adam":
    return optax.adam(cfg.lr)
  return optax.sgd(cfg.lr, momentum=cfg.momentum or None)


def make_train_chunk(apply_fn, cfg: TrainConfig):
  """Returns ``(tx, chunk)``: jitted ``chunk(state, x, y, key) -> (state, losses[chunk])``."""
  energy = losses.energy(apply_fn, cfg.loss, cfg.weight_decay)
  tx = make_optimizer(cfg)

  def chunk(state, x, y, key, length):
    def batch(k):
      if not cfg.batch_size or cfg.batch_size >= x.shape[0]:
        return x, y
      idx = jax.random.choice(k, x.shape[0], (cfg.batch_size,), replace=False)
      return x[idx], y[idx]

    def step(state: TrainState, k):
      loss, grads = jax.value_and_grad(energy)(state.params, *batch(k))
      if cfg.adaptive != "none":
        denom = loss if cfg.adaptive == "loss" else jnp.sqrt(losses.tree_sq_norm(grads))
        scale = 1.0 / jnp.maximum(denom, cfg.loss_floor)
        grads = jax.tree_util.tree_map(lambda g: g * scale.astype(g.dtype), grads)
      updates, opt_state = tx.update(grads, state.opt_state, state.params)
      return TrainState(optax.apply_updates(state.params, updates), opt_state, state.step + 1), loss

    return jax.lax.scan(step, state, jax.random.split(key, length))

  return tx, jax.jit(chunk, static_argnames="length")


def init_state(params, cfg: TrainConfig) -> TrainState:
  """A fresh :class:`TrainState` (step 0) for ``params``."""
  return TrainState(params, make_optimizer(cfg).init(params), jnp.zeros([], jnp.int32))


def _is_int(v) -> bool:
  return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def check_config(cfg: TrainConfig) -> None:
  """Raises ConfigError naming the first field of ``cfg`` that training cannot run with."""
  losses.check_loss(cfg.loss)
  if not (math.isfinite(cfg.lr) and cfg.lr > 0):
    raise ConfigError(f"lr must be a finite number > 0, got {cfg.lr}.")
  if not _is_int(cfg.epochs) or cfg.epochs <= 0:
    raise ConfigError(f"epochs must be an integer > 0, got {cfg.epochs!r}.")
  if not _is_int(cfg.chunk) or cfg.chunk <= 0:
    raise ConfigError(f"chunk must be an integer > 0, got {cfg.chunk!r}.")
  if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
    raise ConfigError(f"weight_decay must be a finite number >= 0, got {cfg.weight_decay}.")
  if not (math.isfinite(cfg.momentum) and 0 <= cfg.momentum < 1):
    raise ConfigError(f"momentum must be in [0, 1), got {cfg.momentum}.")
  if cfg.optimizer not in OPTIMIZERS:
    raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {cfg.optimizer!r}.")
  if cfg.optimizer == "adam" and cfg.momentum:
    raise ConfigError("momentum is a setting of optimizer=sgd; Adam keeps its own moments.")
  if cfg.batch_size is not None and (not _is_int(cfg.batch_size) or cfg.batch_size < 1):
    raise ConfigError(
      f"batch_size must be an integer >= 1 (or unset: full batch), got {cfg.batch_size!r}."
    )
  if not cfg.loss_threshold >= 0:  # also refuses NaN
    raise ConfigError(f"loss_threshold must be >= 0, got {cfg.loss_threshold}.")
  if cfg.adaptive not in ("none", "loss", "grad"):
    raise ConfigError(f"adaptive must be none, loss or grad, got {cfg.adaptive!r}.")


def train(
  apply_fn,
  params,
  x,
  y,
  cfg: TrainConfig,
  *,
  x_test=None,
  y_test=None,
  log_every_chunk: bool = True,
  callback: Optional[Callable] = None,
  state: Optional[TrainState] = None,
  history: Optional[list] = None,
):
  """Trains ``params`` on ``(x, y)``; returns ``(params, history)``.

  Runs ``cfg.epochs`` steps in compiled chunks of ``cfg.chunk`` steps; between
  chunks the host logs epoch, loss, train error and test accuracy, checks for
  NaN and the loss threshold, and calls ``callback(state, record)`` (e.g. to
  save the state).  Passing a saved ``state`` (and its ``history``) resumes:
  chunk c always uses ``fold_in(PRNGKey(seed), c)``, so a resumed run takes
  exactly the steps of an uninterrupted one.

  Raises:
    TrainError: when the loss or parameters become non-finite; ``.params``
      holds the last finite parameters (end of the previous chunk).
  """
  check_config(cfg)
  _, chunk_fn = make_train_chunk(apply_fn, cfg)
  if state is None:
    state = init_state(params, cfg)
  x, y = jnp.asarray(x), jnp.asarray(y)
  eval_fn = jax.jit(
    lambda p, xx, yy: (
      jnp.mean(per_sample_loss(cfg.loss, apply_fn(p, xx), yy)),
      error_rate(cfg.loss, apply_fn(p, xx), yy),
    )
  )
  base_key = jax.random.PRNGKey(cfg.seed)
  history = list(history or [])
  t0 = time.time()
  done = start = int(state.step)
  if history and history[-1]["loss"] <= cfg.loss_threshold:
    return state.params, history
  while done < cfg.epochs:
    c = done // cfg.chunk
    length = min(cfg.chunk, cfg.epochs - done)
    new_state, losses = chunk_fn(state, x, y, jax.random.fold_in(base_key, c), length=length)
    losses = np.asarray(losses)
    finite = bool(np.all(np.isfinite(losses))) and all(
      bool(jnp.all(jnp.isfinite(a))) for a in jax.tree_util.tree_leaves(new_state.params)
    )
    if not finite:
      raise TrainError(
        f"training diverged (non-finite loss) in steps {done}-{done + length}; "
        "lower the learning rate (lr). The last finite parameters were kept.",
        state.params,
        history,
      )
    state = new_state
    done += length
    train_loss, train_err = (float(v) for v in eval_fn(state.params, x, y))
    rec = {
      "epoch": int(state.step),
      "loss": train_loss,
      "train_error": train_err,
      "time_s": time.time() - t0,
    }
    if x_test is not None:
      _, test_err = eval_fn(state.params, jnp.asarray(x_test), jnp.asarray(y_test))
      rec.update(held_out_record(cfg.loss, test_err))
    history.append(rec)
    if log_every_chunk:
      left = (cfg.epochs - done) * (time.time() - t0) / max(done - start, 1)
      logging.info(
        "train: %s (about %.0fs left)",
        " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()),
        left,
      )
    if callback is not None:
      callback(state, rec)
    if train_loss <= cfg.loss_threshold:
      break
  return state.params, history
