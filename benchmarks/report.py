r"""Markdown tables from the benchmark scripts' JSON lines (for benchmarks/README.md).

  python -m benchmarks.report benchmarks/RESULTS_cpu.json [more.json ...]

Several files (or several runs appended to one file) are merged measurement by
measurement, keeping the best (fastest) of each: on a shared machine the least
disturbed run is the best estimate.  Utilisation is recomputed against the best
ceiling of all runs ("vs best") and, per measurement, against the matmul ceiling
timed right before it under the same load ("vs local").
"""

from __future__ import annotations

from collections import defaultdict
import json
import sys

E2E_PARTS = ("victim_s", "oracle_s", "compile_s", "attack_run_s", "evaluation_s")


def load(paths):
  recs = []
  for p in paths:
    with open(p) as f:
      recs += [json.loads(line) for line in f if line.strip()]
  return recs


def best_by(recs, key, better):
  out = {}
  for r in recs:
    k = key(r)
    if k not in out or better(r, out[k]):
      out[k] = r
  return out


def fmt(v, nd=3):
  if v is None:
    return "–"
  if isinstance(v, bool):
    return "yes" if v else "no"
  if isinstance(v, float):
    if abs(v) >= 100:
      return f"{v:.0f}"
    if abs(v) >= 10:
      return f"{v:.1f}"
    return f"{v:.{nd}g}"
  return str(v)


def _met(r, tgt):
  if not tgt:
    return None
  loc = r.get("utilisation_local")
  cpu = r.get("utilisation_cpu")
  return "/".join(fmt(v >= tgt) if v is not None else "–" for v in (loc, cpu))


def table(header, rows):
  """A markdown table; ``header``: a list, or one string of names separated by ' | '."""
  header = header.split(" | ") if isinstance(header, str) else header
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
  return "\n".join(lines)


def report(recs) -> str:
  """The markdown of the records ``recs``: the machine, the ceiling, then one table per
  measurement found among them."""
  by = defaultdict(list)
  for r in recs:
    by[r["bench"]].append(r)
  ceil = ceilings(by)
  out = machine_line(by.get("env", []))
  if ceil:
    out.append(
      "\n**Ceiling** (square matmul, best seen): "
      + ", ".join(f"{d} {v:.0f} GFLOP/s" for d, v in sorted(ceil.items()))
    )
  out += kkt_table(by.get("kkt", []), ceil)
  out += batching_table(by.get("batching", []))
  out += breakdown_table(by.get("breakdown", []))
  out += train_table(by.get("train", []))
  out += e2e_table(by.get("e2e", []))
  out += bilevel_tables(by.get("bilevel", []))
  out += memory_table(by.get("memory", []))
  out += span_table(by.get("span", []))
  return "\n".join(out) + "\n"


def machine_line(envs) -> list:
  """The machine and the runs' dates, from the first ``env`` record ([]: none)."""
  if not envs:
    return []
  e = envs[0]
  return [
    f"Machine: {e.get('cpu_count')}-core {e.get('device_kind')} "
    f"({e.get('backend')}), jax {e.get('jax')}; runs: "
    + ", ".join(x["date"] for x in envs)
    + ". Timings: best (min) of the timed "
    "runs; the machine was shared, so the figures are lower bounds."
  ]


def ceilings(by) -> dict:
  """The best matmul GFLOP/s per dtype over every run, local ones included."""
  ceil = defaultdict(float)  # every matmul timed in the run, local ones included
  for r in by.get("matmul", []):
    ceil[r["dtype"]] = max(ceil[r["dtype"]], r["gflops"], r.get("best_gflops_so_far") or 0)
  for r in by.get("kkt", []) + by.get("breakdown", []):
    ceil[r["dtype"]] = max(ceil[r["dtype"]], r.get("ceiling_local_gflops") or 0)
  for r in by.get("summary", []):
    for dt, v in r.get("ceiling_gflops", {}).items():
      ceil[dt] = max(ceil[dt], v)
  return ceil


