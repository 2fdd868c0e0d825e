"""Datasets for reconstruction attacks: embedded toys and on-disk benchmarks.

Everything here is plain numpy. Nothing is ever downloaded: ``digits`` (from
scikit-learn), ``lfw`` (the small subset shipped with scikit-image) and
``toy2d`` (generated) are embedded; ``mnist``, ``cifar10`` and ``cifar100`` are
read from files the user already has, in their official distribution formats,
from ``data_dir``.

Conventions of the returned :class:`Dataset`:

* ``x`` arrays are float32, images ``[n, H, W, C]`` with raw pixels scaled to
  ``[0, 1]`` (and minus ``mean`` when ``subtract_mean=True``); ``toy2d`` is
  ``[n, 2]``.
* ``task='binary'``: ``y`` is float32 in ``{-1, +1}``. ``digits``/``mnist``:
  odd digit = +1, even = -1. ``lfw``: face = +1, non-face = -1. ``cifar10``:
  vehicle (airplane, automobile, ship, truck) = +1, animal = -1. ``toy2d``:
  training points alternate +1, -1, ... around the circle.
* ``task='multiclass'``: ``y`` is int32 class ids in ``[0, num_classes)``.
  ``digits``/``mnist``/``cifar10``: the official label; ``cifar100``: the fine
  label. ``lfw`` and ``toy2d`` have two classes with id ``(y_binary + 1) / 2``
  (face = 1, non-face = 0).
* Sampling is class-balanced and deterministic given ``seed``. The training set
  is ordered class-major: +1 class first for binary tasks, ascending class ids
  for multiclass; within a class, by ascending index in the source pool. Test
  and partition sets use the same order.
* Train, test and partition are disjoint. For datasets with an official
  train/test split, train and partition come from the official train pool and
  test from the official test pool; single-pool (embedded) datasets are split
  into disjoint per-class slices of one seeded permutation.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import importlib
import io
import os
import pickle
import zlib
from typing import NamedTuple, Optional, Sequence

import numpy as np

__all__ = [
  'DATASETS',
  'DataError',
  'Dataset',
  'add_mean',
  'input_shape',
  'load_dataset',
  'write_cifar10_bin',
  'write_idx',
]

DATASETS = ('digits', 'lfw', 'toy2d', 'mnist', 'cifar10', 'cifar100')
TASKS = ('binary', 'multiclass')

_EMBEDDED = ('digits', 'lfw', 'toy2d')
_FILE_TEST_CAP = 1000  # default test samples per class for file datasets
_TOY_DEFAULT_SPLIT = 200  # default toy2d test / partition size (total)

_CIFAR10_VEHICLES = (0, 1, 8, 9)  # airplane, automobile, ship, truck
_CIFAR_IMAGE_BYTES = 32 * 32 * 3
_IDX_IMAGES_MAGIC = 0x00000803
_IDX_LABELS_MAGIC = 0x00000801


from recon_jax.errors import Error

class DataError(Error, ValueError):
  """One-line, user-facing error naming the offending file or argument."""


class Dataset(NamedTuple):
  """A sampled dataset ready for training a model and attacking it.

  Attributes:
    x_train: ``[n, H, W, C]`` float32 images (``[n, 2]`` for toy2d).
    y_train: ``[n]`` labels: float32 in ``{-1, +1}`` for ``task='binary'``,
      int32 class ids for ``task='multiclass'``.
    x_test: Held-out samples from the same distribution, disjoint from
      train.
    y_test: Labels of ``x_test``.
    x_part: "Partition": further unseen samples of the same distribution
      (attack initialisation, membership baselines), disjoint from train
      and test.
    y_part: Labels of ``x_part``.
    mean: ``[H, W, C]`` (``[2]`` for toy2d) float32 training mean that was
      subtracted from all three splits; zeros if ``subtract_mean=False``.
      Add it back (:func:`add_mean`) to display images.
    train_idx: int64 index of every training sample in its source pool
      (the official train pool for file datasets), in ``x_train`` order.
    name: Dataset name.
    task: ``'binary'`` or ``'multiclass'``.
    num_classes: Number of classes (2 for binary).
    value_range: ``(lo, hi)`` range of the raw values before mean
      subtraction: ``(0.0, 1.0)`` for images, ``(-inf, inf)`` for toy2d.
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  x_part: np.ndarray
  y_part: np.ndarray
  mean: np.ndarray
  train_idx: np.ndarray
  name: str
  task: str
  num_classes: int
  value_range: tuple


