r"""The attacker's stability score at n = 100, 300 and 500: the kicked candidate stepped alone
against the re-run of its whole restart, and the whole of the attacker's own scores.

  python -m benchmarks.stability                  # m = n = 100, 300, 500 (minutes)
  python -m benchmarks.stability --quick          # n = 8, h = 64, R = 2: seconds
  python -m benchmarks.stability --sizes=500 --whole_pairs=2 --no-report

The victim is a 784-h-1 network (h = 2,048) fine-tuned from known weights on n digits of
``mnist5k`` (n / 2 odd, n / 2 even, the training mean subtracted), too slow to train here, so
theta* is synthetic as in ``span.py``: the first-layer kernel of theta_0 moved by ``X^T A``
for the n training images X, every other leaf theta_0 plus small noise.  The attack is
the main job's KKT search in the span of that change (``kkt.subspace``: ``kkt_attack`` with
``basis``, Adam, the ``finetune_kkt`` sweep), R restarts of m = n candidates, half of each
restart's candidates starting on training images, run ``--steps`` steps: the state the
attacker's scores read.

Per size, records ``bench = stability``:

* ``alone_s``: :func:`recon_jax.eval.trusted._stability_pairs` on the K = 64 pairs of largest
  multipliers (the report's default), the kicked candidate stepped alone, compiled and run
  (the report's own stability seconds where it runs; ``alone_warm_s``: a call compiled);
* ``whole_pair_s``: one pair re-run as before (its whole restart, every candidate stepping
  and put back), from ``--whole_pairs`` pairs timed warm, and ``whole_s`` = K times that
  plus its compilation (``whole_compile_s``): what the K pairs took before;
* the scores of those pairs both ways (``max_abs_diff``, ``same_order``: the rank order of
  the pairs the same, ``spearman``: their rank correlation);
* ``batches``: the alone path's seconds (compiled and run, then run again) with
  :data:`~recon_jax.eval.trusted.STABILITY_BATCH` at each of ``--batches`` (pairs vmapped
  at once, ``lax.map`` over the batches), and how far its scores are from the default's
  (float32 rounding, which Adam's steps on near-zero gradients amplify);
* ``report_s`` and its parts (``report_timing``): one call of
  :func:`recon_jax.eval.trusted.identification_report`, run first (the new path; its check
  against the truth uses ``--heldout`` held-out digits), and ``report_before_s``, the same
  with the stability part replaced by ``whole_s``.
"""

from __future__ import annotations

import time

from benchmarks import common

SIZES = (100, 300, 500)
QUICK = 8
WIDTH = 2048
IMAGE = (28, 28, 1)
CHANGE = 0.1  # ||K* - K_0|| / ||K_0|| of the first layer
NOISE = 1e-3  # std of the noise added to every other leaf of theta_0
LINEARIZE = 0.5  # the finetune_kkt preset's point between theta_0 and theta*


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--sizes", default="", help="n = m (default 100,300,500; --quick 8)")
  p.add_argument("--width", type=int, default=0, help="hidden units h (default 2048; 64)")
  p.add_argument("--restarts", type=int, default=0, help="R (default 4; --quick 2)")
  p.add_argument("--steps", type=int, default=0, help="search steps before scoring (20; 3)")
  p.add_argument("--heldout", type=int, default=0, help="held-out digits (default 4000; 100)")
  p.add_argument("--whole_pairs", type=int, default=0, help="pairs re-run whole (4; --quick 2)")
  p.add_argument("--batches", default="", help="STABILITY_BATCH values timed (1,4,16,64; 4)")
  p.add_argument(
    "--report",
    action=__import__("argparse").BooleanOptionalAction,
    default=True,
    help="also time the whole identification_report",
  )
  args = common.parse(p, argv)
  args.sizes = common.int_list(args.sizes) or ([QUICK] if args.quick else list(SIZES))
  args.width = args.width or (64 if args.quick else WIDTH)
  args.restarts = args.restarts or (2 if args.quick else 4)
  args.steps = args.steps or (3 if args.quick else 20)
  args.heldout = args.heldout or (100 if args.quick else 4000)
  args.whole_pairs = args.whole_pairs or (2 if args.quick else 4)
  args.batches = common.int_list(args.batches) or ([4] if args.quick else [1, 4, 16, 64])
  if min(args.sizes) < 4 or min(args.width, args.restarts, args.steps, args.whole_pairs) < 1:
    p.error("--sizes must be >= 4, --width, --restarts, --steps and --whole_pairs >= 1")
  return args


