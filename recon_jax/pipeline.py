"""The pipeline every binary, study and benchmark calls.

data -> victim (trained, cached or imported) -> theta* -> Target ->
x-initialisation -> attack -> the one batched loop -> candidates ->
evaluation -> report dict.

The pieces (:func:`make_target`, :func:`candidate_labels`,
:func:`load_or_train_victim`, :func:`run_attack`) are plain functions of
library objects; :func:`reconstruct` chains them for one configuration (a
mapping with the fields of ``experiments/configs/reconstruct.py``) and returns
the report without writing anything but the optional resume file.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from recon_jax import (data, diagnostics, distributed, inits, loop, losses, models, sweep,
                       victim)
from recon_jax.eval import report as evaluation
from recon_jax.attacks import inversion, kkt
from recon_jax.errors import ConfigError
from recon_jax.types import Attack, HParams, Target, float_dtype  # noqa: F401 (re-exported)

ATTACKS = ("kkt", "closed_form", "inversion", "weights")
RANGE_NAMES = ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")


def cast_params(params, dtype=None):
  """``params`` with every leaf a ``dtype`` array (default :func:`float_dtype`)."""
  dtype = dtype or float_dtype()
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


def make_target(params, labels, mean=None, *, box: Optional[Tuple[float, float]] = (0.0, 1.0),
                dtype=None) -> Target:
  """What the attacker sees: theta*, the candidates' labels and the pixel box.

  Args:
    params: theta*.
    labels: [m] labels assumed for the candidates (see :func:`candidate_labels`).
    mean: the per-pixel mean subtracted from the training data (or None): the
      attack works in that shifted space, so the box moves with it.
    box: (lo, hi) pixel range of the data; None: no box (the 2-D toy).
    dtype: float dtype (default :func:`float_dtype`).
  """
  dtype = dtype or float_dtype()
  params = cast_params(params, dtype)
  labels = jnp.asarray(labels)
  if box is None:
    shape = np.shape(mean) if mean is not None else ()
    inf = jnp.full(shape, jnp.inf, dtype)
    return Target(params, labels, -inf, inf)
  lo, hi = box
  offset = np.zeros(()) if mean is None else np.asarray(mean)
  return Target(params, labels, jnp.asarray(lo - offset, dtype), jnp.asarray(hi - offset, dtype))


def candidate_labels(problem: str, m: int, num_classes: int = 2) -> np.ndarray:
  """Balanced labels of the ``m`` candidates: m/2 per sign (binary), m/C per class."""
  if problem == "binary":
    if m < 2 or m % 2:
      raise ConfigError(argument="m", message=f"m must be even and >= 2 for a binary victim, got {m}.")
    return np.concatenate([np.ones(m // 2), -np.ones(m // 2)]).astype(np.float32)
  if problem == "multiclass":
    if m < num_classes or m % num_classes:
      raise ConfigError(argument="m", message=f"m={m} must be a positive multiple of the {num_classes} classes.")
    return np.repeat(np.arange(num_classes), m // num_classes).astype(np.int32)
  if problem == "general":
    return np.zeros(m, np.float32)
  raise ConfigError(argument="problem", message=f"problem must be one of {losses.PROBLEMS}, got {problem!r}.")


def resolve_problem(problem: str, loss: str) -> str:
  """``problem``, or the one the victim's training loss implies when it is 'auto'."""
  if problem == "auto":
    return losses.problem_for_loss(loss)
  if problem not in losses.PROBLEMS:
    raise ConfigError(argument="problem", message=f"problem must be auto or one of {losses.PROBLEMS}, "
                      f"got {problem!r}.")
  return problem


class Victim(NamedTuple):
  params: Any               # theta* (flax variable dict)
  apply_fn: Callable        # apply_fn(params, x, act=None) -> [n, C]
  num_outputs: int          # C, the width of the output layer
  summary: dict             # training summary (loss, errors, margins, ...)
  source: str               # 'trained', 'cache' or the checkpoint path


