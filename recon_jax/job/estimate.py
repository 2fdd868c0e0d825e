"""How long a job's attack and scoring will take, said before the attack starts, phase by
phase (metrics.json's ``timing.estimated`` beside the seconds each phase took).

The estimate counts the work and divides it by this machine's speed, measured when the
estimate is made (a float32 matrix product, a fraction of a second, so a machine shared
with other jobs is measured as it is now); each constant below is a count of work at the
reference rate :data:`REFERENCE_FLOPS`, scaled by the rate measured now:

* the KKT search: R restarts x S steps x m candidates x the step's FLOPs per candidate
  (``10 d h1 + 14 sum(fan_in fan_out)`` of the later layers, benchmarks/README.md's count,
  with d the span's dimension where candidates live in the first layer's span), at
  :data:`SEARCH_EFFICIENCY` of the measured rate, plus the compilation of its chunk;
* the cone's linear programs: :data:`CONE_S` seconds for its reference model (k = 19 span
  directions, 2,048 units) scaled by the units and by k ** :data:`CONE_POWER`;
* the hand-over: the KKT search a direct attack hands over to, with its own scoring (the
  search's restarts and the attacker's scores of them) in place of the direct attack's:
  counted in the total where the plan always hands over, said beside it where the cone
  hands over only when it reads short;
* the scoring, part by part: the identifiability fits (a gradient matrix per set of
  candidates, the flat family's program), the evaluation and the membership report (SSIM
  comparisons and their compilation), the membership tests read off the weights (their
  FLOPs and permutations; all an ``attack=none`` audit runs), the attacker's own scores,
  and the figures and report.md.

The aim is a figure within a factor of two of what follows (benchmarks/phases.py measures
it against each phase), not a benchmark.
"""

from __future__ import annotations

import time
from typing import Optional

import jax
import numpy as np

from recon_jax.eval import identifiability, membership, scoring, similarity, weight_tests

SEARCH_EFFICIENCY = 0.45  # the KKT step's share of the matmul rate (measured 0.4-0.9)
COMPILE_S = 3.0  # compiling the search's chunk, per layer, at REFERENCE_FLOPS
CONE_S = 50.0  # the cone's programs on its reference model (k = 19, 2048 units)
CONE_REFERENCE_K = 19
CONE_POWER = 1.5  # how the cone's programs grow with the span's directions k
CONE_LP_S = 0.9  # one facet program at k = 19 (0.54 s a start at n = 20 on a loaded CPU)
# The scoring's constants, in seconds at REFERENCE_FLOPS or FLOPs, from the parts' seconds
# on a 2-core CPU (benchmarks/phases.py: the finetune job at n = 20 with the cone and with
# the KKT search, the audit without theta_0 at n = 100; BUILD.md), each run's seconds over
# the slowdown its estimate measured:
SSIM_PIXEL_S = 6e-8  # one SSIM comparison, per pixel (the library's kernel, compiled)
EVAL_FIXED_S = 8.0  # the evaluation's programs compiled and its fixed parts
# ... and per set of candidates (each restart, the pooled set): its strict rule and
# held-out baseline against EVAL_HELDOUT held-out images (9 s a set with 4,000-4,800 of
# them, under 1 s with 160)
EVAL_SET_S = 9.0
EVAL_HELDOUT = 4000
MEMBER_FIXED_S = 5.0  # the membership report and tests compiled
IDENTIFY_FIXED_S = 3.0  # the identifiability fits compiled
IDENTIFY_FIT = 100.0  # a fit's FLOPs per P n^2 (the [P, n] matrix of gradients, float64)
IDENTIFY_FAMILY = 6e-3  # the flat family's program, s per n^2
IDENTIFY_FAMILY_CAP_S = 70.0  # ... stopped after 60 s (identifiability.LP_TIME_LIMIT_S)
# The attacker's own scores: compilation, agreement, margins and the stability re-runs (64
# candidates x 30 steps, each kicked candidate stepped alone against its restart's sum: 5-15 s
# at m = 100-500 of a 784-2048-1 victim in its span, compilation included, load 5-8 at
# 105-150 GFLOP/s measured, benchmarks/stability.py; 21-66 s for m = 300 when each re-ran
# its whole restart)
IDENTIFY_S = 20.0
# ... whose check of its picks compares every candidate with every training image and its
# PREFILTER_K most correlated held-out images, then with every held-out image those at the
# threshold that none of them matches as well (the evaluation's prefilter; counted as one
# candidate per training image): 14-23 s for 4,800 MNIST candidates, none at the threshold,
# 36 s for 2,000 with 36 (434 s for their 8 million pairs before the prefilter), loaded
TRUTH_SSIM_PIXEL_S = 1e-7
# ... their leave-one-out and margins: FLOPs per candidate and parameter (44 s for 16 x 300
# candidates of 804,000 parameters at 116 GFLOP/s measured; 141 s before each candidate's
# term was reduced where it is made)
IDENTIFY_PER = 1400.0
FILES_S = 3.0  # the figures and report.md, at REFERENCE_FLOPS
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