class _Pool(NamedTuple):
  """Samples with class labels (binary classes are +1 / -1).

  ``x`` may hold raw integer pixels (kept compact for large pools); a sample
  is ``x[i].astype(float32) / scale``.
  """

  x: np.ndarray
  y: np.ndarray
  scale: float = 1.0


def _gather(pool: _Pool, idx: np.ndarray) -> np.ndarray:
  x = pool.x[idx].astype(np.float32)
  if pool.scale != 1.0:
    x = x / np.float32(pool.scale)
  return x


# --------------------------------------------------------------------------
# Public helpers.
# --------------------------------------------------------------------------


def add_mean(x, ds: Dataset) -> np.ndarray:
  """Adds the subtracted training mean back, e.g. to display images.

  Args:
    x: Samples shaped like ``ds.x_train`` (batch axis first) or a single
      sample; numpy or JAX array.
    ds: The dataset whose ``mean`` was subtracted.

  Returns:
    ``x + ds.mean`` as a numpy array.
  """
  return np.asarray(x) + ds.mean


def input_shape(ds: Dataset) -> tuple:
  """Shape of a single input, e.g. ``(28, 28, 1)`` or ``(2,)``."""
  return tuple(int(d) for d in ds.x_train.shape[1:])


# --------------------------------------------------------------------------
# Writers (fixtures, conversions).
# --------------------------------------------------------------------------


def write_idx(path, array) -> None:
  """Writes a uint8 array as an IDX file (MNIST format).

  The magic number is ``0x000008NN`` with ``NN`` the number of dimensions,
  so images ``[N, H, W]`` get ``0x00000803`` and labels ``[N]`` get
  ``0x00000801``. The file is gzip-compressed if ``path`` ends in ``.gz``.

  Args:
    path: Destination file.
    array: uint8 array with 1 to 255 dimensions.

  Raises:
    DataError: If the array is not uint8 or has no dimensions.
  """
  array = np.asarray(array)
  if array.dtype != np.uint8:
    raise DataError(
      f'write_idx: expected a uint8 array, got {array.dtype}')
  if not 1 <= array.ndim <= 255:
    raise DataError(
      f'write_idx: expected 1 to 255 dimensions, got {array.ndim}')
  header = bytes([0, 0, 0x08, array.ndim])
  header += np.asarray(array.shape, dtype='>u4').tobytes()
  payload = header + np.ascontiguousarray(array).tobytes()
  path = os.fspath(path)
  if path.endswith('.gz'):
    payload = gzip.compress(payload, mtime=0)
  with open(path, 'wb') as f:
    f.write(payload)


def write_cifar10_bin(path, images, labels) -> None:
  """Writes images in the CIFAR-10 binary format.

  Each record is one label byte followed by 3072 image bytes: the 32x32 red
  plane, then green, then blue, each row-major.

  Args:
    path: Destination file (e.g. ``data_batch_1.bin``).
    images: ``[N, 32, 32, 3]`` uint8 array (channels last).
    labels: ``[N]`` integer labels in ``[0, 255]``.

  Raises:
    DataError: On wrong shapes or dtypes.
  """
  images = np.asarray(images)
  labels = np.asarray(labels)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (
      32, 32, 3):
    raise DataError(
      'write_cifar10_bin: expected uint8 images of shape '
      f'[N, 32, 32, 3], got {images.dtype} {images.shape}')
  if labels.shape != (images.shape[0],):
    raise DataError(
      f'write_cifar10_bin: expected {images.shape[0]} labels, got shape '
      f'{labels.shape}')
  if labels.size and (labels.min() < 0 or labels.max() > 255):
    raise DataError('write_cifar10_bin: labels must lie in [0, 255]')
  planes = images.transpose(0, 3, 1, 2).reshape(images.shape[0], -1)
  records = np.concatenate(
    [labels.astype(np.uint8)[:, None], planes], axis=1)
  with open(os.fspath(path), 'wb') as f:
    f.write(np.ascontiguousarray(records).tobytes())


