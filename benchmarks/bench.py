r"""Benchmarks: one JSON line per measurement, against the machine's own matmul ceiling.

  python -m benchmarks.bench                      # everything, float32 and float64 (minutes)
  python -m benchmarks.bench --quick              # CI smoke run (seconds)
  python -m benchmarks.bench --only=matmul,kkt --no-x64 --out=benchmarks/RESULTS_cpu.json

Selections (``--only``, comma-separated; default all):

* ``matmul``   the ceiling: GFLOP/s of a large square matmul per dtype (measured
  first and again before each dtype block; utilisation uses the best seen).
* ``kkt``      the KKT attack step of the d-h-h-1 MLP (bias='first', binary) through
  the product code path, ``recon_jax.loop.make_runner``'s compiled lax.scan
  chunk: steps/s, GFLOP/s (10 m d h + 14 m h^2 per restart-step) and
  utilisation, for R = 1, 8, 32 restarts (vmap) and R = 1, 8 (lax.map).  The
  programs of one size are compiled first and then timed in interleaved rounds,
  each round with one chunk of every program and one matmul (the "local"
  ceiling, under the same load).  Utilisation is reported three ways: against the
  best ceiling seen in the run, against the local ceiling, and per CPU-second
  (``process_time``; insensitive to what other processes take, blind to idle
  cores in serial sections).
* ``batching`` the batching ratio: restart-steps/s at R=8 over steps/s of a single
  restart (1.0: batching costs nothing; R: the extra restarts come free), for vmap
  and lax.map (and R=32 for vmap).  ``ratio_as_written`` divides by R once more,
  as issue 5's formula reads literally (R=8 restart-steps/s / (8 x R=1 steps/s));
  on a CPU that one restart already saturates it cannot exceed ~1/R.
* ``breakdown`` where the KKT step's time goes: every dot of the compiled step
  timed alone (same shapes and contracting dims) against the whole step.
* ``train``    victim training (recon_jax.victims.train, full-batch GD): epochs/s.
* ``e2e``      the main job as a subprocess, ``python -m experiments.reconstruct
  --config=experiments/configs/reconstruct.py:tiny --config.use_cache=False``:
  wall, compile, run time (skipped with --quick).
* ``bilevel``  Runkel et al.'s outer step (``attacks.bilevel``, implicit
  differentiation): time, split into inner solve and Hessian solve, CG vs
  quasi-Newton, and compiled temp memory of implicit vs unrolled differentiation
  as inner iterations grow.
* ``memory``   memory per restart of the KKT step at paper scale (m=1000,
  3072-1000-1000-1): analytic and from XLA's ``memory_analysis()`` of the compiled
  chunk (compiled from shapes only, nothing allocated), and the largest R that fits
  on an 80 GB and a 141 GB device.

Everything but the timing is the library's: the problem is built with
``loading.make_target`` / ``candidate_labels`` / ``hparams_for`` (the main
job's default sweep), arrays take ``float_dtype()``, the step runs in
``loop.make_runner``.  Timings are the best (minimum) of several runs after a
warm-up call: the machine may be shared, and the minimum is the least disturbed
estimate.  Targets are reported as true/false, never asserted.
``benchmarks/report.py`` turns one or more result files into the markdown tables
of BUILD.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import itertools
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

ALL = ("matmul", "kkt", "batching", "breakdown", "train", "e2e", "bilevel", "memory")
KKT_SIZES = ((64, 1000, 100), (784, 1000, 200), (3072, 1000, 200))
QUICK_KKT_SIZES = ((64, 64, 16),)
PAPER = dict(d=3072, h=1000, m=1000)
TARGET_UTIL_BIG = 0.85  # (3072, 1000, 200) float32
TARGET_UTIL = 0.80  # every other size and dtype
TARGET_BATCHING = 0.90  # R=8 restart-steps/s >= 0.9 x 8 x R=1 steps/s (CPU)
DEVICE_GB = (80, 141)
USABLE_FRACTION = 0.95  # of device memory (XLA_PYTHON_CLIENT_MEM_FRACTION=.95)
E2E_CONFIG = "experiments/configs/reconstruct.py"
E2E_PRESET = "tiny"


def parse_args(argv=None):
  p = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--quick", action="store_true", help="tiny sizes: a CI smoke run of seconds")
  p.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {ALL}")
  p.add_argument(
    "--x64",
    action=argparse.BooleanOptionalAction,
    default=None,
    help="also run the float64 variants (default: on, off with --quick)",
  )
  p.add_argument("--out", default="", help="also append the JSON lines to this file")
  p.add_argument("--repeats", type=int, default=None, help="timed runs per measurement")
  p.add_argument("--restarts", default=None, help="R values for vmap (default 1,8,32)")
  p.add_argument(
    "--chunk_s",
    type=float,
    default=None,
    help="target seconds per timed KKT chunk (sets the steps per chunk)",
  )
  args = p.parse_args(argv)
  args.only = [s.strip() for s in args.only.split(",") if s.strip()]
  bad = [s for s in args.only if s not in ALL]
  if bad:
    p.error(f"--only: unknown {bad}; choose from {ALL}")
  if args.x64 is None:
    args.x64 = not args.quick
  if args.repeats is None:
    args.repeats = 2 if args.quick else 3
  if args.repeats < 1:
    p.error("--repeats must be >= 1")
  if args.restarts is None:
    args.restarts = "1,2" if args.quick else "1,8,32"
  args.restarts = [int(r) for r in args.restarts.split(",")]
  if args.chunk_s is None:
    args.chunk_s = 0.05 if args.quick else 0.3
  return args


class Emitter:
  """Prints one JSON line per record to stdout (flushed) and appends it to ``--out``."""

  def __init__(self, out: str):
    self.out = out
    self.records = []

  def __call__(self, rec: dict) -> dict:
    rec = {k: _clean(v) for k, v in rec.items()}
    line = json.dumps(rec, sort_keys=False, allow_nan=False)
    print(line, flush=True)
    if self.out:
      with open(self.out, "a") as f:
        f.write(line + "\n")
    self.records.append(rec)
    return rec


def _clean(v):
  import numpy as np

  if isinstance(v, np.generic):
    v = v.item()
  if isinstance(v, float):
    return float(f"{v:.6g}") if math.isfinite(v) else None
  if isinstance(v, dict):
    return {k: _clean(u) for k, u in v.items()}
  if isinstance(v, (list, tuple)):
    return [_clean(u) for u in v]
  return v


# ----------------------------------------------------------------------------
# Timing harness.
# ----------------------------------------------------------------------------
@contextlib.contextmanager
def precision(dtype: str):
  """x64 on for 'float64', off for 'float32' (as the binaries set it); yields the library's
  float dtype of the block, ``float_dtype()``."""
  import jax

  from recon_jax.types import float_dtype

  old = jax.config.read("jax_enable_x64")
  jax.config.update("jax_enable_x64", dtype == "float64")
  try:
    yield float_dtype()
  finally:
    jax.config.update("jax_enable_x64", old)


def block(tree):
  import jax

  return jax.block_until_ready(tree)


def best_of(fn, repeats: int, warmup: int = 1):
  """(min seconds, all seconds) of ``fn()`` (blocked) after ``warmup`` untimed calls."""
  for _ in range(warmup):
    block(fn())
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    block(fn())
    times.append(time.perf_counter() - t)
  return min(times), times


def _matmul_fn(dtype: str, n: int):
  """(compiled n x n matmul thunk, its FLOPs)."""
  import jax
  import jax.numpy as jnp

  with precision(dtype) as dt:
    a, b = jax.random.normal(jax.random.PRNGKey(0), (2, n, n), dt)
    f = jax.jit(jnp.matmul).lower(a, b).compile()
  return lambda: f(a, b), 2 * n**3


class Ceiling:
  """Best matmul GFLOP/s seen per dtype (the utilisation denominator)."""

  def __init__(self):
    self.best = {}

  def measure(self, dtype: str, n: int, repeats: int, emit=None, label="ceiling"):
    mm, flops = _matmul_fn(dtype, n)
    best, times = best_of(mm, repeats)
    gflops = flops / best / 1e9
    self.best[dtype] = max(self.best.get(dtype, 0.0), gflops)
    if emit is not None:
      emit(
        {
          "bench": "matmul",
          "what": label,
          "dtype": dtype,
          "n": n,
          "best_s": best,
          "gflops": gflops,
          "best_gflops_so_far": self.best[dtype],
          "runs": len(times),
        }
      )
    return gflops

  def get(self, dtype: str) -> float:
    return self.best.get(dtype, float("nan"))


@functools.lru_cache(maxsize=None)
def _compiled_init():
  import jax

  from recon_jax.victims import models

  return jax.jit(models.init_params, static_argnums=(0, 2, 3))


def init_params(module, d: int, seed: int = 0):
  """``models.init_params`` for inputs [d] in the current float dtype, as one compiled
  program (run eagerly, each op of the initialisers compiles on its own: seconds)."""
  import jax

  from recon_jax.types import float_dtype

  return _compiled_init()(module, jax.random.PRNGKey(seed), (d,), float_dtype())


def _shapes(tree):
  import jax

  return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


# ----------------------------------------------------------------------------
# The KKT problem, built by the library (call inside ``precision``).
# ----------------------------------------------------------------------------
def kkt_flops(d: int, h: int, m: int) -> int:
  """FLOPs of one KKT step of one restart (issue 5): the big matmuls of loss and gradient."""
  return 10 * m * d * h + 14 * m * h * h


def kkt_problem(d: int, h: int, m: int, seed: int = 0):
  """(attack, x_init, target) of the binary KKT attack on a d-h-h-1 MLP with bias='first'.

  The pixel box is [0, 1] after subtracting a per-pixel mean of 0.45, as for mean-subtracted
  data; theta*, the box and x take the current ``float_dtype()``.
  """
  import numpy as np

  from recon_jax import inits
  from recon_jax.attacks import kkt
  from recon_jax.studies import job
  from recon_jax.types import float_dtype
  from recon_jax.victims import loading, models

  dt = float_dtype()
  module = models.build_model("mlp", widths=(h, h), bias="first")
  params = init_params(module, d, seed)
  target = loading.make_target(params, job.candidate_labels("binary", m), np.full((d,), 0.45))
  attack = kkt.kkt_attack(models.make_apply_fn(module), "binary")
  return attack, inits.gaussian(m, (d,), dt), target


def kkt_hparams(num_restarts: int, seed: int = 0) -> dict:
  """Per-restart hyperparameters of the main job's default sweep, as the loop receives them."""
  import jax.numpy as jnp

  from experiments.configs import reconstruct as configs
  from recon_jax.studies import job

  cfg = configs.get_config("lfw")
  cfg.num_restarts, cfg.seed = num_restarts, seed
  return {k: jnp.asarray(v) for k, v in job.hparams_for(cfg).items()}


