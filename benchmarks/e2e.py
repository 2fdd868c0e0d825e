r"""End to end: one draw of the main job as a subprocess, from a fresh victim to its report.

  python -m benchmarks.e2e                       # the tiny preset (~20 s)
  python -m benchmarks.e2e --preset=finetune_kkt # another preset of the main job
  python -m benchmarks.e2e --quick               # prints a 'skipped' record only

Runs ``python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:PRESET
--config.use_cache=False`` from the repository root (victim cache and workdir in a temporary
folder, ``JAX_PLATFORMS`` cpu unless set) and reports its wall time with the job's own
``metrics.json`` timing: victim, oracle, compile, attack run, evaluation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import common

E2E_CONFIG = "experiments/configs/reconstruct.py"
E2E_PRESET = "tiny"
E2E_TIMING = (
  "compile_s",
  "attack_run_s",
  "victim_s",
  "oracle_s",
  "evaluation_s",
  "total_s",
  "restart_steps_per_s",
)


def parse_args(argv=None):
  p = common.parser(__doc__, x64=False)
  p.add_argument("--preset", default=E2E_PRESET, help="the main job's preset")
  args = common.parse(p, argv)
  args.dtypes = []  # the preset's own precision
  return args


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
    cmd = e2e_command(work, args.preset)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
      err = proc.stderr.strip().splitlines()[-1:]
      emit({"bench": "e2e", "preset": args.preset, "error": err, "wall_s": wall})
      return
    with open(os.path.join(work, "metrics.json")) as f:
      timing = json.load(f)["timing"]
  emit(
    {
      "bench": "e2e",
      "preset": args.preset,
      "command": " ".join(cmd[1:5]),
      "wall_s": wall,
      **{k: timing.get(k) for k in E2E_TIMING},
      "startup_and_import_s": wall - (timing.get("total_s") or 0.0),
    }
  )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("e2e", args)
  with emit.section("e2e"):
    run_e2e(args, emit)
  emit.done()


if __name__ == "__main__":
  main()