# --------------------------------------------------------------------------
# Loading.
# --------------------------------------------------------------------------


def load_dataset(name: str,
         *,
         task: str = 'binary',
         n_per_class: int = 10,
         n_test_per_class: Optional[int] = None,
         n_part_per_class: Optional[int] = None,
         seed: int = 0,
         subtract_mean: bool = False,
         data_dir=None,
         toy_n: int = 20) -> Dataset:
  """Loads a dataset and draws balanced, disjoint train/test/partition sets.

  Args:
    name: One of :data:`DATASETS`.
    task: ``'binary'`` (labels in ``{-1, +1}``) or ``'multiclass'``.
    n_per_class: Training samples per class (ignored for toy2d).
    n_test_per_class: Test samples per class. Default: everything left
      after train and partition for embedded datasets (balanced, i.e.
      the minimum over classes), ``min(available, 1000)`` for file
      datasets. For toy2d the test set has ``2 * n_test_per_class``
      points (default 200 in total).
    n_part_per_class: Partition samples per class. Default: ``n_per_class``
      capped to what remains. For toy2d: ``2 * n_part_per_class`` points
      (default 200 in total).
    seed: Seed of all sampling (``np.random.default_rng(seed)``).
    subtract_mean: Subtract the training mean from all splits (as Haim et
      al. 2022 do) and record it in ``Dataset.mean``.
    data_dir: Directory with the dataset files (mnist, cifar10, cifar100).
    toy_n: Number of training points on the circle for toy2d (even, >= 2).

  Returns:
    The sampled :class:`Dataset`.

  Raises:
    DataError: On an unknown dataset or task, impossible sample counts, or
      missing, truncated or malformed data files.
  """
  if not isinstance(name, str) or name.strip().lower() not in DATASETS:
    raise DataError(
      f'dataset {name!r} is unknown; valid: {", ".join(DATASETS)}')
  name = name.strip().lower()
  if task not in TASKS:
    raise DataError(
      f'task {task!r} is unknown; valid: {", ".join(TASKS)}')
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or (
      seed < 0):
    raise DataError(f'seed must be a non-negative integer, got {seed!r}')
  rng = np.random.default_rng(int(seed))

  if name == 'toy2d':
    return _load_toy2d(task=task, toy_n=toy_n,
              n_test=_toy_split_size(n_test_per_class,
                         'n_test_per_class'),
              n_part=_toy_split_size(n_part_per_class,
                         'n_part_per_class'),
              rng=rng, subtract_mean=subtract_mean)

  n_per_class = _check_count(n_per_class, 'n_per_class', allow_zero=False)
  n_test_per_class = _check_count(n_test_per_class, 'n_test_per_class')
  n_part_per_class = _check_count(n_part_per_class, 'n_part_per_class')

  if name == 'cifar100' and task == 'binary':
    raise DataError(
      'dataset cifar100 has no binary task; use task=multiclass')

  if name in _EMBEDDED:
    pool = _embedded_pool(name, task)
    num_classes = _num_classes(name, task)
    tr, pa, te = _split_single_pool(pool.y, _class_ids(task, num_classes),
                    n_per_class, n_part_per_class,
                    n_test_per_class, rng, name)
    train, part, test = pool, pool, pool
  else:
    train_pool, test_pool = _file_pools(name, task, data_dir)
    num_classes = _num_classes(name, task)
    classes = _class_ids(task, num_classes)
    tr, pa = _split_train_pool(train_pool.y, classes, n_per_class,
                  n_part_per_class, rng, name)
    te = _split_test_pool(test_pool.y, classes, n_test_per_class, rng,
               name)
    train, part, test = train_pool, train_pool, test_pool

  x_train = _gather(train, tr)
  x_part = _gather(part, pa)
  x_test = _gather(test, te)
  mean = np.zeros(x_train.shape[1:], np.float32)
  if subtract_mean:
    mean = x_train.astype(np.float64).mean(0).astype(np.float32)
    x_train, x_part, x_test = x_train - mean, x_part - mean, x_test - mean

  return Dataset(
    x_train=x_train,
    y_train=_labels_out(train.y[tr], task),
    x_test=x_test,
    y_test=_labels_out(test.y[te], task),
    x_part=x_part,
    y_part=_labels_out(part.y[pa], task),
    mean=mean,
    train_idx=tr.astype(np.int64),
    name=name,
    task=task,
    num_classes=num_classes,
    value_range=(0.0, 1.0),
  )


