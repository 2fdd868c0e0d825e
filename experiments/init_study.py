r"""Runkel et al. (2024) initialisation study (§4.3-4.5), bilevel and KKT attacks.

  python -m experiments.init_study --workdir=/tmp/init_study            # digits, ~minutes
  python -m experiments.init_study --workdir=/tmp/init_quick --quick    # CI-sized
  python -m experiments.init_study --workdir=... --dataset=cifar10 --data_dir=/data/cifar
  python -m experiments.init_study --workdir=/tmp/init_study --resume   # after an interruption
"""
import dataclasses
import os

from absl import app, flags, logging
import jax

from experiments import common

flags.DEFINE_string("workdir", None, "Output directory (must be empty unless --overwrite).")
flags.DEFINE_bool("overwrite", False, "Allow a non-empty workdir.")
flags.DEFINE_bool("quick", False, "CI-sized run (< 1 min).")
flags.DEFINE_string("dataset", "digits", "digits (embedded) or cifar10/mnist (--data_dir).")
flags.DEFINE_string("data_dir", None, "Directory with the dataset files.")
flags.DEFINE_integer("n_per_class", None, "Training images per class.")
flags.DEFINE_integer("steps", None, "Bilevel outer steps.")
flags.DEFINE_integer("width", None, "One-hidden width (paper: 6144).")
flags.DEFINE_string("act", None, "Smooth activation of the bilevel one-hidden net.")
flags.DEFINE_string("theta0", None, "target | uniform | gaussian.")
flags.DEFINE_string("hessian_solve", None, "cg | lbfgs.")
flags.DEFINE_float("wd", None, "Weight decay (> 0).")
flags.DEFINE_float("lr_x", None, "Outer learning rate.")
flags.DEFINE_string("batching", None, "vmap | map | auto.")
flags.DEFINE_bool("x64", True, "Float64 (needed for the 1e-7 inner tolerances).")
flags.DEFINE_integer("save_every", 1, "Save each attack's state_<name>.msgpack every N chunks "
                     "(0: never).")
flags.DEFINE_bool("resume", False, "Continue an interrupted run in --workdir (same flags): "
                  "finished attacks are loaded, the interrupted one continues from its state.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")
flags.mark_flags_as_required(["workdir"])
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")

  def job():
    if FLAGS.resume and not os.path.isdir(FLAGS.workdir):
      raise common.UserError(f"--resume: --workdir {FLAGS.workdir} does not exist; "
                             "nothing to resume.")
    if FLAGS.save_every < 0:
      raise common.UserError(f"--save_every must be >= 0 (0: never), got {FLAGS.save_every}.")
    common.configure_precision(FLAGS.x64)
    from experiments import init_study_lib as lib  # after x64 is set
    over = {k: getattr(FLAGS, k) for k in ("dataset", "data_dir", "n_per_class", "steps",
                                           "width", "act", "theta0", "hessian_solve", "wd",
                                           "lr_x", "batching")
            if getattr(FLAGS, k) is not None}
    cfg = lib.quick_config(**over) if FLAGS.quick else dataclasses.replace(lib.Config(), **over)
    lib.validate(cfg)
    if FLAGS.resume:
      lib.check_resumable(cfg, FLAGS.workdir)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    logging.info("devices: %s", jax.devices())
    lib.run(cfg, workdir, resume_run=FLAGS.resume, save_every=FLAGS.save_every)
    print(open(os.path.join(workdir, "summary.md")).read())

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
