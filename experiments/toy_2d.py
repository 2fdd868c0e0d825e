r"""Haim et al. 2022 §4, Fig. 2: the 2-D toy (n points on the unit circle, alternating labels).

  python -m experiments.toy_2d --workdir=/tmp/toy                # paper size, ~13 min on 2 CPU cores
  python -m experiments.toy_2d --width=200 --num_restarts=8 --workdir=/tmp/toy200  # ~2 min
"""
import dataclasses

from absl import app, flags, logging

from experiments import common, toy_2d_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "workdirs/toy_2d", "Output folder (must be empty).")
flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")
flags.DEFINE_bool("cache", True, "Cache the trained victim.")
flags.DEFINE_bool("x64", True, "float64 (the victim needs it to reach the KKT direction).")
for _f in dataclasses.fields(toy_2d_lib.Config):
  _kind = {int: "integer", float: "float", str: "string"}[type(_f.default)]
  getattr(flags, f"DEFINE_{_kind}")(_f.name, None, f"default {_f.default}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)

  def job():
    common.configure_precision(FLAGS.x64)
    over = {f.name: FLAGS[f.name].value for f in dataclasses.fields(toy_2d_lib.Config)
            if FLAGS[f.name].value is not None}
    cfg = dataclasses.replace(toy_2d_lib.Config(), **over)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite)
    out = toy_2d_lib.run(cfg, workdir, use_cache=FLAGS.cache)
    print(f"wrote {workdir}: recovered {out['recovered']}/{out['n_train']} "
          f"(oracle residual {out['oracle_residual_rel']:.3f})")

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
