"""A restricted unpickler for the CIFAR python batches: numpy arrays and plain containers only.

The official python versions of CIFAR-10/100 are pickled dicts. ``pickle.load``
on a file from elsewhere can run arbitrary code; :func:`load` only resolves
the few globals that rebuilding numpy arrays needs and refuses everything
else.
"""

from __future__ import annotations

import codecs
import importlib
import pickle
from typing import Sequence

import numpy as np

from recon_jax.data.common import DataError

_MULTIARRAY = ("numpy._core.multiarray", "numpy.core.multiarray")
_NUMERIC = ("numpy._core.numeric", "numpy.core.numeric")


def _numpy_attr(modules: Sequence[str], attr: str):
  for m in modules:
    try:
      return getattr(importlib.import_module(m), attr)
    except (ImportError, AttributeError):
      continue
  raise DataError(f"numpy has no {attr} in {', '.join(modules)}")


# (module, name) -> resolver. Only what numpy arrays need to be rebuilt; pickles
# written by numpy < 2 (such as the official CIFAR release) name numpy.core.
_ALLOWED: dict = {
  ("numpy.core.multiarray", "_reconstruct"): lambda: _numpy_attr(_MULTIARRAY, "_reconstruct"),
  ("numpy._core.multiarray", "_reconstruct"): lambda: _numpy_attr(_MULTIARRAY, "_reconstruct"),
  ("numpy.core.numeric", "_frombuffer"): lambda: _numpy_attr(_NUMERIC, "_frombuffer"),
  ("numpy._core.numeric", "_frombuffer"): lambda: _numpy_attr(_NUMERIC, "_frombuffer"),
  ("numpy", "ndarray"): lambda: np.ndarray,
  ("numpy", "dtype"): lambda: np.dtype,
  ("_codecs", "encode"): lambda: codecs.encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickler that can rebuild numpy arrays and plain containers only."""

  def find_class(self, module, name):
    resolver = _ALLOWED.get((module, name))
    if resolver is None:
      raise DataError(
        f"refusing to unpickle {module}.{name}: only numpy arrays, lists, dicts, numbers and "
        "strings are allowed"
      )
    return resolver()


def load(path: str, what: str = "CIFAR python pickle"):
  """Unpickles ``path`` (byte strings stay bytes) with the restricted unpickler.

  Raises:
    DataError: Naming ``path`` if it cannot be read, is not a pickle or
      refers to anything but numpy arrays and plain containers.
  """
  try:
    with open(path, "rb") as f:
      return _RestrictedUnpickler(f, encoding="bytes").load()
  except DataError as e:
    raise DataError(f"{path}: {e}") from None
  except OSError as e:
    raise DataError(f"{path}: cannot read file ({e})") from None
  except Exception as e:  # pylint: disable=broad-except
    raise DataError(f"{path}: not a valid {what} ({type(e).__name__}: {e})") from None