# ----------------------------------------------------------------------------
# KKT step.
# ----------------------------------------------------------------------------
class KKTProgram:
  """One compiled KKT chunk (``loop.make_runner``, the product code path) and its state."""

  def __init__(self, d, h, m, dtype, num_restarts, batching, ceiling: Ceiling, args):
    import jax

    from recon_jax import loop

    self.d, self.h, self.m, self.dtype = d, h, m, dtype
    self.num_restarts, self.batching = num_restarts, loop.resolve_batching(batching)
    self.flops = kkt_flops(d, h, m)
    with precision(dtype):
      attack, x_init, self.target = kkt_problem(d, h, m)
      self.hp = kkt_hparams(num_restarts)
      keys = jax.random.split(jax.random.PRNGKey(1), num_restarts)
      init_fn, chunk_fn = loop.make_runner(attack, x_init, batching=self.batching)
      self.state = init_fn(keys, self.hp, self.target)
      ceil = ceiling.get(dtype)
      est_step = num_restarts * self.flops / (0.7 * ceil * 1e9) if ceil == ceil else 0.1
      # steps per chunk: about args.chunk_s of work, at least one step
      self.k = int(min(50, max(1, math.ceil(args.chunk_s / max(est_step, 1e-6)))))
      self.long = est_step * self.k >= 2.0
      t = time.perf_counter()
      self.compiled = chunk_fn.lower(self.state, self.hp, self.target, num_steps=self.k).compile()
      self.compile_s = time.perf_counter() - t
    self.times, self.cpu_times = [], []

  def call(self, timed=True):
    with precision(self.dtype):
      t, c = time.perf_counter(), time.process_time()
      self.state, metrics = self.compiled(self.state, self.hp, self.target)
      block((self.state, metrics))
      if timed:
        self.times.append(time.perf_counter() - t)
        self.cpu_times.append(time.process_time() - c)

  def record(self, ceiling: Ceiling) -> dict:
    import numpy as np

    best = min(self.times)
    step_s = best / self.k
    gflops = self.num_restarts * self.flops / step_s / 1e9
    ceil = ceiling.get(self.dtype)
    loss = np.asarray(self.state.loss)
    return {
      "bench": "kkt",
      "dtype": self.dtype,
      "d": self.d,
      "h": self.h,
      "m": self.m,
      "R": self.num_restarts,
      "batching": self.batching,
      "steps_per_chunk": self.k,
      "timed_chunks": len(self.times),
      "step_s": step_s,
      "steps_per_s": 1.0 / step_s,
      "restart_steps_per_s": self.num_restarts / step_s,
      "gflop_per_restart_step": self.flops / 1e9,
      "gflops": gflops,
      "ceiling_gflops": ceil,
      "utilisation": gflops / ceil,
      "compile_s": self.compile_s,
      "chunk_times_s": self.times,
      # CPU time of all the process's threads: insensitive to how much of the machine
      # other processes took (but blind to idle cores in serial sections).
      "cpu_s_per_step": min(self.cpu_times) / self.k,
      "gflop_per_cpu_s": self.num_restarts * self.flops * self.k / min(self.cpu_times) / 1e9,
      "final_loss_min": float(np.nanmin(loss)) if np.isfinite(loss).any() else None,
    }