# --------------------------------------------------------------------------
# Sampling.
# --------------------------------------------------------------------------


def _check_count(value, flag: str, allow_zero: bool = True):
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise DataError(f'{flag} must be an integer, got {value!r}')
  if value < 0 or (value == 0 and not allow_zero):
    bound = '>= 0' if allow_zero else '>= 1'
    raise DataError(f'{flag} must be {bound}, got {value}')
  return int(value)


def _class_ids(task: str, num_classes: int) -> np.ndarray:
  """Classes in output order: +1 then -1 for binary, ascending otherwise."""
  if task == 'binary':
    return np.array([1, -1])
  return np.arange(num_classes)


def _labels_out(y: np.ndarray, task: str) -> np.ndarray:
  if task == 'binary':
    return y.astype(np.float32)
  return y.astype(np.int32)


def _per_class_perms(y: np.ndarray, classes: np.ndarray,
           rng: np.random.Generator) -> list:
  return [rng.permutation(np.flatnonzero(y == c)) for c in classes]


def _too_many(flag: str, wanted: int, available: int, name: str,
       what: str) -> DataError:
  return DataError(
    f'{flag}={wanted} is more than the {available} samples available per '
    f'class {what} of dataset {name}')


def _resolve_part(n_part: Optional[int], n_train: int, remaining: int,
         name: str) -> int:
  if n_part is None:
    return min(n_train, remaining)
  if n_part > remaining:
    raise _too_many('n_part_per_class', n_part, remaining, name,
            'after drawing the training set')
  return n_part


def _take(perms: list, start: int, count: int) -> np.ndarray:
  """Concatenates slice ``[start, start + count)`` of each class, sorted."""
  parts = [np.sort(p[start:start + count]) for p in perms]
  return np.concatenate(parts).astype(np.int64)


def _split_single_pool(y, classes, n_train, n_part, n_test, rng, name):
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_train > available:
    raise _too_many('n_per_class', n_train, available, name,
            '(smallest class)')
  n_part = _resolve_part(n_part, n_train, available - n_train, name)
  remaining = available - n_train - n_part
  if n_test is None:
    n_test = remaining
  elif n_test > remaining:
    raise _too_many('n_test_per_class', n_test, remaining, name,
            'after drawing the training and partition sets')
  return (_take(perms, 0, n_train), _take(perms, n_train, n_part),
      _take(perms, n_train + n_part, n_test))


def _split_train_pool(y, classes, n_train, n_part, rng, name):
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_train > available:
    raise _too_many('n_per_class', n_train, available, name,
            'in the training pool (smallest class)')
  n_part = _resolve_part(n_part, n_train, available - n_train, name)
  return _take(perms, 0, n_train), _take(perms, n_train, n_part)


def _split_test_pool(y, classes, n_test, rng, name):
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_test is None:
    n_test = min(available, _FILE_TEST_CAP)
  elif n_test > available:
    raise _too_many('n_test_per_class', n_test, available, name,
            'in the test pool (smallest class)')
  return _take(perms, 0, n_test)


# --------------------------------------------------------------------------
# Embedded datasets.
# --------------------------------------------------------------------------


def _num_classes(name: str, task: str) -> int:
  if task == 'binary':
    return 2
  return {'digits': 10, 'mnist': 10, 'cifar10': 10, 'cifar100': 100,
      'lfw': 2, 'toy2d': 2}[name]


def _readonly(a: np.ndarray) -> np.ndarray:
  a.flags.writeable = False
  return a


