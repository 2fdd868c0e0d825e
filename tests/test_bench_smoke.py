"""``python -m benchmarks.NAME --quick`` runs each benchmark script and prints one JSON object
per line.

In-process (each script's ``main`` is what its command line runs).  Nothing about the
timings is asserted: only that every script ran and wrote its records with their keys.
"""

import importlib
import json
import math
import os
import sys

from absl import flags
from conftest import fast_compile
import jax
from ml_collections import config_flags
import pytest

from recon_jax.engine import loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # benchmarks/ is not an installed package (plain `pytest` runs too)
  sys.path.insert(0, ROOT)

from benchmarks import e2e, report  # noqa: E402

# Keys every record of a bench must carry (benchmarks/README.md and report.py read them).
MACHINE = {"backend", "device_kind", "cpu_count"}
EXPECTED = {
  "env": {"script", "date", "jax", "dtypes", "timing"} | MACHINE,
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
  "membership": {"skipped"},
  "span": {"what", "dtype", "d", "h", "n", "m", "R", "batching", "span_dim"} | MACHINE,
  "cone": {"dataset", "n", "train_s", "cone_s", "facets", "matched_ncc_0.95", "span_dim", "decay"},
  "scoring": {
    "n",
    "R",
    "m",
    "heldout",
    "match_vote_s",
    "strict_s",
    "baseline_mean_s",
    "baseline_heldout_s",
    "selection_s",
    "membership_s",
    "evaluate_candidates_s",
    "recovered_strict",
  }
  | MACHINE,
  "phases": {
    "n",
    "preset",
    "wall_s",
    "rc",
    "load_before",
    "load_after",
    "victim_s",
    "target_s",
    "regime_s",
    "attack_s",
    "identifiability_s",
    "evaluation_s",
    "membership_s",
    "files_s",
    "total_s",
    "estimate_s",
    "estimated",
  },
  "stability": {
    "n",
    "m",
    "h",
    "R",
    "span_dim",
    "pairs",
    "alone_s",
    "whole_pair_s",
    "whole_s",
    "speedup",
    "max_abs_diff",
    "same_order",
    "report_s",
    "report_timing",
    "report_before_s",
  }
  | MACHINE,
  "box": {"workdir", "attack", "n", "outside", "raw", "projected", "gain_pooled"},
  "summary": {"ceiling_gflops", "util_targets_met", "util_targets_total", "utilisation"},
  "done": {"wall_s", "sections_s"},
}
SPAN = {
  "step": {"path", "step_s", "steps_per_chunk", "restart_steps_per_s", "compile_s"},
  "speedup": {"pixels_restart_steps_per_s", "coefficients_restart_steps_per_s", "speedup"},
}
# Per script: the benches of its records, its sections, and report.py's tables of them.
SCRIPTS = {
  "kkt_step": (
    {"matmul", "kkt", "breakdown", "memory", "summary"},
    {"kkt", "breakdown", "memory"},
    ("**KKT step**", "**Where a KKT step's time goes**", "**Memory per restart**"),
  ),
  "batching": ({"batching"}, {"matmul", "batching"}, ("**Restart batching**",)),
  "train": ({"train"}, {"train"}, ("**Victim training**",)),
  "e2e": ({"e2e"}, {"e2e"}, ()),
  "bilevel": ({"bilevel"}, {"bilevel"}, ("**Bilevel outer step**",)),
  "span": ({"span"}, {"span"}, ("**Span vs pixels**",)),
  "cone": ({"cone"}, {"cone"}, ()),
  "membership": ({"membership"}, {"membership"}, ()),
  "scoring": ({"scoring"}, {"scoring"}, ()),
  "phases": ({"phases"}, {"phases"}, ()),
  "stability": ({"stability"}, {"stability"}, ()),
  "box": ({"box"}, {"run", "box"}, ()),
}


@pytest.fixture
def fast():
  """The smoke runs are compile-bound and assert no timings (conftest.fast_compile)."""
  with fast_compile():
    yield


