r"""Haim et al. 2022 §4, Fig. 2: reconstruct points on the unit circle from a 2-D classifier.

Trains (once, then cached) a 2-W-W-1 ReLU victim on n points of the unit
circle with alternating labels, runs the KKT attack with no prior from
Gaussian starting points, keeps the candidates with a large multiplier,
de-duplicates them, and counts the training points with a kept candidate
within ``tol``.

  python -m experiments.toy_2d --workdir=/tmp/toy                 # paper size, ~13 min
  python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:small \
      --workdir=/tmp/toy200                                       # width 200, ~2 min
  python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:quick --workdir=/tmp/toyq

Writes config.json, metrics.json, reconstructions.npz and toy_2d.png;
state.msgpack while it runs (--resume continues from it).
"""
from __future__ import annotations

import time

from absl import app, flags, logging

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "state.msgpack"
RANGE_NAMES = ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")
# The victim's init schemes that need no extra scale ('normal' needs init_std).
VICTIM_INITS = ("torch", "kaiming", "uniform")
VICTIM_ADAPTIVE = ("none", "loss", "grad")


def _refuse(name: str, message: str):
  raise common.UserError(f"--config.{name} {message}")


def validate(cfg) -> tuple:
  """Checks every setting before any work; returns ``(hparams, stages, labels)``.

  The toy's own settings raise :class:`common.UserError` naming ``--config.X``;
  the attack's ranges and refinement settings are checked by the library,
  whose errors name the setting too (see :func:`common.main_guard`).
  """
  from recon_jax import models, pipeline, sweep
  from recon_jax.attacks import kkt
  n = cfg.n_train
  if isinstance(n, bool) or not isinstance(n, int) or n < 2 or n % 2:
    _refuse("n_train", f"must be even and >= 2, got {n}.")
  if cfg.width < 1:
    _refuse("width", f"must be >= 1, got {cfg.width}.")
  if cfg.victim_init not in VICTIM_INITS:
    _refuse("victim_init", f"must be one of {', '.join(VICTIM_INITS)}, got {cfg.victim_init!r}.")
  if cfg.victim_bias not in models.BIAS_MODES:
    _refuse("victim_bias", f"must be one of {', '.join(models.BIAS_MODES)}, "
            f"got {cfg.victim_bias!r}.")
  if cfg.victim_adaptive not in VICTIM_ADAPTIVE:
    _refuse("victim_adaptive", f"must be one of {', '.join(VICTIM_ADAPTIVE)}, "
            f"got {cfg.victim_adaptive!r}.")
  for name in ("victim_init_gain", "victim_lr", "victim_epochs", "num_restarts", "steps",
               "chunk_steps", "tol"):
    if not cfg[name] > 0:
      _refuse(name, f"must be > 0, got {cfg[name]}.")
  for name in ("theta_norm", "lam_filter_frac", "dedup_radius", "save_every"):
    if not cfg[name] >= 0:
      _refuse(name, f"must be >= 0, got {cfg[name]}.")
  if cfg.theta_norm > 0 and cfg.victim_bias == "all":
    _refuse("theta_norm", "> 0 needs a homogeneous victim (--config.victim_bias=none or first).")
  labels = pipeline.candidate_labels("binary", cfg.m)
  ranges = {name: sweep.parse_range(name, cfg[name], "log") for name in RANGE_NAMES}
  hp = sweep.random_search(cfg.seed, cfg.num_restarts, ranges)
  kkt.check_hparams(hp)
  stages = sweep.stages(hp, cfg.steps, cfg.refine_steps, cfg.refine_alpha, cfg.refine_lr_scale)
  return hp, stages, labels


