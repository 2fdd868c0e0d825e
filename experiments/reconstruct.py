r"""Reconstruct training data from a trained classifier's parameters (the main job).

With no flags: trains (once, then cached) a 625-256-256-1 victim on 10 faces +
10 non-faces of the LFW subset bundled with scikit-image, runs 16 restarts of
the KKT attack of Haim et al. (2022) in one compiled call, and writes the
report into --workdir.

  python -m experiments.reconstruct --workdir=/tmp/recon
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:digits \
      --workdir=/tmp/digits
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:paper \
      --config.victim.dataset=mnist --config.data_dir=~/data/mnist --workdir=/tmp/mnist

Writes config.json, metrics.json, restarts.tsv, reconstructions.npz,
reconstructions.png and ssim_vs_margin.png; state.msgpack while it runs
(--resume continues from it).
"""
from absl import app, flags, logging

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "state.msgpack"


def prepare(cfg, requested_victim=None) -> None:
  """Paths expanded, settings validated: everything that can fail before any work."""
  from recon_jax import pipeline
  cfg.data_dir = common.expand(cfg.data_dir)
  cfg.checkpoint = common.expand(cfg.checkpoint)
  cfg.foreign.data_mean = common.expand(cfg.foreign.data_mean)
  if cfg.save_every < 0:
    raise common.UserError(f"--config.save_every must be >= 0 (0: never), got {cfg.save_every}.")
  pipeline.validate(cfg)
  pipeline.victim_config(cfg, requested_victim)


def run(cfg, workdir: str, *, resume: bool = False, requested_victim=None) -> dict:
  """Runs one reconstruction job and writes its report into ``workdir``.

  ``requested_victim``: victim settings the user gave explicitly; with a
  checkpoint they must agree with it.
  """
  from recon_jax import pipeline, plotting
  prepare(cfg, requested_victim)
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
  else:
    common.write_json(workdir, "config.json", {"config": cfg, "environment":
                                               common.environment()})
  out = pipeline.reconstruct(cfg, state_path=common.inside(workdir, STATE_FILE),
                             save_every=cfg.save_every, resume=resume,
                             save_meta={"config": common.jsonable(cfg)},
                             requested_victim=requested_victim)
  metrics = out.metrics
  common.write_json(workdir, "metrics.json", metrics)
  common.write_npz(workdir, "reconstructions.npz", **out.arrays)
  common.write_text(workdir, "restarts.tsv", restart_table(metrics["per_restart"]))
  if out.eval_result is not None:
    ds = out.dataset
    plotting.reconstruction_report(
        workdir, out.eval_result, ds.x_train + ds.mean,
        ds.x_test + ds.mean if len(ds.x_test) else None, out.victim.summary.get("margins"),
        metrics["evaluation"]["ssim_threshold"])
  return metrics


def restart_table(rows: list) -> str:
  """One line per restart (tab-separated): its hyperparameters and its scores."""
  keys = sorted({k for r in rows for k in r} - {"restart"})
  lines = ["\t".join(["restart"] + keys)]
  for r in rows:
    lines.append("\t".join([str(r.get("restart"))] + [
        "" if r.get(k) is None else (f"{r[k]:.5g}" if isinstance(r[k], float) else str(r[k]))
        for k in keys]))
  return "\n".join(lines) + "\n"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  cfg = FLAGS.config

  def job():
    from recon_jax import distributed
    distributed.maybe_initialize(cfg.distributed)  # before any other JAX call
    common.configure_precision(cfg.x64, cfg.matmul_precision)
    requested = common.overrides(FLAGS, "victim.")
    prepare(cfg, requested)
    if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
      common.check_resumable(cfg, FLAGS.workdir, STATE_FILE)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    m = run(cfg, workdir, resume=FLAGS.resume, requested_victim=requested)
    print(f"wrote {workdir}: recovered {m['recovered_strict']}/{m['n_train']} strictly "
          f"(held-out baseline {m['baseline_heldout_recovered_strict']})")

  common.main_guard(job, cfg, FLAGS.verbose)


if __name__ == "__main__":
  common.define_flags("reconstruct", "lfw")
  app.run(main)