def problem(n: int, h: int, restarts: int, steps: int, heldout: int, seed: int = 0):
  """(attack, run, hparams, target, apply_fn, ds) of the span search after ``steps`` steps."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  import recon_jax
  from recon_jax import data
  from recon_jax.attacks import kkt, span
  from recon_jax.victims import models, targets, trained

  ds = data.load_dataset(
    "mnist5k", n_per_class=n // 2, n_test_per_class=-(-heldout // 2), seed=seed, subtract_mean=True
  )
  ds = ds._replace(x_test=ds.x_test[:heldout], y_test=ds.y_test[:heldout])
  cfg = recon_jax.VictimConfig(
    arch="mlp", widths=(h,), bias="all", init="kaiming", init_std=None, first_layer_std=None
  )
  module = trained.module_for(cfg, 1)
  theta_0 = common.init_params(module, IMAGE, seed)
  rng = np.random.default_rng(seed)
  x = np.asarray(ds.x_train, np.float64).reshape(len(ds.x_train), -1)
  change = x.T @ rng.standard_normal((len(x), h))
  k_0 = np.asarray(theta_0["params"]["layer_0"]["kernel"], np.float64)
  change *= CHANGE * np.linalg.norm(k_0) / np.linalg.norm(change)
  theta_star = jax.tree_util.tree_map(
    lambda a: np.asarray(a, np.float64) + NOISE * rng.standard_normal(a.shape), theta_0
  )
  theta_star["params"]["layer_0"]["kernel"] = k_0 + change
  m = len(x)
  labels = np.asarray(ds.y_train, np.float32)  # one candidate per training image
  target = recon_jax.make_target(theta_star, labels, ds.mean)
  target = targets.known_init_target(target, theta_0, LINEARIZE)
  basis, _ = span.span_basis(target.fit, n=n)
  apply_fn = models.make_apply_fn(module)
  attack = kkt.kkt_attack(
    apply_fn, "binary", steps=kkt.Steps("adam"), subspace=kkt.Subspace(basis, IMAGE)
  )
  hp = common.attack_hparams(restarts, preset="finetune_kkt")
  planted = jnp.asarray(ds.x_train, jnp.float32)
  half = (jnp.arange(m) < m // 2).reshape(m, 1, 1, 1)

  def x_init(key, hparams):
    noise = 0.3 * jax.random.normal(key, planted.shape, planted.dtype)
    return jnp.where(half, planted + 0.1 * noise, noise)

  from recon_jax.engine import loop

  keys = jax.random.split(jax.random.PRNGKey(seed), restarts)
  run = loop.run_attack(attack, x_init, keys, [(steps, hp)], target, chunk_steps=steps, log=False)
  return attack, run, hp, target, apply_fn, ds


def picks(run, hp, k: int):
  """The report's pairs: (restarts scored, each pair's place among them, candidate, key)."""
  import jax
  import numpy as np

  lam = np.asarray(run.inner.lam)
  m = lam.shape[1]
  order = np.argsort(-lam.reshape(-1), kind="stable")[:k]
  pick = np.sort(order)
  rows, cols = pick // m, pick % m
  scored, place = np.unique(rows, return_inverse=True)
  keys = jax.random.split(jax.random.split(jax.random.PRNGKey(0))[1], len(pick))
  return scored, place.reshape(-1), cols, keys


def pairs_call(attack, run, hp, target, scored, place, cols, keys):
  """A thunk of ``trusted._stability_pairs`` on those pairs (the report's call)."""
  import jax
  import jax.numpy as jnp

  from recon_jax.eval import trusted

  inner = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[scored], run.inner)
  hps = {name: jnp.asarray(v)[scored] for name, v in hp.items()}
  return lambda: trusted._stability_pairs(
    attack, inner, hps, target, jnp.asarray(place), jnp.asarray(cols), keys, 30, 0.05
  )


