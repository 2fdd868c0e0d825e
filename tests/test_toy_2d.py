"""The 2-D toy binary's library end to end at tiny size (Haim et al. §4 pipeline)."""
import dataclasses
import json

import numpy as np
import pytest

from experiments import toy_2d_lib


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
  monkeypatch.setenv("RECON_JAX_CACHE", str(tmp_path / "cache"))


def test_toy_pipeline_filters_dedups_and_reports(tmp_path):
  cfg = dataclasses.replace(toy_2d_lib.Config(), n_train=4, width=16, victim_epochs=300, m=8,
                            num_restarts=2, steps=40, chunk_steps=20)
  out = toy_2d_lib.run(cfg, str(tmp_path))
  saved = json.loads((tmp_path / "metrics.json").read_text())
  assert saved["n_train"] == 4 and 0 <= saved["recovered"] <= 4
  assert 0.0 <= saved["oracle_residual_rel"] <= 1.0 + 1e-9
  for row in saved["per_restart"]:
    # the lambda filter and de-duplication only ever remove candidates
    assert row["diverged"] or 0 < row["n_kept"] <= cfg.m
  assert (tmp_path / "toy_2d.png").stat().st_size > 0
  z = np.load(tmp_path / "reconstructions.npz")
  assert z["x"].shape == (2, 8, 2) and z["x_train"].shape == (4, 2)
  assert out["recovered_pooled"] >= out["recovered"]  # pooled kept set contains the selected one


def test_odd_sizes_are_refused(tmp_path):
  with pytest.raises(ValueError, match="--n_train"):
    toy_2d_lib.run(dataclasses.replace(toy_2d_lib.Config(), n_train=3), str(tmp_path))
  with pytest.raises(ValueError, match="--m"):
    toy_2d_lib.run(dataclasses.replace(toy_2d_lib.Config(), m=7), str(tmp_path))