def util_target(d, h, m, dtype):
  return TARGET_UTIL_BIG if (d, h, m, dtype) == (3072, 1000, 200, "float32") else TARGET_UTIL


def _timed(fn):
  """(wall, CPU) seconds of ``fn()``, blocked."""
  t, c = time.perf_counter(), time.process_time()
  block(fn())
  return time.perf_counter() - t, time.process_time() - c


def run_kkt(args, dtypes, ceiling, emit, kept=None):
  """All (batching, R) programs of one size are compiled first, then timed in interleaved
  rounds (one chunk of each, and a matmul, per round): on a shared machine every
  configuration then sees the same mix of load, and the ratios between them hold.

  ``kept``: {(d, h, m, dtype, R, batching): None} of the programs a later section uses
  again (see :func:`reused_programs`); the compiled ones are stored there.
  """
  sizes = QUICK_KKT_SIZES if args.quick else KKT_SIZES
  plan = []
  if "kkt" in args.only:
    plan += [("vmap", r) for r in args.restarts]
  if "batching" in args.only:
    small = [r for r in args.restarts if r <= 8] or [1]
    for r in [1, max(small)] if max(small) > 1 else [1]:
      if ("vmap", r) not in plan:
        plan.append(("vmap", r))
      if not args.quick:  # --quick: vmap only (every compile costs seconds)
        plan.append(("map", r))
  results = []
  for dtype in dtypes:
    if "matmul" in args.only or "kkt" in args.only:  # fresh ceiling right before the block
      ceiling.measure(
        dtype, 512 if args.quick else 2048, args.repeats + 2, emit, label="ceiling_recheck"
      )
    mm, mm_flops = _matmul_fn(dtype, 256 if args.quick else 2048)
    for d, h, m in sizes:
      progs = {(b, r): KKTProgram(d, h, m, dtype, r, b, ceiling, args) for b, r in plan}
      rounds = args.repeats
      if any(p.long for p in progs.values()):
        rounds = max(1, min(rounds, 2))
      for p in progs.values():  # warm-up (first-call allocations); skipped for long chunks
        if not p.long:
          p.call(timed=False)
      local, local_cpu = [], []
      for _ in range(rounds):
        wall, cpu = _timed(mm)
        local.append(wall)
        local_cpu.append(cpu)
        for p in progs.values():
          p.call()
      local_gflops = mm_flops / min(local) / 1e9  # the ceiling under this block's load
      mm_per_cpu_s = mm_flops / min(local_cpu) / 1e9
      ceiling.best[dtype] = max(ceiling.best.get(dtype, 0.0), local_gflops)
      rows = {}
      for (b, r), p in progs.items():
        rec = p.record(ceiling)
        tgt = util_target(d, h, m, dtype)
        rec.update(
          ceiling_local_gflops=local_gflops,
          utilisation_local=rec["gflops"] / local_gflops,
          ceiling_gflop_per_cpu_s=mm_per_cpu_s,
          utilisation_cpu=rec["gflop_per_cpu_s"] / mm_per_cpu_s,
          util_target=tgt,
          util_target_met=bool(rec["utilisation"] >= tgt),
          util_target_met_local=bool(rec["gflops"] / local_gflops >= tgt),
        )
        rows[(b, r)] = emit(rec)
        results.append(rec)
        if kept is not None and (d, h, m, dtype, r, b) in kept:
          kept[(d, h, m, dtype, r, b)] = p
      del progs
      for batching in ("vmap", "map"):
        if (batching, 1) not in rows:
          continue
        single = rows[(batching, 1)]["steps_per_s"]
        for (b, r), rec in rows.items():
          if b != batching or r == 1:
            continue
          # Throughput of R batched restarts over one restart at a time: 1.0 means
          # batching costs nothing, R means the extra restarts are free (a GPU's win).
          ratio = rec["restart_steps_per_s"] / single
          emit(
            {
              "bench": "batching",
              "dtype": dtype,
              "d": d,
              "h": h,
              "m": m,
              "batching": batching,
              "R": r,
              "restart_steps_per_s": rec["restart_steps_per_s"],
              "single_steps_per_s": single,
              "ratio": ratio,
              "ratio_as_written": rec["restart_steps_per_s"] / (r * single),
              "target": TARGET_BATCHING if r == 8 else None,
              "target_met": bool(ratio >= TARGET_BATCHING) if r == 8 else None,
            }
          )
  return results