def kkt_table(recs, ceil) -> list:
  """The KKT step: the fastest run of each configuration, its utilisation against the
  best ceiling, the local one and per CPU-second (the best of any run)."""
  key = lambda r: (r["dtype"], r["d"], r["h"], r["m"], r["R"], r["batching"])  # noqa: E731
  kkt = best_by(recs, key, lambda a, b: a["gflops"] > b["gflops"])
  cpu_best = defaultdict(float)
  for r in recs:
    cpu_best[key(r)] = max(cpu_best[key(r)], r.get("utilisation_cpu") or 0.0)
  for k, r in kkt.items():
    if cpu_best[k] and not r.get("utilisation_cpu"):
      kkt[k] = dict(r, utilisation_cpu=cpu_best[k])
  if not kkt:
    return []
  rows = []
  for k in sorted(kkt, key=lambda k: (k[0], k[1], k[5] != "vmap", k[4])):
    r = kkt[k]
    u = r["gflops"] / ceil[r["dtype"]] if ceil[r["dtype"]] else None
    tgt = r.get("util_target")
    rows.append(
      [
        r["dtype"],
        f"({r['d']}, {r['h']}, {r['m']})",
        r["batching"],
        r["R"],
        r["steps_per_s"],
        r["restart_steps_per_s"],
        r["gflops"],
        u,
        r.get("utilisation_local"),
        r.get("utilisation_cpu"),
        tgt,
        _met(r, tgt),
        r.get("compile_s"),
      ]
    )
  return [
    "\n**KKT step** (d-h-h-1 MLP, bias='first'; FLOPs 10mdh + 14mh^2 per "
    "restart-step; compiled chunk of loop.make_runner)\n",
    table(
      "dtype | (d, h, m) | batching | R | steps/s | restart-steps/s | GFLOP/s | util vs best"
      " | util vs local | util (CPU time) | target | met (local / CPU) | compile s",
      rows,
    ),
  ]


def batching_table(recs) -> list:
  """Restart batching: each run's ratio (one interleaved block each) and their mean."""
  bat = defaultdict(list)  # per run: ratios come from one interleaved block each
  for r in recs:
    bat[(r["dtype"], r["d"], r["h"], r["m"], r["batching"], r["R"])].append(r["ratio"])
  if not bat:
    return []
  rows = []
  for k in sorted(bat, key=lambda k: (k[0], k[1], k[4], k[5])):
    v = bat[k]
    mean = sum(v) / len(v)
    rows.append(
      [
        k[0],
        f"({k[1]}, {k[2]}, {k[3]})",
        k[4],
        k[5],
        mean,
        " / ".join(fmt(x) for x in v),
        (mean >= 0.9) if k[5] == 8 else None,
      ]
    )
  return [
    "\n**Restart batching** (ratio = restart-steps/s at R / steps/s at R=1, both "
    "timed in the same interleaved rounds; 1.0 = batching costs nothing; target "
    ">= 0.9 at R=8 on CPU)\n",
    table(["dtype", "(d, h, m)", "batching", "R", "ratio (mean)", "per run", "target met"], rows),
  ]


def breakdown_table(recs) -> list:
  """Where a KKT step's time goes: the fastest run of each configuration, runs with CPU
  times first."""
  bd = best_by(
    recs,
    lambda r: (r["dtype"], r["d"], r.get("batching")),
    lambda a, b: (
      (a.get("step_cpu_s") is not None, -a["step_s"])
      > (b.get("step_cpu_s") is not None, -b["step_s"])
    ),
  )  # prefer runs with CPU times
  if not bd:
    return []
  rows = [
    [
      r["dtype"],
      f"({r['d']}, {r['h']}, {r['m']})",
      r.get("batching"),
      r["step_s"],
      r["dots_alone_s"],
      r["non_dot_fraction"],
      r.get("non_dot_fraction_cpu"),
      r.get("dots_alone_utilisation_cpu"),
      r.get("step_utilisation_cpu"),
      r.get("hlo_transposes"),
      r["xla_gflop"],
      r["formula_gflop"],
    ]
    for r in bd.values()
  ]
  return [
    "\n**Where a KKT step's time goes** (R=1; every dot of the compiled step timed alone)\n",
    table(
      "dtype | (d, h, m) | batching | step s | dots alone s | non-dot share"
      " | non-dot share (CPU) | dots util (CPU) | step util (CPU) | transposes | XLA GFLOP"
      " | formula GFLOP",
      rows,
    ),
  ]


def train_table(recs) -> list:
  """Victim training: the fastest run of each size and dtype."""
  tr = best_by(
    recs, lambda r: (r["dtype"], r["name"]), lambda a, b: a["epochs_per_s"] > b["epochs_per_s"]
  )
  if not tr:
    return []
  rows = [
    [
      r["name"],
      f"{r['d']}-{'-'.join(map(str, r['widths']))}-1",
      r["n"],
      r["dtype"],
      r["epochs_per_s"],
      r["gflops"],
    ]
    for r in tr.values()
  ]
  return [
    "\n**Victim training** (full-batch GD, recon_jax.victims.descent)\n",
    table(["size", "net", "n", "dtype", "epochs/s", "GFLOP/s"], rows),
  ]


def e2e_table(recs) -> list:
  """The main job end to end: the fastest run, part by part."""
  e2e = [r for r in recs if "wall_s" in r]
  if not e2e:
    return []
  r = min(e2e, key=lambda r: r["wall_s"])
  cmd = r.get("command") or "-m experiments.reconstruct"
  header = ["wall s", "startup+import s", "victim s", "oracle s", "compile s", "attack run s"]
  return [
    f"\n**End to end** (`python {cmd}`)\n",
    table(
      header + ["evaluation s"],
      [[r.get(k) for k in ("wall_s", "startup_and_import_s", *E2E_PARTS)]],
    ),
  ]


