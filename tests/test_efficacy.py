"""The efficacy harness: aggregation by hand, and a tiny configuration over 2 draws end to end."""

import json
import os

import numpy as np
import pytest
import scipy.stats

from experiments.configs import efficacy as configs
from recon_jax.engine import sweep
from recon_jax.errors import ConfigError
from recon_jax.io import workdir
from recon_jax.studies import efficacy, runner
from recon_jax.studies.efficacy_results import Interval, Results


def test_interval_by_hand():
  v = [1.0, 3.0, 2.0, 6.0, 3.0]
  iv = efficacy.interval(v)
  mean, sd = 3.0, np.sqrt(((np.array(v) - 3.0) ** 2).sum() / 4)
  half = scipy.stats.t.ppf(0.975, 4) * sd / np.sqrt(5)
  assert iv["mean"] == mean and iv["n"] == 5 and iv["per_draw"] == v
  np.testing.assert_allclose([iv["ci_low"], iv["ci_high"]], [mean - half, mean + half])
  one = efficacy.interval([4.0])
  assert one["mean"] == 4.0 and np.isnan(one["ci_low"])


def test_paired_differences_and_verdicts():
  a = [{"strict_pooled": x, "strict_selected": 0, "ssim_gt_0.4": 0} for x in (3, 4, 5, 4, 4)]
  b = [{"strict_pooled": x, "strict_selected": 0, "ssim_gt_0.4": 0} for x in (1, 1, 2, 1, 2)]
  d = efficacy.paired(a, b)
  assert d["strict_pooled"]["per_draw"] == [2, 3, 3, 3, 2]
  assert efficacy.verdict(Interval.of(d["strict_pooled"])) == "better"
  assert efficacy.verdict(Interval.of(efficacy.paired(b, a)["strict_pooled"])) == "worse"
  assert efficacy.verdict(Interval.of(d["strict_selected"])) == "no difference shown"  # all 0
  with pytest.raises(ValueError, match="same draws"):
    efficacy.paired(a, b[:2])


def test_an_interval_of_a_count_stays_in_its_range():
  """Two draws of 0 and 6 of 6 images: the t interval of the mean reaches below 0 and
  above 6; clipped to the range a count can take, it does not."""
  free = efficacy.interval([0, 6])
  assert free["ci_low"] < 0 and free["ci_high"] > 6
  clipped = efficacy.interval([0, 6], bounds=(0, 6))
  assert clipped["ci_low"] == 0 and clipped["ci_high"] == 6 and clipped["mean"] == 3
  per = [{"strict_pooled": 0}, {"strict_pooled": 6}]
  assert efficacy.aggregate(per, n_train=6)["strict_pooled"]["ci_low"] == 0
  diff = efficacy.paired(per, per[::-1], ["strict_pooled"], n_train=6)
  assert diff["strict_pooled"]["ci_low"] == -6
  # Seconds a draw never go below 0, whatever n (a slow first draw: 35 s, then 13 s)
  times = [{"time_s": 35.0}, {"time_s": 13.0}]
  assert efficacy.aggregate(times)["time_s"]["ci_low"] == 0.0
  assert efficacy.paired(times, times[::-1], ["time_s"])["time_s"]["ci_low"] < 0
  # An AUC or a TPR stays in [0, 1] (AUCs of 0.97-1.0: the free interval reaches past 1)
  aucs = [
    {"membership_weights_auc": a, "membership_weights_tpr": t} for a, t in ((0.97, 0.0), (1.0, 0.9))
  ]
  assert efficacy.interval([0.97, 1.0])["ci_high"] > 1
  agg = efficacy.aggregate(aucs)
  assert agg["membership_weights_auc"]["ci_high"] == 1.0
  assert agg["membership_weights_tpr"]["ci_low"] == 0.0


def test_anneal_rises_geometrically_to_the_end_value():
  hp = {"alpha": np.array([10.0, 20.0], np.float32), "lr_x": np.array([0.1, 0.2], np.float32)}
  stages = sweep.anneal(hp, steps=10, alpha_end=160.0, num_stages=3)
  assert [s for s, _ in stages] == [3, 3, 4]
  np.testing.assert_allclose(stages[0][1]["alpha"], [10.0, 20.0])
  np.testing.assert_allclose(stages[1][1]["alpha"], [40.0, np.sqrt(20.0 * 160.0)], rtol=1e-6)
  np.testing.assert_allclose(stages[2][1]["alpha"], [160.0, 160.0], rtol=1e-6)
  np.testing.assert_array_equal(stages[2][1]["lr_x"], hp["lr_x"])
  with pytest.raises(ValueError, match="anneal_stages"):
    sweep.anneal(hp, steps=10, alpha_end=160.0, num_stages=1)


