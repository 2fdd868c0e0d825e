r"""The KKT attack step against the machine's own matmul ceiling: one JSON line per measurement.

  python -m benchmarks.kkt_step                  # float32 and float64 (minutes)
  python -m benchmarks.kkt_step --quick          # smoke run (seconds)
  python -m benchmarks.kkt_step --only=matmul,kkt --no-x64 --out=benchmarks/RESULTS_cpu.json

Sections (``--only``, comma-separated; default all):

* ``matmul``    the ceiling: GFLOP/s of a large square matmul per dtype (measured first
  and again before each dtype block; utilisation uses the best seen).
* ``kkt``       the KKT attack step of the d-h-h-1 MLP (bias='first', binary) through the
  product code path, ``recon_jax.engine.loop.make_runner``'s compiled lax.scan chunk: steps/s,
  GFLOP/s (10 m d h + 14 m h^2 per restart-step) and utilisation, for R = 1, 8, 32
  restarts (vmap, ``--restarts``) and R = 1, 8 (lax.map, ``--map_restarts``).  The
  programs of one size are compiled first, then timed in interleaved rounds, each round
  one chunk of every program and one matmul (the "local" ceiling, under the same load).
  Utilisation is given against the best ceiling seen in the run, against the local one,
  and per CPU-second (``process_time``).
* ``breakdown`` where the step's time goes: every dot of the compiled step timed alone
  (same shapes and contracting dims) against the whole step.
* ``memory``    memory per restart at paper scale (m=1000, 3072-1000-1000-1): analytic and
  from XLA's ``memory_analysis()`` of the chunk compiled from shapes only (nothing
  allocated), and the largest R that fits on an 80 GB and a 141 GB device.
"""

from __future__ import annotations

import itertools
import re
import time

from benchmarks import common, compiled
from benchmarks.common import block, precision, timed

SECTIONS = ("matmul", "kkt", "breakdown", "memory")
PAPER = dict(d=3072, h=1000, m=1000)
TARGET_UTIL_BIG = 0.85  # (3072, 1000, 200) float32
TARGET_UTIL = 0.80  # every other size and dtype
DEVICE_GB = (80, 141)
USABLE_FRACTION = 0.95  # of device memory (XLA_PYTHON_CLIENT_MEM_FRACTION=.95)


def parse_args(argv=None):
  p = common.parser(__doc__)
  p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
  p.add_argument("--restarts", default=None, help="R values for vmap (default 1,8,32)")
  p.add_argument("--map_restarts", default=None, help="R values for lax.map (default 1,8)")
  p.add_argument("--chunk_s", type=float, default=None, help="target seconds per timed chunk")
  args = common.parse(p, argv)
  args.only = [s.strip() for s in args.only.split(",") if s.strip()]
  if set(args.only) - set(SECTIONS):
    p.error(f"--only: unknown {sorted(set(args.only) - set(SECTIONS))}; choose from {SECTIONS}")
  args.restarts = common.int_list(args.restarts or ("1,2" if args.quick else "1,8,32"))
  # --quick: vmap only (every compile costs seconds)
  args.map_restarts = common.int_list(args.map_restarts or ("" if args.quick else "1,8"))
  args.chunk_s = args.chunk_s or (0.05 if args.quick else 0.3)
  args.sizes = common.QUICK_KKT_SIZES if args.quick else common.KKT_SIZES
  return args


def util_target(d, h, m, dtype):
  return TARGET_UTIL_BIG if (d, h, m, dtype) == (3072, 1000, 200, "float32") else TARGET_UTIL


