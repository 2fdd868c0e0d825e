r"""The cone attack's time against the training-set size n, on victims of the finetune recipe.

  python -m benchmarks.cone                      # n = 20, 100 (LFW), 500 (mnist5k): minutes
  python -m benchmarks.cone --quick              # n = 8 digits, 256 units: seconds

Each victim is the ``finetune`` preset's recipe (one hidden layer of 2048 ReLU units from a
seeded He theta_0, 2000 epochs of full-batch GD, logistic loss): 10 + 10 and 50 + 50 LFW
faces, and 250 + 250 MNIST digits of ``mnist5k`` (Haim et al.'s odd-vs-even task at their
n = 500).  Training is timed apart (``train_s``) and cached as the main job caches it.  Per n:
the phases of :func:`recon_jax.attacks.cone.cone_images` as one call (``cone_s``: the
reading of theta* - theta_0, the facet programs, the decoding), the span's dimension k
against n, the facets found, and how many training images a facet gives back at a
normalised cross-correlation above 0.95 (a quick count, not the report's strict one).
"""

from __future__ import annotations

import time

from benchmarks import common

SIZES = (("lfw", 10), ("lfw", 50), ("mnist5k", 250))  # (dataset, images per class)
QUICK = (("digits", 4),)


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--draw", type=int, default=0, help="the data draw (victim.data_seed)")
  p.add_argument("--starts", type=int, default=100, help="cone_starts")
  return common.parse(p, argv)


def _matches(images, x, threshold: float = 0.95) -> int:

  if not len(images):
    return 0
  a = images.reshape(len(images), -1)
  b = x.reshape(len(x), -1)
  a = (a - a.mean(1, keepdims=True)) / (a.std(1, keepdims=True) * a.shape[1] ** 0.5 + 1e-12)
  b = (b - b.mean(1, keepdims=True)) / (b.std(1, keepdims=True) * b.shape[1] ** 0.5 + 1e-12)
  return int(((a @ b.T).max(axis=0) > threshold).sum())


def run(args, emit) -> None:
  import dataclasses

  from experiments.configs.victim import PRESETS
  from recon_jax.attacks import cone
  from recon_jax.victims import cache, recipe, trained

  for dataset, per_class in QUICK if args.quick else SIZES:
    settings = dict(PRESETS["finetune"], dataset=dataset, n_per_class=per_class)
    if args.quick:
      settings.update(widths=(256,), lr=0.05, epochs=400)
    cfg = dataclasses.replace(recipe.VictimConfig(**settings), data_seed=args.draw, seed=args.draw)
    t = time.perf_counter()
    ds = trained.load_data(cfg)
    params, summary, _, init = cache.get_or_train(cfg, ds)
    train_s = time.perf_counter() - t
    t = time.perf_counter()
    images, _, reading = cone.cone_images(
      params,
      init,
      ds.x_train.shape[1:],
      -ds.mean,
      1 - ds.mean,
      n=len(ds.x_train),
      starts=args.starts,
      seed=0,
    )
    cone_s = time.perf_counter() - t
    emit(
      {
        "bench": "cone",
        "dataset": dataset,
        "n": len(ds.x_train),
        "draw": args.draw,
        "victim": summary.get("source"),
        "train_s": train_s,
        "cone_s": cone_s,
        "facets": len(images),
        "matched_ncc_0.95": _matches(images, ds.x_train),
        **reading.summary(),
      }
    )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("cone", args, starts=args.starts, draw=args.draw)
  with emit.section("cone"):
    run(args, emit)
  emit.done()


if __name__ == "__main__":
  main()
