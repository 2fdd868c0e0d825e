"""A recipe trained into a victim: data -> theta_0 -> theta* -> checkpoint, with provenance.

One :class:`~recon_jax.victims.recipe.VictimConfig` says everything needed to rebuild a
victim (data sampling, architecture, training recipe): :func:`build` makes its network,
:func:`load_data` draws its data, :func:`fit` trains it from :func:`initial_params` (the
phases of :mod:`recon_jax.victims.descent`, then :func:`converge` when asked) and
:func:`save` / :func:`load` write and read its checkpoint with the recipe, training indices
and data fingerprint.  The recipe's hash keys the victim cache
(:mod:`recon_jax.victims.cache`), so the main job trains each victim once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, NamedTuple, Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data
from recon_jax.core import losses
from recon_jax.engine import resume
from recon_jax.errors import ConfigError
from recon_jax.eval import diagnostics
from recon_jax.io import checkpoint
from recon_jax.types import float_dtype
from recon_jax.victims import descent, models, recipe
from recon_jax.victims.recipe import VictimConfig, final_weight_decay


def stationarity(apply_fn, cfg: VictimConfig, params, x, y) -> dict:
  """How close theta* is to a stationary point of its last phase's energy, and to ReLU kinks.

  ``grad_norm_rel`` = ``||grad E(theta*)|| / ||theta*||`` with ``E`` = mean loss +
  ``wd/2 ||theta||^2`` (``wd``: :func:`final_weight_decay`); ``images_on_kink``:
  the fraction of training points on some first-layer ReLU's kink (ReLU
  victims; see :func:`recon_jax.eval.diagnostics.images_on_kink`).
  """
  energy = losses.energy(apply_fn, cfg.loss, final_weight_decay(cfg))

  @jax.jit  # one program, not one per operation of the network's gradient
  def rel_norm(params, x, y):
    g = jax.grad(energy)(params, x, y)
    norm = jnp.sqrt(losses.tree_sq_norm(params))
    return jnp.sqrt(losses.tree_sq_norm(g)) / jnp.maximum(norm, 1e-300)

  out = {
    "grad_norm_rel": float(rel_norm(params, x, y)),
    "final_weight_decay": final_weight_decay(cfg),
  }
  if cfg.activation == "relu" and "layer_0" in params.get("params", {}):
    out["images_on_kink"] = diagnostics.images_on_kink(params, x)
  if cfg.converge_tol > 0:
    out["stationary"] = bool(out["grad_norm_rel"] <= cfg.converge_tol)
  return out


CONVERGE_ROUNDS = 4
CONVERGE_CHUNK = 5000  # L-BFGS iterations of one compiled call of the convergence phase


def converge(apply_fn, cfg: VictimConfig, params, x, y):
  """The last phase: L-BFGS on the regularised energy to ``||grad E|| <= converge_tol ||theta||``.

  Returns ``(params, record)``; the record says how many iterations ran.
  """
  from recon_jax import implicit

  t0 = time.time()
  iters = rounds = 0
  # The tolerance is relative to ||theta||, which moves while L-BFGS runs: a few rounds,
  # each aiming at the tolerance of the norm it starts from.  One compiled call runs at
  # most CONVERGE_CHUNK iterations, so Ctrl-C and SIGTERM act between calls.
  while True:
    scale = float(jnp.sqrt(losses.tree_sq_norm(params)))
    budget = max(min(cfg.converge_maxiter - iters, CONVERGE_CHUNK), 1)
    params, info = implicit.train_to_convergence(
      apply_fn,
      params,
      x,
      y,
      cfg.loss,
      final_weight_decay(cfg),
      tol=cfg.converge_tol * scale,
      maxiter=budget,
      return_info=True,
    )
    iters += info["iters"]
    scale = float(jnp.sqrt(losses.tree_sq_norm(params)))
    reached = info["grad_norm"] <= cfg.converge_tol * scale
    if reached or iters >= cfg.converge_maxiter:
      break
    if info["iters"] < budget:  # it met the tolerance of the norm it started from: a round
      rounds += 1
      if rounds >= CONVERGE_ROUNDS:
        break
  out = apply_fn(params, x, None)
  rel = info["grad_norm"] / max(scale, 1e-300)
  rec = {
    "loss": float(jnp.mean(losses.per_sample_loss(cfg.loss, out, y))),
    "train_error": float(losses.error_rate(cfg.loss, out, y)),
    "lbfgs_iters": int(iters),
    "time_s": time.time() - t0,
    "phase": "converge",
  }
  logging.info(
    "converge: %d L-BFGS iterations, ||grad E|| %.3g (%.3g of ||theta||)",
    rec["lbfgs_iters"],
    info["grad_norm"],
    rel,
  )
  if not reached:
    logging.warning(
      "converge: the tolerance was not reached: ||grad E|| is %.3g of ||theta|| after %d "
      "L-BFGS iterations, above converge_tol=%g (converge_maxiter=%d); the victim is not at "
      "a stationary point",
      rel,
      iters,
      cfg.converge_tol,
      cfg.converge_maxiter,
    )
  return params, rec


def out_dim(cfg: VictimConfig, ds: data.Dataset) -> int:
  return losses.num_outputs(cfg.loss, ds.num_classes)


def module_for(cfg: VictimConfig, out_dim: int):
  """The network of recipe ``cfg`` with ``out_dim`` outputs (a flax module)."""
  return models.build_model(
    cfg.arch,
    out_dim=out_dim,
    widths=cfg.widths,
    bias=cfg.bias,
    init=cfg.init,
    init_std=cfg.init_std,
    first_layer_std=cfg.first_layer_std,
    activation=cfg.activation,
    init_gain=cfg.init_gain,
  )


def build(cfg: VictimConfig, ds: data.Dataset):
  """(module, apply_fn) for ``cfg`` on data ``ds``."""
  module = module_for(cfg, out_dim(cfg, ds))
  return module, models.make_apply_fn(module)


def load_data(cfg: VictimConfig, data_dir: Optional[str] = None) -> data.Dataset:
  return data.load_dataset(
    cfg.dataset,
    task=recipe.task_of(cfg),
    n_per_class=cfg.n_per_class,
    n_part_per_class=cfg.n_part_per_class,
    seed=cfg.data_seed,
    subtract_mean=cfg.subtract_mean,
    data_dir=data_dir,
  )


def phase_configs(cfg: VictimConfig, chunk: int = 2000) -> list:
  """The training phases: plain training, then the optional weight-decay phase."""
  tcfg = descent.TrainConfig(
    loss=cfg.loss,
    lr=cfg.lr,
    epochs=cfg.epochs,
    weight_decay=cfg.weight_decay,
    momentum=cfg.momentum,
    optimizer=cfg.optimizer,
    batch_size=cfg.batch_size,
    loss_threshold=cfg.loss_threshold,
    seed=cfg.seed,
    chunk=min(chunk, cfg.epochs),
    adaptive=cfg.adaptive,
  )
  phases = [tcfg]
  if cfg.wd_epochs > 0:
    phases.append(
      dataclasses.replace(
        tcfg,
        epochs=cfg.wd_epochs,
        weight_decay=cfg.wd,
        chunk=min(chunk, cfg.wd_epochs),
        loss_threshold=0.0,
        adaptive="none",
      )
    )
  return phases


class Trained(NamedTuple):
  """A trained victim: theta*, its training history and summary, and theta_0 (where the
  training started: what an attacker of a model fine-tuned from public weights knows)."""

  params: Any
  history: list
  summary: dict
  init: Any


def initial_params(cfg: VictimConfig, ds: data.Dataset, dtype=None):
  """theta_0: the initialisation of ``cfg.seed``, or with ``pretrain_epochs`` > 0 that
  initialisation trained first on the dataset's disjoint public pool (``ds.x_part``,
  never the training or held-out images) with the same loss, lr and optimizer.

  Deterministic: the same recipe and data give the same theta_0.
  """
  if dtype is None:
    dtype = float_dtype()
  module, apply_fn = build(cfg, ds)
  params = models.init_params(module, jax.random.PRNGKey(cfg.seed), ds.x_train.shape[1:], dtype)
  if not cfg.pretrain_epochs:
    return params
  if len(ds.x_part) == 0:
    raise ConfigError(
      "victim.pretrain_epochs needs the dataset's public pool (its partition), which is "
      "empty for this draw.",
      "victim.pretrain_epochs",
    )
  tcfg = dataclasses.replace(
    phase_configs(cfg)[0],
    epochs=cfg.pretrain_epochs,
    chunk=min(2000, cfg.pretrain_epochs),
    weight_decay=0.0,
    loss_threshold=0.0,
    batch_size=None,
    adaptive="none",
  )
  y = jnp.asarray(ds.y_part)
  if cfg.loss != "ce":
    y = y.astype(dtype)
  logging.info(
    "pretraining theta_0 for %d epochs on the %d images of the public pool",
    cfg.pretrain_epochs,
    len(ds.x_part),
  )
  try:
    params, _ = descent.train(
      apply_fn, params, jnp.asarray(ds.x_part, dtype), y, tcfg, log_every_chunk=False
    )
  except descent.TrainError as e:
    e.argument = "lr"
    raise
  return params


def fit(
  cfg: VictimConfig,
  ds: data.Dataset,
  dtype=None,
  *,
  chunk: int = 2000,
  on_chunk=None,
  resume_from: Optional[dict] = None,
):
  """Trains the victim (float64 when x64 is on) from :func:`initial_params`; returns
  :class:`Trained` ``(params, history, summary, init)``.

  Args:
    cfg: the victim.
    ds: its data.
    dtype: parameter dtype (default: float64 under x64, else float32).
    chunk: epochs per compiled chunk.
    on_chunk: ``on_chunk(phase, train_state, histories)`` after every chunk
      (the binary saves its state there).
    resume_from: ``{'phase', 'state', 'histories'}`` as saved by ``on_chunk``.
  """
  if dtype is None:
    dtype = float_dtype()
  _, apply_fn = build(cfg, ds)
  init = params = initial_params(cfg, ds, dtype)
  x, y = jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train)
  if cfg.loss != "ce":
    y = y.astype(dtype)
  xt, yt = ds.x_test, ds.y_test
  if len(xt) == 0:
    xt = yt = None
  phases = phase_configs(cfg, chunk)
  start, state, hists = 0, None, [[] for _ in phases]
  if resume_from is not None:
    start, state = int(resume_from["phase"]), resume_from["state"]
    hists = [list(h) for h in resume_from["histories"]]
    params = state.params
  for ph in range(start, len(phases)):

    def callback(st, rec, ph=ph):
      hists[ph].append(rec)
      if on_chunk is not None:
        on_chunk(ph, st, hists)

    prior = list(hists[ph])
    try:
      params, hists[ph] = descent.train(
        apply_fn,
        params,
        x,
        y,
        phases[ph],
        x_test=xt,
        y_test=yt,
        callback=callback,
        state=state if ph == start else None,
        history=prior,
      )
    except descent.TrainError as e:
      e.argument = "lr"  # this config's learning rate: the setting to lower
      raise
  history = list(hists[0])
  if len(phases) > 1:
    history += [dict(r, epoch=r["epoch"] + cfg.epochs, phase="weight_decay") for r in hists[1]]
  if cfg.converge_tol > 0:
    params, rec = converge(apply_fn, cfg, params, x, y)
    if xt is not None:  # as every other phase's record says it
      rec.update(
        descent.held_out_record(
          cfg.loss, losses.error_rate(cfg.loss, apply_fn(params, xt, None), yt)
        )
      )
    history.append(dict(rec, epoch=history[-1]["epoch"]))
  out = apply_fn(params, x, None)
  summary = dict(history[-1])
  summary["epochs_run"] = summary.pop("epoch")
  summary.update(stationarity(apply_fn, cfg, params, x, y))
  margins = np.asarray(losses.margins(cfg.loss, out, y))
  summary["margins"] = (margins[:, 0] if margins.ndim == 2 else margins).tolist()
  summary["outputs"] = np.asarray(out).tolist()
  if cfg.pretrain_epochs:
    summary["init"] = f"pretrained {cfg.pretrain_epochs} epochs on the public pool"
  return Trained(params, history, summary, init)


def save(path: str, cfg: VictimConfig, ds: data.Dataset, params, summary: dict, init=None) -> None:
  """Writes the victim with its config, training indices, the data's fingerprint and,
  when given, theta_0 (``init``: where its training started)."""
  meta = {
    "victim": cfg.to_dict(),
    "train_idx": np.asarray(ds.train_idx).tolist(),
    "data_fingerprint": data.fingerprint(ds),
    "summary": {k: v for k, v in summary.items() if k not in ("outputs",)},
  }
  checkpoint.save(path, params, meta, init=init)


def check_data(path: str, meta: dict, ds: data.Dataset, allow_mismatch: bool = False) -> None:
  """Refuses (or, with ``allow_mismatch``, warns about) a victim trained on other data.

  The fingerprint covers the selected training images and labels, so two data
  folders with the same file names (MNIST and Fashion-MNIST) are told apart.
  Checkpoints written before fingerprints existed pass with a warning.
  """
  stored, now = meta.get("data_fingerprint"), data.fingerprint(ds)
  if stored is None:
    logging.warning(
      "%s has no data fingerprint (an older checkpoint): cannot check that it "
      "was trained on these images.",
      path,
    )
  elif stored != now:
    msg = (
      f"{path} was trained on other data (fingerprint {stored}) than the images loaded "
      f"now ({now}): another data_dir, dataset, n_per_class or data_seed?"
    )
    if not allow_mismatch:
      raise checkpoint.CheckpointError(msg)
    logging.warning("%s; attacking it anyway (allow_data_mismatch).", msg)


def recipe_of(meta: dict, path: str) -> VictimConfig:
  """The :class:`VictimConfig` a checkpoint was trained with, from its metadata ``meta``
  (CheckpointError naming ``path`` where it has none)."""
  try:
    stored = dict(meta["victim"])
    stored["widths"] = tuple(stored["widths"])
    if stored.get("task") == "binary" and stored.get("loss") == "ce":  # the task's former
      stored["task"] = None  # default, written beside a loss it never described
    return VictimConfig(**stored)
  except (KeyError, TypeError) as e:
    raise checkpoint.CheckpointError(f"{path}: checkpoint has no victim config ({e}).") from None
  except recipe.FieldError as e:  # a recipe no victim has: the file is at fault, not a setting
    raise checkpoint.CheckpointError(
      f"{path}: corrupt victim metadata: {e.field} {e.problem}"
    ) from None


def param_shapes(cfg: VictimConfig, ds: data.Dataset):
  """The shapes of the parameters of ``cfg``'s network on ``ds`` (nothing is computed)."""
  module, _ = build(cfg, ds)
  return jax.eval_shape(
    lambda: models.init_params(module, jax.random.PRNGKey(0), ds.x_train.shape[1:])
  )


