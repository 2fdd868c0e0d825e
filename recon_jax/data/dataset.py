"""The sampled :class:`Dataset`, :func:`load_dataset` and :func:`fingerprint`."""

from __future__ import annotations

import hashlib
from typing import NamedTuple, Optional

import numpy as np

from recon_jax.data import embedded, files, sampling
from recon_jax.data.common import DataError, Splits, check_count, gather

# Adding a dataset: its loader (embedded.py or files.py) and a row in each table below.
# The shape of one input, as the networks see it.
INPUT_SHAPES = {
  "digits": (8, 8, 1),
  "lfw": (25, 25, 1),
  "toy2d": (2,),
  "mnist": (28, 28, 1),
  "cifar10": (32, 32, 3),
  "cifar100": (32, 32, 3),
}
DATASETS = tuple(INPUT_SHAPES)
# The datasets with a binary task (cifar100 has no binary split of its classes).
BINARY = tuple(d for d in DATASETS if d != "cifar100")
TASKS = ("binary", "multiclass")

_MULTICLASS_CLASSES = {
  "digits": 10,
  "mnist": 10,
  "cifar10": 10,
  "cifar100": 100,
  "lfw": 2,
  "toy2d": 2,
}


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
      Add it back (``x + ds.mean``) to display images.
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


def num_classes(name: str, task: str) -> int:
  """Number of classes of dataset ``name`` for ``task`` (2 for binary)."""
  return 2 if task == "binary" else _MULTICLASS_CLASSES[name]


def load_dataset(
  name: str,
  *,
  task: str = "binary",
  n_per_class: int = 10,
  n_test_per_class: Optional[int] = None,
  n_part_per_class: Optional[int] = None,
  seed: int = 0,
  subtract_mean: bool = False,
  data_dir=None,
  toy_n: int = 20,
) -> Dataset:
  """Loads a dataset and draws balanced, disjoint train/test/partition sets.

  Args:
    name: One of :data:`DATASETS` (case and surrounding blanks ignored).
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
      missing, truncated or malformed data files. Its ``argument`` names
      the argument at fault (``dataset``, ``task``, ``n_per_class``,
      ``data_dir``, ...), if any.
  """
  if not isinstance(name, str) or name.strip().lower() not in DATASETS:
    raise DataError(f"dataset {name!r} is unknown; valid: {', '.join(DATASETS)}", "dataset")
  name = name.strip().lower()
  if task not in TASKS:
    raise DataError(f"task {task!r} is unknown; valid: {', '.join(TASKS)}", "task")
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
    raise DataError(f"seed must be a non-negative integer, got {seed!r}", "seed")
  rng = np.random.default_rng(int(seed))

  if name == "toy2d":
    n_test = embedded.toy_split_size(n_test_per_class, "n_test_per_class")
    n_part = embedded.toy_split_size(n_part_per_class, "n_part_per_class")
    splits = embedded.toy2d(task=task, toy_n=toy_n, n_test=n_test, n_part=n_part, rng=rng)
    return _finish(splits, name, task, subtract_mean, (-np.inf, np.inf))

  n_per_class = check_count(n_per_class, "n_per_class", allow_zero=False)
  n_test_per_class = check_count(n_test_per_class, "n_test_per_class")
  n_part_per_class = check_count(n_part_per_class, "n_part_per_class")
  if name not in BINARY and task == "binary":
    raise DataError(
      f"task 'binary' is not available for dataset {name} (it has no binary "
      "labelling); use task='multiclass'",
      "task",
    )

  classes = sampling.class_ids(task, num_classes(name, task))
  if name in embedded.EMBEDDED:
    train = part = test = embedded.embedded_pool(name, task)
    tr, pa, te = sampling.split_single_pool(
      train.y, classes, n_per_class, n_part_per_class, n_test_per_class, rng, name
    )
  else:
    train, test = files.file_pools(name, task, data_dir)
    part = train
    tr, pa = sampling.split_train_pool(train.y, classes, n_per_class, n_part_per_class, rng, name)
    te = sampling.split_test_pool(test.y, classes, n_test_per_class, rng, name)
  splits = Splits(
    x_train=gather(train, tr),
    y_train=train.y[tr],
    x_test=gather(test, te),
    y_test=test.y[te],
    x_part=gather(part, pa),
    y_part=part.y[pa],
    train_idx=tr.astype(np.int64),
  )
  return _finish(splits, name, task, subtract_mean, (0.0, 1.0))


def _finish(s: Splits, name: str, task: str, subtract_mean: bool, value_range) -> Dataset:
  """Subtracts the training mean if asked and casts labels for ``task``."""
  x_train, x_test, x_part = s.x_train, s.x_test, s.x_part
  mean = np.zeros(x_train.shape[1:], np.float32)
  if subtract_mean:
    mean = x_train.astype(np.float64).mean(0).astype(np.float32)
    x_train, x_part, x_test = x_train - mean, x_part - mean, x_test - mean
  return Dataset(
    x_train=x_train,
    y_train=sampling.labels_out(s.y_train, task),
    x_test=x_test,
    y_test=sampling.labels_out(s.y_test, task),
    x_part=x_part,
    y_part=sampling.labels_out(s.y_part, task),
    mean=mean,
    train_idx=np.asarray(s.train_idx, np.int64),
    name=name,
    task=task,
    num_classes=num_classes(name, task),
    value_range=value_range,
  )


_FINGERPRINT_TAG = b"recon_jax.data.fingerprint/v1\n"


def fingerprint(ds, length: int = 16) -> str:
  """A short hex digest of the training samples of ``ds``, e.g. to key caches.

  The digest is sha256 over ``x_train`` and ``y_train``: for each, its
  dtype (byte order normalised to little-endian), its shape and its values
  in C order. It depends on nothing else: not on file names or folders, the
  test and partition sets, ``ds.name`` or the seed. So two datasets have the
  same fingerprint exactly when they train on the same samples, with the
  same labels, in the same order (up to a ``16**-length`` chance), even if
  they were read from identically named files in different folders.

  Args:
    ds: A :class:`Dataset` (or anything with ``x_train`` and ``y_train``
      arrays, numpy or JAX).
    length: Hex digits to keep, 1 to 64 (default 16, i.e. 64 bits).

  Returns:
    ``length`` lowercase hex digits.

  Raises:
    DataError: If ``length`` is out of range or ``ds`` has no numeric
      ``x_train`` / ``y_train``.
  """
  if (
    isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not (1 <= length <= 64)
  ):
    raise DataError(f"length must be an integer in [1, 64], got {length!r}", "length")
  h = hashlib.sha256(_FINGERPRINT_TAG)
  for field in ("x_train", "y_train"):
    if not hasattr(ds, field):
      raise DataError(f"ds must be a Dataset, got {type(ds).__name__} without {field}", "ds")
    a = np.asarray(getattr(ds, field))
    if a.dtype.hasobject or a.dtype.fields is not None:
      raise DataError(f"ds.{field} must be a numeric array, got dtype {a.dtype}", "ds")
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    h.update(f"{field} {a.dtype.str} {a.shape}\n".encode())
    h.update(a.reshape(-1).view(np.uint8))
  return h.hexdigest()[: int(length)]
