"""reproduce: verdicts from intervals (by hand), the report, one real section, refusals."""

import json
import os
import subprocess
import sys

import pytest

from experiments import reproduce
from experiments.configs import reproduce as configs
from recon_jax import cli
from recon_jax.errors import ConfigError
from recon_jax.eval.metrics_json import Metrics
from recon_jax.io import workdir
from recon_jax.studies import efficacy, efficacy_results
from reproduction import claims, publish, readings, results_md, run_results
from reproduction import driver as reproduction

T4 = 2.7764451051977987  # Student-t 0.975 quantile, 4 degrees of freedom


def eff(strict, heldout=None, mean=None, n=20, dataset="lfw", **per_draw):
  """An efficacy run whose metrics.json has these per-draw counts (other numbers: zeros),
  read as the reproduction reads it."""
  k = len(strict)
  keys = dict(
    strict_pooled=strict,
    baseline_heldout_strict=heldout or [0] * k,
    baseline_mean_strict=mean or [0] * k,
    **per_draw,
  )
  default = {key: {"per_draw": list(keys.get(key, [0] * k))} for key in efficacy.DRAW_KEYS}
  for v in default.values():
    v.update(claims.interval(v["per_draw"]).to_dict())
  m = {"draws": list(range(k)), "n_train": n, "variants": {"default": default}}
  results = efficacy_results.results_of(json.loads(json.dumps(m).replace("NaN", "null")), "m")
  return run_results.Harness(results, dataset, (True, False) * (k // 2))


def one(kind, *runs):
  [row] = claims.evaluate(kind, list(runs), 0.95)
  return row


def test_leak_verdicts_come_from_the_interval_of_the_per_draw_differences():
  # differences 5, 7, 3, 7, 5: mean 5.4, sd sqrt(2.8), half-width t * sd / sqrt(5)
  row = one("leak_quarter", eff([6, 7, 5, 8, 6], heldout=[1, 0, 2, 1, 1]))
  half = T4 * 2.8**0.5 / 5**0.5
  assert f"5.4 [{5.4 - half:.1f}, {5.4 + half:.1f}]" in row["statistic"]  # [3.3, 7.5]
  assert (
    row["verdict"] == "yes" and "6.4 [" in row["attack"] and "held-out 1.0 [" in row["baselines"]
  )
  # above the baseline in every draw, but below n/4 = 5 on average
  assert one("leak_quarter", eff([4] * 5))["verdict"] == "no"
  assert one("leak", eff([4] * 5))["verdict"] == "yes"
  # mean difference 0.8 > 0, but the interval (sd 1.79) reaches below 0
  assert one("leak", eff([3, 0, 4, 0, 2], heldout=[1] * 5))["verdict"] == "no"
  # the best baseline is the stronger one per draw: here the mean image
  assert one("leak", eff([3] * 5, heldout=[0] * 5, mean=[3] * 5))["verdict"] == "no"
  # the attacker-selected restart's count, not the pooled one
  assert one("selected_leak", eff([9] * 5, strict_selected=[0] * 5))["verdict"] == "no"
  assert one("leak", eff([9]))["verdict"] == "too few draws"


def test_paired_trend_and_signal_criteria():
  kkt, inv = eff([3, 4, 5, 4, 4]), eff([1, 1, 2, 1, 2])
  row = one("fewer", kkt, inv)  # differences 2, 3, 3, 3, 2
  assert row["verdict"] == "yes" and "KKT - the other attack 2.6 [" in row["statistic"]
  assert one("fewer", inv, kkt)["verdict"] == "no"
  with pytest.raises(ValueError, match="different draws"):
    one("fewer", kkt, eff([1, 1]))
  small, big = eff([4, 5, 4, 6, 5], n=10), eff([2, 1, 2, 3, 2], n=50)  # 0.48 vs 0.04
  row = one("n_trend", big, small)
  assert row["verdict"] == "yes" and row["attack"].startswith("strict fraction n=10: 0.48")
  assert one("n_trend", eff([1] * 5, n=10), eff([5, 5, 5, 5, 4], n=50))["verdict"] == "no"
  base = eff([0] * 5, **{"ssim_gt_0.4": [15, 16, 14, 15, 15]})
  kai = eff(
    [0] * 5, **{"ssim_gt_0.4": [10, 11, 9, 10, 10], "baseline_heldout_ssim_gt_0.4": [6, 7, 5, 6, 6]}
  )
  assert one("lower_with_signal", base, kai)["verdict"] == "yes"
  assert one("lower_with_signal", kai, base)["verdict"] == "no"
  row = one("all_leak", eff([5] * 5, heldout=[1] * 5), eff([1, 0, 1, 0, 1]))
  assert row["verdict"] == "no" and row["attack"].count("strict pooled") == 2
  assert one("pick_rate", eff([1] * 4), eff([1] * 2))["attack"] == ("the same restart in 3/6 draws")


def test_leakage_criteria_most_selected_most_and_known_theta0():
  # 18 of 20 on average and above the baseline on every draw: most
  assert one("leak_most", eff([18, 19, 17, 18, 18]))["verdict"] == "yes"
  assert one("leak_most", eff([17, 18, 17, 18, 17]))["verdict"] == "no"  # mean 17.4 < 18
  assert "0.9 n = 18" in one("leak_most", eff([18] * 5))["statistic"]
  # the attacker-selected count, not the pooled one, must reach 15 of 20
  picked = eff([20] * 5, strict_selected=[15, 16, 15, 14, 16])
  assert one("selected_most", picked)["verdict"] == "yes"
  assert one("selected_most", eff([20] * 5, strict_selected=[14] * 5))["verdict"] == "no"
  known, blind = eff([16, 17, 15, 18, 16]), eff([0, 1, 0, 0, 1])
  row = one("known_theta0", known, blind)
  assert row["verdict"] == "yes" and "known - theta* alone 16.0 [" in row["statistic"]
  assert one("known_theta0", blind, known)["verdict"] == "no"
  with pytest.raises(ValueError, match="different draws"):
    one("known_theta0", known, eff([0, 0]))


def test_identifiable_needs_the_truth_best_and_no_flat_family_on_every_draw():
  ratios = [1.5, 2.0, 1.0, 3.0, 1.2]
  logs = [float(__import__("math").log10(r)) for r in ratios]
  row = one(
    "identifiable",
    eff(
      [0] * 5,
      identifiability_ratio=ratios,
      log10_identifiability_ratio=logs,
      truth_not_unique=[0] * 5,
    ),
  )
  assert row["verdict"] == "yes" and "best on 5 of 5 draws" in row["attack"]
  flat = eff([0] * 5, identifiability_ratio=ratios, truth_not_unique=[0, 1, 0, 0, 0])
  row = one("identifiable", flat)
  assert row["verdict"] == "no" and "best on 4 of 5" in row["attack"]
  assert "exactly as well on 1" in row["attack"]
  assert (
    one("identifiable", eff([0] * 5, identifiability_ratio=[1.1, 0.9, 2, 2, 2]))["verdict"] == "no"
  )
  assert one("identifiable", eff([0], identifiability_ratio=[2.0]))["verdict"] == "too few draws"


def test_toy_and_init_study_verdicts_over_seeds():
  def toy(*got):
    numbers = {"oracle_residual_rel": 0.01, "kink_fraction": 0.0, "at_init": {"recovered": 0}}
    return [
      run_results.toy_of(
        dict(numbers, n_train=20, recovered=g, recovered_best_restart=g, recovered_pooled=20),
        "toy.json",
      )
      for g in got
    ]

  assert one("toy", toy(18, 5, 19))["verdict"] == "yes"  # median 18 = 0.9 n
  assert one("toy", toy(17, 20, 10))["verdict"] == "no"
  assert one("toy", toy(20, 20))["verdict"] == "too few seeds"

  def study(*held):
    return [
      run_results.init_study_of(
        {
          "dataset": "digits",
          "n_train": 10,
          "wall_s": 1.0,
          "sub_runs": {
            "kkt": {
              "findings": {
                "ground_truth_recovered": {"reproduced": h, "evidence": f"e{i}"},
                "grid": {"reproduced": None, "evidence": "no grid"},
              }
            }
          },
        },
        "study.json",
      )
      for i, h in enumerate(held)
    ]

  rows = claims.evaluate("findings", [study(True, True, True)], 0.95)
  assert [(r["claim"], r["verdict"]) for r in rows] == [
    ("kkt: ground truth recovered", "yes"),
    ("kkt: grid", "not run (no grid)"),
  ]
  assert rows[0]["statistic"] == "seed 0: e0"
  [r, _] = claims.evaluate("findings", [study(True, False, True)], 0.95)
  assert r["verdict"] == "no" and r["attack"] == "holds in 2/3 seeds"


def test_an_efficacy_run_is_condensed_with_each_scored_draws_pick():
  """pick_same: per draw whose restarts were scored, whether the attacker's pick (the
  lowest-loss restart) was the truly best; a blind or older draw's report adds nothing."""
  draws = [
    {"selection": {"best_by_loss_restart": 1, "best_true_restart": 1}},
    {"selection": {"best_by_loss_restart": 0, "best_true_restart": 2}},
    {"selection": {"n_diverged": 0, "best_by_loss_restart": 0}},  # blind: nothing scored
    None,  # no metrics.json
  ]
  picks = [Metrics.from_metrics(d).selection for d in draws]
  m = run_results.harness_of(eff([1, 2, 3, 4]).results, "lfw", picks)
  assert m.pick_same == (True, False) and m.dataset == "lfw"
  # results.json keeps the run as its metrics.json held it, with the data set and the picks
  held = json.loads(json.dumps(m.results.to_dict()).replace("NaN", "null"))
  assert workdir.jsonable(m.to_dict()) == dict(held, dataset="lfw", pick_same=[True, False])
  assert claims.evaluate("pick_rate", [m], 0.95)[0]["attack"] == "the same restart in 1/2 draws"


def _results():
  ok = lambda m: {"binary": "efficacy", "status": "ok", "results": [m], "commands": ["cmd"]}
  return {
    "main_faces": ok(
      eff([6, 7, 5, 8, 6], heldout=[1, 0, 2, 1, 1], membership_weights_auc=[0.9] * 5)
    ),
    "main_digits": {
      "binary": "efficacy",
      "status": "FAILED (exit code 1: error: boom)",
      "results": [],
      "commands": ["python -m experiments.efficacy x"],
    },
  }


def test_claims_of_failed_and_missing_runs_are_not_run_and_the_report_says_so(tmp_path):
  cfg = configs.get_config("default")
  results = _results()
  results["partition_init"] = dict(results["main_faces"], alias="main_faces")
  secs = ["main", "supplement", "attacker"]
  rows = claims.claims(claims.CLAIMS, results, secs, cfg.confidence)
  by = {(r["criterion"], r["runs"][0]): r for r in rows}
  assert by["leak_quarter", "main_faces"]["verdict"] == "yes"
  assert by["leak_quarter", "main_faces"]["claim"].startswith("lfw (small-image supplement)")
  assert by["leak_quarter", "main_digits"]["verdict"] == "not run (main_digits FAILED)"
  assert by["partition", "partition_init"]["verdict"] == claims.NEW
  # a run this scale does not have says why, and what stands in for it
  assert by["leak_quarter", "main_mnist500"]["verdict"].startswith("not run: needs a GPU")
  assert "2026-11-27" in by["leak_quarter", "main_mnist500"]["verdict"]
  assert (
    by["leak_quarter", "main_mnist50"]["verdict"] == "not run (main_mnist50 not in the sections)"
  )
  rows = claims.claims(
    claims.CLAIMS, {"main_faces": results["main_faces"]}, ["supplement"], cfg.confidence
  )
  assert rows[1]["verdict"] == "not run (main_digits not in the sections)"

  (tmp_path / "main_faces").mkdir()
  (tmp_path / "main_faces" / "efficacy.png").write_bytes(b"png")
  for d in (3, 12):  # the first draw's reconstruction grid is shown (draw 3, not draw 12)
    (tmp_path / "main_faces" / "default" / f"draw_{d}").mkdir(parents=True)
    (tmp_path / "main_faces" / "default" / f"draw_{d}" / "reconstructions.png").write_bytes(b"g")
  (tmp_path / "main_faces" / "default" / "draw_1").mkdir()  # a draw without one is passed by
  md = results_md.report(
    cfg,
    str(tmp_path),
    results,
    claims.claims(claims.CLAIMS, results, secs, cfg.confidence),
    secs,
    claims.SECTIONS,
    90.0,
    "python -m x",
    False,
  )
  assert "Regenerate with `python -m x`." in md and "Partial" not in md
  left = md.split("**Not in this report** (not run, or not yet): ")[1].split("\n")[0]
  assert left.startswith("1. Haim et al. §4, Fig. 2: the 2-D toy; 4. Haim et al. §5.3")
  assert "2. Haim" not in left and left.endswith("and the leakage map.")  # sections left out
  assert "| this command | | 2 |" in md  # 90 s, in minutes
  assert (
    "| 3 | lfw (small-image supplement): as above | large portion, n = 500 | 0.0 [0.0, 0.0] of "
    "20 | 0.0 [0.0, 0.0] of 20 | 6.4 ["
  ) in md
  assert "| **yes** |" in md and "**not run (main_digits FAILED)**" in md
  assert "**FAILED**: `main_digits`: FAILED (exit code 1: error: boom)" in md
  assert "- `partition_init` (the same run as `main_faces`): `cmd`" in md
  assert md.count("![main_faces/efficacy.png](main_faces/efficacy.png)") == 1  # figures once
  grid = "main_faces/default/draw_3/reconstructions.png"
  assert md.count(f"![{grid}]({grid})") == 1 and "draw_12/reconstructions" not in md
  assert "| main_faces | lfw | 20 | 5 | 6.4 [" in md
  assert "- leak_quarter: leak, and the mean strict pooled count >= n/4" in md
  assert md.index("## 3. The small-image") < md.index("## 8. The attacker")
  assert "| AUC 0.900 [0.900, 0.900]; TPR 0.00 [0.00, 0.00] |" in md


def test_each_claim_is_read_in_the_papers_sense_and_as_evidence_of_membership():
  """The paper's count (SSIM > 0.4, no baseline) and the strict count with membership are two
  verdicts: look-alikes pass the first alone, and a strict count the weights do not back
  (membership AUC's interval not above 0.5) is no evidence."""
  ssim, told = {"ssim_gt_0.4": [12, 14, 13, 12, 14]}, {"membership_weights_auc": [0.9] * 5}
  look_alikes = eff([0] * 5, **ssim, **told)
  row = readings.verdicts("leak_quarter", [look_alikes], 0.95, one("leak_quarter", look_alikes))
  assert row == {"paper_verdict": "yes", "verdict": "no"}
  real = eff([6, 7, 5, 8, 6], heldout=[1, 0, 2, 1, 1], **ssim, **told)
  row = readings.verdicts("leak_quarter", [real], 0.95, one("leak_quarter", real))
  assert row == {"paper_verdict": "yes", "verdict": "yes"}
  chance = eff([6, 7, 5, 8, 6], **ssim, membership_weights_auc=[0.5, 0.55, 0.45, 0.5, 0.52])
  row = readings.verdicts("leak_quarter", [chance], 0.95, one("leak_quarter", chance))
  assert row["verdict"].startswith("no (the weights' membership test")
  # the paper's share: 12-14 of 20 is a quarter, 3 is not
  few = eff([0] * 5, **{"ssim_gt_0.4": [3] * 5})
  assert readings.paper_sense("leak_quarter", [few], 0.95, "no") == "no"
  assert readings.paper_sense("selected_leak", [few], 0.95, "no") == readings.NOT_IN_PAPER
  assert readings.paper_sense("toy", [], 0.95, "yes") == "yes"  # the toy's own reading
  assert readings.evidence("toy", [], 0.95, "yes").startswith("n/a")
  # a comparison keeps its strict verdict (no membership in a difference)
  assert readings.evidence("fewer", [real, few], 0.95, "yes") == "yes"
  cols = readings.columns(["a"], [real], 0.95)
  assert cols["strict"].startswith("6.4 [") and cols["strict"].endswith("of 20")
  assert cols["ssim"].startswith("13.0 [") and cols["membership"].startswith("AUC 0.900")
  picked = eff([9] * 5, strict_selected=[2, 3, 2, 3, 2], membership_weights_tpr=[float("nan")] * 5)
  assert readings.columns(["a"], [picked], 0.95, "selected_leak")["strict"].startswith("2.4 [")
  assert readings.columns(["a"], [picked], 0.95, "leak")["strict"].startswith("9.0 [")
  assert "TPR not resolved" in readings.columns(["a"], [picked], 0.95)["membership"]  # no TPR
  two = readings.columns(["a", "b"], [real, few], 0.95)
  assert two["ssim"].startswith("a: 13.0 [") and "; b: 3.0 [3.0, 3.0] of 20" in two["ssim"]


def test_similar_needs_the_paired_difference_within_a_tenth_of_n():
  base = eff([5, 6, 5, 4, 5], **{"ssim_gt_0.4": [10] * 5})
  near = eff([5, 6, 6, 4, 5], **{"ssim_gt_0.4": [10, 11, 10, 10, 10]})  # within +-2 of 20
  assert one("similar", base, near)["verdict"] == "yes"
  assert readings.paper_sense("similar", [base, near], 0.95, "yes") == "yes"
  far = eff([10, 12, 11, 10, 12], **{"ssim_gt_0.4": [16] * 5})
  row = one("similar", base, far)
  assert row["verdict"] == "no" and "longer - base 6.0 [" in row["statistic"]
  assert readings.paper_sense("similar", [base, far], 0.95, "no") == "no"
  assert one("similar", eff([5]), eff([5]))["verdict"] == "too few draws"


def test_the_report_says_when_and_at_which_commit_its_runs_ran_and_each_sections_time():
  ran = [
    {"date": "2026-12-07", "commit": "abc", "wall_s": 1800.0},
    {"date": "2026-12-08", "commit": "abc", "wall_s": 5400.0},
  ]
  assert results_md._provenance(ran) == "Run 2026-12-07 to 2026-12-08 at commit abc."
  assert "commits abc, def (each run's beside its command)." in results_md._provenance(
    ran + [dict(ran[0], commit="def")]
  )
  assert results_md._commits({"ran": ran}) == ", at commit abc"
  assert results_md._commits({"ran": ran + [dict(ran[0], commit="d")]}) == ", at commits abc, d"
  assert results_md._commits({}) == ""  # no session known
  later = results_md._provenance(ran, written="fed")
  assert later.endswith("This report was written from them at commit fed.")
  assert results_md._provenance(ran, written="abc") == results_md._provenance(ran)
  cfg = configs.get_config("default")
  timed = lambda *t: {
    "binary": "efficacy",
    "status": "ok",
    "results": [eff([1] * len(t), time_s=list(t))],
  }  # noqa: E731
  results = {"main_mnist50": timed(600.0, 600.0), "main_mnist100": timed(300.0, 300.0)}
  results["main_faces"] = timed(30.0, 30.0)
  results["main_digits"] = dict(timed(9.0), alias="main_mnist50")  # counted where it first ran
  rows = results_md.section_times(cfg, results, ["main", "supplement"], claims.SECTIONS, 120.0)
  assert rows[2].endswith("| 2 | 30 |") and rows[3].endswith("| 1 | 1 |")
  assert rows[4] == "| all sections | 3 | 31 |" and rows[5].endswith("| 2 |")  # this command
  toy = run_results.toy_of(
    {"n_train": 4, "recovered": 1, "recovered_best_restart": 1, "recovered_pooled": 2,
     "oracle_residual_rel": 0.1, "kink_fraction": 0.0, "timing": {"total_s": 90.0}}, "t",
  )  # fmt: skip
  assert results_md.run_seconds({"results": [toy, toy]}) == 180.0


def test_a_leakage_map_run_shows_its_cells_with_the_span_membership_and_time():
  auc = [0.99, 1.0, 0.98]  # its free interval reaches past 1
  m = eff([19, 20, 18], span_ceiling=[20, 20, 19], membership_weights_auc=auc, time_s=[30, 40, 35])
  res = m.results._replace(
    map=[{"axis": "optimizer", "label": "GD", "variant": "default"}], n_train_of={"default": 20}
  )
  lines = results_md.map_lines(m._replace(results=res), "leakage_map")
  row = [line for line in lines if line.startswith("| optimizer | GD | 20 |")]
  assert row and "| 19.0 [" in row[0] and "| 19.7 [" in row[0] and "| 35 [" in row[0]
  assert "| 0.990 [0.965, 1.000] |" in row[0]
  assert "![leakage_map/leakage_map.png](leakage_map/leakage_map.png)" in lines[-2]
  assert results_md.map_lines(eff([1, 2]), "x") == []  # no map: nothing


@pytest.mark.slow
def test_one_section_through_subprocesses_a_failing_run_and_resume(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")  # the processes compile faster
  cfg = configs.get_config("quick")
  cfg.seeds = 1  # one toy process (the criterion then says: too few seeds)
  cfg.runs.multiclass_ce.overrides = {"nope": 1}  # refused by efficacy in one line
  cfg.sections.decoreco = ("multiclass_ce",)
  w = str(tmp_path / "w")
  out = reproduction.run(cfg, w, ["toy", "decoreco"], programs=reproduce.PROGRAMS)
  said = capsys.readouterr().err
  assert (
    "reproduce: run 1 of 2 (toy); 0 min so far" in said and "run 2 of 2 (multiclass_ce)" in said
  )
  toy = out["runs"]["toy"]
  [session] = toy["ran"]  # the time and commit each session ran it, kept in logs/toy.json
  assert session["wall_s"] > 0 and session["commit"] == driver_commit()
  assert toy["status"] == "ok" and toy["commands"] == [
    f"python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:quick "
    f"--config.seed=0 --workdir={w}/toy/seed_0"
  ]
  m = json.loads((tmp_path / "w" / "toy" / "seed_0" / "metrics.json").read_text())
  assert toy["results"][0].recovered == m["recovered"] and m["dtype"] == "float64"
  written = json.loads((tmp_path / "w" / "results.json").read_text())["runs"]["toy"]["results"]
  assert written[0] == {k: v for k, v in m.items() if k not in ("per_restart", "victim")}
  failed = out["runs"]["multiclass_ce"]["status"]
  assert failed.startswith("FAILED (exit code 1: error: --config.base.nope: no such setting")
  verdicts = {r["runs"][0]: r["verdict"] for r in out["claims"]}
  assert verdicts == {
    "toy": "n/a (no held-out points)",
    "multiclass_ce": "not run (multiclass_ce FAILED)",
    "regression_mse_wd": "not run (regression_mse_wd not in the sections)",
  }
  toy_row = next(r for r in out["claims"] if r["runs"] == ["toy"])
  assert toy_row["paper_verdict"] == "too few seeds"  # the toy's own criterion, in its sense
  md = (tmp_path / "w" / "RESULTS.md").read_text()
  assert f"| toy seed 0 | {m['recovered']} / 4 |" in md and "**FAILED**: `multiclass_ce`" in md
  assert "![toy/seed_0/toy_2d.png](toy/seed_0/toy_2d.png)" in md
  assert json.loads((tmp_path / "w" / "results.json").read_text())["claims"] == out["claims"]
  stamp = os.path.getmtime(tmp_path / "w" / "toy" / "seed_0" / "metrics.json")
  again = reproduction.run(
    cfg, w, ["toy"], programs=reproduce.PROGRAMS, resume=True
  )  # the finished toy is not run again
  assert os.path.getmtime(tmp_path / "w" / "toy" / "seed_0" / "metrics.json") == stamp
  assert again["runs"]["toy"]["results"] == out["runs"]["toy"]["results"]
  assert again["runs"]["toy"]["ran"] == toy["ran"]  # nothing ran again: no new session
  assert "reproduce: run" not in capsys.readouterr().err  # no progress line for it either
  assert (
    "multiclass_ce" not in again["runs"]
    and "FAILED" not in (tmp_path / "w" / "RESULTS.md").read_text()
  )


def driver_commit():
  return reproduction.commit_of(reproduce.ROOT)


def _cli(*args):
  p = subprocess.run(
    [sys.executable, "-m", "experiments.reproduce", *args],
    cwd=reproduce.ROOT,
    capture_output=True,
    text=True,
  )
  return p.returncode, p.stderr.strip().splitlines()


@pytest.mark.slow
def test_bad_scale_section_and_missing_paper_data_are_refused_in_one_line(tmp_path):
  w = f"--workdir={tmp_path / 'w'}"
  rc, err = _cli("--config=experiments/configs/reproduce.py:huge", w)
  assert rc == 1 and len(err) == 1 and "reproduce.py:huge: unknown preset (scale) 'huge'" in err[0]
  rc, err = _cli("--config=experiments/configs/reproduce.py:paper", w)
  assert rc == 1 and err == [
    "error: --config.data_dir: the paper scale reads cifar10 and mnist from it; got ''."
  ]
  assert not (tmp_path / "w").exists()
  cfg = configs.get_config("paper")
  assert reproduction.sections_to_run(cfg, "toy") == ["toy"]  # the toy reads no data files
  cfg.data_dir = str(tmp_path / "none")
  with pytest.raises(ConfigError, match=r"^data_dir: the paper scale .* got '/"):
    reproduction.sections_to_run(cfg)
  cfg.data_dir = str(tmp_path)  # a folder: the runs read it (a missing file fails that run)
  assert reproduction.sections_to_run(cfg, "main,toy,init_study") == ["toy", "main", "init_study"]
  [(folder, args)] = reproduction.jobs(cfg, "main_faces", reproduce.PROGRAMS)
  assert folder == "main_faces" and args == [
    "--config=experiments/configs/efficacy.py:paper",
    "--config.base.victim.dataset=cifar10",
    f"--config.base.data_dir={tmp_path}",
    "--draws=5",
    "--first_draw=0",
  ]
  assert (
    f"--config.data_dir={tmp_path}"
    in reproduction.jobs(cfg, "init_study", reproduce.PROGRAMS)[2][1]
  )
  assert [j[1][-1] for j in reproduction.jobs(cfg, "toy", reproduce.PROGRAMS)] == [
    f"--config.seed={s}" for s in range(3)
  ]
  with pytest.raises(ConfigError, match="^only: no section 'nope'; choose from toy, main"):
    reproduction.sections_to_run(configs.get_config("quick"), "toy,nope")
  assert reproduction.sections_to_run(configs.get_config("quick"), "attacker, toy") == [
    "toy",
    "attacker",
  ]
  cfg = configs.get_config("quick")
  del cfg.runs["toy"]
  with pytest.raises(ConfigError, match="^runs.toy: missing") as e:
    reproduction.sections_to_run(cfg, "toy")
  assert cli.error_line(e.value, cfg).startswith("error: --config.runs.toy: missing")


@pytest.mark.parametrize("scale", configs.SCALES)
def test_every_run_of_every_scale_sets_only_settings_its_binary_has(scale):
  """A setting a run's binary lacks is refused before any work, naming the run (the inversion
  and weights runs once set ``victim.attack``, which failed hours into a reproduction)."""
  cfg = configs.get_config(scale)
  every = list(cfg.sections)
  reproduction.check_settings(cfg, every, reproduce.PROGRAMS)
  [(_, args)] = reproduction.jobs(cfg, "inversion", reproduce.PROGRAMS)
  assert "--config.base.attack=inversion" in args
  cfg.runs.weights.overrides.victim.attack = "weights"
  with pytest.raises(
    ConfigError, match=r"^runs\.weights: --config\.base\.victim\.attack: no such"
  ) as e:
    reproduction.check_settings(cfg, every, reproduce.PROGRAMS)
  assert cli.error_line(e.value, cfg).startswith("error: --config.runs.weights: --config.base.")


def test_resume_runs_a_corrected_run_that_never_started_and_refuses_one_that_did(tmp_path):
  """reproduce --resume: settings changed only in runs with nothing in the workdir are taken
  (config.json rewritten, the former kept in logs/); a changed run that has files is refused,
  nothing touched."""
  old = configs.get_config("quick")
  old.runs.weights.overrides.victim.attack = "weights"  # the mistake
  w = tmp_path / "w"
  reproduction.open_run(old, str(w))
  (w / "toy" / "seed_0").mkdir(parents=True)
  (w / "toy" / "seed_0" / "config.json").write_text("{}")
  new = configs.get_config("quick")
  reproduction.open_run(new, str(w), resume=True)
  stored = json.loads((w / "config.json").read_text())["config"]["runs"]["weights"]
  assert (
    stored["overrides"]["attack"] == "weights" and "attack" not in stored["overrides"]["victim"]
  )
  [former] = os.listdir(w / "logs")
  assert json.loads((w / "logs" / former).read_text())["config"]["runs"]["weights"] != stored
  reproduction.open_run(new, str(w), resume=True)  # nothing changed: nothing rewritten
  assert os.listdir(w / "logs") == [former]
  text = (w / "config.json").read_text()
  new.runs.toy.preset = "small"  # the toy has files: refused
  with pytest.raises(ConfigError, match="configuration differs .* in runs.toy.preset"):
    reproduction.open_run(new, str(w), resume=True)
  assert (w / "config.json").read_text() == text and os.listdir(w / "logs") == [former]
  whole = json.loads(text)
  whole["config"]["runs"] = ["weights"]  # not the runs' settings: refused in one line, not a crash
  (w / "config.json").write_text(json.dumps(whole))
  with pytest.raises(ConfigError, match=r"^resume: .*config\.json holds settings"):
    reproduction.open_run(new, str(w), resume=True)


def test_progress_counts_runs_and_estimates_the_rest():
  assert reproduction.progress(1, 4, "toy", []) == "reproduce: run 1 of 4 (toy); 0 min so far"
  line = reproduction.progress(3, 4, "main_faces", [600.0, 600.0])
  assert line.startswith("reproduce: run 3 of 4 (main_faces); 20 min so far")
  assert line.endswith("about 20 min to go at the pace so far")  # 10 min a run, 2 to go
  # resumed: runs finished in an earlier session count at their own seconds, not as 0 min
  line = reproduction.progress(3, 4, "main_faces", [3000.0, 600.0])
  assert "; 60 min so far, about 60 min to go" in line
  assert "; 10 min so far, about 20 min to go" in reproduction.progress(3, 4, "x", [0.0, 600.0])


def test_publish_places_the_report_and_the_files_it_links_in_a_checkout(tmp_path):
  run, co = tmp_path / "run", tmp_path / "co"
  (run / "a").mkdir(parents=True)
  (run / "a" / "efficacy.png").write_bytes(b"png")
  (run / "a" / "summary.md").write_text("s")
  (run / "RESULTS.md").write_text(
    "![a/efficacy.png](a/efficacy.png) [summary.md](a/summary.md) [gone](a/missing.png) "
    "[findings](docs/findings.md) [web](https://x.org/a.png)\n"
  )
  with pytest.raises(ConfigError, match="^publish: .* is not a checkout"):
    publish.publish(str(run), str(co))
  (co / "docs" / "results" / "old").mkdir(parents=True)
  (co / "README.md").write_text("r")
  assert publish.publish(str(run), str(co)) == ["a/efficacy.png", "a/summary.md"]
  assert (co / "RESULTS.md").read_text() == (
    "![a/efficacy.png](docs/results/a/efficacy.png) [summary.md](docs/results/a/summary.md) "
    "[gone](a/missing.png) [findings](docs/findings.md) [web](https://x.org/a.png)\n"
  )
  assert (co / "docs" / "results" / "a" / "efficacy.png").read_bytes() == b"png"
  assert not (co / "docs" / "results" / "old").exists()  # an older report's figures go
  with pytest.raises(ConfigError, match="has no RESULTS.md"):
    publish.publish(str(tmp_path / "co" / "docs"), str(co))


def test_a_published_report_names_no_folder_of_the_machine_it_ran_on(tmp_path):
  run, co = tmp_path / "run", tmp_path / "co"
  run.mkdir()
  co.mkdir()
  (co / "README.md").write_text("r")
  (run / "RESULTS.md").write_text(
    f"Regenerate with `reproduce --workdir={run}`.\n- `efficacy --workdir={run}/abl_depth`\n"
    f"- kept: {run}2/x and workdirs/other\n"
  )
  publish.publish(str(run) + "/", str(co))
  assert (co / "RESULTS.md").read_text() == (
    "Regenerate with `reproduce --workdir=workdirs/reproduce`.\n"
    "- `efficacy --workdir=workdirs/reproduce/abl_depth`\n"
    f"- kept: {run}2/x and workdirs/other\n"
  )


def test_a_runs_line_says_its_search_budget_and_its_victims_train_loss(tmp_path):
  run = tmp_path / "r"
  for d, (loss, acc) in enumerate([(2e-4, 0.83), (5e-4, 0.85)]):
    (run / "default" / f"draw_{d}").mkdir(parents=True)
    victim = {"victim": {"loss": loss, "test_accuracy": acc}}
    (run / "default" / f"draw_{d}" / "metrics.json").write_text(json.dumps(victim))
  base = {"attack": "kkt", "search": {"num_restarts": 8, "steps": 2000}}
  (run / "config.json").write_text(json.dumps({"config": {"base": base}}))
  assert results_md._budget(str(tmp_path), "r", "efficacy") == (
    " (kkt: 8 restarts x 2,000 steps a draw; victims: train loss 2.0e-04 to 5.0e-04, test "
    "accuracy 0.83 to 0.85)"
  )
  assert results_md._budget(str(tmp_path), "r", "toy_2d") == ""
  assert results_md._budget(str(tmp_path), "nothing", "efficacy") == ""


def test_the_default_scale_runs_haim_et_als_mnist_setting_and_its_kaiming_row_is_he_everywhere():
  import jax
  import numpy as np

  from recon_jax.victims import models
  from reproduction import scales

  cfg = configs.get_config("default")
  [(_, args)] = reproduction.jobs(cfg, "main_mnist50", reproduce.PROGRAMS)
  for flag in (
    "--config=experiments/configs/efficacy.py:paper_mnist5k",
    "--config.base.victim.dataset=mnist5k",
    "--config.base.victim.epochs=10000",
    "--config.base.victim.n_per_class=25",
    "--config.base.search.num_restarts=8",
    "--config.base.search.steps=2000",
    "--draws=5",
    "--first_draw=100",
  ):
    assert flag in args, flag
  [(_, sgd)] = reproduction.jobs(cfg, "abl_sgd", reproduce.PROGRAMS)
  assert "--config.base.victim.batch_size=50" in sgd  # 10^4 epochs of 2 batches: 2 x 10^4 steps
  assert "--config.base.victim.epochs=20000" in sgd and "--config.base.victim.n_per_class=50" in sgd
  # the first layer at He's std draws what the kaiming scheme draws there
  x = np.zeros((1, 784), np.float32)
  he = models.MLP(widths=(8,), first_layer_std=None).init(jax.random.PRNGKey(0), x)
  ours = models.MLP(widths=(8,), first_layer_std=scales.HE_FIRST).init(jax.random.PRNGKey(0), x)
  a, b = he["params"]["layer_0"]["kernel"], ours["params"]["layer_0"]["kernel"]
  np.testing.assert_allclose(a, b, rtol=1e-5)
  assert (
    "--config.base.victim.first_layer_std=0.050507627227610534"
    in reproduction.jobs(cfg, "abl_kaiming", reproduce.PROGRAMS)[0][1]
  )
  # the paper scale adds their n = 500 with their whole sweep, without a budget override
  paper = configs.get_config("paper")
  assert paper.sections.main[-1] == "main_mnist500"
  [(_, big)] = reproduction.jobs(paper, "main_mnist500", reproduce.PROGRAMS)
  assert "--config.base.victim.n_per_class=250" in big and not any("num_restarts" in a for a in big)