# ----------------------------------------------------------------------------
# Breakdown: every dot of the compiled step timed alone.
# ----------------------------------------------------------------------------
_DEF = re.compile(r"^\s*(?:ROOT\s+)?(%[\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]")
_DOT = re.compile(
  r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*\w+\[[\d,]*\][^ ]*\s+dot\((%[\w.\-]+),\s*"
  r"(%[\w.\-]+)\),\s*lhs_(?:batch_dims=\{([\d,]*)\},\s*lhs_)?contracting_dims="
  r"\{([\d,]*)\},\s*rhs_(?:batch_dims=\{([\d,]*)\},\s*rhs_)?contracting_dims="
  r"\{([\d,]*)\}"
)


def hlo_dots(hlo_text: str):
  """(lhs shape, rhs shape, dimension numbers) of every dot in an optimised HLO module."""
  dots, shapes = [], {}
  ints = lambda g: tuple(int(s) for s in g.split(",") if s) if g else ()
  for line in hlo_text.splitlines():
    if line.rstrip().endswith("{") and (
      "computation" in line or line.lstrip().startswith(("%", "ENTRY"))
    ):
      shapes = {}  # a new computation: names are local to it
    m = _DEF.match(line)
    if m:
      shapes[m.group(1)] = ints(m.group(3))
    m = _DOT.match(line)
    if m and m.group(1) in shapes and m.group(2) in shapes:
      dn = ((ints(m.group(4)), ints(m.group(6))), (ints(m.group(3)), ints(m.group(5))))
      dots.append((shapes[m.group(1)], shapes[m.group(2)], dn))
  return dots


def _dot_program(lhs, rhs, dn, dt):
  """A compiled lax.dot_general of ones of these shapes: its timing record (FLOPs, inputs)."""
  import jax
  from jax import lax
  import jax.numpy as jnp
  import numpy as np

  dot = lambda a, b: lax.dot_general(a, b, dn)
  a, b = jnp.ones(lhs, dt), jnp.ones(rhs, dt)
  out = jax.eval_shape(dot, a, b).shape
  flops = 2.0 * float(np.prod([lhs[i] for i in dn[0][0]])) * float(np.prod(out))
  return {
    "lhs": list(lhs),
    "rhs": list(rhs),
    "dn": dn,
    "f": jax.jit(dot).lower(a, b).compile(),
    "a": a,
    "b": b,
    "flops": flops,
    "times": [],
    "cpu": [],
  }


def breakdown_plan(args):
  """(sizes, batchings) of the breakdown, at R=1."""
  if args.quick:
    return QUICK_KKT_SIZES, ("vmap",)
  return ((3072, 1000, 200), (64, 1000, 100)), ("vmap", "map")


def run_breakdown(args, dtypes, ceiling, emit, kept=None):
  """Times the R=1 step and every dot of its optimised HLO alone, interleaved by rounds.

  Times the programs the KKT section left in ``kept`` again rather than compiling them twice.
  """
  sizes, batchings = breakdown_plan(args)
  for dtype, (d, h, m), batching in itertools.product(dtypes, sizes, batchings):
    prog = (kept or {}).get((d, h, m, dtype, 1, batching))
    if prog is None:
      prog = KKTProgram(d, h, m, dtype, 1, batching, ceiling, args)
    prog.times, prog.cpu_times = [], []
    cost = prog.compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    hlo = prog.compiled.as_text()
    with precision(dtype) as dt:
      dots = [_dot_program(lhs, rhs, dn, dt) for lhs, rhs, dn in hlo_dots(hlo)]
    mm, mm_flops = _matmul_fn(dtype, 256 if args.quick else 2048)
    prog.call(timed=False)
    for dot in dots:
      block(dot["f"](dot["a"], dot["b"]))
    local, local_cpu = [], []
    for _ in range(max(3, args.repeats)):
      wall, cpu = _timed(mm)
      local.append(wall)
      local_cpu.append(cpu)
      prog.call()
      for dot in dots:
        wall, cpu = _timed(lambda: dot["f"](dot["a"], dot["b"]))
        dot["times"].append(wall)
        dot["cpu"].append(cpu)
    local_gflops = mm_flops / min(local) / 1e9
    mm_per_cpu_s = mm_flops / min(local_cpu)
    step_flops = kkt_flops(d, h, m)
    step_cpu = min(prog.cpu_times) / prog.k
    dots_cpu = sum(min(dot["cpu"]) for dot in dots)
    step_s = min(prog.times) / prog.k
    dot_total = sum(min(dot["times"]) for dot in dots)
    dot_flops = sum(dot["flops"] for dot in dots)
    rows = [
      {
        "lhs": dot["lhs"],
        "rhs": dot["rhs"],
        "contract": [list(dot["dn"][0][0]), list(dot["dn"][0][1])],
        "batch": [list(dot["dn"][1][0]), list(dot["dn"][1][1])],
        "s": min(dot["times"]),
        "gflops": dot["flops"] / min(dot["times"]) / 1e9,
        "gflop_per_cpu_s": dot["flops"] / min(dot["cpu"]) / 1e9,
      }
      for dot in dots
    ]
    emit(
      {
        "bench": "breakdown",
        "dtype": dtype,
        "d": d,
        "h": h,
        "m": m,
        "R": 1,
        "batching": prog.batching,
        "hlo_transposes": len(re.findall(r" transpose\(", hlo)),
        "hlo_copies": len(re.findall(r" copy\(", hlo)),
        "step_s": step_s,
        "formula_gflop": step_flops / 1e9,
        # XLA counts the scanned step (the while body) once, whatever k is.
        "xla_gflop": float(cost.get("flops", float("nan"))) / 1e9,
        "xla_transcendentals": float(cost.get("transcendentals", float("nan"))),
        "xla_bytes_accessed": float(cost.get("bytes accessed", float("nan"))),
        "n_dots": len(rows),
        "dots_gflop": dot_flops / 1e9,
        "dots_alone_s": dot_total,
        "dots_alone_gflops": dot_flops / dot_total / 1e9,
        "step_gflops": step_flops / step_s / 1e9,
        "ceiling_local_gflops": local_gflops,
        "dots_alone_utilisation_local": dot_flops / dot_total / 1e9 / local_gflops,
        "step_utilisation_local": step_flops / step_s / 1e9 / local_gflops,
        "non_dot_s": step_s - dot_total,
        "non_dot_fraction": (step_s - dot_total) / step_s,
        "step_cpu_s": step_cpu,
        "dots_alone_cpu_s": dots_cpu,
        "non_dot_fraction_cpu": (step_cpu - dots_cpu) / step_cpu,
        "step_utilisation_cpu": step_flops / step_cpu / mm_per_cpu_s,
        "dots_alone_utilisation_cpu": dot_flops / dots_cpu / mm_per_cpu_s,
        "dots": sorted(rows, key=lambda r: -r["s"])[:12],
      }
    )


# ----------------------------------------------------------------------------
# Victim training.
# ----------------------------------------------------------------------------
def run_train(args, dtypes, emit):
  import jax
  import jax.numpy as jnp
  import numpy as np

  from recon_jax.studies import job
  from recon_jax.victims import models, train

  # --quick: the quick KKT network's shapes (their eager initialisation is compiled already)
  cases = (
    [("digits_tiny", 64, (64, 64), 20, 20)]
    if args.quick
    else [("digits", 64, (256, 256), 50, 200), ("cifar", 3072, (1000, 1000), 500, 5)]
  )
  for dtype in dtypes:
    for name, d, widths, n, k in cases:
      with precision(dtype) as dt:
        module = models.build_model("mlp", widths=widths, bias="first")
        params = init_params(module, d)
        x = jnp.asarray(np.random.default_rng(0).uniform(-0.5, 0.5, (n, d)), dt)
        y = jnp.asarray(job.candidate_labels("binary", n), dt)
        cfg = train.TrainConfig(loss="logistic", lr=0.01, epochs=k, chunk=k)
        _, chunk = train.make_train_chunk(models.make_apply_fn(module), cfg)
        state, key = train.init_state(params, cfg), jax.random.PRNGKey(0)
        first_s, _ = _timed(lambda: chunk(state, x, y, key, length=k))
        best, times = best_of(lambda: chunk(state, x, y, key, length=k), args.repeats, warmup=0)
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


# ----------------------------------------------------------------------------
# End to end.
# ----------------------------------------------------------------------------
E2E_TIMING = (
  "compile_s",
  "attack_run_s",
  "victim_s",
  "oracle_s",
  "evaluation_s",
  "total_s",
  "restart_steps_per_s",
)


def e2e_command(workdir: str, preset: str = E2E_PRESET) -> list:
  """argv of the main job at config ``preset``, victim trained afresh (no cache)."""
  return [
    sys.executable,
    "-m",
    "experiments.reconstruct",
    f"--config={E2E_CONFIG}:{preset}",
    "--config.use_cache=False",
    f"--workdir={workdir}",
    "--overwrite",
  ]


def run_e2e(args, emit):
  if args.quick:
    emit({"bench": "e2e", "skipped": "--quick (the tiny preset takes ~20 s)"})
    return
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with tempfile.TemporaryDirectory() as tmp:
    work = os.path.join(tmp, "work")
    env = dict(
      os.environ,
      JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
      RECON_JAX_CACHE=os.path.join(tmp, "cache"),
      MPLBACKEND="Agg",
    )
    env.pop("XLA_FLAGS", None)
    cmd = e2e_command(work)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
      emit(
        {
          "bench": "e2e",
          "preset": E2E_PRESET,
          "error": proc.stderr.strip().splitlines()[-1:],
          "wall_s": wall,
        }
      )
      return
    with open(os.path.join(work, "metrics.json")) as f:
      timing = json.load(f)["timing"]
  emit(
    {
      "bench": "e2e",
      "preset": E2E_PRESET,
      "command": " ".join(cmd[1:5]),
      "wall_s": wall,
      **{k: timing.get(k) for k in E2E_TIMING},
      "startup_and_import_s": wall - (timing.get("total_s") or 0.0),
    }
  )


# ----------------------------------------------------------------------------
# Bilevel (Runkel et al.): implicit vs unrolled.
# ----------------------------------------------------------------------------
def bilevel_problem(net: str, d: int, n: int, width: int, seed: int = 0):
  """(apply_fn, activation name, target, x) of a small binary bilevel problem: theta* of an
  affine or one-hidden-layer net, n uniform candidates in the [0, 1] box."""
  import jax.numpy as jnp
  import numpy as np

  from recon_jax.studies import job
  from recon_jax.types import float_dtype
  from recon_jax.victims import loading, models

  dt = float_dtype()
  if net == "affine":
    module, act = models.build_model("affine", init="kaiming"), None
  else:
    module, act = models.build_model("one_hidden", widths=(width,), init="kaiming"), "softplus"
  theta_star = init_params(module, d, seed)
  target = loading.make_target(theta_star, job.candidate_labels("binary", n))
  x = jnp.asarray(np.random.default_rng(seed).uniform(0, 1, (n, d)), dt)
  return models.make_apply_fn(module), act, target, x


def run_bilevel(args, dtypes, emit):
  try:
    from recon_jax import implicit
    from recon_jax.attacks import bilevel
  except ImportError as e:
    emit({"bench": "bilevel", "skipped": f"recon_jax.attacks.bilevel / implicit missing ({e})"})
    return
  import jax
  import jax.numpy as jnp

  from recon_jax import losses, priors
  from recon_jax.victims import models

  wd = 1e-3
  if args.quick:
    d, n, width, iters, nets = 16, 6, 8, (2, 8), ("affine",)
  else:
    d, n, width, iters, nets = 64, 20, 256, (10, 30, 100, 300), ("affine", "one_hidden")
  # The attack's default inner solver (L-BFGS, tol 1e-7, <= 100 iterations); --quick: a
  # 5-step GD inner solve (L-BFGS takes seconds to compile).
  inner_kw = (
    dict(inner="gd", maxiter=5, tol=0.0, stepsize=0.5)
    if args.quick
    else dict(inner="lbfgs", maxiter=100, tol=1e-7, stepsize=0.0)
  )
  for dtype, net in itertools.product(dtypes, nets):
    with precision(dtype):
      apply_fn, act, target, x = bilevel_problem(net, d, n, width)
      y = target.labels.astype(x.dtype)
      energy = losses.energy(apply_fn, "logistic", wd, act and models.get_activation(act))
      n_params = sum(a.size for a in jax.tree_util.tree_leaves(target.params))

      # 1. The attack's outer step (attacks.bilevel, from theta*) against its inner solve
      #    alone: the difference is the Hessian solve, CG vs the quasi-Newton memory.
      for hsolve in ("cg",) if args.quick else ("cg", "lbfgs"):
        attack = bilevel.bilevel_attack(
          apply_fn,
          "logistic",
          wd=wd,
          act=act,
          inner=inner_kw["inner"],
          inner_maxiter=inner_kw["maxiter"],
          inner_tol=inner_kw["tol"],
          inner_stepsize=inner_kw["stepsize"],
          hessian_solve=hsolve,
        )
        solve = implicit.make_inner_solve(energy, hessian_solve=hsolve, **inner_kw)
        hp = {"lr_x": jnp.asarray(0.01, x.dtype)}
        state = attack.init(jax.random.PRNGKey(0), hp, target, x)
        fwd = jax.jit(lambda xx: solve(target.params, xx, y)).lower(x).compile()
        step = jax.jit(attack.step).lower(state, hp, target).compile()
        inner_fn, outer_fn = (lambda: fwd(x)), (lambda: step(state, hp, target))
        block(inner_fn())
        block(outer_fn())
        ti, to = [], []
        for _ in range(max(3, args.repeats)):  # interleaved: the same load for both
          ti.append(_timed(inner_fn)[0])
          to.append(_timed(outer_fn)[0])
        inner_s, outer_s = min(ti), min(to)
        _, metrics = outer_fn()
        emit(
          {
            "bench": "bilevel",
            "what": "outer_step",
            "net": net,
            "dtype": dtype,
            "d": d,
            "n": n,
            "width": width if net != "affine" else None,
            "params": n_params,
            "inner": inner_kw["inner"],
            "hessian_solve": hsolve,
            "inner_iters": float(metrics["inner_iters"]),
            "inner_grad_norm": float(metrics["inner_grad_norm"]),
            "inner_solve_s": inner_s,
            "outer_step_s": outer_s,
            "hessian_solve_s": max(outer_s - inner_s, 0.0),
            "outer_over_inner": outer_s / inner_s,
            "target_ratio": 3.0,
            "target_met": bool(outer_s / inner_s <= 3.0),
            "temp_bytes": getattr(step.memory_analysis(), "temp_size_in_bytes", None),
            "grad_finite": bool(jnp.isfinite(metrics["grad_x_norm"])),
          }
        )

      # 2. Memory and time vs inner iterations T (fixed-step GD, tol 0: exactly T steps) of
      #    the attack's outer loss: implicit differentiation (custom_root + CG) against
      #    reverse mode through the unrolled loop (the baseline; not in the library).
      lr_inner = 0.5 if net == "affine" else 0.1
      for T in iters:
        solve = implicit.make_inner_solve(
          energy, inner="gd", hessian_solve="cg", maxiter=T, tol=0.0, stepsize=lr_inner
        )

        def unrolled(theta0, xx, yy, T=T):
          def body(th, _):
            g = jax.grad(energy)(th, xx, yy)
            return jax.tree_util.tree_map(lambda a, b: a - lr_inner * b, th, g), None

          return jax.lax.scan(body, theta0, None, length=T)

        for kind, s in (("implicit", solve), ("unrolled", unrolled)):

          def outer(xx, s=s):
            theta, _ = s(target.params, xx, y)
            return losses.tree_sq_dist(theta, target.params) + priors.box_prior(
              xx, target.box_lo, target.box_hi
            )

          compiled = jax.jit(jax.value_and_grad(outer)).lower(x).compile()
          t, _ = best_of(lambda: compiled(x), args.repeats)
          emit(
            {
              "bench": "bilevel",
              "what": "memory_vs_iters",
              "net": net,
              "dtype": dtype,
              "d": d,
              "n": n,
              "params": n_params,
              "inner": "gd",
              "inner_iters": T,
              "diff": kind,
              "outer_step_s": t,
              "temp_bytes": getattr(compiled.memory_analysis(), "temp_size_in_bytes", None),
            }
          )
  _bilevel_summary(emit)


def _bilevel_summary(emit):
  """Flatness: temp bytes at the largest T over the smallest, per (net, dtype, diff)."""
  groups = {}
  for r in emit.records:
    if r.get("bench") == "bilevel" and r.get("what") == "memory_vs_iters":
      groups.setdefault((r["net"], r["dtype"], r["diff"]), []).append(r)
  for (net, dtype, diff), rs in groups.items():
    rs = sorted(rs, key=lambda r: r["inner_iters"])
    a, b = rs[0], rs[-1]
    if not a["temp_bytes"]:
      continue
    growth = b["temp_bytes"] / a["temp_bytes"]
    emit(
      {
        "bench": "bilevel",
        "what": "memory_growth",
        "net": net,
        "dtype": dtype,
        "diff": diff,
        "iters_from": a["inner_iters"],
        "iters_to": b["inner_iters"],
        "temp_bytes_from": a["temp_bytes"],
        "temp_bytes_to": b["temp_bytes"],
        "growth": growth,
        **({"flat_target_met": bool(growth <= 1.1)} if diff == "implicit" else {}),
      }
    )


# ----------------------------------------------------------------------------
# Memory per restart at paper scale.
# ----------------------------------------------------------------------------
def kkt_memory_analytic(d: int, h: int, m: int, bytes_per: int) -> dict:
  """Bytes per restart of the KKT step (SGD-momentum), counted by array.

  * state: x, momentum of x [m, d]; lambda and its momentum [m];
  * the KKT sum's parameter-shaped arrays: grad_theta of the weighted output
    and the residual theta* - grad (its cotangent reuses it): 2 P, with
    P = d h + h + h^2 + h (bias on the first layer only, one output);
  * activations kept for the double backward, [m, h] each: the two
    pre-activations, two ReLU outputs, two surrogate slopes sigmoid(alpha z),
    the two backward signals delta_1, delta_2, and ~6 cotangents of those in
    the outer backward: ~14 m h;
  * [m, d] transients: the x-gradient and a transposed copy of x for x^T delta_1.
  theta* itself is shared by all restarts (not counted).
  """
  p = d * h + h + h * h + h
  state = 2 * m * d + 2 * m
  kkt_sum = 2 * p
  acts = 14 * m * h
  xtmp = 2 * m * d
  total = state + kkt_sum + acts + xtmp
  return {
    "state": state * bytes_per,
    "kkt_sum_params": kkt_sum * bytes_per,
    "activations": acts * bytes_per,
    "x_transients": xtmp * bytes_per,
    "total": total * bytes_per,
    "theta_star_shared": p * bytes_per,
  }


def program_memory(compiled, compile_s: float) -> dict:
  """XLA's memory_analysis of a compiled program, and its estimated peak."""
  ma = compiled.memory_analysis()
  out = {
    f: int(getattr(ma, f))
    for f in (
      "temp_size_in_bytes",
      "argument_size_in_bytes",
      "output_size_in_bytes",
      "alias_size_in_bytes",
    )
    if hasattr(ma, f)
  }
  # Peak ~ arguments + temporaries + outputs not aliased to (donated) arguments.
  out["peak_bytes"] = (
    out.get("argument_size_in_bytes", 0)
    + out.get("temp_size_in_bytes", 0)
    + out.get("output_size_in_bytes", 0)
    - out.get("alias_size_in_bytes", 0)
  )
  out["compile_s"] = compile_s
  return out


def compiled_kkt_memory(d, h, m, dtype, num_restarts, batching="vmap", k=1):
  """Memory of the KKT chunk, compiled from shapes only (nothing allocated)."""
  import jax

  from recon_jax import loop

  with precision(dtype):
    attack, x_init, target = kkt_problem(d, h, m)
    target_s, hp = _shapes(target), _shapes(kkt_hparams(num_restarts))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.PRNGKey(0), num_restarts))
    init_fn, chunk_fn = loop.make_runner(attack, x_init, batching=batching)
    state = jax.eval_shape(init_fn, keys, hp, target_s)
    t = time.perf_counter()
    compiled = chunk_fn.lower(state, hp, target_s, num_steps=k).compile()
    return program_memory(compiled, time.perf_counter() - t)


