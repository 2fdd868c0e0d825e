"""Tests for recon_jax.io.checkpoint and the victim checkpoint/cache built on it."""

import json
import os

from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import data
from recon_jax.io import checkpoint
from recon_jax.victims import cache, models, recipe, trained

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _params(dtype=np.float64, seed=0):
  rng = np.random.default_rng(seed)
  return {
    "params": {
      "layer_0": {
        "kernel": rng.normal(size=(3, 4)).astype(dtype),
        "bias": rng.normal(size=(4,)).astype(dtype),
      },
      "layer_1": {"kernel": rng.normal(size=(4, 1)).astype(dtype)},
    }
  }


META = {
  "victim": {"arch": "mlp", "widths": [4]},
  "train_idx": [3, 1, 2],
  "note": "é",
  "summary": {"loss": 0.25, "margins": [1.0, -0.5]},
}


def _flat(tree):
  return {
    jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)
  }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_is_bitwise(tmp_path, dtype):
  params = _params(dtype)
  params["params"]["layer_0"]["bias"][0] = -0.0
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, params, META)
  got, meta = checkpoint.load(path)
  assert meta == META
  want, have = _flat(params), _flat(got)
  assert sorted(want) == sorted(have)
  for k in want:
    assert have[k].dtype == want[k].dtype and have[k].shape == want[k].shape
    np.testing.assert_array_equal(have[k].view(np.uint8), want[k].view(np.uint8))


def test_round_trip_of_jax_arrays(tmp_path):
  params = jax.tree_util.tree_map(jnp.asarray, _params())
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, params, {})
  got, meta = checkpoint.load(path)
  assert meta == {}
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(a, np.asarray(b))


def test_truncated_file_is_rejected(tmp_path):
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, _params(), META)
  blob = (tmp_path / "ck.msgpack").read_bytes()
  for cut in (1, len(blob) // 2, len(blob) - 1):
    bad = tmp_path / f"cut{cut}.msgpack"
    bad.write_bytes(blob[:cut])
    with pytest.raises(checkpoint.CheckpointError, match="cut"):
      checkpoint.load(str(bad))


@pytest.mark.parametrize(
  "content",
  [
    b"",
    bytes(np.random.default_rng(0).integers(0, 256, 200, dtype=np.uint8)),
    json.dumps({"params": [1, 2], "meta": "{}"}).encode(),
    b"7",
    serialization.msgpack_serialize({"params": {"w": np.ones(2)}, "meta": "{}"}),
  ],
)
def test_not_a_checkpoint_is_rejected(tmp_path, content):
  path = tmp_path / "x.msgpack"
  path.write_bytes(content)
  with pytest.raises(checkpoint.CheckpointError, match="not a recon_jax checkpoint"):
    checkpoint.load(str(path))


def test_missing_file(tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match="not found"):
    checkpoint.load(str(tmp_path / "nope.msgpack"))


def test_corrupt_meta_and_empty_params(tmp_path):
  path = tmp_path / "a.msgpack"
  path.write_bytes(
    serialization.msgpack_serialize(
      {"format": checkpoint.FORMAT, "params": _params(), "meta": "{not json"}
    )
  )
  with pytest.raises(checkpoint.CheckpointError, match="metadata"):
    checkpoint.load(str(path))
  path.write_bytes(
    serialization.msgpack_serialize({"format": checkpoint.FORMAT, "params": {}, "meta": "{}"})
  )
  with pytest.raises(checkpoint.CheckpointError, match="no parameters"):
    checkpoint.load(str(path))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_parameter_is_named(tmp_path, bad):
  params = _params()
  params["params"]["layer_1"]["kernel"][2, 0] = bad
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, params, META)
  with pytest.raises(checkpoint.CheckpointError, match="layer_1.*kernel.*NaN/Inf"):
    checkpoint.load(path)


def test_check_matches_names_the_leaf():
  template = _params()
  checkpoint.check_matches(_params(seed=1), template)  # same structure: no error
  wrong_shape = _params()
  wrong_shape["params"]["layer_1"]["kernel"] = np.zeros((5, 1))
  with pytest.raises(
    checkpoint.CheckpointError, match=r"layer_1'\]\['kernel'\].*\(5, 1\).*\(4, 1\)"
  ):
    checkpoint.check_matches(wrong_shape, template, "ck")
  missing = _params()
  del missing["params"]["layer_0"]["bias"]
  with pytest.raises(checkpoint.CheckpointError, match=r"missing \[.*layer_0.*bias"):
    checkpoint.check_matches(missing, template)
  extra = _params()
  extra["params"]["layer_2"] = {"kernel": np.zeros((1, 1))}
  with pytest.raises(checkpoint.CheckpointError, match=r"unexpected \[.*layer_2"):
    checkpoint.check_matches(extra, template)


