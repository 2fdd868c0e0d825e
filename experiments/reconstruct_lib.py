"""The main job: victim -> attack sweep (one compiled call) -> evaluation -> report."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from experiments import common
from recon_jax import data, distributed, evaluation, inits, loop, plotting, precision, resume, sweep, victim
from recon_jax.attacks import inversion, kkt
from recon_jax.types import Target

ATTACKS = ("kkt", "inversion", "weights")


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a reconstruction run needs; every field is a flag of reconstruct.py."""
  victim: victim.VictimConfig = victim.VictimConfig()
  checkpoint: str = ""          # attack this victim checkpoint instead of training one
  data_dir: Optional[str] = None
  attack: str = "kkt"
  problem: str = "auto"         # binary | multiclass | general; auto from the victim's loss
  num_restarts: int = 16
  steps: int = 4000
  chunk_steps: int = 1000
  m: int = 0                    # candidates per restart; 0 -> 2n
  init: str = "gaussian"
  sweep: str = "random"         # random (ranges below) | paper (Haim App. B ranges)
  lr_x: str = "0.03:0.6:log"
  lr_lam: str = "1e-4:1e-2:log"
  sigma_x: str = "1e-4:1e-2:log"
  alpha: str = "10:40:lin"
  lam_min: str = "0.2:0.7:lin"
  # Optional refinement stage after --steps (loop.run_stages): every restart's
  # alpha set to refine_alpha, its rates times refine_lr_scale. 0 steps: off.
  refine_steps: int = 0
  refine_alpha: float = 200.0
  refine_lr_scale: float = 0.1
  optimizer: str = "sgd"
  w_lam: float = 1.0
  w_prior: float = 1.0
  normalize: str = "mean"
  batching: str = "auto"        # map on CPU, vmap on accelerators (see loop.resolve_batching)
  ssim_threshold: Optional[float] = None
  seed: int = 0
  use_cache: bool = True


PRESETS = {
    # The main job: faces vs non-faces, 10 per class (see README for the numbers).
    "lfw": dict(),
    "digits": dict(victim=victim.VictimConfig(dataset="digits", n_per_class=25),
                   steps=6000),
    "tiny": dict(victim=victim.VictimConfig(dataset="digits", n_per_class=3, widths=(32, 32),
                                            epochs=400),
                 num_restarts=2, steps=20, chunk_steps=10),
}


def total_steps(cfg: Config) -> int:
  return cfg.steps + cfg.refine_steps  # validate() allows refine_steps for kkt only


def problem_for(cfg: Config) -> str:
  if cfg.problem != "auto":
    return cfg.problem
  return {"logistic": "binary", "ce": "multiclass", "mse": "general"}[cfg.victim.loss]


def validate(cfg: Config) -> None:
  if cfg.attack not in ATTACKS:
    raise common.UserError(f"--attack must be one of {ATTACKS}, got {cfg.attack!r}.")
  if cfg.num_restarts <= 0:
    raise common.UserError(f"--num_restarts must be > 0, got {cfg.num_restarts}.")
  if cfg.steps <= 0:
    raise common.UserError(f"--steps must be > 0, got {cfg.steps}.")
  if cfg.chunk_steps <= 0:
    raise common.UserError(f"--chunk_steps must be > 0, got {cfg.chunk_steps}.")
  if cfg.refine_steps and cfg.attack != "kkt":
    raise common.UserError("--refine_steps sharpens the surrogate alpha: --attack=kkt only.")
  if cfg.m < 0:
    raise common.UserError(f"--m must be >= 0 (0 means 2n), got {cfg.m}.")
  problem = problem_for(cfg)
  if problem not in kkt.PROBLEMS:
    raise common.UserError(f"--problem must be auto or one of {kkt.PROBLEMS}, got {problem!r}.")
  if cfg.attack == "inversion" and problem != "binary":
    raise common.UserError("--attack=inversion is defined for binary victims only.")
  if cfg.batching not in loop.BATCHINGS:
    raise common.UserError(f"--batching must be one of {loop.BATCHINGS}, got {cfg.batching!r}.")
  if cfg.sweep not in ("random", "paper"):
    raise common.UserError(f"--sweep must be random or paper, got {cfg.sweep!r}.")
  if cfg.init not in inits.INIT_SCHEMES:
    raise common.UserError(f"--init must be one of {inits.INIT_SCHEMES}, got {cfg.init!r}.")
  if cfg.attack != "weights":
    stages_for(cfg, hparams_for(cfg))  # bad ranges or --refine_* fail here, before training


