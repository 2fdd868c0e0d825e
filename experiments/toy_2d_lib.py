"""Haim et al. 2022 §4 / Fig. 2: reconstruct points on the unit circle from a 2-D classifier."""
from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from experiments import common
from recon_jax import inits, loop, plotting, sweep, victim
from recon_jax.eval import images as metrics
from recon_jax.attacks import kkt
from recon_jax.types import Target


@dataclasses.dataclass(frozen=True)
class Config:
  n_train: int = 20
  width: int = 1000
  # Victim recipe (see README): PyTorch's default nn.Linear init (weights and
  # biases U(+-1/sqrt(fan_in))), biases in every layer, plain full-batch GD.
  # With biases only in the first layer (or none) the trained net is almost
  # homogeneous in x, its decision regions are wedges through the origin, and
  # a candidate's radius is not identifiable: those victims gave 0-4 of 20.
  init: str = "torch"
  init_gain: float = 1.0
  bias: str = "all"
  victim_lr: float = 0.01
  victim_epochs: int = 20_000
  adaptive: str = "none"
  # > 0: the attack sees theta* rescaled to this norm (homogeneous victims only:
  # there the KKT conditions do not depend on the scale of theta).
  theta_norm: float = 0.0
  m: int = 100
  num_restarts: int = 4
  steps: int = 5000
  chunk_steps: int = 1000
  lr_x: str = "3e-4:1e-3:log"
  lr_lam: str = "5e-3:3e-2:log"
  sigma_x: str = "0.3:0.5:log"
  alpha: str = "4:10:lin"
  lam_min: str = "0.3:0.5:log"
  # Refinement stage (loop.run_stages): a sharp surrogate at a lower rate pulls
  # the candidates onto the ReLU kinks where the training points sit.
  refine_steps: int = 3000
  refine_alpha: float = 200.0
  refine_lr_scale: float = 0.1
  lam_filter_frac: float = 0.1   # keep candidates with lambda >= frac * max lambda of their restart
  dedup_radius: float = 0.03      # Haim §4
  tol: float = 0.05               # a training point is recovered if a kept candidate is this close
  seed: int = 0


def victim_config(cfg: Config) -> victim.VictimConfig:
  return victim.VictimConfig(dataset="toy2d", n_per_class=cfg.n_train // 2, subtract_mean=False,
                             data_seed=cfg.seed, arch="mlp", widths=(cfg.width, cfg.width),
                             bias=cfg.bias, init=cfg.init, init_std=None, first_layer_std=None,
                             init_gain=cfg.init_gain, lr=cfg.victim_lr, epochs=cfg.victim_epochs,
                             adaptive=cfg.adaptive, seed=cfg.seed)


def kink_fraction(params, x_train, rel_tol: float = 1e-3) -> float:
  """Fraction of first-layer ReLUs whose kink passes through a training point.

  A unit counts when ``|w.x_i + b| <= rel_tol * max_i |w.x_i + b|`` for some
  training point.  At PyTorch's init it is about 2% (n = 20); when training
  puts kinks on the data (72% for the default victim), the ReLU derivative at those points is not
  defined, and the oracle residual (which uses ``1{z > 0}``) overstates how far
  the victim is from a (Clarke) KKT point.
  """
  layer = params["params"]["layer_0"]
  z = np.asarray(x_train) @ np.asarray(layer["kernel"])
  if "bias" in layer:
    z = z + np.asarray(layer["bias"])
  a = np.abs(z)
  return float(np.mean(np.any(a <= rel_tol * (a.max(axis=0, keepdims=True) + 1e-30), axis=0)))