def check(name, by_bench):
  """Script-specific checks of the records (shapes of the output, never timings)."""
  if name == "kkt_step":
    kkt = by_bench["kkt"]
    assert {(r["R"], r["batching"]) for r in kkt} == {(1, "vmap"), (2, "vmap")}
    assert all(
      isinstance(r[k], float) and math.isfinite(r[k])
      for r in kkt
      for k in ("steps_per_s", "gflops", "utilisation")
    )
    assert by_bench["breakdown"][0]["dots"], "the compiled step has dots"
    assert {r["what"] for r in by_bench["memory"]} == {"analytic", "compiled", "per_restart"}
  elif name == "batching":
    assert {(r["R"], r["batching"]) for r in by_bench["batching"]} == {(2, "vmap")}
  elif name == "bilevel":
    bl = by_bench["bilevel"]
    assert {r["what"] for r in bl} == {"outer_step", "memory_vs_iters", "memory_growth"}
    assert all(r["grad_finite"] for r in bl if r["what"] == "outer_step")
    growth = {r["diff"]: r["growth"] for r in bl if r["what"] == "memory_growth"}
    assert growth["implicit"] <= growth["unrolled"]  # implicit differentiation stays flat
  elif name == "cone":
    (rec,) = by_bench["cone"]
    assert (rec["dataset"], rec["n"], rec["decay"]) == ("digits", 8, 1.0)
    assert rec["facets"] >= rec["matched_ncc_0.95"] >= 6  # the quick victim is read off its cone
  elif name == "phases":
    (rec,) = by_bench["phases"]
    assert rec["rc"] == 0 and not rec.get("cut_short")
    # every phase the estimate counted was measured, the hand-over's path apart
    said = {k for k in rec["estimated"] if not k.startswith("if_handover.")}
    assert said and said <= set(rec), (said - set(rec), rec)
  elif name == "stability":
    (rec,) = by_bench["stability"]
    # the kicked candidate alone steps as its whole restart's re-run did (float32 rounding)
    assert rec["same_order"] and rec["max_abs_diff"] < 1e-3 * max(map(abs, rec["score_range"]))
  elif name == "box":
    (rec,) = by_bench["box"]
    for arm in ("raw", "projected"):  # the tiny run's candidates were written in the box
      assert rec[arm]["pooled"] == rec["stored_pooled"], rec
    assert rec["outside"] == 0.0 and rec["gain_pooled"] == 0
  elif name == "span":
    sp = by_bench["span"]
    for r in sp:
      missing = SPAN[r["what"]] - set(r)
      assert not missing, (missing, r)
      assert 1 <= r["span_dim"] < r["d"] and (r["h"], r["R"]) == (256, 2)
    own = loop.resolve_batching("auto")  # --quick: the machine's own batching only
    steps = {(r["batching"], r["path"]) for r in sp if r["what"] == "step"}
    assert steps == {(own, "pixels"), (own, "coefficients"), (own, "closed")}
    assert [r["batching"] for r in sp if r["what"] == "speedup"] == [own]
    assert all(
      math.isfinite(r[k]) for r in sp for k in ("restart_steps_per_s", "speedup") if k in r
    )


@pytest.mark.slow  # a subprocess per run: the slow tier
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_quick_run_prints_one_json_record_per_line_with_its_keys(name, tmp_path, capsys, fast):
  benches, sections, titles = SCRIPTS[name]
  script = importlib.import_module(f"benchmarks.{name}")
  x64 = jax.config.jax_enable_x64
  out = tmp_path / "results.json"
  script.main(["--quick", f"--out={out}"])
  assert jax.config.jax_enable_x64 == x64  # the precision switch is restored
  lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
  records = [json.loads(line) for line in lines]  # every stdout line is one JSON object
  assert all(isinstance(r, dict) and "bench" in r for r in records)
  by_bench = {}
  for r in records:
    by_bench.setdefault(r["bench"], []).append(r)
  assert set(by_bench) == benches | {"env", "done"}, sorted(by_bench)
  assert records[0]["bench"] == "env" and records[0]["script"] == name
  assert records[-1]["bench"] == "done"
  for bench, rs in by_bench.items():
    for r in rs:
      assert "error" not in r, r
      missing = EXPECTED[bench] - set(r)
      assert not missing, (bench, missing, r)
  assert set(by_bench["done"][0]["sections_s"]) == sections
  check(name, by_bench)
  assert out.read_text().splitlines() == lines  # --out receives the same lines
  tables = report.report(report.load([out]))  # and report.py renders them
  for title in titles:
    assert title in tables, title


def test_phases_reads_a_stopped_runs_log_to_the_stop():
  from benchmarks import phases

  log = [
    "I1207 01:40:54.5 1 cache.py:49] training the victim (not cached at X)",
    "I1207 01:41:18.0 1 pipeline.py:346] regime: the first layer's change spans 94 of 625",
    "I1207 01:41:18.5 1 pipeline.py:355] estimate: about 13 min from here",
    "I1207 01:45:07.5 2 progress.py:68] still attack=cone: reading the candidates, cone, "
    "starts from images held: 12 facets after 24 starts: 229 s in it",
  ]
  got = phases.from_log(log, stopped_at=1 * 3600 + 50 * 60 + 18.5)
  assert got["cut_in"] == "attack_s"
  assert got["victim_s"] == pytest.approx(23.5) and got["regime_s"] == pytest.approx(0.5)
  assert got["attack_s"] == pytest.approx(540.0)
  rate = phases.extrapolate(log, starts_cap=100)
  assert rate["s_per_start"] == pytest.approx(229 / 24)
  assert rate["starts_cap_s"] == pytest.approx(22900 / 24)


def test_end_to_end_command_uses_the_main_jobs_config_flags(tmp_path, monkeypatch):
  # --quick skips the end-to-end run (~20 s); its command line must still parse.
  cmd = e2e.e2e_command(str(tmp_path / "work"))
  assert cmd[1:3] == ["-m", "experiments.reconstruct"]
  monkeypatch.chdir(ROOT)  # the benchmark runs the job from the repository root
  argv = [cmd[2]] + [a for a in cmd[3:] if a.startswith("--config")]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  assert fv.config.victim.dataset == "digits" and fv.config.search.num_restarts == 2  # preset tiny
  assert fv.config.use_cache is False
  assert {a.split("=")[0] for a in cmd[3:] if not a.startswith("--config")} == {
    "--workdir",
    "--overwrite",
  }
