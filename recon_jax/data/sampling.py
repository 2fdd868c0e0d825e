"""Class-balanced, seeded sampling of disjoint train, partition and test sets.

Every function draws one random permutation per class (in output class
order) from the generator it is given, so results are deterministic given the
seed. Within a class the selected indices are sorted ascending; classes are
concatenated in output order (:func:`class_ids`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from recon_jax.data.common import DataError

FILE_TEST_CAP = 1000  # Default test samples per class for file datasets.


def class_ids(task: str, num_classes: int) -> np.ndarray:
  """Classes in output order: +1 then -1 for binary, ascending ids otherwise."""
  if task == "binary":
    return np.array([1, -1])
  return np.arange(num_classes)


def labels_out(y: np.ndarray, task: str) -> np.ndarray:
  """Integer class labels as returned: float32 for binary, int32 for multiclass."""
  if task == "binary":
    return y.astype(np.float32)
  return y.astype(np.int32)


def _per_class_perms(y: np.ndarray, classes: np.ndarray, rng: np.random.Generator) -> list:
  return [rng.permutation(np.flatnonzero(y == c)) for c in classes]


def _too_many(argument: str, wanted: int, available: int, name: str, what: str) -> DataError:
  return DataError(
    f"{argument}={wanted} is more than the {available} samples available per class {what} of "
    f"dataset {name}",
    argument,
  )


def _resolve_part(n_part: Optional[int], n_train: int, remaining: int, name: str) -> int:
  if n_part is None:
    return min(n_train, remaining)
  if n_part > remaining:
    raise _too_many("n_part_per_class", n_part, remaining, name, "after drawing the training set")
  return n_part


def _take(perms: list, start: int, count: int) -> np.ndarray:
  """Concatenates slice ``[start, start + count)`` of each class, sorted within the class."""
  parts = [np.sort(p[start : start + count]) for p in perms]
  return np.concatenate(parts).astype(np.int64)


def split_single_pool(
  y: np.ndarray,
  classes: np.ndarray,
  n_train: int,
  n_part: Optional[int],
  n_test: Optional[int],
  rng: np.random.Generator,
  name: str,
):
  """Disjoint train, partition and test indices from one pool.

  Per class, one permutation is cut into consecutive slices: train, then
  partition, then test. ``n_part=None`` means ``n_train`` capped to what is
  left; ``n_test=None`` means everything left (balanced: the smallest class
  decides).

  Returns:
    ``(train_idx, part_idx, test_idx)``, int64 indices into ``y``.

  Raises:
    DataError: Naming the count argument that asks for more than there is.
  """
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_train > available:
    raise _too_many("n_per_class", n_train, available, name, "(smallest class)")
  n_part = _resolve_part(n_part, n_train, available - n_train, name)
  remaining = available - n_train - n_part
  if n_test is None:
    n_test = remaining
  elif n_test > remaining:
    raise _too_many(
      "n_test_per_class", n_test, remaining, name, "after drawing the training and partition sets"
    )
  return (
    _take(perms, 0, n_train),
    _take(perms, n_train, n_part),
    _take(perms, n_train + n_part, n_test),
  )


def split_train_pool(
  y: np.ndarray,
  classes: np.ndarray,
  n_train: int,
  n_part: Optional[int],
  rng: np.random.Generator,
  name: str,
):
  """Disjoint train and partition indices from an official training pool.

  Returns:
    ``(train_idx, part_idx)``, int64 indices into ``y``.
  """
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_train > available:
    raise _too_many(
      "n_per_class", n_train, available, name, "in the training pool (smallest class)"
    )
  n_part = _resolve_part(n_part, n_train, available - n_train, name)
  return _take(perms, 0, n_train), _take(perms, n_train, n_part)


def split_test_pool(
  y: np.ndarray, classes: np.ndarray, n_test: Optional[int], rng: np.random.Generator, name: str
) -> np.ndarray:
  """Test indices from an official test pool; ``n_test=None``: up to :data:`FILE_TEST_CAP`."""
  perms = _per_class_perms(y, classes, rng)
  available = min(len(p) for p in perms)
  if n_test is None:
    n_test = min(available, FILE_TEST_CAP)
  elif n_test > available:
    raise _too_many(
      "n_test_per_class", n_test, available, name, "in the test pool (smallest class)"
    )
  return _take(perms, 0, n_test)
