"""How long a job's attack and scoring will take, said before the attack starts.

The estimate counts the work and divides it by this machine's speed, measured when the
estimate is made (a float32 matrix product, a fraction of a second, so a machine shared
with other jobs is measured as it is now):

* the KKT search: R restarts x S steps x m candidates x the step's FLOPs per candidate
  (``10 d h1 + 14 sum(fan_in fan_out)`` of the later layers, benchmarks/README.md's count,
  with d the span's dimension where candidates live in the first layer's span), at
  :data:`SEARCH_EFFICIENCY` of the measured rate, plus the compilation of its chunk;
* the cone's linear programs: :data:`CONE_S` seconds for its reference model (n = 20,
  2,048 units; 41-44 s measured on 625 and on 64 inputs alike) scaled by n x units;
* the scoring: the identifiability fit, the evaluation and the membership test, from the
  number of SSIM comparisons they make and their compilation; the membership tests read off
  the weights from their FLOPs and permutations (all an ``attack=none`` audit runs).

Its constants were measured on a 2-core CPU (docs: the README's "How long"); the aim is a
figure within a factor of two, not a benchmark.
"""

from __future__ import annotations

import time
from typing import Optional

import jax
import numpy as np

from recon_jax.eval import membership, scoring, weight_tests

SEARCH_EFFICIENCY = 0.45  # the KKT step's share of the matmul rate (measured 0.4-0.9)
COMPILE_S = 6.0  # compiling the search's chunk, per layer, at REFERENCE_FLOPS
CONE_S = 50.0  # the cone's programs on its reference model (n 20, 2048 units): 28-113 s
SSIM_PIXEL_S = 3.5e-7  # one SSIM comparison, per pixel, at REFERENCE_FLOPS
SCORING_FIXED_S = 12.0  # compiling and running the scoring's fixed parts at REFERENCE_FLOPS
RESTART_EVAL_S = 0.4  # evaluating one restart's candidates on its own, at REFERENCE_FLOPS
IDENTIFY_S = 10.0  # the attacker's own scores of a search's candidates, at REFERENCE_FLOPS
REFERENCE_FLOPS = 80e9  # the 2-core CPU the constants were measured on (float32 matmul)
# The membership tests read off the weights (recon_jax.eval.weight_tests): their matrix work
# at this share of the measured rate, and each test's permutation test per image and
# relabelling at REFERENCE_FLOPS.  Measured at 1,000 and 4,500 images of a 784-2048-1
# network on a 2-core CPU shared with other jobs: 19-64 s of tests and 1-8 s a permutation
# test, against its rate measured before and after (11-57 GFLOP/s).
WEIGHTS_EFFICIENCY = 0.5
PERMUTATION_S = 5e-8
WEIGHT_TESTS = 4  # tests a report scores (loss, confidence, the fit, the reconstruction's)


SEARCH_SIZE = {"cpu": 384, "gpu": 4096, "tpu": 4096}  # the rate's product, by backend


def machine_flops(size: int = 384, repeats: int = 7) -> float:
  """This machine's float32 matrix-product rate now, through XLA as the attack runs
  (FLOP/s, the median of ``repeats``: a machine shared with other jobs is slower than its
  best moment), on ``size`` x ``size`` matrices.

  On a CPU one size serves both the search and the scoring.  An accelerator runs a
  384-wide product in a few microseconds, mostly launching it: 1.3-2.2 TFLOP/s on an H200
  where the batched search ran at 164 (a 168-fold over-estimate of its time, 8.2 h for
  175 s), so the search's rate there is measured at :data:`SEARCH_SIZE`."""
  import jax.numpy as jnp

  a = jnp.ones((size, size), jnp.float32)
  b = jnp.full((size, size), 1.0 / size, jnp.float32)
  product = jax.jit(lambda a, b: (a @ b) @ b)
  product(a, b).block_until_ready()  # compiled once (milliseconds)
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    product(a, b).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 4.0 * size**3 / max(float(np.median(times)), 1e-9)


def layers(params) -> list:
  """``(fan_in, fan_out, positions)`` of each weight of ``params`` (dense [in, out]: one
  position; a convolution [kh, kw, cin, cout]: kh kw cin inputs per output position, the
  positions unknown here and taken as 1 x the caller's input pixels)."""
  out = []
  for leaf in jax.tree_util.tree_leaves(params):
    shape = np.shape(leaf)
    if len(shape) == 2:
      out.append((int(shape[0]), int(shape[1]), 1))
    elif len(shape) == 4:
      out.append((int(shape[0] * shape[1] * shape[2]), int(shape[3]), -1))
  return out


def search_flops(dims: list, m: int, span_dim: Optional[int], pixels: int) -> float:
  """FLOPs of one restart-step of the KKT search with ``m`` candidates (see the module)."""
  if not dims:
    return 0.0
  total = 0.0
  for i, (fan_in, fan_out, positions) in enumerate(dims):
    where = pixels if positions < 0 else 1
    if i == 0:
      fan_in = span_dim if (span_dim and positions > 0) else fan_in
      total += 10.0 * fan_in * fan_out * where
    else:
      total += 14.0 * fan_in * fan_out * where
  return m * total


