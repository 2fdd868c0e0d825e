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


class Splits(NamedTuple):
  """Train, test and partition samples before mean subtraction.

  Labels are integer class labels in the task's encoding: +1 / -1 for
  ``task='binary'``, class ids for ``task='multiclass'``.
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  x_part: np.ndarray
  y_part: np.ndarray
  train_idx: np.ndarray


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
