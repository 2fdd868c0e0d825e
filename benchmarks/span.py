r"""The KKT step on a model fine-tuned from known weights: candidates in pixels against
candidates as coefficients in the span of the first layer's change.

  python -m benchmarks.span                      # h = 2048, R = 16 (minutes)
  python -m benchmarks.span --quick              # h = 256, R = 2, 2 steps, one batching

The victim is the main job's ``finetune`` recipe (``VictimConfig(arch='mlp',
widths=(h,), bias='all', init='kaiming', ...)``, 25x25x1 inputs, d = 625), too slow to
train here, so theta* is synthetic: theta_0 from ``models.init_params``, the first-layer
kernel moved by ``X^T A`` for n = 20 random images X [n, d] (the change a gradient-based
fine-tuning leaves: a combination of the training images), every other leaf theta_0 plus
small noise.  The attacker's view is ``known_init_target(make_target(theta*, labels,
mean), theta_0, 0.5)``; the span ``span_basis(target.fit, n=n)``: k = n - 1 directions,
the images being centred on their own mean as the library's data are.

The three code paths of ``kkt_attack(apply_fn, 'binary', steps=Steps('adam'))``: in pixels,
with ``subspace=Subspace(B, image)`` in coefficients (each candidate k numbers instead of d; the attack's
``prepare`` reduces the target to the span inside the compiled programs, once per chunk),
and the same with the KKT sum in closed form (``closed``: ``apply_fn`` marked by
``equations.one_hidden``, what the main job builds for one hidden layer).
Each runs through ``loop.make_runner``'s compiled chunk (``num_steps`` static), R = 16
restarts of m = 40 candidates with the ``finetune_kkt`` preset's hyperparameter sweep, for
lax.map and vmap; all programs of one width are compiled first, then timed in
interleaved rounds.  Per program: restart-steps/s; per batching: the speedup
(coefficients over pixels, same batching, same run), by wall time and by CPU time, and the
closed form's over autodiff in coefficients (``closed_speedup``).

  python -m benchmarks.span --image=28,28,1 --n=500 --m=500 --restarts=1   # MNIST n = 500
"""

from __future__ import annotations

import math
import time

from benchmarks import common

IMAGE = (25, 25, 1)  # the LFW crops of the finetune preset: d = 625
CHANGE = 0.1  # ||K* - K_0|| / ||K_0|| of the first layer
NOISE = 1e-3  # std of the noise added to every other leaf of theta_0
LINEARIZE = 0.5  # the finetune_kkt preset's point between theta_0 and theta*
PATHS = ("pixels", "coefficients", "closed")


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--widths", default=None, help="hidden widths h (default 2048; --quick 256)")
  p.add_argument("--restarts", type=int, default=None, help="R (default 16; --quick 2)")
  p.add_argument("--n", type=int, default=20, help="training images behind the change")
  p.add_argument("--m", type=int, default=40, help="candidates per restart")
  p.add_argument("--image", default="25,25,1", help="input shape (default the LFW crops)")
  hb = "comma-separated map, vmap, auto (default map,vmap; --quick auto: lax.map on a CPU)"
  p.add_argument("--batchings", default=None, help=hb)
  p.add_argument("--chunk_s", type=float, default=0.3, help="target seconds per timed chunk")
  p.add_argument("--steps", type=int, default=None, help="steps per chunk (default: chunk_s)")
  args = common.parse(p, argv)
  args.widths = common.int_list(args.widths or ("256" if args.quick else "2048"))
  args.restarts = args.restarts or (2 if args.quick else 16)
  batchings = args.batchings or ("auto" if args.quick else "map,vmap")
  args.batchings = [b.strip() for b in batchings.split(",") if b.strip()]
  args.image = tuple(common.int_list(args.image))
  if args.steps is None and args.quick:
    args.steps = 2
  if min(args.n, args.m, args.restarts, *args.widths) < 1 or (args.steps or 1) < 1:
    p.error("--n, --m, --restarts, --widths and --steps must be >= 1")
  return args


def finetuned_problem(h: int, n: int, m: int, seed: int = 0, image=IMAGE):
  """(apply_fn, target, basis, span info, seconds of span_basis) of a synthetic model
  fine-tuned from theta_0.

  Call inside ``precision``: theta_0, theta* and the target take ``float_dtype()``.
  """
  import jax
  import numpy as np

  import recon_jax
  from recon_jax.attacks import span
  from recon_jax.victims import models, targets, trained

  cfg = recon_jax.VictimConfig(
    arch="mlp",
    widths=(h,),
    bias="all",
    init="kaiming",
    init_std=None,
    first_layer_std=None,
    lr=0.01,
    epochs=2000,
  )
  module = trained.module_for(cfg, 1)  # one output: the binary problem
  theta_0 = common.init_params(module, image, seed)
  rng = np.random.default_rng(seed)
  pixels = rng.uniform(0.0, 1.0, (n, math.prod(image)))
  mean = pixels.mean(axis=0)
  change = (pixels - mean).T @ rng.standard_normal((n, h))  # X^T A, [d, h]
  k_0 = np.asarray(theta_0["params"]["layer_0"]["kernel"], np.float64)
  change *= CHANGE * np.linalg.norm(k_0) / np.linalg.norm(change)
  theta_star = jax.tree_util.tree_map(
    lambda a: np.asarray(a, np.float64) + NOISE * rng.standard_normal(a.shape), theta_0
  )
  theta_star["params"]["layer_0"]["kernel"] = k_0 + change
  labels = recon_jax.candidate_labels("binary", m)
  target = recon_jax.make_target(theta_star, labels, mean.reshape(image))
  target = targets.known_init_target(target, theta_0, LINEARIZE)
  t = time.perf_counter()
  basis, info = span.span_basis(target.fit, n=n)  # a NumPy SVD of the [d, h] change
  return models.make_apply_fn(module), target, basis, info, time.perf_counter() - t