def kkt_record(prog, ceiling, local_s, local_cpu_s, mm_flops) -> dict:
  """The KKT record of a timed program: throughput, and utilisation three ways."""
  (d, h, m), r = prog.size, prog.num_restarts
  t = prog.timing()
  gflops = r * prog.flops / t["step_s"] / 1e9
  per_cpu = r * prog.flops / t["cpu_s_per_step"] / 1e9
  local, mm_per_cpu_s = mm_flops / local_s / 1e9, mm_flops / local_cpu_s / 1e9
  tgt = util_target(d, h, m, prog.dtype)
  return {
    "bench": "kkt",
    "dtype": prog.dtype,
    "d": d,
    "h": h,
    "m": m,
    **t,
    "gflop_per_restart_step": prog.flops / 1e9,
    "gflops": gflops,
    "ceiling_gflops": ceiling.get(prog.dtype),
    "utilisation": gflops / ceiling.get(prog.dtype),
    "gflop_per_cpu_s": per_cpu,
    "ceiling_local_gflops": local,
    "utilisation_local": gflops / local,
    "ceiling_gflop_per_cpu_s": mm_per_cpu_s,
    "utilisation_cpu": per_cpu / mm_per_cpu_s,
    "util_target": tgt,
    "util_target_met": bool(gflops / ceiling.get(prog.dtype) >= tgt),
    "util_target_met_local": bool(gflops / local >= tgt),
  }


def run_kkt(args, ceiling, emit, kept):
  """Every (batching, R) program of one size compiled, then timed in interleaved rounds.
  ``kept``: {(d, h, m, dtype, R, batching): None} of the programs a later section uses
  again (:func:`reused_programs`); the compiled ones are stored there."""
  plan = [("vmap", r) for r in args.restarts] + [("map", r) for r in args.map_restarts]
  for dtype in args.dtypes:
    ceiling.measure(dtype, 512 if args.quick else 2048, args.repeats + 2, emit, "ceiling_recheck")
    mm, mm_flops = common.matmul_fn(dtype, 256 if args.quick else 2048)
    for d, h, m in args.sizes:
      progs = {
        (b, r): common.kkt_program(d, h, m, dtype, r, b, ceiling, args.chunk_s) for b, r in plan
      }
      rounds = args.repeats
      if any(p.long for p in progs.values()):
        rounds = max(1, min(rounds, 2))
      local_s, local_cpu_s = common.time_rounds(progs.values(), rounds, mm)
      ceiling.best[dtype] = max(ceiling.best.get(dtype, 0.0), mm_flops / local_s / 1e9)
      for (b, r), p in progs.items():
        emit(kkt_record(p, ceiling, local_s, local_cpu_s, mm_flops))
        if (d, h, m, dtype, r, b) in kept:
          kept[(d, h, m, dtype, r, b)] = p


# ----------------------------------------------------------------------------
# Breakdown: every dot of the compiled step timed alone.
# ----------------------------------------------------------------------------
def breakdown_plan(args):
  """(sizes, batchings) of the breakdown, at R=1."""
  if args.quick:
    return common.QUICK_KKT_SIZES, ("vmap",)
  return ((3072, 1000, 200), (64, 1000, 100)), ("vmap", "map")


def run_breakdown(args, ceiling, emit, kept):
  """The R=1 step and every dot of its optimised HLO alone, interleaved by rounds (the
  KKT section's programs, where it kept them, rather than compiling them twice)."""
  sizes, batchings = breakdown_plan(args)
  for dtype, (d, h, m), batching in itertools.product(args.dtypes, sizes, batchings):
    prog = kept.get((d, h, m, dtype, 1, batching))
    if prog is None:
      prog = common.kkt_program(d, h, m, dtype, 1, batching, ceiling, args.chunk_s)
    prog.times, prog.cpu_times = [], []
    cost = prog.compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    hlo = prog.compiled.as_text()
    with precision(dtype) as dt:
      dots = [compiled.Dot(lhs, rhs, dn, dt) for lhs, rhs, dn in compiled.hlo_dots(hlo)]
    mm, mm_flops = common.matmul_fn(dtype, 256 if args.quick else 2048)
    prog.call(timed=False)
    for dot in dots:
      block(dot())
    local, local_cpu = [], []
    for _ in range(max(3, args.repeats)):
      wall, cpu = timed(mm)
      local.append(wall)
      local_cpu.append(cpu)
      prog.call()
      for dot in dots:
        wall, cpu = timed(dot)
        dot.times.append(wall)
        dot.cpu.append(cpu)
    local_gflops, mm_per_cpu_s = mm_flops / min(local) / 1e9, mm_flops / min(local_cpu)
    step_flops = common.kkt_flops(d, h, m)
    step_s, step_cpu = min(prog.times) / prog.k, min(prog.cpu_times) / prog.k
    dots_s, dots_cpu = sum(min(x.times) for x in dots), sum(min(x.cpu) for x in dots)
    dot_flops = sum(x.flops for x in dots)
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
        "n_dots": len(dots),
        "dots_gflop": dot_flops / 1e9,
        "dots_alone_s": dots_s,
        "dots_alone_gflops": dot_flops / dots_s / 1e9,
        "step_gflops": step_flops / step_s / 1e9,
        "ceiling_local_gflops": local_gflops,
        "dots_alone_utilisation_local": dot_flops / dots_s / 1e9 / local_gflops,
        "step_utilisation_local": step_flops / step_s / 1e9 / local_gflops,
        "non_dot_s": step_s - dots_s,
        "non_dot_fraction": (step_s - dots_s) / step_s,
        "step_cpu_s": step_cpu,
        "dots_alone_cpu_s": dots_cpu,
        "non_dot_fraction_cpu": (step_cpu - dots_cpu) / step_cpu,
        "step_utilisation_cpu": step_flops / step_cpu / mm_per_cpu_s,
        "dots_alone_utilisation_cpu": dot_flops / dots_cpu / mm_per_cpu_s,
        "dots": sorted((x.row() for x in dots), key=lambda r: -r["s"])[:12],
      }
    )


