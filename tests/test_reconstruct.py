"""The main job end to end at tiny size, in-process, through the binary's own ``run``."""
import json
import os

import numpy as np
import pytest
from flax import serialization

from experiments import reconstruct
from experiments.configs import reconstruct as configs


def _tiny(**kw):
  cfg = configs.get_config("tiny")
  victim = kw.pop("victim", {})
  cfg.update(kw)
  cfg.victim.update(victim)
  return cfg


def _npz(path):
  with np.load(path) as z:
    return {k: z[k] for k in z.files}


def test_main_job_writes_its_report(tmp_path):
  m = reconstruct.run(_tiny(), str(tmp_path))
  for name in ("config.json", "metrics.json", "reconstructions.npz", "reconstructions.png",
               "ssim_vs_margin.png", "restarts.tsv", "state.msgpack"):
    assert os.path.getsize(tmp_path / name) > 0, name
  saved = json.loads((tmp_path / "metrics.json").read_text())
  assert saved["n_train"] == 6 and 0 <= saved["recovered_strict"] <= 6
  assert set(saved["baselines"]) == {"mean_image", "heldout"}
  assert 0.0 <= saved["oracle_residual_rel"] <= 1.0
  assert saved["victim_source"] in ("trained", "cache")
  assert _npz(tmp_path / "reconstructions.npz")["candidates"].shape == (2, 12, 8, 8, 1)
  assert m["timing"]["compile_s"] > 0
  stored = json.loads((tmp_path / "config.json").read_text())["config"]
  assert stored["steps"] == 20 and stored["victim"]["widths"] == [32, 32]
  assert (tmp_path / "restarts.tsv").read_text().count("\n") == 3  # header + 2 restarts


def test_refinement_stage_runs_after_the_main_steps_and_resumes(tmp_path):
  a, b, c = tmp_path / "refined", tmp_path / "plain", tmp_path / "sharp"
  for d in (a, b, c):
    d.mkdir()
  # A refinement stage that changes nothing (same alpha, rates x 1) is 10 more plain steps.
  reconstruct.run(_tiny(alpha="25", refine_steps=10, refine_alpha=25.0, refine_lr_scale=1.0),
                  str(a))
  reconstruct.run(_tiny(alpha="25", steps=30), str(b))
  plain = _npz(b / "reconstructions.npz")["candidates"]
  np.testing.assert_allclose(_npz(a / "reconstructions.npz")["candidates"], plain, rtol=1e-6,
                             atol=1e-7)
  # A sharper alpha at a lower rate does change the result.
  cfg = _tiny(alpha="25", refine_steps=10, refine_alpha=150.0)
  m = reconstruct.run(cfg, str(c))
  sharp = _npz(c / "reconstructions.npz")["candidates"]
  assert not np.allclose(sharp, plain)
  # The saved state is at the end of the refinement stage: resuming runs nothing more.
  again = reconstruct.run(cfg, str(c), resume=True)
  np.testing.assert_array_equal(_npz(c / "reconstructions.npz")["candidates"], sharp)
  assert again["recovered_strict"] == m["recovered_strict"]


def test_all_diverged_run_reports_nothing_recovered(tmp_path):
  m = reconstruct.run(_tiny(lr_x="1e30"), str(tmp_path))
  assert m["recovered_strict"] == 0
  assert m["selection"]["n_diverged"] == 2
  assert m["evaluation"]["n_candidates"] == 0


@pytest.mark.parametrize("attack", ["inversion", "weights"])
def test_baseline_attacks_go_through_the_same_evaluation(tmp_path, attack):
  m = reconstruct.run(_tiny(attack=attack), str(tmp_path))
  assert m["attack"] == attack and "recovered_strict" in m["evaluation"]


def test_multiclass_victim_runs_with_decoreco_margins(tmp_path):
  m = reconstruct.run(_tiny(victim=dict(loss="ce"), m=20, steps=10), str(tmp_path))
  assert m["problem"] == "multiclass" and m["m"] == 20


def test_general_problem_on_a_multiclass_victim_has_one_multiplier_per_output(tmp_path):
  """problem=general on a CE victim: lambda is [m, C] with C the victim's output width.

  An earlier version derived the width from the problem (1 unless multiclass),
  so lambda was [m, 1] and broadcast silently against the 10 outputs.
  """
  m = reconstruct.run(_tiny(victim=dict(loss="ce"), problem="general", m=20, steps=10),
                      str(tmp_path))
  assert m["problem"] == "general"
  with open(tmp_path / "state.msgpack", "rb") as f:
    blob = serialization.msgpack_restore(f.read())
  assert np.asarray(blob["state"]["run"]["inner"]["lam"]).shape == (2, 20, 10)


def test_regression_victim_with_weight_decay_runs(tmp_path):
  m = reconstruct.run(_tiny(victim=dict(loss="mse", weight_decay=1e-3), steps=10), str(tmp_path))
  assert m["problem"] == "general"


def test_a_workdir_written_before_the_config_files_still_resumes(tmp_path):
  """config.json of the dataclass era: no x64/matmul_precision/save_every/distributed keys,
  unset paths as null. Resuming it must be accepted and change nothing."""
  cfg = _tiny()
  reconstruct.run(cfg, str(tmp_path))
  before = _npz(tmp_path / "reconstructions.npz")["candidates"]
  stored = json.loads((tmp_path / "config.json").read_text())
  for k in ("x64", "matmul_precision", "save_every", "distributed"):
    stored["config"].pop(k)
  stored["config"]["data_dir"] = None
  stored.update(problem="binary", m=12)
  (tmp_path / "config.json").write_text(json.dumps(stored))
  reconstruct.run(_tiny(), str(tmp_path), resume=True)
  np.testing.assert_array_equal(_npz(tmp_path / "reconstructions.npz")["candidates"], before)
  with pytest.raises(ValueError, match="seed"):
    reconstruct.run(_tiny(seed=3), str(tmp_path), resume=True)
