"""Tests for recon_jax.data: embedded datasets, balanced sampling and argument errors."""

import numpy as np
import pytest

from recon_jax import data as D
from recon_jax.data import DataError, load_dataset
from recon_jax.errors import Error


def test_package_api():
  for name in (
    "Dataset",
    "DataError",
    "DATASETS",
    "TASKS",
    "load_dataset",
    "write_idx",
    "write_cifar10_bin",
    "fingerprint",
  ):
    assert hasattr(D, name) and name in D.__all__
  assert issubclass(DataError, ValueError) and issubclass(DataError, Error)
  assert set(D.DATASETS) == {"digits", "lfw", "toy2d", "mnist5k", "mnist", "cifar10", "cifar100"}
  assert D.TASKS == ("binary", "multiclass")
  assert not hasattr(D, "add_mean") and not hasattr(D, "input_shape")


def test_digits():
  ds = load_dataset("digits", n_per_class=5)
  assert ds.x_train.shape == (10, 8, 8, 1) and ds.x_train.dtype == np.float32
  np.testing.assert_array_equal(ds.y_train, [1] * 5 + [-1] * 5)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    assert x.min() >= 0.0 and x.max() <= 1.0
  assert ds.x_train.max() > 0.9
  from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel

  digits = load_digits()
  np.testing.assert_allclose(ds.x_train[..., 0], digits.images[ds.train_idx] / 16.0, atol=1e-7)
  np.testing.assert_array_equal(ds.y_train, np.where(digits.target[ds.train_idx] % 2, 1.0, -1.0))
  mc = load_dataset("digits", task="multiclass", n_per_class=3)
  assert mc.num_classes == 10 and mc.y_train.dtype == np.int32
  np.testing.assert_array_equal(mc.y_train, np.repeat(np.arange(10), 3))
  np.testing.assert_array_equal(mc.y_train, digits.target[mc.train_idx])
  counts = np.bincount(mc.y_test, minlength=10)
  assert counts.min() == counts.max()
  assert load_dataset(" Digits ", n_per_class=1).name == "digits"


def _row_set(x):
  return {r.tobytes() for r in x}


def test_lfw_and_disjoint_splits():
  ds = load_dataset("lfw", n_per_class=10, n_part_per_class=7, n_test_per_class=20)
  assert ds.x_train.shape == (20, 25, 25, 1)
  assert ds.x_part.shape == (14, 25, 25, 1)
  assert ds.x_test.shape == (40, 25, 25, 1)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() <= 1.0
  np.testing.assert_array_equal(ds.y_train, [1] * 10 + [-1] * 10)
  # First 100 images of the lfw subset are faces (+1).
  np.testing.assert_array_equal(ds.y_train, np.where(ds.train_idx < 100, 1.0, -1.0))
  for y, n in ((ds.y_part, 7), (ds.y_test, 20)):
    assert (y == 1).sum() == n and (y == -1).sum() == n
  tr, te, pa = _row_set(ds.x_train), _row_set(ds.x_test), _row_set(ds.x_part)
  assert len(tr) == 20 and len(te) == 40 and len(pa) == 14
  assert not tr & te and not tr & pa and not te & pa
  # Defaults: partition = n_per_class, test = the remaining balanced rest.
  d2 = load_dataset("lfw", n_per_class=30)
  assert d2.x_part.shape[0] == 60 and d2.x_test.shape[0] == 80
  mc = load_dataset("lfw", task="multiclass", n_per_class=2)
  assert mc.num_classes == 2 and mc.y_train.dtype == np.int32
  np.testing.assert_array_equal(mc.y_train, [0, 0, 1, 1])


def test_digits_disjoint_by_index():
  # Full partition of the pool: train, part and test exhaust each class.
  ds = load_dataset("digits", task="multiclass", n_per_class=50, n_part_per_class=50)
  n_min = 174  # Smallest digit class in load_digits.
  assert ds.x_test.shape[0] == 10 * (n_min - 100)
  # No training image index repeats.
  assert len(set(ds.train_idx.tolist())) == ds.train_idx.size


def test_determinism_and_seed():
  a = load_dataset("digits", n_per_class=4, seed=3)
  b = load_dataset("digits", n_per_class=4, seed=np.int64(3))
  c = load_dataset("digits", n_per_class=4, seed=4)
  for fa, fb in zip(a, b):
    if isinstance(fa, np.ndarray):
      np.testing.assert_array_equal(fa, fb)
    else:
      assert fa == fb
  assert not np.array_equal(a.train_idx, c.train_idx)
  assert not np.array_equal(a.x_part, c.x_part)


def test_cached_pools_are_not_mutated_by_callers():
  a = load_dataset("digits", n_per_class=2)
  a.x_train[:] = 7.0  # The caller owns its copy ...
  b = load_dataset("digits", n_per_class=2)
  assert b.x_train.max() <= 1.0  # ... and the cached pool is untouched.


def _raises_naming(argument, fn, *args, **kwargs):
  """Asserts a DataError whose message starts with ``argument`` and names no flag."""
  with pytest.raises(DataError) as e:
    fn(*args, **kwargs)
  msg = str(e.value)
  assert msg.startswith(argument), msg
  assert "--" not in msg, msg
  assert e.value.argument == argument
  return msg