def check_stored(
  path: str, params, meta: dict, init, cfg: VictimConfig, ds: data.Dataset, allow_mismatch=False
):
  """A checkpoint read by :func:`recon_jax.io.checkpoint.read` (its ``params``, ``meta`` and
  stored theta_0 ``init``) checked against ``cfg``'s network on ``ds`` and against ``ds``
  itself (:func:`check_data`); returns ``init`` checked (None where none is given).
  CheckpointError naming ``path``."""
  checkpoint.check_matches(params, param_shapes(cfg, ds), path)
  check_data(path, meta, ds, allow_mismatch)
  return checkpoint.check_init(init, params, path)


def load(path: str, cfg: Optional[VictimConfig] = None, ds: Optional[data.Dataset] = None):
  """Loads a victim checkpoint; returns ``(params, VictimConfig, meta)``.

  When ``ds`` is given the checkpoint must match the architecture of ``cfg`` (default:
  its own) on it (CheckpointError names the parameter that does not).
  """
  params, meta = checkpoint.load(path)
  ck_cfg = recipe_of(meta, path)
  if ds is None:
    return params, ck_cfg, meta
  checkpoint.check_matches(params, param_shapes(cfg or ck_cfg, ds), path)
  params = jax.tree_util.tree_map(jnp.asarray, params)
  return params, ck_cfg, meta


