r"""Reconstruct training data from a trained classifier's parameters (the main job).

With no flags: trains (once, then cached) a 625-256-256-1 victim on 10 faces +
10 non-faces of the LFW subset bundled with scikit-image, runs 16 restarts of
the KKT attack of Haim et al. (2022) in one compiled call, and writes the
report into --workdir.

  python -m experiments.reconstruct --workdir=/tmp/recon
  python -m experiments.reconstruct --preset=digits --workdir=/tmp/digits
  python -m experiments.reconstruct --checkpoint=victim/victim.msgpack --dataset=mnist \
      --data_dir=~/data/mnist --n_per_class=250 --widths=1000,1000 --num_restarts=100 \
      --steps=100000 --sweep=paper --workdir=/tmp/mnist
"""
import dataclasses

from absl import app, flags, logging

from experiments import common, reconstruct_lib
from experiments.victim_flags import define_victim_flags, victim_config_from_flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("preset", "lfw", sorted(reconstruct_lib.PRESETS), "Base configuration.")
flags.DEFINE_string("workdir", "workdirs/reconstruct", "Output folder (must be empty).")
flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")
flags.DEFINE_bool("resume", False, "Continue the run saved in --workdir (state.msgpack; same "
                  "flags as the run that wrote it).")
flags.DEFINE_integer("save_every", 1, "Save the full attack state to state.msgpack every N "
                     "chunks (0: never).")
flags.DEFINE_string("checkpoint", "", "Victim checkpoint (train_victim.py); default: train one.")
flags.DEFINE_string("data_dir", None, "Folder with CIFAR-10/MNIST files (not downloaded).")
flags.DEFINE_string("attack", "kkt", "kkt | inversion | weights.")
flags.DEFINE_string("problem", "auto", "auto | binary | multiclass | general.")
flags.DEFINE_integer("num_restarts", None, "Restarts R, vmapped in one compiled call.")
flags.DEFINE_integer("steps", None, "Optimisation steps per restart.")
flags.DEFINE_integer("chunk_steps", None, "Steps per compiled chunk between progress logs.")
flags.DEFINE_integer("m", None, "Candidates per restart (0: 2n).")
flags.DEFINE_string("init", None, "x-init: gaussian | uniform | ground_truth | partition | mix.")
flags.DEFINE_string("sweep", None, "random (the ranges below) | paper (Haim App. B ranges).")
for _name, _help in [("lr_x", "learning rate of x"), ("lr_lam", "learning rate of lambda"),
                     ("sigma_x", "init scale of x"), ("alpha", "surrogate ReLU sharpness"),
                     ("lam_min", "lambda lower bound")]:
  flags.DEFINE_string(_name, None, f"{_help}: VALUE or LO:HI[:log|lin] sampled per restart.")
flags.DEFINE_integer("refine_steps", None, "Steps of a refinement stage after --steps (0: off).")
flags.DEFINE_float("refine_alpha", None, "Surrogate alpha of every restart in the refinement stage.")
flags.DEFINE_float("refine_lr_scale", None, "Learning-rate factor in the refinement stage.")
flags.DEFINE_string("optimizer", None, "sgd (momentum 0.9) | adam.")
flags.DEFINE_float("w_lam", None, "Weight of the lambda hinge.")
flags.DEFINE_float("w_prior", None, "Weight of the pixel-box prior.")
flags.DEFINE_string("batching", None, "auto (map on CPU, vmap on GPU/TPU) | vmap | map.")
flags.DEFINE_float("ssim_threshold", None, "Strict-recovery SSIM threshold (default by size).")
flags.DEFINE_integer("seed", None, "Seed of the sweep and the inits.")
flags.DEFINE_bool("x64", False, "Run in float64.")
flags.DEFINE_string("matmul_precision", "default", "default | high | highest.")
flags.DEFINE_bool("distributed", False,
                  "Call jax.distributed.initialize() first: a multi-host sweep "
                  "(see recon_jax/distributed.py); process 0 writes the workdir.")
flags.DEFINE_bool("cache", True, "Cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax).")
define_victim_flags()


def build_config() -> reconstruct_lib.Config:
  base = reconstruct_lib.Config(**reconstruct_lib.PRESETS[FLAGS.preset])
  over = {}
  for f in dataclasses.fields(reconstruct_lib.Config):
    if f.name in ("victim",):
      continue
    if f.name in FLAGS and FLAGS[f.name].value is not None and (
        FLAGS[f.name].present or f.name in ("checkpoint", "data_dir")):
      over[f.name] = FLAGS[f.name].value
  over["victim"] = victim_config_from_flags(base.victim, FLAGS.checkpoint)
  over["use_cache"] = FLAGS.cache
  return dataclasses.replace(base, **over)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")

  logging.set_verbosity(logging.INFO)

  def job():
    from recon_jax import distributed
    distributed.maybe_initialize(FLAGS.distributed)  # before any other JAX call
    common.configure_precision(FLAGS.x64, FLAGS.matmul_precision)
    cfg = build_config()
    reconstruct_lib.validate(cfg)
    if FLAGS.save_every < 0:
      raise common.UserError(f"--save_every must be >= 0 (0: never), got {FLAGS.save_every}.")
    if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
      reconstruct_lib.check_resumable(cfg, FLAGS.workdir)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    import jax
    logging.info("devices: %s", jax.devices())
    reconstruct_lib.run(cfg, workdir, resume_run=FLAGS.resume, save_every=FLAGS.save_every)
    print(f"wrote {workdir}")

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
