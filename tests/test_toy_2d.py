"""The 2-D toy (Haim et al. §4, Fig. 2): its point-cloud scoring, its binary, its result.

Everything runs in-process except one command-line check of the flags.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.configs import toy_2d as toy_config
from recon_jax import cli
from recon_jax.errors import ConfigError
from recon_jax.eval import points
from recon_jax.studies import runner, toy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _npz(path):
  """The arrays of an npz file, read and closed (an open NpzFile warns when collected)."""
  with np.load(path) as z:
    return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- eval.points

TRAIN = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
DUP = np.array([0.01, 0.0])  # closer than the de-duplication radius 0.03


def _planted():
  """Three restarts over TRAIN whose scores are known by construction.

  Restart 0 (loss 2): exactly on t0, t1, t2, one duplicate of each of t0 and t1,
  two far points with a tiny lambda, and t3 with a tiny lambda: after the lambda
  filter 5, after de-duplication 3, recovered 3 (4 unfiltered).
  Restart 1 (loss 1, the attacker's pick): t3 and its duplicate, two far points
  with a large lambda, four far points with lambda 0: after the filter 4, kept
  3, recovered 1.
  Restart 2: diverged, although its candidates sit exactly on TRAIN.
  """
  far = np.array([[3.0, 3.0], [-3.0, 3.0], [3.0, -3.0], [-3.0, -3.0], [5.0, 0.0], [0.0, 5.0]])
  t = TRAIN
  x = np.stack(
    [
      np.stack([t[0], t[1], t[2], t[0] + DUP, t[1] + DUP, far[0], far[1], t[3]]),
      np.stack([t[3], t[3] + DUP, far[0], far[1], far[2], far[3], far[4], far[5]]),
      np.concatenate([t, t]),
    ]
  )
  lam = np.array(
    [[1, 1, 1, 1, 1, 0.02, 0.02, 0.01], [1, 1, 0.5, 0.5, 0, 0, 0, 0], [1] * 8], np.float64
  )
  return x, lam, np.array([2.0, 1.0, np.nan]), np.array([False, False, True])


def test_planted_point_clouds_give_the_known_counts():
  x, lam, loss, diverged = _planted()
  out = points.score_point_clouds(
    x, lam, loss, diverged, TRAIN, lam_filter_frac=0.1, dedup_radius=0.03, tol=0.05, seed=0
  )
  rows = out["per_restart"]
  assert [r["n_after_filter"] for r in rows] == [5, 4, 0]
  assert [r["n_kept"] for r in rows] == [3, 3, 0]
  assert [r["recovered"] for r in rows] == [3, 1, 0]
  assert rows[0]["recovered_unfiltered"] == 4 and rows[1]["recovered_unfiltered"] == 1
  assert rows[0]["median_distance"] == pytest.approx(0.0, abs=1e-12)
  assert rows[2]["diverged"] and rows[2]["final_loss"] is None
  # the attacker's pick is the lowest loss, not the most points recovered
  assert out["selected_restart"] == 1 and out["recovered"] == 1
  assert out["best_restart"] == 0 and out["recovered_best_restart"] == 3
  # pooled: t0..t2 from restart 0, t3 from restart 1; the diverged restart adds nothing
  assert out["recovered_pooled"] == 4 and out["n_diverged"] == 1 and out["n_train"] == 4
  json.dumps(out, allow_nan=False)  # JSON-able as it is
  masks = points.kept_masks(x, lam, diverged, lam_filter_frac=0.1, dedup_radius=0.03, seed=0)
  assert points.score_point_clouds(x, lam, loss, diverged, TRAIN, masks=masks) == out


def test_kept_masks_only_remove_candidates():
  x, lam, _, diverged = _planted()
  after_filter, kept = points.kept_masks(
    x, lam, diverged, lam_filter_frac=0.1, dedup_radius=0.03, seed=3
  )
  assert after_filter.shape == kept.shape == (3, 8)
  assert not np.any(kept & ~after_filter)
  assert not after_filter[2].any()  # a diverged restart keeps nothing
  np.testing.assert_array_equal(after_filter[0], [1, 1, 1, 1, 1, 0, 0, 0])
  # whichever of a pair of duplicates the random order keeps, one of each pair stays
  assert kept[0, [0, 3]].sum() == 1 and kept[0, [1, 4]].sum() == 1 and kept[0, 2]
  # no filter and no de-duplication: everything of a finite restart stays
  f0, k0 = points.kept_masks(x, lam, diverged, lam_filter_frac=0.0, dedup_radius=0.0)
  assert f0[:2].all() and k0[:2].all()


def test_no_restart_left_reports_nothing_recovered():
  x, lam, _, _ = _planted()
  out = points.score_point_clouds(x, lam, np.full(3, np.nan), np.ones(3, bool), TRAIN)
  assert out["recovered"] == 0 and out["recovered_pooled"] == 0
  assert out["selected_restart"] is None and out["median_distance"] is None
  assert points.recovery(np.zeros((0, 2)), TRAIN) == {"recovered": 0, "median_distance": None}


def test_points_scoring_refuses_mismatched_arrays():
  x, lam, loss, diverged = _planted()
  with pytest.raises(ConfigError, match="lambdas"):
    points.score_point_clouds(x, lam[:, :4], loss, diverged, TRAIN)
  with pytest.raises(ConfigError, match="x_train"):
    points.score_point_clouds(x, lam, loss, diverged, TRAIN[:, :1])
  with pytest.raises(ConfigError, match="tol"):
    points.score_point_clouds(x, lam, loss, diverged, TRAIN, tol=0.0)


# ----------------------------------------------------------------------------- the binary


def test_presets_are_valid_and_named():
  for preset in toy_config.PRESETS:
    toy.validate(toy_config.get_config(preset))
  small = toy_config.get_config("small")
  assert small.width == 200 and small.num_restarts == 8
  assert toy_config.get_config().width == 1000
  with pytest.raises(KeyError, match="quick"):
    toy_config.get_config("nope")


@pytest.mark.slow
def test_toy_pipeline_writes_its_report_and_resumes(tmp_path):
  cfg = toy_config.get_config("quick")
  out = runner.run_toy(cfg, str(tmp_path))
  for name in ("config.json", "metrics.json", "reconstructions.npz", "toy_2d.png"):
    assert os.path.getsize(tmp_path / name) > 0, name
  saved = json.loads((tmp_path / "metrics.json").read_text())
  assert json.loads((tmp_path / "config.json").read_text())["config"]["n_train"] == 4
  for key in (
    "recovered",
    "recovered_best_restart",
    "recovered_pooled",
    "oracle_residual_rel",
    "kink_fraction",
    "median_distance",
    "selected_restart",
    "per_restart",
    "timing",
    "n_train",
    "victim",
  ):
    assert key in saved, key
  assert saved["n_train"] == 4 and 0 <= saved["recovered"] <= 4
  assert 0.0 <= saved["oracle_residual_rel"] <= 1.0 + 1e-9
  for row in saved["per_restart"]:
    # the lambda filter and de-duplication only ever remove candidates
    assert row["diverged"] or 0 < row["n_kept"] <= row["n_after_filter"] <= cfg.m
  z = _npz(tmp_path / "reconstructions.npz")
  assert z["x"].shape == (2, 8, 2) and z["x_train"].shape == (4, 2)
  assert not np.any(z["kept"] & ~z["after_filter"])
  # the pooled kept set contains the selected restart's, the best restart is at least as good
  assert out["recovered_pooled"] >= out["recovered_best_restart"] >= out["recovered"]
  # resuming a finished run takes no more steps and reports the same
  again = runner.run_toy(cfg, str(tmp_path), resume=True)
  np.testing.assert_array_equal(_npz(tmp_path / "reconstructions.npz")["x"], z["x"])
  assert again["per_restart"] == out["per_restart"]


@pytest.mark.slow
def test_small_toy_run_recovers_most_points(tmp_path):
  """Haim §4 at reduced size (10 points, width 100, 2 restarts): most points come back.

  The paper preset's recipe (victim with biases from PyTorch's init, plain GD;
  coarse alpha then the sharp refinement stage).  Seeds 0-2 recover 7, 9 and 7
  of 10 within 0.05; the random initialisation recovers none.
  """
  cfg = toy_config.get_config("paper")
  cfg.update(
    {"n_train": 10, "width": 100, "m": 40, "num_restarts": 2, "steps": 3000, "refine_steps": 2000}
  )
  out = runner.run_toy(cfg, str(tmp_path))
  assert out["recovered"] >= 6, out["per_restart"]
  assert out["median_distance"] < 0.05
  assert out["at_init"]["recovered"] <= 1  # the starting points were not already there
  z = _npz(tmp_path / "reconstructions.npz")
  r = out["selected_restart"]
  d0 = np.sqrt(((z["x_train"][:, None] - z["x0"][r][None]) ** 2).sum(-1)).min(1)
  assert np.sum(d0 < cfg.tol) <= 1
  assert 0.0 <= out["kink_fraction"] <= 1.0


@pytest.mark.parametrize(
  "field, value",
  [
    ("n_train", 3),
    ("m", 7),
    ("refine_steps", -1),
    ("lr_x", "1:0.1"),
    ("victim_init", "normal"),
    ("victim_lr", 0.0),  # the victim's recipe's own rules (recon_jax.victims.recipe)
    ("victim_bias", "sometimes"),
    ("theta_norm", 1.0),
    ("tol", 0.0),
    ("steps", 0),
    ("lam_filter_frac", 2.0),
  ],
)
def test_bad_settings_are_refused_before_any_work(tmp_path, capsys, monkeypatch, field, value):
  monkeypatch.setenv("RECON_JAX_CACHE", str(tmp_path / "cache"))
  cfg = toy_config.get_config("quick")
  cfg[field] = value
  workdir = tmp_path / "out"
  workdir.mkdir()
  (workdir / "config.json").write_text('{"config": {"finished": true}}')  # a finished run
  (workdir / "metrics.json").write_text('{"recovered": 17}')
  before = {p.name: p.read_bytes() for p in workdir.iterdir()}
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: runner.run_toy(cfg, str(workdir)), cfg)
  assert e.value.code == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and f"--config.{field}" in err and "\n" not in err, err
  assert {p.name: p.read_bytes() for p in workdir.iterdir()} == before  # nothing written
  assert not os.path.exists(tmp_path / "cache")  # no victim trained


@pytest.mark.slow
def test_command_line_names_the_setting(tmp_path):
  workdir = tmp_path / "out"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "-m", "experiments.toy_2d", "--config.n_train=3", f"--workdir={workdir}"]
  proc = subprocess.run(
    cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
  )
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: --config.n_train must be even and >= 2, got 3."
  )
  assert not workdir.exists()