def _train_template(cfg: VictimConfig, ds: data.Dataset, phase: int, chunk: int):
  module, _ = build(cfg, ds)
  dtype = float_dtype()
  params = jax.eval_shape(
    lambda: models.init_params(module, jax.random.PRNGKey(0), ds.x_train.shape[1:], dtype)
  )
  tcfg = phase_configs(cfg, chunk)[phase]
  return {"state": jax.eval_shape(lambda: descent.init_state(params, tcfg))}


def save_training(path: str, phase: int, state, histories, chunk: int) -> None:
  """Saves a training run between chunks (``fit``'s ``on_chunk``) for :func:`load_training`."""
  resume.save(path, {"state": state}, {"phase": phase, "histories": histories, "chunk": chunk})


def load_training(path: str, cfg: VictimConfig, ds: data.Dataset, chunk: int) -> dict:
  """The ``resume_from`` of :func:`fit` saved by :func:`save_training`, checked against ``cfg``.

  Raises CheckpointError (file missing, foreign, of another architecture) or
  ConfigError (``chunk`` differs from the saved run's).
  """
  if not os.path.isfile(path):
    raise checkpoint.CheckpointError(f"{path}: training state not found; nothing to resume.")
  with open(path, "rb") as f:
    _, meta = checkpoint.read_blob(f.read(), path, resume.FORMAT, "state file")
  if meta.get("chunk") != chunk:
    raise ConfigError(f"chunk_epochs={chunk} differs from the saved run's {meta.get('chunk')}.")
  tree, meta = resume.load(path, _train_template(cfg, ds, int(meta["phase"]), chunk))
  return {"phase": meta["phase"], "state": tree["state"], "histories": meta["histories"]}


