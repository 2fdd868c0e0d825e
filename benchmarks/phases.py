r"""Where the main job's time goes, phase by phase, at n = 20, 100 and 500, against the
estimate it said before the attack.

  python -m benchmarks.phases                     # n = 20, 100, 500 (tens of minutes)
  python -m benchmarks.phases --sizes=20          # the finetune Quickstart alone
  python -m benchmarks.phases --limit_s=900       # stop a run after 15 min, extrapolate
  python -m benchmarks.phases --quick             # the tiny preset (seconds)

Each size is one draw of ``python -m experiments.reconstruct`` with the ``finetune`` preset
(the cone, handing over to the KKT search in the change's span where it reads short) as a
subprocess, one after the other: 10 + 10 LFW faces (the Quickstart), 50 + 50 faces, and
250 + 250 MNIST digits of ``mnist5k`` on the same 784-2048-1 recipe.  Victims go to the
shared cache (``RECON_JAX_CACHE``): a size whose victim is not there is run twice, once
training it and once loading it, so the record has both.  The seconds come from the job's
own ``metrics.json`` (``timing``: victim, regime, estimate, attack, hand-over, scoring
parts, files); a run stopped at ``--limit_s`` (SIGTERM) is read from its log's timestamps
instead, the phase it was in timed up to the stop and said to be cut short, and its
facet search extrapolated from the rate of its starts to the most it makes.  The search's
cost per step is compared to its FLOP count (:func:`recon_jax.job.estimate.search_flops`):
achieved GFLOP/s.  Each record carries the load average (1 min) before and after.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks import common

CONFIG = "experiments/configs/reconstruct.py"
# n -> (preset, settings): the finetune recipe on 10 + 10 and 50 + 50 faces, 250 + 250 digits
SIZES = {
  20: ("finetune", ()),
  100: ("finetune", ("--config.victim.n_per_class=50",)),
  500: ("finetune", ("--config.victim.dataset=mnist5k", "--config.victim.n_per_class=250")),
}
# the audit of a user's 784-1024-1 model without theta_0 (Haim et al.'s attack on theta*
# alone, the default search: 16 restarts x 4,000 steps of m = 2n candidates in pixels, the
# attacker's own scores), as the main job: the finetune recipe at 1,024 units on 50 + 50
# digits, the steps cut to --audit_steps (the search's time is linear in them)
AUDIT = (
  "finetune",
  (
    "--config.victim.dataset=mnist5k",
    "--config.victim.n_per_class=50",
    "--config.victim.widths=1024",
    "--config.threat.known_init=False",
    "--config.attack=kkt",
    "--config.linearize=1.0",
  ),
)
QUICK = {8: ("tiny", ())}
# the phases of metrics.json's timing a record gives, in the job's order
PHASES = (
  "victim_s",
  "target_s",
  "regime_s",
  "estimating_s",
  "attack_s",
  "compile_s",
  "attack_run_s",
  "handover_s",
  "reread_s",
  "identifiability_s",
  "evaluation_s",
  "membership_s",
  "identification_s",
  "span_ceiling_s",
  "files_s",
)
# log lines that open a phase (absl's timestamp, then the message): read when a run is cut short
MARKS = (
  ("victim_s", re.compile(r"training the victim|loading the victim")),
  ("regime_s", re.compile(r"\] regime: ")),
  ("attack_s", re.compile(r"\] estimate: ")),
  ("handover_s", re.compile(r"\] hand-over: ")),
  ("scoring_s", re.compile(r"identifiability: the training set and")),
  ("evaluation_s", re.compile(r"\] evaluating \d+ candidates")),
  ("membership_s", re.compile(r"\] membership: ")),
  ("identification_s", re.compile(r"\] the attacker's own scores of")),
)
STAMP = re.compile(r"^[IWE](\d{4}) (\d\d):(\d\d):(\d\d\.\d+)")
STARTS = re.compile(r"(\d+) facets after (\d+) starts: (\d+) s in it")


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--sizes", default="20,100,500", help="n of the runs (20, 100, 500)")
  p.add_argument("--limit_s", type=float, default=1800.0, help="stop a run after this long")
  p.add_argument("--keep", default="", help="keep each run's workdir and log under this folder")
  p.add_argument("--draw", type=int, default=0, help="the data draw (victim.data_seed)")
  p.add_argument("--audit", action="store_true", help="also the audit without theta_0 (n = 100)")
  p.add_argument("--audit_steps", type=int, default=500, help="its search's steps (of 4,000)")
  args = common.parse(p, argv)
  args.dtypes = []
  return args


def load() -> float:
  return os.getloadavg()[0]


def stamp(line: str):
  """Seconds since midnight of an absl log line (None: not one)."""
  m = STAMP.match(line)
  return None if m is None else int(m[2]) * 3600 + int(m[3]) * 60 + float(m[4])


def from_log(lines: list, stopped_at: float) -> dict:
  """``{phase: seconds}`` from the log's phase lines (:data:`MARKS`), the last phase timed to
  ``stopped_at`` (seconds since midnight), and ``cut_in``: the phase the run was in."""
  opened = []
  for line in lines:
    t = stamp(line)
    if t is None:
      continue
    for name, pattern in MARKS:
      if pattern.search(line) and name not in (o[0] for o in opened):
        opened.append((name, t))
  out = {}
  for (name, t), nxt in zip(opened, opened[1:] + [("end", stopped_at)]):
    out[name] = nxt[1] - t
  out["cut_in"] = opened[-1][0] if opened else None
  return out


def extrapolate(lines: list, starts_cap: int = 100) -> dict:
  """The facet search's rate from its last progress line (``N facets after M starts: T s``):
  seconds per start, and the seconds its ``starts_cap`` starts would take at that rate."""
  last = None
  for line in lines:
    m = STARTS.search(line)
    if m:
      last = tuple(int(g) for g in m.groups())
  if last is None or not last[1]:
    return {}
  facets, starts, secs = last
  return {
    "facets_when_stopped": facets,
    "starts_when_stopped": starts,
    "s_per_start": secs / starts,
    "starts_cap_s": secs / starts * starts_cap,
  }


def command(workdir: str, preset: str, extra, draw: int) -> list:
  return [
    sys.executable,
    "-m",
    "experiments.reconstruct",
    f"--config={CONFIG}:{preset}",
    f"--config.victim.data_seed={draw}",
    *extra,
    f"--workdir={workdir}",
    "--overwrite",
  ]


def run_one(root: str, work: str, preset: str, extra, draw: int, limit_s: float) -> dict:
  """One run of the main job: its wall time, the load around it, and its timing."""
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"), MPLBACKEND="Agg")
  log_path = work + ".log"
  before = load()
  t = time.perf_counter()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(
      command(work, preset, extra, draw), cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
      rc = proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGTERM)
      rc = proc.wait()
  wall = time.perf_counter() - t
  now = datetime.datetime.now()
  with open(log_path) as f:
    lines = f.read().splitlines()
  rec = {"wall_s": wall, "rc": rc, "load_before": before, "load_after": load()}
  metrics = os.path.join(work, "metrics.json")
  if rc == 0 and os.path.exists(metrics):
    with open(metrics) as f:
      m = json.load(f)
    timing = m.get("timing", {})
    rec.update({k: timing.get(k) for k in PHASES if timing.get(k) is not None})
    rec.update(
      total_s=timing.get("total_s"),
      since_estimate_s=timing.get("since_estimate_s"),
      estimate_s=timing.get("estimate_s"),
      estimated=timing.get("estimated"),
      restart_steps_per_s=timing.get("restart_steps_per_s"),
      victim_source=m.get("victim_source"),
      span_dim=(m.get("regime", {}).get("span") or {}).get("dim"),
      handed_over=m.get("handover") is not None,
      handover_skipped=m.get("regime", {}).get("handover_skipped"),
      recovered_strict=m.get("recovered_strict"),
      m=m.get("m"),
      num_restarts=m.get("num_restarts"),
    )
    rec["startup_s"] = wall - (timing.get("total_s") or 0.0) - (timing.get("files_s") or 0.0)
  else:
    stopped = now.hour * 3600 + now.minute * 60 + now.second + now.microsecond / 1e6
    rec.update(cut_short=True, phases_from_log=from_log(lines, stopped), **extrapolate(lines))
    said = [line for line in lines if "] estimate: " in line]
    rec["estimate_line"] = said[0].split("] ", 1)[1] if said else None
  return rec


def search_rate(rec: dict, widths, pixels: int) -> dict:
  """The search's achieved GFLOP/s: restart-steps/s x its FLOPs per restart-step
  (:func:`recon_jax.job.estimate.search_flops` of the candidates in the span)."""
  from recon_jax.job import estimate

  if not rec.get("attack_run_s") or not rec.get("restart_steps_per_s") or not rec.get("m"):
    return {}
  dims = [(pixels, widths[0], 1)] + [(a, b, 1) for a, b in zip(widths, widths[1:] + (1,))]
  flops = estimate.search_flops(dims, rec["m"], rec.get("span_dim"), pixels)
  return {
    "search_gflop_per_restart_step": flops / 1e9,
    "search_s_per_restart_step": 1.0 / rec["restart_steps_per_s"],
    "search_gflops": flops * rec["restart_steps_per_s"] / 1e9,
  }


def run(args, emit) -> None:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sizes = QUICK if args.quick else {n: SIZES[n] for n in common.int_list(args.sizes)}
  if args.audit and not args.quick:
    preset, extra = AUDIT
    sizes["audit"] = (preset, (*extra, f"--config.search.steps={args.audit_steps}"))
  keep = args.keep or tempfile.mkdtemp(prefix="phases-")
  os.makedirs(keep, exist_ok=True)
  for n, (preset, extra) in sizes.items():
    work = os.path.join(keep, f"n{n}")
    rec = run_one(root, work, preset, extra, args.draw, args.limit_s)
    if rec.get("victim_source") == "trained" and not args.quick:
      # loading apart from training: the membership-only job (attack=none) on the victim
      # the run cached, whose timing.victim_s is the loading alone
      again = run_one(
        root, work + "-load", preset, (*extra, "--config.attack=none"), args.draw, 600
      )
      rec["victim_load_s"] = again.get("victim_s")
    digits = "mnist5k" in " ".join(extra)
    pixels = 784 if digits else (64 if args.quick else 625)
    widths = (32, 32) if args.quick else (1024,) if n == "audit" else (2048,)
    rec.update(search_rate(rec, widths, pixels))
    emit({"bench": "phases", "n": n, "preset": preset, "settings": list(extra), **rec})


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("phases", args)
  with emit.section("phases"):
    run(args, emit)
  emit.done()


if __name__ == "__main__":
  main()