def test_atomic_write_leaves_no_temp_files(tmp_path):
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, _params(), META)
  checkpoint.save(path, _params(seed=1), META)  # overwrite
  assert os.listdir(tmp_path) == ["ck.msgpack"]
  got, _ = checkpoint.load(path)
  np.testing.assert_array_equal(
    got["params"]["layer_1"]["kernel"], _params(seed=1)["params"]["layer_1"]["kernel"]
  )


def test_failed_write_keeps_old_file_and_cleans_up(tmp_path, monkeypatch):
  path = str(tmp_path / "ck.msgpack")
  checkpoint.save(path, _params(), META)
  before = (tmp_path / "ck.msgpack").read_bytes()

  def broken_replace(src, dst):
    raise OSError("disk gone")

  monkeypatch.setattr(os, "replace", broken_replace)
  with pytest.raises(OSError, match="disk gone"):
    checkpoint.save(path, _params(seed=1), META)
  monkeypatch.undo()
  assert os.listdir(tmp_path) == ["ck.msgpack"]
  assert (tmp_path / "ck.msgpack").read_bytes() == before


# ---------------------------------------------------------------- victims


def _toy_dataset(n=6, d=3, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(np.float32)
  empty = np.zeros((0, d), np.float32)
  return data.Dataset(
    x_train=x,
    y_train=y,
    x_test=empty,
    y_test=np.zeros((0,), np.float32),
    x_part=empty,
    y_part=np.zeros((0,), np.float32),
    mean=np.zeros((d,), np.float32),
    train_idx=np.arange(n) * 7,
    name="toy",
    task="binary",
    num_classes=2,
    value_range=(-np.inf, np.inf),
  )


def _victim_cfg(**kw):
  base = dict(
    dataset="toy",
    widths=(4,),
    init="normal",
    init_std=0.5,
    first_layer_std=0.5,
    lr=0.05,
    epochs=20,
    subtract_mean=False,
  )
  base.update(kw)
  return recipe.VictimConfig(**base)


def test_victim_save_load_round_trip(tmp_path):
  ds, cfg = _toy_dataset(), _victim_cfg()
  params, _, summary, init = trained.fit(cfg, ds)
  path = str(tmp_path / "v.msgpack")
  trained.save(path, cfg, ds, params, summary, init=init)
  got, got_cfg, meta = trained.load(path, cfg, ds)
  got_init = checkpoint.load_init(path, got)
  for a, b in zip(jax.tree_util.tree_leaves(got_init), jax.tree_util.tree_leaves(init)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # theta_0 kept with it
  assert not all(
    np.array_equal(a, b)
    for a, b in zip(jax.tree_util.tree_leaves(got_init), jax.tree_util.tree_leaves(got))
  )
  assert got_cfg == cfg
  assert meta["train_idx"] == [0, 7, 14, 21, 28, 35]
  assert "outputs" not in meta["summary"] and len(meta["summary"]["margins"]) == 6
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_victim_load_with_other_architecture_fails(tmp_path):
  ds, cfg = _toy_dataset(), _victim_cfg()
  module, _ = trained.build(cfg, ds)
  params = models.init_params(module, jax.random.PRNGKey(0), (3,))
  path = str(tmp_path / "v.msgpack")
  trained.save(path, cfg, ds, params, {"loss": 0.0})
  with pytest.raises(
    checkpoint.CheckpointError, match=r"mismatch at \['params'\]\['layer_0'\].*\(4,\).*\(5,\)"
  ):
    trained.load(path, _victim_cfg(widths=(5,)), ds)
  with pytest.raises(checkpoint.CheckpointError, match="layer_2"):
    trained.load(path, _victim_cfg(widths=(4, 4)), ds)
  with pytest.raises(checkpoint.CheckpointError, match="bias"):
    trained.load(path, _victim_cfg(bias="all"), ds)


def test_victim_load_without_victim_config(tmp_path):
  path = str(tmp_path / "v.msgpack")
  checkpoint.save(path, _params(), {"something": 1})
  with pytest.raises(checkpoint.CheckpointError, match="no victim config"):
    trained.load(path)


def test_get_or_train_uses_the_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("RECON_JAX_CACHE", str(tmp_path / "cache"))
  ds, cfg = _toy_dataset(), _victim_cfg()
  params, summary, path, init = cache.get_or_train(cfg, ds)
  assert path.startswith(str(tmp_path / "cache")) and os.path.isfile(path)
  assert cfg.key() in os.path.basename(path)

  def no_training(*a, **k):
    raise AssertionError("trained again instead of loading the cache")

  monkeypatch.setattr(trained, "fit", no_training)
  params2, summary2, path2, init2 = cache.get_or_train(cfg, ds)
  assert path2 == path and summary2["margins"] == summary["margins"]
  for a, b in zip(jax.tree_util.tree_leaves(init2), jax.tree_util.tree_leaves(init)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  for a, b in zip(jax.tree_util.tree_leaves(params2), jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # A different recipe is a different cache entry (and would train).
  assert _victim_cfg(lr=0.01).key() != cfg.key()
