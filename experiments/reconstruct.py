r"""Reconstruct training data from a trained classifier's parameters (the main job).

With no flags (finetune): a 625-2048-1 victim fine-tuned from a seeded theta_0 on 10 +
10 LFW images (trained once, then cached); the images read off theta* - theta_0 by
linear programs (attack=cone); the report in --workdir.  lfw: Haim et al.'s setting.

  python -m experiments.reconstruct --workdir=/tmp/recon
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:digits \
      --workdir=/tmp/digits
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:paper \
      --config.victim.dataset=mnist --config.data_dir=~/data/mnist --workdir=/tmp/mnist

Writes report.md (read it first), metrics.json, config.json, restarts.tsv, reconstructions.npz,
reconstructions.png, ssim_vs_margin.png and roc.png (and others where they apply: README.md);
state.msgpack while it runs (--resume continues from it).  Exit code 0: done (warnings are
printed and kept in metrics.json); 1: a setting or file it cannot use, in one line naming it,
before anything is written; 2: every restart diverged (the results are written); 130:
interrupted (Ctrl-C); 143: terminated (SIGTERM).
"""

from experiments import starting

starting("reconstruct")  # SIGINT and SIGTERM heard from here on, before JAX loads

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def job(cfg, workdir: str, *, resume=False, overwrite=False, explicit=None):
  """:func:`recon_jax.cli.main_job`: the main job, warnings printed; returns its report."""
  return cli.main_job(cfg, workdir, resume=resume, overwrite=overwrite, explicit=explicit)


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite, explicit=cli.overrides())


if __name__ == "__main__":
  cli.run(main, configs.path("reconstruct"), "finetune")