def steady(rate: float) -> float:
  """The rate a hand-over's budget is judged at, from the ``rate`` measured before the
  attack: that rate, or :data:`REFERENCE_FLOPS` where the machine measured slower (a CPU
  shared with other jobs).  A loaded machine is judged as the idle reference machine, so
  one command hands over or not whatever the load; only a machine faster than the
  reference judges at its own rate."""
  return max(float(rate), REFERENCE_FLOPS)


def steady_rate(e: dict) -> float:
  """:func:`steady` of the rate the estimate ``e`` measured (the machine is not measured
  again)."""
  return steady(float(e["gflops"]) * 1e9)


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


def search_seconds(dims, restarts, steps, m, span_dim, pixels, rate, slow) -> tuple:
  """``(seconds, FLOPs)`` of a KKT search: its steps at :data:`SEARCH_EFFICIENCY` of the
  measured ``rate`` and the compilation of its chunk (``slow``: the reference machine's rate
  over this one's now)."""
  work = restarts * steps * search_flops(dims, m, span_dim, pixels)
  return work / (SEARCH_EFFICIENCY * rate) + COMPILE_S * max(len(dims), 1) * slow, work


def cone_seconds(dims, n: int, span_dim: Optional[int], slow: float) -> float:
  """Seconds of the cone's linear programs: :data:`CONE_S` on its reference model (k = 19
  span directions, 2,048 units) scaled by the units and by (k / 19) ** :data:`CONE_POWER`
  (more facets to find, each program over more directions).  Where one program alone
  (:data:`CONE_LP_S`, growing as k^2) outlasts the facet search's patience
  (``cone.PATIENCE_S`` without a new facet), a search that finds none gives up after one
  program of its random starts and one of its held images' (n = 500 digits: 2 programs of
  about 280 s, 559 s in all, on a loaded CPU): the estimate says that."""
  from recon_jax.attacks import cone

  units = dims[0][1] if dims else 1
  k = max(int(span_dim or n or 1), 1)
  reading = CONE_S * (units / 2048) * (k / CONE_REFERENCE_K) ** CONE_POWER * slow
  program = CONE_LP_S * (units / 2048) * (k / CONE_REFERENCE_K) ** 2 * slow
  if program > cone.PATIENCE_S:
    return min(reading, 2 * (program + cone.FIRST_PATIENCE_S))
  return reading


