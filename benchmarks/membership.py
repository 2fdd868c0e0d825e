r"""Membership from the weights at the sizes real models are trained on: the main job with
``attack=none`` (no reconstruction) per data draw, each test's AUC and TPR at 1% and 0.1%
FPR against up to 4,000 held-out images, and the seconds the tests took (victim apart).

  python -m benchmarks.membership                     # mnist5k 250 + 250, 784-2048-1, draws 3-5
  python -m benchmarks.membership --n-per-class=600 --epochs=500   # n = 1,200, above d
  python -m benchmarks.membership --wrong             # a training folder of unseen digits
  python -m benchmarks.membership --preset=paper_mnist5k --epochs=10000  # Haim et al.'s

The victim is the ``finetune`` preset's (784-2048-1, He init, full-batch GD, lr 0.01,
2,000 epochs, theta_0 known: the ``change_fit`` test) on mnist5k, or ``paper_mnist5k``'s
(784-1000-1000-1, first layer from std 1e-4, theta* alone: ``kkt_fit``).  ``--wrong``
gives the job images the model never saw as its training set (its AUC should be about 0.5).
Victims are cached (RECON_JAX_CACHE), so a second run measures the tests alone.  Prints
one JSON record per draw, then their means with 95% Student-t intervals.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

from benchmarks import common
from recon_jax.studies.efficacy import interval


def job_config(draw: int, args):
  from experiments.configs import reconstruct as configs

  cfg = configs.get_config(args.preset)
  cfg.attack = "none"
  if args.known_init is not None:
    cfg.threat.known_init = args.known_init
  v = cfg.victim
  v.dataset, v.n_per_class, v.data_seed = "mnist5k", args.n_per_class, draw
  if args.epochs:
    v.epochs = args.epochs
  if args.widths:
    v.widths = tuple(int(w) for w in args.widths.split(","))
  return cfg


def one_draw(draw: int, args) -> dict:
  from recon_jax.job import planning
  from recon_jax.job import run as job_run

  cfg = job_config(draw, args)
  plan = planning.prepare(cfg)
  if args.wrong:  # the model trained on its images; images it never saw given as them
    from recon_jax.victims import cache

    ds = plan.source.dataset
    cfg.threat.model = cache.get_or_train(plan.victim, ds)[2]  # its checkpoint, theta_0 in it
    plan = planning.prepare(cfg)
    k = len(ds.x_train)
    wrong = ds._replace(
      x_train=ds.x_test[:k], y_train=ds.y_test[:k], x_test=ds.x_test[k:], y_test=ds.y_test[k:]
    )
    plan = plan._replace(source=plan.source._replace(dataset=wrong))
  t0 = time.time()
  with tempfile.TemporaryDirectory() as work:
    m = job_run.run_reconstruction(plan, f"{work}/w")
  out = {"bench": "membership", "draw": draw, "n": m.n_train, "verdict": m.verdict}
  out["wall_s"] = time.time() - t0
  out["tests_s"] = m.timing.membership_s
  out["victim_s"] = m.timing.victim_s
  for name, t in m.membership.tests.items():
    r = t.tpr_at_fpr
    out[name] = {"auc": t.auc, "tpr_1pct": r.one_pct, "tpr_01pct": r.tenth_pct}
  return out


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--draws", default="3,4,5", help="data draws (comma-separated)")
  p.add_argument("--n-per-class", type=int, default=250)
  p.add_argument("--preset", default="finetune", help="the victim's: finetune, paper_mnist5k")
  p.add_argument("--widths", default="", help="hidden widths (default: the preset's)")
  p.add_argument("--epochs", type=int, default=0, help="epochs (default: the preset's)")
  p.add_argument(
    "--known-init", type=lambda s: s.lower() != "false", default=None, help="(the preset's)"
  )
  p.add_argument("--wrong", action="store_true", help="unseen images as the training set")
  args = common.parse(p, argv)
  args.dtypes = []  # the preset's own precision
  return args


def summary(rows) -> dict:
  """Each test's numbers over the draws: mean and 95% Student-t interval, clipped to [0, 1]
  (seconds to [0, inf))."""
  out = {"bench": "membership_summary", "draws": [r["draw"] for r in rows]}
  for name in rows[0]:
    if isinstance(rows[0][name], dict):
      for k in rows[0][name]:
        vals = [r[name][k] for r in rows if r.get(name) and r[name][k] is not None]
        out[f"{name}.{k}"] = interval(vals, bounds=(0.0, 1.0)) if vals else None
  out["tests_s"] = interval([r["tests_s"] for r in rows], bounds=(0.0, np.inf))
  return out


def main(argv=None) -> None:
  args = parse_args(argv)
  emit = common.start("membership", args)
  with emit.section("membership"):
    if args.quick:
      emit({"bench": "membership", "skipped": "--quick (a victim of 500 images takes minutes)"})
    else:
      rows = [emit(one_draw(int(d), args)) for d in args.draws.split(",")]
      emit(summary(rows))
  emit.done()


if __name__ == "__main__":
  main()
