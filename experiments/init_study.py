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
(:func:`recon_jax.init_study.sub_runs`): the bilevel attack on the affine net
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

from __future__ import annotations

import json
import os
import time

from absl import flags, logging

from experiments import common

FLAGS = flags.FLAGS
CONFIG_FILE = "config.json"


def prepare(cfg) -> None:
  """Paths expanded, settings validated: everything that can fail before any work."""
  from recon_jax import init_study

  cfg.data_dir = common.expand(cfg.data_dir)
  init_study.validate(cfg)


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Runs the study (under ``cfg.x64``) and writes its report into ``workdir``.

  Bad settings and unreadable data fail before anything is written.  Each
  sub-run saves its state to ``state_<name>.msgpack`` every ``cfg.save_every``
  chunks and, once finished, its results to ``done_<name>.json``/``.npz``;
  with ``resume`` the finished sub-runs are loaded and the interrupted one
  continues from its state file (victims are cached or retrained
  deterministically), so the report equals that of an uninterrupted run.

  Returns:
    The metrics written to metrics.json.
  """
  import jax

  from recon_jax import init_study, plotting

  prepare(cfg)
  if resume:
    common.check_resumable(cfg, workdir, CONFIG_FILE)
  with jax.enable_x64(bool(cfg.x64)):
    t_start = time.time()
    ds = init_study.load_data(cfg)  # a missing or corrupt data file fails here
    if not resume:
      os.makedirs(workdir, exist_ok=True)
      common.write_json(workdir, CONFIG_FILE, {"config": cfg, "environment": common.environment()})
    study = init_study.Study(cfg, ds)
    runs, arrays = {}, {}
    for sub in init_study.sub_runs(cfg):
      done = _load_done(workdir, sub.name) if resume else None
      if done is None:
        entry, x = study.run(
          sub, resume=resume, state_path=common.inside(workdir, f"state_{sub.name}.msgpack")
        )
        done = common.jsonable(entry), x
        common.write_npz(workdir, f"done_{sub.name}.npz", x=done[1])
        common.write_json(workdir, f"done_{sub.name}.json", done[0])
      runs[sub.name], arrays[f"{sub.name}_x"] = done
    metrics = {
      "sub_runs": runs,
      "dataset": ds.name,
      "n_train": len(ds.x_train),
      "backend": jax.default_backend(),
      "x64": bool(cfg.x64),
      "batching": study.batching,
      "wall_s": time.time() - t_start,
    }
    metrics = common.jsonable(metrics)
    common.write_json(workdir, "metrics.json", metrics)
    common.write_npz(
      workdir,
      "reconstructions.npz",
      x_train=ds.x_train,
      x_part=ds.x_part,
      noise=study.noise,
      mix_l1=study.l1,
      mix_l2=study.l2,
      **arrays,
    )
    common.write_text(workdir, "summary.md", init_study.summary(cfg, metrics))
    plotting.init_study_figures(workdir, metrics, arrays, ds.x_train, ds.x_part)
  return metrics


def _load_done(workdir: str, name: str):
  """``(entry, x)`` of a sub-run finished before, or None."""
  import numpy as np

  jpath = common.inside(workdir, f"done_{name}.json")
  if not os.path.isfile(jpath):
    return None
  try:
    with open(jpath) as f:
      entry = json.load(f)
    with np.load(common.inside(workdir, f"done_{name}.npz")) as z:
      x = z["x"]
  except (OSError, ValueError, KeyError) as e:
    raise common.UserError(
      f"--resume: {jpath} (or its .npz) is unreadable ({e}); remove both to run that sub-run again."
    ) from None
  logging.info("%s: finished before, loaded from %s", name, jpath)
  return entry, x


def main(cfg):
  """The command line: flags -> checks -> run -> one line of results."""
  common.configure_precision(cfg.x64)
  prepare(cfg)
  if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
    common.check_resumable(cfg, FLAGS.workdir, CONFIG_FILE)
  workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
  run(cfg, workdir, resume=FLAGS.resume)
  with open(os.path.join(workdir, "summary.md")) as f:
    print(f.read())


if __name__ == "__main__":
  common.define_flags("init_study", "default")
  common.run_main(main)
