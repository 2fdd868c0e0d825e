"""The initialisation study: nearest-neighbour evaluation, findings, figures, a tiny run.

The tiny study run (:func:`tiny_run`) is computed once per test session and
shared with tests/test_init_study_resume.py, which compares a resumed run with it.
"""

import atexit
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

from conftest import fast_compile
import numpy as np
import pytest

from experiments.configs import init_study as configs
from recon_jax import data
from recon_jax.errors import ConfigError
from recon_jax.eval import nearest
from recon_jax.studies import init_study, init_study_figures, init_study_settings, runner

FINDINGS = {
  "random_to_noise",
  "ground_truth_recovered",
  "partition_returns_init",
  "lambda1_below_half_nearer_partition",
}
SUB_RUNS = ("bilevel_affine", "kkt_mlp_relu")  # the tiny preset's parts


@contextlib.contextmanager
def victim_cache(path):
  """RECON_JAX_CACHE pointed at ``path`` (victims trained once per test session)."""
  old = os.environ.get("RECON_JAX_CACHE")
  os.environ["RECON_JAX_CACHE"] = path
  try:
    yield
  finally:
    if old is None:
      del os.environ["RECON_JAX_CACHE"]
    else:
      os.environ["RECON_JAX_CACHE"] = old


@functools.lru_cache(maxsize=None)
def _session_dir() -> str:
  root = tempfile.mkdtemp(prefix="test_init_study_")
  atexit.register(shutil.rmtree, root, ignore_errors=True)
  return root


def run_tiny(workdir: str, *, resume: bool = False) -> dict:
  """The ``tiny`` preset run in-process, its victims cached in this session's cache."""
  cfg = configs.get_config("tiny")
  with fast_compile(), victim_cache(os.path.join(_session_dir(), "cache")):
    return runner.run_init_study(cfg, workdir, resume=resume)


@functools.lru_cache(maxsize=None)
def tiny_run() -> str:
  """Workdir of one uninterrupted tiny study (run once per session)."""
  workdir = os.path.join(_session_dir(), "reference")
  run_tiny(workdir)
  return workdir


def _json(path):
  with open(path) as f:
    return json.load(f)


# ----------------------------------------------------------------------------- nearest


def _images(n, seed):
  return np.random.default_rng(seed).uniform(size=(n, 8, 8, 1))


def test_nearest_finds_planted_copies():
  ref = _images(5, 0)
  x = ref[[3, 0]] + np.array([0.0, 0.01])[:, None, None, None]
  d, j = nearest.nearest_l2(x, ref)
  np.testing.assert_array_equal(j, [3, 0])
  assert d[0] == 0.0  # an exact copy is at distance 0 (no cancellation error)
  np.testing.assert_allclose(d[1], 0.01 * 8, rtol=1e-12)  # 0.01 on each of 64 pixels
  s, js = nearest.nearest_ssim(x, ref)
  np.testing.assert_array_equal(js, [3, 0])
  np.testing.assert_allclose(s[0], 1.0, atol=1e-5)


def test_nearest_l2_distances_match_the_definition():
  x, ref = _images(3, 1), _images(4, 2)
  want = np.array([[np.linalg.norm(a - b) for b in ref] for a in x])
  np.testing.assert_allclose(nearest.l2_distances(x, ref), want, rtol=1e-12)


def test_nearest_summary_tells_the_sets_apart():
  train, part, noise = _images(4, 3), _images(4, 4), _images(4, 5)
  out = nearest.summary(train[:2], {"train": train, "partition": part, "noise": noise})
  assert set(out) == {f"{m}_{s}" for m in ("l2", "ssim") for s in ("train", "partition", "noise")}
  assert out["l2_train"] == 0.0 and out["l2_partition"] > 0 and out["l2_noise"] > 0
  assert out["ssim_train"] > max(out["ssim_partition"], out["ssim_noise"])


def test_nearest_refuses_bad_shapes():
  with pytest.raises(ConfigError, match="differ in size"):
    nearest.l2_distances(_images(2, 0), np.zeros((2, 4, 4, 1)))
  with pytest.raises(ConfigError, match="no images"):
    nearest.nearest_l2(_images(2, 0), np.zeros((0, 8, 8, 1)))


# ----------------------------------------------------------------------------- library


