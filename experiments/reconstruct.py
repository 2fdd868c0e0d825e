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

from experiments import common

FLAGS = flags.FLAGS


def run(job, workdir: str, **kwargs) -> dict:
  """:func:`recon_jax.job.run.run_reconstruction` (``job`` and ``kwargs`` are its
  own), its warnings also printed on stderr."""
  from recon_jax.job import pipeline
  from recon_jax.job import run as job_run

  m = job_run.run_reconstruction(job, workdir, **kwargs)
  for w in m["warnings"]:
    if not w.startswith(pipeline.ALL_DIVERGED):  # that one ends the run (check_outcome)
      print(f"warning: {w}", file=sys.stderr)
  return m


def job(cfg, workdir: str, *, resume=False, overwrite=False, explicit=None) -> dict:
  """What the binary does once its flags are parsed; returns metrics.json's dict.

  ``explicit``: the settings given on the command line, ``{name: value}``.
  Everything is checked before the workdir is created or touched; a run
  whose every restart diverged writes its results, then raises RunFailed (exit code 2).
  """
  from recon_jax import distributed
  from recon_jax import workdir as wd
  from recon_jax.job import planning
  from recon_jax.job import run as job_run
  from recon_jax.job.settings import JobConfig
  from recon_jax.precision import set_precision

  explicit = dict(explicit or {})
  settings = JobConfig.of(cfg)  # the flags end here: the library reads its typed settings
  planning.check_types(settings)  # a bool is a bool before it starts anything
  distributed.maybe_initialize(settings.distributed)  # before any other JAX call
  set_precision(settings.x64, settings.matmul_precision)
  requested = {k[len("victim.") :]: v for k, v in explicit.items() if k.startswith("victim.")}
  plan = planning.prepare(settings, requested, explicit)
  workdir = wd.open_run(
    plan.config,
    workdir,
    job_run.STATE_FILE,
    resume=resume,
    overwrite=overwrite,
    study="reconstruct",
  )
  m = run(plan, workdir, resume=resume, checked=True)
  job_run.check_outcome(m, workdir)
  print(f"wrote {workdir}: {m['verdict_line']}")
  return m


def main(cfg):
  job(
    cfg,
    FLAGS.workdir,
    resume=FLAGS.resume,
    overwrite=FLAGS.overwrite,
    explicit=common.overrides(FLAGS),
  )


if __name__ == "__main__":
  common.define_flags("reconstruct", "finetune")
  common.run_main(main)
