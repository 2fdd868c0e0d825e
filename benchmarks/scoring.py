r"""The scoring of a run's candidates against the truth, part by part, at real sizes.

  python -m benchmarks.scoring                   # n = 20, 100, 500 of mnist5k, R*m = 2,000
  python -m benchmarks.scoring --quick           # n = 8, R*m = 64, 200 held out: seconds
  python -m benchmarks.scoring --sizes=500 --repeats=1 --warmup=0 --no-total
  python -m benchmarks.scoring --sizes=100,500 --only-truth --exhaustive-truth --repeats=1

The inputs are synthetic but realistic: n training images of ``mnist5k`` (n / 2 odd and
n / 2 even digits, the training mean subtracted as the main job's data are) and its held-out
digits (4,000 by default), and R restarts of m candidates (R * m = 2,000) in the attack's
input space: a fifth of the training images planted twice each as noisy copies (noise from
0.05 to 0.5 of the pixels' spread, so some pass the strict rule and some do not), the rest
noise.  Each part of :func:`recon_jax.eval.evaluation.evaluate_candidates` and of
:func:`recon_jax.eval.scoring.membership_report` is timed on its own:

* ``match_vote_s``: the pooled candidates and each restart's matched to the training images
  with voting, and the reconstructions' SSIM (``images.evaluate`` with no held-out image);
* ``strict_s``: what the strict rule adds to that (the held-out reference), from
  ``attack_s``, the same evaluations with the held-out images;
* ``baseline_mean_s``, ``baseline_heldout_s``: the two baselines (the held-out one pooled
  and in groups of m, as many images drawn as there are candidates, at most half);
* ``selection_s``: each candidate's best SSIM with a training image (the Spearman
  correlation with the attacker's weights);
* ``membership_s``: the membership report (every training image and up to 500 held-out ones
  scored, then the permutation test);
* ``truth_s``: which pooled candidates are real for the attacker's own scores
  (:func:`recon_jax.eval.trusted.candidate_truth`: each candidate's best SSIM with a training
  image, its held-out maximum by the strict rule's prefilter), the last 2n / 5 candidates
  replaced by copies of n / 5 training and n / 5 held-out images; ``--exhaustive-truth`` also
  times ``truth_exhaustive_s``, the same with every candidate against every held-out image
  (the prefilter off: how it ran before), and checks that both mark the same candidates;
* ``evaluate_candidates_s``: the whole evaluation in one call (``--no-total``: skipped).

Each record also carries the counts (strict recoveries of the attack and of each baseline,
the Spearman correlation, the membership AUC), so runs before and after a change of the
code can be checked to count the same.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import common

SIZES = (500, 100, 20)  # training images (half odd, half even digits)
QUICK = 8
RESTARTS, CANDIDATES = 4, 500  # R, m: R * m = 2,000
QUICK_RESTARTS, QUICK_CANDIDATES = 2, 32


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--sizes", default="", help="training-set sizes n (default 500,100,20)")
  p.add_argument("--restarts", type=int, default=0, help="R (default 4; --quick 2)")
  p.add_argument("--candidates", type=int, default=0, help="m per restart (default 500; 32)")
  p.add_argument("--heldout", type=int, default=0, help="held-out images (default 4000; 200)")
  p.add_argument("--warmup", type=int, default=1, help="untimed calls before the timed ones")
  p.add_argument(
    "--total",
    action=__import__("argparse").BooleanOptionalAction,
    default=True,
    help="also time evaluate_candidates in one call",
  )
  p.add_argument(
    "--exhaustive-truth",
    action="store_true",
    help="also time candidate_truth without the held-out prefilter (minutes at n = 500)",
  )
  p.add_argument("--only-truth", action="store_true", help="time the truth_* parts only")
  args = common.parse(p, argv)
  args.sizes = common.int_list(args.sizes) or ([QUICK] if args.quick else list(SIZES))
  args.restarts = args.restarts or (QUICK_RESTARTS if args.quick else RESTARTS)
  args.candidates = args.candidates or (QUICK_CANDIDATES if args.quick else CANDIDATES)
  args.heldout = args.heldout or (200 if args.quick else 4000)
  return args


def problem(n: int, restarts: int, m: int, heldout: int, seed: int = 0):
  """(dataset, candidates [R, m, 28, 28, 1], weights [R, m], final_loss [R]) of n training
  images, a fifth of them planted twice among the candidates as noisy copies."""
  from recon_jax import data

  ds = data.load_dataset(
    "mnist5k",
    n_per_class=n // 2,
    n_test_per_class=-(-heldout // 2),
    seed=seed,
    subtract_mean=True,
  )
  ds = ds._replace(x_test=ds.x_test[:heldout], y_test=ds.y_test[:heldout])
  rng = np.random.default_rng(seed)
  x = np.asarray(ds.x_train, np.float32)
  total = restarts * m
  spread = float(np.std(x))
  planted = rng.permutation(n)[: max(1, n // 5)]
  copies = np.repeat(planted, 2)[: total // 2]
  noise = rng.uniform(0.05, 0.5, size=len(copies))[:, None, None, None] * spread
  pool = rng.normal(0.0, spread, size=(total, *x.shape[1:])).astype(np.float32)
  pool[: len(copies)] = x[copies] + noise * rng.normal(size=(len(copies), *x.shape[1:]))
  pool = pool[rng.permutation(total)].reshape(restarts, m, *x.shape[1:])
  weights = rng.random((restarts, m)).astype(np.float32)
  final_loss = rng.random(restarts)
  return ds, pool, weights, final_loss


def exhaustive(fn):
  """``fn`` with every SSIM pair of the strict rule's held-out reference computed."""
  from recon_jax.eval import similarity

  def call():
    saved, similarity.EXACT_PAIRS = similarity.EXACT_PAIRS, 10**15
    try:
      return fn()
    finally:
      similarity.EXACT_PAIRS = saved

  return call