def run(cfg: Config, workdir: str, use_cache: bool = True) -> dict:
  if cfg.n_train < 2 or cfg.n_train % 2:
    raise common.UserError(f"--n_train must be even and >= 2, got {cfg.n_train}.")
  if cfg.m < 2 or cfg.m % 2:
    raise common.UserError(f"--m must be even and >= 2, got {cfg.m}.")
  if cfg.theta_norm > 0 and cfg.bias == "all":
    raise common.UserError("--theta_norm needs a homogeneous victim (--bias=none or first).")
  # Bad ranges or --refine_* fail here, before the victim is trained.
  ranges = {k: sweep.parse_range(k, getattr(cfg, k), "log")
            for k in ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")}
  hp = sweep.random_search(cfg.seed, cfg.num_restarts, ranges)
  stages = sweep.stages(hp, cfg.steps, cfg.refine_steps, cfg.refine_alpha, cfg.refine_lr_scale)
  vcfg = victim_config(cfg)
  from recon_jax import data
  ds = data.load_dataset("toy2d", toy_n=cfg.n_train, seed=cfg.seed)
  common.write_json(workdir, "config.json", {"config": cfg, "victim": vcfg.to_dict(),
                                             "environment": common.environment()})
  _, apply_fn = victim.build(vcfg, ds)
  params, vsum, _ = victim.get_or_train(vcfg, ds, use_cache=use_cache)
  dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
  params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)
  oracle = kkt.oracle_residual(apply_fn, "binary", params, jnp.asarray(ds.x_train, dtype),
                               jnp.asarray(ds.y_train))
  kinks = kink_fraction(params, ds.x_train)
  logging.info("toy victim: loss %.3g, oracle residual %.4f, first-layer kinks on data %.2f",
               vsum["loss"], oracle["residual_rel"], kinks)

  if cfg.theta_norm > 0:
    norm = jnp.sqrt(kkt.tree_sq_norm(params))
    params = jax.tree_util.tree_map(lambda a: a * (cfg.theta_norm / norm), params)
  labels = np.concatenate([np.ones(cfg.m // 2), -np.ones(cfg.m // 2)]).astype(np.float32)
  inf = jnp.full((2,), jnp.inf, dtype)
  target = Target(params, jnp.asarray(labels), -inf, inf)  # no prior: L_prior = 0 (Haim §4)
  attack = kkt.kkt_attack(apply_fn, "binary", w_prior=0.0)
  x_init = inits.gaussian(cfg.m, (2,), dtype)
  keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
  init_state = jax.jit(jax.vmap(lambda k, h: loop.init_one(attack, x_init, k, h, target)))(
      keys, {k: jnp.asarray(v) for k, v in hp.items()})
  x0 = np.asarray(init_state.inner.x)
  res = loop.run_stages(attack, x_init, keys, stages, target, chunk_steps=cfg.chunk_steps)
  xs = np.asarray(res.state.inner.x)
  lam = np.asarray(res.state.inner.lam)
  ok = ~np.asarray(res.state.diverged)

  per, kept_all = [], []
  for r in range(cfg.num_restarts):
    if not ok[r]:
      per.append({"restart": r, "diverged": True})
      continue
    keep = metrics.lambda_filter(lam[r], cfg.lam_filter_frac * lam[r].max())
    pts = xs[r][keep]
    dd = metrics.greedy_dedup(pts, cfg.dedup_radius, cfg.seed + r) if len(pts) else keep[:0]
    kept = pts[dd]
    rec, _ = metrics.points_recovered(kept, ds.x_train, cfg.tol)
    rec_all, _ = metrics.points_recovered(xs[r], ds.x_train, cfg.tol)
    dist = (np.sqrt(((ds.x_train[:, None] - kept[None]) ** 2).sum(-1)).min(1) if len(kept)
            else np.full(len(ds.x_train), np.inf))
    per.append({"restart": r, "diverged": False, "recovered": int(rec),
                "recovered_unfiltered": int(rec_all), "n_kept": int(len(kept)),
                "median_distance": float(np.median(dist)),
                "final_loss": float(np.asarray(res.state.loss)[r]),
                "stat_rel": float(np.asarray(res.history[-1]["stat_rel"])[r])})
    kept_all.append((r, keep, dd, kept))
  good = [p for p in per if not p["diverged"]]
  best = min(good, key=lambda p: p["final_loss"]) if good else None  # attacker-side choice
  best_true = max(good, key=lambda p: p["recovered"]) if good else None
  # The pooled view: kept candidates of all restarts together.
  pooled = np.concatenate([k[3] for k in kept_all]) if kept_all else np.zeros((0, 2))
  pooled_rec, _ = metrics.points_recovered(pooled, ds.x_train, cfg.tol)

  out = {"n_train": cfg.n_train, "recovered": best["recovered"] if best else 0,
         "recovered_best_restart": best_true["recovered"] if best_true else 0,
         "recovered_pooled": int(pooled_rec), "oracle_residual_rel": oracle["residual_rel"],
         "kink_fraction": kinks,
         "median_distance": best["median_distance"] if best else None,
         "selected_restart": best["restart"] if best else None,
         "victim": {k: v for k, v in vsum.items() if k not in ("margins", "outputs")},
         "per_restart": per, "timing": {"compile_s": res.compile_s, "run_s": res.run_s}}
  common.write_json(workdir, "metrics.json", out)
  common.write_npz(workdir, "reconstructions.npz", x=xs, lam=lam, x0=x0, x_train=ds.x_train,
                   y_train=ds.y_train, **{f"hp_{k}": v for k, v in hp.items()})
  if best is not None:
    r = best["restart"]
    _, keep, dd, kept = next(k for k in kept_all if k[0] == r)
    g = np.linspace(-1.6, 1.6, 121)
    gx, gy = np.meshgrid(g, g)
    grid_pts = jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1), dtype)
    field = np.asarray(apply_fn(params, grid_pts, None))[:, 0].reshape(gx.shape)
    cand_lab = labels
    panels = [
        {"title": "(a) training data", "train": ds.x_train, "train_labels": ds.y_train},
        {"title": "(b) decision regions", "train": ds.x_train, "train_labels": ds.y_train,
         "field": (gx, gy, np.tanh(field / (np.abs(field).max() + 1e-12)))},
        {"title": "(c) initialisation", "train": ds.x_train, "train_labels": ds.y_train,
         "points": x0[r], "labels": cand_lab},
        {"title": "(d) result", "train": ds.x_train, "train_labels": ds.y_train,
         "points": xs[r], "labels": cand_lab},
        {"title": f"(e) lambda >= {cfg.lam_filter_frac:g} max", "train": ds.x_train,
         "train_labels": ds.y_train, "points": xs[r][keep], "labels": cand_lab[keep]},
        {"title": f"(f) de-duplicated: {best['recovered']}/{cfg.n_train}", "train": ds.x_train,
         "train_labels": ds.y_train, "points": kept, "labels": cand_lab[keep][dd]},
    ]
    plotting.points_2d_panels(os.path.join(workdir, "toy_2d.png"), panels)
  logging.info("toy 2d: recovered %d/%d (attacker-selected restart), best restart %d, pooled %d; "
               "oracle residual %.3f", out["recovered"], cfg.n_train,
               out["recovered_best_restart"], out["recovered_pooled"], oracle["residual_rel"])
  return out