@functools.lru_cache(maxsize=None)
def _digits_raw():
  from sklearn.datasets import load_digits
  d = load_digits()
  x = (np.asarray(d.images, np.float64) / 16.0).astype(np.float32)[..., None]
  return _readonly(x), _readonly(np.asarray(d.target, np.int64))


@functools.lru_cache(maxsize=None)
def _lfw_raw():
  from skimage import data as skdata
  x = np.asarray(skdata.lfw_subset(), np.float64)
  if x.max() > 1.0:  # Older releases may ship uint8 pixels.
    x = x / 255.0
  x = x.astype(np.float32)[..., None]
  # The first 100 images are faces, the last 100 are not.
  y = np.where(np.arange(x.shape[0]) < 100, 1, 0).astype(np.int64)
  return _readonly(x), _readonly(y)


def _embedded_pool(name: str, task: str) -> _Pool:
  if name == 'digits':
    x, digit = _digits_raw()
    y = np.where(digit % 2 == 1, 1, -1) if task == 'binary' else digit
  else:  # lfw
    x, face = _lfw_raw()
    y = np.where(face == 1, 1, -1) if task == 'binary' else face
  return _Pool(x, y.astype(np.int64))


def _toy_split_size(n_per_class: Optional[int], flag: str) -> int:
  n_per_class = _check_count(n_per_class, flag)
  return _TOY_DEFAULT_SPLIT if n_per_class is None else 2 * n_per_class


