"""What every data module shares: the error type, sample pools and argument checks."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from recon_jax.errors import Error


class DataError(Error, ValueError):
  """One-line, user-facing error naming the offending file or argument.

  Attributes:
    argument: The library's name of the argument at fault (``dataset``,
      ``task``, ``n_per_class``, ``data_dir``, ...), so a binary can name
      its own setting instead; ``None`` when the content of a file is at
      fault (the message then names the file).
  """

  def __init__(self, message: str, argument: Optional[str] = None):
    super().__init__(message)
    self.argument = argument


class Pool(NamedTuple):
  """Samples with class labels (binary classes are +1 / -1).

  ``x`` may hold raw integer pixels (kept compact for large pools); a sample
  is ``x[i].astype(float32) / scale``.
  """

  x: np.ndarray
  y: np.ndarray
  scale: float = 1.0


class Dataset(NamedTuple):
  """A sampled dataset ready for training a model and attacking it.

  A source draws one with its raw labels and a zero mean;
  :func:`recon_jax.data.dataset.load_dataset` finishes it (the training mean subtracted
  if asked, the labels cast as below).

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


def gather(pool: Pool, idx: np.ndarray) -> np.ndarray:
  """Rows ``idx`` of ``pool`` as float32, scaled by ``1 / pool.scale``."""
  x = pool.x[idx].astype(np.float32)
  if pool.scale != 1.0:
    x = x / np.float32(pool.scale)
  return x


def readonly(a: np.ndarray) -> np.ndarray:
  """Marks ``a`` read-only (cached arrays are shared between callers) and returns it."""
  a.flags.writeable = False
  return a


def check_count(value, argument: str, allow_zero: bool = True) -> Optional[int]:
  """Validates a per-class sample count: ``None`` (the default) or an integer >= 0 (>= 1).

  Raises:
    DataError: Naming ``argument`` if ``value`` is not such a count.
  """
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise DataError(f"{argument} must be an integer, got {value!r}", argument)
  if value < 0 or (value == 0 and not allow_zero):
    bound = ">= 0" if allow_zero else ">= 1"
    raise DataError(f"{argument} must be {bound}, got {value}", argument)
  return int(value)
