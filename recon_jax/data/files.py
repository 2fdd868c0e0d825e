"""Where the file datasets live inside ``data_dir``, and their train / test pools.

``mnist``, ``cifar10`` and ``cifar100`` are read from the files the user
already has, in their official distribution layouts (see
``docs/data_formats.md``); nothing is ever downloaded. Pixels stay uint8 in
the pools; :func:`recon_jax.data.common.gather` scales the sampled rows.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from recon_jax.data import formats
from recon_jax.data.common import DataError, Pool

CIFAR10_VEHICLES = (0, 1, 8, 9)  # airplane, automobile, ship, truck

# What data_dir must hold, per dataset (the errors name it).
MNIST_FILES = (
  "MNIST IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, "
  "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (plain or .gz)"
)
CIFAR10_FILES = (
  "CIFAR-10 binary files data_batch_1.bin..data_batch_5.bin and test_batch.bin "
  "(also in cifar-10-batches-bin/), or the python version "
  "data_batch_1..data_batch_5, test_batch in cifar-10-batches-py/"
)
CIFAR100_FILES = (
  "CIFAR-100 binary files train.bin and test.bin (also in cifar-100-binary/), "
  "or the python version train, test in cifar-100-python/"
)


def pools(load):
  """``data_dir -> (train_pool, test_pool)`` of the official splits a loader reads
  (``load(data_dir) -> ((x_train, y_train), (x_test, y_test))``): uint8 pixels with
  ``scale=255`` and the official class ids.

  Raises:
    DataError: On a missing ``data_dir`` or file, or a malformed file.
  """

  def read(data_dir):
    (xtr, ytr), (xte, yte) = load(data_dir)
    return Pool(xtr, ytr.astype(np.int64), 255.0), Pool(xte, yte.astype(np.int64), 255.0)

  return read


def require_dir(name: str, data_dir, expected: str) -> str:
  """``data_dir`` as a string path, checked to be an existing directory."""
  if data_dir is None or (isinstance(data_dir, (str, bytes)) and not data_dir):
    raise DataError(
      f"data_dir is required for dataset {name} (read from files): a directory with the {expected}",
      "data_dir",
    )
  data_dir = os.fspath(data_dir)
  if isinstance(data_dir, bytes):
    data_dir = os.fsdecode(data_dir)
  if not os.path.isdir(data_dir):
    raise DataError(f"data_dir {data_dir}: no such directory (expected the {expected})", "data_dir")
  return data_dir


def _find_file(dirs: Sequence[str], names: Sequence[str]) -> Optional[str]:
  for d in dirs:
    for n in names:
      p = os.path.join(d, n)
      if os.path.isfile(p):
        return p
  return None


def _existing(path: str, expected: str) -> str:
  if not os.path.isfile(path):
    raise DataError(f"{path}: missing file; data_dir must hold the {expected}", "data_dir")
  return path


# MNIST ----------------------------------------------------------------------


def load_mnist(data_dir):
  """``((x_train, y_train), (x_test, y_test))`` of MNIST: uint8 ``[N, H, W, 1]``, int64 ``[N]``.

  Looks in ``data_dir``, ``data_dir/mnist`` and ``data_dir/MNIST/raw`` (the
  torchvision layout) for ``{train,t10k}-{images-idx3,labels-idx1}-ubyte``,
  also gzipped and with ``.idx`` instead of ``-idx``.

  Raises:
    DataError: On a missing or malformed file, or train and test images of
      different sizes.
  """
  data_dir = require_dir("mnist", data_dir, MNIST_FILES)
  dirs = [data_dir, os.path.join(data_dir, "mnist"), os.path.join(data_dir, "MNIST", "raw")]
  xtr, ytr, train_path = _mnist_split(dirs, "train")
  xte, yte, test_path = _mnist_split(dirs, "t10k")
  if xtr.shape[1:] != xte.shape[1:]:
    raise DataError(
      f"{train_path} holds {_hw(xtr)} images but {test_path} holds {_hw(xte)} images; the train "
      "and test files must come from the same dataset"
    )
  return (xtr, ytr), (xte, yte)


def _hw(x: np.ndarray) -> str:
  return "x".join(str(d) for d in x.shape[1:3])


def _mnist_split(dirs, prefix: str):
  def locate(kind, dims):
    base = f"{prefix}-{kind}-idx{dims}-ubyte"
    dotted = f"{prefix}-{kind}.idx{dims}-ubyte"
    path = _find_file(dirs, [base, base + ".gz", dotted, dotted + ".gz"])
    if path is None:
      raise DataError(
        f"{os.path.join(dirs[0], base)}: missing file (also tried .gz and {dotted}); data_dir "
        f"must hold the {MNIST_FILES}",
        "data_dir",
      )
    return path

  img_path = locate("images", 3)
  lab_path = locate("labels", 1)
  images = formats.read_idx(img_path, formats.IDX_IMAGES_MAGIC, "image")
  labels = formats.read_idx(lab_path, formats.IDX_LABELS_MAGIC, "label")
  if images.shape[0] != labels.shape[0]:
    raise DataError(
      f"{lab_path}: {labels.shape[0]} labels but {img_path} holds {images.shape[0]} images"
    )
  if labels.max() > 9:
    raise DataError(f"{lab_path}: label {int(labels.max())} out of range 0..9")
  return images[..., None], labels.astype(np.int64), img_path


# CIFAR ----------------------------------------------------------------------


def _concat(parts):
  xs, ys = zip(*parts)
  return np.concatenate(xs), np.concatenate(ys)


def _first_dir_with(dirs: Sequence[str], name: str) -> Optional[str]:
  return next((d for d in dirs if os.path.isfile(os.path.join(d, name))), None)


class _Cifar(NamedTuple):
  """Where one CIFAR variant's files lie and how their labels are stored."""

  name: str
  files: str  # what data_dir must hold (the errors name it)
  train: Tuple[str, ...]  # the training batches' file names
  test: str
  bin_dir: str  # the binary version's folder inside data_dir (or data_dir itself)
  py_dirs: Tuple[str, ...]  # the python version's folders, in order ('': data_dir)
  label_bytes: int  # binary version: label bytes before each image
  label_key: str  # python version: the labels' key
  classes: int


