"""The leakage map: the efficacy harness over victim variants, drawn as a map (quick preset)."""

import json

import pytest

from experiments import efficacy as binary
from experiments.configs import efficacy as configs
from recon_jax.errors import ConfigError
from recon_jax.studies import leakage_map, runner

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


def test_a_map_naming_a_variant_not_run_is_refused():
  cfg = configs.get_config("leakage_map_quick")
  with pytest.raises(ConfigError, match="theta_0_known=no"):
    runner.check_efficacy(cfg, ["default"], 1)
  assert leakage_map.variants_of(cfg.map) == ["default", "theta_0_known=no"]
