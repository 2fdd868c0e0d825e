r"""Train a victim classifier and write its checkpoint with provenance.

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits \
      --workdir=/tmp/victim
  python -m experiments.train_victim --config.victim.dataset=mnist --config.data_dir=~/data/mnist \
      --config.victim.n_per_class=250 --config.victim.widths=1000,1000 \
      --config.victim.epochs=1000000 --config.victim.lr=0.01 --workdir=/tmp/mnist

Writes victim.msgpack (parameters + architecture + data provenance, no pickle),
config.json, metrics.json (final train loss, train error, test accuracy,
epochs run, margins), history.json and train_idx.npz; train_state.msgpack
while it runs (--resume continues from it).  Exit code 0: done (a victim that
did not learn its training set is written with a warning); 1: a setting or
file it cannot use, in one line naming it, or training diverged; 130:
interrupted (Ctrl-C).
"""

import sys

from absl import flags

from experiments import common

FLAGS = flags.FLAGS


def job(cfg, workdir: str, *, resume: bool = False, overwrite: bool = False) -> dict:
  """What the binary does once its flags are parsed; returns metrics.json's dict.

  Everything is checked before the workdir is created or touched.
  """
  from recon_jax import workdir as wd
  from recon_jax.job import planning
  from recon_jax.precision import set_precision
  from recon_jax.studies import runner

  set_precision(cfg.x64)
  planning.prepare_training(cfg)
  workdir = wd.open_run(
    cfg, workdir, runner.TRAIN_STATE_FILE, resume=resume, overwrite=overwrite, study="train_victim"
  )
  m = runner.run_training(cfg, workdir, resume=resume)
  if m["warning"]:
    print(f"warning: {m['warning']}", file=sys.stderr)
  print(
    f"wrote {workdir}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
    f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}"
  )
  return m


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  common.define_flags("victim", "lfw", workdir="workdirs/victim")
  common.run_main(main)
