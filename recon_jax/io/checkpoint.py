"""Checkpoints: parameters + architecture + provenance in one msgpack file, no pickle.

A checkpoint is a flax msgpack blob of ``{'params': <pytree of arrays>,
'meta': <JSON string>}``, and optionally ``'init'``: the parameters training
started from (theta_0, same structure as ``params``).  ``meta`` holds the architecture (what
:func:`recon_jax.victims.models.build_model` needs), the data provenance (dataset,
task, seed, training indices, mean subtraction) and training metrics.
Writes are atomic: a temp file in the same folder, fsync, then rename.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import Any

from flax import serialization
import jax
import numpy as np

from recon_jax.errors import Error

FORMAT = "recon_jax.checkpoint.v1"
# New files are readable by group and others, as open() makes them (minus the umask).
FILE_MODE = 0o644


class CheckpointError(Error, ValueError):
  """A checkpoint could not be read or does not match what was asked for."""


def _umask() -> int:
  """The process's umask, read without changing it where Linux allows."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but brief)
  os.umask(mask)
  return mask


def _new_file_mode(path: str) -> int:
  """The mode of an existing ``path`` (a rewrite keeps it), else FILE_MODE minus the umask."""
  try:
    return stat.S_IMODE(os.stat(path).st_mode)
  except OSError:
    return FILE_MODE & ~_umask()


def atomic_write_bytes(path: str, data: bytes) -> None:
  """Writes ``data`` to ``path`` so a crash leaves the old or the new file, never half.

  The file gets mode 0644 minus the umask (a temp file from mkstemp is 0600),
  or keeps its mode when it already exists.
  """
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fchmod(f.fileno(), _new_file_mode(path))
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def save(path: str, params: Any, meta: dict, init: Any = None) -> None:
  """Saves ``params`` (a flax variable dict), JSON-able ``meta`` and, when given, ``init``
  (theta_0, the parameters training started from) atomically."""
  blob = {
    "format": FORMAT,
    "params": jax.tree_util.tree_map(np.asarray, serialization.to_state_dict(params)),
    "meta": json.dumps(meta, sort_keys=True),
  }
  if init is not None:
    blob["init"] = jax.tree_util.tree_map(np.asarray, serialization.to_state_dict(init))
  atomic_write_bytes(path, serialization.msgpack_serialize(blob))


def read_blob(data: bytes, path: str, fmt: str, kind: str) -> tuple[dict, dict]:
  """Decodes a ``{'format', 'meta', ...}`` msgpack blob; returns ``(blob, meta)``.

  Raises CheckpointError naming ``path`` when the bytes are not msgpack, are
  truncated, carry another format tag or lack readable JSON metadata.
  """
  try:
    blob = serialization.msgpack_restore(data)
  except Exception as e:  # msgpack raises several types on garbage/truncation
    raise CheckpointError(
      f"{path}: not a recon_jax {kind} or truncated ({type(e).__name__})."
    ) from None
  if not isinstance(blob, dict) or blob.get("format") != fmt:
    raise CheckpointError(f"{path}: not a recon_jax {kind} (format tag missing).")
  try:
    meta = json.loads(blob["meta"])
  except (KeyError, TypeError, ValueError):
    raise CheckpointError(f"{path}: {kind} metadata is missing or corrupt.") from None
  return blob, meta


def read(path: str) -> tuple[dict, dict, Any]:
  """``(params, meta, init)`` of a checkpoint, read once: ``init`` is the theta_0 stored
  with it (:func:`save`'s ``init``; None where it has none), not yet checked (see
  :func:`check_init`).  Raises CheckpointError with a one-line reason."""
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: checkpoint file not found.")
  with open(path, "rb") as f:
    data = f.read()
  blob, meta = read_blob(data, path, FORMAT, "checkpoint")
  params = blob.get("params")
  leaves = jax.tree_util.tree_leaves(params)
  if not leaves:
    raise CheckpointError(f"{path}: checkpoint holds no parameters.")
  check_values(params, path)
  return params, meta, blob.get("init")


def load(path: str) -> tuple[dict, dict]:
  """Loads ``(params, meta)``; raises CheckpointError with a one-line reason."""
  params, meta, _ = read(path)
  return params, meta


def check_init(init: Any, template: Any, path: str) -> Any:
  """``init`` (theta_0 stored with the checkpoint ``path``, or None) checked: the structure
  and shapes of ``template`` (the checkpoint's parameters; None: not compared) and finite
  values (CheckpointError naming the file otherwise)."""
  if init is None:
    return None
  where = f"{path} (its initial parameters)"
  if template is not None:
    check_matches(init, template, where)
  check_values(init, where, allow_zero=True)
  return init


def load_init(path: str, template: Any = None) -> Any:
  """theta_0 stored with a checkpoint (:func:`save`'s ``init``), or None where it has none,
  checked by :func:`check_init` against ``template`` (the checkpoint's parameters)."""
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: checkpoint file not found.")
  with open(path, "rb") as f:
    blob, _ = read_blob(f.read(), path, FORMAT, "checkpoint")
  return check_init(blob.get("init"), template, path)


def check_values(params: Any, path: str = "checkpoint", *, allow_zero: bool = False) -> None:
  """Raises CheckpointError unless every leaf is a real, finite array and not all are zero.

  A complex, text or object leaf cannot be a recon_jax parameter; an all-zero
  model has no gradient and a zero norm, so every attack and diagnostic on it
  would divide by zero.
  """
  nonzero = False
  for leaf_path, leaf in jax.tree_util.tree_leaves_with_path(params):
    name = jax.tree_util.keystr(leaf_path)
    try:
      arr = np.asarray(leaf)
    except (TypeError, ValueError):  # a ragged list or an object numpy cannot hold
      arr = np.asarray(None, dtype=object)
    if arr.dtype.kind == "c":
      raise CheckpointError(
        f"{path}: parameter {name} is complex ({arr.dtype}); parameters must be real numbers."
      )
    if arr.dtype.kind not in "biuf":
      raise CheckpointError(
        f"{path}: parameter {name} is not numeric (holds "
        f"{type(leaf).__name__} of dtype {arr.dtype})."
      )
    if not np.all(np.isfinite(arr)):
      raise CheckpointError(f"{path}: parameter {name} holds NaN/Inf.")
    nonzero = nonzero or bool(np.any(arr != 0))
  if not nonzero and not allow_zero:
    raise CheckpointError(
      f"{path}: every parameter is zero (an empty or untrained model); there is nothing to attack."
    )


def check_matches(params: Any, template: Any, path: str = "checkpoint") -> None:
  """Raises CheckpointError naming the first leaf whose name or shape differs from ``template``."""
  got = {
    jax.tree_util.keystr(p): np.shape(v) for p, v in jax.tree_util.tree_leaves_with_path(params)
  }
  want = {
    jax.tree_util.keystr(p): np.shape(v) for p, v in jax.tree_util.tree_leaves_with_path(template)
  }
  missing = sorted(set(want) - set(got))
  extra = sorted(set(got) - set(want))
  if missing or extra:
    raise CheckpointError(
      f"{path}: architecture mismatch: missing {missing[:3]}, unexpected {extra[:3]}."
    )
  for name, shape in want.items():
    if got[name] != shape:
      raise CheckpointError(
        f"{path}: architecture mismatch at {name}: checkpoint has shape {got[name]}, "
        f"the requested architecture needs {shape}."
      )
