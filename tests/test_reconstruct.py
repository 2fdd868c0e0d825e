"""The main job end to end at tiny size, in-process (the subprocess runs live in
test_bad_input.py and test_resume.py), plus the attack on a small CNN."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import reconstruct_lib
from recon_jax import inits, loop, models
from recon_jax.attacks import kkt
from recon_jax.types import Target


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
  monkeypatch.setenv("RECON_JAX_CACHE", str(tmp_path / "cache"))


def _tiny(**kw):
  return dataclasses.replace(reconstruct_lib.Config(**reconstruct_lib.PRESETS["tiny"]), **kw)


def test_main_job_writes_its_report(tmp_path):
  m = reconstruct_lib.run(_tiny(), str(tmp_path))
  for name in ("config.json", "metrics.json", "reconstructions.npz", "reconstructions.png",
               "ssim_vs_margin.png", "restarts.tsv"):
    assert os.path.getsize(tmp_path / name) > 0, name
  saved = json.loads((tmp_path / "metrics.json").read_text())
  assert saved["n_train"] == 6 and 0 <= saved["recovered_strict"] <= 6
  assert set(saved["baselines"]) == {"mean_image", "heldout"}
  assert 0.0 <= saved["oracle_residual_rel"] <= 1.0
  z = np.load(tmp_path / "reconstructions.npz")
  assert z["candidates"].shape == (2, 12, 8, 8, 1)
  assert m["timing"]["compile_s"] > 0


def test_refinement_stage_runs_after_the_main_steps_and_resumes(tmp_path):
  a, b = tmp_path / "refined", tmp_path / "plain"
  a.mkdir()
  b.mkdir()
  # A refinement stage that changes nothing (same alpha, rates x 1) is 10 more plain steps.
  same = _tiny(alpha="25", refine_steps=10, refine_alpha=25.0, refine_lr_scale=1.0)
  reconstruct_lib.run(same, str(a))
  reconstruct_lib.run(_tiny(alpha="25", steps=30), str(b))
  np.testing.assert_allclose(np.load(a / "reconstructions.npz")["candidates"],
                             np.load(b / "reconstructions.npz")["candidates"], rtol=1e-6, atol=1e-7)
  # A sharper alpha at a lower rate does change the result.
  a = tmp_path / "sharp"
  a.mkdir()
  cfg = _tiny(alpha="25", refine_steps=10, refine_alpha=150.0)
  m = reconstruct_lib.run(cfg, str(a))
  z = np.load(a / "reconstructions.npz")
  assert not np.allclose(z["candidates"], np.load(b / "reconstructions.npz")["candidates"])
  # The saved state is at the end of the refinement stage: resuming runs nothing more.
  again = reconstruct_lib.run(cfg, str(a), resume_run=True)
  np.testing.assert_array_equal(np.load(a / "reconstructions.npz")["candidates"],
                                z["candidates"])
  assert again["recovered_strict"] == m["recovered_strict"]


def test_all_diverged_run_reports_nothing_recovered(tmp_path):
  m = reconstruct_lib.run(_tiny(lr_x="1e30"), str(tmp_path))
  assert m["recovered_strict"] == 0
  assert m["selection"]["n_diverged"] == 2
  assert m["evaluation"]["n_candidates"] == 0


@pytest.mark.parametrize("attack", ["inversion", "weights"])
def test_baseline_attacks_go_through_the_same_evaluation(tmp_path, attack):
  m = reconstruct_lib.run(_tiny(attack=attack), str(tmp_path))
  assert m["attack"] == attack and "recovered_strict" in m["evaluation"]


def test_multiclass_and_general_problems_run(tmp_path):
  v = dataclasses.replace(reconstruct_lib.PRESETS["tiny"]["victim"], loss="ce")
  (tmp_path / "ce").mkdir()
  (tmp_path / "mse").mkdir()
  m = reconstruct_lib.run(_tiny(victim=v, m=20), str(tmp_path / "ce"))
  assert m["problem"] == "multiclass" and m["m"] == 20
  v = dataclasses.replace(reconstruct_lib.PRESETS["tiny"]["victim"], loss="mse",
                          weight_decay=1e-3)
  m = reconstruct_lib.run(_tiny(victim=v), str(tmp_path / "mse"))
  assert m["problem"] == "general"


def test_kkt_attack_runs_on_a_small_cnn_and_lowers_stationarity():
  """Haim et al. found CNNs harder; users must at least be able to try."""
  module = models.build_model("cnn", widths=(4, 4), bias="first")
  apply_fn = models.make_apply_fn(module)
  key = jax.random.PRNGKey(0)
  params = models.init_params(module, key, (6, 6, 1), jnp.float64)
  m = 4
  labels = jnp.array([1.0, 1.0, -1.0, -1.0])
  target = Target(params, labels, jnp.zeros((6, 6, 1)), jnp.ones((6, 6, 1)))
  attack = kkt.kkt_attack(apply_fn, "binary")
  hp = {"lr_x": np.array([0.05]), "lr_lam": np.array([0.05]), "alpha": np.array([20.0]),
        "lam_min": np.array([0.1]), "sigma_x": np.array([0.5])}
  res = loop.run(attack, inits.gaussian(m, (6, 6, 1), jnp.float64), jax.random.split(key, 1),
                 hp, target, num_steps=100, chunk_steps=50, log=False)
  first, last = res.history[0]["stat_rel"][0], res.history[-1]["stat_rel"][0]
  assert not bool(res.state.diverged[0])
  assert np.isfinite(last) and last < first