def test_points_and_settings():
  l1, l2 = init_study.mix_points(grid=True)
  assert len(l1) == 21 and len(set(zip(l1, l2))) == 21
  idx = init_study.setting_index(l1, l2)
  assert (l1[idx["random"]], l2[idx["random"]]) == (0.0, 0.0)
  assert (l1[idx["ground_truth"]], l2[idx["ground_truth"]]) == (1.0, 1.0)
  assert (l1[idx["partition"]], l2[idx["partition"]]) == (0.0, 1.0)
  table = init_study.grid_table([{"l1": a, "l2": b, "v": a + 10 * b} for a, b in zip(l1, l2)], "v")
  assert table.shape == (5, 5)
  assert np.isnan(table[0, 1:]).all() and table[0, 0] == 0  # l2 = 0: one point
  assert table[4, 2] == 0.5 + 10 and np.isfinite(table[1:]).all()


def _row(l1, l2, train, part, noise, param_dist=0.0):
  return dict(
    l1=l1,
    l2=l2,
    l2_train=train,
    l2_partition=part,
    l2_noise=noise,
    ssim_train=0.5,
    param_dist=param_dist,
  )


def test_findings_on_planted_rows():
  l1, l2 = init_study.mix_points(grid=True)
  idx = init_study.setting_index(l1, l2)
  # As the paper reports: noise starts stay noise (theta(x) = theta*), GT is recovered,
  # partition-side starts stay at the partition.
  rows = [
    _row(
      a,
      b,
      0.01 if a == 1 and b == 1 else 2.0,
      0.5 if a < 0.5 else 3.0,
      0.5 if b == 0 else 3.0,
      param_dist=1e-6,
    )
    for a, b in zip(l1, l2)
  ]
  f = init_study.findings(rows, idx, l1, l2, 1.0, "bilevel", True)
  assert set(f) == FINDINGS and all(v["reproduced"] for v in f.values())
  rows[idx["random"]]["param_dist"] = 0.5  # far from theta*: not the paper's finding
  rows[1]["l2_partition"] = 9.0  # one l1 < 0.5 point nearer the training set
  f = init_study.findings(rows, idx, l1, l2, 1.0, "bilevel", True)
  assert not f["random_to_noise"]["reproduced"]
  assert not f["lambda1_below_half_nearer_partition"]["reproduced"]
  assert "7/8" in f["lambda1_below_half_nearer_partition"]["evidence"]
  f = init_study.findings(
    [rows[i] for i in sorted(idx.values())],
    {"random": 0, "partition": 1, "ground_truth": 2},
    None,
    None,
    1.0,
    "kkt",
    False,
  )
  assert f["random_to_noise"]["reproduced"]  # the KKT criterion ignores param_dist
  assert f["lambda1_below_half_nearer_partition"]["reproduced"] is None


BAD = [
  ("bilevel_wd", 0.0),
  ("bilevel_lr_x", -1.0),
  ("bilevel_inner_tol", float("nan")),
  ("bilevel_steps", 0),
  ("chunk_steps", 0),
  ("kkt_depth", 0),
  ("save_every", -1),
  ("dataset", "imagenet"),
  ("bilevel_act", "swish"),
  ("bilevel_theta0", "zeros"),
  ("bilevel_hessian_solve", "exact"),
  ("batching", "pmap"),
  ("kkt_lr_x", "fast"),
  ("kkt_alpha", "0"),
  ("kkt_lr_lam", "1:0.1"),
  ("parts", "affine,cnn"),
  ("parts", " "),
  ("kkt_victim_epochs", 2**40),  # the KKT victim's recipe's own rules
  ("kkt_width", 10**7),
]


@pytest.mark.parametrize("name,value", BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_bad_settings_refused_before_anything_is_written(tmp_path, name, value):
  cfg = configs.get_config("tiny")
  cfg[name] = value
  with pytest.raises(ConfigError, match=f"^{name}") as e:
    runner.run_init_study(cfg, str(tmp_path / "w"))
  assert e.value.argument == name  # the binary names --config.<name>
  assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_command_line_names_the_setting(tmp_path):
  """The one command-line smoke test: a bad setting is one error line naming --config.X."""
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.init_study",
      f"--config={configs.__file__}:tiny",
      "--config.bilevel_wd=0",
      f"--workdir={tmp_path / 'w'}",
    ],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  )
  assert proc.returncode == 1, proc.stderr
  line = proc.stderr.strip().splitlines()[-1]
  assert line == "error: --config.bilevel_wd must be a finite number in (0, 1000000], got 0.0.", (
    line
  )
  assert not (tmp_path / "w").exists()