def step_flops(path: str, d: int, k: int, h: int, m: int) -> float:
  """Estimated FLOPs of one restart's step (to size the chunks): the KKT step's 10 m d h
  of a d-h-1 network, with the k coefficients in place of the d inputs plus the decoding
  to pixels (x = c B^T and its transpose, 4 m k d) on the coefficient path."""
  return 10 * m * d * h if path == "pixels" else 10 * m * k * h + 4 * m * k * d


def programs(args, h: int, ceiling, dtype: str = "float32") -> tuple:
  """{(batching, path): compiled chunk} of width h, the span's info and the seconds
  ``span_basis`` took (the coefficient path's one-off cost, outside the chunks)."""
  import jax

  from recon_jax.attacks import equations, kkt
  from recon_jax.engine import inits, loop

  image = args.image
  with common.precision(dtype) as dt:
    apply_fn, target, basis, info, basis_s = finetuned_problem(h, args.n, args.m, image=image)
    marked = equations.one_hidden(apply_fn, target.params, jax.nn.relu, image)
    assert isinstance(marked, equations.OneHidden)
    attacks = {
      "pixels": kkt.kkt_attack(apply_fn, "binary", steps=kkt.Steps("adam")),
      "coefficients": kkt.kkt_attack(
        apply_fn, "binary", steps=kkt.Steps("adam"), subspace=kkt.Subspace(basis, image)
      ),
      "closed": kkt.kkt_attack(
        marked, "binary", steps=kkt.Steps("adam"), subspace=kkt.Subspace(basis, image)
      ),
    }
    hp = common.attack_hparams(args.restarts, preset="finetune_kkt")
    x_init = inits.gaussian(args.m, image, dt)
    progs = {}
    for batching in dict.fromkeys(loop.resolve_batching(b) for b in args.batchings):
      for path in PATHS:
        flops = step_flops(path, math.prod(image), info.dim, h, args.m)
        k, est = ceiling.steps_per_chunk(dtype, args.restarts * flops, args.chunk_s)
        k = args.steps or k
        prog = common.ChunkProgram(attacks[path], x_init, target, hp, batching, k, dtype)
        prog.long, prog.flops = est * k >= 2.0, flops
        progs[(batching, path)] = prog
  return progs, info, basis_s


def run_span(args, ceiling, emit):
  dtype = "float32"
  d = math.prod(args.image)
  for h in args.widths:
    progs, info, basis_s = programs(args, h, ceiling, dtype)
    rounds = args.repeats
    if any(p.long for p in progs.values()):
      rounds = max(1, min(rounds, 2))
    common.time_rounds(progs.values(), rounds)
    base = {
      "bench": "span",
      **common.machine(),
      "dtype": dtype,
      "d": d,
      "h": h,
      "n": args.n,
      "m": args.m,
      "span_dim": info.dim,
      "span_rule": info.rule,
      "span_basis_s": basis_s,
    }
    rows = {}
    for (batching, path), p in progs.items():
      rows[(p.batching, path)] = t = p.timing()
      est = {"gflop_per_restart_step_est": p.flops / 1e9}
      emit({**base, "what": "step", "path": path, **t, **est})
    for batching in dict.fromkeys(b for b, _ in rows):
      px, co = rows[(batching, "pixels")], rows[(batching, "coefficients")]
      emit(
        {
          **base,
          "what": "speedup",
          "R": args.restarts,
          "batching": batching,
          "pixels_restart_steps_per_s": px["restart_steps_per_s"],
          "coefficients_restart_steps_per_s": co["restart_steps_per_s"],
          "speedup": co["restart_steps_per_s"] / px["restart_steps_per_s"],
          "speedup_cpu": px["cpu_s_per_step"] / co["cpu_s_per_step"],
          "closed_speedup": rows[(batching, "closed")]["restart_steps_per_s"]
          / co["restart_steps_per_s"],
          "closed_speedup_cpu": co["cpu_s_per_step"] / rows[(batching, "closed")]["cpu_s_per_step"],
        }
      )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("span", args, widths=args.widths, R=args.restarts)
  ceiling = common.Ceiling()  # sets the steps per chunk, unless --steps does
  if args.steps is None:
    with emit.section("matmul"):
      ceiling.measure("float32", 2048, args.repeats)
  with emit.section("span"):
    run_span(args, ceiling, emit)
  emit.done()


if __name__ == "__main__":
  main()
