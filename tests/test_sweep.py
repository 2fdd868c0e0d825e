"""recon_jax.engine.sweep: ranges as the user types them, random search, refinement stages."""

import numpy as np
import pytest

from recon_jax.engine import sweep
from recon_jax.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.mark.parametrize(
  "text, want",
  [
    ("0.5", (0.5, 0.5, "lin")),
    ("0.03:0.6", (0.03, 0.6, "log")),  # the default kind
    ("10:40:lin", (10.0, 40.0, "lin")),
    (" 1e-4 : 1e-2 : log ", (1e-4, 1e-2, "log")),
  ],
)
def test_parse_range(text, want):
  assert sweep.parse_range("lr_x", text, "log") == want


@pytest.mark.parametrize(
  "text", ["", "a:b", "1:2:cubic", "0:1:log", "2:1", "nan", "1:inf", "1:2:3:4"]
)
def test_parse_range_refuses_and_names_the_setting(text):
  with pytest.raises(ConfigError) as e:
    sweep.parse_range("lr_x", text, "log")
  assert e.value.argument == "lr_x" and "lr_x" in str(e.value)


def test_random_search_draws_inside_the_range_log_uniformly_and_is_seeded():
  ranges = {"lr_x": (1e-4, 1e-2, "log"), "alpha": (10.0, 40.0, "lin"), "fixed": (3.0, 3.0, "lin")}
  hp = sweep.random_search(0, 4000, ranges)
  assert set(hp) == set(ranges) and all(v.shape == (4000,) for v in hp.values())
  assert hp["lr_x"].min() >= 1e-4 and hp["lr_x"].max() <= 1e-2
  assert np.all(hp["fixed"] == 3.0)
  # log-uniform: half the draws below the geometric mean; linear: below the midpoint
  assert abs(np.mean(hp["lr_x"] < 1e-3) - 0.5) < 0.03
  assert abs(np.mean(hp["alpha"] < 25.0) - 0.5) < 0.03
  again = sweep.random_search(0, 4000, ranges)
  assert all(np.array_equal(hp[k], again[k]) for k in hp)
  assert not np.array_equal(hp["alpha"], sweep.random_search(1, 4000, ranges)["alpha"])
  with pytest.raises(ConfigError, match="num_restarts"):
    sweep.random_search(0, 0, ranges)


def test_stages_refine_sets_alpha_scales_rates_and_keeps_the_rest():
  hp = {"alpha": np.array([10.0, 20.0]), "lr_x": np.array([0.1, 0.2]), "lam_min": np.ones(2)}
  (s1, h1), (s2, h2) = sweep.stages(hp, 100, 30, refine_alpha=150.0, refine_lr_scale=0.5)
  assert (s1, s2) == (100, 30) and h1 is hp
  np.testing.assert_array_equal(h2["alpha"], [150.0, 150.0])
  np.testing.assert_allclose(h2["lr_x"], [0.05, 0.1])
  np.testing.assert_array_equal(h2["lam_min"], hp["lam_min"])
  np.testing.assert_array_equal(hp["alpha"], [10.0, 20.0])  # the input is not changed
  assert sweep.stages(hp, 100) == [(100, hp)]
  for bad in ({"refine_steps": -1}, {"refine_alpha": float("nan")}, {"refine_lr_scale": 0.0}):
    with pytest.raises(ConfigError, match=next(iter(bad))):
      sweep.stages(hp, 100, **{"refine_steps": 1, **bad})


def test_check_hparams():
  sweep.check_hparams({"lr_x": np.array([0.1, 1.0]), "lam_min": 0.0, "sigma_x": 0.0, "alpha": 10.0})
  for hp, match in [
    ({"lr_x": np.array([0.1, 0.0])}, "lr_x must be > 0"),
    ({"lr_lam": -1.0}, "lr_lam"),
    ({"alpha": 0.0}, "alpha"),
    ({"lam_min": -0.1}, "lam_min must be >= 0"),
    ({"sigma_x": np.array([-1.0])}, "sigma_x"),
  ]:
    with pytest.raises(ValueError, match=match):
      sweep.check_hparams(hp)
