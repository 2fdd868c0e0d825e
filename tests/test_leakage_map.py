"""The leakage map: the efficacy harness over victim variants, drawn as a map (quick preset)."""

import json

import pytest

from experiments import efficacy as binary
from experiments.configs import efficacy as configs
from recon_jax.errors import ConfigError
from recon_jax.studies import leakage_map, runner
from recon_jax.studies.efficacy_results import Interval, Results

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.mark.slow
def test_the_quick_map_runs_and_tells_the_two_sides_apart(tmp_path):
  """One command, the quick preset: a model fine-tuned from a theta_0 the attacker knows
  leaks its training images; the same model attacked without theta_0 does not."""
  cfg = configs.get_config("leakage_map_quick")
  binary.job(cfg, str(tmp_path), draws=1)
  out = json.loads((tmp_path / "metrics.json").read_text())
  cells = {(c["axis"], c["label"]): c for c in out["map"]}
  known, unknown = cells[("theta_0 known", "yes")], cells[("theta_0 known", "no")]
  assert known["strict_pooled"]["mean"] >= 5 and unknown["strict_pooled"]["mean"] <= 1
  table = (tmp_path / "leakage_map.md").read_text()
  assert "| theta_0 known | yes | 6 |" in table and "verdict" in table
  assert (tmp_path / "leakage_map.png").stat().st_size > 0
  # membership beside the reconstruction: the change's fit with theta_0, theta*'s without
  assert known["membership_weights_auc"]["mean"] > 0.5
  assert unknown["membership_weights_auc"]["mean"] == unknown["membership_weights_auc"]["mean"]
  assert "membership AUC (weights)" in table


def test_a_map_naming_a_variant_not_run_is_refused():
  cfg = configs.get_config("leakage_map_quick")
  with pytest.raises(ConfigError, match="theta_0_known=no"):
    runner.check_efficacy(cfg, ["default"], 1)
  assert leakage_map.variants_of(cfg.map) == ["default", "theta_0_known=no"]


def test_cells_with_different_draw_counts_say_how_many_each_has():
  from recon_jax.studies import efficacy

  def agg(pooled, fits):
    draws = [
      dict(
        strict_pooled=p, strict_selected=p - 1, log10_identifiability_ratio=0.3, truth_fits_best=f
      )
      for p, f in zip(pooled, fits)
    ]
    return {k: Interval.of(iv) for k, iv in efficacy.aggregate(draws, 0.95, 20).items()}

  variants = {"default": agg([17, 16, 18], [1, 1, 1]), "wide": agg([19, 18], [1, 0])}
  out = Results((0, 1, 2), 20, variants)
  spec = (("width", (("2048", "default"), ("4096", "wide"))),)
  table = leakage_map.table(out, spec, {"default": 20, "wide": 20})
  assert "| width | 2048 | 20 | 3 | 17.0 [" in table
  assert "| width | 4096 | 20 | 2 | 18.5 [" in table and "truth fits best 1/2" in table
  assert leakage_map._draws(out) == "2-3 draws (the verdict counts each)"
  assert table.count(" | - | - / - | ") == 2  # membership not measured in these draws


def test_a_cell_the_attack_declined_says_so_not_that_the_truth_fits_best():
  """An Adam model: the cone reads no candidate, so there is no ratio to read a verdict off."""
  from recon_jax.studies import efficacy

  declined = {
    "recovered_strict": 0,
    "n_ssim_gt_0.4": 0,
    "baseline_mean_image_recovered_strict": 0,
    "baseline_mean_image_n_ssim_gt_0.4": 0,
    "oracle_residual_rel": 0.96,
    "identifiability": {"ratio": 1.04, "per_restart_residual": [0.9]},
    "regime": {"cone": {"cannot": "the change spans 625 of 625 input directions"}},
    "timing": {"total_s": 20.0},
  }
  draw = efficacy.draw_numbers(declined)
  assert draw["declined"] == 1.0 and draw["identifiability_ratio"] is None
  assert draw["truth_fits_best"] is None
  agg = efficacy.aggregate([draw, draw], 0.95, 20)
  assert leakage_map._verdict({k: Interval.of(iv) for k, iv in agg.items()}) == (
    "attack declined on 2/2"
  )


def test_the_cone_map_changes_one_recipe_at_a_time_and_every_cell_is_a_valid_job():
  """leakage_map_cone: the recipes a model owner uses, each a variant of the finetune
  preset (the cone) that the job accepts as it is."""
  cfg = configs.get_config("leakage_map_cone")
  assert cfg.base.attack == "cone"
  names = leakage_map.variants_of(cfg.map)
  assert {"default", "optimizer=adam_1e-3", "weight_decay=1e-2", "theta_0=pretrained"} <= set(names)
  runner.check_efficacy(cfg, names, 3)  # every cell's config passes the job's own checks