def scoring_phases(
  params, dims, *, n, heldout, pixels, sets, m, identify, rate, slow, ceiling=False
) -> dict:
  """Seconds of each part of the scoring of ``sets`` sets of ``m`` candidates (the restarts,
  or the direct attack's one) against ``n`` training and ``heldout`` held-out images:

  * identifiability: the truth's and each set's fit, a [P, n] gradient matrix solved for its
    multipliers (:data:`IDENTIFY_FIT` FLOPs per P n^2, and its compilation), then the flat
    family's linear program (growing as n^2, stopped after 60 s);
  * the evaluation: its programs per set (matching, voting, the strict rule and the
    baselines of each restart's m) and every candidate's SSIM with every training image;
  * the membership report (each given image's best SSIM among the candidates, its nearest
    other given image) and the tests read off the weights (:func:`weights_seconds`);
  * with ``identify``, the attacker's own scores: every candidate's SSIM with every training
    image and, by the evaluation's prefilter, the held-out ones (what tells the attacker's
    picks right), then leave-one-out and margins through the network."""
  params_n = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params))
  cands = sets * m
  fits = IDENTIFY_FIXED_S * slow + (sets + 1) * IDENTIFY_FIT * params_n * n**2 / rate
  family = min(IDENTIFY_FAMILY * n**2 * slow, IDENTIFY_FAMILY_CAP_S) if n else 0.0
  if identifiability.matrix_bytes(params, n) > identifiability.MAX_BYTES:
    fits = family = 0.0  # not scored: its gradient matrix would not fit
  ssim = SSIM_PIXEL_S * pixels * slow  # one SSIM comparison, now
  per_set = EVAL_SET_S * min(int(heldout), EVAL_HELDOUT) / EVAL_HELDOUT
  evaluation = (EVAL_FIXED_S + per_set * sets) * slow + ssim * cands * n
  given = n + min(int(heldout), membership.MAX_HELDOUT)
  pairs = given**2 if given <= membership.EXACT_UP_TO else given * membership.NEIGHBOURS
  member = MEMBER_FIXED_S * slow + ssim * (given * cands + pairs)
  member += weights_seconds(dims, n, heldout, rate)
  out = {"identifiability_s": fits + family, "evaluation_s": evaluation, "membership_s": member}
  if ceiling:  # each training image's projection on the span, by the strict rule
    out["span_ceiling_s"] = ssim * n * (n + int(heldout))
  if identify:
    pairs = cands * (n + similarity.PREFILTER_K) + min(cands, n) * int(heldout)
    truth = TRUTH_SSIM_PIXEL_S * pixels * slow * pairs
    out["identification_s"] = IDENTIFY_S * slow + truth + IDENTIFY_PER * cands * params_n / rate
  return out


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
  handover: Optional[dict] = None,
  certain: bool = False,
  budget_s: float = float("inf"),
  ceiling: bool = False,
) -> dict:
  """Seconds the attack and the scoring of a job will take, per phase: ``params`` the
  victim's (theta*), ``n`` training and ``heldout`` held-out images of ``pixels`` inputs each;
  the search's ``restarts``, ``steps`` and ``m`` candidates (``searched``; else ``attack``
  reads its candidates, e.g. the cone); ``span_dim``: the span's dimension where the
  candidates live in it (and the cone's); ``identify``: the attacker's own scores follow a
  search; ``flops``: the machine's rate (:func:`machine_flops` when None).

  ``handover``: where a direct attack hands over to a KKT search when it reads short, that
  search's ``restarts``, ``steps``, ``m``, ``span_dim`` and ``identify``; it runs within
  ``budget_s`` (a longer one is skipped, as the job skips it), and its scoring replaces the
  direct attack's.  ``certain``: it always hands over (past one hidden layer, or under
  squared error): the total counts it; otherwise the total is the direct attack's path and
  ``if_handover`` the other.  ``ceiling``: the report counts what the change's span holds
  (a known theta_0 whose change spans fewer directions than the input has).

  Returns ``{"phases": {name_s: s}, "attack_s", "handover_s", "scoring_s", "total_s",
  "if_handover": None or {"phases", "total_s"}, "gflop", "gflops"}``; ``scoring_s`` counts
  the figures and report written after it (:data:`FILES_S`)."""
  rate = machine_flops() if flops is None else float(flops)
  slow = REFERENCE_FLOPS / max(rate, 1e-9)  # > 1: slower than the reference machine now
  dims = layers(params)
  big = rate  # the search's rate: a larger product's on an accelerator
  size = SEARCH_SIZE.get(jax.default_backend(), SEARCH_SIZE["cpu"])
  if flops is None and size != SEARCH_SIZE["cpu"] and (searched or handover):
    big = machine_flops(size)
  work = 0.0
  if attack == "none":  # a membership-only audit: the tests alone
    weights_s = weights_seconds(dims, n, heldout, rate)
    phases = {"membership_s": weights_s}
    return _result(phases, None, 0.0, rate)
  if searched:
    attack_s, work = search_seconds(dims, restarts, steps, m, span_dim, pixels, big, slow)
  elif attack == "cone":
    attack_s = cone_seconds(dims, n, span_dim, slow)
  else:
    attack_s = 2.0 * slow
  kw = dict(n=n, heldout=heldout, pixels=pixels, rate=rate, slow=slow, ceiling=ceiling)
  sets = restarts + 1 if searched else 1
  phases = {"attack_s": attack_s}
  phases.update(scoring_phases(params, dims, sets=sets, m=m, identify=identify and searched, **kw))
  phases["files_s"] = FILES_S * slow
  other = None
  if handover and n and not searched:
    h = handover
    then_s, then_work = search_seconds(
      dims, h["restarts"], h["steps"], h["m"], h.get("span_dim"), pixels, big, slow
    )
    other = {"attack_s": attack_s, "handover_s": then_s}
    scored = dict(sets=h["restarts"] + 2, m=h["m"], identify=bool(h.get("identify")))
    other.update(scoring_phases(params, dims, **scored, **kw))
    other["files_s"] = FILES_S * slow
    # the job skips a search over its budget, judged at the steady rate
    if (sum(other.values()) - attack_s) * big / steady(big) > budget_s:
      other = None
    elif certain:
      phases, other, work = other, None, then_work
  return _result(phases, other, work, big)


