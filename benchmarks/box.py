r"""A finished run's candidates scored twice: as the attack wrote them, and projected on the
pixel box the attacker knows.

  python -m benchmarks.box WORKDIR [WORKDIR ...]   # each a finished reconstruction's folder
  python -m benchmarks.box --quick                 # runs the tiny preset in a temporary folder

For each workdir the run's data are rebuilt from its config.json (the job's own planning:
the same draw, the same training and held-out images; the training indices are checked
against reconstructions.npz's), and its candidates (``candidates``, with the cone's
``direct_images`` and ``reread_images`` after a hand-over) are scored by the job's own
evaluation (:func:`recon_jax.eval.evaluation.evaluate_candidates`, the run's SSIM threshold
and seed) twice: as stored, and each pixel clipped to the box of the attacker's target
(``[0, 1]`` less the training mean, as :func:`recon_jax.victims.targets.make_target` makes
it).  Both arms are of the same candidates, so they are exactly paired; the held-out
baseline is the same in both.

One ``box`` record per workdir: ``outside`` (the fraction of the candidates' pixels outside
the box), and for ``raw`` and ``projected`` the strict pooled count, the attacker's pick
(the lowest-final-loss restart's strict count), the looser SSIM > 0.4 count and the held-out
baseline; ``gain_pooled`` and ``gain_pick`` are projected less raw.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from benchmarks import common


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("workdirs", nargs="*", help="finished reconstructions' folders")
  args = common.parse(p, argv)
  if not args.quick and not args.workdirs:
    p.error("name at least one workdir (or --quick)")
  return args


def dataset_of(path: str):
  """The data of the run in ``path``, rebuilt from its config.json, and its settings."""
  from recon_jax.job import planning
  from recon_jax.job.settings import JobConfig

  with open(os.path.join(path, "config.json")) as f:
    settings = JobConfig.of(json.load(f)["config"])
  plan = planning.prepare(settings)
  return plan.source.dataset, plan.config


def project(x, mean) -> np.ndarray:
  """``x`` (the attack's input space: the training mean subtracted) clipped to the pixel box
  ``[0 - mean, 1 - mean]``."""
  mean = np.asarray(mean, np.float32)
  return np.clip(np.asarray(x, np.float32), -mean, 1.0 - mean)


def counts(ev: dict) -> dict:
  held = ev["baselines"].get("heldout", {})
  return {
    "pooled": ev["attack"]["recovered_strict"],
    "pick": ev["selection"].get("best_by_loss_recovered_strict"),
    "n_ssim_gt_0.4": ev["attack"]["n_ssim_gt_0.4"],
    "heldout_baseline": held.get("recovered_strict"),
  }


def rescore(path: str) -> dict:
  """The ``box`` record of the run in ``path``."""
  from recon_jax.eval import evaluation

  z = np.load(os.path.join(path, "reconstructions.npz"))
  ds, cfg = dataset_of(path)
  if not np.array_equal(np.asarray(z["train_idx"]), np.asarray(ds.train_idx)):
    raise SystemExit(f"{path}: its config.json rebuilds other training images than it scored")
  cands, weights, loss = z["candidates"], z["weights"], z["final_loss"]
  also = [z[k] for k in ("direct_images", "reread_images") if k in z.files]
  images = [cands.reshape(-1, *cands.shape[2:]), *also]
  mean = ds.mean
  flat = np.concatenate([a.reshape(len(a), -1) for a in images if len(a)] or [np.zeros((0, 1))])
  lo, hi = -np.asarray(mean).reshape(-1), 1.0 - np.asarray(mean).reshape(-1)
  outside = float(np.mean((flat < lo - 1e-6) | (flat > hi + 1e-6))) if flat.size else 0.0
  kw = dict(ssim_threshold=cfg.evaluation.ssim_threshold, seed=cfg.search.seed)
  rec = {"bench": "box", "workdir": os.path.abspath(path), "attack": cfg.attack}
  rec.update(n=len(ds.x_train), candidates=int(len(flat)), outside=outside)
  with open(os.path.join(path, "metrics.json")) as f:
    stored = json.load(f)
  rec["stored_pooled"] = stored.get("recovered_strict")
  for arm, fix in (("raw", lambda a: a), ("projected", lambda a: project(a, mean))):
    t0 = time.time()
    ev = evaluation.evaluate_candidates(
      fix(cands), weights, loss, ds, also=[fix(a) for a in also], **kw
    )
    rec[arm] = dict(counts(ev), seconds=time.time() - t0)
  rec["gain_pooled"] = rec["projected"]["pooled"] - rec["raw"]["pooled"]
  if rec["raw"]["pick"] is not None and rec["projected"]["pick"] is not None:
    rec["gain_pick"] = rec["projected"]["pick"] - rec["raw"]["pick"]
  return rec


def quick_workdir(folder: str) -> str:
  """A finished run of the ``tiny`` preset in ``folder`` (seconds)."""
  from experiments.configs import reconstruct
  from recon_jax.job import planning, run

  cfg = reconstruct.get_config("tiny")
  cfg.use_cache = False
  path = os.path.join(folder, "tiny")
  run.run_reconstruction(planning.prepare(cfg), path)
  return path


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("box", args)
  with tempfile.TemporaryDirectory() as tmp:
    paths = args.workdirs
    if args.quick:
      with emit.section("run"):
        paths = [quick_workdir(tmp)]
    with emit.section("box"):
      for path in paths:
        emit(rescore(path))
  emit.done()


if __name__ == "__main__":
  main()
