"""Tests for recon_jax.data.fingerprint: a digest of the training samples."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import data as D
from recon_jax.data import DataError, fingerprint, load_dataset


def _write_mnist(root, seed):
  rng = np.random.default_rng(seed)
  for prefix, n in (("train", 30), ("t10k", 10)):
    D.write_idx(
      os.path.join(root, f"{prefix}-images-idx3-ubyte"),
      rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
    )
    D.write_idx(
      os.path.join(root, f"{prefix}-labels-idx1-ubyte"), (np.arange(n) % 10).astype(np.uint8)
    )


def test_fingerprint_is_stable_and_short():
  a = load_dataset("digits", n_per_class=4, seed=1)
  fp = fingerprint(a)
  assert isinstance(fp, str) and len(fp) == 16 and int(fp, 16) >= 0
  assert fp == fingerprint(a) == fingerprint(load_dataset("digits", n_per_class=4, seed=1))
  assert fingerprint(a, length=64).startswith(fp) and len(fingerprint(a, length=64)) == 64
  assert fp != fingerprint(load_dataset("digits", n_per_class=4, seed=2))
  # Only the training samples count: not the name or the test set.
  assert fingerprint(a._replace(name="other", x_test=a.x_test[:1])) == fp
  # numpy and JAX arrays with the same values agree.
  assert fingerprint(a._replace(x_train=jnp.asarray(a.x_train))) == fp


def test_fingerprint_golden_value():
  # Pinned, so caches keyed by fingerprints stay valid across releases.
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  y = np.array([1.0, -1.0], np.float32)
  ds = D.Dataset(
    x,
    y,
    x[:0],
    y[:0],
    x[:0],
    y[:0],
    np.zeros(3, np.float32),
    np.arange(2),
    "toy",
    "binary",
    2,
    (0.0, 1.0),
  )
  assert fingerprint(ds) == fingerprint(ds._replace(x_train=x.astype(">f4")))
  assert fingerprint(ds) == "417508d32f41144b"


def test_fingerprint_sees_one_pixel_labels_dtype_and_shape():
  ds = load_dataset("lfw", n_per_class=3)
  fp = fingerprint(ds)
  x = ds.x_train.copy()
  x[4, 10, 10, 0] += np.float32(1 / 255)
  assert fingerprint(ds._replace(x_train=x)) != fp
  y = ds.y_train.copy()
  y[[0, -1]] = y[[-1, 0]]
  assert fingerprint(ds._replace(y_train=y)) != fp
  assert fingerprint(ds._replace(x_train=ds.x_train.astype(np.float64))) != fp
  assert fingerprint(ds._replace(x_train=ds.x_train.reshape(6, 25, 1, 25))) != fp
  assert fingerprint(ds._replace(y_train=ds.y_train.astype(np.int32))) != fp


def test_fingerprint_tells_folders_apart(tmp_path):
  a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
  for folder, seed in ((a, 1), (b, 2), (c, 1)):
    folder.mkdir()
    _write_mnist(str(folder), seed)
  fps = [fingerprint(load_dataset("mnist", data_dir=str(f), n_per_class=2)) for f in (a, b, c)]
  assert fps[0] != fps[1]  # Same file names, different pixels.
  assert fps[0] == fps[2]  # Same content in another folder.


def test_fingerprint_errors():
  ds = load_dataset("toy2d", toy_n=4)
  for bad in (0, 65, 2.0, True):
    with pytest.raises(DataError, match="^length") as e:
      fingerprint(ds, length=bad)
    assert e.value.argument == "length"
  with pytest.raises(DataError, match="^ds "):
    fingerprint(object())
  with pytest.raises(DataError, match="numeric"):
    fingerprint(ds._replace(x_train=np.array([object()])))
