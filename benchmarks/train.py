r"""Victim training: epochs/s of full-batch gradient descent (``recon_jax.victims.descent``).

  python -m benchmarks.train                     # float32 and float64
  python -m benchmarks.train --quick             # smoke run (seconds)

The d-h-h-1 MLP (bias='first', logistic loss) trained by the library's compiled chunk
(``descent.make_train_chunk``) on n random inputs: digits size 64-256-256-1 (n=50) and
CIFAR size 3072-1000-1000-1 (n=500).  GFLOP/s counts the forward and backward matmuls.
"""

from __future__ import annotations

from benchmarks import common
from benchmarks.common import precision


def parse_args(argv=None):
  return common.parse(common.parser(__doc__), argv)


def run_train(args, emit):
  import jax
  import jax.numpy as jnp
  import numpy as np

  import recon_jax
  from recon_jax.victims import descent, models

  # (name, d, widths, n, epochs per chunk)
  cases = (
    [("digits_tiny", 64, (64, 64), 20, 20)]
    if args.quick
    else [("digits", 64, (256, 256), 50, 200), ("cifar", 3072, (1000, 1000), 500, 5)]
  )
  for dtype in args.dtypes:
    for name, d, widths, n, k in cases:
      with precision(dtype) as dt:
        module = models.build_model("mlp", widths=widths, bias="first")
        params = common.init_params(module, d)
        x = jnp.asarray(np.random.default_rng(0).uniform(-0.5, 0.5, (n, d)), dt)
        y = jnp.asarray(recon_jax.candidate_labels("binary", n), dt)
        cfg = descent.TrainConfig(loss="logistic", lr=0.01, epochs=k, chunk=k)
        _, chunk = descent.make_train_chunk(models.make_apply_fn(module), cfg)
        state, key = descent.init_state(params, cfg), jax.random.PRNGKey(0)
        run = lambda: chunk(state, x, y, key, length=k)
        first_s, _ = common.timed(run)  # compiles
        best, times = common.best_of(run, args.repeats, warmup=0)
      p = d * widths[0] + widths[0] + widths[0] * widths[1] + widths[1]
      flops = 4 * n * p + 2 * n * (widths[0] * widths[1] + widths[1])
      emit(
        {
          "bench": "train",
          "name": name,
          "dtype": dtype,
          "d": d,
          "widths": list(widths),
          "n": n,
          "epochs_per_chunk": k,
          "epochs_per_s": k / best,
          "gflop_per_epoch": flops / 1e9,
          "gflops": flops * k / best / 1e9,
          "first_call_s": first_s,
          "runs": len(times),
        }
      )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("train", args)
  with emit.section("train"):
    run_train(args, emit)
  emit.done()


if __name__ == "__main__":
  main()