def test_sampling_errors_name_arguments(tmp_path):
  assert "100" in _raises_naming("n_per_class", load_dataset, "lfw", n_per_class=101)
  _raises_naming("n_per_class", load_dataset, "lfw", n_per_class=0)
  _raises_naming("n_per_class", load_dataset, "lfw", n_per_class=2.5)
  _raises_naming("n_per_class", load_dataset, "lfw", n_per_class=True)
  _raises_naming("n_part_per_class", load_dataset, "lfw", n_per_class=60, n_part_per_class=41)
  _raises_naming("n_part_per_class", load_dataset, "lfw", n_part_per_class=-1)
  _raises_naming("n_test_per_class", load_dataset, "lfw", n_per_class=50, n_test_per_class=1)
  _raises_naming("n_test_per_class", load_dataset, "toy2d", n_test_per_class=-2)
  for name in ("digits", "lfw"):  # Defaults that cannot fit need an explicit count.
    with pytest.raises(DataError, match="smallest class"):
      load_dataset(name, n_per_class=1000)


def test_file_sampling_errors_name_arguments(tmp_path):
  rng = np.random.default_rng(0)
  for prefix, n in (("train", 40), ("t10k", 20)):
    D.write_idx(
      tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    )
    D.write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", (np.arange(n) % 10).astype(np.uint8))
  msg = _raises_naming("n_per_class", load_dataset, "mnist", data_dir=str(tmp_path), n_per_class=21)
  assert "20" in msg and "training pool" in msg
  _raises_naming(
    "n_test_per_class",
    load_dataset,
    "mnist",
    data_dir=str(tmp_path),
    n_per_class=1,
    n_test_per_class=11,
  )
  _raises_naming(
    "n_part_per_class",
    load_dataset,
    "mnist",
    data_dir=str(tmp_path),
    n_per_class=15,
    n_part_per_class=6,
  )


def test_name_task_and_seed_errors_name_arguments():
  msg = _raises_naming("dataset", load_dataset, "imagenet")
  assert "cifar10" in msg and "digits" in msg and "imagenet" in msg
  _raises_naming("dataset", load_dataset, None)
  assert "regression" in _raises_naming("task", load_dataset, "digits", task="regression")
  for bad in (-1, 1.5, True, "3"):
    _raises_naming("seed", load_dataset, "digits", seed=bad)


def test_toy2d():
  ds = load_dataset("toy2d", toy_n=12, seed=1)
  assert ds.x_train.shape == (12, 2) and ds.x_train.dtype == np.float32
  assert ds.x_test.shape == (200, 2) and ds.x_part.shape == (200, 2)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
  np.testing.assert_array_equal(ds.y_train, [1] * 6 + [-1] * 6)
  # Labels alternate around the circle (train_idx = position on the circle).
  by_angle = np.empty(12)
  by_angle[ds.train_idx] = ds.y_train
  np.testing.assert_array_equal(by_angle, np.tile([1, -1], 6))
  ang = np.sort(np.arctan2(ds.x_train[:, 1], ds.x_train[:, 0]))
  np.testing.assert_allclose(np.diff(ang), 2 * np.pi / 12, atol=1e-5)
  for x, y in ((ds.x_test, ds.y_test), (ds.x_part, ds.y_part)):
    train = ds.x_train.astype(np.float64)
    nearest = np.argmax(x.astype(np.float64) @ train.T, axis=1)
    np.testing.assert_array_equal(y, ds.y_train[nearest])
  assert ds.value_range == (-np.inf, np.inf)
  assert ds.name == "toy2d" and ds.num_classes == 2 and ds.train_idx.dtype == np.int64
  small = load_dataset("toy2d", toy_n=4, n_test_per_class=5, n_part_per_class=2, n_per_class=10**6)
  assert small.x_test.shape == (10, 2) and small.x_part.shape == (4, 2)
  mc = load_dataset("toy2d", task="multiclass", toy_n=4)
  np.testing.assert_array_equal(mc.y_train, [0, 0, 1, 1])
  assert mc.y_train.dtype == np.int32 and set(mc.y_test.tolist()) <= {0, 1}
  for bad in (3, 0, 2.0, True):
    _raises_naming("toy_n", load_dataset, "toy2d", toy_n=bad)


def test_subtract_mean():
  raw = load_dataset("lfw", n_per_class=5, seed=2)
  ds = load_dataset("lfw", n_per_class=5, seed=2, subtract_mean=True)
  np.testing.assert_array_equal(raw.mean, 0.0)
  assert ds.mean.shape == (25, 25, 1) and ds.mean.dtype == np.float32
  np.testing.assert_allclose(ds.x_train.mean(0), 0.0, atol=1e-6)
  for a, b in ((ds.x_train, raw.x_train), (ds.x_test, raw.x_test), (ds.x_part, raw.x_part)):
    assert a.dtype == np.float32
    np.testing.assert_allclose(a + ds.mean, b, atol=1e-6)
  toy = load_dataset("toy2d", toy_n=6, subtract_mean=True)
  assert toy.mean.shape == (2,)
  np.testing.assert_allclose(toy.x_train.mean(0), 0.0, atol=1e-6)