def bilevel_tables(bl) -> list:
  """The bilevel attack: its outer step against its inner solve, and its memory against
  the inner iterations (implicit beside unrolled)."""
  out = []
  steps = best_by(
    [r for r in bl if r.get("what") == "outer_step"],
    lambda r: (r["net"], r["dtype"], r["hessian_solve"]),
    lambda a, b: a["outer_step_s"] < b["outer_step_s"],
  )
  if steps:
    names = ("net", "dtype", "params", "inner", "hessian_solve", "inner_iters")
    names += ("inner_solve_s", "hessian_solve_s", "outer_step_s", "outer_over_inner")
    rows = [[r[k] for k in names + ("target_met",)] for r in steps.values()]
    out.append(
      "\n**Bilevel outer step** (digits size; inner solve from theta*, implicit "
      "differentiation; target outer <= 3x inner)\n"
    )
    out.append(
      table(
        "net | dtype | params | inner | Hessian solve | inner iters | inner s | Hessian s"
        " | outer s | outer/inner | met",
        rows,
      )
    )
  mem = best_by(
    [r for r in bl if r.get("what") == "memory_vs_iters"],
    lambda r: (r["net"], r["dtype"], r["inner_iters"], r["diff"]),
    lambda a, b: a["outer_step_s"] < b["outer_step_s"],
  )
  if mem:
    rows = []
    for net, dt, t in sorted({(k[0], k[1], k[2]) for k in mem}):
      i, u = mem.get((net, dt, t, "implicit")), mem.get((net, dt, t, "unrolled"))
      rows.append(
        [
          net,
          dt,
          t,
          i and i["temp_bytes"],
          u and u["temp_bytes"],
          i and i["outer_step_s"],
          u and u["outer_step_s"],
        ]
      )
    out.append(
      "\n**Bilevel memory vs inner iterations** (GD inner solve of T steps; XLA temp "
      "bytes of the compiled outer step)\n"
    )
    out.append(
      table(
        ["net", "dtype", "T", "implicit temp B", "unrolled temp B", "implicit s", "unrolled s"],
        rows,
      )
    )
  return out


def memory_table(mm) -> list:
  """Memory per restart, analytic and XLA's (compile-time figures: identical per run)."""
  per = list(
    best_by(
      [r for r in mm if r.get("what") in ("per_restart", "analytic")],
      lambda r: (r["what"], r.get("batching"), r["dtype"], r["d"], r["m"]),
      lambda a, b: False,
    ).values()
  )  # compile-time figures: identical per run
  if not per:
    return []
  rows = [
    [
      r["what"],
      r.get("batching", "–"),
      r["dtype"],
      f"m={r['m']}, {r['d']}-{r['h']}-{r['h']}-1",
      r["bytes_per_restart"] / 1e6,
      r.get("max_R_80GB"),
      r.get("max_R_141GB"),
    ]
    for r in per
  ]
  return [
    "\n**Memory per restart** (KKT step, SGD-momentum; max R at 95% of the device's memory)\n",
    table(
      ["source", "batching", "dtype", "size", "MB / restart", "max R 80 GB", "max R 141 GB"], rows
    ),
  ]


def span_table(recs) -> list:
  """The span script's speedups, one row per machine and configuration: the best
  restart-steps/s of each path over the runs, and each run's own speedup (both paths timed
  in the same interleaved rounds)."""
  runs = defaultdict(list)
  for r in recs:
    if r.get("what") == "speedup":
      key = (r["device_kind"], r["cpu_count"], r["dtype"], r["d"], r["h"], r["n"], r["m"])
      runs[key + (r["R"], r["batching"])].append(r)
  if not runs:
    return []
  rows = []
  for k in sorted(runs):
    rs = runs[k]
    speedups = [r["speedup"] for r in rs]
    rows.append(
      [
        f"{k[0]} ({k[1]} CPUs)",
        k[2],
        f"{k[3]}-{k[4]}-1",
        f"n={k[5]}, m={k[6]}",
        k[7],
        k[8],
        rs[0]["span_dim"],
        max(r["pixels_restart_steps_per_s"] for r in rs),
        max(r["coefficients_restart_steps_per_s"] for r in rs),
        sum(speedups) / len(speedups),
        " / ".join(fmt(x) for x in speedups),
      ]
    )
  header = ["device", "dtype", "net", "images", "R", "batching", "span k"]
  header += ["pixels restart-steps/s", "coefficients restart-steps/s", "speedup (mean)", "per run"]
  return [
    "\n**Span vs pixels** (KKT step, Adam, on a model fine-tuned from known weights; "
    "speedup = coefficients over pixels, same batching, same run)\n",
    table(header, rows),
  ]


if __name__ == "__main__":
  print(report(load(sys.argv[1:])))
