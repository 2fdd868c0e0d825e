r"""The initialisation study of Runkel et al. (2024, §4.3-4.5): bilevel and KKT attacks.

  python -m experiments.init_study --workdir=/tmp/init_study     # digits, 21-point grid, ~8 min
  python -m experiments.init_study --config=experiments/configs/init_study.py:quick \
      --workdir=/tmp/init_quick                                     # three settings, ~1 min
  python -m experiments.init_study --config.dataset=cifar10 --config.data_dir=~/data/cifar \
      --config.n_per_class=250 --config.bilevel_width=6144 --workdir=/tmp/init_cifar
  python -m experiments.init_study --workdir=/tmp/init_study --resume  # after an interruption

One attack run per (attack, victim) covers every x-initialisation: the eq. (10)
mix ``l2 (l1 x_GT + (1 - l1) x_part) + (1 - l2) x_rnd`` over the deduplicated
grid (21 restarts, ``--config.grid``), which contains the three §4.3 settings
(random l2 = 0, ground truth l1 = l2 = 1, partition l1 = 0, l2 = 1).  Sub-runs
(:func:`recon_jax.studies.init_study.sub_runs`): the bilevel attack on the affine net
and on the one-hidden net with a smooth activation (and the paper's ReLU on the
three settings), each victim trained with L-BFGS on the attack's own energy;
the KKT attack on a homogeneous ReLU MLP trained like the main job.

Writes config.json, metrics.json (per sub-run: victim, one row per eq. (10)
point with the nearest-neighbour distances to the training set, the partition
and noise, the attack's last metrics, and the paper's findings), summary.md,
reconstructions.npz and figures: <sub-run>_settings.png (the reconstructions of
the three settings), with the grid <sub-run>_heatmap_{train,partition,noise}.png,
<sub-run>_partition_to_gt.png and <sub-run>_noise_to_gt.png.  While it runs:
state_<sub-run>.msgpack (the running sub-run, every save_every chunks) and
done_<sub-run>.json/.npz (each finished sub-run); --resume loads the finished
sub-runs and continues the interrupted one.
"""

from experiments import starting

starting("init_study")  # SIGINT and SIGTERM heard from here on, before JAX loads

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def job(cfg, workdir, *, resume=False, overwrite=False):
  """:func:`recon_jax.studies.runner.init_study_job` (its arguments); prints the summary."""
  from recon_jax.io import workdir as wd
  from recon_jax.studies import runner

  path, _ = runner.init_study_job(cfg, workdir, resume=resume, overwrite=overwrite)
  with open(wd.inside(path, "summary.md")) as f:
    print(f.read())
  print(f"wrote {path}")


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  cli.run(main, configs.path("init_study"), "default")
