r"""Runkel et al. (2024) initialisation study (§4.3-4.5), bilevel and KKT attacks.

  python -m experiments.init_study --workdir=/tmp/init_study            # digits, ~minutes
  python -m experiments.init_study --workdir=/tmp/init_quick --quick    # CI-sized
  python -m experiments.init_study --workdir=... --dataset=cifar10 --data_dir=/data/cifar
"""
import dataclasses
import os
import sys

from absl import app, flags, logging
import jax

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
flags.mark_flags_as_required(["workdir"])
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if os.path.isdir(FLAGS.workdir) and os.listdir(FLAGS.workdir) and not FLAGS.overwrite:
    print(f"error: --workdir {FLAGS.workdir} is not empty; pass --overwrite.", file=sys.stderr)
    sys.exit(1)
  jax.config.update("jax_enable_x64", FLAGS.x64)
  from experiments import init_study_lib as lib  # after x64 is set
  logging.info("devices: %s", jax.devices())
  over = {k: getattr(FLAGS, k) for k in ("dataset", "data_dir", "n_per_class", "steps",
                                         "width", "act", "theta0", "hessian_solve", "wd",
                                         "lr_x", "batching")
          if getattr(FLAGS, k) is not None}
  cfg = lib.quick_config(**over) if FLAGS.quick else dataclasses.replace(lib.Config(), **over)
  lib.run(cfg, FLAGS.workdir)
  print(open(os.path.join(FLAGS.workdir, "summary.md")).read())


if __name__ == "__main__":
  app.run(main)