@pytest.mark.slow
def test_harness_over_two_draws_aggregates_what_each_draw_reported(tmp_path):
  cfg = configs.get_config("tiny")
  cfg.base.evaluation.identify = False  # covered by test_identification; slow at this size
  cfg.variants["other_sweep"] = {"search": {"seed": 1}}  # another restart sweep: same programs
  out = runner.run_efficacy(cfg, str(tmp_path), ["default", "other_sweep"], draws=2, first_draw=3)
  assert out.draws == (3, 4)
  for v in ("default", "other_sweep"):
    per = []
    for draw in (3, 4):
      m = json.loads((tmp_path / v / f"draw_{draw}" / "metrics.json").read_text())
      stored = json.loads((tmp_path / v / f"draw_{draw}" / "config.json").read_text())["config"]
      assert stored["victim"]["data_seed"] == draw and stored["victim"]["seed"] == draw
      per.append(m)
    agg = out.variants[v]
    assert list(agg["strict_pooled"].per_draw) == [m["recovered_strict"] for m in per]
    assert list(agg["strict_selected"].per_draw) == [
      m["selection"]["best_by_loss_recovered_strict"] for m in per
    ]
    n = per[0]["n_train"]
    want = efficacy.interval([m["n_ssim_gt_0.4"] for m in per], bounds=(0, n))
    assert agg["ssim_gt_0.4"] == Interval.of(want)
    for key in ("strict_pooled", "ssim_gt_0.4"):  # a count's interval stays in [0, n]
      assert 0 <= agg[key].ci_low <= agg[key].ci_high <= n
  # metrics.json is the report written from its type, and reads back into it
  written = json.loads((tmp_path / "metrics.json").read_text())
  assert written == json.loads(json.dumps(workdir.jsonable(out.to_dict())))
  assert written["paired_vs_default"]["other_sweep"]["strict_pooled"]["verdict"]
  other = json.loads((tmp_path / "other_sweep" / "draw_3" / "config.json").read_text())
  assert other["config"]["search"]["seed"] == 1
  assert "other_sweep" in out.paired
  assert "| default |" in (tmp_path / "results.md").read_text()
  assert (tmp_path / "efficacy.png").stat().st_size > 0
  # --resume keeps the finished draws (same numbers, nothing re-run).
  again = runner.run_efficacy(
    cfg, str(tmp_path), ["default", "other_sweep"], draws=2, first_draw=3, resume=True
  )
  same = lambda a: json.dumps(a, sort_keys=True)  # noqa: E731  (NaN, a number no draw had, too)
  assert same(again.to_dict()["variants"]) == same(out.to_dict()["variants"])
  # ... but not with other settings: the finished draws were computed with the old ones.
  before = (tmp_path / "config.json").read_bytes()
  cfg.base.search.seed = 7
  with pytest.raises(ConfigError, match="base.search.seed"):
    runner.run_efficacy(
      cfg, str(tmp_path), ["default", "other_sweep"], draws=2, first_draw=3, resume=True
    )
  assert (tmp_path / "config.json").read_bytes() == before


def test_unknown_variant_is_refused(tmp_path):
  with pytest.raises(ValueError, match="unknown variant"):
    runner.run_efficacy(configs.get_config("tiny"), str(tmp_path), ["nope"], draws=1, first_draw=0)


@pytest.mark.parametrize(
  "variants, draws, first, setting",
  [
    ([], 1, 0, "variants"),
    (["default"], 10**12, 0, "draws"),
    (["default"], 0, 0, "draws"),
    (["default"], 1, -1, "first_draw"),
  ],
)
def test_efficacy_settings_are_refused_before_any_work(tmp_path, variants, draws, first, setting):
  with pytest.raises(ConfigError) as e:
    runner.check_efficacy(configs.get_config("tiny"), variants, draws, first)
  assert e.value.argument == setting
  assert os.listdir(tmp_path) == []


def test_known_init_target_fits_the_change_at_the_linearisation_point():
  import jax

  from recon_jax.types import Target
  from recon_jax.victims import targets

  rng = np.random.default_rng(0)
  init = {"params": {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}}
  star = jax.tree_util.tree_map(lambda a: a + rng.normal(size=a.shape), init)
  target = Target(star, np.ones(2), np.zeros(()), np.ones(()))
  for s in (0.0, 0.5, 1.0):
    seen = targets.known_init_target(target, init, s)
    for a, b, c, p, r in zip(
      *(jax.tree_util.tree_leaves(t) for t in (init, star, seen.params, seen.params, seen.fit))
    ):
      np.testing.assert_allclose(np.asarray(r), b - a)  # the reference: theta* - theta_0
      np.testing.assert_allclose(np.asarray(c), a + s * (b - a))  # gradients taken there
  with pytest.raises(ConfigError, match="linearize"):
    targets.known_init_target(target, init, 1.5)