def weights_flops(dims: list, given: int) -> float:
  """FLOPs of the membership tests read off the weights on ``given`` images: the layers'
  factors at each point of the path, the Gram matrix of the gradients and the nonnegative
  fit (0 where a layer is not dense: the fit does not run)."""
  if not dims or any(positions < 0 for _, _, positions in dims):
    return 0.0
  params_n = sum(fan_in * fan_out for fan_in, fan_out, _ in dims)
  path = 6.0 * weight_tests.PATH_POINTS * given * params_n
  gram = 2.0 * given**2 * sum(fan_in + fan_out for fan_in, fan_out, _ in dims)
  return path + gram + 2.0 * weight_tests.FIT_ITERS * given**2


def weights_seconds(dims: list, n: int, heldout: int, rate: float) -> float:
  """Seconds of the membership tests read off the weights (:func:`weights_flops` and the
  permutation tests) at the machine's ``rate``."""
  if not heldout or not n:
    return 0.0
  given = n + min(int(heldout), scoring.MAX_HELDOUT_WEIGHTS)
  slow = REFERENCE_FLOPS / max(rate, 1e-9)
  perms = WEIGHT_TESTS * given * membership.PERMUTATIONS * PERMUTATION_S * slow
  return weights_flops(dims, given) / (WEIGHTS_EFFICIENCY * rate) + perms


def estimate(
  params,
  *,
  n: int,
  heldout: int,
  pixels: int,
  restarts: int,
  steps: int,
  m: int,
  searched: bool,
  attack: str,
  span_dim: Optional[int] = None,
  identify: bool = False,
  flops: Optional[float] = None,
) -> dict:
  """Seconds the attack and the scoring of a job will take (``{"attack_s", "scoring_s",
  "total_s", "gflop", "gflops"}``): ``params`` the victim's (theta*), ``n`` training and
  ``heldout`` held-out images of ``pixels`` inputs each; the search's ``restarts``,
  ``steps`` and ``m`` candidates (``searched``; else ``attack`` reads its candidates, e.g.
  the cone); ``span_dim``: the span's dimension where the candidates live in it;
  ``identify``: the attacker's own scores follow a search; ``flops``: the machine's rate (:func:`machine_flops` when None)."""
  rate = machine_flops() if flops is None else float(flops)
  slow = REFERENCE_FLOPS / max(rate, 1e-9)  # > 1: slower than the reference machine now
  dims = layers(params)
  big = rate  # the search's rate: a larger product's on an accelerator
  if searched:
    work = restarts * steps * search_flops(dims, m, span_dim, pixels)
    size = SEARCH_SIZE.get(jax.default_backend(), SEARCH_SIZE["cpu"])
    if flops is None and size != SEARCH_SIZE["cpu"]:
      big = machine_flops(size)
    attack_s = work / (SEARCH_EFFICIENCY * big) + COMPILE_S * max(len(dims), 1) * slow
  else:
    work = 0.0
    units = dims[0][1] if dims else 1
    size = n * units / (20 * 2048)  # its programs grow with the units and facets, not pixels
    attack_s = (CONE_S * size if attack == "cone" else 2.0) * slow
  weights_s = weights_seconds(dims, n, heldout, rate)
  if attack == "none":  # a membership-only audit: the tests alone
    return {
      "attack_s": 0.0,
      "scoring_s": weights_s,
      "total_s": weights_s,
      "gflop": 0.0,
      "gflops": float(rate / 1e9),
    }
  sets = (restarts if searched else 1) + 1
  h = min(int(heldout), 500)
  given = n + h  # the membership test's nearest neighbours: every pair, or 16 each
  pairs = given**2 if given <= membership.EXACT_UP_TO else given * membership.NEIGHBOURS
  comparisons = pairs + sets * given + (sets + 4) * n * h
  params_n = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params))
  ident_s = sets * params_n * n * 100.0 / rate
  fixed = SCORING_FIXED_S + RESTART_EVAL_S * sets + (IDENTIFY_S if identify and searched else 0)
  scoring_s = (fixed + comparisons * pixels * SSIM_PIXEL_S) * slow + ident_s + weights_s
  return {
    "attack_s": float(attack_s),
    "scoring_s": float(scoring_s),
    "total_s": float(attack_s + scoring_s),
    "gflop": float(work / 1e9),
    "gflops": float(big / 1e9),
  }


def say(e: dict) -> str:
  """The estimate as the log line a person reads before the attack starts."""
  return (
    f"estimate: about {_duration(e['total_s'])} from here (the attack "
    f"{_duration(e['attack_s'])}"
    + (f", {e['gflop']:.0f} GFLOP" if e["gflop"] >= 1 else "")
    + f"; scoring {_duration(e['scoring_s'])}), at {e['gflops']:.0f} GFLOP/s measured now; "
    "a line at least every 30 s"
  )


def _duration(s: float) -> str:
  s = max(float(s), 1.0)
  if s < 90:
    return f"{s:.0f} s"
  if s < 5400:
    return f"{s / 60:.0f} min"
  return f"{s / 3600:.1f} h"
