r"""The efficacy harness: one attack configuration (or several, paired) over K data draws.

Each draw re-draws the training images and the victim (``victim.data_seed`` =
``victim.seed`` = the draw's number) and runs the same restart sweep; every
variant runs on the same draws, so variants are compared pair by pair.

  python -m experiments.efficacy --workdir=/tmp/eff          # the finetune preset, 5 draws
  python -m experiments.efficacy --config=experiments/configs/efficacy.py:finetune_kkt \
      --variants=default,sgd,pixels --workdir=/tmp/eff_levers
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

from experiments import starting

starting("efficacy")  # SIGINT and SIGTERM heard from here on, before JAX loads

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def job(cfg, workdir, **kwargs):
  """:func:`recon_jax.studies.runner.efficacy_job` (its arguments); prints the table."""
  from recon_jax.studies import efficacy, runner

  path, out = runner.efficacy_job(cfg, workdir, **kwargs)
  print(efficacy.efficacy_table(out, list(out.variants)))
  print(f"wrote {path}")


def main(cfg):
  names = ("variants", "draws", "first_draw", "resume", "overwrite")
  job(cfg, FLAGS.workdir, **{k: FLAGS[k].value for k in names})


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
  cli.run(main, configs.path("efficacy"), "finetune")