def victim_config(cfg):
  """The victim the toy trains: ``cfg``'s recipe on ``n_train`` points of the unit circle."""
  from recon_jax import victim
  return victim.VictimConfig(
      dataset="toy2d", n_per_class=cfg.n_train // 2, subtract_mean=False, data_seed=cfg.seed,
      arch="mlp", widths=(cfg.width, cfg.width), bias=cfg.victim_bias, init=cfg.victim_init,
      init_std=None, first_layer_std=None, init_gain=cfg.victim_init_gain, lr=cfg.victim_lr,
      epochs=cfg.victim_epochs, adaptive=cfg.victim_adaptive, seed=cfg.seed)


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Runs the toy and writes its report into ``workdir``; returns metrics.json's dict.

  The precision is the caller's (the binary enables float64 when ``cfg.x64``).
  With ``resume`` the attack continues from ``workdir``'s state.msgpack.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  from recon_jax import data, diagnostics, inits, loop, losses, pipeline
  from recon_jax.attacks import kkt
  from recon_jax.eval import points

  hp, stages, labels = validate(cfg)
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
  t_start = time.time()
  dtype = pipeline.float_dtype()
  if bool(cfg.x64) != (dtype == jnp.float64):
    logging.warning("x64=%s but JAX runs in %s (set the precision before calling run)",
                    cfg.x64, np.dtype(dtype).name)
  vcfg = victim_config(cfg)
  ds = data.load_dataset("toy2d", toy_n=cfg.n_train, seed=cfg.seed)
  if not resume:
    common.write_json(workdir, "config.json", {"config": cfg, "victim": vcfg.to_dict(),
                                               "environment": common.environment()})
  vic = pipeline.load_or_train_victim(vcfg, ds, use_cache=cfg.use_cache)
  timing = {"victim_s": time.time() - t_start}

  t0 = time.time()
  params = pipeline.cast_params(vic.params, dtype)
  oracle = diagnostics.oracle_residual(vic.apply_fn, "binary", params,
                                       jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train))
  kinks = diagnostics.kink_fraction(params, ds.x_train)
  timing["oracle_s"] = time.time() - t0
  logging.info("toy victim: loss %.3g, oracle residual %.4f, first-layer kinks on data %.2f",
               vic.summary.get("loss", float("nan")), oracle["residual_rel"], kinks)
  if cfg.theta_norm > 0:
    scale = cfg.theta_norm / jnp.sqrt(losses.tree_sq_norm(params))
    params = jax.tree_util.tree_map(lambda a: a * scale, params)
  target = pipeline.make_target(params, labels, ds.mean, box=None, dtype=dtype)
  attack = kkt.kkt_attack(vic.apply_fn, "binary", w_prior=0.0)  # no prior (Haim §4)
  x_init = inits.gaussian(cfg.m, (2,), dtype)
  keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
  x0 = np.asarray(jax.jit(jax.vmap(
      lambda k, h: loop.init_one(attack, x_init, k, h, target).inner.x))(
          keys, {k: jnp.asarray(v) for k, v in hp.items()}))
  res = pipeline.run_attack(attack, x_init, keys, stages, target, chunk_steps=cfg.chunk_steps,
                            state_path=common.inside(workdir, STATE_FILE),
                            save_every=cfg.save_every, resume=resume,
                            save_meta={"config": common.jsonable(cfg)})
  timing.update(compile_s=res.compile_s, run_s=res.run_s)

  settings = {"lam_filter_frac": cfg.lam_filter_frac, "dedup_radius": cfg.dedup_radius,
              "seed": cfg.seed}
  after_filter, kept = points.kept_masks(res.candidates, res.weights, res.diverged, **settings)
  score = points.score_point_clouds(res.candidates, res.weights, res.final_loss, res.diverged,
                                    ds.x_train, tol=cfg.tol, masks=(after_filter, kept),
                                    **settings)
  last = res.chunks[-1] if res.chunks else {}
  for row in score["per_restart"]:
    stat = (last.get("stat_rel") or [None] * cfg.num_restarts)[row["restart"]]
    row["stat_rel"] = None if row["diverged"] else stat
  sel = score["selected_restart"]
  at_init = points.recovery(x0[sel], ds.x_train, cfg.tol) if sel is not None else None
  timing["total_s"] = time.time() - t_start
  metrics = {
      **{k: score[k] for k in ("n_train", "recovered", "median_distance", "selected_restart",
                               "recovered_best_restart", "best_restart", "recovered_pooled",
                               "n_diverged", "per_restart")},
      "m": cfg.m, "width": cfg.width, "num_restarts": cfg.num_restarts,
      "tol": cfg.tol, "lam_filter_frac": cfg.lam_filter_frac, "dedup_radius": cfg.dedup_radius,
      # the selected restart's random starting points, scored the same way (unfiltered)
      "at_init": at_init,
      "oracle_residual_rel": oracle["residual_rel"], "kink_fraction": kinks,
      "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
      "victim_source": vic.source, "dtype": np.dtype(dtype).name, "timing": timing,
  }
  common.write_json(workdir, "metrics.json", metrics)
  common.write_npz(workdir, "reconstructions.npz", x=res.candidates, lam=res.weights, x0=x0,
                   after_filter=after_filter, kept=kept, final_loss=res.final_loss,
                   diverged=res.diverged, x_train=ds.x_train, y_train=ds.y_train,
                   **{f"hp_{k}": v for k, v in hp.items()})
  figure(common.inside(workdir, "toy_2d.png"), cfg, ds, vic, metrics, res.candidates, x0,
         labels, after_filter, kept)
  logging.info("toy 2d: recovered %d/%d (attacker-selected restart), best restart %d, pooled %d;"
               " oracle residual %.3f", metrics["recovered"], cfg.n_train,
               metrics["recovered_best_restart"], metrics["recovered_pooled"],
               oracle["residual_rel"])
  return metrics