# ----------------------------------------------------------------------------
# Memory per restart at paper scale.
# ----------------------------------------------------------------------------
def kkt_memory_analytic(d: int, h: int, m: int, bytes_per: int) -> dict:
  """Bytes per restart of the KKT step (SGD-momentum), counted by array: the state (x and
  its momentum [m, d], lambda and its momentum [m]); the KKT sum's parameter-shaped arrays,
  grad_theta of the weighted output and the residual: 2 P with P = d h + h + h^2 + h; the
  activations kept for the double backward, ~14 m h (two pre-activations, two ReLU outputs,
  two surrogate slopes, two backward signals, ~6 cotangents of those); [m, d] transients,
  the x-gradient and a transposed x.  theta* is shared by all restarts (not counted)."""
  p = d * h + h + h * h + h
  parts = {
    "state": 2 * m * d + 2 * m,
    "kkt_sum_params": 2 * p,
    "activations": 14 * m * h,
    "x_transients": 2 * m * d,
  }
  parts["total"] = sum(parts.values())
  parts["theta_star_shared"] = p
  return {k: v * bytes_per for k, v in parts.items()}


def compiled_kkt_memory(d, h, m, dtype, num_restarts, batching="vmap", k=1):
  """Memory of the KKT chunk, compiled from shapes only (nothing allocated)."""
  import jax

  from recon_jax.engine import loop

  with precision(dtype):
    attack, x_init, target = common.kkt_problem(d, h, m)
    shapes = lambda tree: jax.tree_util.tree_map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree
    )
    target_s, hp = shapes(target), shapes(common.attack_hparams(num_restarts))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.PRNGKey(0), num_restarts))
    init_fn, chunk_fn = loop.make_runner(attack, x_init, batching=batching)
    state = jax.eval_shape(init_fn, keys, hp, target_s)
    t = time.perf_counter()
    program = chunk_fn.lower(state, hp, target_s, num_steps=k).compile()
    return compiled.program_memory(program, time.perf_counter() - t)