def _result(phases: dict, other: Optional[dict], work: float, rate: float) -> dict:
  """:func:`estimate`'s dict of the phases of the path its total is of (and ``other``,
  the path of a hand-over that may follow, or None)."""
  total = float(sum(phases.values()))
  attack_s = float(phases.get("attack_s", 0.0))
  handover_s = float(phases.get("handover_s", 0.0))
  return {
    "phases": {k: float(v) for k, v in phases.items()},
    "attack_s": attack_s,
    "handover_s": handover_s,
    "scoring_s": total - attack_s - handover_s,
    "total_s": total,
    "if_handover": None
    if other is None
    else {"phases": {k: float(v) for k, v in other.items()}, "total_s": float(sum(other.values()))},
    "gflop": float(work / 1e9),
    "gflops": float(rate / 1e9),
  }


def say(e: dict) -> str:
  """The estimate as the log line a person reads before the attack starts."""
  parts = [f"the attack {_duration(e['attack_s'])}"]
  if e["handover_s"]:
    parts.append(f"the KKT search it hands over to {_duration(e['handover_s'])}")
  line = (
    f"estimate: about {_duration(e['total_s'])} from here ("
    + ", ".join(parts)
    + (f", {e['gflop']:.0f} GFLOP" if e["gflop"] >= 1 else "")
    + f"; scoring {_duration(e['scoring_s'])})"
  )
  other = e.get("if_handover")
  if other:
    line += (
      f", or {_duration(other['total_s'])} if it reads short and hands over to the KKT "
      f"search ({_duration(other['phases']['handover_s'])} of it)"
    )
  return line + f", at {e['gflops']:.0f} GFLOP/s measured now; a line at least every 30 s"


def _duration(s: float) -> str:
  s = max(float(s), 1.0)
  if s < 90:
    return f"{s:.0f} s"
  if s < 5400:
    return f"{s / 60:.0f} min"
  return f"{s / 3600:.1f} h"


def phases_of(e: dict) -> dict:
  """The estimate's seconds per phase (metrics.json's ``timing.estimated``), those of the
  hand-over's path as ``if_handover.NAME`` where it may follow."""
  out = dict(e["phases"])
  for k, v in ((e.get("if_handover") or {}).get("phases") or {}).items():
    out[f"if_handover.{k}"] = v
  return out
