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
(--resume continues from it).  Exit code 0: done (warnings, e.g. a victim that
did not train, are printed and kept in metrics.json); 1: a setting or file it
cannot use, in one line naming it, before anything is written; 2: every restart
diverged (the results are written); 130: interrupted (Ctrl-C).
"""

import sys

from absl import flags

from experiments import configs
from recon_jax import cli

FLAGS = flags.FLAGS


def job(cfg, workdir: str, *, resume=False, overwrite=False, explicit=None) -> dict:
  """:func:`recon_jax.job.run.main_job` (its arguments), warnings printed; returns metrics."""
  from recon_jax.job import run

  warn = lambda w: print(f"warning: {w}", file=sys.stderr)
  kw = dict(resume=resume, overwrite=overwrite, explicit=explicit, warn=warn)
  path, m = run.main_job(cfg, workdir, **kw)
  print(f"wrote {path}: {m['verdict_line']}")
  return m


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite, explicit=cli.overrides())


if __name__ == "__main__":
  cli.run(main, configs.path("reconstruct"), "finetune")