def _max_restarts(fixed: float, per_restart: float) -> dict:
  return {
    f"max_R_{g}GB": int((g * 1e9 * USABLE_FRACTION - fixed) // per_restart) for g in DEVICE_GB
  }


def memory_plan(args):
  """((d, h, m), [(batching, [R])]): paper scale, or with --quick the KKT section's size,
  whose compiled chunks (a scan of a few steps: the same buffers) are measured again."""
  if args.quick:
    return common.QUICK_KKT_SIZES[0], (("vmap", (1, 2)),)
  return (PAPER["d"], PAPER["h"], PAPER["m"]), (("vmap", (1, 2, 4)), ("map", (1, 4)))


def run_memory(args, emit, kept):
  import numpy as np

  (d, h, m), plan = memory_plan(args)
  scale = "quick (not paper scale)" if args.quick else "paper (Haim et al. App. B)"
  for dtype in args.dtypes:
    base = {"bench": "memory", "scale": scale, "dtype": dtype, "d": d, "h": h, "m": m}
    ana = kkt_memory_analytic(d, h, m, np.dtype(dtype).itemsize)
    emit(
      {
        **base,
        "what": "analytic",
        "bytes_per_restart": ana["total"],
        "parts": ana,
        **_max_restarts(ana["theta_star_shared"], ana["total"]),
        "usable_fraction": USABLE_FRACTION,
      }
    )
    for batching, rs in plan:
      pts = []
      for r in rs:
        prog = kept.get((d, h, m, dtype, r, batching))
        try:
          mem = (
            compiled.program_memory(prog.compiled, prog.compile_s)
            if prog
            else compiled_kkt_memory(d, h, m, dtype, r, batching)
          )
        except Exception as e:  # e.g. out of host memory while compiling
          err = f"{type(e).__name__}: {str(e)[:200]}"
          emit({**base, "what": "compiled", "batching": batching, "R": r, "error": err})
          continue
        pts.append((r, mem["peak_bytes"]))
        emit({**base, "what": "compiled", "batching": batching, "R": r, **mem})
      if len(pts) >= 2:
        (r0, b0), (r1, b1) = pts[0], pts[-1]
        per = (b1 - b0) / (r1 - r0)
        emit(
          {
            **base,
            "what": "per_restart",
            "batching": batching,
            "from_R": [r0, r1],
            "bytes_per_restart": per,
            "fixed_bytes": b0 - per * r0,
            **_max_restarts(b0 - per * r0, per),
            "usable_fraction": USABLE_FRACTION,
            "note": "XLA CPU buffer assignment; a GPU's fusion and allocator differ",
          }
        )


# ----------------------------------------------------------------------------
def reused_programs(args) -> set:
  """Keys (d, h, m, dtype, R, batching) of the KKT programs that the breakdown and memory
  sections would compile again: the KKT section keeps them."""
  keys = set()
  if "breakdown" in args.only:
    sizes, batchings = breakdown_plan(args)
    keys |= {(*s, dt, 1, b) for dt in args.dtypes for s in sizes for b in batchings}
  if "memory" in args.only:
    size, plan = memory_plan(args)
    keys |= {(*size, dt, r, b) for dt in args.dtypes for b, rs in plan for r in rs}
  return keys


def summary(emit, ceiling):
  """Utilisation targets against the best ceiling seen in the whole run."""
  util = []
  for r in (r for r in emit.records if r.get("bench") == "kkt"):
    u = r["gflops"] / ceiling.get(r["dtype"])
    util.append(
      {
        **{k: r[k] for k in ("dtype", "d", "h", "m", "R", "batching")},
        "utilisation": u,
        "target": r["util_target"],
        "met": bool(u >= r["util_target"]),
        "utilisation_local": r["utilisation_local"],
        "met_local": r["util_target_met_local"],
        "utilisation_cpu": r["utilisation_cpu"],
        "met_cpu": bool(r["utilisation_cpu"] >= r["util_target"]),
      }
    )
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
      "utilisation": util,
    }
  )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("kkt_step", args, only=args.only)
  ceiling = common.Ceiling()
  if {"matmul", "kkt", "breakdown"} & set(args.only):
    for dtype in args.dtypes:
      n = 512 if args.quick else 3072
      ceiling.measure(dtype, n, args.repeats + 2, emit if "matmul" in args.only else None)
  kept = dict.fromkeys(reused_programs(args))  # KKT programs compiled once
  if "kkt" in args.only:
    with emit.section("kkt"):
      run_kkt(args, ceiling, emit, kept)
  if "breakdown" in args.only:
    with emit.section("breakdown"):
      run_breakdown(args, ceiling, emit, kept)
  if "memory" in args.only:
    with emit.section("memory"):
      run_memory(args, emit, kept)
  kept.clear()
  if "matmul" in args.only and not args.quick:  # a last look at the ceiling
    for dtype in args.dtypes:
      ceiling.measure(dtype, 3072, args.repeats, emit, label="ceiling_end")
  if "kkt" in args.only:
    summary(emit, ceiling)
  emit.done()


if __name__ == "__main__":
  main()