def is_foreign(path: str) -> bool:
  """True for a PyTorch or safetensors file, False for recon_jax's own checkpoint."""
  from recon_jax import importers
  return importers.detect_format(path) != "msgpack"


def shift_dataset(ds: data.Dataset, mean) -> data.Dataset:
  """``ds`` in the input space of a model trained on ``x - mean`` (pixels in, mean recorded).

  ``ds`` must hold plain pixels (loaded with ``subtract_mean=False``).
  """
  mean = np.asarray(mean, ds.x_train.dtype)
  if mean.shape != ds.x_train.shape[1:]:
    raise ConfigError(f"data_mean has shape {mean.shape}, the images {ds.x_train.shape[1:]}.")
  sub = lambda a: a - mean if len(a) else a
  return ds._replace(x_train=sub(ds.x_train), x_test=sub(ds.x_test), x_part=sub(ds.x_part),
                     mean=mean)


def load_data_mean(path: str, input_shape) -> np.ndarray:
  """The per-pixel training mean of a foreign model: a .npy of shape (H, W, C) or (C, H, W)."""
  try:
    with open(path, "rb") as f:
      mean = np.load(f, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ConfigError(f"data_mean: {path} is not a readable .npy file ({e}).") from None
  h, w, c = input_shape
  if mean.shape == (c, h, w) and (c, h, w) != (h, w, c):
    mean = np.transpose(mean, (1, 2, 0))
  if mean.shape != (h, w, c):
    raise ConfigError(f"data_mean: {path} has shape {mean.shape}; the images are {(h, w, c)} "
                      f"(HWC) or {(c, h, w)} (CHW).")
  return mean.astype(np.float32)


def import_victim(path: str, cfg: victim.VictimConfig, ds: data.Dataset, *,
                  input_layout: str = "nchw", stride=1, padding=0) -> Victim:
  """A PyTorch or safetensors victim: its weights mapped onto a flax network.

  The architecture is inferred from the tensors (see :mod:`recon_jax.importers`);
  ``cfg.loss`` says how it was trained; its train error and margins on ``ds``
  are computed here, since the file carries no summary.
  """
  from recon_jax import importers
  imp = importers.load_foreign(path, input_shape=ds.x_train.shape[1:],
                               input_layout=input_layout, stride=stride, padding=padding)
  apply_fn = models.make_apply_fn(imp.module)
  out = apply_fn(imp.params, jnp.asarray(ds.x_train, jnp.float32))
  want = losses.num_outputs(cfg.loss, ds.num_classes)
  if out.shape[1] != want:
    raise ConfigError(f"victim.loss={cfg.loss!r} needs {want} output(s); {path} has "
                      f"{out.shape[1]}.", argument="loss")
  y = jnp.asarray(ds.y_train)
  margins = np.asarray(losses.margins(cfg.loss, out, y))
  summary = {"train_error": float(losses.error_rate(cfg.loss, out, y)),
             "loss": float(jnp.mean(losses.per_sample_loss(cfg.loss, out, y))),
             "margins": (margins[:, 0] if margins.ndim == 2 else margins).tolist(),
             "imported": {"format": imp.format, "arch": imp.arch}}
  return Victim(imp.params, apply_fn, int(out.shape[1]), summary, path)


def load_or_train_victim(cfg: victim.VictimConfig, ds: data.Dataset, *, checkpoint: str = "",
                         use_cache: bool = True, allow_data_mismatch: bool = False) -> Victim:
  """theta* for ``cfg`` on ``ds``: from a recon_jax ``checkpoint``, the cache, or trained now.

  PyTorch and safetensors files go through :func:`import_victim`.
  """
  module, apply_fn = victim.build(cfg, ds)
  if checkpoint:
    params, _, meta = victim.load(checkpoint, cfg, ds)
    victim.check_data(checkpoint, meta, ds, allow_data_mismatch)
    summary, source = meta.get("summary", {}), checkpoint
  else:
    params, summary, _ = victim.get_or_train(cfg, ds, use_cache=use_cache)
    source = summary.pop("source")
  return Victim(params, apply_fn, victim.out_dim(cfg, ds), summary, source)


class AttackRun(NamedTuple):
  """What :func:`run_attack` returns (host numpy arrays, restart axis first)."""
  candidates: np.ndarray    # [R, m, *input_shape], the attack's input space
  weights: np.ndarray       # [R, m] lambda (KKT) or ones
  final_loss: np.ndarray    # [R], NaN where the restart diverged
  diverged: np.ndarray      # [R] bool
  chunks: list              # JSON records of every chunk (a resumed run: all of them)
  state: Any                # the final batched loop state
  compile_s: float
  run_s: float


def run_attack(attack: Attack, x_init, keys, stages: Sequence[Tuple[int, HParams]],
               target: Target, *, chunk_steps: int = 500, batching: str = "auto",
               state_path: Optional[str] = None, save_every: int = 1, resume: bool = False,
               save_meta: Optional[dict] = None, log: bool = True) -> AttackRun:
  """Runs ``attack`` from ``x_init`` for R = len(keys) restarts through ``stages``.

  Args:
    attack: the attack.
    x_init: ``(key, hparams) -> x0`` (see :mod:`recon_jax.inits`).
    keys: [R] PRNG keys.
    stages: ``[(steps, hparams)]`` (see :func:`recon_jax.sweep.stages`).
    target: what the attacker sees.
    chunk_steps: steps per compiled chunk.
    batching: 'auto', 'vmap' or 'map' over restarts.
    state_path: where to save the run every ``save_every`` chunks (None: nowhere).
    resume: continue from ``state_path`` (which must exist and match).
    save_meta: JSON-able metadata stored with the state.
    log: one log line per chunk.
  """
  state0, chunks = None, []
  if resume:
    if not state_path:
      raise ConfigError(argument="state_path", message="resume needs a state_path.")
    state0, chunks, _ = loop.resume_state(state_path, attack, x_init, keys, stages[0][1],
                                          target, batching)
  ckpt = loop.Checkpoint(state_path, save_every, save_meta, chunks) if state_path else None
  res = loop.run_stages(attack, x_init, keys, stages, target, chunk_steps=chunk_steps,
                        batching=batching, state=state0, log=log, checkpoint=ckpt)
  if ckpt is None:
    chunks = [loop.chunk_record(r) for r in res.history]
  else:
    chunks = ckpt.chunks
  cx, w = jax.vmap(attack.candidates)(distributed.gather_restarts(res.state.inner))
  diverged = np.asarray(distributed.gather_restarts(res.state.diverged))
  final_loss = np.where(diverged, np.nan, distributed.gather_restarts(res.state.loss))
  return AttackRun(np.asarray(cx), np.asarray(w), np.asarray(final_loss, np.float64), diverged,
                   chunks, res.state, res.compile_s, res.run_s)


# ----------------------------------------------------------------------------- one job

def victim_config(cfg, requested: Optional[dict] = None) -> victim.VictimConfig:
  """The victim of a job config: its ``victim`` section, or the checkpoint's own.

  A recon_jax checkpoint carries the config it was trained with (architecture
  and data provenance), and that is the one used; ``requested`` (victim
  settings the user set explicitly, ``{field: value}``) must agree with it.
  """
  v = dict(cfg.victim)
  v["widths"] = tuple(int(w) for w in v["widths"])
  if not cfg.get("checkpoint") or is_foreign(cfg.checkpoint):
    return victim.VictimConfig(**v)
  _, stored, _ = victim.load(cfg.checkpoint)
  for field, value in (requested or {}).items():
    want = tuple(value) if field == "widths" else value
    if getattr(stored, field) != want:
      raise ConfigError(f"victim.{field}={value} contradicts the checkpoint {cfg.checkpoint}, "
                        f"which was trained with {field}={getattr(stored, field)}.",
                        argument=f"victim.{field}")
  return stored


def total_steps(cfg) -> int:
  return int(cfg.steps) + int(cfg.refine_steps)


def hparams_for(cfg) -> dict:
  """The per-restart hyperparameters of a job: paper ranges or the config's ranges."""
  if cfg.sweep == "paper":
    ranges = dict(sweep.INVERSION_RANGES if cfg.attack == "inversion" else sweep.PAPER_RANGES)
  elif cfg.sweep == "random":
    ranges = {name: sweep.parse_range(name, cfg[name], "log") for name in RANGE_NAMES}
  else:
    raise ConfigError(argument="sweep", message=f"sweep must be random or paper, got {cfg.sweep!r}.")
  hp = sweep.random_search(cfg.seed, cfg.num_restarts, ranges)
  kkt.check_hparams(hp)
  return hp


def stages_for(cfg, hp: dict) -> list:
  """The run's stages: the sweep (alpha fixed, or annealed), then the optional refinement."""
  anneal = cfg.get("anneal_alpha", 0.0)
  if anneal:
    main = sweep.anneal(hp, cfg.steps, anneal, cfg.get("anneal_stages", 8))
  else:
    main = [(cfg.steps, hp)]
  tail = sweep.stages(main[-1][1], 1, cfg.refine_steps, cfg.refine_alpha, cfg.refine_lr_scale)
  return main + tail[1:]


def validate(cfg) -> None:
  """Raises :class:`ConfigError` naming the first setting of ``cfg`` that cannot run."""
  if cfg.attack not in ATTACKS:
    raise ConfigError(argument="attack", message=f"attack must be one of {ATTACKS}, got {cfg.attack!r}.")
  for name in ("num_restarts", "steps", "chunk_steps"):
    if int(cfg[name]) <= 0:
      raise ConfigError(name, f"{name} must be > 0, got {cfg[name]}.")
  if cfg.refine_steps and cfg.attack != "kkt":
    raise ConfigError(argument="refine_steps", message="refine_steps sharpens the surrogate alpha: attack=kkt only.")
  if cfg.m < 0:
    raise ConfigError(argument="m", message=f"m must be >= 0 (0 means 2n), got {cfg.m}.")
  problem = resolve_problem(cfg.problem, victim_config(cfg).loss)
  if cfg.attack == "inversion" and problem != "binary":
    raise ConfigError(argument="attack", message="attack=inversion is defined for binary victims only.")
  if cfg.batching not in loop.BATCHINGS:
    raise ConfigError(argument="batching", message=f"batching must be one of {loop.BATCHINGS}, "
                      f"got {cfg.batching!r}.")
  if cfg.init not in inits.INIT_SCHEMES:
    raise ConfigError(argument="init", message=f"init must be one of {inits.INIT_SCHEMES}, got {cfg.init!r}.")
  if cfg.attack != "weights":
    stages_for(cfg, hparams_for(cfg))  # bad ranges or refine_* fail here, before training


def assumptions(cfg, vcfg: victim.VictimConfig, ds: data.Dataset, foreign: bool) -> dict:
  """What the report took as given about the victim and its data (stated in metrics.json)."""
  out = {"dataset": vcfg.dataset, "n_per_class": vcfg.n_per_class, "data_seed": vcfg.data_seed,
         "task_from_loss": vcfg.loss, "input_shape": list(ds.x_train.shape[1:]),
         "pixel_range": [0.0, 1.0], "training_mean_subtracted": bool(np.any(ds.mean != 0))}
  if foreign:
    imp = dict(cfg.get("foreign", {}))
    out.update(input_layout=imp.get("input_layout", "nchw"), conv_stride=imp.get("stride", 1),
               conv_padding=imp.get("padding", 0), data_mean_file=imp.get("data_mean") or None)
  return out


def make_attack(cfg, apply_fn, problem: str, num_outputs: int = 1) -> Attack:
  """The attack a job config names (``cfg.attack``), with the config's options."""
  if cfg.attack == "closed_form":
    from recon_jax.attacks import closed_form
    return closed_form.closed_form_attack(apply_fn, problem, optimizer=cfg.optimizer,
                                          w_prior=cfg.w_prior, num_outputs=num_outputs)
  if cfg.attack == "kkt":
    return kkt.kkt_attack(apply_fn, problem, optimizer=cfg.optimizer, w_lam=cfg.w_lam,
                          w_prior=cfg.w_prior, normalize=cfg.normalize, num_outputs=num_outputs)
  if cfg.attack == "inversion":
    return inversion.inversion_attack(apply_fn, w_prior=cfg.w_prior)
  raise ConfigError(f"attack must be one of {ATTACKS[:3]} to run a sweep, got {cfg.attack!r}.")


def known_init_reference(vcfg: victim.VictimConfig, ds: data.Dataset, params):
  """``theta* - theta_0`` for an attacker who knows the victim's initialisation.

  theta_0 is re-created from the victim's recipe and seed (as a model
  fine-tuned from public weights would be): the initial parameters of
  :func:`recon_jax.victim.fit`.
  """
  module, _ = victim.build(vcfg, ds)
  theta0 = models.init_params(module, jax.random.PRNGKey(vcfg.seed), ds.x_train.shape[1:],
                              jax.tree_util.tree_leaves(params)[0].dtype)
  return jax.tree_util.tree_map(jnp.subtract, params, theta0)


class Reconstruction(NamedTuple):
  """A reconstruction job's outcome: the report and what the figures and arrays need."""
  metrics: dict             # JSON-able report (metrics.json)
  arrays: dict              # name -> array (reconstructions.npz)
  eval_result: Any          # metrics.EvalResult of the pooled candidates (or None)
  dataset: data.Dataset
  victim: Victim


def reconstruct(cfg, *, state_path: Optional[str] = None, save_every: int = 1,
                resume: bool = False, save_meta: Optional[dict] = None,
                requested_victim: Optional[dict] = None) -> Reconstruction:
  """Runs one reconstruction job (victim -> attack sweep -> evaluation).

  ``cfg`` has the fields of ``experiments/configs/reconstruct.py``.  With
  ``state_path`` the sweep is saved there every ``save_every`` chunks; with
  ``resume`` it continues from that file.  ``requested_victim``: see
  :func:`victim_config`.
  """
  validate(cfg)
  t_start = time.time()
  vcfg = victim_config(cfg, requested_victim)
  problem = resolve_problem(cfg.problem, vcfg.loss)
  foreign = bool(cfg.checkpoint) and is_foreign(cfg.checkpoint)
  if foreign:  # pixels in; the model's own training mean (or none) is subtracted here
    ds = victim.load_data(dataclasses.replace(vcfg, subtract_mean=False), cfg.data_dir or None)
    imp = cfg.get("foreign", {})
    if imp.get("data_mean"):
      ds = shift_dataset(ds, load_data_mean(imp["data_mean"], ds.x_train.shape[1:]))
  else:
    ds = victim.load_data(vcfg, cfg.data_dir or None)
  n = len(ds.x_train)
  m = cfg.m or cfg.get("m_per_sample", 2) * n
  labels = candidate_labels(problem, m, ds.num_classes)  # a bad m fails before training
  t0 = time.time()
  if foreign:
    vic = import_victim(cfg.checkpoint, vcfg, ds, input_layout=imp.get("input_layout", "nchw"),
                        stride=imp.get("stride", 1), padding=imp.get("padding", 0))
  else:
    vic = load_or_train_victim(vcfg, ds, checkpoint=cfg.checkpoint, use_cache=cfg.use_cache,
                               allow_data_mismatch=cfg.get("allow_data_mismatch", False))
  timing = {"victim_s": time.time() - t0}
  dtype = float_dtype()
  target = make_target(vic.params, labels, ds.mean, dtype=dtype)
  params = target.params
  if cfg.get("known_init", False):
    target = target._replace(reference=cast_params(known_init_reference(vcfg, ds, params), dtype))

  t0 = time.time()
  oracle = diagnostics.oracle_residual(vic.apply_fn, problem, params,
                                       jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train))
  timing["oracle_s"] = time.time() - t0
  logging.info("KKT oracle residual (true training set): %.4f of ||theta*||^2",
               oracle["residual_rel"])

  hp, run = {}, None
  if cfg.attack == "weights":
    w = np.asarray(inversion.first_layer_images(params, ds.x_train.shape[1:]))
    cands, weights, final_loss = w[None], np.ones((1, len(w))), np.zeros(1)
  else:
    hp = hparams_for(cfg)
    attack = make_attack(cfg, vic.apply_fn, problem, vic.num_outputs)
    x_init = inits.make_x_init(cfg.init, m=m, input_shape=ds.x_train.shape[1:],
                               x_train=ds.x_train, x_part=ds.x_part, offset=ds.mean, dtype=dtype)
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
    run = run_attack(attack, x_init, keys, stages_for(cfg, hp), target,
                     chunk_steps=cfg.chunk_steps, batching=cfg.batching, state_path=state_path,
                     save_every=save_every, resume=resume, save_meta=save_meta)
    cands, weights, final_loss = run.candidates, run.weights, run.final_loss
    timing.update(compile_s=run.compile_s, attack_run_s=run.run_s,
                  restart_steps_per_s=cfg.num_restarts * total_steps(cfg) / max(run.run_s, 1e-9))

  t0 = time.time()
  ev = evaluation.evaluate_candidates(cands, weights, final_loss, ds,
                                      ssim_threshold=cfg.ssim_threshold, seed=cfg.seed)
  timing["evaluation_s"] = time.time() - t0
  result = ev.pop("_result")
  timing["total_s"] = time.time() - t_start
  metrics = {
      "attack": cfg.attack, "problem": problem, "dataset": vcfg.dataset, "n_train": n, "m": m,
      "num_restarts": cfg.num_restarts if cfg.attack != "weights" else 1,
      "recovered_strict": ev["attack"]["recovered_strict"],
      "n_ssim_gt_0.4": ev["attack"]["n_ssim_gt_0.4"],
      "baseline_mean_image_n_ssim_gt_0.4": ev["baselines"]["mean_image"]["n_ssim_gt_0.4"],
      "baseline_mean_image_recovered_strict": ev["baselines"]["mean_image"]["recovered_strict"],
      "baseline_heldout_recovered_strict": ev["baselines"].get("heldout", {}).get(
          "recovered_strict"),
      "baseline_heldout_n_ssim_gt_0.4": ev["baselines"].get("heldout", {}).get("n_ssim_gt_0.4"),
      "oracle_residual_rel": oracle["residual_rel"],
      "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
      "victim_source": vic.source,
      "assumed": assumptions(cfg, vcfg, ds, foreign),
      "evaluation": ev["attack"], "baselines": ev["baselines"], "selection": ev["selection"],
      "per_restart": ev["per_restart"], "timing": timing,
  }
  if run is not None:
    last = run.chunks[-1]
    warning = diagnostics.float32_floor_warning(run.chunks, dtype)
    metrics["precision_warning"] = warning
    if warning:
      logging.warning("precision: %s", warning)
    metrics["final_stat_rel"] = list(last.get("stat_rel", last["loss"]))
    for row, i in zip(metrics["per_restart"], range(cfg.num_restarts)):
      row.update({k: float(np.asarray(v)[i]) for k, v in hp.items()})
      if "stat_rel" in last:
        row["stat_rel"] = last["stat_rel"][i]
  arrays = dict(candidates=cands, weights=weights, final_loss=final_loss, train_idx=ds.train_idx,
                mean=ds.mean, **{f"hp_{k}": v for k, v in hp.items()})
  if result is not None:
    arrays.update(recon=result.recon, ssim=result.ssim)
  logging.info("recovered strictly %d/%d (SSIM>0.4: %d; mean-image baseline %d, held-out "
               "baseline strict %s); oracle residual %.3f; total %.1fs",
               metrics["recovered_strict"], n, metrics["n_ssim_gt_0.4"],
               metrics["baseline_mean_image_n_ssim_gt_0.4"],
               metrics["baseline_heldout_recovered_strict"], oracle["residual_rel"],
               timing["total_s"])
  return Reconstruction(metrics, arrays, result, ds, vic)