def parts(ds, cands, weights, final_loss, exhaustive_truth=False):
  """name -> thunk of each part of the scoring, and the thunk that counts (its dict)."""
  from recon_jax.eval import evaluation, images, scoring, similarity, trusted

  r, m = cands.shape[:2]
  px = lambda a: evaluation.pixel_space(a, ds)
  x_train, x_held = px(ds.x_train), px(ds.x_test)
  pooled = px(cands.reshape(-1, *cands.shape[2:]))
  sets = [pooled, *[px(c) for c in cands]]
  thr = images.strict_threshold_for(x_train.shape[1])
  kw = dict(ssim_threshold=thr)
  num = int(min(r * m, len(x_held) // 2))
  # the truth's pool: the last 2k candidates replaced by exact copies of k training images
  # (real) and of k held-out ones (not), k = n / 5, so that the held-out reference decides
  k = max(1, len(x_train) // 5)
  truth_pool = np.concatenate([np.asarray(pooled)[: -2 * k], x_train[:k], x_held[:k]])

  def attack(held):
    return [images.evaluate(c, x_train, held, **kw) for c in sets]

  def selection():
    cs = similarity.ssim_matrix(similarity.stretch(pooled), similarity.stretch(x_train))
    return evaluation.spearman(np.asarray(weights).reshape(-1), np.asarray(cs).max(axis=1))

  thunks = {
    "match_vote_s": lambda: [e.ssim for e in attack(None)],
    "attack_s": lambda: attack(x_held),
    "baseline_mean_s": lambda: images.mean_image_baseline(
      x_train, x_held, px(np.zeros(x_train.shape[1:])), **kw
    ),
    "baseline_heldout_s": lambda: images.heldout_baseline(0, x_train, x_held, num, group=m, **kw),
    "selection_s": selection,
    "membership_s": lambda: scoring.membership_report(cands, final_loss, ds, 0),
    "truth_s": lambda: trusted.candidate_truth(truth_pool, x_train, x_held, thr),
    "evaluate_candidates_s": lambda: evaluation.evaluate_candidates(cands, weights, final_loss, ds),
  }
  if exhaustive_truth:
    thunks["truth_exhaustive_s"] = exhaustive(thunks["truth_s"])
  return thunks


def counts(results: dict) -> dict:
  """The numbers each part gave: they must not move when the code gets faster."""
  from recon_jax.eval import images

  truth = results["truth_s"]
  out = {
    "truth_n_real": int(truth.real.sum()),
    "truth_n_at_threshold": int((truth.ssim_train >= images.strict_threshold_for(28)).sum()),
  }
  if "truth_exhaustive_s" in results:
    before = results["truth_exhaustive_s"]
    out["truth_same_as_exhaustive"] = bool(
      np.array_equal(before.real, truth.real) and np.array_equal(before.train_idx, truth.train_idx)
    )
  if "attack_s" not in results:  # --only-truth
    return out
  att = images.combine(results["attack_s"])
  out |= {
    "recovered_strict": int(att.recovered_strict),
    "recovered_strict_pooled": int(results["attack_s"][0].recovered_strict),
    "n_ssim_gt_0.4": int(att.n_ssim_gt_04),
    "mean_ssim": float(np.mean(att.ssim)),
    "baseline_mean_recovered_strict": int(results["baseline_mean_s"].recovered_strict),
    "baseline_heldout_recovered_strict": int(results["baseline_heldout_s"].recovered_strict),
    "baseline_heldout_n_ssim_gt_0.4": int(results["baseline_heldout_s"].n_ssim_gt_04),
    "spearman_weight_vs_candidate_ssim": float(results["selection_s"]),
    "membership_auc": results["membership_s"].get("auc"),
  }
  if "evaluate_candidates_s" in results:
    ev = results["evaluate_candidates_s"]
    out["total_recovered_strict"] = ev["attack"]["recovered_strict"]
    out["total_baseline_heldout_recovered_strict"] = ev["baselines"]["heldout"]["recovered_strict"]
  return out


def run(args, emit) -> None:
  for n in args.sizes:
    ds, cands, weights, final_loss = problem(n, args.restarts, args.candidates, args.heldout)
    thunks = parts(ds, cands, weights, final_loss, args.exhaustive_truth)
    if not args.total:
      thunks.pop("evaluate_candidates_s")
    if args.only_truth:
      thunks = {k: v for k, v in thunks.items() if k.startswith("truth")}
    seconds, results = {}, {}
    for name, fn in thunks.items():
      for _ in range(args.warmup):
        common.block(fn())
      times = []
      for _ in range(args.repeats):
        t = time.perf_counter()
        results[name] = common.block(fn())
        times.append(time.perf_counter() - t)
      seconds[name] = min(times)
    if "attack_s" in seconds:
      seconds["strict_s"] = max(seconds["attack_s"] - seconds["match_vote_s"], 0.0)
    emit(
      {
        "bench": "scoring",
        "n": n,
        "R": args.restarts,
        "m": args.candidates,
        "heldout": len(ds.x_test),
        **seconds,
        **counts(results),
        **common.machine(),
      }
    )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start(
    "scoring",
    args,
    restarts=args.restarts,
    candidates=args.candidates,
    heldout=args.heldout,
    warmup=args.warmup,
  )
  with emit.section("scoring"):
    run(args, emit)
  emit.done()


if __name__ == "__main__":
  main()
