"""Resumable runs: a full run state saved atomically as msgpack, no pickle.

A resume file is a flax msgpack blob of ``{'format', 'state', 'meta'}``:
``state`` is the state dict (:func:`flax.serialization.to_state_dict`) of any
pytree of arrays -- e.g. ``{'run': RestartState [R] (attack state incl. the
optimiser state, loss, divergence flags, step), 'keys': [R] PRNG keys,
'hparams': {name: [R]}}`` -- and ``meta`` a JSON string (config, chunk
history, ...).  Loading restores the pytree against a *template* of the same
structure (so NamedTuples such as ``RestartState`` or optax states come back as
themselves) after checking every leaf's name, shape and dtype; any mismatch,
truncation or foreign file is a :class:`~recon_jax.io.checkpoint.CheckpointError`
with a one-line message.

Writes reuse :func:`recon_jax.io.checkpoint.atomic_write_bytes` (temp file in the
same folder, fsync, rename), so a run killed while saving leaves either the
previous or the new state file, never half of one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Tuple

from absl import logging
from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.io.checkpoint import CheckpointError, atomic_write_bytes, read_blob

FORMAT = "recon_jax.resume.v1"


def _host(tree: Any) -> Any:
  """State dict of ``tree`` with every leaf a host numpy copy (typed keys unwrapped)."""

  def to_np(a):
    if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a = jax.random.key_data(a)
    return np.array(a, copy=True)  # a copy: the device buffer may be donated next chunk

  return jax.tree_util.tree_map(to_np, serialization.to_state_dict(tree))


def to_bytes(tree: Any, meta: dict) -> bytes:
  blob = {
    "format": FORMAT,
    "state": _host(tree),
    "meta": json.dumps(meta, sort_keys=True, allow_nan=False),
  }
  return serialization.msgpack_serialize(blob)


def save(path: str, tree: Any, meta: dict) -> None:
  """Saves a pytree of arrays and a JSON-able ``meta`` dict to ``path`` atomically."""
  blob = to_bytes(tree, meta)
  atomic_write_bytes(path, blob)


def _signature(state_dict: Any) -> dict:
  return {
    jax.tree_util.keystr(p): (
      tuple(np.shape(v)),
      np.dtype(getattr(v, "dtype", None) or np.asarray(v).dtype).name,
    )
    for p, v in jax.tree_util.tree_leaves_with_path(state_dict)
  }


def from_bytes(data: bytes, template: Any, path: str = "state file") -> Tuple[Any, dict]:
  blob, meta = read_blob(data, path, FORMAT, "state file")
  got = _signature(blob.get("state"))
  want = _signature(_host_template(template))
  missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
  if missing or extra:
    raise CheckpointError(
      f"{path}: state does not match this run: missing {missing[:3]}, unexpected {extra[:3]}."
    )
  for name, (shape, dtype) in want.items():
    if got[name] != (shape, dtype):
      raise CheckpointError(
        f"{path}: state does not match this run at {name}: file has "
        f"{got[name][1]}{list(got[name][0])}, the run needs "
        f"{dtype}{list(shape)}."
      )
  try:
    tree = serialization.from_state_dict(template, blob["state"])
  except (KeyError, ValueError, TypeError) as e:
    raise CheckpointError(f"{path}: state does not match this run ({e}).") from None
  return tree, meta


def _host_template(template: Any) -> Any:
  """State dict of the template without copying (shapes/dtypes only are read)."""

  def sig(a):
    if hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a = jax.random.key_data(a)
    return jax.ShapeDtypeStruct(np.shape(a), np.dtype(a.dtype))

  return jax.tree_util.tree_map(sig, serialization.to_state_dict(template))


def load(path: str, template: Any) -> Tuple[Any, dict]:
  """Loads ``(tree, meta)`` saved by :func:`save`; the tree is restored against ``template``.

  ``template`` may hold arrays or ``jax.ShapeDtypeStruct`` leaves (e.g. from
  :func:`jax.eval_shape`).  Leaves come back as numpy arrays.

  Raises:
    CheckpointError: file missing, truncated, not a state file, or a leaf
      whose name, shape or dtype differs from the template (one-line message).
  """
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: state file not found.")
  with open(path, "rb") as f:
    data = f.read()
  return from_bytes(data, template, path)


def nonfinite_leaves(tree: Any) -> list:
  """Names of float leaves holding NaN/Inf (a diverged restart's *loss* may be inf)."""
  out = []
  for p, v in jax.tree_util.tree_leaves_with_path(serialization.to_state_dict(tree)):
    v = np.asarray(v)
    if np.issubdtype(v.dtype, np.inexact) and not np.all(np.isfinite(v)):
      out.append(jax.tree_util.keystr(p))
  return out


def run_tree(state: Any, keys, hparams: dict) -> dict:
  """What a resumable sweep saves: the batched loop state, its PRNG keys and hyperparameters."""
  return {"run": state, "keys": keys, "hparams": {k: jnp.asarray(v) for k, v in hparams.items()}}


def chunk_record(rec: dict) -> dict:
  """JSON form of one chunk's record: the step and every per-restart metric (None: non-finite)."""
  out = {"step": int(rec["step"])}
  for k, v in rec.items():
    if k in ("step", "time_s"):
      continue
    v = np.asarray(v)
    if v.dtype == bool:
      out[k] = [bool(b) for b in v.ravel()]
    else:
      out[k] = [float(f) if np.isfinite(f) else None for f in v.astype(np.float64).ravel()]
  return out


class Saver:
  """Saves a running sweep to ``path`` every ``every`` chunks (and at its end).

  The file (:func:`save`) holds the batched state, the PRNG keys,
  the first stage's hyperparameters and ``meta`` plus the JSON records of
  every chunk so far (``chunks``), so a resumed run reports the whole run.
  :func:`restore` reads it back.
  """

  def __init__(
    self, path: str, every: int = 1, meta: Optional[dict] = None, chunks: Optional[list] = None
  ):
    if every < 0:
      raise ConfigError(f"every must be >= 0 (0: never), got {every}.")
    self.path, self.every, self.meta = path, every, dict(meta or {})
    self.chunks = list(chunks or [])

  def save(self, state, keys, hparams) -> None:
    tree = run_tree(state, keys, hparams)
    save(self.path, tree, {**self.meta, "chunks": self.chunks})


def restore(path: str, template: Any, keys, hparams: dict):
  """``(state, chunk records, meta)`` of a sweep saved by :class:`Saver`, validated against
  ``template`` (:func:`run_tree` of the state the sweep's own init gives, e.g. under
  ``jax.eval_shape``): a state of another size, architecture or dtype is refused; so are
  other PRNG keys or hyperparameters (the resumed run would not be the run that was
  started) and NaN/Inf in the attack state.  Raises CheckpointError with a one-line reason.
  """
  tree, meta = load(path, template)
  if not np.array_equal(np.asarray(tree["keys"]), np.asarray(keys)) or any(
    not np.array_equal(np.asarray(tree["hparams"][k]), np.asarray(v)) for k, v in hparams.items()
  ):
    raise CheckpointError(
      f"{path} was written with other PRNG keys or hyperparameters than this configuration gives."
    )
  bad = nonfinite_leaves(tree["run"].inner)
  if bad:
    raise CheckpointError(f"{path} holds NaN/Inf in {bad[0]}.")
  state = jax.tree_util.tree_map(lambda t, a: jnp.asarray(a, t.dtype), template["run"], tree["run"])
  logging.info("resuming from %s at step %d", path, int(np.max(np.asarray(state.step))))
  return state, list(meta.get("chunks", [])), meta
