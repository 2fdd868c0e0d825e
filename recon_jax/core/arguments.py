"""Checks of the arguments of the library's public functions (``run_attack``, ``make_x_init``,
``evaluate_candidates``, ``identifiability``, ``random_search``, ``make_target``): a wrong
shape, length, count or value is a :class:`~recon_jax.errors.ConfigError` naming the
argument, raised before any JAX or flax code sees it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np

from recon_jax.core.rules import is_int, is_number
from recon_jax.errors import ConfigError


def count(name: str, value, low: int = 1) -> int:
  """``value`` as an int, refused unless an integer >= ``low``."""
  if not is_int(value) or value < low:
    raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}.", name)
  return int(value)


def group(name: str, value, cls):
  """``value``, an options group of type ``cls`` (None: ``cls()``, its defaults); refused
  unless a ``cls`` (the string of a former keyword argument, say)."""
  if value is None:
    return cls()
  if not isinstance(value, cls):
    raise ConfigError(f"{name} must be a {cls.__module__}.{cls.__qualname__}, got {value!r}.", name)
  return value


def number(name: str, value, low: Optional[float] = None, high: Optional[float] = None) -> float:
  """``value`` as a float, refused unless a finite number within [low, high]."""
  if not is_number(value) or not np.isfinite(float(value)):
    raise ConfigError(f"{name} must be a finite number, got {value!r}.", name)
  if (low is not None and value < low) or (high is not None and value > high):
    raise ConfigError(f"{name} must be in [{low}, {high}], got {value!r}.", name)
  return float(value)


def array(
  name: str,
  value,
  *,
  ndim: Optional[int] = None,
  min_ndim: Optional[int] = None,
  shape: Optional[Sequence[Optional[int]]] = None,
  finite: bool = True,
  nonempty: bool = True,
) -> np.ndarray:
  """``value`` as a numeric numpy array, refused (naming ``name``) unless it has ``ndim``
  (or at least ``min_ndim``) axes, the ``shape`` given (None: any size on that axis),
  at least one element, and only finite numbers (with ``finite``)."""
  try:
    a = np.asarray(value)
  except (TypeError, ValueError) as e:
    raise ConfigError(f"{name} must be an array of numbers ({e}).", name) from None
  if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
    raise ConfigError(f"{name} must be an array of numbers, got {a.dtype} values.", name)
  if ndim is not None and a.ndim != ndim:
    raise ConfigError(f"{name} must have {ndim} axes, got shape {a.shape}.", name)
  if min_ndim is not None and a.ndim < min_ndim:
    raise ConfigError(f"{name} must have at least {min_ndim} axes, got shape {a.shape}.", name)
  if shape is not None:
    want = tuple(shape)
    if len(want) > a.ndim or any(w is not None and w != h for w, h in zip(want, a.shape)):
      more = "" if ndim == len(want) else ", ..."
      show = "[" + ", ".join("*" if w is None else str(w) for w in want) + more + "]"
      raise ConfigError(f"{name} must have shape {show}, got {a.shape}.", name)
  if nonempty and a.size == 0:
    raise ConfigError(f"{name} is empty (shape {a.shape}).", name)
  if finite and np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
    raise ConfigError(f"{name} holds NaN or infinite values.", name)
  return a


def shape_of(name: str, value) -> tuple:
  """``value`` as a shape (a sequence of integers >= 1)."""
  if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
    raise ConfigError(f"{name} must be a shape, e.g. (8, 8, 1), got {value!r}.", name)
  out = tuple(value)
  if not out or not all(is_int(d) and d >= 1 for d in out):
    raise ConfigError(f"{name} must be a shape of integers >= 1, got {value!r}.", name)
  return tuple(int(d) for d in out)


def finite_tree(name: str, tree) -> None:
  """Refuses a pytree (parameters) that is empty or holds NaN or infinite values."""
  leaves = jax.tree_util.tree_leaves(tree)
  if not leaves:
    raise ConfigError(f"{name} holds no arrays.", name)
  for leaf in leaves:
    a = np.asarray(leaf)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
      raise ConfigError(f"{name} must hold arrays of numbers, got {a.dtype}.", name)
    if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
      raise ConfigError(f"{name} holds NaN or infinite values.", name)