def _max_restarts(fixed: float, per_restart: float) -> dict:
  return {
    f"max_R_{g}GB": int((g * 1e9 * USABLE_FRACTION - fixed) // per_restart) for g in DEVICE_GB
  }


def memory_plan(args):
  """((d, h, m), [(batching, [R])]): paper scale, or with --quick the KKT section's size,
  whose compiled chunks (a scan of a few steps: the same buffers) are measured again."""
  if args.quick:
    return QUICK_KKT_SIZES[0], (("vmap", (1, 2)),)
  return (PAPER["d"], PAPER["h"], PAPER["m"]), (("vmap", (1, 2, 4)), ("map", (1, 4)))


def run_memory(args, dtypes, emit, kept=None):
  import numpy as np

  (d, h, m), plan = memory_plan(args)
  scale = "quick (not paper scale)" if args.quick else "paper (Haim et al. App. B)"
  for dtype in dtypes:
    ana = kkt_memory_analytic(d, h, m, np.dtype(dtype).itemsize)
    emit(
      {
        "bench": "memory",
        "what": "analytic",
        "scale": scale,
        "dtype": dtype,
        "d": d,
        "h": h,
        "m": m,
        "bytes_per_restart": ana["total"],
        "parts": ana,
        **_max_restarts(ana["theta_star_shared"], ana["total"]),
        "usable_fraction": USABLE_FRACTION,
      }
    )
    for batching, rs in plan:
      pts = []
      for r in rs:
        prog = (kept or {}).get((d, h, m, dtype, r, batching))
        try:
          mem = (
            program_memory(prog.compiled, prog.compile_s)
            if prog
            else compiled_kkt_memory(d, h, m, dtype, r, batching)
          )
        except Exception as e:  # e.g. out of host memory while compiling
          emit(
            {
              "bench": "memory",
              "what": "compiled",
              "batching": batching,
              "dtype": dtype,
              "R": r,
              "error": f"{type(e).__name__}: {str(e)[:200]}",
            }
          )
          continue
        pts.append((r, mem["peak_bytes"]))
        emit(
          {
            "bench": "memory",
            "what": "compiled",
            "scale": scale,
            "batching": batching,
            "dtype": dtype,
            "d": d,
            "h": h,
            "m": m,
            "R": r,
            **mem,
          }
        )
      if len(pts) >= 2:
        (r0, b0), (r1, b1) = pts[0], pts[-1]
        per = (b1 - b0) / (r1 - r0)
        fixed = b0 - per * r0
        emit(
          {
            "bench": "memory",
            "what": "per_restart",
            "scale": scale,
            "batching": batching,
            "dtype": dtype,
            "d": d,
            "h": h,
            "m": m,
            "from_R": [r0, r1],
            "bytes_per_restart": per,
            "fixed_bytes": fixed,
            **_max_restarts(fixed, per),
            "usable_fraction": USABLE_FRACTION,
            "note": "XLA CPU buffer assignment; a GPU's fusion and allocator differ",
          }
        )


# ----------------------------------------------------------------------------
def reused_programs(args, dtypes) -> set:
  """Keys (d, h, m, dtype, R, batching) of the KKT programs that the breakdown and memory
  sections would compile again: the KKT section keeps them."""
  keys = set()
  if "breakdown" in args.only:
    sizes, batchings = breakdown_plan(args)
    keys |= {(*s, dt, 1, b) for dt in dtypes for s in sizes for b in batchings}
  if "memory" in args.only:
    size, plan = memory_plan(args)
    keys |= {(*size, dt, r, b) for dt in dtypes for b, rs in plan for r in rs}
  return keys


def summary(emit, ceiling: Ceiling):
  """Targets against the best ceiling seen in the whole run."""
  kkt = [r for r in emit.records if r.get("bench") == "kkt"]
  util = []
  for r in kkt:
    u = r["gflops"] / ceiling.get(r["dtype"])
    util.append(
      {
        "dtype": r["dtype"],
        "d": r["d"],
        "h": r["h"],
        "m": r["m"],
        "R": r["R"],
        "batching": r["batching"],
        "utilisation": u,
        "target": r["util_target"],
        "met": bool(u >= r["util_target"]),
        "utilisation_local": r["utilisation_local"],
        "met_local": r["util_target_met_local"],
        "utilisation_cpu": r.get("utilisation_cpu"),
        "met_cpu": bool((r.get("utilisation_cpu") or 0) >= r["util_target"]),
      }
    )
  bat = [r for r in emit.records if r.get("bench") == "batching" and r.get("R") == 8]
  emit(
    {
      "bench": "summary",
      "ceiling_gflops": dict(ceiling.best),
      "util_targets_met": sum(u["met"] for u in util),
      "util_targets_total": len(util),
      "util_targets_met_local": sum(u["met_local"] for u in util),
      "util_targets_met_cpu": sum(u["met_cpu"] for u in util),
      "util_targets_met_R1": sum(u["met"] for u in util if u["R"] == 1),
      "util_targets_total_R1": sum(1 for u in util if u["R"] == 1),
      "batching_targets_met": {
        f"{r['batching']}:{r['dtype']}:{r['d']}": r["target_met"] for r in bat
      },
      "utilisation": util,
    }
  )


def main(argv=None):
  args = parse_args(argv)
  t_start = time.perf_counter()
  import jax

  emit = Emitter(args.out)
  dtypes = ["float32"] + (["float64"] if args.x64 else [])
  dev = jax.devices()[0]
  emit(
    {
      "bench": "env",
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "jax": jax.__version__,
      "backend": jax.default_backend(),
      "device_kind": dev.device_kind,
      "devices": jax.device_count(),
      "cpu_count": os.cpu_count(),
      "cpu": platform.processor() or platform.machine(),
      "python": platform.python_version(),
      "quick": args.quick,
      "only": args.only,
      "dtypes": dtypes,
      "repeats": args.repeats,
      "timing": "best (min) of the timed runs after a warm-up call",
    }
  )
  ceiling = Ceiling()
  if {"matmul", "kkt", "batching", "breakdown"} & set(args.only):
    for dtype in dtypes:
      ceiling.measure(
        dtype,
        512 if args.quick else 3072,
        args.repeats + 2,
        emit if "matmul" in args.only else None,
      )
  sections = {}

  def section(name, fn, *a):
    t = time.perf_counter()
    fn(*a)
    sections[name] = time.perf_counter() - t

  kept = dict.fromkeys(reused_programs(args, dtypes))  # KKT programs compiled once
  if {"kkt", "batching"} & set(args.only):
    section("kkt", run_kkt, args, dtypes, ceiling, emit, kept)
  if "breakdown" in args.only:
    section("breakdown", run_breakdown, args, dtypes, ceiling, emit, kept)
  if "train" in args.only:
    section("train", run_train, args, dtypes, emit)
  if "bilevel" in args.only:
    # One dtype: float64 when enabled (implicit gradients want the inner tolerance
    # 1e-7 that float32 cannot reach reliably), else float32.
    section("bilevel", run_bilevel, args, dtypes[-1:], emit)
  if "memory" in args.only:
    section("memory", run_memory, args, dtypes, emit, kept)
  kept.clear()
  if "e2e" in args.only:
    section("e2e", run_e2e, args, emit)
  if "matmul" in args.only and not args.quick:  # a last look at the ceiling
    for dtype in dtypes:
      ceiling.measure(dtype, 3072, args.repeats, emit, label="ceiling_end")
  if {"kkt", "batching"} & set(args.only):
    summary(emit, ceiling)
  emit({"bench": "done", "wall_s": time.perf_counter() - t_start, "sections_s": sections})


if __name__ == "__main__":
  main()