def stages_for(cfg: Config, hp: dict) -> list:
  return sweep.stages(hp, cfg.steps, cfg.refine_steps, cfg.refine_alpha, cfg.refine_lr_scale)


def hparams_for(cfg: Config) -> dict:
  if cfg.sweep == "paper":
    ranges = dict(sweep.PAPER_RANGES if cfg.attack == "kkt" else sweep.INVERSION_RANGES)
  else:
    ranges = {name: sweep.parse_range(name, getattr(cfg, name), "log")
              for name in ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")}
  hp = sweep.random_search(cfg.seed, cfg.num_restarts, ranges)
  kkt.check_hparams(hp)
  return hp


def candidate_labels(problem: str, ds: data.Dataset, m: int) -> np.ndarray:
  """Balanced labels of the m candidates: m/2 per sign (binary), m/C per class."""
  if problem == "binary":
    if m % 2:
      raise common.UserError(f"--m must be even for a binary victim, got {m}.")
    return np.concatenate([np.ones(m // 2), -np.ones(m // 2)]).astype(np.float32)
  if problem == "multiclass":
    c = ds.num_classes
    if m < c or m % c:
      raise common.UserError(f"--m={m} must be a positive multiple of the {c} classes.")
    return np.repeat(np.arange(c), m // c).astype(np.int32)
  return np.zeros(m, np.float32)


def load_victim(cfg: Config, ds: data.Dataset):
  """(params, summary): from --checkpoint, or trained (and cached)."""
  if cfg.checkpoint:
    params, _, meta = victim.load(cfg.checkpoint, cfg.victim, ds)
    return params, meta.get("summary", {})
  params, summary, _ = victim.get_or_train(cfg.victim, ds, use_cache=cfg.use_cache)
  return params, summary


def run(cfg: Config, workdir: str, *, resume_run: bool = False, save_every: int = 1) -> dict:
  """Runs one reconstruction experiment; writes config, metrics, arrays and figures.

  Every ``save_every`` chunks (0: never) the full attack state goes to
  ``state.msgpack`` in ``workdir``; with ``resume_run`` the run continues from it.
  """
  validate(cfg)
  if save_every < 0:
    raise common.UserError(f"--save_every must be >= 0 (0: never), got {save_every}.")
  if resume_run:
    check_resumable(cfg, workdir)
  t_start = time.time()
  problem = problem_for(cfg)
  ds = victim.load_data(cfg.victim, cfg.data_dir)
  module, apply_fn = victim.build(cfg.victim, ds)
  candidate_labels(problem, ds, cfg.m or 2 * len(ds.x_train))  # bad --m fails before training
  t0 = time.time()
  params, vsummary = load_victim(cfg, ds)
  t_victim = time.time() - t0
  dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
  params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)
  n = len(ds.x_train)
  m = cfg.m or 2 * n
  shape = ds.x_train.shape[1:]
  labels = candidate_labels(problem, ds, m)
  target = Target(params, jnp.asarray(labels), jnp.asarray(-ds.mean, dtype),
                  jnp.asarray(1.0 - ds.mean, dtype))
  common.write_json(workdir, "config.json", {"config": cfg, "problem": problem, "m": m,
                                             "environment": common.environment()})

  t0 = time.time()
  oracle = kkt.oracle_residual(apply_fn, problem, params, jnp.asarray(ds.x_train, dtype),
                               jnp.asarray(ds.y_train))
  t_oracle = time.time() - t0
  logging.info("KKT oracle residual (true training set): %.4f of ||theta*||^2",
               oracle["residual_rel"])

  timing = {"victim_s": t_victim, "oracle_s": t_oracle}
  run_res = None
  if cfg.attack == "weights":
    w = np.asarray(inversion.first_layer_images(params, shape))
    cands, weights = w[None], np.ones((1, len(w)))
    final_loss = np.zeros(1)
    hp = {}
  else:
    hp = hparams_for(cfg)
    if cfg.attack == "kkt":
      attack = kkt.kkt_attack(apply_fn, problem, optimizer=cfg.optimizer, w_lam=cfg.w_lam,
                              w_prior=cfg.w_prior, normalize=cfg.normalize,
                              num_outputs=1 if problem != "multiclass" else ds.num_classes)
    else:
      attack = inversion.inversion_attack(apply_fn, w_prior=cfg.w_prior)
    x_init = inits.make_x_init(cfg.init, m=m, input_shape=shape, x_train=ds.x_train,
                               x_part=ds.x_part, offset=ds.mean, dtype=dtype)
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
    state0, chunks = None, []
    if resume_run:
      state0, chunks = load_run_state(cfg, workdir, attack, x_init, keys, hp, target)
    progress = _saver(cfg, workdir, keys, hp, chunks, save_every)
    run_res = loop.run_stages(attack, x_init, keys, stages_for(cfg, hp), target,
                              chunk_steps=cfg.chunk_steps,
                              batching=cfg.batching, state=state0, progress=progress)
    cx, w = jax.vmap(attack.candidates)(distributed.gather_restarts(run_res.state.inner))
    cands, weights = np.asarray(cx), np.asarray(w)
    final_loss = np.where(distributed.gather_restarts(run_res.state.diverged), np.nan,
                          distributed.gather_restarts(run_res.state.loss))
    timing.update(compile_s=run_res.compile_s, attack_run_s=run_res.run_s,
                  restart_steps_per_s=cfg.num_restarts * total_steps(cfg)
                  / max(run_res.run_s, 1e-9))

  t0 = time.time()
  ev = evaluation.evaluate_candidates(cands, weights, final_loss, ds,
                                      train_margins=vsummary.get("margins"),
                                      ssim_threshold=cfg.ssim_threshold, seed=cfg.seed,
                                      figdir=workdir)
  timing["evaluation_s"] = time.time() - t0
  result = ev.pop("_result")
  timing["total_s"] = time.time() - t_start

  metrics = {
      "attack": cfg.attack, "problem": problem, "dataset": cfg.victim.dataset,
      "n_train": n, "m": m, "num_restarts": cfg.num_restarts if cfg.attack != "weights" else 1,
      "recovered_strict": ev["attack"]["recovered_strict"],
      "n_ssim_gt_0.4": ev["attack"]["n_ssim_gt_0.4"],
      "baseline_mean_image_n_ssim_gt_0.4": ev["baselines"]["mean_image"]["n_ssim_gt_0.4"],
      "baseline_mean_image_recovered_strict": ev["baselines"]["mean_image"]["recovered_strict"],
      "baseline_heldout_recovered_strict": ev["baselines"].get("heldout", {}).get(
          "recovered_strict"),
      "baseline_heldout_n_ssim_gt_0.4": ev["baselines"].get("heldout", {}).get("n_ssim_gt_0.4"),
      "oracle_residual_rel": oracle["residual_rel"],
      "victim": {k: v for k, v in vsummary.items() if k not in ("margins", "outputs")},
      "evaluation": ev["attack"], "baselines": ev["baselines"], "selection": ev["selection"],
      "per_restart": ev["per_restart"], "timing": timing,
  }
  if run_res is not None:
    last = chunks[-1]
    warning = precision.float32_floor_warning(chunks, dtype)
    metrics["precision_warning"] = warning
    if warning:
      logging.warning("precision: %s", warning)
    metrics["final_stat_rel"] = list(last.get("stat_rel", last["loss"]))  # None: non-finite
    for row, i in zip(metrics["per_restart"], range(cfg.num_restarts)):
      row.update({k: float(np.asarray(v)[i]) for k, v in hp.items()})
      if "stat_rel" in last:
        row["stat_rel"] = last["stat_rel"][i]
  common.write_json(workdir, "metrics.json", metrics)
  common.write_npz(workdir, "reconstructions.npz", candidates=cands, weights=weights,
                   final_loss=final_loss,
                   **({} if result is None else {"recon": result.recon, "ssim": result.ssim}),
                   train_idx=ds.train_idx, mean=ds.mean,
                   **{f"hp_{k}": v for k, v in hp.items()})
  write_restart_table(workdir, metrics["per_restart"])
  logging.info("recovered strictly %d/%d (SSIM>0.4: %d; mean-image baseline %d, held-out "
               "baseline strict %s); oracle residual %.3f; total %.1fs",
               metrics["recovered_strict"], n, metrics["n_ssim_gt_0.4"],
               metrics["baseline_mean_image_n_ssim_gt_0.4"],
               metrics["baseline_heldout_recovered_strict"], oracle["residual_rel"],
               timing["total_s"])
  return metrics


STATE_FILE = "state.msgpack"
_NOT_COMPARED = ("use_cache",)  # config fields that cannot change the results


def check_resumable(cfg: Config, workdir: str) -> None:
  """Raises UserError unless ``workdir`` holds a state file and the same config."""
  workdir = os.path.abspath(workdir)
  if not os.path.isdir(workdir):
    raise common.UserError(f"--resume: --workdir {workdir} does not exist; nothing to resume.")
  state_path = common.inside(workdir, STATE_FILE)
  cfg_path = common.inside(workdir, "config.json")
  if not os.path.isfile(state_path):
    raise common.UserError(f"--resume: {state_path} not found; nothing to resume "
                           "(run without --resume).")
  try:
    with open(cfg_path) as f:
      stored = json.load(f)["config"]
  except FileNotFoundError:
    raise common.UserError(f"--resume: {cfg_path} not found.") from None
  except (OSError, ValueError, KeyError, TypeError):
    raise common.UserError(f"--resume: {cfg_path} is unreadable or corrupt.") from None
  want = json.loads(json.dumps(common._jsonable(cfg)))
  diff = []
  for k in sorted(set(want) | set(stored)):
    a, b = want.get(k), stored.get(k)
    if k in _NOT_COMPARED or a == b:
      continue
    if isinstance(a, dict) and isinstance(b, dict):
      diff += [f"{k}.{j}" for j in sorted(set(a) | set(b)) if a.get(j) != b.get(j)]
    else:
      diff.append(k)
  if diff:
    raise common.UserError(f"--resume: the configuration differs from {cfg_path} in "
                           f"{', '.join(diff[:5])}; resume with the same flags.")


def _chunk_record(rec: dict) -> dict:
  """JSON-able summary of one chunk (kept in the state file, so resumed runs report all)."""
  out = {"step": int(rec["step"])}
  for k in ("loss", "stat_rel"):
    if k in rec:
      out[k] = [float(v) if np.isfinite(v) else None
                for v in np.asarray(rec[k], np.float64).ravel()]
  return out


def _saver(cfg: Config, workdir: str, keys, hp: dict, chunks: list, save_every: int):
  """loop.run progress callback: records each chunk, saves the state every N chunks."""
  path = common.inside(workdir, STATE_FILE)

  def progress(state, rec):
    chunks.append(_chunk_record(rec))
    if save_every and (len(chunks) % save_every == 0 or chunks[-1]["step"] >= total_steps(cfg)):
      resume.save(path, resume.run_tree(state, keys, hp),
                  {"config": common._jsonable(cfg), "chunks": chunks})
  return progress


def load_run_state(cfg: Config, workdir: str, attack, x_init, keys, hp: dict, target):
  """(batched RestartState, chunk records) from ``workdir``'s state file, validated."""
  path = common.inside(workdir, STATE_FILE)
  state, meta = resume.load_run(path, attack, x_init, keys, hp, target, cfg.batching)
  logging.info("resuming from %s at step %d", path, int(np.max(np.asarray(state.step))))
  return state, list(meta.get("chunks", []))


def write_restart_table(workdir: str, rows: list) -> None:
  if not rows:
    return
  keys = sorted({k for r in rows for k in r})
  keys = ["restart"] + [k for k in keys if k != "restart"]
  lines = ["\t".join(keys)]
  for r in rows:
    lines.append("\t".join("" if r.get(k) is None else
                           (f"{r[k]:.5g}" if isinstance(r.get(k), float) else str(r[k]))
                           for k in keys))
  from recon_jax import checkpoint
  checkpoint.atomic_write_text(common.inside(workdir, "restarts.tsv"), "\n".join(lines) + "\n")