def test_a_number_added_to_the_table_reaches_every_output(monkeypatch):
  """One row of efficacy.NUMBERS (here of a number the typed report reads and the harness
  did not): the per-draw numbers, the intervals, the paired differences, results.md and
  RESULTS.md's table all carry it, with no other edit."""
  from reproduction import results_md, run_results

  extra = efficacy.Number(
    "spread", lambda m: m.victim.grad_norm_rel, "spread of it", digits=2, paired=True, summary=True
  )
  monkeypatch.setattr(efficacy, "NUMBERS", efficacy.NUMBERS + (extra,))
  report = {
    "recovered_strict": 1,
    "n_ssim_gt_0.4": 3,
    "baseline_mean_image_recovered_strict": 0,
    "baseline_mean_image_n_ssim_gt_0.4": 1,
    "oracle_residual_rel": 0.1,
    "identifiability": {"ratio": 2.0, "family": {"confirmed": False}},
    "timing": {"total_s": 1.0},
  }
  a = [efficacy.draw_numbers(dict(report, victim={"grad_norm_rel": s})) for s in (1.0, 2.0, 4.0)]
  b = [efficacy.draw_numbers(dict(report, victim={"grad_norm_rel": 0.5})) for _ in range(3)]
  assert [d["spread"] for d in a] == [1.0, 2.0, 4.0]
  assert [d["truth_fits_best"] for d in a] == [1.0] * 3
  agg = {"x": efficacy.aggregate(a), "y": efficacy.aggregate(b)}
  np.testing.assert_allclose(agg["x"]["spread"]["mean"], 7 / 3)
  diff = {k: Interval.of(d) for k, d in efficacy.paired(a, b).items()}
  diff = {k: iv._replace(verdict=efficacy.verdict(iv)) for k, iv in diff.items()}
  assert diff["spread"].per_draw == (0.5, 1.5, 3.5)
  typed = {v: {k: Interval.of(iv) for k, iv in of_v.items()} for v, of_v in agg.items()}
  out = Results((0, 1, 2), 20, typed, paired={"y": diff})
  md = efficacy.efficacy_table(out, ["x", "y"])
  assert "| spread of it |" in md and "| 2.33 [" in md
  head = md.splitlines()[2].strip("| ").split(" | ")
  assert head.index("spread of it") > head.index("strict pooled")
  assert "draws where the truth fits best" in md and "| 3 of 3 |" in md
  default = out._replace(variants={"default": typed["x"]}, paired=None)
  run = {"binary": "efficacy", "results": [run_results.Harness(default, "lfw")]}
  row = results_md.table_rows("r", run)[0].split(" | ")
  assert len(row) == len(results_md.heads()["efficacy"].split(" | "))
  assert row[-1].startswith("2.33") and results_md.heads()["efficacy"].endswith("spread of it")


def test_the_harness_report_reads_back_as_written_and_a_damaged_one_in_one_line(tmp_path):
  """metrics.json is written from the typed report and read back into it once, checked:
  the same numbers (NaN: a number no draw had), each paired difference with its verdict;
  a paired block or a variant's n of another shape is refused naming the key."""
  from recon_jax.errors import ResultFileError
  from recon_jax.studies import efficacy_results

  a = [{"strict_pooled": x, "time_s": 2.0} for x in (3, 4, 5)]
  b = [{"strict_pooled": x, "time_s": 1.0} for x in (1, 1, 2)]
  out = runner._results([0, 1, 2], {"x": a, "y": b}, {"x": 6, "y": 6}, ["x", "y"], 0.95)
  path = workdir.write_json(str(tmp_path), "metrics.json", out.to_dict())
  back = efficacy_results.read_results(path)
  assert back.reference == "x" and back.draws == (0, 1, 2) and back.n_train_of == {"x": 6, "y": 6}
  assert back.paired["y"]["strict_pooled"].verdict == "worse"
  assert back.variants["x"]["strict_pooled"].per_draw == (3.0, 4.0, 5.0)
  assert np.isnan(back.variants["x"]["ssim_gt_0.4"].mean)  # no draw had it
  written = json.loads((tmp_path / "metrics.json").read_text())
  assert json.loads(json.dumps(workdir.jsonable(back.to_dict()))) == written
  assert efficacy.efficacy_table(back, ["x", "y"]) == efficacy.efficacy_table(out, ["x", "y"])
  for key, value, said in (
    (
      "paired_vs_x",
      {"y": {"strict_pooled": dict(written["variants"]["x"]["strict_pooled"], verdict=3)}},
      "paired_vs_x.y.strict_pooled.verdict holds 3, not a string",
    ),
    ("n_train_of", {"x": -1}, 'n_train_of holds {"x": -1}, not an object of counts'),
  ):
    with pytest.raises(ResultFileError) as e:
      efficacy_results.results_of(dict(written, **{key: value}), path)
    assert str(e.value) == f"{path}: {said}"