def fit_resumable(
  cfg: VictimConfig,
  ds: data.Dataset,
  state_path: str,
  *,
  chunk: int = 2000,
  save_every: int = 1,
  resume: bool = False,
  last_finite_path: Optional[str] = None,
):
  """:func:`fit`, saving its state to ``state_path`` every ``save_every`` chunks (0: never).

  With ``resume`` it continues from that file.  If training diverges, the last
  finite parameters are saved to ``last_finite_path`` (when given) for
  inspection, and the :class:`~recon_jax.victims.descent.TrainError` names ``lr`` (:func:`fit`).
  """
  resume_from = load_training(state_path, cfg, ds, chunk) if resume else None
  if resume_from:
    logging.info(
      "resuming phase %d at epoch %d", resume_from["phase"], int(resume_from["state"].step)
    )
  chunks = [0]

  def on_chunk(phase, state, histories):
    chunks[0] += 1
    if save_every and chunks[0] % save_every == 0:
      save_training(state_path, phase, state, histories, chunk)

  try:
    return fit(cfg, ds, chunk=chunk, on_chunk=on_chunk, resume_from=resume_from)
  except descent.TrainError as e:
    if e.params is not None and last_finite_path:
      save(last_finite_path, cfg, ds, e.params, {"error": str(e)})
    raise