def _load_toy2d(*, task, toy_n, n_test, n_part, rng, subtract_mean) -> Dataset:
  """Haim et al. (2022) Sec. 4: equally spaced points on the unit circle."""
  if isinstance(toy_n, bool) or not isinstance(toy_n, (int, np.integer)) or (
      toy_n < 2 or toy_n % 2):
    raise DataError(f'toy_n must be an even integer >= 2, got {toy_n!r}')
  toy_n = int(toy_n)
  step = 2.0 * np.pi / toy_n
  offset = rng.uniform(0.0, step)
  k = np.arange(toy_n)
  angles = offset + step * k
  labels = np.where(k % 2 == 0, 1, -1)

  def circle(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)

  def random_split(count):
    theta = rng.uniform(0.0, 2.0 * np.pi, size=count)
    # Nearest training point by angle (all training points are equally
    # spaced, so this is rounding in units of `step`).
    nearest = np.rint((theta - offset) / step).astype(np.int64) % toy_n
    return circle(theta), labels[nearest]

  x_test, y_test = random_split(n_test)
  x_part, y_part = random_split(n_part)

  first, second = (1, -1) if task == 'binary' else (-1, 1)
  order = np.concatenate([k[labels == first],
              k[labels == second]]).astype(np.int64)
  x_train, y_train = circle(angles[order]), labels[order]
  x_train, x_test, x_part = (a.astype(np.float32)
                for a in (x_train, x_test, x_part))
  mean = np.zeros(2, np.float32)
  if subtract_mean:
    mean = x_train.astype(np.float64).mean(0).astype(np.float32)
    x_train, x_part, x_test = x_train - mean, x_part - mean, x_test - mean

  def lab(y):
    if task == 'binary':
      return y.astype(np.float32)
    return ((y + 1) // 2).astype(np.int32)

  return Dataset(
    x_train=x_train, y_train=lab(y_train),
    x_test=x_test, y_test=lab(y_test),
    x_part=x_part, y_part=lab(y_part),
    mean=mean, train_idx=order, name='toy2d', task=task, num_classes=2,
    value_range=(-np.inf, np.inf))


# --------------------------------------------------------------------------
# File datasets.
# --------------------------------------------------------------------------


def _require_dir(name: str, data_dir, expected: str) -> str:
  if data_dir is None or (isinstance(data_dir, str) and not data_dir):
    raise DataError(
      f'dataset {name} is read from files: pass data_dir, a '
      f'directory with {expected}')
  data_dir = os.fspath(data_dir)
  if not os.path.isdir(data_dir):
    raise DataError(
      f'data_dir {data_dir}: no such directory (expected {expected})')
  return data_dir


def _file_pools(name: str, task: str, data_dir):
  if name == 'mnist':
    (xtr, ytr), (xte, yte) = _load_mnist(data_dir)
    def relabel(y):
      return np.where(y % 2 == 1, 1, -1) if task == 'binary' else y
  elif name == 'cifar10':
    (xtr, ytr), (xte, yte) = _load_cifar10(data_dir)
    vehicles = np.array(_CIFAR10_VEHICLES)
    def relabel(y):
      if task == 'binary':
        return np.where(np.isin(y, vehicles), 1, -1)
      return y
  else:  # cifar100 (multiclass only; checked by the caller)
    (xtr, ytr), (xte, yte) = _load_cifar100(data_dir)
    def relabel(y):
      return y
  return (_Pool(xtr, relabel(ytr).astype(np.int64), 255.0),
      _Pool(xte, relabel(yte).astype(np.int64), 255.0))


def _read_bytes(path: str) -> bytes:
  try:
    if path.endswith('.gz'):
      with gzip.open(path, 'rb') as f:
        return f.read()
    with open(path, 'rb') as f:
      return f.read()
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(f'{path}: cannot read file ({e})') from None


def _find_file(dirs: Sequence[str], names: Sequence[str]) -> Optional[str]:
  for d in dirs:
    for n in names:
      p = os.path.join(d, n)
      if os.path.isfile(p):
        return p
  return None


def _parse_idx(path: str, raw: bytes, magic: int, what: str) -> np.ndarray:
  """Parses a uint8 IDX file; ``what`` is 'image' or 'label'."""
  ndim = magic & 0xFF
  header_len = 4 + 4 * ndim
  if len(raw) < 4:
    raise DataError(
      f'{path}: truncated IDX file, expected a {header_len}-byte '
      f'header, got {len(raw)} bytes')
  got_magic = int.from_bytes(raw[:4], 'big')
  if got_magic != magic:
    raise DataError(
      f'{path}: bad IDX magic 0x{got_magic:08x}, expected 0x{magic:08x} '
      f'({what}s, uint8, {ndim}-D)')
  if len(raw) < header_len:
    raise DataError(
      f'{path}: truncated IDX file, expected a {header_len}-byte '
      f'header, got {len(raw)} bytes')
  dims = tuple(int(d) for d in np.frombuffer(raw, '>u4', ndim, offset=4))
  expected = int(np.prod(dims, dtype=np.int64))
  got = len(raw) - header_len
  if got < expected:
    raise DataError(
      f'{path}: truncated IDX file, expected {expected} bytes of {what} '
      f'data, got {got}')
  if got > expected:
    raise DataError(
      f'{path}: corrupted IDX file, expected {expected} bytes of {what} '
      f'data, got {got} (trailing bytes)')
  return np.frombuffer(raw, np.uint8, expected, offset=header_len).reshape(
    dims)


def _load_mnist(data_dir):
  expected = ('MNIST IDX files train-images-idx3-ubyte, '
        'train-labels-idx1-ubyte, t10k-images-idx3-ubyte, '
        't10k-labels-idx1-ubyte (plain or .gz)')
  data_dir = _require_dir('mnist', data_dir, expected)
  dirs = [data_dir, os.path.join(data_dir, 'mnist'),
      os.path.join(data_dir, 'MNIST', 'raw')]
  return (_mnist_split(dirs, 'train', expected),
      _mnist_split(dirs, 't10k', expected))


def _mnist_split(dirs, prefix: str, expected: str):
  def locate(kind, dims):
    base = f'{prefix}-{kind}-idx{dims}-ubyte'
    dotted = f'{prefix}-{kind}.idx{dims}-ubyte'
    names = [base, base + '.gz', dotted, dotted + '.gz']
    path = _find_file(dirs, names)
    if path is None:
      raise DataError(
        f'{os.path.join(dirs[0], base)}: missing file (also tried .gz '
        f'and {dotted}); data_dir must hold the {expected}')
    return path

  img_path = locate('images', 3)
  lab_path = locate('labels', 1)
  images = _parse_idx(img_path, _read_bytes(img_path), _IDX_IMAGES_MAGIC,
            'image')
  labels = _parse_idx(lab_path, _read_bytes(lab_path), _IDX_LABELS_MAGIC,
            'label')
  if images.shape[0] != labels.shape[0]:
    raise DataError(
      f'{lab_path}: {labels.shape[0]} labels but {img_path} holds '
      f'{images.shape[0]} images')
  if labels.size and labels.max() > 9:
    raise DataError(
      f'{lab_path}: label {int(labels.max())} out of range 0..9')
  # Pixels stay uint8 here; _gather scales the sampled rows to [0, 1].
  return images[..., None], labels.astype(np.int64)


# CIFAR ----------------------------------------------------------------------


def _cifar_bin_records(path: str, label_bytes: int, label_max: int):
  """Reads a CIFAR binary file: per record label bytes then 3072 pixels."""
  raw = _read_bytes(path)
  rec = label_bytes + _CIFAR_IMAGE_BYTES
  if len(raw) == 0 or len(raw) % rec:
    raise DataError(
      f'{path}: size {len(raw)} bytes is not a positive multiple of the '
      f'{rec}-byte CIFAR record ({label_bytes} label byte(s) + 3072 '
      'pixel bytes)')
  records = np.frombuffer(raw, np.uint8).reshape(-1, rec)
  labels = records[:, label_bytes - 1].astype(np.int64)  # Last label byte.
  if label_bytes > 1:
    coarse = records[:, 0]
    if coarse.max() > 19:
      raise DataError(
        f'{path}: coarse label {int(coarse.max())} out of range 0..19')
  if labels.max() > label_max:
    raise DataError(
      f'{path}: label {int(labels.max())} out of range 0..{label_max}')
  return _cifar_pixels(records[:, label_bytes:]), labels


def _cifar_pixels(flat: np.ndarray) -> np.ndarray:
  """Channel-major uint8 ``[N, 3072]`` -> uint8 ``[N, 32, 32, 3]``."""
  return flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def _numpy_attr(modules: Sequence[str], attr: str):
  for m in modules:
    try:
      return getattr(importlib.import_module(m), attr)
    except (ImportError, AttributeError):
      continue
  raise DataError(f'numpy has no {attr} in {", ".join(modules)}')


_MULTIARRAY = ('numpy._core.multiarray', 'numpy.core.multiarray')
_NUMERIC = ('numpy._core.numeric', 'numpy.core.numeric')

# (module, name) -> resolver. Only what numpy arrays need to be rebuilt.
_PICKLE_ALLOWED: dict = {
  ('numpy.core.multiarray', '_reconstruct'):
    lambda: _numpy_attr(_MULTIARRAY, '_reconstruct'),
  ('numpy._core.multiarray', '_reconstruct'):
    lambda: _numpy_attr(_MULTIARRAY, '_reconstruct'),
  ('numpy.core.numeric', '_frombuffer'):
    lambda: _numpy_attr(_NUMERIC, '_frombuffer'),
  ('numpy._core.numeric', '_frombuffer'):
    lambda: _numpy_attr(_NUMERIC, '_frombuffer'),
  ('numpy', 'ndarray'): lambda: np.ndarray,
  ('numpy', 'dtype'): lambda: np.dtype,
  ('_codecs', 'encode'): lambda: codecs.encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickler that can rebuild numpy arrays and plain containers only."""

  def find_class(self, module, name):
    resolver = _PICKLE_ALLOWED.get((module, name))
    if resolver is None:
      raise DataError(
        f'refusing to unpickle {module}.{name}: only numpy arrays, '
        'lists, dicts, numbers and strings are allowed')
    return resolver()


def _safe_unpickle(path: str):
  raw = _read_bytes(path)
  try:
    return _RestrictedUnpickler(io.BytesIO(raw), encoding='bytes').load()
  except DataError as e:
    raise DataError(f'{path}: {e}') from None
  except Exception as e:  # pylint: disable=broad-except
    raise DataError(
      f'{path}: not a valid CIFAR python pickle ({type(e).__name__}: '
      f'{e})') from None


def _dict_get(d: dict, key: str):
  if key.encode() in d:
    return d[key.encode()]
  return d.get(key)


def _cifar_py_batch(path: str, label_key: str, label_max: int):
  d = _safe_unpickle(path)
  if not isinstance(d, dict):
    raise DataError(f'{path}: expected a pickled dict, got '
            f'{type(d).__name__}')
  data, labels = _dict_get(d, 'data'), _dict_get(d, label_key)
  if data is None or labels is None:
    raise DataError(
      f'{path}: pickled dict lacks the data/{label_key} entries')
  data = np.asarray(data)
  if data.ndim != 2 or data.shape[1] != _CIFAR_IMAGE_BYTES or (
      data.dtype != np.uint8):
    raise DataError(
      f'{path}: expected data as uint8 [N, 3072], got {data.dtype} '
      f'{data.shape}')
  try:
    labels = np.asarray(labels, dtype=np.int64)
  except (TypeError, ValueError, OverflowError):
    raise DataError(f'{path}: {label_key} are not integers') from None
  if labels.shape != (data.shape[0],):
    raise DataError(
      f'{path}: {labels.size} {label_key} for {data.shape[0]} images')
  if labels.size and (labels.min() < 0 or labels.max() > label_max):
    raise DataError(
      f'{path}: {label_key} out of range 0..{label_max}')
  return _cifar_pixels(data), labels


def _concat(parts):
  xs, ys = zip(*parts)
  return np.concatenate(xs), np.concatenate(ys)


def _load_cifar10(data_dir):
  expected = ('CIFAR-10 binary files data_batch_1.bin..data_batch_5.bin '
        'and test_batch.bin (also in cifar-10-batches-bin/), or the '
        'python version data_batch_1..data_batch_5, test_batch in '
        'cifar-10-batches-py/')
  data_dir = _require_dir('cifar10', data_dir, expected)
  train_names = [f'data_batch_{i}' for i in range(1, 6)]
  bin_dirs = [data_dir, os.path.join(data_dir, 'cifar-10-batches-bin')]
  py_dirs = [os.path.join(data_dir, 'cifar-10-batches-py'), data_dir]

  bin_dir = next((d for d in bin_dirs
          if os.path.isfile(os.path.join(d, 'data_batch_1.bin'))),
          None)
  if bin_dir is not None:
    def read(n):
      return _cifar_bin_records(
        _existing(os.path.join(bin_dir, n + '.bin'), expected), 1, 9)
  else:
    py_dir = next((d for d in py_dirs
            if os.path.isfile(os.path.join(d, 'data_batch_1'))),
           None)
    if py_dir is None:
      raise DataError(
        f'{os.path.join(data_dir, "data_batch_1.bin")}: missing file; '
        f'data_dir must hold the {expected}')
    def read(n):
      return _cifar_py_batch(
        _existing(os.path.join(py_dir, n), expected), 'labels', 9)
  train = _concat([read(n) for n in train_names])
  test = _concat([read('test_batch')])
  return train, test


def _load_cifar100(data_dir):
  expected = ('CIFAR-100 binary files train.bin and test.bin (also in '
        'cifar-100-binary/), or the python version train, test in '
        'cifar-100-python/')
  data_dir = _require_dir('cifar100', data_dir, expected)
  bin_dirs = [data_dir, os.path.join(data_dir, 'cifar-100-binary')]
  bin_dir = next((d for d in bin_dirs
          if os.path.isfile(os.path.join(d, 'train.bin'))), None)
  if bin_dir is not None:
    def read(n):
      return _cifar_bin_records(
        _existing(os.path.join(bin_dir, n + '.bin'), expected), 2, 99)
  else:
    py_dir = os.path.join(data_dir, 'cifar-100-python')
    if not os.path.isfile(os.path.join(py_dir, 'train')):
      raise DataError(
        f'{os.path.join(data_dir, "train.bin")}: missing file; '
        f'data_dir must hold the {expected}')
    def read(n):
      return _cifar_py_batch(
        _existing(os.path.join(py_dir, n), expected), 'fine_labels',
        99)
  return _concat([read('train')]), _concat([read('test')])


def _existing(path: str, expected: str) -> str:
  if not os.path.isfile(path):
    raise DataError(
      f'{path}: missing file; data_dir must hold the {expected}')
  return path