def test_missing_data_refused_before_anything_is_written(tmp_path):
  cfg = configs.get_config("tiny")
  cfg.dataset, cfg.data_dir = "mnist", str(tmp_path / "nowhere")
  with pytest.raises(data.DataError, match="nowhere"):
    runner.run_init_study(cfg, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_presets():
  for preset in ("default", "quick", "tiny"):
    init_study_settings.validate(configs.get_config(preset))
  assert configs.get_config().x64 and configs.get_config().save_every == 1
  names = [s.name for s in init_study.sub_runs(configs.get_config())]
  assert names == [
    "bilevel_affine",
    "bilevel_one_hidden_softplus",
    "bilevel_one_hidden_relu",
    "kkt_mlp_relu",
  ]
  cfg = configs.get_config()
  cfg.parts = "kkt, affine"
  assert [s.name for s in init_study.sub_runs(cfg)] == ["bilevel_affine", "kkt_mlp_relu"]
  with pytest.raises(KeyError, match="unknown preset"):
    configs.get_config("huge")


def test_figures_of_a_grid_study(tmp_path):
  """The grid figures, drawn from planted rows (no attack run)."""
  ds = data.load_dataset("digits", n_per_class=2, n_part_per_class=2)
  l1, l2 = init_study.mix_points(grid=True)
  idx = init_study.setting_index(l1, l2)
  rows = [dict(l1=a, l2=b, l2_train=1 - a * b, l2_partition=a, l2_noise=b) for a, b in zip(l1, l2)]
  entry = {"grid": True, "points": rows, "settings": {k: rows[v] for k, v in idx.items()}}
  x = np.random.default_rng(0).uniform(size=(len(rows), *ds.x_train.shape))
  init_study_figures.init_study_figures(
    str(tmp_path), {"sub_runs": {"s": entry}}, {"s_x": x}, ds.x_train, ds.x_part
  )
  want = {"s_settings.png", "s_partition_to_gt.png", "s_noise_to_gt.png"} | {
    f"s_heatmap_{r}.png" for r in ("train", "partition", "noise")
  }
  assert set(os.listdir(tmp_path)) == want


# ----------------------------------------------------------------------------- the study


@pytest.mark.slow
def test_tiny_study_end_to_end():
  wd = tiny_run()
  files = set(os.listdir(wd))
  for f in ("config.json", "metrics.json", "summary.md", "reconstructions.npz"):
    assert f in files, f
  for name in SUB_RUNS:
    assert {f"{name}_settings.png", f"done_{name}.json", f"done_{name}.npz"} <= files, name
  assert not any("heatmap" in f for f in files)  # no grid in the tiny preset
  cfg = _json(os.path.join(wd, "config.json"))["config"]
  assert cfg["bilevel_steps"] == 4 and cfg["x64"] is True
  m = _json(os.path.join(wd, "metrics.json"))
  assert tuple(m["sub_runs"]) == SUB_RUNS and m["n_train"] == 4
  for name, r in m["sub_runs"].items():
    assert set(r["findings"]) == FINDINGS, name
    assert set(r["settings"]) == {"random", "ground_truth", "partition"}
    for row in r["points"]:
      for k in ("l1", "l2", "l2_train", "l2_partition", "l2_noise", "ssim_train", "diverged"):
        assert k in row, (name, k)
    # A start at the training set stays there; a start at the partition stays nearer it.
    assert r["findings"]["ground_truth_recovered"]["reproduced"], name
    assert r["findings"]["partition_returns_init"]["reproduced"], name
  bil = m["sub_runs"]["bilevel_affine"]
  assert bil["victim"]["grad_norm"] < 1e-6  # trained to convergence with L-BFGS
  for k in ("param_dist", "inner_grad_norm", "inner_iters"):
    assert bil["settings"]["ground_truth"][k] is not None
  assert "stat_rel" in m["sub_runs"]["kkt_mlp_relu"]["settings"]["random"]
  with np.load(os.path.join(wd, "reconstructions.npz")) as z:
    for name in SUB_RUNS:
      assert z[f"{name}_x"].shape == (3, 4, 8, 8, 1)
    np.testing.assert_array_equal(z["mix_l1"], [0, 1, 0])
  with open(os.path.join(wd, "summary.md")) as f:
    md = f.read()
  assert "Paper findings" in md and "**yes**" in md and "not run (no grid)" in md