_CIFAR10 = _Cifar(
  "cifar10",
  CIFAR10_FILES,
  tuple(f"data_batch_{i}" for i in range(1, 6)),
  "test_batch",
  "cifar-10-batches-bin",
  ("cifar-10-batches-py", ""),
  1,
  "labels",
  10,
)
_CIFAR100 = _Cifar(
  "cifar100",
  CIFAR100_FILES,
  ("train",),
  "test",
  "cifar-100-binary",
  ("cifar-100-python",),
  2,
  "fine_labels",
  100,
)


def _load_cifar(data_dir, c: _Cifar):
  """The official splits of a CIFAR variant: the binary version (in ``data_dir`` or its
  ``c.bin_dir``) is preferred over the python version (unpickled with a restricted
  unpickler)."""
  data_dir = require_dir(c.name, data_dir, c.files)
  first = c.train[0]
  bin_dir = _first_dir_with([data_dir, os.path.join(data_dir, c.bin_dir)], first + ".bin")
  if bin_dir is not None:

    def read(n):
      path = _existing(os.path.join(bin_dir, n + ".bin"), c.files)
      return formats.read_cifar_bin(path, c.label_bytes, c.classes - 1)
  else:
    py_dir = _first_dir_with(
      [os.path.join(data_dir, d) if d else data_dir for d in c.py_dirs], first
    )
    if py_dir is None:
      raise DataError(
        f"{os.path.join(data_dir, first + '.bin')}: missing file; data_dir must hold the {c.files}",
        "data_dir",
      )

    def read(n):
      path = _existing(os.path.join(py_dir, n), c.files)
      return formats.read_cifar_py(path, c.label_key, c.classes - 1)

  return _concat([read(n) for n in c.train]), _concat([read(c.test)])


def load_cifar10(data_dir):
  """``((x_train, y_train), (x_test, y_test))`` of CIFAR-10: uint8 ``[N, 32, 32, 3]``, int64.

  The binary version (in ``data_dir`` or ``data_dir/cifar-10-batches-bin``)
  is preferred over the python version (``data_dir/cifar-10-batches-py`` or
  ``data_dir``), which is unpickled with a restricted unpickler.
  """
  return _load_cifar(data_dir, _CIFAR10)


def load_cifar100(data_dir):
  """``((x_train, y_train), (x_test, y_test))`` of CIFAR-100 with fine labels.

  The binary version (``train.bin``, ``test.bin`` in ``data_dir`` or
  ``data_dir/cifar-100-binary``) is preferred over the python version in
  ``data_dir/cifar-100-python``.
  """
  return _load_cifar(data_dir, _CIFAR100)
