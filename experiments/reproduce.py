r"""Issue 7: regenerate the papers' experiments at one scale -> RESULTS.md + figures.

  python -m experiments.reproduce --scale=quick --workdir=/tmp/repro_quick
  python -m experiments.reproduce --scale=default --workdir=/tmp/repro_default
  python -m experiments.reproduce --scale=paper --data_dir=/data --workdir=/tmp/repro_paper
"""
import os

from absl import app, flags, logging

from experiments import common

FLAGS = flags.FLAGS
flags.DEFINE_enum("scale", "quick", ["quick", "default", "paper"],
                  "quick: CI (< ~90 s); default: embedded data (~30 min, 2-core CPU); "
                  "paper: MNIST/CIFAR-10 from --data_dir at the papers' sizes (GPU).")
flags.DEFINE_string("data_dir", None, "Folder with the MNIST and CIFAR-10 files (--scale=paper).")
flags.DEFINE_string("workdir", "workdirs/reproduce", "Output folder (must be empty).")
flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  os.environ.setdefault("MPLBACKEND", "Agg")

  def job():
    from experiments import reproduce_lib
    if FLAGS.scale == "paper":
      reproduce_lib._check_paper_data(FLAGS.data_dir)  # refuse before touching --workdir
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite)
    out = reproduce_lib.run(FLAGS.scale, workdir, data_dir=FLAGS.data_dir)
    n_yes = sum(c["reproduced"] == "yes" for c in out["claims"])
    print(f"wrote {os.path.join(workdir, 'RESULTS.md')}: {n_yes}/{len(out['claims'])} claims "
          f"reproduced ({out['total_s']:.0f} s)")

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
