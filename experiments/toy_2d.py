r"""Haim et al. 2022 §4, Fig. 2: reconstruct points on the unit circle from a 2-D classifier.

Trains (once, then cached) a 2-W-W-1 ReLU victim on n points of the unit
circle with alternating labels, runs the KKT attack with no prior from
Gaussian starting points, keeps the candidates with a large multiplier,
de-duplicates them, and counts the training points with a kept candidate
within ``tol``.

  python -m experiments.toy_2d --workdir=/tmp/toy                 # paper size, ~13 min
  python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:small \
      --workdir=/tmp/toy200                                       # width 200, ~2 min
  python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:quick --workdir=/tmp/toyq

Writes config.json, metrics.json, reconstructions.npz and toy_2d.png;
state.msgpack while it runs (--resume continues from it).
"""

from experiments import starting

starting("toy_2d")  # SIGINT and SIGTERM heard from here on, before JAX loads

import sys  # noqa: E402

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def main(cfg):
  from recon_jax.studies import runner

  kw = dict(resume=FLAGS.resume, overwrite=FLAGS.overwrite)
  path, m = runner.toy_job(cfg, FLAGS.workdir, **kw)
  if m.get("victim_warning"):
    print(f"warning: {cli.in_flags(m['victim_warning'], cfg)}", file=sys.stderr)
  print(
    f"wrote {path}: recovered {m['recovered']}/{m['n_train']} "
    f"(best restart {m['recovered_best_restart']}, pooled {m['recovered_pooled']}; "
    f"oracle residual {m['oracle_residual_rel']:.3f})"
  )


if __name__ == "__main__":
  cli.run(main, configs.path("toy_2d"), "paper")
