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

from absl import flags, logging

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "state.msgpack"


def validate(cfg) -> tuple:
  """:func:`recon_jax.toy.validate`: ``(hparams, stages, labels)``, or a ConfigError."""
  from recon_jax import toy

  return toy.validate(cfg)


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Runs the toy and writes its report into ``workdir``; returns metrics.json's dict.

  The precision is the caller's (the binary enables float64 when ``cfg.x64``).
  With ``resume`` the attack continues from ``workdir``'s state.msgpack.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  from recon_jax import data, diagnostics, inits, loop, losses, pipeline, plotting, toy
  from recon_jax.attacks import kkt

  hp, stages, labels = validate(cfg)
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
  t_start = time.time()
  dtype = pipeline.float_dtype()
  if bool(cfg.x64) != (dtype == jnp.float64):
    logging.warning(
      "x64=%s but JAX runs in %s (set the precision before calling run)",
      cfg.x64,
      np.dtype(dtype).name,
    )
  vcfg = toy.victim_config(cfg)
  ds = data.load_dataset("toy2d", toy_n=cfg.n_train, seed=cfg.seed)
  if not resume:
    common.write_json(
      workdir,
      "config.json",
      {"config": cfg, "victim": vcfg.to_dict(), "environment": common.environment()},
    )
  vic = pipeline.load_or_train_victim(vcfg, ds, use_cache=cfg.use_cache)
  timing = {"victim_s": time.time() - t_start}

  t0 = time.time()
  params = pipeline.cast_params(vic.params, dtype)
  oracle = diagnostics.oracle_residual(
    vic.apply_fn, "binary", params, jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train)
  )
  kinks = diagnostics.kink_fraction(params, ds.x_train)
  timing["oracle_s"] = time.time() - t0
  logging.info(
    "toy victim: loss %.3g, oracle residual %.4f, first-layer kinks on data %.2f",
    vic.summary.get("loss", float("nan")),
    oracle["residual_rel"],
    kinks,
  )
  if cfg.theta_norm > 0:
    scale = cfg.theta_norm / jnp.sqrt(losses.tree_sq_norm(params))
    params = jax.tree_util.tree_map(lambda a: a * scale, params)
  target = pipeline.make_target(params, labels, ds.mean, box=None, dtype=dtype)
  attack = kkt.kkt_attack(vic.apply_fn, "binary", w_prior=0.0)  # no prior (Haim §4)
  x_init = inits.gaussian(cfg.m, (2,), dtype)
  keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
  x0 = np.asarray(
    jax.jit(jax.vmap(lambda k, h: loop.init_one(attack, x_init, k, h, target).inner.x))(
      keys, {k: jnp.asarray(v) for k, v in hp.items()}
    )
  )
  res = pipeline.run_attack(
    attack,
    x_init,
    keys,
    stages,
    target,
    chunk_steps=cfg.chunk_steps,
    state_path=common.inside(workdir, STATE_FILE),
    save_every=cfg.save_every,
    resume=resume,
    save_meta={"config": common.jsonable(cfg)},
  )
  timing.update(compile_s=res.compile_s, run_s=res.run_s)

  score, at_init, after_filter, kept = toy.score(cfg, res, x0, ds.x_train)
  timing["total_s"] = time.time() - t_start
  metrics = {
    **toy.metrics_keys(score),
    "m": cfg.m,
    "width": cfg.width,
    "num_restarts": cfg.num_restarts,
    "tol": cfg.tol,
    "lam_filter_frac": cfg.lam_filter_frac,
    "dedup_radius": cfg.dedup_radius,
    # the selected restart's random starting points, scored the same way (unfiltered)
    "at_init": at_init,
    "oracle_residual_rel": oracle["residual_rel"],
    "kink_fraction": kinks,
    "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
    "victim_source": vic.source,
    "dtype": np.dtype(dtype).name,
    "timing": timing,
  }
  common.write_json(workdir, "metrics.json", metrics)
  common.write_npz(
    workdir,
    "reconstructions.npz",
    x=res.candidates,
    lam=res.weights,
    x0=x0,
    after_filter=after_filter,
    kept=kept,
    final_loss=res.final_loss,
    diverged=res.diverged,
    x_train=ds.x_train,
    y_train=ds.y_train,
    **{f"hp_{k}": v for k, v in hp.items()},
  )
  plotting.toy_figure(
    common.inside(workdir, "toy_2d.png"),
    cfg,
    ds,
    vic,
    metrics,
    res.candidates,
    x0,
    labels,
    after_filter,
    kept,
  )
  logging.info(
    "toy 2d: recovered %d/%d (attacker-selected restart), best restart %d, pooled %d;"
    " oracle residual %.3f",
    metrics["recovered"],
    cfg.n_train,
    metrics["recovered_best_restart"],
    metrics["recovered_pooled"],
    oracle["residual_rel"],
  )
  return metrics


def main(cfg):
  """The command line: flags -> checks -> run -> one line of results."""
  common.configure_precision(cfg.x64)
  validate(cfg)
  if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
    common.check_resumable(cfg, FLAGS.workdir, STATE_FILE)
  workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
  m = run(cfg, workdir, resume=FLAGS.resume)
  print(
    f"wrote {workdir}: recovered {m['recovered']}/{m['n_train']} "
    f"(best restart {m['recovered_best_restart']}, pooled {m['recovered_pooled']}; "
    f"oracle residual {m['oracle_residual_rel']:.3f})"
  )


if __name__ == "__main__":
  common.define_flags("toy_2d", "paper")
  common.run_main(main)
