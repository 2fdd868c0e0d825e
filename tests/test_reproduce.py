"""reproduce.py --scale=quick end to end: RESULTS.md with every section, figures, claims."""
import json
import os

import pytest

from experiments import common, reproduce_lib


def test_reproduce_quick(tmp_path, monkeypatch):
  monkeypatch.setenv("RECON_JAX_CACHE", str(tmp_path / "cache"))  # no shared cache in CI
  out = reproduce_lib.run("quick", str(tmp_path / "w"))
  w = tmp_path / "w"
  md = (w / "RESULTS.md").read_text()
  for _, title in reproduce_lib.SECTIONS:
    assert f"## {title}" in md, title
  assert "Partial" not in md
  assert "FAILED" not in md
  assert "python -m experiments.reproduce --scale=quick" in md
  for fig in ("toy_2d/toy_2d.png", "main_lfw/reconstructions.png",
              "main_digits/ssim_vs_margin.png", "inversion_lfw/reconstructions.png",
              "weights_lfw/reconstructions.png", "multiclass_ce/reconstructions.png",
              "regression_mse_wd/reconstructions.png", "init_study/kkt_mlp_relu_partition.png",
              "partition_init_lfw/reconstructions.png"):
    assert (w / fig).is_file(), fig
    assert f"]({fig})" in md or fig.startswith("init_study/"), fig
  res = json.loads((w / "results.json").read_text())
  assert {c["exp"] for c in res["claims"]} == {"1", "2", "3", "4", "5", "6", "7"}
  assert all(c["reproduced"] in ("yes", "no", "not run", "n/a (new measurement)")
             for c in res["claims"])


def test_reproduce_rejects_bad_scale_and_missing_paper_data(tmp_path):
  with pytest.raises(common.UserError, match="--scale"):
    reproduce_lib.run("huge", str(tmp_path))
  with pytest.raises(common.UserError, match="--data_dir"):
    reproduce_lib.run("paper", str(tmp_path), data_dir=None)
  with pytest.raises(common.UserError, match="--data_dir"):
    reproduce_lib.run("paper", str(tmp_path), data_dir=str(tmp_path))
