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

from experiments import starting

starting("train_victim")  # SIGINT and SIGTERM heard from here on, before JAX loads

import sys  # noqa: E402

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def job(cfg, workdir: str, *, resume=False, overwrite=False) -> dict:
  """:func:`recon_jax.victims.training_run.train_victim_job` (its arguments); returns metrics."""
  from recon_jax.victims import training_run

  path, m = training_run.train_victim_job(cfg, workdir, resume=resume, overwrite=overwrite)
  if m["warning"]:
    print(f"warning: {cli.in_flags(m['warning'], cfg)}", file=sys.stderr)
  print(
    f"wrote {path}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
    f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}"
  )
  return m


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  cli.run(main, configs.path("victim"), "lfw", workdir="workdirs/victim")