def figure(path: str, cfg, ds, vic, metrics: dict, candidates, x0, labels, after_filter,
           kept) -> None:
  """toy_2d.png: data, decision regions and the selected restart's candidates, step by step."""
  import jax.numpy as jnp
  import numpy as np

  from recon_jax import pipeline, plotting
  n, r = cfg.n_train, metrics["selected_restart"]
  g = np.linspace(-1.6, 1.6, 121)
  gx, gy = np.meshgrid(g, g)
  grid = jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1), pipeline.float_dtype())
  params = pipeline.cast_params(vic.params)
  out = np.asarray(vic.apply_fn(params, grid, None))[:, 0].reshape(gx.shape)
  train = {"train": ds.x_train, "train_labels": ds.y_train}
  panels = [
      {"title": f"(a) the {n} training points", **train},
      {"title": "(b) the victim's decision regions\n(red: output > 0, blue: < 0)", **train,
       "field": (g, g, np.tanh(out / (np.abs(out).max() + 1e-12)))},
  ]
  net = f"a 2-{cfg.width}-{cfg.width}-1 ReLU net"
  if r is None:
    title = (f"Haim et al. §4: {n} points on the unit circle, {net}: all "
             f"{cfg.num_restarts} restarts of the attack diverged")
  else:
    f, k = after_filter[r], kept[r]
    row = metrics["per_restart"][r]
    panels += [
        {"title": f"(c) start: {cfg.m} candidates ~ N(0, σ²)", **train, "points": x0[r],
         "labels": labels},
        {"title": f"(d) after the attack: all {cfg.m} candidates", **train,
         "points": candidates[r], "labels": labels},
        {"title": f"(e) λ filter: the {int(f.sum())} with\nλ ≥ {cfg.lam_filter_frac:g} × max λ "
                  "(λ ≈ 0: no information)", **train, "points": candidates[r][f],
         "labels": labels[f]},
        {"title": f"(f) de-duplicated (radius {cfg.dedup_radius:g}):\n{int(k.sum())} kept, "
                  f"{row['recovered']}/{n} within {cfg.tol:g} of a training point", **train,
         "points": candidates[r][k], "labels": labels[k]},
    ]
    title = (f"Haim et al. §4: reconstructing {n} training points on the unit circle from {net}"
             f"\nrestart {r} of {cfg.num_restarts} (the attacker's pick: lowest final loss): "
             f"{metrics['recovered']}/{n} recovered within {cfg.tol:g}; best restart "
             f"{metrics['recovered_best_restart']}/{n}, all restarts pooled "
             f"{metrics['recovered_pooled']}/{n}")
  plotting.points_2d_panels(path, panels, title=title, ncols=3)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  cfg = FLAGS.config

  def job():
    common.configure_precision(cfg.x64)
    validate(cfg)
    if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
      common.check_resumable(cfg, FLAGS.workdir, STATE_FILE)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    m = run(cfg, workdir, resume=FLAGS.resume)
    print(f"wrote {workdir}: recovered {m['recovered']}/{m['n_train']} "
          f"(best restart {m['recovered_best_restart']}, pooled {m['recovered_pooled']}; "
          f"oracle residual {m['oracle_residual_rel']:.3f})")

  common.main_guard(job, cfg, FLAGS.verbose)


if __name__ == "__main__":
  common.define_flags("toy_2d", "paper")
  app.run(main)
