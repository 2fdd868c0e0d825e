r"""The efficacy harness: one attack configuration (or several, paired) over K data draws.

Each draw re-draws the training images and the victim (``victim.data_seed`` =
``victim.seed`` = the draw's number) and runs the same restart sweep; every
variant runs on the same draws, so variants are compared pair by pair.

  python -m experiments.efficacy --workdir=/tmp/eff                        # LFW, 5 draws
  python -m experiments.efficacy --variants=default,sgd,lm --workdir=/tmp/eff_levers
  python -m experiments.efficacy --config=experiments/configs/efficacy.py:leakage_map \
      --draws=3 --workdir=/tmp/leakage_map
  python -m experiments.efficacy --config=experiments/configs/efficacy.py:tiny --draws=2 \
      --workdir=/tmp/eff_tiny

Writes metrics.json ({variant: {number: {mean, ci_low, ci_high, per_draw}}} and
paired differences against the first variant), results.md (the table),
efficacy.png (per-draw counts, attack vs baselines) and one reconstruction
workdir per variant and draw; a config with a ``map`` (the leakage_map presets) also
leakage_map.png and leakage_map.md.  --resume keeps finished draws and continues an
interrupted one.
"""

from absl import flags

from experiments import common

FLAGS = flags.FLAGS


def job(cfg, workdir, *, variants="", draws=5, first_draw=0, resume=False, overwrite=False):
  """The harness over ``draws`` data draws into ``workdir``; everything checked first.
  ``variants`` '': every cell of the config's map, else ``default``."""
  from recon_jax import workdir as wd
  from recon_jax.precision import set_precision
  from recon_jax.studies import efficacy, leakage_map, runner

  set_precision(cfg.base.x64, cfg.base.matmul_precision)
  names = [v.strip() for v in variants.split(",") if v.strip()]
  if not variants.strip():  # not given: every cell of the config's map, else the default
    names = leakage_map.variants_of(cfg.map) if "map" in cfg else ["default"]
  configs = runner.check_efficacy(cfg, names, draws, first_draw)
  if resume:  # all checked before the workdir is touched, and only here
    runner.check_efficacy_resumable(cfg, workdir, names)
  workdir = wd.prepare(workdir, overwrite or resume)
  wd.lock(workdir)
  out = runner.run_efficacy(cfg, workdir, names, draws, first_draw, resume=resume, configs=configs)
  print(efficacy.efficacy_table(out, names))
  print(f"wrote {workdir}")


def main(cfg):
  job(
    cfg,
    FLAGS.workdir,
    variants=FLAGS.variants,
    draws=FLAGS.draws,
    first_draw=FLAGS.first_draw,
    resume=FLAGS.resume,
    overwrite=FLAGS.overwrite,
  )


if __name__ == "__main__":
  # The harness's own flags first, so that --help lists them.
  flags.DEFINE_integer("draws", 5, "Data draws K (training images and victim re-drawn).")
  flags.DEFINE_integer("first_draw", 0, "Number of the first draw; draws are consecutive.")
  flags.DEFINE_string(
    "variants",
    "",
    "Comma-separated variants of the config to run on the same draws; the first is the "
    "reference of the paired differences ('': the config's map cells, else default); each "
    "at most once, and with --resume the same list as the run being resumed.",
  )
  common.define_flags("efficacy", "finetune")
  common.run_main(main)