def spearman(a, b) -> float:
  """The rank correlation of ``a`` and ``b`` (no ties expected)."""
  import numpy as np

  ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
  return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 else 1.0


def clocked(fn):
  """(wall seconds, result) of ``fn()``, blocked."""
  t = time.perf_counter()
  out = common.block(fn())
  return time.perf_counter() - t, out


def measure(args, n: int, emit) -> None:
  import numpy as np

  from recon_jax.eval import trusted

  t0 = time.perf_counter()
  attack, run, hp, target, apply_fn, ds = problem(
    n, args.width, args.restarts, args.steps, args.heldout
  )
  setup_s = time.perf_counter() - t0
  k = trusted.DEFAULT_STABILITY_CANDIDATES
  scored, place, cols, keys = picks(run, hp, k)
  rec = {}
  if args.report:  # first: its stability part compiles what the pairs' calls reuse
    t0 = time.perf_counter()
    ran = trusted.AttackerRun(attack, run, hp, target, apply_fn, "binary")
    rep = trusted.identification_report(ran, ds, trusted.IdentifyOptions(key=0))
    rec["report_s"] = time.perf_counter() - t0
    rec["report_timing"] = rep["timing_s"]
    rec["n_real"] = rep["truth"]["n_real"]
    rec["stability_auc"] = rep["scores"]["stability"]["auc"]
  alone = pairs_call(attack, run, hp, target, scored, place, cols, keys)
  first_s, scores = clocked(alone)
  alone_warm_s, _ = clocked(alone)
  alone_s = rep["timing_s"]["stability"] if args.report else first_s
  w = min(args.whole_pairs, len(cols))
  whole = pairs_call(
    attack._replace(alone=None), run, hp, target, scored, place[:w], cols[:w], keys[:w]
  )
  whole_first_s, before = clocked(whole)
  whole_warm_s, _ = clocked(whole)
  pair_s = whole_warm_s / w
  whole_compile_s = max(whole_first_s - whole_warm_s, 0.0)
  scores, before = np.asarray(scores, np.float64), np.asarray(before, np.float64)
  rec = {
    "bench": "stability",
    **common.machine(),
    "n": n,
    "m": n,
    "h": args.width,
    "R": args.restarts,
    "span_dim": int(run.inner.x.shape[-1]),
    "pairs": int(len(cols)),
    "restarts_scored": int(len(scored)),
    "setup_s": setup_s,
    "alone_s": alone_s,
    "alone_warm_s": alone_warm_s,
    "whole_pairs_timed": w,
    "whole_pair_s": pair_s,
    "whole_compile_s": whole_compile_s,
    "whole_s": whole_compile_s + pair_s * len(cols),
    "max_abs_diff": float(np.max(np.abs(scores[:w] - before))),
    "same_order": bool(np.array_equal(np.argsort(scores[:w]), np.argsort(before))),
    "spearman": spearman(scores[:w], before),
    "score_range": [float(np.nanmin(scores)), float(np.nanmax(scores))],
    **rec,
  }
  rec["speedup"] = rec["whole_s"] / alone_s
  if args.report:
    rec["report_before_s"] = rec["report_s"] - alone_s + rec["whole_s"]
  batches = {}
  saved = trusted.STABILITY_BATCH
  try:
    for b in args.batches:  # pairs vmapped at once (lax.map over the batches)
      trusted.STABILITY_BATCH = b
      trusted._stability_pairs.clear_cache()
      first, again = clocked(alone)[0], clocked(alone)
      diff = float(np.max(np.abs(np.asarray(again[1], np.float64) - scores)))
      batches[str(b)] = {"first_s": first, "warm_s": again[0], "max_abs_diff": diff}
  finally:
    trusted.STABILITY_BATCH = saved
    trusted._stability_pairs.clear_cache()
  rec["batches"] = batches
  emit(rec)


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("stability", args, sizes=args.sizes, h=args.width, R=args.restarts)
  with common.precision("float32"), emit.section("stability"):
    for n in args.sizes:
      measure(args, n, emit)
  emit.done()


if __name__ == "__main__":
  main()
