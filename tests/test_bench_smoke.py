"""``python -m benchmarks.bench --quick`` runs every section and prints one JSON object per line.

In-process (``bench.main`` is what the command line runs).  Nothing about the
timings is asserted: only that every section ran and wrote its records.
"""

import json
import math
import os
import sys

from absl import flags
from conftest import fast_compile
import jax
from ml_collections import config_flags
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # benchmarks/ is not an installed package (plain `pytest` runs too)
  sys.path.insert(0, ROOT)

from benchmarks import bench, report  # noqa: E402

# Keys every record of a bench must carry (BUILD.md and report.py read them).
EXPECTED = {
  "env": {"date", "jax", "backend", "device_kind", "dtypes", "timing"},
  "matmul": {"dtype", "n", "gflops", "best_s"},
  "kkt": {
    "dtype",
    "d",
    "h",
    "m",
    "R",
    "batching",
    "step_s",
    "steps_per_s",
    "restart_steps_per_s",
    "gflops",
    "ceiling_gflops",
    "utilisation",
    "compile_s",
    "utilisation_local",
    "utilisation_cpu",
    "util_target",
    "util_target_met",
  },
  "batching": {"dtype", "batching", "R", "ratio", "restart_steps_per_s", "single_steps_per_s"},
  "breakdown": {"step_s", "dots_alone_s", "non_dot_fraction", "xla_gflop", "formula_gflop", "dots"},
  "train": {"name", "dtype", "widths", "epochs_per_s", "gflops"},
  "bilevel": {"what", "net", "dtype"},
  "memory": {"what", "dtype"},
  "e2e": {"skipped"},
  "summary": {"ceiling_gflops", "util_targets_met", "util_targets_total", "utilisation"},
  "done": {"wall_s", "sections_s"},
}


@pytest.fixture
def fast():
  """The smoke run is compile-bound and asserts no timings (conftest.fast_compile)."""
  with fast_compile():
    yield


def test_quick_benchmark_runs_every_section_and_prints_json_records(tmp_path, capsys, fast):
  x64 = jax.config.jax_enable_x64
  out = tmp_path / "results.json"
  bench.main(["--quick", f"--out={out}"])
  assert jax.config.jax_enable_x64 == x64  # the precision switch is restored
  lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
  records = [json.loads(line) for line in lines]  # every stdout line is one JSON object
  assert all(isinstance(r, dict) and "bench" in r for r in records)
  by_bench = {}
  for r in records:
    by_bench.setdefault(r["bench"], []).append(r)
  assert set(by_bench) == set(EXPECTED), sorted(by_bench)
  for name, keys in EXPECTED.items():
    for r in by_bench[name]:
      assert "error" not in r, r
      missing = keys - set(r)
      assert not missing, (name, missing, r)
  kkt = by_bench["kkt"]
  assert {(r["R"], r["batching"]) for r in kkt} == {(1, "vmap"), (2, "vmap")}
  assert all(
    isinstance(r[k], float) and math.isfinite(r[k])
    for r in kkt
    for k in ("steps_per_s", "gflops", "utilisation")
  )
  assert by_bench["breakdown"][0]["dots"], "the compiled step has dots"
  assert {r["what"] for r in by_bench["bilevel"]} == {
    "outer_step",
    "memory_vs_iters",
    "memory_growth",
  }
  assert all(r["grad_finite"] for r in by_bench["bilevel"] if r["what"] == "outer_step")
  assert {r["what"] for r in by_bench["memory"]} == {"analytic", "compiled", "per_restart"}
  growth = {r["diff"]: r["growth"] for r in by_bench["bilevel"] if r["what"] == "memory_growth"}
  assert growth["implicit"] <= growth["unrolled"]  # implicit differentiation stays flat
  assert set(by_bench["done"][0]["sections_s"]) == {
    "kkt",
    "breakdown",
    "train",
    "bilevel",
    "memory",
    "e2e",
  }
  assert out.read_text().splitlines() == lines  # --out receives the same lines
  tables = report.report(report.load([out]))  # and report.py renders them
  for title in (
    "**KKT step**",
    "**Restart batching**",
    "**Victim training**",
    "**Bilevel outer step**",
    "**Memory per restart**",
  ):
    assert title in tables, title


def test_end_to_end_command_uses_the_main_jobs_config_flags(tmp_path, monkeypatch):
  # --quick skips the end-to-end run (~20 s); its command line must still parse.
  cmd = bench.e2e_command(str(tmp_path / "work"))
  assert cmd[1:3] == ["-m", "experiments.reconstruct"]
  monkeypatch.chdir(ROOT)  # the benchmark runs the job from the repository root
  argv = [cmd[2]] + [a for a in cmd[3:] if a.startswith("--config")]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  assert fv.config.victim.dataset == "digits" and fv.config.num_restarts == 2  # preset tiny
  assert fv.config.use_cache is False
  assert {a.split("=")[0] for a in cmd[3:] if not a.startswith("--config")} == {
    "--workdir",
    "--overwrite",
  }
