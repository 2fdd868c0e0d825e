"""``benchmarks/bench.py --quick`` runs and prints one valid JSON object per line."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECTED = {
    "env": {"date", "jax", "backend", "device_kind", "dtypes", "timing"},
    "matmul": {"dtype", "n", "gflops", "best_s"},
    "kkt": {"dtype", "d", "h", "m", "R", "batching", "step_s", "steps_per_s",
            "restart_steps_per_s", "gflops", "ceiling_gflops", "utilisation", "compile_s",
            "util_target", "util_target_met"},
    "batching": {"dtype", "batching", "R", "ratio", "restart_steps_per_s", "single_steps_per_s"},
    "breakdown": {"step_s", "dots_alone_s", "non_dot_fraction", "dots"},
    "train": {"name", "dtype", "epochs_per_s", "gflops"},
    "bilevel": {"what", "net", "dtype"},
    "memory": {"what", "dtype"},
    "e2e": {"skipped"},
    "summary": {"ceiling_gflops", "util_targets_met", "util_targets_total", "utilisation"},
    "done": {"wall_s", "sections_s"},
}


def test_quick_benchmark_prints_json_lines(tmp_path):
  out = tmp_path / "results.json"
  env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
  env["JAX_PLATFORMS"] = "cpu"
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--quick",
                         f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  records = [json.loads(line) for line in lines]  # every stdout line is one JSON object
  assert all(isinstance(r, dict) and "bench" in r for r in records)
  by_bench = {}
  for r in records:
    by_bench.setdefault(r["bench"], []).append(r)
  assert set(EXPECTED) <= set(by_bench), sorted(by_bench)
  for bench, keys in EXPECTED.items():
    for r in by_bench[bench]:
      if bench == "memory" and "error" in r:
        continue
      missing = keys - set(r)
      assert not missing, (bench, missing, r)
  kkt = by_bench["kkt"]
  assert {r["R"] for r in kkt} >= {1, 2}
  assert all(r["steps_per_s"] > 0 and 0 < r["utilisation"] for r in kkt)
  assert {r["what"] for r in by_bench["bilevel"]} >= {"outer_step", "memory_vs_iters",
                                                       "memory_growth"}
  assert {r["what"] for r in by_bench["memory"]} >= {"analytic", "compiled", "per_restart"}
  growth = {r["diff"]: r["growth"] for r in by_bench["bilevel"] if r["what"] == "memory_growth"}
  assert growth["implicit"] <= growth["unrolled"]
  # --out receives the same lines
  assert out.read_text().splitlines() == lines
